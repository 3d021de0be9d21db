//! A batching producer: records are collected per partition into v2 batches (optionally
//! compressed), and each full batch goes to its leader in a produce request; up to a few
//! requests per broker are in flight at once. With `acks = -1` it is idempotent; with a
//! `transactional_id` its records are written in transactions, which a `read_committed`
//! consumer sees whole or not at all (see [`Producer::begin_transaction`]).

use std::collections::VecDeque;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use bytes::Bytes;
use kafka_protocol::messages::{
    produce_request::{PartitionProduceData, TopicProduceData},
    ApiKey, InitProducerIdRequest, InitProducerIdResponse, ProduceRequest, ProduceResponse,
    ProducerId, TopicName, TransactionalId,
};
use kafka_protocol::protocol::StrBytes;

use crate::cluster::{self, TopicLayout};
use crate::compression::compress;
use crate::connection::{decode_response, Connection, Connector};
use crate::error::{error_name, is_retriable, Error, Result};
use crate::record_batch::{finish_batch, BatchSpec, Compression, RecordsWriter, BATCH_HEADER_LEN};
use crate::security::SecurityConfig;
pub use crate::transaction::{Settled, TransactionStatus};

/// Producer settings.
#[derive(Debug, Clone)]
pub struct ProducerConfig {
    /// Bootstrap brokers, `host:port`.
    pub brokers: Vec<String>,
    /// The topic (it must exist; see [`crate::create_topic`]).
    pub topic: String,
    /// Batch compression.
    pub compression: Compression,
    /// A partition's batch is sent once its records take this many bytes (uncompressed).
    /// Keep it under the broker's `message.max.bytes` (1 MiB by default).
    pub batch_bytes: usize,
    /// `acks`: 0, 1 or -1 (all in-sync replicas).
    pub acks: i16,
    /// Produce requests in flight per broker before waiting for the oldest answer (at most one
    /// per partition, so that a retry cannot reorder a partition's records).
    pub max_in_flight: usize,
    /// Socket and produce timeout.
    pub request_timeout: Duration,
    /// TLS and SASL for every broker connection.
    pub security: SecurityConfig,
    /// `transactional.id`: records are written in transactions (acks is then -1). A producer
    /// that starts with the id of another fences it: the older one's open transaction is
    /// aborted and its later writes fail with [`Error::Fenced`].
    pub transactional_id: Option<String>,
    /// `transaction.timeout.ms`: the coordinator aborts a transaction left open this long.
    pub transaction_timeout: Duration,
}

impl Default for ProducerConfig {
    fn default() -> Self {
        Self {
            brokers: Vec::new(),
            topic: String::new(),
            compression: Compression::None,
            batch_bytes: 900 << 10,
            acks: -1,
            max_in_flight: 5,
            request_timeout: Duration::from_secs(30),
            security: SecurityConfig::default(),
            transactional_id: None,
            transaction_timeout: Duration::from_secs(60),
        }
    }
}

/// A request sent and not yet answered, kept so it can be sent again after a leader move.
struct Pending {
    correlation: i32,
    partition: i32,
    batch: Bytes,
}

struct BrokerLink {
    node: i32,
    conn: Connection,
    pending: VecDeque<Pending>,
    /// Set when the connection failed (a broker restart, a dropped socket), with the broker
    /// and the failure: its batches in flight are sent again on a new connection, and the
    /// link is not used again.
    lost: Option<(String, std::io::ErrorKind, String)>,
}

/// What [`BrokerLink::lost`] keeps of `e`.
fn lost_by(e: &Error) -> (String, std::io::ErrorKind, String) {
    match e {
        Error::Io { broker, source } => (broker.clone(), source.kind(), source.to_string()),
        other => (
            "(the leader)".into(),
            std::io::ErrorKind::ConnectionAborted,
            other.to_string(),
        ),
    }
}

/// Writes records to one topic.
pub struct Producer {
    cfg: ProducerConfig,
    connector: Connector,
    layout: TopicLayout,
    links: Vec<BrokerLink>,
    version: i16,
    /// One open batch per partition id.
    open: Vec<RecordsWriter>,
    /// When each open batch got its first record (`None` while empty), for `linger`.
    opened: Vec<Option<Instant>>,
    compressed: Vec<u8>,
    sticky: usize,
    sent: u64,
    /// Idempotence (KIP-98): the broker drops duplicates and refuses gaps by sequence number,
    /// so retried batches neither duplicate nor reorder records. -1 when acks is not -1.
    producer_id: i64,
    producer_epoch: i16,
    /// Next sequence number per partition id.
    sequences: Vec<i32>,
    /// With a `transactional_id`: the coordinator and the open transaction.
    txn: Option<Txn>,
    /// Set once batches were dropped (sent on a lost connection and not sent again in time, or
    /// refused by the broker for good): how many, and the last reason. Records may be missing,
    /// so every later send and flush fails (see [`Error::BatchesLost`]).
    lost: Option<(usize, String)>,
}

/// A transactional producer's state.
struct Txn {
    coordinator: crate::transaction::Coordinator,
    /// A transaction is open.
    open: bool,
    /// The partitions added to the open transaction, by partition id.
    added: Vec<bool>,
    /// The groups whose offsets the open transaction commits.
    offsets_of: Vec<String>,
    /// The connection to the coordinator of the group offsets were last committed for.
    group_conn: Option<Connection>,
    /// That group.
    group_conn_of: String,
}

impl Txn {
    /// The open transaction has written records or offsets (so ending it reaches the
    /// coordinator).
    fn has_writes(&self) -> bool {
        self.added.iter().any(|&a| a) || !self.offsets_of.is_empty()
    }
}

