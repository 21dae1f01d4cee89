//! Uploads stored: a decoded file (`services::files`) loaded as a table of the `files`
//! database through the same load path as `CREATE TABLE … AS` (see `load`), listed, and
//! removed.

use std::sync::Arc;

use bytes::Bytes;

use crate::catalog::namespace::FILES_DB;
use crate::catalog::tables;
use crate::catalog::tables::ReadTables;
use crate::error::{Error, Result};
use crate::tenant::TenantId;

use super::load::LoadTarget;
use super::request::LoadMode;
use super::SqlRunner;
use crate::services::files::{open, Caps, FileFormat, FileInfo};

impl SqlRunner {
    /// Reads `bytes` as a file (see `services::files::open`) and stores it as `files.<name>`,
    /// in one transaction: all rows or none. A file of that name is a Conflict. Returns the
    /// rows.
    pub(crate) async fn upload_file(
        &self,
        tenant: TenantId,
        name: &str,
        bytes: Vec<u8>,
        format: Option<FileFormat>,
        file_name: Option<String>,
    ) -> Result<u64> {
        // A bad name is refused before the file is read.
        crate::catalog::namespace::validate_name("file", name)?;
        let caps = Caps::of(&self.services.config);
        let bytes = Bytes::from(bytes);
        let mut swept = false;
        loop {
            let (bytes, file_name) = (bytes.clone(), file_name.clone());
            // Inferring the columns reads the file once: CPU work, off the async workers.
            let file = crate::memory::spawn_blocking(move || {
                open(bytes, format, file_name.as_deref(), caps)
            })
            .await
            .map_err(|e| Error::internal(format!("reading the file stopped: {e}")))??;
            let schema = Arc::clone(&file.schema);
            // Decoded batch by batch into the staged table, within the caps: nothing is
            // stored unless every row fits.
            let rows: super::load::BatchSource = Box::new(move |sink| file.read_into(caps, sink));
            let loaded = self
                .load_into(
                    tenant,
                    LoadTarget::File,
                    name,
                    schema,
                    rows,
                    LoadMode::Create,
                )
                .await;
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
