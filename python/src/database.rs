//! `Database`: one open engine, shared by the Python connection and every thread using it, or
//! a hosted user's handle on it (`as_user`).

use std::path::PathBuf;
use std::sync::{Arc, Mutex, MutexGuard, Weak};

use arrow::ffi_stream::{ArrowArrayStreamReader, FFI_ArrowArrayStream};
use arrow::record_batch::RecordBatchReader;
use mindlite::{
    Config, Engine, FileFormat, InsertProgress, LoadMode, ProgressCallback, QueryRequest,
};
use pyo3::prelude::*;
use pyo3::types::PyCapsule;

use crate::query::{Query, Reading};
use crate::{convert, wait, DataError, Failure, Fallible, InterfaceError};

/// What a connection shares with its results: the engine while it is open, and the results'
/// reading state, which closing empties, so that after `close()` nothing holds the file open
/// and it can be opened again at once.
pub(crate) struct Shared {
    engine: Mutex<Option<Engine>>,
    readings: Mutex<Vec<Weak<Mutex<Reading>>>>,
}

impl Shared {
    /// The engine, or InterfaceError once the connection is closed.
    pub(crate) fn engine(&self) -> PyResult<Engine> {
        lock(&self.engine)
            .clone()
            .ok_or_else(|| InterfaceError::new_err("The connection is closed"))
    }

    pub(crate) fn is_closed(&self) -> bool {
        lock(&self.engine).is_none()
    }

    /// Remembers a result's reading state, for `close()` to empty.
    pub(crate) fn track(&self, reading: &Arc<Mutex<Reading>>) {
        let mut readings = lock(&self.readings);
        readings.retain(|r| r.strong_count() > 0);
        readings.push(Arc::downgrade(reading));
    }

    fn close(&self) -> Option<Engine> {
        let engine = lock(&self.engine).take();
        for reading in lock(&self.readings).drain(..) {
            if let Some(reading) = reading.upgrade() {
                lock(&reading).clear();
            }
        }
        engine
    }
}

/// An open database.
#[pyclass(frozen, module = "mindlite._native")]
pub(crate) struct Database {
    shared: Arc<Shared>,
    /// The project `USE` switched to; one-part names resolve there.
    current_db: Mutex<Option<String>>,
}

pub(crate) fn lock<T>(mutex: &Mutex<T>) -> MutexGuard<'_, T> {
    // The guarded values stay consistent even if a holder panicked.
    mutex
        .lock()
        .unwrap_or_else(|poisoned| poisoned.into_inner())
}

impl Database {
    fn over(engine: Engine) -> Database {
        Database {
            shared: Arc::new(Shared {
                engine: Mutex::new(Some(engine)),
                readings: Mutex::new(Vec::new()),
            }),
            current_db: Mutex::new(None),
        }
    }

    fn engine(&self) -> PyResult<Engine> {
        self.shared.engine()
    }
}

#[pymethods]
impl Database {
    /// Opens (creating when missing) the database file at `path`, or a fresh in-memory one;
    /// `config` is TOML or JSON text.
    #[new]
    #[pyo3(signature = (path=None, config=None))]
    fn new(py: Python<'_>, path: Option<PathBuf>, config: Option<&str>) -> Fallible<Self> {
        let config = match config {
            Some(text) => Config::parse(text)?,
            None => Config::default(),
        };
        let engine = py.detach(|| match path {
            Some(path) => Engine::open(path, config),
            None => Engine::open_in_memory(config),
        })?;
        Ok(Database::over(engine))
    }

    /// Stops every statement running on this connection, from any thread: each raises
    /// OperationalError ("The statement was interrupted"); later ones run normally.
    fn interrupt(&self) -> Fallible<()> {
        self.engine()?.interrupt();
        Ok(())
    }