/// The record-batch attribute of a batch written in a transaction.
const TRANSACTIONAL: i16 = 1 << 4;

impl std::fmt::Debug for Producer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Producer")
            .field("topic", &self.cfg.topic)
            .finish()
    }
}

/// Kafka's murmur2 (as the Java client's default partitioner uses it), so keyed records land in
/// the same partitions as they would from a Java producer.
pub fn murmur2(data: &[u8]) -> i32 {
    const M: u32 = 0x5bd1_e995;
    const SEED: u32 = 0x9747_b28c;
    let len = data.len() as u32;
    let mut h = SEED ^ len;
    let mut chunks = data.chunks_exact(4);
    for c in &mut chunks {
        let mut k = u32::from_le_bytes([c[0], c[1], c[2], c[3]]);
        k = k.wrapping_mul(M);
        k ^= k >> 24;
        k = k.wrapping_mul(M);
        h = h.wrapping_mul(M);
        h ^= k;
    }
    let r = chunks.remainder();
    if r.len() >= 3 {
        h ^= u32::from(r[2]) << 16;
    }
    if r.len() >= 2 {
        h ^= u32::from(r[1]) << 8;
    }
    if !r.is_empty() {
        h ^= u32::from(r[0]);
        h = h.wrapping_mul(M);
    }
    h ^= h >> 13;
    h = h.wrapping_mul(M);
    h ^= h >> 15;
    h as i32
}

/// Asks for an idempotent producer id, waiting while a fresh broker still loads its
/// coordinator state (COORDINATOR_LOAD_IN_PROGRESS and similar).
fn init_producer_id(conn: &mut Connection, cfg: &ProducerConfig) -> Result<(i64, i16)> {
    let v = conn.version(ApiKey::InitProducerId, "InitProducerId", 0, 4)?;
    let deadline = Instant::now() + cfg.request_timeout;
    loop {
        let resp: InitProducerIdResponse = conn.request(
            ApiKey::InitProducerId,
            v,
            &InitProducerIdRequest::default()
                // The default is Some(""), which the broker refuses: null means idempotent only.
                .with_transactional_id(None)
                .with_transaction_timeout_ms(60_000)
                .with_producer_id(ProducerId(-1))
                .with_producer_epoch(-1),
        )?;
        let code = resp.error_code;
        if code == 0 {
            return Ok((resp.producer_id.0, resp.producer_epoch));
        }
        if !is_retriable(code) || Instant::now() >= deadline {
            return Err(Error::Produce {
                topic: cfg.topic.clone(),
                partition: -1,
                reason: format!("InitProducerId failed: {} ({code})", error_name(code)),
            });
        }
        std::thread::sleep(Duration::from_millis(100));
    }
}

/// Milliseconds since the Unix epoch: the timestamp a record sent without one gets.
pub fn now_ms() -> i64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_millis() as i64)
}

impl Producer {
    /// Connects and reads the topic's layout.
    pub fn connect(cfg: &ProducerConfig) -> Result<Self> {
        let connector = Connector::new(&cfg.security, cfg.request_timeout)?;
        let mut conn = cluster::connect_any(&connector, &cfg.brokers)?;
        let layout = cluster::topic_layout(&mut conn, &cfg.topic)?;
        let mut version = conn.version(ApiKey::Produce, "Produce", 3, 12)?;
        let mut txn = match &cfg.transactional_id {
            Some(id) => Some(Txn {
                coordinator: crate::transaction::Coordinator::find(
                    &connector,
                    &cfg.brokers,
                    id,
                    cfg.request_timeout,
                    cfg.transaction_timeout,
                )?,
                open: false,
                added: vec![false; layout.leaders.len()],
                offsets_of: Vec::new(),
                group_conn: None,
                group_conn_of: String::new(),
            }),
            None => None,
        };
        if let Some(t) = &txn {
            // Produce v12 is how a partition joins a KIP-890 transaction; a classic one's
            // partitions are added explicitly, and its batches go as v11 at most, as the
            // Java client sends them.
            version = if t.coordinator.is_v2() {
                conn.version(ApiKey::Produce, "Produce", 12, 12)?
            } else {
                version.min(11)
            };
        }
        let (producer_id, producer_epoch) = match &mut txn {
            Some(t) => t.coordinator.init_producer_id()?,
            None if cfg.acks == -1 => init_producer_id(&mut conn, cfg)?,
            None => (-1, -1),
        };
        let mut cfg = cfg.clone();
        if txn.is_some() {
            // A transaction needs every replica's acknowledgement.
            cfg.acks = -1;
        }
        Ok(Self {
            txn,
            sequences: vec![0; layout.leaders.len()],
            producer_id,
            producer_epoch,
            open: vec![RecordsWriter::default(); layout.leaders.len()],
            opened: vec![None; layout.leaders.len()],
            cfg,
            connector,
            layout,
            links: Vec::new(),
            version,
            compressed: Vec::new(),
            sticky: 0,
            sent: 0,
            lost: None,
        })
    }

    /// The topic's partition count.
    pub fn partitions(&self) -> i32 {
        self.layout.leaders.len() as i32
    }

    /// Records acknowledged or in flight so far.
    pub fn sent(&self) -> u64 {
        self.sent
    }

    /// Queues a record. `partition` `None` picks one: by murmur2 of the key like the Java
    /// client, or for keyless records the current sticky partition.
    pub fn send(&mut self, partition: Option<i32>, key: Option<&[u8]>, value: &[u8]) -> Result<()> {
        self.send_with(partition, key, Some(value), &[], None)
    }

