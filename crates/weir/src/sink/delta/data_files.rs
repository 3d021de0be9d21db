//! A step's Delta data files, written on a thread of their own.
//!
//! delta-rs's `RecordBatchWriter` encodes Parquet and streams each file's parts to storage from
//! inside `write`, so its caller waits for every part's upload. On the pipeline's thread that
//! wait stopped the reading: on an S3-compatible store the table sink reached 0.86x the
//! throughput of step files, which upload beside the reading. Here one thread drives the
//! writer, fed through a short queue, and the pipeline decodes the next rows while the parts go
//! up. [`DataFileWriters::seal`] waits for the queues to drain and the files to complete, so a
//! step's order (files, state commit, table commit) is unchanged.
//!
//! One thread encodes Parquet at one core's pace, which the readers outrun on a machine of many
//! cores. [`DataFileWriters`] starts another thread, with a writer of its own, whenever every
//! running one has a full queue, up to `'sink.parallelism'`: a table fed slowly keeps one file a
//! step, one fed fast gets a file a thread. A Delta table's rows have no order, so which thread
//! writes a batch does not matter; the step's commit adds every thread's files at once.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::mpsc::{sync_channel, Receiver, SyncSender, TrySendError};
use std::sync::Arc;
use std::thread::JoinHandle;

use arrow::datatypes::SchemaRef;
use arrow::record_batch::RecordBatch;
use deltalake_core::kernel::Add;
use deltalake_core::writer::{DeltaWriter as _, RecordBatchWriter};
use url::Url;

use super::delta_error;
use crate::sink::SinkError;

/// Batches queued for the writer: enough to keep it busy while the pipeline decodes the next
/// one, few enough that memory stays bounded (a batch is at most the pipeline's batch size).
const QUEUED_BATCHES: usize = 4;

/// delta-rs's writer of one table's data files, with what its messages name.
pub(crate) struct DataFiles {
    /// The sink's name, for messages.
    pub(super) sink: String,
    /// The table's URL, for messages (it carries no credentials).
    pub(super) url: Url,
    pub(super) writer: RecordBatchWriter,
    /// The table's Arrow schema, which every batch is cast to (Delta's types, the table's
    /// column order).
    pub(super) schema: SchemaRef,
}

impl DataFiles {
    /// Streams `batch` into the step's data files.
    pub(crate) async fn write(&mut self, batch: &RecordBatch) -> Result<(), SinkError> {
        let batch = if batch.schema().fields() == self.schema.fields() {
            batch.clone()
        } else {
            cast_to(batch, &self.schema).map_err(|e| {
                SinkError::Options(format!(
                    "sink {}: the rows cannot be written as the table's columns: {e}",
                    self.sink
                ))
            })?
        };
        let err = delta_error(&self.sink, &self.url);
        self.writer.write(batch).await.map_err(err)
    }

    /// Completes the step's data files; returns their `add` actions (none when the step wrote
    /// no rows). The files are durable, but not in the table until it commits them.
    pub(crate) async fn seal(&mut self) -> Result<Vec<Add>, SinkError> {
        let err = delta_error(&self.sink, &self.url);
        self.writer.flush().await.map_err(err)
    }
}

/// What the pipeline asks of the writer's thread.
enum Request {
    Write(RecordBatch),
    /// Complete the files written so far and answer with their `add` actions.
    Seal(SyncSender<Result<Vec<Add>, SinkError>>),
}

/// [`DataFiles`] driven by a thread of their own, waiting on the engine's runtime.
pub(crate) struct DataFileThread {
    sink: String,
    /// `None` once the thread is known to have stopped.
    requests: Option<SyncSender<Request>>,
    thread: Option<JoinHandle<Result<(), SinkError>>>,
    /// Set when the pipeline drops the sink: the thread leaves the queued batches unwritten.
    cancel: Arc<AtomicBool>,
}

impl DataFileThread {
    /// Starts the thread that writes `files`, waiting for delta-rs's futures on `runtime`.
    /// `index` is the thread's place among its sink's writers (in its name).
    fn start(
        files: DataFiles,
        runtime: tokio::runtime::Handle,
        index: usize,
    ) -> Result<Self, SinkError> {
        let sink = files.sink.clone();
        let (requests, queue) = sync_channel(QUEUED_BATCHES);
        let cancel = Arc::new(AtomicBool::new(false));
        let cancelled = Arc::clone(&cancel);
        let thread = std::thread::Builder::new()
            .name(format!("delta-{sink}-{index}"))
            .spawn(move || serve(files, &queue, &runtime, &cancelled))
            .map_err(|source| SinkError::Io {
                path: format!("the Delta writer thread of sink {sink}"),
                source,
            })?;
        Ok(Self {
            sink,
            requests: Some(requests),
            thread: Some(thread),
            cancel,
        })
    }

