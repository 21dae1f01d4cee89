//! The hosted edition's side of [`Engine`]: handles scoped to one user,
//! authentication by API key or login token, user administration, quotas and `/limits/`,
//! and the Minds API (minds, datasources, questions). Every method acts as the handle's
//! tenant; administration needs the unscoped handle [`Engine::open`] gave.

use std::sync::Arc;

use serde_json::{Map, Value};

use crate::ai::minds::chat::{ChatRequest, MindAnswer, MindStream};
use crate::catalog::callbacks::{
    self, CallbackInfo, CallbackSummary, DeliveryAttempt, RegisteredCallback,
};
use crate::catalog::datasources::{self, DatasourceInfo};
use crate::catalog::minds::{self, Mind};
use crate::catalog::quotas::{self, Limits};
use crate::catalog::users::{self, IssuedApiKey, User, API_KEY_PREFIX};
use crate::config::Edition;
use crate::engine::Engine;
use crate::error::{Error, ErrorKind, Result};
use crate::tenant::TenantId;
use crate::wire::Fields;

impl Engine {
    /// The tenant this handle acts as.
    pub fn tenant(&self) -> TenantId {
        self.tenant
    }

    /// A handle on the same database acting as the user an API key belongs to: it sees and
    /// changes only that user's objects, under its plan's quotas. An unknown or revoked key is
    /// [`ErrorKind::Unauthorized`]; a disabled user's key [`ErrorKind::Forbidden`].
    /// A handle checks its key when it is made: revoking the key or disabling the user later
    /// stops new handles and HTTP requests, not this one.
    pub fn as_user(&self, api_key: &str) -> Result<Engine> {
        // API keys are the hosted edition's; a local engine takes none, even from its file.
        if !self.is_hosted() {
            return Err(crate::catalog::auth::unauthorized());
        }
        let user = users::authenticate(&self.inner.services.store.read()?, api_key)?;
        Ok(self.scoped(user.tenant()))
    }

    /// The handle a request acts through when a trusted proxy in front of the server names its
    /// tenant by MindsDB's `company-id` and `user-id` headers (`http.trusted_tenant_headers`,
    /// hosted edition): the user `company-<company>[-user-<user>]`, made with the default plan
    /// on its first request. Ids are 1 to 32 letters, digits, `_` or `-`. Forbidden when the
    /// setting is off (the headers are then refused, not ignored) or the user is disabled.
    pub async fn as_proxied_tenant(&self, company: &str, user: Option<&str>) -> Result<Engine> {
        if !self.inner.services.config.http.trusted_tenant_headers {
            return Err(Error::new(
                ErrorKind::Forbidden,
                "The company-id and user-id headers choose the tenant only behind a trusted proxy; set http.trusted_tenant_headers",
            ));
        }
        let id = |what: &str, value: &str| -> Result<()> {
            let ok = (1..=32).contains(&value.len())
                && value
                    .chars()
                    .all(|c| c.is_ascii_alphanumeric() || matches!(c, '_' | '-'));
            if ok {
                Ok(())
            } else {
                Err(Error::invalid(format!(
                    "The {what} header must be 1 to 32 letters, digits, '_' or '-'"
                )))
            }
        };
        id("company-id", company)?;
        let name = match user {
            Some(user) => {
                id("user-id", user)?;
                format!("company-{company}-user-{user}")
            }
            None => format!("company-{company}"),
        };
        let found = users::read(&self.inner.services.store.read()?, &name);
        let user = match found {
            Ok(user) => user,
            Err(e) if e.kind() == ErrorKind::NotFound => {
                let inner = Arc::clone(&self.inner);
                let key = name.clone();
                let made = self
                    .write(move |txn| {
                        let project = inner.sql.default_project();
                        users::create(txn, &key, None, &inner.services.config.hosted, project)
                    })
                    .await;
                match made {
                    Ok(user) => user,
                    // Made by a request that came at the same time.
                    Err(e) if e.kind() == ErrorKind::Conflict => {
                        users::read(&self.inner.services.store.read()?, &name)?
                    }
                    Err(e) => return Err(e),
                }
            }
            Err(e) => return Err(e),
        };
        if user.disabled {
            return Err(Error::new(
                ErrorKind::Forbidden,
                format!("User '{}' is disabled", user.name),
            ));
        }
        Ok(self.scoped(user.tenant()))
    }