    /// The same database as the user an API key belongs to (hosted edition): a connection of
    /// its own that sees and changes only that user's objects. UnauthorizedError for an
    /// unknown or revoked key, ForbiddenError for a disabled user's.
    fn as_user(&self, api_key: &str) -> Fallible<Database> {
        let user = self.engine()?.as_user(api_key)?;
        Ok(Database::over(user))
    }

    /// Runs `sql` with `params` (a mapping of `:name` values) in `db`, or in the current
    /// project, which a `USE` then changes; `timeout` (seconds) stops it sooner than the
    /// configured statement time limit.
    #[pyo3(signature = (sql, params=None, db=None, timeout=None))]
    fn execute(
        &self,
        py: Python<'_>,
        sql: &str,
        params: Option<&Bound<'_, PyAny>>,
        db: Option<String>,
        timeout: Option<f64>,
    ) -> Fallible<Query> {
        let engine = self.engine()?;
        let mut request = QueryRequest::new(sql);
        if let Some(seconds) = timeout {
            let limit = std::time::Duration::try_from_secs_f64(seconds)
                .ok()
                .filter(|limit| !limit.is_zero())
                .ok_or_else(|| {
                    pyo3::exceptions::PyValueError::new_err(
                        "timeout must be a positive number of seconds",
                    )
                })?;
            request = request.with_timeout(limit);
        }
        if let Some(params) = params.filter(|p| !p.is_none()) {
            request = convert::bind(request, params)?;
        }
        let remember = db.is_none();
        let sent = db.or_else(|| lock(&self.current_db).clone());
        if let Some(db) = &sent {
            request = request.with_db(db.clone());
        }
        let runner = engine.clone();
        let result = wait(py, &engine, async move { runner.query(request).await })?;
        // Only a statement that moved (a `USE`) changes the current project: one that merely
        // finished later than another thread's `USE` must not undo it.
        let moved = match &sent {
            Some(db) => *db != result.context.db,
            None => result.context.db != engine.config().query.default_project.to_ascii_lowercase(),
        };
        if remember && moved {
            *lock(&self.current_db) = Some(result.context.db.clone());
        }
        Ok(Query::new(&self.shared, result)?)
    }

    /// Loads an Arrow C stream (a PyCapsule named `arrow_array_stream`) into `table` in one
    /// transaction; `mode` is `append`, `create` or `replace`. Returns the rows written.
    #[pyo3(signature = (table, stream, mode, db=None))]
    fn load(
        &self,
        py: Python<'_>,
        table: &str,
        stream: &Bound<'_, PyAny>,
        mode: &str,
        db: Option<String>,
    ) -> Fallible<u64> {
        let engine = self.engine()?;
        let mode = match mode {
            "append" => LoadMode::Append,
            "create" => LoadMode::Create,
            "replace" => LoadMode::Replace,
            other => {
                return Err(InterfaceError::new_err(format!(
                    "mode must be 'append', 'create' or 'replace', not '{other}'"
                ))
                .into())
            }
        };
        let (schema, batches) = read_stream(py, stream)?;
        let db = db.or_else(|| lock(&self.current_db).clone());
        let (runner, table) = (engine.clone(), table.to_string());
        let loading = async move {
            runner
                .load(db.as_deref(), &table, schema, batches, mode)
                .await
        };
        wait(py, &engine, loading)?.map_err(Failure::from)
    }

    /// The projects as JSON text: `[{"id", "name", "created_at"}, …]`.
    fn projects(&self) -> Fallible<String> {
        let projects = self.engine()?.list_projects()?;
        Ok(serde_json::to_string(&projects).expect("projects serialize"))
    }

    /// One project as JSON text; ProgrammingError when there is none of that name.
    fn project(&self, name: &str) -> Fallible<String> {
        let project = self.engine()?.get_project(name)?;
        Ok(serde_json::to_string(&project).expect("a project serializes"))
    }

