//! Projects, as the REST fronts list and read them.

use crate::catalog::projects::{self, Project};
use crate::error::{Error, Result};
use crate::store::schema::PROJECTS;

use super::Engine;

impl Engine {
    /// The projects, by name.
    pub fn list_projects(&self) -> Result<Vec<Project>> {
        let tenant = self.tenant;
        let txn = self.inner.sql.store.read()?;
        projects::list(&txn.open_table(PROJECTS)?, tenant)
    }

    /// One project by name (case-insensitive), or [`ErrorKind::NotFound`](crate::ErrorKind).
    pub fn get_project(&self, name: &str) -> Result<Project> {
        let tenant = self.tenant;
        let txn = self.inner.sql.store.read()?;
        projects::get(&txn.open_table(PROJECTS)?, tenant, name)?.ok_or_else(|| {
            Error::not_found(format!("Project '{name}' does not exist"))
                .about(crate::error::Subject::Project)
        })
    }
}
