//! Knowledge bases kept in PostgreSQL with pgvector (`USING storage = pg.table`, or every new
//! one on the server of `knowledge_bases.storage_url`): their chunks, metadata and vectors are
//! rows of one remote table, searched there; this file keeps their record and the chunk
//! table's record (its schema, never rows), so the SQL surface is the same as for knowledge
//! bases held here.
//!
//! The table holds `id, chunk_id (primary key), chunk_content, metadata`, the metadata columns
//! (typed as they are here), `embedding vector(d)` under an HNSW index (cosine), and
//! `content_tsv`, a generated `tsvector` under a GIN index for the keyword side. The insert
//! that makes the table builds those two indexes last, in the same transaction, over the rows
//! it wrote: in bulk, several times faster than pgvector's row-by-row insertion. A search is
//! one statement: `ORDER BY embedding <=> question LIMIT n` (the index, its `hnsw.ef_search`
//! raised to the rows asked for); under metadata conditions the widest walk, and every
//! distance computed in the same statement when fewer rows than asked pass them (pgvector
//! 0.6 filters after its index walk, which would lose rows); keywords are scored by BM25 written
//! in SQL (see [`bm25`]); metadata conditions PostgreSQL computes alike go into the same
//! statement, others are checked on the rows as they stream back. Every name the statements
//! use of their own starts `ml_` and is qualified, and such names are refused as metadata
//! columns, so a user's column never stands in for one.

use std::collections::HashSet;
use std::sync::Arc;

use datafusion::arrow::array::{
    new_null_array, Array, ArrayRef, AsArray, Float64Array, RecordBatch, StringArray,
};
use datafusion::arrow::datatypes::{DataType, Field, Float64Type, Schema, SchemaRef};
use datafusion::logical_expr::Expr;
use futures::{StreamExt, TryStreamExt};
use tokio_postgres::types::ToSql;
use tokio_postgres::Client;

use crate::catalog::knowledge_bases::{
    KnowledgeBase, CHUNK_CONTENT, CHUNK_ID, ID, LEADING, METADATA,
};
use crate::error::{Error, Result};
use crate::services::connectors::postgres::{self, query_error, quote, Column, Kind, TextParam};
use crate::services::connectors::remote::Remote;
use crate::services::connectors::{table as remote_table, Connection, Net};
use crate::sql::catalog::snapshot::Snapshot;

/// The column of each chunk's vector.
const EMBEDDING: &str = "embedding";
/// The generated column of each chunk's words.
const CONTENT_TSV: &str = "content_tsv";
/// Words of a question the keyword side looks for, at most (as many as a statement needs).
const MAX_TERMS: usize = 64;
/// Document ids per DELETE or lookup statement.
const IDS_PER_STATEMENT: usize = 1000;
/// pgvector's largest `hnsw.ef_search`: more rows than this are ranked without the index.
const MAX_EF_SEARCH: usize = 1000;
/// Columns a table may have (PostgreSQL's limit), read at most when checking one.
const MAX_COLUMNS: usize = 1600;
/// Bytes of a PostgreSQL name; a longer one is cut, and would name another column.
const MAX_NAME_BYTES: usize = 63;
/// Dimensions pgvector's HNSW index takes at most.
const MAX_INDEXED_DIMENSIONS: usize = 2000;

/// A knowledge base's PostgreSQL table and the server it is on.
#[derive(Debug, Clone)]
pub(crate) struct PgStore {
    pub(crate) settings: postgres::Settings,
    pub(crate) table: String,
    /// The knowledge base's name, for messages.
    kb: String,
}

impl PgStore {
    /// Where `kb` keeps its chunks, when in PostgreSQL: its datasource's server (as `snapshot`
    /// holds it) or `storage_url`'s; `None` when in this file.
    pub(crate) fn of(
        kb: &KnowledgeBase,
        snapshot: &Snapshot,
        net: &Net,
        storage_url: &str,
    ) -> Result<Option<PgStore>> {
        let Some(storage) = &kb.storage else {
            return Ok(None);
        };
        let settings = match &storage.database {
            Some(name) => {
                let source = snapshot.datasource(name)?.ok_or_else(|| {
                    Error::invalid(format!(
                        "Knowledge base '{}' keeps its chunks in datasource '{name}', which does not exist",
                        kb.name
                    ))
                })?;
                match Connection::of(&source, net)? {
                    Connection::Server(Remote::Postgres(settings)) => settings,
                    _ => {
                        return Err(Error::invalid(format!(
                            "Knowledge base storage '{name}.{}': datasource '{name}' is not PostgreSQL (pgvector keeps the vectors)",
                            storage.table
                        )))
                    }
                }
            }
            None if storage_url.is_empty() => {
                return Err(Error::invalid(format!(
                    "Knowledge base '{}' keeps its chunks on the server of knowledge_bases.storage_url, which is not set",
                    kb.name
                )))
            }
            None => postgres::storage_settings(storage_url, net)?,
        };
        Ok(Some(PgStore {
            settings,
            table: storage.table.clone(),
            kb: kb.name.clone(),
        }))
    }

