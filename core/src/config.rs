//! Engine configuration: one struct, loadable from TOML or JSON, defaults for everything, and
//! `MINDLITE_<SECTION>_<KEY>` environment variables that override the file (for example
//! `MINDLITE_HTTP_PORT=8080` or `MINDLITE_STORAGE_BATCH_CACHE_MB=0`).

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

use crate::error::{Error, Result};

/// Which edition the engine runs as (DESIGN §2, §8).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, Default)]
#[serde(rename_all = "lowercase")]
pub enum Edition {
    /// One implicit tenant; HTTP auth optional.
    #[default]
    Local,
    /// Many tenants, every request authenticated.
    Hosted,
}

/// Storage settings.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct StorageConfig {
    /// The redb file used by fronts that open "the default store" (the HTTP server, the shell).
    pub path: PathBuf,
    /// redb's page cache, in MiB.
    pub page_cache_mb: u64,
    /// Decoded table chunks kept in memory between queries, in MiB; 0 turns the cache off.
    pub batch_cache_mb: u64,
}

impl Default for StorageConfig {
    fn default() -> Self {
        StorageConfig {
            path: PathBuf::from("./mindlite-data/mindlite.redb"),
            page_cache_mb: 256,
            batch_cache_mb: 512,
        }
    }
}

/// Query execution settings.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct QueryConfig {
    /// Parallel partitions per query; 0 means one per CPU core.
    pub target_partitions: usize,
    /// Rows per record batch inside DataFusion.
    pub batch_size: usize,
    /// The project a query runs in when its context names none.
    pub default_project: String,
    /// Memory for query operators (sorts, aggregations, joins), in MiB; beyond it they spill to
    /// temporary files instead of growing.
    pub memory_limit_mb: u64,
    /// Physical plans of repeated read queries kept for reuse until the next commit; 0 plans
    /// every query afresh.
    pub plan_cache_entries: usize,
}

impl Default for QueryConfig {
    fn default() -> Self {
        QueryConfig {
            target_partitions: 0,
            batch_size: 8192,
            default_project: "mindsdb".to_string(),
            memory_limit_mb: 2048,
            plan_cache_entries: 256,
        }
    }
}

/// HTTP settings, read by the example server.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct HttpConfig {
    /// Bind address.
    pub host: String,
    /// TCP port; MindsDB's is 47334.
    pub port: u16,
    /// Largest accepted request body, in bytes.
    pub max_body_bytes: u64,
    /// Largest accepted request head (request line and headers), in bytes.
    pub max_header_bytes: usize,
    /// Seconds a connection may wait for (or in the middle of) a request before it is closed.
    pub idle_timeout_secs: u64,
    /// Where the Minds API (`/minds`, `/datasources`, `/chat/completions`, `/responses`) is
    /// mounted in the hosted edition.
    pub minds_prefix: String,
}

impl Default for HttpConfig {
    fn default() -> Self {
        HttpConfig {
            host: "127.0.0.1".to_string(),
            port: 47334,
            max_body_bytes: 64 * 1024 * 1024,
            max_header_bytes: 64 * 1024,
            idle_timeout_secs: 60,
            minds_prefix: "/api/v1".to_string(),
        }
    }
}

/// Authentication settings (local edition: off unless username and password are both set).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct AuthConfig {
    /// Login name; empty means HTTP auth is off.
    pub username: String,
    /// Password; empty means HTTP auth is off.
    pub password: String,
    /// How long a login token stays valid, in seconds.
    pub token_lifetime_secs: u64,
}

impl Default for AuthConfig {
    fn default() -> Self {
        AuthConfig {
            username: String::new(),
            password: String::new(),
            token_lifetime_secs: 31 * 24 * 3600,
        }
    }
}

