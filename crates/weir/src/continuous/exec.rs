//! [`ContinuousExec`]: a continuous query as one DataFusion plan node. Executed, it reads the
//! source with several readers in parallel, each on a thread of its own running a [`Worker`]
//! (lateness, windows, the steps before the aggregation, partial aggregates), and merges their
//! output on one more thread ([`Merge`]: the source's watermark, each window emitted once when
//! the watermark passes its end, the steps after). Rows reach DataFusion (or a sink) as windows
//! close. A bounded input closes every window at its end; a stop in follow mode drops the
//! windows still open and counts them.

use std::fmt;
use std::sync::atomic::{AtomicI64, Ordering};
use std::sync::Arc;

use arrow::array::RecordBatch;
use datafusion::common::tree_node::TreeNodeRecursion;
use datafusion::error::{DataFusionError, Result};
use datafusion::execution::{SendableRecordBatchStream, TaskContext};
use datafusion::physical_expr::{EquivalenceProperties, PhysicalExpr};
use datafusion::physical_plan::execution_plan::{Boundedness, EmissionType, SchedulingType};
use datafusion::physical_plan::stream::RecordBatchStreamAdapter;
use datafusion::physical_plan::{
    DisplayAs, DisplayFormatType, ExecutionPlan, Partitioning, PlanProperties,
};

use super::plan::QueryPlan;
use crate::error::{SourceError, SourceErrorKind};
use crate::pipeline::decode::{ScanShape, SourceDecoder};
use crate::pipeline::live_source::LiveSource;
use crate::pipeline::reader::file_feed::FileFeed;
use crate::pipeline::reader::{FileReader, KafkaReader, Next, PositionedReader};
use crate::pipeline::window::query::{ContinuousQuery, Emit, Merge, Progress, Worker};
use crate::pipeline::window::time::NONE;
use crate::source::Connector;

/// A continuous query as a DataFusion plan node (one output partition).
pub(crate) struct ContinuousExec {
    plan: QueryPlan,
    properties: Arc<PlanProperties>,
}

impl ContinuousExec {
    /// A node running `plan`.
    pub(crate) fn new(plan: QueryPlan) -> Self {
        let properties = PlanProperties::new(
            EquivalenceProperties::new(Arc::clone(&plan.schema)),
            Partitioning::UnknownPartitioning(1),
            EmissionType::Incremental,
            // DataFusion plans the query as a bounded one; weir refuses, in follow mode, what
            // would wait for the end of its output (`super::compile`).
            Boundedness::Bounded,
        )
        // Its stream waits on a tokio channel, which takes part in tokio's task budget.
        .with_scheduling_type(SchedulingType::Cooperative);
        Self {
            plan,
            properties: Arc::new(properties),
        }
    }

    /// What it runs.
    pub(crate) fn plan(&self) -> &QueryPlan {
        &self.plan
    }
}

impl fmt::Debug for ContinuousExec {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ContinuousExec")
            .field("source", &self.plan.source.name)
            .finish_non_exhaustive()
    }
}

impl DisplayAs for ContinuousExec {
    fn fmt_as(&self, _t: DisplayFormatType, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "ContinuousExec: source={}, aggregate={}",
            self.plan.source.name,
            self.plan.aggregates()
        )
    }
}

impl ExecutionPlan for ContinuousExec {
    fn name(&self) -> &str {
        "ContinuousExec"
    }

    fn properties(&self) -> &Arc<PlanProperties> {
        &self.properties
    }

    fn children(&self) -> Vec<&Arc<dyn ExecutionPlan>> {
        Vec::new()
    }

    fn apply_expressions(
        &self,
        _f: &mut dyn FnMut(&Arc<dyn PhysicalExpr>) -> Result<TreeNodeRecursion>,
    ) -> Result<TreeNodeRecursion> {
        Ok(TreeNodeRecursion::Continue)
    }

    fn with_new_children(
        self: Arc<Self>,
        children: Vec<Arc<dyn ExecutionPlan>>,
    ) -> Result<Arc<dyn ExecutionPlan>> {
        if children.is_empty() {
            Ok(self)
        } else {
            Err(DataFusionError::Internal(
                "ContinuousExec has no children".into(),
            ))
        }
    }

    fn execute(
        &self,
        partition: usize,
        context: Arc<TaskContext>,
    ) -> Result<SendableRecordBatchStream> {
        if partition != 0 {
            return Err(DataFusionError::Internal(format!(
                "ContinuousExec has one partition, not {partition}"
            )));
        }
        let plan = self.plan.clone();
        let schema = Arc::clone(&plan.schema);
        let (tx, rx) = tokio::sync::mpsc::channel::<Result<RecordBatch>>(2);
        tokio::spawn(async move {
            let started = async {
                let query = Arc::new(plan.instantiate(context).await?);
                let readers = readers(&query, plan.partitions).await?;
                Ok::<_, DataFusionError>((query, readers))
            }
            .await;
            match started {
                Ok((query, readers)) => {
                    let name = format!("weir-merge-{}", query.source.name);
                    let tx2 = tx.clone();
                    let spawned = std::thread::Builder::new()
                        .name(name)
                        .spawn(move || run(&query, readers, &tx2));
                    if let Err(e) = spawned {
                        let _ = tx.send(Err(DataFusionError::External(Box::new(e)))).await;
                    }
                }
                Err(e) => {
                    let _ = tx.send(Err(e)).await;
                }
            }
        });
        let stream =
            futures::stream::unfold(rx, |mut rx| async move { rx.recv().await.map(|b| (b, rx)) });
        Ok(Box::pin(RecordBatchStreamAdapter::new(schema, stream)))
    }
}

