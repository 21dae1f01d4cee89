//! Inserts into a knowledge base with MindsDB's `USING` settings:
//!
//! ```sql
//! INSERT INTO kb SELECT id, body FROM pg.docs
//! USING batch_size = 200, track_column = id, error = 'skip', kb_skip_existing = true;
//! SELECT * FROM information_schema.queries;
//! SELECT query_cancel(1);   -- stops before its next batch
//! SELECT query_resume(1);   -- goes on after the last batch done
//! ```
//!
//! With `batch_size` (or `track_column`) the SELECT's rows go in batches ordered by the
//! tracked column (the knowledge base's id column when none is named): each batch is the rows
//! after the last one done, up to the greatest value among the next `batch_size`, inserted and
//! committed on its own, and its greatest value kept in the query's record
//! (`catalog::queries`) with the rows done. A batch that fails stops the insert (`error =
//! 'raise'`, the default) or is left out and noted (`error = 'skip'`). What was committed
//! stays: a resume, after an error, a cancel or a crash, starts after the last value kept, so
//! no row is embedded twice nor left out. `threads` is accepted as MindsDB's users write it;
//! batches run one after another here, since each must commit after the one before for a
//! resume to start at the right row (the embedding calls within a batch go in parallel
//! batches of their own, `embedding.batch_size`).
//!
//! Without those two, the settings `kb_skip_existing` and `kb_no_upsert` apply to a plain
//! insert (see `write::InsertOptions`).

use datafusion::sql::sqlparser::ast::{Insert, SetExpr, Statement};
use datafusion::sql::sqlparser::keywords::Keyword;
use datafusion::sql::sqlparser::tokenizer::Token;
use futures::future::BoxFuture;
use futures::StreamExt;
use serde_json::{Map, Value};

use super::statements::DocumentSource;
use super::write::InsertOptions;
use crate::catalog::queries::{self, QueryRecord};
use crate::error::{Error, ErrorKind, Result};
use crate::running::Object;
use crate::sql::parse::words::{keyword, tokens_text, using_pairs};
use crate::sql::parse::Command;
use crate::sql::{FeatureStatement, Outcome, QueryRequest, ResultContext, SqlRunner};
use crate::tenant::TenantId;

/// The most rows one batch may take.
const MAX_BATCH_SIZE: u64 = 100_000;

/// MindsDB's default batch size.
const DEFAULT_BATCH_SIZE: u64 = 1000;

/// A statement about batched inserts.
#[derive(Debug, PartialEq)]
pub(crate) enum BatchStatement {
    /// `INSERT INTO kb … USING key = value, …`: the whole text, the INSERT's own text, and
    /// the settings.
    InsertUsing {
        text: String,
        insert: String,
        using: Vec<(String, Value)>,
    },
    /// `SELECT query_resume(id)`.
    Resume(u64),
    /// `SELECT query_cancel(id)`.
    Cancel(u64),
}

impl FeatureStatement for BatchStatement {
    fn run<'a>(
        self: Box<Self>,
        runner: &'a SqlRunner,
        tenant: TenantId,
        context: &'a mut ResultContext,
    ) -> BoxFuture<'a, Result<Outcome>> {
        Box::pin(runner.batch_command(tenant, context, *self))
    }
}

