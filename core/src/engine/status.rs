//! What `GET /api/status` reports: the version, the edition and whether logins are required,
//! in MindsDB's shape (`docs/mindsdb-wire.md` §1) so its clients read it unchanged.

use serde::Serialize;

use crate::config::{Config, Edition};

/// The engine's status as MindsDB reports its own.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Status {
    /// mindlite's version (MindsDB puts its own version here).
    pub mindsdb_version: String,
    /// `local` or `cloud` (the hosted edition).
    pub environment: String,
    /// Whether requests need credentials.
    pub auth: AuthStatus,
}

/// The `auth` part of [`Status`].
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct AuthStatus {
    /// Whether this caller may use the routes that need a login: true when logins are off or
    /// the request carried a valid token (MindsDB's own meaning, wire captures `auth_status_*`).
    pub confirmed: bool,
    /// Whether requests must carry a bearer token.
    pub http_auth_enabled: bool,
    /// `local` when logins are checked against the config or the user table, else `disabled`.
    pub provider: String,
}

pub(crate) fn status(config: &Config, auth_enabled: bool, authenticated: bool) -> Status {
    Status {
        mindsdb_version: env!("CARGO_PKG_VERSION").to_string(),
        environment: match config.edition {
            Edition::Local => "local",
            Edition::Hosted => "cloud",
        }
        .to_string(),
        auth: AuthStatus {
            confirmed: !auth_enabled || authenticated,
            http_auth_enabled: auth_enabled,
            provider: if auth_enabled { "local" } else { "disabled" }.to_string(),
        },
    }
}

/// What MindsDB's `GET /api/util/ping_native` reports: whether the caller's models train
/// (`learn`), predictions run (`predict`, never long-lived here: they answer within their
/// statement) and knowledge-base inserts run (`analyse`, MindsDB's name for its long
/// background work).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub struct ActiveTasks {
    /// A model is training.
    pub learn: bool,
    /// A prediction runs in the background (never, here).
    pub predict: bool,
    /// A knowledge-base insert runs.
    pub analyse: bool,
}

impl super::Engine {
    /// The background work of this handle's tenant, as MindsDB's `ping_native` reports it.
    pub fn active_tasks(&self) -> ActiveTasks {
        let (learn, analyse) = self.inner.services.store.running.busy(self.tenant);
        ActiveTasks {
            learn,
            predict: false,
            analyse,
        }
    }
}
