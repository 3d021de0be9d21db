//! The consumer: one topic, a static set of partitions, one thread, no group machinery.
//!
//! Partition state lives in a vector indexed by partition id. Each leader broker gets one
//! connection and one fetch request, encoded once; before each send only its fetch offsets
//! (and the wait time) are patched in place. Requests are pipelined: as soon as a response
//! arrives, the next positions are read from the batch headers and the next fetch is sent, and
//! only then are the records handed to the caller, so the broker prepares the next response
//! while the caller decodes this one.
//!
//! The files of this module, one job each:
//!
//! * `config.rs`: [`ConsumerConfig`] and the option types it is made of;
//! * `offsets.rs`: where each partition starts and ends (ListOffsets, `offset.reset`);
//! * `pipeline.rs`: the fetch requests per leader, sent, received and recovered after failures;
//! * `delivery.rs`: the per-record loop that hands each [`Record`] to the caller;
//! * this file: the [`Consumer`] itself, `connect` and `poll`.

mod config;
mod delivery;
mod offsets;
mod pipeline;

use std::sync::Arc;
use std::time::{Duration, Instant};

use kafka_protocol::messages::ApiKey;

use crate::cluster::{self, retriable, TopicLayout};
use crate::compression::Decompressor;
use crate::connection::{Connection, Connector};
use crate::error::{Error, Result};
use crate::fetch_response::PartitionView;
use crate::record_batch::AbortedFilter;
use crate::stats::PartitionStats;

pub use config::{ConsumerConfig, Isolation, OffsetReset, PartitionSelection, StartupMode};
pub use delivery::Record;
use pipeline::LeaderFetch;

/// What one `poll` did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PollStatus {
    /// This many records went to the handler.
    Records(usize),
    /// Nothing arrived within the timeout (or a retry is pending).
    Idle,
    /// Bounded read: every partition reached its end offset.
    End,
}

/// The state of one partition, in a vector indexed by partition id.
#[derive(Debug, Clone, Copy)]
struct PartState {
    selected: bool,
    /// Next offset to hand to the caller.
    position: i64,
    /// Next offset to ask the broker for (ahead of `position` while a pipelined fetch runs).
    fetch_position: i64,
    /// Bounded reads stop here (`i64::MAX` when unbounded).
    end: i64,
    leader: i32,
    done: bool,
}

/// A single-threaded consumer of a static set of partitions of one topic.
///
/// ```no_run
/// # use std::time::Duration;
/// # use weir_kafka::{Consumer, ConsumerConfig, PollStatus};
/// let mut consumer = Consumer::connect(&ConsumerConfig {
///     brokers: vec!["127.0.0.1:9092".into()],
///     topic: "quotes".into(),
///     ..Default::default()
/// })?;
/// let mut bytes = 0;
/// loop {
///     let status = consumer.poll(Duration::from_millis(100), |r| {
///         bytes += r.value.map_or(0, |v| v.len());
///         Ok::<(), std::io::Error>(())
///     })?;
///     if status == PollStatus::End {
///         break;
///     }
/// }
/// # Ok::<(), weir_kafka::Error>(())
/// ```
pub struct Consumer {
    cfg: ConsumerConfig,
    /// How connections are opened (TLS, SASL), shared by all of them.
    connector: Connector,
    parts: Vec<PartState>,
    /// Addresses to ask for metadata: the bootstrap list, then every broker seen.
    seeds: Vec<String>,
    layout: Option<TopicLayout>,
    fetches: Vec<LeaderFetch>,
    decompressor: Decompressor,
    aborted: AbortedFilter,
    fetch_version: i16,
    /// A metadata refresh is due (after a failure or a leadership change).
    refresh: bool,
    retry_at: Option<Instant>,
    backoff: Duration,
    failing_since: Option<Instant>,
    last_failure: String,
    /// The broker's wait for the next fetch (`poll`'s timeout, capped by the config).
    wait: Duration,
    /// Transient failures retried so far.
    retries: u64,
    /// The partitions of the response being handled (reused: no allocation per fetch).
    views: Vec<PartitionView>,
    /// Statistics by partition id, like `parts` (updated once per fetch response).
    stats: Vec<Arc<PartitionStats>>,
}

impl std::fmt::Debug for Consumer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Consumer")
            .field("topic", &self.cfg.topic)
            .field("partitions", &self.partitions())
            .finish()
    }
}

