//! Knowledge bases in SQL: [`KnowledgeBaseTable`], the table provider a knowledge base's name
//! resolves to. It shows MindsDB's columns (`id, chunk_id, chunk_content, metadata, <metadata
//! columns>, distance, relevance`, then `content` and the search's settings); a top-level
//! `content = 'question'` condition makes a scan a search, which `kb_search` ranks when the
//! plan executes and returns the best `LIMIT` (10 when not given). All conditions are exact,
//! so DataFusion hands the LIMIT down. A scan without a question streams the chunk table.
//! `kb_write` inserts and deletes.
//!
//! The chunk table holds `id, chunk_id, chunk_content, metadata`, the metadata columns, then
//! `node`: the chunk's node in the knowledge base's indexes, which hold its vector.

use std::fmt;
use std::sync::Arc;

use async_trait::async_trait;
use datafusion::arrow::datatypes::{DataType, Field, Schema, SchemaRef};
use datafusion::catalog::{Session, TableProvider};
use datafusion::common::stats::Precision;
use datafusion::common::tree_node::{Transformed, TreeNode, TreeNodeRecursion};
use datafusion::common::{Column, DFSchema, ScalarValue, Statistics};
use datafusion::datasource::TableType;
use datafusion::error::{DataFusionError, Result as DfResult};
use datafusion::execution::{SendableRecordBatchStream, TaskContext};
use datafusion::logical_expr::utils::conjunction;
use datafusion::logical_expr::{
    DmlStatement, Expr, LogicalPlan, LogicalPlanBuilder, TableProviderFilterPushDown, WriteOp,
};
use datafusion::physical_expr::expressions::{Column as PhysicalColumn, Literal};
use datafusion::physical_expr::{EquivalenceProperties, PhysicalExpr};
use datafusion::physical_plan::empty::EmptyExec;
use datafusion::physical_plan::execution_plan::{Boundedness, EmissionType};
use datafusion::physical_plan::filter::FilterExec;
use datafusion::physical_plan::projection::ProjectionExec;
use datafusion::physical_plan::stream::RecordBatchStreamAdapter;
use datafusion::physical_plan::{
    DisplayAs, DisplayFormatType, ExecutionPlan, Partitioning, PlanProperties,
};
use futures::StreamExt;

use super::search::{self, Shown, CONTENT, HYBRID_SEARCH, HYBRID_SEARCH_ALPHA, RERANKING};
use crate::catalog::knowledge_bases::{chunk_db, KnowledgeBase};
use crate::catalog::tables::TableRecord;
use crate::error::{Error, Result};
use crate::sql::catalog::snapshot::Snapshot;
use crate::sql::catalog::stored_table::StoredTable;

pub(crate) const ID: &str = "id";
pub(crate) const CHUNK_ID: &str = "chunk_id";
pub(crate) const CHUNK_CONTENT: &str = "chunk_content";
pub(crate) const METADATA: &str = "metadata";
const DISTANCE: &str = "distance";
const RELEVANCE: &str = "relevance";
/// The chunk table's last column: each chunk's node in the indexes (never shown).
pub(crate) const NODE: &str = "node";
/// Columns of the chunk table before its metadata columns.
pub(crate) const LEADING: usize = 4;
/// Names a metadata column cannot take: the knowledge base's own columns.
pub(crate) const RESERVED: [&str; 11] = [
    ID,
    CHUNK_ID,
    CHUNK_CONTENT,
    METADATA,
    DISTANCE,
    RELEVANCE,
    CONTENT,
    HYBRID_SEARCH,
    HYBRID_SEARCH_ALPHA,
    RERANKING,
    NODE,
];
/// Rows a search returns without a LIMIT, as MindsDB's.
const DEFAULT_LIMIT: usize = 10;

