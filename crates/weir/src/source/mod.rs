//! Sources: a connector hands out message slices with their positions, and the scan of each
//! partition decodes them with the source's encoding, applies the error policy and adds the
//! metadata columns.
//!
//! A source is a DataFusion table. Each scan reads it from the start (a bounded read, unless the
//! engine follows), decodes only the columns the query uses (projection goes into the decoder),
//! and runs one decoder per partition on DataFusion's threads.

pub mod file;
pub mod framing;
pub mod kafka;
pub mod state;

use std::fmt;
use std::fs::File;
use std::io::{BufWriter, Write};
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use arrow::array::builder::{MapBuilder, MapFieldNames};
use arrow::array::{
    ArrayRef, BinaryBuilder, Int32Builder, Int64Builder, RecordBatch, RecordBatchOptions,
    StringBuilder, TimestampMillisecondBuilder,
};
use arrow::datatypes::{DataType, Field, Schema, SchemaRef, TimeUnit};
use async_trait::async_trait;
use base64::Engine as _;
use datafusion::catalog::Session;
use datafusion::datasource::{TableProvider, TableType};
use datafusion::error::{DataFusionError, Result as DfResult};
use datafusion::execution::{SendableRecordBatchStream, TaskContext};
use datafusion::logical_expr::Expr;
use datafusion::physical_plan::stream::RecordBatchStreamAdapter;
use datafusion::physical_plan::streaming::{PartitionStream, StreamingTableExec};
use datafusion::physical_plan::ExecutionPlan;
use weir_codec::{strip_confluent, ColumnSpec, Decoder, DecoderFactory, DecoderRequest, Options};

use self::file::{BlockStatus, FileFeed};
use self::framing::{Frame, Framing};

/// What to do with a message that cannot be decoded.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum OnError {
    /// Stop the query with an error naming the message's position.
    Fail,
    /// Count it and go on.
    Skip,
    /// Append it, the error and its position to a JSON-lines file, count it and go on.
    DeadLetter,
}

impl std::str::FromStr for OnError {
    type Err = String;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        match s.to_ascii_lowercase().as_str() {
            "fail" => Ok(Self::Fail),
            "skip" => Ok(Self::Skip),
            "dead_letter" => Ok(Self::DeadLetter),
            _ => Err(format!(
                "unknown 'on.error' = '{s}': expected 'fail', 'skip' or 'dead_letter'"
            )),
        }
    }
}

/// Counters of one source over all its scans (updated once per batch, not per message).
#[derive(Debug, Default)]
pub struct SourceStats {
    /// Messages read (good and bad).
    pub messages: AtomicU64,
    /// Message bytes read (without framing).
    pub bytes: AtomicU64,
    /// Messages decoded into rows.
    pub decoded: AtomicU64,
    /// Bad messages skipped.
    pub skipped: AtomicU64,
    /// Bad messages written to the dead-letter file.
    pub dead_lettered: AtomicU64,
}

/// A metadata column (`INCLUDE <kind> [AS <name>]`, as RisingWave spells it).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum MetaKind {
    /// The file a message came from (Utf8).
    File,
    /// The message's byte offset in its file, or its Kafka offset (Int64).
    Offset,
    /// The Kafka topic (Utf8).
    Topic,
    /// The Kafka partition (Int32).
    Partition,
    /// The Kafka record timestamp (Timestamp(ms, UTC)).
    Timestamp,
    /// The Kafka record key (Binary, null when the key is null).
    Key,
    /// The Kafka record headers (Map of Utf8 key to Binary value, in record order).
    Headers,
}

