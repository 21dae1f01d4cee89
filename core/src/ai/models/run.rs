//! The SQL side of models: `CREATE MODEL` (plans the training query, records the version and
//! starts the worker), `DROP MODEL`, `SHOW MODELS`, `DESCRIBE`, and the model tables MindsDB
//! shows (`information_schema.models`, `<project>.models`, the model-info row).

use std::sync::Arc;

use datafusion::arrow::array::{ArrayRef, BooleanArray, Float64Array, Int64Array, ListBuilder};
use datafusion::arrow::array::{RecordBatch, StringBuilder};
use datafusion::physical_plan::memory::MemoryStream;
use serde_json::{Map, Value};
use tokio_util::sync::CancellationToken;

use super::statements::{CreateModel, ModelStatement};
use crate::ai::agents::sandbox::ReadOnlyQuery;
use crate::catalog::models::{self, openai, ModelSpec, ModelVersion};
use crate::error::{Error, Result};
use crate::running::{Object, Registration, Running};
use crate::services::ml::worker::{self, Job};
use crate::sql::catalog::information_schema::SystemTable;
use crate::sql::catalog::snapshot::{Namespace, Snapshot};
use crate::sql::parse::Command;
use crate::sql::{Outcome, ResultContext, SqlRunner, TableResult};
use crate::tenant::TenantId;

impl SqlRunner {
    /// `CREATE MODEL`: checks and plans the training query, records version 1 as
    /// `generating`, starts training in the background and answers with the model-info row.
    pub(crate) async fn create_model(
        &self,
        tenant: TenantId,
        context: &ResultContext,
        statement: CreateModel,
    ) -> Result<Outcome> {
        let CreateModel {
            project,
            name,
            if_not_exists,
            from,
            predict,
            using,
        } = statement;
        self.outside_transaction("CREATE MODEL")?;
        let project = project.unwrap_or_else(|| context.db.clone());
        let [target] = predict.as_slice() else {
            return Err(Error::invalid(
                "A model predicts one column; name one after PREDICT",
            ));
        };
        // An ML engine's name stands for its handler and settings.
        let using = {
            let txn = self.services.store.read()?;
            crate::catalog::ml_engines::resolve(&txn, tenant, using)?
        };
        let engine = models::engine_of(&using)?;
        self.check_llm_url(&using)?;
        let ticket = self
            .services
            .admit(tenant, crate::admission::Work::Training)?;
        // Opened before the version is recorded, so that no version is left `generating`
        // without a training.
        let memory = self.training_memory(tenant)?;
        // An LLM model reads no rows; a FROM given to one is recorded and not run.
        let (job, (data_db, query)) = if engine == openai::ENGINE {
            (self.prompt_job(), from.unwrap_or_default())
        } else {
            let Some((data_db, query)) = from else {
                return Err(Error::invalid(
                    "The built-in engine learns from data: CREATE MODEL m FROM db (SELECT …) PREDICT col",
                ));
            };
            let rows = self
                .training_rows(tenant, &data_db, &query, target, memory.tag())
                .await?;
            (Job::Train(rows.stream), (data_db, query))
        };
        let spec = ModelSpec {
            project: project.to_ascii_lowercase(),
            name,
            predict: target.clone(),
            data_db,
            select_data_query: query,
            using,
        };
        let running = Arc::clone(&self.services.store.running);
        let created = self
            .services
            .store
            .write(move |txn| {
                let created = models::create(txn, tenant, &spec, if_not_exists)?;
                // Registered with the version, so a DROP MODEL after it stops its training.
                Ok(created.map(|model| (registration(&running, tenant, &model), model)))
            })
            .await?;
        let Some((registration, model)) = created else {
            return Ok(Outcome::Ok {
                affected_rows: None,
            });
        };
        let stops = self.training_stops(registration, memory);
        worker::spawn(
            Arc::clone(&self.services.store),
            tenant,
            model.clone(),
            job,
            ticket,
            stops,
        );
        table_outcome(model_info(&[model], false, None)?)
    }