    /// The handle a request with `Authorization: Bearer <credential>` acts through: an API
    /// key (`mlk_…`) or a login token. A disabled user is [`ErrorKind::Forbidden`]; anything
    /// else unknown, revoked or expired is [`ErrorKind::Unauthorized`].
    pub fn authenticate(&self, credential: &str) -> Result<Engine> {
        let hosted = self.is_hosted();
        if credential.starts_with(API_KEY_PREFIX) {
            return self.as_user(credential);
        }
        let txn = self.inner.services.store.read()?;
        let tenant = crate::catalog::auth::verify(&txn, credential)?;
        // In the hosted edition a token must belong to a live user: one left from a local run
        // of the same file (the operator's tenant) is refused.
        if users::active(&txn, tenant)?.is_none() && hosted {
            return Err(crate::catalog::auth::unauthorized());
        }
        Ok(self.scoped(tenant))
    }

    /// The handle a MySQL client's login acts through: `username` with its password scrambled
    /// with `nonce` (`mysql_native_password` or `caching_sha2_password`'s 20 or 32 bytes). A
    /// server that needs no login takes anyone; the local edition checks its credentials; the
    /// hosted edition takes a user's name with one of its API keys as the password. Wrong
    /// ones are [`ErrorKind::Unauthorized`], a disabled user [`ErrorKind::Forbidden`].
    pub fn authenticate_scrambled(
        &self,
        username: &str,
        nonce: &[u8],
        answer: &[u8],
    ) -> Result<Engine> {
        if !self.auth_required() {
            return Ok(self.clone());
        }
        let services = &self.inner.services;
        let tenant = users::login_scrambled(
            &services.store.read()?,
            services.config.edition,
            &services.settings.current().credentials,
            self.tenant,
            username,
            nonce,
            answer,
        )?;
        Ok(self.scoped(tenant))
    }

    fn scoped(&self, tenant: TenantId) -> Engine {
        Engine {
            inner: Arc::clone(&self.inner),
            tenant,
            interrupts: crate::cancel::Interrupts::new(),
        }
    }

    /// User administration belongs to the hosted edition's operator handle, never to a user's.
    fn require_operator(&self) -> Result<()> {
        if !self.is_hosted() {
            return Err(Error::invalid(
                "Users belong to the hosted edition; set edition = \"hosted\" in the config",
            ));
        }
        if self.tenant == TenantId::LOCAL {
            Ok(())
        } else {
            Err(Error::new(
                ErrorKind::Forbidden,
                "Only the operator's handle manages users",
            ))
        }
    }

    /// Creates a user (a tenant) on `plan`, or on the configured default plan. The user gets
    /// its own default project and no API key yet.
    pub async fn create_user(&self, name: &str, plan: Option<&str>) -> Result<User> {
        self.require_operator()?;
        let (name, plan) = (name.to_string(), plan.map(str::to_string));
        let inner = Arc::clone(&self.inner);
        self.write(move |txn| {
            let project = inner.sql.default_project();
            users::create(
                txn,
                &name,
                plan.as_deref(),
                &inner.services.config.hosted,
                project,
            )
        })
        .await
    }

    /// Every user, in creation order.
    pub fn list_users(&self) -> Result<Vec<User>> {
        self.require_operator()?;
        users::list(&self.inner.services.store.read()?)
    }

    /// One user by name (case-insensitive).
    pub fn get_user(&self, name: &str) -> Result<User> {
        self.require_operator()?;
        users::read(&self.inner.services.store.read()?, name)
    }

    /// Changes a user's plan and/or disables (or re-enables) it. A disabled user's keys and
    /// tokens are refused; its objects stay.
    pub async fn update_user(
        &self,
        name: &str,
        plan: Option<&str>,
        disabled: Option<bool>,
    ) -> Result<User> {
        self.require_operator()?;
        let (name, plan) = (name.to_string(), plan.map(str::to_string));
        let inner = Arc::clone(&self.inner);
        self.write(move |txn| {
            users::update(
                txn,
                &name,
                plan.as_deref(),
                disabled,
                &inner.services.config.hosted,
            )
        })
        .await
    }

