//! A file of rows encoded batch by batch into bytes (JSON lines, a `file` sink's framed
//! messages), the batches encoded on threads of their own and written in their order.
//!
//! Encoding JSON text or messages costs several times what decoding the rows did (about 190 ns
//! a quote as JSON against tens of nanoseconds to decode it), so done on the thread that calls
//! [`BatchWriter::write`] it set the pace of a whole run. Here that thread only hands each
//! batch (its arrays shared, not copied) to the next of `n` encoder threads in turn; one writer
//! thread takes the encoded batches back in the same turn, so the file holds them in the order
//! they came, and writes them while the encoders go on. A batch's bytes do not depend on the
//! batches before it, which is what lets each thread have an encoder of its own.

use std::io::Write;
use std::sync::mpsc::{channel, sync_channel, Receiver, Sender, SyncSender};
use std::sync::{Arc, Condvar, Mutex};
use std::thread::JoinHandle;

use arrow::record_batch::RecordBatch;

use super::{finished, io, BatchWriter, SinkError, Target};

/// Batches queued for each encoder thread, and encoded batches waiting for the writer, before
/// the thread that feeds them waits: enough to ride out an uneven batch, little memory.
const QUEUE: usize = 2;

/// Encodes one batch's rows, appending their bytes to the buffer (which comes empty).
pub(crate) type EncodeBatch =
    Box<dyn FnMut(&RecordBatch, &mut Vec<u8>) -> Result<(), SinkError> + Send>;

/// An encoded batch, or the error that stopped its encoder.
type Encoded = Result<Vec<u8>, SinkError>;

/// How far the writer thread has got, for [`BatchWriter::sync`].
#[derive(Default)]
struct Progress {
    /// Batches written to the output.
    written: u64,
    /// The writer thread has ended (its queues closed, or on an error).
    ended: bool,
}

/// [`Progress`], and its change signalled.
type SharedProgress = Arc<(Mutex<Progress>, Condvar)>;

/// Marks the writer ended when it returns, on whichever path.
struct Ended<'a>(&'a SharedProgress);

impl Drop for Ended<'_> {
    fn drop(&mut self) {
        let (lock, changed) = &**self.0;
        lock.lock().unwrap_or_else(|e| e.into_inner()).ended = true;
        changed.notify_all();
    }
}

/// A file written by encoder threads and one writer thread.
pub(crate) struct EncodedFile {
    target: Target,
    /// The queue of each encoder thread; `None` once closed.
    jobs: Vec<Option<SyncSender<RecordBatch>>>,
    encoders: Vec<Option<JoinHandle<()>>>,
    writer: Option<JoinHandle<Result<(), SinkError>>>,
    /// The encoder thread of the next batch.
    next: usize,
    /// Batches handed to the encoders.
    sent: u64,
    progress: SharedProgress,
    /// The error that stopped the threads, once returned: later writes are refused with it.
    failed: Option<String>,
}

impl EncodedFile {
    /// Writes to `out` the batches `encoders` encode, one thread each (at least one is needed);
    /// `streaming` flushes `out` after every batch (standard output read as it is written).
    pub(crate) fn open(
        encoders: Vec<EncodeBatch>,
        out: Box<dyn Write + Send>,
        target: Target,
        streaming: bool,
    ) -> Result<Self, SinkError> {
        if encoders.is_empty() {
            return Err(SinkError::Options(format!(
                "{}: a file encoded by no thread; this is a bug in weir",
                target.name()
            )));
        }
        let mut jobs = Vec::with_capacity(encoders.len());
        let mut handles = Vec::with_capacity(encoders.len());
        let mut done = Vec::with_capacity(encoders.len());
        let mut free = Vec::with_capacity(encoders.len());
        for (i, encode) in encoders.into_iter().enumerate() {
            let (job_tx, job_rx) = sync_channel(QUEUE);
            let (done_tx, done_rx) = sync_channel(QUEUE);
            let (free_tx, free_rx) = channel();
            let handle = std::thread::Builder::new()
                .name(format!("weir-encode-{i}"))
                .spawn(move || encode_loop(encode, &job_rx, &done_tx, &free_rx))
                .map_err(|e| io(&target, e))?;
            jobs.push(Some(job_tx));
            handles.push(Some(handle));
            done.push(done_rx);
            free.push(free_tx);
        }
        let name = target.clone();
        let progress = SharedProgress::default();
        let written = Arc::clone(&progress);
        let writer = std::thread::Builder::new()
            .name("weir-write".into())
            .spawn(move || write_loop(out, &done, &free, streaming, &name, &written))
            .map_err(|e| io(&target, e))?;
        Ok(Self {
            target,
            jobs,
            encoders: handles,
            writer: Some(writer),
            next: 0,
            sent: 0,
            progress,
            failed: None,
        })
    }