    /// The table's name, quoted and qualified by its schema.
    fn qualified(&self) -> String {
        self.settings.qualified(&self.table)
    }

    /// The server as a remote, for scans and drops.
    pub(crate) fn remote(&self) -> Remote {
        Remote::Postgres(self.settings.clone())
    }

    /// Drops the table (a knowledge base's own, when it is dropped).
    pub(crate) async fn drop_table(&self) -> Result<()> {
        remote_table::drop_table(&self.remote(), &self.table, true).await
    }

    /// The columns a chunk table of `stored` columns (its node last, never sent) is read as.
    pub(crate) fn columns(stored: &Schema) -> Vec<Column> {
        let last = stored.fields().len().saturating_sub(1);
        stored.fields()[..last]
            .iter()
            .map(|field| Column {
                name: field.name().clone(),
                kind: Kind::for_result(field.data_type()).unwrap_or(Kind::AsText),
                nullable: true,
                unsigned: false,
            })
            .collect()
    }

    /// `SELECT <chunk columns> FROM table [WHERE …]` for a scan without a question, with the
    /// conditions of `filters` PostgreSQL computes alike (the others are checked here).
    pub(crate) fn scan_sql(&self, columns: &[Column], filters: &[Expr]) -> String {
        let remote = self.remote();
        let pushed: Vec<String> = filters
            .iter()
            .filter_map(|f| remote.filter(f, columns))
            .collect();
        let mut sql = format!(
            "SELECT {} FROM {}",
            select_list(columns, None),
            self.qualified()
        );
        if !pushed.is_empty() {
            sql.push_str(" WHERE ");
            sql.push_str(&pushed.join(" AND "));
        }
        sql
    }

    /// The metadata columns of a table there already when a knowledge base is made over it
    /// (see `write::chunk_schema`), so that its rows are searched before anything is
    /// inserted; `None` when there is no such table. They are `declared` (which it must
    /// have), else every column but a knowledge base's own; a table without those is refused
    /// by name.
    pub(crate) async fn existing_metadata(
        &self,
        declared: &[String],
    ) -> Result<Option<Vec<Field>>> {
        let Some(columns) = postgres::table_columns(&self.settings, &self.table).await? else {
            return Ok(None);
        };
        let own = [
            ID,
            CHUNK_ID,
            CHUNK_CONTENT,
            METADATA,
            EMBEDDING,
            CONTENT_TSV,
        ];
        for name in own {
            if !columns.iter().any(|c| c.name == name) {
                return Err(self.missing_column(name));
            }
        }
        let extra: Vec<&Column> = columns
            .iter()
            .filter(|c| !own.contains(&c.name.as_str()))
            .collect();
        let metadata: Vec<&Column> = match declared.is_empty() {
            true => extra,
            false => declared
                .iter()
                .map(|name| {
                    extra
                        .iter()
                        .find(|c| c.name.eq_ignore_ascii_case(name))
                        .copied()
                        .ok_or_else(|| self.missing_column(name))
                })
                .collect::<Result<_>>()?,
        };
        for column in &metadata {
            let name = column.name.as_str();
            // Searches read a metadata column as its Arrow type says (`columns`): a type
            // read as one that compares otherwise (case-blind collations, char padding,
            // json, uuid, unbounded numerics as doubles) would have its conditions sent.
            let read_as = Kind::for_result(&column.kind.data_type()).unwrap_or(Kind::AsText);
            if read_as.compares_alike() && read_as != column.kind {
                return Err(Error::invalid(format!(
                    "Column '{name}' of PostgreSQL table {} cannot be a metadata column of knowledge base '{}': its type compares otherwise in PostgreSQL than as it is read here (a collation that ignores case, char padding, json, uuid, numeric without a precision); name the metadata columns with metadata_columns",
                    self.qualified(),
                    self.kb
                )));
            }
            if name.starts_with("ml_") {
                return Err(Error::invalid(format!(
                    "Column '{name}' of PostgreSQL table {} cannot be a metadata column of knowledge base '{}' (names starting ml_ are its searches' own); name the metadata columns with metadata_columns",
                    self.qualified(),
                    self.kb
                )));
            }
        }
        Ok(Some(
            metadata
                .iter()
                .map(|c| Field::new(&c.name, c.kind.data_type(), true))
                .collect(),
        ))
    }

    /// The table lacks column `name` a knowledge base's table has.
    fn missing_column(&self, name: &str) -> Error {
        Error::invalid(format!(
            "Knowledge base '{}': PostgreSQL table {} has no column '{name}' (a knowledge base's table holds id, chunk_id, chunk_content, metadata, its metadata columns, embedding and content_tsv)",
            self.kb,
            self.qualified()
        ))
    }

