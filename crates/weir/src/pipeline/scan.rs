//! Scans as DataFusion sees them. A source without state is read by several readers in
//! parallel, one per DataFusion partition: file readers share one feed of blocks and decode on
//! DataFusion's threads; Kafka readers each own a share of the topic's partitions and run on a
//! thread of their own (they block on sockets). A source with state is read by one reader that
//! dedups and commits the state when the scan ends.

use std::fmt;
use std::sync::Arc;

use arrow::datatypes::SchemaRef;
use datafusion::error::Result as DfResult;
use datafusion::execution::{SendableRecordBatchStream, TaskContext};
use datafusion::physical_plan::stream::RecordBatchStreamAdapter;
use datafusion::physical_plan::streaming::{PartitionStream, StreamingTableExec};
use datafusion::physical_plan::ExecutionPlan;
use weir_dedup::Checkpoint;

use super::decode::{ScanShape, SourceDecoder};
use super::dedup::dedup;
use super::reader::file_feed::FileFeed;
use super::reader::{FileReader, KafkaReader, Next, PositionedReader};
use super::threads::{thread_stream, with_read_ahead};
use crate::error::SourceError;
use crate::pipeline::live_source::LiveSource;
use crate::source::Connector;

/// Opens the reader of one partition of a scan (called when the partition starts).
type OpenReader = Arc<dyn Fn() -> Result<Box<dyn PositionedReader>, SourceError> + Send + Sync>;

/// The plan of a scan of `source`: its `projection` (every column when `None`), on at most
/// `partitions` readers.
pub(crate) async fn plan(
    source: &Arc<LiveSource>,
    projection: Option<&[usize]>,
    limit: Option<usize>,
    partitions: usize,
) -> Result<Arc<dyn ExecutionPlan>, SourceError> {
    let shape = Arc::new(ScanShape::new(source, projection)?);
    let schema = Arc::clone(shape.schema());
    let streams: Vec<Arc<dyn PartitionStream>> = if source.state.is_some() {
        // A source with state is read by one reader that dedups, checkpoints and resumes.
        vec![Arc::new(StatefulPartition {
            source: Arc::clone(source),
            projection: projection.map(<[usize]>::to_vec),
            schema: Arc::clone(&schema),
        })]
    } else {
        readers(source, &shape, partitions)
            .await?
            .into_iter()
            .map(|(open, threaded)| {
                Arc::new(ReaderPartition {
                    source: source.name.clone(),
                    schema: Arc::clone(&schema),
                    open,
                    threaded,
                }) as Arc<dyn PartitionStream>
            })
            .collect()
    };
    StreamingTableExec::try_new(schema, streams, None, Vec::new(), source.follow, limit)
        .map(|p| Arc::new(p) as Arc<dyn ExecutionPlan>)
        .map_err(|e| {
            SourceError::new(
                &source.name,
                crate::error::SourceErrorKind::Thread(format!("cannot plan its scan: {e}")),
            )
        })
}

/// The readers of a stateless scan, and whether each needs a thread of its own.
async fn readers(
    source: &Arc<LiveSource>,
    shape: &Arc<ScanShape>,
    partitions: usize,
) -> Result<Vec<(OpenReader, bool)>, SourceError> {
    match &source.connector {
        Connector::File(settings) => {
            let feed = Arc::new(
                FileFeed::open(settings, source.follow, &source.stats.stages)
                    .map_err(|e| SourceError::new(&source.name, e))?,
            );
            Ok((0..partitions.max(1))
                .map(|_| {
                    let (source, shape, feed) =
                        (Arc::clone(source), Arc::clone(shape), Arc::clone(&feed));
                    let open: OpenReader = Arc::new(move || {
                        let decoder = SourceDecoder::new(&source, &shape);
                        Ok(Box::new(FileReader::new(Arc::clone(&feed), decoder)) as _)
                    });
                    (open, false)
                })
                .collect())
        }
        Connector::Kafka(settings) => {
            source.connector.refuse_group(&source.name)?;
            let (name, template, bounded) = (
                source.name.clone(),
                settings.consumer.clone(),
                !source.follow,
            );
            let configs = tokio::task::spawn_blocking(move || {
                crate::source::kafka::shares(&name, &template, partitions, bounded)
            })
            .await
            .map_err(|e| {
                SourceError::new(
                    &source.name,
                    crate::error::SourceErrorKind::Thread(format!(
                        "its metadata lookup stopped: {e}"
                    )),
                )
            })??;
            Ok(configs
                .into_iter()
                .map(|config| {
                    let (source, shape) = (Arc::clone(source), Arc::clone(shape));
                    let open: OpenReader = Arc::new(move || {
                        let decoder = SourceDecoder::new(&source, &shape);
                        Ok(Box::new(KafkaReader::open(config.clone(), decoder, &[])?) as _)
                    });
                    (open, true)
                })
                .collect())
        }
    }
}

