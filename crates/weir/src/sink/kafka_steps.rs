//! The `kafka` sink as an exactly-once pipeline drives it: one Kafka transaction a step.
//!
//! A step's rows are sent inside a transaction of the sink's `transactional.id`. At the step's
//! end they are all acknowledged (`seal`), and the state commit records the transaction's
//! producer id and epoch with the step's positions and state. Once that commit is durable the
//! transaction is committed (`publish`), and the producer starts a new epoch before the next
//! step's transaction, so that each transaction has an epoch of its own (under KIP-890's
//! protocol the commit itself begins it; under the classic one InitProducerId is asked again).
//! Rows of the next step that come before that commit are held and written into the next
//! transaction after it, also when the sealed step had no rows (and so no transaction): a
//! transaction opened for them then would be committed by the sealed step's publish, before
//! their own state commit, and a stop in between would write them again.
//!
//! A stop at any moment is settled at the next start from the state's last step:
//! * before its state commit: the transaction is open and unrecorded; the new producer's epoch
//!   aborts it, and the step is read and written again;
//! * after its state commit, before or during the transaction's commit: committing it again with
//!   the recorded epoch completes it (or finds it complete);
//! * after the new epoch began: the recorded epoch is behind the id's, which happens only after
//!   the recorded transaction committed.
//!
//! A broker connection lost during a run (a broker restart) does not end it. Mid-step, a new
//! producer of the same id begins a new epoch, which aborts the step's open transaction, and
//! the step's rows (kept until its transaction commits) are written again into a new one.
//! During the transaction's commit, the recorded transaction is settled as at a start, then a
//! new producer takes the next step. Both retry with backoff while the brokers are away, for
//! up to the transaction timeout.
//!
//! Rows the encoder refuses under `'on.error' = 'dead_letter'` are held with their step and
//! reach the dead-letter file once, as `super::kafka_dead_letters` describes.
//!
//! The one gap is Kafka's own: a transaction left open longer than `transaction.timeout.ms` is
//! aborted by the coordinator, so weir must be restarted within it after a stop between the two
//! commits (15 minutes by default, the brokers' default ceiling). A start after it finds the
//! abort (the coordinator fenced the recorded epoch with the next one) and stops, naming the
//! step, unless `'on.transaction.timeout'` is `continue`.

use std::time::{Duration, Instant};

use arrow::array::RecordBatch;
use weir_kafka::{settle_transaction, GroupMetadata, ProducerConfig, Settled, TopicPartition};

use super::kafka::KafkaSink;
use super::kafka_dead_letters;
use super::{BatchWriter, SinkError};

/// What a state commit records of a step's transaction: this prefix, then
/// `<transactional.id>:<producer id>:<epoch>`.
const RECORD_PREFIX: &str = "kafka-transaction:";

/// The `kafka` sink writing one transaction a step.
pub(crate) struct KafkaSteps {
    sink: KafkaSink,
    metrics: std::sync::Arc<crate::metrics::SinkMetrics>,
    /// The step whose transaction is open, if any.
    open: Option<u64>,
    /// The last sealed step until it is published, with or without a transaction: rows of
    /// later steps are held meanwhile.
    awaiting_publish: Option<u64>,
    /// Rows of the next step that came while the last sealed step waited for its state commit
    /// to be durable (one producer has one transaction at a time, and a transaction opened for
    /// them then would be committed by that step's publish): written into the next transaction
    /// once that step is published, so the pipeline reads on meanwhile.
    held: Vec<(u64, RecordBatch)>,
    /// The open step's rows (their columns shared, not copied), kept until its transaction
    /// commits: written again into a new transaction after a lost broker connection.
    step_rows: Vec<RecordBatch>,
    /// The producer id and epoch of the sealed step's transaction, which its state commit
    /// records.
    sealed: Option<(i64, i16)>,
    /// The sealed step's dead-letter lines, appended to the file once it commits.
    sealed_refused: Vec<u8>,
    /// Under a consumer group: the offsets the open step's transaction commits, and the member
    /// they are stamped for; sent again when the transaction is written again.
    step_offsets: Option<(Vec<(TopicPartition, i64)>, GroupMetadata)>,
}

/// The first wait before a new attempt after a lost broker connection; it doubles up to
/// [`MAX_BACKOFF`].
const FIRST_BACKOFF: Duration = Duration::from_millis(100);
const MAX_BACKOFF: Duration = Duration::from_secs(5);

