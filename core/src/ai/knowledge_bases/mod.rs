//! Knowledge bases in SQL: their statements and INSERT INTO one (`statements`), the table
//! provider a knowledge base's name resolves to (`table`), which searches a query's conditions
//! ask for (`content` keeps them as written, `query` reads them), how a search ranks (`search`) and
//! how documents are chunked, embedded and stored (`write`), knowledge bases kept in PostgreSQL
//! with pgvector (`pgvector`), and inserts in resumable batches (`batches`,
//! `information_schema.queries`). The records and the vector index are
//! `catalog::knowledge_bases` and `catalog::kb_index`.

pub(crate) mod batches;
pub(crate) mod content;
pub(crate) mod evaluate;
pub(crate) mod pgvector;
pub(crate) mod query;
pub(crate) mod search;
pub(crate) mod statements;
pub(crate) mod table;
pub(crate) mod write;

use std::sync::Arc;

use datafusion::catalog::TableProvider;
use datafusion::logical_expr::DmlStatement;
use datafusion::optimizer::AnalyzerRule;
use datafusion::sql::sqlparser::ast::Insert;
use datafusion::sql::sqlparser::tokenizer::Token;
use futures::future::BoxFuture;

use crate::catalog::knowledge_bases::{KnowledgeBase, SYSTEM_COLUMNS};
use crate::catalog::queries::QueryRecord;
use crate::error::Result;
use crate::progress::InsertProgress;
use crate::sql::catalog::features::{FeatureTables, ProjectObject, SystemRows};
use crate::sql::catalog::information_schema::SystemTable;
use crate::sql::catalog::snapshot::Snapshot;
use crate::sql::{Extension, FeatureStatement, FeatureWrite};
use crate::sql::{ResultContext, SqlRunner};
use crate::tenant::TenantId;

/// Knowledge bases plugged into the relational engine: their statements, a knowledge base's
/// name as a table, `information_schema.knowledge_bases` and `knowledge_base_inserts`.
#[derive(Debug)]
pub(crate) struct KnowledgeBases;

impl Extension for KnowledgeBases {
    fn statement(&self, words: &[&Token]) -> Result<Option<Box<dyn FeatureStatement>>> {
        if let Some(statement) = statements::kb_command(words)? {
            return Ok(Some(Box::new(statement)));
        }
        Ok(batches::batch_command(words)?.map(|s| Box::new(s) as Box<dyn FeatureStatement>))
    }

    fn analyzer_rules(&self) -> Vec<Arc<dyn AnalyzerRule + Send + Sync>> {
        vec![Arc::new(table::ContentConditions)]
    }

    fn insert<'a>(
        &'a self,
        runner: &'a SqlRunner,
        tenant: TenantId,
        context: &'a ResultContext,
        insert: &'a Insert,
    ) -> BoxFuture<'a, Result<Option<u64>>> {
        Box::pin(async move {
            let Some((project, name)) = runner.insert_target(tenant, context, insert)? else {
                return Ok(None);
            };
            let source = statements::DocumentSource::Insert(Box::new(insert.clone()));
            let documents = runner
                .insert_documents(
                    tenant,
                    context,
                    &project,
                    &name,
                    &source,
                    None,
                    Default::default(),
                )
                .await?;
            Ok(Some(documents))
        })
    }

    fn claims_write(&self, statement: &DmlStatement) -> bool {
        table::target(statement).is_some()
    }

    fn write(&self, statement: DmlStatement) -> Result<FeatureWrite> {
        // Documents are replaced by INSERT; DELETE is the one other write.
        let (kb, ids) = table::deleted_ids(statement)?;
        Ok(Box::new(move |job, handle| {
            write::delete(job, handle, kb, ids)
        }))
    }
}

impl FeatureTables for KnowledgeBases {
    fn table(
        &self,
        snapshot: &Arc<Snapshot>,
        project: &str,
        name: &str,
    ) -> Result<Option<Arc<dyn TableProvider>>> {
        let Some(kb) = snapshot.knowledge_base(project, name)? else {
            return Ok(None);
        };
        Ok(Some(Arc::new(table::KnowledgeBaseTable::new(
            Arc::clone(snapshot),
            kb,
        )?)))
    }