    /// Removes every chunk of the documents `ids`, in one remote transaction.
    pub(crate) async fn delete(&self, ids: &HashSet<String>) -> Result<()> {
        // Never makes the table, so no index parameters.
        let mut writer = PgWriter::open(self.clone(), (0, 0)).await?;
        let ids: Vec<String> = ids.iter().cloned().collect();
        writer.clear(&ids).await?;
        writer.commit().await
    }

    /// A PostgreSQL error, named after the knowledge base.
    fn error(&self, e: &tokio_postgres::Error) -> Error {
        let error = query_error(e);
        Error::new(
            error.kind(),
            format!(
                "Knowledge base '{}' (PostgreSQL table {}): {}",
                self.kb,
                self.qualified(),
                error.message()
            ),
        )
    }
}

/// `columns` as select-list items, cast so they are read as their kinds say, qualified by
/// `alias` when given.
fn select_list(columns: &[Column], alias: Option<&str>) -> String {
    columns
        .iter()
        .map(|c| {
            let name = match alias {
                Some(alias) => format!("{alias}.{}", quote(&c.name)),
                None => quote(&c.name),
            };
            format!("{name}::{} AS {}", c.kind.type_name(), quote(&c.name))
        })
        .collect::<Vec<_>>()
        .join(", ")
}

/// `values` as a PostgreSQL `text[]` literal.
fn text_array(values: &[String]) -> String {
    let quoted: Vec<String> = values
        .iter()
        .map(|v| format!("\"{}\"", v.replace('\\', "\\\\").replace('"', "\\\"")))
        .collect();
    format!("{{{}}}", quoted.join(","))
}

/// A vector as pgvector reads it: `[0.1,0.2,…]`.
pub(crate) fn vector_text(vector: &[f32]) -> String {
    let parts: Vec<String> = vector.iter().map(|x| x.to_string()).collect();
    format!("[{}]", parts.join(","))
}

/// An insert's remote transaction: the table made if missing, the inserted documents' old
/// chunks deleted, the new ones written; nothing shows until [`PgWriter::commit`], and a
/// writer dropped before it (an error, a cancel) closes its connection, which rolls it back.
pub(crate) struct PgWriter {
    store: PgStore,
    client: Client,
    /// Whether the table is known to exist with the columns written.
    ready: bool,
    /// The INSERT for a full statement of rows, once prepared.
    full: Option<tokio_postgres::Statement>,
    /// Whether the transaction was committed.
    committed: bool,
    /// HNSW's M and efConstruction for an index this writer makes.
    hnsw: (usize, usize),
    /// The HNSW and GIN indexes of a table this writer made, built just before the commit:
    /// over rows already there, an index is built in bulk, many times faster than row by row.
    indexes: Vec<String>,
}

impl Drop for PgWriter {
    /// A writer given up (an error, a cancel) cancels the statement it may be waiting for:
    /// closing the connection alone rolls back only once that statement has run its course.
    fn drop(&mut self) {
        if !self.committed {
            self.store.settings.cancel(self.client.cancel_token());
        }
    }
}

impl PgWriter {
    /// Opens a connection to `store`'s server and starts the transaction; `hnsw` is M and
    /// efConstruction for an index it makes.
    pub(crate) async fn open(store: PgStore, hnsw: (usize, usize)) -> Result<PgWriter> {
        let client = store.settings.connect_for_writes().await?;
        client
            .batch_execute("BEGIN")
            .await
            .map_err(|e| store.error(&e))?;
        Ok(PgWriter {
            store,
            client,
            ready: false,
            full: None,
            committed: false,
            hnsw,
            indexes: Vec::new(),
        })
    }

    /// Which of `ids` the table holds documents of.
    pub(crate) async fn stored_ids(&mut self, ids: &[String]) -> Result<HashSet<String>> {
        let mut found = HashSet::new();
        if !self.exists().await? {
            return Ok(found);
        }
        let sql = format!(
            "SELECT DISTINCT {id} FROM {} WHERE {id} = ANY($1)",
            self.store.qualified(),
            id = quote(ID)
        );
        for part in ids.chunks(IDS_PER_STATEMENT) {
            let list = text_array(part);
            let rows = self
                .client
                .query_raw(&sql, [TextParam(Some(&list))])
                .await
                .map_err(|e| self.store.error(&e))?;
            // At most one row per id asked: a server answering more is not read further.
            let rows: Vec<tokio_postgres::Row> = rows
                .take(part.len())
                .try_collect()
                .await
                .map_err(|e| self.store.error(&e))?;
            found.extend(rows.iter().map(|row| row.get::<_, String>(0)));
        }
        Ok(found)
    }

    /// Deletes every chunk of the documents `ids`.
    pub(crate) async fn clear(&mut self, ids: &[String]) -> Result<()> {
        if ids.is_empty() || !self.exists().await? {
            return Ok(());
        }
        let sql = format!(
            "DELETE FROM {} WHERE {} = ANY($1)",
            self.store.qualified(),
            quote(ID)
        );
        for part in ids.chunks(IDS_PER_STATEMENT) {
            let list = text_array(part);
            self.client
                .execute(&sql, &[&TextParam(Some(&list)) as &(dyn ToSql + Sync)])
                .await
                .map_err(|e| self.store.error(&e))?;
        }
        Ok(())
    }

