//! MindsDB's AI objects as SQL: each folder is one feature and holds all of itself — its
//! statements (read on tokens), the table provider its name resolves to, its plan nodes and
//! its writes — over the relational engine in `sql/` and the clients in `services/`.
//!
//! - `models`: `CREATE MODEL` and its kin, a model as a table, predictions by join;
//! - `knowledge_bases`: their statements, the table a knowledge base's name resolves to, its
//!   search and its writes;
//! - `agents`: their statements, the agent loop, its SQL tool's read-only sandbox, and an
//!   agent as a table of its answers;
//! - `minds`: a mind asked through the OpenAI-style chat APIs;
//! - `jobs`: statements run on a schedule, and `LAST`.

pub(crate) mod agents;
pub(crate) mod jobs;
pub(crate) mod knowledge_bases;
pub(crate) mod minds;
pub(crate) mod models;

use std::sync::Arc;

use crate::sql::{Extension, Extensions};

/// The features the engine plugs into its SQL engine, in the order they are asked: a
/// statement, a name or a system table is the first one's that claims it.
pub(crate) fn extensions() -> Extensions {
    let features: [Arc<dyn Extension>; 4] = [
        Arc::new(knowledge_bases::KnowledgeBases),
        Arc::new(agents::Agents {
            asker: Arc::new(agents::answer::AgentLoop),
        }),
        Arc::new(models::Models),
        Arc::new(jobs::Jobs),
    ];
    Arc::new(features)
}