/// Whether `e` is a lost or refused broker connection, which a new attempt may mend.
fn is_lost_connection(e: &SinkError) -> bool {
    matches!(e, SinkError::Kafka { source, .. } if source.is_transient())
}

/// Retries `attempt` after errors [`is_lost_connection`] accepts, with backoff, until
/// `deadline`; returns the first other error, or the last one at the deadline.
fn retry_until<T>(
    sink: &str,
    what: &str,
    deadline: Instant,
    first: SinkError,
    mut attempt: impl FnMut() -> Result<T, SinkError>,
) -> Result<T, SinkError> {
    let mut wait = FIRST_BACKOFF;
    let mut last = first;
    loop {
        if !is_lost_connection(&last) || Instant::now() + wait > deadline {
            return Err(last);
        }
        tracing::warn!(sink, error = %last, "the broker is unreachable or its transaction coordinator not ready; {what} again in {wait:?}");
        std::thread::sleep(wait);
        wait = (wait * 2).min(MAX_BACKOFF);
        match attempt() {
            Ok(v) => {
                tracing::info!(sink, "{what}: done after the broker connection came back");
                return Ok(v);
            }
            Err(e) => last = e,
        }
    }
}

impl KafkaSteps {
    /// How long the sink retries while the brokers are away: its transaction timeout (a
    /// transaction open longer is aborted by its coordinator anyway), and at least a minute,
    /// which a consumer group's short timeout would otherwise cut.
    fn patience(&self) -> Duration {
        self.sink
            .producer_config()
            .transaction_timeout
            .max(Duration::from_secs(60))
    }

    /// Drives `sink`, whose producer has a `transactional.id`.
    pub(crate) fn new(
        mut sink: KafkaSink,
        metrics: std::sync::Arc<crate::metrics::SinkMetrics>,
    ) -> Self {
        sink.hold_refused();
        Self {
            sink,
            metrics,
            open: None,
            awaiting_publish: None,
            held: Vec::new(),
            step_rows: Vec::new(),
            sealed: None,
            sealed_refused: Vec::new(),
            step_offsets: None,
        }
    }

    /// Publishes the step `checkpoint` records for a member of a consumer group: the source's
    /// `offsets` go into the step's transaction (KIP-447), stamped with `member`'s generation,
    /// so they become the group's committed offsets exactly when the step's rows become
    /// visible. A step without rows still commits its offsets. A member the group has moved
    /// past is refused (`OffsetsFenced`), and must discard the step.
    pub(crate) fn publish_with_offsets(
        &mut self,
        checkpoint: &weir_dedup::Checkpoint,
        offsets: Vec<(TopicPartition, i64)>,
        member: &GroupMetadata,
    ) -> Result<(), SinkError> {
        if offsets.is_empty() {
            return super::StepSink::publish(self, checkpoint);
        }
        if self.open.is_none() {
            self.sink.begin_transaction()?;
            self.open = Some(checkpoint.step);
            self.step_rows.clear();
        }
        // A lost connection: the step's transaction is written again (by a new producer,
        // with the patience `write_step_again` has), then the offsets go into it.
        let deadline = Instant::now() + self.patience();
        loop {
            match self.sink.send_offsets(&offsets, member) {
                Err(e) if is_lost_connection(&e) && Instant::now() < deadline => {
                    self.write_step_again(e, true)?;
                }
                other => break other?,
            }
        }
        self.sealed = self.sink.transaction_identity();
        self.step_offsets = Some((offsets, member.clone()));
        super::StepSink::publish(self, checkpoint)
    }

    /// Drops the open step (a fenced one): a new producer of the id, whose epoch aborts its
    /// transaction, takes the next.
    fn drop_step(&mut self) -> Result<(), SinkError> {
        self.open = None;
        self.awaiting_publish = None;
        self.sealed = None;
        self.step_rows.clear();
        self.step_offsets = None;
        self.held.clear();
        self.sealed_refused.clear();
        self.sink.drop_refused();
        let deadline = Instant::now() + self.patience();
        let name = self.sink.name().to_string();
        let sink = &mut self.sink;
        match sink.reconnect() {
            Err(e) if is_lost_connection(&e) => {
                retry_until(&name, "starting a new producer", deadline, e, || {
                    sink.reconnect()
                })
            }
            other => other,
        }
    }

