//! The Parquet file writer: one file, its columns encoded on threads of their own.
//!
//! Parquet's encoding (dictionaries, pages, compression) is most of what writing a file costs:
//! in a Delta sink's profile its thread was 1.7x as busy as the thread that decoded the rows.
//! Done on the thread that calls [`BatchWriter::write`] (the pipeline's), it set the pace of a
//! whole run however many readers decoded. So the caller here only splits each batch into its
//! leaf columns (a cheap walk that shares the arrays' buffers) and hands them to encoder
//! threads, each of which owns the writers of some columns for the open row group. When a row
//! group is full the threads are told to close it and go on with the next one's rows; its
//! column chunks are appended to the file, in column order, when the next row group ends or the
//! file is finished, so the caller never waits for the encoding of the rows it just sent.
//! The file holds the same row groups, columns and metadata as parquet's `ArrowWriter` writes.

use std::io::Write;
use std::sync::mpsc::{channel, sync_channel, Receiver, Sender, SyncSender};
use std::thread::JoinHandle;

use arrow::datatypes::SchemaRef;
use arrow::record_batch::RecordBatch;
use parquet::arrow::arrow_writer::{
    compute_leaves, ArrowColumnChunk, ArrowColumnWriter, ArrowLeafColumn,
    ArrowRowGroupWriterFactory,
};
use parquet::arrow::ArrowWriter;
use parquet::basic::Type as PhysicalType;
use parquet::errors::ParquetError;
use parquet::file::properties::{WriterProperties, DEFAULT_MAX_ROW_GROUP_ROW_COUNT};
use parquet::file::writer::SerializedFileWriter;

use super::{finished, io, parquet_err, BatchWriter, SinkError, Target};

/// Batches queued for each encoder thread before [`BatchWriter::write`] waits for it: enough
/// to ride out a slow page, little memory (the batches share the caller's buffers).
const QUEUE: usize = 4;

/// A Parquet file written by `threads` encoder threads (at most one per leaf column).
pub(crate) struct ParquetSink {
    target: Target,
    /// The file; `None` once finished.
    file: Option<SerializedFileWriter<Box<dyn Write + Send>>>,
    factory: ArrowRowGroupWriterFactory,
    schema: SchemaRef,
    max_rows: usize,
    /// The encoder thread of each leaf column, in the file's column order.
    owner: Vec<usize>,
    encoders: Vec<EncoderThread>,
    /// Rows sent into the open row group; `None` when none is open.
    open: Option<usize>,
    /// A row group told to close whose chunks are not in the file yet.
    closing: bool,
    /// Row groups begun, for the column writers' row group index.
    row_groups: usize,
}

/// One encoder thread and its two queues.
struct EncoderThread {
    jobs: Option<SyncSender<Job>>,
    chunks: Receiver<Vec<(usize, ArrowColumnChunk)>>,
    handle: Option<JoinHandle<Result<(), ParquetError>>>,
}

/// What an encoder thread is told, in order.
enum Job {
    /// A row group begins: the writers of this thread's leaf columns, with their index.
    Begin(Vec<(usize, ArrowColumnWriter)>),
    /// One batch's values of this thread's leaf columns, in the order of `Begin`'s writers.
    Write(Vec<ArrowLeafColumn>),
    /// The row group ends: close the writers and send back their chunks.
    End,
}

impl ParquetSink {
    /// Opens `target` for rows of `schema`, encoded by up to `threads` threads.
    pub(crate) fn open(
        target: Target,
        schema: &SchemaRef,
        props: WriterProperties,
        threads: usize,
    ) -> Result<Self, SinkError> {
        let max_rows = props
            .max_row_group_row_count()
            .unwrap_or(DEFAULT_MAX_ROW_GROUP_ROW_COUNT)
            .max(1);
        let out = target.open()?;
        // `ArrowWriter` converts the schema and embeds it as Arrow metadata, as readers expect;
        // its parts then write the row groups.
        let (file, factory) = ArrowWriter::try_new(out, schema.clone(), Some(props))
            .and_then(ArrowWriter::into_serialized_writer)
            .map_err(|e| parquet_err(&target, e))?;
        let weights: Vec<usize> = file
            .schema_descr()
            .columns()
            .iter()
            .map(|c| match c.physical_type() {
                // Strings and binaries: hashed into dictionaries and copied; the widest work.
                PhysicalType::BYTE_ARRAY | PhysicalType::FIXED_LEN_BYTE_ARRAY => 2,
                _ => 1,
            })
            .collect();
        let owner = assign(&weights, threads.clamp(1, weights.len().max(1)));
        let count = owner.iter().max().map_or(1, |m| m + 1);
        let encoders = (0..count)
            .map(|i| EncoderThread::start(i, &target))
            .collect::<Result<Vec<_>, _>>()?;
        Ok(Self {
            target,
            file: Some(file),
            factory,
            schema: schema.clone(),
            max_rows,
            owner,
            encoders,
            open: None,
            closing: false,
            row_groups: 0,
        })
    }