impl MetaKind {
    /// Parses an `INCLUDE` kind for a connector.
    pub fn parse(kind: &str, connector: &str) -> Result<Self, String> {
        match (kind, connector) {
            ("file", "file") => Ok(Self::File),
            ("offset", _) => Ok(Self::Offset),
            ("topic", "kafka") => Ok(Self::Topic),
            ("partition", "kafka") => Ok(Self::Partition),
            ("timestamp", "kafka") => Ok(Self::Timestamp),
            ("key", "kafka") => Ok(Self::Key),
            ("headers", "kafka") => Ok(Self::Headers),
            _ => Err(format!(
                "INCLUDE {kind} is not available for the '{connector}' connector (it offers: {})",
                if connector == "kafka" {
                    "topic, partition, offset, timestamp, key, headers"
                } else {
                    "file, offset"
                }
            )),
        }
    }

    /// The column name when no `AS` is given.
    pub fn default_name(self) -> &'static str {
        match self {
            Self::File => "_weir_file",
            Self::Offset => "_weir_offset",
            Self::Topic => "_weir_topic",
            Self::Partition => "_weir_partition",
            Self::Timestamp => "_weir_timestamp",
            Self::Key => "_weir_key",
            Self::Headers => "_weir_headers",
        }
    }

    /// The Arrow type of the column.
    pub fn data_type(self) -> DataType {
        match self {
            Self::File | Self::Topic => DataType::Utf8,
            Self::Offset => DataType::Int64,
            Self::Partition => DataType::Int32,
            Self::Timestamp => DataType::Timestamp(TimeUnit::Millisecond, Some("UTC".into())),
            Self::Key => DataType::Binary,
            // Exactly the type the builder produces.
            Self::Headers => arrow::array::Array::data_type(&headers_builder().finish()).clone(),
        }
    }

    /// Whether the column can be null (only the key).
    pub fn nullable(self) -> bool {
        self == Self::Key
    }
}

type HeadersBuilder = MapBuilder<StringBuilder, BinaryBuilder>;

fn headers_builder() -> HeadersBuilder {
    let names = MapFieldNames {
        entry: "entries".into(),
        key: "key".into(),
        value: "value".into(),
    };
    MapBuilder::new(Some(names), StringBuilder::new(), BinaryBuilder::new())
}

/// Where a message came from.
#[derive(Debug, Clone, Copy)]
pub enum Position<'a> {
    /// A message of the file connector.
    File {
        /// The file.
        file: &'a str,
        /// The byte offset of the message's frame in its file.
        offset: i64,
    },
    /// A Kafka record.
    Kafka {
        /// The topic.
        topic: &'a str,
        /// The partition.
        partition: i32,
        /// The record's offset.
        offset: i64,
        /// Milliseconds since the epoch.
        timestamp: i64,
        /// The key, if not null.
        key: Option<&'a [u8]>,
        /// The headers.
        headers: weir_kafka::Headers<'a>,
    },
}

impl fmt::Display for Position<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::File { file, offset } => write!(f, "file {file} at byte {offset}"),
            Self::Kafka {
                topic,
                partition,
                offset,
                ..
            } => write!(f, "topic {topic} partition {partition} offset {offset}"),
        }
    }
}

/// Appends the rejected messages of a source to a JSON-lines file.
#[derive(Debug)]
pub struct DeadLetterFile {
    path: PathBuf,
    out: Mutex<BufWriter<File>>,
}

impl DeadLetterFile {
    /// Opens (appending) or creates `path`.
    pub fn open(path: PathBuf) -> std::io::Result<Self> {
        let f = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(&path)?;
        Ok(Self {
            path,
            out: Mutex::new(BufWriter::new(f)),
        })
    }

    /// The file's path.
    pub fn path(&self) -> &std::path::Path {
        &self.path
    }

