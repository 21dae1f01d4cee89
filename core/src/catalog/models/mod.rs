//! Models trained from SQL: versions and their status lifecycle. Owns the rows of the redb
//! tables `models` (one record per version, keyed by tenant, project, lower-cased name and
//! version), `model_predictors` (the fitted predictor of a complete version) and
//! `model_training_schemas`. A status change enqueues its callbacks' deliveries
//! (`callbacks::enqueue`) in the same transaction. Training is in `train`, LLM-backed models
//! in `ml` (`ml::train`, `ml::worker`); an LLM-backed model's settings are `openai`.

mod description;
pub(crate) mod openai;
pub(crate) mod series;

pub(crate) use self::description::{CandidateScore, Description};
pub(crate) use self::series::SeriesOptions;

use redb::{ReadableTable, WriteTransaction};
use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};

use crate::catalog::projects;
use crate::catalog::tables;
use crate::error::{Error, Result, Subject};
use crate::store;
use crate::store::schema::{
    VersionKey, MODELS, PREDICTORS, PROJECTS, RETIRED_STATUS_OUTBOX, TABLES, TRAINING_SCHEMAS,
};
use crate::store::Reads;
use crate::tenant::TenantId;
use datafusion::arrow::datatypes::{Schema, SchemaRef};

/// How many phases the built-in trainer goes through (an LLM model has one: checking its
/// prompt).
pub(crate) const TRAINING_PHASES: u32 = 4;

/// The engines that train with the built-in trainer (`lightwood` is MindsDB's name for its own).
pub(crate) const BUILTIN_ENGINES: [&str; 2] = ["builtin", "lightwood"];

/// Every engine a model can name.
pub(crate) const ENGINES: [&str; 3] = [BUILTIN_ENGINES[0], BUILTIN_ENGINES[1], openai::ENGINE];

/// Where a model version is in its life (MindsDB's `PREDICTOR_STATUS`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub(crate) enum ModelStatus {
    Generating,
    Training,
    Complete,
    Error,
}

impl ModelStatus {
    pub(crate) fn as_str(self) -> &'static str {
        match self {
            ModelStatus::Generating => "generating",
            ModelStatus::Training => "training",
            ModelStatus::Complete => "complete",
            ModelStatus::Error => "error",
        }
    }
}

/// One version of a model as stored.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub(crate) struct ModelVersion {
    pub(crate) id: u64,
    /// The name as given (lookups ignore case).
    pub(crate) name: String,
    pub(crate) project: String,
    pub(crate) version: u32,
    pub(crate) active: bool,
    pub(crate) status: ModelStatus,
    pub(crate) engine: String,
    /// The column to predict.
    pub(crate) predict: String,
    /// The database the training query runs in.
    pub(crate) data_db: String,
    /// The training query as given (`SELECT_DATA_QUERY`).
    pub(crate) select_data_query: String,
    /// `USING` parameters and the time-series clauses (`order_by`, `group_by`, `window`,
    /// `horizon`), as given.
    pub(crate) using: Map<String, Value>,
    pub(crate) error: Option<String>,
    pub(crate) created_at: String,
    /// Seconds from the start of training to its end.
    pub(crate) training_time: Option<f64>,
    pub(crate) current_phase: u32,
    pub(crate) total_phases: u32,
    pub(crate) phase_name: String,
    /// What training found; present once complete.
    pub(crate) description: Option<Description>,
}

impl ModelVersion {
    /// `ACCURACY`: the validation score of a complete version.
    pub(crate) fn accuracy(&self) -> Option<f64> {
        self.description
            .as_ref()
            .and_then(|d| d.accuracies.values().next().copied())
    }

    /// Each column training saw, with its kind, importance and role; empty until complete.
    /// The candidates training tried, with their scores (`DESCRIBE p.m.model`); none before
    /// training completes, for an LLM model, or for a model trained before they were kept.
    pub(crate) fn candidates(&self) -> &[CandidateScore] {
        self.description
            .as_ref()
            .map_or(&[], |d| d.candidates.as_slice())
    }

    pub(crate) fn features(&self) -> Vec<Feature> {
        let Some(d) = &self.description else {
            return Vec::new();
        };
        d.column_types
            .iter()
            .map(|(column, kind)| Feature {
                column: column.clone(),
                kind: kind.clone(),
                importance: d.column_importances.get(column).copied(),
                role: if column.eq_ignore_ascii_case(&self.predict) {
                    "target"
                } else {
                    "feature"
                },
            })
            .collect()
    }

