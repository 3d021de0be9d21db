//! Exactly-once output: a sink fed straight from a source with state writes one file per step.
//!
//! A step's rows go to `.<sink>-<step>.<ext>.tmp` in the sink's directory. At the step's end the
//! file is completed, synced and renamed to `<sink>-<step>.<ext>` (and the directory synced);
//! only then does one atomic RocksDB commit record the step's dedup keys, the next position of
//! every source partition and the file's name. On start, temporary files and any file of a step
//! after the last committed one (renamed, but its commit never happened) are deleted, and the
//! source resumes at the committed positions. So a crash at any moment neither loses nor repeats
//! a row, and the dedup state always matches the files.
//!
//! On object storage (an `s3://`, `gs://`, `az://` or `abfss://` directory) the temporary file
//! is local, and the step's end uploads it as `<sink>-<step>.<ext>` in parts; the object
//! appears whole when the upload completes, or not at all, so the upload takes the rename's
//! place.
//!
//! A table sink (`delta`) goes one step further: once the state commit is durable, the step is
//! published as one table commit (see `sink::delta` for its order and how a stop is settled).
//! A `kafka` sink writes each step in a transaction, committed the same way (`sink::kafka_steps`).

use std::path::PathBuf;
use std::sync::Arc;
use std::time::Instant;

use arrow::array::RecordBatch;
use arrow::datatypes::SchemaRef;
use weir_codec::Options;
use weir_dedup::{Checkpoint, StateStore};

use super::ledger::Ledger;

use std::sync::atomic::Ordering;

use super::reader::Next;
use super::scan::{open_assigned, open_positioned, open_whole};
use super::threads::{with_read_ahead, ReadItem};
use super::transform::{Rows, StepTransform};
use super::window::query::{ContinuousQuery, Emit, Merge, Progress, Worker};
use crate::error::{SourceError, SourceErrorKind};
use crate::pipeline::live_source::LiveSource;
use crate::sink::storage::{is_remote, local_path, open_location, Location, Spool};
use crate::sink::{open_writer, BatchWriter, SinkError, SinkFormat, StepSink, Target};
use crate::source::meta::MetaKind;

/// Where a checkpointed sink's files are completed.
enum StepDir {
    /// A local directory: files are renamed into place.
    Local,
    /// An object-store directory: files are written in `dir` (a local spool directory, emptied
    /// at start and removed with it) and uploaded into place.
    Remote {
        location: Location,
        runtime: tokio::runtime::Handle,
        _spool: Spool,
    },
}

/// The files of a checkpointed sink.
pub(crate) struct StepFiles {
    /// Where files are written (for a remote sink, the local temporary directory).
    dir: PathBuf,
    place: StepDir,
    sink: String,
    ext: &'static str,
    format: SinkFormat,
    options: Options,
    schema: SchemaRef,
    open: Option<(u64, PathBuf, Box<dyn BatchWriter>)>,
    /// The sink's counters (rows, bytes, files, commit time, step).
    metrics: Arc<crate::metrics::SinkMetrics>,
}

impl StepFiles {
    /// The sink `sink` writing `format` files of `schema` into the directory `path` (local, or
    /// an object-storage URL reached with `options`' credentials).
    pub(crate) fn new(
        path: &str,
        sink: &str,
        format: SinkFormat,
        options: Options,
        schema: SchemaRef,
    ) -> Result<Self, SinkError> {
        let ext = match format {
            SinkFormat::Parquet => "parquet",
            SinkFormat::IpcFile | SinkFormat::IpcStream => "arrow",
            _ => {
                return Err(SinkError::Options(
                    "an exactly-once sink writes parquet or ipc files".into(),
                ))
            }
        };
        let (dir, place) = if is_remote(path) {
            let location = open_location(path, &options)?;
            let spool = Spool::open(sink, &location.url)?;
            let runtime = tokio::runtime::Handle::try_current().map_err(|e| {
                SinkError::Options(format!(
                    "sink {sink}: no runtime to upload with ({e}); this is a bug in weir"
                ))
            })?;
            (
                spool.path().to_path_buf(),
                StepDir::Remote {
                    location,
                    runtime,
                    _spool: spool,
                },
            )
        } else {
            let dir = local_path(path);
            std::fs::create_dir_all(&dir).map_err(|e| SinkError::io(&dir, e))?;
            (dir, StepDir::Local)
        };
        Ok(Self {
            dir,
            place,
            sink: sink.to_string(),
            ext,
            format,
            options,
            schema,
            open: None,
            metrics: Arc::default(),
        })
    }

