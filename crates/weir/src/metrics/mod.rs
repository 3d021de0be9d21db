//! Metrics: what a running engine exposes to Prometheus, and the health answers.
//!
//! Nothing here sits on the hot path. The pipeline keeps its counters where it already did
//! (plain fields per message, published to atomics once per batch; the Kafka consumer's
//! per-partition atomics once per fetch response; the state statistics once per commit), and
//! [`WeirCollector`] reads them when Prometheus scrapes: a `prometheus-client` custom collector,
//! so no counter is copied into a registry on the way. Every series is documented in the
//! README (`## Metrics`).

mod process;
pub mod server;
mod source_stats;

pub(crate) use self::source_stats::{ReadStages, SourceStats};

use std::fmt;
use std::sync::atomic::{AtomicBool, AtomicI64, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{SystemTime, UNIX_EPOCH};

use prometheus_client::collector::Collector;
use prometheus_client::encoding::{DescriptorEncoder, EncodeMetric, NoLabelSet};
use prometheus_client::metrics::counter::ConstCounter;
use prometheus_client::metrics::gauge::ConstGauge;
use prometheus_client::metrics::info::Info;
use prometheus_client::metrics::MetricType;
use prometheus_client::registry::Registry;
use weir_kafka::{Histogram, PartitionStats};

/// The counters of one partition of a source: a Kafka partition, or a file.
#[derive(Debug, Default)]
pub(crate) struct PartitionMetrics {
    /// The `partition` label: the Kafka partition id, or the file's path.
    pub(crate) label: String,
    /// Messages read (good and bad).
    pub(crate) messages: AtomicU64,
    /// Message bytes read.
    pub(crate) bytes: AtomicU64,
    /// Messages decoded into rows.
    pub(crate) decoded: AtomicU64,
    /// Bad messages skipped.
    pub(crate) skipped: AtomicU64,
    /// Bad messages dead-lettered.
    pub(crate) dead_lettered: AtomicU64,
    /// The consumer's statistics of a Kafka partition.
    pub(crate) kafka: Option<Arc<PartitionStats>>,
    /// A file's decode time per batch (a Kafka partition's is the consumer's delivery time).
    pub(crate) decode: Histogram,
}

/// The metrics of one source beyond its totals: its partitions, whether it is ready, and its
/// watermark.
#[derive(Debug)]
pub(crate) struct SourceMetrics {
    partitions: Mutex<Vec<Arc<PartitionMetrics>>>,
    /// Set once a reader of the source has connected and its first read returned.
    pub(crate) ready: AtomicBool,
    /// Readers of the source that lost their broker and are retrying: the source is not ready
    /// while any is.
    pub(crate) failing: AtomicUsize,
    /// The watermark of a continuous query over the source (ns since the epoch; `i64::MIN`
    /// before any).
    pub(crate) watermark: AtomicI64,
    /// The consumer group member's figures, once the source joined a group.
    group: Mutex<Option<Arc<GroupMetrics>>>,
}

/// What a source in a consumer group reports of its membership.
#[derive(Debug, Default)]
pub(crate) struct GroupMetrics {
    /// The member's epoch (consumer protocol) or generation (classic).
    pub(crate) epoch: AtomicI64,
    /// The partitions the member reads now.
    pub(crate) partitions: AtomicI64,
    /// The assignments the member was given.
    pub(crate) rebalances: AtomicU64,
    /// Partitions whose dedup keys were restored from their key files.
    pub(crate) restores: AtomicU64,
    /// Time spent restoring them, in microseconds.
    pub(crate) restore_micros: AtomicU64,
    /// Bytes of key files read by restores.
    pub(crate) restored_bytes: AtomicU64,
    /// Dedup keys held for the partitions read now.
    pub(crate) state_keys: AtomicI64,
    /// Open windows held for the partitions read now.
    pub(crate) state_windows: AtomicI64,
    /// Dedup keys found in two partitions this member holds (one key checked a batch).
    pub(crate) split_keys: AtomicU64,
    /// By partition this member took up: seconds from the last commit of its offsets (by any
    /// member) to this member reading it, as of its last take-up.
    pub(crate) unowned: Mutex<std::collections::BTreeMap<i32, f64>>,
}

impl Default for SourceMetrics {
    fn default() -> Self {
        Self {
            partitions: Mutex::default(),
            ready: AtomicBool::new(false),
            failing: AtomicUsize::new(0),
            watermark: AtomicI64::new(i64::MIN),
            group: Mutex::default(),
        }
    }
}

impl SourceMetrics {
    /// The figures of the source's consumer group member (created at the first call).
    pub(crate) fn join_group(&self) -> Arc<GroupMetrics> {
        let mut g = self.group.lock().unwrap_or_else(|e| e.into_inner());
        Arc::clone(g.get_or_insert_with(Arc::default))
    }

    fn group(&self) -> Option<Arc<GroupMetrics>> {
        self.group.lock().unwrap_or_else(|e| e.into_inner()).clone()
    }

    /// Read once, and no reader retrying a lost broker now.
    pub(crate) fn is_ready(&self) -> bool {
        self.ready.load(Ordering::Relaxed) && self.failing.load(Ordering::Relaxed) == 0
    }

    /// The counters of Kafka partition `p` (created at the first call; later consumers of the
    /// same partition carry on with the same ones).
    pub(crate) fn kafka(&self, p: i32) -> Arc<PartitionMetrics> {
        let label = p.to_string();
        self.get_or_add(&label, || PartitionMetrics {
            label: label.clone(),
            kafka: Some(Arc::default()),
            ..PartitionMetrics::default()
        })
    }

    /// The counters of the file `path`.
    pub(crate) fn file(&self, path: &str) -> Arc<PartitionMetrics> {
        self.get_or_add(path, || PartitionMetrics {
            label: path.to_string(),
            ..PartitionMetrics::default()
        })
    }

    fn get_or_add(
        &self,
        label: &str,
        make: impl FnOnce() -> PartitionMetrics,
    ) -> Arc<PartitionMetrics> {
        let mut parts = self.partitions.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(p) = parts.iter().find(|p| p.label == label) {
            return Arc::clone(p);
        }
        let p = Arc::new(make());
        parts.push(Arc::clone(&p));
        p
    }

    /// Every partition seen so far.
    pub(crate) fn partitions(&self) -> Vec<Arc<PartitionMetrics>> {
        self.partitions
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .clone()
    }
}

/// The counters of one sink.
#[derive(Debug, Default)]
pub(crate) struct SinkMetrics {
    /// Rows written.
    pub(crate) rows: AtomicU64,
    /// Bytes of completed step files (an exactly-once sink).
    pub(crate) bytes: AtomicU64,
    /// Files completed (an exactly-once sink's step files).
    pub(crate) files: AtomicU64,
    /// From a step's end to its commit handed to the state (sealing the file: footer, fsync,
    /// rename; then the state commit, which first waits for the previous one to be durable).
    pub(crate) commit: Histogram,
    /// The last committed step.
    pub(crate) step: AtomicU64,
    /// The sink's file, for a sink that writes one file as rows come (its size is its bytes).
    pub(crate) path: Mutex<Option<std::path::PathBuf>>,
}

/// Every source's counters, shared by the engine and the collector.
pub(crate) type SourceStatsTable = Arc<Mutex<Vec<Arc<SourceStats>>>>;

/// Every sink's counters, by sink name, shared by the engine and the collector.
pub(crate) type SinkTable = Arc<Mutex<Vec<(String, Arc<SinkMetrics>)>>>;

/// What the collector reads: the engine's sources and sinks.
#[derive(Clone)]
pub struct MetricsHandle {
    pub(crate) sources: SourceStatsTable,
    pub(crate) sinks: SinkTable,
}

impl fmt::Debug for MetricsHandle {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("MetricsHandle").finish_non_exhaustive()
    }
}