/// The default model: what agents use when they are created without one, and where model
/// settings they leave out come from (DESIGN §6). Any OpenAI-compatible endpoint serves.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct LlmConfig {
    /// The provider name recorded on agents (`openai`, `ollama`, …); all speak OpenAI's protocol.
    pub provider: String,
    /// The model to ask.
    pub model_name: String,
    /// The endpoint's base URL, up to and including `/v1`.
    pub base_url: String,
    /// The bearer key sent to the endpoint; empty sends none.
    pub api_key: String,
    /// Seconds one provider call may take, connecting and reading included.
    pub timeout_secs: u64,
}

impl Default for LlmConfig {
    fn default() -> Self {
        LlmConfig {
            provider: "openai".to_string(),
            model_name: "gpt-4o".to_string(),
            base_url: "https://api.openai.com/v1".to_string(),
            api_key: String::new(),
            timeout_secs: 60,
        }
    }
}

/// Limits of the agent loop and of its SQL sandbox.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct AgentsConfig {
    /// Model calls per question before the agent gives up.
    pub max_steps: usize,
    /// Rows a tool query may return to the model; more are cut off and the model is told so.
    pub row_limit: usize,
    /// Seconds a tool query may run.
    pub sql_timeout_secs: u64,
    /// Sample rows per table shown to the model with the schema.
    pub sample_rows: usize,
}

impl Default for AgentsConfig {
    fn default() -> Self {
        AgentsConfig {
            max_steps: 8,
            row_limit: 100,
            sql_timeout_secs: 10,
            sample_rows: 3,
        }
    }
}

/// One plan tier's quotas (DESIGN §8). A limit of 0 allows none.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct PlanConfig {
    /// Minds a user may have at once.
    pub max_minds: u64,
    /// Datasources a user may have at once (`CREATE DATABASE … ENGINE` and the Minds API alike).
    pub max_datasources: u64,
    /// Questions (chat completions, responses, agent completions) per window.
    pub questions_per_window: u64,
    /// The question window's length in seconds; it starts with the first question after the
    /// previous window ended.
    pub window_secs: u64,
    /// Whether the tier may register model-status callbacks.
    pub callbacks: bool,
}

impl Default for PlanConfig {
    fn default() -> Self {
        PlanConfig {
            max_minds: 3,
            max_datasources: 3,
            questions_per_window: 100,
            window_secs: 24 * 3600,
            callbacks: false,
        }
    }
}

/// Hosted edition settings: plan tiers and the tier new users get.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct HostedConfig {
    /// The tier of a user created without one; must name one of `plans`.
    pub default_plan: String,
    /// The tiers by name. A config that sets any replaces all of the defaults, which are
    /// `free` (3 minds, 3 datasources, 100 questions a day, no callbacks) and `pro` (50, 50,
    /// 10,000 a day, callbacks).
    pub plans: BTreeMap<String, PlanConfig>,
}

impl Default for HostedConfig {
    fn default() -> Self {
        let pro = PlanConfig {
            max_minds: 50,
            max_datasources: 50,
            questions_per_window: 10_000,
            window_secs: 24 * 3600,
            callbacks: true,
        };
        HostedConfig {
            default_plan: "free".to_string(),
            plans: BTreeMap::from([
                ("free".to_string(), PlanConfig::default()),
                ("pro".to_string(), pro),
            ]),
        }
    }
}

/// Model-status callbacks (hosted edition): the attempt settings a registration leaves out,
/// and how many deliveries may be in flight at once.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct CallbacksConfig {
    /// Attempts per event before it is given up.
    pub count: u32,
    /// Seconds between attempts.
    pub interval_secs: u32,
    /// Seconds an attempt may take, connecting to the last byte read.
    pub http_timeout_secs: u32,
    /// Deliveries in flight at once, over all callbacks.
    pub max_concurrent_deliveries: usize,
    /// Attempts kept in each callback's delivery log (the newest; older ones are dropped).
    pub log_entries: usize,
}