/// A reader of every column of `source` from `checkpoint` (sources with state are read by one).
pub(crate) fn open_whole(
    source: &Arc<LiveSource>,
    checkpoint: &Checkpoint,
) -> Result<Box<dyn PositionedReader>, SourceError> {
    open_positioned(source, checkpoint, &[], false)
}

/// A reader of every column of `source` and the `hidden` metadata columns after them, from
/// `checkpoint`; with `by_partition`, each Kafka batch holds one partition's records (event
/// time is tracked per partition).
pub(crate) fn open_positioned(
    source: &Arc<LiveSource>,
    checkpoint: &Checkpoint,
    hidden: &[crate::source::meta::MetaKind],
    by_partition: bool,
) -> Result<Box<dyn PositionedReader>, SourceError> {
    let shape = ScanShape::with_hidden(source, None, hidden)?;
    let decoder = SourceDecoder::new(source, &shape);
    Ok(match &source.connector {
        Connector::File(settings) => Box::new(FileReader::resume(
            FileFeed::open(settings, source.follow, &source.stats.stages)
                .map_err(|e| SourceError::new(&source.name, e))?,
            decoder,
            &checkpoint.positions,
        )),
        Connector::Kafka(settings) => {
            source.connector.refuse_group(&source.name)?;
            let mut config = settings.consumer.clone();
            config.bounded = !source.follow;
            let reader = KafkaReader::open(config, decoder, &checkpoint.positions)?;
            if by_partition {
                Box::new(reader.split_by_partition())
            } else {
                Box::new(reader)
            }
        }
    })
}

/// A reader of every column of `source` (a Kafka source in a consumer group) and the `hidden`
/// metadata columns after them, that reads `partitions` of its topic, from `checkpoint`, until
/// the source stops or `end` is set.
pub(crate) fn open_assigned(
    source: &Arc<LiveSource>,
    checkpoint: &Checkpoint,
    partitions: &[i32],
    end: &Arc<std::sync::atomic::AtomicBool>,
    per_partition: bool,
    hidden: &[crate::source::meta::MetaKind],
) -> Result<Box<dyn PositionedReader>, SourceError> {
    let Connector::Kafka(settings) = &source.connector else {
        return Err(SourceError::new(
            &source.name,
            crate::error::SourceErrorKind::Thread(
                "only a Kafka source joins a consumer group; this is a bug in weir".into(),
            ),
        ));
    };
    let shape = ScanShape::with_hidden(source, None, hidden)?;
    let decoder = SourceDecoder::new(source, &shape);
    let mut config = settings.consumer.clone();
    config.bounded = false;
    config.partitions = weir_kafka::PartitionSelection::List(partitions.to_vec());
    let reader =
        KafkaReader::open(config, decoder, &checkpoint.positions)?.ending_on(Arc::clone(end));
    Ok(Box::new(if per_partition {
        reader.split_by_partition()
    } else {
        reader
    }))
}

/// One partition of a stateless scan.
struct ReaderPartition {
    source: String,
    schema: SchemaRef,
    open: OpenReader,
    /// Kafka readers block on sockets: they run on a thread of their own. File readers decode
    /// right on DataFusion's threads, as DataFusion's own scans do; blocks are a few MiB, so a
    /// poll returns within milliseconds.
    threaded: bool,
}

impl fmt::Debug for ReaderPartition {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ReaderPartition")
            .field("source", &self.source)
            .finish()
    }
}

impl PartitionStream for ReaderPartition {
    fn schema(&self) -> &SchemaRef {
        &self.schema
    }