    /// The knowledge bases of `project` as JSON text, in MindsDB's REST shape.
    fn knowledge_bases(&self, project: &str) -> Fallible<String> {
        let kbs = self.engine()?.list_knowledge_bases(project)?;
        let list: Vec<serde_json::Value> = kbs.iter().map(|kb| kb.wire()).collect();
        Ok(serde_json::Value::Array(list).to_string())
    }

    /// One knowledge base as JSON text.
    fn knowledge_base(&self, project: &str, name: &str) -> Fallible<String> {
        Ok(self
            .engine()?
            .get_knowledge_base(project, name)?
            .wire()
            .to_string())
    }

    /// Creates a knowledge base from MindsDB's body (JSON text); returns it as JSON text.
    fn create_knowledge_base(&self, py: Python<'_>, project: &str, body: &str) -> Fallible<String> {
        let engine = self.engine()?;
        let body = json_arg(body, "knowledge_base")?;
        let (runner, project) = (engine.clone(), project.to_string());
        let kb = wait(py, &engine, async move {
            runner.create_knowledge_base(&project, body).await
        })??;
        Ok(kb.wire().to_string())
    }

    /// Drops a knowledge base and its documents.
    fn drop_knowledge_base(&self, py: Python<'_>, project: &str, name: &str) -> Fallible<()> {
        let engine = self.engine()?;
        let (runner, project, name) = (engine.clone(), project.to_string(), name.to_string());
        wait(py, &engine, async move {
            runner.delete_knowledge_base(&project, &name).await
        })??;
        Ok(())
    }

    /// Inserts documents given as MindsDB's PUT body (JSON text: `{"rows": [...]}` or
    /// `{"query": "SELECT …"}`); returns the documents inserted.
    #[pyo3(signature = (project, name, body, progress=None))]
    fn insert_knowledge_base_json(
        &self,
        py: Python<'_>,
        project: &str,
        name: &str,
        body: &str,
        progress: Option<Py<PyAny>>,
    ) -> Fallible<u64> {
        let engine = self.engine()?;
        let body = json_arg(body, "documents")?;
        let (runner, project, name) = (engine.clone(), project.to_string(), name.to_string());
        let (progress, raised) = progress_callback(progress);
        let inserted = wait(py, &engine, async move {
            runner
                .insert_into_knowledge_base(&project, &name, body, progress)
                .await
        })?;
        reraise(&raised)?;
        Ok(inserted?)
    }

    /// Inserts documents given as an Arrow C stream capsule; returns the documents inserted.
    #[pyo3(signature = (project, name, stream, progress=None))]
    fn insert_knowledge_base_arrow(
        &self,
        py: Python<'_>,
        project: &str,
        name: &str,
        stream: &Bound<'_, PyAny>,
        progress: Option<Py<PyAny>>,
    ) -> Fallible<u64> {
        let engine = self.engine()?;
        let (_, batches) = read_stream(py, stream)?;
        let (runner, project, name) = (engine.clone(), project.to_string(), name.to_string());
        let (progress, raised) = progress_callback(progress);
        let inserted = wait(py, &engine, async move {
            runner
                .insert_batches_into_knowledge_base(&project, &name, batches, progress)
                .await
        })?;
        reraise(&raised)?;
        Ok(inserted?)
    }

    /// Searches a knowledge base; `filters` is a JSON object of column → value (or list).
    #[pyo3(signature = (project, name, text, filters, limit=None))]
    fn search_knowledge_base(
        &self,
        py: Python<'_>,
        project: &str,
        name: &str,
        text: &str,
        filters: &str,
        limit: Option<u64>,
    ) -> Fallible<Query> {
        let engine = self.engine()?;
        let filters = match json_arg(filters, "filters")? {
            serde_json::Value::Object(filters) => filters,
            serde_json::Value::Null => serde_json::Map::new(),
            _ => return Err(InterfaceError::new_err("filters must be a dict").into()),
        };
        let (runner, project, name, text) = (
            engine.clone(),
            project.to_string(),
            name.to_string(),
            text.to_string(),
        );
        let result = wait(py, &engine, async move {
            runner
                .search_knowledge_base(&project, &name, &text, &filters, limit)
                .await
        })??;
        Ok(Query::new(&self.shared, result)?)
    }

