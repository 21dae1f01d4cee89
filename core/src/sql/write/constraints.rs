//! Constraints as statements declare and writes keep them. CREATE TABLE's CHECK expressions
//! and DEFAULTs are read from the statement (DataFusion's planner refuses CHECK and keeps
//! defaults only as planned expressions, which cannot be stored) and stored as SQL text with
//! DataFusion's primary and unique keys; CHECKs are planned against the table and evaluated on
//! every row a write stores. Unique keys are verified where rows are stored
//! (`catalog::tables`), and CREATE / DROP INDEX change the table's record.

use std::collections::BTreeMap;
use std::sync::Arc;

use datafusion::arrow::array::{AsArray, RecordBatch};
use datafusion::arrow::datatypes::SchemaRef;
use datafusion::common::{Constraint, DFSchema};
use datafusion::logical_expr::CreateMemoryTable;
use datafusion::physical_expr::PhysicalExpr;
use datafusion::sql::sqlparser::ast::{
    ColumnOption, CreateIndex, Expr as SqlExpr, ObjectName, Statement, TableConstraint,
};

use crate::catalog::constraints::{Constraints, Index};
use crate::catalog::tables::TableRecord;
use crate::error::{Error, ErrorKind, Result};
use crate::sql::planning::session::Session;

/// What CREATE TABLE declares that DataFusion's plan does not carry.
#[derive(Debug, Default)]
pub(crate) struct Declared {
    checks: Vec<String>,
    defaults: BTreeMap<String, String>,
}

/// Takes the CHECK constraints out of a CREATE TABLE (so DataFusion plans the rest) and notes
/// them and the DEFAULTs as SQL text.
pub(crate) fn take_declared(statement: &mut Statement) -> Declared {
    let mut declared = Declared::default();
    let Statement::CreateTable(create) = statement else {
        return declared;
    };
    create.constraints.retain(|constraint| match constraint {
        TableConstraint::Check(check) => {
            declared.checks.push(check.expr.to_string());
            false
        }
        _ => true,
    });
    for column in &mut create.columns {
        column.options.retain(|option| match &option.option {
            ColumnOption::Check(check) => {
                declared.checks.push(check.expr.to_string());
                false
            }
            ColumnOption::Default(expr) => {
                declared
                    .defaults
                    .insert(column.name.value.to_ascii_lowercase(), expr.to_string());
                true
            }
            _ => true,
        });
    }
    declared
}

/// The constraints a planned CREATE TABLE stores: DataFusion's keys by column name, and what
/// [`take_declared`] kept. (The caller plans the CHECKs before storing them, so one that does
/// not plan against the table's columns fails the CREATE, not a later INSERT.)
pub(crate) fn of_create(create: &CreateMemoryTable, declared: Declared) -> Result<Constraints> {
    let fields = create.input.schema().fields();
    let names = |indices: &Vec<usize>| -> Vec<String> {
        indices.iter().map(|&i| fields[i].name().clone()).collect()
    };
    let mut constraints = Constraints {
        checks: declared.checks,
        defaults: declared.defaults,
        ..Constraints::default()
    };
    for constraint in create.constraints.iter() {
        match constraint {
            Constraint::PrimaryKey(_) if !constraints.primary_key.is_empty() => {
                return Err(Error::invalid(format!(
                    "Table '{}' has more than one PRIMARY KEY",
                    create.name
                )));
            }
            Constraint::PrimaryKey(columns) => constraints.primary_key = names(columns),
            Constraint::Unique(columns) => constraints.unique.push(names(columns)),
        }
    }
    Ok(constraints)
}

/// A table's CHECK expressions, planned for evaluation on its rows.
pub(crate) struct Checks {
    table: String,
    planned: Vec<(String, Arc<dyn PhysicalExpr>)>,
}

impl Checks {
    /// The CHECKs of `record`'s table, whose rows have `schema`.
    pub(crate) fn of(state: &Session, record: &TableRecord, schema: &SchemaRef) -> Result<Checks> {
        Self::of_constraints(state, &record.name, &record.constraints, schema)
    }

    /// The CHECKs of `constraints` of the table `table`, whose rows have `schema`.
    pub(crate) fn of_constraints(
        state: &Session,
        table: &str,
        constraints: &Constraints,
        schema: &SchemaRef,
    ) -> Result<Checks> {
        Ok(Checks {
            table: table.to_string(),
            planned: Self::plan(state, constraints, schema)?,
        })
    }

    fn plan(
        state: &Session,
        constraints: &Constraints,
        schema: &SchemaRef,
    ) -> Result<Vec<(String, Arc<dyn PhysicalExpr>)>> {
        if constraints.checks.is_empty() {
            return Ok(Vec::new());
        }
        let df_schema = DFSchema::try_from(schema.as_ref().clone())?;
        constraints
            .checks
            .iter()
            .map(|text| {
                let expr = state.create_logical_expr(text, &df_schema).map_err(|e| {
                    Error::invalid(format!("CHECK ({text}) cannot be planned: {e}"))
                })?;
                Ok((text.clone(), state.create_physical_expr(expr, &df_schema)?))
            })
            .collect()
    }

    /// Fails when a row of `batch` (the table's columns, in order) makes a CHECK false.
    pub(crate) fn verify(&self, batch: &RecordBatch) -> Result<()> {
        for (text, expr) in &self.planned {
            let values = expr.evaluate(batch)?.into_array(batch.num_rows())?;
            let Some(values) = values.as_boolean_opt() else {
                return Err(Error::invalid(format!(
                    "CHECK ({text}) of table '{}' is not a condition",
                    self.table
                )));
            };
            // NULL passes, as in SQL: only a false condition is a violation.
            if values.iter().any(|value| value == Some(false)) {
                return Err(Error::new(
                    ErrorKind::ConstraintViolation,
                    format!("A row violates CHECK ({text}) of table '{}'", self.table),
                ));
            }
        }
        Ok(())
    }
}

/// `CREATE [UNIQUE] INDEX name ON table (columns)`, as the catalog stores it: the table
/// reference, and the index.
pub(crate) fn index_of(create: &CreateIndex) -> Result<(ObjectName, Index)> {
    let name = create
        .name
        .as_ref()
        .and_then(|name| name.0.last())
        .and_then(|part| part.as_ident())
        .map(|ident| ident.value.clone())
        .ok_or_else(|| Error::invalid("CREATE INDEX needs a name"))?;
    let columns = create
        .columns
        .iter()
        .map(|column| match &column.column.expr {
            SqlExpr::Identifier(ident) => Ok(ident.value.clone()),
            other => Err(Error::invalid(format!(
                "CREATE INDEX {name}: only columns can be indexed, not {other}"
            ))),
        })
        .collect::<Result<Vec<_>>>()?;
    if create.predicate.is_some() {
        return Err(Error::invalid(format!(
            "CREATE INDEX {name}: partial indexes (WHERE) are not supported"
        )));
    }
    Ok((
        create.table_name.clone(),
        Index {
            name,
            columns,
            unique: create.unique,
            entries: None,
            backs: None,
        },
    ))
}
