//! The first (partial) stage of a GROUP BY on one text column, for the common case of short
//! keys: categories, codes, statuses. Text is stored as Arrow string views, and a view of at
//! most 12 bytes holds the whole string in its 16 bytes. DataFusion's partial aggregation
//! hashes every row's bytes and looks the row up in a general hash table of views; here a row's
//! 16-byte view is its key, hashed with one multiply into a small open-addressed table. On
//! `SELECT category, count(*), avg(value) FROM t GROUP BY category` over 5M rows, hashing and
//! looking up took about 60 % of the query's CPU time; the query now takes about two thirds of
//! the time it took (docs/benchmarks.md has the figures).
//!
//! Only the group lookup is ours: the aggregates are DataFusion's own group accumulators, and
//! the output is exactly the partial aggregation's (the group column, then each aggregate's
//! state), so DataFusion's final stage merges it unchanged. Longer keys and NULL take a slower
//! map beside the fast one. The groups held are bounded ([`MAX_GROUPS`], [`MAX_LONG_KEY_BYTES`]):
//! past either, the state so far is emitted and the stage starts again, as a partial stage may
//! (the final stage merges groups that arrive more than once), so a key of many distinct values
//! costs memory in proportion to the bound, not to the input. What the groups and the
//! accumulators hold is reserved in the memory pool, as DataFusion's partial stage reserves it,
//! and when the pool refuses more the groups are handed on in the same way. The hash is keyed
//! with a random secret, so no one can choose keys that fall into one slot of the table.
//!
//! (What could go upstream: DataFusion's string-view group values could compare and hash an
//! inline view as one integer.)

use std::collections::HashMap;
use std::fmt;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};

use datafusion::arrow::array::{Array, ArrayRef, AsArray, RecordBatch, StringViewBuilder};
use datafusion::arrow::datatypes::{DataType, SchemaRef};
use datafusion::common::tree_node::{Transformed, TreeNode, TreeNodeRecursion};
use datafusion::config::ConfigOptions;
use datafusion::error::{DataFusionError, Result};
use datafusion::execution::memory_pool::{MemoryConsumer, MemoryReservation};
use datafusion::execution::{SendableRecordBatchStream, TaskContext};
use datafusion::logical_expr::{EmitTo, GroupsAccumulator};
use datafusion::physical_expr::aggregate::AggregateFunctionExpr;
use datafusion::physical_expr::expressions::Column;
use datafusion::physical_expr::PhysicalExpr;
use datafusion::physical_optimizer::PhysicalOptimizerRule;
use datafusion::physical_plan::aggregates::{AggregateExec, AggregateMode};
use datafusion::physical_plan::execution_plan::replace_children_if_necessary;
use datafusion::physical_plan::metrics::{BaselineMetrics, ExecutionPlanMetricsSet, MetricsSet};
use datafusion::physical_plan::{
    DisplayAs, DisplayFormatType, ExecutionPlan, InputOrderMode, PlanProperties, RecordBatchStream,
};
use futures::{Stream, StreamExt};

/// Groups one partial stage holds before it emits them and starts again.
const MAX_GROUPS: usize = 65_536;

/// Bytes of keys longer than a view's inline 12 that one partial stage holds before it emits.
const MAX_LONG_KEY_BYTES: usize = 16 << 20;

/// Replaces a partial aggregation grouped by one string-view column with [`ViewGroupsExec`].
#[derive(Debug)]
pub(crate) struct ViewGroups;

impl PhysicalOptimizerRule for ViewGroups {
    fn optimize(
        &self,
        plan: Arc<dyn ExecutionPlan>,
        _config: &ConfigOptions,
    ) -> Result<Arc<dyn ExecutionPlan>> {
        plan.transform_up(|node| match ViewGroupsExec::replacing(&node) {
            Some(exec) => Ok(Transformed::yes(Arc::new(exec) as Arc<dyn ExecutionPlan>)),
            None => Ok(Transformed::no(node)),
        })
        .map(|done| done.data)
    }

    fn name(&self) -> &str {
        "mindlite_view_groups"
    }

