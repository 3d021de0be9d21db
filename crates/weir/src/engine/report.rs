//! What a run did: the counters of every source and sink, and the state statistics.

use std::path::PathBuf;
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::Duration;

use super::Engine;
use crate::error::EngineError;

/// What one source did during a run.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SourceReport {
    /// The source.
    pub name: String,
    /// Messages read.
    pub messages: u64,
    /// Message bytes read.
    pub bytes: u64,
    /// Messages decoded into rows.
    pub decoded: u64,
    /// Bad messages skipped.
    pub skipped: u64,
    /// Bad messages dead-lettered.
    pub dead_lettered: u64,
    /// Rows behind the watermark, dropped before their window.
    pub late: u64,
    /// Windows still open when a run without state stopped.
    pub windows_dropped: u64,
    /// Schema ids met with the schema registry (fetched or not).
    pub schema_ids: u64,
    /// Decode plans compiled for them.
    pub schema_plans: u64,
    /// Where a file source's readers spent their time (zero for Kafka sources).
    pub stages: ReaderTimes,
    /// The time the merge of the source's continuous queries was busy on its one thread (zero
    /// without a continuous query, or with `'state.dir'`, where one thread reads and merges).
    /// With [`SourceReport::window_shards`], that thread runs the watermark and hands the
    /// windows to the shards.
    pub window_merge: Duration,
    /// The threads that merged the windows by group besides that one, on 5 readers or more
    /// (0: none).
    pub window_shards: usize,
    /// The time those threads were busy, summed over them.
    pub window_shards_busy: Duration,
}

/// Where the readers of a file source spent their time, summed over the readers.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct ReaderTimes {
    /// Reading ranges of the files (in parallel).
    pub read: Duration,
    /// Chaining through each range's frame headers before its turn (in parallel), so that the
    /// walk in turn is short.
    pub walk_ahead: Duration,
    /// Finding where each range's first frame begins: the stage taken in turn, range after
    /// range, so the part of a run that does not spread over cores.
    pub framing: Duration,
    /// Waiting for the turn at framing.
    pub waiting: Duration,
    /// Decoding messages into rows (the readers' remaining time).
    pub decoding: Duration,
}

/// What one sink wrote during a run.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SinkReport {
    /// The sink.
    pub name: String,
    /// Rows written.
    pub rows: u64,
    /// Its file (or directory of step files), if any.
    pub path: Option<PathBuf>,
}

/// Reads the counters of an engine's sources from another thread (for a progress line).
#[derive(Clone)]
pub struct SourceStatsHandle(crate::metrics::SourceStatsTable);

impl SourceStatsHandle {
    /// The counters of every source so far.
    pub fn snapshot(&self) -> Vec<SourceReport> {
        self.0
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .iter()
            .map(|s| SourceReport {
                name: s.name.clone(),
                messages: s.messages.load(Ordering::Relaxed),
                bytes: s.bytes.load(Ordering::Relaxed),
                decoded: s.decoded.load(Ordering::Relaxed),
                skipped: s.skipped.load(Ordering::Relaxed),
                dead_lettered: s.dead_lettered.load(Ordering::Relaxed),
                late: s.late.load(Ordering::Relaxed),
                windows_dropped: s.windows_dropped.load(Ordering::Relaxed),
                schema_ids: s.schema_ids.load(Ordering::Relaxed),
                schema_plans: s.schema_plans.load(Ordering::Relaxed),
                stages: reader_times(&s.stages),
                window_merge: Duration::from_nanos(s.window_merge_ns.load(Ordering::Relaxed)),
                window_shards: s.window_shards.load(Ordering::Relaxed) as usize,
                window_shards_busy: Duration::from_nanos(
                    s.window_shards_ns.load(Ordering::Relaxed),
                ),
            })
            .collect()
    }
}

