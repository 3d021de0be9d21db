//! The engine: a DataFusion session plus weir's encoding registry, sources and sinks.

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, RwLock};

use arrow::datatypes::{DataType, SchemaRef, TimeUnit};
use arrow::record_batch::RecordBatch;
use datafusion::error::DataFusionError;
use datafusion::logical_expr::LogicalPlan;
use datafusion::prelude::{SessionConfig, SessionContext};
use datafusion::sql::sqlparser::ast::DataType as SqlDataType;
use futures::StreamExt;
use weir_codec::{
    parse_time_unit, CodecError, ColumnSpec, DecoderFactory, DecoderRequest, EncoderFactory,
    EncoderRequest, JsonFactory, Options, ProtobufFactory, RawFactory,
};

use crate::checkpoint::StepFiles;
use crate::encode::JsonEncoderFactory;
use crate::sink::{open_writer, BatchWriter, MessageFileSink, SinkError, SinkFormat, Target};
use crate::source::framing::Framing;
use crate::source::state::{run_steps, StateSpec};
use crate::source::{
    table_schema, Connector, DeadLetterFile, MetaKind, OnError, SourceConfig, SourceStats,
    SourceTable,
};
use crate::sql::{parse_script, CreateSink, CreateSource, SqlError, SqlText, Statement};

/// Why a statement failed.
#[derive(Debug, thiserror::Error)]
pub enum EngineError {
    /// The script does not parse.
    #[error(transparent)]
    Sql(#[from] SqlError),
    /// A statement at a known place failed.
    #[error("statement at line {line}: {message}")]
    Statement {
        /// Where the statement starts.
        line: u64,
        /// What failed.
        message: String,
    },
    /// Registering an encoding failed.
    #[error("{0}")]
    Registry(String),
    /// A sink failed while finishing.
    #[error("sink {sink}: {error}")]
    Sink {
        /// The sink.
        sink: String,
        /// The cause.
        error: SinkError,
    },
    /// A query outside a script failed.
    #[error("{}", df_message(.0))]
    DataFusion(#[from] DataFusionError),
}

/// A DataFusion error as a user should read it: weir's own errors without DataFusion's wrapping.
pub fn df_message(e: &DataFusionError) -> String {
    match e.find_root() {
        DataFusionError::External(inner) => inner.to_string(),
        root => root.to_string(),
    }
}

/// The encodings an engine knows, by name.
#[derive(Clone, Default)]
struct Encoding {
    decoder: Option<Arc<dyn DecoderFactory>>,
    encoder: Option<Arc<dyn EncoderFactory>>,
}

/// Settings of an [`Engine`].
#[derive(Debug, Clone)]
pub struct EngineOptions {
    /// Keep reading at the end of sources; sink pipelines run until stopped.
    pub follow: bool,
    /// Decoders per source scan (and DataFusion's target partitions); 0 means one per core.
    pub partitions: usize,
    /// Rows per batch.
    pub batch_size: usize,
}

impl Default for EngineOptions {
    fn default() -> Self {
        Self {
            follow: false,
            partitions: 0,
            batch_size: weir_codec::DEFAULT_BATCH_SIZE,
        }
    }
}

struct SinkState {
    /// The `file` sink: messages of an encoding, framed.
    messages: Option<(Arc<dyn EncoderFactory>, Framing)>,
    format: SinkFormat,
    target_path: Option<PathBuf>,
    options: Options,
    writer: Option<(SchemaRef, Box<dyn BatchWriter>)>,
    rows: u64,
}

/// What one source did during a run.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SourceReport {
    /// The source.
    pub name: String,
    /// Messages read.
    pub messages: u64,
    /// Message bytes read.
    pub bytes: u64,
    /// Messages decoded into rows.
    pub decoded: u64,
    /// Bad messages skipped.
    pub skipped: u64,
    /// Bad messages dead-lettered.
    pub dead_lettered: u64,
}

/// What one sink wrote during a run.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SinkReport {
    /// The sink.
    pub name: String,
    /// Rows written.
    pub rows: u64,
    /// Its file, if any.
    pub path: Option<PathBuf>,
}

/// Receives the rows of `SELECT` statements run by [`Engine::run_script`].
pub trait ResultOutput: Send {
    /// A statement's rows begin.
    fn begin(&mut self, schema: &SchemaRef) -> Result<(), SinkError>;
    /// One batch of rows.
    fn batch(&mut self, batch: &RecordBatch) -> Result<(), SinkError>;
    /// The statement's rows end.
    fn end(&mut self) -> Result<(), SinkError>;
}