    /// Whether the table exists (made by this writer, or before), checking that one there is
    /// a knowledge base's: a DELETE must never remove rows of some other table.
    async fn exists(&mut self) -> Result<bool> {
        if self.ready {
            return Ok(true);
        }
        let found = self.columns().await?;
        if found.is_empty() {
            return Ok(false);
        }
        self.check_layout(
            &found,
            &[ID, CHUNK_ID, CHUNK_CONTENT, EMBEDDING, CONTENT_TSV],
        )?;
        Ok(true)
    }

    /// The table's columns and their types as PostgreSQL writes them; none when it is missing.
    async fn columns(&self) -> Result<Vec<(String, String)>> {
        let store = &self.store;
        let rows = self
            .client
            .query_raw(
                "SELECT a.attname::text, pg_catalog.format_type(a.atttypid, a.atttypmod) \
                 FROM pg_catalog.pg_attribute a \
                 JOIN pg_catalog.pg_class c ON c.oid = a.attrelid \
                 JOIN pg_catalog.pg_namespace n ON n.oid = c.relnamespace \
                 WHERE n.nspname = $1 AND c.relname = $2 AND a.attnum > 0 AND NOT a.attisdropped \
                 ORDER BY a.attnum",
                [&store.settings.schema, &store.table],
            )
            .await
            .map_err(|e| store.error(&e))?;
        // A server may answer more rows than a table has columns: no more are read.
        let rows: Vec<tokio_postgres::Row> = rows
            .take(MAX_COLUMNS)
            .try_collect()
            .await
            .map_err(|e| store.error(&e))?;
        Ok(rows.iter().map(|row| (row.get(0), row.get(1))).collect())
    }

    /// Checks that the table's columns `found` include `needed`, its vectors pgvector's.
    fn check_layout(&self, found: &[(String, String)], needed: &[&str]) -> Result<()> {
        for name in needed {
            if !found.iter().any(|(column, _)| column == name) {
                return Err(self.store.missing_column(name));
            }
        }
        Ok(())
    }

    /// Makes the table for chunks of `schema` (the chunk table's, node last) and vectors of
    /// `dimensions`, or checks the one there holds them.
    async fn prepare(&mut self, schema: &Schema, dimensions: usize) -> Result<()> {
        if self.ready {
            return Ok(());
        }
        let store = &self.store;
        let last = schema.fields().len() - 1;
        let chunk_columns = &schema.fields()[..last];
        for field in &chunk_columns[LEADING..] {
            let name = field.name();
            if name == EMBEDDING || name == CONTENT_TSV || name.starts_with("ml_") {
                return Err(Error::invalid(format!(
                    "Column '{name}' cannot be a metadata column of knowledge base '{}', kept in PostgreSQL: {EMBEDDING}, {CONTENT_TSV} and names starting ml_ are the table's and its searches' own",
                    store.kb
                )));
            }
            if name.len() > MAX_NAME_BYTES {
                return Err(Error::invalid(format!(
                    "Metadata column '{name}' of knowledge base '{}' is longer than PostgreSQL's {MAX_NAME_BYTES} bytes for a name",
                    store.kb
                )));
            }
        }
        let has_vector = self
            .client
            .query_opt(
                "SELECT 1 FROM pg_catalog.pg_type WHERE typname = 'vector'",
                &[],
            )
            .await
            .map_err(|e| store.error(&e))?
            .is_some();
        if !has_vector {
            self.client
                .batch_execute("CREATE EXTENSION IF NOT EXISTS vector")
                .await
                .map_err(|e| {
                    Error::invalid(format!(
                        "Knowledge base '{}' keeps its vectors in PostgreSQL with pgvector, which server {}:{} does not have: {}",
                        store.kb,
                        store.settings.host,
                        store.settings.port,
                        query_error(&e).message()
                    ))
                })?;
        }
        let found = self.columns().await?;
        let vector_type = format!("vector({dimensions})");
        if found.is_empty() {
            let mut definitions = vec![
                format!("{} text NOT NULL", quote(ID)),
                format!("{} text PRIMARY KEY", quote(CHUNK_ID)),
                format!("{} text NOT NULL", quote(CHUNK_CONTENT)),
                format!("{} text", quote(METADATA)),
            ];
            for field in &chunk_columns[LEADING..] {
                definitions.push(format!(
                    "{} {}",
                    quote(field.name()),
                    remote_table::remote_type(field.data_type())?
                ));
            }
            definitions.push(format!("{} {vector_type} NOT NULL", quote(EMBEDDING)));
            definitions.push(format!(
                "{} tsvector GENERATED ALWAYS AS (to_tsvector('simple', {})) STORED",
                quote(CONTENT_TSV),
                quote(CHUNK_CONTENT)
            ));
            let table = store.qualified();
            // Indexes unnamed: PostgreSQL picks free names (a table's name and a suffix may
            // pass its 63 bytes, or name another index). pgvector indexes vectors of up to
            // 2,000 dimensions; longer ones are searched by computing every distance.
            self.client
                .execute(
                    format!("CREATE TABLE {table} ({})", definitions.join(", ")).as_str(),
                    &[],
                )
                .await
                .map_err(|e| store.error(&e))?;
            let mut statements = Vec::new();
            if dimensions <= MAX_INDEXED_DIMENSIONS {
                // `[knowledge_bases]`'s M and efConstruction, in pgvector's ranges.
                let (m, ef_construction) = self.hnsw;
                let m = m.clamp(2, 100);
                statements.push(format!(
                    "CREATE INDEX ON {table} USING hnsw ({} vector_cosine_ops) WITH (m = {m}, ef_construction = {})",
                    quote(EMBEDDING),
                    ef_construction.clamp(2 * m, 1000)
                ));
            }
            statements.push(format!(
                "CREATE INDEX ON {table} USING gin ({})",
                quote(CONTENT_TSV)
            ));
            // The index on id serves each batch's DELETE of its documents' old chunks, so it
            // is made now; the others are built last, over the rows written.
            self.client
                .execute(
                    format!("CREATE INDEX ON {table} ({})", quote(ID)).as_str(),
                    &[],
                )
                .await
                .map_err(|e| store.error(&e))?;
            self.indexes = statements;
        } else {
            let needed: Vec<&str> = chunk_columns
                .iter()
                .map(|f| f.name().as_str())
                .chain([EMBEDDING, CONTENT_TSV])
                .collect();
            self.check_layout(&found, &needed)?;
            let embedding_type = found
                .iter()
                .find(|(column, _)| column == EMBEDDING)
                .map(|(_, t)| t.as_str());
            if embedding_type != Some(vector_type.as_str()) {
                return Err(Error::invalid(format!(
                    "Knowledge base '{}': column embedding of PostgreSQL table {} is {}, not the {vector_type} its embedding model answers",
                    store.kb,
                    store.qualified(),
                    embedding_type.unwrap_or("?")
                )));
            }
        }
        self.ready = true;
        Ok(())
    }

