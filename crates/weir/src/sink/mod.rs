//! Sinks: where query results go. `parquet` and `ipc` write files, `file` writes one encoded
//! message per row, `stdout` prints JSON lines or a table, `delta` commits to a Delta Lake table
//! on the local disk or object storage. The same writers serve `weir run --output` and
//! `weir decode --output`. Each connector declares its options here.

pub(crate) mod delta;
mod encoded_file;
mod json;
pub(crate) mod kafka;
pub(crate) mod kafka_dead_letters;
pub(crate) mod kafka_steps;
mod options;
mod parquet_file;
pub(crate) mod storage;

pub(crate) use self::delta::DELTA_OPTIONS;
pub(crate) use self::json::json_lines;
pub(crate) use self::kafka::KAFKA_SINK_OPTIONS;
pub(crate) use self::options::{
    encoder_threads, SinkSettings, FILE_SINK_OPTIONS, IPC_OPTIONS, PARQUET_OPTIONS,
    SINK_CONNECTOR_OPTIONS, STDOUT_OPTIONS,
};
pub(crate) use self::storage::STORAGE_OPTIONS;

use self::encoded_file::{EncodeBatch, EncodedFile};

use std::fs::File;
use std::io::{BufWriter, Write};
use std::path::{Path, PathBuf};
use std::str::FromStr;

use arrow::datatypes::SchemaRef;
use arrow::ipc::writer::{FileWriter, StreamWriter};
use arrow::record_batch::RecordBatch;
use weir_codec::Framing;
use weir_codec::{CodecError, Encoder, OptionError, Options};

/// A sink could not be opened or written.
#[derive(Debug, thiserror::Error)]
pub enum SinkError {
    /// A file could not be created or written.
    #[error("cannot write {path}: {source}")]
    Io {
        /// The file ("stdout" for standard output).
        path: String,
        /// The cause.
        #[source]
        source: std::io::Error,
    },
    /// Arrow's writer (IPC, JSON, table) failed.
    #[error("cannot write {path}: {source}")]
    Arrow {
        /// The file.
        path: String,
        /// The cause.
        #[source]
        source: arrow::error::ArrowError,
    },
    /// The Parquet writer failed.
    #[error("cannot write {path}: {source}")]
    Parquet {
        /// The file.
        path: String,
        /// The cause.
        #[source]
        source: parquet::errors::ParquetError,
    },
    /// An option is missing or wrong.
    #[error(transparent)]
    Option(#[from] OptionError),
    /// The sink cannot do what was asked.
    #[error("{0}")]
    Options(String),
    /// A second query wrote rows of another shape into the same sink.
    #[error("the rows have columns ({found}) but this sink was opened with ({expected})")]
    SchemaChanged {
        /// The first schema's columns.
        expected: String,
        /// The new one's.
        found: String,
    },
    /// The encoder of a `file` sink failed.
    #[error("cannot encode the rows: {0}")]
    Encode(#[source] CodecError),
    /// Object storage (or the local directory standing for it) cannot be opened or listed.
    #[error("cannot use {path}: {reason}")]
    Storage {
        /// The path or URL.
        path: String,
        /// Why.
        reason: String,
    },
    /// The Kafka producer failed (the brokers, the topic, a record).
    #[error("sink {sink}: {source}")]
    Kafka {
        /// The sink.
        sink: String,
        /// The cause.
        #[source]
        source: weir_kafka::Error,
    },
    /// delta-rs failed to read, create or commit to a table.
    #[error("sink {sink}: Delta table {table}: {source}")]
    Delta {
        /// The sink.
        sink: String,
        /// The table's URL.
        table: String,
        /// The cause.
        #[source]
        source: Box<deltalake_core::DeltaTableError>,
    },
    /// Another writer with the same app id moved the table on: this one must not add rows.
    #[error(
        "sink {sink}: Delta table {table} already holds step {table_step} of writer '{app_id}', \
         so step {step} from this process would be a second copy; another weir with the same \
         'app.id' is writing, or this one's state is older than the table. Stop the other \
         writer, or give this sink another 'app.id' or table"
    )]
    Fenced {
        /// The sink.
        sink: String,
        /// The table's URL.
        table: String,
        /// The writer's app id.
        app_id: String,
        /// The step the table holds.
        table_step: u64,
        /// The step this writer was committing.
        step: u64,
    },
    /// The transaction of the state's last step was aborted by its coordinator: the step's
    /// rows are not in the topic, and the state has moved past them.
    #[error(
        "sink {sink}: the transaction of step {step} ('transactional.id' = '{transactional_id}') \
         was aborted by its coordinator: weir stopped between the step's state commit and its \
         transaction's commit, and started again after the transaction's timeout \
         ({timeout_ms} ms) had passed. The step's rows are not in topic '{topic}', and the \
         state has moved past them. Set 'on.transaction.timeout' = 'continue' to go on without \
         them, or recreate the topic (or use a new one) and start from a new state directory; \
         start weir within 'transaction.timeout.ms' (or raise it) to keep this from happening"
    )]
    TransactionLost {
        /// The sink.
        sink: String,
        /// The step whose transaction was aborted.
        step: u64,
        /// The sink's transactional id.
        transactional_id: String,
        /// The topic.
        topic: String,
        /// The timeout the aborted transaction ran under, as its coordinator knows it.
        timeout_ms: i32,
    },
    /// A member of a consumer group lost a partition before its step reached the table.
    #[error(transparent)]
    PartitionFenced(Box<PartitionFenced>),
    /// A message cannot be framed.
    #[error("cannot write {path}: {source}")]
    Frame {
        /// The file.
        path: String,
        /// The cause.
        #[source]
        source: weir_codec::FrameError,
    },
}

