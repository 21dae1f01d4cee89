//! Uploads stored: a decoded file (`services::files`) loaded as a table of the `files`
//! database through the same load path as `CREATE TABLE … AS` (see `load`), listed, and
//! removed.

use std::sync::{Arc, Mutex};

use bytes::Bytes;

use crate::catalog::namespace::{sheet_table, sheets_db, FILES_DB};
use crate::catalog::tables;
use crate::catalog::tables::ReadTables;
use crate::error::{Error, Result};
use crate::tenant::TenantId;

use super::load::NewTable;
use super::SqlRunner;
use crate::services::files::{open, Caps, FileFormat, FileInfo, FileRows};

/// A URL's file over `http.max_body_bytes`.
fn too_big(max: u64) -> Error {
    Error::invalid(format!(
        "The file at the URL is larger than {max} bytes, the most an upload may be (http.max_body_bytes)"
    ))
}

impl SqlRunner {
    /// Reads `bytes` as a file (see `services::files::open`) and stores it as `files.<name>`,
    /// in one transaction: all rows or none. A workbook of several sheets is stored as a
    /// table listing them and a table per sheet (`files.<name>.<sheet>`), in the same
    /// transaction, the caps holding for all of them together. A file of that name is a
    /// Conflict. Returns the rows of `files.<name>`.
    pub(crate) async fn upload_file(
        &self,
        tenant: TenantId,
        name: &str,
        bytes: Vec<u8>,
        format: Option<FileFormat>,
        file_name: Option<String>,
    ) -> Result<u64> {
        // A bad name, or one taken, is refused before the file is read (which may take a
        // child process a minute).
        crate::catalog::namespace::validate_name("file", name)?;
        self.refuse_existing(tenant, name)?;
        let caps = Caps::of(&self.services.config);
        let bytes = Bytes::from(bytes);
        let mut swept = false;
        loop {
            let (bytes, file_name) = (bytes.clone(), file_name.clone());
            // Inferring the columns reads the file once: CPU work, off the async workers.
            let mut file = crate::memory::spawn_blocking(move || {
                open(bytes, format, file_name.as_deref(), caps)
            })
            .await
            .map_err(|e| Error::internal(format!("reading the file stopped: {e}")))??;
            // What the file's tables have read so far, which the next one's caps leave out.
            let used = Arc::new(Mutex::new((0u64, 0u64)));
            let sheets = std::mem::take(&mut file.sheets);
            let first = Arc::clone(&used);
            let mut tables = vec![NewTable {
                db: FILES_DB.to_string(),
                name: name.to_string(),
                open: Box::new(move || {
                    Ok(Some((
                        Arc::clone(&file.schema),
                        counted(file, caps, &first),
                    )))
                }),
            }];
            for (position, sheet) in sheets.into_iter().enumerate() {
                // Each sheet's columns are typed as its turn comes (on the loading thread),
                // so one sheet's cells are read at a time.
                let used = Arc::clone(&used);
                tables.push(NewTable {
                    db: sheets_db(name),
                    name: sheet_table(position + 1),
                    // An empty sheet is listed, and stored as no table.
                    open: Box::new(move || {
                        Ok(sheet
                            .open()?
                            .map(|file| (Arc::clone(&file.schema), counted(file, caps, &used))))
                    }),
                });
            }
            let loaded = self.load_new(tenant, tables).await;
            return match loaded {
                Err(e) if e.kind() == crate::ErrorKind::Conflict => Err(Error::conflict(format!(
                    "File with name '{name}' already exists"
                ))),
                // What this user deleted just now counts until swept (replacing a file is
                // a delete, then an upload): read again, once, after it is gone.
                Err(refused) if refused.refused_for_storage() && !swept => {
                    self.wait_for_sweep(tenant, refused).await?;
                    swept = true;
                    continue;
                }
                other => other,
            };
        }
    }

    /// A Conflict when `files.<name>` exists (checked again when the file is stored).
    fn refuse_existing(&self, tenant: TenantId, name: &str) -> Result<()> {
        if self
            .list_files(tenant)?
            .iter()
            .any(|file| file.name.eq_ignore_ascii_case(name))
        {
            return Err(Error::conflict(format!(
                "File with name '{name}' already exists"
            )));
        }
        Ok(())
    }