    /// `TRAINING_OPTIONS` as MindsDB's information_schema shows it, API keys masked.
    pub(crate) fn training_options(&self) -> Value {
        let mut using = self.using.clone();
        for key in ["api_key", "openai_api_key"] {
            if let Some(value) = using.get_mut(key) {
                *value = Value::from("******");
            }
        }
        serde_json::json!({"target": self.predict, "using": using})
    }

    /// Whether this version asks an LLM rather than a fitted predictor.
    pub(crate) fn is_prompted(&self) -> bool {
        self.engine == openai::ENGINE
    }

    fn key(&self) -> (String, String) {
        (self.project.clone(), self.name.to_ascii_lowercase())
    }
}

/// A model version as the engine API returns it.
#[derive(Debug, Clone, PartialEq)]
pub struct Model(pub(crate) ModelVersion);

impl Model {
    /// The model's name, as given when it was created.
    pub fn name(&self) -> &str {
        &self.0.name
    }

    /// The version number (1, 2, …).
    pub fn version(&self) -> u32 {
        self.0.version
    }

    /// `generating`, `training`, `complete` or `error`.
    pub fn status(&self) -> &str {
        self.0.status.as_str()
    }

    /// Whether this is the version predictions use.
    pub fn active(&self) -> bool {
        self.0.active
    }

    /// MindsDB's REST record of a model version (`get_reduced_model_data` plus `engine` and
    /// `engine_name`), `created_at` without fractions of a second as MindsDB shows it.
    pub fn to_wire_json(&self) -> Value {
        let m = &self.0;
        serde_json::json!({
            "id": m.id,
            "name": m.name,
            "version": m.version,
            "is_active": null,
            "predict": m.predict,
            "status": m.status.as_str(),
            "problem_definition": m.training_options(),
            "current_phase": null,
            "accuracy": m.accuracy(),
            "data_source": null,
            "update": "up_to_date",
            "active": m.active,
            "mindsdb_version": env!("CARGO_PKG_VERSION"),
            "error": m.error,
            "created_at": m.created_at.get(..19).unwrap_or(&m.created_at),
            "fetch_data_query": m.select_data_query,
            "training_time": m.training_time,
            "engine": m.engine,
            "engine_name": m.engine,
        })
    }

    /// What training found, by `attribute` (as `DESCRIBE p.m[.attribute]` has them): none or
    /// `info` → the seed's record `[{accuracies, column_importances, inputs, outputs, model}]`
    /// (empty values until training completes); `features` → `[{column, type, importance,
    /// role}]`; anything else is an error naming the attributes there are.
    pub fn describe(&self, attribute: Option<&str>) -> Result<Value> {
        match attribute.map(str::to_ascii_lowercase).as_deref() {
            None | Some("info") => Ok(self.info()),
            Some("features") => Ok(Value::Array(
                self.0
                    .features()
                    .into_iter()
                    .map(|f| {
                        serde_json::json!({"column": f.column, "type": f.kind,
                                           "importance": f.importance, "role": f.role})
                    })
                    .collect(),
            )),
            Some("model") => Ok(Value::Array(
                self.0
                    .candidates()
                    .iter()
                    .map(|c| {
                        serde_json::json!({"name": c.name, "performance": c.score,
                                           "training_time": c.seconds, "selected": c.selected,
                                           "error": c.error})
                    })
                    .collect(),
            )),
            Some(other) => Err(attribute_missing(&self.0.name, other)),
        }
    }

    fn info(&self) -> Value {
        let d = self.0.description.as_ref();
        serde_json::json!([{
            "accuracies": d.map(|d| serde_json::json!(d.accuracies)).unwrap_or_else(|| serde_json::json!({})),
            "column_importances": d.map(|d| serde_json::json!(d.column_importances)).unwrap_or_else(|| serde_json::json!({})),
            "inputs": d.map(|d| d.inputs.clone()).unwrap_or_default(),
            "outputs": d.map(|d| d.outputs.clone()).unwrap_or_else(|| vec![self.0.predict.clone()]),
            "model": d.map(|d| d.model.clone()).unwrap_or_default(),
        }])
    }
}