    /// After `cause` (a lost broker connection) mid-step: a new producer, whose epoch aborts
    /// the step's open transaction, a new transaction, the step's rows written into it again,
    /// and with `flush` all of them acknowledged.
    fn write_step_again(&mut self, cause: SinkError, flush: bool) -> Result<(), SinkError> {
        let deadline = Instant::now() + self.patience();
        let name = self.sink.name().to_string();
        let (sink, rows) = (&mut self.sink, &self.step_rows);
        retry_until(
            &name,
            "writing the step's transaction",
            deadline,
            cause,
            || {
                sink.reconnect()?;
                sink.begin_transaction()?;
                sink.drop_refused();
                for batch in rows {
                    sink.write(batch)?;
                }
                if flush {
                    sink.finish()?;
                }
                Ok(())
            },
        )
    }

    /// After `cause` (a lost broker connection) while the sealed transaction `sealed` commits:
    /// it is settled as at a start (committed with its epoch, or found committed), then a new
    /// producer takes the next step. A transaction found ended although its commit did not
    /// reach the coordinator was aborted there (it stayed open past the transaction timeout
    /// while the brokers were away): its rows, which the state already counts as written, are
    /// written again into a new transaction and committed.
    fn settle_commit(&mut self, cause: SinkError, sealed: (i64, i16)) -> Result<(), SinkError> {
        let deadline = Instant::now() + self.patience();
        let name = self.sink.name().to_string();
        let config = self.sink.producer_config().clone();
        let kafka = |source| SinkError::Kafka {
            sink: name.clone(),
            source,
        };
        let settled = retry_until(
            &name,
            "committing the step's transaction",
            deadline,
            cause,
            || settle_transaction(&config, sealed).map_err(kafka),
        )?;
        // Whoever ended it (its coordinator for its timeout, or a producer of the id that
        // fenced this one), it was not committed: its rows are written again.
        let aborted = match settled {
            Settled::Committed => false,
            Settled::AbortedByCoordinator { .. } => {
                tracing::warn!(
                    sink = %name,
                    "the step's transaction was aborted by its coordinator while the brokers \
                     were away (it stayed open past its timeout); its rows are written again in \
                     a new one"
                );
                true
            }
            Settled::EndedBefore => {
                tracing::warn!(
                    sink = %name,
                    "the step's transaction ended uncommitted while the brokers were away \
                     (another producer of the 'transactional.id' may have started); its rows \
                     are written again in a new one"
                );
                true
            }
        };
        let (sink, rows, offsets) = (&mut self.sink, &self.step_rows, &self.step_offsets);
        let mut attempt = || {
            sink.reconnect()?;
            if aborted {
                sink.begin_transaction()?;
                for batch in rows {
                    sink.write(batch)?;
                }
                // Refused again: the sealed lines already hold them.
                sink.drop_refused();
                sink.finish()?;
                if let Some((offsets, member)) = offsets {
                    sink.send_offsets(offsets, member)?;
                }
                sink.commit_transaction()?;
                sink.renew_epoch()?;
            }
            Ok(())
        };
        match attempt() {
            Err(e) if is_lost_connection(&e) => {
                retry_until(&name, "starting the next transaction", deadline, e, attempt)
            }
            other => other,
        }
    }

    /// Settles the transaction that `files` (a state's last checkpoint's records) names, if
    /// any, before a producer of the same id starts (whose new epoch would abort it). Returns
    /// what was found.
    pub(crate) fn settle(
        sink: &str,
        producer: &ProducerConfig,
        files: &[String],
    ) -> Result<Option<Settled>, SinkError> {
        let Some(record) = files.iter().find_map(|f| f.strip_prefix(RECORD_PREFIX)) else {
            return Ok(None);
        };
        let bad = || {
            SinkError::Options(format!(
                "sink {sink}: the state records the transaction '{record}', which is not \
                 '<transactional.id>:<producer id>:<epoch>'; was it written by another program?"
            ))
        };
        let mut parts = record.rsplitn(3, ':');
        let epoch: i16 = parts.next().and_then(|e| e.parse().ok()).ok_or_else(bad)?;
        let id: i64 = parts.next().and_then(|p| p.parse().ok()).ok_or_else(bad)?;
        let transactional_id = parts.next().ok_or_else(bad)?;
        if producer.transactional_id.as_deref() != Some(transactional_id) {
            return Err(SinkError::Options(format!(
                "sink {sink}: the state's last step was written with 'transactional.id' = \
                 '{transactional_id}', and the sink now has '{}'; its transaction cannot be \
                 settled under another id. Use the same 'transactional.id', or a new state \
                 directory",
                producer.transactional_id.as_deref().unwrap_or("")
            )));
        }
        let settled =
            settle_transaction(producer, (id, epoch)).map_err(|source| SinkError::Kafka {
                sink: sink.to_string(),
                source,
            })?;
        Ok(Some(settled))
    }

