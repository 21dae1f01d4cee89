//! Agents: their statements (`statements`), how one answers a question with SQL as its tool
//! (`answer`), the read-only sandbox that tool's queries run in (`sandbox`), and an agent asked
//! in a SELECT (`ask`). The records are `catalog::agents`.

pub(crate) mod answer;
pub(crate) mod ask;
pub(crate) mod sandbox;
pub(crate) mod statements;

use std::fmt;
use std::sync::Arc;

use datafusion::sql::sqlparser::ast::Statement;
use datafusion::sql::sqlparser::tokenizer::Token;
use futures::future::BoxFuture;

use self::ask::AskAgent;

use crate::catalog::agents::Agent;
use crate::error::Result;
use crate::sql::catalog::features::{FeatureTables, SystemRows};
use crate::sql::catalog::information_schema::SystemTable;
use crate::sql::catalog::snapshot::Snapshot;
use crate::sql::SqlRunner;
use crate::sql::{Extension, FeatureStatement};
use crate::tenant::TenantId;

/// Agents plugged into the relational engine: their statements, an agent asked in a SELECT
/// (`ask`) and `information_schema.agents`.
pub(crate) struct Agents {
    /// What answers an agent asked in a SELECT: the agent loop.
    pub(crate) asker: Arc<dyn AskAgent>,
}

impl fmt::Debug for Agents {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("Agents")
    }
}

impl Extension for Agents {
    fn statement(&self, words: &[&Token]) -> Result<Option<Box<dyn FeatureStatement>>> {
        Ok(statements::agent_command(words)?.map(|s| Box::new(s) as Box<dyn FeatureStatement>))
    }

    fn rewrite<'a>(
        &'a self,
        runner: &'a SqlRunner,
        tenant: TenantId,
        db: &'a str,
        statement: &'a mut Statement,
    ) -> BoxFuture<'a, Result<bool>> {
        Box::pin(runner.answer_agent_select(&*self.asker, tenant, db, statement))
    }
}

impl FeatureTables for Agents {
    fn system_table(&self, snap: &Snapshot, name: &str) -> Result<Option<SystemRows>> {
        if name != "agents" {
            return Ok(None);
        }
        let agents = snap.agents(None)?;
        let rows: Vec<[String; 4]> = agents.iter().map(Agent::system_row).collect();
        let batch = SystemTable::default()
            .text("NAME", rows.iter().map(|r| Some(r[0].as_str())))
            .text("PROJECT", rows.iter().map(|r| Some(r[1].as_str())))
            .text("MODEL", rows.iter().map(|r| Some(r[2].as_str())))
            .text("PARAMS", rows.iter().map(|r| Some(r[3].as_str())))
            .build()?;
        Ok(Some(SystemRows { batch, live: false }))
    }
}
