//! The `kafka` sink: each row becomes one record of a topic, its value encoded by an encoder
//! (`json`, `raw`, or a registered one), its key from a column. Records go through weir-kafka's
//! producer: batched per partition, keyed records placed by murmur2 of the key as the Java
//! client places them, and with `'acks' = 'all'` (the default) idempotent, so a retried batch is
//! neither doubled nor reordered. A row is acknowledged by the time the run ends. Fed by a source
//! with `'state.dir'` (or a continuous query over one), the sink writes one transaction a step
//! instead, exactly once (`kafka_steps`); otherwise a run killed mid-way may leave part of its
//! rows in the topic, and the next run writes them again.

use std::sync::Arc;
use std::time::Duration;

use arrow::array::{Array, AsArray};
use arrow::datatypes::{DataType, Int64Type, SchemaRef, TimeUnit};
use arrow::record_batch::RecordBatch;
use weir_codec::{CodecError, Encoder, OptionError, OptionKind, OptionSpec, Options};
use weir_kafka::{Compression, Producer, ProducerConfig};

use super::SinkError;

/// The `kafka` sink's options (besides the security options it shares with the source, and its
/// encoder's).
pub(crate) const KAFKA_SINK_OPTIONS: &[OptionSpec] = &[
    BROKERS,
    TOPIC,
    ENCODING,
    KEY,
    PARTITIONER,
    TIMESTAMP_COLUMN,
    HEADERS_COLUMN,
    COMPRESSION,
    ACKS,
    BATCH_SIZE,
    LINGER_MS,
    TRANSACTIONAL_ID,
    TRANSACTION_TIMEOUT,
    ON_TRANSACTION_TIMEOUT,
    ON_ERROR,
    DEAD_LETTER_PATH,
    AUTO_REGISTER,
];

const BROKERS: OptionSpec = OptionSpec::new(
    "brokers",
    OptionKind::List,
    "kafka: bootstrap brokers, `host:port[,host:port...]` (required)",
);
const TOPIC: OptionSpec = OptionSpec::new(
    "topic",
    OptionKind::Text,
    "kafka: the topic the rows go to; it must exist (required)",
);
pub(crate) const ENCODING: OptionSpec = OptionSpec::new(
    "encoding",
    OptionKind::Text,
    "kafka: each row's value in this encoding: `json`, `protobuf`, `raw` (a Binary or Utf8 column's bytes), \
     or any name registered with an encoder (required)",
);
const KEY: OptionSpec = OptionSpec::new(
    "key",
    OptionKind::Text,
    "kafka: the column whose value is each record's key (text and binary as they are, integers \
     as decimal text); records with equal keys go to one partition (murmur2, as the Java \
     client); without it, records have no key and fill one partition's batch after another",
);
const PARTITIONER: OptionSpec = OptionSpec::new(
    "partitioner",
    OptionKind::Choice(&["murmur2", "crc32", "round_robin"]),
    "kafka: how a record's partition is chosen: murmur2 of the key (the Java client's default), \
     CRC-32 of the key (librdkafka's default, `consistent_random`), or the next partition for \
     each record; keyless records fill one partition's batch after another with the first two",
)
.default_value("murmur2");
const TIMESTAMP_COLUMN: OptionSpec = OptionSpec::new(
    "timestamp.column",
    OptionKind::Text,
    "kafka: a TIMESTAMP column whose value is each record's timestamp; the time of sending \
     when absent (or null)",
);
const HEADERS_COLUMN: OptionSpec = OptionSpec::new(
    "headers.column",
    OptionKind::Text,
    "kafka: a MAP column of text keys to binary or text values whose entries are each record's \
     headers, in map order (what a kafka source's `INCLUDE headers` reads); none when absent \
     (or null)",
);
const COMPRESSION: OptionSpec = OptionSpec::new(
    "compression",
    OptionKind::Choice(&["none", "gzip", "snappy", "lz4", "zstd"]),
    "kafka: the record batches' compression",
)
.default_value("none");
const ACKS: OptionSpec = OptionSpec::new(
    "acks",
    OptionKind::Choice(&["all", "-1", "1", "0"]),
    "kafka: `all` waits for every in-sync replica and makes the producer idempotent (no record \
     doubled or reordered by a retry); `1` waits for the leader; `0` for nothing",
)
.default_value("all");
const BATCH_SIZE: OptionSpec = OptionSpec::new(
    "batch.size",
    OptionKind::Count,
    "kafka: a partition's batch is sent once its records take this many bytes (keep it under \
     the broker's `message.max.bytes`)",
)
.default_value("921600");

