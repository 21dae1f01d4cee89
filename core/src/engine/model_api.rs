//! Models through the facade: listing, reading, training, retraining, choosing the active
//! version, dropping, and predicting from rows given as JSON.

use std::sync::Arc;

use crate::catalog::models::{self, Model};
use crate::error::{Error, Result};
use crate::running::Object;

use super::{require_project, AbortOnDrop, Engine};

impl Engine {
    /// Every version of every model of `project`, by name and version.
    pub fn list_models(&self, project: &str) -> Result<Vec<Model>> {
        let tenant = self.tenant;
        let txn = self.inner.services.store.read()?;
        require_project(&txn, tenant, project)?;
        let versions = models::all(&txn, tenant, Some(project))?;
        Ok(versions.into_iter().map(Model).collect())
    }

    /// One model's version, or its active version when `version` is `None`.
    pub fn get_model(&self, project: &str, name: &str, version: Option<u32>) -> Result<Model> {
        let tenant = self.tenant;
        let txn = self.inner.services.store.read()?;
        require_project(&txn, tenant, project)?;
        let found = models::named(&txn, tenant, project, name, version)?;
        found.map(Model).ok_or_else(|| match version {
            None => models::model_missing(project, name),
            Some(v) => models::version_missing(project, name, v),
        })
    }

    /// Runs one `CREATE MODEL` statement with `project` as the current database; returns the
    /// new version (status `generating`; training goes on in the background).
    pub async fn create_model(&self, project: &str, statement: &str) -> Result<Model> {
        let tenant = self.tenant;
        self.get_project(project)?;
        let inner = Arc::clone(&self.inner);
        let (project, statement) = (project.to_string(), statement.to_string());
        crate::memory::spawn_on(&self.inner.handle, async move {
            inner
                .sql
                .create_model_from_sql(tenant, &project, &statement)
                .await
        })
        .await
        .map_err(|e| Error::internal(format!("model task failed: {e}")))?
        .map(Model)
    }

    /// Adds a version of a model, trained from `query` (a SELECT run in `data_db`, the project
    /// itself when `None`) or from the latest version's query when `query` is `None`; returns
    /// it (status `generating`, made active when training completes). An LLM model's new
    /// version keeps its settings.
    pub async fn retrain_model(
        &self,
        project: &str,
        name: &str,
        query: Option<&str>,
        data_db: Option<&str>,
    ) -> Result<Model> {
        let tenant = self.tenant;
        self.get_model(project, name, None)?;
        let from = match (query, data_db) {
            (Some(query), db) => Some((
                db.unwrap_or(project).to_ascii_lowercase(),
                query.to_string(),
            )),
            (None, None) => None,
            (None, Some(db)) => {
                return Err(Error::invalid(format!(
                    "a database to train from ('{db}') needs a query to run in it"
                )))
            }
        };
        let inner = Arc::clone(&self.inner);
        let (project, name) = (project.to_ascii_lowercase(), name.to_string());
        crate::memory::spawn_on(&self.inner.handle, async move {
            inner
                .sql
                .retrain_model(tenant, project, name, from, Default::default())
                .await
        })
        .await
        .map_err(|e| Error::internal(format!("model task failed: {e}")))?
        .map(Model)
    }

    /// Makes a complete version of a model the active one (the one predictions use).
    pub async fn set_active_model(&self, project: &str, name: &str, version: u32) -> Result<Model> {
        let tenant = self.tenant;
        let (owned_project, owned_name) = (project.to_ascii_lowercase(), name.to_string());
        self.inner
            .sql
            .set_active_model(tenant, owned_project, owned_name, version)
            .await?;
        self.get_model(project, name, Some(version))
    }

    /// Drops a model (every version), or one version of it.
    pub async fn drop_model(&self, project: &str, name: &str, version: Option<u32>) -> Result<()> {
        let tenant = self.tenant;
        self.get_model(project, name, version)?;
        let (project, name) = (project.to_string(), name.to_string());
        let object = match version {
            Some(v) => Object::model_version(tenant, &project, &name, v),
            None => Object::model(tenant, &project, &name),
        };
        // Its trainings stop at once (and give their users' places back).
        self.inner
            .services
            .store
            .write_dropping(object, move |txn| {
                models::drop_model(txn, tenant, &project, &name, version, false)
            })
            .await
            .map(|_| ())
    }

    /// Predicts with a model's version (or its active one) for `rows`: a list of `{column:
    /// value}` objects, or that list as JSON text. Returns the rows with the prediction filled
    /// in; "model creation not completed" unless the version is complete. An LLM model calls
    /// its provider once per row.
    pub async fn predict(
        &self,
        project: &str,
        name: &str,
        version: Option<u32>,
        rows: &serde_json::Value,
    ) -> Result<serde_json::Value> {
        let tenant = self.tenant;
        let model = self.get_model(project, name, version)?;
        let (inner, rows) = (Arc::clone(&self.inner), rows.clone());
        let (control, _ticket) = self.statement_control()?;
        // On the engine's runtime: provider calls need its reactor whatever runtime awaits this.
        // Aborted when the caller stops waiting or the statement's time is up, so nobody's
        // prediction keeps calling a provider.
        let mut task = AbortOnDrop(crate::memory::spawn_on(&self.inner.handle, async move {
            control
                .run(inner.sql.predict_rows(tenant, &model.0, &rows))
                .await
        }));
        (&mut task.0)
            .await
            .map_err(|e| Error::internal(format!("prediction task failed: {e}")))?
    }
}
