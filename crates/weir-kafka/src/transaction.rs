//! A transactional producer's side of Kafka's transaction protocol (KIP-98), with the
//! transaction coordinator of its `transactional.id`: find it, get the producer id and epoch
//! (which fences every older producer of the same id and aborts its open transaction), add
//! partitions to the open transaction before the first batch to each, and end the transaction
//! with a commit or an abort.
//!
//! Two protocols, chosen once per producer from what the cluster offers:
//! * the classic one (request versions before KIP-890's), which every broker from 2.5 on
//!   speaks: partitions are added with AddPartitionsToTxn, and the epoch stays the same across
//!   transactions until InitProducerId is asked again;
//! * KIP-890's, where the cluster's `transaction.version` feature is 2 or more (Kafka 4.0 and
//!   later, new clusters): a partition joins the transaction with its first Produce (v12), so
//!   AddPartitionsToTxn is not sent, and each EndTxn (v5) ends the transaction with a new epoch,
//!   which fences a late batch or a retried commit of the transaction before.

use std::time::{Duration, Instant};

use std::collections::BTreeMap;

use kafka_protocol::messages::{
    add_partitions_to_txn_request::AddPartitionsToTxnTopic,
    txn_offset_commit_request::{TxnOffsetCommitRequestPartition, TxnOffsetCommitRequestTopic},
    AddOffsetsToTxnRequest, AddOffsetsToTxnResponse, AddPartitionsToTxnRequest,
    AddPartitionsToTxnResponse, ApiKey, DescribeTransactionsRequest, DescribeTransactionsResponse,
    EndTxnRequest, EndTxnResponse, FindCoordinatorRequest, FindCoordinatorResponse, GroupId,
    InitProducerIdRequest, InitProducerIdResponse, ProducerId, TopicName, TransactionalId,
    TxnOffsetCommitRequest, TxnOffsetCommitResponse,
};
use kafka_protocol::protocol::StrBytes;

use crate::cluster;
use crate::connection::{Connection, Connector};
use crate::error::{error_name, Error, Result};
use crate::group::{GroupMetadata, TopicPartition};

/// COORDINATOR_LOAD_IN_PROGRESS, COORDINATOR_NOT_AVAILABLE, NOT_COORDINATOR,
/// CONCURRENT_TRANSACTIONS (the previous transaction is still being completed): wait and ask
/// again (after finding the coordinator again, for the middle two).
const LOADING: i16 = 14;
const NOT_AVAILABLE: i16 = 15;
const NOT_COORDINATOR: i16 = 16;
const CONCURRENT_TRANSACTIONS: i16 = 51;
/// INVALID_PRODUCER_EPOCH and PRODUCER_FENCED: a newer producer of the same id took over.
const INVALID_PRODUCER_EPOCH: i16 = 47;
const PRODUCER_FENCED: i16 = 90;
/// INVALID_PRODUCER_ID_MAPPING: the id has a new producer id (its epochs ran out).
const INVALID_PRODUCER_ID_MAPPING: i16 = 49;
/// INVALID_TXN_STATE: under KIP-890, a commit sent again for a transaction that ended with an
/// abort (its epoch is the one before the current).
const INVALID_TXN_STATE: i16 = 48;

/// TRANSACTIONAL_ID_NOT_FOUND: the coordinator has no state for the id (never used, or expired
/// after `transactional.id.expiration.ms`).
const TRANSACTIONAL_ID_NOT_FOUND: i16 = 105;

/// UNKNOWN_TOPIC_OR_PARTITION (the offsets topic not ready yet), and the answers by which a group
/// coordinator refuses a member's offsets: the group moved past the member's generation or
/// epoch, or does not know the member.
const UNKNOWN_TOPIC_OR_PARTITION: i16 = 3;
const GROUP_MOVED_ON: [i16; 5] = [
    22,  // ILLEGAL_GENERATION
    25,  // UNKNOWN_MEMBER_ID
    82,  // FENCED_INSTANCE_ID
    110, // FENCED_MEMBER_EPOCH
    113, // STALE_MEMBER_EPOCH
];
/// TRANSACTION_ABORTABLE (KIP-890): the transaction cannot commit any more.
const TRANSACTION_ABORTABLE: i16 = 120;