    /// The agents of `project` as JSON text, in MindsDB's shape.
    fn agents(&self, project: &str) -> Fallible<String> {
        let agents = self.engine()?.list_agents(project)?;
        let list: Vec<serde_json::Value> = agents.iter().map(|a| a.to_wire_json()).collect();
        Ok(serde_json::Value::Array(list).to_string())
    }

    /// One agent as JSON text.
    fn agent(&self, project: &str, name: &str) -> Fallible<String> {
        let agent = self.engine()?.get_agent(project, name)?;
        Ok(agent.to_wire_json().to_string())
    }

    /// Creates an agent from MindsDB's body (JSON text); returns it as JSON text.
    fn create_agent(&self, py: Python<'_>, project: &str, spec: &str) -> Fallible<String> {
        let engine = self.engine()?;
        let spec = json_arg(spec, "agent")?;
        let (runner, project) = (engine.clone(), project.to_string());
        let agent = wait(py, &engine, async move {
            runner.create_agent(&project, spec).await
        })??;
        Ok(agent.to_wire_json().to_string())
    }

    /// Updates an agent the way MindsDB's PUT does; returns it as JSON text.
    fn update_agent(
        &self,
        py: Python<'_>,
        project: &str,
        name: &str,
        changes: &str,
    ) -> Fallible<String> {
        let engine = self.engine()?;
        let changes = json_arg(changes, "changes")?;
        let (runner, project, name) = (engine.clone(), project.to_string(), name.to_string());
        let agent = wait(py, &engine, async move {
            runner.update_agent(&project, &name, changes).await
        })??;
        Ok(agent.to_wire_json().to_string())
    }

    /// Deletes an agent.
    fn delete_agent(&self, py: Python<'_>, project: &str, name: &str) -> Fallible<()> {
        let engine = self.engine()?;
        let (runner, project, name) = (engine.clone(), project.to_string(), name.to_string());
        wait(py, &engine, async move {
            runner.delete_agent(&project, &name).await
        })?
        .map_err(Failure::from)
    }

    /// The jobs of `project` as JSON text, as MindsDB's REST API lists them.
    fn jobs(&self, project: &str) -> Fallible<String> {
        let jobs = self.engine()?.list_jobs(project)?;
        Ok(serde_json::Value::Array(jobs).to_string())
    }

    /// One job as JSON text.
    fn job(&self, project: &str, name: &str) -> Fallible<String> {
        Ok(self.engine()?.get_job(project, name)?.to_string())
    }

    /// Creates a job from MindsDB's body (JSON text); returns it as JSON text.
    fn create_job(&self, py: Python<'_>, project: &str, spec: &str) -> Fallible<String> {
        let engine = self.engine()?;
        let spec = json_arg(spec, "job")?;
        let (runner, project) = (engine.clone(), project.to_string());
        let job = wait(py, &engine, async move {
            runner.create_job(&project, spec).await
        })??;
        Ok(job.to_string())
    }

    /// Deletes a job.
    fn delete_job(&self, py: Python<'_>, project: &str, name: &str) -> Fallible<()> {
        let engine = self.engine()?;
        let (runner, project, name) = (engine.clone(), project.to_string(), name.to_string());
        wait(py, &engine, async move {
            runner.delete_job(&project, &name).await
        })?
        .map_err(Failure::from)
    }

    /// A job's runs as JSON text, oldest first.
    fn job_history(&self, project: &str, name: &str) -> Fallible<String> {
        let runs = self.engine()?.job_history(project, name)?;
        Ok(serde_json::Value::Array(runs).to_string())
    }

