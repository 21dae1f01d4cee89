//! Jobs: statements a project runs on a schedule (`CREATE JOB p.j (stmt; …) [START d] [END d]
//! [EVERY n unit] [IF (stmt; …)]`), and the history of their runs. Owns the redb tables `jobs`,
//! keyed by (tenant, project, lower-cased name), and `job_runs`, keyed by (tenant, job id, run
//! number). A job keeps when it runs next and, for `LAST`, the greatest value each tracked
//! column had when it last ran; both live in the file, so a restarted engine goes on where the
//! stopped one left off. A job that will not run again (run once, or past its END) is removed;
//! its history stays.

use chrono::{DateTime, Months, NaiveDate, NaiveDateTime, TimeDelta, Utc};
use redb::{ReadableTable, WriteTransaction};
use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};

use crate::catalog::namespace::validate_name;
use crate::catalog::projects;
use crate::error::{Error, Result, Subject};
use crate::store::schema::{JOBS, JOB_QUEUE, JOB_RUNS, PROJECTS};
use crate::store::{self, Reads};
use crate::tenant::TenantId;

/// How often a job repeats (`EVERY [n] unit`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub(crate) struct Every {
    /// How many units.
    pub(crate) count: u32,
    /// `second` (ours: MindsDB's smallest is the minute), `minute`, `hour`, `day`, `week`,
    /// `month`.
    pub(crate) unit: Unit,
}

/// The unit of [`Every`].
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub(crate) enum Unit {
    Second,
    Minute,
    Hour,
    Day,
    Week,
    Month,
}

impl Every {
    /// Reads `n unit` (`unit` in the singular or plural, `min` for minutes); `count` 1 when
    /// only a unit is given.
    pub(crate) fn parse(count: Option<u64>, unit: &str) -> Result<Every> {
        let unit = match unit.to_ascii_lowercase().as_str() {
            "second" | "seconds" | "sec" => Unit::Second,
            "minute" | "minutes" | "min" => Unit::Minute,
            "hour" | "hours" => Unit::Hour,
            "day" | "days" => Unit::Day,
            "week" | "weeks" => Unit::Week,
            "month" | "months" => Unit::Month,
            other => {
                return Err(Error::invalid(format!(
                    "Unknown period '{other}' after EVERY; use second, minute, hour, day, week or month"
                )))
            }
        };
        let count = count.unwrap_or(1);
        let count = u32::try_from(count)
            .ok()
            .filter(|c| (1..=100_000).contains(c))
            .ok_or_else(|| {
                Error::invalid(format!("EVERY takes 1 to 100000 periods; got {count}"))
            })?;
        Ok(Every { count, unit })
    }

    /// MindsDB's `schedule_str`: `every 2 hours`.
    pub(crate) fn text(&self) -> String {
        let unit = match self.unit {
            Unit::Second => "second",
            Unit::Minute => "minute",
            Unit::Hour => "hour",
            Unit::Day => "day",
            Unit::Week => "week",
            Unit::Month => "month",
        };
        let plural = if self.count == 1 { "" } else { "s" };
        format!("every {} {unit}{plural}", self.count)
    }

    /// The time one period after `from` (Unix seconds).
    fn after(&self, from: u64) -> u64 {
        let count = i64::from(self.count);
        let delta = match self.unit {
            Unit::Second => TimeDelta::seconds(count),
            Unit::Minute => TimeDelta::minutes(count),
            Unit::Hour => TimeDelta::hours(count),
            Unit::Day => TimeDelta::days(count),
            Unit::Week => TimeDelta::weeks(count),
            Unit::Month => {
                let start = DateTime::<Utc>::from_timestamp(secs(from), 0).unwrap_or_default();
                let next = start
                    .checked_add_months(Months::new(self.count))
                    .unwrap_or(start);
                return u64::try_from(next.timestamp()).unwrap_or(u64::MAX);
            }
        };
        from.saturating_add(u64::try_from(delta.num_seconds()).unwrap_or(u64::MAX))
    }
}