/// What [`crate::settle_transaction`] found of a transaction recorded before a stop.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Settled {
    /// It was open or committing, and is committed now (or was committed with this very epoch).
    Committed,
    /// The id has moved on to a later epoch: the transaction had ended before.
    EndedBefore,
    /// Its coordinator aborted it, with the epoch after it (or, at the id's last epoch, a new
    /// producer id at epoch 0): the transaction stayed open longer than its
    /// `transaction.timeout.ms`. Its records are never visible to a `read_committed`
    /// consumer.
    AbortedByCoordinator {
        /// The timeout the transaction ran under, as the coordinator records it (ms).
        timeout_ms: i32,
    },
}

/// What a transaction coordinator says of a `transactional.id` (DescribeTransactions, KIP-664).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TransactionStatus {
    /// The coordinator's state of the id's transaction, as Kafka names it: `Empty`, `Ongoing`,
    /// `PrepareCommit`, `PrepareAbort`, `CompleteCommit`, `CompleteAbort`, `PrepareEpochFence`
    /// or `Dead`.
    pub state: String,
    /// The id's producer id now.
    pub producer_id: i64,
    /// The id's producer epoch now.
    pub producer_epoch: i16,
    /// The timeout of the id's transactions (ms), as its last InitProducerId set it.
    pub transaction_timeout_ms: i32,
}

impl TransactionStatus {
    /// The transaction is aborted or being aborted.
    pub fn is_abort(&self) -> bool {
        matches!(self.state.as_str(), "PrepareAbort" | "CompleteAbort")
    }

    /// Whether this is the coordinator's abort of the transaction `producer` (a producer id
    /// and epoch) wrote, for its timeout, given that the id's producer never aborts a
    /// transaction with writes at its own epoch (weir's exactly-once sink renews its epoch
    /// only after a commit). The coordinator fences a timed-out transaction with the next
    /// epoch, under both protocols. At an exhausted epoch (`Short.MAX_VALUE - 1` and up, as
    /// Kafka counts) a coordinator may instead rotate to a new producer id at epoch 0 once the
    /// abort completes (Kafka's KAFKA-20090), which no other history of the id shows right
    /// after that epoch: a commit there rotates too, but the next transaction's own abort
    /// would leave epoch 1.
    pub fn is_coordinators_abort_of(&self, producer: (i64, i16)) -> bool {
        let fenced_next = self.producer_id == producer.0
            && producer.1.checked_add(1) == Some(self.producer_epoch);
        let rotated = producer.1 >= EXHAUSTED_EPOCH
            && self.producer_id != producer.0
            && self.producer_epoch == 0;
        self.is_abort() && (fenced_next || rotated)
    }
}

/// The first producer epoch Kafka's coordinator counts as exhausted (`Short.MAX_VALUE - 1`):
/// the id moves to a new producer id after it (under the new protocol when the transaction at
/// it ends; under the classic one at the next InitProducerId).
const EXHAUSTED_EPOCH: i16 = i16::MAX - 1;

/// The connection to the coordinator of one `transactional.id`.
pub(crate) struct Coordinator {
    id: String,
    connector: Connector,
    brokers: Vec<String>,
    conn: Connection,
    timeout: Duration,
    transaction_timeout_ms: i32,
    /// KIP-890's protocol (transaction version 2), decided when the coordinator was found.
    v2: bool,
}

impl Coordinator {
    /// Finds the coordinator of `id` through any of `brokers`.
    pub(crate) fn find(
        connector: &Connector,
        brokers: &[String],
        id: &str,
        timeout: Duration,
        transaction_timeout: Duration,
    ) -> Result<Self> {
        let conn = locate(connector, brokers, id, timeout)?;
        let v2 =
            conn.transaction_version() >= 2 && conn.version(ApiKey::EndTxn, "EndTxn", 5, 5).is_ok();
        Ok(Self {
            id: id.to_string(),
            connector: connector.clone(),
            brokers: brokers.to_vec(),
            conn,
            timeout,
            transaction_timeout_ms: i32::try_from(transaction_timeout.as_millis())
                .unwrap_or(i32::MAX),
            v2,
        })
    }