/// Recognises `INSERT … USING k = v, …` (a `USING` outside parentheses followed by a setting,
/// so a join's `USING (col)` is not one) and `SELECT query_resume(n)` / `query_cancel(n)`.
pub(crate) fn batch_command(words: &[&Token]) -> Result<Option<BatchStatement>> {
    match words.first().and_then(|t| keyword(t)) {
        Some(Keyword::INSERT) => {
            let mut depth = 0usize;
            let mut at = None;
            for (k, token) in words.iter().enumerate() {
                match token {
                    Token::LParen => depth += 1,
                    Token::RParen => depth = depth.saturating_sub(1),
                    _ if depth == 0
                        && keyword(token) == Some(Keyword::USING)
                        && matches!(words.get(k + 1), Some(Token::Word(_)))
                        && words.get(k + 2) == Some(&&Token::Eq) =>
                    {
                        at = Some(k);
                    }
                    _ => {}
                }
            }
            let Some(at) = at else {
                return Ok(None);
            };
            // The statement is read again from its text (and again on a resume, when the
            // request's parameters are gone), so parameters cannot stand in it.
            let placeholder = words[..at]
                .windows(2)
                .any(|pair| matches!(pair, [Token::Colon, Token::Word(_)]))
                || words.iter().any(|t| matches!(t, Token::Placeholder(_)));
            if placeholder {
                return Err(Error::invalid(
                    "An INSERT with USING settings cannot take parameters (:name or ?): it is \
                     kept as text to be resumed; write the values into the statement",
                ));
            }
            // `track_column = order_id` names a column, as MindsDB writes it.
            let named: Vec<Token> = words
                .iter()
                .enumerate()
                .map(|(k, token)| match token {
                    Token::Word(w)
                        if w.quote_style.is_none()
                            && k >= 2
                            && words[k - 1] == &Token::Eq
                            && matches!(words[k - 2], Token::Word(key)
                                if key.value.eq_ignore_ascii_case("track_column")) =>
                    {
                        Token::SingleQuotedString(w.value.clone())
                    }
                    other => (*other).clone(),
                })
                .collect();
            let named: Vec<&Token> = named.iter().collect();
            Ok(Some(BatchStatement::InsertUsing {
                text: tokens_text(words),
                insert: tokens_text(&words[..at]),
                using: using_pairs(&named, at, "the INSERT")?,
            }))
        }
        Some(Keyword::SELECT) => {
            let function = match words.get(1) {
                Some(Token::Word(w)) if w.quote_style.is_none() => w.value.to_ascii_lowercase(),
                _ => return Ok(None),
            };
            if !matches!(function.as_str(), "query_resume" | "query_cancel")
                || words.get(2) != Some(&&Token::LParen)
            {
                return Ok(None);
            }
            let id = match (words.get(3), words.get(4), words.len()) {
                (Some(Token::Number(n, _)), Some(Token::RParen), 5) => n.parse::<u64>().ok(),
                _ => None,
            }
            .ok_or_else(|| {
                Error::invalid(format!(
                    "{function} takes one query id, from information_schema.queries: \
                     SELECT {function}(1)"
                ))
            })?;
            Ok(Some(match function.as_str() {
                "query_resume" => BatchStatement::Resume(id),
                _ => BatchStatement::Cancel(id),
            }))
        }
        _ => Ok(None),
    }
}

/// What the USING settings of an insert ask.
#[derive(Debug, Clone, PartialEq)]
struct Settings {
    /// `batch_size` and `track_column`, when it goes in batches (the column `None` until the
    /// knowledge base's id column is known).
    batches: Option<(u64, Option<String>)>,
    /// `error = 'skip'`.
    skip_errors: bool,
    options: InsertOptions,
}

impl Settings {
    fn of(using: &[(String, Value)]) -> Result<Settings> {
        let mut batch_size = None;
        let mut track_column = None;
        let mut settings = Settings {
            batches: None,
            skip_errors: false,
            options: InsertOptions::default(),
        };
        let flag = |key: &str, value: &Value| match value {
            Value::Bool(b) => Ok(*b),
            other => Err(Error::invalid(format!(
                "{key} must be true or false, not {other}"
            ))),
        };
        for (key, value) in using {
            match key.as_str() {
                "batch_size" => {
                    batch_size = Some(
                        value
                            .as_u64()
                            .filter(|n| (1..=MAX_BATCH_SIZE).contains(n))
                            .ok_or_else(|| {
                                Error::invalid(format!(
                                    "batch_size must be a whole number from 1 to \
                                     {MAX_BATCH_SIZE}, not {value}"
                                ))
                            })?,
                    )
                }
                "track_column" => match value {
                    Value::String(column) if !column.is_empty() => {
                        track_column = Some(column.clone())
                    }
                    other => {
                        return Err(Error::invalid(format!(
                            "track_column must name a column of the SELECT, not {other}"
                        )))
                    }
                },
                "threads" => match value {
                    Value::Bool(_) => {}
                    Value::Number(n) if n.as_u64().is_some_and(|n| n >= 1) => {}
                    other => {
                        return Err(Error::invalid(format!(
                            "threads must be true, false or a number of threads, not {other}"
                        )))
                    }
                },
                "error" => match value.as_str().map(str::to_ascii_lowercase).as_deref() {
                    Some("raise") => settings.skip_errors = false,
                    Some("skip") => settings.skip_errors = true,
                    _ => {
                        return Err(Error::invalid(format!(
                            "error must be 'raise' or 'skip', not {value}"
                        )))
                    }
                },
                "kb_skip_existing" => settings.options.skip_existing = flag(key, value)?,
                "kb_no_upsert" => settings.options.no_upsert = flag(key, value)?,
                other => {
                    return Err(Error::invalid(format!(
                        "Unknown setting '{other}' of an INSERT into a knowledge base: it takes \
                         batch_size, track_column, threads, error, kb_skip_existing and \
                         kb_no_upsert"
                    )))
                }
            }
        }
        if batch_size.is_some() || track_column.is_some() {
            settings.batches = Some((batch_size.unwrap_or(DEFAULT_BATCH_SIZE), track_column));
        }
        Ok(settings)
    }
}