/// weir's engine: SQL over sources, into sinks.
pub struct Engine {
    ctx: SessionContext,
    options: EngineOptions,
    encodings: RwLock<BTreeMap<String, Encoding>>,
    sources: Arc<Mutex<Vec<Arc<SourceConfig>>>>,
    sinks: Mutex<BTreeMap<String, Arc<tokio::sync::Mutex<SinkState>>>>,
    pipelines: Mutex<Vec<tokio::task::JoinHandle<Result<(), EngineError>>>>,
    stop: Arc<AtomicBool>,
}

impl Engine {
    /// An engine with the built-in encodings `protobuf` and `raw` registered.
    pub fn new(options: EngineOptions) -> Self {
        let mut config = SessionConfig::new().with_batch_size(options.batch_size);
        if options.partitions > 0 {
            config = config.with_target_partitions(options.partitions);
        }
        // In follow mode rows must reach the sink as they arrive, not when a batch fills up.
        if options.follow {
            config.options_mut().execution.coalesce_batches = false;
        }
        // weir's decoders produce Utf8; keep SQL string types on Utf8 to match.
        config.options_mut().sql_parser.map_string_types_to_utf8view = false;
        let engine = Self {
            ctx: SessionContext::new_with_config(config),
            options,
            encodings: RwLock::default(),
            sources: Arc::default(),
            sinks: Mutex::default(),
            pipelines: Mutex::default(),
            stop: Arc::default(),
        };
        let builtins: [(&str, Arc<dyn DecoderFactory>); 3] = [
            ("protobuf", Arc::new(ProtobufFactory)),
            ("json", Arc::new(JsonFactory)),
            ("raw", Arc::new(RawFactory)),
        ];
        let raw_encoder: Arc<dyn EncoderFactory> = Arc::new(RawFactory);
        let json_encoder: Arc<dyn EncoderFactory> = Arc::new(JsonEncoderFactory);
        {
            let mut encodings = engine.encodings.write().unwrap_or_else(|e| e.into_inner());
            for (name, factory) in builtins {
                encodings.entry(name.to_string()).or_default().decoder = Some(factory);
            }
            encodings.entry("raw".into()).or_default().encoder = Some(raw_encoder);
            encodings.entry("json".into()).or_default().encoder = Some(json_encoder);
        }
        engine
    }

    /// The DataFusion session (for registering tables or functions of your own).
    pub fn session(&self) -> &SessionContext {
        &self.ctx
    }

    /// Registers an encoding under `name`, as `'encoding' = '<name>'` in SQL selects it. A name
    /// already registered (built-ins included) is replaced.
    pub fn register_encoding(
        &self,
        name: &str,
        decoder: Option<Arc<dyn DecoderFactory>>,
        encoder: Option<Arc<dyn EncoderFactory>>,
    ) -> Result<(), EngineError> {
        if name.trim().is_empty() {
            return Err(EngineError::Registry(
                "an encoding name cannot be empty".into(),
            ));
        }
        if decoder.is_none() && encoder.is_none() {
            return Err(EngineError::Registry(format!(
                "encoding '{name}' needs a decoder factory, an encoder factory or both"
            )));
        }
        self.encodings
            .write()
            .unwrap_or_else(|e| e.into_inner())
            .insert(name.to_string(), Encoding { decoder, encoder });
        Ok(())
    }

    /// The encoder factory registered under `name`, if any.
    pub fn encoder(&self, name: &str) -> Option<Arc<dyn EncoderFactory>> {
        self.encodings
            .read()
            .unwrap_or_else(|e| e.into_inner())
            .get(name)
            .and_then(|e| e.encoder.clone())
    }

    fn decoder_factory(&self, name: &str) -> Result<Arc<dyn DecoderFactory>, String> {
        let encodings = self.encodings.read().unwrap_or_else(|e| e.into_inner());
        match encodings.get(name).and_then(|e| e.decoder.clone()) {
            Some(f) => Ok(f),
            None => Err(format!(
                "unknown encoding '{name}'; registered encodings with a decoder: {}",
                encodings
                    .iter()
                    .filter(|(_, e)| e.decoder.is_some())
                    .map(|(n, _)| n.as_str())
                    .collect::<Vec<_>>()
                    .join(", ")
            )),
        }
    }

