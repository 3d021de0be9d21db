//! Sources: what `CREATE SOURCE` defines. A [`SourceDefinition`] holds everything fixed when the
//! statement runs: the connector's settings, the encoding prepared once for the declared columns,
//! the metadata columns, the error policy and the state settings. Reading it is the pipeline's
//! job (`crate::pipeline`), which also makes it a DataFusion table (`pipeline::table`).

pub(crate) mod dead_letter;
pub(crate) mod file;
pub(crate) mod kafka;
pub(crate) mod meta;
pub(crate) mod state;

use std::fmt;
use std::sync::Arc;

use std::time::Duration;

use arrow::datatypes::{Field, Schema, SchemaRef, TimeUnit};
use weir_codec::{OptionKind, OptionSpec, Options};

use self::dead_letter::DeadLetterFile;
use self::meta::MetaKind;
use self::state::{CommitInterval, GroupStateSpec, StateSpec};
use crate::error::{SourceError, SourceErrorKind};

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
pub(crate) const CONFLUENT_WIRE: OptionSpec = OptionSpec::new(
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
    /// A Kafka topic: the consumer settings of every scan (bounded unless following), and the
    /// consumer group whose assignment gives the partitions, if any.
    Kafka(Box<kafka::KafkaSettings>),
    /// Files on disk.
    File(file::FileSettings),
}

impl Connector {
    /// The consumer group a Kafka source joins (`'group.id'`), if any.
    pub(crate) fn group(&self) -> Option<&weir_kafka::GroupConfig> {
        match self {
            Self::Kafka(k) => k.group.as_ref(),
            Self::File(_) => None,
        }
    }

    /// Refuses a scan of a source whose partitions come from a consumer group: only the
    /// pipeline that follows the group's assignments (a `delta` or `kafka` sink fed straight
    /// from the source, or by a continuous query over it) reads one.
    pub(crate) fn refuse_group(&self, source: &str) -> Result<(), SourceError> {
        match self.group() {
            Some(g) => Err(SourceError::new(
                source,
                SourceErrorKind::Option(weir_codec::OptionError::Conflict(format!(
                    "the source joins consumer group '{}' ('group.id'), whose partitions move \
                     between processes; only a `delta` or `kafka` sink fed straight from it \
                     (CREATE SINK ... FROM {source}) or by a continuous query over it, run with \
                     --follow, follows them. Query it without 'group.id', or split the topic \
                     with 'partitions'",
                    g.group_id
                ))),
            )),
            None => Ok(()),
        }
    }

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

/// What `CREATE SOURCE` declared, as checked and resolved then; never changed afterwards. What
/// a run changes (counters, the stop flag) and the decoder prepared for the columns are the
/// engine's, in `pipeline::live_source::LiveSource`.
pub(crate) struct SourceDefinition {
    /// The source's name.
    pub(crate) name: String,
    /// Where messages come from.
    pub(crate) connector: Connector,
    /// The common settings (encoding name, error policy, framing).
    pub(crate) settings: SourceSettings,
    /// Metadata columns, after the decoded ones.
    pub(crate) includes: Vec<(MetaKind, String)>,
    /// The table schema: the decoded columns, then the metadata columns.
    pub(crate) schema: SchemaRef,
    /// Keep reading at the end of the data.
    pub(crate) follow: bool,
    /// Dedup and checkpoints (`'state.dir'`), if set.
    pub(crate) state: Option<StateSpec>,
    /// With `'group.id'`, `'state.dir'` and `'dedup.key'`: the partitions' dedup keys, which
    /// move with them (`state` is then `None`).
    pub(crate) group_state: Option<GroupStateSpec>,
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

impl SourceDefinition {
    /// The table schema of a source: the `decoded` columns (the prepared encoding's), then the
    /// metadata columns `includes` (what the state and watermark settings are checked against
    /// before the definition is made).
    pub(crate) fn table_schema(decoded: &Schema, includes: &[(MetaKind, String)]) -> SchemaRef {
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

    /// Decoded columns (the table's first columns; the metadata columns follow).
    pub(crate) fn decoded_columns(&self) -> usize {
        self.schema.fields().len() - self.includes.len()
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