    /// Begins a row group: each thread gets the writers of its columns.
    fn begin(&mut self) -> Result<(), SinkError> {
        let writers = self
            .factory
            .create_column_writers(self.row_groups)
            .map_err(|e| parquet_err(&self.target, e))?;
        let mut per: Vec<Vec<(usize, ArrowColumnWriter)>> =
            self.encoders.iter().map(|_| Vec::new()).collect();
        for (leaf, writer) in writers.into_iter().enumerate() {
            let thread = self.owner.get(leaf).copied().unwrap_or(0);
            if let Some(p) = per.get_mut(thread) {
                p.push((leaf, writer));
            }
        }
        for (i, writers) in per.into_iter().enumerate() {
            self.send(i, Job::Begin(writers))?;
        }
        self.row_groups += 1;
        self.open = Some(0);
        Ok(())
    }

    /// Ends the open row group: its threads close it while the caller goes on; the one closed
    /// before it is appended to the file now.
    fn end(&mut self) -> Result<(), SinkError> {
        if self.open.take().is_none() {
            return Ok(());
        }
        self.append_closed()?;
        for i in 0..self.encoders.len() {
            self.send(i, Job::End)?;
        }
        self.closing = true;
        Ok(())
    }

    /// Appends the row group told to close, once its threads have sent its chunks.
    fn append_closed(&mut self) -> Result<(), SinkError> {
        if !std::mem::take(&mut self.closing) {
            return Ok(());
        }
        let mut chunks: Vec<Option<ArrowColumnChunk>> = self.owner.iter().map(|_| None).collect();
        for i in 0..self.encoders.len() {
            let received = self.encoders.get(i).and_then(|e| e.chunks.recv().ok());
            let Some(done) = received else {
                return Err(self.stopped(i));
            };
            for (leaf, chunk) in done {
                if let Some(slot) = chunks.get_mut(leaf) {
                    *slot = Some(chunk);
                }
            }
        }
        let Some(file) = self.file.as_mut() else {
            return Err(finished(&self.target));
        };
        let mut group = file
            .next_row_group()
            .map_err(|e| parquet_err(&self.target, e))?;
        for (leaf, chunk) in chunks.into_iter().enumerate() {
            let chunk = chunk.ok_or_else(|| {
                SinkError::Options(format!(
                    "{}: column {leaf} of a row group came back from no encoder thread; this is a bug in weir",
                    self.target.name()
                ))
            })?;
            chunk
                .append_to_row_group(&mut group)
                .map_err(|e| parquet_err(&self.target, e))?;
        }
        group.close().map_err(|e| parquet_err(&self.target, e))?;
        Ok(())
    }

    fn send(&mut self, thread: usize, job: Job) -> Result<(), SinkError> {
        let sent = self
            .encoders
            .get(thread)
            .and_then(|e| e.jobs.as_ref())
            .is_some_and(|jobs| jobs.send(job).is_ok());
        if sent {
            Ok(())
        } else {
            Err(self.stopped(thread))
        }
    }

    /// An encoder thread stopped: its error (it stops only on one, or when it panicked).
    fn stopped(&mut self, thread: usize) -> SinkError {
        match self.join(thread) {
            Err(e) => e,
            Ok(()) => SinkError::Options(format!(
                "{}: the Parquet encoder thread {thread} stopped; this is a bug in weir",
                self.target.name()
            )),
        }
    }

    /// Waits for encoder thread `thread` to end (at once if it was joined before); its error,
    /// or a panic, as the writer's.
    fn join(&mut self, thread: usize) -> Result<(), SinkError> {
        let handle = self.encoders.get_mut(thread).and_then(|e| e.handle.take());
        match handle.map(JoinHandle::join) {
            Some(Ok(Ok(()))) | None => Ok(()),
            Some(Ok(Err(e))) => Err(parquet_err(&self.target, e)),
            Some(Err(_)) => Err(SinkError::Options(format!(
                "{}: the Parquet encoder thread {thread} panicked; this is a bug in weir",
                self.target.name()
            ))),
        }
    }

