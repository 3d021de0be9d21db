//! A continuous query, compiled, and the two loops that run it.
//!
//! ```text
//! reader -> Worker (lateness, windows, stateless steps, partial aggregation)
//!        -> Merge  (the source's watermark, merged windows emitted once, steps after)
//! ```
//!
//! Without state, each reader runs a [`Worker`] on a thread of its own and one [`Merge`] takes
//! their output (`crate::continuous::exec`). With state (exactly once), one thread runs a worker
//! and the merge together, and a step's commit records the merge's windows, the worker's event
//! times, the source positions and the step's file atomically (`crate::pipeline::steps`).

use std::sync::Arc;
use std::time::Instant;

use arrow::array::{Array, ArrayRef, AsArray, RecordBatch};
use arrow::compute::{cast, filter_record_batch};
use arrow::datatypes::{DataType, SchemaRef};
use datafusion::error::{DataFusionError, Result};

use super::aggregate::{AggregateStage, FinalWindows, PartialState, PartialWindows};
use super::assign::assign;
use super::ops::{apply_all, Op};
use super::session::SessionWindows;
use super::shards::ShardedWindows;
use super::time::{EventTime, NONE};
use super::WindowKind;
use crate::pipeline::live_source::LiveSource;
use crate::source::meta::MetaKind;
use crate::source::OnError;
use crate::source::WatermarkSpec;

/// A continuous query over one source, compiled from DataFusion's plan.
pub(crate) struct ContinuousQuery {
    /// The source.
    pub(crate) source: Arc<LiveSource>,
    /// The source's columns the query reads (the event-time column among them).
    pub(crate) read: Vec<usize>,
    /// Metadata columns read after them for the dead letters of late rows (their position).
    pub(crate) hidden: Vec<MetaKind>,
    /// The event-time column's index in `read`.
    pub(crate) time_in_read: usize,
    /// The event-time column's type (`window_start` and `window_end` have it too).
    pub(crate) time_type: DataType,
    /// How rows get their windows.
    pub(crate) window: WindowKind,
    /// The read columns, then `window_start` and `window_end`.
    pub(crate) windowed: SchemaRef,
    /// The columns of `windowed` the window table's scan gives (DataFusion's projection).
    pub(crate) scan_projection: Vec<usize>,
    /// The source's watermark; `None` when it declares none (a bounded run only).
    pub(crate) watermark: Option<WatermarkSpec>,
    /// The stateless steps before the aggregation (or all of them).
    pub(crate) pre: Vec<Op>,
    /// The windowed aggregation, if any.
    pub(crate) aggregate: Option<Arc<AggregateStage>>,
    /// The stateless steps after the aggregation.
    pub(crate) post: Vec<Op>,
    /// The query's output.
    pub(crate) schema: SchemaRef,
}

impl ContinuousQuery {
    /// The metadata columns a reader adds for the positions of late rows, when they go to a
    /// dead-letter file.
    pub(crate) fn hidden_for(source: &LiveSource) -> Vec<MetaKind> {
        if source.settings.on_error != OnError::DeadLetter || source.watermark.is_none() {
            return Vec::new();
        }
        match source.connector.name() {
            "kafka" => vec![MetaKind::Topic, MetaKind::Partition, MetaKind::Offset],
            _ => vec![MetaKind::File, MetaKind::Offset],
        }
    }

    fn session_gap(&self) -> Option<i64> {
        match self.window {
            WindowKind::Session { gap } => Some(gap),
            _ => None,
        }
    }
}

/// What a worker hands the merge.
pub(crate) enum Emit {
    /// Rows after the stateless steps (no aggregation, or session windows, which are
    /// aggregated by the merge).
    Rows(RecordBatch),
    /// A window's partial aggregate.
    Partial(PartialState),
    /// A window's partial aggregate split over the merge's shards, each part with its shard.
    Shards(Vec<(usize, PartialState)>),
}

/// One reader's share of a continuous query.
pub(crate) struct Worker {
    query: Arc<ContinuousQuery>,
    time: Option<EventTime>,
    partial: Option<PartialWindows>,
    /// The merge's shards (1: one thread merges).
    shards: usize,
    /// Rows found late since the last [`Worker::take_late`].
    late: u64,
}