/// `name` quoted as a column (backticks always quote a name).
fn column(name: &str) -> String {
    format!("`{}`", name.replace('`', "``"))
}

/// Marks query `id` as stopped when dropped armed (its statement was dropped mid-way).
struct Unfinished {
    store: std::sync::Arc<crate::store::Store>,
    tenant: TenantId,
    id: u64,
    armed: bool,
}

impl Drop for Unfinished {
    fn drop(&mut self) {
        if !self.armed {
            return;
        }
        let Ok(handle) = tokio::runtime::Handle::try_current() else {
            return;
        };
        let (store, tenant, id) = (std::sync::Arc::clone(&self.store), self.tenant, self.id);
        handle.spawn(async move {
            // Best effort: a record left open reads as interrupted when the store reopens.
            let _ = store
                .write_detached(move |txn| {
                    queries::update(txn, tenant, id, |r| {
                        r.finished_at = Some(crate::time::now_text());
                        r.error = Some(format!(
                            "Stopped: its statement was cancelled; SELECT query_resume({id}) \
                             goes on from where it stopped"
                        ));
                    })
                })
                .await;
        });
    }
}

/// An insert on its way, batch by batch.
struct Batched {
    id: u64,
    insert: Insert,
    /// The SELECT's text.
    source: String,
    project: String,
    name: String,
    batch_size: u64,
    track: String,
    settings: Settings,
}