fn secs(unix: u64) -> i64 {
    i64::try_from(unix).unwrap_or(i64::MAX)
}

/// Reads a job date as MindsDB does: `NOW`, `YYYY-MM-DD HH:MM:SS` or `YYYY-MM-DD` (UTC here).
pub(crate) fn parse_date(text: &str) -> Result<u64> {
    if text.trim().eq_ignore_ascii_case("now") {
        return Ok(crate::time::now_unix());
    }
    let at = NaiveDateTime::parse_from_str(text.trim(), "%Y-%m-%d %H:%M:%S")
        .or_else(|_| {
            NaiveDate::parse_from_str(text.trim(), "%Y-%m-%d")
                .map(|d| d.and_hms_opt(0, 0, 0).unwrap_or_default())
        })
        .map_err(|_| {
            Error::invalid(format!(
                "Can't parse date '{text}': use 'YYYY-MM-DD HH:MM:SS' or 'YYYY-MM-DD'"
            ))
        })?;
    u64::try_from(at.and_utc().timestamp())
        .map_err(|_| Error::invalid(format!("Date '{text}' is before 1970")))
}

/// A job as stored.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub(crate) struct Job {
    /// Stable id, never reused.
    pub(crate) id: u64,
    /// Its name (lower case).
    pub(crate) name: String,
    /// The project it runs in (lower case): one-part names in its statements resolve there.
    pub(crate) project: String,
    /// Its statements, separated by `;`.
    pub(crate) query: String,
    /// The condition's statements: the job runs only when the last returns rows.
    pub(crate) if_query: Option<String>,
    /// When it first runs (Unix seconds).
    pub(crate) start_at: u64,
    /// After when it no longer runs.
    pub(crate) end_at: Option<u64>,
    /// When it runs next.
    pub(crate) next_run_at: u64,
    /// How often it repeats; once when `None`.
    pub(crate) every: Option<Every>,
    /// `LAST`'s values: `table.column` → the greatest value read at the last run (null when
    /// the table was empty then).
    #[serde(default)]
    pub(crate) lasts: Map<String, Value>,
    /// Creation time, MindsDB's text form.
    pub(crate) created_at: String,
    /// How many runs it has started.
    #[serde(default)]
    pub(crate) runs: u64,
    /// When its latest run started (Unix seconds), for `{{PREVIOUS_START_DATETIME}}`.
    #[serde(default)]
    pub(crate) last_started_at: Option<u64>,
}

impl Job {
    /// MindsDB's record (`GET /api/projects/{p}/jobs/{name}`).
    pub(crate) fn wire(&self) -> Value {
        serde_json::json!({
            "id": self.id,
            "name": self.name,
            "project": self.project,
            "start_at": crate::time::unix_text(self.start_at),
            "end_at": self.end_at.map(crate::time::unix_text),
            "next_run_at": crate::time::unix_text(self.next_run_at),
            "schedule_str": self.every.map(|e| e.text()),
            "query": self.query,
            "if_query": self.if_query,
            "variables": Value::Object(self.lasts.clone()),
        })
    }
}

/// A job to create, as its statement gave it.
#[derive(Debug, Clone)]
pub(crate) struct NewJob {
    pub(crate) name: String,
    pub(crate) project: String,
    pub(crate) query: String,
    pub(crate) if_query: Option<String>,
    pub(crate) start_at: Option<u64>,
    pub(crate) end_at: Option<u64>,
    pub(crate) every: Option<Every>,
}

