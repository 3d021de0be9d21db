//! The `kafka` sink as an exactly-once pipeline drives it: one Kafka transaction a step.
//!
//! A step's rows are sent inside a transaction of the sink's `transactional.id`. At the step's
//! end they are all acknowledged (`seal`), and the state commit records the transaction's
//! producer id and epoch with the step's positions and state. Once that commit is durable the
//! transaction is committed (`publish`), and the producer starts a new epoch before the next
//! step's transaction, so that each transaction has an epoch of its own. Rows of the next step
//! that come before that commit are held and written into the next transaction after it.
//!
//! A stop at any moment is settled at the next start from the state's last step:
//! * before its state commit: the transaction is open and unrecorded; the new producer's epoch
//!   aborts it, and the step is read and written again;
//! * after its state commit, before or during the transaction's commit: committing it again with
//!   the recorded epoch completes it (or finds it complete);
//! * after the new epoch began: the recorded epoch is behind the id's, which happens only after
//!   the recorded transaction committed.
//!
//! The one gap is Kafka's own: a transaction left open longer than `transaction.timeout.ms` is
//! aborted by the coordinator, so weir must be restarted within it after a stop between the two
//! commits (15 minutes by default, the brokers' default ceiling).

use arrow::array::RecordBatch;
use weir_kafka::{settle_transaction, ProducerConfig, Settled};

use super::kafka::KafkaSink;
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
    /// Rows of the next step that came while the last step's transaction waited for its state
    /// commit to be durable (one producer has one transaction at a time): written into the
    /// next transaction once that one is committed, so the pipeline reads on meanwhile.
    held: Vec<(u64, RecordBatch)>,
}

impl KafkaSteps {
    /// Drives `sink`, whose producer has a `transactional.id`.
    pub(crate) fn new(
        sink: KafkaSink,
        metrics: std::sync::Arc<crate::metrics::SinkMetrics>,
    ) -> Self {
        Self {
            sink,
            metrics,
            open: None,
            held: Vec::new(),
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
            if let Some(open) = self.open {
                if step < open {
                    return Err(SinkError::Options(format!(
                        "sink {}: rows of step {step} came after step {open} began; this is a \
                         bug in weir",
                        self.sink.name()
                    )));
                }
                // The last step is sealed and waits for its commit: hold these rows (the
                // batch's columns are shared, not copied).
                self.held.push((step, batch.clone()));
                return Ok(());
            }
            self.sink.begin_transaction()?;
            self.open = Some(step);
        }
        self.sink.write(batch)
    }

    fn seal(&mut self, step: u64) -> Result<Vec<String>, SinkError> {
        if self.open != Some(step) {
            return Ok(Vec::new());
        }
        self.sink.finish()?;
        let Some((id, epoch)) = self.sink.transaction_identity() else {
            // Nothing reached a partition: there is nothing to commit or to settle.
            self.sink.abort_transaction()?;
            self.open = None;
            return Ok(Vec::new());
        };
        Ok(vec![format!(
            "{RECORD_PREFIX}{}:{id}:{epoch}",
            self.sink.transactional_id()
        )])
    }

    fn publishes(&self) -> bool {
        true
    }

    fn publish(&mut self, checkpoint: &weir_dedup::Checkpoint) -> Result<(), SinkError> {
        if self.open.is_none() {
            return Ok(());
        }
        let started = std::time::Instant::now();
        self.sink.commit_transaction()?;
        self.open = None;
        tracing::debug!(
            sink = %self.sink.name(),
            step = checkpoint.step,
            micros = started.elapsed().as_micros() as u64,
            "Kafka transaction committed"
        );
        for (step, batch) in std::mem::take(&mut self.held) {
            self.write(step, &batch)?;
        }
        Ok(())
    }
}