    /// Asks an agent; `messages` is JSON text. Returns MindsDB's completion body as JSON text.
    /// The GIL is released while the agent works, and Ctrl-C stops it.
    fn ask_agent(
        &self,
        py: Python<'_>,
        project: &str,
        name: &str,
        messages: &str,
    ) -> Fallible<String> {
        let engine = self.engine()?;
        let messages = json_arg(messages, "messages")?;
        let (runner, project, name) = (engine.clone(), project.to_string(), name.to_string());
        let answer = wait(py, &engine, async move {
            runner.ask_agent(&project, &name, &messages).await
        })??;
        Ok(answer.to_wire_json().to_string())
    }

    /// Stores `data` (a file's bytes) as the table `files.<name>`; returns the rows.
    #[pyo3(signature = (name, data, format=None, file_name=None))]
    fn upload_file(
        &self,
        py: Python<'_>,
        name: &str,
        data: Vec<u8>,
        format: Option<&str>,
        file_name: Option<String>,
    ) -> Fallible<u64> {
        let engine = self.engine()?;
        let format = format.map(FileFormat::parse).transpose()?;
        let (runner, name) = (engine.clone(), name.to_string());
        wait(py, &engine, async move {
            runner
                .upload_file(&name, data, format, file_name.as_deref())
                .await
        })?
        .map_err(Failure::from)
    }

    /// Fetches the file at `url` and stores it as `files.<name>`; returns the rows.
    #[pyo3(signature = (name, url, file_name=None))]
    fn upload_url(
        &self,
        py: Python<'_>,
        name: &str,
        url: &str,
        file_name: Option<String>,
    ) -> Fallible<u64> {
        let engine = self.engine()?;
        let (runner, name, url) = (engine.clone(), name.to_string(), url.to_string());
        wait(py, &engine, async move {
            runner.upload_url(&name, &url, file_name.as_deref()).await
        })?
        .map_err(Failure::from)
    }

    /// The uploaded files as JSON text: `[{"name", "row_count", "columns"}]`.
    fn files(&self) -> Fallible<String> {
        let files = self.engine()?.list_files()?;
        let list: Vec<serde_json::Value> = files.iter().map(|f| f.to_wire_json()).collect();
        Ok(serde_json::Value::Array(list).to_string())
    }

    /// Removes the uploaded file `name`.
    fn delete_file(&self, py: Python<'_>, name: &str) -> Fallible<()> {
        let engine = self.engine()?;
        let (runner, name) = (engine.clone(), name.to_string());
        wait(py, &engine, async move { runner.delete_file(&name).await })?.map_err(Failure::from)
    }

    /// Every version of every model of `project` as JSON text (MindsDB's REST records).
    fn models(&self, project: &str) -> Fallible<String> {
        let models = self.engine()?.list_models(project)?;
        let list: Vec<serde_json::Value> = models.iter().map(|m| m.to_wire_json()).collect();
        Ok(serde_json::Value::Array(list).to_string())
    }

    /// One model's version (the active one when `version` is None) as JSON text.
    #[pyo3(signature = (project, name, version=None))]
    fn model(&self, project: &str, name: &str, version: Option<u32>) -> Fallible<String> {
        let model = self.engine()?.get_model(project, name, version)?;
        Ok(model.to_wire_json().to_string())
    }

    /// The describe record of a model's version as JSON text.
    #[pyo3(signature = (project, name, version=None))]
    fn describe_model(&self, project: &str, name: &str, version: Option<u32>) -> Fallible<String> {
        let model = self.engine()?.get_model(project, name, version)?;
        Ok(model.describe(None)?.to_string())
    }

    /// Runs one CREATE MODEL statement in `project`; returns the new version as JSON text.
    fn create_model(&self, py: Python<'_>, project: &str, statement: &str) -> Fallible<String> {
        let engine = self.engine()?;
        let (runner, project, statement) =
            (engine.clone(), project.to_string(), statement.to_string());
        let model = wait(py, &engine, async move {
            runner.create_model(&project, &statement).await
        })??;
        Ok(model.to_wire_json().to_string())
    }

