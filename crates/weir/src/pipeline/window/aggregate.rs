//! Windowed aggregation on DataFusion's accumulators, so that every DataFusion aggregate
//! function works (`count`, `min`, `first_value(x ORDER BY t)`, `approx_distinct`,
//! `approx_percentile_cont`, `stddev`, ...) with its own state and merge rules.
//!
//! Each open window has its own group table (DataFusion's `GroupValues`, keyed on the `GROUP BY`
//! columns other than `window_start` and `window_end`) and one `GroupsAccumulator` per aggregate.
//! Readers aggregate their rows into partial windows ([`PartialWindows`]: raw rows in,
//! accumulator state out, as DataFusion's partial aggregation does) and hand a window's state
//! over once their watermark passes its end; the merge ([`FinalWindows`]) merges the states and
//! emits a window's rows once, when the source's watermark passes its end, then forgets it.
//! Memory therefore grows with the open windows times their groups, never with the input.
//!
//! A snapshot of the merged windows is their state as Arrow arrays (what the accumulators'
//! `state` gives, one IPC batch a window); restoring merges it back. Accumulators are only ever
//! fed raw rows (partial) or states (merge), never both, as DataFusion's two phases do.

use std::collections::BTreeMap;
use std::sync::Arc;

use arrow::array::{
    Array, ArrayRef, AsArray, BooleanArray, Int64Array, RecordBatch, RecordBatchOptions,
    UInt32Array, UInt64Array,
};
use arrow::compute::cast;
use arrow::datatypes::{DataType, Field, Int64Type, Schema, SchemaRef, UInt64Type};
use arrow::ipc::reader::StreamReader;
use arrow::ipc::writer::StreamWriter;
use datafusion::common::hash_utils::{create_hashes, RandomState};
use datafusion::error::{DataFusionError, Result};
use datafusion::logical_expr::{EmitTo, GroupsAccumulator};
use datafusion::physical_expr::aggregate::AggregateFunctionExpr;
use datafusion::physical_expr::GroupsAccumulatorAdapter;
use datafusion::physical_expr::PhysicalExpr;
use datafusion::physical_plan::aggregates::group_values::{new_group_values, GroupValues};
use datafusion::physical_plan::aggregates::order::GroupOrdering;

/// Where each `GROUP BY` column of the output comes from.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum GroupOut {
    /// `window_start`.
    Start,
    /// `window_end`.
    End,
    /// The i-th group key.
    Key(usize),
}

/// A window's bounds, in the event-time column's unit.
pub(crate) type Bounds = (i64, i64);

/// What a windowed aggregation computes, compiled once from DataFusion's plan.
pub(crate) struct AggregateStage {
    /// The group keys other than the window's, evaluated on the aggregation's input.
    pub(crate) key_exprs: Vec<Arc<dyn PhysicalExpr>>,
    /// Their fields.
    pub(crate) key_schema: SchemaRef,
    /// `window_start` and `window_end` in the aggregation's input.
    pub(crate) start_col: usize,
    /// See `start_col`.
    pub(crate) end_col: usize,
    /// The output's `GROUP BY` columns, in order.
    pub(crate) layout: Vec<GroupOut>,
    /// The aggregates.
    pub(crate) aggs: Vec<Arc<AggregateFunctionExpr>>,
    /// Each aggregate's arguments (ordering expressions appended, so that order-sensitive
    /// aggregates order rows themselves).
    pub(crate) args: Vec<Vec<Arc<dyn PhysicalExpr>>>,
    /// Each aggregate's `FILTER (WHERE ...)`.
    pub(crate) filters: Vec<Option<Arc<dyn PhysicalExpr>>>,
    /// The output: DataFusion's final aggregation's schema.
    pub(crate) output: SchemaRef,
    /// The type of `window_start` and `window_end`.
    pub(crate) window_type: DataType,
    /// Each aggregate's state fields.
    state_fields: Vec<Vec<Arc<Field>>>,
    /// The schema of a snapshot batch: bounds, rows, keys, states.
    snapshot: SchemaRef,
}

