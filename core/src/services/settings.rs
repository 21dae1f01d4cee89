//! The settings a running server changes (`GET`/`PUT /api/config`, as MindsDB's editor does):
//! the local edition's login (`auth`), the default LLM (`default_llm`) and the default
//! embedding model (`default_embedding_model`). Each starts as the config file says; a change
//! is kept in the file (`catalog::settings`) and wins over the config file from then on, across
//! restarts, until it is reset (`"default_llm": null`).
//!
//! Two rules MindsDB lacks:
//! - An API key goes only to the URL it was given for. A change that points the default LLM or
//!   embedding model at another `base_url` without a new `api_key` leaves it without a key;
//!   the key the config file (or an earlier change) holds never follows the URL.
//! - Secrets are not shown: `GET` masks API keys (a `PUT` that sends the mask back keeps the
//!   key, for the same URL) and never shows the password; a password set here is kept salted
//!   and hashed.
//!
//! The hosted edition's settings are its operator's: it shows no URL or key, and refuses
//! changes.

use std::sync::{Arc, RwLock};

use serde_json::{json, Map, Value};

use crate::catalog::auth::{self, Credentials, Password};
use crate::catalog::settings;
use crate::config::{Config, EmbeddingConfig, LlmConfig};
use crate::config::{Edition, KnowledgeBasesConfig};
use crate::egress::Egress;
use crate::error::{Error, ErrorKind, Result};
use crate::store::Store;

/// The name of the login setting.
const AUTH: &str = "auth";
/// The name of the default LLM setting.
const LLM: &str = "default_llm";
/// The name of the default embedding model setting.
const EMBEDDING: &str = "default_embedding_model";
/// What `GET` shows in place of an API key that is set.
const MASK: &str = "******";
/// The keys a model setting takes.
const MODEL_KEYS: [&str; 4] = ["provider", "model_name", "base_url", "api_key"];

/// The settings as they stand.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct Current {
    /// The local edition's login.
    pub(crate) credentials: Credentials,
    /// The default LLM: agents and LLM models use it where they name none.
    pub(crate) llm: LlmConfig,
    /// The default embedding model: knowledge bases use it where they name none.
    pub(crate) embedding: EmbeddingConfig,
}

/// The engine's settings: the config file's, with the changes made at run time over them.
#[derive(Debug)]
pub(crate) struct Settings {
    edition: Edition,
    /// As the config file says.
    file: Current,
    current: RwLock<Arc<Current>>,
    /// One change at a time: each reads the settings as the one before left them.
    changing: tokio::sync::Mutex<()>,
    /// What `GET` shows beside the settings.
    http: (String, u16),
    knowledge_bases: KnowledgeBasesConfig,
}

impl Settings {
    /// The settings of an engine with `config`: the config file's, until [`Settings::load`].
    pub(crate) fn new(config: &Config) -> Settings {
        let file = Current {
            credentials: Credentials::configured(&config.auth),
            llm: config.llm.clone(),
            embedding: config.embedding.clone(),
        };
        Settings {
            edition: config.edition,
            current: RwLock::new(Arc::new(file.clone())),
            file,
            changing: tokio::sync::Mutex::new(()),
            http: (config.http.host.clone(), config.http.port),
            knowledge_bases: config.knowledge_bases.clone(),
        }
    }

    /// Puts the changes `store` keeps over the config file's settings (the local edition's
    /// only), once the store's catalog is set up.
    pub(crate) fn load(&self, store: &Store) -> Result<()> {
        let mut current = self.file.clone();
        if self.edition == Edition::Local {
            let txn = store.read()?;
            if let Some(kept) = settings::get(&txn, AUTH)? {
                current.credentials = serde_json::from_value(kept)?;
            }
            if let Some(kept) = settings::get(&txn, LLM)? {
                model_over(
                    &kept,
                    &mut current.llm.provider,
                    &mut current.llm.model_name,
                )?;
                current.llm.base_url = text(&kept, "base_url");
                current.llm.api_key = text(&kept, "api_key");
            }
            if let Some(kept) = settings::get(&txn, EMBEDDING)? {
                let e = &mut current.embedding;
                model_over(&kept, &mut e.provider, &mut e.model_name)?;
                e.base_url = text(&kept, "base_url");
                e.api_key = text(&kept, "api_key");
            }
        }
        *self.current.write().unwrap_or_else(|e| e.into_inner()) = Arc::new(current);
        Ok(())
    }