    /// Stops every thread and returns the first error among them: the writer's (an encoding
    /// error reaches it in the batches' order), else an encoder's panic.
    fn stop(&mut self) -> Result<(), SinkError> {
        // Closed queues end the encoders once they are empty; their ends end the writer.
        for j in &mut self.jobs {
            *j = None;
        }
        let mut first = Ok(());
        for (i, handle) in self.encoders.iter_mut().enumerate() {
            if let Some(Err(_)) = handle.take().map(JoinHandle::join) {
                first = Err(SinkError::Options(format!(
                    "{}: the encoder thread {i} panicked; this is a bug in weir",
                    self.target.name()
                )));
            }
        }
        let written = match self.writer.take().map(JoinHandle::join) {
            Some(Ok(r)) => r,
            Some(Err(_)) => Err(SinkError::Options(format!(
                "{}: the writer thread panicked; this is a bug in weir",
                self.target.name()
            ))),
            None => Ok(()),
        };
        // A panicked encoder also ends the writer early, without an error of its own.
        written.and(first)
    }

    /// An earlier error, which every later write returns.
    fn check(&self) -> Result<(), SinkError> {
        match &self.failed {
            Some(e) => Err(SinkError::Options(format!(
                "{}: not completed after an earlier error: {e}",
                self.target.name()
            ))),
            None => Ok(()),
        }
    }

    /// The threads stopped on `e`: later writes say so too.
    fn fail(&mut self, e: SinkError) -> SinkError {
        self.failed = Some(e.to_string());
        e
    }
}

impl BatchWriter for EncodedFile {
    fn write(&mut self, batch: &RecordBatch) -> Result<(), SinkError> {
        self.check()?;
        let Some(Some(jobs)) = self.jobs.get(self.next) else {
            return Err(finished(&self.target));
        };
        if jobs.send(batch.clone()).is_err() {
            // The encoder stopped, on its own error or the writer's.
            let e = match self.stop() {
                Err(e) => e,
                Ok(()) => SinkError::Options(format!(
                    "{}: an encoder thread stopped; this is a bug in weir",
                    self.target.name()
                )),
            };
            return Err(self.fail(e));
        }
        self.next = (self.next + 1) % self.jobs.len();
        self.sent += 1;
        Ok(())
    }

    fn sync(&mut self) -> Result<(), SinkError> {
        self.check()?;
        if self.writer.is_none() {
            return Ok(());
        }
        let (lock, changed) = &*self.progress;
        let mut p = lock.lock().unwrap_or_else(|e| e.into_inner());
        while p.written < self.sent && !p.ended {
            p = changed.wait(p).unwrap_or_else(|e| e.into_inner());
        }
        let complete = p.written >= self.sent;
        drop(p);
        if complete {
            return Ok(());
        }
        // The writer ended before writing them: on its error, or an encoder's panic.
        let e = match self.stop() {
            Err(e) => e,
            Ok(()) => SinkError::Options(format!(
                "{}: the writer thread ended early; this is a bug in weir",
                self.target.name()
            )),
        };
        Err(self.fail(e))
    }

