//! MindsDB's knowledge base statements, read on tokens: `CREATE KNOWLEDGE_BASE [IF NOT EXISTS]
//! [p.]kb [USING …]`, `ALTER KNOWLEDGE_BASE [p.]kb USING …`, `DROP KNOWLEDGE_BASE [IF EXISTS] [p.]kb`, `SHOW KNOWLEDGE_BASES [FROM p]`,
//! `DESCRIBE KNOWLEDGE_BASE [p.]kb`. `USING` takes the same `key = value` pairs as agents
//! (see `agent_statements`). Inserting, deleting and searching are ordinary SQL on the
//! knowledge base's name; this module runs the statements and INSERT INTO a knowledge base
//! (see `knowledge_base` for the search and the writes themselves).

use std::sync::Arc;

use datafusion::logical_expr::{Expr, LogicalPlan, LogicalPlanBuilder};
use datafusion::sql::sqlparser::ast::{Insert, ObjectName, Statement, TableObject};
use datafusion::sql::sqlparser::keywords::Keyword;
use datafusion::sql::sqlparser::tokenizer::Token;
use futures::future::BoxFuture;
use serde_json::Value;

use super::pgvector::PgStore;
use super::write;
use crate::catalog::knowledge_bases::{self, KbStorage, KnowledgeBase};
use crate::error::{Error, Result};
use crate::progress::{ProgressCallback, Tracker};
use crate::services::embeddings;
use crate::sql::catalog::snapshot::{Namespace, Snapshot};
use crate::sql::parse::words::{
    end_at, from_project, if_exists_at, keyword, qualified_name, using_pairs,
};
use crate::sql::parse::Command;
use crate::sql::write::job::Staged;
use crate::sql::FeatureStatement;
use crate::sql::{text_table, Outcome, ResultContext, SqlRunner};
use crate::tenant::TenantId;

const WHAT: &str = "a knowledge base name";
/// Times an insert is embedded and tried before it gives up on a knowledge base that keeps
/// changing under it.
const INSERT_ATTEMPTS: usize = 3;

/// A knowledge base statement.
#[derive(Debug, PartialEq)]
pub(crate) enum KnowledgeBaseStatement {
    /// `CREATE KNOWLEDGE_BASE [IF NOT EXISTS] [p.]kb [USING …]`: the USING pairs in order.
    CreateKnowledgeBase {
        project: Option<String>,
        name: String,
        if_not_exists: bool,
        using: Vec<(String, Value)>,
    },
    /// `ALTER KNOWLEDGE_BASE [p.]kb USING …`.
    AlterKnowledgeBase {
        project: Option<String>,
        name: String,
        using: Vec<(String, Value)>,
    },
    /// `DROP KNOWLEDGE_BASE [IF EXISTS] [p.]kb`.
    DropKnowledgeBase {
        project: Option<String>,
        name: String,
        if_exists: bool,
    },
    /// `SHOW KNOWLEDGE_BASES [FROM p]`.
    ShowKnowledgeBases { project: Option<String> },
    /// `DESCRIBE KNOWLEDGE_BASE [p.]kb`.
    DescribeKnowledgeBase {
        project: Option<String>,
        name: String,
    },
    /// `EVALUATE KNOWLEDGE_BASE [p.]kb USING …` (see `evaluate`).
    EvaluateKnowledgeBase {
        project: Option<String>,
        name: String,
        using: Vec<(String, Value)>,
    },
}

impl FeatureStatement for KnowledgeBaseStatement {
    fn run<'a>(
        self: Box<Self>,
        runner: &'a SqlRunner,
        tenant: TenantId,
        context: &'a mut ResultContext,
    ) -> BoxFuture<'a, Result<Outcome>> {
        Box::pin(runner.knowledge_base_command(tenant, context, *self))
    }
}