    /// Counts into `metrics` (the engine's, for the sink's series).
    pub(crate) fn with_metrics(mut self, metrics: Arc<crate::metrics::SinkMetrics>) -> Self {
        self.metrics = metrics;
        self
    }

    fn final_name(&self, step: u64) -> String {
        format!("{}-{step:010}.{}", self.sink, self.ext)
    }

    fn temp_name(&self, step: u64) -> String {
        format!(".{}-{step:010}.{}.tmp", self.sink, self.ext)
    }

    /// What `name` is to a sink whose state committed step `committed`: a temporary file or
    /// the file of a later step (left by a crashed run), or one of its committed files.
    fn classify(&self, name: &str, committed: u64) -> Leftover {
        let prefix = format!("{}-", self.sink);
        let temp_prefix = format!(".{}-", self.sink);
        let suffix = format!(".{}", self.ext);
        if name.starts_with(&temp_prefix) && name.ends_with(".tmp") {
            return Leftover::Temporary;
        }
        match name
            .strip_prefix(&prefix)
            .and_then(|r| r.strip_suffix(&suffix))
            .and_then(|s| s.parse::<u64>().ok())
        {
            // A step's file is completed before its state commit, and the commit of step n
            // waits for step n-1's: a crash leaves at most two steps' files uncommitted.
            Some(step) if step > committed && step <= committed + 2 => Leftover::Uncommitted,
            Some(step) if step > committed => Leftover::Foreign(step),
            _ => Leftover::Keep,
        }
    }

    /// Deletes what a crashed run left: temporary files, and files of the (at most two) steps
    /// after `committed`. A file of a step further on was not written with this state (a lost
    /// or replaced state directory, or another writer): that is an error, and nothing is
    /// deleted. Returns the names deleted.
    pub(crate) async fn clean(&self, committed: u64) -> Result<Vec<String>, SinkError> {
        let names: Vec<String> = match &self.place {
            StepDir::Remote { location, .. } => location.list_names().await?,
            StepDir::Local => std::fs::read_dir(&self.dir)
                .map_err(|e| SinkError::io(&self.dir, e))?
                .flatten()
                .map(|e| e.file_name().to_string_lossy().into_owned())
                .collect(),
        };
        let mut stale = Vec::new();
        for name in names {
            match self.classify(&name, committed) {
                Leftover::Keep => {}
                Leftover::Temporary | Leftover::Uncommitted => stale.push(name),
                Leftover::Foreign(step) => {
                    return Err(SinkError::Options(format!(
                        "sink {}: {} holds {name}, the file of step {step}, but the state has committed only step {committed}: the state directory is not the one these files were written with (lost, replaced, or another writer's). Nothing was deleted; write to a new path, or restore the state directory",
                        self.sink,
                        self.place_name()
                    )))
                }
            }
        }
        for name in &stale {
            match &self.place {
                StepDir::Remote { location, .. } => location.delete(name).await?,
                StepDir::Local => {
                    let path = self.dir.join(name);
                    std::fs::remove_file(&path).map_err(|e| SinkError::io(&path, e))?;
                }
            }
        }
        Ok(stale)
    }

    /// The sink's directory, for messages.
    fn place_name(&self) -> String {
        match &self.place {
            StepDir::Remote { location, .. } => location.url.to_string(),
            StepDir::Local => self.dir.display().to_string(),
        }
    }
}

/// What a file in a checkpointed sink's directory is, at start.
enum Leftover {
    /// A committed step's file, or not the sink's.
    Keep,
    /// A file being written when a run stopped.
    Temporary,
    /// A completed file of a step the state never committed.
    Uncommitted,
    /// A file of a step beyond what a crash can leave (with the step's number).
    Foreign(u64),
}