impl SqlRunner {
    /// Runs a statement of this module.
    async fn batch_command(
        &self,
        tenant: TenantId,
        context: &ResultContext,
        statement: BatchStatement,
    ) -> Result<Outcome> {
        match statement {
            BatchStatement::InsertUsing {
                text,
                insert,
                using,
            } => {
                let settings = Settings::of(&using)?;
                let insert = self.kb_insert(tenant, context, &insert)?;
                let Some((project, name)) = self.insert_target(tenant, context, &insert)? else {
                    return Err(Error::invalid(
                        "USING after an INSERT is for inserts into knowledge bases; this \
                         INSERT's table is not one",
                    ));
                };
                let Some((batch_size, track)) = settings.batches.clone() else {
                    let source = DocumentSource::Insert(Box::new(insert));
                    let options = settings.options;
                    let documents = self
                        .insert_documents(tenant, context, &project, &name, &source, None, options)
                        .await?;
                    return Ok(Outcome::Ok {
                        affected_rows: Some(documents),
                    });
                };
                self.outside_transaction("An INSERT in batches (batch_size, track_column)")?;
                let parameters: Map<String, Value> = using.into_iter().collect();
                let (db, store) = (context.db.clone(), &self.services.store);
                let record = store
                    .write(move |txn| queries::create(txn, tenant, &text, &db, parameters))
                    .await?;
                let batched = self.batched(
                    tenant,
                    context,
                    &record,
                    insert,
                    (batch_size, track),
                    settings,
                )?;
                Box::pin(self.run_batches(tenant, context, batched, None)).await
            }
            BatchStatement::Resume(id) => {
                let record = self.query_record(tenant, id)?;
                if self
                    .services
                    .store
                    .running
                    .is_running(&Object::query(tenant, id))
                {
                    return Err(Error::conflict(format!("Query {id} is running already")));
                }
                if record.finished_at.is_some() && record.error.is_none() {
                    return Err(Error::invalid(format!(
                        "Query {id} finished; there is nothing to resume"
                    )));
                }
                let words = crate::sql::parse::words_of(&record.sql)?;
                let words: Vec<&Token> = words.iter().collect();
                let Some(BatchStatement::InsertUsing { insert, using, .. }) =
                    batch_command(&words)?
                else {
                    return Err(Error::internal(format!(
                        "query {id}'s statement is no batched insert"
                    )));
                };
                let settings = Settings::of(&using)?;
                let Some(batches) = settings.batches.clone() else {
                    return Err(Error::internal(format!("query {id} has no batches")));
                };
                self.outside_transaction("Resuming an INSERT in batches")?;
                let context = ResultContext {
                    db: record.database.clone(),
                    ..context.clone()
                };
                let insert = self.kb_insert(tenant, &context, &insert)?;
                let batched = self.batched(tenant, &context, &record, insert, batches, settings)?;
                self.services
                    .store
                    .write(move |txn| {
                        queries::update(txn, tenant, id, |r| {
                            r.finished_at = None;
                            r.error = None;
                        })
                    })
                    .await?;
                Box::pin(self.run_batches(tenant, &context, batched, record.last)).await
            }
            BatchStatement::Cancel(id) => {
                self.query_record(tenant, id)?;
                let running = &self.services.store.running;
                let mark = running.mark();
                self.services
                    .store
                    .write(move |txn| queries::remove(txn, tenant, id))
                    .await?;
                running.cancel(&Object::query(tenant, id), mark);
                Ok(Outcome::Ok {
                    affected_rows: None,
                })
            }
        }
    }

    /// Query `id` of `tenant`, or a not-found error naming it.
    fn query_record(&self, tenant: TenantId, id: u64) -> Result<QueryRecord> {
        queries::get(&self.services.store.read()?, tenant, id)?.ok_or_else(|| {
            Error::not_found(format!(
                "Query {id} not found: see information_schema.queries"
            ))
        })
    }

    /// The INSERT of `text`, which must insert into a knowledge base.
    fn kb_insert(&self, tenant: TenantId, context: &ResultContext, text: &str) -> Result<Insert> {
        let mut commands = self.parse_text(tenant, text)?;
        match (commands.pop(), commands.is_empty()) {
            (Some(Command::Sql(statement)), true) => match *statement {
                Statement::Insert(insert) => {
                    if self.insert_target(tenant, context, &insert)?.is_none() {
                        return Err(Error::invalid(
                            "USING after an INSERT is for inserts into knowledge bases; this \
                             INSERT's table is not one",
                        ));
                    }
                    Ok(insert)
                }
                _ => Err(Error::invalid(
                    "USING follows an INSERT INTO a knowledge base",
                )),
            },
            _ => Err(Error::invalid(
                "USING follows one INSERT INTO a knowledge base",
            )),
        }
    }

    /// The batched insert of `record`.
    fn batched(
        &self,
        tenant: TenantId,
        context: &ResultContext,
        record: &QueryRecord,
        insert: Insert,
        (batch_size, track): (u64, Option<String>),
        settings: Settings,
    ) -> Result<Batched> {
        let (project, name) = self
            .insert_target(tenant, context, &insert)?
            .ok_or_else(|| Error::invalid("The INSERT's table is no knowledge base"))?;
        let source = match insert.source.as_deref() {
            Some(query) if !matches!(*query.body, SetExpr::Values(_)) => query.to_string(),
            _ => {
                return Err(Error::invalid(
                    "An INSERT in batches takes a SELECT (VALUES need no batches)",
                ))
            }
        };
        let track = match track {
            Some(track) => track,
            None => {
                let snapshot = crate::sql::catalog::snapshot::Snapshot::new(
                    std::sync::Arc::clone(&self.services.store),
                    tenant,
                )?;
                snapshot
                    .knowledge_base(&project, &name)?
                    .map(|kb| kb.id_column)
                    .unwrap_or_else(|| "id".to_string())
            }
        };
        Ok(Batched {
            id: record.id,
            insert,
            source,
            project,
            name,
            batch_size,
            track,
            settings,
        })
    }

