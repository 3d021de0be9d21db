//! Sources: what `CREATE SOURCE` defines. A [`SourceDefinition`] holds everything fixed when the
//! statement runs: the connector's settings, the encoding prepared once for the declared columns,
//! the metadata columns, the error policy and the state settings. Reading it is the pipeline's
//! job (`crate::pipeline`), which also makes it a DataFusion table (`pipeline::table`).

pub(crate) mod block;
pub(crate) mod dead_letter;
pub(crate) mod file;
mod file_ranges;
pub(crate) mod kafka;
pub(crate) mod meta;
pub(crate) mod state;
mod walk_ahead;

use std::fmt;
use std::sync::atomic::AtomicBool;
use std::sync::{Arc, Mutex};

use std::time::Duration;

use arrow::datatypes::{Field, Schema, SchemaRef, TimeUnit};
use weir_codec::{OptionKind, OptionSpec, Options, PreparedDecoder};

use self::dead_letter::DeadLetterFile;
use self::meta::MetaKind;
use self::state::{CommitInterval, StateSpec};
use crate::error::{SourceError, SourceErrorKind};
use crate::metrics::SourceStats;

/// The options of every source, whatever its connector and encoding.
pub(crate) const SOURCE_OPTIONS: &[OptionSpec] = &[
    CONNECTOR,
    ENCODING,
    ON_ERROR,
    DEAD_LETTER_PATH,
    CONFLUENT_WIRE,
    TIMESTAMP_UNIT,
    FIELDS,
    SCAN_BOUNDED,
    WATERMARK_IDLE_TIMEOUT,
];

pub(crate) const CONNECTOR: OptionSpec = OptionSpec::new(
    "connector",
    OptionKind::Choice(&["file", "kafka"]),
    "where messages come from (required)",
);
pub(crate) const ENCODING: OptionSpec = OptionSpec::new(
    "encoding",
    OptionKind::Text,
    "how messages are decoded: `protobuf`, `json`, `avro`, `raw`, or any registered name (required); \
     `raw` gives one Binary column (`value` when not declared)",
);
const ON_ERROR: OptionSpec = OptionSpec::new(
    "on.error",
    OptionKind::Choice(&["fail", "skip", "dead_letter"]),
    "a message that does not decode stops the query with its position, is counted and \
     skipped, or is appended to the dead-letter file",
)
.default_value("fail");
const DEAD_LETTER_PATH: OptionSpec = OptionSpec::new(
    "dead_letter.path",
    OptionKind::Path,
    "with `dead_letter`: a JSON-lines file of `source`, `file` and `offset` (or `topic`, \
     `partition`, `offset`, `timestamp`, `key_base64`), `error`, `message_base64`",
);
const CONFLUENT_WIRE: OptionSpec = OptionSpec::new(
    "confluent.wire",
    OptionKind::Bool,
    "strip the Confluent schema-registry framing (magic byte, schema id, and for protobuf the \
     message-index list)",
)
.default_value("false");
pub(crate) const TIMESTAMP_UNIT: OptionSpec = OptionSpec::new(
    "timestamp.unit",
    OptionKind::Choice(&["seconds", "millis", "micros", "nanos"]),
    "the unit of integer fields read into `TIMESTAMP` columns (and of those columns)",
)
.default_value("nanos");
pub(crate) const FIELDS: OptionSpec = OptionSpec::new(
    "fields.<column>",
    OptionKind::Text,
    "bind a column to a field path (protobuf, avro) or key path (json) explicitly: `path.to.field`",
);

pub(crate) const SCAN_BOUNDED: OptionSpec = OptionSpec::new(
    "scan.bounded",
    OptionKind::Bool,
    "read to the end as of when the scan begins even with `--follow`: a static table to join \
     a stream with",
)
.default_value("false");
pub(crate) const WATERMARK_IDLE_TIMEOUT: OptionSpec = OptionSpec::new(
    "watermark.idle.timeout",
    OptionKind::Duration,
    "with a `WATERMARK`: a partition (or file reader) with no data for this long stops holding \
     the watermark back",
)
.default_value("30s");

/// What to do with a message that cannot be decoded.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum OnError {
    /// Stop the query with an error naming the message's position.
    Fail,
    /// Count it and go on.
    Skip,
    /// Append it, the error and its position to a JSON-lines file, count it and go on.
    DeadLetter,
}