    /// Writes what is queued and ends the threads. After an error that a write already
    /// returned, the file holds the batches before it and this is `Ok`: the error is reported
    /// once, and the caller goes on to complete its other outputs.
    fn finish(&mut self) -> Result<(), SinkError> {
        if self.failed.is_some() || self.writer.is_none() {
            return Ok(());
        }
        self.stop().map_err(|e| self.fail(e))
    }
}

impl Drop for EncodedFile {
    /// A file dropped unfinished (a failed run) still gets the batches handed to it, as a
    /// buffered writer's drop writes what it holds: the threads end before the drop returns.
    fn drop(&mut self) {
        if self.writer.is_some() {
            let _ = self.stop();
        }
    }
}

/// An encoder thread: batches in, bytes out, in order, into buffers the writer gives back.
/// It ends when its queue is closed, or at its first error (sent on to the writer).
fn encode_loop(
    mut encode: EncodeBatch,
    jobs: &Receiver<RecordBatch>,
    done: &SyncSender<Encoded>,
    free: &Receiver<Vec<u8>>,
) {
    for batch in jobs {
        let mut buf = free.try_recv().unwrap_or_default();
        buf.clear();
        let encoded = encode(&batch, &mut buf).map(|()| buf);
        let failed = encoded.is_err();
        if done.send(encoded).is_err() || failed {
            return;
        }
    }
}