    /// Queues a record with headers, a null value (tombstone) or an explicit timestamp (ms).
    pub fn send_with(
        &mut self,
        partition: Option<i32>,
        key: Option<&[u8]>,
        value: Option<&[u8]>,
        headers: &[(&[u8], Option<&[u8]>)],
        timestamp: Option<i64>,
    ) -> Result<()> {
        self.check_lost()?;
        if self.txn.as_ref().is_some_and(|t| !t.open) {
            return Err(Error::Transaction {
                transactional_id: self.cfg.transactional_id.clone().unwrap_or_default(),
                reason: "records are sent inside a transaction: call begin_transaction first"
                    .into(),
            });
        }
        let count = self.open.len();
        let p = match partition {
            Some(p) if p >= 0 && (p as usize) < count => p as usize,
            Some(p) => {
                return Err(Error::Produce {
                    topic: self.cfg.topic.clone(),
                    partition: p,
                    reason: format!("the topic has partitions 0..{}", count - 1),
                })
            }
            None => match key {
                Some(k) => ((murmur2(k) & 0x7fff_ffff) as usize) % count,
                None => self.sticky % count,
            },
        };
        if self.open[p].count == 0 {
            self.opened[p] = Some(Instant::now());
        }
        self.open[p].push(timestamp.unwrap_or_else(now_ms), key, value, headers);
        if self.open[p].records().len() >= self.cfg.batch_bytes {
            if partition.is_none() && key.is_none() {
                self.sticky = self.sticky.wrapping_add(1);
            }
            self.ship(p as i32)?;
        }
        Ok(())
    }

    /// Sends the open batches whose first record has waited `linger` or longer, without waiting
    /// for their acknowledgement (librdkafka's `linger.ms`, checked when called).
    pub fn send_lingering(&mut self, linger: Duration) -> Result<()> {
        for p in 0..self.open.len() {
            if self.open[p].count > 0 && self.opened[p].is_some_and(|t| t.elapsed() >= linger) {
                self.ship(p as i32)?;
            }
        }
        Ok(())
    }

    /// Sends every open batch and waits until the broker acknowledged all of them.
    pub fn flush(&mut self) -> Result<()> {
        self.check_lost()?;
        for p in 0..self.open.len() {
            if self.open[p].count > 0 {
                self.ship(p as i32)?;
            }
        }
        self.await_all()?;
        // A batch of another partition lost while this one waited (and then sent on by
        // `ship`) fails the flush here, rather than go missing.
        self.check_lost()
    }

    /// Waits for every batch in flight. A resend may open a link or reuse a lost one's slot,
    /// so the links are looked at again until none has a batch in flight.
    fn await_all(&mut self) -> Result<()> {
        while let Some(i) = self.links.iter().position(|l| !l.pending.is_empty()) {
            self.await_oldest(i)?;
        }
        Ok(())
    }

    /// [`Error::BatchesLost`] once batches were dropped.
    fn check_lost(&self) -> Result<()> {
        match &self.lost {
            Some((batches, reason)) => Err(Error::BatchesLost {
                topic: self.cfg.topic.clone(),
                batches: *batches,
                reason: reason.clone(),
            }),
            None => Ok(()),
        }
    }

    /// Records that `batches` batches were dropped after `e` (a final answer), so that every
    /// later send and flush fails; returns `e`, which the caller sees first.
    fn dropped(&mut self, batches: usize, e: Error) -> Error {
        let before = self.lost.as_ref().map_or(0, |l| l.0);
        self.lost = Some((before + batches, e.to_string()));
        e
    }

    /// [`Producer::dropped`], except for a fenced producer or a transaction that must be
    /// aborted: their caller ends the producer or the transaction, with what it sent.
    fn dropped_unless_ended(&mut self, batches: usize, e: Error) -> Error {
        match e {
            Error::Fenced { .. } | Error::TransactionAbortable { .. } => e,
            e => self.dropped(batches, e),
        }
    }

    /// Sends `batches` again, in order. If one cannot be sent, neither are those after it: the
    /// producer is marked as having lost them, and [`Error::BatchesLost`] returned. (A fenced
    /// producer, or a transaction that must be aborted, is the caller's to end: those pass.)
    fn resend_all(&mut self, batches: Vec<Pending>) -> Result<()> {
        let total = batches.len();
        for (k, f) in batches.into_iter().enumerate() {
            match self.resend(f) {
                Ok(()) => {}
                Err(e @ (Error::Fenced { .. } | Error::TransactionAbortable { .. })) => {
                    return Err(e)
                }
                Err(e) => {
                    self.dropped(total - k, e);
                    return self.check_lost();
                }
            }
        }
        Ok(())
    }

    /// Whether a produce answer `code` asks for the batch to be sent again. Under KIP-890 the
    /// leader adds the partition to the transaction itself, and passes on its coordinator's
    /// "not here" and "still completing the last transaction" as retriable.
    fn retriable(&self, code: i16) -> bool {
        is_retriable(code)
            || code == OUT_OF_ORDER_SEQUENCE
            || (self.txn.is_some() && matches!(code, NOT_COORDINATOR | CONCURRENT_TRANSACTIONS))
    }