    /// Queues `batch` for the step's data files; waits only while the queue is full. An error
    /// of an earlier batch is returned here (or by [`DataFileWriters::seal`]).
    pub(crate) fn write(&mut self, batch: &RecordBatch) -> Result<(), SinkError> {
        let sent = self
            .requests
            .as_ref()
            .map(|r| r.send(Request::Write(batch.clone())));
        match sent {
            Some(Ok(())) => Ok(()),
            _ => Err(self.stopped()),
        }
    }

    /// Queues `batch` if the queue has room; gives it back if the queue is full.
    fn offer(&mut self, batch: RecordBatch) -> Result<Option<RecordBatch>, SinkError> {
        let sent = self
            .requests
            .as_ref()
            .map(|r| r.try_send(Request::Write(batch)));
        match sent {
            Some(Ok(())) => Ok(None),
            Some(Err(TrySendError::Full(Request::Write(batch)))) => Ok(Some(batch)),
            _ => Err(self.stopped()),
        }
    }

    /// Asks the thread to complete the step's files once its queue is written; the answer
    /// comes through [`DataFileThread::sealed`].
    fn begin_seal(&mut self) -> Result<Receiver<Result<Vec<Add>, SinkError>>, SinkError> {
        let (reply, answer) = sync_channel(1);
        let sent = self.requests.as_ref().map(|r| r.send(Request::Seal(reply)));
        if !matches!(sent, Some(Ok(()))) {
            return Err(self.stopped());
        }
        Ok(answer)
    }

    /// The answer to [`DataFileThread::begin_seal`].
    fn sealed(
        &mut self,
        answer: &Receiver<Result<Vec<Add>, SinkError>>,
    ) -> Result<Vec<Add>, SinkError> {
        answer.recv().unwrap_or_else(|_| Err(self.stopped()))
    }

    /// The thread has stopped: why.
    fn stopped(&mut self) -> SinkError {
        self.requests = None;
        match self.thread.take().map(JoinHandle::join) {
            Some(Ok(Err(e))) => e,
            Some(Err(_)) => SinkError::Options(format!(
                "sink {}: the thread writing the Delta data files panicked",
                self.sink
            )),
            Some(Ok(Ok(()))) | None => SinkError::Options(format!(
                "sink {}: the Delta data files cannot be written after an earlier error",
                self.sink
            )),
        }
    }
}

impl Drop for DataFileThread {
    /// A sink dropped before its step was sealed (the pipeline failed or stopped): the step's
    /// files will never be committed, so the batches still queued are not written (the thread
    /// ends after the one in progress; it is not waited for). Parts already uploaded stay as
    /// unreferenced files, as after a kill.
    fn drop(&mut self) {
        self.cancel.store(true, Ordering::Relaxed);
        self.requests = None;
    }
}

/// A sink's data files written by one thread or, while the rows come faster than one can
/// encode them, by up to `max` threads, each with its writer and files.
pub(crate) struct DataFileWriters {
    running: Vec<DataFileThread>,
    /// Writers for threads not started yet, all of the table as the sink opened it.
    spare: Vec<DataFiles>,
    runtime: tokio::runtime::Handle,
    /// The thread a batch waits for when every queue is full and no thread is left to start
    /// (taken in turn, so none is left idle).
    next: usize,
}

impl DataFileWriters {
    /// Starts the thread of `first`; `spare` are the writers of the threads that may follow.
    pub(crate) fn start(
        first: DataFiles,
        spare: Vec<DataFiles>,
        runtime: tokio::runtime::Handle,
    ) -> Result<Self, SinkError> {
        Ok(Self {
            running: vec![DataFileThread::start(first, runtime.clone(), 0)?],
            // Started from the end: the first spare is the second thread.
            spare: spare.into_iter().rev().collect(),
            runtime,
            next: 0,
        })
    }