/// One run of a job.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub(crate) struct JobRun {
    /// The job's id.
    #[serde(default)]
    pub(crate) job_id: u64,
    /// The job's name and project (kept: the job may be gone).
    pub(crate) name: String,
    pub(crate) project: String,
    /// When it started and ended (Unix seconds); no end while it runs.
    pub(crate) start_at: u64,
    pub(crate) end_at: Option<u64>,
    /// Why it failed; `None` when it did not.
    pub(crate) error: Option<String>,
    /// The statements it ran, as run (with `LAST` filled in).
    pub(crate) query: String,
}

/// Creates this module's redb tables in a new file, so read snapshots always find them.
pub(crate) fn init(txn: &WriteTransaction) -> Result<()> {
    txn.open_table(JOBS)?;
    txn.open_table(JOB_QUEUE)?;
    txn.open_table(JOB_RUNS)?;
    Ok(())
}

/// Runs a stopped process left without an end: ended now, as interrupted.
pub(crate) fn fail_interrupted(txn: &WriteTransaction) -> Result<()> {
    let mut table = txn.open_table(JOB_RUNS)?;
    let mut open = Vec::new();
    for entry in table.iter()? {
        let (key, value) = entry?;
        let run: JobRun = serde_json::from_str(value.value())?;
        if run.end_at.is_none() {
            open.push((key.value(), run));
        }
    }
    for (key, mut run) in open {
        run.end_at = Some(crate::time::now_unix());
        run.error = Some("The run was interrupted: the engine stopped while it ran".into());
        table.insert(key, serde_json::to_string(&run)?.as_str())?;
    }
    Ok(())
}

/// What a user's jobs may be: how many, and how often one may repeat.
#[derive(Debug, Clone, Copy)]
pub(crate) struct JobLimits {
    /// `jobs.max_jobs`.
    pub(crate) max_jobs: u64,
    /// `jobs.min_period_secs`.
    pub(crate) min_period_secs: u64,
}

/// The limits `config` sets.
pub(crate) fn limits(config: &crate::config::Config) -> JobLimits {
    JobLimits {
        max_jobs: config.max_jobs(),
        min_period_secs: config.min_job_period_secs(),
    }
}

/// Runs kept per user, the latest: each new run removes the one this many before it, so the
/// history stays bounded whatever the jobs (one-time jobs that make others included).
pub(crate) const RUNS_KEPT: u64 = 1000;

/// Bytes of statement text a job may hold (its statements and its condition's together).
pub(crate) const MAX_JOB_TEXT: usize = 256 * 1024;

/// Bytes of a run's statements or error its history keeps; longer ones are cut, marked so.
pub(crate) const MAX_RUN_TEXT: usize = 2048;

/// `text`, cut to [`MAX_RUN_TEXT`] bytes (at a character) with a mark when longer.
fn kept(text: String) -> String {
    if text.len() <= MAX_RUN_TEXT {
        return text;
    }
    let mut end = MAX_RUN_TEXT;
    while !text.is_char_boundary(end) {
        end -= 1;
    }
    format!("{}… ({} bytes in all)", &text[..end], text.len())
}

