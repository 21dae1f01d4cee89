//! Agents: an LLM bound to a model config, data and an instruction. Owns the redb
//! table `agents`, keyed by (tenant, project, lower-cased name), and the rules MindsDB applies
//! to agent records (`docs/mindsdb-wire.md` §3): a closed set of parameters, tables and knowledge bases
//! that must exist, the default model when none is given, and update as a shallow merge.
//! Answering questions lives in `ai::agents::answer`.

use redb::{ReadableTable, WriteTransaction};
use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};

use crate::catalog::projects::{self, Project};
use crate::catalog::tables;
use crate::config::LlmConfig;
use crate::egress::Egress;
use crate::error::{Error, Result, Subject};
use crate::store;
use crate::store::schema::{AGENTS, PROJECTS, TABLES};
use crate::store::Reads;
use crate::tenant::TenantId;

/// An agent as stored.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Agent {
    /// Stable id, never reused.
    pub id: u64,
    /// The name as given (lookups ignore case).
    pub name: String,
    /// The project's name.
    pub project: String,
    /// The project's id.
    pub project_id: u64,
    /// Creation time, `YYYY-MM-DD HH:MM:SS.ffffff` UTC.
    pub created_at: String,
    /// Last change, same form.
    pub updated_at: String,
    /// `model`, `data`, `prompt_template`, `timeout`, `mode`: MindsDB's closed set.
    pub params: Map<String, Value>,
}

/// An agent in MindsDB's JSON shape (`docs/mindsdb-wire.md` §3): fixed fields first, then `data`,
/// `model`, `prompt_template` lifted out of the params and `params` for the rest, each left
/// out when empty.
#[derive(Serialize)]
struct WireAgent<'a> {
    id: u64,
    name: &'a str,
    project_id: u64,
    updated_at: &'a str,
    created_at: &'a str,
    #[serde(skip_serializing_if = "Option::is_none")]
    data: Option<&'a Value>,
    #[serde(skip_serializing_if = "Option::is_none")]
    model: Option<&'a Value>,
    #[serde(skip_serializing_if = "Option::is_none")]
    prompt_template: Option<&'a Value>,
    #[serde(skip_serializing_if = "Map::is_empty")]
    params: Map<String, Value>,
}

impl Agent {
    /// The agent as MindsDB's REST API shows it, as a JSON value (whose keys come out sorted).
    /// API keys in `model` are shown as given.
    pub fn to_wire_json(&self) -> Value {
        serde_json::to_value(self.wire()).unwrap_or(Value::Null)
    }