    /// Issues an API key for a user; its text is in the answer and nowhere else.
    pub async fn create_api_key(&self, user: &str) -> Result<IssuedApiKey> {
        self.require_operator()?;
        let user = user.to_string();
        self.write(move |txn| users::issue_key(txn, &user)).await
    }

    /// Revokes one of a user's API keys by id.
    pub async fn revoke_api_key(&self, user: &str, key_id: u64) -> Result<User> {
        self.require_operator()?;
        let user = user.to_string();
        self.write(move |txn| users::revoke_key(txn, &user, key_id))
            .await
    }

    /// This handle's user's plan, quotas and usage (`GET /limits/`); NotFound for a handle
    /// that is not a user's.
    pub fn limits(&self) -> Result<Limits> {
        let txn = self.inner.services.store.read()?;
        let minds = minds::all(&txn, self.tenant)?.len() as u64;
        let sources = datasources::all(&txn, self.tenant)?.len() as u64;
        quotas::limits(
            &txn,
            self.tenant,
            &self.inner.services.config.hosted,
            (minds, sources),
            crate::time::now_unix(),
        )
    }

    /// Counts a question against this tenant's quota (a no-op for tenants without one).
    pub(crate) async fn take_question(&self) -> Result<quotas::Question> {
        let inner = &self.inner;
        quotas::Question::take(
            &inner.services.store,
            &inner.services.config.hosted,
            self.tenant,
        )
        .await
    }

    /// Creates a mind from a Minds API body: `name`, and optionally `model_name` and
    /// `provider` (the configured default model otherwise), `datasources` (`[{"name",
    /// "tables"}]`, each an existing datasource), `knowledge_bases` (`["kb", "project.kb"]`,
    /// each existing; a bare name is in the default project) and `parameters`
    /// (`prompt_template`, …).
    /// Quota-checked: over the plan's minds is [`ErrorKind::QuotaExceeded`].
    pub async fn create_mind(&self, body: Value) -> Result<Mind> {
        let body = Fields::of(body, "The mind")?.into_map();
        let (inner, tenant) = (Arc::clone(&self.inner), self.tenant);
        self.write(move |txn| {
            let config = &inner.services.config;
            let project = inner.sql.default_project();
            let llm = inner.services.settings.llm();
            minds::create(txn, tenant, &body, &llm, &config.hosted, project)
        })
        .await
    }

    /// Every mind, by name.
    pub fn list_minds(&self) -> Result<Vec<Mind>> {
        let txn = self.inner.services.store.read()?;
        minds::all(&txn, self.tenant)
    }

    /// One mind by name (case-insensitive).
    pub fn get_mind(&self, name: &str) -> Result<Mind> {
        let txn = self.inner.services.store.read()?;
        minds::required(&txn, self.tenant, name)
    }

    /// Changes a mind: the fields given replace the stored ones; `name` renames it.
    pub async fn update_mind(&self, name: &str, body: Value) -> Result<Mind> {
        let body = Fields::of(body, "The mind")?.into_map();
        let (name, tenant) = (name.to_string(), self.tenant);
        let project = self.inner.sql.default_project().to_string();
        self.write(move |txn| minds::update(txn, tenant, &name, &body, &project))
            .await
    }

    /// Deletes a mind, freeing its quota slot.
    pub async fn delete_mind(&self, name: &str) -> Result<()> {
        let (name, tenant) = (name.to_string(), self.tenant);
        self.write(move |txn| minds::delete(txn, tenant, &name))
            .await
    }