/// A member of a consumer group lost a partition before its step reached the table: the
/// partition's new owner has committed since this member took it up.
#[derive(Debug, thiserror::Error)]
#[error(
    "sink {sink}: Delta table {table}: partition {partition} of writer '{app_id}' is at \
     {found:?} in the table, not at {expected:?} where this process took it up: another \
     member of the group owns it now, so this process's open step is dropped (its rows are \
     the new owner's to write)"
)]
pub struct PartitionFenced {
    /// The sink.
    pub sink: String,
    /// The table's URL.
    pub table: String,
    /// The writer's app id.
    pub app_id: String,
    /// The partition's position name (`kafka/<topic>/<id>`).
    pub partition: String,
    /// Its `txn` version when this process took it up (none: never committed).
    pub expected: Option<i64>,
    /// Its `txn` version now.
    pub found: Option<i64>,
}

impl SinkError {
    /// An I/O failure on `path`.
    pub(crate) fn io(path: &Path, source: std::io::Error) -> Self {
        Self::Io {
            path: path.display().to_string(),
            source,
        }
    }
}

/// A sink an exactly-once pipeline writes in steps: each step's output is made durable, then
/// the state commit records it with the positions, then (for a table) the step is published.
pub(crate) trait StepSink: Send {
    /// The sink's name.
    fn name(&self) -> &str;

    /// The sink's counters.
    fn metrics(&self) -> &crate::metrics::SinkMetrics;

    /// Appends `batch` to step `step`'s output.
    fn write(&mut self, step: u64, batch: &RecordBatch) -> Result<(), SinkError>;

    /// Makes step `step`'s output durable; returns what the state commit records of it.
    fn seal(&mut self, step: u64) -> Result<Vec<String>, SinkError>;

    /// True when a step must be published once its state commit is durable.
    fn publishes(&self) -> bool {
        false
    }

    /// Publishes the step `checkpoint` records, once that commit is durable.
    fn publish(&mut self, _checkpoint: &weir_dedup::Checkpoint) -> Result<(), SinkError> {
        Ok(())
    }
}

/// A [`StepSink`] fed by a member of a consumer group, which keeps the positions of the
/// partitions the member reads and fences a member the group has moved past.
pub(crate) trait GroupSink: StepSink {
    /// The positions (by name, `kafka/<topic>/<partition>`) at which this member takes up
    /// `partitions`, as the sink's record holds them; a partition without one is left out (it
    /// starts as the source's startup mode says).
    fn take_partitions(
        &mut self,
        group_id: &str,
        partitions: &[String],
    ) -> Result<Vec<(String, i64)>, SinkError>;

    /// Publishes the step `checkpoint` records, its source's next `offsets` stamped with
    /// `member` (the group as the member knows it now).
    fn publish_as(
        &mut self,
        checkpoint: &weir_dedup::Checkpoint,
        offsets: Vec<(weir_kafka::TopicPartition, i64)>,
        member: &weir_kafka::GroupMetadata,
    ) -> Result<(), SinkError>;