/// The attributes `DESCRIBE p.m.<attribute>` answers.
pub(crate) const ATTRIBUTES: [&str; 3] = ["info", "features", "model"];

/// "Model 'm' has no attribute 'x'; it has: info, features".
pub(crate) fn attribute_missing(name: &str, attribute: &str) -> Error {
    Error::invalid(format!(
        "Model '{name}' has no attribute '{attribute}'; it has: {}",
        ATTRIBUTES.join(", ")
    ))
}

/// One column training saw (`DESCRIBE p.m.features`).
pub(crate) struct Feature {
    pub(crate) column: String,
    /// The inferred kind: integer, float, binary, categorical, date, timestamp, text, …
    pub(crate) kind: String,
    pub(crate) importance: Option<f64>,
    /// `target` or `feature`.
    pub(crate) role: &'static str,
}

/// What `CREATE MODEL` asks for.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct ModelSpec {
    pub(crate) project: String,
    pub(crate) name: String,
    pub(crate) predict: String,
    pub(crate) data_db: String,
    pub(crate) select_data_query: String,
    pub(crate) using: Map<String, Value>,
}

/// Creates this module's redb tables in a new file, so read snapshots always find them.
pub(crate) fn init(txn: &WriteTransaction) -> Result<()> {
    txn.open_table(MODELS)?;
    txn.open_table(PREDICTORS)?;
    txn.open_table(TRAINING_SCHEMAS)?;
    // Files written before 2026-11-25 kept an event per status change here that nothing read.
    txn.delete_table(RETIRED_STATUS_OUTBOX)?;
    Ok(())
}

/// The engine named in `USING engine = …`, lower case; the built-in one when none is given.
pub(crate) fn engine_of(using: &Map<String, Value>) -> Result<String> {
    match using.get("engine") {
        None => Ok(BUILTIN_ENGINES[0].to_string()),
        Some(Value::String(engine)) if ENGINES.contains(&engine.to_ascii_lowercase().as_str()) => {
            Ok(engine.to_ascii_lowercase())
        }
        Some(Value::String(engine)) => Err(Error::not_found(format!(
            "ML engine '{engine}' does not exist; this build has: {} (and the ML engines made by CREATE ML_ENGINE)",
            ENGINES.join(", ")
        ))
        .about(Subject::MlHandler)),
        Some(other) => Err(Error::invalid(format!(
            "'engine' must be a name in quotes, like engine = 'builtin'; got {other}"
        ))),
    }
}

fn is_builtin(engine: &str) -> bool {
    BUILTIN_ENGINES.contains(&engine)
}

/// Checks what an engine reads from `USING` before a version is recorded, so a bad setting
/// fails the statement rather than the training.
fn check_engine_settings(engine: &str, using: &Map<String, Value>, target: &str) -> Result<()> {
    if engine == openai::ENGINE {
        openai::check(using)?.schema(target)?;
    } else if is_builtin(engine) {
        SeriesOptions::from_using(using)?;
    }
    Ok(())
}

/// Records version 1 of a new model, status `generating` and active (as MindsDB shows a model
/// it has just accepted). Returns `None` when the model exists and `if_not_exists` was set.
pub(crate) fn create(
    txn: &WriteTransaction,
    tenant: TenantId,
    spec: &ModelSpec,
    if_not_exists: bool,
) -> Result<Option<ModelVersion>> {
    let project =
        projects::get(&txn.open_table(PROJECTS)?, tenant, &spec.project)?.ok_or_else(|| {
            Error::not_found(format!("Project '{}' does not exist", spec.project))
                .about(Subject::Project)
        })?;
    crate::catalog::namespace::validate_name("model", &spec.name)?;
    // A stored table of the same name, or the `models` listing, would hide the model.
    if spec.name.eq_ignore_ascii_case("models")
        || tables::get(&txn.open_table(TABLES)?, tenant, &project.name, &spec.name)?.is_some()
    {
        return Err(Error::conflict(format!(
            "'{}' is already a table in project '{}'; choose another name for the model",
            spec.name, project.name
        )));
    }
    let engine = engine_of(&spec.using)?;
    check_engine_settings(&engine, &spec.using, &spec.predict)?;
    if !versions(&txn.open_table(MODELS)?, tenant, &project.name, &spec.name)?.is_empty() {
        return if if_not_exists {
            Ok(None)
        } else {
            Err(Error::conflict(format!(
                "Model already exists: {}.{}",
                project.name, spec.name
            ))
            .about(Subject::Model))
        };
    }
    // An LLM model has one phase: checking its prompt.
    let total_phases = if engine == openai::ENGINE {
        1
    } else {
        TRAINING_PHASES
    };
    let model = ModelVersion {
        id: store::next_tenant_id(txn, tenant, "model")?,
        name: spec.name.clone(),
        project: project.name,
        version: 1,
        active: true,
        status: ModelStatus::Generating,
        engine,
        predict: spec.predict.clone(),
        data_db: spec.data_db.clone(),
        select_data_query: spec.select_data_query.clone(),
        using: spec.using.clone(),
        error: None,
        created_at: crate::time::now_text(),
        training_time: None,
        current_phase: 0,
        total_phases,
        phase_name: String::new(),
        description: None,
    };
    put(txn, tenant, &model)?;
    record_change(txn, tenant, &model, None)?;
    Ok(Some(model))
}

