//! Work that runs for an object after the statement that started it has answered (a model's
//! training) or while it runs (a knowledge base's insert), by object, so that dropping the
//! object stops it at once: the drop cancels the work's token, and the work, which checks
//! it in its loops and selects on it while it waits, stops and writes nothing more.
//!
//! Keys name objects as [`Object`] builds them; a drop cancels every key under the object
//! (a model's versions, a project's models and knowledge bases). Only work registered before
//! the drop's transaction is stopped: the drop takes [`Running::mark`] inside that transaction,
//! and a model version registers inside the transaction that records it, so the writer lock
//! orders the two; work for an object made again after the drop goes on.

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use parking_lot::Mutex;
use tokio_util::sync::CancellationToken;

use crate::admission::Ticket;
use crate::tenant::TenantId;

/// The work running for objects, of one engine.
#[derive(Debug, Default)]
pub(crate) struct Running {
    /// The number the next registration gets; registrations are numbered from 1.
    next: AtomicU64,
    entries: Mutex<HashMap<u64, Entry>>,
}

/// One piece of registered work.
#[derive(Debug)]
struct Entry {
    key: String,
    token: CancellationToken,
    /// The place the work holds among its user's (a training's), given back when the work
    /// ends or is cancelled, whichever comes first.
    held: Option<Ticket>,
}

/// An object work runs for, as a key: kind, tenant, project, name (lower case) and, for a
/// model's training, the version. A key of fewer parts names every object under it.
#[derive(Debug, Clone)]
pub(crate) struct Object(String);

impl Object {
    /// Every object of `project` (dropped with it).
    pub(crate) fn project(tenant: TenantId, project: &str) -> Object {
        Object(format!(
            "{}\u{0}{}\u{0}",
            tenant.0,
            project.to_ascii_lowercase()
        ))
    }

    /// The model `name` of `project`, every version of it.
    pub(crate) fn model(tenant: TenantId, project: &str, name: &str) -> Object {
        let Object(project) = Object::project(tenant, project);
        Object(format!(
            "{project}model\u{0}{}\u{0}",
            name.to_ascii_lowercase()
        ))
    }

    /// One version of a model.
    pub(crate) fn model_version(
        tenant: TenantId,
        project: &str,
        name: &str,
        version: u32,
    ) -> Object {
        let Object(model) = Object::model(tenant, project, name);
        Object(format!("{model}{version}\u{0}"))
    }

    /// A resumable query of `tenant` (`catalog::queries`), by its id.
    pub(crate) fn query(tenant: TenantId, id: u64) -> Object {
        Object(format!("{}\u{0}\u{0}query\u{0}{id}\u{0}", tenant.0))
    }

    /// The knowledge base `name` of `project`.
    pub(crate) fn knowledge_base(tenant: TenantId, project: &str, name: &str) -> Object {
        let Object(project) = Object::project(tenant, project);
        Object(format!(
            "{project}kb\u{0}{}\u{0}",
            name.to_ascii_lowercase()
        ))
    }
}

/// Work registered for an object; dropping it (the work ended) unregisters it.
#[derive(Debug)]
pub(crate) struct Registration {
    running: Arc<Running>,
    number: u64,
    token: CancellationToken,
}

impl Registration {
    /// Cancelled when the object is dropped.
    pub(crate) fn token(&self) -> &CancellationToken {
        &self.token
    }

    /// Keeps `ticket` (the work's place among its user's) until the work ends or is
    /// cancelled: a drop gives the place back at once, whatever the work is still finishing.
    pub(crate) fn hold(&self, ticket: Option<Ticket>) {
        if self.token.is_cancelled() {
            return;
        }
        if let Some(entry) = self.running.entries.lock().get_mut(&self.number) {
            entry.held = ticket;
        }
    }
}

impl Drop for Registration {
    fn drop(&mut self) {
        self.running.entries.lock().remove(&self.number);
    }
}

impl Running {
    /// Registers work for `object`, stopped through `token`.
    pub(crate) fn register(
        self: &Arc<Self>,
        object: &Object,
        token: CancellationToken,
    ) -> Registration {
        let number = self.next.fetch_add(1, Ordering::SeqCst) + 1;
        let entry = Entry {
            key: object.0.clone(),
            token: token.clone(),
            held: None,
        };
        self.entries.lock().insert(number, entry);
        Registration {
            running: Arc::clone(self),
            number,
            token,
        }
    }