    fn schema_check(&self) -> bool {
        true
    }
}

/// A partial aggregation grouped by one string-view column (see the module comment).
#[derive(Debug)]
pub(crate) struct ViewGroupsExec {
    /// The `AggregateExec` this stands for: its schema, properties, expressions and input.
    aggregate: Arc<dyn ExecutionPlan>,
    /// The key's column in the input.
    key: usize,
    aggregates: Vec<Arc<AggregateFunctionExpr>>,
    metrics: ExecutionPlanMetricsSet,
}

impl ViewGroupsExec {
    /// The replacement of `node`, if it is a partial aggregation this stage computes the same.
    fn replacing(node: &Arc<dyn ExecutionPlan>) -> Option<ViewGroupsExec> {
        let aggregate = node.downcast_ref::<AggregateExec>()?;
        if *aggregate.mode() != AggregateMode::Partial
            || aggregate.limit_options().is_some()
            || !node.dynamic_expressions_produced().is_empty()
            || *aggregate.input_order_mode() != InputOrderMode::Linear
            || aggregate.filter_expr().iter().any(Option::is_some)
        {
            return None;
        }
        let group_by = aggregate.group_expr();
        if !group_by.is_single() || group_by.expr().len() != 1 {
            return None;
        }
        let column = group_by.expr()[0].0.downcast_ref::<Column>()?;
        let input = aggregate.input().schema();
        if input.fields().get(column.index())?.data_type() != &DataType::Utf8View {
            return None;
        }
        let plain = |a: &Arc<AggregateFunctionExpr>| {
            a.groups_accumulator_supported() && a.order_bys().is_empty() && !a.is_distinct()
        };
        if !aggregate.aggr_expr().iter().all(plain) {
            return None;
        }
        Some(ViewGroupsExec {
            aggregate: Arc::clone(node),
            key: column.index(),
            aggregates: aggregate.aggr_expr().to_vec(),
            metrics: ExecutionPlanMetricsSet::new(),
        })
    }

    fn input(&self) -> &Arc<dyn ExecutionPlan> {
        self.aggregate.children()[0]
    }

    fn aggregate_exec(&self) -> &AggregateExec {
        self.aggregate
            .downcast_ref::<AggregateExec>()
            .expect("made from an AggregateExec")
    }
}

impl DisplayAs for ViewGroupsExec {
    fn fmt_as(&self, t: DisplayFormatType, f: &mut fmt::Formatter) -> fmt::Result {
        let aggregate = self.aggregate_exec();
        let names: Vec<&str> = self.aggregates.iter().map(|a| a.name()).collect();
        match t {
            DisplayFormatType::TreeRender => write!(f, "aggr={}", names.join(", ")),
            _ => write!(
                f,
                "ViewGroupsExec: mode=Partial, gby=[{} as {}], aggr=[{}]",
                aggregate.group_expr().expr()[0].0,
                aggregate.group_expr().expr()[0].1,
                names.join(", ")
            ),
        }
    }
}

impl ExecutionPlan for ViewGroupsExec {
    fn name(&self) -> &str {
        "ViewGroupsExec"
    }

    fn properties(&self) -> &Arc<PlanProperties> {
        self.aggregate.properties()
    }

    fn apply_expressions(
        &self,
        f: &mut dyn FnMut(&Arc<dyn PhysicalExpr>) -> Result<TreeNodeRecursion>,
    ) -> Result<TreeNodeRecursion> {
        self.aggregate.apply_expressions(f)
    }

    fn children(&self) -> Vec<&Arc<dyn ExecutionPlan>> {
        vec![self.input()]
    }

    fn with_new_children(
        self: Arc<Self>,
        children: Vec<Arc<dyn ExecutionPlan>>,
    ) -> Result<Arc<dyn ExecutionPlan>> {
        let aggregate = replace_children_if_necessary(Arc::clone(&self.aggregate), children)?;
        match ViewGroupsExec::replacing(&aggregate) {
            Some(exec) => Ok(Arc::new(exec)),
            None => Ok(aggregate),
        }
    }

