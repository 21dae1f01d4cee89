//! Engine records as JSON text: one `mindlite_<noun>_<verb>` function per engine operation,
//! JSON in and JSON out, so the header does not grow a struct per record: projects, status,
//! agents and models; later issues add callbacks, users and quotas in the same shape.

use std::ffi::c_char;

use serde::Serialize;

use crate::boundary::{self, give_string, out, Failure, Status};
use crate::database::{with_database, Database};

/// Hands `value` to C as JSON text through `out_json`; the caller frees it with `mindlite_free`.
pub(crate) fn give_json(out_json: *mut *mut c_char, value: &impl Serialize) -> Result<(), Failure> {
    let slot = out(out_json, "out_json")?;
    let text = serde_json::to_string(value)
        .map_err(|e| mindlite::Error::internal(format!("cannot encode a record as JSON: {e}")))?;
    give_string(slot, text);
    Ok(())
}

/// An agent serialized in MindsDB's shape (`Agent::wire`), owned, so a call can answer it.
struct Wire(mindlite::Agent);

impl Serialize for Wire {
    fn serialize<S: serde::Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        self.0.wire().serialize(serializer)
    }
}

/// The body of a C call that answers JSON: clears `*out_json`, runs `body` on the live
/// handle `db`, and hands its value to the caller as JSON text in `*out_json` (which must not
/// be NULL). A failure is recorded on the handle and returned as its status.
pub(crate) fn answer_json<T: Serialize>(
    db: *const Database,
    out_json: *mut *mut c_char,
    body: impl FnOnce(&Database) -> Result<T, Failure>,
) -> Status {
    // SAFETY: every caller passes the `out_json` its C caller gave: NULL or writable, per the
    // header.
    unsafe { boundary::clear(out_json) };
    with_database(db, |db| give_json(out_json, &body(db)?))
}

/// [`answer_json`] for calls whose answer the caller may decline (`out_json` NULL).
pub(crate) fn answer_optional_json<T: Serialize>(
    db: *const Database,
    out_json: *mut *mut c_char,
    body: impl FnOnce(&Database) -> Result<T, Failure>,
) -> Status {
    // SAFETY: as in `answer_json`.
    unsafe { boundary::clear(out_json) };
    with_database(db, |db| give_optional_json(out_json, &body(db)?))
}

/// The projects, by name: `[{"id": 1, "name": "mindsdb", "created_at": "…"}, …]`.
///
/// Ownership: the caller frees `*out_json` with `mindlite_free`.
#[no_mangle]
pub unsafe extern "C" fn mindlite_project_list(
    db: *const Database,
    out_json: *mut *mut c_char,
) -> Status {
    answer_json(db, out_json, |db| Ok(db.engine().list_projects()?))
}

/// One project by name (case-insensitive): `{"id": …, "name": …, "created_at": …}`;
/// `MINDLITE_NOT_FOUND` when there is none.
///
/// Ownership: the caller frees `*out_json` with `mindlite_free`.
#[no_mangle]
pub unsafe extern "C" fn mindlite_project_get(
    db: *const Database,
    name: *const c_char,
    out_json: *mut *mut c_char,
) -> Status {
    answer_json(db, out_json, |db| {
        // SAFETY: a NUL-terminated string, per the header.
        let name = unsafe { boundary::text(name, "name") }?;
        Ok(db.engine().get_project(name)?)
    })
}

/// The engine's status as `GET /api/status` reports it:
/// `{"mindsdb_version": …, "environment": "local", "auth": {…}}`. `authenticated` says whether
/// the caller has shown a valid token (reported as `auth.confirmed`).
///
/// Ownership: the caller frees `*out_json` with `mindlite_free`.
#[no_mangle]
pub unsafe extern "C" fn mindlite_status_get(
    db: *const Database,
    authenticated: bool,
    out_json: *mut *mut c_char,
) -> Status {
    answer_json(db, out_json, |db| Ok(db.engine().status(authenticated)))
}

/// Parses a JSON argument, naming it when it is not JSON.
pub(crate) fn json_arg(text: &str, what: &str) -> Result<serde_json::Value, Failure> {
    serde_json::from_str(text)
        .map_err(|e| mindlite::Error::invalid(format!("'{what}' is not valid JSON: {e}")).into())
}