    /// The agent as MindsDB's REST API shows it, serializing its fields in MindsDB's order
    /// (`id`, `name`, `project_id`, `updated_at`, `created_at`, then `data`, `model`,
    /// `prompt_template`, `params`).
    pub fn wire(&self) -> impl Serialize + '_ {
        let lifted = |key: &str| self.params.get(key).filter(|v| !is_empty(v));
        let rest: Map<String, Value> = self
            .params
            .iter()
            .filter(|(k, v)| {
                !matches!(k.as_str(), "data" | "model" | "prompt_template") && !is_empty(v)
            })
            .map(|(k, v)| (k.clone(), v.clone()))
            .collect();
        WireAgent {
            id: self.id,
            name: &self.name,
            project_id: self.project_id,
            updated_at: &self.updated_at,
            created_at: &self.created_at,
            data: lifted("data"),
            model: lifted("model"),
            prompt_template: lifted("prompt_template"),
            params: rest,
        }
    }

    /// The row of `information_schema.agents` and `SHOW AGENTS`, as MindsDB fills it: NAME,
    /// PROJECT, MODEL (the model's parameters as JSON) and PARAMS (JSON); API keys masked in
    /// both (SQL results are not the place for them).
    pub(crate) fn system_row(&self) -> [String; 4] {
        let mut params = self.params.clone();
        if let Some(Value::Object(model)) = params.get_mut("model") {
            if model.contains_key("api_key") {
                model.insert("api_key".into(), "******".into());
            }
        }
        let model = params
            .get("model")
            .cloned()
            .unwrap_or_else(|| Value::Object(Map::new()));
        [
            self.name.clone(),
            self.project.clone(),
            model.to_string(),
            Value::Object(params).to_string(),
        ]
    }

    /// The model settings (`provider`, `model_name`, `api_key`, `base_url`, …), possibly empty.
    pub(crate) fn model(&self) -> Map<String, Value> {
        match self.params.get("model") {
            Some(Value::Object(model)) => model.clone(),
            _ => Map::new(),
        }
    }

    /// The `data.tables` entries, as given.
    pub(crate) fn tables(&self) -> Vec<String> {
        self.data_entries("tables")
    }

    /// The `data.knowledge_bases` entries, as given.
    pub(crate) fn knowledge_bases(&self) -> Vec<String> {
        self.data_entries("knowledge_bases")
    }

    fn data_entries(&self, key: &str) -> Vec<String> {
        self.params
            .get("data")
            .and_then(|d| d.get(key))
            .and_then(Value::as_array)
            .map(|list| {
                list.iter()
                    .filter_map(|t| t.as_str().map(str::to_string))
                    .collect()
            })
            .unwrap_or_default()
    }

    /// The instruction, if any.
    pub(crate) fn prompt_template(&self) -> Option<&str> {
        self.params.get("prompt_template").and_then(Value::as_str)
    }

    /// The whole-question time limit in seconds (`params.timeout`), if set.
    pub(crate) fn timeout_secs(&self) -> Option<u64> {
        self.params.get("timeout").and_then(Value::as_u64)
    }
}

/// Empty values are left out of the wire form, as MindsDB does.
fn is_empty(value: &Value) -> bool {
    match value {
        Value::Null => true,
        Value::String(s) => s.is_empty(),
        Value::Array(a) => a.is_empty(),
        Value::Object(o) => o.is_empty(),
        _ => false,
    }
}

/// Creates this module's redb table in a new file, so read snapshots always find it.
pub(crate) fn init(txn: &WriteTransaction) -> Result<()> {
    txn.open_table(AGENTS)?;
    Ok(())
}

/// Reads the body MindsDB's clients send (`{"name", "model", "model_name", "provider", "data",
/// "prompt_template", "params"}`) into the params it changes, in MindsDB's way: `params` keys
/// first, then `model` (or the legacy top-level `model_name` + `provider` when `model` is
/// empty), `data` and `prompt_template`. Nulls are kept: on update a null drops its key.
/// Read-only fields a client may echo back (`id`, `created_at`, …) are ignored; anything else
/// is refused by name.
fn fold_request(spec: &Map<String, Value>) -> Result<Map<String, Value>> {
    let mut params = Map::new();
    for key in spec.keys() {
        let known = [
            "name",
            "model",
            "model_name",
            "provider",
            "data",
            "prompt_template",
            "params",
            "id",
            "project_id",
            "created_at",
            "updated_at",
        ];
        if !known.contains(&key.as_str()) {
            return Err(not_allowed(key));
        }
    }
    match spec.get("params") {
        None | Some(Value::Null) => {}
        Some(Value::Object(extra)) => params.extend(extra.clone()),
        Some(_) => return Err(Error::invalid("Agent 'params' must be an object")),
    }
    match spec.get("model") {
        Some(model) if !is_empty(model) => {
            params.insert("model".into(), model.clone());
        }
        _ => {
            let legacy = |key: &str| spec.get(key).filter(|v| !v.is_null()).cloned();
            if let Some(model_name) = legacy("model_name") {
                let mut model = Map::new();
                model.insert("model_name".into(), model_name);
                if let Some(provider) = legacy("provider") {
                    model.insert("provider".into(), provider);
                }
                params.insert("model".into(), Value::Object(model));
            } else if spec.get("model").is_some_and(Value::is_null) {
                params.insert("model".into(), Value::Null);
            }
        }
    }
    for key in ["data", "prompt_template"] {
        if let Some(value) = spec.get(key) {
            params.insert(key.into(), value.clone());
        }
    }
    Ok(params)
}