    /// Adds a version of a model trained from `query` (run in `data_db`, the project by
    /// default), or from the latest version's query; returns it as JSON text.
    #[pyo3(signature = (project, name, query=None, data_db=None))]
    fn retrain_model(
        &self,
        py: Python<'_>,
        project: &str,
        name: &str,
        query: Option<String>,
        data_db: Option<String>,
    ) -> Fallible<String> {
        let engine = self.engine()?;
        let (runner, project, name) = (engine.clone(), project.to_string(), name.to_string());
        let model = wait(py, &engine, async move {
            runner
                .retrain_model(&project, &name, query.as_deref(), data_db.as_deref())
                .await
        })??;
        Ok(model.to_wire_json().to_string())
    }

    /// Makes a complete version the active one; returns it as JSON text.
    fn set_active_model(
        &self,
        py: Python<'_>,
        project: &str,
        name: &str,
        version: u32,
    ) -> Fallible<String> {
        let engine = self.engine()?;
        let (runner, project, name) = (engine.clone(), project.to_string(), name.to_string());
        let model = wait(py, &engine, async move {
            runner.set_active_model(&project, &name, version).await
        })??;
        Ok(model.to_wire_json().to_string())
    }

    /// Drops a model, or one version of it.
    #[pyo3(signature = (project, name, version=None))]
    fn drop_model(
        &self,
        py: Python<'_>,
        project: &str,
        name: &str,
        version: Option<u32>,
    ) -> Fallible<()> {
        let engine = self.engine()?;
        let (runner, project, name) = (engine.clone(), project.to_string(), name.to_string());
        wait(py, &engine, async move {
            runner.drop_model(&project, &name, version).await
        })?
        .map_err(Failure::from)
    }

    /// Predicts for `rows` (JSON text: a list of objects); returns the rows as JSON text.
    #[pyo3(signature = (project, name, rows, version=None))]
    fn predict(
        &self,
        py: Python<'_>,
        project: &str,
        name: &str,
        rows: &str,
        version: Option<u32>,
    ) -> Fallible<String> {
        let engine = self.engine()?;
        let rows = json_arg(rows, "rows")?;
        let (runner, project, name) = (engine.clone(), project.to_string(), name.to_string());
        let predicted = wait(py, &engine, async move {
            runner.predict(&project, &name, version, &rows).await
        })??;
        Ok(predicted.to_string())
    }

    /// Creates a user on `plan` (the configured default when None); returns it as JSON text.
    #[pyo3(signature = (name, plan=None))]
    fn create_user(&self, py: Python<'_>, name: &str, plan: Option<String>) -> Fallible<String> {
        let engine = self.engine()?;
        let (runner, name) = (engine.clone(), name.to_string());
        let user = wait(py, &engine, async move {
            runner.create_user(&name, plan.as_deref()).await
        })??;
        Ok(serde_json::to_string(&user).expect("a user serializes"))
    }

    /// Every user as JSON text, in creation order.
    fn users(&self) -> Fallible<String> {
        let users = self.engine()?.list_users()?;
        Ok(serde_json::to_string(&users).expect("users serialize"))
    }

    /// One user as JSON text; ProgrammingError when there is none of that name.
    fn user(&self, name: &str) -> Fallible<String> {
        let user = self.engine()?.get_user(name)?;
        Ok(serde_json::to_string(&user).expect("a user serializes"))
    }

    /// Changes a user's plan and/or whether it is disabled; returns it as JSON text.
    #[pyo3(signature = (name, plan=None, disabled=None))]
    fn update_user(
        &self,
        py: Python<'_>,
        name: &str,
        plan: Option<String>,
        disabled: Option<bool>,
    ) -> Fallible<String> {
        let engine = self.engine()?;
        let (runner, name) = (engine.clone(), name.to_string());
        let user = wait(py, &engine, async move {
            runner.update_user(&name, plan.as_deref(), disabled).await
        })??;
        Ok(serde_json::to_string(&user).expect("a user serializes"))
    }