    /// The error of a produce answer `code` that no retry mends.
    fn answer_error(&self, partition: i32, code: i16, message: &str) -> Error {
        match (&self.cfg.transactional_id, code) {
            (Some(id), INVALID_PRODUCER_EPOCH | PRODUCER_FENCED) => {
                return Error::Fenced {
                    transactional_id: id.clone(),
                    epoch: self.producer_epoch,
                }
            }
            (Some(id), TRANSACTION_ABORTABLE) => {
                return Error::TransactionAbortable {
                    transactional_id: id.clone(),
                    reason: format!(
                    "the leader of partition {partition} of '{}' answered {} ({code}) {message}",
                    self.cfg.topic,
                    error_name(code)
                ),
                }
            }
            _ => {}
        }
        self.produce_error(
            partition,
            format!("{} ({code}) {message}", error_name(code)),
        )
    }

    fn produce_error(&self, partition: i32, reason: impl Into<String>) -> Error {
        Error::Produce {
            topic: self.cfg.topic.clone(),
            partition,
            reason: reason.into(),
        }
    }

    /// The producer id and epoch its batches carry (-1 and -1 when not idempotent).
    pub fn producer_identity(&self) -> (i64, i16) {
        (self.producer_id, self.producer_epoch)
    }

    /// The transaction protocol this producer speaks with its coordinator (`None` without a
    /// `transactional.id`).
    pub fn transaction_protocol(&self) -> Option<TransactionProtocol> {
        self.txn.as_ref().map(|t| {
            if t.coordinator.is_v2() {
                TransactionProtocol::Kip890
            } else {
                TransactionProtocol::Classic
            }
        })
    }

    /// True while a transaction is open and has written to a partition or committed offsets
    /// (so ending it reaches the coordinator).
    pub fn transaction_has_writes(&self) -> bool {
        self.txn.as_ref().is_some_and(|t| t.open && t.has_writes())
    }

    /// Commits `offsets` (the next offset to read, by source partition) for `group` inside the
    /// open transaction (KIP-447): they become the group's committed offsets when the
    /// transaction commits, together with its records, and never otherwise. A reader that
    /// resumes from them ([`crate::committed_offsets`]) therefore neither skips nor repeats a
    /// record the transaction wrote. The group's coordinator checks `group`'s generation, so a
    /// member the group has moved past gets [`Error::OffsetsFenced`] and must abort.
    pub fn send_offsets_to_transaction(
        &mut self,
        offsets: &[(crate::TopicPartition, i64)],
        group: &crate::GroupMetadata,
    ) -> Result<()> {
        let id = self.cfg.transactional_id.clone().unwrap_or_default();
        let producer = (self.producer_id, self.producer_epoch);
        let Some(t) = &mut self.txn else {
            return Err(Error::Transaction {
                transactional_id: id,
                reason: "the producer has no transactional.id".into(),
            });
        };
        if !t.open {
            return Err(Error::Transaction {
                transactional_id: id,
                reason: "offsets are committed inside a transaction: call begin_transaction \
                         first"
                    .into(),
            });
        }
        if offsets.is_empty() {
            return Ok(());
        }
        let v2 = t.coordinator.is_v2();
        if !t.offsets_of.contains(&group.group_id) {
            if !v2 {
                t.coordinator.add_offsets(producer, &group.group_id)?;
            }
            t.offsets_of.push(group.group_id.clone());
        }
        if t.group_conn_of != group.group_id {
            t.group_conn = None;
            t.group_conn_of = group.group_id.clone();
        }
        crate::transaction::commit_offsets(
            &mut t.group_conn,
            &self.connector,
            &self.cfg.brokers,
            self.cfg.request_timeout,
            &id,
            producer,
            v2,
            group,
            offsets,
        )
    }

    /// Starts a new epoch of this transactional producer (InitProducerId again), between
    /// transactions. Each transaction then has an epoch of its own, so a transaction recorded
    /// by its producer id and epoch can be told apart from the ones after it (see
    /// [`settle_transaction`]). Under KIP-890's protocol the commit began the new epoch
    /// already, and this asks nothing.
    pub fn renew_epoch(&mut self) -> Result<()> {
        let id = self.cfg.transactional_id.clone().unwrap_or_default();
        let Some(t) = &mut self.txn else {
            return Err(Error::Transaction {
                transactional_id: id,
                reason: "the producer has no transactional.id".into(),
            });
        };
        if t.open {
            return Err(Error::Transaction {
                transactional_id: id,
                reason: "a new epoch begins between transactions, and one is open".into(),
            });
        }
        if t.coordinator.is_v2() {
            return Ok(());
        }
        let (producer_id, producer_epoch) = t.coordinator.init_producer_id()?;
        self.producer_id = producer_id;
        self.producer_epoch = producer_epoch;
        // Sequence numbers count from 0 in each epoch.
        self.sequences.iter_mut().for_each(|s| *s = 0);
        Ok(())
    }

    /// Opens a transaction: the records sent until [`Producer::commit_transaction`] or
    /// [`Producer::abort_transaction`] are seen by `read_committed` consumers all together, or
    /// never.
    pub fn begin_transaction(&mut self) -> Result<()> {
        let id = self.cfg.transactional_id.clone().unwrap_or_default();
        let Some(t) = &mut self.txn else {
            return Err(Error::Transaction {
                transactional_id: id,
                reason: "the producer has no transactional.id".into(),
            });
        };
        if t.open {
            return Err(Error::Transaction {
                transactional_id: id,
                reason: "a transaction is already open".into(),
            });
        }
        t.open = true;
        t.added.iter_mut().for_each(|a| *a = false);
        t.offsets_of.clear();
        Ok(())
    }

    /// Sends every record of the open transaction, waits for their acknowledgement, and
    /// commits it.
    pub fn commit_transaction(&mut self) -> Result<()> {
        self.flush()?;
        self.end_transaction(true)
    }