    /// Runs every statement of `script` in order. `SELECT` rows go to `output`. In follow mode,
    /// sink pipelines keep running in the background; see [`Engine::wait`].
    pub async fn run_script(
        &self,
        script: &str,
        output: &mut dyn ResultOutput,
    ) -> Result<(), EngineError> {
        for stmt in parse_script(script)? {
            self.run_statement(stmt, output).await?;
        }
        Ok(())
    }

    async fn run_statement(
        &self,
        stmt: Statement,
        output: &mut dyn ResultOutput,
    ) -> Result<(), EngineError> {
        match stmt {
            Statement::CreateSource(s) => {
                let line = s.position.line;
                self.create_source(s)
                    .await
                    .map_err(|message| EngineError::Statement { line, message })
            }
            Statement::CreateSink(s) => self.create_sink(s).await,
            Statement::Insert {
                target,
                query,
                whole,
            } => {
                let is_sink = self
                    .sinks
                    .lock()
                    .unwrap_or_else(|e| e.into_inner())
                    .contains_key(&target);
                if is_sink {
                    self.write_to_sink(&target, query).await
                } else {
                    self.run_query(whole, output).await
                }
            }
            Statement::Other(text) => self.run_query(text, output).await,
        }
    }

    async fn run_query(
        &self,
        text: SqlText,
        output: &mut dyn ResultOutput,
    ) -> Result<(), EngineError> {
        let line = text.start.line;
        let at = |e: DataFusionError| EngineError::Statement {
            line,
            message: df_message(&e),
        };
        let df = self.ctx.sql(&text.padded).await.map_err(at)?;
        let prints = !matches!(
            df.logical_plan(),
            LogicalPlan::Ddl(_) | LogicalPlan::Statement(_) | LogicalPlan::EmptyRelation(_)
        );
        let schema: SchemaRef = Arc::new(df.schema().as_arrow().clone());
        let mut stream = df.execute_stream().await.map_err(at)?;
        let sink_err = |e: SinkError| EngineError::Statement {
            line,
            message: format!("cannot write the result: {e}"),
        };
        if prints {
            output.begin(&schema).map_err(sink_err)?;
        }
        while let Some(batch) = stream.next().await {
            let batch = batch.map_err(at)?;
            if prints {
                output.batch(&batch).map_err(sink_err)?;
            }
        }
        if prints {
            output.end().map_err(sink_err)?;
        }
        Ok(())
    }

    async fn sql_type(&self, ty: &SqlDataType) -> Result<DataType, String> {
        // DataFusion's own SQL-to-Arrow type mapping, so a column type means exactly what it
        // means in a DataFusion CAST.
        let plan = self
            .ctx
            .state()
            .create_logical_plan(&format!("SELECT CAST(NULL AS {ty})"))
            .await
            .map_err(|e| format!("type {ty}: {}", df_message(&e)))?;
        Ok(plan.schema().field(0).data_type().clone())
    }

