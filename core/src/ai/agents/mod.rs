//! Agents: their statements (`statements`), how one answers a question with SQL as its tool
//! (`answer`), the read-only sandbox that tool's queries run in (`sandbox`), and an agent asked
//! in a SELECT (`ask`). The records are `catalog::agents`.

pub(crate) mod answer;
pub(crate) mod ask;
pub(crate) mod sandbox;
pub(crate) mod statements;