/// Records the next version of an existing model, status `generating` and inactive until it
/// completes: trained from `from` (database, query) or the latest version's query, with the
/// latest version's options overlaid by `using`.
pub(crate) fn retrain(
    txn: &WriteTransaction,
    tenant: TenantId,
    project: &str,
    name: &str,
    from: Option<(String, String)>,
    using: Map<String, Value>,
) -> Result<ModelVersion> {
    let all = versions(&txn.open_table(MODELS)?, tenant, project, name)?;
    let latest = all.last().ok_or_else(|| model_missing(project, name))?;
    if let Some(busy) = all
        .iter()
        .find(|m| matches!(m.status, ModelStatus::Generating | ModelStatus::Training))
    {
        return Err(Error::conflict(format!(
            "Version {} of model '{}' is still {}; wait for it to finish",
            busy.version,
            busy.name,
            busy.status.as_str()
        )));
    }
    let mut options = latest.using.clone();
    options.extend(using);
    let engine = engine_of(&options)?;
    if engine != latest.engine && !(is_builtin(&engine) && is_builtin(&latest.engine)) {
        return Err(Error::invalid(format!(
            "Model '{}' uses the {} engine and a new version keeps it; create another model for {engine}",
            latest.name, latest.engine
        )));
    }
    check_engine_settings(&engine, &options, &latest.predict)?;
    let (data_db, select_data_query) =
        from.unwrap_or_else(|| (latest.data_db.clone(), latest.select_data_query.clone()));
    let model = ModelVersion {
        id: store::next_tenant_id(txn, tenant, "model")?,
        version: latest.version + 1,
        active: false,
        status: ModelStatus::Generating,
        data_db,
        select_data_query,
        using: options,
        error: None,
        created_at: crate::time::now_text(),
        training_time: None,
        current_phase: 0,
        phase_name: String::new(),
        description: None,
        ..latest.clone()
    };
    put(txn, tenant, &model)?;
    record_change(txn, tenant, &model, None)?;
    Ok(model)
}

/// Makes `version` the active one (it must be complete); the others become inactive.
pub(crate) fn set_active(
    txn: &WriteTransaction,
    tenant: TenantId,
    project: &str,
    name: &str,
    version: u32,
) -> Result<ModelVersion> {
    let all = versions(&txn.open_table(MODELS)?, tenant, project, name)?;
    if all.is_empty() {
        return Err(model_missing(project, name));
    }
    let Some(chosen) = all.iter().find(|m| m.version == version) else {
        return Err(version_missing(project, name, version));
    };
    if chosen.status != ModelStatus::Complete {
        return Err(not_completed(chosen));
    }
    for model in &all {
        if model.active != (model.version == version) {
            let mut changed = model.clone();
            changed.active = model.version == version;
            put(txn, tenant, &changed)?;
        }
    }
    Ok(ModelVersion {
        active: true,
        ..chosen.clone()
    })
}

/// "Model 'm' does not exist in project 'p'".
pub(crate) fn model_missing(project: &str, name: &str) -> Error {
    Error::not_found(format!(
        "Model '{name}' does not exist in project '{project}'"
    ))
    .about(Subject::Model)
}

/// "Model 'm' has no version N in project 'p'".
pub(crate) fn version_missing(project: &str, name: &str, version: u32) -> Error {
    Error::not_found(format!(
        "Model '{name}' has no version {version} in project '{project}'"
    ))
    .about(Subject::Model)
}

