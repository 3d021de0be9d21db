//! The Kafka connector: each DataFusion partition runs a `weir_kafka::Consumer` over a disjoint
//! share of the topic's partitions, on a thread of its own (the consumer blocks on its sockets),
//! and decodes each record value in place inside the consumer's handler: the value is a slice of
//! the fetch response, never copied. Batches go to the query through a small bounded channel, so
//! a slow query slows the consumer instead of piling up memory.

use std::fmt;
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::Duration;

use arrow::array::RecordBatch;
use arrow::datatypes::SchemaRef;
use datafusion::error::{DataFusionError, Result as DfResult};
use datafusion::execution::{SendableRecordBatchStream, TaskContext};
use datafusion::physical_plan::streaming::PartitionStream;
use weir_kafka::{Consumer, ConsumerConfig, PartitionSelection, PollStatus, Record};

use super::{external, thread_stream, ScanPlan, SourceError};

/// The scan's partitions: the selected Kafka partitions dealt round-robin over at most `n`
/// readers (never more readers than Kafka partitions).
pub(crate) async fn partitions(
    plan: &Arc<ScanPlan>,
    template: &ConsumerConfig,
    n: usize,
    follow: bool,
) -> Result<Vec<Arc<dyn PartitionStream>>, String> {
    let probe = template.clone();
    let selected =
        tokio::task::spawn_blocking(move || Consumer::connect(&probe).map(|c| c.partitions()))
            .await
            .map_err(|e| format!("the metadata lookup failed: {e}"))?
            .map_err(|e| e.to_string())?;
    if selected.is_empty() {
        return Err(format!(
            "topic {} has none of the selected partitions",
            template.topic
        ));
    }
    let readers = n.clamp(1, selected.len());
    let mut shares = vec![Vec::new(); readers];
    for (i, p) in selected.into_iter().enumerate() {
        shares[i % readers].push(p);
    }
    Ok(shares
        .into_iter()
        .map(|share| {
            let mut config = template.clone();
            config.partitions = PartitionSelection::List(share);
            config.bounded = !follow;
            Arc::new(KafkaPartition {
                plan: Arc::clone(plan),
                config,
            }) as Arc<dyn PartitionStream>
        })
        .collect())
}

struct KafkaPartition {
    plan: Arc<ScanPlan>,
    config: ConsumerConfig,
}

impl fmt::Debug for KafkaPartition {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("KafkaPartition")
            .field("source", &self.plan.config.name)
            .field("partitions", &self.config.partitions)
            .finish()
    }
}

impl PartitionStream for KafkaPartition {
    fn schema(&self) -> &SchemaRef {
        &self.plan.schema
    }

    fn execute(&self, _ctx: Arc<TaskContext>) -> SendableRecordBatchStream {
        let plan = Arc::clone(&self.plan);
        let config = self.config.clone();
        thread_stream(
            format!("weir-kafka-{}", plan.config.name),
            Arc::clone(&self.plan.schema),
            move |tx| read(&plan, &config, tx),
        )
    }
}

/// Consumes until the end offsets (bounded) or until the engine stops (follow), sending
/// batches; returns early when the query no longer wants rows.
fn read(
    plan: &ScanPlan,
    config: &ConsumerConfig,
    tx: &tokio::sync::mpsc::Sender<DfResult<RecordBatch>>,
) -> DfResult<()> {
    let name = &plan.config.name;
    let connector = |e: weir_kafka::Error| {
        external(SourceError::Connector {
            source_name: name.clone(),
            error: e.to_string(),
        })
    };
    let mut ingest = plan.ingest()?;
    let mut consumer = Consumer::connect(config).map_err(connector)?;
    let mut failure: Option<DataFusionError> = None;
    let mut closed = false;
    loop {
        if !config.bounded && plan.config.stop.load(Ordering::SeqCst) {
            break;
        }
        let status = consumer.poll(Duration::from_millis(200), |rec: &Record<'_>| {
            let done = ingest.record(rec);
            match done {
                Ok(None) => Ok(()),
                Ok(Some(batch)) => {
                    if tx.blocking_send(Ok(batch)).is_err() {
                        closed = true;
                        return Err("the query stopped reading");
                    }
                    Ok(())
                }
                Err(e) => {
                    failure = Some(e);
                    Err("the source stopped on a bad message")
                }
            }
        });
        if closed {
            return Ok(());
        }
        if let Some(e) = failure.take() {
            return Err(e);
        }
        match status.map_err(connector)? {
            PollStatus::Records(_) => {}
            // A quiet topic: hand over what is buffered rather than keep it back.
            PollStatus::Idle => {
                if let Some(b) = ingest.flush()? {
                    if tx.blocking_send(Ok(b)).is_err() {
                        return Ok(());
                    }
                }
            }
            PollStatus::End => break,
        }
    }
    if let Some(b) = ingest.flush()? {
        let _ = tx.blocking_send(Ok(b));
    }
    Ok(())
}