    /// A training's memory account: a statement's budget (`query.statement_memory_mb`), within
    /// the user's share (`max_memory_mb`).
    fn training_memory(&self, tenant: TenantId) -> Result<Arc<crate::memory::Account>> {
        let parent = self.services.tenant_memory(tenant)?;
        // No slot left for an account: the process is running that many statements.
        let account =
            crate::memory::Account::open(self.services.config.statement_memory_bytes(), parent)
                .ok_or_else(|| {
                    Error::new(
                        crate::error::ErrorKind::Unavailable,
                        "too many statements are running to start a training; try again",
                    )
                })?;
        Ok(Arc::new(account))
    }

    /// What stops a training: dropping its model, for its query the statement deadline, and
    /// its memory account.
    fn training_stops(
        &self,
        running: Registration,
        memory: Arc<crate::memory::Account>,
    ) -> worker::Stops {
        worker::Stops {
            running,
            read_limit: self.services.config.statement_limit(None),
            memory,
        }
    }

    /// Refuses an LLM model's `base_url` (or `api_base`) that writes an address the egress
    /// policy refuses, when the statement runs; names are checked at every call.
    fn check_llm_url(&self, using: &Map<String, Value>) -> Result<()> {
        for key in ["base_url", "api_base"] {
            if let Some(url) = using.get(key).and_then(Value::as_str) {
                self.services
                    .net
                    .egress
                    .check_url_text(url)
                    .map_err(|e| Error::new(e.kind(), format!("'{key}' was {}", e.message())))?;
            }
        }
        Ok(())
    }

    /// `RETRAIN` / `FINETUNE`: answers with the new version's info row.
    pub(crate) async fn retrain_statement(
        &self,
        tenant: TenantId,
        project: String,
        name: String,
        from: Option<(String, String)>,
        using: Map<String, Value>,
    ) -> Result<Outcome> {
        let model = self
            .retrain_model(tenant, project, name, from, using)
            .await?;
        table_outcome(model_info(&[model], false, None)?)
    }

    /// A new version trained from `from` (database, query) or the latest version's query, with
    /// its options overlaid by `using`; status `generating`, training in the background. The
    /// built-in engine fits from scratch either way, so FINETUNE is a RETRAIN whose data is
    /// the given query.
    pub(crate) async fn retrain_model(
        &self,
        tenant: TenantId,
        project: String,
        name: String,
        from: Option<(String, String)>,
        using: Map<String, Value>,
    ) -> Result<ModelVersion> {
        self.outside_transaction("RETRAIN / FINETUNE")?;
        let snapshot = Snapshot::new(Arc::clone(&self.services.store), tenant)?;
        let latest = snapshot
            .models(Some(&project))?
            .into_iter()
            .rfind(|m| m.name.eq_ignore_ascii_case(&name))
            .ok_or_else(|| models::model_missing(&project, &name))?;
        drop(snapshot);
        self.check_llm_url(&using)?;
        let ticket = self
            .services
            .admit(tenant, crate::admission::Work::Training)?;
        // Opened before the version is recorded, so that no version is left `generating`
        // without a training.
        let memory = self.training_memory(tenant)?;
        let job = if latest.is_prompted() {
            self.prompt_job()
        } else {
            let (db, query) = from
                .clone()
                .unwrap_or_else(|| (latest.data_db.clone(), latest.select_data_query.clone()));
            let rows = self
                .training_rows(tenant, &db, &query, &latest.predict, memory.tag())
                .await?;
            Job::Train(rows.stream)
        };
        let running = Arc::clone(&self.services.store.running);
        let (registration, model) = self
            .services
            .store
            .write(move |txn| {
                let model = models::retrain(txn, tenant, &project, &name, from, using)?;
                Ok((registration(&running, tenant, &model), model))
            })
            .await?;
        let stops = self.training_stops(registration, memory);
        worker::spawn(
            Arc::clone(&self.services.store),
            tenant,
            model.clone(),
            job,
            ticket,
            stops,
        );
        Ok(model)
    }

    /// The worker's job for an LLM model, which describes itself with the default model's name
    /// when it names none.
    fn prompt_job(&self) -> Job {
        Job::Prompt {
            default_model: self.services.settings.llm().model_name,
        }
    }