impl AggregateStage {
    /// Compiles the stage; see the fields.
    #[allow(clippy::too_many_arguments)]
    pub(crate) fn new(
        key_exprs: Vec<Arc<dyn PhysicalExpr>>,
        key_schema: SchemaRef,
        start_col: usize,
        end_col: usize,
        layout: Vec<GroupOut>,
        aggs: Vec<Arc<AggregateFunctionExpr>>,
        args: Vec<Vec<Arc<dyn PhysicalExpr>>>,
        filters: Vec<Option<Arc<dyn PhysicalExpr>>>,
        output: SchemaRef,
        window_type: DataType,
    ) -> Result<Self> {
        let state_fields = aggs
            .iter()
            .map(|a| a.state_fields())
            .collect::<Result<Vec<_>>>()?;
        let mut fields = vec![
            Field::new("__window_start", DataType::Int64, false),
            Field::new("__window_end", DataType::Int64, false),
            Field::new("__rows", DataType::UInt64, false),
        ];
        for (i, f) in key_schema.fields().iter().enumerate() {
            fields.push(Field::new(format!("k{i}"), f.data_type().clone(), true));
        }
        for (i, agg) in state_fields.iter().enumerate() {
            for (j, f) in agg.iter().enumerate() {
                fields.push(Field::new(format!("s{i}_{j}"), f.data_type().clone(), true));
            }
        }
        Ok(Self {
            key_exprs,
            key_schema,
            start_col,
            end_col,
            layout,
            aggs,
            args,
            filters,
            output,
            window_type,
            state_fields,
            snapshot: Arc::new(Schema::new(fields)),
        })
    }

    /// The schema of a snapshot batch: `__window_start`, `__window_end`, `__rows`, the keys,
    /// then every aggregate's state columns.
    pub(crate) fn snapshot_schema(&self) -> &SchemaRef {
        &self.snapshot
    }

    /// How many state columns each aggregate has.
    pub(crate) fn state_widths(&self) -> Vec<usize> {
        self.state_fields.iter().map(Vec::len).collect()
    }

    fn groups(&self) -> Result<Groups> {
        let values = if self.key_exprs.is_empty() {
            None
        } else {
            Some(new_group_values(
                Arc::clone(&self.key_schema),
                &GroupOrdering::None,
            )?)
        };
        let accs = self
            .aggs
            .iter()
            .zip(&self.state_fields)
            .map(|(a, fields)| -> Result<Box<dyn GroupsAccumulator>> {
                if let Some(typed) = super::first_last::typed(a, fields) {
                    Ok(typed)
                } else if a.groups_accumulator_supported() {
                    a.create_groups_accumulator()
                } else {
                    let a = Arc::clone(a);
                    Ok(Box::new(GroupsAccumulatorAdapter::new(move || {
                        a.create_accumulator()
                    })))
                }
            })
            .collect::<Result<Vec<_>>>()?;
        Ok(Groups {
            values,
            single: false,
            accs,
            rows: 0,
            indices: Vec::new(),
        })
    }

    /// Splits `batch` (the aggregation's input) by window: each window's bounds and rows.
    pub(crate) fn split(&self, batch: &RecordBatch) -> Result<Vec<(Bounds, RecordBatch)>> {
        let starts = int64(batch.column(self.start_col))?;
        let ends = int64(batch.column(self.end_col))?;
        let (s, e) = (
            starts.as_primitive::<Int64Type>().values(),
            ends.as_primitive::<Int64Type>().values(),
        );
        if s.is_empty() {
            return Ok(Vec::new());
        }
        let first = (s[0], e[0]);
        if s.iter().zip(e.iter()).all(|(&a, &b)| (a, b) == first) {
            return Ok(vec![(first, batch.clone())]);
        }
        let mut by_window: BTreeMap<Bounds, Vec<u32>> = BTreeMap::new();
        for (i, (&a, &b)) in s.iter().zip(e.iter()).enumerate() {
            by_window.entry((a, b)).or_default().push(i as u32);
        }
        by_window
            .into_iter()
            .map(|(bounds, rows)| {
                let idx = UInt32Array::from(rows);
                Ok((bounds, arrow::compute::take_record_batch(batch, &idx)?))
            })
            .collect()
    }