const TRANSACTIONAL_ID: OptionSpec = OptionSpec::new(
    "transactional.id",
    OptionKind::Text,
    "kafka: the id of the sink's transactions when its source has 'state.dir' or a 'group.id' \
     (exactly once, one transaction a step); a sink started with it fences any earlier writer \
     of the id. Give each pipeline its own. In a consumer group each member adds '-' and its \
     'group.instance.id' (or a name of its run)",
)
.default_value("weir-<sink name>");
const TRANSACTION_TIMEOUT: OptionSpec = OptionSpec::new(
    "transaction.timeout.ms",
    OptionKind::Count,
    "kafka: the coordinator aborts a transaction left open this long (at most the brokers' \
     `transaction.max.timeout.ms`); a weir stopped between a step's state commit and its \
     transaction's commit must start again within it. A consumer group's sink defaults to \
     10000: a member killed with a transaction open holds its partitions' offsets that long",
)
.default_value("900000");

const ON_TRANSACTION_TIMEOUT: OptionSpec = OptionSpec::new(
    "on.transaction.timeout",
    OptionKind::Choice(&["fail", "continue"]),
    "kafka, exactly once: what a start does when the last step's transaction was aborted by its \
     coordinator (weir stopped between the step's state commit and its transaction's commit, \
     and started again after `transaction.timeout.ms`): the step's rows are not in the topic, \
     and the state has moved past them. `fail` stops, naming the step; `continue` logs that \
     and goes on without them",
)
.default_value("fail");

const LINGER_MS: OptionSpec = OptionSpec::new(
    "linger.ms",
    OptionKind::Count,
    "kafka: a partition's batch is sent once its first record has waited this long, even if \
     not full (checked as rows come, and when none came for this long)",
)
.default_value("5");

const ON_ERROR: OptionSpec = OptionSpec::new(
    "on.error",
    OptionKind::Choice(&["fail", "skip", "dead_letter"]),
    "kafka: a row the encoder cannot write (a name that is no value of its enum) stops the run, \
     naming the row and the column, is skipped, or is appended to the dead-letter file (with \
     `skip` and `dead_letter` the batch's other rows are written)",
)
.default_value("fail");
const DEAD_LETTER_PATH: OptionSpec = OptionSpec::new(
    "dead_letter.path",
    OptionKind::Path,
    "kafka: with `dead_letter`: a JSON-lines file of `sink`, `topic`, `error` and `row` (the \
     row's columns as a JSON object)",
);

pub(crate) const AUTO_REGISTER: OptionSpec = OptionSpec::new(
    "auto.register.schemas",
    OptionKind::Bool,
    "kafka, with `schema.registry.url`: register the `.proto` file `location` names under the \
     subject (a schema the subject holds keeps its id) and write in it, instead of in the \
     subject's latest schema; its imports (found in `proto.include`, then beside it) are \
     registered first, each under its import name",
)
.default_value("false");

impl KafkaSinkSettings {
    /// The dead-letter file, under `'on.error' = 'dead_letter'`.
    pub(crate) fn dead_letter_path(&self) -> Option<&std::path::Path> {
        match &self.row_errors {
            RowErrors::DeadLetter(p) => Some(p),
            _ => None,
        }
    }
}

/// What a `kafka` sink does with a row its encoder cannot write.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum RowErrors {
    /// Stop the run.
    Fail,
    /// Leave the row out.
    Skip,
    /// Leave it out and append it to this file.
    DeadLetter(std::path::PathBuf),
}