    fn execute(
        &self,
        partition: usize,
        context: Arc<TaskContext>,
    ) -> Result<SendableRecordBatchStream> {
        let input = self.input().execute(partition, Arc::clone(&context))?;
        let arguments = self
            .aggregates
            .iter()
            .map(|a| a.expressions())
            .collect::<Vec<_>>();
        Ok(Box::pin(ViewGroupsStream {
            schema: self.schema(),
            input: Some(input),
            key: self.key,
            arguments,
            aggregates: self.aggregates.clone(),
            state: None,
            pending: Vec::new(),
            batch_size: context.session_config().batch_size().max(1),
            reservation: MemoryConsumer::new(format!("ViewGroupsExec[{partition}]"))
                .with_can_spill(true)
                .register(context.memory_pool()),
            metrics: BaselineMetrics::new(&self.metrics, partition),
        }))
    }

    fn metrics(&self) -> Option<MetricsSet> {
        Some(self.metrics.clone_inner())
    }
}

/// The groups seen so far and their accumulators.
struct State {
    groups: Groups,
    accumulators: Vec<Box<dyn GroupsAccumulator>>,
    /// Each row's group, for the batch at hand (kept to reuse its allocation).
    indices: Vec<usize>,
}

impl State {
    fn new(aggregates: &[Arc<AggregateFunctionExpr>]) -> Result<State> {
        Ok(State {
            groups: Groups::new(),
            accumulators: aggregates
                .iter()
                .map(|a| a.create_groups_accumulator())
                .collect::<Result<_>>()?,
            indices: Vec::new(),
        })
    }

    fn full(&self) -> bool {
        self.groups.keys.len() >= MAX_GROUPS || self.groups.long_bytes >= MAX_LONG_KEY_BYTES
    }

    /// Bytes held: the groups, the accumulators' states and the row indices.
    fn size(&self) -> usize {
        self.groups.size()
            + self.indices.capacity() * size_of::<usize>()
            + self.accumulators.iter().map(|a| a.size()).sum::<usize>()
    }

    /// Every group and its aggregates' states, as the partial aggregation's output.
    fn emit(mut self, schema: &SchemaRef) -> Result<RecordBatch> {
        let mut columns = vec![self.groups.column()?];
        for accumulator in &mut self.accumulators {
            columns.extend(accumulator.state(EmitTo::All)?);
        }
        Ok(RecordBatch::try_new(Arc::clone(schema), columns)?)
    }
}

struct ViewGroupsStream {
    schema: SchemaRef,
    /// `None` once it has ended.
    input: Option<SendableRecordBatchStream>,
    key: usize,
    arguments: Vec<Vec<Arc<dyn PhysicalExpr>>>,
    aggregates: Vec<Arc<AggregateFunctionExpr>>,
    state: Option<State>,
    /// Output not yet handed on, in batches of at most `batch_size` rows, last first.
    pending: Vec<RecordBatch>,
    batch_size: usize,
    /// What the state holds, in the memory pool, as DataFusion's partial stage reserves it.
    reservation: MemoryReservation,
    metrics: BaselineMetrics,
}

impl ViewGroupsStream {
    /// Adds `batch`'s rows to the groups; emits them first if they are full.
    fn add(&mut self, batch: &RecordBatch) -> Result<()> {
        if self.state.as_ref().is_some_and(State::full) {
            self.emit()?;
        }
        let state = match &mut self.state {
            Some(state) => state,
            None => self.state.insert(State::new(&self.aggregates)?),
        };
        // The rule checked the input's schema; a child whose batches contradict it fails the
        // statement rather than the process.
        let keys = batch
            .columns()
            .get(self.key)
            .and_then(|c| c.as_string_view_opt());
        let keys = keys.ok_or_else(|| {
            DataFusionError::Internal(format!(
                "ViewGroupsExec: column {} of its input is not text",
                self.key
            ))
        })?;
        state.indices.clear();
        state.groups.assign(keys, &mut state.indices);
        let total = state.groups.keys.len();
        for (accumulator, arguments) in state.accumulators.iter_mut().zip(&self.arguments) {
            let values = arguments
                .iter()
                .map(|e| e.evaluate(batch)?.into_array(batch.num_rows()))
                .collect::<Result<Vec<ArrayRef>>>()?;
            accumulator.update_batch(&values, &state.indices, None, total)?;
        }
        // As DataFusion's partial stage does when the pool refuses more: hand the groups on.
        let size = state.size();
        if self.reservation.try_resize(size).is_err() {
            self.emit()?;
        }
        Ok(())
    }

