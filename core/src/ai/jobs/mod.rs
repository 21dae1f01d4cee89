//! Jobs as SQL: `CREATE JOB`, `DROP JOB`, `SHOW JOBS`, a project's `jobs` and `jobs_history`
//! tables, and the system tables `information_schema.jobs` and `information_schema.jobs_history`
//! (MindsDB's `log.jobs_history`). The scheduler (`run`) runs them; `last` fills in `LAST` for each run.

pub(crate) mod last;
pub(crate) mod run;
pub(crate) mod statements;

use std::sync::Arc;

use datafusion::arrow::array::RecordBatch;
use datafusion::catalog::TableProvider;
use datafusion::sql::sqlparser::tokenizer::Token;

use crate::catalog::jobs::{Job, JobRun};
use crate::catalog::namespace::FILES_DB;
use crate::error::Result;
use crate::sql::catalog::features::{FeatureTables, SystemRows};
use crate::sql::catalog::information_schema::{system_table, SystemTable};
use crate::sql::catalog::snapshot::Snapshot;
use crate::sql::{Extension, FeatureStatement};

/// How many runs `information_schema.jobs_history` shows, the latest.
pub(crate) const HISTORY_ROWS: usize = 10_000;

/// Jobs plugged into the relational engine: their statements and system tables.
#[derive(Debug)]
pub(crate) struct Jobs;

impl Extension for Jobs {
    fn statement(&self, words: &[&Token]) -> Result<Option<Box<dyn FeatureStatement>>> {
        Ok(statements::job_command(words)?.map(|s| Box::new(s) as Box<dyn FeatureStatement>))
    }
}

impl FeatureTables for Jobs {
    /// A project's `jobs` and `jobs_history`: its own jobs and their runs, as `mindsdb_sdk`
    /// reads them (`SELECT * FROM jobs` in the project).
    fn table(
        &self,
        snapshot: &Arc<Snapshot>,
        project: &str,
        name: &str,
    ) -> Result<Option<Arc<dyn TableProvider>>> {
        if project == FILES_DB {
            return Ok(None);
        }
        let batch = match name.to_ascii_lowercase().as_str() {
            "jobs" => jobs_batch(&snapshot.jobs(Some(project))?)?,
            "jobs_history" => {
                let runs = snapshot.job_history(HISTORY_ROWS)?;
                let runs: Vec<JobRun> = runs
                    .into_iter()
                    .filter(|r| r.project.eq_ignore_ascii_case(project))
                    .collect();
                history_batch(&runs)?
            }
            _ => return Ok(None),
        };
        Ok(Some(system_table(batch)?))
    }

    fn has_table(&self, _snapshot: &Snapshot, project: &str, name: &str) -> bool {
        project != FILES_DB
            && (name.eq_ignore_ascii_case("jobs") || name.eq_ignore_ascii_case("jobs_history"))
    }

    fn system_table(&self, snap: &Snapshot, name: &str) -> Result<Option<SystemRows>> {
        let batch = match name {
            "jobs" => jobs_batch(&snap.jobs(None)?)?,
            "jobs_history" => history_batch(&snap.job_history(HISTORY_ROWS)?)?,
            _ => return Ok(None),
        };
        Ok(Some(SystemRows { batch, live: false }))
    }
}

fn jobs_batch(jobs: &[Job]) -> Result<RecordBatch> {
    let rows: Vec<[Option<String>; 9]> = jobs.iter().map(system_row).collect();
    let mut table = SystemTable::default();
    for (i, column) in JOB_COLUMNS.iter().enumerate() {
        table = table.owned_text(column, rows.iter().map(|r| r[i].clone()).collect());
    }
    table.build()
}

fn history_batch(runs: &[JobRun]) -> Result<RecordBatch> {
    let rows: Vec<[Option<String>; 6]> = runs.iter().map(history_row).collect();
    let mut table = SystemTable::default();
    for (i, column) in HISTORY_COLUMNS.iter().enumerate() {
        table = table.owned_text(column, rows.iter().map(|r| r[i].clone()).collect());
    }
    table.build()
}

/// `information_schema.jobs`' columns, MindsDB's.
const JOB_COLUMNS: [&str; 9] = [
    "NAME",
    "PROJECT",
    "START_AT",
    "END_AT",
    "NEXT_RUN_AT",
    "SCHEDULE_STR",
    "QUERY",
    "IF_QUERY",
    "VARIABLES",
];

/// `log.jobs_history`'s columns, MindsDB's.
const HISTORY_COLUMNS: [&str; 6] = ["NAME", "PROJECT", "RUN_START", "RUN_END", "ERROR", "QUERY"];

fn system_row(job: &Job) -> [Option<String>; 9] {
    [
        Some(job.name.clone()),
        Some(job.project.clone()),
        Some(crate::time::unix_text(job.start_at)),
        job.end_at.map(crate::time::unix_text),
        Some(crate::time::unix_text(job.next_run_at)),
        job.every.map(|e| e.text()),
        Some(job.query.clone()),
        job.if_query.clone(),
        Some(serde_json::Value::Object(job.lasts.clone()).to_string()),
    ]
}

fn history_row(run: &JobRun) -> [Option<String>; 6] {
    [
        Some(run.name.clone()),
        Some(run.project.clone()),
        Some(crate::time::unix_text(run.start_at)),
        run.end_at.map(crate::time::unix_text),
        run.error.clone(),
        Some(run.query.clone()),
    ]
}