    /// Inserts `batched`'s batches after `last` (a SQL literal of the tracked column), each
    /// committed and recorded before the next.
    async fn run_batches(
        &self,
        tenant: TenantId,
        context: &ResultContext,
        batched: Batched,
        mut last: Option<String>,
    ) -> Result<Outcome> {
        let id = batched.id;
        // A statement stopped from outside (its client gone) is dropped mid-way: its record
        // is then marked as stopped all the same, so it reads as resumable, not as running.
        let mut unfinished = Unfinished {
            store: std::sync::Arc::clone(&self.services.store),
            tenant,
            id,
            armed: true,
        };
        let token = tokio_util::sync::CancellationToken::new();
        let registration = self
            .services
            .store
            .running
            .register(&Object::query(tenant, id), token);
        let cancelled = || Error::invalid(format!("Query {id} was cancelled (query_cancel)"));
        let track = column(&batched.track);
        let mut documents = 0u64;
        let outcome: Result<()> = async {
            loop {
                if registration.token().is_cancelled() {
                    return Err(cancelled());
                }
                let after = last
                    .as_ref()
                    .map(|l| format!(" WHERE {track} > {l}"))
                    .unwrap_or_default();
                let high_sql = format!(
                    "SELECT max(__t) FROM (SELECT {track} AS __t FROM ({}) AS __source{after} \
                     ORDER BY {track} LIMIT {}) AS __batch",
                    batched.source, batched.batch_size
                );
                let Some(high) =
                    self.first_value(tenant, context, &high_sql)
                        .await
                        .map_err(|e| {
                            Error::new(
                                e.kind(),
                                format!(
                                    "Reading the next batch by track_column '{}': {}",
                                    batched.track,
                                    e.message()
                                ),
                            )
                        })?
                else {
                    return Ok(());
                };
                if last.as_ref() == Some(&high) {
                    return Err(Error::invalid(format!(
                        "track_column '{}' does not advance past {high}: track a column whose \
                         values compare exactly (an integer, text, a date)",
                        batched.track
                    )));
                }
                let within = match &last {
                    Some(l) => format!("{track} > {l} AND {track} <= {high}"),
                    None => format!("{track} <= {high}"),
                };
                let batch_sql = format!(
                    "SELECT * FROM ({}) AS __source WHERE {within}",
                    batched.source
                );
                let mut commands = self.parse_text(tenant, &batch_sql)?;
                let Some(Command::Sql(statement)) = commands.pop() else {
                    return Err(Error::internal("a batch's query did not parse as one"));
                };
                let Statement::Query(query) = *statement else {
                    return Err(Error::internal("a batch's query is no query"));
                };
                let mut insert = batched.insert.clone();
                insert.source = Some(query);
                let source = DocumentSource::Insert(Box::new(insert));
                let inserted = self
                    .insert_documents(
                        tenant,
                        context,
                        &batched.project,
                        &batched.name,
                        &source,
                        None,
                        batched.settings.options,
                    )
                    .await;
                let (rows, error) = match inserted {
                    Ok(rows) => (rows, None),
                    // The batch's own failure is skipped; the statement's (its deadline, an
                    // interrupt, its memory) or the knowledge base's (dropped) ends it.
                    Err(e)
                        if batched.settings.skip_errors
                            && !matches!(e.kind(), ErrorKind::Internal | ErrorKind::NotFound)
                            && !registration.token().is_cancelled()
                            && crate::cancel::check().is_ok() =>
                    {
                        (0, Some(e.message().to_string()))
                    }
                    Err(e) => return Err(e),
                };
                documents += rows;
                let done = high.clone();
                let kept = self
                    .services
                    .store
                    .write(move |txn| {
                        queries::update(txn, tenant, id, |r| {
                            r.last = Some(done);
                            r.processed_rows += rows;
                            if let Some(error) = error {
                                r.skipped_batches += 1;
                                r.error = Some(error);
                            }
                        })
                    })
                    .await?;
                if !kept {
                    return Err(cancelled());
                }
                last = Some(high);
            }
        }
        .await;
        unfinished.armed = false;
        let error = outcome.as_ref().err().map(|e| e.message().to_string());
        // A cancelled query's record is gone; `update` then changes nothing.
        self.services
            .store
            .write(move |txn| {
                queries::update(txn, tenant, id, |r| {
                    r.finished_at = Some(crate::time::now_text());
                    if error.is_some() {
                        r.error = error;
                    }
                })
            })
            .await?;
        drop(registration);
        outcome.map(|()| Outcome::Ok {
            affected_rows: Some(documents),
        })
    }