/// A `kafka` sink's settings.
#[derive(Debug, Clone)]
pub(crate) struct KafkaSinkSettings {
    /// The producer's settings (brokers, topic, security, batching).
    pub(crate) producer: ProducerConfig,
    /// The key column, if any.
    pub(crate) key: Option<String>,
    /// How partitions are chosen.
    pub(crate) partitioner: Partitioner,
    /// The timestamp column, if any.
    pub(crate) timestamp: Option<String>,
    /// The headers column, if any.
    pub(crate) headers: Option<String>,
    /// How long a record waits in a batch that is not full.
    pub(crate) linger: Duration,
    /// `'transactional.id'` as given (the exactly-once sink defaults it).
    pub(crate) transactional_id: Option<String>,
    /// `'transaction.timeout.ms'` was given (a consumer group's sink defaults it shorter).
    pub(crate) transaction_timeout_given: bool,
    /// `'on.error'`.
    pub(crate) row_errors: RowErrors,
    /// `'on.transaction.timeout'` as given: `Some(true)` (`continue`) goes on past a step whose
    /// transaction its coordinator aborted, `Some(false)` (`fail`) and the default stop.
    pub(crate) continue_after_lost_transaction: Option<bool>,
    /// With `'schema.registry.url'`: the subject's schema the values are written in, and their
    /// framing (filled in when the sink is created).
    pub(crate) registry: Option<Arc<crate::registry::SinkSchema>>,
}

/// How a `kafka` sink chooses each record's partition.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Partitioner {
    /// murmur2 of the key, as the Java client.
    Murmur2,
    /// CRC-32 of the key, as librdkafka's `consistent_random`.
    Crc32,
    /// Each record the next partition.
    RoundRobin,
}

impl KafkaSinkSettings {
    /// Reads the options of the sink `sink`; `defaults` are a `--kafka-config` file's
    /// properties, which the security options override.
    pub(crate) fn parse(
        sink: &str,
        options: &Options,
        defaults: &[(String, String)],
    ) -> Result<Self, SinkError> {
        let brokers = options.list(&BROKERS);
        if brokers.is_empty() {
            return Err(OptionError::Missing {
                key: BROKERS.key.into(),
                doc: BROKERS.doc,
            }
            .into());
        }
        let topic = options.require(&TOPIC)?.to_string();
        let compression: Compression = match options.choice(&COMPRESSION)? {
            Some(c) => c.parse().map_err(|why: String| {
                OptionError::invalid(&COMPRESSION, COMPRESSION.key, c, why)
            })?,
            None => Compression::None,
        };
        let acks = match options.choice(&ACKS)? {
            Some("1") => 1,
            Some("0") => 0,
            _ => -1,
        };
        let batch_bytes = options
            .count(&BATCH_SIZE)?
            .map_or(921_600, |n| usize::try_from(n).unwrap_or(usize::MAX))
            .max(1);
        let transaction_timeout = options
            .count(&TRANSACTION_TIMEOUT)?
            .map_or(Duration::from_secs(900), Duration::from_millis);
        let security = crate::kafka_security::security_config(defaults, options)
            .map_err(|e| SinkError::Options(format!("sink {sink}: {e}")))?;
        Ok(Self {
            producer: ProducerConfig {
                brokers,
                topic,
                compression,
                batch_bytes,
                acks,
                security,
                transaction_timeout,
                ..ProducerConfig::default()
            },
            transactional_id: options.given(&TRANSACTIONAL_ID).map(str::to_string),
            transaction_timeout_given: options.given(&TRANSACTION_TIMEOUT).is_some(),
            key: options.text(&KEY).map(str::to_string),
            partitioner: match options.choice(&PARTITIONER)? {
                Some("crc32") => Partitioner::Crc32,
                Some("round_robin") => Partitioner::RoundRobin,
                _ => Partitioner::Murmur2,
            },
            timestamp: options.text(&TIMESTAMP_COLUMN).map(str::to_string),
            headers: options.text(&HEADERS_COLUMN).map(str::to_string),
            linger: Duration::from_millis(options.count(&LINGER_MS)?.unwrap_or(5)),
            row_errors: match (options.choice(&ON_ERROR)?, options.given(&DEAD_LETTER_PATH)) {
                (Some("dead_letter"), Some(path)) => RowErrors::DeadLetter(path.into()),
                (Some("dead_letter"), None) => {
                    return Err(OptionError::Missing {
                        key: DEAD_LETTER_PATH.key.into(),
                        doc: DEAD_LETTER_PATH.doc,
                    }
                    .into())
                }
                (Some("skip"), _) => RowErrors::Skip,
                _ => RowErrors::Fail,
            },
            continue_after_lost_transaction: match options.given(&ON_TRANSACTION_TIMEOUT) {
                Some(_) => Some(options.choice(&ON_TRANSACTION_TIMEOUT)? == Some("continue")),
                None => None,
            },
            registry: None,
        })
    }
}