/// A knowledge base at one snapshot, as a table.
#[derive(Debug)]
pub(crate) struct KnowledgeBaseTable {
    snapshot: Arc<Snapshot>,
    kb: KnowledgeBase,
    /// The chunk table, once something was inserted.
    chunks: Option<TableRecord>,
    shown: Shown,
}

impl KnowledgeBaseTable {
    /// The knowledge base `kb` as `snapshot` holds it.
    pub(crate) fn new(snapshot: Arc<Snapshot>, kb: KnowledgeBase) -> Result<KnowledgeBaseTable> {
        let chunks = snapshot.table(&chunk_db(&kb.project), &kb.name)?;
        let stored = match &chunks {
            Some(record) => Some(snapshot.table_schema(record.id)?),
            None => None,
        };
        let shown = Shown {
            schema: output_schema(&kb, stored.as_deref()),
            reranker: kb.reranking_model.is_some(),
        };
        Ok(KnowledgeBaseTable {
            snapshot,
            kb,
            chunks,
            shown,
        })
    }

    /// The chunks a scan without a question reads: the chunk table's rows as shown (no
    /// scores), streamed chunk by chunk, those `predicate` keeps.
    async fn rows(
        &self,
        state: &dyn Session,
        record: &TableRecord,
        predicate: Option<Arc<dyn PhysicalExpr>>,
    ) -> DfResult<Arc<dyn ExecutionPlan>> {
        let stored = self.snapshot.table_schema(record.id)?;
        let chunk_columns = stored.fields().len() - 1;
        let table = StoredTable::plain(Arc::clone(&self.snapshot), record.clone(), stored);
        let all_but_node: Vec<usize> = (0..chunk_columns).collect();
        let input = table.scan(state, Some(&all_but_node), &[], None).await?;
        let schema = &self.shown.schema;
        let null = |i: usize| -> DfResult<(Arc<dyn PhysicalExpr>, String)> {
            let field = schema.field(i);
            Ok((
                Arc::new(Literal::new(ScalarValue::try_from(field.data_type())?)),
                field.name().clone(),
            ))
        };
        let mut exprs: Vec<(Arc<dyn PhysicalExpr>, String)> = (0..chunk_columns)
            .map(|i| {
                let name = schema.field(i).name().clone();
                (
                    Arc::new(PhysicalColumn::new(&name, i)) as Arc<dyn PhysicalExpr>,
                    name,
                )
            })
            .collect();
        exprs.push(null(chunk_columns)?);
        exprs.push(null(chunk_columns + 1)?);
        exprs.push((
            Arc::new(PhysicalColumn::new(CHUNK_CONTENT, 2)),
            CONTENT.to_string(),
        ));
        for i in chunk_columns + 3..schema.fields().len() {
            exprs.push(null(i)?);
        }
        let shown: Arc<dyn ExecutionPlan> = Arc::new(ProjectionExec::try_new(exprs, input)?);
        Ok(match predicate {
            Some(predicate) => Arc::new(FilterExec::try_new(predicate, shown)?),
            None => shown,
        })
    }
}

/// The shown columns: the chunk table's but its nodes, then distance, relevance, content
/// and the search's settings.
fn output_schema(kb: &KnowledgeBase, stored: Option<&Schema>) -> SchemaRef {
    let text = |name: &str| Field::new(name, DataType::Utf8, true);
    let mut fields = vec![
        text(ID),
        text(CHUNK_ID),
        text(CHUNK_CONTENT),
        text(METADATA),
    ];
    match stored {
        Some(stored) => {
            let last = stored.fields().len() - 1;
            fields.extend(
                stored.fields()[LEADING..last]
                    .iter()
                    .map(|f| f.as_ref().clone().with_nullable(true)),
            );
        }
        None => fields.extend(kb.metadata_columns.iter().map(|c| text(c))),
    }
    fields.push(Field::new(DISTANCE, DataType::Float64, true));
    fields.push(Field::new(RELEVANCE, DataType::Float64, true));
    fields.push(text(CONTENT));
    fields.push(Field::new(HYBRID_SEARCH, DataType::Boolean, true));
    fields.push(Field::new(HYBRID_SEARCH_ALPHA, DataType::Float64, true));
    fields.push(Field::new(RERANKING, DataType::Boolean, true));
    Arc::new(Schema::new(fields))
}