    async fn create_source(&self, s: CreateSource) -> Result<(), String> {
        let name = s.name.clone();
        if self
            .ctx
            .table_exist(name.as_str())
            .map_err(|e| df_message(&e))?
        {
            if s.if_not_exists {
                return Ok(());
            }
            return Err(format!("a source or table named '{name}' already exists"));
        }
        let options = Options::new(s.options.clone());
        let connector_name = options
            .get("connector")
            .ok_or_else(|| {
                format!("source {name}: option 'connector' is required ('file' or 'kafka')")
            })?
            .to_ascii_lowercase();
        let connector = match connector_name.as_str() {
            "file" => {
                let path = options
                    .get("path")
                    .ok_or_else(|| format!("source {name}: the file connector needs 'path' (a file, directory or glob)"))?
                    .to_string();
                let framing: Framing = options
                    .get("framing")
                    .unwrap_or("varint")
                    .parse()
                    .map_err(|e| format!("source {name}: {e}"))?;
                let max_message_bytes = match options.get("max.message.bytes") {
                    Some(v) => v.parse().map_err(|_| {
                        format!("source {name}: 'max.message.bytes' = '{v}' is not a number")
                    })?,
                    None => 64 << 20,
                };
                // Fail now, not at the first query, when the path names nothing.
                crate::source::file::expand_path(&path)
                    .map_err(|e| format!("source {name}: {e}"))?;
                Connector::File {
                    path,
                    framing,
                    max_message_bytes,
                }
            }
            "kafka" => {
                Connector::Kafka(kafka_config(&options).map_err(|e| format!("source {name}: {e}"))?)
            }
            other => {
                return Err(format!(
                    "source {name}: unknown connector '{other}'; expected 'file' or 'kafka'"
                ))
            }
        };
        let encoding = options
            .get("encoding")
            .ok_or_else(|| {
                format!("source {name}: option 'encoding' is required (for example 'protobuf')")
            })?
            .to_string();
        let factory = self
            .decoder_factory(&encoding)
            .map_err(|e| format!("source {name}: {e}"))?;
        let on_error: OnError = options
            .get("on.error")
            .unwrap_or("fail")
            .parse()
            .map_err(|e| format!("source {name}: {e}"))?;
        let dead_letter = match (on_error, options.get("dead_letter.path")) {
            (OnError::DeadLetter, Some(p)) => {
                Some(Arc::new(DeadLetterFile::open(PathBuf::from(p)).map_err(
                    |e| format!("source {name}: cannot open the dead-letter file {p}: {e}"),
                )?))
            }
            (OnError::DeadLetter, None) => {
                return Err(format!(
                    "source {name}: 'on.error' = 'dead_letter' needs 'dead_letter.path'"
                ))
            }
            (_, Some(_)) => {
                return Err(format!(
                "source {name}: 'dead_letter.path' is only used with 'on.error' = 'dead_letter'"
            ))
            }
            _ => None,
        };
        let confluent = options
            .get_bool("confluent.wire", false)
            .map_err(|e| format!("source {name}: {e}"))?
            .then(|| factory.confluent_message_indexes());
        let unit = options
            .get("timestamp.unit")
            .map(|u| parse_time_unit("timestamp.unit", u))
            .transpose()
            .map_err(|e| format!("source {name}: {e}"))?;

        let mut columns = Vec::new();
        for c in &s.columns {
            let mut ty = self.sql_type(&c.sql_type).await.map_err(|e| {
                format!(
                    "source {name}, column {} (line {}, column {}): {e}",
                    c.name, c.position.line, c.position.column
                )
            })?;
            // 'timestamp.unit' sets the unit of TIMESTAMP columns declared without a precision.
            if let (Some(unit), SqlDataType::Timestamp(None, _), DataType::Timestamp(_, tz)) =
                (unit, &c.sql_type, &ty)
            {
                ty = DataType::Timestamp(unit, tz.clone());
            }
            if columns.iter().any(|x: &ColumnSpec| x.name == c.name) {
                return Err(format!(
                    "source {name}: column '{}' is declared twice",
                    c.name
                ));
            }
            columns.push(ColumnSpec::new(c.name.clone(), ty));
        }
        // 'fields.<column>' = 'path.to.field' binds a column to a field path explicitly.
        for (column, path) in options.with_prefix("fields.") {
            match columns.iter_mut().find(|c| c.name == column) {
                Some(c) => c.path = Some(path),
                None => {
                    return Err(format!(
                    "source {name}: option 'fields.{column}' names no declared column '{column}'"
                ))
                }
            }
        }
        if s.infer_rest {
            let rest = factory
                .default_columns(&options)
                .map_err(|e| format!("source {name}: {e}"))?;
            for c in rest {
                if !columns.iter().any(|x| x.name == c.name) {
                    let data_type = match (&c.data_type, unit) {
                        (DataType::Timestamp(TimeUnit::Nanosecond, tz), Some(u)) => {
                            DataType::Timestamp(u, tz.clone())
                        }
                        (t, _) => t.clone(),
                    };
                    columns.push(ColumnSpec::new(c.name, data_type));
                }
            }
        }
        let mut includes = Vec::new();
        for inc in &s.includes {
            let kind = MetaKind::parse(&inc.kind, connector.name()).map_err(|e| {
                format!(
                    "source {name} (line {}, column {}): {e}",
                    inc.position.line, inc.position.column
                )
            })?;
            let col = inc
                .alias
                .clone()
                .unwrap_or_else(|| kind.default_name().to_string());
            if columns.iter().any(|c| c.name == col) || includes.iter().any(|(_, n)| n == &col) {
                return Err(format!(
                    "source {name}: INCLUDE {} AS {col} clashes with another column named '{col}'",
                    inc.kind
                ));
            }
            includes.push((kind, col));
        }
        // Build one decoder now: every schema and type error shows up at CREATE SOURCE.
        let probe = factory
            .create_decoder(&DecoderRequest {
                source: &name,
                columns: &columns,
                options: &options,
                batch_size: self.options.batch_size,
            })
            .map_err(|e| codec_message(&name, &encoding, &e))?;
        // The state options are read below, once the table schema is known.
        for k in [
            "state.dir",
            "dedup.key",
            "dedup.time_column",
            "dedup.ttl",
            "dedup.hash",
            "dedup.block_cache",
            "dedup.recent_keys",
            "commit.interval",
        ] {
            options.get(k);
        }
        let unread = options.unread();
        if !unread.is_empty() {
            return Err(format!(
                "source {name}: unknown option(s) {} for connector '{}' and encoding '{encoding}'",
                unread
                    .iter()
                    .map(|k| format!("'{k}'"))
                    .collect::<Vec<_>>()
                    .join(", "),
                connector.name()
            ));
        }
        let decoded = probe.schema();
        if decoded.fields().len() != columns.len() {
            return Err(format!(
                "source {name}: encoding '{encoding}' produced {} columns for {} declared",
                decoded.fields().len(),
                columns.len()
            ));
        }
        let schema = table_schema(&decoded, &includes);
        let state = StateSpec::from_options(&options, &schema)
            .map_err(|e| format!("source {name}: {e}"))?;
        let config = Arc::new(SourceConfig {
            name: name.clone(),
            connector,
            encoding,
            factory,
            options,
            columns,
            includes,
            schema,
            on_error,
            dead_letter,
            confluent,
            batch_size: self.options.batch_size,
            follow: self.options.follow,
            stop: Arc::clone(&self.stop),
            stats: Arc::new(SourceStats::default()),
            state,
        });
        let partitions = self.ctx.state().config().target_partitions();
        self.ctx
            .register_table(
                name.as_str(),
                Arc::new(SourceTable::new(Arc::clone(&config), partitions)),
            )
            .map_err(|e| df_message(&e))?;
        self.sources
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .push(config);
        Ok(())
    }