    fn execute(&self, _ctx: Arc<TaskContext>) -> SendableRecordBatchStream {
        let open = Arc::clone(&self.open);
        let schema = Arc::clone(&self.schema);
        if self.threaded {
            return thread_stream(format!("weir-kafka-{}", self.source), schema, move |tx| {
                let mut reader = open().map_err(SourceError::into_df)?;
                // Each batch goes to the query as it is decoded, not a fetch response at a time.
                let out = tx.clone();
                reader.emit_to(Box::new(move |d| out.blocking_send(Ok(d.batch)).is_ok()));
                loop {
                    match reader.next().map_err(SourceError::into_df)? {
                        Next::Batch(b) => {
                            if tx.blocking_send(Ok(b)).is_err() {
                                // The query stopped reading (a LIMIT).
                                return Ok(());
                            }
                        }
                        Next::Idle => std::thread::sleep(reader.idle_wait()),
                        Next::End => return Ok(()),
                    }
                }
            });
        }
        let stream = futures::stream::unfold(None, move |reader| {
            let open = Arc::clone(&open);
            async move {
                let mut reader: Box<dyn PositionedReader> = match reader {
                    Some(r) => r,
                    None => match open() {
                        Ok(r) => r,
                        Err(e) => return Some((Err(e.into_df()), None)),
                    },
                };
                loop {
                    match reader.next() {
                        Ok(Next::Batch(b)) => return Some((Ok(b), Some(reader))),
                        Ok(Next::End) => return None,
                        Ok(Next::Idle) => tokio::time::sleep(reader.idle_wait()).await,
                        Err(e) => return Some((Err(e.into_df()), None)),
                    }
                }
            }
        });
        Box::pin(RecordBatchStreamAdapter::new(schema, stream))
    }
}

/// The one partition of a scan of a source with state.
struct StatefulPartition {
    source: Arc<LiveSource>,
    projection: Option<Vec<usize>>,
    schema: SchemaRef,
}

impl fmt::Debug for StatefulPartition {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("StatefulPartition")
            .field("source", &self.source.name)
            .finish()
    }
}

impl PartitionStream for StatefulPartition {
    fn schema(&self) -> &SchemaRef {
        &self.schema
    }

    fn execute(&self, _ctx: Arc<TaskContext>) -> SendableRecordBatchStream {
        let source = Arc::clone(&self.source);
        let projection = self.projection.clone();
        thread_stream(
            format!("weir-state-{}", source.name),
            Arc::clone(&self.schema),
            move |tx| {
                read_with_state(&source, projection.as_deref(), tx).map_err(SourceError::into_df)
            },
        )
    }
}

/// Reads a source with state from its checkpoint: dedups, projects and sends each batch, and
/// commits the positions and keys when the scan ends. A query may still hold rows it was sent
/// when a crash comes, so this is at least once; `CREATE SINK ... FROM source` is exactly once
/// (`super::steps`).
fn read_with_state(
    source: &Arc<LiveSource>,
    projection: Option<&[usize]>,
    tx: &tokio::sync::mpsc::Sender<DfResult<arrow::array::RecordBatch>>,
) -> Result<(), SourceError> {
    let Some(spec) = &source.state else {
        return Ok(());
    };
    let mut store = spec.open(&source.stats)?;
    let reader = open_whole(source, store.checkpoint())?;
    let read = with_read_ahead(&source.name, reader, |_, next| -> Result<_, SourceError> {
        loop {
            let item = next()?;
            match item.next {
                Next::Batch(b) => {
                    let b = dedup(&mut store, b, &source.name)?;
                    if b.num_rows() == 0 {
                        continue;
                    }
                    let b = match projection {
                        Some(p) => b.project(p).map_err(|e| {
                            SourceError::new(
                                &source.name,
                                crate::error::SourceErrorKind::Thread(format!(
                                    "cannot project a batch: {e}"
                                )),
                            )
                        })?,
                        None => b,
                    };
                    if tx.blocking_send(Ok(b)).is_err() {
                        // The query stopped early (a LIMIT): what it did not read is not
                        // committed.
                        return Ok(None);
                    }
                }
                // The reading thread waits between idle answers.
                Next::Idle => {}
                Next::End => return Ok(Some(item.positions)),
            }
        }
    })?;
    let Some(positions) = read? else {
        source.stats.remember_state(&store);
        return Ok(());
    };
    store
        .commit(Checkpoint {
            positions,
            ..Checkpoint::default()
        })
        .map_err(|e| SourceError::new(&source.name, e))?;
    store
        .finish()
        .map_err(|e| SourceError::new(&source.name, e))?;
    source.stats.remember_state(&store);
    Ok(())
}
