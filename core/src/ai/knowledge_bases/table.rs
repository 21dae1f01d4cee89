//! Knowledge bases in SQL: [`KnowledgeBaseTable`], the table provider a knowledge base's name
//! resolves to. It shows MindsDB's columns (`id, chunk_id, chunk_content, metadata, <metadata
//! columns>, distance, relevance`, then `content` and the search's settings); conditions on
//! the content make a scan one or more searches (`query` reads them), which `search` ranks
//! when the plan executes, each returning its best `LIMIT` (10 when not given). All
//! conditions are exact, so DataFusion hands the LIMIT down. A scan without a question
//! streams the chunk table. `write` inserts and deletes.
//!
//! The chunk table holds `id, chunk_id, chunk_content, metadata`, the metadata columns, then
//! `node`: the chunk's node in the knowledge base's indexes, which hold its vector.

use std::collections::HashSet;
use std::fmt;
use std::sync::Arc;

use async_trait::async_trait;
use datafusion::arrow::array::{AsArray, BooleanArray, RecordBatch};
use datafusion::arrow::compute::filter_record_batch;
use datafusion::arrow::datatypes::{DataType, Field, Schema, SchemaRef};
use datafusion::catalog::default_table_source::source_as_provider;
use datafusion::catalog::{Session, TableProvider};
use datafusion::common::config::ConfigOptions;
use datafusion::common::stats::Precision;
use datafusion::common::tree_node::{Transformed, TreeNode, TreeNodeRecursion};
use datafusion::common::TableReference;
use datafusion::common::{Column, DFSchema, ScalarValue, Statistics};
use datafusion::datasource::TableType;
use datafusion::error::{DataFusionError, Result as DfResult};
use datafusion::execution::{SendableRecordBatchStream, TaskContext};
use datafusion::logical_expr::utils::conjunction;
use datafusion::logical_expr::{
    DmlStatement, Expr, LogicalPlan, LogicalPlanBuilder, TableProviderFilterPushDown, WriteOp,
};
use datafusion::optimizer::AnalyzerRule;
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
use futures::{StreamExt, TryStreamExt};

use super::pgvector::PgStore;
use super::search::{self, Shown, CONTENT, HYBRID_SEARCH, HYBRID_SEARCH_ALPHA, RERANKING};
use super::{content, query};
use crate::catalog::knowledge_bases::{chunk_db, KnowledgeBase};
use crate::catalog::tables::TableRecord;
use crate::error::{Error, Result};
use crate::services::connectors::table::RemoteScanExec;
use crate::sql::catalog::snapshot::Snapshot;
use crate::sql::catalog::stored_table::StoredTable;