    /// Aborts the open transaction: records not yet sent are dropped, those sent are marked
    /// aborted (a `read_committed` consumer skips them).
    pub fn abort_transaction(&mut self) -> Result<()> {
        for w in &mut self.open {
            w.clear();
        }
        self.await_all()?;
        self.end_transaction(false)?;
        // What the aborted transaction lost is aborted with it: the next one starts whole.
        self.lost = None;
        Ok(())
    }

    fn end_transaction(&mut self, commit: bool) -> Result<()> {
        let producer = (self.producer_id, self.producer_epoch);
        let Some(t) = &mut self.txn else {
            return Err(Error::Transaction {
                transactional_id: String::new(),
                reason: "the producer has no transactional.id".into(),
            });
        };
        if !t.open {
            return Err(Error::Transaction {
                transactional_id: self.cfg.transactional_id.clone().unwrap_or_default(),
                reason: "no transaction is open".into(),
            });
        }
        t.open = false;
        // A transaction that wrote nothing has nothing to end at the coordinator.
        if t.has_writes() {
            let next = t.coordinator.end(producer, commit)?;
            if next != producer {
                (self.producer_id, self.producer_epoch) = next;
                // Sequence numbers count from 0 in each epoch.
                self.sequences.iter_mut().for_each(|s| *s = 0);
            }
        }
        Ok(())
    }

    /// Closes partition `p`'s batch and sends it.
    fn ship(&mut self, p: i32) -> Result<()> {
        self.check_lost()?;
        let mut attributes = self.cfg.compression.id();
        if let Some(t) = &mut self.txn {
            if !t.open {
                return Err(Error::Transaction {
                    transactional_id: self.cfg.transactional_id.clone().unwrap_or_default(),
                    reason: "records are sent inside a transaction: call begin_transaction \
                             first"
                        .into(),
                });
            }
            if !t.added.get(p as usize).copied().unwrap_or(true) {
                // Under KIP-890 the partition's leader adds it when the batch arrives.
                if !t.coordinator.is_v2() {
                    t.coordinator.add_partitions(
                        (self.producer_id, self.producer_epoch),
                        &self.cfg.topic,
                        &[p],
                    )?;
                }
                t.added[p as usize] = true;
            }
            attributes |= TRANSACTIONAL;
        }
        let c = self.cfg.compression;
        // Compressed first: a failure leaves the records, their sequence numbers and the count
        // sent as they were.
        if c != Compression::None {
            compress(c, self.open[p as usize].records(), &mut self.compressed)
                .map_err(|e| self.produce_error(p, format!("compression failed: {e}")))?;
        }
        let seq = &mut self.sequences[p as usize];
        let spec = BatchSpec {
            attributes,
            producer_id: self.producer_id,
            producer_epoch: self.producer_epoch,
            base_sequence: if self.producer_id >= 0 { *seq } else { -1 },
            ..BatchSpec::default()
        };
        let w = &mut self.open[p as usize];
        // Sequence numbers wrap at i32::MAX, as the Java client's do.
        *seq = seq.wrapping_add(w.count) & i32::MAX;
        self.sent += w.count as u64;
        let batch = if c == Compression::None {
            // Uncompressed records become the batch where they were written: no copy. The next
            // buffer is as large as a full batch, not as one grown once by a huge record.
            w.take_batch(
                &spec,
                self.cfg.batch_bytes + BATCH_HEADER_LEN + NEXT_BATCH_SLACK,
            )
        } else {
            let mut batch = Vec::with_capacity(self.compressed.len() + BATCH_HEADER_LEN);
            finish_batch(&mut batch, &spec, w, &self.compressed);
            w.clear();
            batch
        };
        let batch = Bytes::from(batch);
        match self.submit(p, batch.clone()) {
            Ok(()) => Ok(()),
            // A fenced producer, or a transaction that must be aborted: the caller's to end
            // (and, aborted, to write again).
            Err(e @ (Error::Fenced { .. } | Error::TransactionAbortable { .. })) => Err(e),
            // Batches before this one were lost while it waited: it is not sent after them.
            Err(e) if self.lost.is_some() => {
                self.dropped(1, e);
                self.check_lost()
            }
            // No connection to the leader now (a broker restarting): send it once one is back.
            Err(e) if e.is_transient() => self.resend_all(vec![Pending {
                correlation: 0,
                partition: p,
                batch,
            }]),
            // Anything else (no leader, a refused handshake) leaves this batch unwritten.
            Err(e) => Err(self.dropped(1, e)),
        }
    }

    fn link(&mut self, p: i32) -> Result<usize> {
        // The layout is refreshed from the network: a partition may be missing from it.
        let node = self.layout.leaders.get(p as usize).copied().unwrap_or(-1);
        if let Some(i) = self
            .links
            .iter()
            .position(|l| l.node == node && l.lost.is_none())
        {
            return Ok(i);
        }
        let addr = self
            .layout
            .addr(node)
            .ok_or_else(|| self.produce_error(p, format!("no address for leader {node}")))?
            .to_string();
        let conn = self.connector.open(&addr)?;
        let link = BrokerLink {
            node,
            conn,
            pending: VecDeque::new(),
            lost: None,
        };
        // A lost link with nothing left in flight (its batches taken to be sent again) gives
        // its place to the new connection, so indexes held by callers stay valid.
        if let Some(i) = self
            .links
            .iter()
            .position(|l| l.lost.is_some() && l.pending.is_empty())
        {
            self.links[i] = link;
            return Ok(i);
        }
        self.links.push(link);
        Ok(self.links.len() - 1)
    }