/// The settings every source has, from its `WITH` options.
pub(crate) struct SourceSettings {
    pub(crate) encoding: String,
    pub(crate) on_error: OnError,
    pub(crate) dead_letter: Option<Arc<DeadLetterFile>>,
    /// `Some(message_indexes)` when the Confluent framing is stripped (`'confluent.wire'`);
    /// the encoding says whether a message-index list follows the schema id.
    pub(crate) confluent: Option<bool>,
}

impl SourceSettings {
    /// Reads the common options (the connector's and the encoding's are read by their owners).
    /// `message_indexes` is the encoding's answer to whether Confluent framing carries a
    /// message-index list.
    pub(crate) fn parse(
        name: &str,
        options: &Options,
        message_indexes: bool,
    ) -> Result<Self, SourceError> {
        let err = |e| SourceError::new(name, SourceErrorKind::Option(e));
        let encoding = options.require(&ENCODING).map_err(err)?.to_string();
        let on_error = match options.choice(&ON_ERROR).map_err(err)? {
            Some("skip") => OnError::Skip,
            Some("dead_letter") => OnError::DeadLetter,
            _ => OnError::Fail,
        };
        let dead_letter = match (on_error, options.given(&DEAD_LETTER_PATH)) {
            (OnError::DeadLetter, Some(p)) => Some(Arc::new(
                DeadLetterFile::open(p.into()).map_err(|source| {
                    SourceError::new(
                        name,
                        SourceErrorKind::DeadLetter {
                            path: p.to_string(),
                            source,
                        },
                    )
                })?,
            )),
            (OnError::DeadLetter, None) => {
                return Err(err(weir_codec::OptionError::Conflict(
                    "'on.error' = 'dead_letter' needs 'dead_letter.path'".into(),
                )))
            }
            (_, Some(_)) => {
                return Err(err(weir_codec::OptionError::Conflict(
                    "'dead_letter.path' is only used with 'on.error' = 'dead_letter'".into(),
                )))
            }
            (_, None) => None,
        };
        Ok(Self {
            encoding,
            on_error,
            dead_letter,
            confluent: options
                .flag(&CONFLUENT_WIRE)
                .map_err(err)?
                .then_some(message_indexes),
        })
    }
}

/// The connector of a source.
#[derive(Debug, Clone)]
pub(crate) enum Connector {
    /// A Kafka topic: the consumer settings of every scan (bounded unless following).
    Kafka(Box<weir_kafka::ConsumerConfig>),
    /// Files on disk.
    File(file::FileSettings),
}

impl Connector {
    /// The connector's name as SQL spells it.
    pub(crate) fn name(&self) -> &'static str {
        match self {
            Self::File(_) => "file",
            Self::Kafka(_) => "kafka",
        }
    }
}

/// A source's event-time column and how far its watermark trails the largest time seen.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct WatermarkSpec {
    /// The column's index in the source's table.
    pub(crate) column: usize,
    /// The column's name.
    pub(crate) name: String,
    /// The column's unit: every time below is in it.
    pub(crate) unit: TimeUnit,
    /// The watermark is the largest event time seen minus this.
    pub(crate) delay: i64,
    /// A channel with no data for this long stops holding the watermark back.
    pub(crate) idle_timeout: Duration,
}

/// A preparation narrowed to some decoded columns, and those columns.
type Projection = (Vec<usize>, Arc<dyn PreparedDecoder>);

