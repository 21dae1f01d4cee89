//! Who may use the engine: its status, logging in and out, and verifying a login's token.

use crate::catalog::auth::{self, LoginToken};
use crate::catalog::users;
use crate::engine::status::Status;
use crate::error::Result;
use crate::tenant::TenantId;

use super::{status, Engine};

impl Engine {
    /// The engine's status in MindsDB's shape (`GET /api/status`); `authenticated` says whether
    /// the caller showed a valid token, which MindsDB reports as `auth.confirmed`.
    pub fn status(&self, authenticated: bool) -> Status {
        let services = &self.inner.services;
        status::status(
            &services.config,
            services.settings.auth_required(),
            authenticated,
        )
    }

    /// Whether callers must log in (and send the token) before anything else.
    pub fn auth_required(&self) -> bool {
        self.inner.services.settings.auth_required()
    }

    /// Checks a username and password and issues a bearer token valid for
    /// `auth.token_lifetime_secs`. The local edition checks the configured ones; the hosted
    /// edition takes a user's name with one of its API keys as the password, and the token
    /// acts as that user. Missing or empty fields are [`ErrorKind::InvalidInput`](crate::ErrorKind),
    /// wrong ones [`ErrorKind::Unauthorized`](crate::ErrorKind).
    pub async fn login(
        &self,
        username: Option<&str>,
        password: Option<&str>,
    ) -> Result<LoginToken> {
        let services = &self.inner.services;
        let tenant = users::login(
            &services.store.read()?,
            services.config.edition,
            &services.settings.current().credentials,
            self.tenant,
            username,
            password,
        )?;
        let lifetime = services.config.auth.token_lifetime_secs;
        self.inner
            .services
            .store
            .write(move |txn| auth::issue(txn, tenant, lifetime))
            .await
    }

    /// The tenant a bearer token belongs to, or [`ErrorKind::Unauthorized`](crate::ErrorKind)
    /// for a token that is unknown, revoked or expired.
    pub fn verify_token(&self, token: &str) -> Result<TenantId> {
        auth::verify(&self.inner.services.store.read()?, token)
    }

    /// Revokes a bearer token; returns whether it was live. Revoking an unknown, expired or
    /// revoked token is no error and writes nothing (it is checked on a read snapshot first).
    pub async fn logout(&self, token: &str) -> Result<bool> {
        if auth::verify(&self.inner.services.store.read()?, token).is_err() {
            return Ok(false);
        }
        let token = token.to_string();
        self.inner
            .services
            .store
            .write(move |txn| auth::revoke(txn, &token))
            .await
    }
}
