//! The engine: a DataFusion session plus weir's encodings, sources and sinks. It parses a
//! script, runs each statement, and wires sources, pipelines and sinks together; the reading,
//! decoding, dedup and commits are the pipeline's (`crate::pipeline`).

mod create_sink;
mod create_source;
mod encodings;
mod report;

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};

use arrow::datatypes::SchemaRef;
use arrow::record_batch::RecordBatch;
use datafusion::logical_expr::LogicalPlan;
use datafusion::prelude::{SessionConfig, SessionContext};
use futures::StreamExt;
use weir_codec::{DecoderFactory, EncoderFactory};

use self::create_sink::SinkState;
use self::encodings::Encodings;
pub use self::report::{
    ReaderTimes, SinkReport, SourceReport, SourceStatsHandle, WindowStateReport,
};
use crate::error::{EngineError, StatementError};
use crate::output::{CollectRows, ResultOutput};
use crate::pipeline::live_source::LiveSource;
use crate::sql::{parse_script, SqlText, Statement};

/// What a bad-message error tells a SQL user to do.
pub const SQL_BAD_MESSAGE_HINT: &str =
    "set 'on.error' = 'skip' or 'dead_letter' to go past bad messages";

/// Settings of an [`Engine`].
#[derive(Clone)]
pub struct EngineOptions {
    /// Keep reading at the end of sources; sink pipelines run until stopped.
    pub follow: bool,
    /// Readers per source scan (and DataFusion's target partitions); 0 means one per core.
    pub partitions: usize,
    /// Rows per batch.
    pub batch_size: usize,
    /// What the error of a bad message under `'on.error' = 'fail'` tells the user to do (a
    /// program that is not driven by SQL names its own flag).
    pub bad_message_hint: &'static str,
    /// Kafka client properties (librdkafka's names, as a `--kafka-config` file gives them)
    /// that every Kafka source starts from; a source's own `WITH` options override them.
    pub kafka_properties: Vec<(String, String)>,
}

impl std::fmt::Debug for EngineOptions {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        // Kafka properties may hold passwords: only their keys are shown.
        let keys: Vec<&str> = self
            .kafka_properties
            .iter()
            .map(|(k, _)| k.as_str())
            .collect();
        f.debug_struct("EngineOptions")
            .field("follow", &self.follow)
            .field("partitions", &self.partitions)
            .field("batch_size", &self.batch_size)
            .field("kafka_properties", &keys)
            .finish_non_exhaustive()
    }
}

impl Default for EngineOptions {
    fn default() -> Self {
        Self {
            follow: false,
            partitions: 0,
            batch_size: weir_codec::DEFAULT_BATCH_SIZE,
            bad_message_hint: SQL_BAD_MESSAGE_HINT,
            kafka_properties: Vec::new(),
        }
    }
}

/// A sink pipeline running in the background (follow mode): the sink, the line of the statement
/// that started it, and its task.
type Pipeline = (
    String,
    u64,
    tokio::task::JoinHandle<Result<(), StatementError>>,
);

/// weir's engine: SQL over sources, into sinks.
pub struct Engine {
    ctx: SessionContext,
    options: EngineOptions,
    encodings: Encodings,
    sources: Arc<Mutex<Vec<Arc<LiveSource>>>>,
    sinks: Mutex<BTreeMap<String, Arc<tokio::sync::Mutex<SinkState>>>>,
    pipelines: Mutex<Vec<Pipeline>>,
    stop: Arc<AtomicBool>,
    /// Every source's counters, for the metrics.
    source_stats: crate::metrics::SourceStatsTable,
    /// Every sink's counters, for the metrics.
    sink_metrics: crate::metrics::SinkTable,
}

