//! The sinks' options, declared once, and the settings they parse into.

use std::path::PathBuf;

use parquet::basic::{Compression, ZstdLevel};
use parquet::file::properties::WriterProperties;
use weir_codec::Framing;
use weir_codec::{OptionError, OptionKind, OptionSpec, Options};

use super::{SinkError, SinkFormat};

/// The option every sink has.
pub(crate) const SINK_CONNECTOR_OPTIONS: &[OptionSpec] = &[CONNECTOR];

/// The `parquet` sink's options.
pub(crate) const PARQUET_OPTIONS: &[OptionSpec] =
    &[PATH, COMPRESSION, ROW_GROUP_SIZE, SINK_PARALLELISM];
/// The `ipc` sink's options.
pub(crate) const IPC_OPTIONS: &[OptionSpec] = &[PATH, IPC_FORMAT];
/// The `file` sink's options (besides its encoder's).
pub(crate) const FILE_SINK_OPTIONS: &[OptionSpec] = &[PATH, ENCODING, FRAMING, SINK_PARALLELISM];
/// The `stdout` sink's options.
pub(crate) const STDOUT_OPTIONS: &[OptionSpec] = &[FORMAT, SINK_PARALLELISM];

const CONNECTOR: OptionSpec = OptionSpec::new(
    "connector",
    OptionKind::Choice(&["parquet", "ipc", "file", "stdout", "delta", "kafka"]),
    "the sink (required)",
);
const PATH: OptionSpec = OptionSpec::new(
    "path",
    OptionKind::Path,
    "the output file (directories are created); for a sink fed straight from a source with \
     state, a directory of step files; a local path, a `file://` URL, or an `s3://`, `gs://`, \
     `az://` or `abfss://` URL (see [object storage](#delta-lake-tables-on-object-storage)) \
     (required)",
);
const COMPRESSION: OptionSpec = OptionSpec::new(
    "compression",
    OptionKind::Choice(&["zstd", "snappy", "none"]),
    "parquet: the page compression",
)
.default_value("zstd");
const ROW_GROUP_SIZE: OptionSpec = OptionSpec::new(
    "row_group_size",
    OptionKind::Count,
    "parquet: rows per row group",
)
.default_value("1048576");
const SINK_PARALLELISM: OptionSpec = OptionSpec::new(
    "sink.parallelism",
    OptionKind::Count,
    "the threads that encode the rows, beside the one that writes them: a Parquet file's \
     threads each encode a share of its columns (at most one a column), those of messages and \
     JSON lines each a share of the batches (written in the order they came); half the cores \
     available to weir, at least one, when absent",
);
const IPC_FORMAT: OptionSpec = OptionSpec::new(
    "ipc.format",
    OptionKind::Choice(&["file", "stream"]),
    "ipc: the Arrow IPC file or stream format",
)
.default_value("file");
const ENCODING: OptionSpec = OptionSpec::new(
    "encoding",
    OptionKind::Text,
    "file: each row becomes one message of this encoding: `json`, `protobuf`, `raw` (a Binary or Utf8 \
     column's bytes), or any name registered with an encoder (required)",
);
const FRAMING: OptionSpec = OptionSpec::new(
    "framing",
    OptionKind::Choice(&["varint", "u32be", "lines"]),
    "file: how messages are delimited, as for sources",
)
.default_value("varint");
const FORMAT: OptionSpec = OptionSpec::new(
    "format",
    OptionKind::Choice(&["jsonl", "table"]),
    "stdout: JSON lines, or a table",
)
.default_value("jsonl");

/// A sink's settings, from its `WITH` options.
#[derive(Debug, Clone)]
pub(crate) struct SinkSettings {
    /// How rows are written.
    pub(crate) format: SinkFormat,
    /// The file (or, for an exactly-once sink, the directory); `None` for `stdout`.
    pub(crate) path: Option<PathBuf>,
    /// The `file` sink: the encoding of each message and its framing.
    pub(crate) messages: Option<(String, Framing)>,
    /// A `delta` sink (its settings are read by [`super::delta::DeltaSettings`]).
    pub(crate) delta: bool,
    /// A `kafka` sink (its settings are read by [`super::kafka::KafkaSinkSettings`]).
    pub(crate) kafka: bool,
}