/// Recognises a knowledge base statement; `None` when `words` is something else.
pub(crate) fn kb_command(words: &[&Token]) -> Result<Option<KnowledgeBaseStatement>> {
    let is = |k: usize, text: &str| matches!(words.get(k), Some(Token::Word(w)) if w.quote_style.is_none() && w.value.eq_ignore_ascii_case(text));
    let kw = |k: usize| words.get(k).and_then(|t| keyword(t));
    match kw(0) {
        Some(Keyword::CREATE) if is(1, "KNOWLEDGE_BASE") => {
            let (if_not_exists, k) = if_exists_at(words, 2, true);
            let (project, name, k) = qualified_name(words, k, WHAT)?;
            let using = using_pairs(words, k, "the knowledge base name")?;
            Ok(Some(KnowledgeBaseStatement::CreateKnowledgeBase {
                project,
                name,
                if_not_exists,
                using,
            }))
        }
        Some(Keyword::ALTER) if is(1, "KNOWLEDGE_BASE") => {
            let (project, name, k) = qualified_name(words, 2, WHAT)?;
            let using = using_pairs(words, k, "the knowledge base name")?;
            if using.is_empty() {
                return Err(Error::invalid(
                    "ALTER KNOWLEDGE_BASE takes USING key = value, … (what to change)",
                ));
            }
            Ok(Some(KnowledgeBaseStatement::AlterKnowledgeBase {
                project,
                name,
                using,
            }))
        }
        Some(Keyword::DROP) if is(1, "KNOWLEDGE_BASE") => {
            let (if_exists, k) = if_exists_at(words, 2, false);
            let (project, name, k) = qualified_name(words, k, WHAT)?;
            end_at(words, k)?;
            Ok(Some(KnowledgeBaseStatement::DropKnowledgeBase {
                project,
                name,
                if_exists,
            }))
        }
        Some(Keyword::DESCRIBE | Keyword::DESC) if is(1, "KNOWLEDGE_BASE") => {
            let (project, name, k) = qualified_name(words, 2, WHAT)?;
            end_at(words, k)?;
            Ok(Some(KnowledgeBaseStatement::DescribeKnowledgeBase {
                project,
                name,
            }))
        }
        _ if is(0, "EVALUATE") && is(1, "KNOWLEDGE_BASE") => {
            let (project, name, k) = qualified_name(words, 2, WHAT)?;
            let named = super::evaluate::names_as_text(words);
            let named: Vec<&Token> = named.iter().collect();
            let using = using_pairs(&named, k, "the knowledge base name")?;
            Ok(Some(KnowledgeBaseStatement::EvaluateKnowledgeBase {
                project,
                name,
                using,
            }))
        }
        Some(Keyword::SHOW) if is(1, "KNOWLEDGE_BASES") => {
            Ok(Some(KnowledgeBaseStatement::ShowKnowledgeBases {
                project: from_project(words, 2)?,
            }))
        }
        _ => Ok(None),
    }
}

impl SqlRunner {
    /// Runs CREATE, ALTER, DROP, SHOW and DESCRIBE of knowledge bases.
    pub(crate) async fn knowledge_base_command(
        &self,
        tenant: TenantId,
        context: &ResultContext,
        command: KnowledgeBaseStatement,
    ) -> Result<Outcome> {
        let project_or_current =
            |project: Option<String>| project.unwrap_or_else(|| context.db.clone());
        match command {
            KnowledgeBaseStatement::CreateKnowledgeBase {
                project,
                name,
                if_not_exists,
                using,
            } => {
                let project = project_or_current(project);
                let kb = KnowledgeBase::from_using(
                    &project,
                    &name,
                    using,
                    &self.services.settings.embedding(),
                )?;
                self.store_knowledge_base(tenant, kb, if_not_exists).await?;
                Ok(Outcome::Ok {
                    affected_rows: None,
                })
            }
            KnowledgeBaseStatement::AlterKnowledgeBase {
                project,
                name,
                using,
            } => {
                let project = project_or_current(project);
                let egress = self.services.net.egress.clone();
                self.services
                    .store
                    .write(move |txn| {
                        knowledge_bases::alter(txn, tenant, &project, &name, using, &egress)
                    })
                    .await?;
                Ok(Outcome::Ok {
                    affected_rows: None,
                })
            }
            KnowledgeBaseStatement::DropKnowledgeBase {
                project,
                name,
                if_exists,
            } => {
                let project = project_or_current(project);
                self.drop_knowledge_base(tenant, &project, &name, if_exists)
                    .await?;
                Ok(Outcome::Ok {
                    affected_rows: None,
                })
            }
            KnowledgeBaseStatement::EvaluateKnowledgeBase {
                project,
                name,
                using,
            } => {
                let project = project_or_current(project);
                Box::pin(self.evaluate_knowledge_base(tenant, context, &project, &name, using))
                    .await
            }
            KnowledgeBaseStatement::ShowKnowledgeBases { project } => {
                let project = project_or_current(project);
                let snapshot = Snapshot::new(Arc::clone(&self.services.store), tenant)?;
                if !matches!(snapshot.namespace(&project)?, Some(Namespace::Project(_))) {
                    return Err(Error::not_found(format!("Project '{project}' not found")));
                }
                knowledge_base_rows(&snapshot.knowledge_bases(&project)?)
            }
            KnowledgeBaseStatement::DescribeKnowledgeBase { project, name } => {
                let project = project_or_current(project);
                let snapshot = Snapshot::new(Arc::clone(&self.services.store), tenant)?;
                let kb = snapshot
                    .knowledge_base(&project, &name)?
                    .ok_or_else(|| knowledge_bases::missing(&name))?;
                knowledge_base_rows(&[kb])
            }
        }
    }