/// Writes each row as one record (the `kafka` sink).
pub(crate) struct KafkaSink {
    sink: String,
    producer: Producer,
    /// What the producer was made from, to make it again after a lost connection.
    producer_config: ProducerConfig,
    encoder: Box<dyn Encoder>,
    /// The key column's index in the rows.
    key: Option<usize>,
    /// The timestamp column's index, and what turns its values into milliseconds (times the
    /// first, divided by the second).
    timestamp: Option<(usize, i64, i64)>,
    partitioner: Partitioner,
    /// The headers column's index.
    headers: Option<usize>,
    linger: Duration,
    /// The topic's partition count, and the next partition for round robin.
    partitions: u32,
    next: u32,
    messages: Vec<u8>,
    ends: Vec<usize>,
    transactional_id: Option<String>,
    /// Rows the encoder could not write, and where they go.
    refused: RefusedRows,
}

/// The rows a sink's encoder could not write: counted, and appended to the dead-letter file
/// under `'on.error' = 'dead_letter'`. Written one transaction a step, the lines are held with
/// the step and appended when it commits (`crate::sink::kafka_dead_letters`), so that a step
/// written again does not repeat them.
struct RefusedRows {
    policy: RowErrors,
    /// The sink's topic, for the dead-letter lines.
    topic: String,
    file: Option<std::io::BufWriter<std::fs::File>>,
    /// The dead-letter lines of the open step, when the sink writes one transaction a step;
    /// `None` appends each line at once.
    held: Option<Vec<u8>>,
    /// Refused since the last finish.
    count: u64,
    /// The first refusal of the run was logged with its reason.
    warned: bool,
}