    /// True under KIP-890's protocol: no AddPartitionsToTxn (Produce v12 adds the partition),
    /// and a new epoch with every EndTxn.
    pub(crate) fn is_v2(&self) -> bool {
        self.v2
    }

    fn error(&self, reason: String) -> Error {
        Error::Transaction {
            transactional_id: self.id.clone(),
            reason,
        }
    }

    /// A failed answer: fenced, worth another try (`Ok`), or final.
    fn check(&mut self, api: &str, code: i16, epoch: i16) -> Result<bool> {
        match code {
            0 => Ok(true),
            INVALID_PRODUCER_EPOCH | PRODUCER_FENCED => Err(Error::Fenced {
                transactional_id: self.id.clone(),
                epoch,
            }),
            LOADING | CONCURRENT_TRANSACTIONS => {
                std::thread::sleep(Duration::from_millis(50));
                Ok(false)
            }
            NOT_AVAILABLE | NOT_COORDINATOR => {
                std::thread::sleep(Duration::from_millis(50));
                self.conn = locate(&self.connector, &self.brokers, &self.id, self.timeout)?;
                Ok(false)
            }
            _ => Err(self.error(format!("{api} failed: {} ({code})", error_name(code)))),
        }
    }

    /// The producer id and epoch of this `transactional.id`: a bumped epoch, which fences every
    /// older producer of the id and aborts the transaction it left open.
    pub(crate) fn init_producer_id(&mut self) -> Result<(i64, i16)> {
        let deadline = Instant::now() + self.timeout;
        loop {
            let v = self
                .conn
                .version(ApiKey::InitProducerId, "InitProducerId", 0, 4)?;
            let req = InitProducerIdRequest::default()
                .with_transactional_id(Some(TransactionalId(StrBytes::from_string(
                    self.id.clone(),
                ))))
                .with_transaction_timeout_ms(self.transaction_timeout_ms)
                .with_producer_id(ProducerId(-1))
                .with_producer_epoch(-1);
            let resp: InitProducerIdResponse =
                self.conn.request(ApiKey::InitProducerId, v, &req)?;
            if self.check("InitProducerId", resp.error_code, -1)? {
                return Ok((resp.producer_id.0, resp.producer_epoch));
            }
            self.give_up_after(deadline, "InitProducerId", resp.error_code)?;
        }
    }

    /// Adds `partitions` of `topic` to the open transaction.
    pub(crate) fn add_partitions(
        &mut self,
        producer: (i64, i16),
        topic: &str,
        partitions: &[i32],
    ) -> Result<()> {
        let deadline = Instant::now() + self.timeout;
        loop {
            let v = self
                .conn
                .version(ApiKey::AddPartitionsToTxn, "AddPartitionsToTxn", 0, 3)?;
            let req = AddPartitionsToTxnRequest::default()
                .with_v3_and_below_transactional_id(TransactionalId(StrBytes::from_string(
                    self.id.clone(),
                )))
                .with_v3_and_below_producer_id(ProducerId(producer.0))
                .with_v3_and_below_producer_epoch(producer.1)
                .with_v3_and_below_topics(vec![AddPartitionsToTxnTopic::default()
                    .with_name(TopicName(StrBytes::from_string(topic.to_string())))
                    .with_partitions(partitions.to_vec())]);
            let resp: AddPartitionsToTxnResponse =
                self.conn.request(ApiKey::AddPartitionsToTxn, v, &req)?;
            // The first partition that failed speaks for the request (they fail alike).
            let code = resp
                .results_by_topic_v3_and_below
                .iter()
                .flat_map(|t| &t.results_by_partition)
                .map(|p| p.partition_error_code)
                .find(|&c| c != 0)
                .unwrap_or(resp.error_code);
            if self.check("AddPartitionsToTxn", code, producer.1)? {
                return Ok(());
            }
            self.give_up_after(deadline, "AddPartitionsToTxn", code)?;
        }
    }