    /// Writes chunk rows (`rows`: the chunk table's columns, node last, which is not sent)
    /// with their vectors; a chunk id stored already is replaced.
    pub(crate) async fn write(&mut self, rows: &RecordBatch, vectors: &[Vec<f32>]) -> Result<()> {
        let dimensions = vectors.first().map_or(0, Vec::len);
        self.prepare(&rows.schema(), dimensions).await?;
        let last = rows.num_columns() - 1;
        let schema = rows.schema();
        let mut names: Vec<String> = schema.fields()[..last]
            .iter()
            .map(|f| quote(f.name()))
            .collect();
        names.push(quote(EMBEDDING));
        let mut texts: Vec<StringArray> = rows.columns()[..last]
            .iter()
            .map(|c| remote_table::text_column(c.as_ref()))
            .collect::<Result<_>>()?;
        texts.push(StringArray::from_iter_values(
            vectors.iter().map(|v| vector_text(v)),
        ));
        let updates: Vec<String> = names
            .iter()
            .filter(|n| **n != quote(CHUNK_ID))
            .map(|n| format!("{n} = EXCLUDED.{n}"))
            .collect();
        let head = format!(
            "INSERT INTO {} ({}) VALUES ",
            self.store.qualified(),
            names.join(", ")
        );
        let tail = format!(
            " ON CONFLICT ({}) DO UPDATE SET {}",
            quote(CHUNK_ID),
            updates.join(", ")
        );
        let store = self.store.clone();
        remote_table::insert_texts(&self.client, &mut self.full, (&head, &tail), &texts, |e| {
            store.error(e)
        })
        .await?;
        Ok(())
    }

    /// Builds the indexes of a table this writer made and commits the transaction: the
    /// chunks written show at once, indexed.
    pub(crate) async fn commit(mut self) -> Result<()> {
        for statement in std::mem::take(&mut self.indexes) {
            self.client
                .execute(statement.as_str(), &[])
                .await
                .map_err(|e| self.store.error(&e))?;
        }
        self.client
            .batch_execute("COMMIT")
            .await
            .map_err(|e| self.store.error(&e))?;
        self.committed = true;
        Ok(())
    }
}

/// What a search of a PostgreSQL table asks (see `search`).
pub(crate) struct PgSearch<'a> {
    pub(crate) store: &'a PgStore,
    /// The chunk table's columns, read back.
    pub(crate) columns: &'a [Column],
    /// The question's vector; `None` searches by keywords alone.
    pub(crate) query: Option<&'a [f32]>,
    pub(crate) question: &'a str,
    /// Vectors (or, by keywords alone, texts) whose nearer chunks are left out.
    pub(crate) excluded_vectors: &'a [Vec<f32>],
    pub(crate) excluded_texts: &'a [String],
    pub(crate) alpha: f64,
    /// Row conditions selecting the chunks ranked.
    pub(crate) filters: &'a [Expr],
    /// Whether every row is ranked (conditions checked here or on scores may drop any).
    pub(crate) exhaustive: bool,
    /// Candidates each side brings (when not exhaustive).
    pub(crate) pool: usize,
    /// `hnsw.ef_search` when the index is walked.
    pub(crate) ef_search: usize,
}