    /// Creates a datasource from a Minds API body (`name`, `engine`, `connection_data`,
    /// `description`): the same object `CREATE DATABASE … ENGINE … PARAMETERS` makes, checked
    /// by connecting first and quota-checked. Returns it in the Minds API's shape.
    pub async fn create_datasource(&self, body: Value) -> Result<DatasourceInfo> {
        let body = Fields::of(body, "The datasource")?;
        let name = body.required_text("name", "A datasource needs a 'name' (a string)")?;
        let engine = body.required_text("engine", "A datasource needs an 'engine' (a string)")?;
        let description = body.text("description")?;
        let parameters = body.map_field("connection_data")?.unwrap_or_default();
        self.add_datasource(name, engine, description, parameters)
            .await?
            .ok_or_else(|| Error::internal("the datasource vanished as it was made"))
            .map(|d| d.info())
    }

    /// Creates datasource `name` (checked by connecting first, quota-checked) and returns it
    /// as stored; the Minds API and MindsDB's `/api/databases` both create through it.
    pub(crate) async fn add_datasource(
        &self,
        name: String,
        engine: String,
        description: Option<String>,
        parameters: Map<String, Value>,
    ) -> Result<Option<datasources::Datasource>> {
        // A taken name, or a full quota, is told before a slow connection attempt (the
        // quota is checked again, atomically, when the datasource is stored).
        if self.find_datasource(&name)?.is_some() {
            return Err(Error::conflict(format!(
                "Database '{}' already exists",
                name.to_ascii_lowercase()
            )));
        }
        if let Ok(limits) = self.limits() {
            let full = &limits.datasources;
            if full.remaining == 0 {
                let slot = quotas::Slot::Datasources;
                return Err(quotas::slot_full(slot, &limits.plan, full.limit, full.used));
            }
        }
        let edition = self.inner.services.config.edition;
        let (engine, parameters) = crate::services::connectors::check(
            &engine,
            parameters,
            edition,
            &self.inner.services.net,
        )
        .await?;
        let (inner, tenant, key) = (Arc::clone(&self.inner), self.tenant, name.clone());
        self.write(move |txn| {
            let new = datasources::NewDatasource {
                name: &key,
                engine: &engine,
                parameters,
                description,
            };
            datasources::create(txn, tenant, new, false, &inner.services.config.hosted)
        })
        .await?;
        self.find_datasource(&name)
    }

    /// Every datasource, secrets masked.
    pub fn list_datasources(&self) -> Result<Vec<DatasourceInfo>> {
        let txn = self.inner.services.store.read()?;
        let all = datasources::all(&txn, self.tenant)?;
        Ok(all.iter().map(|d| d.info()).collect())
    }

    /// One datasource, secrets masked.
    pub fn get_datasource(&self, name: &str) -> Result<DatasourceInfo> {
        self.find_datasource(name)?
            .map(|d| d.info())
            .ok_or_else(|| Error::not_found(format!("Datasource '{name}' not found")))
    }

    pub(crate) fn find_datasource(&self, name: &str) -> Result<Option<datasources::Datasource>> {
        let txn = self.inner.services.store.read()?;
        datasources::named(&txn, self.tenant, name)
    }

    /// Changes a datasource with a Minds API PUT body: `connection_data` replaces the
    /// parameters (a secret sent back masked keeps its value) after a connection check,
    /// `description` replaces the description, `name` renames it (minds follow).
    pub async fn update_datasource(&self, name: &str, body: Value) -> Result<DatasourceInfo> {
        let body = Fields::of(body, "The datasource")?;
        let source = self
            .find_datasource(name)?
            .ok_or_else(|| Error::not_found(format!("Datasource '{name}' not found")))?;
        let mut change = datasources::Change {
            name: body.text("name")?,
            description: body.text("description")?,
            parameters: None,
        };
        if let Some(data) = body.map_field("connection_data")? {
            let parameters = datasources::unmasked(&source, data);
            let edition = self.inner.services.config.edition;
            let (_, checked) = crate::services::connectors::check(
                &source.engine,
                parameters,
                edition,
                &self.inner.services.net,
            )
            .await?;
            change.parameters = Some(checked);
        }
        let (tenant, key) = (self.tenant, source.name.clone());
        let updated = self
            .write(move |txn| crate::catalog::rules::update_datasource(txn, tenant, &key, change))
            .await?;
        Ok(updated.info())
    }