impl Consumer {
    /// Connects, reads the topic's layout, and finds each partition's start (and, when
    /// bounded, end) offset.
    pub fn connect(cfg: &ConsumerConfig) -> Result<Self> {
        if cfg.brokers.is_empty() {
            return Err(Error::Config("'brokers' is empty".into()));
        }
        if cfg.topic.is_empty() {
            return Err(Error::Config("'topic' is empty".into()));
        }
        let connector = Connector::new(&cfg.security, cfg.request_timeout)?;
        let mut c = Self {
            cfg: cfg.clone(),
            connector,
            parts: Vec::new(),
            seeds: cfg.brokers.clone(),
            layout: None,
            fetches: Vec::new(),
            decompressor: Decompressor::new(),
            aborted: AbortedFilter::default(),
            fetch_version: 12,
            refresh: false,
            retry_at: None,
            backoff: cfg.retry_backoff,
            failing_since: None,
            last_failure: String::new(),
            wait: cfg.fetch_max_wait,
            retries: 0,
            views: Vec::new(),
            stats: Vec::new(),
        };
        let layout = c.load_layout()?;
        let count = layout.leaders.len();
        let selected: Vec<i32> = match &cfg.partitions {
            PartitionSelection::All => (0..count as i32).collect(),
            PartitionSelection::List(l) => {
                if let Some(&bad) = l.iter().find(|&&p| p < 0 || p as usize >= count) {
                    return Err(Error::Config(format!(
                        "topic {} has partitions 0..{} but 'partitions' lists {bad}",
                        cfg.topic,
                        count - 1
                    )));
                }
                l.clone()
            }
        };
        if selected.is_empty() {
            return Err(Error::Config("'partitions' selects no partition".into()));
        }
        c.parts = vec![
            PartState {
                selected: false,
                position: 0,
                fetch_position: 0,
                end: i64::MAX,
                leader: -1,
                done: true,
            };
            count
        ];
        for &p in &selected {
            let s = &mut c.parts[p as usize];
            s.selected = true;
            s.done = false;
            s.leader = layout.leaders[p as usize];
        }
        c.stats = (0..count).map(|_| Arc::default()).collect();
        c.layout = Some(layout);
        c.init_offsets(&selected)?;
        c.publish_positions();
        c.rebuild_fetches()?;
        Ok(c)
    }

    /// The partitions this consumer reads.
    pub fn partitions(&self) -> Vec<i32> {
        (0..self.parts.len() as i32)
            .filter(|&p| self.parts[p as usize].selected)
            .collect()
    }

    /// The next offset to be handed out for `partition` (what a checkpoint stores).
    pub fn position(&self, partition: i32) -> Option<i64> {
        self.part(partition).map(|s| s.position)
    }

    /// How many transient failures (dropped connections, unavailable brokers, moved leaders)
    /// were retried so far: a number for the engine's metrics.
    pub fn retries(&self) -> u64 {
        self.retries
    }

    /// True from a transient failure (a broker lost, a leader moved) until the next request
    /// that succeeds: the consumer is retrying, and reads nothing meanwhile.
    pub fn is_failing(&self) -> bool {
        self.failing_since.is_some()
    }

    /// How many times a connection renewed its SASL session before the broker's session
    /// lifetime ran out (KIP-368): a number for the engine's metrics.
    pub fn reauthentications(&self) -> u64 {
        self.connector.reauthentications()
    }

    /// The statistics of `partition` (see [`PartitionStats`]), shared with any thread that
    /// reads them; `None` for a partition this consumer does not read.
    pub fn partition_stats(&self, partition: i32) -> Option<&Arc<PartitionStats>> {
        self.part(partition)?;
        self.stats.get(usize::try_from(partition).ok()?)
    }

    /// Makes the consumer keep `partition`'s statistics in `stats` (for example the ones an
    /// earlier consumer of the same partition kept, so that counters carry on), and brings its
    /// position up to date. Does nothing for a partition this consumer does not read.
    pub fn set_partition_stats(&mut self, partition: i32, stats: Arc<PartitionStats>) {
        if self.part(partition).is_none() {
            return;
        }
        if let Some(slot) = usize::try_from(partition)
            .ok()
            .and_then(|i| self.stats.get_mut(i))
        {
            *slot = stats;
        }
        self.publish_positions();
    }

    /// Copies every selected partition's position into its statistics.
    pub(super) fn publish_positions(&self) {
        for (s, st) in self.parts.iter().zip(&self.stats) {
            if s.selected {
                st.position
                    .store(s.position, std::sync::atomic::Ordering::Relaxed);
            }
        }
    }

    /// The end offset of a bounded read for `partition` (`None` when unbounded).
    pub fn end_offset(&self, partition: i32) -> Option<i64> {
        self.part(partition)
            .filter(|s| s.end != i64::MAX)
            .map(|s| s.end)
    }

