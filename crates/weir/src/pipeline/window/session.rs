//! `SESSION(t, col, gap)` windows: per group key, rows less than `gap` apart share a window,
//! which runs from its first row's time to its last row's time plus `gap`. A row that falls
//! between two sessions of its key merges them. A session is emitted once, when the watermark
//! passes its end (no later row can extend it then).
//!
//! Sessions merge, so each keeps DataFusion's row-at-a-time `Accumulator`s (which merge one
//! state into another) rather than a slot in a shared group table. Session windows run on one
//! thread: a session of a key can take rows from several readers.

use std::collections::HashMap;
use std::sync::Arc;

use arrow::array::{
    Array, ArrayRef, AsArray, Int64Array, RecordBatch, RecordBatchOptions, UInt32Array,
};
use arrow::compute::{cast, take};
use arrow::datatypes::{Int64Type, UInt64Type};
use arrow::ipc::reader::StreamReader;
use arrow::ipc::writer::StreamWriter;
use datafusion::common::ScalarValue;
use datafusion::error::{DataFusionError, Result};
use datafusion::logical_expr::Accumulator;

use super::aggregate::{AggregateStage, GroupOut};

struct Session {
    start: i64,
    /// The last row's time plus the gap.
    end: i64,
    accs: Vec<Box<dyn Accumulator>>,
    rows: u64,
}

/// The open sessions of every key.
pub(crate) struct SessionWindows {
    stage: Arc<AggregateStage>,
    gap: i64,
    /// Key values -> index into `keys` and `sessions`.
    index: HashMap<Vec<ScalarValue>, usize>,
    keys: Vec<Vec<ScalarValue>>,
    /// Per key, its open sessions in time order.
    sessions: Vec<Vec<Session>>,
    closed_through: i64,
}

impl SessionWindows {
    /// No sessions.
    pub(crate) fn new(stage: Arc<AggregateStage>, gap: i64) -> Self {
        Self {
            stage,
            gap,
            index: HashMap::new(),
            keys: Vec::new(),
            sessions: Vec::new(),
            closed_through: i64::MIN,
        }
    }

    fn accumulators(&self) -> Result<Vec<Box<dyn Accumulator>>> {
        self.stage
            .aggs
            .iter()
            .map(|a| a.create_accumulator())
            .collect()
    }

    fn key_index(&mut self, key: Vec<ScalarValue>) -> usize {
        if let Some(&k) = self.index.get(&key) {
            return k;
        }
        let k = self.keys.len();
        self.index.insert(key.clone(), k);
        self.keys.push(key);
        self.sessions.push(Vec::new());
        k
    }

    /// Aggregates one batch of the aggregation's input; `times` is the event time of each row
    /// (an Int64 view).
    pub(crate) fn update(&mut self, batch: &RecordBatch, times: &ArrayRef) -> Result<()> {
        let n = batch.num_rows();
        let t = times.as_primitive::<Int64Type>().values();
        let key_cols = evaluate(&self.stage.key_exprs, batch)?;
        // Rows of each (key, session) in this batch, fed to the accumulators in one call each.
        let mut rows_of: HashMap<(usize, i64), Vec<u32>> = HashMap::new();
        for (i, &time) in t.iter().enumerate().take(n) {
            let key = key_cols
                .iter()
                .map(|c| ScalarValue::try_from_array(c, i))
                .collect::<Result<Vec<_>>>()?;
            let k = self.key_index(key);
            let start = self.place(k, time)?;
            // A merge may have moved rows gathered earlier in this batch to another session:
            // gather by the session's start after placing, and fold stale starts below.
            rows_of.entry((k, start)).or_default().push(i as u32);
        }
        // Fold row lists whose session was merged into an earlier one by a later row.
        let mut by_session: HashMap<(usize, usize), Vec<u32>> = HashMap::new();
        for ((k, start), rows) in rows_of {
            let s = self.session_at(k, start);
            by_session.entry((k, s)).or_default().extend(rows);
        }
        for ((k, s), mut rows) in by_session {
            rows.sort_unstable();
            let idx = UInt32Array::from(rows);
            let session = &mut self.sessions[k][s];
            session.rows += idx.len() as u64;
            for (a, acc) in session.accs.iter_mut().enumerate() {
                let values = evaluate(&self.stage.args[a], batch)?
                    .iter()
                    .map(|v| Ok(take(v.as_ref(), &idx, None)?))
                    .collect::<Result<Vec<_>>>()?;
                let values = match &self.stage.filters[a] {
                    Some(f) => {
                        let mask = f.evaluate(batch)?.into_array(n)?;
                        let mask = take(mask.as_ref(), &idx, None)?;
                        values
                            .iter()
                            .map(|v| Ok(arrow::compute::filter(v.as_ref(), mask.as_boolean())?))
                            .collect::<Result<Vec<_>>>()?
                    }
                    None => values,
                };
                acc.update_batch(&values)?;
            }
        }
        Ok(())
    }