    fn write(
        &self,
        source: &str,
        pos: &Position<'_>,
        error: &str,
        message: &[u8],
    ) -> std::io::Result<()> {
        let b64 = |b: &[u8]| base64::engine::general_purpose::STANDARD.encode(b);
        let line = match *pos {
            Position::File { file, offset } => serde_json::json!({
                "source": source,
                "file": file,
                "offset": offset,
                "error": error,
                "message_base64": b64(message),
            }),
            Position::Kafka {
                topic,
                partition,
                offset,
                timestamp,
                key,
                ..
            } => serde_json::json!({
                "source": source,
                "topic": topic,
                "partition": partition,
                "offset": offset,
                "timestamp": timestamp,
                "key_base64": key.map(b64),
                "error": error,
                "message_base64": b64(message),
            }),
        };
        let mut out = self.out.lock().unwrap_or_else(|e| e.into_inner());
        serde_json::to_writer(&mut *out, &line)?;
        out.write_all(b"\n")?;
        // Dead letters are rare and must survive a crash of the run that wrote them.
        out.flush()
    }
}

/// The connector of a source.
#[derive(Debug, Clone)]
pub enum Connector {
    /// A Kafka topic: the consumer settings of every scan (bounded unless following).
    Kafka(weir_kafka::ConsumerConfig),
    /// Files on disk.
    File {
        /// A file, a directory or a glob.
        path: String,
        /// How messages are delimited.
        framing: Framing,
        /// Largest frame accepted.
        max_message_bytes: u64,
    },
}

impl Connector {
    /// The connector's name as SQL spells it.
    pub fn name(&self) -> &'static str {
        match self {
            Self::File { .. } => "file",
            Self::Kafka(_) => "kafka",
        }
    }
}

/// Everything a scan of a source needs, fixed at `CREATE SOURCE`.
pub struct SourceConfig {
    /// The source's name.
    pub name: String,
    /// Where messages come from.
    pub connector: Connector,
    /// The encoding's name (for messages).
    pub encoding: String,
    /// Builds the decoders.
    pub factory: Arc<dyn DecoderFactory>,
    /// The `WITH` options, for the factory.
    pub options: Options,
    /// Every decoded column, in table order.
    pub columns: Vec<ColumnSpec>,
    /// Metadata columns, after the decoded ones.
    pub includes: Vec<(MetaKind, String)>,
    /// The table schema.
    pub schema: SchemaRef,
    /// Bad-message policy.
    pub on_error: OnError,
    /// Where dead letters go.
    pub dead_letter: Option<Arc<DeadLetterFile>>,
    /// `Some(message_indexes)` when the Confluent framing must be stripped.
    pub confluent: Option<bool>,
    /// Rows per batch.
    pub batch_size: usize,
    /// Keep reading at the end of the data.
    pub follow: bool,
    /// Set when a follow-mode run is asked to stop: the source ends at its next wait.
    pub stop: Arc<AtomicBool>,
    /// Counters.
    pub stats: Arc<SourceStats>,
    /// Dedup and checkpoints (`'state.dir'`), if set.
    pub state: Option<state::StateSpec>,
}

impl fmt::Debug for SourceConfig {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("SourceConfig")
            .field("name", &self.name)
            .field("connector", &self.connector)
            .field("encoding", &self.encoding)
            .finish()
    }
}

/// A problem while reading a source, with the source's name and the message's position.
#[derive(Debug, thiserror::Error)]
pub enum SourceError {
    /// A message could not be decoded and `'on.error'` is `fail`.
    #[error("source {source_name}: cannot decode the message at {position}: {error}; set 'on.error' = 'skip' or 'dead_letter' to go past bad messages")]
    BadMessage {
        /// The source.
        source_name: String,
        /// Where the message is.
        position: String,
        /// What is wrong with it.
        error: String,
    },
    /// The dead-letter file could not be written.
    #[error("source {source_name}: cannot write the dead-letter file {path}: {error}")]
    DeadLetter {
        /// The source.
        source_name: String,
        /// The file.
        path: String,
        /// The cause.
        error: std::io::Error,
    },
    /// The connector failed.
    #[error("source {source_name}: {error}")]
    Connector {
        /// The source.
        source_name: String,
        /// The cause.
        error: String,
    },
}

pub(crate) fn external(e: SourceError) -> DataFusionError {
    DataFusionError::External(Box::new(e))
}