    /// Moves the groups held so far to the output.
    fn emit(&mut self) -> Result<()> {
        let Some(state) = self.state.take() else {
            return Ok(());
        };
        let batch = state.emit(&self.schema)?;
        self.reservation.free();
        let rows = batch.num_rows();
        let mut start = 0;
        let mut slices = Vec::new();
        while start < rows {
            let length = self.batch_size.min(rows - start);
            slices.push(batch.slice(start, length));
            start += length;
        }
        slices.reverse();
        slices.append(&mut self.pending);
        self.pending = slices;
        Ok(())
    }
}

impl Stream for ViewGroupsStream {
    type Item = Result<RecordBatch>;

    fn poll_next(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<Self::Item>> {
        let this = &mut *self;
        loop {
            if let Some(batch) = this.pending.pop() {
                return this.metrics.record_poll(Poll::Ready(Some(Ok(batch))));
            }
            let Some(input) = this.input.as_mut() else {
                return Poll::Ready(None);
            };
            match input.poll_next_unpin(cx) {
                Poll::Pending => return Poll::Pending,
                Poll::Ready(Some(Err(e))) => {
                    this.input = None;
                    return Poll::Ready(Some(Err(e)));
                }
                Poll::Ready(Some(Ok(batch))) => {
                    let time = this.metrics.elapsed_compute().clone();
                    let timer = time.timer();
                    let added = this.add(&batch);
                    timer.done();
                    if let Err(e) = added {
                        this.input = None;
                        return Poll::Ready(Some(Err(e)));
                    }
                }
                Poll::Ready(None) => {
                    this.input = None;
                    let time = this.metrics.elapsed_compute().clone();
                    let timer = time.timer();
                    let emitted = this.emit();
                    timer.done();
                    if let Err(e) = emitted {
                        return Poll::Ready(Some(Err(e)));
                    }
                }
            }
        }
    }
}

impl RecordBatchStream for ViewGroupsStream {
    fn schema(&self) -> SchemaRef {
        Arc::clone(&self.schema)
    }
}

/// A group's key: a view that holds its string, a longer string (by its index in `long`), or
/// NULL.
#[derive(Clone, Copy)]
enum Key {
    Inline(u128),
    Long(usize),
    Null,
}

/// A random number of this process's std hasher (seeded from the OS), told apart by `n`.
fn secret(n: u64) -> u64 {
    use std::hash::{BuildHasher, Hasher};
    let mut hasher = std::collections::hash_map::RandomState::new().build_hasher();
    hasher.write_u64(n);
    hasher.finish()
}

/// No inline view is this (its length would be 2^32 - 1), so it marks a free slot.
const FREE: u128 = u128::MAX;

/// The groups of one partial stage: a key per group, in the order first seen.
struct Groups {
    keys: Vec<Key>,
    /// Open addressing over inline views: (view, group), `FREE` when unused; a power of two
    /// long, at most half full.
    slots: Vec<(u128, usize)>,
    /// Longer strings' groups, and the strings by `Key::Long` index (one copy, shared).
    long_groups: HashMap<Arc<str>, usize>,
    long: Vec<Arc<str>>,
    long_bytes: usize,
    null: Option<usize>,
    /// The hash's secrets.
    seed: (u64, u64),
}

impl Groups {
    fn new() -> Groups {
        Groups {
            keys: Vec::new(),
            // bounded: a constant
            slots: vec![(FREE, 0); 256],
            long_groups: HashMap::new(),
            long: Vec::new(),
            long_bytes: 0,
            null: None,
            seed: (secret(1), secret(2)),
        }
    }