    /// The index of the session of key `k` that holds `start` now.
    fn session_at(&self, k: usize, start: i64) -> usize {
        let list = &self.sessions[k];
        list.iter()
            .position(|s| s.start <= start && start < s.end)
            .unwrap_or_else(|| list.len().saturating_sub(1))
    }

    /// Puts a row of key `k` at `time` into a session (new, extended or merged); returns the
    /// session's start.
    fn place(&mut self, k: usize, time: i64) -> Result<i64> {
        let gap = self.gap;
        let row_end = time.saturating_add(gap);
        let list = &mut self.sessions[k];
        // Sessions the row touches: [time, time + gap) overlaps [start, end).
        let touching: Vec<usize> = list
            .iter()
            .enumerate()
            .filter(|(_, s)| time < s.end && s.start < row_end)
            .map(|(i, _)| i)
            .collect();
        if touching.is_empty() {
            let accs = self.accumulators()?;
            let list = &mut self.sessions[k];
            let at = list.partition_point(|s| s.start < time);
            list.insert(
                at,
                Session {
                    start: time,
                    end: row_end,
                    accs,
                    rows: 0,
                },
            );
            return Ok(time);
        }
        let first = touching[0];
        // Merge every later touching session into the first.
        for &i in touching[1..].iter().rev() {
            let mut other = list.remove(i);
            let target = &mut list[first];
            target.start = target.start.min(other.start);
            target.end = target.end.max(other.end);
            target.rows += other.rows;
            for (a, b) in target.accs.iter_mut().zip(other.accs.iter_mut()) {
                let state = b
                    .state()?
                    .iter()
                    .map(ScalarValue::to_array)
                    .collect::<Result<Vec<_>>>()?;
                a.merge_batch(&state)?;
            }
        }
        let s = &mut list[first];
        s.start = s.start.min(time);
        s.end = s.end.max(row_end);
        Ok(s.start)
    }

    /// Emits the sessions that end at or before `watermark`.
    pub(crate) fn close_until(&mut self, watermark: i64) -> Result<Vec<RecordBatch>> {
        self.closed_through = self.closed_through.max(watermark);
        let mut done: Vec<(usize, Session)> = Vec::new();
        for (k, list) in self.sessions.iter_mut().enumerate() {
            let mut i = 0;
            while i < list.len() {
                if list[i].end <= watermark {
                    done.push((k, list.remove(i)));
                } else {
                    i += 1;
                }
            }
        }
        if done.is_empty() {
            return Ok(Vec::new());
        }
        done.sort_by_key(|(_, s)| (s.end, s.start));
        let n = done.len();
        let window = |v: Vec<i64>| -> Result<ArrayRef> {
            Ok(cast(
                &(Arc::new(Int64Array::from(v)) as ArrayRef),
                &self.stage.window_type,
            )?)
        };
        let starts = window(done.iter().map(|(_, s)| s.start).collect())?;
        let ends = window(done.iter().map(|(_, s)| s.end).collect())?;
        let key_count = self.stage.key_schema.fields().len();
        let keys = (0..key_count)
            .map(|c| {
                let values: Vec<ScalarValue> =
                    done.iter().map(|(k, _)| self.keys[*k][c].clone()).collect();
                ScalarValue::iter_to_array(values)
            })
            .collect::<Result<Vec<_>>>()?;
        let mut values = Vec::new();
        for a in 0..self.stage.aggs.len() {
            let v = done
                .iter_mut()
                .map(|(_, s)| s.accs[a].evaluate())
                .collect::<Result<Vec<_>>>()?;
            values.push(ScalarValue::iter_to_array(v)?);
        }
        let mut columns = Vec::new();
        for g in &self.stage.layout {
            columns.push(match g {
                GroupOut::Start => Arc::clone(&starts),
                GroupOut::End => Arc::clone(&ends),
                GroupOut::Key(i) => Arc::clone(&keys[*i]),
            });
        }
        columns.extend(values);
        let columns = columns
            .into_iter()
            .zip(self.stage.output.fields())
            .map(|(c, f)| {
                if c.data_type() == f.data_type() {
                    Ok(c)
                } else {
                    Ok(cast(&c, f.data_type())?)
                }
            })
            .collect::<Result<Vec<_>>>()?;
        let options = RecordBatchOptions::new().with_row_count(Some(n));
        Ok(vec![RecordBatch::try_new_with_options(
            Arc::clone(&self.stage.output),
            columns,
            &options,
        )?])
    }

    /// Forgets every open session; returns how many there were.
    pub(crate) fn drop_open(&mut self) -> usize {
        let n = self.open_windows();
        for l in &mut self.sessions {
            l.clear();
        }
        n
    }

