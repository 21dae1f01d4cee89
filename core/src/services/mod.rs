//! The services: what the engine does with the catalog's records. Each uses the catalog, the
//! store and the foundation below it, never the engine above.
//!
//! - `llm`: the OpenAI-compatible chat client every LLM call goes through;
//! - `embeddings`: how knowledge bases' texts become vectors: the OpenAI-compatible
//!   `/embeddings` client, or `sentence_models`, models run in process;
//! - `chunking`: splitting documents into overlapping chunks at natural boundaries;
//! - `reranker`: a chat model scoring the chunks a knowledge base search found;
//! - `ml`: training (the built-in trainer and its background worker) and predictions;
//! - `connectors`: reaching datasources (PostgreSQL, directories of files);
//! - `delivery`: sending model-status callbacks;
//! - `files`: decoding uploaded files into tables;
//! - `parquet_pages`: what a Parquet file's pages decode to, checked before any is decoded.
//!
//! [`Services`](crate::services::Services) is what an open engine shares: the store, the configuration and these clients.

pub(crate) mod chunking;
pub(crate) mod connectors;
pub(crate) mod delivery;
pub(crate) mod embeddings;
pub(crate) mod files;
pub(crate) mod handlers;
pub(crate) mod llm;
pub(crate) mod ml;
pub(crate) mod parquet_pages;
pub(crate) mod reranker;
pub(crate) mod sentence_models;
pub(crate) mod settings;

use std::sync::Arc;

use crate::admission::Admission;
use crate::compute::Compute;
use crate::config::Config;
use crate::egress::HttpClient;
use crate::error::Result;
use crate::store::Store;
use crate::tenant::TenantId;

use self::connectors::Net;
use self::sentence_models::SentenceModels;

/// What every part of an open engine shares, built once when it opens: the store, the
/// configuration, the outbound clients, the admission limits and the planning pool. The engine
/// and the SQL engine hold the same one.
pub(crate) struct Services {
    /// The database file.
    pub(crate) store: Arc<Store>,
    /// The engine's configuration (agents read the default model and their limits here).
    pub(crate) config: Config,
    /// Connections to LLM and embedding providers, shared by every caller.
    pub(crate) client: HttpClient,
    /// Embedding models run in process, loaded once for all statements.
    pub(crate) sentence_models: Arc<SentenceModels>,
    /// How outbound connections reach out (the egress policy) and what datasources may send.
    pub(crate) net: Net,
    /// Per-user caps on work running at once, and the limit on unauthenticated requests.
    pub(crate) admission: Arc<Admission>,
    /// Where statements are parsed and planned: never on an async worker.
    pub(crate) compute: Compute,
    /// The settings changed at run time over the config file's: the login and the default
    /// models (read them here, not in `config`).
    pub(crate) settings: Arc<settings::Settings>,
}

impl Services {
    /// The services of an engine over `store` configured by `config`.
    pub(crate) fn new(store: Arc<Store>, config: &Config) -> Result<Services> {
        let net = Net::new(config)?;
        let client = net
            .egress
            .http_client(concat!("mindlite/", env!("CARGO_PKG_VERSION")))?;
        let settings = Arc::new(settings::Settings::new(config));
        Ok(Services {
            store,
            settings,
            config: config.clone(),
            client,
            sentence_models: Arc::new(SentenceModels::new(config)),
            net,
            admission: Arc::new(Admission::new(
                &config.hosted,
                config.unauthenticated_per_minute(),
            )),
            compute: Compute::new(config.planning_threads())?,
        })
    }

    /// What LLM models call through: the shared client and the configured default model.
    pub(crate) fn connector(&self) -> llm::Connector {
        llm::Connector::new(
            self.client.clone(),
            &self.config,
            &self.store,
            &self.sentence_models,
            &self.settings,
            &self.net,
        )
    }

    /// A place for `work` by `tenant` under its plan's cap; `None` for the local tenant, which
    /// has no plan.
    pub(crate) fn admit(
        &self,
        tenant: TenantId,
        work: crate::admission::Work,
    ) -> Result<Option<crate::admission::Ticket>> {
        if tenant == TenantId::LOCAL {
            return Ok(None);
        }
        let plan =
            crate::catalog::users::active(&self.store.read()?, tenant)?.map(|user| user.plan);
        self.admission
            .admit(tenant, plan.as_deref(), work)
            .map(Some)
    }

    /// A place for a statement by `tenant` under its plan's cap, and the memory account its
    /// statements share (both `None` for the local tenant, which has no plan).
    pub(crate) fn admit_statement(
        &self,
        tenant: TenantId,
    ) -> Result<(
        Option<crate::admission::Ticket>,
        Option<Arc<crate::memory::Account>>,
    )> {
        if tenant == TenantId::LOCAL {
            return Ok((None, None));
        }
        let plan =
            crate::catalog::users::active(&self.store.read()?, tenant)?.map(|user| user.plan);
        let ticket =
            self.admission
                .admit(tenant, plan.as_deref(), crate::admission::Work::Statement)?;
        let memory = self.admission.tenant_memory(tenant, plan.as_deref());
        Ok((Some(ticket), memory))
    }

    /// The memory account `tenant`'s work shares (its plan's `max_memory_mb`); `None` for the
    /// local user or a plan without one.
    pub(crate) fn tenant_memory(
        &self,
        tenant: TenantId,
    ) -> Result<Option<Arc<crate::memory::Account>>> {
        if tenant == TenantId::LOCAL {
            return Ok(None);
        }
        let plan =
            crate::catalog::users::active(&self.store.read()?, tenant)?.map(|user| user.plan);
        Ok(self.admission.tenant_memory(tenant, plan.as_deref()))
    }
}
