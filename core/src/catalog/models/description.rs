//! What training found out about a model, as `DESCRIBE` shows it.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

/// What training found out, in MindsDB's `DESCRIBE` vocabulary.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq)]
pub(crate) struct Description {
    /// `{"r2_score": ..}` for regression, `{"balanced_accuracy_score": ..}` for classification.
    pub(crate) accuracies: BTreeMap<String, f64>,
    /// Permutation importance per input column, scaled so the most important is 1.0.
    pub(crate) column_importances: BTreeMap<String, f64>,
    pub(crate) inputs: Vec<String>,
    pub(crate) outputs: Vec<String>,
    /// The stages, joined by " --> ".
    pub(crate) model: String,
    /// The mixer that won: "random forest", "linear" or "constant".
    pub(crate) mixer: String,
    /// Inferred kind per column, target included.
    pub(crate) column_types: BTreeMap<String, String>,
    /// Every candidate the search tried, in the order tried (`DESCRIBE p.m.model`); empty for
    /// models trained before the search kept them.
    #[serde(default)]
    pub(crate) candidates: Vec<CandidateScore>,
}

/// One candidate of the search: its cross-validated score and what it cost.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq)]
pub(crate) struct CandidateScore {
    /// The mixer and its setting, e.g. "ridge regression (alpha = 0.1)".
    pub(crate) name: String,
    /// The score the candidates are compared by (the accuracy's name), out of fold; `None`
    /// when its fit failed.
    pub(crate) score: Option<f64>,
    /// Seconds spent fitting and scoring it across the folds.
    pub(crate) seconds: f64,
    /// Whether it won.
    pub(crate) selected: bool,
    /// Why its fit failed, if it did.
    pub(crate) error: Option<String>,
}
