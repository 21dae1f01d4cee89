//! Jobs as JSON text, as MindsDB's `/api/projects/{p}/jobs` routes show them: list, get,
//! create, delete, and a job's runs.

use std::ffi::c_char;

use crate::boundary::{self, Status};
use crate::database::{with_database, Database};
use crate::records::{answer_json, answer_optional_json, json_arg};

/// The jobs of `project`: a JSON array of `{"id", "name", "project", "start_at", "end_at",
/// "next_run_at", "schedule_str", "query", "if_query", "variables"}`. `MINDLITE_NOT_FOUND`
/// for an unknown project.
///
/// Ownership: the caller frees `*out_json` with `mindlite_free`.
#[no_mangle]
pub unsafe extern "C" fn mindlite_job_list(
    db: *const Database,
    project: *const c_char,
    out_json: *mut *mut c_char,
) -> Status {
    answer_json(db, out_json, |db| {
        // SAFETY: a NUL-terminated string, per the header.
        let project = unsafe { boundary::text(project, "project") }?;
        Ok(db.engine().list_jobs(project)?)
    })
}

/// One job by name (case-insensitive), as `mindlite_job_list` shows each.
/// `MINDLITE_NOT_FOUND` for an unknown project or job.
///
/// Ownership: the caller frees `*out_json` with `mindlite_free`.
#[no_mangle]
pub unsafe extern "C" fn mindlite_job_get(
    db: *const Database,
    project: *const c_char,
    name: *const c_char,
    out_json: *mut *mut c_char,
) -> Status {
    answer_json(db, out_json, |db| {
        // SAFETY: NUL-terminated strings, per the header.
        let (project, name) = unsafe {
            (
                boundary::text(project, "project")?,
                boundary::text(name, "name")?,
            )
        };
        Ok(db.engine().get_job(project, name)?)
    })
}

/// Creates a job from MindsDB's body, for example `{"name": "refresh", "query": "INSERT INTO
/// t SELECT …; DELETE FROM u", "schedule_str": "every 2 hours", "start_at": "2026-01-01
/// 00:00:00", "end_at": null, "if_query": null}`; it runs on schedule as the database's user.
/// `*out_json` receives the new job. `MINDLITE_CONFLICT` when the name is taken,
/// `MINDLITE_INVALID` for a statement that does not parse or a bad schedule.
///
/// Ownership: the caller frees `*out_json` with `mindlite_free`; it may pass NULL to skip it.
#[no_mangle]
pub unsafe extern "C" fn mindlite_job_create(
    db: *const Database,
    project: *const c_char,
    job_json: *const c_char,
    out_json: *mut *mut c_char,
) -> Status {
    answer_optional_json(db, out_json, |db| {
        // SAFETY: NUL-terminated strings, per the header.
        let (project, body) = unsafe {
            (
                boundary::text(project, "project")?,
                boundary::text(job_json, "job_json")?,
            )
        };
        let body = json_arg(body, "job_json")?;
        let engine = db.engine();
        Ok(engine.block_on(engine.create_job(project, body))?)
    })
}

/// Deletes a job (its runs stay in the history). `MINDLITE_NOT_FOUND` for an unknown one.
#[no_mangle]
pub unsafe extern "C" fn mindlite_job_delete(
    db: *const Database,
    project: *const c_char,
    name: *const c_char,
) -> Status {
    with_database(db, |db| {
        // SAFETY: NUL-terminated strings, per the header.
        let (project, name) = unsafe {
            (
                boundary::text(project, "project")?,
                boundary::text(name, "name")?,
            )
        };
        let engine = db.engine();
        engine.block_on(engine.delete_job(project, name))?;
        Ok(())
    })
}

/// A job's runs, oldest first: a JSON array of `{"name", "project", "run_start", "run_end",
/// "error", "query"}`. `MINDLITE_NOT_FOUND` for an unknown job.
///
/// Ownership: the caller frees `*out_json` with `mindlite_free`.
#[no_mangle]
pub unsafe extern "C" fn mindlite_job_history(
    db: *const Database,
    project: *const c_char,
    name: *const c_char,
    out_json: *mut *mut c_char,
) -> Status {
    answer_json(db, out_json, |db| {
        // SAFETY: NUL-terminated strings, per the header.
        let (project, name) = unsafe {
            (
                boundary::text(project, "project")?,
                boundary::text(name, "name")?,
            )
        };
        Ok(db.engine().job_history(project, name)?)
    })
}