impl KafkaSink {
    /// Connects to the brokers and checks that the key column can be a key.
    pub(crate) fn open(
        sink: &str,
        settings: &KafkaSinkSettings,
        schema: &SchemaRef,
        encoder: Box<dyn Encoder>,
    ) -> Result<Self, SinkError> {
        let key = match &settings.key {
            None => None,
            Some(name) => {
                let (i, field) = schema.column_with_name(name).ok_or_else(|| {
                    SinkError::Options(format!(
                        "sink {sink}: 'key' = '{name}' is not a column of its rows ({})",
                        schema
                            .fields()
                            .iter()
                            .map(|f| f.name().as_str())
                            .collect::<Vec<_>>()
                            .join(", ")
                    ))
                })?;
                if !(field.data_type().is_integer() || is_bytes(field.data_type())) {
                    return Err(SinkError::Options(format!(
                        "sink {sink}: the key column '{name}' is {}; a key is text, binary or an \
                         integer (cast it in the query)",
                        field.data_type()
                    )));
                }
                Some(i)
            }
        };
        let timestamp = match &settings.timestamp {
            None => None,
            Some(name) => {
                let (i, field) = schema.column_with_name(name).ok_or_else(|| {
                    SinkError::Options(format!(
                        "sink {sink}: 'timestamp.column' = '{name}' is not a column of its rows"
                    ))
                })?;
                let (mul, div) = match field.data_type() {
                    DataType::Timestamp(TimeUnit::Second, _) => (1000, 1),
                    DataType::Timestamp(TimeUnit::Millisecond, _) => (1, 1),
                    DataType::Timestamp(TimeUnit::Microsecond, _) => (1, 1000),
                    DataType::Timestamp(TimeUnit::Nanosecond, _) => (1, 1_000_000),
                    other => {
                        return Err(SinkError::Options(format!(
                            "sink {sink}: the timestamp column '{name}' is {other}, not a \
                             TIMESTAMP"
                        )))
                    }
                };
                Some((i, mul, div))
            }
        };
        let headers = match &settings.headers {
            None => None,
            Some(name) => {
                let (i, field) = schema.column_with_name(name).ok_or_else(|| {
                    SinkError::Options(format!(
                        "sink {sink}: 'headers.column' = '{name}' is not a column of its rows"
                    ))
                })?;
                let fits = match field.data_type() {
                    DataType::Map(entries, _) => match entries.data_type() {
                        DataType::Struct(kv) if kv.len() == 2 => {
                            kv[0].data_type() == &DataType::Utf8
                                && matches!(kv[1].data_type(), DataType::Binary | DataType::Utf8)
                        }
                        _ => false,
                    },
                    _ => false,
                };
                if !fits {
                    return Err(SinkError::Options(format!(
                        "sink {sink}: the headers column '{name}' is {}; headers are a MAP of \
                         VARCHAR keys to BYTEA or VARCHAR values (as a kafka source's INCLUDE \
                         headers reads them, or MAP(['name'], ['value']) in SQL)",
                        field.data_type()
                    )));
                }
                Some(i)
            }
        };
        let producer =
            Producer::connect(&settings.producer).map_err(|source| SinkError::Kafka {
                sink: sink.to_string(),
                source,
            })?;
        if let Some(protocol) = producer.transaction_protocol() {
            let protocol = match protocol {
                weir_kafka::TransactionProtocol::Kip890 => "KIP-890 (transaction version 2)",
                weir_kafka::TransactionProtocol::Classic => "classic",
            };
            tracing::info!(
                sink,
                transactional_id = settings.producer.transactional_id.as_deref().unwrap_or(""),
                "kafka transactions: the {protocol} protocol"
            );
        }
        let partitions = u32::try_from(producer.partitions().max(1)).unwrap_or(1);
        let file = match &settings.row_errors {
            RowErrors::DeadLetter(path) => Some(std::io::BufWriter::new(
                std::fs::OpenOptions::new()
                    .create(true)
                    .append(true)
                    .open(path)
                    .map_err(|source| SinkError::Io {
                        path: path.display().to_string(),
                        source,
                    })?,
            )),
            _ => None,
        };
        Ok(Self {
            sink: sink.to_string(),
            producer,
            producer_config: settings.producer.clone(),
            encoder,
            key,
            timestamp,
            partitioner: settings.partitioner,
            headers,
            linger: settings.linger,
            partitions,
            next: 0,
            messages: Vec::new(),
            ends: Vec::new(),
            transactional_id: settings.producer.transactional_id.clone(),
            refused: RefusedRows {
                policy: settings.row_errors.clone(),
                topic: settings.producer.topic.clone(),
                file,
                held: None,
                count: 0,
                warned: false,
            },
        })
    }

    /// Sets aside `row` (a batch of one row) that the encoder could not write, for `reason`.
    fn refuse(&mut self, row: &RecordBatch, reason: &str) -> Result<(), SinkError> {
        self.refused.count += 1;
        if self.refused.count == 1 && !self.refused.warned {
            self.refused.warned = true;
            tracing::warn!(
                sink = %self.sink,
                "a row cannot be encoded and is left out ('on.error'); the first: {reason}"
            );
        }
        if self.refused.file.is_none() {
            return Ok(());
        }
        let rendered = super::json_lines(row).map_err(SinkError::Encode)?;
        let text = |s: &str| serde_json::Value::from(s).to_string();
        let line = format!(
            "{{\"sink\":{},\"topic\":{},\"error\":{},\"row\":{}}}\n",
            text(&self.sink),
            text(&self.refused.topic),
            text(reason),
            String::from_utf8_lossy(rendered.trim_ascii_end())
        );
        match &mut self.refused.held {
            Some(held) => {
                held.extend_from_slice(line.as_bytes());
                Ok(())
            }
            None => self.append_dead_letters(line.as_bytes(), false),
        }
    }