pub(crate) use crate::catalog::knowledge_bases::{CHUNK_CONTENT, CHUNK_ID, ID, LEADING, METADATA};
const DISTANCE: &str = "distance";
const RELEVANCE: &str = "relevance";
/// The chunk table's last column: each chunk's node in the indexes (never shown).
pub(crate) const NODE: &str = "node";
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
        store: Option<&PgStore>,
        filters: &[Expr],
        predicate: Option<Arc<dyn PhysicalExpr>>,
    ) -> DfResult<Arc<dyn ExecutionPlan>> {
        let stored = self.snapshot.table_schema(record.id)?;
        let chunk_columns = stored.fields().len() - 1;
        let all_but_node: Vec<usize> = (0..chunk_columns).collect();
        let input = match store {
            // The conditions PostgreSQL computes alike are sent; all are checked again here.
            Some(store) => {
                let columns = PgStore::columns(&stored);
                let read = Schema::new(
                    columns
                        .iter()
                        .map(|c| Field::new(&c.name, c.kind.data_type(), true))
                        .collect::<Vec<_>>(),
                );
                Arc::new(
                    RemoteScanExec::new(
                        store.remote(),
                        store.scan_sql(&columns, filters),
                        Arc::from([]),
                        Arc::new(read),
                        columns.iter().map(|c| c.kind).collect(),
                        None,
                    )
                    .cast_to(Arc::new(stored.project(&all_but_node)?)),
                )
            }
            None => {
                let table = StoredTable::plain(Arc::clone(&self.snapshot), record.clone(), stored);
                table.scan(state, Some(&all_but_node), &[], None).await?
            }
        };
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
        let answer = query::answer(&self.kb.name, filters)?;
        let schema = DFSchema::try_from(self.shown.schema.as_ref().clone())?;
        let predicate = |exprs: Vec<Expr>| -> DfResult<_> {
            conjunction(exprs)
                .map(|expr| state.create_physical_expr(expr, &schema))
                .transpose()
        };
        let empty = || Arc::new(EmptyExec::new(Arc::clone(&self.shown.schema)));
        let single = answer.is_single();
        let store = match &self.kb.storage {
            Some(_) => {
                let connector = crate::sql::planning::session::connector(state.config())?;
                PgStore::of(
                    &self.kb,
                    &self.snapshot,
                    &connector.net,
                    &connector.knowledge_bases.storage_url,
                )?
            }
            None => None,
        };
        let shown: Arc<dyn ExecutionPlan> = match &self.chunks {
            None => empty(),
            Some(record) => {
                let scan = match answer.scan {
                    Some(condition) => {
                        let filters: Vec<Expr> = condition.into_iter().collect();
                        Some(
                            self.rows(
                                state,
                                record,
                                store.as_ref(),
                                &filters,
                                predicate(filters.clone())?,
                            )
                            .await?,
                        )
                    }
                    None => None,
                };
                let mut rankings = Vec::new();
                for searched in answer.searches {
                    rankings.push(Arc::new(search::Ranking {
                        kb: self.kb.clone(),
                        snapshot: Arc::clone(&self.snapshot),
                        table: record.id,
                        search: searched.search,
                        excluded: searched.excluded,
                        shown: self.shown.clone(),
                        store: store.clone(),
                        row_filters: searched.rows.clone(),
                        rows: predicate(searched.rows)?,
                        scores: predicate(searched.scores)?,
                        limit: limit.unwrap_or(DEFAULT_LIMIT),
                    }));
                }
                match (single, scan, rankings.pop()) {
                    (true, Some(scan), None) => scan,
                    (true, None, Some(ranking)) => Arc::new(SearchExec::new(vec![ranking], None)),
                    (true, None, None) => empty(),
                    (_, scan, last) => {
                        rankings.extend(last);
                        Arc::new(SearchExec::new(rankings, scan))
                    }
                }
            }
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

/// A knowledge base query's searches as a plan's leaf, computed when it executes (so
/// planning, EXPLAIN included, never calls the embedding model): each search's rows in turn,
/// then those of the chunk scan of the branches without a question, each chunk once.
#[derive(Debug)]
struct SearchExec {
    rankings: Vec<Arc<search::Ranking>>,
    /// The chunk scan, when some branch has no question.
    scan: Option<Arc<dyn ExecutionPlan>>,
    schema: SchemaRef,
    properties: Arc<PlanProperties>,
}

impl SearchExec {
    /// At least one of `rankings` and `scan`.
    fn new(
        rankings: Vec<Arc<search::Ranking>>,
        scan: Option<Arc<dyn ExecutionPlan>>,
    ) -> SearchExec {
        let schema = rankings
            .first()
            .map(|r| Arc::clone(&r.shown.schema))
            .or_else(|| scan.as_ref().map(|s| s.schema()))
            .unwrap_or_else(|| Arc::new(Schema::empty()));
        let properties = PlanProperties::new(
            EquivalenceProperties::new(Arc::clone(&schema)),
            Partitioning::UnknownPartitioning(1),
            EmissionType::Final,
            Boundedness::Bounded,
        );
        SearchExec {
            rankings,
            scan,
            schema,
            properties: Arc::new(properties),
        }
    }
}

impl DisplayAs for SearchExec {
    fn fmt_as(&self, _t: DisplayFormatType, f: &mut fmt::Formatter) -> fmt::Result {
        write!(f, "KnowledgeBaseSearchExec:")?;
        for (i, ranking) in self.rankings.iter().enumerate() {
            write!(
                f,
                "{} {}.{} limit={} alpha={} reranking={}",
                if i == 0 { "" } else { ";" },
                ranking.kb.project,
                ranking.kb.name,
                ranking.limit,
                ranking.search.alpha,
                ranking.search.reranking && ranking.kb.reranking_model.is_some()
            )?;
            if !ranking.excluded.is_empty() {
                write!(f, " excluding={}", ranking.excluded.len())?;
            }
        }
        if self.scan.is_some() {
            write!(f, "; then the chunks the other conditions keep")?;
        }
        if let Some(store) = self.rankings.first().and_then(|r| r.store.as_ref()) {
            let (_, place) = store.remote().describe();
            write!(f, "; in pgvector at {place} table={}", store.table)?;
        }
        Ok(())
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
        self.scan.iter().collect()
    }

    fn apply_expressions(
        &self,
        _f: &mut dyn FnMut(&Arc<dyn PhysicalExpr>) -> DfResult<TreeNodeRecursion>,
    ) -> DfResult<TreeNodeRecursion> {
        Ok(TreeNodeRecursion::Continue)
    }

    fn with_new_children(
        self: Arc<Self>,
        children: Vec<Arc<dyn ExecutionPlan>>,
    ) -> DfResult<Arc<dyn ExecutionPlan>> {
        match (self.scan.is_some(), children.len()) {
            (false, 0) => Ok(self),
            (true, 1) => Ok(Arc::new(SearchExec::new(
                self.rankings.clone(),
                children.into_iter().next(),
            ))),
            _ => Err(DataFusionError::Internal(
                "a knowledge base search has at most its chunk scan as a child".into(),
            )),
        }
    }

    fn partition_statistics(&self, _partition: Option<usize>) -> DfResult<Arc<Statistics>> {
        let mut statistics = Statistics::new_unknown(&self.schema);
        if self.scan.is_none() {
            // At most LIMIT rows a search, so a join builds its hash table from them.
            let rows = self
                .rankings
                .iter()
                .fold(0usize, |sum, r| sum.saturating_add(r.limit));
            statistics.num_rows = Precision::Inexact(rows);
        }
        Ok(Arc::new(statistics))
    }

    fn execute(
        &self,
        _partition: usize,
        context: Arc<TaskContext>,
    ) -> DfResult<SendableRecordBatchStream> {
        let connector = crate::sql::planning::session::connector(context.session_config())?;
        let rankings = self.rankings.clone();
        let scan = self.scan.clone();
        let single = rankings.len() == 1 && scan.is_none();
        let found = futures::stream::once(async move {
            // Chunk ids already answered: at most every search's LIMIT of them.
            let mut seen: HashSet<String> = HashSet::new();
            let mut batches = Vec::new();
            for ranking in rankings {
                for batch in ranking.run(Arc::clone(&connector)).await? {
                    batches.push(match single {
                        true => batch,
                        false => first_seen(&batch, &mut seen)?,
                    });
                }
            }
            let rest = match scan {
                Some(scan) => {
                    let seen = Arc::new(seen);
                    datafusion::physical_plan::execute_stream(scan, context)?
                        .map(move |batch| batch.and_then(|b| unseen(&b, &seen)))
                        .boxed()
                }
                None => futures::stream::empty().boxed(),
            };
            Ok::<_, DataFusionError>(futures::stream::iter(batches.into_iter().map(Ok)).chain(rest))
        })
        .try_flatten();
        Ok(Box::pin(RecordBatchStreamAdapter::new(
            Arc::clone(&self.schema),
            found,
        )))
    }
}

/// The rows of `batch` whose chunk was not seen before, now seen.
fn first_seen(batch: &RecordBatch, seen: &mut HashSet<String>) -> DfResult<RecordBatch> {
    let ids = batch.column(1).as_string::<i32>();
    let keep: BooleanArray = ids
        .iter()
        .map(|id| Some(id.is_none_or(|id| seen.insert(id.to_string()))))
        .collect();
    Ok(filter_record_batch(batch, &keep)?)
}

/// The rows of `batch` whose chunk no search answered.
fn unseen(batch: &RecordBatch, seen: &HashSet<String>) -> DfResult<RecordBatch> {
    if seen.is_empty() {
        return Ok(batch.clone());
    }
    let ids = batch.column(1).as_string::<i32>();
    let keep: BooleanArray = ids
        .iter()
        .map(|id| Some(id.is_none_or(|id| !seen.contains(id))))
        .collect();
    Ok(filter_record_batch(batch, &keep)?)
}

/// The analyzer rule that puts conditions on a knowledge base's content into
/// [`content::ContentCondition`] calls.
#[derive(Debug)]
pub(crate) struct ContentConditions;

impl AnalyzerRule for ContentConditions {
    fn analyze(&self, plan: LogicalPlan, _config: &ConfigOptions) -> DfResult<LogicalPlan> {
        plan.transform_up_with_subqueries(|plan| {
            let LogicalPlan::Filter(filter) = &plan else {
                return Ok(Transformed::no(plan));
            };
            let relations = knowledge_bases_in(&filter.input)?;
            if relations.is_empty() {
                return Ok(Transformed::no(plan));
            }
            let LogicalPlan::Filter(mut filter) = plan else {
                unreachable!("matched above")
            };
            let predicate = std::mem::replace(
                &mut filter.predicate,
                Expr::Literal(ScalarValue::Null, None),
            );
            let rewritten = content::mark(predicate, &relations)?;
            filter.predicate = rewritten.data;
            Ok(Transformed::new(
                LogicalPlan::Filter(filter),
                rewritten.transformed,
                TreeNodeRecursion::Continue,
            ))
        })
        .map(|t| t.data)
    }

    fn name(&self) -> &str {
        "knowledge_base_content_conditions"
    }
}

/// Whether `plan` reads a knowledge base's rows as they are (filtered, projected, sorted or
/// cut short).
fn reads_kb(plan: &LogicalPlan) -> bool {
    match plan {
        LogicalPlan::TableScan(scan) => source_as_provider(&scan.source)
            .map(|p| p.downcast_ref::<KnowledgeBaseTable>().is_some())
            .unwrap_or(false),
        // A projection that names something else `content` makes it another column.
        LogicalPlan::Projection(p) => {
            p.expr.iter().all(|e| match e {
                Expr::Alias(alias) if is_content_name(&alias.name) => {
                    matches!(alias.expr.as_ref(), Expr::Column(c) if is_content_name(&c.name))
                }
                _ => true,
            }) && reads_kb(&p.input)
        }
        LogicalPlan::Filter(f) => reads_kb(&f.input),
        LogicalPlan::SubqueryAlias(a) => reads_kb(&a.input),
        LogicalPlan::Limit(l) => reads_kb(&l.input),
        LogicalPlan::Sort(s) => reads_kb(&s.input),
        _ => false,
    }
}

fn is_content_name(name: &str) -> bool {
    name == CONTENT || name == CHUNK_CONTENT
}

/// The names the knowledge bases read beneath a filter go by: their tables', or an alias over
/// a query that passes one's rows through.
fn knowledge_bases_in(input: &LogicalPlan) -> DfResult<Vec<TableReference>> {
    let mut out = Vec::new();
    input.apply(|plan| {
        match plan {
            LogicalPlan::TableScan(scan) if reads_kb(plan) => out.push(scan.table_name.clone()),
            LogicalPlan::SubqueryAlias(alias) if reads_kb(&alias.input) => {
                out.push(alias.alias.clone())
            }
            // A subquery's plan is marked on its own.
            LogicalPlan::Subquery(_) => return Ok(TreeNodeRecursion::Jump),
            _ => {}
        }
        Ok(TreeNodeRecursion::Continue)
    })?;
    Ok(out)
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
    let provider = source_as_provider(&dml.target).ok()?;
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