/// Rows read back from a search: the chunk table's columns then `ml_distance`.
pub(crate) struct Found {
    pub(crate) settings: postgres::Settings,
    pub(crate) sql: String,
    pub(crate) params: Arc<[Option<String>]>,
    pub(crate) schema: SchemaRef,
    pub(crate) kinds: Vec<Kind>,
    /// Whether every row condition went into the statement.
    pub(crate) all_pushed: bool,
}

impl PgSearch<'_> {
    /// The statement ranking the chunks best first, with its parameters.
    pub(crate) fn statement(&self) -> Found {
        let remote = self.store.remote();
        let pushed: Vec<String> = self
            .filters
            .iter()
            .filter_map(|f| remote.filter(f, self.columns))
            .collect();
        let all_pushed = pushed.len() == self.filters.len();
        // Rows a condition checked here drops must be made up for: every row is ranked.
        let exhaustive = self.exhaustive || !all_pushed;
        // bounded: the question, its exclusions (at most MAX_QUESTIONS) and nothing else
        let mut params: Vec<Option<String>> = Vec::new();
        let mut param = |value: String| {
            params.push(Some(value));
            format!("${}", params.len())
        };
        let embedding = quote(EMBEDDING);
        let tsv = quote(CONTENT_TSV);
        let mut conditions = pushed;
        let vector = self.query.map(|q| param(vector_text(q)));
        if let Some(vector) = &vector {
            for excluded in self.excluded_vectors {
                let other = param(vector_text(excluded));
                conditions.push(format!(
                    "NOT ({embedding} <=> {other}::vector < {embedding} <=> {vector}::vector)"
                ));
            }
        }
        let question = (self.alpha < 1.0).then(|| param(self.question.to_string()));
        if let (None, Some(asked)) = (&vector, &question) {
            // By keywords alone, an excluded question's chunks are those it matches better,
            // by PostgreSQL's own ranking.
            for excluded in self.excluded_texts {
                let other = tsquery(&param(excluded.clone()));
                conditions.push(format!(
                    "NOT (ts_rank_cd({tsv}, {other}) > ts_rank_cd({tsv}, {}))",
                    tsquery(asked)
                ));
            }
        }
        let filtered = !conditions.is_empty() || !all_pushed;
        let table = self.store.qualified();
        // The rows searched, as `t`: the conditions apply in a scope of their own, so a
        // metadata column named like a column of the statement's is never mistaken for it.
        let rows = match conditions.is_empty() {
            true => format!("{table} t"),
            false => format!(
                "(SELECT * FROM {table} WHERE {}) t",
                conditions.join(" AND ")
            ),
        };
        // The index is walked for at most pgvector's largest ef_search rows; under conditions,
        // guarded (see `nearest`), as pgvector 0.6 filters only what its walk found.
        let walk = match (exhaustive, self.pool > MAX_EF_SEARCH, filtered) {
            (true, _, _) => Walk::Exact(None),
            (false, true, _) => Walk::Exact(Some(self.pool)),
            (false, false, false) => Walk::Index(self.pool),
            (false, false, true) => Walk::Guarded(self.pool),
        };
        let limit = match exhaustive {
            true => String::new(),
            false => format!(" LIMIT {}", self.pool),
        };
        let chunk_id = quote(CHUNK_ID);
        // The distance by its position: a metadata column may share its name.
        let distance = self.columns.len() + 1;
        let keywords = question
            .as_ref()
            .map(|question| bm25(question, &table, &rows, &limit));
        let sql = match (&vector, &keywords) {
            (Some(vector), None) => {
                let items = select_list(self.columns, Some("t"));
                nearest(&items, &rows, vector, walk)
            }
            (None, Some(keywords)) => format!(
                "WITH {keywords} \
                 SELECT {}, (CASE WHEN max(k.ml_score) OVER () > 0 THEN 1 - k.ml_score / max(k.ml_score) OVER () ELSE 1 END)::float8 AS ml_distance \
                 FROM k JOIN {table} t ON t.{chunk_id} = k.{chunk_id} ORDER BY {distance}, t.{chunk_id}",
                select_list(self.columns, Some("t")),
            ),
            (Some(vector), Some(keywords)) => {
                let alpha = self.alpha;
                let near = nearest(&format!("t.{chunk_id}"), &rows, vector, walk);
                format!(
                    "WITH {keywords}, \
                     v AS ({near}), \
                     b AS (SELECT max(k.ml_score) AS ml_best FROM k), \
                     c AS (SELECT v.{chunk_id} FROM v UNION SELECT k.{chunk_id} FROM k) \
                     SELECT {items}, ({alpha}::float8 * (t.{embedding} <=> {vector}::vector) + (1 - {alpha}::float8) * \
                       CASE WHEN b.ml_best > 0 THEN 1 - coalesce(k.ml_score, 0) / b.ml_best ELSE 1 END)::float8 AS ml_distance \
                     FROM c JOIN {table} t ON t.{chunk_id} = c.{chunk_id} LEFT JOIN k ON k.{chunk_id} = c.{chunk_id} CROSS JOIN b \
                     ORDER BY {distance}, t.{chunk_id}",
                    items = select_list(self.columns, Some("t")),
                )
            }
            (None, None) => format!(
                "SELECT {}, 1::float8 AS ml_distance FROM {rows} ORDER BY t.{chunk_id}{limit}",
                select_list(self.columns, Some("t")),
            ),
        };
        let settings = match walk {
            Walk::Exact(_) => self.store.settings.clone(),
            Walk::Index(_) => self
                .store
                .settings
                .clone()
                .with_ef_search(self.ef_search.max(self.pool)),
            // The widest walk, so that conditions passing one row in a hundred still leave
            // enough of it and the exact ranking is seldom needed.
            Walk::Guarded(_) => self.store.settings.clone().with_ef_search(MAX_EF_SEARCH),
        };
        let mut fields: Vec<Field> = self
            .columns
            .iter()
            .map(|c| Field::new(&c.name, c.kind.data_type(), true))
            .collect();
        fields.push(Field::new("ml_distance", DataType::Float64, true));
        let mut kinds: Vec<Kind> = self.columns.iter().map(|c| c.kind).collect();
        kinds.push(Kind::Float64);
        Found {
            settings,
            sql,
            params: params.into(),
            schema: Arc::new(Schema::new(fields)),
            kinds,
            all_pushed,
        }
    }
}