fn not_allowed(key: &str) -> Error {
    Error::invalid(format!("Parameter '{key}' is not allowed"))
}

/// Checks merged params against MindsDB's closed schema and the catalog: only
/// `prompt_template`, `model`, `data`, `timeout`, `mode`; tables and knowledge bases must exist.
fn validate(
    txn: &WriteTransaction,
    tenant: TenantId,
    params: &Map<String, Value>,
    egress: &Egress,
) -> Result<()> {
    for (key, value) in params {
        match key.as_str() {
            "prompt_template" if !value.is_string() => {
                return Err(Error::invalid("'prompt_template' must be a string"))
            }
            "timeout" if value.as_u64().is_none_or(|t| t == 0) => {
                return Err(Error::invalid(
                    "'timeout' must be a positive whole number of seconds",
                ))
            }
            "mode" if !matches!(value.as_str(), Some("text" | "sql")) => {
                return Err(Error::invalid("'mode' must be \"text\" or \"sql\""))
            }
            "model" => validate_model(value, egress)?,
            "data" => validate_data(txn, tenant, value)?,
            "prompt_template" | "timeout" | "mode" => {}
            other => return Err(not_allowed(other)),
        }
    }
    Ok(())
}

fn validate_model(model: &Value, egress: &Egress) -> Result<()> {
    let Value::Object(model) = model else {
        return Err(Error::invalid(
            "'model' must be an object like {\"provider\": \"openai\", \"model_name\": \"gpt-4o\"}",
        ));
    };
    for key in ["provider", "model_name", "api_key", "base_url"] {
        if model.get(key).is_some_and(|v| !v.is_string()) {
            return Err(Error::invalid(format!("'model.{key}' must be a string")));
        }
    }
    if let Some(url) = model.get("base_url").and_then(Value::as_str) {
        crate::egress::check_http_url("model.base_url", url)?;
        // An address written in the URL is checked now; a name, at every call.
        egress
            .check_url_text(url)
            .map_err(|e| Error::new(e.kind(), format!("'model.base_url' was {}", e.message())))?;
    }
    Ok(())
}

fn validate_data(txn: &WriteTransaction, tenant: TenantId, data: &Value) -> Result<()> {
    let Value::Object(data) = data else {
        return Err(Error::invalid(
            "'data' must be an object like {\"tables\": [\"db.table\"]}",
        ));
    };
    for (key, value) in data {
        if !matches!(key.as_str(), "tables" | "knowledge_bases") {
            return Err(not_allowed(&format!("data.{key}")));
        }
        let list = value
            .as_array()
            .filter(|l| l.iter().all(Value::is_string))
            .ok_or_else(|| Error::invalid(format!("'data.{key}' must be a list of strings")))?;
        for entry in list.iter().filter_map(Value::as_str) {
            if key == "tables" {
                check_table(txn, tenant, entry)?;
            } else {
                check_knowledge_base(txn, tenant, entry)?;
            }
        }
    }
    Ok(())
}

/// Writes each bare name in the body's `data.knowledge_bases` (also under `params`) as
/// `<default project>.<name>`: MindsDB resolves a knowledge base named without its project in
/// the default project, whichever project the agent is in.
pub(crate) fn qualify_knowledge_bases(spec: &mut Map<String, Value>, default_project: &str) {
    let qualify = |data: Option<&mut Value>| {
        let Some(Value::Array(entries)) = data
            .and_then(Value::as_object_mut)
            .and_then(|data| data.get_mut("knowledge_bases"))
        else {
            return;
        };
        for entry in entries.iter_mut() {
            if let Value::String(name) = entry {
                if !name.contains('.') && !name.trim().is_empty() {
                    *name = format!("{default_project}.{}", name.trim());
                }
            }
        }
    };
    qualify(spec.get_mut("data"));
    qualify(
        spec.get_mut("params")
            .and_then(Value::as_object_mut)
            .and_then(|params| params.get_mut("data")),
    );
}