    fn has_table(&self, snapshot: &Snapshot, project: &str, name: &str) -> bool {
        matches!(snapshot.knowledge_base(project, name), Ok(Some(_)))
    }

    fn objects(&self, snap: &Snapshot, project: &str) -> Result<Vec<ProjectObject>> {
        let kbs = snap.knowledge_bases(project)?;
        Ok(kbs
            .into_iter()
            .map(|kb| ProjectObject::new(kb.name, "KNOWLEDGE BASE"))
            .collect())
    }

    fn system_table(&self, snap: &Snapshot, name: &str) -> Result<Option<SystemRows>> {
        match name {
            "knowledge_bases" => {
                let mut rows: Vec<[String; 8]> = Vec::new();
                for project in snap.projects()? {
                    rows.extend(
                        snap.knowledge_bases(&project.name)?
                            .iter()
                            .map(KnowledgeBase::system_row),
                    );
                }
                let mut table = SystemTable::default();
                for (i, name) in SYSTEM_COLUMNS.iter().enumerate() {
                    table = table.text(name, rows.iter().map(|r| Some(r[i].as_str())));
                }
                Ok(Some(SystemRows {
                    batch: table.build()?,
                    live: false,
                }))
            }
            "knowledge_base_inserts" => {
                let inserts = snap.store.progress.list(snap.tenant);
                let text = |f: fn(&InsertProgress) -> &str| -> Vec<Option<String>> {
                    inserts.iter().map(|p| Some(f(p).to_string())).collect()
                };
                let number =
                    |f: fn(&InsertProgress) -> u64| inserts.iter().map(move |p| Some(f(p)));
                let batch = SystemTable::default()
                    .owned_text("PROJECT", text(|p| &p.project))
                    .owned_text("NAME", text(|p| &p.knowledge_base))
                    .owned_text("STATUS", text(|p| &p.status))
                    .number("DOCUMENTS", number(|p| p.documents))
                    .number("CHUNKS", number(|p| p.chunks))
                    .number("EMBEDDED", number(|p| p.embedded))
                    .number("INDEXED", number(|p| p.indexed))
                    .owned_text("STARTED_AT", text(|p| &p.started_at))
                    .owned_text("UPDATED_AT", text(|p| &p.updated_at))
                    .owned_text("ERROR", inserts.iter().map(|p| p.error.clone()).collect())
                    .build()?;
                // Inserts in progress change without a commit.
                Ok(Some(SystemRows { batch, live: true }))
            }
            "queries" => {
                let records = crate::catalog::queries::all(&snap.txn, snap.tenant)?;
                let text = |f: fn(&QueryRecord) -> Option<String>| -> Vec<Option<String>> {
                    records.iter().map(f).collect()
                };
                let batch = SystemTable::default()
                    .number("ID", records.iter().map(|r| Some(r.id)))
                    .owned_text("STARTED_AT", text(|r| Some(r.started_at.clone())))
                    .owned_text("FINISHED_AT", text(|r| r.finished_at.clone()))
                    .number(
                        "PROCESSED_ROWS",
                        records.iter().map(|r| Some(r.processed_rows)),
                    )
                    .owned_text("ERROR", text(|r| r.error.clone()))
                    .owned_text("SQL", text(|r| Some(r.sql.clone())))
                    .owned_text("DATABASE", text(|r| Some(r.database.clone())))
                    .owned_text(
                        "PARAMETERS",
                        text(|r| Some(serde_json::Value::Object(r.parameters.clone()).to_string())),
                    )
                    .owned_text(
                        "CONTEXT",
                        text(|r| {
                            Some(
                                serde_json::json!({
                                    "last": r.last,
                                    "skipped_batches": r.skipped_batches,
                                })
                                .to_string(),
                            )
                        }),
                    )
                    .owned_text("UPDATED_AT", text(|r| Some(r.updated_at.clone())))
                    .build()?;
                Ok(Some(SystemRows { batch, live: false }))
            }
            _ => Ok(None),
        }
    }
}