/// The agents of `project`, by name, in MindsDB's shape: `[{"id", "name", "project_id",
/// "updated_at", "created_at", "data", "model", "prompt_template", "params"}, …]` (empty
/// fields left out). `MINDLITE_NOT_FOUND` for an unknown project.
///
/// Ownership: the caller frees `*out_json` with `mindlite_free`.
#[no_mangle]
pub unsafe extern "C" fn mindlite_agent_list(
    db: *const Database,
    project: *const c_char,
    out_json: *mut *mut c_char,
) -> Status {
    answer_json(db, out_json, |db| {
        // SAFETY: a NUL-terminated string, per the header.
        let project = unsafe { boundary::text(project, "project") }?;
        let agents = db.engine().list_agents(project)?;
        Ok(agents.into_iter().map(Wire).collect::<Vec<_>>())
    })
}

/// One agent by name (case-insensitive), as `mindlite_agent_list` shows each.
/// `MINDLITE_NOT_FOUND` for an unknown project or agent.
///
/// Ownership: the caller frees `*out_json` with `mindlite_free`.
#[no_mangle]
pub unsafe extern "C" fn mindlite_agent_get(
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
        let agent = db.engine().get_agent(project, name)?;
        Ok(Wire(agent))
    })
}

/// Creates an agent from MindsDB's body, for example
/// `{"name": "a", "model": {"provider": "openai", "model_name": "gpt-4o"}, "data": {"tables":
/// ["mindsdb.t"]}, "prompt_template": "…"}`; without a model the configured default is used.
/// `*out_json` receives the new agent. `MINDLITE_CONFLICT` when the name is taken,
/// `MINDLITE_INVALID` for a parameter outside MindsDB's set or a table that does not exist.
///
/// Ownership: the caller frees `*out_json` with `mindlite_free`; it may pass NULL to skip it.
#[no_mangle]
pub unsafe extern "C" fn mindlite_agent_create(
    db: *const Database,
    project: *const c_char,
    agent_json: *const c_char,
    out_json: *mut *mut c_char,
) -> Status {
    answer_optional_json(db, out_json, |db| {
        // SAFETY: NUL-terminated strings, per the header.
        let (project, spec) = unsafe {
            (
                boundary::text(project, "project")?,
                boundary::text(agent_json, "agent_json")?,
            )
        };
        let spec = json_arg(spec, "agent_json")?;
        let engine = db.engine();
        let agent = engine.block_on(engine.create_agent(project, spec))?;
        Ok(Wire(agent))
    })
}

/// Updates an agent as MindsDB's PUT does: `changes_json`'s keys shallow-merged into it, a null
/// dropping a key, a different `name` renaming it. `MINDLITE_NOT_FOUND` for a missing agent
/// (update never creates), `MINDLITE_CONFLICT` when the new name is taken.
///
/// Ownership: the caller frees `*out_json` with `mindlite_free`; it may pass NULL to skip it.
#[no_mangle]
pub unsafe extern "C" fn mindlite_agent_update(
    db: *const Database,
    project: *const c_char,
    name: *const c_char,
    changes_json: *const c_char,
    out_json: *mut *mut c_char,
) -> Status {
    answer_optional_json(db, out_json, |db| {
        // SAFETY: NUL-terminated strings, per the header.
        let (project, name, changes) = unsafe {
            (
                boundary::text(project, "project")?,
                boundary::text(name, "name")?,
                boundary::text(changes_json, "changes_json")?,
            )
        };
        let changes = json_arg(changes, "changes_json")?;
        let engine = db.engine();
        let agent = engine.block_on(engine.update_agent(project, name, changes))?;
        Ok(Wire(agent))
    })
}

/// Deletes an agent; `MINDLITE_NOT_FOUND` when there is none of that name.
#[no_mangle]
pub unsafe extern "C" fn mindlite_agent_delete(
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
        engine.block_on(engine.delete_agent(project, name))?;
        Ok(())
    })
}