/// Which value goes into each output column.
#[derive(Debug, Clone, Copy)]
enum Slot {
    Decoded(usize),
    Meta(usize),
}

enum MetaColumn {
    File(StringBuilder),
    Offset(Int64Builder),
    Topic(StringBuilder),
    Partition(Int32Builder),
    Timestamp(TimestampMillisecondBuilder),
    Key(BinaryBuilder),
    // Boxed: a map builder is several times the size of the others.
    Headers(Box<HeadersBuilder>),
}

impl MetaColumn {
    fn new(kind: MetaKind) -> Self {
        match kind {
            MetaKind::File => Self::File(StringBuilder::new()),
            MetaKind::Offset => Self::Offset(Int64Builder::new()),
            MetaKind::Topic => Self::Topic(StringBuilder::new()),
            MetaKind::Partition => Self::Partition(Int32Builder::new()),
            MetaKind::Timestamp => {
                Self::Timestamp(TimestampMillisecondBuilder::new().with_timezone("UTC"))
            }
            MetaKind::Key => Self::Key(BinaryBuilder::new()),
            MetaKind::Headers => Self::Headers(Box::new(headers_builder())),
        }
    }

    #[inline]
    fn append(&mut self, pos: &Position<'_>) {
        let (file, topic, partition, offset, timestamp, key, headers) = match *pos {
            Position::File { file, offset } => (file, "", 0, offset, 0, None, None),
            Position::Kafka {
                topic,
                partition,
                offset,
                timestamp,
                key,
                headers,
            } => ("", topic, partition, offset, timestamp, key, Some(headers)),
        };
        match self {
            Self::File(b) => b.append_value(file),
            Self::Offset(b) => b.append_value(offset),
            Self::Topic(b) => b.append_value(topic),
            Self::Partition(b) => b.append_value(partition),
            Self::Timestamp(b) => b.append_value(timestamp),
            Self::Key(b) => b.append_option(key),
            Self::Headers(b) => {
                for (k, v) in headers.into_iter().flatten() {
                    b.keys().append_value(String::from_utf8_lossy(k));
                    b.values().append_option(v);
                }
                // Appending a map entry cannot fail here: keys and values were appended in
                // pairs above.
                let _ = b.append(true);
            }
        }
    }

    fn finish(&mut self) -> ArrayRef {
        match self {
            Self::File(b) | Self::Topic(b) => Arc::new(b.finish()),
            Self::Offset(b) => Arc::new(b.finish()),
            Self::Partition(b) => Arc::new(b.finish()),
            Self::Timestamp(b) => Arc::new(b.finish()),
            Self::Key(b) => Arc::new(b.finish()),
            Self::Headers(b) => Arc::new(b.finish()),
        }
    }
}

/// Decodes one partition's messages into batches of the scan's projected schema.
pub struct Ingest {
    config: Arc<SourceConfig>,
    decoder: Box<dyn Decoder>,
    meta: Vec<MetaColumn>,
    slots: Arc<Vec<Slot>>,
    schema: SchemaRef,
    // Kept here so the per-message check needs no call through the decoder's vtable.
    buffered: usize,
    batch_size: usize,
    messages: u64,
    bytes: u64,
    decoded: u64,
    skipped: u64,
    dead: u64,
}

impl Ingest {
    /// Takes one message: decodes it, or applies the error policy.
    #[inline]
    pub fn message(&mut self, value: &[u8], pos: &Position<'_>) -> DfResult<()> {
        self.messages += 1;
        self.bytes += value.len() as u64;
        let (payload, header) = match self.config.confluent {
            Some(indexes) => match strip_confluent(value, indexes) {
                Ok((p, _)) => (p, value.len() - p.len()),
                Err(e) => return self.bad(value, pos, &e.to_string()),
            },
            None => (value, 0),
        };
        match self.decoder.decode(payload) {
            Ok(()) => {
                self.decoded += 1;
                self.buffered += 1;
                for m in &mut self.meta {
                    m.append(pos);
                }
                Ok(())
            }
            Err(mut e) => {
                e.offset += header;
                self.bad(value, pos, &e.to_string())
            }
        }
    }