    /// The output rows of a window's final values.
    fn output_batch(
        &self,
        bounds: Bounds,
        keys: Vec<ArrayRef>,
        values: Vec<ArrayRef>,
    ) -> Result<RecordBatch> {
        let n = values
            .first()
            .map(|v| v.len())
            .or_else(|| keys.first().map(|k| k.len()))
            .unwrap_or(0);
        let constant = |v: i64| -> Result<ArrayRef> {
            Ok(cast(
                &(Arc::new(Int64Array::from_value(v, n)) as ArrayRef),
                &self.window_type,
            )?)
        };
        let mut columns = Vec::with_capacity(self.output.fields().len());
        for g in &self.layout {
            columns.push(match g {
                GroupOut::Start => constant(bounds.0)?,
                GroupOut::End => constant(bounds.1)?,
                GroupOut::Key(i) => Arc::clone(&keys[*i]),
            });
        }
        columns.extend(values);
        // Cast where an accumulator's type differs only in a detail DataFusion's final
        // aggregation would have given (nullability is checked by the batch itself).
        let columns = columns
            .into_iter()
            .zip(self.output.fields())
            .map(|(c, f)| {
                if c.data_type() == f.data_type() {
                    Ok(c)
                } else {
                    Ok(cast(&c, f.data_type())?)
                }
            })
            .collect::<Result<Vec<_>>>()?;
        let options = RecordBatchOptions::new().with_row_count(Some(n));
        Ok(RecordBatch::try_new_with_options(
            Arc::clone(&self.output),
            columns,
            &options,
        )?)
    }
}

fn int64(a: &ArrayRef) -> Result<ArrayRef> {
    Ok(cast(a, &DataType::Int64)?)
}

/// One window's groups and accumulators.
struct Groups {
    /// The group table; `None` when the only group keys are the window's.
    values: Option<Box<dyn GroupValues>>,
    /// Without keys: whether the one group exists yet.
    single: bool,
    accs: Vec<Box<dyn GroupsAccumulator>>,
    /// Input rows (for counting late rows when a window comes too late).
    rows: u64,
    indices: Vec<usize>,
}

impl Groups {
    fn len(&self) -> usize {
        match &self.values {
            Some(v) => v.len(),
            None => usize::from(self.single),
        }
    }

    fn intern(&mut self, keys: &[ArrayRef], rows: usize) -> Result<()> {
        match &mut self.values {
            Some(v) => v.intern(keys, &mut self.indices)?,
            None => {
                self.indices.clear();
                self.indices.resize(rows, 0);
                self.single |= rows > 0;
            }
        }
        Ok(())
    }

    /// The keys and each accumulator's state, emptying the window.
    fn take_state(&mut self) -> Result<(Vec<ArrayRef>, Vec<ArrayRef>)> {
        let keys = match &mut self.values {
            Some(v) => v.emit(EmitTo::All)?,
            None => Vec::new(),
        };
        let mut states = Vec::new();
        for a in &mut self.accs {
            states.extend(a.state(EmitTo::All)?);
        }
        self.single = false;
        Ok((keys, states))
    }
}

/// A reader's windows: raw rows in, accumulator state out.
pub(crate) struct PartialWindows {
    stage: Arc<AggregateStage>,
    open: BTreeMap<(i64, i64), Groups>,
}

/// One window's partial state, from a reader to the merge.
pub(crate) struct PartialState {
    /// The window.
    pub(crate) bounds: Bounds,
    /// The group keys.
    keys: Vec<ArrayRef>,
    /// Every accumulator's state columns, in order.
    states: Vec<ArrayRef>,
    /// Input rows aggregated into it.
    pub(crate) rows: u64,
}