impl MetricsHandle {
    fn sources(&self) -> Vec<Arc<SourceStats>> {
        self.sources
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .clone()
    }

    fn sinks(&self) -> Vec<(String, Arc<SinkMetrics>)> {
        self.sinks.lock().unwrap_or_else(|e| e.into_inner()).clone()
    }

    /// True when every source has connected and read (a first batch, or found nothing to
    /// read yet) and none has lost its broker since; false before any source is defined.
    pub fn ready(&self) -> bool {
        let sources = self.sources();
        !sources.is_empty() && sources.iter().all(|s| s.metrics.is_ready())
    }

    /// The sources that are not ready, by name.
    pub fn not_ready(&self) -> Vec<String> {
        self.sources()
            .iter()
            .filter(|s| !s.metrics.is_ready())
            .map(|s| s.name.clone())
            .collect()
    }

    /// Every series in the OpenMetrics text format (what `/metrics` serves).
    pub fn render(&self) -> String {
        let mut registry = Registry::default();
        registry.register_collector(Box::new(WeirCollector(self.clone())));
        let mut out = String::new();
        // Writing into a String cannot fail.
        let _ = prometheus_client::encoding::text::encode(&mut out, &registry);
        out
    }
}

/// Reads weir's counters at scrape time.
struct WeirCollector(MetricsHandle);