fn put(txn: &WriteTransaction, tenant: TenantId, model: &ModelVersion) -> Result<()> {
    let (project, name) = model.key();
    txn.open_table(MODELS)?.insert(
        (tenant.0, project.as_str(), name.as_str(), model.version),
        serde_json::to_string(model)?.as_str(),
    )?;
    Ok(())
}

/// What a status change means beyond the record: its callbacks' deliveries.
fn record_change(
    txn: &WriteTransaction,
    tenant: TenantId,
    model: &ModelVersion,
    old_status: Option<ModelStatus>,
) -> Result<()> {
    // Its callbacks' deliveries land with the change, or neither does.
    crate::catalog::callbacks::enqueue(
        txn,
        tenant,
        &crate::catalog::callbacks::StatusChange {
            project: &model.project,
            name: &model.name,
            version: model.version,
            active: model.active,
            model_id: model.id,
            created_at: &model.created_at,
            old_status: old_status.map(ModelStatus::as_str),
            new_status: model.status.as_str(),
        },
    )
}

/// Changes the status of the version `of` names, and whatever `change` sets with it,
/// enqueueing its callbacks' deliveries in the same transaction. Returns `None` when that
/// version is gone: dropped while it trained, even if a new model of the same name and
/// version exists now (ids tell them apart).
pub(crate) fn set_status(
    txn: &WriteTransaction,
    tenant: TenantId,
    of: &ModelVersion,
    status: ModelStatus,
    change: impl FnOnce(&mut ModelVersion),
) -> Result<Option<ModelVersion>> {
    let stored = get_version(
        &txn.open_table(MODELS)?,
        tenant,
        &of.project,
        &of.name,
        of.version,
    )?;
    let Some(mut model) = stored.filter(|m| m.id == of.id) else {
        return Ok(None);
    };
    let old = model.status;
    model.status = status;
    change(&mut model);
    put(txn, tenant, &model)?;
    if old != status {
        record_change(txn, tenant, &model, Some(old))?;
    }
    Ok(Some(model))
}

/// Marks `version` complete with its predictor (none for an LLM model) and the schema of its
/// columns, and makes it the active version.
pub(crate) fn complete(
    txn: &WriteTransaction,
    tenant: TenantId,
    model: &ModelVersion,
    predictor: Option<&[u8]>,
    description: Description,
    schema: &Schema,
    training_time: f64,
) -> Result<Option<ModelVersion>> {
    let (project, name) = model.key();
    let done = set_status(txn, tenant, model, ModelStatus::Complete, |m| {
        m.description = Some(description);
        m.training_time = Some(training_time);
        m.current_phase = m.total_phases;
        m.active = true;
    })?;
    if done.is_none() {
        return Ok(None);
    }
    let all = versions(&txn.open_table(MODELS)?, tenant, &project, &name)?;
    for mut other in all {
        if other.version != model.version && other.active {
            other.active = false;
            put(txn, tenant, &other)?;
        }
    }
    let key = (tenant.0, project.as_str(), name.as_str(), model.version);
    if let Some(predictor) = predictor {
        txn.open_table(PREDICTORS)?.insert(key, predictor)?;
    }
    txn.open_table(TRAINING_SCHEMAS)?
        .insert(key, tables::encode_schema(schema)?.as_slice())?;
    Ok(done)
}

/// Sets every version left `generating` or `training` (by a crash or a restart) to `error`.
/// Called when the engine opens, before any training can start.
pub(crate) fn fail_interrupted(txn: &WriteTransaction) -> Result<usize> {
    let mut stuck = Vec::new();
    for entry in txn.open_table(MODELS)?.iter()? {
        let (key, value) = entry?;
        let model: ModelVersion = serde_json::from_str(value.value())?;
        if matches!(
            model.status,
            ModelStatus::Generating | ModelStatus::Training
        ) {
            stuck.push((TenantId(key.value().0), model));
        }
    }
    for (tenant, model) in &stuck {
        set_status(txn, *tenant, model, ModelStatus::Error, |m| {
            m.error = Some("training interrupted: the engine stopped before it finished".into())
        })?;
    }
    Ok(stuck.len())
}