impl StepSink for StepFiles {
    fn name(&self) -> &str {
        &self.sink
    }

    fn metrics(&self) -> &crate::metrics::SinkMetrics {
        &self.metrics
    }

    /// Appends `batch` to step `step`'s file (opening it at the step's first batch).
    fn write(&mut self, step: u64, batch: &RecordBatch) -> Result<(), SinkError> {
        if self.open.as_ref().is_none_or(|(s, _, _)| *s != step) {
            let tmp = self.dir.join(self.temp_name(step));
            let writer = open_writer(
                self.format,
                Target::File(tmp.clone()),
                &self.schema,
                &self.options,
                false,
            )?;
            self.open = Some((step, tmp, writer));
        }
        match self.open.as_mut() {
            Some((_, _, w)) => w.write(batch),
            None => Ok(()),
        }
    }

    /// Makes step `step`'s file durable under its final name; returns that name (none when the
    /// step wrote no rows).
    fn seal(&mut self, step: u64) -> Result<Vec<String>, SinkError> {
        let Some((s, tmp, mut writer)) = self.open.take() else {
            return Ok(Vec::new());
        };
        if s != step {
            return Err(SinkError::Options(format!(
                "the open file {} belongs to step {s}, not {step}; this is a bug in weir",
                tmp.display()
            )));
        }
        writer.finish()?;
        drop(writer);
        let name = self.final_name(step);
        if let StepDir::Remote {
            location, runtime, ..
        } = &self.place
        {
            let bytes = runtime.block_on(location.upload(&tmp, &name))?;
            std::fs::remove_file(&tmp).map_err(|e| SinkError::io(&tmp, e))?;
            self.metrics.bytes.fetch_add(bytes, Ordering::Relaxed);
            self.metrics.files.fetch_add(1, Ordering::Relaxed);
            return Ok(vec![name]);
        }
        std::fs::File::open(&tmp)
            .and_then(|f| f.sync_all())
            .map_err(|e| SinkError::io(&tmp, e))?;
        let target = self.dir.join(&name);
        std::fs::rename(&tmp, &target).map_err(|e| SinkError::io(&target, e))?;
        if let Ok(m) = std::fs::metadata(&target) {
            self.metrics.bytes.fetch_add(m.len(), Ordering::Relaxed);
        }
        self.metrics.files.fetch_add(1, Ordering::Relaxed);
        std::fs::File::open(&self.dir)
            .and_then(|d| d.sync_all())
            .map_err(|e| SinkError::io(&self.dir, e))?;
        Ok(vec![name])
    }
}

/// A continuous query on one thread: its worker and merge, whose windows and event times are
/// committed with each step.
struct Query {
    query: Arc<ContinuousQuery>,
    worker: Worker,
    merge: Merge,
    /// The query's columns (and hidden position columns) among the source's.
    project: Vec<usize>,
    /// Late rows over every run with this state (committed with the windows).
    late_rows: u64,
}

impl Query {
    fn df(&self, e: datafusion::error::DataFusionError) -> SourceError {
        SourceError::new(
            &self.query.source.name,
            SourceErrorKind::Thread(e.to_string()),
        )
    }

    fn pass(
        &mut self,
        emits: Vec<Emit>,
        progress: Progress,
        out: &mut Vec<RecordBatch>,
    ) -> Result<(), SourceError> {
        for e in emits {
            self.merge.take(e, out).map_err(|e| self.df(e))?;
        }
        self.merge
            .progress(0, progress, out)
            .map_err(|e| self.df(e))?;
        let late = self.worker.take_late() + self.merge.take_late();
        self.late_rows += late;
        self.query
            .source
            .stats
            .metrics
            .watermark
            .store(self.merge.watermark(), Ordering::Relaxed);
        self.query
            .source
            .stats
            .late
            .fetch_add(late, Ordering::Relaxed);
        Ok(())
    }
}

