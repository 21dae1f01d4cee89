//! `ENGINE = 'files'`: a local directory whose CSV and Parquet files are read-only tables, one
//! per file, named by the file's stem (`sales.csv` is `f.sales`). Files are read where they lie
//! through DataFusion's listing tables (projections, and for Parquet row-group pruning by
//! filters), so nothing is copied into the store and a changed file is seen by the next query.

use std::path::{Path, PathBuf};
use std::sync::Arc;

use datafusion::catalog::TableProvider;
use datafusion::datasource::file_format::csv::CsvFormat;
use datafusion::datasource::file_format::parquet::ParquetFormat;
use datafusion::datasource::file_format::FileFormat;
use datafusion::datasource::listing::{
    ListingOptions, ListingTable, ListingTableConfig, ListingTableUrl,
};
use datafusion::execution::SessionStateBuilder;
use serde_json::{Map, Value};

use crate::error::{Error, Result};

/// The engine name in `CREATE DATABASE … ENGINE = 'files'`.
pub(crate) const ENGINE: &str = "files";

/// The file kinds read, by extension.
const EXTENSIONS: [&str; 2] = ["csv", "parquet"];

/// A checked `files` datasource: its directory.
#[derive(Debug, Clone)]
pub(crate) struct Directory {
    path: PathBuf,
}

impl Directory {
    /// Reads PARAMETERS (`{"path": "<dir>"}`), refusing other keys by name.
    pub(crate) fn from_parameters(parameters: &Map<String, Value>) -> Result<Directory> {
        if let Some(unknown) = parameters.keys().find(|k| k.as_str() != "path") {
            return Err(Error::invalid(format!(
                "Unknown parameter '{unknown}' for ENGINE 'files'; it takes only \"path\" (a directory)"
            )));
        }
        match parameters.get("path") {
            Some(Value::String(path)) if !path.is_empty() => Ok(Directory {
                path: PathBuf::from(path),
            }),
            Some(_) => Err(Error::invalid(
                "Parameter 'path' of ENGINE 'files' must be a directory path as text",
            )),
            None => Err(Error::invalid(
                "ENGINE 'files' needs PARAMETERS = {\"path\": \"<directory>\"}",
            )),
        }
    }

    /// The parameters to store: the directory as an absolute path, so a later working
    /// directory does not change what the datasource reads. Fails unless it is a directory.
    pub(crate) fn checked_parameters(&self) -> Result<Map<String, Value>> {
        let absolute = std::fs::canonicalize(&self.path).map_err(|e| {
            Error::invalid(format!(
                "Directory '{}' cannot be read: {e}",
                self.path.display()
            ))
        })?;
        if !absolute.is_dir() {
            return Err(Error::invalid(format!(
                "'{}' is not a directory",
                self.path.display()
            )));
        }
        let mut out = Map::new();
        out.insert(
            "path".into(),
            Value::String(absolute.to_string_lossy().into_owned()),
        );
        Ok(out)
    }

    /// The tables: (name, file), by name. A stem found twice (`a.csv` and `a.parquet`) is the
    /// file whose extension comes first in [`EXTENSIONS`].
    pub(crate) fn tables(&self) -> Result<Vec<(String, PathBuf)>> {
        let entries = std::fs::read_dir(&self.path).map_err(|e| {
            Error::new(
                crate::error::ErrorKind::Unavailable,
                format!("Directory '{}' cannot be read: {e}", self.path.display()),
            )
        })?;
        let mut found: Vec<(String, usize, PathBuf)> = Vec::new();
        for entry in entries.flatten() {
            let path = entry.path();
            if !path.is_file() {
                continue;
            }
            let (Some(stem), Some(extension)) = (
                path.file_stem().and_then(|s| s.to_str()),
                path.extension().and_then(|s| s.to_str()),
            ) else {
                continue;
            };
            let extension = extension.to_ascii_lowercase();
            if let Some(rank) = EXTENSIONS.iter().position(|e| *e == extension) {
                found.push((stem.to_ascii_lowercase(), rank, path.clone()));
            }
        }
        found.sort();
        found.dedup_by(|later, first| later.0 == first.0);
        Ok(found
            .into_iter()
            .map(|(name, _, path)| (name, path))
            .collect())
    }

    /// The table `name` (case-insensitive), or `None` when no file has that stem.
    pub(crate) async fn table(&self, name: &str) -> Result<Option<Arc<dyn TableProvider>>> {
        let wanted = name.to_ascii_lowercase();
        let Some((_, path)) = self.tables()?.into_iter().find(|(n, _)| *n == wanted) else {
            return Ok(None);
        };
        Ok(Some(Arc::new(listing_table(&path).await?)))
    }
}

/// A listing table over one file, its schema inferred from the file.
async fn listing_table(path: &Path) -> Result<ListingTable> {
    let extension = path
        .extension()
        .and_then(|e| e.to_str())
        .unwrap_or_default()
        .to_ascii_lowercase();
    let format: Arc<dyn FileFormat> = match extension.as_str() {
        "parquet" => Arc::new(ParquetFormat::default()),
        _ => Arc::new(CsvFormat::default().with_has_header(true)),
    };
    let options = ListingOptions::new(format).with_file_extension(format!(".{extension}"));
    let url = ListingTableUrl::parse(path.to_string_lossy())
        .map_err(|e| Error::invalid(format!("File '{}' cannot be named: {e}", path.display())))?;
    // Inference needs only the object store registry (local files) and the default options.
    let state = SessionStateBuilder::new().build();
    let unreadable = |e: datafusion::error::DataFusionError| {
        Error::invalid(format!("File '{}' cannot be read: {e}", path.display()))
    };
    let schema = options
        .infer_schema(&state, &url)
        .await
        .map_err(unreadable)?;
    let config = ListingTableConfig::new(url)
        .with_listing_options(options)
        .with_schema(schema);
    ListingTable::try_new(config).map_err(unreadable)
}