/// Drops a model (every version) or one version of it. Returns false when it did not exist
/// and `if_exists` was set.
pub(crate) fn drop_model(
    txn: &WriteTransaction,
    tenant: TenantId,
    project: &str,
    name: &str,
    version: Option<u32>,
    if_exists: bool,
) -> Result<bool> {
    let (project, key) = (project.to_ascii_lowercase(), name.to_ascii_lowercase());
    let all = versions(&txn.open_table(MODELS)?, tenant, &project, &key)?;
    let doomed: Vec<&ModelVersion> = all
        .iter()
        .filter(|m| version.is_none_or(|v| m.version == v))
        .collect();
    if doomed.is_empty() {
        return if if_exists {
            Ok(false)
        } else {
            Err(match version {
                None => model_missing(&project, name),
                Some(v) => version_missing(&project, name, v),
            })
        };
    }
    if let Some(v) = version {
        if doomed[0].active && all.len() > 1 {
            return Err(Error::invalid(format!(
                "Version {v} of model '{name}' is the active one; make another version active first"
            )));
        }
    }
    // A version dropped while it trains ends as an error, so whoever follows its events
    // (the callbacks) sees it end.
    for model in &doomed {
        if matches!(
            model.status,
            ModelStatus::Generating | ModelStatus::Training
        ) {
            let ended = ModelVersion {
                status: ModelStatus::Error,
                ..(*model).clone()
            };
            record_change(txn, tenant, &ended, Some(model.status))?;
        }
    }
    let mut models = txn.open_table(MODELS)?;
    let mut predictors = txn.open_table(PREDICTORS)?;
    let mut schemas = txn.open_table(TRAINING_SCHEMAS)?;
    for model in doomed {
        let k = (tenant.0, project.as_str(), key.as_str(), model.version);
        models.remove(k)?;
        predictors.remove(k)?;
        schemas.remove(k)?;
    }
    Ok(true)
}

/// Drops every model of a project (when the project itself is dropped).
pub(crate) fn drop_all(txn: &WriteTransaction, tenant: TenantId, project: &str) -> Result<()> {
    let project = project.to_ascii_lowercase();
    let range = (tenant.0, project.as_str(), "", 0)..(tenant.0, project.as_str(), "\u{10FFFF}", 0);
    txn.open_table(MODELS)?
        .retain_in(range.clone(), |_, _| false)?;
    txn.open_table(PREDICTORS)?
        .retain_in(range.clone(), |_, _| false)?;
    txn.open_table(TRAINING_SCHEMAS)?
        .retain_in(range, |_, _| false)?;
    Ok(())
}

/// Every version of one model, oldest first.
pub(crate) fn versions(
    table: &impl ReadableTable<VersionKey<'static>, &'static str>,
    tenant: TenantId,
    project: &str,
    name: &str,
) -> Result<Vec<ModelVersion>> {
    let (project, key) = (project.to_ascii_lowercase(), name.to_ascii_lowercase());
    let mut out = Vec::new();
    for entry in table.range(
        (tenant.0, project.as_str(), key.as_str(), 0)
            ..=(tenant.0, project.as_str(), key.as_str(), u32::MAX),
    )? {
        out.push(serde_json::from_str(entry?.1.value())?);
    }
    Ok(out)
}

fn get_version(
    table: &impl ReadableTable<VersionKey<'static>, &'static str>,
    tenant: TenantId,
    project: &str,
    name: &str,
    version: u32,
) -> Result<Option<ModelVersion>> {
    let (project, key) = (project.to_ascii_lowercase(), name.to_ascii_lowercase());
    match table.get((tenant.0, project.as_str(), key.as_str(), version))? {
        Some(value) => Ok(Some(serde_json::from_str(value.value())?)),
        None => Ok(None),
    }
}

/// The versions of every model of one project, or of all projects, by project, name and version.
pub(crate) fn list(
    table: &impl ReadableTable<VersionKey<'static>, &'static str>,
    tenant: TenantId,
    project: Option<&str>,
) -> Result<Vec<ModelVersion>> {
    let project = project.map(str::to_ascii_lowercase);
    let mut out = Vec::new();
    for entry in table.range((tenant.0, "", "", 0)..(tenant.0 + 1, "", "", 0))? {
        let (key, value) = entry?;
        if project.as_deref().is_none_or(|want| want == key.value().1) {
            out.push(serde_json::from_str(value.value())?);
        }
    }
    Ok(out)
}