impl fmt::Debug for WeirCollector {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("WeirCollector")
    }
}

type Labels = Vec<(&'static str, String)>;

/// A label value escaped as the exposition formats require (`\\`, `\"`, `\n`).
fn escape_label(v: &str) -> String {
    let mut out = String::with_capacity(v.len() + 2);
    for c in v.chars() {
        match c {
            '\\' => out.push_str("\\\\"),
            '"' => out.push_str("\\\""),
            '\n' => out.push_str("\\n"),
            c => out.push(c),
        }
    }
    out
}

/// One metric family being assembled: its samples, encoded together.
struct Family<M> {
    name: &'static str,
    help: &'static str,
    samples: Vec<(Labels, M)>,
}

impl<M: EncodeMetric> Family<M> {
    fn new(name: &'static str, help: &'static str) -> Self {
        Self {
            name,
            help,
            samples: Vec::new(),
        }
    }

    fn add(&mut self, mut labels: Labels, m: M) {
        // prometheus-client writes label values as they are: a file path holding a quote, a
        // backslash or a newline would make the whole scrape unreadable.
        for (_, v) in &mut labels {
            if v.contains(['\\', '"', '\n']) {
                *v = escape_label(v);
            }
        }
        self.samples.push((labels, m));
    }

    fn encode(self, encoder: &mut DescriptorEncoder<'_>, kind: MetricType) -> fmt::Result {
        let mut e = encoder.encode_descriptor(self.name, self.help, None, kind)?;
        for (labels, m) in &self.samples {
            m.encode(e.encode_family(labels)?)?;
        }
        Ok(())
    }
}

/// A histogram's snapshot as a metric.
#[derive(Debug)]
struct HistogramValue(f64, u64, Vec<(f64, u64)>);

impl HistogramValue {
    fn of(h: &Histogram) -> Self {
        let (sum, count, buckets) = h.snapshot();
        Self(sum, count, buckets)
    }
}

impl EncodeMetric for HistogramValue {
    fn encode(&self, mut encoder: prometheus_client::encoding::MetricEncoder) -> fmt::Result {
        encoder.encode_histogram::<NoLabelSet>(self.0, self.1, &self.2, None)
    }

    fn metric_type(&self) -> MetricType {
        MetricType::Histogram
    }
}

fn counter(v: u64) -> ConstCounter<u64> {
    ConstCounter::new(v)
}

fn gauge(v: i64) -> ConstGauge<i64> {
    ConstGauge::new(v)
}

fn gauge_f(v: f64) -> ConstGauge<f64> {
    ConstGauge::new(v)
}

fn load(a: &AtomicU64) -> u64 {
    a.load(Ordering::Relaxed)
}

impl Collector for WeirCollector {
    fn encode(&self, mut encoder: DescriptorEncoder) -> fmt::Result {
        let sources = self.0.sources();
        encode_sources(&sources, &mut encoder)?;
        encode_state(&sources, &mut encoder)?;
        encode_sinks(&self.0.sinks(), &mut encoder)?;
        process::encode(&mut encoder)?;
        let info = Info::new(vec![("version", env!("CARGO_PKG_VERSION"))]);
        let e = encoder.encode_descriptor(
            "weir_build",
            "the weir version running (always 1)",
            None,
            info.metric_type(),
        )?;
        info.encode(e)
    }
}

fn encode_sources(sources: &[Arc<SourceStats>], e: &mut DescriptorEncoder<'_>) -> fmt::Result {
    type C = ConstCounter<u64>;
    type G = ConstGauge<i64>;
    let mut messages = Family::<C>::new(
        "weir_source_messages",
        "messages read (good and bad), per source and partition (a Kafka partition id, or a file's path)",
    );
    let mut bytes = Family::<C>::new("weir_source_bytes", "message bytes read (without framing)");
    let mut rows = Family::<C>::new("weir_source_rows_decoded", "messages decoded into rows");
    let mut skipped = Family::<C>::new(
        "weir_source_skipped",
        "bad messages skipped ('on.error' = 'skip')",
    );
    let mut dead = Family::<C>::new(
        "weir_source_dead_lettered",
        "bad messages written to the dead-letter file ('on.error' = 'dead_letter')",
    );
    let mut late = Family::<C>::new(
        "weir_source_late_rows",
        "rows behind the watermark, dropped before their window, per source",
    );
    let mut lag = Family::<G>::new(
        "weir_source_lag_messages",
        "Kafka: records behind the log end (high watermark minus the position)",
    );
    let mut lag_secs = Family::<ConstGauge<f64>>::new(
        "weir_source_lag_seconds",
        "Kafka: now minus the timestamp of the last record read; 0 when no record is behind",
    );
    let mut position = Family::<G>::new("weir_source_position", "Kafka: the next offset to read");
    let mut end = Family::<G>::new(
        "weir_source_log_end_offset",
        "Kafka: the high watermark the last fetch response gave",
    );
    let mut reconnects = Family::<C>::new(
        "weir_source_reconnects",
        "Kafka: transient failures (dropped connection, restarting broker, moved leader) that interrupted the partition's fetching, each retried after a reconnect",
    );
    let mut fetch = Family::<HistogramValue>::new(
        "weir_source_fetch_latency_seconds",
        "Kafka: from sending a fetch request to its response (includes the broker's wait for new data)",
    );
    let mut decode = Family::<HistogramValue>::new(
        "weir_source_decode_seconds",
        "time decoding: Kafka, one fetch response's records of the partition (decompression, CRC, decoding); files, one batch",
    );
    let mut watermark = Family::<ConstGauge<f64>>::new(
        "weir_source_watermark_seconds",
        "the watermark of a continuous query over the source, seconds since the epoch",
    );
    let mut ready = Family::<G>::new(
        "weir_source_ready",
        "1 once the source has connected and its first read returned, 0 again while a reader \
         has lost its broker",
    );
    let mut epoch = Family::<G>::new(
        "weir_source_group_epoch",
        "Kafka consumer group: the member's epoch (consumer protocol) or generation (classic)",
    );
    let mut owned = Family::<G>::new(
        "weir_source_group_partitions",
        "Kafka consumer group: the partitions this member reads now",
    );
    let mut rebalances = Family::<C>::new(
        "weir_source_group_rebalances",
        "Kafka consumer group: the assignments this member was given",
    );
    let mut restores = Family::<C>::new(
        "weir_source_group_state_restores",
        "Kafka consumer group: partitions whose dedup keys or open windows this member restored from 'state.dir'",
    );
    let mut restore_secs = Family::<ConstCounter<f64>>::new(
        "weir_source_group_state_restore_seconds",
        "Kafka consumer group: time this member spent restoring partitions' dedup keys and open windows",
    );
    let mut restored_bytes = Family::<C>::new(
        "weir_source_group_state_restored_bytes",
        "Kafka consumer group: bytes of key and window files this member read to restore partitions",
    );
    let mut state_keys = Family::<G>::new(
        "weir_source_group_state_keys",
        "Kafka consumer group: dedup keys held for the partitions this member reads now",
    );
    let mut split_keys = Family::<C>::new(
        "weir_source_group_state_split_keys",
        "Kafka consumer group: dedup keys found in two partitions this member holds (the first \
         new key of each batch is checked): the producer does not partition by the key",
    );
    let mut state_windows = Family::<G>::new(
        "weir_source_group_state_windows",
        "Kafka consumer group: open windows held for the partitions this member reads now",
    );
    let mut unowned = Family::<ConstGauge<f64>>::new(
        "weir_source_group_partition_unowned_seconds",
        "Kafka consumer group: for each partition this member took up, how long it went without \
         an owner then: from the last commit of its offsets, by any member (its clock), to this \
         member reading it",
    );
    let now_ms = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_millis() as i64);
    for s in sources {
        let m = &s.metrics;
        let name = || vec![("source", s.name.clone())];
        if let Some(g) = m.group() {
            epoch.add(name(), gauge(g.epoch.load(Ordering::Relaxed)));
            owned.add(name(), gauge(g.partitions.load(Ordering::Relaxed)));
            rebalances.add(name(), counter(g.rebalances.load(Ordering::Relaxed)));
            restores.add(name(), counter(g.restores.load(Ordering::Relaxed)));
            restore_secs.add(
                name(),
                ConstCounter::new(g.restore_micros.load(Ordering::Relaxed) as f64 / 1e6),
            );
            restored_bytes.add(name(), counter(g.restored_bytes.load(Ordering::Relaxed)));
            state_keys.add(name(), gauge(g.state_keys.load(Ordering::Relaxed)));
            state_windows.add(name(), gauge(g.state_windows.load(Ordering::Relaxed)));
            split_keys.add(name(), counter(g.split_keys.load(Ordering::Relaxed)));
            for (p, secs) in g.unowned.lock().unwrap_or_else(|e| e.into_inner()).iter() {
                unowned.add(
                    vec![("source", s.name.clone()), ("partition", p.to_string())],
                    gauge_f(*secs),
                );
            }
        }
        late.add(name(), counter(load(&s.late)));
        ready.add(name(), gauge(i64::from(m.is_ready())));
        let w = m.watermark.load(Ordering::Relaxed);
        if w != i64::MIN {
            watermark.add(name(), gauge_f(w as f64 / 1e9));
        }
        for p in m.partitions() {
            let l = || vec![("source", s.name.clone()), ("partition", p.label.clone())];
            messages.add(l(), counter(load(&p.messages)));
            bytes.add(l(), counter(load(&p.bytes)));
            rows.add(l(), counter(load(&p.decoded)));
            skipped.add(l(), counter(load(&p.skipped)));
            dead.add(l(), counter(load(&p.dead_lettered)));
            match &p.kafka {
                Some(k) => {
                    let behind = k.lag();
                    lag.add(l(), gauge(behind));
                    let ts = k.last_timestamp_ms.load(Ordering::Relaxed);
                    let secs = if behind == 0 || ts < 0 {
                        0.0
                    } else {
                        ((now_ms - ts).max(0)) as f64 / 1e3
                    };
                    lag_secs.add(l(), gauge_f(secs));
                    position.add(l(), gauge(k.position.load(Ordering::Relaxed)));
                    end.add(l(), gauge(k.high_watermark.load(Ordering::Relaxed)));
                    reconnects.add(l(), counter(load(&k.reconnects)));
                    fetch.add(l(), HistogramValue::of(&k.fetch_latency));
                    decode.add(l(), HistogramValue::of(&k.deliver_time));
                }
                None => decode.add(l(), HistogramValue::of(&p.decode)),
            }
        }
    }
    messages.encode(e, MetricType::Counter)?;
    bytes.encode(e, MetricType::Counter)?;
    rows.encode(e, MetricType::Counter)?;
    skipped.encode(e, MetricType::Counter)?;
    dead.encode(e, MetricType::Counter)?;
    late.encode(e, MetricType::Counter)?;
    lag.encode(e, MetricType::Gauge)?;
    lag_secs.encode(e, MetricType::Gauge)?;
    position.encode(e, MetricType::Gauge)?;
    end.encode(e, MetricType::Gauge)?;
    reconnects.encode(e, MetricType::Counter)?;
    fetch.encode(e, MetricType::Histogram)?;
    decode.encode(e, MetricType::Histogram)?;
    watermark.encode(e, MetricType::Gauge)?;
    epoch.encode(e, MetricType::Gauge)?;
    owned.encode(e, MetricType::Gauge)?;
    rebalances.encode(e, MetricType::Counter)?;
    restores.encode(e, MetricType::Counter)?;
    restore_secs.encode(e, MetricType::Counter)?;
    restored_bytes.encode(e, MetricType::Counter)?;
    state_keys.encode(e, MetricType::Gauge)?;
    state_windows.encode(e, MetricType::Gauge)?;
    split_keys.encode(e, MetricType::Counter)?;
    unowned.encode(e, MetricType::Gauge)?;
    ready.encode(e, MetricType::Gauge)
}