    /// Adds the offsets of consumer group `group_id` to the open transaction (the classic
    /// protocol; under KIP-890 the TxnOffsetCommit itself adds them).
    pub(crate) fn add_offsets(&mut self, producer: (i64, i16), group_id: &str) -> Result<()> {
        let deadline = Instant::now() + self.timeout;
        loop {
            let v = self
                .conn
                .version(ApiKey::AddOffsetsToTxn, "AddOffsetsToTxn", 0, 3)?;
            let req = AddOffsetsToTxnRequest::default()
                .with_transactional_id(TransactionalId(StrBytes::from_string(self.id.clone())))
                .with_producer_id(ProducerId(producer.0))
                .with_producer_epoch(producer.1)
                .with_group_id(GroupId(StrBytes::from_string(group_id.to_string())));
            let resp: AddOffsetsToTxnResponse =
                self.conn.request(ApiKey::AddOffsetsToTxn, v, &req)?;
            if self.check("AddOffsetsToTxn", resp.error_code, producer.1)? {
                return Ok(());
            }
            self.give_up_after(deadline, "AddOffsetsToTxn", resp.error_code)?;
        }
    }

    /// Commits (`commit`) or aborts the open transaction. Returns the producer id and epoch
    /// of the next transaction: `producer` under the classic protocol, the new epoch (or, when
    /// the epochs ran out, a new producer id) under KIP-890's.
    pub(crate) fn end(&mut self, producer: (i64, i16), commit: bool) -> Result<(i64, i16)> {
        let deadline = Instant::now() + self.timeout;
        loop {
            let (code, next) = self.end_txn(producer, commit)?;
            if self.check("EndTxn", code, producer.1)? {
                return Ok(next);
            }
            self.give_up_after(deadline, "EndTxn", code)?;
        }
    }

    /// Commits the transaction `producer` (a producer id and epoch) left, if it is still open.
    /// A producer that starts a new epoch only after its last transaction committed (as
    /// weir's exactly-once sink does) can tell from the answer whether that transaction is
    /// committed: [`Settled::Committed`] when this commit (or an earlier one with the same
    /// epoch) completed it; [`Settled::EndedBefore`] when the id is at a later epoch already,
    /// or has a new producer id.
    pub(crate) fn settle(&mut self, producer: (i64, i16)) -> Result<Settled> {
        let deadline = Instant::now() + self.timeout;
        loop {
            let (code, _) = self.end_txn(producer, true)?;
            if matches!(
                code,
                INVALID_PRODUCER_EPOCH | PRODUCER_FENCED | INVALID_PRODUCER_ID_MAPPING
            ) || (self.v2 && code == INVALID_TXN_STATE)
            {
                // Ended without this commit: by the coordinator for its timeout (which
                // `is_coordinators_abort_of` tells from what the coordinator shows now), or
                // before the stop.
                let status = match self.describe() {
                    Ok(status) => status,
                    // A broker before Kafka 3.0 cannot say; the answer stays what it was.
                    Err(Error::UnsupportedVersion { .. }) => {
                        log::warn!(
                            "transactional id '{}': the coordinator does not answer \
                             DescribeTransactions (a broker before Kafka 3.0), so a transaction \
                             it aborted for its timeout cannot be told from one committed",
                            self.id
                        );
                        None
                    }
                    Err(e) => return Err(e),
                };
                return Ok(match status {
                    Some(s) if s.is_coordinators_abort_of(producer) => {
                        Settled::AbortedByCoordinator {
                            timeout_ms: s.transaction_timeout_ms,
                        }
                    }
                    _ => Settled::EndedBefore,
                });
            }
            if self.check("EndTxn", code, producer.1)? {
                return Ok(Settled::Committed);
            }
            self.give_up_after(deadline, "EndTxn", code)?;
        }
    }