    /// Fetches the file at `url` and stores it as `files.<name>` (as [`SqlRunner::upload_file`]
    /// does), the format told by `file_name`, else the URL's last path segment, else the
    /// answer's `Content-Type`, else the first bytes. The connection goes through the egress
    /// policy, follows no redirect, and reads at most `http.max_body_bytes`, the most an
    /// upload sent in a request may be.
    pub(crate) async fn upload_url(
        &self,
        tenant: TenantId,
        name: &str,
        url: &str,
        file_name: Option<String>,
    ) -> Result<u64> {
        crate::catalog::namespace::validate_name("file", name)?;
        let config = &self.services.config;
        if !config.url_upload() {
            return Err(Error::new(
                crate::ErrorKind::Forbidden,
                "URL file upload is disabled (files.url_upload)",
            ));
        }
        // MindsDB refuses an existing name before it downloads anything; so does this.
        self.refuse_existing(tenant, name)?;
        let parsed = url::Url::parse(url)
            .ok()
            .filter(|u| matches!(u.scheme(), "http" | "https") && u.host().is_some())
            .ok_or_else(|| Error::invalid(format!("The URL is not valid: {url}")))?;
        let max = config.http.max_body_bytes;
        let request = self
            .services
            .client
            .get(parsed.as_str())
            .map_err(Error::from)?;
        let mut response = request.send().await.map_err(|e| {
            crate::egress::refusal_in(&e).map_or_else(
                || {
                    Error::new(
                        crate::ErrorKind::Unavailable,
                        format!("Error getting file: {}", crate::egress::http_reason(&e)),
                    )
                },
                |refused| Error::new(crate::ErrorKind::Forbidden, refused),
            )
        })?;
        if response.status() != reqwest::StatusCode::OK {
            return Err(Error::invalid(format!(
                "Error getting file: got status code {}",
                response.status().as_u16()
            )));
        }
        if response.content_length().is_some_and(|length| length > max) {
            return Err(too_big(max));
        }
        let content_type = response
            .headers()
            .get(reqwest::header::CONTENT_TYPE)
            .and_then(|v| v.to_str().ok())
            .map(str::to_string);
        let mut bytes = Vec::new();
        while let Some(chunk) = response.chunk().await.map_err(|e| {
            Error::new(
                crate::ErrorKind::Unavailable,
                format!("Error getting file: {}", crate::egress::http_reason(&e)),
            )
        })? {
            if (bytes.len() + chunk.len()) as u64 > max {
                return Err(too_big(max));
            }
            bytes.extend_from_slice(&chunk);
        }
        let from_path = parsed
            .path_segments()
            .and_then(|mut segments| segments.next_back())
            .filter(|segment| segment.contains('.'))
            .map(str::to_string);
        let file_name = file_name.or(from_path);
        let format = match file_name.as_deref().and_then(FileFormat::from_name) {
            Some(_) => None,
            None => content_type.as_deref().and_then(FileFormat::from_name),
        };
        self.upload_file(tenant, name, bytes, format, file_name)
            .await
    }

    /// Every uploaded file, by name.
    pub(crate) fn list_files(&self, tenant: TenantId) -> Result<Vec<FileInfo>> {
        let txn = self.services.store.read()?;
        let records = tables::records(&txn, tenant, FILES_DB)?;
        records
            .into_iter()
            .map(|record| {
                let schema = txn.schema_of(record.id)?;
                Ok(FileInfo {
                    columns: schema.fields().iter().map(|f| f.name().clone()).collect(),
                    name: record.name,
                    row_count: record.row_count,
                })
            })
            .collect()
    }

    /// Removes the uploaded file `name`; NotFound when there is none.
    pub(crate) async fn delete_file(&self, tenant: TenantId, name: &str) -> Result<()> {
        let name = name.to_string();
        self.services
            .store
            .write(move |txn| {
                if tables::drop_table(txn, tenant, FILES_DB, &name)? {
                    Ok(())
                } else {
                    Err(Error::not_found(format!("File '{name}' does not exist")))
                }
            })
            .await
    }
}

/// `file`'s rows as a load reads them, counted against `caps` together with `used` (the rows
/// and bytes of the upload's tables read before), which it then adds its own to.
fn counted(file: FileRows, caps: Caps, used: &Arc<Mutex<(u64, u64)>>) -> super::load::BatchSource {
    let used = Arc::clone(used);
    Box::new(move |sink| {
        let before = *used
            .lock()
            .map_err(|_| Error::internal("a poisoned lock"))?;
        let total = file.read_after(caps, before, sink)?;
        *used
            .lock()
            .map_err(|_| Error::internal("a poisoned lock"))? = total;
        Ok(())
    })
}
