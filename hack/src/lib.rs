//! No code: this crate exists for the features its manifest turns on, so that every command
//! of the workspace builds its dependencies (DataFusion above all) with the same ones.