    /// Queues `batch` on the first thread with room, else on a new thread while writers are
    /// spare, else waits for the threads' turn.
    pub(crate) fn write(&mut self, batch: &RecordBatch) -> Result<(), SinkError> {
        let mut batch = batch.clone();
        for thread in &mut self.running {
            match thread.offer(batch)? {
                None => return Ok(()),
                Some(back) => batch = back,
            }
        }
        if let Some(files) = self.spare.pop() {
            let index = self.running.len();
            tracing::info!(
                sink = %files.sink,
                writers = index + 1,
                "the data files fall behind the rows: another thread writes them"
            );
            let mut thread = DataFileThread::start(files, self.runtime.clone(), index)?;
            thread.write(&batch)?;
            self.running.push(thread);
            return Ok(());
        }
        let at = self.next % self.running.len();
        self.next = at + 1;
        self.running[at].write(&batch)
    }

    /// Completes every thread's files of the step (all at once) and returns their `add`
    /// actions; the first error if any thread failed.
    pub(crate) fn seal(&mut self) -> Result<Vec<Add>, SinkError> {
        let answers: Vec<_> = self
            .running
            .iter_mut()
            .map(DataFileThread::begin_seal)
            .collect();
        let mut adds = Vec::new();
        let mut failed = None;
        for (thread, answer) in self.running.iter_mut().zip(answers) {
            match answer.and_then(|a| thread.sealed(&a)) {
                Ok(mut a) => adds.append(&mut a),
                Err(e) => {
                    failed.get_or_insert(e);
                }
            }
        }
        match failed {
            Some(e) => Err(e),
            None => Ok(adds),
        }
    }

    /// The threads started so far.
    #[cfg(test)]
    fn threads(&self) -> usize {
        self.running.len()
    }
}

/// The writer's thread: serves requests in order until the pipeline drops its end, or a write
/// fails (its error is the thread's result). A failed seal is answered, then ends the thread:
/// the step's files are unusable.
fn serve(
    mut files: DataFiles,
    queue: &Receiver<Request>,
    runtime: &tokio::runtime::Handle,
    cancel: &AtomicBool,
) -> Result<(), SinkError> {
    while let Ok(request) = queue.recv() {
        if cancel.load(Ordering::Relaxed) {
            return Ok(());
        }
        match request {
            Request::Write(batch) => runtime.block_on(files.write(&batch))?,
            Request::Seal(reply) => {
                let sealed = runtime.block_on(files.seal());
                let failed = sealed.is_err();
                // The pipeline waits for this answer; when it has gone, nobody is left to tell.
                let _ = reply.send(sealed);
                if failed {
                    return Ok(());
                }
            }
        }
    }
    Ok(())
}