/// Asks an agent. `messages_json` is `[{"role": "user", "content": "…"}]` (earlier turns
/// before it) or the legacy `[{"question": "…", "answer": null}]`; `*out_json` receives
/// `{"message": {"content": "…", "role": "assistant", "trace_id": "…"}}`. Blocks until the
/// answer is there; `MINDLITE_UPSTREAM` when the model provider failed or timed out.
///
/// Ownership: the caller frees `*out_json` with `mindlite_free`.
#[no_mangle]
pub unsafe extern "C" fn mindlite_agent_ask(
    db: *const Database,
    project: *const c_char,
    name: *const c_char,
    messages_json: *const c_char,
    out_json: *mut *mut c_char,
) -> Status {
    answer_json(db, out_json, |db| {
        // SAFETY: NUL-terminated strings, per the header.
        let (project, name, messages) = unsafe {
            (
                boundary::text(project, "project")?,
                boundary::text(name, "name")?,
                boundary::text(messages_json, "messages_json")?,
            )
        };
        let messages = json_arg(messages, "messages_json")?;
        let engine = db.engine();
        let answer = engine.block_on(engine.ask_agent(project, name, &messages))?;
        Ok(answer.to_wire_json())
    })
}

/// Like [`give_json`], for an out-parameter the caller may leave NULL.
pub(crate) fn give_optional_json(
    out_json: *mut *mut c_char,
    value: &impl Serialize,
) -> Result<(), Failure> {
    if out_json.is_null() {
        return Ok(());
    }
    give_json(out_json, value)
}

/// A C version argument: 0 means the active version.
fn version_arg(version: u32) -> Option<u32> {
    (version > 0).then_some(version)
}

/// Every version of every model of `project`, by name and version, as MindsDB's REST API lists
/// them: `[{"id", "name", "version", "status", "active", "accuracy", "predict", "error", …}, …]`.
/// `MINDLITE_NOT_FOUND` for an unknown project.
///
/// Ownership: the caller frees `*out_json` with `mindlite_free`.
#[no_mangle]
pub unsafe extern "C" fn mindlite_model_list(
    db: *const Database,
    project: *const c_char,
    out_json: *mut *mut c_char,
) -> Status {
    answer_json(db, out_json, |db| {
        // SAFETY: a NUL-terminated string, per the header.
        let project = unsafe { boundary::text(project, "project") }?;
        let models = db.engine().list_models(project)?;
        let wire: Vec<serde_json::Value> = models.iter().map(|m| m.to_wire_json()).collect();
        Ok(wire)
    })
}

/// One model's version (`version` 0: the active one) as MindsDB's REST record; poll its
/// `"status"` (`generating`, `training`, `complete`, `error`) to follow training.
/// `MINDLITE_NOT_FOUND` when there is no such model or version.
///
/// Ownership: the caller frees `*out_json` with `mindlite_free`.
#[no_mangle]
pub unsafe extern "C" fn mindlite_model_get(
    db: *const Database,
    project: *const c_char,
    name: *const c_char,
    version: u32,
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
        let model = db.engine().get_model(project, name, version_arg(version))?;
        Ok(model.to_wire_json())
    })
}

/// Runs one `CREATE MODEL p.m FROM db (SELECT …) PREDICT col [USING …]` statement with
/// `project` as the current database. Returns at once with the new version (status
/// `generating`); training goes on in the background. `MINDLITE_CONFLICT` when the model
/// exists, `MINDLITE_INVALID` for anything but one CREATE MODEL statement, a missing table or
/// target column.
///
/// Ownership: the caller frees `*out_json` with `mindlite_free`; it may pass NULL to skip it.
#[no_mangle]
pub unsafe extern "C" fn mindlite_model_create(
    db: *const Database,
    project: *const c_char,
    statement: *const c_char,
    out_json: *mut *mut c_char,
) -> Status {
    answer_optional_json(db, out_json, |db| {
        // SAFETY: NUL-terminated strings, per the header.
        let (project, statement) = unsafe {
            (
                boundary::text(project, "project")?,
                boundary::text(statement, "statement")?,
            )
        };
        let engine = db.engine();
        let model = engine.block_on(engine.create_model(project, statement))?;
        Ok(model.to_wire_json())
    })
}