impl StepTransform for Query {
    fn batch(
        &mut self,
        b: RecordBatch,
        channel: usize,
        out: &mut Vec<RecordBatch>,
    ) -> Result<(), SourceError> {
        let b = b.project(&self.project).map_err(|e| self.df(e.into()))?;
        let mut emits = Vec::new();
        let floor = self.merge.watermark();
        self.worker
            .batch(b, channel, floor, &mut emits)
            .map_err(|e| self.df(e))?;
        let progress = self.worker.progress(&mut emits).map_err(|e| self.df(e))?;
        self.pass(emits, progress, out)
    }

    fn idle(&mut self, out: &mut Vec<RecordBatch>) -> Result<(), SourceError> {
        let mut emits = Vec::new();
        let progress = self.worker.progress(&mut emits).map_err(|e| self.df(e))?;
        self.pass(emits, progress, out)
    }

    fn state(&mut self, _: &[(String, i64)]) -> Result<Vec<u8>, SourceError> {
        // Every partial window goes to the merge, whose windows are the state.
        let mut emits = Vec::new();
        self.worker.flush_all(&mut emits).map_err(|e| self.df(e))?;
        let mut none = Vec::new();
        for e in emits {
            self.merge.take(e, &mut none).map_err(|e| self.df(e))?;
        }
        let maxima = self.worker.maxima();
        self.merge
            .snapshot(maxima, self.late_rows)
            .map_err(|e| self.df(e))
    }

    fn end(&mut self, bounded: bool, out: &mut Vec<RecordBatch>) -> Result<(), SourceError> {
        if !bounded {
            // A stop with state keeps the open windows: the step's commit records them.
            return Ok(());
        }
        let mut emits = Vec::new();
        self.worker.flush_all(&mut emits).map_err(|e| self.df(e))?;
        self.pass(emits, Progress::Done, out)?;
        self.merge.end(true, out).map_err(|e| self.df(e))?;
        Ok(())
    }
}

/// Runs the exactly-once loop of `source` into `files`: read (on a thread of its own), dedup,
/// write each batch, and at each step's end seal the file before the commit to `ledger` that
/// records it (the state directory, or a table sink's own log). Returns the rows written.
pub(crate) fn run(
    source: &Arc<LiveSource>,
    ledger: &mut dyn Ledger,
    files: &mut dyn StepSink,
) -> Result<u64, SourceError> {
    let reader = open_whole(source, ledger.checkpoint())?;
    with_read_ahead(&source.name, reader, |_, next| {
        step_loop(source, ledger, files, next, &mut Rows)
    })?
}

/// Runs the exactly-once loop of a Kafka source in a consumer group over `partitions`, the
/// member's assignment, until the source stops or `end` is set (the assignment changed); the
/// last step is committed before it returns. `transform` makes the output of the rows (read
/// with the `hidden` metadata columns after the source's); with `per_partition`, each batch
/// holds one partition's rows. Returns the rows written.
#[allow(clippy::too_many_arguments)]
pub(crate) fn run_assigned(
    source: &Arc<LiveSource>,
    ledger: &mut dyn Ledger,
    files: &mut dyn StepSink,
    partitions: &[i32],
    end: &Arc<std::sync::atomic::AtomicBool>,
    transform: &mut dyn StepTransform,
    hidden: &[MetaKind],
    per_partition: bool,
) -> Result<u64, SourceError> {
    let reader = open_assigned(
        source,
        ledger.checkpoint(),
        partitions,
        end,
        per_partition || ledger.per_partition(),
        hidden,
    )?;
    with_read_ahead(&source.name, reader, |_, next| {
        step_loop(source, ledger, files, next, transform)
    })?
}