/// The hash that spreads groups over merge shards: its own seed, so that a shard's groups are
/// not clustered in the shard's group table (DataFusion's tables hash with another seed).
const SHARD_HASH: RandomState = RandomState::with_seed(0x7765_6972_2d6d_6572);

impl PartialState {
    /// Splits the window's groups over `shards` merge shards by the hash of their keys, so that
    /// a group goes to the same shard from every reader. Returns the parts that hold groups,
    /// each with its shard; the first carries the window's input rows. Without group keys
    /// (the window is the one group) the window goes whole to the shard of its bounds.
    pub(crate) fn by_shard(self, shards: usize) -> Result<Vec<(usize, PartialState)>> {
        let groups = self.keys.first().map_or(0, |k| k.len());
        if shards <= 1 {
            return Ok(vec![(0, self)]);
        }
        if self.keys.is_empty() || groups == 0 {
            let at = (self.bounds.0 as u64 ^ self.bounds.1.rotate_left(32) as u64)
                .wrapping_mul(0x9e37_79b9_7f4a_7c15);
            return Ok(vec![(shard_of(at, shards), self)]);
        }
        let mut hashes = vec![0u64; groups];
        create_hashes(&self.keys, &SHARD_HASH, &mut hashes)?;
        // A counting sort of the groups by shard: one `take` for all columns, then slices.
        let mut counts = vec![0usize; shards];
        let of: Vec<usize> = hashes.iter().map(|&h| shard_of(h, shards)).collect();
        for &s in &of {
            counts[s] += 1;
        }
        let starts: Vec<usize> = counts
            .iter()
            .scan(0, |at, &c| {
                let start = *at;
                *at += c;
                Some(start)
            })
            .collect();
        let mut next = starts.clone();
        let mut order = vec![0u32; groups];
        for (i, &s) in of.iter().enumerate() {
            order[next[s]] = i as u32;
            next[s] += 1;
        }
        let order = UInt32Array::from(order);
        let mut columns = self.keys;
        let keys = columns.len();
        columns.extend(self.states);
        let columns = arrow::compute::take_arrays(&columns, &order, None)?;
        let mut rows = self.rows;
        let mut parts = Vec::new();
        for (shard, (&start, &len)) in starts.iter().zip(&counts).enumerate() {
            if len == 0 {
                continue;
            }
            let mut slice = columns.iter().map(|c| c.slice(start, len));
            parts.push((
                shard,
                PartialState {
                    bounds: self.bounds,
                    keys: slice.by_ref().take(keys).collect(),
                    states: slice.collect(),
                    rows: std::mem::take(&mut rows),
                },
            ));
        }
        Ok(parts)
    }
}

/// The shard of a hash: its high bits scaled to `shards` (the low bits pick a group table's
/// buckets).
fn shard_of(hash: u64, shards: usize) -> usize {
    (((hash >> 32) * shards as u64) >> 32) as usize
}

impl PartialWindows {
    /// No open windows.
    pub(crate) fn new(stage: Arc<AggregateStage>) -> Self {
        Self {
            stage,
            open: BTreeMap::new(),
        }
    }

    /// Aggregates one batch of the aggregation's input.
    pub(crate) fn update(&mut self, batch: &RecordBatch) -> Result<()> {
        let stage = Arc::clone(&self.stage);
        for (bounds, rows) in stage.split(batch)? {
            let g = match self.open.entry((bounds.1, bounds.0)) {
                std::collections::btree_map::Entry::Occupied(o) => o.into_mut(),
                std::collections::btree_map::Entry::Vacant(v) => v.insert(stage.groups()?),
            };
            let n = rows.num_rows();
            let keys = evaluate(&stage.key_exprs, &rows)?;
            g.intern(&keys, n)?;
            let total = g.len();
            for (i, acc) in g.accs.iter_mut().enumerate() {
                let values = evaluate(&stage.args[i], &rows)?;
                let filter = match &stage.filters[i] {
                    Some(f) => Some(f.evaluate(&rows)?.into_array(n)?),
                    None => None,
                };
                let filter: Option<&BooleanArray> = filter.as_ref().map(|f| f.as_boolean());
                acc.update_batch(&values, &g.indices, filter, total)?;
            }
            g.rows += n as u64;
        }
        Ok(())
    }

