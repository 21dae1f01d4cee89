//! Uploaded files through the facade: uploading, listing and deleting them.

use std::sync::Arc;

use crate::error::{Error, Result};
use crate::services::files::{FileFormat, FileInfo};

use super::{AbortOnDrop, Engine};

impl Engine {
    /// Uploads a file as the table `files.<name>`: CSV with a header line, JSON (an array of
    /// objects, or one object per line), Parquet or an `.xlsx` sheet, column types inferred;
    /// or a document (text, Markdown, HTML, PDF, `.docx`) as rows of its text's chunks
    /// (`content`, `metadata`); or a zip archive of one such file. `format` as given, else
    /// from `file_name`'s extension, else from the first bytes. All rows or none; Conflict
    /// when a file of that name exists. Returns the rows stored.
    pub async fn upload_file(
        &self,
        name: &str,
        bytes: Vec<u8>,
        format: Option<FileFormat>,
        file_name: Option<&str>,
    ) -> Result<u64> {
        let tenant = self.tenant;
        let inner = Arc::clone(&self.inner);
        let (name, file_name) = (name.to_string(), file_name.map(str::to_string));
        let (control, _ticket) = self.statement_control()?;
        // Aborted when the caller stops waiting or the statement's time is up, so an abandoned
        // upload stops being read and writes nothing (once its transaction is committing, it
        // completes).
        let mut task = AbortOnDrop(crate::memory::spawn_on(&self.inner.handle, async move {
            let upload = inner
                .sql
                .upload_file(tenant, &name, bytes, format, file_name);
            control.run(upload).await
        }));
        (&mut task.0)
            .await
            .map_err(|e| Error::internal(format!("upload task failed: {e}")))?
    }

    /// Fetches the file at `url` (http or https, through the egress policy, no redirects) and
    /// uploads it as [`Engine::upload_file`] does; `file_name` names its format, else the
    /// URL's last path segment or the answer's `Content-Type`. Forbidden when
    /// `files.url_upload` is off or the policy refuses the host.
    pub async fn upload_url(&self, name: &str, url: &str, file_name: Option<&str>) -> Result<u64> {
        let tenant = self.tenant;
        let inner = Arc::clone(&self.inner);
        let (name, url, file_name) = (
            name.to_string(),
            url.to_string(),
            file_name.map(str::to_string),
        );
        let (control, _ticket) = self.statement_control()?;
        let mut task = AbortOnDrop(crate::memory::spawn_on(&self.inner.handle, async move {
            let upload = inner.sql.upload_url(tenant, &name, &url, file_name);
            control.run(upload).await
        }));
        (&mut task.0)
            .await
            .map_err(|e| Error::internal(format!("upload task failed: {e}")))?
    }

    /// Every uploaded file, by name.
    pub fn list_files(&self) -> Result<Vec<FileInfo>> {
        let tenant = self.tenant;
        self.inner.sql.list_files(tenant)
    }

    /// Removes the uploaded file `name` (NotFound when there is none).
    pub async fn delete_file(&self, name: &str) -> Result<()> {
        let tenant = self.tenant;
        self.inner.sql.delete_file(tenant, name).await
    }
}