fn encode_state(sources: &[Arc<SourceStats>], e: &mut DescriptorEncoder<'_>) -> fmt::Result {
    type C = ConstCounter<u64>;
    type G = ConstGauge<i64>;
    let mut steps = Family::<G>::new(
        "weir_state_step",
        "the last step committed to the source's state directory",
    );
    let mut rows = Family::<C>::new("weir_dedup_rows_checked", "rows checked for duplicates");
    let mut dropped = Family::<C>::new(
        "weir_dedup_duplicates_dropped",
        "rows dropped as duplicates",
    );
    let mut memory = Family::<C>::new(
        "weir_dedup_recent_hits",
        "duplicates answered from the in-memory recent keys, without RocksDB",
    );
    let mut lookups = Family::<C>::new("weir_dedup_lookups", "keys looked up in RocksDB");
    let mut written = Family::<C>::new("weir_dedup_keys_written", "keys written to RocksDB");
    let mut expired = Family::<C>::new(
        "weir_dedup_keys_expired",
        "keys found expired ('dedup.ttl'), at lookup or dropped by compaction",
    );
    let mut held = Family::<G>::new(
        "weir_dedup_keys",
        "keys held in RocksDB (RocksDB's estimate)",
    );
    let mut hits = Family::<C>::new(
        "weir_dedup_block_cache_hits",
        "RocksDB block-cache hits, by block kind (data, index, filter)",
    );
    let mut misses = Family::<C>::new(
        "weir_dedup_block_cache_misses",
        "RocksDB block-cache misses, by block kind (data, index, filter)",
    );
    let mut useful = Family::<C>::new(
        "weir_dedup_bloom_useful",
        "lookups a bloom filter answered 'absent' (no data block read)",
    );
    let mut false_pos = Family::<C>::new(
        "weir_dedup_bloom_false_positives",
        "lookups a bloom filter let through for a key that was not there",
    );
    let mut disk = Family::<G>::new(
        "weir_state_disk_bytes",
        "bytes of the state directory's files",
    );
    for s in sources {
        let Some(st) = s.state_figures() else {
            continue;
        };
        let l = || vec![("source", s.name.clone())];
        steps.add(l(), gauge(st.step as i64));
        disk.add(l(), gauge(st.bytes_on_disk as i64));
        if !st.dedup {
            continue;
        }
        rows.add(l(), counter(st.rows));
        dropped.add(l(), counter(st.duplicates_dropped));
        memory.add(l(), counter(st.recent_hits));
        lookups.add(l(), counter(st.lookups));
        written.add(l(), counter(st.keys_written));
        expired.add(l(), counter(st.keys_expired));
        held.add(l(), gauge(st.keys_held_estimate as i64));
        for (kind, hit, miss) in [
            ("data", st.data_hit, st.data_miss),
            ("index", st.index_hit, st.index_miss),
            ("filter", st.filter_hit, st.filter_miss),
        ] {
            let k = || vec![("source", s.name.clone()), ("block", kind.to_string())];
            hits.add(k(), counter(hit));
            misses.add(k(), counter(miss));
        }
        useful.add(l(), counter(st.bloom_useful));
        false_pos.add(
            l(),
            counter(st.bloom_positive.saturating_sub(st.bloom_true_positive)),
        );
    }
    steps.encode(e, MetricType::Gauge)?;
    disk.encode(e, MetricType::Gauge)?;
    rows.encode(e, MetricType::Counter)?;
    dropped.encode(e, MetricType::Counter)?;
    memory.encode(e, MetricType::Counter)?;
    lookups.encode(e, MetricType::Counter)?;
    written.encode(e, MetricType::Counter)?;
    expired.encode(e, MetricType::Counter)?;
    held.encode(e, MetricType::Gauge)?;
    hits.encode(e, MetricType::Counter)?;
    misses.encode(e, MetricType::Counter)?;
    useful.encode(e, MetricType::Counter)?;
    false_pos.encode(e, MetricType::Counter)
}