    fn part(&self, partition: i32) -> Option<&PartState> {
        usize::try_from(partition)
            .ok()
            .and_then(|i| self.parts.get(i))
            .filter(|s| s.selected)
    }

    /// Moves `partition` to `offset` (for resuming from a checkpoint); the next poll fetches
    /// from there.
    pub fn seek(&mut self, partition: i32, offset: i64) -> Result<()> {
        let i = usize::try_from(partition)
            .ok()
            .filter(|&i| self.parts.get(i).is_some_and(|s| s.selected))
            .ok_or_else(|| Error::Config(format!("partition {partition} is not assigned")))?;
        self.abandon_in_flight();
        let s = &mut self.parts[i];
        s.position = offset;
        s.fetch_position = offset;
        s.done = offset >= s.end;
        for f in &mut self.fetches {
            f.stale = true;
        }
        self.publish_positions();
        Ok(())
    }

    pub(super) fn read_committed(&self) -> bool {
        self.cfg.isolation == Isolation::ReadCommitted
    }

    pub(super) fn load_layout(&mut self) -> Result<TopicLayout> {
        let mut conn = cluster::connect_any(&self.connector, &self.seeds)?;
        let layout = cluster::topic_layout(&mut conn, &self.cfg.topic)?;
        self.fetch_version = conn.version(ApiKey::Fetch, "Fetch", 4, 12)?;
        for b in &layout.brokers {
            if !self.seeds.contains(&b.addr) {
                self.seeds.push(b.addr.clone());
            }
        }
        Ok(layout)
    }

    pub(super) fn open(&self, node: i32) -> Result<Connection> {
        let addr = self
            .layout
            .as_ref()
            .and_then(|l| l.addr(node))
            .ok_or_else(|| Error::Protocol {
                broker: format!("node {node}"),
                api: "Metadata",
                reason: "leader is not among the brokers listed".into(),
            })?;
        self.connector.open(addr)
    }

    /// True once a bounded read has reached every end offset.
    pub fn is_done(&self) -> bool {
        self.parts.iter().all(|s| !s.selected || s.done)
    }

    /// Waits up to about `timeout` for records and hands each to `handler`, in offset order per
    /// partition. Returns how many were handed out, `Idle`, or `End` once a bounded read is
    /// complete. Transient failures (a dropped connection, a restarting broker, a moved leader)
    /// are retried with backoff and resume at the next offset; they surface as an error only
    /// after `retry_timeout` without progress.
    ///
    /// When the handler fails, the record it failed on is not consumed: the next poll starts
    /// with it again.
    pub fn poll<F, E>(&mut self, timeout: Duration, mut handler: F) -> Result<PollStatus>
    where
        F: FnMut(&Record<'_>) -> std::result::Result<(), E>,
        E: Into<Box<dyn std::error::Error + Send + Sync>>,
    {
        if self.is_done() {
            return Ok(PollStatus::End);
        }
        self.wait = timeout.min(self.cfg.fetch_max_wait);
        if self.refresh || self.fetches.iter().any(|f| f.stale) {
            if self.fetches.iter().any(|f| f.stale) && !self.refresh {
                // A partition set changed without a failure: re-encode, keep connections.
                if self.fetches.iter().all(|f| f.in_flight.is_none()) {
                    match self.rebuild_fetches() {
                        Ok(()) => {}
                        // Opening a connection to a leader can fail like any other socket.
                        Err(e) if retriable(&e) => {
                            self.fail(e)?;
                            return Ok(PollStatus::Idle);
                        }
                        Err(e) => return Err(e),
                    }
                }
            } else if !self.recover(timeout)? {
                return Ok(PollStatus::Idle);
            }
        }
        let mut n = 0usize;
        for i in 0..self.fetches.len() {
            if self.fetches[i].in_flight.is_none() && !self.fetches[i].stale {
                if let Err(e) = self.send(i) {
                    self.fail(e)?;
                    return Ok(PollStatus::Idle);
                }
            }
        }
        let mut i = 0;
        while i < self.fetches.len() {
            match self.receive(i, &mut n, &mut handler) {
                Ok(()) => i += 1,
                Err(e) if retriable(&e) => {
                    self.fail(e)?;
                    break;
                }
                Err(e) => {
                    // The request in flight asks for offsets past the failure: drop it so the
                    // next poll starts again at the record that failed.
                    self.abandon_in_flight();
                    return Err(e);
                }
            }
        }
        if n > 0 {
            Ok(PollStatus::Records(n))
        } else if self.is_done() {
            Ok(PollStatus::End)
        } else {
            Ok(PollStatus::Idle)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn consumer_is_send() {
        fn is_send<T: Send>() {}
        is_send::<Consumer>();
    }
}
