//! An agent as a table: `SELECT answer FROM p.agent WHERE question = '…'`. Its rows are
//! `(question, answer)`: one for the question the query's condition names, asked when the
//! scan runs (not when it is planned, so `EXPLAIN` asks nothing). As a table it is projected,
//! joined and nested in subqueries like any other, as MindsDB's models and our knowledge bases
//! are.

use std::collections::BTreeSet;
use std::fmt;
use std::sync::Arc;

use async_trait::async_trait;
use datafusion::arrow::array::{RecordBatch, StringArray};
use datafusion::arrow::datatypes::{DataType, Field, Schema, SchemaRef};
use datafusion::catalog::{Session, TableProvider};
use datafusion::common::ScalarValue;
use datafusion::datasource::TableType;
use datafusion::error::Result as DfResult;
use datafusion::execution::TaskContext;
use datafusion::logical_expr::{BinaryExpr, Expr, Operator, TableProviderFilterPushDown};
use datafusion::physical_plan::empty::EmptyExec;
use datafusion::physical_plan::stream::RecordBatchStreamAdapter;
use datafusion::physical_plan::streaming::{PartitionStream, StreamingTableExec};
use datafusion::physical_plan::{ExecutionPlan, SendableRecordBatchStream};

use super::ask::AskAgent;
use crate::catalog::agents::Agent;
use crate::catalog::quotas::Question;
use crate::error::Error;
use crate::sql::RunnerHandle;
use crate::tenant::TenantId;

/// The column a query names the question by.
const QUESTION: &str = "question";

/// An agent of a tenant, as a table of its answers.
pub(crate) struct AgentTable {
    agent: Agent,
    tenant: TenantId,
    asker: Arc<dyn AskAgent>,
    schema: SchemaRef,
}

impl fmt::Debug for AgentTable {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "AgentTable({}.{})", self.agent.project, self.agent.name)
    }
}

impl AgentTable {
    /// `agent` of `tenant` as a table, answered by `asker`.
    pub(crate) fn new(agent: Agent, tenant: TenantId, asker: Arc<dyn AskAgent>) -> AgentTable {
        let schema = Arc::new(Schema::new(vec![
            Field::new(QUESTION, DataType::Utf8, false),
            Field::new("answer", DataType::Utf8, false),
        ]));
        AgentTable {
            agent,
            tenant,
            asker,
            schema,
        }
    }
}

#[async_trait]
impl TableProvider for AgentTable {
    fn schema(&self) -> SchemaRef {
        Arc::clone(&self.schema)
    }

    fn table_type(&self) -> TableType {
        TableType::Base
    }

    fn supports_filters_pushdown(
        &self,
        filters: &[&Expr],
    ) -> DfResult<Vec<TableProviderFilterPushDown>> {
        // A question is answered exactly: the rows hold the question asked.
        Ok(filters
            .iter()
            .map(|f| match question_of(f) {
                Some(_) => TableProviderFilterPushDown::Exact,
                None => TableProviderFilterPushDown::Unsupported,
            })
            .collect())
    }

    async fn scan(
        &self,
        state: &dyn Session,
        projection: Option<&Vec<usize>>,
        filters: &[Expr],
        limit: Option<usize>,
    ) -> DfResult<Arc<dyn ExecutionPlan>> {
        let questions: BTreeSet<String> = filters.iter().filter_map(question_of).collect();
        let mut questions = questions.into_iter();
        let (Some(question), None) = (questions.next(), questions.next()) else {
            if filters.iter().any(|f| question_of(f).is_some()) {
                // `question = 'a' AND question = 'b'`: no row is both.
                let projected = match projection {
                    Some(p) => Arc::new(self.schema.project(p)?),
                    None => Arc::clone(&self.schema),
                };
                return Ok(Arc::new(EmptyExec::new(projected)));
            }
            return Err(Error::invalid(format!(
                "Ask agent '{}' with WHERE question = '…'",
                self.agent.name
            ))
            .into());
        };
        let runner = state
            .config()
            .get_extension::<RunnerHandle>()
            .ok_or_else(|| Error::internal("a session without its runner asked an agent"))?;
        let answer = Answer {
            schema: Arc::clone(&self.schema),
            agent: self.agent.clone(),
            tenant: self.tenant,
            question,
            asker: Arc::clone(&self.asker),
            runner,
        };
        Ok(Arc::new(StreamingTableExec::try_new(
            Arc::clone(&self.schema),
            vec![Arc::new(answer)],
            projection,
            [],
            false,
            limit,
        )?))
    }
}

/// The question a condition names: `question = '…'` (either way round, the column qualified
/// or not).
fn question_of(filter: &Expr) -> Option<String> {
    let Expr::BinaryExpr(BinaryExpr {
        left,
        op: Operator::Eq,
        right,
    }) = filter
    else {
        return None;
    };
    let text = |e: &Expr| match e {
        Expr::Literal(
            ScalarValue::Utf8(Some(s))
            | ScalarValue::Utf8View(Some(s))
            | ScalarValue::LargeUtf8(Some(s)),
            _,
        ) => Some(s.clone()),
        _ => None,
    };
    let is_question =
        |e: &Expr| matches!(e, Expr::Column(c) if c.name.eq_ignore_ascii_case(QUESTION));
    match (is_question(left), is_question(right)) {
        (true, false) => text(right),
        (false, true) => text(left),
        _ => None,
    }
}

/// One question's answer, asked when the scan runs.
struct Answer {
    schema: SchemaRef,
    agent: Agent,
    tenant: TenantId,
    question: String,
    asker: Arc<dyn AskAgent>,
    runner: Arc<RunnerHandle>,
}

impl fmt::Debug for Answer {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "Answer of agent {}", self.agent.name)
    }
}

impl PartitionStream for Answer {
    fn schema(&self) -> &SchemaRef {
        &self.schema
    }

    fn execute(&self, _ctx: Arc<TaskContext>) -> SendableRecordBatchStream {
        let (schema, agent, tenant, question) = (
            Arc::clone(&self.schema),
            self.agent.clone(),
            self.tenant,
            self.question.clone(),
        );
        let (asker, runner) = (Arc::clone(&self.asker), Arc::clone(&self.runner));
        let answered = async move {
            let runner = runner.runner()?;
            let services = &runner.services;
            // A question asked through SQL counts against the plan like any other.
            let counted = Question::take(&services.store, &services.config.hosted, tenant).await?;
            let answer = asker
                .ask(&runner, tenant, counted, &agent, question.clone())
                .await?;
            let batch = RecordBatch::try_new(
                schema,
                vec![
                    Arc::new(StringArray::from(vec![question])),
                    Arc::new(StringArray::from(vec![answer])),
                ],
            )?;
            Ok::<_, Error>(batch)
        };
        Box::pin(RecordBatchStreamAdapter::new(
            Arc::clone(&self.schema),
            futures::stream::once(async move { answered.await.map_err(Into::into) }),
        ))
    }
}

#[cfg(test)]
mod tests {
    use datafusion::prelude::{col, lit};

    use super::*;

    #[test]
    fn the_question_is_an_equality_with_text_either_way_round() {
        assert_eq!(
            question_of(&col("question").eq(lit("hi"))).as_deref(),
            Some("hi")
        );
        assert_eq!(
            question_of(&lit("yo").eq(col("a.Question"))).as_deref(),
            Some("yo")
        );
        assert_eq!(question_of(&col("question").like(lit("hi"))), None);
        assert_eq!(question_of(&col("answer").eq(lit("hi"))), None);
        assert_eq!(question_of(&col("question").eq(lit(1))), None);
    }
}
