//! # weir
//!
//! The engine: SQL sources over weir-codec decoders, DataFusion queries, and sinks. This crate
//! owns the SQL statements weir adds (`CREATE SOURCE`, `CREATE SINK`, `INSERT INTO <sink>`), the
//! file and Kafka connectors' settings, the pipeline that reads, decodes, dedups and commits, the
//! sinks, and the `weir` program. Decoding lives in `weir-codec` (a source only hands it message
//! slices), the Kafka client in `weir-kafka`, dedup state and checkpoints in `weir-dedup`.
//!
//! ```no_run
//! # async fn run() -> Result<(), weir::EngineError> {
//! let engine = weir::Engine::new(weir::EngineOptions::default());
//! let rows = engine
//!     .query(
//!         "CREATE SOURCE q (ticker VARCHAR, bid_price DOUBLE) WITH ('connector' = 'file', \
//!          'path' = 'quotes.jsonl', 'framing' = 'lines', 'encoding' = 'json'); \
//!          SELECT ticker, max(bid_price) FROM q GROUP BY ticker",
//!     )
//!     .await?;
//! # Ok(()) }
//! ```
//!
//! Modules: `engine` (statements, wiring, reports), `metrics` (what `/metrics` exposes, read
//! at scrape time, and the HTTP endpoint), `source` (what `CREATE SOURCE` defines),
//! `pipeline` (read -> decode -> dedup -> step files -> commit), `sink` (writers and their
//! options), `sql` (weir's statements), `output` (where `SELECT` rows go).

mod continuous;
mod engine;
mod error;
mod kafka_security;
mod metrics;
mod output;
mod pipeline;
mod registry;
mod sink;
mod source;
mod sql;
mod storage;

pub use engine::{
    Engine, EngineOptions, ReaderTimes, SinkReport, SourceReport, SourceStatsHandle,
    WindowStateReport, SQL_BAD_MESSAGE_HINT,
};
pub use error::{df_message, EngineError, FileError, SourceError, SourceErrorKind, StatementError};
pub use metrics::server::MetricsServer;
pub use metrics::MetricsHandle;
pub use output::{ResultOutput, ResultWriter, StdoutFormat};
pub use pipeline::reader::file_feed::{for_each_message, MessagesError};
pub use registry::client::RegistryError;
pub use registry::{register_schema, SchemaType};
pub use sink::delta::{compact_delta_table, Compaction};
pub use sink::SinkError;
pub use sql::SqlError;

/// The option tables the README documents, by the heading that shows each: every declaration
/// of the engine's connectors, sinks and built-in encodings (a test keeps the README in step).
pub fn option_tables() -> Vec<(&'static str, &'static [weir_codec::OptionSpec])> {
    vec![
        ("source", source::SOURCE_OPTIONS),
        ("file", source::file::FILE_OPTIONS),
        ("kafka", source::kafka::KAFKA_OPTIONS),
        ("kafka security", &kafka_security::KAFKA_SECURITY_OPTIONS),
        ("state", source::state::STATE_OPTIONS),
        ("schema registry", registry::REGISTRY_OPTIONS),
        ("protobuf", weir_codec::PROTOBUF_OPTIONS),
        ("json", weir_codec::JSON_OPTIONS),
        ("avro", weir_codec::AVRO_OPTIONS),
        ("sink", sink::SINK_CONNECTOR_OPTIONS),
        ("parquet", sink::PARQUET_OPTIONS),
        ("ipc", sink::IPC_OPTIONS),
        ("file sink", sink::FILE_SINK_OPTIONS),
        ("raw encoder", weir_codec::RAW_ENCODER_OPTIONS),
        ("stdout", sink::STDOUT_OPTIONS),
        ("delta", sink::DELTA_OPTIONS),
        ("kafka sink", sink::KAFKA_SINK_OPTIONS),
        ("object storage", storage::STORAGE_OPTIONS),
    ]
}