/// Casts `batch` to `schema` (same column names; Delta's types), by name.
fn cast_to(
    batch: &RecordBatch,
    schema: &SchemaRef,
) -> Result<RecordBatch, arrow::error::ArrowError> {
    let mut columns = Vec::with_capacity(schema.fields().len());
    for field in schema.fields() {
        let column = batch.column_by_name(field.name()).ok_or_else(|| {
            arrow::error::ArrowError::SchemaError(format!("no column '{}'", field.name()))
        })?;
        columns.push(if column.data_type() == field.data_type() {
            Arc::clone(column)
        } else {
            arrow::compute::cast(column, field.data_type())?
        });
    }
    RecordBatch::try_new(Arc::clone(schema), columns)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::sink::delta::{DeltaSettings, DeltaSink};
    use arrow::array::{Int64Array, StringArray};
    use arrow::datatypes::{DataType, Field, Schema};
    use weir_codec::Options;

    fn rows(schema: &SchemaRef, from: i64, n: i64) -> RecordBatch {
        let ids = Int64Array::from_iter_values(from..from + n);
        let names = StringArray::from_iter_values((from..from + n).map(|i| format!("n{i}")));
        RecordBatch::try_new(Arc::clone(schema), vec![Arc::new(ids), Arc::new(names)])
            .expect("a batch of the schema")
    }

    /// A new table (columns `id`, `name`) in a fresh directory named after `tag`, with the
    /// runtime its writers wait on.
    fn new_table(
        tag: &str,
    ) -> (
        std::path::PathBuf,
        tokio::runtime::Runtime,
        SchemaRef,
        DeltaSink,
        DataFiles,
    ) {
        let dir = std::env::temp_dir().join(format!("{tag}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        let runtime = tokio::runtime::Runtime::new().expect("a runtime");
        let schema: SchemaRef = Arc::new(Schema::new(vec![
            Field::new("id", DataType::Int64, false),
            Field::new("name", DataType::Utf8, true),
        ]));
        let options = Options::new([("path".to_string(), dir.display().to_string())]);
        let settings = DeltaSettings::parse("t", &options).expect("the options");
        let (table, files) = runtime
            .block_on(DeltaSink::open("t", settings, &options, &schema))
            .expect("a new table");
        (dir, runtime, schema, table, files)
    }

    #[test]
    fn the_thread_writes_every_queued_batch_and_returns_a_failed_batchs_error() {
        let (dir, runtime, schema, _table, files) = new_table("weir-data-files");
        let mut thread =
            DataFileWriters::start(files, Vec::new(), runtime.handle().clone()).expect("a thread");

        // More batches than the queue holds, over two steps: each step's files hold its rows.
        for step in 0..2 {
            for b in 0..10 {
                thread
                    .write(&rows(&schema, step * 1000 + b * 10, 10))
                    .expect("queued");
            }
            let written: i64 = row_counts(&thread.seal().expect("the step's files"))
                .iter()
                .sum();
            assert_eq!(written, 100, "step {step}");
        }

        // A batch without the table's column fails on the thread; the pipeline hears of it at
        // its next write or at the seal, with the sink's name and the cause.
        let short = RecordBatch::try_new(
            Arc::new(Schema::new(vec![Field::new("id", DataType::Int64, false)])),
            vec![Arc::new(Int64Array::from_iter_values(0..3))],
        )
        .expect("a batch");
        thread.write(&short).expect("queued before it fails");
        let mut failed = None;
        for _ in 0..QUEUED_BATCHES + 2 {
            if let Err(e) = thread.write(&rows(&schema, 0, 1)) {
                failed = Some(e);
                break;
            }
        }
        let failed = match failed {
            Some(e) => e,
            None => thread.seal().expect_err("the seal after a failed batch"),
        };
        let text = failed.to_string();
        assert!(
            text.contains("sink t") && text.contains("no column 'name'"),
            "{text}"
        );
        // And stays failed.
        assert!(thread.seal().is_err());
        let _ = std::fs::remove_dir_all(&dir);
    }

    fn row_counts(adds: &[Add]) -> Vec<i64> {
        adds.iter()
            .map(|a| {
                let stats: serde_json::Value =
                    serde_json::from_str(a.stats.as_deref().expect("stats")).expect("json");
                stats["numRecords"].as_i64().expect("a row count")
            })
            .collect()
    }

    #[test]
    fn a_writer_that_falls_behind_gets_help_up_to_the_limit_and_the_step_holds_every_row() {
        let (dir, runtime, schema, table, first) = new_table("weir-data-writers");
        let spare = vec![table.data_files().expect("a second writer")];

        // The first thread is held back before it serves anything, as one busy encoding a large
        // batch would be: its queue fills, and the next batch starts the second thread.
        let (requests, queue) = sync_channel(QUEUED_BATCHES);
        let (go, held) = sync_channel::<()>(1);
        let cancel = Arc::new(AtomicBool::new(false));
        let cancelled = Arc::clone(&cancel);
        let handle = runtime.handle().clone();
        let slow = DataFileThread {
            sink: "t".into(),
            requests: Some(requests),
            thread: Some(std::thread::spawn(move || {
                let _ = held.recv();
                serve(first, &queue, &handle, &cancelled)
            })),
            cancel,
        };
        let mut writers = DataFileWriters {
            running: vec![slow],
            spare,
            runtime: runtime.handle().clone(),
            next: 0,
        };
        for b in 0..QUEUED_BATCHES as i64 {
            writers.write(&rows(&schema, b * 10, 10)).expect("queued");
        }
        assert_eq!(writers.threads(), 1, "the first queue had room");
        // Past the first queue: a second thread.
        let b = QUEUED_BATCHES as i64;
        writers.write(&rows(&schema, b * 10, 10)).expect("queued");
        assert_eq!(writers.threads(), 2, "a second thread took the batch");
        // Then no third (the limit is two writers): once both queues are full, batches wait
        // their turn.
        go.send(()).expect("the first thread waits");
        for b in b + 1..40 {
            writers.write(&rows(&schema, b * 10, 10)).expect("queued");
            assert_eq!(writers.threads(), 2);
        }
        let adds = writers.seal().expect("the step's files");
        let counts = row_counts(&adds);
        assert!(counts.len() >= 2, "a file from each thread: {counts:?}");
        assert_eq!(counts.iter().sum::<i64>(), 400, "{counts:?}");

        // The next step: both threads stay, and a file holds each row once.
        for b in 0..5 {
            writers
                .write(&rows(&schema, 1000 + b * 10, 10))
                .expect("queued");
        }
        let counts = row_counts(&writers.seal().expect("the next step"));
        assert_eq!(counts.iter().sum::<i64>(), 50, "{counts:?}");
        let _ = std::fs::remove_dir_all(&dir);
    }
}
