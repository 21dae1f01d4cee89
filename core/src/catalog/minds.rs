//! Minds (the Minds API, `docs/mindsdb-wire.md` §6): a named LLM with datasources and parameters that
//! answers questions with the agent loop over its datasources' tables. Owns the rows of the
//! redb table `minds`, keyed by (tenant, lower-cased name). How a mind is asked is `chat`.

use redb::{ReadableTable, WriteTransaction};
use serde::{Deserialize, Serialize};
use serde_json::{json, Map, Value};

use crate::catalog::agents::Agent;
use crate::catalog::quotas::{self, Slot};
use crate::catalog::{datasources, knowledge_bases};
use crate::config::{HostedConfig, LlmConfig};
use crate::error::{Error, Result};
use crate::store;
use crate::store::schema::{DATASOURCES, KNOWLEDGE_BASES, MINDS};
use crate::store::Reads;
use crate::tenant::TenantId;

/// The status minds-sdk expects of a mind that can answer.
const READY: &str = "COMPLETED";

/// A mind as stored and shown.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Mind {
    /// Stable id, never reused.
    pub id: u64,
    /// The name (lower case).
    pub name: String,
    /// The LLM asked.
    pub model_name: String,
    /// The LLM's provider (any OpenAI-compatible endpoint).
    pub provider: String,
    /// The datasources it reads, each with the tables it may read (`None`: all of them).
    pub datasources: Vec<MindDatasource>,
    /// The knowledge bases it searches, as `project.name`.
    #[serde(default)]
    pub knowledge_bases: Vec<String>,
    /// Other settings, such as `prompt_template`.
    pub parameters: Map<String, Value>,
    /// Creation time, `YYYY-MM-DD HH:MM:SS.ffffff` UTC.
    pub created_at: String,
    /// Last change, same form.
    pub modified_at: String,
}

/// One datasource of a mind.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct MindDatasource {
    /// The datasource's name.
    pub name: String,
    /// The tables the mind may read; `None` for all.
    pub tables: Option<Vec<String>>,
}

impl Mind {
    /// The mind in the Minds API's shape (`status` added).
    pub fn to_wire_json(&self) -> Value {
        json!({
            "name": self.name,
            "model_name": self.model_name,
            "provider": self.provider,
            "datasources": self.datasources,
            "knowledge_bases": self.knowledge_bases,
            "parameters": self.parameters,
            "created_at": self.created_at,
            "modified_at": self.modified_at,
            "status": READY,
        })
    }

    /// The unsaved agent that answers for this mind: its model, its datasources' tables, its
    /// knowledge bases and its prompt template. Its queries run with `project` (the tenant's
    /// default) as the current database.
    pub(crate) fn agent(&self, project: &str) -> Agent {
        let tables: Vec<Value> = self
            .datasources
            .iter()
            .flat_map(|ds| match &ds.tables {
                None => vec![Value::String(format!("{}.*", ds.name))],
                Some(tables) => tables
                    .iter()
                    .map(|t| Value::String(format!("{}.{t}", ds.name)))
                    .collect(),
            })
            .collect();
        let mut params = Map::new();
        params.insert(
            "model".into(),
            json!({"provider": self.provider, "model_name": self.model_name}),
        );
        params.insert(
            "data".into(),
            json!({ "tables": tables, "knowledge_bases": self.knowledge_bases }),
        );
        if let Some(template) = self.parameters.get("prompt_template") {
            params.insert("prompt_template".into(), template.clone());
        }
        Agent {
            id: self.id,
            name: self.name.clone(),
            project: project.to_string(),
            project_id: 0,
            created_at: self.created_at.clone(),
            updated_at: self.modified_at.clone(),
            params,
        }
    }
}

/// Creates the table in a new file.
pub(crate) fn init(txn: &WriteTransaction) -> Result<()> {
    txn.open_table(MINDS)?;
    Ok(())
}

/// Creates a mind from a Minds API body (`name`, `model_name`, `provider`, `datasources`,
/// `parameters`), quota-checked in the same transaction.
pub(crate) fn create(
    txn: &WriteTransaction,
    tenant: TenantId,
    body: &Map<String, Value>,
    llm: &LlmConfig,
    hosted: &HostedConfig,
    project: &str,
) -> Result<Mind> {
    let name = match body.get("name") {
        Some(Value::String(name)) => name.to_ascii_lowercase(),
        _ => return Err(Error::invalid("A mind needs a 'name' (a string)")),
    };
    crate::catalog::namespace::validate_name("mind", &name)?;
    if get(&txn.open_table(MINDS)?, tenant, &name)?.is_some() {
        return Err(Error::conflict(format!("Mind '{name}' already exists")));
    }
    quotas::check_slot(txn, tenant, hosted, Slot::Minds, count(txn, tenant)?)?;
    let now = crate::time::now_text();
    let mut mind = Mind {
        id: store::next_tenant_id(txn, tenant, "mind")?,
        name,
        model_name: llm.model_name.clone(),
        provider: llm.provider.clone(),
        datasources: Vec::new(),
        knowledge_bases: Vec::new(),
        parameters: Map::new(),
        created_at: now.clone(),
        modified_at: now,
    };
    apply(txn, tenant, &mut mind, body, project)?;
    put(txn, tenant, &mind)?;
    Ok(mind)
}

