//! Models in SQL: their statements (`statements`, read on tokens; `run`, what they do), a
//! model as a table (`predict`) and predictions for every row of a table joined with a model
//! (`predict_join`). Training itself is `services::ml`.

pub(crate) mod predict;
pub(crate) mod predict_join;
pub(crate) mod run;
pub(crate) mod statements;