    /// Whether `tenant` has a model training and a knowledge-base insert running, in that
    /// order.
    pub(crate) fn busy(&self, tenant: TenantId) -> (bool, bool) {
        let prefix = format!("{}\u{0}", tenant.0);
        let entries = self.entries.lock();
        let kinds = entries
            .values()
            .filter_map(|entry| entry.key.strip_prefix(&prefix))
            .filter_map(|rest| rest.split('\u{0}').nth(1));
        let (mut training, mut inserting) = (false, false);
        for kind in kinds {
            training |= kind == "model";
            inserting |= kind == "kb";
        }
        (training, inserting)
    }

    /// Whether work is registered for `object` (exactly that key).
    pub(crate) fn is_running(&self, object: &Object) -> bool {
        self.entries
            .lock()
            .values()
            .any(|entry| entry.key == object.0)
    }

    /// How far registrations have come: take it inside the transaction that drops an object,
    /// and hand it to [`Running::cancel`] once that transaction has committed.
    pub(crate) fn mark(&self) -> u64 {
        self.next.load(Ordering::SeqCst)
    }

    /// Cancels the work registered for `object` (or any object under it) up to `mark`; returns
    /// how many pieces of work it cancelled.
    pub(crate) fn cancel(&self, object: &Object, mark: u64) -> usize {
        let mut freed = Vec::new();
        let mut entries = self.entries.lock();
        for (_, entry) in entries
            .iter_mut()
            .filter(|(number, entry)| **number <= mark && entry.key.starts_with(&object.0))
        {
            entry.token.cancel();
            freed.push(entry.held.take());
        }
        drop(entries);
        // The places the work held are free now, before the drop answers.
        let cancelled = freed.len();
        drop(freed);
        cancelled
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn busy_tells_a_tenants_trainings_and_inserts_apart() {
        let running = Arc::new(Running::default());
        assert_eq!(running.busy(TenantId(1)), (false, false));
        let model = Object::model_version(TenantId(1), "p", "m", 1);
        let training = running.register(&model, CancellationToken::new());
        assert_eq!(running.busy(TenantId(1)), (true, false));
        assert_eq!(running.busy(TenantId(11)), (false, false));
        let kb = Object::knowledge_base(TenantId(1), "p", "kb");
        let _insert = running.register(&kb, CancellationToken::new());
        drop(training);
        assert_eq!(running.busy(TenantId(1)), (false, true));
    }

    #[test]
    fn a_drop_cancels_the_work_of_its_object_registered_before_it() {
        let running = Arc::new(Running::default());
        let tenant = TenantId(3);
        let v1 = running.register(
            &Object::model_version(tenant, "P", "M", 1),
            CancellationToken::new(),
        );
        let v10 = running.register(
            &Object::model_version(tenant, "p", "m", 10),
            CancellationToken::new(),
        );
        let other = running.register(
            &Object::model_version(tenant, "p", "m2", 1),
            CancellationToken::new(),
        );
        let kb = running.register(
            &Object::knowledge_base(tenant, "p", "kb"),
            CancellationToken::new(),
        );
        let elsewhere = running.register(
            &Object::knowledge_base(TenantId(4), "p", "kb"),
            CancellationToken::new(),
        );
        // One version only: not version 10.
        let mark = running.mark();
        assert_eq!(
            running.cancel(&Object::model_version(tenant, "p", "m", 1), mark),
            1
        );
        assert!(v1.token().is_cancelled() && !v10.token().is_cancelled());
        // Work registered after the mark goes on.
        let later = running.register(
            &Object::model_version(tenant, "p", "m", 11),
            CancellationToken::new(),
        );
        assert_eq!(running.cancel(&Object::model(tenant, "p", "m"), mark), 2);
        assert!(v10.token().is_cancelled() && !later.token().is_cancelled());
        assert!(!other.token().is_cancelled());
        // A project's drop reaches its models and knowledge bases, not another tenant's.
        running.cancel(&Object::project(tenant, "p"), running.mark());
        assert!(other.token().is_cancelled() && kb.token().is_cancelled());
        assert!(!elsewhere.token().is_cancelled());
        // Ended work is forgotten.
        drop((v1, v10, other, kb, later));
        assert_eq!(running.entries.lock().len(), 1);
        drop(elsewhere);
        // A held place is given back by the cancel itself, before the work notices.
        let admission = Arc::new(crate::admission::Admission::new(
            &crate::config::HostedConfig::default(),
            0,
        ));
        let training = crate::admission::Work::Training;
        let work = running.register(&Object::model(tenant, "p", "m"), CancellationToken::new());
        work.hold(Some(
            admission.admit(tenant, Some("free"), training).unwrap(),
        ));
        assert!(admission.admit(tenant, Some("free"), training).is_err());
        running.cancel(&Object::project(tenant, "p"), running.mark());
        assert!(admission.admit(tenant, Some("free"), training).is_ok());
        drop(work);
    }
}