    /// Stores a new knowledge base (see `rules::create_knowledge_base`), once what can be
    /// checked before its first insert is: a model run in process must be one this engine
    /// has, a storage must be a PostgreSQL datasource's. Without a storage, with
    /// `knowledge_bases.storage_url` set, it is given its own table there. Returns it as stored.
    pub(crate) async fn store_knowledge_base(
        &self,
        tenant: TenantId,
        mut kb: KnowledgeBase,
        if_not_exists: bool,
    ) -> Result<KnowledgeBase> {
        let endpoint =
            embeddings::endpoint(&kb.embedding_model, &self.services.settings.embedding());
        if endpoint.local {
            self.services.sentence_models.check(&endpoint.model)?;
        }
        let storage_url = &self.services.config.knowledge_bases.storage_url;
        // A hosted user's bytes count against their plan, which the operator's server would
        // escape: their knowledge bases stay in the file unless they name a server of theirs.
        let hosted = self.services.config.is_hosted();
        if kb.storage.is_none() && !storage_url.is_empty() && !hosted {
            kb.storage = Some(KbStorage {
                database: None,
                table: owned_table(&kb.name)?,
            });
        }
        // A datasource's table with rows already is searched from the start: its columns
        // are the chunk table's.
        let mut chunks = None;
        if kb.storage.is_some() {
            let snapshot = Snapshot::new(Arc::clone(&self.services.store), tenant)?;
            let store = PgStore::of(&kb, &snapshot, &self.services.net, storage_url)?;
            // IF NOT EXISTS over one that exists does nothing, and asks the server nothing.
            let kept = if_not_exists && snapshot.knowledge_base(&kb.project, &kb.name)?.is_some();
            let theirs = kb.storage.as_ref().is_some_and(|s| !s.owned());
            if let Some(store) = store.filter(|_| theirs && !kept) {
                if let Some(metadata) = store.existing_metadata(&kb.metadata_columns).await? {
                    chunks = Some(write::chunk_schema(metadata)?);
                }
            }
        }
        let stored = kb.clone();
        let egress = self.services.net.egress.clone();
        self.services
            .store
            .write(move |txn| {
                crate::catalog::rules::create_knowledge_base(
                    txn,
                    tenant,
                    kb,
                    if_not_exists,
                    &egress,
                    chunks.as_deref(),
                )
            })
            .await?;
        Ok(stored)
    }

    /// Drops the knowledge base `project.name` (a missing one is fine with `if_exists`):
    /// inserts into it stop at once (no more embedding calls), and a table of its own in
    /// PostgreSQL goes with it, once its record has gone (a datasource's table stays).
    pub(crate) async fn drop_knowledge_base(
        &self,
        tenant: TenantId,
        project: &str,
        name: &str,
        if_exists: bool,
    ) -> Result<()> {
        let snapshot = Snapshot::new(Arc::clone(&self.services.store), tenant)?;
        let owned = match snapshot.knowledge_base(project, name)? {
            Some(kb) if kb.storage.as_ref().is_some_and(KbStorage::owned) => PgStore::of(
                &kb,
                &snapshot,
                &self.services.net,
                &self.services.config.knowledge_bases.storage_url,
            )
            .ok()
            .flatten(),
            _ => None,
        };
        let object = crate::running::Object::knowledge_base(tenant, project, name);
        let (dropped_project, dropped) = (project.to_string(), name.to_string());
        self.services
            .store
            .write_dropping(object, move |txn| {
                crate::catalog::rules::drop_knowledge_base(
                    txn,
                    tenant,
                    &dropped_project,
                    &dropped,
                    if_exists,
                )
            })
            .await?;
        if let Some(store) = owned {
            store.drop_table().await.map_err(|e| {
                Error::new(
                    e.kind(),
                    format!(
                        "Knowledge base '{name}' was dropped, but its table {} stays on the storage server: {}",
                        store.table,
                        e.message()
                    ),
                )
            })?;
        }
        Ok(())
    }