    async fn create_sink(&self, s: CreateSink) -> Result<(), EngineError> {
        let line = s.position.line;
        let err = |message: String| EngineError::Statement { line, message };
        let name = s.name.clone();
        if self
            .sinks
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .contains_key(&name)
        {
            return Err(err(format!("a sink named '{name}' already exists")));
        }
        let options = Options::new(s.options.clone());
        let connector = options
            .get("connector")
            .ok_or_else(|| {
                err(format!(
                    "sink {name}: option 'connector' is required ('parquet', 'ipc' or 'stdout')"
                ))
            })?
            .to_ascii_lowercase();
        let mut messages = None;
        let (format, target_path) = match connector.as_str() {
            "parquet" | "ipc" => {
                let path = options.get("path").ok_or_else(|| {
                    err(format!(
                        "sink {name}: the {connector} connector needs 'path'"
                    ))
                })?;
                let format = match (connector.as_str(), options.get("ipc.format")) {
                    ("parquet", None) => SinkFormat::Parquet,
                    ("ipc", None | Some("file")) => SinkFormat::IpcFile,
                    ("ipc", Some("stream")) => SinkFormat::IpcStream,
                    (_, Some(f)) => {
                        return Err(err(format!(
                            "sink {name}: 'ipc.format' = '{f}': expected 'file' or 'stream'"
                        )))
                    }
                    _ => unreachable!("connector matched above"),
                };
                (format, Some(PathBuf::from(path)))
            }
            "file" => {
                let path = options
                    .get("path")
                    .ok_or_else(|| err(format!("sink {name}: the file connector needs 'path'")))?;
                let encoding = options.get("encoding").ok_or_else(|| {
                    err(format!("sink {name}: the file connector needs 'encoding' (for example 'json' or 'raw')"))
                })?;
                let factory = self.encoder(encoding).ok_or_else(|| {
                    err(format!(
                        "sink {name}: no encoder is registered for encoding '{encoding}'; encodings with an encoder: {}",
                        self.encodings
                            .read()
                            .unwrap_or_else(|e| e.into_inner())
                            .iter()
                            .filter(|(_, e)| e.encoder.is_some())
                            .map(|(n, _)| n.as_str())
                            .collect::<Vec<_>>()
                            .join(", ")
                    ))
                })?;
                let framing: Framing = options
                    .get("framing")
                    .unwrap_or("varint")
                    .parse()
                    .map_err(|e| err(format!("sink {name}: {e}")))?;
                // The encoder reads its own options when the first rows arrive.
                options.get("raw.column");
                messages = Some((factory, framing));
                (SinkFormat::JsonLines, Some(PathBuf::from(path)))
            }
            "stdout" => {
                let format = match options.get("format").unwrap_or("jsonl") {
                    "jsonl" | "json" => SinkFormat::JsonLines,
                    "table" => SinkFormat::Table,
                    f => {
                        return Err(err(format!(
                            "sink {name}: 'format' = '{f}': expected 'jsonl' or 'table'"
                        )))
                    }
                };
                (format, None)
            }
            other => {
                return Err(err(format!(
                "sink {name}: unknown connector '{other}'; expected 'parquet', 'ipc' or 'stdout'"
            )))
            }
        };
        // Parquet reads these when the writer opens; mark them now so typos are caught here.
        if format == SinkFormat::Parquet {
            options.get("compression");
            options.get("row_group_size");
        }
        let unread = options.unread();
        if !unread.is_empty() {
            return Err(err(format!(
                "sink {name}: unknown option(s) {} for connector '{connector}'",
                unread
                    .iter()
                    .map(|k| format!("'{k}'"))
                    .collect::<Vec<_>>()
                    .join(", ")
            )));
        }
        self.sinks.lock().unwrap_or_else(|e| e.into_inner()).insert(
            name.clone(),
            Arc::new(tokio::sync::Mutex::new(SinkState {
                messages,
                format,
                target_path,
                options,
                writer: None,
                rows: 0,
            })),
        );
        let stateful = s.source.as_deref().and_then(|src| {
            self.sources
                .lock()
                .unwrap_or_else(|e| e.into_inner())
                .iter()
                .find(|c| c.name == src && c.state.is_some())
                .cloned()
        });
        match (s.from, stateful) {
            (Some(_), Some(source))
                if matches!(
                    format,
                    SinkFormat::Parquet | SinkFormat::IpcFile | SinkFormat::IpcStream
                ) =>
            {
                self.checkpointed_sink(&name, source, line).await
            }
            (Some(query), _) => self.write_to_sink(&name, query).await,
            (None, _) => Ok(()),
        }
    }