    /// Takes one Kafka record (a null value, a tombstone, is a bad message); returns a batch
    /// once one is full.
    #[inline]
    pub fn record(&mut self, rec: &weir_kafka::Record<'_>) -> DfResult<Option<RecordBatch>> {
        let pos = Position::Kafka {
            topic: rec.topic,
            partition: rec.partition,
            offset: rec.offset,
            timestamp: rec.timestamp,
            key: rec.key,
            headers: rec.headers,
        };
        match rec.value {
            Some(value) => self.message(value, &pos)?,
            None => self.bad_frame(&[], &pos, "the record's value is null (a tombstone)")?,
        }
        self.take_full()
    }

    /// Takes bytes that are not a message at all (a truncated or corrupt frame).
    pub fn bad_frame(&mut self, bytes: &[u8], pos: &Position<'_>, reason: &str) -> DfResult<()> {
        self.messages += 1;
        self.bad(bytes, pos, reason)
    }

    #[cold]
    fn bad(&mut self, value: &[u8], pos: &Position<'_>, error: &str) -> DfResult<()> {
        match self.config.on_error {
            OnError::Fail => {
                self.publish();
                Err(external(SourceError::BadMessage {
                    source_name: self.config.name.clone(),
                    position: pos.to_string(),
                    error: error.to_string(),
                }))
            }
            OnError::Skip => {
                self.skipped += 1;
                Ok(())
            }
            OnError::DeadLetter => {
                if let Some(dl) = &self.config.dead_letter {
                    dl.write(&self.config.name, pos, error, value)
                        .map_err(|error| {
                            external(SourceError::DeadLetter {
                                source_name: self.config.name.clone(),
                                path: dl.path().display().to_string(),
                                error,
                            })
                        })?;
                }
                self.dead += 1;
                Ok(())
            }
        }
    }

    /// A batch once the decoder holds a full one.
    #[inline]
    pub fn take_full(&mut self) -> DfResult<Option<RecordBatch>> {
        if self.buffered >= self.batch_size {
            self.flush()
        } else {
            Ok(None)
        }
    }

    /// Every buffered row as a batch.
    pub fn flush(&mut self) -> DfResult<Option<RecordBatch>> {
        self.publish();
        self.buffered = 0;
        let Some(decoded) = self.decoder.flush() else {
            return Ok(None);
        };
        let rows = decoded.num_rows();
        let mut meta: Vec<Option<ArrayRef>> =
            self.meta.iter_mut().map(|m| Some(m.finish())).collect();
        let columns: Vec<ArrayRef> = self
            .slots
            .iter()
            .map(|s| match *s {
                Slot::Decoded(i) => Ok(Arc::clone(decoded.column(i))),
                Slot::Meta(j) => meta[j]
                    .take()
                    .ok_or_else(|| DataFusionError::Internal("metadata column used twice".into())),
            })
            .collect::<DfResult<_>>()?;
        let options = RecordBatchOptions::new().with_row_count(Some(rows));
        Ok(Some(RecordBatch::try_new_with_options(
            Arc::clone(&self.schema),
            columns,
            &options,
        )?))
    }

    fn publish(&mut self) {
        let s = &self.config.stats;
        s.messages
            .fetch_add(std::mem::take(&mut self.messages), Ordering::Relaxed);
        s.bytes
            .fetch_add(std::mem::take(&mut self.bytes), Ordering::Relaxed);
        s.decoded
            .fetch_add(std::mem::take(&mut self.decoded), Ordering::Relaxed);
        s.skipped
            .fetch_add(std::mem::take(&mut self.skipped), Ordering::Relaxed);
        s.dead_lettered
            .fetch_add(std::mem::take(&mut self.dead), Ordering::Relaxed);
    }
}