    /// From now on, holds the dead-letter lines until [`KafkaSink::take_refused`] takes them
    /// (one transaction a step: they are appended when the step commits).
    pub(crate) fn hold_refused(&mut self) {
        self.refused.held = Some(Vec::new());
    }

    /// The dead-letter lines held since the last take or drop.
    pub(crate) fn take_refused(&mut self) -> Vec<u8> {
        self.refused
            .held
            .as_mut()
            .map(std::mem::take)
            .unwrap_or_default()
    }

    /// Drops the held dead-letter lines: their rows are about to be written again, which
    /// refuses them again.
    pub(crate) fn drop_refused(&mut self) {
        if let Some(held) = &mut self.refused.held {
            held.clear();
        }
    }

    /// The dead-letter file's length, everything appended so far included (0 without a file).
    pub(crate) fn dead_letter_len(&mut self) -> Result<u64, SinkError> {
        let path = self.dead_letter_display();
        let Some(file) = &mut self.refused.file else {
            return Ok(0);
        };
        std::io::Write::flush(file)
            .and_then(|()| file.get_ref().metadata())
            .map(|m| m.len())
            .map_err(|source| SinkError::Io { path, source })
    }

    /// Appends `lines` to the dead-letter file (if any), with `sync` until they are on disk.
    pub(crate) fn append_dead_letters(
        &mut self,
        lines: &[u8],
        sync: bool,
    ) -> Result<(), SinkError> {
        if lines.is_empty() {
            return Ok(());
        }
        let path = self.dead_letter_display();
        let Some(file) = &mut self.refused.file else {
            return Ok(());
        };
        std::io::Write::write_all(file, lines)
            .and_then(|()| std::io::Write::flush(file))
            .and_then(|()| {
                if sync {
                    file.get_ref().sync_data()
                } else {
                    Ok(())
                }
            })
            .map_err(|source| SinkError::Io { path, source })
    }

    /// The dead-letter file, under `'on.error' = 'dead_letter'`.
    pub(crate) fn dead_letter_path(&self) -> Option<&std::path::Path> {
        match &self.refused.policy {
            RowErrors::DeadLetter(p) => Some(p),
            _ => None,
        }
    }

    fn dead_letter_display(&self) -> String {
        self.dead_letter_path()
            .map(|p| p.display().to_string())
            .unwrap_or_default()
    }

    /// The sink's name.
    pub(crate) fn name(&self) -> &str {
        &self.sink
    }

    /// The producer's `transactional.id` ("" without one).
    pub(crate) fn transactional_id(&self) -> &str {
        self.transactional_id.as_deref().unwrap_or("")
    }

    /// Opens a transaction for the records written next.
    pub(crate) fn begin_transaction(&mut self) -> Result<(), SinkError> {
        self.producer
            .begin_transaction()
            .map_err(|e| self.kafka_error(e))
    }

    /// The producer id and epoch of the open transaction, once it has written to a partition
    /// or committed offsets.
    pub(crate) fn transaction_identity(&self) -> Option<(i64, i16)> {
        self.producer
            .transaction_has_writes()
            .then(|| self.producer.producer_identity())
    }

    /// Commits the open transaction. The producer's next epoch must begin before the next
    /// transaction ([`KafkaSink::renew_epoch`]), so that the committed one is the last of its
    /// epoch.
    pub(crate) fn commit_transaction(&mut self) -> Result<(), SinkError> {
        self.producer
            .commit_transaction()
            .map_err(|e| self.kafka_error(e))
    }

    /// Starts the producer's next epoch, between transactions.
    pub(crate) fn renew_epoch(&mut self) -> Result<(), SinkError> {
        self.producer.renew_epoch().map_err(|e| self.kafka_error(e))
    }