    fn sink_state(&self, sink: &str) -> Option<Arc<tokio::sync::Mutex<SinkState>>> {
        self.sinks
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .get(sink)
            .cloned()
    }

    /// A file sink fed straight from a source with state: exactly-once steps (`checkpoint`).
    /// Its `'path'` is a directory of step files.
    async fn checkpointed_sink(
        &self,
        sink: &str,
        source: Arc<SourceConfig>,
        line: u64,
    ) -> Result<(), EngineError> {
        let at = move |message: String| EngineError::Statement { line, message };
        let state = self
            .sink_state(sink)
            .ok_or_else(|| at(format!("no sink named '{sink}'")))?;
        let (dir, format, options) = {
            let st = state.lock().await;
            let dir = st
                .target_path
                .clone()
                .ok_or_else(|| at(format!("sink {sink}: a checkpointed sink needs 'path'")))?;
            (dir, st.format, st.options.clone())
        };
        let Some(spec) = &source.state else {
            return Err(at(format!(
                "sink {sink}: source {} has no state",
                source.name
            )));
        };
        let mut store = spec.open(&source.name).map_err(|e| at(df_message(&e)))?;
        let mut files =
            StepFiles::new(&dir, sink, format, options, Arc::clone(&source.schema)).map_err(at)?;
        let deleted = files.clean(store.checkpoint().step).map_err(at)?;
        if !deleted.is_empty() {
            eprintln!(
                "sink {sink}: deleted {} uncommitted file(s) left by an earlier run: {}",
                deleted.len(),
                deleted.join(", ")
            );
        }
        let run = move || -> Result<(), EngineError> {
            let rows = run_steps(&source, &mut store, &mut files).map_err(at)?;
            let mut st = state.blocking_lock();
            st.rows += rows;
            Ok(())
        };
        let handle = tokio::task::spawn_blocking(run);
        let pipeline = async move {
            handle
                .await
                .map_err(|e| EngineError::Registry(format!("a sink pipeline panicked: {e}")))?
        };
        self.run_pipeline(pipeline).await
    }

    /// The state statistics of every source with `'state.dir'` that was read in this run.
    pub fn state_reports(&self) -> Vec<(String, weir_dedup::DedupStats)> {
        self.sources
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .iter()
            .filter_map(|c| {
                let spec = c.state.as_ref()?;
                let stats = spec
                    .last_stats
                    .lock()
                    .unwrap_or_else(|e| e.into_inner())
                    .clone()?;
                Some((c.name.clone(), stats))
            })
            .collect()
    }