    /// After `cause` (a lost broker connection) while the next epoch began: a new producer
    /// begins one.
    fn renew_again(&mut self, cause: SinkError) -> Result<(), SinkError> {
        let deadline = Instant::now() + self.patience();
        let name = self.sink.name().to_string();
        let sink = &mut self.sink;
        retry_until(
            &name,
            "starting the next transaction",
            deadline,
            cause,
            || sink.reconnect(),
        )
    }

    /// Commits the open transaction, step `checkpoint`'s, and begins the next epoch.
    fn commit_step(&mut self, checkpoint: &weir_dedup::Checkpoint) -> Result<(), SinkError> {
        let started = Instant::now();
        match (self.sink.commit_transaction(), self.sealed) {
            (Ok(()), _) => match self.sink.renew_epoch() {
                Err(e) if is_lost_connection(&e) => self.renew_again(e)?,
                other => other?,
            },
            (Err(e), Some(sealed)) if is_lost_connection(&e) => self.settle_commit(e, sealed)?,
            (Err(e), _) => return Err(e),
        }
        let refused = std::mem::take(&mut self.sealed_refused);
        self.sink.append_dead_letters(&refused, true)?;
        self.open = None;
        self.sealed = None;
        self.step_rows.clear();
        self.step_offsets = None;
        tracing::debug!(
            sink = %self.sink.name(),
            step = checkpoint.step,
            micros = started.elapsed().as_micros() as u64,
            "Kafka transaction committed"
        );
        Ok(())
    }
}

impl super::StepSink for KafkaSteps {
    fn name(&self) -> &str {
        self.sink.name()
    }

    fn metrics(&self) -> &crate::metrics::SinkMetrics {
        &self.metrics
    }

    fn write(&mut self, step: u64, batch: &RecordBatch) -> Result<(), SinkError> {
        if self.open != Some(step) {
            if let Some(open) = self.open.or(self.awaiting_publish) {
                if step < open || (self.open.is_none() && step == open) {
                    return Err(SinkError::Options(format!(
                        "sink {}: rows of step {step} came after step {open} began or was \
                         sealed; this is a bug in weir",
                        self.sink.name()
                    )));
                }
            }
            if self.open.is_some() || self.awaiting_publish.is_some() {
                // The last step is sealed and waits for its commit: hold these rows (the
                // batch's columns are shared, not copied).
                self.held.push((step, batch.clone()));
                return Ok(());
            }
            self.sink.begin_transaction()?;
            self.open = Some(step);
            self.step_rows.clear();
            self.sink.drop_refused();
        }
        self.step_rows.push(batch.clone());
        match self.sink.write(batch) {
            Err(e) if is_lost_connection(&e) => self.write_step_again(e, false),
            other => other,
        }
    }

    fn seal(&mut self, step: u64) -> Result<Vec<String>, SinkError> {
        self.awaiting_publish = Some(step);
        if self.open != Some(step) {
            return Ok(Vec::new());
        }
        match self.sink.finish() {
            Err(e) if is_lost_connection(&e) => self.write_step_again(e, true)?,
            other => other?,
        }
        let refused = self.sink.take_refused();
        let mut records = Vec::new();
        if let (false, Some(path)) = (refused.is_empty(), self.sink.dead_letter_path()) {
            let path = path.to_path_buf();
            let offset = self.sink.dead_letter_len()?;
            records.push(kafka_dead_letters::prepare(&path, offset, &refused)?);
        }
        self.sealed_refused = refused;
        let Some((id, epoch)) = self.sink.transaction_identity() else {
            // Nothing reached a partition: there is nothing to commit or to settle.
            self.sink.abort_transaction()?;
            self.open = None;
            self.step_rows.clear();
            return Ok(records);
        };
        self.sealed = Some((id, epoch));
        records.push(format!(
            "{RECORD_PREFIX}{}:{id}:{epoch}",
            self.sink.transactional_id()
        ));
        Ok(records)
    }