/// Changes a mind with a Minds API PUT body: the fields given replace the stored ones; a new
/// `name` renames it.
pub(crate) fn update(
    txn: &WriteTransaction,
    tenant: TenantId,
    name: &str,
    body: &Map<String, Value>,
    project: &str,
) -> Result<Mind> {
    let old = name.to_ascii_lowercase();
    let mut mind = get(&txn.open_table(MINDS)?, tenant, &old)?.ok_or_else(|| missing(name))?;
    if let Some(new) = body.get("name") {
        let new = new
            .as_str()
            .ok_or_else(|| Error::invalid("'name' must be a string"))?
            .to_ascii_lowercase();
        if new != old {
            crate::catalog::namespace::validate_name("mind", &new)?;
            if get(&txn.open_table(MINDS)?, tenant, &new)?.is_some() {
                return Err(Error::conflict(format!("Mind '{new}' already exists")));
            }
            txn.open_table(MINDS)?.remove((tenant.0, old.as_str()))?;
            mind.name = new;
        }
    }
    apply(txn, tenant, &mut mind, body, project)?;
    mind.modified_at = crate::time::now_text();
    put(txn, tenant, &mind)?;
    Ok(mind)
}

/// Deletes a mind, freeing its slot.
pub(crate) fn delete(txn: &WriteTransaction, tenant: TenantId, name: &str) -> Result<()> {
    let key = name.to_ascii_lowercase();
    match txn.open_table(MINDS)?.remove((tenant.0, key.as_str()))? {
        Some(_) => Ok(()),
        None => Err(missing(name)),
    }
}