    /// ``SET active p.m.`N` ``.
    pub(crate) async fn set_active_model(
        &self,
        tenant: TenantId,
        project: String,
        name: String,
        version: u32,
    ) -> Result<()> {
        self.services
            .store
            .write(move |txn| models::set_active(txn, tenant, &project, &name, version))
            .await?;
        Ok(())
    }

    /// Plans the training query (read-only, in `db`) under the training's account `training`
    /// and checks that it has the target column.
    async fn training_rows(
        &self,
        tenant: TenantId,
        db: &str,
        query: &str,
        target: &str,
        training: crate::memory::Tag,
    ) -> Result<ReadOnlyQuery> {
        // `FROM pg (SELECT …)` names a PostgreSQL datasource: its query is PostgreSQL's, run
        // there. Over a directory (`files` engine) the query is ours, naming its tables.
        let snapshot = Snapshot::new(Arc::clone(&self.services.store), tenant)?;
        let native = matches!(
            snapshot.namespace(db)?,
            Some(Namespace::Datasource(source)) if source.engine == crate::services::connectors::postgres::ENGINE
        );
        drop(snapshot);
        let query = if native {
            format!("SELECT * FROM {db} ({query})")
        } else {
            query.to_string()
        };
        // Planned and started under the training's account, not the statement's: tasks the plan
        // starts now (one per partition, feeding a coalesce) outlive the statement, whose end
        // stops the work of its own account.
        let planning =
            self.read_only_query(tenant, db, &query, |reference, resolved| match resolved {
                Some(_) => Ok(()),
                None => Err(Error::invalid(format!(
                    "The training query names '{reference}', which is not in this catalog"
                ))),
            });
        let rows = crate::memory::InScope::new(training, Box::pin(planning)).await?;
        let mut seen = std::collections::HashSet::new();
        if let Some(twice) = rows
            .column_names
            .iter()
            .find(|c| !seen.insert(c.to_ascii_lowercase()))
        {
            return Err(Error::invalid(format!(
                "The training query has two columns named '{twice}'; give them distinct names with AS"
            )));
        }
        if !rows
            .column_names
            .iter()
            .any(|c| c.eq_ignore_ascii_case(target))
        {
            return Err(Error::invalid(format!(
                "Column '{target}' to predict is not in the training data; it has: {}",
                rows.column_names.join(", ")
            )));
        }
        Ok(rows)
    }

    /// Runs one `CREATE MODEL` statement with `project` as the current database and returns
    /// the new version (MindsDB's `POST /api/projects/{p}/models {"query": …}`).
    pub(crate) async fn create_model_from_sql(
        &self,
        tenant: TenantId,
        project: &str,
        sql: &str,
    ) -> Result<ModelVersion> {
        let mut commands = self.parse_text(tenant, sql)?;
        let statement = match (commands.pop(), commands.is_empty()) {
            (Some(Command::Feature(statement)), true) => statement
                .into_any()
                .downcast::<ModelStatement>()
                .ok()
                .and_then(|statement| match *statement {
                    ModelStatement::CreateModel(create) => Some(create),
                    _ => None,
                }),
            _ => None,
        };
        let Some(statement) = statement else {
            return Err(Error::invalid(
                "The query must be one CREATE MODEL statement",
            ));
        };
        let target_project = statement
            .project
            .clone()
            .unwrap_or_else(|| project.to_ascii_lowercase());
        let name = statement.name.clone();
        let context = ResultContext {
            show_secrets: false,
            db: project.to_ascii_lowercase(),
        };
        self.create_model(tenant, &context, statement).await?;
        let snapshot = Snapshot::new(Arc::clone(&self.services.store), tenant)?;
        snapshot
            .models(Some(&target_project))?
            .into_iter()
            .rfind(|m| m.name.eq_ignore_ascii_case(&name))
            .ok_or_else(|| Error::internal("a model was created and then not found"))
    }

