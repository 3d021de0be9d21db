//! What a source counts over its scans: messages, bytes, rows, bad messages, per-partition
//! figures, where its file readers spent their time, and its state's last committed figures.
//! Written by the pipeline once per batch (never per message), read by the run's report and the
//! metrics collector at scrape time.

use std::sync::atomic::AtomicU64;
use std::sync::{Arc, Mutex};

use weir_dedup::{DedupStats, StateStore};

use super::SourceMetrics;

/// Counters of one source over all its scans (updated once per batch, not per message).
#[derive(Debug)]
pub(crate) struct SourceStats {
    /// The source's name.
    pub(crate) name: String,
    /// Messages read (good and bad).
    pub(crate) messages: AtomicU64,
    /// Message bytes read (without framing).
    pub(crate) bytes: AtomicU64,
    /// Messages decoded into rows.
    pub(crate) decoded: AtomicU64,
    /// Bad messages skipped.
    pub(crate) skipped: AtomicU64,
    /// Bad messages written to the dead-letter file.
    pub(crate) dead_lettered: AtomicU64,
    /// Rows behind the watermark, dropped before their window.
    pub(crate) late: AtomicU64,
    /// Windows still open when a run without state stopped (their rows are in no output).
    pub(crate) windows_dropped: AtomicU64,
    /// Nanoseconds the merge of a continuous query's windows was busy, on its one thread (the
    /// time it waited for the readers left out); with merge shards, the thread that runs the
    /// watermark and hands the windows to them.
    pub(crate) window_merge_ns: AtomicU64,
    /// The threads a continuous query's windows were merged on besides that one (0: none).
    pub(crate) window_shards: AtomicU64,
    /// Nanoseconds those threads were busy, summed over them.
    pub(crate) window_shards_ns: AtomicU64,
    /// Per-partition counters, readiness and watermark, for the metrics (`crate::metrics`).
    pub(crate) metrics: SourceMetrics,
    /// Schema ids met with the schema registry (`'schema.registry.url'`), fetched or not.
    pub(crate) schema_ids: AtomicU64,
    /// Decode plans compiled for those schema ids.
    pub(crate) schema_plans: AtomicU64,
    /// Where the file readers spent their time.
    pub(crate) stages: Arc<ReadStages>,
    /// With `'state.dir'`: the state's figures as of its last durable commit (what `weir stats`
    /// reads back), for the run's report and the metrics; `None` before the state opens.
    state: Mutex<Option<DedupStats>>,
}

impl SourceStats {
    /// Zero counters of source `name`.
    pub(crate) fn new(name: &str) -> Self {
        Self {
            name: name.to_string(),
            messages: AtomicU64::default(),
            bytes: AtomicU64::default(),
            decoded: AtomicU64::default(),
            skipped: AtomicU64::default(),
            dead_lettered: AtomicU64::default(),
            late: AtomicU64::default(),
            windows_dropped: AtomicU64::default(),
            window_merge_ns: AtomicU64::default(),
            window_shards: AtomicU64::default(),
            window_shards_ns: AtomicU64::default(),
            metrics: SourceMetrics::default(),
            schema_ids: AtomicU64::default(),
            schema_plans: AtomicU64::default(),
            stages: Arc::default(),
            state: Mutex::default(),
        }
    }

    /// Keeps `store`'s figures as of its last commit (called when the store opens and when
    /// each commit is found durable: the figures `weir stats` reads back from that commit).
    pub(crate) fn remember_state(&self, store: &StateStore) {
        *self.state.lock().unwrap_or_else(|e| e.into_inner()) = Some(store.committed_stats());
    }

    /// The state's figures as last remembered, if the source has state and it was opened.
    pub(crate) fn state_figures(&self) -> Option<DedupStats> {
        self.state.lock().unwrap_or_else(|e| e.into_inner()).clone()
    }
}

/// Where the readers of a file source spent their time, in nanoseconds summed over the
/// readers (added once per block or batch).
#[derive(Debug, Default)]
pub(crate) struct ReadStages {
    /// Reading ranges of the files, in parallel.
    pub(crate) read_ns: AtomicU64,
    /// Walking ahead through each range's frame headers before its turn, in parallel.
    pub(crate) ahead_ns: AtomicU64,
    /// Walking the frame headers to find where each range's first frame begins: the one stage
    /// taken in turn.
    pub(crate) framing_ns: AtomicU64,
    /// Waiting for that turn.
    pub(crate) waiting_ns: AtomicU64,
    /// All of the readers' work for their batches: the above and decoding.
    pub(crate) reader_ns: AtomicU64,
}