impl SinkSettings {
    /// Reads a sink's options (its encoder's, for a `file` sink, are read by the encoder).
    pub(crate) fn parse(options: &Options) -> Result<Self, SinkError> {
        let connector = options
            .choice(&CONNECTOR)?
            .ok_or_else(|| OptionError::Missing {
                key: CONNECTOR.key.into(),
                doc: CONNECTOR.doc,
            })?;
        let path =
            || -> Result<PathBuf, OptionError> { Ok(PathBuf::from(options.require(&PATH)?)) };
        Ok(match connector {
            "parquet" => Self {
                format: SinkFormat::Parquet,
                path: Some(path()?),
                messages: None,
                delta: false,
                kafka: false,
            },
            "ipc" => Self {
                format: match options.choice(&IPC_FORMAT)? {
                    Some("stream") => SinkFormat::IpcStream,
                    _ => SinkFormat::IpcFile,
                },
                path: Some(path()?),
                messages: None,
                delta: false,
                kafka: false,
            },
            "file" => {
                let framing = match options.choice(&FRAMING)? {
                    Some("u32be") => Framing::U32Be,
                    Some("lines") => Framing::Lines,
                    _ => Framing::Varint,
                };
                Self {
                    format: SinkFormat::JsonLines,
                    path: Some(path()?),
                    messages: Some((options.require(&ENCODING)?.to_string(), framing)),
                    delta: false,
                    kafka: false,
                }
            }
            // A Delta table's data files are Parquet.
            "delta" => Self {
                format: SinkFormat::Parquet,
                path: None,
                messages: None,
                delta: true,
                kafka: false,
            },
            // Each row one record: its value encoded as a `file` sink's messages are (the
            // framing is Kafka's own).
            "kafka" => Self {
                format: SinkFormat::JsonLines,
                path: None,
                messages: Some((
                    options.require(&super::kafka::ENCODING)?.to_string(),
                    Framing::Varint,
                )),
                delta: false,
                kafka: true,
            },
            _ => Self {
                format: match options.choice(&FORMAT)? {
                    Some("table") => SinkFormat::Table,
                    _ => SinkFormat::JsonLines,
                },
                path: None,
                messages: None,
                delta: false,
                kafka: false,
            },
        })
    }

    /// The options a sink of `connector` declares (an unknown connector declares none).
    pub(crate) fn declared(connector: Option<&str>) -> &'static [OptionSpec] {
        match connector.map(str::to_ascii_lowercase).as_deref() {
            Some("parquet") => PARQUET_OPTIONS,
            Some("ipc") => IPC_OPTIONS,
            Some("file") => FILE_SINK_OPTIONS,
            Some("stdout") => STDOUT_OPTIONS,
            Some("delta") => super::DELTA_OPTIONS,
            Some("kafka") => super::KAFKA_SINK_OPTIONS,
            _ => &[],
        }
    }
}

/// The Parquet writer's properties from `'compression'` and `'row_group_size'`.
pub(crate) fn parquet_properties(options: &Options) -> Result<WriterProperties, SinkError> {
    let compression = match options.choice(&COMPRESSION)? {
        Some("snappy") => Compression::SNAPPY,
        Some("none") => Compression::UNCOMPRESSED,
        _ => Compression::ZSTD(ZstdLevel::default()),
    };
    let mut props = WriterProperties::builder().set_compression(compression);
    if let Some(n) = options.count(&ROW_GROUP_SIZE)? {
        let n = usize::try_from(n).ok().filter(|&n| n > 0).ok_or_else(|| {
            OptionError::invalid(
                &ROW_GROUP_SIZE,
                ROW_GROUP_SIZE.key,
                &n.to_string(),
                "a positive number",
            )
        })?;
        props = props.set_max_row_group_row_count(Some(n));
    }
    Ok(props.build())
}

/// The threads that encode a file's rows: `'sink.parallelism'`, or half the cores this
/// process may use (the readers decode on the others), at least one.
pub(crate) fn encoder_threads(options: &Options) -> Result<usize, SinkError> {
    match options.count(&SINK_PARALLELISM)? {
        Some(0) => Err(OptionError::invalid(
            &SINK_PARALLELISM,
            SINK_PARALLELISM.key,
            "0",
            "a positive number",
        )
        .into()),
        Some(n) => Ok(usize::try_from(n).unwrap_or(usize::MAX)),
        None => Ok(std::thread::available_parallelism().map_or(1, |n| (n.get() / 2).max(1))),
    }
}