    /// Issues an API key for a user; returns it, with the key's text, as JSON text.
    fn create_api_key(&self, py: Python<'_>, user: &str) -> Fallible<String> {
        let engine = self.engine()?;
        let (runner, user) = (engine.clone(), user.to_string());
        let issued = wait(
            py,
            &engine,
            async move { runner.create_api_key(&user).await },
        )??;
        Ok(serde_json::to_string(&issued).expect("an API key serializes"))
    }

    /// Revokes one of a user's API keys; returns the user as JSON text.
    fn revoke_api_key(&self, py: Python<'_>, user: &str, key_id: u64) -> Fallible<String> {
        let engine = self.engine()?;
        let (runner, user) = (engine.clone(), user.to_string());
        let user = wait(py, &engine, async move {
            runner.revoke_api_key(&user, key_id).await
        })??;
        Ok(serde_json::to_string(&user).expect("a user serializes"))
    }

    /// This connection's user's plan, quotas and usage as JSON text (`GET /limits/`).
    fn limits(&self) -> Fallible<String> {
        let limits = self.engine()?.limits()?;
        Ok(serde_json::to_string(&limits).expect("limits serialize"))
    }

    /// Registers a model-status callback from MindsDB's body (JSON text); returns
    /// `{"id", "secret"}` as JSON text.
    fn register_callback(&self, py: Python<'_>, body: &str) -> Fallible<String> {
        let engine = self.engine()?;
        let body = json_arg(body, "body")?;
        let runner = engine.clone();
        let registered = wait(
            py,
            &engine,
            async move { runner.register_callback(body).await },
        )??;
        Ok(serde_json::to_string(&registered).expect("a callback serializes"))
    }

    /// This connection's user's callbacks as JSON text: `[{"id", "created_at", "url"}, …]`.
    fn callbacks(&self) -> Fallible<String> {
        let callbacks = self.engine()?.list_callbacks()?;
        Ok(serde_json::to_string(&callbacks).expect("callbacks serialize"))
    }

    /// One callback with its settings as JSON text; ProgrammingError for an unknown id.
    fn callback(&self, id: u64) -> Fallible<String> {
        let callback = self.engine()?.get_callback(id)?;
        Ok(serde_json::to_string(&callback).expect("a callback serializes"))
    }

    /// Changes a callback from a partial body (JSON text); returns it as JSON text.
    fn update_callback(&self, py: Python<'_>, id: u64, body: &str) -> Fallible<String> {
        let engine = self.engine()?;
        let body = json_arg(body, "body")?;
        let runner = engine.clone();
        let callback = wait(py, &engine, async move {
            runner.update_callback(id, body).await
        })??;
        Ok(serde_json::to_string(&callback).expect("a callback serializes"))
    }

    /// Deletes a callback; its pending deliveries are never sent.
    fn delete_callback(&self, py: Python<'_>, id: u64) -> Fallible<()> {
        let engine = self.engine()?;
        let runner = engine.clone();
        wait(py, &engine, async move { runner.delete_callback(id).await })?.map_err(Failure::from)
    }

    /// A callback's delivery log as JSON text, one entry per attempt, oldest first.
    fn callback_deliveries(&self, id: u64) -> Fallible<String> {
        let attempts = self.engine()?.callback_deliveries(id)?;
        Ok(serde_json::to_string(&attempts).expect("attempts serialize"))
    }

    /// The engine's status as JSON text, in MindsDB's shape (`GET /api/status`).
    fn status(&self) -> Fallible<String> {
        let status = self.engine()?.status(true);
        Ok(serde_json::to_string(&status).expect("the status serializes"))
    }

    /// The project one-part names resolve in.
    #[getter]
    fn current_db(&self) -> Fallible<String> {
        let engine = self.engine()?;
        Ok(lock(&self.current_db)
            .clone()
            .unwrap_or_else(|| engine.config().query.default_project.clone()))
    }

