//! Knowledge bases: create, list, get, drop and insert documents, with MindsDB's REST bodies as
//! JSON text. Searching returns a result like `mindlite_query`'s (`mindlite_kb_search`, in
//! `rows`).

use std::ffi::{c_char, c_int, c_void, CString};

use serde::Serialize;

use crate::boundary::{self, Status};
use crate::database::{with_database, Database};
use crate::records::{answer_json, answer_optional_json, json_arg};

/// A knowledge base as MindsDB's REST API shows it.
struct Wire(mindlite::KnowledgeBase);

impl Serialize for Wire {
    fn serialize<S: serde::Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        self.0.wire().serialize(serializer)
    }
}

/// Creates a knowledge base from MindsDB's body, for example `{"name": "kb",
/// "embedding_model": {"provider": "openai", "model_name": "text-embedding-3-small"},
/// "metadata_columns": ["topic"], "preprocessing": {"text_chunking_config": {"chunk_size":
/// 1000, "chunk_overlap": 200}}}`; without an embedding model the configured one is used.
/// `*out_json` receives it (`{"name", "project", "embedding_model", "metadata_columns",
/// "content_columns", "id_column", "params", …}`, the API key masked). `MINDLITE_CONFLICT`
/// when the name is taken, `MINDLITE_INVALID` for a bad parameter (the message names it),
/// `MINDLITE_NOT_FOUND` for an unknown project.
///
/// Ownership: the caller frees `*out_json` with `mindlite_free`; it may pass NULL to skip it.
#[no_mangle]
pub unsafe extern "C" fn mindlite_kb_create(
    db: *const Database,
    project: *const c_char,
    kb_json: *const c_char,
    out_json: *mut *mut c_char,
) -> Status {
    answer_optional_json(db, out_json, |db| {
        // SAFETY: NUL-terminated strings, per the header.
        let (project, body) = unsafe {
            (
                boundary::text(project, "project")?,
                boundary::text(kb_json, "kb_json")?,
            )
        };
        let body = json_arg(body, "kb_json")?;
        let engine = db.engine();
        Ok(Wire(
            engine.block_on(engine.create_knowledge_base(project, body))?,
        ))
    })
}

/// The knowledge bases of `project`, by name, each as `mindlite_kb_create` shows it.
/// `MINDLITE_NOT_FOUND` for an unknown project.
///
/// Ownership: the caller frees `*out_json` with `mindlite_free`.
#[no_mangle]
pub unsafe extern "C" fn mindlite_kb_list(
    db: *const Database,
    project: *const c_char,
    out_json: *mut *mut c_char,
) -> Status {
    answer_json(db, out_json, |db| {
        // SAFETY: a NUL-terminated string, per the header.
        let project = unsafe { boundary::text(project, "project") }?;
        let kbs = db.engine().list_knowledge_bases(project)?;
        Ok(kbs.into_iter().map(Wire).collect::<Vec<_>>())
    })
}

/// One knowledge base by name (case-insensitive). `MINDLITE_NOT_FOUND` when there is none.
///
/// Ownership: the caller frees `*out_json` with `mindlite_free`.
#[no_mangle]
pub unsafe extern "C" fn mindlite_kb_get(
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
        Ok(Wire(db.engine().get_knowledge_base(project, name)?))
    })
}

/// Drops a knowledge base and its documents. `MINDLITE_NOT_FOUND` when there is none.
#[no_mangle]
pub unsafe extern "C" fn mindlite_kb_drop(
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
        engine.block_on(engine.delete_knowledge_base(project, name))?;
        Ok(())
    })
}

/// Inserts documents: `documents_json` is `{"rows": [{"id": 1, "content": "…", "topic": "…"},
/// …]}` or `{"query": "SELECT …"}` (run in `project`). They are chunked, embedded and stored;
/// a document whose id is there already is replaced; all or nothing. `*out_count` (may be
/// NULL) receives the documents inserted. `MINDLITE_UPSTREAM` when the embedding provider
/// failed, `MINDLITE_INVALID` for rows without the content column.
#[no_mangle]
pub unsafe extern "C" fn mindlite_kb_insert(
    db: *const Database,
    project: *const c_char,
    name: *const c_char,
    documents_json: *const c_char,
    out_count: *mut u64,
) -> Status {
    with_database(db, |db| {
        // SAFETY: NUL-terminated strings, per the header.
        let (project, name, body) = unsafe {
            (
                boundary::text(project, "project")?,
                boundary::text(name, "name")?,
                boundary::text(documents_json, "documents_json")?,
            )
        };
        let body = json_arg(body, "documents_json")?;
        let engine = db.engine();
        let progress = db.progress_handler().map(progress_callback);
        let count =
            engine.block_on(engine.insert_into_knowledge_base(project, name, body, progress))?;
        if !out_count.is_null() {
            // SAFETY: NULL or writable, per the header.
            unsafe { *out_count = count };
        }
        Ok(())
    })
}

/// A knowledge-base insert's progress handler: called with the progress as JSON text (valid
/// only during the call) and the user data given to `mindlite_kb_progress_handler`; returns 0
/// to go on, anything else to stop the insert.
pub type ProgressHandler =
    unsafe extern "C" fn(progress_json: *const c_char, user_data: *mut c_void) -> c_int;

/// Sets the handler `mindlite_kb_insert` calls on this handle after each embedding request and
/// when the insert ends, with `{"project", "knowledge_base", "status" ("reading", "storing",
/// "done", "failed"), "documents", "chunks", "embedded", "indexed", "started_at",
/// "updated_at", "error"}`; NULL removes it. As SQLite's progress handler, a non-zero return
/// stops the insert, which then fails with `MINDLITE_UNAVAILABLE` having written nothing. The
/// handler runs on one of the engine's threads, not the caller's, while `mindlite_kb_insert`
/// waits; `user_data` is passed through untouched and must stay valid while it is set.
#[no_mangle]
pub extern "C" fn mindlite_kb_progress_handler(
    db: *const Database,
    handler: Option<
        unsafe extern "C" fn(progress_json: *const c_char, user_data: *mut c_void) -> c_int,
    >,
    user_data: *mut c_void,
) -> Status {
    with_database(db, |db| {
        db.set_progress_handler(handler.map(|h| (h, user_data as usize)));
        Ok(())
    })
}

/// The engine's progress callback calling a C handler.
fn progress_callback((handler, user_data): (ProgressHandler, usize)) -> mindlite::ProgressCallback {
    Box::new(move |progress: &mindlite::InsertProgress| {
        let text = serde_json::to_string(progress).unwrap_or_default();
        let Ok(text) = CString::new(text) else {
            return true;
        };
        // SAFETY: the handler is the C function the caller set, called as the header says:
        // a NUL-terminated string valid during the call and the caller's user data.
        let stop = unsafe { handler(text.as_ptr(), user_data as *mut c_void) };
        stop == 0
    })
}