    /// True when [`GroupSink::publish_as`] commits the offsets to the group itself.
    fn commits_group_offsets(&self) -> bool {
        false
    }

    /// Drops the open step: it was fenced.
    fn discard(&mut self) -> Result<(), SinkError>;

    /// True when `e` says this member's step was fenced (another member owns one of its
    /// partitions now), which the member survives by dropping the step.
    fn is_fenced(&self, e: &SinkError) -> bool;
}

/// How a sink writes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SinkFormat {
    /// Apache Parquet.
    Parquet,
    /// Arrow IPC file format (`.arrow`).
    IpcFile,
    /// Arrow IPC stream format.
    IpcStream,
    /// One JSON object per row.
    JsonLines,
    /// A text table.
    Table,
}

impl SinkFormat {
    /// The format a file name suggests: `.parquet`, `.arrow`/`.ipc`/`.feather`, `.arrows`,
    /// `.jsonl`/`.json`/`.ndjson`; anything else is an error.
    pub fn from_path(path: &Path) -> Result<Self, SinkError> {
        let ext = path
            .extension()
            .map(|e| e.to_string_lossy().to_ascii_lowercase())
            .unwrap_or_default();
        match ext.as_str() {
            "parquet" => Ok(Self::Parquet),
            "arrow" | "ipc" | "feather" => Ok(Self::IpcFile),
            "arrows" => Ok(Self::IpcStream),
            "jsonl" | "json" | "ndjson" => Ok(Self::JsonLines),
            "txt" => Ok(Self::Table),
            _ => Err(SinkError::Options(format!(
                "cannot tell the format of {} from its extension: use .parquet, .arrow, .arrows, .jsonl or .txt",
                path.display()
            ))),
        }
    }
}

impl FromStr for SinkFormat {
    type Err = SinkError;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        match s.to_ascii_lowercase().as_str() {
            "parquet" => Ok(Self::Parquet),
            "ipc" | "arrow" => Ok(Self::IpcFile),
            "ipc_stream" | "arrows" => Ok(Self::IpcStream),
            "jsonl" | "json" => Ok(Self::JsonLines),
            "table" => Ok(Self::Table),
            _ => Err(SinkError::Options(format!(
                "unknown format '{s}': expected parquet, ipc, ipc_stream, jsonl or table"
            ))),
        }
    }
}

/// Writes batches somewhere; [`BatchWriter::finish`] must be called to complete the output.
pub trait BatchWriter: Send {
    /// Writes one batch.
    fn write(&mut self, batch: &RecordBatch) -> Result<(), SinkError>;
    /// How long the writer may hold rows it has not sent when no more come, if it holds any
    /// (a kafka sink's `linger.ms`): [`BatchWriter::idle`] is called after that long without
    /// rows.
    fn linger(&self) -> Option<std::time::Duration> {
        None
    }
    /// No rows came for [`BatchWriter::linger`]: send what is held.
    fn idle(&mut self) -> Result<(), SinkError> {
        Ok(())
    }
    /// Waits until the batches written so far are encoded and handed to the output, and
    /// returns the error one of them met: called when a statement's rows end, so that its
    /// errors are its own. A writer that encodes on the calling thread has nothing to wait for.
    fn sync(&mut self) -> Result<(), SinkError> {
        Ok(())
    }
    /// Completes the output (file footers, a buffered table).
    fn finish(&mut self) -> Result<(), SinkError>;
}

/// Where a writer's bytes go.
#[derive(Debug, Clone)]
pub enum Target {
    /// A file, created (or truncated).
    File(PathBuf),
    /// Standard output.
    Stdout,
}

impl Target {
    fn name(&self) -> String {
        match self {
            Self::File(p) => p.display().to_string(),
            Self::Stdout => "stdout".into(),
        }
    }

    fn open(&self) -> Result<Box<dyn Write + Send>, SinkError> {
        match self {
            Self::File(p) => {
                if let Some(dir) = p.parent().filter(|d| !d.as_os_str().is_empty()) {
                    std::fs::create_dir_all(dir).map_err(|e| io(self, e))?;
                }
                let f = File::create(p).map_err(|e| io(self, e))?;
                Ok(Box::new(BufWriter::with_capacity(1 << 20, f)))
            }
            Self::Stdout => Ok(Box::new(std::io::stdout())),
        }
    }
}