/// One mind by name (case-insensitive).
pub(crate) fn get(
    table: &impl ReadableTable<(u64, &'static str), &'static str>,
    tenant: TenantId,
    name: &str,
) -> Result<Option<Mind>> {
    store::get_named(table, tenant, name)
}

/// A mind that must exist.
pub(crate) fn require(
    table: &impl ReadableTable<(u64, &'static str), &'static str>,
    tenant: TenantId,
    name: &str,
) -> Result<Mind> {
    get(table, tenant, name)?.ok_or_else(|| missing(name))
}

/// All minds of `tenant`, by name.
pub(crate) fn list(
    table: &impl ReadableTable<(u64, &'static str), &'static str>,
    tenant: TenantId,
) -> Result<Vec<Mind>> {
    store::list_named(table, tenant)
}

/// All minds of `tenant`, by name, read in `txn`.
pub(crate) fn all(txn: &impl Reads, tenant: TenantId) -> Result<Vec<Mind>> {
    list(&txn.reading(MINDS)?, tenant)
}

/// A mind that must exist, read in `txn`.
pub(crate) fn required(txn: &impl Reads, tenant: TenantId, name: &str) -> Result<Mind> {
    require(&txn.reading(MINDS)?, tenant, name)
}

/// How many minds `tenant` has.
pub(crate) fn count(txn: &WriteTransaction, tenant: TenantId) -> Result<u64> {
    Ok(list(&txn.open_table(MINDS)?, tenant)?.len() as u64)
}

/// Fails with Conflict when a mind reads the datasource `name`, which must then stay.
pub(crate) fn check_unused(txn: &WriteTransaction, tenant: TenantId, name: &str) -> Result<()> {
    let key = name.to_ascii_lowercase();
    let minds = list(&txn.open_table(MINDS)?, tenant)?;
    match minds
        .iter()
        .find(|m| m.datasources.iter().any(|d| d.name == key))
    {
        Some(mind) => Err(Error::conflict(format!(
            "Datasource '{key}' is used by mind '{}'; remove it from the mind first",
            mind.name
        ))),
        None => Ok(()),
    }
}

/// Points the minds that read datasource `old` at its new name `new`.
pub(crate) fn rename_datasource(
    txn: &WriteTransaction,
    tenant: TenantId,
    old: &str,
    new: &str,
) -> Result<()> {
    let minds = list(&txn.open_table(MINDS)?, tenant)?;
    for mut mind in minds {
        let mut changed = false;
        for ds in mind.datasources.iter_mut().filter(|d| d.name == old) {
            ds.name = new.to_string();
            changed = true;
        }
        if changed {
            put(txn, tenant, &mind)?;
        }
    }
    Ok(())
}

fn put(txn: &WriteTransaction, tenant: TenantId, mind: &Mind) -> Result<()> {
    txn.open_table(MINDS)?.insert(
        (tenant.0, mind.name.as_str()),
        serde_json::to_string(mind)?.as_str(),
    )?;
    Ok(())
}

/// Copies the body's settable fields onto `mind`, checking each.
fn apply(
    txn: &WriteTransaction,
    tenant: TenantId,
    mind: &mut Mind,
    body: &Map<String, Value>,
    project: &str,
) -> Result<()> {
    for (key, value) in body {
        match (key.as_str(), value) {
            ("name", _) | (_, Value::Null) => {}
            ("model_name", Value::String(v)) if !v.is_empty() => mind.model_name = v.clone(),
            ("provider", Value::String(v)) if !v.is_empty() => mind.provider = v.clone(),
            ("datasources", Value::Array(list)) => {
                mind.datasources = list
                    .iter()
                    .enumerate()
                    .map(|(i, entry)| read_datasource(txn, tenant, i, entry))
                    .collect::<Result<_>>()?;
            }
            ("knowledge_bases", Value::Array(list)) => {
                mind.knowledge_bases = list
                    .iter()
                    .map(|entry| read_knowledge_base(txn, tenant, entry, project))
                    .collect::<Result<_>>()?;
            }
            ("parameters", Value::Object(parameters)) => {
                if parameters
                    .get("prompt_template")
                    .is_some_and(|t| !t.is_string() && !t.is_null())
                {
                    return Err(Error::invalid(
                        "'parameters.prompt_template' must be a string",
                    ));
                }
                mind.parameters = parameters.clone();
            }
            ("model_name" | "provider", _) => {
                return Err(Error::invalid(format!(
                    "'{key}' must be a non-empty string"
                )))
            }
            ("datasources", _) => {
                return Err(Error::invalid(
                    "'datasources' must be a list of {\"name\": …, \"tables\": [...] or null}",
                ))
            }
            ("knowledge_bases", _) => {
                return Err(Error::invalid(
                    "'knowledge_bases' must be a list of knowledge base names (\"kb\" or \"project.kb\")",
                ))
            }
            ("parameters", _) => return Err(Error::invalid("'parameters' must be an object")),
            // Fields of other Minds API versions are not ours to keep.
            _ => {}
        }
    }
    Ok(())
}

/// One `{"name", "tables"}` entry: the datasource must exist for `tenant`.
fn read_datasource(
    txn: &WriteTransaction,
    tenant: TenantId,
    index: usize,
    entry: &Value,
) -> Result<MindDatasource> {
    let (name, tables) = match entry {
        Value::String(name) => (name.as_str(), &Value::Null),
        Value::Object(entry) => match entry.get("name") {
            Some(Value::String(name)) => {
                (name.as_str(), entry.get("tables").unwrap_or(&Value::Null))
            }
            _ => {
                return Err(Error::invalid(format!(
                    "datasources[{index}] needs a 'name' (a string)"
                )))
            }
        },
        _ => {
            return Err(Error::invalid(format!(
                "datasources[{index}] must be {{\"name\": …, \"tables\": […]}}"
            )))
        }
    };
    let name = name.to_ascii_lowercase();
    if datasources::get(&txn.open_table(DATASOURCES)?, tenant, &name)?.is_none() {
        return Err(Error::invalid(format!("Datasource '{name}' not found")));
    }
    let tables = match tables {
        Value::Null => None,
        Value::Array(list) if list.iter().all(Value::is_string) => Some(
            list.iter()
                .filter_map(Value::as_str)
                .map(str::to_string)
                .collect(),
        ),
        _ => {
            return Err(Error::invalid(format!(
                "datasources[{index}].tables must be a list of table names or null"
            )))
        }
    };
    Ok(MindDatasource { name, tables })
}

/// One entry of `knowledge_bases`: `kb` (in `project`, the tenant's default) or `p.kb`,
/// which must exist; returned as `p.kb`.
fn read_knowledge_base(
    txn: &WriteTransaction,
    tenant: TenantId,
    entry: &Value,
    project: &str,
) -> Result<String> {
    let Value::String(name) = entry else {
        return Err(Error::invalid(
            "'knowledge_bases' must be a list of knowledge base names (\"kb\" or \"project.kb\")",
        ));
    };
    let (project, kb) = match name.split_once('.') {
        Some((project, kb)) => (project.to_ascii_lowercase(), kb.to_ascii_lowercase()),
        None => (project.to_ascii_lowercase(), name.to_ascii_lowercase()),
    };
    if knowledge_bases::get(&txn.open_table(KNOWLEDGE_BASES)?, tenant, &project, &kb)?.is_none() {
        return Err(Error::invalid(format!(
            "Knowledge base '{name}' not found in project '{project}'"
        )));
    }
    Ok(format!("{project}.{kb}"))
}

/// Fails with Conflict when a mind searches the knowledge base `project.name`, which must
/// then stay.
pub(crate) fn check_knowledge_base_unused(
    txn: &WriteTransaction,
    tenant: TenantId,
    project: &str,
    name: &str,
) -> Result<()> {
    let key = format!(
        "{}.{}",
        project.to_ascii_lowercase(),
        name.to_ascii_lowercase()
    );
    let minds = list(&txn.open_table(MINDS)?, tenant)?;
    match minds.iter().find(|m| m.knowledge_bases.contains(&key)) {
        Some(mind) => Err(Error::conflict(format!(
            "Knowledge base '{key}' is used by mind '{}'; remove it from the mind first",
            mind.name
        ))),
        None => Ok(()),
    }
}

fn missing(name: &str) -> Error {
    Error::not_found(format!("Mind '{name}' not found"))
}