/// A model's version by `version`, or its active version.
pub(crate) fn find(
    table: &impl ReadableTable<VersionKey<'static>, &'static str>,
    tenant: TenantId,
    project: &str,
    name: &str,
    version: Option<u32>,
) -> Result<Option<ModelVersion>> {
    let all = versions(table, tenant, project, name)?;
    Ok(match version {
        Some(v) => all.into_iter().find(|m| m.version == v),
        None => all.into_iter().find(|m| m.active),
    })
}

/// The versions of every model of one project, or of all projects when `project` is `None`,
/// by project, name and version, read in `txn`.
pub(crate) fn all(
    txn: &impl Reads,
    tenant: TenantId,
    project: Option<&str>,
) -> Result<Vec<ModelVersion>> {
    list(&txn.reading(MODELS)?, tenant, project)
}

/// A model's version by `version`, or its active version, read in `txn`.
pub(crate) fn named(
    txn: &impl Reads,
    tenant: TenantId,
    project: &str,
    name: &str,
    version: Option<u32>,
) -> Result<Option<ModelVersion>> {
    find(&txn.reading(MODELS)?, tenant, project, name, version)
}

/// The schema of the rows a complete version was trained on; `None` before it completes.
pub(crate) fn training_schema(
    txn: &redb::ReadTransaction,
    tenant: TenantId,
    model: &ModelVersion,
) -> Result<Option<SchemaRef>> {
    let (project, name) = model.key();
    let table = txn.open_table(TRAINING_SCHEMAS)?;
    match table.get((tenant.0, project.as_str(), name.as_str(), model.version))? {
        Some(bytes) => Ok(Some(tables::decode_schema(bytes.value())?)),
        None => Ok(None),
    }
}

/// The stored predictor (serialized) of a complete version trained by the built-in engine;
/// "model creation not completed" when there is none.
pub(crate) fn predictor(
    txn: &redb::ReadTransaction,
    tenant: TenantId,
    model: &ModelVersion,
) -> Result<Vec<u8>> {
    if model.status != ModelStatus::Complete {
        return Err(not_completed(model));
    }
    let (project, name) = model.key();
    let table = txn.open_table(PREDICTORS)?;
    let bytes = table
        .get((tenant.0, project.as_str(), name.as_str(), model.version))?
        .ok_or_else(|| not_completed(model))?;
    Ok(bytes.value().to_vec())
}

/// MindsDB's error for using a model that has not finished training.
pub(crate) fn not_completed(model: &ModelVersion) -> Error {
    let why = match (&model.status, &model.error) {
        (ModelStatus::Error, Some(error)) => format!("training failed: {error}"),
        (status, _) => format!("its status is {}", status.as_str()),
    };
    Error::invalid(format!(
        "model creation not completed: {}.{} (version {}): {why}",
        model.project, model.name, model.version
    ))
}