/// Stores a new job, within `limits`; false when it exists and `if_not_exists` was set.
pub(crate) fn create(
    txn: &WriteTransaction,
    tenant: TenantId,
    new: NewJob,
    if_not_exists: bool,
    now: u64,
    limits: JobLimits,
) -> Result<bool> {
    let key = new.name.to_ascii_lowercase();
    validate_name("job", &key)?;
    let text = new.query.len() + new.if_query.as_ref().map_or(0, String::len);
    if text > MAX_JOB_TEXT {
        return Err(Error::invalid(format!(
            "A job's statements may hold {MAX_JOB_TEXT} bytes; these hold {text}"
        )));
    }
    let project =
        projects::get(&txn.open_table(PROJECTS)?, tenant, &new.project)?.ok_or_else(|| {
            Error::not_found(format!("Project '{}' does not exist", new.project))
                .about(Subject::Project)
        })?;
    let mut table = txn.open_table(JOBS)?;
    if table
        .get((tenant.0, project.name.as_str(), key.as_str()))?
        .is_some()
    {
        return match if_not_exists {
            true => Ok(false),
            false => Err(Error::conflict(format!("Job '{key}' already exists"))),
        };
    }
    if let Some(every) = new.every {
        let period = every.after(now).saturating_sub(now);
        if period < limits.min_period_secs {
            return Err(Error::invalid(format!(
                "A job may repeat at most every {} seconds (jobs.min_period_secs); '{}' is more often",
                limits.min_period_secs,
                every.text()
            )));
        }
    }
    let held = list(&table, tenant, None)?.len() as u64;
    if held >= limits.max_jobs {
        return Err(Error::quota_exceeded(
            format!(
                "Quota exceeded: {held} jobs of at most {} (jobs.max_jobs); drop one first",
                limits.max_jobs
            ),
            None,
        ));
    }
    // A start in the past is now, as MindsDB has it.
    let start_at = new.start_at.unwrap_or(now).max(now);
    // Without a schedule a job runs once: an end means nothing.
    let end_at = new.every.and(new.end_at);
    if let Some(end) = end_at {
        if end < start_at {
            return Err(Error::invalid(format!(
                "Wrong end date: {} is before the start {}",
                crate::time::unix_text(end),
                crate::time::unix_text(start_at)
            )));
        }
    }
    let job = Job {
        id: store::next_tenant_id(txn, tenant, "job")?,
        name: key.clone(),
        project: project.name.clone(),
        query: new.query,
        if_query: new.if_query,
        start_at,
        end_at,
        next_run_at: start_at,
        every: new.every,
        lasts: Map::new(),
        created_at: crate::time::now_text(),
        runs: 0,
        last_started_at: None,
    };
    table.insert(
        (tenant.0, project.name.as_str(), key.as_str()),
        serde_json::to_string(&job)?.as_str(),
    )?;
    drop(table);
    queue(txn, tenant, &job)?;
    Ok(true)
}

/// Puts `job` in the queue at its next run.
fn queue(txn: &WriteTransaction, tenant: TenantId, job: &Job) -> Result<()> {
    let at = format!("{}\u{0}{}", job.project, job.name);
    txn.open_table(JOB_QUEUE)?
        .insert((job.next_run_at, tenant.0, job.id), at.as_str())?;
    Ok(())
}

/// Takes `job` out of the queue.
fn unqueue(txn: &WriteTransaction, tenant: TenantId, job: &Job) -> Result<()> {
    txn.open_table(JOB_QUEUE)?
        .remove((job.next_run_at, tenant.0, job.id))?;
    Ok(())
}

/// Removes job `name` of `project`; `if_exists` makes a missing one a no-op. Its history stays.
pub(crate) fn drop_job(
    txn: &WriteTransaction,
    tenant: TenantId,
    project: &str,
    name: &str,
    if_exists: bool,
) -> Result<()> {
    let Some(job) = named(txn, tenant, project, name)? else {
        return match if_exists {
            true => Ok(()),
            false => Err(missing(&name.to_ascii_lowercase())),
        };
    };
    txn.open_table(JOBS)?
        .remove((tenant.0, job.project.as_str(), job.name.as_str()))?;
    unqueue(txn, tenant, &job)
}

/// Drops every job of a project (when the project itself is dropped).
pub(crate) fn drop_all(txn: &WriteTransaction, tenant: TenantId, project: &str) -> Result<()> {
    let jobs = list(&txn.open_table(JOBS)?, tenant, Some(project))?;
    for job in jobs {
        drop_job(txn, tenant, &job.project, &job.name, true)?;
    }
    Ok(())
}

/// The error for a job that does not exist.
pub(crate) fn missing(name: &str) -> Error {
    Error::not_found(format!("Job with name {name} does not exist")).about(Subject::Job)
}

