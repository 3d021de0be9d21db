//! The `delta` sink's options, declared once, and the settings they parse into.

use weir_codec::{OptionError, OptionKind, OptionSpec, Options};

use crate::sink::SinkError;

/// The `delta` sink's own options (the object-storage options come beside them).
pub(crate) const DELTA_OPTIONS: &[OptionSpec] = &[
    TABLE_PATH,
    PARTITION_BY,
    TARGET_FILE_SIZE,
    CHECKPOINT_INTERVAL,
    COMPACTION_INTERVAL,
    SCHEMA_EVOLUTION,
    APP_ID,
    COMPRESSION,
    PARALLELISM,
];

/// The table's place.
pub(crate) const TABLE_PATH: OptionSpec = OptionSpec::new(
    "path",
    OptionKind::Text,
    "the table: a local directory or an `s3://`, `gs://`, `az://`, `abfss://` or `file://` URL \
     (required)",
);
const PARTITION_BY: OptionSpec = OptionSpec::new(
    "partition.by",
    OptionKind::List,
    "columns the table is partitioned by when weir creates it (an existing table keeps its own)",
);
const TARGET_FILE_SIZE: OptionSpec = OptionSpec::new(
    "target.file.size",
    OptionKind::Bytes,
    "a data file is closed and another begun once it reaches this size",
)
.default_value("128MB");
const CHECKPOINT_INTERVAL: OptionSpec = OptionSpec::new(
    "checkpoint.interval",
    OptionKind::Count,
    "a Delta checkpoint every this many commits (`delta.checkpointInterval` of a table weir \
     creates)",
)
.default_value("10");
const COMPACTION_INTERVAL: OptionSpec = OptionSpec::new(
    "compaction.interval",
    OptionKind::Count,
    "every this many table versions, the table's files below `target.file.size` are compacted \
     into files of about that size, within each partition (Delta's OPTIMIZE: a commit of its own \
     that changes no rows; the old files stay until `VACUUM`); `0`: never (run `weir compact` instead)",
)
.default_value("100");
const SCHEMA_EVOLUTION: OptionSpec = OptionSpec::new(
    "schema.evolution",
    OptionKind::Choice(&["none", "add_columns"]),
    "`add_columns`: columns of the query that an existing table lacks are added to it \
     (nullable); `none`: any difference is an error naming every column",
)
.default_value("none");
const APP_ID: OptionSpec = OptionSpec::new(
    "app.id",
    OptionKind::Text,
    "the writer's name in the table's transaction (`txn`) actions: `<app.id>` holds the last \
     step, `<app.id>/<partition>` the next offset of each source partition; the sink's name \
     when absent",
);
const COMPRESSION: OptionSpec = OptionSpec::new(
    "compression",
    OptionKind::Choice(&["zstd", "snappy", "none"]),
    "the data files' page compression",
)
.default_value("snappy");

const PARALLELISM: OptionSpec = OptionSpec::new(
    "sink.parallelism",
    OptionKind::Count,
    "the most threads that encode and upload a step's data files: one does while it keeps up \
     with the rows, another starts (with files of its own) whenever every one has a full queue; \
     half the cores (`--partitions`), at least one, when absent",
);

/// What a `delta` sink was declared with.
#[derive(Debug, Clone)]
pub(crate) struct DeltaSettings {
    /// A local path or URL.
    pub(crate) path: String,
    /// Partition columns of a table weir creates.
    pub(crate) partition_by: Vec<String>,
    /// Bytes at which a data file is rolled.
    pub(crate) target_file_size: u64,
    /// Commits between checkpoints.
    pub(crate) checkpoint_interval: u64,
    /// Commits between compactions (0: none).
    pub(crate) compaction_interval: u64,
    /// Add the query's new columns to an existing table.
    pub(crate) add_columns: bool,
    /// The writer's name in the table's `txn` actions.
    pub(crate) app_id: String,
    /// The data files' compression.
    pub(crate) compression: parquet::basic::Compression,
    /// The most threads writing data files (`None`: half the cores).
    pub(crate) parallelism: Option<usize>,
}

impl DeltaSettings {
    /// Reads the options of the sink `sink`.
    pub(crate) fn parse(sink: &str, options: &Options) -> Result<Self, SinkError> {
        let target_file_size = options.bytes(&TARGET_FILE_SIZE)?.unwrap_or(0) as u64;
        let checkpoint_interval = options
            .count(&CHECKPOINT_INTERVAL)?
            .filter(|&n| n > 0)
            .ok_or_else(|| {
                OptionError::invalid(
                    &CHECKPOINT_INTERVAL,
                    CHECKPOINT_INTERVAL.key,
                    options.text(&CHECKPOINT_INTERVAL).unwrap_or(""),
                    "a positive number",
                )
            })?;
        let compression = match options.choice(&COMPRESSION)? {
            Some("zstd") => parquet::basic::Compression::ZSTD(parquet::basic::ZstdLevel::default()),
            Some("none") => parquet::basic::Compression::UNCOMPRESSED,
            _ => parquet::basic::Compression::SNAPPY,
        };
        Ok(Self {
            path: options.require(&TABLE_PATH)?.to_string(),
            partition_by: options.list(&PARTITION_BY),
            target_file_size,
            checkpoint_interval,
            compaction_interval: options.count(&COMPACTION_INTERVAL)?.unwrap_or(0),
            add_columns: options.choice(&SCHEMA_EVOLUTION)? == Some("add_columns"),
            app_id: options
                .text(&APP_ID)
                .filter(|a| !a.trim().is_empty())
                .unwrap_or(sink)
                .to_string(),
            compression,
            parallelism: match options.count(&PARALLELISM)? {
                Some(0) => {
                    return Err(OptionError::invalid(
                        &PARALLELISM,
                        PARALLELISM.key,
                        "0",
                        "a positive number",
                    )
                    .into())
                }
                n => n.map(|n| usize::try_from(n).unwrap_or(usize::MAX)),
            },
        })
    }
}