/// `TRAINING_OPTIONS` as MindsDB's CREATE MODEL result shows it: a Python dict's repr.
pub(crate) fn python_repr(value: &Value) -> String {
    match value {
        Value::Null => "None".into(),
        Value::Bool(true) => "True".into(),
        Value::Bool(false) => "False".into(),
        Value::Number(n) => n.to_string(),
        Value::String(s) => format!("'{}'", s.replace('\\', "\\\\").replace('\'', "\\'")),
        Value::Array(items) => {
            let items: Vec<String> = items.iter().map(python_repr).collect();
            format!("[{}]", items.join(", "))
        }
        Value::Object(map) => {
            let items: Vec<String> = map
                .iter()
                .map(|(k, v)| format!("'{k}': {}", python_repr(v)))
                .collect();
            format!("{{{}}}", items.join(", "))
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::store::Store;

    fn spec(name: &str) -> ModelSpec {
        ModelSpec {
            project: "mindsdb".into(),
            name: name.into(),
            predict: "y".into(),
            data_db: "mindsdb".into(),
            select_data_query: "SELECT * FROM t".into(),
            using: Map::new(),
        }
    }

    fn write<T>(store: &Store, f: impl FnOnce(&WriteTransaction) -> Result<T>) -> T {
        let guard = store.begin_write(store.try_lock_writes().unwrap()).unwrap();
        let out = f(&guard.txn).unwrap();
        guard.commit().unwrap();
        out
    }

    #[test]
    fn a_failed_transaction_leaves_the_status_as_it_was() {
        let store = Store::open_in_memory(0, 0).unwrap();
        let tenant = TenantId::LOCAL;
        write(&store, |txn| {
            init(txn)?;
            projects::ensure_default(txn, tenant, "mindsdb")
        });
        let model = write(&store, |txn| create(txn, tenant, &spec("M"), false)).unwrap();
        write(&store, |txn| {
            set_status(txn, tenant, &model, ModelStatus::Training, |_| {})
        });
        // A phase change within a status is no status change: no event.
        write(&store, |txn| {
            set_status(txn, tenant, &model, ModelStatus::Training, |m| {
                m.current_phase = 2
            })
        });
        // A change whose transaction fails leaves the status as it was.
        let guard = store.begin_write(store.try_lock_writes().unwrap()).unwrap();
        set_status(&guard.txn, tenant, &model, ModelStatus::Complete, |_| {}).unwrap();
        drop(guard);
        let stored = find(
            &store.read().unwrap().open_table(MODELS).unwrap(),
            tenant,
            "mindsdb",
            "m",
            None,
        )
        .unwrap()
        .unwrap();
        assert_eq!(
            (stored.status, stored.current_phase),
            (ModelStatus::Training, 2)
        );
    }

    #[test]
    fn opening_a_file_deletes_the_retired_status_outbox() {
        let store = Store::open_in_memory(0, 0).unwrap();
        write(&store, |txn| {
            txn.open_table(RETIRED_STATUS_OUTBOX)?
                .insert(1, r#"{"old":"event"}"#)?;
            Ok(())
        });
        write(&store, init);
        let txn = store.read().unwrap();
        assert!(txn
            .list_tables()
            .unwrap()
            .all(|t| redb::TableHandle::name(&t) != "model_status_outbox"));
    }

    #[test]
    fn versions_left_in_progress_become_errors() {
        let store = Store::open_in_memory(0, 0).unwrap();
        let tenant = TenantId::LOCAL;
        write(&store, |txn| {
            init(txn)?;
            projects::ensure_default(txn, tenant, "mindsdb")
        });
        write(&store, |txn| create(txn, tenant, &spec("a"), false));
        let b = write(&store, |txn| create(txn, tenant, &spec("b"), false)).unwrap();
        write(&store, |txn| {
            set_status(txn, tenant, &b, ModelStatus::Error, |m| {
                m.error = Some("bad data".into())
            })
        });
        assert_eq!(write(&store, fail_interrupted), 1);
        let txn = store.read().unwrap();
        let all = list(&txn.open_table(MODELS).unwrap(), tenant, None).unwrap();
        assert_eq!(all[0].status, ModelStatus::Error);
        assert!(all[0]
            .error
            .as_deref()
            .unwrap()
            .contains("training interrupted"));
        assert_eq!(all[1].error.as_deref(), Some("bad data"));
        assert_eq!(write(&store, fail_interrupted), 0);
    }

    #[test]
    fn a_worker_of_a_dropped_model_never_touches_a_new_one_of_the_same_name() {
        let store = Store::open_in_memory(0, 0).unwrap();
        let tenant = TenantId::LOCAL;
        write(&store, |txn| {
            init(txn)?;
            projects::ensure_default(txn, tenant, "mindsdb")
        });
        let old = write(&store, |txn| create(txn, tenant, &spec("m"), false)).unwrap();
        write(&store, |txn| {
            drop_model(txn, tenant, "mindsdb", "m", None, false)
        });
        let new = write(&store, |txn| create(txn, tenant, &spec("m"), false)).unwrap();
        let touched = write(&store, |txn| {
            set_status(txn, tenant, &old, ModelStatus::Error, |m| {
                m.error = Some("old".into())
            })
        });
        assert!(touched.is_none());
        let stored = find(
            &store.read().unwrap().open_table(MODELS).unwrap(),
            tenant,
            "mindsdb",
            "m",
            None,
        )
        .unwrap()
        .unwrap();
        assert_eq!(
            (stored.id, stored.status),
            (new.id, ModelStatus::Generating)
        );
    }

    #[test]
    fn training_options_read_as_python_shows_them() {
        let value = serde_json::json!({"__mdb_sql_task": null, "target": "y", "using": {"a": "it's", "b": [1, true]}});
        assert_eq!(
            python_repr(&value),
            "{'__mdb_sql_task': None, 'target': 'y', 'using': {'a': 'it\\'s', 'b': [1, True]}}"
        );
    }
}