    /// The knowledge base an INSERT writes into, as (project, name), if it names one.
    pub(crate) fn insert_target(
        &self,
        tenant: TenantId,
        context: &ResultContext,
        insert: &Insert,
    ) -> Result<Option<(String, String)>> {
        let TableObject::TableName(name) = &insert.table else {
            return Ok(None);
        };
        let Some((db, object)) = db_and_object(name, &context.db) else {
            return Ok(None);
        };
        let snapshot = Snapshot::new(Arc::clone(&self.services.store), tenant)?;
        match snapshot.namespace(&db)? {
            Some(Namespace::Project(project)) => Ok(snapshot
                .knowledge_base(&project.name, &object)?
                .map(|_| (project.name, object))),
            _ => Ok(None),
        }
    }

    /// Inserts documents into the knowledge base `project.name`: chunked, embedded and
    /// stored, replacing the documents of the same ids; returns how many documents went in.
    /// The rows are read and embedded before the writer lock is taken, never under it (embedding
    /// waits on the network); if the knowledge base changed meanwhile (dropped, made anew, its
    /// first rows stored), it all runs again, a few times, then fails asking to retry.
    /// Progress goes to the store's progress board and to `callback`, which may stop it.
    /// `options` say what becomes of documents stored already.
    #[allow(clippy::too_many_arguments)]
    pub(crate) async fn insert_documents(
        &self,
        tenant: TenantId,
        context: &ResultContext,
        project: &str,
        name: &str,
        source: &DocumentSource,
        callback: Option<ProgressCallback>,
        options: write::InsertOptions,
    ) -> Result<u64> {
        let tracker = self
            .services
            .store
            .progress
            .start(tenant, project, name, callback);
        let tracker = Arc::new(parking_lot::Mutex::new(tracker));
        let inserted = self
            .insert_attempts(tenant, context, project, name, source, &tracker, options)
            .await;
        let tracker = Arc::into_inner(tracker)
            .ok_or_else(|| Error::internal("an insert's progress outlived it"))?
            .into_inner();
        tracker.finish(inserted.as_ref().err().map(|e| e.message().to_string()));
        inserted
    }

    #[allow(clippy::too_many_arguments)]
    async fn insert_attempts(
        &self,
        tenant: TenantId,
        context: &ResultContext,
        project: &str,
        name: &str,
        source: &DocumentSource,
        tracker: &Arc<parking_lot::Mutex<Tracker>>,
        options: write::InsertOptions,
    ) -> Result<u64> {
        for _ in 0..INSERT_ATTEMPTS {
            let snapshot = Snapshot::showing_secrets(
                Arc::clone(&self.services.store),
                tenant,
                context.show_secrets,
            )?;
            let kb = snapshot
                .knowledge_base(project, name)?
                .ok_or_else(|| knowledge_bases::missing(name))?;
            let state = self.session(Arc::clone(&snapshot), &context.db, self.target_partitions)?;
            let plan = match source {
                DocumentSource::Insert(insert) => {
                    let query = insert.source.clone().ok_or_else(|| {
                        Error::invalid("INSERT INTO a knowledge base takes VALUES or a SELECT")
                    })?;
                    let plan = state
                        .statement_to_plan(datafusion::sql::parser::Statement::Statement(Box::new(
                            Statement::Query(query),
                        )))
                        .await?;
                    named(plan, &column_names(insert)?, &kb.name)?
                }
                DocumentSource::Select(sql) => {
                    let mut commands = self.parse_text(tenant, sql)?;
                    let query =
                        match (commands.pop(), commands.is_empty()) {
                            (Some(Command::Sql(statement)), true)
                                if matches!(*statement, Statement::Query(_)) =>
                            {
                                *statement
                            }
                            _ => return Err(Error::invalid(
                                "The query of documents for a knowledge base must be one SELECT",
                            )),
                        };
                    state
                        .statement_to_plan(datafusion::sql::parser::Statement::Statement(Box::new(
                            query,
                        )))
                        .await?
                }
                DocumentSource::Rows(batch) => {
                    let table = datafusion::datasource::MemTable::try_new(
                        batch.schema(),
                        vec![vec![batch.clone()]],
                    )?;
                    LogicalPlanBuilder::scan(
                        "rows",
                        datafusion::datasource::provider_as_source(Arc::new(table)),
                        None,
                    )?
                    .build()?
                }
            };
            let connector = Arc::new(self.services.connector());
            let progress = Arc::clone(tracker);
            let staged = self
                .job(tenant, &context.db, snapshot, state, None, None)
                .run(move |job, handle| {
                    write::insert(job, handle, kb, plan, connector, progress, options)
                })
                .await?;
            if let Staged::Done(documents) = staged {
                return Ok(documents);
            }
        }
        Err(Error::conflict(format!(
            "Knowledge base '{name}' kept changing while the documents were embedded; try the insert again"
        )))
    }
}