impl Worker {
    /// A worker for one reader.
    pub(crate) fn new(query: &Arc<ContinuousQuery>) -> Self {
        Self::sharded(query, 1)
    }

    /// A worker for one reader, handing its windows to a merge of `shards` shards
    /// ([`Merge::sharded`]).
    pub(crate) fn sharded(query: &Arc<ContinuousQuery>, shards: usize) -> Self {
        let partial = match (&query.aggregate, query.session_gap()) {
            (Some(stage), None) => Some(PartialWindows::new(Arc::clone(stage))),
            _ => None,
        };
        Self {
            time: query
                .watermark
                .as_ref()
                .map(|w| EventTime::new(w.delay, w.idle_timeout)),
            query: Arc::clone(query),
            partial,
            shards,
            late: 0,
        }
    }

    /// Makes a channel known before its first row (it holds the watermark back until it
    /// delivers or goes idle).
    pub(crate) fn register(&mut self, channel: usize) {
        if let Some(t) = &mut self.time {
            t.register(channel);
        }
    }

    /// Takes one batch of the read columns from `channel`; `floor` is the source's published
    /// watermark. Pushes what goes to the merge.
    pub(crate) fn batch(
        &mut self,
        batch: RecordBatch,
        channel: usize,
        floor: i64,
        out: &mut Vec<Emit>,
    ) -> Result<()> {
        let q = Arc::clone(&self.query);
        let mut times: ArrayRef = cast(batch.column(q.time_in_read), &DataType::Int64)?;
        let (mut batch, hidden) = if q.hidden.is_empty() {
            (batch, Vec::new())
        } else {
            let n = q.read.len();
            let hidden = batch.columns()[n..].to_vec();
            (batch.project(&(0..n).collect::<Vec<_>>())?, hidden)
        };
        if let Some(t) = &mut self.time {
            let seen = t.observe(channel, &times, floor);
            if let Some(keep) = seen.keep {
                self.late += seen.late as u64;
                if !hidden.is_empty() {
                    self.dead_letter_late(&batch, &hidden, &keep)?;
                }
                batch = filter_record_batch(&batch, &keep)?;
                times = arrow::compute::filter(&times, &keep)?;
            }
        } else if times.null_count() > 0 {
            // Without a watermark nothing is late, but a row without an event time has no window.
            let keep = arrow::compute::is_not_null(&times)?;
            self.late += times.null_count() as u64;
            batch = filter_record_batch(&batch, &keep)?;
            times = arrow::compute::filter(&times, &keep)?;
        }
        if batch.num_rows() > 0 {
            let windowed = assign(q.window, &batch, &times, &q.time_type, &q.windowed)?;
            let scanned = windowed.project(&q.scan_projection)?;
            if let Some(rows) = apply_all(&q.pre, scanned)? {
                match &mut self.partial {
                    Some(p) => p.update(&rows)?,
                    None => out.push(Emit::Rows(rows)),
                }
            }
        }
        Ok(())
    }

    /// Writes the late rows of `batch` (`keep` false) to the dead-letter file, each with its
    /// position from the `hidden` metadata columns and the row as JSON.
    fn dead_letter_late(
        &self,
        batch: &RecordBatch,
        hidden: &[ArrayRef],
        keep: &arrow::array::BooleanArray,
    ) -> Result<()> {
        let Some(dl) = &self.query.source.settings.dead_letter else {
            return Ok(());
        };
        let mut lines = Vec::new();
        let mut encoder = weir_codec::JsonEncoder::new(batch.schema().fields())
            .map_err(|e| DataFusionError::External(Box::new(e)))?;
        let mut json = Vec::new();
        for i in (0..batch.num_rows()).filter(|&i| !keep.value(i)) {
            let mut position = serde_json::Map::new();
            for (kind, column) in self.query.hidden.iter().zip(hidden) {
                let value = match kind {
                    MetaKind::Offset => serde_json::json!(column
                        .as_primitive::<arrow::datatypes::Int64Type>()
                        .value(i)),
                    MetaKind::Partition => serde_json::json!(column
                        .as_primitive::<arrow::datatypes::Int32Type>()
                        .value(i)),
                    MetaKind::File | MetaKind::Topic => {
                        serde_json::json!(column.as_string::<i32>().value(i))
                    }
                    _ => continue,
                };
                let key = match kind {
                    MetaKind::Offset => "offset",
                    MetaKind::Partition => "partition",
                    MetaKind::File => "file",
                    _ => "topic",
                };
                position.insert(key.into(), value);
            }
            json.clear();
            encoder
                .encode_lines(&batch.slice(i, 1), &mut json)
                .map_err(|e| DataFusionError::External(Box::new(e)))?;
            let row: serde_json::Value =
                serde_json::from_slice(&json).unwrap_or(serde_json::Value::Null);
            lines.push((
                serde_json::Value::Object(position),
                "late: the row's event time is behind the watermark (its window has closed or \
                 its partition had moved past it by more than the delay)"
                    .to_string(),
                row,
            ));
        }
        dl.write_late(&self.query.source.name, lines)
            .map_err(|e| DataFusionError::External(Box::new(e)))
    }