fn list(
    table: &impl ReadableTable<(u64, &'static str, &'static str), &'static str>,
    tenant: TenantId,
    project: Option<&str>,
) -> Result<Vec<Job>> {
    let mut out = Vec::new();
    for entry in table.range((tenant.0, "", "")..(tenant.0 + 1, "", ""))? {
        let (_, value) = entry?;
        let job: Job = serde_json::from_str(value.value())?;
        if project.is_none_or(|p| job.project.eq_ignore_ascii_case(p)) {
            out.push(job);
        }
    }
    Ok(out)
}

/// The jobs of `tenant` (of `project` when given), by project and name.
pub(crate) fn all(txn: &impl Reads, tenant: TenantId, project: Option<&str>) -> Result<Vec<Job>> {
    list(&txn.reading(JOBS)?, tenant, project)
}

/// One job by project and name (case-insensitive).
pub(crate) fn named(
    txn: &impl Reads,
    tenant: TenantId,
    project: &str,
    name: &str,
) -> Result<Option<Job>> {
    let table = txn.reading(JOBS)?;
    let (project, key) = (project.to_ascii_lowercase(), name.to_ascii_lowercase());
    let found = match table.get((tenant.0, project.as_str(), key.as_str()))? {
        Some(value) => Some(serde_json::from_str(value.value())?),
        None => None,
    };
    Ok(found)
}

/// A job due to run, as the queue names it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Due {
    pub(crate) tenant: TenantId,
    pub(crate) id: u64,
    pub(crate) project: String,
    pub(crate) name: String,
}

/// Every job of every tenant due at `now`, soonest first, as the queue names them: no job's
/// record (its statements) is read here, so the look costs a few bytes a job due.
pub(crate) fn due(txn: &impl Reads, now: u64) -> Result<Vec<Due>> {
    let queue = txn.reading(JOB_QUEUE)?;
    let mut out = Vec::new();
    for entry in queue.range((0, 0, 0)..=(now, u64::MAX, u64::MAX))? {
        let (key, at) = entry?;
        let (_, tenant, id) = key.value();
        if let Some((project, name)) = at.value().split_once('\u{0}') {
            out.push(Due {
                tenant: TenantId(tenant),
                id,
                project: project.to_string(),
                name: name.to_string(),
            });
        }
    }
    Ok(out)
}

/// Records the start of a run of the job `due` names (unless it is gone or changed since it
/// was found due: then `None`); returns the run's number and the job.
pub(crate) fn start_run(txn: &WriteTransaction, due: &Due, now: u64) -> Result<Option<(u64, Job)>> {
    let tenant = due.tenant;
    let Some(mut stored) = named(txn, tenant, &due.project, &due.name)? else {
        return Ok(None);
    };
    if stored.id != due.id || stored.next_run_at > now {
        return Ok(None);
    }
    stored.runs += 1;
    // The run is given the job as it was before this start (its previous start included).
    let before = stored.clone();
    stored.last_started_at = Some(now);
    let run = JobRun {
        job_id: stored.id,
        name: stored.name.clone(),
        project: stored.project.clone(),
        start_at: now,
        end_at: None,
        error: None,
        query: String::new(),
    };
    let number = store::next_tenant_id(txn, tenant, "job_run")?;
    let mut runs = txn.open_table(JOB_RUNS)?;
    runs.insert((tenant.0, number), serde_json::to_string(&run)?.as_str())?;
    // The oldest run beyond those kept goes: one for each new one.
    if let Some(old) = number.checked_sub(RUNS_KEPT) {
        runs.remove((tenant.0, old))?;
    }
    drop(runs);
    put(txn, tenant, &stored)?;
    Ok(Some((number, before)))
}

/// What a finished run leaves: its error and the statements it ran, and the `LAST` values to
/// keep (none when it failed: the next run reads the same rows again).
pub(crate) struct Finished {
    pub(crate) error: Option<String>,
    pub(crate) query: String,
    pub(crate) lasts: Map<String, Value>,
}