    /// Predicts for `rows` (a list of `{column: value}` objects, or that list as JSON text)
    /// with a complete version; returns the rows with the prediction filled in.
    pub(crate) async fn predict_rows(
        &self,
        tenant: TenantId,
        model: &ModelVersion,
        rows: &Value,
    ) -> Result<Value> {
        let snapshot = Snapshot::new(Arc::clone(&self.services.store), tenant)?;
        let model = super::model::PredictModel::of(&snapshot, model.clone())?;
        drop(snapshot);
        let limit = self.services.config.max_document_bytes();
        super::predict::predict_json(&model, rows, &self.services.connector(), limit).await
    }

    /// `DROP MODEL|PREDICTOR`: the dropped versions' trainings stop at once.
    pub(crate) async fn drop_model(
        &self,
        tenant: TenantId,
        project: String,
        name: String,
        version: Option<u32>,
        if_exists: bool,
    ) -> Result<()> {
        let object = match version {
            Some(v) => Object::model_version(tenant, &project, &name, v),
            None => Object::model(tenant, &project, &name),
        };
        self.services
            .store
            .write_dropping(object, move |txn| {
                models::drop_model(txn, tenant, &project, &name, version, if_exists)
            })
            .await?;
        Ok(())
    }

    /// `CREATE ML_ENGINE name FROM handler USING …`: the handler must be one of this build's
    /// model engines, and the settings ones it reads (an openai engine's endpoint is checked
    /// against the egress policy here, as a model's is).
    pub(crate) async fn create_ml_engine(
        &self,
        tenant: TenantId,
        name: String,
        handler: String,
        using: Map<String, Value>,
        if_not_exists: bool,
    ) -> Result<()> {
        let handler = handler.to_ascii_lowercase();
        if handler == openai::ENGINE {
            openai::check_settings(&using)?;
            self.check_llm_url(&using)?;
        } else if let Some(key) = using.keys().next() {
            return Err(Error::invalid(format!(
                "The {handler} engine takes no settings; got '{key}'"
            )));
        }
        self.services
            .store
            .write(move |txn| {
                crate::catalog::ml_engines::create(
                    txn,
                    tenant,
                    &name,
                    &handler,
                    using,
                    if_not_exists,
                )
            })
            .await?;
        Ok(())
    }

    /// `DROP ML_ENGINE [IF EXISTS] name`.
    pub(crate) async fn drop_ml_engine(
        &self,
        tenant: TenantId,
        name: String,
        if_exists: bool,
    ) -> Result<()> {
        self.services
            .store
            .write(move |txn| crate::catalog::ml_engines::drop(txn, tenant, &name, if_exists))
            .await
    }

    /// `SHOW MODELS [FROM p]`: the project's models table.
    pub(crate) fn show_models(&self, tenant: TenantId, project: &str) -> Result<Outcome> {
        let snapshot = Snapshot::new(Arc::clone(&self.services.store), tenant)?;
        if !matches!(snapshot.namespace(project)?, Some(Namespace::Project(_))) {
            return Err(Error::not_found(format!("Project '{project}' not found")));
        }
        table_outcome(model_info(&snapshot.models(Some(project))?, true, None)?)
    }

    /// `DESCRIBE [p.]m[.attribute]`: `None` when no model has that name (the caller then
    /// describes a table).
    pub(crate) fn describe_model(
        &self,
        tenant: TenantId,
        db: &str,
        parts: &[String],
    ) -> Result<Option<Outcome>> {
        let snapshot = Snapshot::new(Arc::clone(&self.services.store), tenant)?;
        // MindsDB resolves project.model.version, then project.model, then model; what is
        // left is the attribute.
        let mut candidates: Vec<(String, String, Option<u32>, Option<String>)> = Vec::new();
        match parts {
            [m] => candidates.push((db.into(), m.clone(), None, None)),
            [a, b] => {
                if let Ok(v) = b.parse::<u32>() {
                    candidates.push((db.into(), a.clone(), Some(v), None));
                }
                candidates.push((a.clone(), b.clone(), None, None));
                candidates.push((db.into(), a.clone(), None, Some(b.clone())));
            }
            [a, b, c] => {
                if let Ok(v) = c.parse::<u32>() {
                    candidates.push((a.clone(), b.clone(), Some(v), None));
                }
                candidates.push((a.clone(), b.clone(), None, Some(c.clone())));
            }
            _ => {}
        }
        for (project, name, version, attribute) in candidates {
            let Some(model) = snapshot.model(&project, &name, version)? else {
                if let Some(v) = version {
                    if snapshot.model(&project, &name, None)?.is_some() {
                        return Err(models::version_missing(&project, &name, v));
                    }
                }
                continue;
            };
            let batch = match attribute.as_deref().map(str::to_ascii_lowercase).as_deref() {
                None => model_info(&[model], false, Some(&models::ATTRIBUTES))?,
                Some("info") => describe_info(&model)?,
                Some("features") => describe_features(&model)?,
                Some("model") => describe_candidates(&model)?,
                Some(other) => return Err(models::attribute_missing(&model.name, other)),
            };
            return table_outcome(batch).map(Some);
        }
        Ok(None)
    }
}