    async fn write_to_sink(&self, sink: &str, query: SqlText) -> Result<(), EngineError> {
        let line = query.start.line;
        let at = move |message: String| EngineError::Statement { line, message };
        let state = self
            .sink_state(sink)
            .ok_or_else(|| at(format!("no sink named '{sink}'")))?;
        let df = self
            .ctx
            .sql(&query.padded)
            .await
            .map_err(|e| at(df_message(&e)))?;
        let schema: SchemaRef = Arc::new(df.schema().as_arrow().clone());
        let stream = df.execute_stream().await.map_err(|e| at(df_message(&e)))?;
        let follow = self.options.follow;
        let sink_name = sink.to_string();
        let pipeline = async move {
            let mut stream = stream;
            let mut st = state.lock().await;
            let st = &mut *st;
            if st.writer.is_none() {
                let target = match &st.target_path {
                    Some(p) => Target::File(p.clone()),
                    None => Target::Stdout,
                };
                let w: Box<dyn BatchWriter> = match &st.messages {
                    Some((factory, framing)) => {
                        let encoder = factory
                            .create_encoder(&EncoderRequest {
                                sink: &sink_name,
                                schema: Arc::clone(&schema),
                                options: &st.options,
                            })
                            .map_err(|e| at(format!("sink {sink_name}: {e}")))?;
                        Box::new(
                            MessageFileSink::open(encoder, *framing, target)
                                .map_err(|e| at(format!("sink {sink_name}: {e}")))?,
                        )
                    }
                    None => open_writer(st.format, target, &schema, &st.options, follow)
                        .map_err(|e| at(format!("sink {sink_name}: {e}")))?,
                };
                st.writer = Some((Arc::clone(&schema), w));
            }
            let Some((expected, writer)) = st.writer.as_mut() else {
                return Err(at(format!("sink {sink_name}: writer missing")));
            };
            if expected.fields() != schema.fields() {
                let cols = |s: &SchemaRef| {
                    s.fields()
                        .iter()
                        .map(|f| format!("{} {}", f.name(), f.data_type()))
                        .collect::<Vec<_>>()
                        .join(", ")
                };
                return Err(at(format!(
                    "sink {sink_name}: {}",
                    SinkError::SchemaChanged {
                        expected: cols(expected),
                        found: cols(&schema)
                    }
                )));
            }
            while let Some(batch) = stream.next().await {
                let batch = batch.map_err(|e| at(df_message(&e)))?;
                writer
                    .write(&batch)
                    .map_err(|e| at(format!("sink {sink_name}: {e}")))?;
                st.rows += batch.num_rows() as u64;
            }
            Ok(())
        };
        self.run_pipeline(pipeline).await
    }

    /// Runs a sink pipeline now, or in follow mode in the background (see [`Engine::wait`]).
    async fn run_pipeline(
        &self,
        pipeline: impl std::future::Future<Output = Result<(), EngineError>> + Send + 'static,
    ) -> Result<(), EngineError> {
        if self.options.follow {
            let handle = tokio::spawn(pipeline);
            self.pipelines
                .lock()
                .unwrap_or_else(|e| e.into_inner())
                .push(handle);
            Ok(())
        } else {
            pipeline.await
        }
    }

    /// Waits for the background sink pipelines of follow mode; returns at once otherwise.
    /// Stop them early with [`Engine::stop`].
    pub async fn wait(&self) -> Result<(), EngineError> {
        let handles: Vec<_> =
            std::mem::take(&mut *self.pipelines.lock().unwrap_or_else(|e| e.into_inner()));
        for h in handles {
            match h.await {
                Ok(r) => r?,
                Err(e) if e.is_cancelled() => {}
                Err(e) => {
                    return Err(EngineError::Registry(format!(
                        "a sink pipeline panicked: {e}"
                    )))
                }
            }
        }
        Ok(())
    }

    /// Asks follow-mode sources to end: each finishes the data it has, so every row read so
    /// far flows through the pipelines into the sinks (nothing held in an operator is lost).
    /// Then [`Engine::wait`] returns.
    pub fn stop(&self) {
        self.stop.store(true, Ordering::SeqCst);
    }

