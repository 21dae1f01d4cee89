//! Agents: their statements (`statements`), how one answers a question with SQL as its tool
//! (`answer`), the read-only sandbox that tool's queries run in (`sandbox`), and an agent as a
//! table of its answers (`table`, answered through `ask`). The records are
//! `catalog::agents`.

pub(crate) mod answer;
pub(crate) mod ask;
pub(crate) mod sandbox;
pub(crate) mod statements;
pub(crate) mod table;

use std::fmt;
use std::sync::Arc;

use datafusion::catalog::TableProvider;
use datafusion::sql::sqlparser::tokenizer::Token;

use self::ask::AskAgent;
use self::table::AgentTable;

use crate::catalog::agents::Agent;
use crate::error::Result;
use crate::sql::catalog::features::{FeatureTables, ProjectObject, SystemRows};
use crate::sql::catalog::information_schema::SystemTable;
use crate::sql::catalog::snapshot::Snapshot;
use crate::sql::{Extension, FeatureStatement};

/// Agents plugged into the relational engine: their statements, each agent as a table of its
/// answers (`table`) and `information_schema.agents`.
pub(crate) struct Agents {
    /// What answers an agent asked from SQL: the agent loop.
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
}

impl FeatureTables for Agents {
    fn table(
        &self,
        snapshot: &Arc<Snapshot>,
        project: &str,
        name: &str,
    ) -> Result<Option<Arc<dyn TableProvider>>> {
        Ok(snapshot.agent(project, name)?.map(|agent| {
            Arc::new(AgentTable::new(
                agent,
                snapshot.tenant,
                Arc::clone(&self.asker),
            )) as Arc<dyn TableProvider>
        }))
    }

    fn has_table(&self, snapshot: &Snapshot, project: &str, name: &str) -> bool {
        matches!(snapshot.agent(project, name), Ok(Some(_)))
    }

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

    fn objects(&self, snap: &Snapshot, project: &str) -> Result<Vec<ProjectObject>> {
        let agents = snap.agents(Some(project))?;
        Ok(agents
            .into_iter()
            .map(|a| ProjectObject::new(a.name, "AGENT"))
            .collect())
    }
}
