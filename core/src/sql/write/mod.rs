//! Writes to stored tables: the write job every statement's rows are staged in (`job`), DML
//! and table DDL (`dml`), constraints (`constraints`), `ON CONFLICT` (`upsert`).

pub(crate) mod constraints;
pub(crate) mod dml;
pub(crate) mod job;
pub(crate) mod upsert;