/// Adds a version of a model, trained from `query` (a SELECT run in the database `data_db`,
/// or in `project` when `data_db` is NULL), or from the latest version's query when `query`
/// is NULL; `*out_json` receives the new version (status `generating`; it becomes the active
/// one when training completes). `MINDLITE_NOT_FOUND` when there is no such model,
/// `MINDLITE_INVALID` for `data_db` without `query` or a bad query, `MINDLITE_CONFLICT` while
/// another version is still training.
///
/// Ownership: the caller frees `*out_json` with `mindlite_free`; it may pass NULL to skip it.
#[no_mangle]
pub unsafe extern "C" fn mindlite_model_retrain(
    db: *const Database,
    project: *const c_char,
    name: *const c_char,
    query: *const c_char,
    data_db: *const c_char,
    out_json: *mut *mut c_char,
) -> Status {
    answer_optional_json(db, out_json, |db| {
        // SAFETY: NUL-terminated strings (query and data_db may be NULL), per the header.
        let (project, name, query, data_db) = unsafe {
            (
                boundary::text(project, "project")?,
                boundary::text(name, "name")?,
                boundary::optional_text(query, "query")?,
                boundary::optional_text(data_db, "data_db")?,
            )
        };
        let engine = db.engine();
        let model = engine.block_on(engine.retrain_model(project, name, query, data_db))?;
        Ok(model.to_wire_json())
    })
}

/// Makes a complete version of a model the active one, which predictions use; `*out_json`
/// receives that version. `MINDLITE_NOT_FOUND` when there is no such model or version,
/// `MINDLITE_INVALID` when the version is not complete.
///
/// Ownership: the caller frees `*out_json` with `mindlite_free`; it may pass NULL to skip it.
#[no_mangle]
pub unsafe extern "C" fn mindlite_model_set_active(
    db: *const Database,
    project: *const c_char,
    name: *const c_char,
    version: u32,
    out_json: *mut *mut c_char,
) -> Status {
    answer_optional_json(db, out_json, |db| {
        // SAFETY: NUL-terminated strings, per the header.
        let (project, name) = unsafe {
            (
                boundary::text(project, "project")?,
                boundary::text(name, "name")?,
            )
        };
        let engine = db.engine();
        let model = engine.block_on(engine.set_active_model(project, name, version))?;
        Ok(model.to_wire_json())
    })
}

/// Drops a model with every version (`version` 0), or one version of it.
/// `MINDLITE_NOT_FOUND` when there is no such model or version.
#[no_mangle]
pub unsafe extern "C" fn mindlite_model_delete(
    db: *const Database,
    project: *const c_char,
    name: *const c_char,
    version: u32,
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
        engine.block_on(engine.drop_model(project, name, version_arg(version)))?;
        Ok(())
    })
}

/// Predicts with a model's version (`version` 0: the active one) for `rows_json`, a list of
/// `{"column": value}` objects; `*out_json` receives the rows with every training column, the
/// prediction filled in. `MINDLITE_INVALID` when the version is not complete ("model creation
/// not completed") or a value does not fit its column.
///
/// Ownership: the caller frees `*out_json` with `mindlite_free`.
#[no_mangle]
pub unsafe extern "C" fn mindlite_model_predict(
    db: *const Database,
    project: *const c_char,
    name: *const c_char,
    version: u32,
    rows_json: *const c_char,
    out_json: *mut *mut c_char,
) -> Status {
    answer_json(db, out_json, |db| {
        // SAFETY: NUL-terminated strings, per the header.
        let (project, name, rows) = unsafe {
            (
                boundary::text(project, "project")?,
                boundary::text(name, "name")?,
                boundary::text(rows_json, "rows_json")?,
            )
        };
        let rows = json_arg(rows, "rows_json")?;
        let engine = db.engine();
        let predicted =
            engine.block_on(engine.predict(project, name, version_arg(version), &rows))?;
        Ok(predicted)
    })
}

/// What training found for a model's version (`version` 0: the active one):
/// `[{"accuracies", "column_importances", "inputs", "outputs", "model"}]`.
///
/// Ownership: the caller frees `*out_json` with `mindlite_free`.
#[no_mangle]
pub unsafe extern "C" fn mindlite_model_describe(
    db: *const Database,
    project: *const c_char,
    name: *const c_char,
    version: u32,
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
        let model = db.engine().get_model(project, name, version_arg(version))?;
        Ok(model.describe(None)?)
    })
}