    /// The coordinator's state of the id (`None` when it has none: the id was never used, or
    /// expired).
    pub(crate) fn describe(&mut self) -> Result<Option<TransactionStatus>> {
        let deadline = Instant::now() + self.timeout;
        loop {
            let v =
                self.conn
                    .version(ApiKey::DescribeTransactions, "DescribeTransactions", 0, 0)?;
            let req = DescribeTransactionsRequest::default().with_transactional_ids(vec![
                TransactionalId(StrBytes::from_string(self.id.clone())),
            ]);
            let resp: DescribeTransactionsResponse =
                self.conn.request(ApiKey::DescribeTransactions, v, &req)?;
            let Some(t) = resp.transaction_states.first() else {
                return Err(self.error("DescribeTransactions answered without the id".into()));
            };
            match t.error_code {
                0 => {
                    return Ok(Some(TransactionStatus {
                        state: t.transaction_state.to_string(),
                        producer_id: t.producer_id.0,
                        producer_epoch: t.producer_epoch,
                        transaction_timeout_ms: t.transaction_timeout_ms,
                    }))
                }
                TRANSACTIONAL_ID_NOT_FOUND => return Ok(None),
                code => {
                    if !self.check("DescribeTransactions", code, -1)? {
                        self.give_up_after(deadline, "DescribeTransactions", code)?;
                    }
                }
            }
        }
    }

    /// One EndTxn request; its answer's error code and the producer id and epoch that follow.
    fn end_txn(&mut self, producer: (i64, i16), commit: bool) -> Result<(i16, (i64, i16))> {
        // Version 5 is what tells the coordinator the transaction is KIP-890's.
        let v = if self.v2 {
            self.conn.version(ApiKey::EndTxn, "EndTxn", 5, 5)?
        } else {
            self.conn.version(ApiKey::EndTxn, "EndTxn", 0, 4)?
        };
        let req = EndTxnRequest::default()
            .with_transactional_id(TransactionalId(StrBytes::from_string(self.id.clone())))
            .with_producer_id(ProducerId(producer.0))
            .with_producer_epoch(producer.1)
            .with_committed(commit);
        let resp: EndTxnResponse = self.conn.request(ApiKey::EndTxn, v, &req)?;
        let next = if v >= 5 && resp.error_code == 0 {
            (resp.producer_id.0, resp.producer_epoch)
        } else {
            producer
        };
        Ok((resp.error_code, next))
    }

    fn give_up_after(&self, deadline: Instant, api: &str, code: i16) -> Result<()> {
        if Instant::now() >= deadline {
            // Only the answers `check` waits on get here: the coordinator is busy or moving,
            // not gone for good, so a caller with a longer patience may try again.
            return Err(Error::CoordinatorNotReady {
                transactional_id: self.id.clone(),
                reason: format!(
                    "{api} still answered {} ({code}) after {:?}",
                    error_name(code),
                    self.timeout
                ),
            });
        }
        Ok(())
    }
}

/// A connection to the transaction coordinator of `id`, asked of any of `brokers`.
fn locate(
    connector: &Connector,
    brokers: &[String],
    id: &str,
    timeout: Duration,
) -> Result<Connection> {
    let deadline = Instant::now() + timeout;
    loop {
        let mut conn = cluster::connect_any(connector, brokers)?;
        let v = conn.version(ApiKey::FindCoordinator, "FindCoordinator", 1, 5)?;
        // Key type 1: a transaction coordinator. Versions 4 and later ask for a list of keys.
        let mut req = FindCoordinatorRequest::default().with_key_type(1);
        if v >= 4 {
            req = req.with_coordinator_keys(vec![StrBytes::from_string(id.to_string())]);
        } else {
            req = req.with_key(StrBytes::from_string(id.to_string()));
        }
        let resp: FindCoordinatorResponse = conn.request(ApiKey::FindCoordinator, v, &req)?;
        let (code, node, host, port) = match resp.coordinators.first() {
            Some(c) if v >= 4 => (c.error_code, c.node_id.0, c.host.to_string(), c.port),
            _ => (
                resp.error_code,
                resp.node_id.0,
                resp.host.to_string(),
                resp.port,
            ),
        };
        if code == 0 && node >= 0 {
            return connector.open(&format!("{host}:{port}"));
        }
        if Instant::now() >= deadline || !matches!(code, LOADING | NOT_AVAILABLE | NOT_COORDINATOR)
        {
            return Err(Error::Transaction {
                transactional_id: id.to_string(),
                reason: format!(
                    "no transaction coordinator: FindCoordinator answered {} ({code})",
                    error_name(code)
                ),
            });
        }
        std::thread::sleep(Duration::from_millis(100));
    }
}