/// How the rows nearest a question's vector are found, and how many.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Walk {
    /// Every distance computed: the first n rows (more than the index walks) or every row.
    Exact(Option<usize>),
    /// The first n rows the HNSW index walk finds.
    Index(usize),
    /// The first n rows the index walk finds passing the conditions, or, when fewer than n
    /// of what it found pass them, the first n by every distance computed: one statement,
    /// the exact ranking run only then (its gate a constant PostgreSQL checks before reading
    /// a row).
    Guarded(usize),
}

/// `SELECT {items}, ml_distance` of the rows of `rows` (the rows searched, as `t`) nearest
/// the vector in placeholder `vector`, best first, found as `walk` says.
fn nearest(items: &str, rows: &str, vector: &str, walk: Walk) -> String {
    let embedding = quote(EMBEDDING);
    let chunk_id = quote(CHUNK_ID);
    let distance = format!("(t.{embedding} <=> {vector}::vector)::float8");
    // Exactly ranked rows tie by chunk id, so the ranking is the same every time; names
    // starting ml_ are never a metadata column's. The distances are computed in a subquery
    // PostgreSQL keeps apart (OFFSET 0), so no index can serve the order: PostgreSQL 17 may
    // walk an index for the first key of an ORDER BY and sort the rest, and a walk would
    // lose rows here.
    let exact = |gate: &str, limit: Option<usize>| {
        let limit = limit.map(|n| format!(" LIMIT {n}")).unwrap_or_default();
        format!(
            "SELECT * FROM (SELECT {items}, {distance} AS ml_distance FROM {rows}{gate} OFFSET 0) ml_e \
             ORDER BY ml_e.ml_distance, ml_e.{chunk_id}{limit}"
        )
    };
    let walked = |n: usize| {
        format!(
            "SELECT {items}, {distance} AS ml_distance FROM {rows} ORDER BY t.{embedding} <=> {vector}::vector LIMIT {n}"
        )
    };
    match walk {
        Walk::Exact(limit) => exact("", limit),
        Walk::Index(n) => walked(n),
        Walk::Guarded(n) => format!(
            "WITH ml_walk AS ({}) \
             SELECT * FROM ml_walk WHERE (SELECT count(*) FROM ml_walk) = {n} \
             UNION ALL ({}) ORDER BY ml_distance, {chunk_id}",
            walked(n),
            exact(
                &format!(" WHERE (SELECT count(*) FROM ml_walk) < {n}"),
                Some(n)
            )
        ),
    }
}