/// Where the documents of an insert come from.
pub(crate) enum DocumentSource {
    /// `INSERT INTO kb [(columns)] VALUES … | SELECT …`.
    Insert(Box<Insert>),
    /// A SELECT's text (MindsDB's REST `{"query": …}`), run in the current database.
    Select(String),
    /// Rows given as data (MindsDB's REST `{"rows": […]}`, a DataFrame).
    Rows(datafusion::arrow::array::RecordBatch),
}

/// The column names an INSERT lists (none: the query's own).
fn column_names(insert: &Insert) -> Result<Vec<String>> {
    insert
        .columns
        .iter()
        .map(|c| {
            c.0.last()
                .and_then(|part| part.as_ident())
                .map(|ident| match ident.quote_style {
                    Some(_) => ident.value.clone(),
                    None => ident.value.to_ascii_lowercase(),
                })
                .ok_or_else(|| Error::invalid(format!("'{c}' is not a column name")))
        })
        .collect()
}

/// `plan` with its columns named `columns` (none: as they are).
fn named(plan: LogicalPlan, columns: &[String], kb: &str) -> Result<LogicalPlan> {
    if columns.is_empty() {
        return Ok(plan);
    }
    let fields = plan.schema().fields().len();
    if fields != columns.len() {
        return Err(Error::invalid(format!(
            "INSERT INTO knowledge base '{kb}' names {} columns but gives rows of {fields}",
            columns.len()
        )));
    }
    let exprs: Vec<Expr> = plan
        .schema()
        .columns()
        .into_iter()
        .zip(columns)
        .map(|(column, name)| Expr::Column(column).alias(name.as_str()))
        .collect();
    Ok(LogicalPlanBuilder::from(plan).project(exprs)?.build()?)
}

/// `[db.]object` of a name, the current database when none is given.
fn db_and_object(name: &ObjectName, current: &str) -> Option<(String, String)> {
    let parts: Vec<String> = name
        .0
        .iter()
        .map(|part| {
            part.as_ident().map(|ident| match ident.quote_style {
                Some(_) => ident.value.clone(),
                None => ident.value.to_ascii_lowercase(),
            })
        })
        .collect::<Option<_>>()?;
    match parts.as_slice() {
        [object] => Some((current.to_string(), object.clone())),
        [db, object] => Some((db.to_ascii_lowercase(), object.clone())),
        _ => None,
    }
}

/// MindsDB's `SHOW KNOWLEDGE_BASES` columns, secrets masked.
/// The name of a knowledge base's own table on the server of `knowledge_bases.storage_url`:
/// its name and random hex, so engines sharing the server never take one another's.
fn owned_table(kb: &str) -> Result<String> {
    let mut bytes = [0u8; 6];
    getrandom::fill(&mut bytes).map_err(|e| Error::internal(format!("no randomness: {e}")))?;
    let prefix: String = kb.to_ascii_lowercase().chars().take(40).collect();
    let suffix: String = bytes.iter().map(|b| format!("{b:02x}")).collect();
    Ok(format!("mindlite_{prefix}_{suffix}"))
}

fn knowledge_base_rows(kbs: &[KnowledgeBase]) -> Result<Outcome> {
    let rows: Vec<[String; 8]> = kbs.iter().map(KnowledgeBase::system_row).collect();
    text_table(
        knowledge_bases::SYSTEM_COLUMNS
            .iter()
            .enumerate()
            .map(|(i, name)| (*name, rows.iter().map(|r| Some(r[i].clone())).collect()))
            .collect(),
    )
}