/// Commits `offsets` of `group` inside the open transaction of `transactional_id` (TxnOffsetCommit
/// to the group's coordinator, whose connection `conn` keeps between calls). They become the
/// group's committed offsets when the transaction commits, and vanish when it aborts. `v2`:
/// KIP-890's version 5, which adds the offsets to the transaction itself.
///
/// A member the group has moved past gets [`Error::OffsetsFenced`]: its transaction must be
/// aborted, as its partitions may be another's.
#[allow(clippy::too_many_arguments)]
pub(crate) fn commit_offsets(
    conn: &mut Option<Connection>,
    connector: &Connector,
    brokers: &[String],
    timeout: Duration,
    transactional_id: &str,
    producer: (i64, i16),
    v2: bool,
    group: &GroupMetadata,
    offsets: &[(TopicPartition, i64)],
) -> Result<()> {
    let mut by_topic: BTreeMap<&str, Vec<TxnOffsetCommitRequestPartition>> = BTreeMap::new();
    let stamp = crate::group::commit_stamp();
    for ((topic, partition), offset) in offsets {
        by_topic.entry(topic).or_default().push(
            TxnOffsetCommitRequestPartition::default()
                .with_partition_index(*partition)
                .with_committed_offset(*offset)
                .with_committed_leader_epoch(-1)
                .with_committed_metadata(Some(stamp.clone())),
        );
    }
    let req = TxnOffsetCommitRequest::default()
        .with_transactional_id(TransactionalId(StrBytes::from_string(
            transactional_id.to_string(),
        )))
        .with_group_id(GroupId(StrBytes::from_string(group.group_id.clone())))
        .with_producer_id(ProducerId(producer.0))
        .with_producer_epoch(producer.1)
        .with_generation_id(group.generation)
        .with_member_id(StrBytes::from_string(group.member_id.clone()))
        .with_group_instance_id(group.instance_id.clone().map(StrBytes::from_string))
        .with_topics(
            by_topic
                .into_iter()
                .map(|(t, partitions)| {
                    TxnOffsetCommitRequestTopic::default()
                        .with_name(TopicName(StrBytes::from_string(t.to_string())))
                        .with_partitions(partitions)
                })
                .collect(),
        );
    let deadline = Instant::now() + timeout;
    loop {
        let c = match conn {
            Some(c) => c,
            None => conn.insert(crate::group::locate(
                connector,
                brokers,
                &group.group_id,
                timeout,
            )?),
        };
        // Version 3 is the first with the member's generation and id (KIP-447).
        let v = if v2 {
            c.version(ApiKey::TxnOffsetCommit, "TxnOffsetCommit", 5, 5)?
        } else {
            c.version(ApiKey::TxnOffsetCommit, "TxnOffsetCommit", 3, 4)?
        };
        let resp: TxnOffsetCommitResponse = match c.request(ApiKey::TxnOffsetCommit, v, &req) {
            Ok(r) => r,
            Err(e) => {
                *conn = None;
                return Err(e);
            }
        };
        let refused: Vec<(String, i32, i16)> = resp
            .topics
            .iter()
            .flat_map(|t| {
                t.partitions
                    .iter()
                    .filter(|p| p.error_code != 0)
                    .map(move |p| (t.name.0.to_string(), p.partition_index, p.error_code))
            })
            .collect();
        let Some(&(_, _, code)) = refused.first() else {
            return Ok(());
        };
        let named = || {
            refused
                .iter()
                .map(|(t, p, c)| format!("{t}/{p}: {} ({c})", error_name(*c)))
                .collect::<Vec<_>>()
                .join(", ")
        };
        if GROUP_MOVED_ON.contains(&code) {
            return Err(Error::OffsetsFenced {
                group_id: group.group_id.clone(),
                generation: group.generation,
                reason: named(),
            });
        }
        match code {
            INVALID_PRODUCER_EPOCH | PRODUCER_FENCED => {
                return Err(Error::Fenced {
                    transactional_id: transactional_id.to_string(),
                    epoch: producer.1,
                })
            }
            TRANSACTION_ABORTABLE => {
                return Err(Error::TransactionAbortable {
                    transactional_id: transactional_id.to_string(),
                    reason: format!("TxnOffsetCommit answered {}", named()),
                })
            }
            LOADING
            | NOT_AVAILABLE
            | NOT_COORDINATOR
            | CONCURRENT_TRANSACTIONS
            | UNKNOWN_TOPIC_OR_PARTITION
                if Instant::now() < deadline =>
            {
                std::thread::sleep(Duration::from_millis(50));
                if code != CONCURRENT_TRANSACTIONS {
                    *conn = None;
                }
            }
            _ => {
                return Err(Error::Group {
                    group_id: group.group_id.clone(),
                    reason: format!(
                        "TxnOffsetCommit for transaction '{transactional_id}' failed: {}",
                        named()
                    ),
                })
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::TransactionStatus;

    fn status(state: &str, producer_id: i64, producer_epoch: i16) -> TransactionStatus {
        TransactionStatus {
            state: state.into(),
            producer_id,
            producer_epoch,
            transaction_timeout_ms: 2000,
        }
    }

    /// The shapes of a coordinator's abort for a timeout, and the histories that must not be
    /// taken for one (their transaction committed, or was never recorded).
    #[test]
    fn a_coordinators_abort_is_told_by_the_epoch_after_the_recorded_one() {
        // The next epoch, same producer id: either protocol, any epoch before the last.
        assert!(status("CompleteAbort", 7, 4).is_coordinators_abort_of((7, 3)));
        assert!(status("PrepareAbort", 7, 4).is_coordinators_abort_of((7, 3)));
        assert!(status("CompleteAbort", 7, i16::MAX).is_coordinators_abort_of((7, i16::MAX - 1)));
        // A new producer id at epoch 0 after an exhausted epoch: the abort rotated the id.
        assert!(status("CompleteAbort", 9, 0).is_coordinators_abort_of((7, i16::MAX - 1)));
        assert!(status("CompleteAbort", 9, 0).is_coordinators_abort_of((7, i16::MAX)));

        // Committed, then a later transaction aborted: two epochs on, or epoch 1 of a new id.
        assert!(!status("CompleteAbort", 7, 5).is_coordinators_abort_of((7, 3)));
        assert!(!status("CompleteAbort", 9, 1).is_coordinators_abort_of((7, i16::MAX - 1)));
        // A new id at epoch 0 after an epoch with room left: not a rotation of this one, also
        // one before the last (its transaction committed, the next one rotated when aborted).
        assert!(!status("CompleteAbort", 9, 0).is_coordinators_abort_of((7, 3)));
        assert!(!status("CompleteAbort", 9, 0).is_coordinators_abort_of((7, i16::MAX - 2)));
        // While the abort at the last epoch is still being written: the same id, the last
        // epoch there is.
        assert!(status("PrepareAbort", 7, i16::MAX).is_coordinators_abort_of((7, i16::MAX - 1)));
        // Not an abort: a commit (which rotates at an exhausted epoch too), or a new epoch.
        assert!(!status("CompleteCommit", 9, 0).is_coordinators_abort_of((7, i16::MAX - 1)));
        assert!(!status("CompleteCommit", 7, 4).is_coordinators_abort_of((7, 3)));
        assert!(!status("Empty", 7, 4).is_coordinators_abort_of((7, 3)));
        // Another producer id altogether at the next epoch.
        assert!(!status("CompleteAbort", 8, 4).is_coordinators_abort_of((7, 3)));
    }
}
