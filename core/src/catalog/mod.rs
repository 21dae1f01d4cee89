//! The catalog: the records of each kind of object the engine keeps (projects, tables, agents,
//! views, knowledge bases, datasources, minds, models, callbacks, users and their logins, login
//! tokens, quota counters, stored bytes) and the rules about one object (its name, its fields, its limits).
//! Each module reads and writes only its own redb tables (listed in `store::schema`) and uses
//! only the store and the foundation below it, plus `namespace` for the names every kind
//! shares and `constraints` for what a table's record declares about its rows; `tables` keeps
//! its rows' index entries through `indexes`, and `tables` and `kb_index` count the bytes they
//! store through `storage`.
//!
//! `rules` is the one module here that may use the others: what a change to one object means
//! for the rest (dropping a project drops its tables, agents and models; a datasource a mind
//! reads cannot be removed). No other catalog module uses it. `setup` opens the catalog of a
//! store (its tables made, what a stopped process left put right), above `rules`.

pub(crate) mod agents;
pub(crate) mod auth;
pub(crate) mod callbacks;
pub(crate) mod challenge;
pub(crate) mod constraints;
pub(crate) mod datasources;
pub(crate) mod indexes;
pub(crate) mod jobs;
pub(crate) mod kb_index;
pub(crate) mod knowledge_bases;
pub(crate) mod landing;
pub(crate) mod minds;
pub(crate) mod ml_engines;
pub(crate) mod models;
pub(crate) mod namespace;
pub(crate) mod projects;
pub(crate) mod queries;
pub(crate) mod quotas;
pub(crate) mod rules;
pub(crate) mod settings;
pub(crate) mod setup;
pub(crate) mod storage;
pub(crate) mod tables;
pub(crate) mod users;
pub(crate) mod variables;
pub(crate) mod views;