#[async_trait]
impl TableProvider for KnowledgeBaseTable {
    fn schema(&self) -> SchemaRef {
        Arc::clone(&self.shown.schema)
    }

    fn table_type(&self) -> TableType {
        TableType::Base
    }

    fn supports_filters_pushdown(
        &self,
        filters: &[&Expr],
    ) -> DfResult<Vec<TableProviderFilterPushDown>> {
        // Every condition is the search's or evaluated on the chunks here, before ranking.
        // bounded: one per condition of the parsed statement
        Ok(vec![TableProviderFilterPushDown::Exact; filters.len()])
    }

    async fn scan(
        &self,
        state: &dyn Session,
        projection: Option<&Vec<usize>>,
        filters: &[Expr],
        limit: Option<usize>,
    ) -> DfResult<Arc<dyn ExecutionPlan>> {
        let filters = filters
            .iter()
            .map(|f| unqualified(f.clone()))
            .collect::<Result<Vec<_>>>()?;
        let conditions = search::conditions(&self.kb.name, filters)?;
        let schema = DFSchema::try_from(self.shown.schema.as_ref().clone())?;
        let predicate = |exprs: Vec<Expr>| -> DfResult<_> {
            conjunction(exprs)
                .map(|expr| state.create_physical_expr(expr, &schema))
                .transpose()
        };
        let shown: Arc<dyn ExecutionPlan> = match (conditions.search, &self.chunks) {
            (_, None) => Arc::new(EmptyExec::new(Arc::clone(&self.shown.schema))),
            (None, Some(record)) => {
                let mut all = conditions.rows;
                all.extend(conditions.scores);
                self.rows(state, record, predicate(all)?).await?
            }
            (Some(search), Some(record)) => Arc::new(SearchExec::new(search::Ranking {
                kb: self.kb.clone(),
                snapshot: Arc::clone(&self.snapshot),
                table: record.id,
                search,
                shown: self.shown.clone(),
                rows: predicate(conditions.rows)?,
                scores: predicate(conditions.scores)?,
                limit: limit.unwrap_or(DEFAULT_LIMIT),
            })),
        };
        let Some(projection) = projection else {
            return Ok(shown);
        };
        let schema = shown.schema();
        let exprs = projection
            .iter()
            .map(|&i| {
                let name = schema.field(i).name().clone();
                (
                    Arc::new(PhysicalColumn::new(&name, i)) as Arc<dyn PhysicalExpr>,
                    name,
                )
            })
            .collect::<Vec<_>>();
        Ok(Arc::new(ProjectionExec::try_new(exprs, shown)?))
    }
}

/// A knowledge base search as a plan's leaf: one partition, computed when it executes (so
/// planning, EXPLAIN included, never calls the embedding model).
#[derive(Debug)]
struct SearchExec {
    ranking: Arc<search::Ranking>,
    properties: Arc<PlanProperties>,
}

impl SearchExec {
    fn new(ranking: search::Ranking) -> SearchExec {
        let properties = PlanProperties::new(
            EquivalenceProperties::new(Arc::clone(&ranking.shown.schema)),
            Partitioning::UnknownPartitioning(1),
            EmissionType::Final,
            Boundedness::Bounded,
        );
        SearchExec {
            ranking: Arc::new(ranking),
            properties: Arc::new(properties),
        }
    }
}