    /// The settings now.
    pub(crate) fn current(&self) -> Arc<Current> {
        // A poisoned lock still holds a whole value: it is only ever replaced whole.
        let guard = self.current.read().unwrap_or_else(|e| e.into_inner());
        Arc::clone(&guard)
    }

    /// The default LLM now.
    pub(crate) fn llm(&self) -> LlmConfig {
        self.current().llm.clone()
    }

    /// The default embedding model now.
    pub(crate) fn embedding(&self) -> EmbeddingConfig {
        self.current().embedding.clone()
    }

    /// Whether callers must log in (always in the hosted edition).
    pub(crate) fn auth_required(&self) -> bool {
        auth::required(self.edition, &self.current().credentials)
    }

    /// MindsDB's `GET /api/config`: the login switch, the default models (keys masked; in the
    /// hosted edition without URL or key), the knowledge bases' settings and the HTTP API.
    pub(crate) fn shown(&self) -> Value {
        let current = self.current();
        let hosted = self.edition == Edition::Hosted;
        let model = |provider: &str, model_name: &str, base_url: &str, api_key: &str| {
            let mut shown = json!({"provider": provider, "model_name": model_name});
            if !hosted {
                shown["base_url"] = json!(without_password(base_url));
                shown["api_key"] = json!(if api_key.is_empty() { "" } else { MASK });
            }
            shown
        };
        let (llm, embedding) = (&current.llm, &current.embedding);
        let kb = &self.knowledge_bases;
        json!({
            "auth": {"http_auth_enabled": self.auth_required()},
            LLM: model(&llm.provider, &llm.model_name, &llm.base_url, &llm.api_key),
            EMBEDDING: model(
                &embedding.provider,
                &embedding.model_name,
                &embedding.base_url,
                &embedding.api_key,
            ),
            "knowledge_bases": {
                // Where new knowledge bases keep their chunks (the URL holds a password).
                "storage": match kb.storage_url.is_empty() || self.edition == Edition::Hosted {
                    true => "file",
                    false => "pgvector",
                },
                "hnsw_m": kb.hnsw_m,
                "hnsw_ef_construction": kb.hnsw_ef_construction,
                "ef_search": kb.ef_search,
                "exact_below": kb.exact_below,
                "max_chunks_per_document": kb.max_chunks_per_document,
            },
            "api": {"http": {"host": self.http.0, "port": self.http.1, "running": true}},
        })
    }