/// Ends run `run` of `job` and plans the next: one period after this one's planned time (not in
/// the past), or none (the job is removed) when it has no schedule or the next is past its end.
pub(crate) fn finish_run(
    txn: &WriteTransaction,
    tenant: TenantId,
    job: &Job,
    run: u64,
    finished: Finished,
    now: u64,
) -> Result<()> {
    let mut runs = txn.open_table(JOB_RUNS)?;
    let recorded = runs
        .get((tenant.0, run))?
        .map(|v| serde_json::from_str::<JobRun>(v.value()))
        .transpose()?;
    if let Some(mut recorded) = recorded {
        recorded.end_at = Some(now);
        recorded.error = finished.error.clone().map(kept);
        recorded.query = kept(finished.query);
        runs.insert((tenant.0, run), serde_json::to_string(&recorded)?.as_str())?;
    }
    drop(runs);
    let Some(mut stored) = named(txn, tenant, &job.project, &job.name)? else {
        return Ok(());
    };
    if stored.id != job.id {
        return Ok(());
    }
    if finished.error.is_none() {
        stored.lasts.extend(finished.lasts);
    }
    let next = stored
        .every
        .map(|every| every.after(stored.next_run_at).max(now));
    match next {
        Some(next) if stored.end_at.is_none_or(|end| next <= end) => {
            unqueue(txn, tenant, &stored)?;
            stored.next_run_at = next;
            put(txn, tenant, &stored)?;
            queue(txn, tenant, &stored)
        }
        _ => drop_job(txn, tenant, &stored.project, &stored.name, true),
    }
}

fn put(txn: &WriteTransaction, tenant: TenantId, job: &Job) -> Result<()> {
    txn.open_table(JOBS)?.insert(
        (tenant.0, job.project.as_str(), job.name.as_str()),
        serde_json::to_string(job)?.as_str(),
    )?;
    Ok(())
}

/// The runs of `tenant`'s jobs (of job `name` of `project` when given), oldest first, at most
/// `limit` of the latest.
pub(crate) fn history(
    txn: &impl Reads,
    tenant: TenantId,
    job: Option<(&str, &str)>,
    limit: usize,
) -> Result<Vec<JobRun>> {
    let table = txn.reading(JOB_RUNS)?;
    let mut out = std::collections::VecDeque::new();
    for entry in table.range((tenant.0, 0)..(tenant.0 + 1, 0))? {
        let (_, value) = entry?;
        let run: JobRun = serde_json::from_str(value.value())?;
        let wanted = job.is_none_or(|(project, name)| {
            run.project.eq_ignore_ascii_case(project) && run.name.eq_ignore_ascii_case(name)
        });
        if wanted {
            out.push_back(run);
            if out.len() > limit {
                out.pop_front();
            }
        }
    }
    let mut out: Vec<JobRun> = out.into();
    out.sort_by_key(|run| run.start_at);
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn schedules_read_and_step_as_mindsdbs() {
        let every = Every::parse(Some(2), "hours").unwrap();
        assert_eq!(every.text(), "every 2 hours");
        assert_eq!(every.after(0), 7200);
        assert_eq!(Every::parse(None, "min").unwrap().text(), "every 1 minute");
        let monthly = Every::parse(None, "month").unwrap();
        // 2024-01-31 + 1 month is the end of February.
        let jan31 = parse_date("2024-01-31").unwrap();
        assert_eq!(
            crate::time::unix_text(monthly.after(jan31)),
            "2024-02-29 00:00:00.000000"
        );
        assert!(Every::parse(Some(0), "day").is_err());
        assert!(Every::parse(None, "fortnight").is_err());
        assert_eq!(
            parse_date("2024-05-06 07:08:09").unwrap(),
            parse_date("2024-05-06").unwrap() + 7 * 3600 + 8 * 60 + 9
        );
        assert!(parse_date("May 6").is_err());
    }
}