    /// Replaces the producer with a new one of the same `transactional.id` (after the broker
    /// connection was lost): its new epoch aborts whatever transaction the old one left open,
    /// and its records begin again from the first sequence number.
    pub(crate) fn reconnect(&mut self) -> Result<(), SinkError> {
        self.producer =
            Producer::connect(&self.producer_config).map_err(|e| self.kafka_error(e))?;
        Ok(())
    }

    /// What the producer is made from.
    pub(crate) fn producer_config(&self) -> &ProducerConfig {
        &self.producer_config
    }

    /// Commits a consumer group's `offsets` inside the open transaction (KIP-447), stamped
    /// with `member`'s generation.
    pub(crate) fn send_offsets(
        &mut self,
        offsets: &[(weir_kafka::TopicPartition, i64)],
        member: &weir_kafka::GroupMetadata,
    ) -> Result<(), SinkError> {
        self.producer
            .send_offsets_to_transaction(offsets, member)
            .map_err(|e| self.kafka_error(e))
    }

    /// Aborts the open transaction.
    pub(crate) fn abort_transaction(&mut self) -> Result<(), SinkError> {
        self.producer
            .abort_transaction()
            .map_err(|e| self.kafka_error(e))
    }

    fn kafka_error(&self, source: weir_kafka::Error) -> SinkError {
        SinkError::Kafka {
            sink: self.sink.clone(),
            source,
        }
    }
}

fn is_bytes(t: &DataType) -> bool {
    matches!(
        t,
        DataType::Utf8
            | DataType::LargeUtf8
            | DataType::Utf8View
            | DataType::Binary
            | DataType::LargeBinary
            | DataType::BinaryView
    )
}

impl super::BatchWriter for KafkaSink {
    fn write(&mut self, batch: &RecordBatch) -> Result<(), SinkError> {
        // Parts of the batch still to write, the next last. A row the encoder refuses splits
        // its part: the rows before it, then the rows after it in parts of at most
        // `AFTER_REFUSAL` rows, so that many bad rows cost each a short part's encoding rather
        // than the rest of the batch's (only on that path: a batch that encodes is written
        // whole).
        const AFTER_REFUSAL: usize = 64;
        let mut parts = vec![batch.clone()];
        while let Some(part) = parts.pop() {
            if part.num_rows() == 0 {
                continue;
            }
            match self.write_rows(&part) {
                Err(SinkError::Encode(CodecError::Row { row, reason }))
                    if self.refused.policy != RowErrors::Fail && row < part.num_rows() =>
                {
                    let rest = row + 1..part.num_rows();
                    let starts: Vec<usize> = rest.clone().step_by(AFTER_REFUSAL).collect();
                    for &start in starts.iter().rev() {
                        let len = AFTER_REFUSAL.min(rest.end - start);
                        parts.push(part.slice(start, len));
                    }
                    self.refuse(&part.slice(row, 1), &reason)?;
                    parts.push(part.slice(0, row));
                }
                other => other?,
            }
        }
        self.producer
            .send_lingering(self.linger)
            .map_err(|e| self.kafka_error(e))
    }

    fn linger(&self) -> Option<Duration> {
        Some(self.linger.max(Duration::from_millis(1)))
    }

    fn idle(&mut self) -> Result<(), SinkError> {
        self.producer
            .send_lingering(Duration::ZERO)
            .map_err(|e| self.kafka_error(e))
    }

    fn finish(&mut self) -> Result<(), SinkError> {
        // Once per finish: the run's end, or an exactly-once step's.
        if self.refused.count > 0 {
            tracing::warn!(
                sink = %self.sink,
                rows = self.refused.count,
                "{} rows could not be encoded and were left out ('on.error')",
                self.refused.count
            );
            self.refused.count = 0;
        }
        self.producer.flush().map_err(|e| self.kafka_error(e))
    }
}