    /// MindsDB's `PUT /api/config`: changes the settings `body` names, all or none, and keeps
    /// them in `store`. `egress` judges a new `base_url`.
    pub(crate) async fn change(
        &self,
        store: &Arc<Store>,
        egress: &Egress,
        body: &Value,
    ) -> Result<()> {
        if self.edition == Edition::Hosted {
            return Err(Error::new(
                ErrorKind::Forbidden,
                "The hosted edition's settings are its operator's: they are set in its config \
                 file, not through /api/config",
            ));
        }
        let Value::Object(body) = body else {
            return Err(Error::invalid(
                "The body must be a JSON object of settings: auth, default_llm, \
                 default_embedding_model",
            ));
        };
        let _one_at_a_time = self.changing.lock().await;
        let mut next = (*self.current()).clone();
        let mut kept: Vec<(&'static str, Option<Value>)> = Vec::new();
        // New credentials end the sessions opened with the old ones.
        let mut revoke_logins = false;
        for (key, value) in body {
            match key.as_str() {
                AUTH => {
                    let changed = credentials(&next.credentials, value)?;
                    revoke_logins |= changed.username != next.credentials.username
                        || changed.password != next.credentials.password;
                    next.credentials = changed;
                    kept.push((AUTH, Some(serde_json::to_value(&next.credentials)?)));
                }
                LLM => {
                    let file = &self.file.llm;
                    let (provider, model_name, base_url, api_key) = model(
                        LLM,
                        value,
                        [
                            &file.provider,
                            &file.model_name,
                            &file.base_url,
                            &file.api_key,
                        ],
                        [&next.llm.base_url, &next.llm.api_key],
                        egress,
                    )?;
                    kept.push((
                        LLM,
                        value_kept(value, &[&provider, &model_name, &base_url, &api_key]),
                    ));
                    next.llm = LlmConfig {
                        provider,
                        model_name,
                        base_url,
                        api_key,
                        ..next.llm
                    };
                }
                EMBEDDING => {
                    let file = &self.file.embedding;
                    let (provider, model_name, base_url, api_key) = model(
                        EMBEDDING,
                        value,
                        [
                            &file.provider,
                            &file.model_name,
                            &file.base_url,
                            &file.api_key,
                        ],
                        [&next.embedding.base_url, &next.embedding.api_key],
                        egress,
                    )?;
                    kept.push((
                        EMBEDDING,
                        value_kept(value, &[&provider, &model_name, &base_url, &api_key]),
                    ));
                    next.embedding = EmbeddingConfig {
                        provider,
                        model_name,
                        base_url,
                        api_key,
                        ..next.embedding
                    };
                }
                "default_reranking_model" => {
                    return Err(Error::invalid(
                        "default_reranking_model cannot be set: a knowledge base reranks with \
                         its own reranking_model, over the default LLM",
                    ))
                }
                "knowledge_bases" => {
                    return Err(Error::invalid(
                        "knowledge_bases cannot be changed at run time: they are kept in the \
                         file, and the [knowledge_bases] settings of the config file shape \
                         the indexes already built",
                    ))
                }
                other => {
                    return Err(Error::invalid(format!(
                        "Unknown argument '{other}': /api/config takes auth, default_llm and \
                         default_embedding_model"
                    )))
                }
            }
        }
        store
            .write(move |txn| {
                kept.iter()
                    .try_for_each(|(name, value)| settings::put(txn, name, value.as_ref()))?;
                if revoke_logins {
                    auth::revoke_tenant(txn, crate::tenant::TenantId::LOCAL)?;
                }
                Ok(())
            })
            .await?;
        *self.current.write().unwrap_or_else(|e| e.into_inner()) = Arc::new(next);
        Ok(())
    }
}

/// The credentials `change` (MindsDB's `auth` object: `http_auth_enabled`, `username`,
/// `password`) makes of `now`.
fn credentials(now: &Credentials, change: &Value) -> Result<Credentials> {
    let Value::Object(change) = change else {
        return Err(Error::invalid(
            "auth must be an object: {\"http_auth_enabled\", \"username\", \"password\"}",
        ));
    };
    let mut next = now.clone();
    for (key, value) in change {
        match (key.as_str(), value) {
            ("http_auth_enabled", Value::Bool(on)) => next.enabled = *on,
            ("username", Value::String(name)) if !name.is_empty() => next.username = name.clone(),
            ("password", Value::String(password)) if !password.is_empty() => {
                next.password = Password::salted(password)?
            }
            ("http_auth_enabled" | "username" | "password", other) => {
                return Err(Error::invalid(format!(
                    "auth.{key} must be {}, not {other}",
                    if key == "http_auth_enabled" {
                        "true or false"
                    } else {
                        "non-empty text"
                    }
                )))
            }
            (other, _) => {
                return Err(Error::invalid(format!(
                    "Unknown argument 'auth.{other}': auth takes http_auth_enabled, username \
                     and password"
                )))
            }
        }
    }
    if next.enabled && (next.username.is_empty() || !next.password.is_set()) {
        return Err(Error::invalid(
            "http_auth_enabled needs a username and a password (set them with it)",
        ));
    }
    Ok(next)
}

/// The (provider, model_name, base_url, api_key) `change` makes of model setting `name`: the
/// config file's (`file`) with the keys `change` gives, or the config file's alone for
/// `null`. The key stays only with the URL it was given for (`now`: the URL and key in use).
fn model(
    name: &str,
    change: &Value,
    file: [&String; 4],
    now: [&String; 2],
    egress: &Egress,
) -> Result<(String, String, String, String)> {
    let [provider, model_name, base_url, api_key] = file.map(String::clone);
    let change = match change {
        Value::Null => return Ok((provider, model_name, base_url, api_key)),
        Value::Object(change) => change,
        _ => {
            return Err(Error::invalid(format!(
                "{name} must be an object of {} (or null for the config file's)",
                MODEL_KEYS.join(", ")
            )))
        }
    };
    let given = |key: &str| -> Result<Option<String>> {
        match change.get(key) {
            None | Some(Value::Null) => Ok(None),
            Some(Value::String(s)) => Ok(Some(s.clone())),
            Some(other) => Err(Error::invalid(format!(
                "{name}.{key} must be text, not {other}"
            ))),
        }
    };
    if let Some(other) = change.keys().find(|k| !MODEL_KEYS.contains(&k.as_str())) {
        return Err(Error::invalid(format!(
            "Unknown argument '{name}.{other}': {name} takes {}",
            MODEL_KEYS.join(", ")
        )));
    }
    let provider = given("provider")?
        .filter(|p| !p.is_empty())
        .unwrap_or(provider);
    let model_name = given("model_name")?
        .filter(|m| !m.is_empty())
        .unwrap_or(model_name);
    // The URL as shown (a password in it masked) and sent back is the URL in use.
    let new_url = match given("base_url")? {
        Some(url) if url == without_password(now[0]) => now[0].clone(),
        Some(url) => url,
        None => base_url.clone(),
    };
    if new_url != base_url {
        crate::egress::check_http_url(&format!("{name}.base_url"), &new_url)?;
        egress
            .check_url_text(&new_url)
            .map_err(|e| Error::new(e.kind(), format!("{name}.base_url was {}", e.message())))?;
    }
    let api_key = match given("api_key")? {
        Some(key) if key != MASK => key,
        // Not given, or shown masked and sent back: the key in use, or else the config file's,
        // for the URL it was given for only.
        _ if new_url == *now[0] => now[1].clone(),
        _ if new_url == base_url => api_key,
        _ => String::new(),
    };
    Ok((provider, model_name, new_url, api_key))
}

/// What is kept for a model setting: nothing for `null` (the config file's applies), else the
/// four values as they now stand.
fn value_kept(change: &Value, values: &[&String; 4]) -> Option<Value> {
    if change.is_null() {
        return None;
    }
    let kept: Map<String, Value> = MODEL_KEYS
        .iter()
        .zip(values.iter())
        .map(|(k, v)| (k.to_string(), Value::String((*v).clone())))
        .collect();
    Some(Value::Object(kept))
}

/// Puts the provider and model name `kept` holds over `provider` and `model_name`.
fn model_over(kept: &Value, provider: &mut String, model_name: &mut String) -> Result<()> {
    if !kept.is_object() {
        return Err(Error::internal("a kept model setting is not an object"));
    }
    *provider = text(kept, "provider");
    *model_name = text(kept, "model_name");
    Ok(())
}

/// `url` with a password it holds (`http://user:secret@host/`) masked.
fn without_password(url: &str) -> String {
    match reqwest::Url::parse(url) {
        Ok(mut parsed) if parsed.password().is_some() => {
            let _ = parsed.set_password(Some(MASK));
            parsed.to_string()
        }
        _ => url.to_string(),
    }
}

fn text(kept: &Value, key: &str) -> String {
    kept.get(key)
        .and_then(Value::as_str)
        .unwrap_or_default()
        .to_string()
}