    /// The first column of the first row of query `sql`, as a SQL literal (`None` for NULL or
    /// no row).
    async fn first_value(
        &self,
        tenant: TenantId,
        context: &ResultContext,
        sql: &str,
    ) -> Result<Option<String>> {
        let request = QueryRequest::on_behalf(sql, &context.db);
        match self.run(tenant, &request).await.outcome {
            Outcome::Table(mut table) => {
                while let Some(batch) = table.stream.next().await {
                    let batch = batch?;
                    if batch.num_rows() > 0 && batch.num_columns() > 0 {
                        return crate::ai::jobs::last::literal(batch.column(0).as_ref());
                    }
                }
                Ok(None)
            }
            Outcome::Error(e) => Err(e),
            Outcome::Ok { .. } => Ok(None),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::sql::parse::words_of;

    fn read(sql: &str) -> Option<BatchStatement> {
        let words = words_of(sql).unwrap();
        let words: Vec<&Token> = words.iter().collect();
        batch_command(&words).unwrap()
    }

    #[test]
    fn using_after_an_insert_is_read_and_a_joins_using_is_not() {
        assert_eq!(
            read("INSERT INTO kb SELECT a.id, b.x FROM a JOIN b USING (id)"),
            None
        );
        let Some(BatchStatement::InsertUsing { insert, using, .. }) = read(
            "INSERT INTO kb SELECT id, body FROM t WHERE body <> 'x' \
             USING batch_size = 2, track_column = id, error = 'skip'",
        ) else {
            panic!()
        };
        assert_eq!(
            insert,
            "INSERT INTO kb SELECT id, body FROM t WHERE body <> 'x'"
        );
        let settings = Settings::of(&using).unwrap();
        assert_eq!(settings.batches, Some((2, Some("id".into()))));
        assert!(settings.skip_errors);
        assert_eq!(
            read("SELECT query_resume(3)"),
            Some(BatchStatement::Resume(3))
        );
        assert_eq!(
            read("select QUERY_CANCEL ( 4 )"),
            Some(BatchStatement::Cancel(4))
        );
        assert_eq!(read("SELECT query_resumed(3)"), None);
    }

    #[test]
    fn bad_settings_are_named() {
        for (using, mention) in [
            ("batch_size = 0", "batch_size"),
            ("batch_size = 1000000", "100000"),
            ("error = 'ignore'", "'raise' or 'skip'"),
            ("kb_skip_existing = 'yes'", "kb_skip_existing"),
            ("threads = -1", "threads"),
            ("chunk = 1", "'chunk'"),
        ] {
            let Some(BatchStatement::InsertUsing { using, .. }) =
                read(&format!("INSERT INTO kb SELECT 1 AS id USING {using}"))
            else {
                panic!("{using}")
            };
            let err = Settings::of(&using).unwrap_err();
            assert!(err.message().contains(mention), "{using:?}: {err}");
        }
        for sql in [
            "INSERT INTO kb SELECT id FROM t WHERE id > :min USING batch_size = 1",
            "INSERT INTO kb SELECT id FROM t WHERE id > ? USING batch_size = 1",
        ] {
            let words = words_of(sql).unwrap();
            let words: Vec<&Token> = words.iter().collect();
            let err = batch_command(&words).unwrap_err();
            assert!(err.message().contains("parameters"), "{sql}: {err}");
        }
        let words = words_of("SELECT query_resume('x')").unwrap();
        let words: Vec<&Token> = words.iter().collect();
        assert!(batch_command(&words).is_err());
    }
}