    /// Completes every sink (file footers) and reports what each wrote.
    pub async fn finish(&self) -> Result<Vec<SinkReport>, EngineError> {
        let sinks: Vec<_> = self
            .sinks
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .iter()
            .map(|(n, s)| (n.clone(), Arc::clone(s)))
            .collect();
        let mut reports = Vec::new();
        for (name, state) in sinks {
            let mut st = state.lock().await;
            if let Some((_, w)) = st.writer.as_mut() {
                w.finish().map_err(|error| EngineError::Sink {
                    sink: name.clone(),
                    error,
                })?;
            }
            reports.push(SinkReport {
                name,
                rows: st.rows,
                path: st.target_path.clone(),
            });
        }
        Ok(reports)
    }

    /// True while follow-mode sink pipelines run in the background.
    pub fn pipelines_running(&self) -> bool {
        !self
            .pipelines
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .is_empty()
    }

    /// Decoders per source scan.
    pub fn partitions(&self) -> usize {
        self.ctx.state().config().target_partitions()
    }

    /// A handle that reads the source counters from another thread (for a progress line).
    pub fn source_stats_handle(&self) -> SourceStatsHandle {
        SourceStatsHandle(Arc::clone(&self.sources))
    }

    /// The counters of every source so far.
    pub fn source_reports(&self) -> Vec<SourceReport> {
        self.source_stats_handle().snapshot()
    }

    /// Runs a script (weir's statements included) and returns the rows of its `SELECT`s
    /// (for tests and embedding).
    pub async fn query(&self, sql: &str) -> Result<Vec<RecordBatch>, EngineError> {
        let mut rows = CollectRows(Vec::new());
        self.run_script(sql, &mut rows).await?;
        Ok(rows.0)
    }
}

/// Reads the counters of an engine's sources.
#[derive(Clone)]
pub struct SourceStatsHandle(Arc<Mutex<Vec<Arc<SourceConfig>>>>);

impl SourceStatsHandle {
    /// The counters of every source so far.
    pub fn snapshot(&self) -> Vec<SourceReport> {
        self.0
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .iter()
            .map(|c| {
                let s = &c.stats;
                SourceReport {
                    name: c.name.clone(),
                    messages: s.messages.load(Ordering::Relaxed),
                    bytes: s.bytes.load(Ordering::Relaxed),
                    decoded: s.decoded.load(Ordering::Relaxed),
                    skipped: s.skipped.load(Ordering::Relaxed),
                    dead_lettered: s.dead_lettered.load(Ordering::Relaxed),
                }
            })
            .collect()
    }
}

/// The consumer settings of a Kafka source from its `WITH` options.
fn kafka_config(options: &Options) -> Result<weir_kafka::ConsumerConfig, String> {
    use weir_kafka::{ConsumerConfig, StartupMode};
    let brokers: Vec<String> = options
        .get("brokers")
        .ok_or("the kafka connector needs 'brokers' (host:port, comma separated)")?
        .split(',')
        .map(|b| b.trim().to_string())
        .filter(|b| !b.is_empty())
        .collect();
    if brokers.is_empty() {
        return Err("'brokers' names no broker".into());
    }
    let topic = options
        .get("topic")
        .ok_or("the kafka connector needs 'topic'")?
        .to_string();
    let mut config = ConsumerConfig {
        brokers,
        topic,
        ..ConsumerConfig::default()
    };
    if let Some(p) = options.get("partitions") {
        config.partitions = p.parse()?;
    }
    let mode = options.get("scan.startup.mode").unwrap_or("earliest");
    let value = match mode.to_ascii_lowercase().as_str() {
        "offset" => options.get("scan.startup.offset"),
        "timestamp" => options.get("scan.startup.timestamp"),
        _ => None,
    };
    config.startup = StartupMode::parse(mode, value)?;
    if let Some(v) = options.get("isolation.level") {
        config.isolation = v.parse()?;
    }
    if let Some(v) = options.get("offset.reset") {
        config.offset_reset = v.parse()?;
    }
    config.check_crc = options
        .get_bool("check.crcs", true)
        .map_err(|e| e.to_string())?;
    Ok(config)
}

struct CollectRows(Vec<RecordBatch>);

impl ResultOutput for CollectRows {
    fn begin(&mut self, _schema: &SchemaRef) -> Result<(), SinkError> {
        Ok(())
    }

    fn batch(&mut self, batch: &RecordBatch) -> Result<(), SinkError> {
        self.0.push(batch.clone());
        Ok(())
    }

    fn end(&mut self) -> Result<(), SinkError> {
        Ok(())
    }
}

fn codec_message(source: &str, encoding: &str, e: &CodecError) -> String {
    format!("source {source} (encoding '{encoding}'): {e}")
}