/// Opens one reader of the query's columns.
type OpenReader = Box<dyn FnOnce() -> Result<Box<dyn PositionedReader>, SourceError> + Send>;

/// The readers of a query: a shared feed of file blocks, or a share of the Kafka partitions
/// each (every batch one partition's, for event time per partition).
async fn readers(query: &Arc<ContinuousQuery>, partitions: usize) -> Result<Vec<OpenReader>> {
    let source = Arc::clone(&query.source);
    let shape = Arc::new(
        ScanShape::with_hidden(&source, Some(&query.read), &query.hidden)
            .map_err(SourceError::into_df)?,
    );
    match &source.connector {
        Connector::File(settings) => {
            let feed = Arc::new(
                FileFeed::open(settings, source.follow, &source.stats.stages)
                    .map_err(|e| SourceError::new(&source.name, e).into_df())?,
            );
            Ok((0..partitions.max(1))
                .map(|_| {
                    let (source, shape, feed) =
                        (Arc::clone(&source), Arc::clone(&shape), Arc::clone(&feed));
                    let open: OpenReader = Box::new(move || {
                        let decoder = SourceDecoder::new(&source, &shape);
                        Ok(Box::new(FileReader::new(feed, decoder)) as _)
                    });
                    open
                })
                .collect())
        }
        Connector::Kafka(settings) => {
            source
                .connector
                .refuse_group(&source.name)
                .map_err(SourceError::into_df)?;
            let (name, template, bounded) = (
                source.name.clone(),
                settings.consumer.clone(),
                !source.follow,
            );
            let configs = tokio::task::spawn_blocking(move || {
                crate::source::kafka::shares(&name, &template, partitions, bounded)
            })
            .await
            .map_err(|e| DataFusionError::External(Box::new(e)))?
            .map_err(SourceError::into_df)?;
            Ok(configs
                .into_iter()
                .map(|config| {
                    let (source, shape) = (Arc::clone(&source), Arc::clone(&shape));
                    let open: OpenReader = Box::new(move || {
                        let decoder = SourceDecoder::new(&source, &shape);
                        Ok(
                            Box::new(KafkaReader::open(config, decoder, &[])?.split_by_partition())
                                as _,
                        )
                    });
                    open
                })
                .collect())
        }
    }
}

/// What a worker thread tells the merge.
enum Message {
    /// A reader's output, and the rows it found late.
    Emits(Vec<Emit>, u64),
    /// Reader `i`'s progress.
    Progress(usize, Progress),
    /// A reader failed.
    Failed(SourceError),
}

/// Runs the workers and the merge; sends output batches to `tx` until the end, an error, or
/// the query no longer wanting rows.
fn run(
    query: &Arc<ContinuousQuery>,
    readers: Vec<OpenReader>,
    tx: &tokio::sync::mpsc::Sender<Result<RecordBatch>>,
) {
    let count = readers.len();
    let shards = merge_shards(count);
    let floor = Arc::new(AtomicI64::new(NONE));
    let (mtx, mrx) = std::sync::mpsc::sync_channel::<Message>(8);
    let source = Arc::clone(&query.source);
    std::thread::scope(|scope| {
        for (i, open) in readers.into_iter().enumerate() {
            let (wtx, floor, query) = (mtx.clone(), Arc::clone(&floor), Arc::clone(query));
            let spawned = std::thread::Builder::new()
                .name(format!("weir-read-{}-{i}", query.source.name))
                .spawn_scoped(scope, move || {
                    if let Err(e) = work(&query, i, shards, open, &floor, &wtx) {
                        let _ = wtx.send(Message::Failed(e));
                    }
                });
            if let Err(e) = spawned {
                let _ = mtx.send(Message::Failed(SourceError::new(
                    &source.name,
                    SourceErrorKind::Thread(format!("cannot start a reading thread: {e}")),
                )));
            }
        }
        drop(mtx);
        let result = merge(query, count, shards, &floor, &mrx, tx);
        // The workers stop at their next send once the receiver is gone.
        drop(mrx);
        if let Err(e) = result {
            let _ = tx.blocking_send(Err(e));
        }
    });
}

/// How many threads merge the windows of `readers` readers: one up to 4 readers (one merge
/// thread keeps up with them, and splitting the state by group would only cost the readers
/// time), then one for every 4 readers, so that merging keeps up on many cores.
fn merge_shards(readers: usize) -> usize {
    readers.div_ceil(4).max(1)
}