fn reader_times(s: &crate::metrics::ReadStages) -> ReaderTimes {
    let ns = |c: &std::sync::atomic::AtomicU64| c.load(Ordering::Relaxed);
    let (read, ahead) = (ns(&s.read_ns), ns(&s.ahead_ns));
    let (framing, waiting) = (ns(&s.framing_ns), ns(&s.waiting_ns));
    let decoding = ns(&s.reader_ns).saturating_sub(read + ahead + framing + waiting);
    ReaderTimes {
        read: Duration::from_nanos(read),
        walk_ahead: Duration::from_nanos(ahead),
        framing: Duration::from_nanos(framing),
        waiting: Duration::from_nanos(waiting),
        decoding: Duration::from_nanos(decoding),
    }
}

impl Engine {
    /// What the metrics endpoint reads (see [`crate::MetricsServer`]): every source and sink of
    /// this engine, as they are when scraped.
    pub fn metrics_handle(&self) -> crate::metrics::MetricsHandle {
        crate::metrics::MetricsHandle {
            sources: Arc::clone(&self.source_stats),
            sinks: Arc::clone(&self.sink_metrics),
        }
    }

    /// A handle that reads the source counters from another thread.
    pub fn source_stats_handle(&self) -> SourceStatsHandle {
        SourceStatsHandle(Arc::clone(&self.source_stats))
    }

    /// The counters of every source so far.
    pub fn source_reports(&self) -> Vec<SourceReport> {
        self.source_stats_handle().snapshot()
    }

    /// The state statistics of every source with `'state.dir'` that was read in this run.
    pub fn state_reports(&self) -> Vec<(String, weir_dedup::DedupStats)> {
        self.sources
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .iter()
            .filter_map(|c| Some((c.name.clone(), c.stats.state_figures()?)))
            .collect()
    }

    /// Completes every sink (file footers) and reports what each wrote. A sink that fails does
    /// not keep the others from being completed: the first error is returned after them all.
    pub async fn finish(&self) -> Result<Vec<SinkReport>, EngineError> {
        let sinks: Vec<_> = self
            .sinks
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .iter()
            .map(|(n, s)| (n.clone(), Arc::clone(s)))
            .collect();
        let mut reports = Vec::new();
        let mut first_error = None;
        for (name, state) in sinks {
            let mut st = state.lock().await;
            if let Err(source) = st.finish().await {
                first_error.get_or_insert(EngineError::Sink {
                    sink: name,
                    source: Box::new(source),
                });
                continue;
            }
            reports.push(SinkReport {
                name,
                rows: st.rows,
                path: st.settings.path.clone(),
            });
        }
        match first_error {
            Some(e) => Err(e),
            None => Ok(reports),
        }
    }
}

/// The window state a continuous query committed with its last step (shown by `weir stats`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct WindowStateReport {
    /// The source's watermark, in nanoseconds since the epoch (`i64::MIN` before any row).
    pub watermark: i64,
    /// Windows ending at or before this time (nanoseconds) have been emitted.
    pub closed_through: i64,
    /// Windows open, with their partial aggregates, in the checkpoint.
    pub open_windows: usize,
    /// Rows dropped as late over every run with this state.
    pub late_rows: u64,
    /// The largest event time (nanoseconds) read from each channel: a Kafka partition, or 0 for
    /// a file source.
    pub event_times: Vec<(usize, i64)>,
}

impl WindowStateReport {
    /// Reads the summary from a checkpoint's operator state; `None` when it holds no windows
    /// or is not a continuous query's state.
    pub fn from_state(bytes: &[u8]) -> Option<Self> {
        if bytes.is_empty() {
            return None;
        }
        let (h, _) = crate::pipeline::window::query::decode_snapshot(bytes).ok()?;
        Some(Self {
            watermark: h.watermark,
            closed_through: h.closed_through,
            open_windows: h.open_windows,
            late_rows: h.late_rows,
            event_times: h.maxima,
        })
    }
}