/// The part of a scan all its partitions share.
pub(crate) struct ScanPlan {
    config: Arc<SourceConfig>,
    columns: Vec<ColumnSpec>,
    metas: Vec<MetaKind>,
    slots: Arc<Vec<Slot>>,
    schema: SchemaRef,
}

impl ScanPlan {
    /// The plan of a scan of `projection` (all columns when `None`). Only the projected columns
    /// are decoded: the decoder skips the other fields unread.
    pub(crate) fn new(cfg: &Arc<SourceConfig>, projection: Option<&[usize]>) -> Self {
        let all: Vec<usize> = (0..cfg.schema.fields().len()).collect();
        let projection = projection.unwrap_or(&all);
        let mut columns = Vec::new();
        let mut metas = Vec::new();
        let mut slots = Vec::new();
        let mut fields = Vec::new();
        for &i in projection {
            fields.push(cfg.schema.field(i).clone());
            if i < cfg.columns.len() {
                slots.push(Slot::Decoded(columns.len()));
                columns.push(cfg.columns[i].clone());
            } else {
                slots.push(Slot::Meta(metas.len()));
                metas.push(cfg.includes[i - cfg.columns.len()].0);
            }
        }
        Self {
            config: Arc::clone(cfg),
            columns,
            metas,
            slots: Arc::new(slots),
            schema: Arc::new(Schema::new(fields)),
        }
    }

    pub(crate) fn ingest(&self) -> DfResult<Ingest> {
        let decoder = self
            .config
            .factory
            .create_decoder(&DecoderRequest {
                source: &self.config.name,
                columns: &self.columns,
                options: &self.config.options,
                batch_size: self.config.batch_size,
            })
            .map_err(|e| {
                external(SourceError::Connector {
                    source_name: self.config.name.clone(),
                    error: e.to_string(),
                })
            })?;
        let meta = self.metas.iter().map(|&m| MetaColumn::new(m)).collect();
        let batch_size = decoder.batch_size().max(1);
        Ok(Ingest {
            config: Arc::clone(&self.config),
            decoder,
            meta,
            slots: Arc::clone(&self.slots),
            schema: Arc::clone(&self.schema),
            buffered: 0,
            batch_size,
            messages: 0,
            bytes: 0,
            decoded: 0,
            skipped: 0,
            dead: 0,
        })
    }
}

/// One partition of a file scan: takes blocks from the shared feed and decodes them in place.
struct FilePartition {
    plan: Arc<ScanPlan>,
    feed: Arc<FileFeed>,
}

impl fmt::Debug for FilePartition {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("FilePartition")
            .field("source", &self.plan.config.name)
            .finish()
    }
}

pub(crate) enum Step {
    Batch(RecordBatch),
    Wait,
    End,
}

pub(crate) struct FileReader {
    plan: Arc<ScanPlan>,
    feed: Arc<FileFeed>,
    ingest: Ingest,
    buf: Vec<u8>,
    file: Arc<str>,
    base: u64,
    len: usize,
    at: usize,
    /// Files this reader finished, with their end offsets (for checkpoints; one entry a file).
    done: Vec<(Arc<str>, u64)>,
}

impl FileReader {
    fn new(plan: Arc<ScanPlan>, feed: Arc<FileFeed>, ingest: Ingest) -> Self {
        Self {
            plan,
            feed,
            ingest,
            buf: Vec::new(),
            file: Arc::from(""),
            base: 0,
            len: 0,
            at: 0,
            done: Vec::new(),
        }
    }

    fn switch_file(&mut self, file: &Arc<str>) {
        if !Arc::ptr_eq(&self.file, file) && !self.file.is_empty() {
            let end = self.base + self.at as u64;
            self.done.push((Arc::clone(&self.file), end));
        }
    }