impl Default for CallbacksConfig {
    fn default() -> Self {
        CallbacksConfig {
            count: 3,
            interval_secs: 10,
            http_timeout_secs: 5,
            max_concurrent_deliveries: 16,
            log_entries: 1000,
        }
    }
}

/// The engine configuration. Every field has a default, so `Config::default()` is a working setup.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, Default)]
#[serde(default, deny_unknown_fields)]
pub struct Config {
    /// `local` or `hosted`.
    pub edition: Edition,
    /// Storage settings.
    pub storage: StorageConfig,
    /// Query execution settings.
    pub query: QueryConfig,
    /// HTTP settings for the example server.
    pub http: HttpConfig,
    /// Authentication settings.
    pub auth: AuthConfig,
    /// The default model for agents.
    pub llm: LlmConfig,
    /// Agent loop and sandbox limits.
    pub agents: AgentsConfig,
    /// Users' plan tiers (hosted edition).
    pub hosted: HostedConfig,
    /// Model-status callbacks (hosted edition).
    pub callbacks: CallbacksConfig,
}

impl Config {
    /// Parses a config from TOML or JSON text (JSON when the text starts with `{`).
    /// Unknown keys are errors, so a typo never silently falls back to a default.
    pub fn parse(text: &str) -> Result<Config> {
        if text.trim_start().starts_with('{') {
            serde_json::from_str(text)
                .map_err(|e| Error::invalid(format!("invalid JSON config: {e}")))
        } else {
            toml::from_str(text).map_err(|e| Error::invalid(format!("invalid TOML config: {e}")))
        }
    }

    /// Checks what the types cannot: the default plan tier exists, and no window is zero long.
    pub fn validate(&self) -> Result<()> {
        let hosted = &self.hosted;
        if !hosted.plans.contains_key(&hosted.default_plan) {
            let known: Vec<&str> = hosted.plans.keys().map(String::as_str).collect();
            return Err(Error::invalid(format!(
                "hosted.default_plan '{}' is not one of the plans ({})",
                hosted.default_plan,
                known.join(", ")
            )));
        }
        let callbacks = &self.callbacks;
        for (key, value) in [
            ("count", u64::from(callbacks.count)),
            ("interval_secs", u64::from(callbacks.interval_secs)),
            ("http_timeout_secs", u64::from(callbacks.http_timeout_secs)),
            (
                "max_concurrent_deliveries",
                callbacks.max_concurrent_deliveries as u64,
            ),
            ("log_entries", callbacks.log_entries as u64),
        ] {
            if value == 0 {
                return Err(Error::invalid(format!(
                    "callbacks.{key} must be at least 1"
                )));
            }
        }
        if let Some((name, _)) = hosted.plans.iter().find(|(_, p)| p.window_secs == 0) {
            return Err(Error::invalid(format!(
                "hosted.plans.{name}.window_secs must be at least 1"
            )));
        }
        Ok(())
    }

    /// Reads and parses a config file (TOML, or JSON when the name ends in `.json` or the text
    /// starts with `{`).
    pub fn from_file(path: &Path) -> Result<Config> {
        let text = std::fs::read_to_string(path).map_err(|e| {
            Error::invalid(format!("cannot read config file '{}': {e}", path.display()))
        })?;
        Config::parse(&text).map_err(|e| {
            Error::invalid(format!("config file '{}': {}", path.display(), e.message()))
        })
    }

    /// Applies `MINDLITE_<SECTION>_<KEY>` (or `MINDLITE_<KEY>` for top-level keys) overrides from
    /// the process environment.
    pub fn with_env_overrides(self) -> Result<Config> {
        self.with_overrides(std::env::vars())
    }

