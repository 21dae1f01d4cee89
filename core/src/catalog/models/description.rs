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
}