    /// Hands over the windows that end at or before `watermark` (every window with `None`).
    pub(crate) fn take_until(&mut self, watermark: Option<i64>) -> Result<Vec<PartialState>> {
        let keep = match watermark {
            Some(w) => self.open.split_off(&(w.saturating_add(1), i64::MIN)),
            None => BTreeMap::new(),
        };
        let done = std::mem::replace(&mut self.open, keep);
        done.into_iter()
            .map(|((end, start), mut g)| {
                let (keys, states) = g.take_state()?;
                Ok(PartialState {
                    bounds: (start, end),
                    keys,
                    states,
                    rows: g.rows,
                })
            })
            .collect()
    }

    /// True when no window is open.
    pub(crate) fn is_empty(&self) -> bool {
        self.open.is_empty()
    }
}

/// The merged windows of a source: states in, each window's rows out once.
pub(crate) struct FinalWindows {
    stage: Arc<AggregateStage>,
    open: BTreeMap<(i64, i64), Groups>,
    /// Windows ending at or before this have been emitted (or dropped).
    closed_through: i64,
}

impl FinalWindows {
    /// No open windows.
    pub(crate) fn new(stage: Arc<AggregateStage>) -> Self {
        Self {
            stage,
            open: BTreeMap::new(),
            closed_through: i64::MIN,
        }
    }

    /// Merges a reader's state. Returns the rows it held when its window was already emitted
    /// (they are late: a reader's channel came back from idle behind the watermark).
    pub(crate) fn merge(&mut self, p: PartialState) -> Result<u64> {
        if p.bounds.1 <= self.closed_through {
            return Ok(p.rows);
        }
        let stage = Arc::clone(&self.stage);
        let g = match self.open.entry((p.bounds.1, p.bounds.0)) {
            std::collections::btree_map::Entry::Occupied(o) => o.into_mut(),
            std::collections::btree_map::Entry::Vacant(v) => v.insert(stage.groups()?),
        };
        let n = p.states.first().map_or(0, |s| s.len());
        if n == 0 && p.keys.first().is_none_or(|k| k.is_empty()) {
            g.rows += p.rows;
            return Ok(0);
        }
        let n = p.keys.first().map_or(n, |k| k.len());
        g.intern(&p.keys, n)?;
        let total = g.len();
        let mut at = 0;
        for (i, acc) in g.accs.iter_mut().enumerate() {
            let width = stage.state_fields[i].len();
            acc.merge_batch(&p.states[at..at + width], &g.indices, total)?;
            at += width;
        }
        g.rows += p.rows;
        Ok(0)
    }

    /// Emits the windows that end at or before `watermark`, oldest first, each with its
    /// bounds.
    pub(crate) fn close_until(&mut self, watermark: i64) -> Result<Vec<(Bounds, RecordBatch)>> {
        let keep = self
            .open
            .split_off(&(watermark.saturating_add(1), i64::MIN));
        let done = std::mem::replace(&mut self.open, keep);
        self.closed_through = self.closed_through.max(watermark);
        let mut out = Vec::new();
        for ((end, start), mut g) in done {
            if g.len() == 0 {
                continue;
            }
            let keys = match &mut g.values {
                Some(v) => v.emit(EmitTo::All)?,
                None => Vec::new(),
            };
            let values = g
                .accs
                .iter_mut()
                .map(|a| a.evaluate(EmitTo::All))
                .collect::<Result<Vec<_>>>()?;
            out.push((
                (start, end),
                self.stage.output_batch((start, end), keys, values)?,
            ));
        }
        Ok(out)
    }