    /// What the keys and the table take, roughly.
    fn size(&self) -> usize {
        self.keys.capacity() * size_of::<Key>()
            + self.slots.capacity() * size_of::<(u128, usize)>()
            + self.long.capacity() * size_of::<Arc<str>>()
            + self.long_groups.capacity() * (size_of::<(Arc<str>, usize)>() + 1)
            + self.long_bytes
    }

    /// Appends each row's group of `keys` to `indices`, adding groups for keys not seen.
    fn assign(
        &mut self,
        keys: &datafusion::arrow::array::StringViewArray,
        indices: &mut Vec<usize>,
    ) {
        let views = keys.views();
        // bounded: the rows of a batch in memory
        indices.reserve(views.len());
        for (row, &view) in views.iter().enumerate() {
            let group = if keys.is_null(row) {
                self.null_group()
            } else if (view as u32) <= 12 {
                self.inline_group(view)
            } else {
                self.long_group(keys.value(row))
            };
            indices.push(group);
        }
    }

    fn inline_group(&mut self, view: u128) -> usize {
        let mask = self.slots.len() - 1;
        let mut slot = self.hash(view) & mask;
        loop {
            let (key, group) = self.slots[slot];
            if key == view {
                return group;
            }
            if key == FREE {
                let group = self.keys.len();
                self.keys.push(Key::Inline(view));
                self.slots[slot] = (view, group);
                if 2 * self.keys.len() > self.slots.len() {
                    self.grow();
                }
                return group;
            }
            slot = (slot + 1) & mask;
        }
    }

    /// A view's slot before probing: its two halves, each XORed with a secret of this stage,
    /// multiplied as 64-bit numbers into 128 bits, and the product's halves XORed (wyhash's
    /// mix), so every bit of the key moves the low bits taken for the slot. The secrets are
    /// random, so no one can choose keys that fall into one slot.
    fn hash(&self, view: u128) -> usize {
        let product = ((view as u64 ^ self.seed.0) as u128)
            .wrapping_mul(((view >> 64) as u64 ^ self.seed.1) as u128);
        (product as u64 ^ (product >> 64) as u64) as usize
    }

    fn grow(&mut self) {
        let size = 2 * self.slots.len();
        // bounded: twice the groups held, at most 2 * MAX_GROUPS plus a batch's rows
        let mut slots = vec![(FREE, 0); size];
        for &(view, group) in self.slots.iter().filter(|(view, _)| *view != FREE) {
            let mut slot = self.hash(view) & (size - 1);
            while slots[slot].0 != FREE {
                slot = (slot + 1) & (size - 1);
            }
            slots[slot] = (view, group);
        }
        self.slots = slots;
    }

    fn long_group(&mut self, value: &str) -> usize {
        if let Some(&group) = self.long_groups.get(value) {
            return group;
        }
        let group = self.keys.len();
        let value: Arc<str> = value.into();
        self.keys.push(Key::Long(self.long.len()));
        self.long.push(Arc::clone(&value));
        self.long_bytes += value.len();
        self.long_groups.insert(value, group);
        group
    }

    fn null_group(&mut self) -> usize {
        match self.null {
            Some(group) => group,
            None => {
                let group = self.keys.len();
                self.keys.push(Key::Null);
                self.null = Some(group);
                group
            }
        }
    }

