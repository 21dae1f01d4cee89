//! The server's settings as MindsDB's `/api/config` reads and changes them: the login switch,
//! the default LLM and embedding model (see `services::settings` for what may change and the
//! rules that keep keys with their URLs).

use serde_json::Value;

use super::Engine;
use crate::error::Result;

impl Engine {
    /// MindsDB's `GET /api/config`: `auth.http_auth_enabled`, `default_llm`,
    /// `default_embedding_model` (API keys masked; the hosted edition shows neither URL nor
    /// key), `knowledge_bases` and `api.http`.
    pub fn settings(&self) -> Value {
        self.inner.services.settings.shown()
    }

    /// MindsDB's `PUT /api/config`: changes what `body` names (`auth`: `http_auth_enabled`,
    /// `username`, `password`; `default_llm` and `default_embedding_model`: `provider`,
    /// `model_name`, `base_url`, `api_key`, or `null` for the config file's), all or nothing,
    /// kept in the file across restarts. Returns the settings as [`Engine::settings`] shows them.
    /// Unknown keys and bad values are [`ErrorKind::InvalidInput`](crate::ErrorKind); the
    /// hosted edition refuses with [`ErrorKind::Forbidden`](crate::ErrorKind).
    pub async fn change_settings(&self, body: Value) -> Result<Value> {
        let services = &self.inner.services;
        services
            .settings
            .change(&services.store, &services.net.egress, &body)
            .await?;
        Ok(self.settings())
    }
}
