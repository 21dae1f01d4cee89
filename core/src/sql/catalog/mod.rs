//! DataFusion's view of a tenant at one read snapshot: the snapshot (`snapshot`), the catalog
//! and schema providers over it (`tenant`), stored tables (`stored_table`),
//! `information_schema`, the tables the features add (`features`), which filters an index
//! answers (`index_scan`), and how result columns are named (`names`).
//! Nothing here knows the runner or the features by name.

pub(crate) mod features;
pub(crate) mod index_scan;
pub(crate) mod information_schema;
pub(crate) mod names;
pub(crate) mod snapshot;
pub(crate) mod stored_table;
pub(crate) mod tenant;