    /// Marks link `i` lost after `e` and returns its batches in flight, oldest first, to be
    /// sent again.
    fn lose_link(&mut self, i: usize, e: &Error) -> Vec<Pending> {
        log::warn!(
            "kafka producer of {}: {e}; the batches in flight on that connection are sent again",
            self.cfg.topic
        );
        let link = &mut self.links[i];
        link.lost = Some(lost_by(e));
        link.pending.drain(..).collect()
    }

    fn submit(&mut self, p: i32, batch: Bytes) -> Result<()> {
        // One batch per partition in flight, on any link (a lost link's batch is sent again
        // before the next): a broker accepts a later sequence number from a producer it has no
        // state for, so a retried earlier batch could otherwise be refused or land after it.
        // Other partitions' batches still overlap.
        while let Some(j) = self
            .links
            .iter()
            .position(|l| l.pending.iter().any(|x| x.partition == p))
        {
            self.await_oldest(j)?;
        }
        let i = self.link(p)?;
        // A SASL session due for renewal is renewed before a send with nothing in flight.
        while self.links[i].conn.reauthentication_blocked() {
            self.await_oldest(i)?;
            if self.links[i].lost.is_some() {
                // Its batches went again elsewhere; this one takes a new connection too.
                return self.submit(p, batch);
            }
        }
        // A transaction's batches name their transactional id: the broker checks it against
        // the producer id and the partitions added to the transaction.
        let transactional_id = self
            .cfg
            .transactional_id
            .as_ref()
            .map(|id| TransactionalId(StrBytes::from_string(id.clone())));
        let req = ProduceRequest::default()
            .with_transactional_id(transactional_id)
            .with_acks(self.cfg.acks)
            .with_timeout_ms(self.cfg.request_timeout.as_millis().min(i32::MAX as u128) as i32)
            .with_topic_data(vec![TopicProduceData::default()
                .with_name(TopicName(StrBytes::from_string(self.cfg.topic.clone())))
                .with_partition_data(vec![PartitionProduceData::default()
                    .with_index(p)
                    .with_records(Some(Bytes::new()))])]);
        let (mut head, tail) = produce_frame_around(self.version, &req, batch.len())
            .map_err(|e| self.produce_error(p, e))?;
        let link = &mut self.links[i];
        let correlation = match link.conn.send_frame_parts(&mut head, &batch, tail) {
            Ok(c) => c,
            // The batch joins those in flight; waiting for its answer finds the link lost and
            // sends them all again.
            Err(e) if e.is_transient() => {
                link.lost = Some(lost_by(&e));
                if self.cfg.acks == 0 {
                    // Nothing waits for an answer: the caller sends it again.
                    return Err(e);
                }
                0
            }
            Err(e) => return Err(e),
        };
        if self.cfg.acks == 0 {
            link.conn.forget_reply();
            return Ok(());
        }
        link.pending.push_back(Pending {
            correlation,
            partition: p,
            batch,
        });
        if self.links[i].pending.len() >= self.in_flight_limit() {
            self.await_oldest(i)?;
        }
        Ok(())
    }

    fn in_flight_limit(&self) -> usize {
        self.cfg.max_in_flight.max(1)
    }

    /// The error code for the pending batch's partition in a produce response.
    fn answer(&mut self, i: usize, pending: &Pending) -> Result<(i16, String)> {
        let link = &mut self.links[i];
        if let Some((broker, kind, reason)) = &link.lost {
            return Err(Error::Io {
                broker: broker.clone(),
                source: std::io::Error::new(*kind, reason.clone()),
            });
        }
        let mut body = link.conn.recv_frame("Produce", pending.correlation)?;
        let resp: ProduceResponse = decode_response(ApiKey::Produce, self.version, &mut body)
            .map_err(|e| link.conn.protocol("Produce", e))?;
        for t in &resp.responses {
            for pr in &t.partition_responses {
                if pr.index == pending.partition && pr.error_code != 0 {
                    let message = pr
                        .error_message
                        .as_ref()
                        .map_or(String::new(), |m| m.as_str().to_string());
                    return Ok((pr.error_code, message));
                }
            }
        }
        Ok((0, String::new()))
    }

    fn await_oldest(&mut self, i: usize) -> Result<()> {
        let Some(pending) = self.links[i].pending.pop_front() else {
            return Ok(());
        };
        let (code, message) = match self.answer(i, &pending) {
            Ok(a) => a,
            Err(e) if e.is_transient() => {
                // Nothing in flight on this link is known to be written: send it all again
                // (one batch per partition is in flight, so each partition keeps its order;
                // an idempotent producer's sequence numbers drop what was written already).
                let mut lost = vec![pending];
                lost.extend(self.lose_link(i, &e));
                return self.resend_all(lost);
            }
            Err(e) => return Err(self.dropped(1, e)),
        };
        // DUPLICATE_SEQUENCE_NUMBER: an earlier attempt of this very batch was written.
        if code == 0 || code == DUPLICATE_SEQUENCE {
            return Ok(());
        }
        if !self.retriable(code) {
            let e = self.answer_error(pending.partition, code, &message);
            return Err(self.dropped_unless_ended(1, e));
        }
        // The leader moved (or is not ready yet). Every later batch on this link may fail the
        // same way, so collect the failures and resend them one by one after a refresh (they
        // are of other partitions: one batch per partition is in flight).
        let mut failed = vec![pending];
        while let Some(next) = self.links[i].pending.pop_front() {
            let (code, message) = match self.answer(i, &next) {
                Ok(a) => a,
                Err(e) if e.is_transient() => {
                    failed.push(next);
                    failed.extend(self.lose_link(i, &e));
                    break;
                }
                Err(e) => return Err(self.dropped(failed.len() + 1, e)),
            };
            if code == 0 || code == DUPLICATE_SEQUENCE {
                continue;
            }
            if !self.retriable(code) {
                let e = self.answer_error(next.partition, code, &message);
                return Err(self.dropped_unless_ended(failed.len() + 1, e));
            }
            failed.push(next);
        }
        self.resend_all(failed)
    }

