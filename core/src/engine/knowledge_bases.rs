//! The facade's knowledge bases, with MindsDB's REST bodies (`/api/projects/{p}/knowledge_bases`):
//! create, list, get, delete, change settings and insert documents given as rows or as a query. Searching is SQL
//! (`SELECT … FROM p.kb WHERE content = '…'`), as `mindsdb_sdk`'s `kb.find` sends it.

use std::sync::Arc;

use datafusion::arrow::array::RecordBatch;
use datafusion::arrow::compute::concat_batches;
use datafusion::arrow::json::reader::infer_json_schema_from_iterator;
use datafusion::arrow::json::ReaderBuilder;
use serde_json::{Map, Value};

use crate::ai::knowledge_bases::statements::DocumentSource;
use crate::catalog::knowledge_bases::{self, KnowledgeBase};
use crate::engine::{require_project, Engine};
use crate::error::{Error, Result};
use crate::progress::ProgressCallback;
use crate::sql::{Outcome, QueryRequest, QueryResult, ResultContext};

/// Rows one REST insert may carry (mindsdb_sdk sends at most 1,000 per request).
const MAX_ROWS: usize = 100_000;

impl Engine {
    /// Creates a knowledge base in `project` from MindsDB's body (`{"name", "embedding_model",
    /// "content_columns", "metadata_columns", "id_column", "preprocessing", "params"}`).
    /// Errors: an unknown project is [`ErrorKind::NotFound`](crate::ErrorKind), a taken name
    /// `Conflict`, a bad parameter `InvalidInput` naming it.
    pub async fn create_knowledge_base(&self, project: &str, body: Value) -> Result<KnowledgeBase> {
        let tenant = self.tenant;
        let Value::Object(body) = body else {
            return Err(Error::invalid("\"knowledge_base\" must be an object"));
        };
        self.list_knowledge_bases(project)?;
        let kb =
            KnowledgeBase::from_body(project, body, &self.inner.services.settings.embedding())?;
        self.inner.sql.store_knowledge_base(tenant, kb, false).await
    }

    /// The knowledge bases of `project`, by name.
    pub fn list_knowledge_bases(&self, project: &str) -> Result<Vec<KnowledgeBase>> {
        let txn = self.inner.services.store.read()?;
        require_project(&txn, self.tenant, project)?;
        knowledge_bases::in_project(&txn, self.tenant, project)
    }

    /// One knowledge base by name (case-insensitive).
    pub fn get_knowledge_base(&self, project: &str, name: &str) -> Result<KnowledgeBase> {
        let txn = self.inner.services.store.read()?;
        require_project(&txn, self.tenant, project)?;
        knowledge_bases::named(&txn, self.tenant, project, name)?
            .ok_or_else(|| knowledge_bases::missing(name))
    }

    /// Deletes a knowledge base and its documents.
    pub async fn delete_knowledge_base(&self, project: &str, name: &str) -> Result<()> {
        let tenant = self.tenant;
        self.get_knowledge_base(project, name)?;
        self.inner
            .sql
            .drop_knowledge_base(tenant, project, name, false)
            .await
    }

    /// Changes a knowledge base as MindsDB's PUT body says: settings in `"params"`
    /// (`embedding_model`, `reranking_model`, `content_columns`, `metadata_columns`,
    /// `id_column`, `preprocessing`; also `"preprocessing"` beside it), applied first as
    /// `ALTER KNOWLEDGE_BASE` applies them, then documents from `"rows"` (`[{column: value,
    /// …}, …]`) or `"query"` (a SELECT run in `project`), replacing those with the same ids.
    /// Returns the documents inserted; the insert lands whole or not at all. `progress` is told
    /// how far it has come after each embedding request and at the end, and stops it by
    /// returning false; `information_schema.knowledge_base_inserts` shows the same.
    pub async fn insert_into_knowledge_base(
        &self,
        project: &str,
        name: &str,
        body: Value,
        progress: Option<ProgressCallback>,
    ) -> Result<u64> {
        self.get_knowledge_base(project, name)?;
        let mut settings: Vec<(String, Value)> = match body.get("params") {
            Some(Value::Object(params)) => params
                .iter()
                .map(|(k, v)| (k.to_ascii_lowercase(), v.clone()))
                .collect(),
            None | Some(Value::Null) => Vec::new(),
            Some(_) => return Err(Error::invalid("\"params\" must be an object")),
        };
        if let Some(preprocessing) = body.get("preprocessing").filter(|v| !v.is_null()) {
            settings.push(("preprocessing".to_string(), preprocessing.clone()));
        }
        let source = match (body.get("rows"), body.get("query")) {
            (Some(Value::Array(rows)), None) => Some(DocumentSource::Rows(rows_batch(rows)?)),
            (None, Some(Value::String(query))) => Some(DocumentSource::Select(query.clone())),
            (None, None) if !settings.is_empty() => None,
            (Some(_), Some(_)) => {
                return Err(Error::invalid(
                    "Give \"rows\" or \"query\" in \"knowledge_base\", not both",
                ))
            }
            _ => {
                return Err(Error::invalid(
                    "Must provide \"rows\" (a list of objects), \"query\" (a SELECT) or \"params\" (settings to change) in \"knowledge_base\"",
                ))
            }
        };
        if !settings.is_empty() {
            let (tenant, project, name) = (self.tenant, project.to_string(), name.to_string());
            let egress = self.inner.services.net.egress.clone();
            self.inner
                .services
                .store
                .write(move |txn| {
                    knowledge_bases::alter(txn, tenant, &project, &name, settings, &egress)
                })
                .await?;
        }
        let Some(source) = source else {
            return Ok(0);
        };
        // A statement like any: admitted among the user's (one place), stopped (writing
        // nothing) at its deadline, an interrupt or its memory budget.
        let (control, _ticket) = self.statement_control()?;
        let context = ResultContext {
            show_secrets: false,
            db: project.to_ascii_lowercase(),
        };
        let insert = self.inner.sql.insert_documents(
            self.tenant,
            &context,
            project,
            name,
            &source,
            progress,
            Default::default(),
        );
        control.run(insert).await
    }
}