/// Splits `db.table` (either part may be quoted with backticks or double quotes). The
/// database comes back in lower case; the table as SQL reads an identifier: in lower case
/// unless quoted, as written when quoted, so a datasource that tells `orders` from `"Orders"`
/// (PostgreSQL does) gets the one the entry means.
pub(crate) fn split_entry(entry: &str) -> Option<(String, String)> {
    let (db, table) = entry.trim().split_once('.')?;
    let quoted = |s: &str| {
        let s = s.trim();
        s.len() >= 2
            && ((s.starts_with('"') && s.ends_with('"'))
                || (s.starts_with('`') && s.ends_with('`')))
    };
    let db = db
        .trim()
        .trim_matches(|c| c == '`' || c == '"')
        .to_ascii_lowercase();
    let table = if quoted(table) {
        let table = table.trim();
        table[1..table.len() - 1].to_string()
    } else {
        table.trim().to_ascii_lowercase()
    };
    (!db.is_empty() && !table.is_empty()).then_some((db, table))
}

/// `<db>.<table>` or `<db>.*`: the database and (unless `*`) the table must exist.
fn check_table(txn: &WriteTransaction, tenant: TenantId, entry: &str) -> Result<()> {
    let (db, table) = split_entry(entry).ok_or_else(|| {
        Error::invalid(format!(
            "Table '{entry}' in data.tables must be written <database>.<table> or <database>.*"
        ))
    })?;
    let exists = match db.as_str() {
        crate::catalog::namespace::SYSTEM_DB => {
            table == "*"
                || crate::catalog::namespace::INFO_TABLES
                    .contains(&table.to_ascii_lowercase().as_str())
        }
        crate::catalog::namespace::FILES_DB => {
            table == "*" || tables::get(&txn.open_table(TABLES)?, tenant, &db, &table)?.is_some()
        }
        // A datasource's tables are on the remote database: looked up when the agent reads.
        _ if crate::catalog::namespace::is_datasource(txn, tenant, &db)? => true,
        _ => {
            if projects::get(&txn.open_table(PROJECTS)?, tenant, &db)?.is_none() {
                return Err(Error::invalid(format!(
                    "Database '{db}' in data.tables does not exist"
                )));
            }
            table == "*" || tables::get(&txn.open_table(TABLES)?, tenant, &db, &table)?.is_some()
        }
    };
    if exists {
        Ok(())
    } else {
        Err(Error::invalid(format!(
            "Table '{table}' in data.tables does not exist in database '{db}'"
        )))
    }
}

/// `<project>.<kb>` or `<project>.*`: the project must exist, and a named knowledge base in it.
fn check_knowledge_base(txn: &WriteTransaction, tenant: TenantId, entry: &str) -> Result<()> {
    let (project, kb) = split_entry(entry).ok_or_else(|| {
        Error::invalid(format!(
            "Knowledge base '{entry}' in data.knowledge_bases must be written <project>.<name> or <project>.*"
        ))
    })?;
    if projects::get(&txn.open_table(PROJECTS)?, tenant, &project)?.is_none() {
        return Err(Error::invalid(format!(
            "Project '{project}' in data.knowledge_bases does not exist"
        )));
    }
    let exists = kb == "*"
        || crate::catalog::knowledge_bases::get(
            &txn.open_table(store::schema::KNOWLEDGE_BASES)?,
            tenant,
            &project,
            &kb,
        )?
        .is_some();
    if exists {
        Ok(())
    } else {
        Err(Error::invalid(format!(
            "Knowledge base '{kb}' in data.knowledge_bases does not exist in project '{project}'"
        )))
    }
}

fn project_of(txn: &WriteTransaction, tenant: TenantId, project: &str) -> Result<Project> {
    projects::get(&txn.open_table(PROJECTS)?, tenant, project)?
        .ok_or_else(|| project_missing(project))
}