    /// Sends one failed batch again, synchronously, refreshing the layout between attempts,
    /// until it is written or `request_timeout` has passed: a leader that moved, or a broker
    /// that restarts (its connections lost, then refused for a while).
    fn resend(&mut self, f: Pending) -> Result<()> {
        let deadline = Instant::now() + self.cfg.request_timeout;
        let mut wait = Duration::from_millis(50);
        let mut last = String::new();
        let mut lost = None;
        while Instant::now() + wait <= deadline {
            std::thread::sleep(wait);
            wait = (wait * 2).min(Duration::from_secs(1));
            match self.resend_once(&f) {
                Ok(None) => return Ok(()),
                Ok(Some(reason)) => {
                    last = reason;
                    lost = None;
                }
                // A transaction that must be aborted is the caller's to write again.
                Err(e @ Error::TransactionAbortable { .. }) => return Err(e),
                // Others in flight were lost meanwhile: this one is not sent after them.
                Err(e @ Error::BatchesLost { .. }) => return Err(e),
                Err(e) if e.is_transient() => lost = Some(e),
                Err(e) => return Err(e),
            }
        }
        // Still no connection: the connection error itself, which a caller may retry longer
        // (an exactly-once sink does, with a new producer).
        match lost {
            Some(e) => Err(e),
            None => Err(self.produce_error(f.partition, format!("gave up resending: {last}"))),
        }
    }

    /// One attempt of [`Producer::resend`]: `None` once written, or why it was not, when a
    /// later attempt may write it.
    fn resend_once(&mut self, f: &Pending) -> Result<Option<String>> {
        let mut conn = cluster::connect_any(&self.connector, &self.cfg.brokers)?;
        self.layout = cluster::topic_layout(&mut conn, &self.cfg.topic)?;
        if self
            .layout
            .leaders
            .get(f.partition as usize)
            .is_none_or(|&l| l < 0)
        {
            return Ok(Some(format!("partition {} has no leader", f.partition)));
        }
        // Connections to a node that lost leadership are kept: it may lead others.
        let i = self.link(f.partition)?;
        let before = self.links[i].pending.len();
        self.submit(f.partition, f.batch.clone())?;
        if self.links[i].pending.len() == before {
            return Ok(None); // acks = 0, or answered inside submit
        }
        let Some(p) = self.links[i].pending.pop_back() else {
            return Ok(None);
        };
        let (code, message) = match self.answer(i, &p) {
            Ok(a) => a,
            Err(e) if e.is_transient() => {
                // Others in flight on the link are lost with it: they go again first.
                let others = self.lose_link(i, &e);
                self.resend_all(others)?;
                return Err(e);
            }
            Err(e) => return Err(e),
        };
        if code == 0 || code == DUPLICATE_SEQUENCE {
            return Ok(None);
        }
        if !self.retriable(code) {
            return Err(self.answer_error(f.partition, code, &message));
        }
        Ok(Some(format!("{} ({code}) {message}", error_name(code))))
    }
}

/// OUT_OF_ORDER_SEQUENCE_NUMBER: an earlier batch of the partition failed; resend in order.
const OUT_OF_ORDER_SEQUENCE: i16 = 45;
/// DUPLICATE_SEQUENCE_NUMBER: the batch was already written.
const DUPLICATE_SEQUENCE: i16 = 46;
/// INVALID_PRODUCER_EPOCH, PRODUCER_FENCED: a newer producer of the transactional id took over.
const INVALID_PRODUCER_EPOCH: i16 = 47;
const PRODUCER_FENCED: i16 = 90;
/// NOT_COORDINATOR, CONCURRENT_TRANSACTIONS: see [`Producer::retriable`].
const NOT_COORDINATOR: i16 = 16;
const CONCURRENT_TRANSACTIONS: i16 = 51;
/// TRANSACTION_ABORTABLE (KIP-890): the open transaction cannot commit any more (its
/// coordinator aborted it, or a write of it failed for good); it must be aborted.
const TRANSACTION_ABORTABLE: i16 = 120;

/// Which of Kafka's transaction protocols a transactional producer speaks, chosen from what the
/// cluster offers.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TransactionProtocol {
    /// Partitions added with AddPartitionsToTxn; the epoch changes only with InitProducerId.
    Classic,
    /// KIP-890 (the cluster's `transaction.version` 2 or more): partitions join with their
    /// first Produce, and every EndTxn begins a new epoch.
    Kip890,
}

/// Settles the transaction that producer `producer` (its id and epoch) of `cfg`'s
/// `transactional.id` left when it stopped: commits it if it is still open. Call it before
/// [`Producer::connect`] with the same id, whose new epoch would abort that transaction.
///
/// The answer is exact for a producer that calls [`Producer::renew_epoch`] after each commit
/// and never aborts a transaction with writes itself: [`Settled::EndedBefore`] then means the
/// transaction committed before the stop, and [`Settled::AbortedByCoordinator`] that it stayed
/// open longer than `transaction.timeout.ms` and its coordinator aborted it. (Once the
/// coordinator has forgotten the id, after `transactional.id.expiration.ms`, an abort can no
/// longer be told apart and answers [`Settled::EndedBefore`].)
pub fn settle_transaction(cfg: &ProducerConfig, producer: (i64, i16)) -> Result<Settled> {
    let Some(id) = &cfg.transactional_id else {
        return Err(Error::Transaction {
            transactional_id: String::new(),
            reason: "the producer has no transactional.id".into(),
        });
    };
    let connector = Connector::new(&cfg.security, cfg.request_timeout)?;
    let mut coordinator = crate::transaction::Coordinator::find(
        &connector,
        &cfg.brokers,
        id,
        cfg.request_timeout,
        cfg.transaction_timeout,
    )?;
    coordinator.settle(producer)
}

