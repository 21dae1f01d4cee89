//! Stored tables. Owns four redb tables: `tables` (records keyed by tenant, project and
//! lower-cased name), `table_schemas` (Arrow IPC schema by table id), `chunks` (LZ4 Arrow IPC
//! record batches of up to [`CHUNK_ROWS`](codec::CHUNK_ROWS) rows keyed by (table id, chunk
//! id)) and `chunk_order` ((table id, position) → chunk id, the table's row order). Chunk ids are never reused: a
//! rewritten chunk gets a new id at the same position, in the same transaction, so a chunk id
//! always names the same bytes. Every change of the bytes these tables and the index entries
//! hold is counted to the table's tenant through `storage`, in the transaction that makes it.
//!
//! One file per concept, none using another round a circle (lowest first): the chunk codec
//! (`codec`), conforming rows (`types`), the table record (`record`), reading (`read`), staged
//! rows (`staged`), the writer (`writer`), discarding a landed step (`discard`), index builds
//! (`index_build`), landings (`row_landing`), rewrites (`rewrite`) and conflicts (`conflicts`).

mod codec;
mod conflicts;
mod discard;
mod index_build;
mod read;
mod record;
mod rewrite;
mod row_landing;
mod staged;
mod types;
mod writer;

#[cfg(test)]
pub(crate) use self::codec::CHUNK_ROWS;
pub(crate) use self::codec::{decode_schema, encode_schema};
pub(crate) use self::conflicts::{resolve_conflicts, Resolved};
pub(crate) use self::discard::discard_landed_step;
pub(crate) use self::index_build::{drop_index, IndexBuild, IndexStart, Publish};
pub(crate) use self::read::{Chunks, ReadTables};
pub(crate) use self::record::{
    content_bytes, create, drop_all, drop_table, get, init, key_indexes, list, outgrows_a_step,
    owners, record, records, schema, stored_bytes, TableRecord,
};
pub(crate) use self::rewrite::{
    apply_rewrite, plan_rewrite, plan_rewrite_probing, ChunkProbe, Retired, Rewrite,
};
pub(crate) use self::row_landing::RowLanding;
pub(crate) use self::staged::StagedRows;
pub use self::types::sql_type_name;
pub(crate) use self::writer::{append_staged, TableWriter};
