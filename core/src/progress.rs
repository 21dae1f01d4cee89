//! How far long writes have come while they run: a knowledge base insert reports the
//! documents it read, the chunks it embedded and indexed, and its phase, to a board that
//! `information_schema.knowledge_base_inserts` shows (each tenant its own) and to the caller's
//! callback, which may stop it. In memory only: a restart forgets it. Finished inserts stay on
//! the board, the last [`FINISHED_KEPT`] of each tenant.

use std::sync::Arc;

use parking_lot::Mutex;
use serde::Serialize;

use crate::tenant::TenantId;

/// Finished inserts kept on the board per tenant.
const FINISHED_KEPT: usize = 16;

/// One insert's progress, as reported.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct InsertProgress {
    /// The knowledge base's project.
    pub project: String,
    /// The knowledge base.
    pub knowledge_base: String,
    /// `reading` (rows and embedding them), `storing` (the write transaction), `done` or
    /// `failed`.
    pub status: String,
    /// Documents (rows) read so far.
    pub documents: u64,
    /// Chunks cut from them.
    pub chunks: u64,
    /// Chunks embedded.
    pub embedded: u64,
    /// Chunks added to the vector and keyword indexes.
    pub indexed: u64,
    /// When it started, `YYYY-MM-DD HH:MM:SS.ffffff` UTC.
    pub started_at: String,
    /// When it last reported.
    pub updated_at: String,
    /// Why it failed, when it did.
    pub error: Option<String>,
}

/// What a caller is told of its insert's progress; returning false stops the insert (it then
/// fails as cancelled, having written nothing).
pub type ProgressCallback = Box<dyn FnMut(&InsertProgress) -> bool + Send>;

struct Entry {
    tenant: TenantId,
    id: u64,
    finished: bool,
    progress: InsertProgress,
}

/// Every tenant's inserts in progress and recently finished.
#[derive(Default)]
pub(crate) struct ProgressBoard {
    entries: Mutex<(u64, Vec<Entry>)>,
}

impl ProgressBoard {
    /// Puts a new insert into `project.knowledge_base` on the board.
    pub(crate) fn start(
        self: &Arc<Self>,
        tenant: TenantId,
        project: &str,
        knowledge_base: &str,
        callback: Option<ProgressCallback>,
    ) -> Tracker {
        let now = crate::time::now_text();
        let progress = InsertProgress {
            project: project.to_string(),
            knowledge_base: knowledge_base.to_string(),
            status: "reading".into(),
            documents: 0,
            chunks: 0,
            embedded: 0,
            indexed: 0,
            started_at: now.clone(),
            updated_at: now,
            error: None,
        };
        let mut entries = self.entries.lock();
        entries.0 += 1;
        let id = entries.0;
        entries.1.push(Entry {
            tenant,
            id,
            finished: false,
            progress,
        });
        Tracker {
            board: Arc::clone(self),
            id,
            callback,
            finished: false,
        }
    }

    /// `tenant`'s inserts, oldest first.
    pub(crate) fn list(&self, tenant: TenantId) -> Vec<InsertProgress> {
        self.entries
            .lock()
            .1
            .iter()
            .filter(|e| e.tenant == tenant)
            .map(|e| e.progress.clone())
            .collect()
    }

    /// Applies `change` to the entry `id` and returns its new state.
    fn change(
        &self,
        id: u64,
        finish: bool,
        change: impl FnOnce(&mut InsertProgress),
    ) -> Option<InsertProgress> {
        let mut entries = self.entries.lock();
        let entry = entries.1.iter_mut().find(|e| e.id == id)?;
        change(&mut entry.progress);
        entry.progress.updated_at = crate::time::now_text();
        let state = entry.progress.clone();
        if finish {
            entry.finished = true;
            let tenant = entry.tenant;
            let finished = entries
                .1
                .iter()
                .filter(|e| e.finished && e.tenant == tenant)
                .count();
            let mut extra = finished.saturating_sub(FINISHED_KEPT);
            entries.1.retain(|e| {
                let drop = extra > 0 && e.finished && e.tenant == tenant;
                extra -= usize::from(drop);
                !drop
            });
        }
        Some(state)
    }
}

/// One insert's place on the board; it reports failure when dropped unfinished.
pub(crate) struct Tracker {
    board: Arc<ProgressBoard>,
    id: u64,
    callback: Option<ProgressCallback>,
    finished: bool,
}

impl Tracker {
    /// Records a change; false when the caller's callback asks to stop.
    pub(crate) fn report(&mut self, change: impl FnOnce(&mut InsertProgress)) -> bool {
        let Some(state) = self.board.change(self.id, false, change) else {
            return true;
        };
        match self.callback.as_mut() {
            Some(callback) => callback(&state),
            None => true,
        }
    }

    /// Records the end: `done`, or `failed` with `error`.
    pub(crate) fn finish(mut self, error: Option<String>) {
        self.end(error);
    }

    fn end(&mut self, error: Option<String>) {
        self.finished = true;
        let state = self.board.change(self.id, true, |p| {
            p.status = match error {
                None => "done".into(),
                Some(_) => "failed".into(),
            };
            p.error = error;
        });
        if let (Some(callback), Some(state)) = (self.callback.as_mut(), state) {
            callback(&state);
        }
    }
}

impl Drop for Tracker {
    fn drop(&mut self) {
        if !self.finished {
            self.end(Some("stopped before it finished".into()));
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn inserts_report_to_the_board_and_their_callback() {
        let board = Arc::new(ProgressBoard::default());
        let seen = Arc::new(Mutex::new(Vec::new()));
        let record = Arc::clone(&seen);
        let mut tracker = board.start(
            TenantId(7),
            "p",
            "kb",
            Some(Box::new(move |p: &InsertProgress| {
                record.lock().push(p.status.clone());
                p.embedded < 10
            })),
        );
        assert!(tracker.report(|p| p.embedded = 5));
        assert!(
            !tracker.report(|p| p.embedded = 10),
            "the callback asks to stop"
        );
        assert_eq!(board.list(TenantId(7))[0].embedded, 10);
        assert!(
            board.list(TenantId(8)).is_empty(),
            "tenants see only theirs"
        );
        drop(tracker);
        let last = &board.list(TenantId(7))[0];
        assert_eq!(last.status, "failed");
        assert_eq!(seen.lock().last().unwrap(), "failed");
        for _ in 0..FINISHED_KEPT + 3 {
            board.start(TenantId(7), "p", "kb", None).finish(None);
        }
        let kept = board.list(TenantId(7));
        assert_eq!(kept.len(), FINISHED_KEPT);
        assert!(kept.iter().all(|p| p.status == "done"));
    }
}