/// One worker thread: reads, runs the worker (splitting its windows over `shards` merge
/// shards), reports.
fn work(
    query: &Arc<ContinuousQuery>,
    i: usize,
    shards: usize,
    open: OpenReader,
    floor: &AtomicI64,
    tx: &std::sync::mpsc::SyncSender<Message>,
) -> Result<(), SourceError> {
    let name = query.source.name.clone();
    let gone = || SourceError::new(&name, SourceErrorKind::Thread("the query stopped".into()));
    let mut reader = open()?;
    let mut worker = Worker::sharded(query, shards);
    for c in reader.channels() {
        worker.register(c);
    }
    let df = |e: DataFusionError| SourceError::new(&name, SourceErrorKind::Thread(e.to_string()));
    loop {
        let mut emits = Vec::new();
        let next = reader.next()?;
        let end = matches!(next, Next::End);
        let idle = matches!(next, Next::Idle);
        match next {
            Next::Batch(b) => {
                worker
                    .batch(
                        b,
                        reader.channel(),
                        floor.load(Ordering::Acquire),
                        &mut emits,
                    )
                    .map_err(df)?;
            }
            Next::Idle => {
                std::thread::sleep(reader.idle_wait().max(std::time::Duration::from_millis(20)))
            }
            Next::End => worker.flush_all(&mut emits).map_err(df)?,
        }
        let progress = if end {
            Progress::Done
        } else if let (true, Some(all)) = (idle, reader.files_drained()) {
            // An idle file reader holds no block, so it holds nothing back; it moves the
            // watermark only when no other reader holds one either.
            match worker.drained(&mut emits).map_err(df)? {
                Progress::Drained(_) if !all => Progress::Idle,
                p => p,
            }
        } else {
            worker.progress(&mut emits).map_err(df)?
        };
        let late = worker.take_late();
        if !emits.is_empty() || late > 0 {
            tx.send(Message::Emits(emits, late)).map_err(|_| gone())?;
        }
        tx.send(Message::Progress(i, progress))
            .map_err(|_| gone())?;
        if end {
            return Ok(());
        }
    }
}

/// The merge loop.
fn merge(
    query: &Arc<ContinuousQuery>,
    readers: usize,
    shards: usize,
    floor: &AtomicI64,
    rx: &std::sync::mpsc::Receiver<Message>,
    tx: &tokio::sync::mpsc::Sender<Result<RecordBatch>>,
) -> Result<()> {
    let source: &LiveSource = &query.source;
    let mut merge = Merge::sharded(query, readers, shards)?;
    let mut done = 0;
    let mut out = Vec::new();
    while done < readers {
        let Ok(msg) = rx.recv() else {
            break;
        };
        // Timed per message (a reader's batch of output), not per row: the one thread of a
        // continuous query that does not spread over cores (it runs the watermark, and the
        // merge itself when it has no shards), as the run's summary shows it.
        let busy = std::time::Instant::now();
        match msg {
            Message::Emits(emits, late) => {
                source.stats.late.fetch_add(late, Ordering::Relaxed);
                for e in emits {
                    merge.take(e, &mut out)?;
                }
            }
            Message::Progress(i, p) => {
                if p == Progress::Done {
                    done += 1;
                }
                merge.progress(i, p, &mut out)?;
                floor.store(merge.watermark(), Ordering::Release);
                let metrics = &source.stats.metrics;
                metrics
                    .watermark
                    .store(merge.watermark(), Ordering::Relaxed);
            }
            Message::Failed(e) => return Err(e.into_df()),
        }
        source
            .stats
            .late
            .fetch_add(merge.take_late(), Ordering::Relaxed);
        source
            .stats
            .window_merge_ns
            .fetch_add(elapsed_ns(busy), Ordering::Relaxed);
        for b in out.drain(..) {
            if tx.blocking_send(Ok(b)).is_err() {
                record_shards(source, &merge);
                return Ok(());
            }
        }
    }
    let busy = std::time::Instant::now();
    let dropped = merge.end(!source.follow, &mut out)?;
    source
        .stats
        .window_merge_ns
        .fetch_add(elapsed_ns(busy), Ordering::Relaxed);
    source
        .stats
        .windows_dropped
        .fetch_add(dropped as u64, Ordering::Relaxed);
    record_shards(source, &merge);
    for b in out {
        if tx.blocking_send(Ok(b)).is_err() {
            break;
        }
    }
    Ok(())
}

/// Counts the merge threads and their busy time for the run's summary.
fn record_shards(source: &LiveSource, merge: &Merge) {
    let (threads, busy) = merge.shards();
    let stats = &source.stats;
    stats
        .window_shards
        .fetch_max(threads as u64, Ordering::Relaxed);
    stats
        .window_shards_ns
        .fetch_add(duration_ns(busy), Ordering::Relaxed);
}

/// Nanoseconds since `t`.
fn elapsed_ns(t: std::time::Instant) -> u64 {
    duration_ns(t.elapsed())
}

/// `d` in nanoseconds, saturating.
fn duration_ns(d: std::time::Duration) -> u64 {
    u64::try_from(d.as_nanos()).unwrap_or(u64::MAX)
}