    /// Sessions open now.
    pub(crate) fn open_windows(&self) -> usize {
        self.sessions.iter().map(Vec::len).sum()
    }

    /// Emits every open session (the end of a bounded input); only their time counts as
    /// emitted for a later run with state.
    pub(crate) fn close_all(&mut self) -> Result<Vec<RecordBatch>> {
        let before = self.closed_through;
        let last = self
            .sessions
            .iter()
            .flatten()
            .map(|s| s.end)
            .max()
            .unwrap_or(before);
        let out = self.close_until(i64::MAX)?;
        self.closed_through = before.max(last);
        Ok(out)
    }

    /// Sessions ending at or before this time have been emitted.
    pub(crate) fn closed_through(&self) -> i64 {
        self.closed_through
    }

    /// The open sessions as Arrow IPC bytes: a row each (bounds, rows, key, state).
    pub(crate) fn snapshot(&mut self) -> Result<Vec<u8>> {
        let schema = Arc::clone(self.stage.snapshot_schema());
        let mut rows: Vec<Vec<ScalarValue>> = Vec::new();
        for (k, list) in self.sessions.iter_mut().enumerate() {
            for s in list.iter_mut() {
                let mut row = vec![
                    ScalarValue::Int64(Some(s.start)),
                    ScalarValue::Int64(Some(s.end)),
                    ScalarValue::UInt64(Some(s.rows)),
                ];
                row.extend(self.keys[k].iter().cloned());
                for acc in s.accs.iter_mut() {
                    row.extend(acc.state()?);
                }
                rows.push(row);
            }
        }
        // Taking the state may empty an accumulator: every session is rebuilt from the bytes,
        // the same path as a restart.
        let bytes = encode(&schema, &rows)?;
        self.restore(&bytes, self.closed_through)?;
        Ok(bytes)
    }

    /// Restores sessions from [`SessionWindows::snapshot`]'s bytes.
    pub(crate) fn restore(&mut self, bytes: &[u8], closed_through: i64) -> Result<()> {
        self.closed_through = closed_through;
        for l in &mut self.sessions {
            l.clear();
        }
        if bytes.is_empty() {
            return Ok(());
        }
        let reader = StreamReader::try_new(bytes, None)?;
        if reader.schema().fields() != self.stage.snapshot_schema().fields() {
            return Err(DataFusionError::Plan(
                "the state directory holds the windows of another query (its columns or \
                 aggregates differ); use a new 'state.dir' for a changed query"
                    .into(),
            ));
        }
        let key_count = self.stage.key_schema.fields().len();
        let widths = self.stage.state_widths();
        for b in reader {
            let b = b?;
            for r in 0..b.num_rows() {
                let start = b.column(0).as_primitive::<Int64Type>().value(r);
                let end = b.column(1).as_primitive::<Int64Type>().value(r);
                let rows = b.column(2).as_primitive::<UInt64Type>().value(r);
                let key = (0..key_count)
                    .map(|c| ScalarValue::try_from_array(b.column(3 + c), r))
                    .collect::<Result<Vec<_>>>()?;
                let k = self.key_index(key);
                let mut accs = self.accumulators()?;
                let mut at = 3 + key_count;
                for (a, acc) in accs.iter_mut().enumerate() {
                    let state: Vec<ArrayRef> = (at..at + widths[a])
                        .map(|c| b.column(c).slice(r, 1))
                        .collect();
                    acc.merge_batch(&state)?;
                    at += widths[a];
                }
                let list = &mut self.sessions[k];
                let pos = list.partition_point(|s| s.start < start);
                list.insert(
                    pos,
                    Session {
                        start,
                        end,
                        accs,
                        rows,
                    },
                );
            }
        }
        Ok(())
    }
}

fn encode(schema: &arrow::datatypes::SchemaRef, rows: &[Vec<ScalarValue>]) -> Result<Vec<u8>> {
    let mut bytes = Vec::new();
    let mut w = StreamWriter::try_new(&mut bytes, schema)?;
    if !rows.is_empty() {
        let columns = (0..schema.fields().len())
            .map(|c| {
                let values = rows.iter().map(|r| r[c].clone());
                let a = ScalarValue::iter_to_array(values)?;
                let want = schema.field(c).data_type();
                if a.data_type() == want {
                    Ok(a)
                } else {
                    Ok(cast(&a, want)?)
                }
            })
            .collect::<Result<Vec<_>>>()?;
        w.write(&RecordBatch::try_new(Arc::clone(schema), columns)?)?;
    }
    w.finish()?;
    drop(w);
    Ok(bytes)
}

fn evaluate(
    exprs: &[Arc<dyn datafusion::physical_expr::PhysicalExpr>],
    batch: &RecordBatch,
) -> Result<Vec<ArrayRef>> {
    exprs
        .iter()
        .map(|e| e.evaluate(batch)?.into_array(batch.num_rows()))
        .collect()
}
