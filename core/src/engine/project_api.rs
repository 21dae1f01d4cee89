//! Projects, as the REST fronts list and read them.

use crate::catalog::projects::{self, Project};
use crate::error::{Error, Result};

use super::Engine;

impl Engine {
    /// The projects, by name.
    pub fn list_projects(&self) -> Result<Vec<Project>> {
        let tenant = self.tenant;
        let txn = self.inner.services.store.read()?;
        projects::all(&txn, tenant)
    }

    /// One project by name (case-insensitive), or [`ErrorKind::NotFound`](crate::ErrorKind).
    pub fn get_project(&self, name: &str) -> Result<Project> {
        let tenant = self.tenant;
        let txn = self.inner.services.store.read()?;
        projects::named(&txn, tenant, name)?.ok_or_else(|| {
            Error::not_found(format!("Project '{name}' does not exist"))
                .about(crate::error::Subject::Project)
        })
    }
}