/// Everything a scan of a source needs, fixed at `CREATE SOURCE`.
pub(crate) struct SourceDefinition {
    /// The source's name.
    pub(crate) name: String,
    /// Where messages come from.
    pub(crate) connector: Connector,
    /// The common settings (encoding name, error policy, framing).
    pub(crate) settings: SourceSettings,
    /// The encoding prepared for every declared column, once.
    pub(crate) prepared: Arc<dyn PreparedDecoder>,
    /// Preparations narrowed to a scan's columns, by the decoded columns they keep.
    projections: Mutex<Vec<Projection>>,
    /// Metadata columns, after the decoded ones.
    pub(crate) includes: Vec<(MetaKind, String)>,
    /// The table schema: the decoded columns, then the metadata columns.
    pub(crate) schema: SchemaRef,
    /// Keep reading at the end of the data.
    pub(crate) follow: bool,
    /// Set when a follow-mode run is asked to stop: the source ends at its next wait.
    pub(crate) stop: Arc<AtomicBool>,
    /// Counters.
    pub(crate) stats: Arc<SourceStats>,
    /// Dedup and checkpoints (`'state.dir'`), if set.
    pub(crate) state: Option<StateSpec>,
    /// `'commit.interval'`: when a step of an exactly-once sink ends.
    pub(crate) commit: CommitInterval,
    /// Whether `'commit.interval'` was written (without `'state.dir'` only a `delta` sink
    /// takes steps, so it means nothing to the others).
    pub(crate) commit_declared: bool,
    /// The event-time column and its watermark (`WATERMARK FOR`), if declared.
    pub(crate) watermark: Option<WatermarkSpec>,
    /// What a bad-message error tells the user to do (it depends on the command run).
    pub(crate) bad_message_hint: &'static str,
}

/// What [`SourceDefinition::new`] takes: everything `CREATE SOURCE` fixed.
pub(crate) struct SourceParts {
    pub(crate) name: String,
    pub(crate) connector: Connector,
    pub(crate) settings: SourceSettings,
    pub(crate) prepared: Arc<dyn PreparedDecoder>,
    pub(crate) includes: Vec<(MetaKind, String)>,
    pub(crate) follow: bool,
    pub(crate) stop: Arc<AtomicBool>,
    pub(crate) bad_message_hint: &'static str,
    /// The counters (made before the encoding is prepared: a registry counts schema ids in
    /// them).
    pub(crate) stats: Arc<SourceStats>,
    pub(crate) state: Option<StateSpec>,
    pub(crate) commit: CommitInterval,
    pub(crate) commit_declared: bool,
    pub(crate) watermark: Option<WatermarkSpec>,
}

impl SourceDefinition {
    /// The table schema of a source: `prepared`'s decoded columns, then the metadata columns
    /// `includes` (what the state and watermark settings are checked against before the
    /// definition is made).
    pub(crate) fn table_schema(
        prepared: &dyn PreparedDecoder,
        includes: &[(MetaKind, String)],
    ) -> SchemaRef {
        let decoded = prepared.schema();
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

    /// The definition `parts` make; its schema is [`Self::table_schema`]'s.
    pub(crate) fn new(parts: SourceParts) -> Self {
        let schema = Self::table_schema(parts.prepared.as_ref(), &parts.includes);
        Self {
            name: parts.name,
            connector: parts.connector,
            settings: parts.settings,
            prepared: parts.prepared,
            projections: Mutex::default(),
            includes: parts.includes,
            schema,
            follow: parts.follow,
            stop: parts.stop,
            stats: parts.stats,
            state: parts.state,
            commit: parts.commit,
            commit_declared: parts.commit_declared,
            watermark: parts.watermark,
            bad_message_hint: parts.bad_message_hint,
        }
    }

    /// Decoded columns (the table's first columns; the metadata columns follow).
    pub(crate) fn decoded_columns(&self) -> usize {
        self.schema.fields().len() - self.includes.len()
    }

    /// The encoding prepared for the decoded columns `keep` (indexes into the table), compiled
    /// once per distinct projection.
    pub(crate) fn prepared_for(
        &self,
        keep: &[usize],
    ) -> Result<Arc<dyn PreparedDecoder>, SourceError> {
        if keep.len() == self.decoded_columns() && keep.iter().enumerate().all(|(i, &c)| i == c) {
            return Ok(Arc::clone(&self.prepared));
        }
        let mut cache = self.projections.lock().unwrap_or_else(|e| e.into_inner());
        if let Some((_, p)) = cache.iter().find(|(k, _)| k == keep) {
            return Ok(Arc::clone(p));
        }
        let p = self.prepared.project(keep).map_err(|source| {
            SourceError::new(
                &self.name,
                SourceErrorKind::Encoding {
                    encoding: self.settings.encoding.clone(),
                    source,
                },
            )
        })?;
        cache.push((keep.to_vec(), Arc::clone(&p)));
        Ok(p)
    }
}

impl fmt::Debug for SourceDefinition {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("SourceDefinition")
            .field("name", &self.name)
            .field("connector", &self.connector.name())
            .field("encoding", &self.settings.encoding)
            .finish()
    }
}
