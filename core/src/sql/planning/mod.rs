//! Planning a statement: the pooled DataFusion sessions (`session`), the plan cache, and our
//! own analyzer, optimizer and physical rules, each in its own file: subqueries as joins
//! (`unnest`), functions sized before they run (`bounded`), coercions MindsDB's users expect
//! (`coerce`), cancellable nested-loop joins (`join_stop`), key-only sorts (`sort_keys`),
//! short-text GROUP BY (`view_groups`), output in insertion order (`order`), each tenant's
//! share of the spill space (`spill_shares`), and the `@@` variables and functions MySQL
//! clients read (`system_variables`, `client_functions`).

pub(crate) mod bounded;
pub(crate) mod client_functions;
pub(crate) mod coerce;
pub(crate) mod join_stop;
pub(crate) mod order;
pub(crate) mod plan_cache;
pub(crate) mod session;
pub(crate) mod sort_keys;
pub(crate) mod spill_shares;
pub(crate) mod system_variables;
pub(crate) mod unnest;
pub(crate) mod view_groups;
