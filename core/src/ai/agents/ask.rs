//! What answers an agent asked from SQL (`table`): a trait the agent loop implements, so the
//! agent's table and the loop, which runs SQL itself, do not need each other.

use futures::future::BoxFuture;

use crate::catalog::agents::Agent;
use crate::catalog::quotas::Question;
use crate::error::Result;
use crate::sql::SqlRunner;
use crate::tenant::TenantId;

/// What answers an agent asked from SQL: the agent loop (`answer`), which the agents'
/// extension holds. A trait, so that this file and the agent loop, which runs SQL itself (its
/// `sql_query` tool) and asks nothing of this one, do not need each other.
pub(crate) trait AskAgent: Send + Sync {
    /// `agent`'s answer to `question`, for `tenant`, whose plan counted the question already
    /// (`counted` is given back if nothing reached a provider).
    fn ask<'a>(
        &'a self,
        runner: &'a SqlRunner,
        tenant: TenantId,
        counted: Question,
        agent: &'a Agent,
        question: String,
    ) -> BoxFuture<'a, Result<String>>;
}