    fn publishes(&self) -> bool {
        true
    }

    fn publish(&mut self, checkpoint: &weir_dedup::Checkpoint) -> Result<(), SinkError> {
        match self.open {
            // A step without rows has no transaction; one whose every row was refused has
            // only dead letters.
            None => {
                let refused = std::mem::take(&mut self.sealed_refused);
                self.sink.append_dead_letters(&refused, true)?;
            }
            Some(open) if open == checkpoint.step => self.commit_step(checkpoint)?,
            Some(open) => {
                return Err(SinkError::Options(format!(
                    "sink {}: publishing step {}, but the open transaction is step {open}'s; \
                     this is a bug in weir",
                    self.sink.name(),
                    checkpoint.step
                )))
            }
        }
        self.awaiting_publish = None;
        for (step, batch) in std::mem::take(&mut self.held) {
            self.write(step, &batch)?;
        }
        Ok(())
    }
}

/// The group's committed offsets keep each partition's position, written inside each step's
/// transaction; the group's coordinator fences a member it has moved past.
impl super::GroupSink for KafkaSteps {
    fn take_partitions(
        &mut self,
        group_id: &str,
        partitions: &[String],
    ) -> Result<Vec<(String, i64)>, SinkError> {
        let config = self.sink.producer_config();
        let mut by_topic: std::collections::BTreeMap<&str, Vec<i32>> = Default::default();
        for name in partitions {
            if let Some((topic, p)) = name
                .strip_prefix("kafka/")
                .and_then(|rest| rest.rsplit_once('/'))
                .and_then(|(topic, p)| Some((topic, p.parse::<i32>().ok()?)))
            {
                by_topic.entry(topic).or_default().push(p);
            }
        }
        // A member that stopped with a transaction open holds its partitions' offsets until
        // the transaction is aborted, at the latest after its transaction timeout.
        let wait = config.transaction_timeout + Duration::from_secs(30);
        let mut out = Vec::new();
        for (topic, ids) in by_topic {
            let committed = weir_kafka::committed_offsets(
                &config.brokers,
                &config.security,
                group_id,
                topic,
                &ids,
                wait,
            )
            .map_err(|source| SinkError::Kafka {
                sink: self.sink.name().to_string(),
                source,
            })?;
            for (p, offset) in committed {
                out.push((format!("kafka/{topic}/{p}"), offset));
            }
        }
        Ok(out)
    }

    fn publish_as(
        &mut self,
        checkpoint: &weir_dedup::Checkpoint,
        offsets: Vec<(TopicPartition, i64)>,
        member: &GroupMetadata,
    ) -> Result<(), SinkError> {
        self.publish_with_offsets(checkpoint, offsets, member)
    }

    fn commits_group_offsets(&self) -> bool {
        true
    }

    fn discard(&mut self) -> Result<(), SinkError> {
        self.drop_step()
    }