/// MindsDB's wording, which its REST clients show.
pub(crate) fn project_missing(project: &str) -> Error {
    Error::not_found(format!("Project with name {project} does not exist")).about(Subject::Project)
}

pub(crate) fn agent_missing(name: &str) -> Error {
    Error::not_found(format!("Agent with name {name} does not exist")).about(Subject::Agent)
}

fn agent_taken(name: &str) -> Error {
    Error::conflict(format!(
        "Agent with name {name} already exists. Please choose a different one."
    ))
    .about(Subject::Agent)
}

/// The agent's name from a request body: present, a string, a valid name.
fn name_of(spec: &Map<String, Value>) -> Result<String> {
    match spec.get("name") {
        Some(Value::String(name)) if !name.is_empty() => {
            crate::catalog::namespace::validate_name("agent", name)?;
            Ok(name.clone())
        }
        None | Some(Value::Null) => Err(Error::invalid("Missing \"name\" field for agent")),
        Some(_) => Err(Error::invalid(
            "The agent's \"name\" must be a non-empty string",
        )),
    }
}

/// Creates an agent in `project` from a MindsDB request body. Returns `None` when it existed
/// and `if_not_exists` was set.
pub(crate) fn create(
    txn: &WriteTransaction,
    tenant: TenantId,
    project: &str,
    spec: &Map<String, Value>,
    default_model: &LlmConfig,
    if_not_exists: bool,
    egress: &Egress,
) -> Result<Option<Agent>> {
    let project = project_of(txn, tenant, project)?;
    let name = name_of(spec)?;
    let key = name.to_ascii_lowercase();
    let table = txn.open_table(AGENTS)?;
    if table
        .get((tenant.0, project.name.as_str(), key.as_str()))?
        .is_some()
    {
        return if if_not_exists {
            Ok(None)
        } else {
            Err(agent_taken(&name))
        };
    }
    drop(table);
    let mut params = fold_request(spec)?;
    params.retain(|_, v| !v.is_null());
    if params.get("model").is_none_or(is_empty) {
        // The default model by name only: its key and endpoint stay in the config, so they
        // are neither copied into every agent nor shown with it.
        let mut model = Map::new();
        model.insert("provider".into(), default_model.provider.clone().into());
        model.insert("model_name".into(), default_model.model_name.clone().into());
        params.insert("model".into(), Value::Object(model));
    }
    validate(txn, tenant, &params, egress)?;
    let now = crate::time::now_text();
    let agent = Agent {
        id: store::next_tenant_id(txn, tenant, "agent")?,
        name,
        project: project.name.clone(),
        project_id: project.id,
        created_at: now.clone(),
        updated_at: now,
        params,
    };
    put(txn, tenant, &agent)?;
    Ok(Some(agent))
}

fn put(txn: &WriteTransaction, tenant: TenantId, agent: &Agent) -> Result<()> {
    let key = agent.name.to_ascii_lowercase();
    txn.open_table(AGENTS)?.insert(
        (tenant.0, agent.project.as_str(), key.as_str()),
        serde_json::to_string(agent)?.as_str(),
    )?;
    Ok(())
}