    /// Deletes a datasource, freeing its quota slot; Conflict while a mind reads it.
    pub async fn delete_datasource(&self, name: &str) -> Result<()> {
        let (tenant, key) = (self.tenant, name.to_string());
        let removed = self
            .write(move |txn| crate::catalog::rules::remove_datasource(txn, tenant, &key))
            .await?;
        if removed {
            Ok(())
        } else {
            Err(Error::not_found(format!("Datasource '{name}' not found")))
        }
    }

    /// Answers a question to a mind ([`ChatRequest`]) in the shape of the API it came
    /// through (a chat completion or a response object). Counted against the question quota,
    /// given back if answering fails.
    pub async fn ask_mind(&self, request: &ChatRequest) -> Result<MindAnswer> {
        let mind = self.get_mind(&request.mind)?;
        let agent = mind.agent(self.inner.sql.default_project());
        let answer = self.answer(agent, request.messages.clone()).await?;
        Ok(MindAnswer::new(request.api, &mind.name, answer.content))
    }

    /// [`Engine::ask_mind`] as server-sent event frames in the API's streaming shape.
    pub async fn ask_mind_stream(&self, request: &ChatRequest) -> Result<MindStream> {
        let mind = self.get_mind(&request.mind)?;
        let agent = mind.agent(self.inner.sql.default_project());
        let events = self.answer_stream(agent, request.messages.clone()).await?;
        Ok(MindStream::new(events, request.api, &mind.name))
    }

    /// Callbacks are the hosted edition's users': NotFound in the local edition, Forbidden
    /// for the operator's handle.
    fn require_callback_owner(&self) -> Result<()> {
        if !self.is_hosted() {
            return Err(Error::not_found(
                "Model-status callbacks are served by the hosted edition only",
            ));
        }
        let txn = self.inner.services.store.read()?;
        match users::active(&txn, self.tenant)? {
            Some(_) => Ok(()),
            None => Err(Error::new(
                ErrorKind::Forbidden,
                "Model-status callbacks belong to users; this handle is none",
            )),
        }
    }

    /// [`Engine::require_callback_owner`], and the user's plan must include callbacks (a
    /// user whose plan lost them gets 403 everywhere, and the worker stops sending its events).
    fn require_callbacks(&self) -> Result<()> {
        self.require_callback_owner()?;
        let txn = self.inner.services.store.read()?;
        let hosted = &self.inner.services.config.hosted;
        let plan = users::active(&txn, self.tenant)?.map(|u| u.plan);
        let allowed = plan
            .as_ref()
            .and_then(|p| hosted.plans.get(p))
            .is_some_and(|p| p.callbacks);
        if allowed {
            return Ok(());
        }
        let with: Vec<&str> = hosted
            .plans
            .iter()
            .filter(|(_, p)| p.callbacks)
            .map(|(name, _)| name.as_str())
            .collect();
        Err(Error::new(
            ErrorKind::Forbidden,
            match plan {
                Some(plan) => format!(
                    "Model-status callbacks are not included in plan '{plan}'; plans that include them: {}",
                    if with.is_empty() { "none".to_string() } else { with.join(", ") }
                ),
                None => "Model-status callbacks belong to users; this handle is none".to_string(),
            },
        ))
    }

    /// Registers a model-status callback from MindsDB's body `{url, filter: {model_name,
    /// project_name}, attempt: {count, interval, http_timeout}}`; returns its id and the
    /// secret that signs its deliveries (shown here only).
    pub async fn register_callback(&self, body: Value) -> Result<RegisteredCallback> {
        self.require_callbacks()?;
        let body = Fields::of(body, "The callback")?.into_map();
        let filter = filter_of(&body).await?.unwrap_or_default();
        let (inner, tenant) = (Arc::clone(&self.inner), self.tenant);
        let callback = self
            .write(move |txn| {
                let plan = users::plan_of(txn, tenant)?;
                let limit = plan.as_deref().and_then(|name| {
                    let plan = inner.services.config.hosted.plans.get(name)?;
                    Some((name, plan.max_callbacks))
                });
                let config = &inner.services.config.callbacks;
                let egress = &inner.services.net.egress;
                callbacks::register(txn, tenant, &body, filter, config, egress, limit)
            })
            .await?;
        Ok(callback.registered())
    }