impl DisplayAs for SearchExec {
    fn fmt_as(&self, _t: DisplayFormatType, f: &mut fmt::Formatter) -> fmt::Result {
        let ranking = &self.ranking;
        write!(
            f,
            "KnowledgeBaseSearchExec: {}.{} limit={} alpha={} reranking={}",
            ranking.kb.project,
            ranking.kb.name,
            ranking.limit,
            ranking.search.alpha,
            ranking.search.reranking && ranking.kb.reranking_model.is_some()
        )
    }
}

impl ExecutionPlan for SearchExec {
    fn name(&self) -> &str {
        "KnowledgeBaseSearchExec"
    }

    fn properties(&self) -> &Arc<PlanProperties> {
        &self.properties
    }

    fn children(&self) -> Vec<&Arc<dyn ExecutionPlan>> {
        Vec::new()
    }

    fn apply_expressions(
        &self,
        _f: &mut dyn FnMut(&Arc<dyn PhysicalExpr>) -> DfResult<TreeNodeRecursion>,
    ) -> DfResult<TreeNodeRecursion> {
        Ok(TreeNodeRecursion::Continue)
    }

    fn with_new_children(
        self: Arc<Self>,
        _children: Vec<Arc<dyn ExecutionPlan>>,
    ) -> DfResult<Arc<dyn ExecutionPlan>> {
        Ok(self)
    }

    fn partition_statistics(&self, _partition: Option<usize>) -> DfResult<Arc<Statistics>> {
        // At most LIMIT rows, so a join builds its hash table from them.
        let mut statistics = Statistics::new_unknown(&self.ranking.shown.schema);
        statistics.num_rows = Precision::Inexact(self.ranking.limit);
        Ok(Arc::new(statistics))
    }

    fn execute(
        &self,
        _partition: usize,
        context: Arc<TaskContext>,
    ) -> DfResult<SendableRecordBatchStream> {
        let connector = crate::sql::planning::session::connector(context.session_config())?;
        let ranking = Arc::clone(&self.ranking);
        let found = futures::stream::once(async move {
            match ranking.run(connector).await {
                Ok(batches) => futures::stream::iter(batches.into_iter().map(Ok)).left_stream(),
                Err(e) => futures::stream::iter([Err(DataFusionError::from(e))]).right_stream(),
            }
        })
        .flatten();
        Ok(Box::pin(RecordBatchStreamAdapter::new(
            Arc::clone(&self.ranking.shown.schema),
            found,
        )))
    }
}

/// `expr` with its columns' table qualifiers dropped (they name the scan, whose schema has none).
fn unqualified(expr: Expr) -> Result<Expr> {
    Ok(expr
        .transform(|e| match e {
            Expr::Column(c) if c.relation.is_some() => Ok(Transformed::yes(Expr::Column(
                Column::new_unqualified(c.name),
            ))),
            other => Ok(Transformed::no(other)),
        })?
        .data)
}

/// The knowledge base a write statement targets, if it does.
pub(crate) fn target(dml: &DmlStatement) -> Option<KnowledgeBase> {
    let provider =
        datafusion::catalog::default_table_source::source_as_provider(&dml.target).ok()?;
    provider
        .downcast_ref::<KnowledgeBaseTable>()
        .map(|t| t.kb.clone())
}

/// A DELETE of a knowledge base as the plan of the ids of the documents it removes; other
/// writes are refused (documents change by inserting them again).
pub(crate) fn deleted_ids(dml: DmlStatement) -> Result<(KnowledgeBase, LogicalPlan)> {
    let kb = target(&dml).ok_or_else(|| Error::internal("not a knowledge base"))?;
    if dml.op != WriteOp::Delete {
        return Err(Error::invalid(format!(
            "Knowledge base '{}' takes INSERT (which replaces documents of the same id) and DELETE; {} is not supported",
            kb.name, dml.op
        )));
    }
    let ids = LogicalPlanBuilder::from(dml.input.as_ref().clone())
        .project(vec![Expr::Column(Column::new_unqualified(ID))])?
        .distinct()?
        .build()?;
    Ok((kb, ids))
}