    /// Emits every open window (the end of a bounded input). Only those windows count as
    /// emitted: a later run over new data (with state) still takes windows after them.
    pub(crate) fn close_all(&mut self) -> Result<Vec<(Bounds, RecordBatch)>> {
        let before = self.closed_through;
        let last = self.open.keys().next_back().map_or(before, |(end, _)| *end);
        let out = self.close_until(i64::MAX)?;
        self.closed_through = before.max(last);
        Ok(out)
    }

    /// Forgets every open window (a stop without state); returns how many there were.
    pub(crate) fn drop_open(&mut self) -> usize {
        std::mem::take(&mut self.open).len()
    }

    /// Windows open now.
    pub(crate) fn open_windows(&self) -> usize {
        self.open.len()
    }

    /// Windows at or before this time have been emitted.
    pub(crate) fn closed_through(&self) -> i64 {
        self.closed_through
    }

    /// The open windows' state as Arrow IPC bytes (one batch a window). Taking the state
    /// empties the accumulators, so the windows are restored from the batches at once: the
    /// snapshot and a restart go through the same code.
    pub(crate) fn snapshot(&mut self) -> Result<Vec<u8>> {
        let stage = Arc::clone(&self.stage);
        let mut batches = Vec::new();
        for ((end, start), g) in self.open.iter_mut() {
            let rows = g.rows;
            let (keys, states) = g.take_state()?;
            let n = keys
                .first()
                .map(|k| k.len())
                .or_else(|| states.first().map(|s| s.len()))
                .unwrap_or(0);
            let mut columns: Vec<ArrayRef> = vec![
                Arc::new(Int64Array::from_value(*start, n)),
                Arc::new(Int64Array::from_value(*end, n)),
                Arc::new(UInt64Array::from_value(rows, n)),
            ];
            columns.extend(keys);
            columns.extend(states);
            let options = RecordBatchOptions::new().with_row_count(Some(n));
            batches.push(RecordBatch::try_new_with_options(
                Arc::clone(&stage.snapshot),
                columns,
                &options,
            )?);
        }
        let mut bytes = Vec::new();
        {
            let mut w = StreamWriter::try_new(&mut bytes, &stage.snapshot)?;
            for b in &batches {
                w.write(b)?;
            }
            w.finish()?;
        }
        self.open.clear();
        self.restore_batches(batches)?;
        Ok(bytes)
    }

    /// Restores windows from [`FinalWindows::snapshot`]'s bytes; windows that ended at or
    /// before `closed_through` were emitted already and are not open.
    pub(crate) fn restore(&mut self, bytes: &[u8], closed_through: i64) -> Result<()> {
        self.closed_through = closed_through;
        if bytes.is_empty() {
            return Ok(());
        }
        let reader = StreamReader::try_new(bytes, None)?;
        if reader.schema().fields() != self.stage.snapshot.fields() {
            return Err(DataFusionError::Plan(
                "the state directory holds the windows of another query (its columns or \
                 aggregates differ); use a new 'state.dir' for a changed query"
                    .into(),
            ));
        }
        let batches = reader.collect::<std::result::Result<Vec<_>, _>>()?;
        self.restore_batches(batches)
    }

    fn restore_batches(&mut self, batches: Vec<RecordBatch>) -> Result<()> {
        let keys = self.stage.key_schema.fields().len();
        for b in batches {
            if b.num_rows() == 0 {
                continue;
            }
            let start = b.column(0).as_primitive::<Int64Type>().value(0);
            let end = b.column(1).as_primitive::<Int64Type>().value(0);
            let rows = b.column(2).as_primitive::<UInt64Type>().value(0);
            self.merge(PartialState {
                bounds: (start, end),
                keys: b.columns()[3..3 + keys].to_vec(),
                states: b.columns()[3 + keys..].to_vec(),
                rows,
            })?;
        }
        Ok(())
    }
}

fn evaluate(exprs: &[Arc<dyn PhysicalExpr>], batch: &RecordBatch) -> Result<Vec<ArrayRef>> {
    exprs
        .iter()
        .map(|e| e.evaluate(batch)?.into_array(batch.num_rows()))
        .collect()
}