    fn next_step(&mut self) -> DfResult<Step> {
        let framing = self.feed.framing();
        loop {
            while self.at < self.len {
                let buf = &self.buf[..self.len];
                match framing.frame(buf, self.at, true) {
                    Frame::Message { start, end, next } => {
                        let pos = Position::File {
                            file: &self.file,
                            offset: (self.base + self.at as u64) as i64,
                        };
                        self.at = next;
                        self.ingest.message(&buf[start..end], &pos)?;
                        if let Some(b) = self.ingest.take_full()? {
                            return Ok(Step::Batch(b));
                        }
                    }
                    Frame::Empty { next } => self.at = next,
                    // The feed hands out whole frames only.
                    Frame::Partial { .. } | Frame::Corrupt(_) => {
                        return Err(DataFusionError::Internal(format!(
                            "file block of {} cut inside a frame at byte {}",
                            self.file,
                            self.base + self.at as u64
                        )))
                    }
                }
            }
            let status = self.feed.next_block(&mut self.buf).map_err(|e| {
                external(SourceError::Connector {
                    source_name: self.plan.config.name.clone(),
                    error: e.to_string(),
                })
            })?;
            match status {
                BlockStatus::Block { file, offset, len } => {
                    self.switch_file(&file);
                    self.file = file;
                    self.base = offset;
                    self.len = len;
                    self.at = 0;
                }
                BlockStatus::Bad {
                    file,
                    offset,
                    reason,
                    bytes,
                } => {
                    // The feed moved past the rest of this file; a resumed read sees the bad
                    // frame again and applies the policy again.
                    self.switch_file(&file);
                    self.file = Arc::clone(&file);
                    self.base = offset;
                    self.len = 0;
                    self.at = 0;
                    let pos = Position::File {
                        file: &file,
                        offset: offset as i64,
                    };
                    self.ingest.bad_frame(&bytes, &pos, &reason)?;
                }
                BlockStatus::Wait => {
                    self.base += self.len as u64;
                    self.len = 0;
                    self.at = 0;
                    let stopping = self.plan.config.stop.load(Ordering::SeqCst);
                    return Ok(match self.ingest.flush()? {
                        Some(b) => Step::Batch(b),
                        None if stopping => Step::End,
                        None => Step::Wait,
                    });
                }
                BlockStatus::End => {
                    self.base += self.len as u64;
                    self.len = 0;
                    self.at = 0;
                    return Ok(match self.ingest.flush()? {
                        Some(b) => Step::Batch(b),
                        None => Step::End,
                    });
                }
            }
        }
    }
}

impl PartitionStream for FilePartition {
    fn schema(&self) -> &SchemaRef {
        &self.plan.schema
    }

    fn execute(&self, _ctx: Arc<TaskContext>) -> SendableRecordBatchStream {
        let schema = Arc::clone(&self.plan.schema);
        let reader = self
            .plan
            .ingest()
            .map(|ingest| FileReader::new(Arc::clone(&self.plan), Arc::clone(&self.feed), ingest));
        let stream = futures::stream::unfold(Some(reader), |state| async move {
            let mut reader = match state? {
                Ok(r) => r,
                Err(e) => return Some((Err(e), None)),
            };
            loop {
                // Decoding is CPU work done right here, as DataFusion's own scans do; blocks are
                // a few MiB, so a poll returns within milliseconds.
                match reader.next_step() {
                    Ok(Step::Batch(b)) => return Some((Ok(b), Some(Ok(reader)))),
                    Ok(Step::End) => return None,
                    Ok(Step::Wait) => tokio::time::sleep(Duration::from_millis(100)).await,
                    Err(e) => return Some((Err(e), None)),
                }
            }
        });
        Box::pin(RecordBatchStreamAdapter::new(schema, stream))
    }
}