    /// Sends one batch, which fits in the open row group, to the encoder threads.
    fn send_rows(&mut self, batch: &RecordBatch) -> Result<(), SinkError> {
        let mut per: Vec<Vec<ArrowLeafColumn>> = self.encoders.iter().map(|_| Vec::new()).collect();
        let mut leaf = 0;
        for (field, column) in self.schema.fields().iter().zip(batch.columns()) {
            for values in compute_leaves(field, column).map_err(|e| parquet_err(&self.target, e))? {
                let thread = self.owner.get(leaf).copied().unwrap_or(0);
                if let Some(p) = per.get_mut(thread) {
                    p.push(values);
                }
                leaf += 1;
            }
        }
        for (i, leaves) in per.into_iter().enumerate() {
            if !leaves.is_empty() {
                self.send(i, Job::Write(leaves))?;
            }
        }
        Ok(())
    }
}

impl BatchWriter for ParquetSink {
    fn write(&mut self, batch: &RecordBatch) -> Result<(), SinkError> {
        if self.file.is_none() {
            return Err(finished(&self.target));
        }
        let mut rest = batch.clone();
        while rest.num_rows() > 0 {
            let buffered = match self.open {
                Some(n) => n,
                None => {
                    self.begin()?;
                    0
                }
            };
            let take = rest.num_rows().min(self.max_rows - buffered);
            if take == rest.num_rows() {
                self.send_rows(&rest)?;
                rest = rest.slice(take, 0);
            } else {
                self.send_rows(&rest.slice(0, take))?;
                rest = rest.slice(take, rest.num_rows() - take);
            }
            self.open = Some(buffered + take);
            if buffered + take >= self.max_rows {
                self.end()?;
            }
        }
        Ok(())
    }

    fn finish(&mut self) -> Result<(), SinkError> {
        if self.file.is_none() {
            return Ok(());
        }
        self.end()?;
        self.append_closed()?;
        for i in 0..self.encoders.len() {
            if let Some(e) = self.encoders.get_mut(i) {
                e.jobs = None;
            }
            self.join(i)?;
        }
        if let Some(file) = self.file.take() {
            let mut out = file
                .into_inner()
                .map_err(|e| parquet_err(&self.target, e))?;
            out.flush().map_err(|e| io(&self.target, e))?;
        }
        Ok(())
    }
}

impl Drop for ParquetSink {
    /// A writer dropped unfinished (a failed run) stops its threads without waiting on them.
    fn drop(&mut self) {
        for e in &mut self.encoders {
            e.jobs = None;
        }
    }
}

impl EncoderThread {
    fn start(index: usize, target: &Target) -> Result<Self, SinkError> {
        let (jobs, queue) = sync_channel(QUEUE);
        let (done, chunks) = channel();
        let handle = std::thread::Builder::new()
            .name(format!("weir-parquet-{index}"))
            .spawn(move || encode(&queue, &done))
            .map_err(|e| io(target, e))?;
        Ok(Self {
            jobs: Some(jobs),
            chunks,
            handle: Some(handle),
        })
    }
}

/// An encoder thread's loop; it returns at its first error, which the writer then reports.
fn encode(
    jobs: &Receiver<Job>,
    done: &Sender<Vec<(usize, ArrowColumnChunk)>>,
) -> Result<(), ParquetError> {
    let mut writers: Vec<(usize, ArrowColumnWriter)> = Vec::new();
    for job in jobs {
        match job {
            Job::Begin(w) => writers = w,
            Job::Write(leaves) => {
                for ((_, writer), values) in writers.iter_mut().zip(&leaves) {
                    writer.write(values)?;
                }
            }
            Job::End => {
                let chunks = std::mem::take(&mut writers)
                    .into_iter()
                    .map(|(leaf, w)| w.close().map(|c| (leaf, c)))
                    .collect::<Result<Vec<_>, _>>()?;
                if done.send(chunks).is_err() {
                    return Ok(());
                }
            }
        }
    }
    Ok(())
}

