//! Timestamps as MindsDB writes them: `YYYY-MM-DD HH:MM:SS.ffffff`, UTC, no zone suffix.

/// The current time in MindsDB's text form.
pub(crate) fn now_text() -> String {
    chrono::Utc::now()
        .format("%Y-%m-%d %H:%M:%S%.6f")
        .to_string()
}

/// The current time in Unix seconds.
pub(crate) fn now_unix() -> u64 {
    u64::try_from(chrono::Utc::now().timestamp()).unwrap_or(0)
}

/// Unix seconds in MindsDB's text form.
pub(crate) fn unix_text(seconds: u64) -> String {
    let seconds = i64::try_from(seconds).unwrap_or(i64::MAX);
    chrono::DateTime::from_timestamp(seconds, 0)
        .unwrap_or_default()
        .format("%Y-%m-%d %H:%M:%S%.6f")
        .to_string()
}