    /// The reader's progress, after handing over the partial windows it has passed: the
    /// windows ending at or before its watermark, or every window when it is idle (it holds
    /// nothing back then). The merge must get the windows before the progress, which is
    /// computed once here so that the two agree.
    pub(crate) fn progress(&mut self, out: &mut Vec<Emit>) -> Result<Progress> {
        let watermark = self.watermark();
        self.hand_over(watermark, out)?;
        Ok(match watermark {
            Some(w) => Progress::At(w),
            None => Progress::Idle,
        })
    }

    /// The progress of a file reader with no block in hand: it holds nothing back, hands over
    /// every partial window, and reports the watermark of what it has read (see
    /// [`Progress::Drained`]). Without a declared watermark it holds everything, as
    /// [`Worker::progress`] does.
    pub(crate) fn drained(&mut self, out: &mut Vec<Emit>) -> Result<Progress> {
        let Some(time) = &self.time else {
            return self.progress(out);
        };
        let reached = time.reached();
        self.flush_all(out)?;
        Ok(reached.map_or(Progress::Idle, Progress::Drained))
    }

    /// Hands over every partial window (the end of the input, or a step's commit).
    pub(crate) fn flush_all(&mut self, out: &mut Vec<Emit>) -> Result<()> {
        self.hand_over(None, out)
    }

    /// Hands over the partial windows ending at or before `watermark` (every one with
    /// `None`), split by shard here, on the reader's thread, when the merge has shards.
    fn hand_over(&mut self, watermark: Option<i64>, out: &mut Vec<Emit>) -> Result<()> {
        let Some(p) = &mut self.partial else {
            return Ok(());
        };
        if p.is_empty() {
            return Ok(());
        }
        for state in p.take_until(watermark)? {
            out.push(if self.shards > 1 {
                Emit::Shards(state.by_shard(self.shards)?)
            } else {
                Emit::Partial(state)
            });
        }
        Ok(())
    }

    /// The reader's watermark: `Some(NONE)` holds everything back, `None` is idle (holds
    /// nothing back). Without a declared watermark it holds everything until the end.
    fn watermark(&self) -> Option<i64> {
        match &self.time {
            Some(t) => t.watermark(Instant::now()),
            None => Some(NONE),
        }
    }

    /// Rows found late since the last call.
    pub(crate) fn take_late(&mut self) -> u64 {
        std::mem::take(&mut self.late)
    }

    /// The event times of the worker's channels (for a checkpoint).
    pub(crate) fn maxima(&self) -> Vec<(usize, i64)> {
        self.time
            .as_ref()
            .map(EventTime::maxima)
            .unwrap_or_default()
    }

    /// Restores the event times of a checkpoint.
    pub(crate) fn restore(&mut self, maxima: &[(usize, i64)]) {
        if let Some(t) = &mut self.time {
            t.restore(maxima);
        }
    }
}

/// The windows the merge keeps.
enum Windows {
    Fixed(FinalWindows),
    /// Fixed windows merged on several threads by group.
    Sharded(ShardedWindows),
    Session(SessionWindows),
}