impl KafkaSink {
    /// Encodes `batch` and hands each row to the producer; a row the encoder refuses fails the
    /// whole batch before any row is sent.
    fn write_rows(&mut self, batch: &RecordBatch) -> Result<(), SinkError> {
        self.messages.clear();
        self.ends.clear();
        self.encoder
            .encode_batch(batch, &mut self.messages, &mut self.ends)
            .map_err(SinkError::Encode)?;
        // Keys as bytes, one column for the batch: integers become text once, here.
        let keys: Option<Arc<dyn Array>> = match self.key {
            None => None,
            Some(i) => {
                let column = batch.column(i);
                Some(match column.data_type() {
                    DataType::Binary => Arc::clone(column),
                    _ => arrow::compute::cast(column, &DataType::Binary).map_err(|e| {
                        SinkError::Options(format!(
                            "sink {}: the key column cannot be read as bytes: {e}",
                            self.sink
                        ))
                    })?,
                })
            }
        };
        let keys = keys.as_ref().map(|k| k.as_binary::<i32>());
        // Timestamps in milliseconds, one column for the batch.
        let times = match self.timestamp {
            None => None,
            Some((i, mul, div)) => {
                let column =
                    arrow::compute::cast(batch.column(i), &DataType::Int64).map_err(|e| {
                        SinkError::Options(format!(
                            "sink {}: the timestamp column cannot be read: {e}",
                            self.sink
                        ))
                    })?;
                Some((column, mul, div))
            }
        };
        let times = times
            .as_ref()
            .map(|(c, mul, div)| (c.as_primitive::<Int64Type>(), *mul, *div));
        // Rows without a timestamp of their own are stamped with the batch's send time, read
        // once: the batch's rows are handed over together, and reading the clock a record
        // cost a tenth of a protobuf sink's CPU.
        let now = weir_kafka::now_ms();
        // Headers: the map's keys and its values as bytes, one cast for the batch.
        let header_values = match self.headers {
            None => None,
            Some(i) => {
                let map = batch.column(i).as_map();
                let values = match map.values().data_type() {
                    DataType::Binary => Arc::clone(map.values()),
                    _ => arrow::compute::cast(map.values(), &DataType::Binary).map_err(|e| {
                        SinkError::Options(format!(
                            "sink {}: the headers column's values cannot be read as bytes: {e}",
                            self.sink
                        ))
                    })?,
                };
                Some((map, values))
            }
        };
        let headers = header_values.as_ref().map(|(map, values)| {
            (
                *map,
                map.keys().as_string::<i32>(),
                values.as_binary::<i32>(),
            )
        });
        // One list of a record's headers, refilled for each row.
        let mut record_headers: Vec<(&[u8], Option<&[u8]>)> = Vec::new();
        let mut start = 0;
        for (row, &end) in self.ends.iter().enumerate() {
            record_headers.clear();
            if let Some((map, keys, values)) = headers.filter(|(m, _, _)| m.is_valid(row)) {
                let offsets = map.value_offsets();
                let (from, to) = (offsets[row] as usize, offsets[row + 1] as usize);
                for j in from..to {
                    record_headers.push((
                        keys.value(j).as_bytes(),
                        values.is_valid(j).then(|| values.value(j)),
                    ));
                }
            }
            let key = keys.and_then(|k| k.is_valid(row).then(|| k.value(row)));
            let value = self.messages.get(start..end).unwrap_or_default();
            let timestamp = times
                .and_then(|(t, mul, div)| {
                    t.is_valid(row)
                        .then(|| t.value(row).saturating_mul(mul).div_euclid(div))
                })
                .unwrap_or(now);
            let partition = match (self.partitioner, key) {
                (Partitioner::Murmur2, _) | (Partitioner::Crc32, None) => None,
                (Partitioner::Crc32, Some(k)) => Some(crc32fast::hash(k) % self.partitions),
                (Partitioner::RoundRobin, _) => {
                    let p = self.next;
                    self.next = (self.next + 1) % self.partitions;
                    Some(p)
                }
            };
            let partition = partition.and_then(|p| i32::try_from(p).ok());
            if let Err(e) = self.producer.send_with(
                partition,
                key,
                Some(value),
                &record_headers,
                Some(timestamp),
            ) {
                return Err(self.kafka_error(e));
            }
            start = end;
        }
        Ok(())
    }
}
