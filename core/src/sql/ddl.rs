//! The DDL the runner reads itself: `CREATE [OR REPLACE] VIEW` (its query planned now, stored
//! as text), `DROP VIEW|INDEX` of several names, and the `[project.]name` such statements (and
//! CREATE INDEX, and the write path's claims) name.

use std::sync::Arc;

use datafusion::sql::sqlparser::ast::{ObjectName, Statement};

use super::catalog::names;
use super::catalog::snapshot::{Namespace, Snapshot};
use super::catalog::tenant;
use super::request::{Outcome, ResultContext};
use super::{parse, SqlRunner};
use crate::error::{Error, Result};
use crate::tenant::TenantId;

impl SqlRunner {
    /// `DROP VIEW|INDEX [IF EXISTS] a, b`: `drop` removes each named object of its project, in
    /// one transaction per name (as DROP TABLE does).
    pub(super) async fn drop_each(
        &self,
        tenant: TenantId,
        context: &ResultContext,
        names: &[ObjectName],
        if_exists: bool,
        drop: fn(&redb::WriteTransaction, TenantId, &str, &str, bool) -> Result<()>,
    ) -> Result<Outcome> {
        for name in names {
            let (project, object) = self.project_and_name(tenant, context, name)?;
            self.services
                .store
                .write(move |txn| drop(txn, tenant, &project, &object, if_exists))
                .await?;
        }
        Ok(Outcome::Ok {
            affected_rows: None,
        })
    }

    /// `CREATE [OR REPLACE] VIEW [IF NOT EXISTS] [project.]name [(columns)] AS query`: the
    /// query is planned now (so one that does not plan is refused here) and stored as text.
    pub(super) async fn create_view(
        &self,
        tenant: TenantId,
        context: &ResultContext,
        create: &datafusion::sql::sqlparser::ast::CreateView,
    ) -> Result<Outcome> {
        if create.materialized || create.temporary {
            return Err(Error::invalid(
                "CREATE MATERIALIZED or TEMPORARY VIEW is not supported: views are stored queries",
            ));
        }
        let (project, name) = self.project_and_name(tenant, context, &create.name)?;
        let columns: Vec<String> = create
            .columns
            .iter()
            .map(|c| c.name.value.clone())
            .collect();
        // Stored as planned: with the rewrites every statement gets (unary plus on text).
        let mut as_statement = Statement::Query(create.query.clone());
        parse::without_unary_plus(&mut as_statement);
        let query = as_statement.to_string();
        // Planned where the view lives, as it will be whenever it is read.
        let snapshot = Snapshot::new(Arc::clone(&self.services.store), tenant)?;
        let state = self
            .sessions
            .for_view(snapshot, (project.clone(), name.to_ascii_lowercase()));
        let mut checked = Statement::Query(create.query.clone());
        names::name_columns_as_written(&mut checked);
        let checked = datafusion::sql::parser::Statement::Statement(Box::new(checked));
        let (state, planned) = self
            .plan_on_pool(tenant, async move {
                let planned = state.statement_to_plan(checked).await;
                (state, planned)
            })
            .await?;
        let plan = planned.map_err(|e| {
            let e = Error::from(e);
            match e.message().starts_with("View '") {
                true => e,
                false => Error::invalid(format!("View '{name}': {}", e.message())),
            }
        })?;
        tenant::rename_columns(plan, &columns, &name)?;
        drop(state);
        let view = crate::catalog::views::View {
            name,
            project,
            query,
            columns,
            created_at: crate::time::now_text(),
        };
        let (or_replace, if_not_exists) = (create.or_replace, create.if_not_exists);
        self.services
            .store
            .write(move |txn| {
                crate::catalog::rules::create_view(txn, tenant, view, or_replace, if_not_exists)
            })
            .await?;
        Ok(Outcome::Ok {
            affected_rows: None,
        })
    }

    /// The project and object a name like `[project.]name` refers to (the current database
    /// when it names none), checking that the database is a project.
    pub(super) fn project_and_name(
        &self,
        tenant: TenantId,
        context: &ResultContext,
        name: &ObjectName,
    ) -> Result<(String, String)> {
        let parts: Vec<String> = name
            .0
            .iter()
            .map(|part| {
                part.as_ident()
                    .map(|ident| match ident.quote_style {
                        Some(_) => ident.value.clone(),
                        None => ident.value.to_ascii_lowercase(),
                    })
                    .ok_or_else(|| Error::invalid(format!("'{name}' is not a name")))
            })
            .collect::<Result<_>>()?;
        let (db, object) = match parts.as_slice() {
            [object] => (context.db.clone(), object.clone()),
            [db, object] => (db.to_ascii_lowercase(), object.clone()),
            _ => return Err(Error::invalid(format!("'{name}' is not [database.]name"))),
        };
        let snapshot = Snapshot::new(Arc::clone(&self.services.store), tenant)?;
        match snapshot.namespace(&db)? {
            Some(Namespace::Project(project)) => Ok((project.name, object)),
            Some(_) => Err(Error::invalid(format!(
                "Database '{db}' is not a project: indexes are kept only on a project's tables"
            ))),
            None => Err(Error::not_found(format!("Database '{db}' not found"))),
        }
    }
}