/// Where a reader is, as the merge sees it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Progress {
    /// Its watermark.
    At(i64),
    /// All its channels are idle: it holds nothing back.
    Idle,
    /// A reader of files with no block in hand holds nothing back, and everything it read is
    /// at this watermark. Blocks go to the readers in file order, so a block read later comes
    /// after every block already read: when no reader holds a block, the source's watermark
    /// is the largest of theirs, as one reader of the whole file would have it. (A Kafka
    /// partition's silence says nothing of time; its readers go `Idle` instead.)
    Drained(i64),
    /// It has read everything.
    Done,
}

/// The merge: the source's watermark over its readers, the merged windows, the steps after.
pub(crate) struct Merge {
    query: Arc<ContinuousQuery>,
    windows: Option<Windows>,
    readers: Vec<Progress>,
    watermark: i64,
    /// Rows of windows that came after the window was emitted.
    late: u64,
}

/// What a snapshot of a merge holds besides the windows.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub(crate) struct SnapshotHeader {
    /// The source's watermark.
    pub(crate) watermark: i64,
    /// Windows ending at or before this were emitted.
    pub(crate) closed_through: i64,
    /// The readers' channels and their largest event times.
    pub(crate) maxima: Vec<(usize, i64)>,
    /// Open windows.
    pub(crate) open_windows: usize,
    /// Late rows so far, over every run with this state.
    pub(crate) late_rows: u64,
}

impl Merge {
    /// A merge over `readers` readers, on the calling thread.
    pub(crate) fn new(query: &Arc<ContinuousQuery>, readers: usize) -> Self {
        let windows = query
            .aggregate
            .as_ref()
            .map(|stage| match query.session_gap() {
                Some(gap) => Windows::Session(SessionWindows::new(Arc::clone(stage), gap)),
                None => Windows::Fixed(FinalWindows::new(Arc::clone(stage))),
            });
        Self::with(query, readers, windows)
    }

    /// A merge over `readers` readers that merges fixed windows on `shards` threads of its own
    /// when `shards` is above 1 (the workers split their state as many ways:
    /// [`Worker::sharded`]). Session windows and rows without an aggregation stay on the
    /// calling thread.
    pub(crate) fn sharded(
        query: &Arc<ContinuousQuery>,
        readers: usize,
        shards: usize,
    ) -> Result<Self> {
        if shards <= 1 || query.session_gap().is_some() {
            return Ok(Self::new(query, readers));
        }
        let windows = match &query.aggregate {
            Some(stage) => Some(Windows::Sharded(ShardedWindows::new(
                stage,
                shards,
                &query.source.name,
            )?)),
            None => None,
        };
        Ok(Self::with(query, readers, windows))
    }

    fn with(query: &Arc<ContinuousQuery>, readers: usize, windows: Option<Windows>) -> Self {
        Self {
            query: Arc::clone(query),
            windows,
            readers: vec![Progress::At(NONE); readers],
            watermark: NONE,
            late: 0,
        }
    }

    /// How many threads merge the windows besides the calling one, and their busy time summed
    /// (zero when the calling thread merges them).
    pub(crate) fn shards(&self) -> (usize, std::time::Duration) {
        match &self.windows {
            Some(Windows::Sharded(s)) => (s.shards(), s.busy()),
            _ => (0, std::time::Duration::ZERO),
        }
    }

    /// The source's watermark as published to the readers.
    pub(crate) fn watermark(&self) -> i64 {
        self.watermark
    }

    /// Takes what a worker handed over; pushes output rows.
    pub(crate) fn take(&mut self, e: Emit, out: &mut Vec<RecordBatch>) -> Result<()> {
        match (e, &mut self.windows) {
            (Emit::Partial(p), Some(Windows::Fixed(w))) => self.late += w.merge(p)?,
            (Emit::Shards(parts), Some(Windows::Sharded(w))) => {
                let mut closed = Vec::new();
                self.late += w.merge(parts, &mut closed)?;
                self.emit(closed, out)?;
            }
            (Emit::Rows(rows), Some(Windows::Session(s))) => {
                let start = self
                    .query
                    .aggregate
                    .as_ref()
                    .map_or(0, |stage| stage.start_col);
                let times = cast(rows.column(start), &DataType::Int64)?;
                s.update(&rows, &times)?;
            }
            (Emit::Rows(rows), None) => {
                if let Some(r) = apply_all(&self.query.post, rows)? {
                    out.push(r);
                }
            }
            _ => {
                return Err(DataFusionError::Internal(
                    "a continuous query's worker and merge disagree on its windows".into(),
                ))
            }
        }
        Ok(())
    }

