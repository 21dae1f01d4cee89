//! Timestamps as MindsDB writes them: `YYYY-MM-DD HH:MM:SS.ffffff`, UTC, no zone suffix.

/// The current time in MindsDB's text form.
pub(crate) fn now_text() -> String {
    chrono::Utc::now()
        .format("%Y-%m-%d %H:%M:%S%.6f")
        .to_string()
}