/// Registers the training of `model` with the work running for objects.
fn registration(running: &Arc<Running>, tenant: TenantId, model: &ModelVersion) -> Registration {
    let object = Object::model_version(tenant, &model.project, &model.name, model.version);
    running.register(&object, CancellationToken::new())
}

fn table_outcome(batch: RecordBatch) -> Result<Outcome> {
    let column_names = crate::sql::catalog::information_schema::display_names(&batch.schema());
    let schema = batch.schema();
    let stream = MemoryStream::try_new(vec![batch], schema, None)?;
    Ok(Outcome::Table(TableResult {
        column_names,
        stream: Box::pin(stream),
    }))
}

/// MindsDB's model-info table: the row `CREATE MODEL` answers with (`full` = false; its
/// TRAINING_OPTIONS a Python repr), or the rows of `models` tables (`full`: training progress
/// columns too, TRAINING_OPTIONS as JSON). With `tables`, DESCRIBE's leading `TABLES` column.
pub(crate) fn model_info(
    rows: &[ModelVersion],
    full: bool,
    tables: Option<&[&str]>,
) -> Result<RecordBatch> {
    let mut table = SystemTable::default();
    if let Some(tables) = tables {
        let mut list = ListBuilder::new(StringBuilder::new());
        for _ in rows {
            for t in tables {
                list.values().append_value(t);
            }
            list.append(true);
        }
        table = table.column("TABLES", Arc::new(list.finish()) as ArrayRef);
    }
    let text = |f: &dyn Fn(&ModelVersion) -> Option<String>| -> Vec<Option<String>> {
        rows.iter().map(f).collect()
    };
    let options = |m: &ModelVersion| {
        if full {
            m.training_options().to_string()
        } else {
            let mut shown = m.training_options();
            shown["__mdb_sql_task"] = Value::Null;
            models::python_repr(&shown)
        }
    };
    table = table
        .owned_text("NAME", text(&|m| Some(m.name.clone())))
        .owned_text("ENGINE", text(&|m| Some(m.engine.clone())))
        .owned_text("PROJECT", text(&|m| Some(m.project.clone())))
        .column(
            "ACTIVE",
            Arc::new(
                rows.iter()
                    .map(|m| Some(m.active))
                    .collect::<BooleanArray>(),
            ),
        )
        .column(
            "VERSION",
            Arc::new(
                rows.iter()
                    .map(|m| Some(i64::from(m.version)))
                    .collect::<Int64Array>(),
            ),
        )
        .owned_text("STATUS", text(&|m| Some(m.status.as_str().to_string())))
        .column(
            "ACCURACY",
            Arc::new(
                rows.iter()
                    .map(ModelVersion::accuracy)
                    .collect::<Float64Array>(),
            ),
        )
        .owned_text("PREDICT", text(&|m| Some(m.predict.clone())))
        .owned_text("UPDATE_STATUS", text(&|_| Some("up_to_date".into())))
        .owned_text(
            "MINDSDB_VERSION",
            text(&|_| Some(env!("CARGO_PKG_VERSION").to_string())),
        )
        .owned_text("ERROR", text(&|m| m.error.clone()))
        .owned_text(
            "SELECT_DATA_QUERY",
            text(&|m| Some(m.select_data_query.clone())),
        )
        .owned_text("TRAINING_OPTIONS", text(&|m| Some(options(m))))
        .owned_text("TAG", text(&|_| None));
    if full {
        let number = |f: &dyn Fn(&ModelVersion) -> i64| -> ArrayRef {
            Arc::new(rows.iter().map(|m| Some(f(m))).collect::<Int64Array>())
        };
        table = table
            .column(
                "CURRENT_TRAINING_PHASE",
                number(&|m| i64::from(m.current_phase)),
            )
            .column(
                "TOTAL_TRAINING_PHASES",
                number(&|m| i64::from(m.total_phases)),
            )
            .owned_text(
                "TRAINING_PHASE_NAME",
                text(&|m| Some(m.phase_name.clone()).filter(|p| !p.is_empty())),
            )
            .owned_text("CREATED_AT", text(&|m| Some(m.created_at.clone())))
            .column(
                "TRAINING_TIME",
                Arc::new(
                    rows.iter()
                        .map(|m| m.training_time)
                        .collect::<Float64Array>(),
                ),
            );
    }
    table.build()
}