    /// Records a reader's progress, moves the watermark, and emits the windows it passed.
    pub(crate) fn progress(
        &mut self,
        reader: usize,
        p: Progress,
        out: &mut Vec<RecordBatch>,
    ) -> Result<()> {
        if let Some(Windows::Sharded(w)) = &mut self.windows {
            // Rows of earlier closes the shards have answered since, even when the watermark
            // stays (readers that idle report progress and nothing else).
            let mut closed = Vec::new();
            w.answered(&mut closed)?;
            self.emit(closed, out)?;
        }
        if let Some(slot) = self.readers.get_mut(reader) {
            if *slot != Progress::Done {
                *slot = p;
            }
        }
        let active = self.readers.iter().filter_map(|r| match r {
            Progress::At(w) => Some(*w),
            _ => None,
        });
        let Some(min) = active.min() else {
            // Nobody holds the watermark: every reader is idle, drained or done. Idle readers
            // do not move it (no data says nothing about time); drained file readers move it
            // to the largest of theirs; the end closes what is left.
            let drained = self.readers.iter().filter_map(|r| match r {
                Progress::Drained(w) => Some(*w),
                _ => None,
            });
            if let Some(max) = drained.max() {
                if max > self.watermark {
                    self.watermark = max;
                    self.close(out)?;
                }
            }
            return Ok(());
        };
        if min > self.watermark {
            self.watermark = min;
            self.close(out)?;
        }
        Ok(())
    }

    fn close(&mut self, out: &mut Vec<RecordBatch>) -> Result<()> {
        let batches = match &mut self.windows {
            Some(Windows::Fixed(w)) => without_bounds(w.close_until(self.watermark)?),
            Some(Windows::Sharded(w)) => {
                let mut closed = Vec::new();
                w.close_until(self.watermark, &mut closed)?;
                closed
            }
            Some(Windows::Session(s)) => s.close_until(self.watermark)?,
            None => Vec::new(),
        };
        self.emit(batches, out)
    }

    fn emit(&mut self, batches: Vec<RecordBatch>, out: &mut Vec<RecordBatch>) -> Result<()> {
        for b in batches {
            if let Some(r) = apply_all(&self.query.post, b)? {
                out.push(r);
            }
        }
        Ok(())
    }

    /// The end of every reader: a bounded input closes every window; a stop (follow mode)
    /// without state drops the open ones and returns how many.
    pub(crate) fn end(&mut self, bounded: bool, out: &mut Vec<RecordBatch>) -> Result<usize> {
        if bounded {
            // The watermark stays where the data put it: with state, the next run goes on
            // from there, and only the windows emitted here are closed to it.
            let batches = match &mut self.windows {
                Some(Windows::Fixed(w)) => without_bounds(w.close_all()?),
                Some(Windows::Sharded(w)) => {
                    let mut closed = Vec::new();
                    w.close_all(&mut closed)?;
                    closed
                }
                Some(Windows::Session(s)) => s.close_all()?,
                None => Vec::new(),
            };
            self.emit(batches, out)?;
            return Ok(0);
        }
        Ok(match &mut self.windows {
            Some(Windows::Fixed(w)) => w.drop_open(),
            Some(Windows::Sharded(w)) => {
                // The windows closed before the stop are emitted; those still open dropped.
                let mut closed = Vec::new();
                let dropped = w.drop_open(&mut closed)?;
                self.emit(closed, out)?;
                dropped
            }
            Some(Windows::Session(s)) => s.drop_open(),
            None => 0,
        })
    }

    /// Rows found late here since the last call.
    pub(crate) fn take_late(&mut self) -> u64 {
        std::mem::take(&mut self.late)
    }

    /// Open windows now.
    pub(crate) fn open_windows(&self) -> usize {
        match &self.windows {
            Some(Windows::Fixed(w)) => w.open_windows(),
            Some(Windows::Sharded(w)) => w.open_windows(),
            Some(Windows::Session(s)) => s.open_windows(),
            None => 0,
        }
    }