/// Updates an agent the way MindsDB's PUT does: the body's params shallow-merged into the
/// stored ones, a null dropping its key, a different `name` renaming it (a conflict when that
/// name is taken). A missing agent is [`ErrorKind::NotFound`](crate::ErrorKind): update never creates.
pub(crate) fn update(
    txn: &WriteTransaction,
    tenant: TenantId,
    project: &str,
    name: &str,
    spec: &Map<String, Value>,
    egress: &Egress,
) -> Result<Agent> {
    let project = project_of(txn, tenant, project)?;
    let mut agent = get_in(&txn.open_table(AGENTS)?, tenant, &project.name, name)?
        .ok_or_else(|| agent_missing(name))?;
    let changes = fold_request(spec)?;
    let new_name = match spec.get("name") {
        None | Some(Value::Null) => None,
        Some(_) => Some(name_of(spec)?).filter(|n| *n != agent.name),
    };
    if changes.is_empty() && new_name.is_none() {
        return Ok(agent);
    }
    for (key, value) in changes {
        if value.is_null() {
            agent.params.remove(&key);
        } else {
            agent.params.insert(key, value);
        }
    }
    validate(txn, tenant, &agent.params, egress)?;
    if let Some(new_name) = new_name {
        let (old_key, new_key) = (
            agent.name.to_ascii_lowercase(),
            new_name.to_ascii_lowercase(),
        );
        let mut table = txn.open_table(AGENTS)?;
        if new_key != old_key {
            if table
                .get((tenant.0, project.name.as_str(), new_key.as_str()))?
                .is_some()
            {
                return Err(agent_taken(&new_name));
            }
            table.remove((tenant.0, project.name.as_str(), old_key.as_str()))?;
        }
        agent.name = new_name;
    }
    agent.updated_at = crate::time::now_text();
    put(txn, tenant, &agent)?;
    Ok(agent)
}

/// Deletes an agent. Returns false when it did not exist and `if_exists` was set.
pub(crate) fn delete(
    txn: &WriteTransaction,
    tenant: TenantId,
    project: &str,
    name: &str,
    if_exists: bool,
) -> Result<bool> {
    let project = project_of(txn, tenant, project)?;
    let key = name.to_ascii_lowercase();
    let removed = txn
        .open_table(AGENTS)?
        .remove((tenant.0, project.name.as_str(), key.as_str()))?
        .is_some();
    if !removed && !if_exists {
        return Err(agent_missing(name));
    }
    Ok(removed)
}

/// Drops every agent of a project (when the project itself is dropped).
pub(crate) fn drop_all(txn: &WriteTransaction, tenant: TenantId, project: &str) -> Result<()> {
    let project = project.to_ascii_lowercase();
    txn.open_table(AGENTS)?.retain_in(
        (tenant.0, project.as_str(), "")..(tenant.0, project.as_str(), "\u{10FFFF}"),
        |_, _| false,
    )?;
    Ok(())
}

/// One agent by name (case-insensitive).
pub(crate) fn get_in(
    table: &impl ReadableTable<(u64, &'static str, &'static str), &'static str>,
    tenant: TenantId,
    project: &str,
    name: &str,
) -> Result<Option<Agent>> {
    let (project, key) = (project.to_ascii_lowercase(), name.to_ascii_lowercase());
    match table.get((tenant.0, project.as_str(), key.as_str()))? {
        Some(value) => Ok(Some(serde_json::from_str(value.value())?)),
        None => Ok(None),
    }
}

/// The agents of one project, or of all projects when `project` is `None`, by project and name.
pub(crate) fn list(
    table: &impl ReadableTable<(u64, &'static str, &'static str), &'static str>,
    tenant: TenantId,
    project: Option<&str>,
) -> Result<Vec<Agent>> {
    let project = project.map(str::to_ascii_lowercase);
    let mut out = Vec::new();
    for entry in table.range((tenant.0, "", "")..(tenant.0 + 1, "", ""))? {
        let (key, value) = entry?;
        let (_, p, _) = key.value();
        if project.as_deref().is_none_or(|want| want == p) {
            out.push(serde_json::from_str(value.value())?);
        }
    }
    Ok(out)
}

/// The agents of one project, or of all projects when `project` is `None`, by project and
/// name, read in `txn`.
pub(crate) fn all(txn: &impl Reads, tenant: TenantId, project: Option<&str>) -> Result<Vec<Agent>> {
    list(&txn.reading(AGENTS)?, tenant, project)
}

/// An agent of `project` by name (case-insensitive), read in `txn`.
pub(crate) fn named(
    txn: &impl Reads,
    tenant: TenantId,
    project: &str,
    name: &str,
) -> Result<Option<Agent>> {
    get_in(&txn.reading(AGENTS)?, tenant, project, name)
}