    /// The callbacks as MindsDB lists them.
    pub fn list_callbacks(&self) -> Result<Vec<CallbackSummary>> {
        self.require_callbacks()?;
        let txn = self.inner.services.store.read()?;
        let all = callbacks::list(&callbacks::table(&txn)?, self.tenant)?;
        Ok(all.iter().map(|c| c.summary()).collect())
    }

    /// One callback with its filter and attempt settings (not its secret).
    pub fn get_callback(&self, id: u64) -> Result<CallbackInfo> {
        self.require_callbacks()?;
        let txn = self.inner.services.store.read()?;
        Ok(callbacks::get(&callbacks::table(&txn)?, self.tenant, id)?.info())
    }

    /// Changes a callback's `url` (and `filter` or `attempt` when given).
    pub async fn update_callback(&self, id: u64, body: Value) -> Result<CallbackInfo> {
        self.require_callbacks()?;
        let body = Fields::of(body, "The callback")?.into_map();
        let filter = filter_of(&body).await?;
        let (inner, tenant) = (Arc::clone(&self.inner), self.tenant);
        let callback = self
            .write(move |txn| {
                callbacks::update(txn, tenant, id, &body, filter, &inner.services.net.egress)
            })
            .await?;
        Ok(callback.info())
    }

    /// Deletes a callback; its pending deliveries are never sent.
    pub async fn delete_callback(&self, id: u64) -> Result<()> {
        self.require_callbacks()?;
        let tenant = self.tenant;
        self.write(move |txn| callbacks::delete(txn, tenant, id))
            .await
    }

    /// A callback's delivery log, oldest first; the newest `callbacks.log_entries` attempts
    /// (1,000 by default) are kept.
    pub fn callback_deliveries(&self, id: u64) -> Result<Vec<DeliveryAttempt>> {
        self.require_callbacks()?;
        let txn = self.inner.services.store.read()?;
        callbacks::attempts(&txn, self.tenant, id)
    }

    /// Runs `change` in one write transaction of this engine's store.
    async fn write<T, F>(&self, change: F) -> Result<T>
    where
        T: Send + 'static,
        F: FnOnce(&redb::WriteTransaction) -> Result<T> + Send + 'static,
    {
        self.inner.services.store.write(change).await
    }

    /// Ok when this edition serves `api`; otherwise a NotFound error saying so (a local
    /// server has no Minds API, callbacks or cloud login; MindsDB's SDK takes the 404 of the
    /// cloud login as its cue to use `/api/login`).
    pub fn serves(&self, api: HostedApi) -> Result<()> {
        if self.is_hosted() {
            return Ok(());
        }
        Err(Error::not_found(match api {
            HostedApi::Minds => {
                "The Minds API is served by the hosted edition only (edition = \"hosted\")"
            }
            HostedApi::Callbacks => {
                "Model-status callbacks are served by the hosted edition only (edition = \"hosted\")"
            }
            HostedApi::CloudLogin => "This server has no cloud login; use /api/login",
        }))
    }

    /// Whether this engine runs the hosted edition.
    pub fn is_hosted(&self) -> bool {
        self.inner.services.config.edition == Edition::Hosted
    }
}

/// The parts of the API only the hosted edition serves ([`Engine::serves`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum HostedApi {
    /// The Minds API: minds, their datasources, chat completions and responses, limits.
    Minds,
    /// Model-status callbacks.
    Callbacks,
    /// `POST /cloud/login`.
    CloudLogin,
}

/// A callback body's `filter`, compiled before the transaction that stores it (compiling
/// costs CPU, which no transaction holding the writer lock should spend), on a blocking
/// thread; `None` when the body has no `filter`.
async fn filter_of(body: &Map<String, Value>) -> Result<Option<callbacks::Filter>> {
    let Some(filter) = body.get("filter").cloned() else {
        return Ok(None);
    };
    tokio::task::spawn_blocking(move || callbacks::read_filter(Some(&filter)))
        .await
        .map_err(|e| Error::internal(format!("compiling a filter stopped: {e}")))?
        .map(Some)
}