fn io(target: &Target, source: std::io::Error) -> SinkError {
    SinkError::Io {
        path: target.name(),
        source,
    }
}

fn arrow_err(target: &Target, source: arrow::error::ArrowError) -> SinkError {
    SinkError::Arrow {
        path: target.name(),
        source,
    }
}

fn parquet_err(target: &Target, source: parquet::errors::ParquetError) -> SinkError {
    SinkError::Parquet {
        path: target.name(),
        source,
    }
}

fn finished(target: &Target) -> SinkError {
    SinkError::Options(format!(
        "{} was written after it was completed; this is a bug in weir",
        target.name()
    ))
}

/// Opens a writer of `format` for rows of `schema`. Parquet reads `'compression'` and
/// `'row_group_size'`, Parquet and JSON lines `'sink.parallelism'` (see [`options`]).
pub(crate) fn open_writer(
    format: SinkFormat,
    target: Target,
    schema: &SchemaRef,
    options: &Options,
    streaming: bool,
) -> Result<Box<dyn BatchWriter>, SinkError> {
    Ok(match format {
        SinkFormat::Parquet => Box::new(parquet_file::ParquetSink::open(
            target,
            schema,
            options::parquet_properties(options)?,
            encoder_threads(options)?,
        )?),
        SinkFormat::IpcFile => {
            let out = target.open()?;
            Box::new(IpcFileSink {
                writer: Some(FileWriter::try_new(out, schema).map_err(|e| arrow_err(&target, e))?),
                target,
            })
        }
        SinkFormat::IpcStream => {
            let out = target.open()?;
            Box::new(IpcStreamSink {
                writer: Some(
                    StreamWriter::try_new(out, schema).map_err(|e| arrow_err(&target, e))?,
                ),
                target,
            })
        }
        SinkFormat::JsonLines => {
            let encoders = (0..encoder_threads(options)?)
                .map(|_| json::lines_encoder(schema))
                .collect::<Result<Vec<_>, _>>()?;
            let out = target.open()?;
            Box::new(EncodedFile::open(encoders, out, target, streaming)?)
        }
        SinkFormat::Table => Box::new(TableSink {
            out: target.open()?,
            batches: Vec::new(),
            schema: schema.clone(),
            streaming,
            target,
        }),
    })
}

struct IpcFileSink {
    writer: Option<FileWriter<Box<dyn Write + Send>>>,
    target: Target,
}

impl BatchWriter for IpcFileSink {
    fn write(&mut self, batch: &RecordBatch) -> Result<(), SinkError> {
        match &mut self.writer {
            Some(w) => w.write(batch).map_err(|e| arrow_err(&self.target, e)),
            None => Err(finished(&self.target)),
        }
    }

    fn finish(&mut self) -> Result<(), SinkError> {
        if let Some(mut w) = self.writer.take() {
            w.finish().map_err(|e| arrow_err(&self.target, e))?;
            w.get_mut().flush().map_err(|e| io(&self.target, e))?;
        }
        Ok(())
    }
}

struct IpcStreamSink {
    writer: Option<StreamWriter<Box<dyn Write + Send>>>,
    target: Target,
}

impl BatchWriter for IpcStreamSink {
    fn write(&mut self, batch: &RecordBatch) -> Result<(), SinkError> {
        match &mut self.writer {
            Some(w) => {
                w.write(batch).map_err(|e| arrow_err(&self.target, e))?;
                // A stream is read while it is written: make each batch visible.
                w.get_mut().flush().map_err(|e| io(&self.target, e))
            }
            None => Err(finished(&self.target)),
        }
    }

    fn finish(&mut self) -> Result<(), SinkError> {
        if let Some(mut w) = self.writer.take() {
            w.finish().map_err(|e| arrow_err(&self.target, e))?;
            w.get_mut().flush().map_err(|e| io(&self.target, e))?;
        }
        Ok(())
    }
}

struct TableSink {
    out: Box<dyn Write + Send>,
    batches: Vec<RecordBatch>,
    schema: SchemaRef,
    streaming: bool,
    target: Target,
}

impl TableSink {
    fn print(&mut self) -> Result<(), SinkError> {
        let batches = std::mem::take(&mut self.batches);
        let text = if batches.is_empty() {
            arrow::util::pretty::pretty_format_batches_with_schema(self.schema.clone(), &[])
                .map(|t| t.to_string())
        } else {
            arrow::util::pretty::pretty_format_batches(&batches).map(|t| t.to_string())
        }
        .map_err(|e| arrow_err(&self.target, e))?;
        writeln!(self.out, "{text}").map_err(|e| io(&self.target, e))?;
        self.out.flush().map_err(|e| io(&self.target, e))
    }
}