    /// The keys as a column, group by group.
    fn column(&self) -> Result<ArrayRef> {
        // bounded: the groups held, at most MAX_GROUPS plus a batch's rows
        let mut column = StringViewBuilder::with_capacity(self.keys.len());
        for key in &self.keys {
            match *key {
                Key::Inline(view) => {
                    let bytes = view.to_le_bytes();
                    let length = (view as u32) as usize;
                    let text = std::str::from_utf8(&bytes[4..4 + length]).map_err(|e| {
                        DataFusionError::Internal(format!("a group key is not UTF-8: {e}"))
                    })?;
                    column.append_value(text);
                }
                Key::Long(index) => column.append_value(&self.long[index]),
                Key::Null => column.append_null(),
            }
        }
        Ok(Arc::new(column.finish()))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use datafusion::arrow::array::{Float64Array, Int64Array, StringViewArray};
    use datafusion::arrow::datatypes::{Field, Schema};
    use datafusion::arrow::util::pretty::pretty_format_batches;
    use datafusion::datasource::MemTable;
    use datafusion::execution::SessionStateBuilder;
    use datafusion::physical_plan::displayable;
    use datafusion::prelude::{SessionConfig, SessionContext};

    /// `rows` rows in batches of 4,096 over two partitions: keys from `key`, values `n` and
    /// `x` (NULL every seventh row).
    fn table(rows: usize, key: impl Fn(usize) -> Option<String>) -> MemTable {
        let schema = Arc::new(Schema::new(vec![
            Field::new("k", DataType::Utf8View, true),
            Field::new("n", DataType::Int64, false),
            Field::new("x", DataType::Float64, true),
        ]));
        let batches: Vec<RecordBatch> = (0..rows)
            .step_by(4096)
            .map(|start| {
                let rows = start..(start + 4096).min(rows);
                let k: StringViewArray = rows.clone().map(&key).collect();
                let n: Int64Array = rows.clone().map(|i| (i * 7919 % 1000) as i64).collect();
                let x: Float64Array = rows
                    .map(|i| (i % 7 != 0).then_some(i as f64 / 3.0))
                    .collect();
                RecordBatch::try_new(
                    Arc::clone(&schema),
                    vec![Arc::new(k), Arc::new(n), Arc::new(x)],
                )
                .unwrap()
            })
            .collect();
        let half = batches.len() / 2;
        MemTable::try_new(
            Arc::clone(&schema),
            vec![batches[..half].to_vec(), batches[half..].to_vec()],
        )
        .unwrap()
    }

    fn context(with_rule: bool, data: MemTable) -> SessionContext {
        let config = SessionConfig::new().with_target_partitions(2);
        let mut builder = SessionStateBuilder::new()
            .with_default_features()
            .with_config(config);
        if with_rule {
            builder = builder.with_physical_optimizer_rule(Arc::new(ViewGroups));
        }
        let context = SessionContext::new_with_state(builder.build());
        context.register_table("t", Arc::new(data)).unwrap();
        context
    }

    /// The query's sorted result as text, and its plan.
    async fn run(context: &SessionContext, sql: &str) -> (String, String) {
        let frame = context.sql(sql).await.unwrap();
        let plan = frame.clone().create_physical_plan().await.unwrap();
        let shown = displayable(plan.as_ref()).indent(true).to_string();
        let batches = frame.collect().await.unwrap();
        (pretty_format_batches(&batches).unwrap().to_string(), shown)
    }

    const QUERY: &str = "SELECT k, count(*), count(x), sum(n), avg(x), min(x), max(n), \
        min(k) FROM t GROUP BY k ORDER BY k NULLS FIRST";

    async fn same_as_datafusion(rows: usize, key: impl Fn(usize) -> Option<String> + Copy) {
        let (expected, plain) = run(&context(false, table(rows, key)), QUERY).await;
        let (got, plan) = run(&context(true, table(rows, key)), QUERY).await;
        assert!(!plain.contains("ViewGroupsExec"), "{plain}");
        assert!(
            plan.contains("ViewGroupsExec"),
            "the stage is not used:\n{plan}"
        );
        assert_eq!(got, expected);
    }

    #[tokio::test]
    async fn short_keys_group_as_datafusion_groups_them() {
        same_as_datafusion(50_000, |i| Some(format!("category_{:02}", i % 100))).await;
    }

    #[tokio::test]
    async fn long_keys_null_and_the_empty_string_group_as_datafusion_groups_them() {
        same_as_datafusion(50_000, |i| match i % 9 {
            0 => None,
            1 => Some(String::new()),
            2 => Some(format!("a key longer than twelve bytes {}", i % 13)),
            3 => Some(format!("exactly12b{:02}", i % 50)),
            4 => Some(format!("thirteen_b{:03}", i % 50)),
            _ => Some(format!("é{}", i % 40)),
        })
        .await;
    }

    #[tokio::test]
    async fn more_distinct_keys_than_one_stage_holds_are_emitted_and_merged() {
        // 150,000 distinct keys, long and short, in each partition: more than MAX_GROUPS.
        same_as_datafusion(300_000, |i| {
            let k = i % 150_000;
            Some(if k % 3 == 0 {
                format!("a long key number {k}")
            } else {
                format!("k{k}")
            })
        })
        .await;
    }

    #[tokio::test]
    async fn keys_that_are_not_a_plain_string_view_column_are_left_to_datafusion() {
        let data = || table(10_000, |i| Some(format!("c{}", i % 10)));
        for sql in [
            "SELECT lower(k), count(*) FROM t GROUP BY lower(k)",
            "SELECT k, n, count(*) FROM t GROUP BY k, n",
            "SELECT n, count(*) FROM t GROUP BY n",
            "SELECT k, count(*) FILTER (WHERE n > 3) FROM t GROUP BY k",
        ] {
            let (expected, _) = run(&context(false, data()), sql).await;
            let (got, plan) = run(&context(true, data()), sql).await;
            assert!(!plan.contains("ViewGroupsExec"), "{sql}:\n{plan}");
            assert_eq!(sorted(&got), sorted(&expected), "{sql}");
        }
    }

    #[tokio::test]
    async fn a_distinct_count_over_the_keys_counts_as_datafusion_counts() {
        // DataFusion plans it as a grouping by (k, n) under a grouping by k: the second is ours.
        let data = || table(20_000, |i| Some(format!("c{}", i % 10)));
        let sql = "SELECT k, count(DISTINCT n) FROM t GROUP BY k ORDER BY k";
        let (expected, _) = run(&context(false, data()), sql).await;
        let (got, plan) = run(&context(true, data()), sql).await;
        assert!(plan.contains("ViewGroupsExec"), "{plan}");
        assert_eq!(got, expected);
    }

    #[test]
    fn every_distinct_key_gets_its_own_group_in_first_seen_order() {
        // Keys that share their first bytes (so their views differ only in the high half),
        // twice over, with long keys and NULL among them; the table grows several times.
        let key = |i: usize| match i % 5 {
            0 => None,
            1 => Some(format!("a key longer than twelve {}", i % 97)),
            _ => Some(format!("cat_{:08}", i % 3_000)),
        };
        let rows: Vec<Option<String>> = (0..20_000).map(key).collect();
        let mut groups = Groups::new();
        let mut indices = Vec::new();
        for half in rows.chunks(10_000) {
            let keys: StringViewArray = half.iter().map(|k| k.as_deref()).collect();
            groups.assign(&keys, &mut indices);
        }
        let mut expected: HashMap<Option<&str>, usize> = HashMap::new();
        let mut order = Vec::new();
        for (row, k) in rows.iter().enumerate() {
            let next = expected.len();
            let group = *expected.entry(k.as_deref()).or_insert_with(|| {
                order.push(k.as_deref());
                next
            });
            assert_eq!(indices[row], group, "row {row}, key {k:?}");
        }
        let column = groups.column().unwrap();
        let column = column.as_string_view();
        let got: Vec<Option<&str>> = column.iter().collect();
        assert_eq!(got, order);
    }

    #[test]
    fn keys_chosen_to_share_their_low_bits_do_not_pile_up_in_one_run_of_slots() {
        // "zz", then a byte whose low two bits are 0, then any printable byte: every bit that
        // differs sits where an unkeyed multiply-and-take-the-high-bits hash never looks.
        let keys: Vec<String> = (0x20u8..0x7f)
            .filter(|x| x % 4 == 0)
            .flat_map(|x| (0x20u8..0x7f).map(move |y| format!("zz{}{}", x as char, y as char)))
            .collect();
        let array: StringViewArray = keys.iter().map(|k| Some(k.as_str())).collect();
        let mut groups = Groups::new();
        groups.assign(&array, &mut Vec::new());
        assert_eq!(groups.keys.len(), keys.len());
        let mut longest = 0;
        let mut run = 0;
        for (view, _) in &groups.slots {
            run = if *view == FREE { 0 } else { run + 1 };
            longest = longest.max(run);
        }
        // At most half full, a random hash makes runs of a few dozen at worst.
        assert!(
            longest < 100,
            "{} keys, a run of {longest} slots",
            keys.len()
        );
    }

    /// A pool that lets this stage hold at most `limit` bytes, and notes the most it held.
    #[derive(Debug)]
    struct Capped {
        limit: usize,
        held: std::sync::Mutex<(usize, usize)>,
    }

    impl fmt::Display for Capped {
        fn fmt(&self, f: &mut fmt::Formatter) -> fmt::Result {
            write!(f, "capped at {} bytes", self.limit)
        }
    }

    impl datafusion::execution::memory_pool::MemoryPool for Capped {
        fn name(&self) -> &str {
            "capped"
        }

        fn grow(&self, reservation: &MemoryReservation, additional: usize) {
            let _ = self.try_grow(reservation, additional);
        }

        fn shrink(&self, reservation: &MemoryReservation, shrink: usize) {
            if reservation.consumer().name().starts_with("ViewGroupsExec") {
                self.held.lock().unwrap().0 -= shrink;
            }
        }

        fn try_grow(&self, reservation: &MemoryReservation, additional: usize) -> Result<()> {
            if !reservation.consumer().name().starts_with("ViewGroupsExec") {
                return Ok(());
            }
            let mut held = self.held.lock().unwrap();
            if held.0 + additional > self.limit {
                return Err(DataFusionError::ResourcesExhausted("capped".into()));
            }
            held.0 += additional;
            held.1 = held.1.max(held.0);
            Ok(())
        }

        fn reserved(&self) -> usize {
            self.held.lock().unwrap().0
        }
    }

    #[tokio::test]
    async fn the_groups_are_handed_on_when_the_memory_pool_refuses_more() {
        let key = |i: usize| Some(format!("k{}", i % 40_000));
        let sql = "SELECT k, count(*), sum(n) FROM t GROUP BY k ORDER BY k";
        let (expected, _) = run(&context(false, table(160_000, key)), sql).await;

        let pool = Arc::new(Capped {
            limit: 2 << 20,
            held: std::sync::Mutex::new((0, 0)),
        });
        let runtime = datafusion::execution::runtime_env::RuntimeEnvBuilder::new()
            .with_memory_pool(Arc::clone(&pool) as _)
            .build_arc()
            .unwrap();
        let state = SessionStateBuilder::new()
            .with_default_features()
            .with_config(SessionConfig::new().with_target_partitions(2))
            .with_runtime_env(runtime)
            .with_physical_optimizer_rule(Arc::new(ViewGroups))
            .build();
        let context = SessionContext::new_with_state(state);
        context
            .register_table("t", Arc::new(table(160_000, key)))
            .unwrap();
        let frame = context.sql(sql).await.unwrap();
        let plan = frame.clone().create_physical_plan().await.unwrap();
        let batches = datafusion::physical_plan::collect(Arc::clone(&plan), context.task_ctx())
            .await
            .unwrap();
        assert_eq!(
            pretty_format_batches(&batches).unwrap().to_string(),
            expected
        );

        let (now, peak) = *pool.held.lock().unwrap();
        assert_eq!(now, 0, "everything reserved is given back");
        assert!(peak > 512 << 10 && peak <= 2 << 20, "peak {peak}");
        // 40,000 groups per partition fit the group bound but not the pool: the stage handed
        // its groups on more than once, so it emitted more rows than there are groups.
        let mut emitted = 0;
        plan.apply(|node| {
            if node.name() == "ViewGroupsExec" {
                emitted += node.metrics().unwrap().output_rows().unwrap();
            }
            Ok(TreeNodeRecursion::Continue)
        })
        .unwrap();
        assert!(emitted > 2 * 40_000, "emitted {emitted}");
    }

    fn sorted(text: &str) -> Vec<&str> {
        let mut lines: Vec<&str> = text.lines().collect();
        lines.sort_unstable();
        lines
    }
}