    /// Applies overrides given as `(name, value)` pairs named like the environment variables.
    /// Names that do not start with `MINDLITE_` are ignored; unknown `MINDLITE_` names are errors.
    pub fn with_overrides(
        self,
        vars: impl IntoIterator<Item = (String, String)>,
    ) -> Result<Config> {
        let mut tree = serde_json::to_value(&self)?;
        for (name, value) in vars {
            let Some(rest) = name.strip_prefix("MINDLITE_") else {
                continue;
            };
            let slot = find_slot(&mut tree, &rest.to_ascii_lowercase())
                .ok_or_else(|| Error::invalid(format!("unknown configuration variable {name}")))?;
            *slot = match slot {
                serde_json::Value::Number(_) => serde_json::from_str(&value).map_err(|_| {
                    Error::invalid(format!("{name} must be a number, got '{value}'"))
                })?,
                serde_json::Value::Bool(_) => match value.to_ascii_lowercase().as_str() {
                    "1" | "true" | "yes" | "on" => serde_json::Value::Bool(true),
                    "0" | "false" | "no" | "off" => serde_json::Value::Bool(false),
                    _ => {
                        return Err(Error::invalid(format!(
                            "{name} must be true or false, got '{value}'"
                        )))
                    }
                },
                _ => serde_json::Value::String(value),
            };
        }
        serde_json::from_value(tree)
            .map_err(|e| Error::invalid(format!("invalid configuration override: {e}")))
    }
}

/// Finds the leaf named by `key`: a top-level key, or `<section>_<key>` for a nested one.
fn find_slot<'a>(tree: &'a mut serde_json::Value, key: &str) -> Option<&'a mut serde_json::Value> {
    let map = tree.as_object_mut()?;
    let section = map
        .keys()
        .find(|section| {
            key == section.as_str()
                || key
                    .strip_prefix(section.as_str())
                    .is_some_and(|rest| rest.starts_with('_'))
        })?
        .clone();
    let entry = map.get_mut(&section)?;
    if key == section {
        return (!entry.is_object()).then_some(entry);
    }
    entry.as_object_mut()?.get_mut(&key[section.len() + 1..])
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn toml_and_json_give_the_same_config() {
        let from_toml = Config::parse("edition = \"hosted\"\n[http]\nport = 8080\n").unwrap();
        let from_json = Config::parse(r#"{"edition":"hosted","http":{"port":8080}}"#).unwrap();
        assert_eq!(from_toml, from_json);
        assert_eq!(from_toml.http.port, 8080);
        assert_eq!(from_toml.http.host, "127.0.0.1");
        assert_eq!(from_toml.edition, Edition::Hosted);
    }

    #[test]
    fn unknown_keys_are_rejected_with_their_name() {
        let err = Config::parse("[http]\nprot = 1\n").unwrap_err();
        assert!(err.message().contains("prot"), "{err}");
    }

    #[test]
    fn environment_overrides_the_file() {
        let vars = [
            ("MINDLITE_HTTP_PORT".to_string(), "9000".to_string()),
            (
                "MINDLITE_STORAGE_BATCH_CACHE_MB".to_string(),
                "0".to_string(),
            ),
            ("MINDLITE_EDITION".to_string(), "hosted".to_string()),
            (
                "MINDLITE_QUERY_DEFAULT_PROJECT".to_string(),
                "p".to_string(),
            ),
            ("PATH".to_string(), "/bin".to_string()),
        ];
        let config = Config::default().with_overrides(vars).unwrap();
        assert_eq!(config.http.port, 9000);
        assert_eq!(config.storage.batch_cache_mb, 0);
        assert_eq!(config.edition, Edition::Hosted);
        assert_eq!(config.query.default_project, "p");
    }

    #[test]
    fn bad_overrides_name_the_variable() {
        let err = Config::default()
            .with_overrides([("MINDLITE_HTTP_PORT".to_string(), "abc".to_string())])
            .unwrap_err();
        assert!(err.message().contains("MINDLITE_HTTP_PORT"), "{err}");
        let err = Config::default()
            .with_overrides([("MINDLITE_NOPE".to_string(), "1".to_string())])
            .unwrap_err();
        assert!(err.message().contains("MINDLITE_NOPE"), "{err}");
    }
}