    /// Whether a transaction (`BEGIN`) is open.
    #[getter]
    fn in_transaction(&self) -> Fallible<bool> {
        Ok(self.engine()?.in_transaction())
    }

    /// Whether `close()` was called.
    #[getter]
    fn closed(&self) -> bool {
        self.shared.is_closed()
    }

    /// Lets go of the engine and of every result's unread rows, closing the file unless another
    /// connection to it (one `as_user` made, or the one that made this) is open; an Arrow
    /// stream already handed out keeps it open until released. Closing twice does nothing.
    fn close(&self, py: Python<'_>) {
        let engine = self.shared.close();
        // Closing waits for the runtime's tasks to stop: not with the GIL held.
        if let Some(engine) = engine {
            py.detach(move || engine.close());
        }
    }
}

/// Every batch of an Arrow C stream capsule (the Arrow PyCapsule interface), read without the GIL.
fn read_stream(
    py: Python<'_>,
    stream: &Bound<'_, PyAny>,
) -> Fallible<(
    arrow::datatypes::SchemaRef,
    Vec<arrow::record_batch::RecordBatch>,
)> {
    let capsule = stream.cast::<PyCapsule>().map_err(|_| {
        InterfaceError::new_err("expected an Arrow C stream PyCapsule ('arrow_array_stream')")
    })?;
    let pointer = capsule.pointer_checked(Some(c"arrow_array_stream"))?;
    // SAFETY: a capsule of that name holds an `ArrowArrayStream` (the Arrow PyCapsule
    // interface); `from_raw` moves it out and leaves a released stream, which the capsule's
    // destructor then ignores.
    let reader = unsafe {
        ArrowArrayStreamReader::from_raw(pointer.as_ptr().cast::<FFI_ArrowArrayStream>())
    }
    .map_err(|e| InterfaceError::new_err(format!("cannot read the Arrow stream: {e}")))?;
    // The producer's callbacks take the GIL themselves when they need it.
    let (schema, batches) = py
        .detach(move || {
            let schema = reader.schema();
            reader
                .collect::<Result<Vec<_>, _>>()
                .map(|batches| (schema, batches))
        })
        .map_err(|e| DataError::new_err(format!("cannot read the Arrow stream: {e}")))?;
    Ok((schema, batches))
}

fn json_arg(text: &str, what: &str) -> PyResult<serde_json::Value> {
    serde_json::from_str(text)
        .map_err(|e| InterfaceError::new_err(format!("'{what}' is not valid JSON: {e}")))
}

/// What a Python progress callback raised, kept until the insert it stopped returns.
type Raised = Arc<Mutex<Option<PyErr>>>;

/// The engine's progress callback for a Python callable that takes the progress as JSON text
/// and returns whether to go on; what the callable raises stops the insert and is kept.
fn progress_callback(callable: Option<Py<PyAny>>) -> (Option<ProgressCallback>, Raised) {
    let raised: Raised = Arc::new(Mutex::new(None));
    let Some(callable) = callable else {
        return (None, raised);
    };
    let keep = Arc::clone(&raised);
    let callback: ProgressCallback = Box::new(move |progress: &InsertProgress| {
        let text = serde_json::to_string(progress).unwrap_or_default();
        Python::attach(|py| {
            match callable
                .call1(py, (text,))
                .and_then(|go_on| go_on.is_truthy(py))
            {
                Ok(go_on) => go_on,
                Err(error) => {
                    if let Ok(mut slot) = keep.lock() {
                        slot.get_or_insert(error);
                    }
                    false
                }
            }
        })
    });
    (Some(callback), raised)
}

/// Raises what a progress callback raised, if it did.
fn reraise(raised: &Raised) -> PyResult<()> {
    match raised.lock().ok().and_then(|mut slot| slot.take()) {
        Some(error) => Err(error),
        None => Ok(()),
    }
}