impl Engine {
    /// Inserts documents given as Arrow batches (a DataFrame, an Arrow table) into the
    /// knowledge base `project.name`, columns by name; see [`Engine::insert_into_knowledge_base`].
    pub async fn insert_batches_into_knowledge_base(
        &self,
        project: &str,
        name: &str,
        batches: Vec<RecordBatch>,
        progress: Option<ProgressCallback>,
    ) -> Result<u64> {
        self.get_knowledge_base(project, name)?;
        let Some(first) = batches.first() else {
            return Ok(0);
        };
        let batch = concat_batches(&first.schema(), &batches)?;
        let (control, _ticket) = self.statement_control()?;
        let context = ResultContext {
            show_secrets: false,
            db: project.to_ascii_lowercase(),
        };
        let source = DocumentSource::Rows(batch);
        let insert = self.inner.sql.insert_documents(
            self.tenant,
            &context,
            project,
            name,
            &source,
            progress,
            Default::default(),
        );
        control.run(insert).await
    }

    /// Searches the knowledge base `project.name` for `text`: the `limit` nearest chunks (10
    /// when `None`) among those whose columns equal `filters` (a value, a list of values to be
    /// in, or null), as `SELECT * FROM kb WHERE content = … AND … LIMIT …` would. Filters name
    /// the knowledge base's columns; another name is [`ErrorKind::InvalidInput`](crate::ErrorKind).
    pub async fn search_knowledge_base(
        &self,
        project: &str,
        name: &str,
        text: &str,
        filters: &Map<String, Value>,
        limit: Option<u64>,
    ) -> Result<QueryResult> {
        let kb = self.get_knowledge_base(project, name)?;
        let columns = self.knowledge_base_columns(project, &kb).await?;
        let quoted = |s: &str| format!("`{}`", s.replace('`', "``"));
        let mut sql = format!(
            "SELECT * FROM {}.{} WHERE content = :question",
            quoted(&kb.project),
            quoted(&kb.name)
        );
        let mut request = QueryRequest::new("").with_param("question", Value::String(text.into()));
        for (i, (column, value)) in filters.iter().enumerate() {
            let Some(column) = columns.iter().find(|c| c.eq_ignore_ascii_case(column)) else {
                return Err(Error::invalid(format!(
                    "Knowledge base '{}' has no column '{column}' to filter on (its columns: {})",
                    kb.name,
                    columns.join(", ")
                )));
            };
            let param = format!("filter{i}");
            let condition = match value {
                Value::Null => format!(" AND {} IS NULL", quoted(column)),
                Value::Array(_) => format!(" AND {} IN :{param}", quoted(column)),
                _ => format!(" AND {} = :{param}", quoted(column)),
            };
            sql.push_str(&condition);
            if !value.is_null() {
                request = request.with_param(param, value.clone());
            }
        }
        if let Some(limit) = limit {
            sql.push_str(&format!(" LIMIT {limit}"));
        }
        request.query = sql;
        Ok(self.query(request.with_db(kb.project.clone())).await)
    }

    /// The columns a search of `kb` shows.
    async fn knowledge_base_columns(
        &self,
        project: &str,
        kb: &KnowledgeBase,
    ) -> Result<Vec<String>> {
        let quoted = |s: &str| format!("`{}`", s.replace('`', "``"));
        let request = QueryRequest::new(format!(
            "SELECT * FROM {}.{} LIMIT 0",
            quoted(project),
            quoted(&kb.name)
        ));
        match self.query(request).await.outcome {
            Outcome::Table(table) => Ok(table.column_names),
            Outcome::Error(e) => Err(e),
            Outcome::Ok { .. } => Err(Error::internal("a knowledge base read as no table")),
        }
    }
}

/// JSON rows as one batch, columns typed as their values are (text where they are mixed).
fn rows_batch(rows: &[Value]) -> Result<RecordBatch> {
    if rows.is_empty() {
        return Err(Error::invalid("\"rows\" is empty"));
    }
    if rows.len() > MAX_ROWS {
        return Err(Error::invalid(format!(
            "\"rows\" holds {} rows; send at most {MAX_ROWS} per request",
            rows.len()
        )));
    }
    let objects: Vec<&Map<String, Value>> = rows
        .iter()
        .map(|row| {
            row.as_object()
                .ok_or_else(|| Error::invalid("Every item of \"rows\" must be an object"))
        })
        .collect::<Result<_>>()?;
    let unreadable = |e: datafusion::arrow::error::ArrowError| {
        Error::invalid(format!("\"rows\" cannot be read as a table: {e}"))
    };
    let schema =
        infer_json_schema_from_iterator(objects.iter().map(|o| Ok(Value::Object((*o).clone()))))
            .map_err(unreadable)?;
    let mut decoder = ReaderBuilder::new(Arc::new(schema))
        .with_coerce_primitive(true)
        .with_batch_size(rows.len())
        .build_decoder()
        .map_err(unreadable)?;
    decoder.serialize(&objects).map_err(unreadable)?;
    decoder
        .flush()
        .map_err(unreadable)?
        .ok_or_else(|| Error::invalid("\"rows\" is empty"))
}