/// Gives each leaf column (by its `weights`) to one of `threads` threads, heaviest first to
/// the least loaded (ties to the lowest thread), so the threads' work is near even; every
/// thread gets a column when there are at least as many columns.
fn assign(weights: &[usize], threads: usize) -> Vec<usize> {
    let mut order: Vec<usize> = (0..weights.len()).collect();
    order.sort_by_key(|&i| std::cmp::Reverse(weights.get(i).copied().unwrap_or(0)));
    let mut load = vec![0usize; threads.max(1)];
    let mut owner = vec![0usize; weights.len()];
    for leaf in order {
        let (thread, _) = load
            .iter()
            .enumerate()
            .min_by_key(|&(t, l)| (*l, t))
            .unwrap_or((0, &0));
        if let Some(o) = owner.get_mut(leaf) {
            *o = thread;
        }
        if let Some(l) = load.get_mut(thread) {
            *l += weights.get(leaf).copied().unwrap_or(0);
        }
    }
    owner
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::Arc;

    use arrow::array::{
        ArrayRef, Int32Array, Int64Array, ListArray, MapBuilder, StringArray, StringBuilder,
        StructArray,
    };
    use arrow::datatypes::{DataType, Field, Int32Type, Schema};
    use parquet::arrow::arrow_reader::ParquetRecordBatchReaderBuilder;
    use parquet::file::reader::{FileReader, SerializedFileReader};

    /// `n` rows from `start`: scalars with nulls, a string, a struct, a list and a map.
    fn rows(start: i64, n: usize) -> RecordBatch {
        let ids: Vec<i64> = (start..start + n as i64).collect();
        let id = Int64Array::from(ids.clone());
        let small = Int32Array::from_iter(
            ids.iter()
                .map(|i| (i % 3 != 0).then(|| i32::try_from(i % 1000).unwrap_or(0))),
        );
        let name = StringArray::from_iter(
            ids.iter()
                .map(|i| (i % 5 != 0).then(|| format!("t{}", i % 7))),
        );
        let inner = StructArray::from(vec![
            (
                Arc::new(Field::new("a", DataType::Int64, false)),
                Arc::new(Int64Array::from(
                    ids.iter().map(|i| i * 2).collect::<Vec<_>>(),
                )) as ArrayRef,
            ),
            (
                Arc::new(Field::new("b", DataType::Utf8, true)),
                Arc::new(StringArray::from_iter(
                    ids.iter().map(|i| (i % 2 == 0).then(|| i.to_string())),
                )) as ArrayRef,
            ),
        ]);
        let list = ListArray::from_iter_primitive::<Int32Type, _, _>(
            ids.iter()
                .map(|i| (i % 4 != 0).then(|| (0..(i % 3) as i32).map(Some).collect::<Vec<_>>())),
        );
        let mut map = MapBuilder::new(None, StringBuilder::new(), Int32Array::builder(0));
        for i in &ids {
            for k in 0..(i % 3) {
                map.keys().append_value(format!("k{k}"));
                map.values().append_value(i32::try_from(k).unwrap_or(0));
            }
            map.append(i % 6 != 0).unwrap();
        }
        let columns: Vec<ArrayRef> = vec![
            Arc::new(id),
            Arc::new(small),
            Arc::new(name),
            Arc::new(inner),
            Arc::new(list),
            Arc::new(map.finish()),
        ];
        let fields: Vec<Field> = ["id", "small", "name", "inner", "list", "map"]
            .iter()
            .zip(&columns)
            .map(|(n, c)| Field::new(*n, c.data_type().clone(), *n != "id"))
            .collect();
        RecordBatch::try_new(Arc::new(Schema::new(fields)), columns).unwrap()
    }

    fn props(row_group: usize) -> WriterProperties {
        WriterProperties::builder()
            .set_max_row_group_row_count(Some(row_group))
            .build()
    }

    /// The rows and each row group's row count, as read back.
    fn read(path: &std::path::Path) -> (Vec<RecordBatch>, Vec<i64>, SchemaRef) {
        let reader = SerializedFileReader::new(std::fs::File::open(path).unwrap()).unwrap();
        let groups = reader
            .metadata()
            .row_groups()
            .iter()
            .map(|g| g.num_rows())
            .collect();
        let builder =
            ParquetRecordBatchReaderBuilder::try_new(std::fs::File::open(path).unwrap()).unwrap();
        let schema = builder.schema().clone();
        let batches = builder.build().unwrap().map(|b| b.unwrap()).collect();
        (batches, groups, schema)
    }

    #[test]
    fn threads_write_what_arrow_writer_writes() {
        let dir = tempfile::tempdir().unwrap();
        // Batches of 37 rows into row groups of 100: batches split across row groups.
        let batches: Vec<RecordBatch> = (0..9).map(|i| rows(i * 37, 37)).collect();
        let schema = batches[0].schema();
        let reference = dir.path().join("reference.parquet");
        let mut w = ArrowWriter::try_new(
            std::fs::File::create(&reference).unwrap(),
            schema.clone(),
            Some(props(100)),
        )
        .unwrap();
        for b in &batches {
            w.write(b).unwrap();
        }
        w.close().unwrap();
        let (want_rows, want_groups, want_schema) = read(&reference);
        assert_eq!(want_groups, vec![100, 100, 100, 33]);
        let want = arrow::compute::concat_batches(&want_schema, &want_rows).unwrap();
        assert_eq!(
            want,
            arrow::compute::concat_batches(&schema, &batches).unwrap()
        );
        // More threads than leaf columns (8) too.
        for threads in [1, 2, 3, 4, 16] {
            let path = dir.path().join(format!("t{threads}.parquet"));
            let mut sink =
                ParquetSink::open(Target::File(path.clone()), &schema, props(100), threads)
                    .unwrap();
            assert_eq!(sink.encoders.len(), threads.min(8), "threads {threads}");
            for b in &batches {
                sink.write(b).unwrap();
            }
            sink.finish().unwrap();
            let (got_rows, got_groups, got_schema) = read(&path);
            assert_eq!(got_groups, want_groups, "threads {threads}");
            assert_eq!(got_schema, want_schema, "threads {threads}");
            let got = arrow::compute::concat_batches(&got_schema, &got_rows).unwrap();
            assert_eq!(got, want, "threads {threads}");
        }
    }

    #[test]
    fn a_file_without_rows_and_writes_after_finish() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("empty.parquet");
        let b = rows(0, 3);
        let mut sink =
            ParquetSink::open(Target::File(path.clone()), &b.schema(), props(10), 2).unwrap();
        sink.write(&b.slice(0, 0)).unwrap();
        sink.finish().unwrap();
        sink.finish().unwrap();
        let e = sink.write(&b).err().unwrap();
        assert!(e.to_string().contains("after it was completed"), "{e}");
        let (batches, groups, schema) = read(&path);
        assert!(groups.is_empty());
        assert_eq!(batches.iter().map(RecordBatch::num_rows).sum::<usize>(), 0);
        assert_eq!(schema.fields(), b.schema().fields());
    }

    #[test]
    fn an_encoder_threads_error_is_the_writers() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("bad.parquet");
        let declared = Arc::new(Schema::new(vec![Field::new("n", DataType::Int32, true)]));
        let mut sink =
            ParquetSink::open(Target::File(path.clone()), &declared, props(10), 1).unwrap();
        // Rows of another type are refused on the caller's thread, naming the file.
        let text_field = Field::new("n", DataType::Utf8, true);
        let text: ArrayRef = Arc::new(StringArray::from(vec!["x"]));
        let bad = RecordBatch::try_new(
            Arc::new(Schema::new(vec![text_field.clone()])),
            vec![text.clone()],
        )
        .unwrap();
        let e = sink.write(&bad).err().unwrap();
        assert!(e.to_string().contains("bad.parquet"), "{e}");
        // A failure inside an encoder thread (here text handed to an int32 column's writer,
        // past the caller's check) stops the thread, and the writer's next call returns it.
        sink.begin().unwrap();
        let leaves = compute_leaves(&text_field, &text).unwrap();
        sink.send(0, Job::Write(leaves)).unwrap();
        let e = sink.finish().err().unwrap();
        assert!(e.to_string().contains("bad.parquet"), "{e}");
        assert!(e.to_string().contains("Cannot coerce"), "{e}");
    }

    #[test]
    fn columns_spread_evenly_over_threads() {
        assert_eq!(assign(&[1, 1, 1], 1), vec![0, 0, 0]);
        // Heaviest first: the two strings on threads of their own, the rest filling up.
        let owner = assign(&[1, 2, 1, 2, 1, 1], 2);
        let load = |t: usize| -> usize {
            owner
                .iter()
                .zip([1, 2, 1, 2, 1, 1])
                .filter(|(o, _)| **o == t)
                .map(|(_, w)| w)
                .sum()
        };
        assert_eq!((load(0), load(1)), (4, 4));
        assert_ne!(owner[1], owner[3]);
        // As many threads as columns: one each.
        let mut one_each = assign(&[1, 2, 1], 3);
        one_each.sort_unstable();
        assert_eq!(one_each, vec![0, 1, 2]);
    }
}