/// `DESCRIBE p.m.info`: the seed's describe record, one row (empty until training completes).
fn describe_info(model: &ModelVersion) -> Result<RecordBatch> {
    let d = model.description.as_ref();
    let json = |f: &dyn Fn(&models::Description) -> Value| d.map(|d| f(d).to_string());
    SystemTable::default()
        .owned_text(
            "ACCURACIES",
            vec![json(&|d| serde_json::json!(d.accuracies))],
        )
        .owned_text(
            "COLUMN_IMPORTANCES",
            vec![json(&|d| serde_json::json!(d.column_importances))],
        )
        .owned_text("INPUTS", vec![json(&|d| serde_json::json!(d.inputs))])
        .owned_text("OUTPUTS", vec![json(&|d| serde_json::json!(d.outputs))])
        .owned_text("MODEL", vec![d.map(|d| d.model.clone())])
        .build()
}

/// `DESCRIBE p.m.model`: every candidate the search tried (lightwood's model table): its
/// name, out-of-fold score, seconds, whether it was selected, and why it failed if it did.
fn describe_candidates(model: &ModelVersion) -> Result<RecordBatch> {
    let rows = model.candidates();
    let score_name = model
        .description
        .as_ref()
        .and_then(|d| d.accuracies.keys().next().cloned());
    SystemTable::default()
        .owned_text("NAME", rows.iter().map(|c| Some(c.name.clone())).collect())
        .column(
            "PERFORMANCE",
            Arc::new(rows.iter().map(|c| c.score).collect::<Float64Array>()),
        )
        .column(
            "TRAINING_TIME",
            Arc::new(
                rows.iter()
                    .map(|c| Some(c.seconds))
                    .collect::<Float64Array>(),
            ),
        )
        .column(
            "SELECTED",
            Arc::new(
                rows.iter()
                    .map(|c| Some(c.selected))
                    .collect::<BooleanArray>(),
            ),
        )
        .owned_text(
            "ACCURACY_FUNCTIONS",
            rows.iter().map(|_| score_name.clone()).collect(),
        )
        .owned_text("ERROR", rows.iter().map(|c| c.error.clone()).collect())
        .build()
}

/// `DESCRIBE p.m.features`: each column training saw, its inferred type, importance and role.
fn describe_features(model: &ModelVersion) -> Result<RecordBatch> {
    let rows = model.features();
    SystemTable::default()
        .owned_text(
            "COLUMN",
            rows.iter().map(|r| Some(r.column.clone())).collect(),
        )
        .owned_text("TYPE", rows.iter().map(|r| Some(r.kind.clone())).collect())
        .column(
            "IMPORTANCE",
            Arc::new(rows.iter().map(|r| r.importance).collect::<Float64Array>()),
        )
        .owned_text(
            "ROLE",
            rows.iter().map(|r| Some(r.role.to_string())).collect(),
        )
        .build()
}