impl BatchWriter for TableSink {
    fn write(&mut self, batch: &RecordBatch) -> Result<(), SinkError> {
        self.batches.push(batch.clone());
        if self.streaming {
            self.print()?;
        }
        Ok(())
    }

    fn finish(&mut self) -> Result<(), SinkError> {
        if !self.streaming || !self.batches.is_empty() {
            self.print()?;
        }
        Ok(())
    }
}

/// Opens `target` for rows written as framed messages, one a row (the `file` sink), each of
/// `encoders` encoding a share of the batches on a thread of its own.
pub(crate) fn open_message_file(
    encoders: Vec<Box<dyn Encoder>>,
    framing: Framing,
    target: Target,
) -> Result<Box<dyn BatchWriter>, SinkError> {
    let encoders = encoders
        .into_iter()
        .map(|encoder| framed_encoder(encoder, framing, target.name()))
        .collect();
    let out = target.open()?;
    Ok(Box::new(EncodedFile::open(encoders, out, target, false)?))
}

/// One thread's encoder of a batch's rows as framed messages.
fn framed_encoder(mut encoder: Box<dyn Encoder>, framing: Framing, path: String) -> EncodeBatch {
    let mut messages = Vec::new();
    let mut ends = Vec::new();
    Box::new(move |batch: &RecordBatch, framed: &mut Vec<u8>| {
        messages.clear();
        ends.clear();
        encoder
            .encode_batch(batch, &mut messages, &mut ends)
            .map_err(SinkError::Encode)?;
        let mut start = 0;
        for &end in &ends {
            framing
                .write(framed, &messages[start..end])
                .map_err(|source| SinkError::Frame {
                    path: path.clone(),
                    source,
                })?;
            start = end;
        }
        Ok(())
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use arrow::array::{Int64Array, StringArray};
    use arrow::datatypes::{DataType, Field, Schema};
    use std::sync::Arc;

    fn batch() -> RecordBatch {
        let schema = Arc::new(Schema::new(vec![
            Field::new("t", DataType::Utf8, false),
            Field::new("n", DataType::Int64, true),
        ]));
        RecordBatch::try_new(
            schema,
            vec![
                Arc::new(StringArray::from(vec!["a", "b"])),
                Arc::new(Int64Array::from(vec![Some(1), None])),
            ],
        )
        .unwrap()
    }

    #[test]
    fn parquet_and_ipc_round_trip() {
        let dir = tempfile::tempdir().unwrap();
        let b = batch();
        for (name, format) in [
            ("x.parquet", SinkFormat::Parquet),
            ("x.arrow", SinkFormat::IpcFile),
        ] {
            let path = dir.path().join(name);
            assert_eq!(SinkFormat::from_path(&path).unwrap(), format);
            let mut w = open_writer(
                format,
                Target::File(path.clone()),
                &b.schema(),
                &Options::default(),
                false,
            )
            .unwrap();
            w.write(&b).unwrap();
            w.write(&b).unwrap();
            w.finish().unwrap();
            let rows: usize = match format {
                SinkFormat::Parquet => {
                    parquet::arrow::arrow_reader::ParquetRecordBatchReaderBuilder::try_new(
                        File::open(&path).unwrap(),
                    )
                    .unwrap()
                    .build()
                    .unwrap()
                    .map(|b| b.unwrap().num_rows())
                    .sum()
                }
                _ => arrow::ipc::reader::FileReader::try_new(File::open(&path).unwrap(), None)
                    .unwrap()
                    .map(|b| b.unwrap().num_rows())
                    .sum(),
            };
            assert_eq!(rows, 4, "{name}");
        }
        assert!(SinkFormat::from_path(Path::new("x.csv")).is_err());
        let bad = Options::new([("compression".to_string(), "lzma".to_string())]);
        let e = open_writer(
            SinkFormat::Parquet,
            Target::File(dir.path().join("y.parquet")),
            &b.schema(),
            &bad,
            false,
        )
        .err()
        .unwrap();
        assert!(e.to_string().contains("lzma"), "{e}");
    }
}