impl Engine {
    /// An engine with the built-in encodings `protobuf`, `json` and `raw` registered.
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
        let ctx = SessionContext::new_with_config(config);
        let sources: Arc<Mutex<Vec<Arc<LiveSource>>>> = Arc::default();
        let partitions = ctx.state().config().target_partitions();
        for (name, function) in crate::continuous::tvf::WindowFunction::all(&sources, partitions) {
            // DataFusion looks table functions up by the name as written.
            ctx.register_udtf(name, Arc::clone(&function) as _);
            ctx.register_udtf(&name.to_uppercase(), function);
        }
        Self {
            ctx,
            options,
            encodings: Encodings::builtin(),
            sources,
            sinks: Mutex::default(),
            pipelines: Mutex::default(),
            stop: Arc::default(),
            source_stats: Arc::default(),
            sink_metrics: Arc::default(),
        }
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
        self.encodings.register(name, decoder, encoder)
    }

    /// Runs every statement of `script` in order. `SELECT` rows go to `output`. In follow mode,
    /// sink pipelines keep running in the background; see [`Engine::wait`].
    pub async fn run_script(
        &self,
        script: &str,
        output: &mut dyn ResultOutput,
    ) -> Result<(), EngineError> {
        for stmt in parse_script(script)? {
            let line = stmt.line();
            self.run_statement(stmt, output)
                .await
                .map_err(|e| EngineError::at(line, e))?;
        }
        Ok(())
    }

    async fn run_statement(
        &self,
        stmt: Statement,
        output: &mut dyn ResultOutput,
    ) -> Result<(), StatementError> {
        match stmt {
            Statement::CreateSource(s) => self.create_source(s).await,
            Statement::CreateSink(s) => self.create_sink(s).await,
            Statement::Insert {
                target,
                query,
                whole,
            } => {
                if self.sink_state(&target).is_some() {
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
    ) -> Result<(), StatementError> {
        let df = self.ctx.sql(&text.padded).await?;
        let prints = !matches!(
            df.logical_plan(),
            LogicalPlan::Ddl(_) | LogicalPlan::Statement(_) | LogicalPlan::EmptyRelation(_)
        );
        let schema: SchemaRef = Arc::new(df.schema().as_arrow().clone());
        let mut stream = self.execute(df).await?;
        let sink_err = |source: crate::sink::SinkError| StatementError::Sink {
            sink: "the query's output".into(),
            source: Box::new(source),
        };
        if prints {
            output.begin(&schema).map_err(sink_err)?;
        }
        let mut failure = None;
        while let Some(batch) = stream.next().await {
            match batch {
                Ok(batch) if prints => output.batch(&batch).map_err(sink_err)?,
                Ok(_) => {}
                Err(e) => {
                    failure = Some(e);
                    break;
                }
            }
        }
        // The rows that came before a failure are output too.
        if prints {
            output.end().map_err(sink_err)?;
        }
        match failure {
            Some(e) => Err(e.into()),
            None => Ok(()),
        }
    }

    /// Executes a query: DataFusion's physical plan with its continuous parts (windows over
    /// sources) folded into weir's own node.
    pub(super) async fn execute(
        &self,
        df: datafusion::dataframe::DataFrame,
    ) -> Result<datafusion::execution::SendableRecordBatchStream, StatementError> {
        let plan = crate::continuous::physical_plan(df, self.options.follow)
            .await
            .map_err(continuous_error)?;
        Ok(datafusion::physical_plan::execute_stream(
            plan,
            self.ctx.task_ctx(),
        )?)
    }

    /// Runs a sink pipeline now, or in follow mode in the background (see [`Engine::wait`]).
    async fn run_pipeline(
        &self,
        sink: &str,
        line: u64,
        pipeline: impl std::future::Future<Output = Result<(), StatementError>> + Send + 'static,
    ) -> Result<(), StatementError> {
        if self.options.follow {
            let handle = tokio::spawn(pipeline);
            self.pipelines
                .lock()
                .unwrap_or_else(|e| e.into_inner())
                .push((sink.to_string(), line, handle));
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
        for (name, line, h) in handles {
            match h.await {
                Ok(r) => r.map_err(|e| EngineError::at(line, e))?,
                Err(e) if e.is_cancelled() => {}
                Err(e) => {
                    return Err(EngineError::at(
                        line,
                        StatementError::PipelineLost {
                            pipeline: format!("sink {name}"),
                            reason: e.to_string(),
                        },
                    ))
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

    /// True while follow-mode sink pipelines run in the background.
    pub fn pipelines_running(&self) -> bool {
        !self
            .pipelines
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .is_empty()
    }

    /// Readers per source scan.
    pub fn partitions(&self) -> usize {
        self.ctx.state().config().target_partitions()
    }

    /// Runs a script (weir's statements included) and returns the rows of its `SELECT`s
    /// (for tests and embedding).
    pub async fn query(&self, sql: &str) -> Result<Vec<RecordBatch>, EngineError> {
        let mut rows = CollectRows::default();
        self.run_script(sql, &mut rows).await?;
        Ok(rows.into_batches())
    }
}

/// A refusal to run a query continuously is one line of its own; other errors keep their kind.
pub(super) fn continuous_error(e: datafusion::error::DataFusionError) -> StatementError {
    match e {
        datafusion::error::DataFusionError::Plan(why) if !why.is_empty() => {
            StatementError::NotContinuous(why)
        }
        other => other.into(),
    }
}