/// The writer thread: takes the encoded batches from the encoders in the turn they were given
/// out, writes them and gives each buffer back for reuse. The turn reaching an encoder whose
/// queue has ended means every batch has been written (batch `n` went to encoder `n % count`).
fn write_loop(
    mut out: Box<dyn Write + Send>,
    done: &[Receiver<Encoded>],
    free: &[Sender<Vec<u8>>],
    streaming: bool,
    target: &Target,
    progress: &SharedProgress,
) -> Result<(), SinkError> {
    let _ended = Ended(progress);
    for (encoded, back) in done.iter().zip(free).cycle() {
        let Ok(encoded) = encoded.recv() else { break };
        let bytes = encoded?;
        out.write_all(&bytes).map_err(|e| io(target, e))?;
        if streaming {
            out.flush().map_err(|e| io(target, e))?;
        }
        let (lock, changed) = &**progress;
        lock.lock().unwrap_or_else(|e| e.into_inner()).written += 1;
        changed.notify_all();
        // The encoder may have ended already; the buffer is then simply dropped.
        let _ = back.send(bytes);
    }
    out.flush().map_err(|e| io(target, e))
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::{Arc, Mutex};

    use arrow::array::{Int64Array, StringArray};
    use arrow::datatypes::{DataType, Field, Schema};

    /// Batch `i` of `n` rows: ids from `start`, and a text column.
    fn batch(start: i64, n: usize) -> RecordBatch {
        let schema = Arc::new(Schema::new(vec![
            Field::new("id", DataType::Int64, false),
            Field::new("t", DataType::Utf8, true),
        ]));
        let ids: Vec<i64> = (start..start + n as i64).collect();
        RecordBatch::try_new(
            schema,
            vec![
                Arc::new(Int64Array::from(ids.clone())),
                Arc::new(StringArray::from_iter(
                    ids.iter().map(|i| (i % 3 != 0).then(|| format!("r{i}"))),
                )),
            ],
        )
        .unwrap()
    }

    /// Uneven batches, so that encoders finish out of turn.
    fn batches() -> Vec<RecordBatch> {
        let mut at = 0;
        (0..60)
            .map(|i| {
                let n = [1, 700, 3, 4000, 0, 57][i % 6];
                let b = batch(at, n);
                at += n as i64;
                b
            })
            .collect()
    }

    /// JSON lines, one encoder each thread.
    fn json(threads: usize, schema: &arrow::datatypes::SchemaRef) -> Vec<EncodeBatch> {
        (0..threads)
            .map(|_| {
                let mut e = weir_codec::JsonEncoder::new(schema.fields()).unwrap();
                Box::new(move |b: &RecordBatch, out: &mut Vec<u8>| {
                    e.encode_lines(b, out).map_err(SinkError::Encode)
                }) as EncodeBatch
            })
            .collect()
    }

    /// A `Write` into shared memory that fails once it holds `limit` bytes.
    #[derive(Clone)]
    struct Shared {
        bytes: Arc<Mutex<Vec<u8>>>,
        limit: usize,
    }

    impl Write for Shared {
        fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
            let mut bytes = self.bytes.lock().unwrap();
            if bytes.len() + buf.len() > self.limit {
                return Err(std::io::Error::other("the disk is full"));
            }
            bytes.extend_from_slice(buf);
            Ok(buf.len())
        }

        fn flush(&mut self) -> std::io::Result<()> {
            Ok(())
        }
    }

    fn shared(limit: usize) -> Shared {
        Shared {
            bytes: Arc::new(Mutex::new(Vec::new())),
            limit,
        }
    }

    /// The JSON lines of `batches`, written on one thread.
    fn lines(batches: &[RecordBatch]) -> Vec<u8> {
        let mut out = Vec::new();
        for b in batches {
            out.extend(super::super::json_lines(b).unwrap());
        }
        out
    }

    fn target() -> Target {
        Target::File("/out/x.jsonl".into())
    }

    #[test]
    fn writes_every_batch_in_order_on_any_number_of_threads() {
        let input = batches();
        let schema = input[0].schema();
        let want = lines(&input);
        for threads in [1, 2, 3, 8] {
            for streaming in [false, true] {
                let out = shared(usize::MAX);
                let mut file = EncodedFile::open(
                    json(threads, &schema),
                    Box::new(out.clone()),
                    target(),
                    streaming,
                )
                .unwrap();
                for b in &input {
                    file.write(b).unwrap();
                }
                file.finish().unwrap();
                let got = out.bytes.lock().unwrap().clone();
                assert!(got == want, "{threads} threads, streaming {streaming}");
                assert!(file.write(&input[0]).is_err(), "a write after finish");
            }
        }
    }

    #[test]
    fn an_encoding_error_ends_the_file_after_the_batches_before_it() {
        let input = batches();
        let schema = input[0].schema();
        for threads in [1, 3] {
            let out = shared(usize::MAX);
            let mut encoders = json(threads, &schema);
            // Every encoder fails on batch 13 (700 rows), known by its first id.
            let ids = |b: &RecordBatch| {
                b.column(0)
                    .as_any()
                    .downcast_ref::<Int64Array>()
                    .unwrap()
                    .clone()
            };
            let bad = ids(&input[13]).value(0);
            assert_eq!(input[13].num_rows(), 700);
            for e in &mut encoders {
                let mut inner = std::mem::replace(e, Box::new(|_, _| Ok(())));
                *e = Box::new(move |b: &RecordBatch, out: &mut Vec<u8>| {
                    let first = ids(b);
                    if !first.is_empty() && first.value(0) == bad {
                        return Err(SinkError::Options(format!("row {bad} cannot be encoded")));
                    }
                    inner(b, out)
                });
            }
            let mut file =
                EncodedFile::open(encoders, Box::new(out.clone()), target(), false).unwrap();
            let mut first_error = None;
            for b in &input {
                if let Err(e) = file.write(b) {
                    first_error = Some(e.to_string());
                    break;
                }
            }
            let finished = file.finish().err().map(|e| e.to_string());
            // Reported once: by the write that met it, else by finish.
            assert!(
                first_error.is_none() || finished.is_none(),
                "{first_error:?} then {finished:?}"
            );
            let message = first_error.or(finished).expect("the error is reported");
            assert!(file.finish().is_ok(), "a second finish");
            assert!(message.contains(&format!("row {bad} ")), "{message}");
            let want = lines(&input[..13]);
            let got = out.bytes.lock().unwrap().clone();
            assert!(
                got == want,
                "{threads} threads: the 13 batches before it, nothing after"
            );
            assert!(file.write(&input[0]).is_err());
        }
    }

    #[test]
    fn sync_waits_for_the_batches_so_far_and_returns_their_error() {
        let input = batches();
        let schema = input[0].schema();
        let out = shared(usize::MAX);
        let mut encoders = json(3, &schema);
        // The encoder of batch 13 fails on it; batches 0..=13 can all be handed out first.
        let bad = 13 % 3;
        let mut inner = std::mem::replace(&mut encoders[bad], Box::new(|_, _| Ok(())));
        let mut seen = 0;
        encoders[bad] = Box::new(move |b: &RecordBatch, buf: &mut Vec<u8>| {
            seen += 1;
            if seen == 5 {
                return Err(SinkError::Options("batch 13 cannot be encoded".into()));
            }
            inner(b, buf)
        });
        let mut file = EncodedFile::open(encoders, Box::new(out.clone()), target(), false).unwrap();
        for b in &input[..10] {
            file.write(b).unwrap();
        }
        file.sync().unwrap();
        assert!(
            *out.bytes.lock().unwrap() == lines(&input[..10]),
            "every batch so far is written"
        );
        for b in &input[10..14] {
            file.write(b).unwrap();
        }
        let e = file.sync().unwrap_err().to_string();
        assert!(e.contains("batch 13 cannot be encoded"), "{e}");
        assert!(
            *out.bytes.lock().unwrap() == lines(&input[..13]),
            "the batches before it"
        );
        assert!(file.write(&input[14]).is_err());
        assert!(file.finish().is_ok(), "reported once");
    }

    #[test]
    fn a_write_error_names_the_file() {
        let input = batches();
        let schema = input[0].schema();
        let mut file =
            EncodedFile::open(json(2, &schema), Box::new(shared(100_000)), target(), false)
                .unwrap();
        let mut errors = Vec::new();
        for b in &input {
            if let Err(e) = file.write(b) {
                errors.push(e.to_string());
                break;
            }
        }
        if let Err(e) = file.finish() {
            errors.push(e.to_string());
        }
        assert_eq!(errors.len(), 1, "reported once: {errors:?}");
        let first = &errors[0];
        assert!(
            first.contains("/out/x.jsonl") && first.contains("the disk is full"),
            "{first}"
        );
    }

    #[test]
    fn a_file_dropped_unfinished_holds_every_batch_handed_to_it() {
        let input = batches();
        let schema = input[0].schema();
        let want = lines(&input);
        let out = shared(usize::MAX);
        let mut file =
            EncodedFile::open(json(3, &schema), Box::new(out.clone()), target(), false).unwrap();
        for b in &input {
            file.write(b).unwrap();
        }
        drop(file);
        let got = out.bytes.lock().unwrap().clone();
        assert!(got == want, "{} of {} bytes", got.len(), want.len());
    }

    #[test]
    fn a_panicking_encoder_is_an_error() {
        let input = batches();
        let encoders: Vec<EncodeBatch> = vec![
            Box::new(|_, out: &mut Vec<u8>| {
                out.push(b'a');
                Ok(())
            }),
            Box::new(|_, _| panic!("an encoder's bug")),
        ];
        let mut file =
            EncodedFile::open(encoders, Box::new(shared(usize::MAX)), target(), false).unwrap();
        let mut result = Ok(());
        for b in &input {
            result = file.write(b);
            if result.is_err() {
                break;
            }
        }
        let e = result.and_then(|()| file.finish()).unwrap_err().to_string();
        assert!(e.contains("panicked"), "{e}");
    }
}
