//! Models in SQL: their statements (`statements`, read on tokens; `run`, what they do), a
//! version loaded to predict (`model`), the prediction operator (`exec`), a model as a table
//! (`predict`) and predictions for every row of a table joined with a model (`predict_join`).
//! Training itself is `services::ml`.

pub(crate) mod exec;
pub(crate) mod model;
pub(crate) mod predict;
pub(crate) mod predict_join;
pub(crate) mod run;
pub(crate) mod series;
pub(crate) mod statements;

use std::sync::Arc;

use datafusion::catalog::TableProvider;
use datafusion::optimizer::AnalyzerRule;
use datafusion::physical_planner::ExtensionPlanner;
use datafusion::sql::sqlparser::tokenizer::Token;

use crate::catalog::namespace::FILES_DB;
use crate::error::Result;
use crate::sql::catalog::features::{FeatureTables, ProjectObject, SystemRows};
use crate::sql::catalog::information_schema::{system_table, SystemTable};
use crate::sql::catalog::snapshot::Snapshot;
use crate::sql::{Extension, FeatureStatement};

/// Every project's table of its models' versions (MindsDB's `<project>.models`).
const MODELS_TABLE: &str = "models";

/// Models plugged into the relational engine: their statements, a model's name as a table
/// (and a project's `models` table), `information_schema.models`, and predictions by join
/// (an analyzer rule and the planner of its node).
#[derive(Debug)]
pub(crate) struct Models;

impl Extension for Models {
    fn statement(&self, words: &[&Token]) -> Result<Option<Box<dyn FeatureStatement>>> {
        Ok(statements::model_command(words)?.map(|s| Box::new(s) as Box<dyn FeatureStatement>))
    }

    fn analyzer_rules(&self) -> Vec<Arc<dyn AnalyzerRule + Send + Sync>> {
        vec![Arc::new(predict_join::PredictJoinRule)]
    }

    fn planners(&self) -> Vec<Arc<dyn ExtensionPlanner + Send + Sync>> {
        vec![Arc::new(predict_join::PredictPlanner)]
    }
}

impl FeatureTables for Models {
    fn table(
        &self,
        snapshot: &Arc<Snapshot>,
        project: &str,
        name: &str,
    ) -> Result<Option<Arc<dyn TableProvider>>> {
        // Models live in projects, not among uploaded files.
        if project == FILES_DB {
            return Ok(None);
        }
        // A stored table of that name comes first, as MindsDB's own tables do.
        if name.eq_ignore_ascii_case(MODELS_TABLE) {
            let rows = snapshot.models(Some(project))?;
            return Ok(Some(system_table(run::model_info(&rows, true, None)?)?));
        }
        // The active version of the model `name`.
        let Some(model) = snapshot.model(project, name, None)? else {
            return Ok(None);
        };
        let model = model::PredictModel::of(snapshot, model)?;
        Ok(Some(Arc::new(predict::ModelTable(Arc::new(model)))))
    }

    fn has_table(&self, _snapshot: &Snapshot, project: &str, name: &str) -> bool {
        project != FILES_DB && name.eq_ignore_ascii_case(MODELS_TABLE)
    }

    fn system_table(&self, snap: &Snapshot, name: &str) -> Result<Option<SystemRows>> {
        let batch = match name {
            "models" => run::model_info(&snap.models(None)?, true, None)?,
            // The built-in engines, then the tenant's, as `SHOW ML_ENGINES` lists them.
            "ml_engines" => {
                let mut rows: Vec<[String; 3]> = crate::catalog::models::ENGINES
                    .iter()
                    .map(|e| [e.to_string(), e.to_string(), "{}".to_string()])
                    .collect();
                rows.extend(
                    snap.ml_engines()?
                        .iter()
                        .map(|e| e.system_row(snap.show_secrets)),
                );
                SystemTable::default()
                    .text("NAME", rows.iter().map(|r| Some(r[0].as_str())))
                    .text("HANDLER", rows.iter().map(|r| Some(r[1].as_str())))
                    .text("CONNECTION_DATA", rows.iter().map(|r| Some(r[2].as_str())))
                    .build()?
            }
            _ => return Ok(None),
        };
        Ok(Some(SystemRows { batch, live: false }))
    }

    /// The project's `models` table and its models' active versions, as MindsDB lists them.
    fn objects(&self, snap: &Snapshot, project: &str) -> Result<Vec<ProjectObject>> {
        if project == FILES_DB {
            return Ok(Vec::new());
        }
        let mut out = vec![ProjectObject::new(MODELS_TABLE, "BASE TABLE")];
        for version in snap.models(Some(project))? {
            if version.active {
                out.push(ProjectObject {
                    engine: Some(version.engine.clone()),
                    ..ProjectObject::new(version.name.clone(), "MODEL")
                });
            }
        }
        Ok(out)
    }
}