/// Runs a continuous query over a source with state into `files`, exactly once: each step's
/// commit records the positions, the step's file, and the query's open windows and event
/// times, so that after a crash every window is emitted once with the values of the bounded
/// query.
pub(crate) fn run_query(
    query: &Arc<ContinuousQuery>,
    store: &mut StateStore,
    files: &mut dyn StepSink,
) -> Result<u64, SourceError> {
    let source = &query.source;
    let reader = open_positioned(source, store.checkpoint(), &query.hidden, true)?;
    let columns = source.schema.fields().len();
    let mut project = query.read.clone();
    project.extend(columns..columns + query.hidden.len());
    let mut worker = Worker::new(query);
    let mut merge = Merge::new(query, 1);
    let df = |e: datafusion::error::DataFusionError| {
        SourceError::new(&source.name, SourceErrorKind::Thread(e.to_string()))
    };
    let header = merge.restore(&store.checkpoint().state).map_err(df)?;
    worker.restore(&header.maxima);
    let mut transform = Query {
        query: Arc::clone(query),
        worker,
        merge,
        project,
        late_rows: header.late_rows,
    };
    with_read_ahead(&source.name, reader, |channels, next| {
        for &c in channels {
            transform.worker.register(c);
        }
        step_loop(source, store, files, next, &mut transform)
    })?
}

/// The loop of [`run`] and [`run_query`], fed by the reading thread.
fn step_loop(
    source: &Arc<LiveSource>,
    store: &mut dyn Ledger,
    files: &mut dyn StepSink,
    read: &mut dyn FnMut() -> ReadItem,
    transform: &mut dyn StepTransform,
) -> Result<u64, SourceError> {
    let sink_name = files.name().to_string();
    let sink = |e: SinkError| {
        SourceError::new(
            &source.name,
            SourceErrorKind::Sink {
                sink: sink_name.clone(),
                source: Box::new(e),
            },
        )
    };
    let mut rows_out = 0u64;
    let mut step_rows = 0u64;
    let mut started = Instant::now();
    let mut moved = false;
    // A step committed to the state and not yet to the table sink.
    let mut unpublished = false;
    let mut out = Vec::new();
    loop {
        let item = read()?;
        let end = matches!(item.next, Next::End);
        match item.next {
            Next::Batch(b) => {
                step_rows += b.num_rows() as u64;
                moved = true;
                let b = store.dedup(b, item.channel, &source.name)?;
                if b.num_rows() > 0 {
                    transform.batch(b, item.channel, &mut out)?;
                }
            }
            Next::Idle => transform.idle(&mut out)?,
            Next::End => transform.end(!source.follow, &mut out)?,
        }
        for b in out.drain(..) {
            moved = true;
            files.write(store.checkpoint().step + 1, &b).map_err(sink)?;
            rows_out += b.num_rows() as u64;
            files
                .metrics()
                .rows
                .fetch_add(b.num_rows() as u64, Ordering::Relaxed);
        }
        if moved && (end || source.commit.due(started, step_rows)) {
            let committing = Instant::now();
            // The last step's table commit comes before this step's state commit, so that the
            // table is never more than one step behind the state (what a restart settles).
            if unpublished {
                store.sync(source)?;
                files.publish(store.checkpoint()).map_err(sink)?;
            }
            let names = files.seal(store.checkpoint().step + 1).map_err(sink)?;
            let operator_state = transform.state(&item.positions)?;
            store.commit(
                Checkpoint {
                    positions: item.positions,
                    files: names,
                    state: operator_state,
                    ..Checkpoint::default()
                },
                source,
            )?;
            // A table sink publishes the step once the state commit is durable (a stop in
            // between is settled from the state at the next start). The state is written on a
            // thread of its own: the pipeline reads on meanwhile, and publishes when it finds
            // the state durable, between batches (or here, when it already is).
            unpublished = files.publishes();
            files.metrics().commit.observe(committing.elapsed());
            let step = store.checkpoint().step;
            files.metrics().step.store(step, Ordering::Relaxed);
            tracing::debug!(source = %source.name, sink = %sink_name, step, "step committed");
            step_rows = 0;
            moved = false;
            started = Instant::now();
        }
        // Between batches: a state commit found durable is published to a table sink, and
        // its figures (keys held) reach the metrics.
        let durable = store.try_sync(source)?;
        if unpublished && (end || durable) {
            store.sync(source)?;
            files.publish(store.checkpoint()).map_err(sink)?;
            unpublished = false;
        }
        if end {
            store.finish(source)?;
            return Ok(rows_out);
        }
    }
}