/// A partition stream fed by `read`, which runs on a thread of its own (it blocks on sockets or
/// files) and sends batches through a small bounded channel, so a slow query slows the reader
/// instead of piling up memory. An error `read` returns ends the stream.
pub(crate) fn thread_stream(
    name: String,
    schema: SchemaRef,
    read: impl FnOnce(&tokio::sync::mpsc::Sender<DfResult<RecordBatch>>) -> DfResult<()>
        + Send
        + 'static,
) -> SendableRecordBatchStream {
    let (tx, rx) = tokio::sync::mpsc::channel::<DfResult<RecordBatch>>(2);
    let spawned = std::thread::Builder::new().name(name).spawn(move || {
        if let Err(e) = read(&tx) {
            let _ = tx.blocking_send(Err(e));
        }
    });
    let stream = futures::stream::unfold((rx, spawned.err()), |(mut rx, spawn_error)| async move {
        if let Some(e) = spawn_error {
            let e = DataFusionError::External(Box::new(e));
            return Some((Err(e), (rx, None)));
        }
        rx.recv().await.map(|b| (b, (rx, None)))
    });
    Box::pin(RecordBatchStreamAdapter::new(schema, stream))
}

/// A source as a DataFusion table.
#[derive(Debug)]
pub struct SourceTable {
    config: Arc<SourceConfig>,
    partitions: usize,
}

impl SourceTable {
    /// A table over `config`, scanned by `partitions` decoders in parallel.
    pub fn new(config: Arc<SourceConfig>, partitions: usize) -> Self {
        Self {
            config,
            partitions: partitions.max(1),
        }
    }

    /// The source's settings.
    pub fn config(&self) -> &Arc<SourceConfig> {
        &self.config
    }
}

#[async_trait]
impl TableProvider for SourceTable {
    fn schema(&self) -> SchemaRef {
        Arc::clone(&self.config.schema)
    }

    fn table_type(&self) -> TableType {
        TableType::Base
    }

    async fn scan(
        &self,
        _state: &dyn Session,
        projection: Option<&Vec<usize>>,
        _filters: &[Expr],
        limit: Option<usize>,
    ) -> DfResult<Arc<dyn ExecutionPlan>> {
        let cfg = &self.config;
        if cfg.state.is_some() {
            // A source with state is read by one reader that dedups, checkpoints and resumes.
            return state::scan(cfg, projection, limit);
        }
        let plan = Arc::new(ScanPlan::new(cfg, projection.map(|p| p.as_slice())));
        let schema = Arc::clone(&plan.schema);
        let connector_error = |error: String| {
            external(SourceError::Connector {
                source_name: cfg.name.clone(),
                error,
            })
        };
        let partitions: Vec<Arc<dyn PartitionStream>> = match &cfg.connector {
            Connector::File {
                path,
                framing,
                max_message_bytes,
            } => {
                let feed = Arc::new(
                    FileFeed::new(path, *framing, cfg.follow, *max_message_bytes)
                        .map_err(|e| connector_error(e.to_string()))?,
                );
                (0..self.partitions)
                    .map(|_| {
                        Arc::new(FilePartition {
                            plan: Arc::clone(&plan),
                            feed: Arc::clone(&feed),
                        }) as Arc<dyn PartitionStream>
                    })
                    .collect()
            }
            Connector::Kafka(consumer) => {
                kafka::partitions(&plan, consumer, self.partitions, cfg.follow)
                    .await
                    .map_err(connector_error)?
            }
        };
        Ok(Arc::new(StreamingTableExec::try_new(
            schema,
            partitions,
            None,
            Vec::new(),
            cfg.follow,
            limit,
        )?))
    }
}

/// The table schema of a source: the decoder's fields, then the metadata columns.
pub fn table_schema(decoded: &Schema, includes: &[(MetaKind, String)]) -> SchemaRef {
    let mut fields: Vec<Field> = decoded
        .fields()
        .iter()
        .map(|f| f.as_ref().clone())
        .collect();
    for (kind, name) in includes {
        fields.push(Field::new(name, kind.data_type(), kind.nullable()));
    }
    Arc::new(Schema::new(fields))
}