    /// The merge's state for a checkpoint: a header (JSON: the watermark, what was emitted, the
    /// readers' event times) and the open windows (Arrow IPC).
    pub(crate) fn snapshot(
        &mut self,
        maxima: Vec<(usize, i64)>,
        late_rows: u64,
    ) -> Result<Vec<u8>> {
        let (windows, closed) = match &mut self.windows {
            Some(Windows::Fixed(w)) => (w.snapshot()?, w.closed_through()),
            Some(Windows::Session(s)) => (s.snapshot()?, s.closed_through()),
            Some(Windows::Sharded(_)) => return Err(unsharded()),
            None => (Vec::new(), NONE),
        };
        let header = SnapshotHeader {
            watermark: self.watermark,
            closed_through: closed,
            maxima,
            open_windows: self.open_windows(),
            late_rows,
        };
        Ok(encode_snapshot(&header, &windows))
    }

    /// Restores [`Merge::snapshot`]'s bytes; returns their header (the readers' event times
    /// and the late rows so far).
    pub(crate) fn restore(&mut self, bytes: &[u8]) -> Result<SnapshotHeader> {
        if bytes.is_empty() {
            return Ok(SnapshotHeader::default());
        }
        let (header, windows) = decode_snapshot(bytes)?;
        self.watermark = header.watermark;
        match &mut self.windows {
            Some(Windows::Fixed(w)) => w.restore(windows, header.closed_through)?,
            Some(Windows::Session(s)) => s.restore(windows, header.closed_through)?,
            Some(Windows::Sharded(_)) => return Err(unsharded()),
            None => {}
        }
        Ok(header)
    }
}

/// The rows of closed windows, their bounds dropped.
fn without_bounds(closed: Vec<(super::aggregate::Bounds, RecordBatch)>) -> Vec<RecordBatch> {
    closed.into_iter().map(|(_, rows)| rows).collect()
}

/// Checkpoints run on one thread (reads, worker and merge in step), so a merge over shards
/// has no snapshot.
fn unsharded() -> DataFusionError {
    DataFusionError::Internal("a window merge over several threads keeps no snapshot".into())
}

/// `[u32 header length][header JSON][windows]`.
fn encode_snapshot(header: &SnapshotHeader, windows: &[u8]) -> Vec<u8> {
    let json = serde_json::json!({
        "watermark": header.watermark,
        "closed_through": header.closed_through,
        "open_windows": header.open_windows,
        "late_rows": header.late_rows,
        "maxima": header.maxima.iter().map(|(c, m)| [*c as i64, *m]).collect::<Vec<_>>(),
    })
    .to_string();
    let mut out = Vec::with_capacity(4 + json.len() + windows.len());
    out.extend_from_slice(&(json.len() as u32).to_le_bytes());
    out.extend_from_slice(json.as_bytes());
    out.extend_from_slice(windows);
    out
}

/// The header and the window bytes of a snapshot.
pub(crate) fn decode_snapshot(bytes: &[u8]) -> Result<(SnapshotHeader, &[u8])> {
    let bad = || DataFusionError::Plan("the state directory's window state is damaged".into());
    let len = bytes
        .get(..4)
        .map(|b| u32::from_le_bytes([b[0], b[1], b[2], b[3]]) as usize)
        .ok_or_else(bad)?;
    let json = bytes.get(4..4 + len).ok_or_else(bad)?;
    let v: serde_json::Value = serde_json::from_slice(json).map_err(|_| bad())?;
    let int = |k: &str| v[k].as_i64().ok_or_else(bad);
    let maxima = v["maxima"]
        .as_array()
        .ok_or_else(bad)?
        .iter()
        .map(|p| Some((usize::try_from(p[0].as_i64()?).ok()?, p[1].as_i64()?)))
        .collect::<Option<Vec<_>>>()
        .ok_or_else(bad)?;
    Ok((
        SnapshotHeader {
            watermark: int("watermark")?,
            closed_through: int("closed_through")?,
            maxima,
            open_windows: v["open_windows"].as_u64().unwrap_or(0) as usize,
            late_rows: v["late_rows"].as_u64().unwrap_or(0),
        },
        &bytes[4 + len..],
    ))
}
