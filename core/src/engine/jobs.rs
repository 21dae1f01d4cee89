//! Jobs through the facade: MindsDB's REST job routes (`/api/projects/{p}/jobs[/{name}
//! [/history]]`). The scheduler that runs them is `ai::jobs::run`.

use serde_json::Value;

use crate::ai::jobs::statements;
use crate::catalog::jobs::{self, Every, Job, NewJob};
use crate::error::{Error, Result};

use super::{require_project, Engine};

impl Engine {
    /// The jobs of `project`, as MindsDB's `GET /api/projects/{p}/jobs` lists them.
    pub fn list_jobs(&self, project: &str) -> Result<Vec<Value>> {
        let txn = self.inner.services.store.read()?;
        require_project(&txn, self.tenant, project)?;
        let all = jobs::all(&txn, self.tenant, Some(project))?;
        Ok(all.iter().map(Job::wire).collect())
    }

    /// One job's record; NotFound naming it.
    pub fn get_job(&self, project: &str, name: &str) -> Result<Value> {
        let txn = self.inner.services.store.read()?;
        require_project(&txn, self.tenant, project)?;
        jobs::named(&txn, self.tenant, project, name)?
            .map(|job| job.wire())
            .ok_or_else(|| jobs::missing(name))
    }

    /// Creates a job from MindsDB's REST body (`{"name", "query", "if_query", "start_at",
    /// "end_at", "schedule_str"}`, `schedule_str` like `every 2 hours`); returns its record.
    pub async fn create_job(&self, project: &str, body: Value) -> Result<Value> {
        let body = crate::wire::Fields::of(body, "The job")?;
        let name = body.required_text("name", "A job needs a 'name' (a string)")?;
        let query = body.required_text("query", "A job needs a 'query' (its statements)")?;
        let if_query = body.text("if_query")?;
        let date = |key: &str| -> Result<Option<u64>> {
            body.text(key)?.as_deref().map(jobs::parse_date).transpose()
        };
        let (start_at, end_at) = (date("start_at")?, date("end_at")?);
        let every = body
            .text("schedule_str")?
            .map(|s| schedule(&s))
            .transpose()?;
        // Statements are read now, as CREATE JOB reads them.
        let (query, if_query) = (
            normalized(&query)?,
            if_query.map(|q| normalized(&q)).transpose()?,
        );
        for text in std::iter::once(&query).chain(if_query.as_ref()) {
            self.inner.sql.parse_text(self.tenant, text)?;
        }
        let new = NewJob {
            name: name.clone(),
            project: project.to_string(),
            query,
            if_query,
            start_at,
            end_at,
            every,
        };
        let (tenant, now) = (self.tenant, crate::time::now_unix());
        let limits = jobs::limits(&self.inner.services.config);
        self.inner
            .services
            .store
            .write(move |txn| jobs::create(txn, tenant, new, false, now, limits))
            .await?;
        self.get_job(project, &name)
    }

    /// Deletes a job; its history stays.
    pub async fn delete_job(&self, project: &str, name: &str) -> Result<()> {
        self.get_job(project, name)?;
        let (tenant, project, name) = (self.tenant, project.to_string(), name.to_string());
        self.inner
            .services
            .store
            .write(move |txn| jobs::drop_job(txn, tenant, &project, &name, false))
            .await
    }

    /// The runs of a job, oldest first: `{"name", "project", "run_start", "run_end", "error",
    /// "query"}` as MindsDB's `log.jobs_history` rows.
    pub fn job_history(&self, project: &str, name: &str) -> Result<Vec<Value>> {
        self.get_job(project, name)?;
        let txn = self.inner.services.store.read()?;
        let runs = jobs::history(
            &txn,
            self.tenant,
            Some((project, name)),
            crate::ai::jobs::HISTORY_ROWS,
        )?;
        Ok(runs
            .iter()
            .map(|run| {
                serde_json::json!({
                    "name": run.name,
                    "project": run.project,
                    "run_start": crate::time::unix_text(run.start_at),
                    "run_end": run.end_at.map(crate::time::unix_text),
                    "error": run.error,
                    "query": run.query,
                })
            })
            .collect())
    }
}

/// MindsDB's `schedule_str`: `every [n] period`.
fn schedule(text: &str) -> Result<Every> {
    let rest = text
        .trim()
        .strip_prefix("every ")
        .or_else(|| text.trim().strip_prefix("EVERY "))
        .ok_or_else(|| {
            Error::invalid(format!(
                "'schedule_str' must read 'every [n] period'; got '{text}'"
            ))
        })?;
    let parts: Vec<&str> = rest.split_whitespace().collect();
    match parts.as_slice() {
        [unit] => Every::parse(None, unit),
        [count, unit] => {
            let count = count.parse::<u64>().map_err(|_| {
                Error::invalid(format!("Number expected in 'schedule_str': {count}"))
            })?;
            Every::parse(Some(count), unit)
        }
        _ => Err(Error::invalid(format!(
            "Can't parse 'schedule_str': {text}"
        ))),
    }
}

/// Statements as CREATE JOB keeps them: separated by `; `.
fn normalized(text: &str) -> Result<String> {
    let split = statements::split(text)?;
    if split.is_empty() {
        return Err(Error::invalid("A job's 'query' has no statement"));
    }
    Ok(split.join("; "))
}