fn encode_sinks(
    sinks: &[(String, Arc<SinkMetrics>)],
    e: &mut DescriptorEncoder<'_>,
) -> fmt::Result {
    type C = ConstCounter<u64>;
    let mut rows = Family::<C>::new("weir_sink_rows", "rows written, per sink");
    let mut bytes = Family::<C>::new(
        "weir_sink_bytes",
        "bytes written: completed step files (exactly-once sinks) or the file's size",
    );
    let mut files = Family::<C>::new("weir_sink_files", "files completed");
    let mut commit = Family::<HistogramValue>::new(
        "weir_sink_commit_seconds",
        "exactly-once sinks: from a step's end to its commit (file sealed and synced, state commit handed over)",
    );
    let mut step = Family::<ConstGauge<i64>>::new(
        "weir_sink_committed_step",
        "exactly-once sinks: the last step committed",
    );
    for (name, m) in sinks {
        let l = || vec![("sink", name.clone())];
        rows.add(l(), counter(load(&m.rows)));
        let path = m.path.lock().unwrap_or_else(|e| e.into_inner()).clone();
        let written = match path {
            // The file's size, kept as the largest seen: a failed look (the file moved, say)
            // must not read as a counter reset.
            Some(p) => {
                if let Ok(meta) = std::fs::metadata(p) {
                    m.bytes.fetch_max(meta.len(), Ordering::Relaxed);
                }
                load(&m.bytes)
            }
            None => load(&m.bytes),
        };
        bytes.add(l(), counter(written));
        files.add(l(), counter(load(&m.files)));
        commit.add(l(), HistogramValue::of(&m.commit));
        step.add(l(), gauge(load(&m.step) as i64));
    }
    rows.encode(e, MetricType::Counter)?;
    bytes.encode(e, MetricType::Counter)?;
    files.encode(e, MetricType::Counter)?;
    commit.encode(e, MetricType::Histogram)?;
    step.encode(e, MetricType::Gauge)
}

#[cfg(test)]
mod tests {
    use super::escape_label;

    #[test]
    fn label_values_are_escaped() {
        assert_eq!(
            escape_label(
                r#"/data/a"b\c
d.bin"#
            ),
            r#"/data/a\"b\\c\nd.bin"#
        );
        assert_eq!(escape_label("plain"), "plain");
    }
}