/// The common table expressions that score the chunks of `rows` (the rows searched, as `t`)
/// holding any word of the question in placeholder `question` by BM25 (k1 = 1.2, b = 0.75,
/// as the keyword index here scores): `k (chunk_id, ml_score)`, best first, `limit` of them.
/// A word's chunk count comes from the GIN index, the chunk count from the table; the mean
/// chunk length from its first 1,000 chunks, an estimate that spares reading every row.
fn bm25(question: &str, table: &str, rows: &str, limit: &str) -> String {
    let tsv = quote(CONTENT_TSV);
    let chunk_id = quote(CHUNK_ID);
    let (k1, b) = (crate::bm25::K1, crate::bm25::B);
    // A word's occurrences are its positions in the tsvector.
    let length =
        format!("(SELECT sum(coalesce(array_length(u.positions, 1), 1)) FROM unnest({tsv}) u)");
    format!(
        "ml_terms AS (SELECT DISTINCT l AS ml_term FROM unnest(tsvector_to_array(to_tsvector('simple', {question}::text))) l \
           WHERE strpos(l, E'\\\\') = 0 LIMIT {MAX_TERMS}), \
         ml_query AS (SELECT to_tsquery('simple', coalesce((SELECT string_agg(quote_literal(ml_terms.ml_term), ' | ') FROM ml_terms), '')) AS ml_q), \
         ml_stats AS (SELECT (SELECT count(*) FROM {table})::float8 AS ml_n, \
           greatest(coalesce((SELECT avg(s.ml_len) FROM (SELECT {length} AS ml_len FROM {table} LIMIT 1000) s), 1), 1)::float8 AS ml_avglen), \
         ml_idf AS (SELECT d.ml_term, ln(1 + (ml_stats.ml_n - d.ml_df + 0.5) / (d.ml_df + 0.5)) AS ml_w FROM \
           (SELECT ml_terms.ml_term, (SELECT count(*) FROM {table} s WHERE s.{tsv} @@ to_tsquery('simple', quote_literal(ml_terms.ml_term)))::float8 AS ml_df FROM ml_terms) d, ml_stats), \
         k AS (SELECT t.{chunk_id}, (SELECT sum(ml_idf.ml_w * x.ml_tf * {k1_1} / (x.ml_tf + {k1} * (1 - {b} + {b} * ml_len.ml_dl / ml_stats.ml_avglen))) \
             FROM (SELECT u.lexeme, coalesce(array_length(u.positions, 1), 1)::float8 AS ml_tf FROM unnest(t.{tsv}) u) x \
             JOIN ml_idf ON ml_idf.ml_term = x.lexeme)::float8 AS ml_score \
           FROM {rows} CROSS JOIN ml_query CROSS JOIN ml_stats \
           CROSS JOIN LATERAL (SELECT {length_t}::float8 AS ml_dl) ml_len \
           WHERE t.{tsv} @@ ml_query.ml_q ORDER BY ml_score DESC, t.{chunk_id}{limit})",
        k1_1 = k1 + 1.0,
        length_t = length.replace(&format!("unnest({tsv})"), &format!("unnest(t.{tsv})")),
    )
}

/// The text query of the words of the text in placeholder `text` (any of them), as
/// PostgreSQL's `simple` configuration splits them, the first [`MAX_TERMS`].
fn tsquery(text: &str) -> String {
    // Lexemes with a backslash are left out: quote_literal writes them as E'…', which a
    // tsquery does not read.
    format!(
        "to_tsquery('simple', coalesce((SELECT string_agg(quote_literal(l), ' | ') FROM \
         (SELECT l FROM unnest(tsvector_to_array(to_tsvector('simple', {text}::text))) l \
          WHERE strpos(l, E'\\\\') = 0 LIMIT {MAX_TERMS}) s), ''))"
    )
}

impl Found {
    /// Streams the rows best first, as `stored` (the chunk table's schema, node last, NULL
    /// here) with each row's distance.
    pub(crate) fn rows(
        self,
        stored: SchemaRef,
        batch_size: usize,
    ) -> impl futures::Stream<Item = Result<(RecordBatch, ArrayRef)>> + Send {
        postgres::read_rows(
            self.settings,
            self.sql,
            self.params,
            self.schema,
            self.kinds,
            batch_size,
        )
        .map(move |batch| {
            let batch = batch?;
            let last = batch.num_columns() - 1;
            let rows = batch.num_rows();
            // bounded: one per column of the chunk table
            let mut columns: Vec<ArrayRef> = Vec::with_capacity(stored.fields().len());
            for (column, field) in batch.columns()[..last].iter().zip(stored.fields()) {
                columns.push(match column.data_type() == field.data_type() {
                    true => Arc::clone(column),
                    false => datafusion::arrow::compute::cast(column, field.data_type())?,
                });
            }
            let node = stored.field(stored.fields().len() - 1);
            columns.push(new_null_array(node.data_type(), rows));
            let chunk = RecordBatch::try_new(Arc::clone(&stored), columns)?;
            let distance: Float64Array = batch
                .column(last)
                .as_primitive::<Float64Type>()
                .iter()
                .map(|d| Some(d.unwrap_or(1.0)))
                .collect();
            Ok((chunk, Arc::new(distance) as ArrayRef))
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ids_are_quoted_as_array_elements() {
        let ids = vec!["a".to_string(), "b\"c".to_string(), "d\\e".to_string()];
        assert_eq!(text_array(&ids), "{\"a\",\"b\\\"c\",\"d\\\\e\"}");
    }

    #[test]
    fn vectors_are_written_as_pgvector_reads_them() {
        assert_eq!(vector_text(&[0.5, -1.0, 0.25]), "[0.5,-1,0.25]");
    }
}