    fn is_fenced(&self, e: &SinkError) -> bool {
        // This process's transactional id is its own: a fenced producer means the coordinator
        // aborted its transaction (open past the timeout while the member was paused).
        matches!(
            e,
            SinkError::Kafka {
                source: weir_kafka::Error::OffsetsFenced { .. } | weir_kafka::Error::Fenced { .. },
                ..
            }
        )
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;
    use std::time::Duration;

    use arrow::array::{RecordBatch, StringArray};
    use arrow::datatypes::{DataType, Field, Schema};
    use weir_codec::{EncoderFactory, EncoderRequest, Options, RawFactory};
    use weir_dedup::Checkpoint;
    use weir_kafka::{Consumer, ConsumerConfig, Isolation, PollStatus};

    use super::KafkaSteps;
    use crate::sink::kafka::{KafkaSink, KafkaSinkSettings};
    use crate::sink::StepSink;

    /// The values a consumer at `isolation` reads from `topic` now, in offset order.
    fn read(broker: &str, topic: &str, isolation: Isolation) -> Vec<String> {
        let mut consumer = Consumer::connect(&ConsumerConfig {
            brokers: vec![broker.to_string()],
            topic: topic.to_string(),
            bounded: true,
            isolation,
            ..ConsumerConfig::default()
        })
        .expect("connect a consumer");
        let mut values = Vec::new();
        for _ in 0..300 {
            let status = consumer
                .poll(Duration::from_millis(200), |r| {
                    values.push(String::from_utf8_lossy(r.value.unwrap_or_default()).into_owned());
                    Ok::<(), std::io::Error>(())
                })
                .expect("poll");
            if matches!(status, PollStatus::End) {
                return values;
            }
        }
        panic!("reading {topic} did not reach its end in a minute");
    }

    /// What a `read_committed` consumer reads from `topic` once it holds `expected`, waiting
    /// up to 30 s: the commit's markers reach the partition after the commit returns.
    fn committed_eventually(broker: &str, topic: &str, expected: &[&str]) -> Vec<String> {
        let deadline = std::time::Instant::now() + Duration::from_secs(30);
        loop {
            let got = read(broker, topic, Isolation::ReadCommitted);
            if got == expected || std::time::Instant::now() > deadline {
                return got;
            }
            std::thread::sleep(Duration::from_millis(200));
        }
    }

    fn rows(values: &[&str]) -> RecordBatch {
        let schema = Arc::new(Schema::new(vec![Field::new("v", DataType::Utf8, false)]));
        RecordBatch::try_new(schema, vec![Arc::new(StringArray::from(values.to_vec()))])
            .expect("a batch")
    }

    /// A step without rows still waits for its state commit before the next step's rows go
    /// into a transaction: had they gone into one at once, that step's publish would commit
    /// them before their own state commit, and a stop in between would write them twice (the
    /// next start replays them from the state's positions).
    #[test]
    fn a_step_without_rows_publishes_none_of_the_next_steps_rows() {
        let Ok(broker) = std::env::var("WEIR_KAFKA_BOOTSTRAP") else {
            eprintln!("NOTICE: Kafka sink step test skipped: WEIR_KAFKA_BOOTSTRAP is not set (scripts/test.sh sets it)");
            return;
        };
        let nanos = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.as_nanos());
        let topic = format!("weir-steps-empty-{}-{nanos}", std::process::id());
        weir_kafka::create_topic(std::slice::from_ref(&broker), &topic, 1, 1, &[], false)
            .expect("create the topic");
        let options = Options::new(
            [
                ("brokers", broker.as_str()),
                ("topic", topic.as_str()),
                ("encoding", "raw"),
            ]
            .map(|(k, v)| (k.to_string(), v.to_string())),
        );
        let mut settings = KafkaSinkSettings::parse("out", &options, &[]).expect("settings");
        settings.producer.transactional_id = Some(format!("{topic}-writer"));
        let schema = rows(&[]).schema();
        let encoder = RawFactory
            .create_encoder(&EncoderRequest {
                sink: "out",
                schema: Arc::clone(&schema),
                options: &options,
            })
            .expect("the raw encoder");
        let sink = KafkaSink::open("out", &settings, &schema, encoder).expect("connect");
        let mut steps = KafkaSteps::new(sink, Arc::default());
        let checkpoint = |step| Checkpoint {
            step,
            ..Checkpoint::default()
        };

        // Step 1 has no rows; step 2's come while step 1's state commit is being written.
        assert_eq!(steps.seal(1).expect("seal step 1"), Vec::<String>::new());
        steps.write(2, &rows(&["a", "b"])).expect("write step 2");
        steps.publish(&checkpoint(1)).expect("publish step 1");
        // Not even sent: an open transaction holding them would have been committed here.
        assert_eq!(
            read(&broker, &topic, Isolation::ReadUncommitted),
            Vec::<String>::new()
        );

        steps.write(2, &rows(&["c"])).expect("write step 2");
        let recorded = steps.seal(2).expect("seal step 2");
        assert!(
            recorded.iter().any(|r| r.starts_with(super::RECORD_PREFIX)),
            "{recorded:?}"
        );
        // Sent, in the open transaction: a `read_committed` reader stops before them.
        assert_eq!(
            read(&broker, &topic, Isolation::ReadUncommitted),
            ["a", "b", "c"]
        );
        assert_eq!(
            read(&broker, &topic, Isolation::ReadCommitted),
            Vec::<String>::new()
        );
        steps.publish(&checkpoint(2)).expect("publish step 2");
        assert_eq!(
            committed_eventually(&broker, &topic, &["a", "b", "c"]),
            ["a", "b", "c"]
        );
    }
}