/// Stores `len` bytes at `data` as the table `files.<name>`, all rows or none: a CSV file with
/// a header line, JSON (an array of objects or one object per line), Parquet or an `.xlsx`
/// sheet, column types inferred; or a document (text, Markdown, HTML, PDF, `.docx`) as rows
/// of its text's chunks (`content`, `metadata`); or a zip archive of one such file. `format`
/// is "csv", "json", "parquet", "xlsx", "txt", "md", "html", "pdf", "docx" or "zip", or NULL
/// to let the first bytes decide. `*out_rows`
/// (may be NULL) receives the rows stored. `MINDLITE_CONFLICT` when a file of that name
/// exists, `MINDLITE_INVALID` when the bytes cannot be read (the message says why).
#[no_mangle]
pub unsafe extern "C" fn mindlite_file_upload(
    db: *const Database,
    name: *const c_char,
    data: *const u8,
    len: usize,
    format: *const c_char,
    out_rows: *mut u64,
) -> Status {
    with_database(db, |db| {
        // SAFETY: NUL-terminated strings (format may be NULL), per the header.
        let (name, format) = unsafe {
            (
                boundary::text(name, "name")?,
                boundary::optional_text(format, "format")?,
            )
        };
        if data.is_null() && len > 0 {
            return Err(Failure::misuse("data is NULL but len is not 0"));
        }
        let bytes = if len == 0 {
            Vec::new()
        } else {
            // SAFETY: `data` points to `len` readable bytes, per the header.
            unsafe { std::slice::from_raw_parts(data, len) }.to_vec()
        };
        let format = format.map(mindlite::FileFormat::parse).transpose()?;
        let engine = db.engine();
        let rows = engine.block_on(engine.upload_file(name, bytes, format, None))?;
        if !out_rows.is_null() {
            // SAFETY: NULL or writable, per the header.
            unsafe { *out_rows = rows };
        }
        Ok(())
    })
}

/// Fetches the file at `url` (http or https, through the egress policy, no redirects) and
/// stores it as `mindlite_file_upload` does. `file_name` (may be NULL) names its format, else
/// the URL's last path segment or the answer's `Content-Type`. `*out_rows` (may be NULL)
/// receives the rows stored. `MINDLITE_UNAVAILABLE` when the host cannot be reached,
/// `MINDLITE_FORBIDDEN` when the policy refuses it or `files.url_upload` is off,
/// `MINDLITE_INVALID` for a bad URL, an answer other than 200 or an unreadable file.
#[no_mangle]
pub unsafe extern "C" fn mindlite_file_upload_url(
    db: *const Database,
    name: *const c_char,
    url: *const c_char,
    file_name: *const c_char,
    out_rows: *mut u64,
) -> Status {
    with_database(db, |db| {
        // SAFETY: NUL-terminated strings (file_name may be NULL), per the header.
        let (name, url, file_name) = unsafe {
            (
                boundary::text(name, "name")?,
                boundary::text(url, "url")?,
                boundary::optional_text(file_name, "file_name")?,
            )
        };
        let engine = db.engine();
        let rows = engine.block_on(engine.upload_url(name, url, file_name))?;
        if !out_rows.is_null() {
            // SAFETY: NULL or writable, per the header.
            unsafe { *out_rows = rows };
        }
        Ok(())
    })
}

/// The uploaded files: `[{"name", "row_count", "columns"}, …]`.
///
/// Ownership: the caller frees `*out_json` with `mindlite_free`.
#[no_mangle]
pub unsafe extern "C" fn mindlite_file_list(
    db: *const Database,
    out_json: *mut *mut c_char,
) -> Status {
    answer_json(db, out_json, |db| {
        let files: Vec<serde_json::Value> = db
            .engine()
            .list_files()?
            .iter()
            .map(|f| f.to_wire_json())
            .collect();
        Ok(files)
    })
}

/// Removes the uploaded file `name`. `MINDLITE_NOT_FOUND` when there is none.
#[no_mangle]
pub unsafe extern "C" fn mindlite_file_delete(db: *const Database, name: *const c_char) -> Status {
    with_database(db, |db| {
        // SAFETY: NUL-terminated string, per the header.
        let name = unsafe { boundary::text(name, "name")? };
        let engine = db.engine();
        engine.block_on(engine.delete_file(name))?;
        Ok(())
    })
}