/// What the transaction coordinator of `cfg`'s `transactional.id` says of it now (`None` when
/// it has no state for the id). It changes nothing.
pub fn describe_transaction(cfg: &ProducerConfig) -> Result<Option<TransactionStatus>> {
    let Some(id) = &cfg.transactional_id else {
        return Err(Error::Transaction {
            transactional_id: String::new(),
            reason: "the producer has no transactional.id".into(),
        });
    };
    let connector = Connector::new(&cfg.security, cfg.request_timeout)?;
    crate::transaction::Coordinator::find(
        &connector,
        &cfg.brokers,
        id,
        cfg.request_timeout,
        cfg.transaction_timeout,
    )?
    .describe()
}

/// Room past `batch.size` in a partition's next records buffer: a batch closes after the record
/// that reaches `batch.size`, so that record usually fits without the buffer growing.
const NEXT_BATCH_SLACK: usize = 64 << 10;

/// A Produce request of one topic and one partition, framed around its batch instead of
/// holding it: the frame's head (size prefix counting the batch) and the bytes after the batch.
/// `req` carries an empty batch; its encoding ends with the records field (an `i32` length,
/// or from version 9 a compact length, then three empty tag buffers: partition, topic,
/// request), which is cut off and written again with the real length, so the batch goes out
/// from where it was built and is never copied into the frame.
fn produce_frame_around(
    version: i16,
    req: &ProduceRequest,
    batch_len: usize,
) -> std::result::Result<(Vec<u8>, &'static [u8]), String> {
    const FLEXIBLE_END: [u8; 4] = [1, 0, 0, 0];
    const TAGS: &[u8] = &[0, 0, 0];
    let mut head = Connection::encode_frame(ApiKey::Produce, version, 0, req)?;
    let flexible = version >= 9;
    let end: &[u8] = if flexible { &FLEXIBLE_END } else { &[0; 4] };
    if !head.ends_with(end) {
        return Err(format!(
            "a Produce request of version {version} does not end with its records field"
        ));
    }
    head.truncate(head.len() - end.len());
    let tail = if flexible {
        let mut n = batch_len as u64 + 1;
        while n >= 0x80 {
            head.push(n as u8 | 0x80);
            n >>= 7;
        }
        head.push(n as u8);
        TAGS
    } else {
        let len = i32::try_from(batch_len).map_err(|_| format!("a batch of {batch_len} bytes"))?;
        head.extend_from_slice(&len.to_be_bytes());
        &[]
    };
    let size = i32::try_from(head.len() - 4 + batch_len + tail.len())
        .map_err(|_| format!("a Produce request of {batch_len} bytes of records"))?;
    head[..4].copy_from_slice(&size.to_be_bytes());
    Ok((head, tail))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A Produce request for partition 3 of `t`, holding `records`.
    fn request(transactional: bool, records: Bytes) -> ProduceRequest {
        ProduceRequest::default()
            .with_transactional_id(
                transactional.then(|| TransactionalId(StrBytes::from_static_str("tx-1"))),
            )
            .with_acks(-1)
            .with_timeout_ms(30_000)
            .with_topic_data(vec![TopicProduceData::default()
                .with_name(TopicName(StrBytes::from_static_str("t")))
                .with_partition_data(vec![PartitionProduceData::default()
                    .with_index(3)
                    .with_records(Some(records))])])
    }

    #[test]
    fn a_frame_around_its_batch_is_the_frame_that_holds_it() {
        // Lengths on both sides of a compact length's one- and two-byte forms, and long ones.
        for len in [0usize, 1, 126, 127, 128, 16_383, 16_384, 1 << 20] {
            let batch: Bytes = (0..len).map(|i| (i * 7) as u8).collect::<Vec<u8>>().into();
            for version in 3..=12 {
                for transactional in [false, true] {
                    let whole = Connection::encode_frame(
                        ApiKey::Produce,
                        version,
                        0,
                        &request(transactional, batch.clone()),
                    )
                    .unwrap();
                    let (head, tail) =
                        produce_frame_around(version, &request(transactional, Bytes::new()), len)
                            .unwrap();
                    let parts = [&head[..], &batch[..], tail].concat();
                    assert!(parts == whole, "version {version}, {len} bytes");
                }
            }
        }
    }

    #[test]
    fn murmur2_matches_the_java_client() {
        // Values from Kafka's UtilsTest.testMurmur2.
        assert_eq!(murmur2(b"21"), -973932308);
        assert_eq!(murmur2(b"foobar"), -790332482);
        assert_eq!(murmur2(b"a-little-bit-long-string"), -985981536);
        assert_eq!(murmur2(b"a-little-bit-longer-string"), -1486304829);
        assert_eq!(
            murmur2(b"lkjh234lh9fiuh90y23oiuhsafujhadof229phr9h19h89h8"),
            -58897971
        );
        assert_eq!(murmur2(b"abc"), 479470107);
    }
}
