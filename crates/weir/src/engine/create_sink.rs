//! `CREATE SINK` and `INSERT INTO <sink>`: a sink's options checked against what its connector
//! (and, for a `file` sink, its encoder) declares; a query's rows written as they come; and a
//! sink fed straight from a source with state wired to the exactly-once pipeline.

use std::sync::Arc;

use arrow::datatypes::SchemaRef;
use futures::StreamExt;
use weir_codec::{
    resolve_references, unknown_keys, EncoderFactory, EncoderRequest, OptionError, Options,
};

use super::Engine;
use crate::continuous::exec::ContinuousExec;
use crate::error::StatementError;
use crate::kafka_security::KAFKA_SECURITY_OPTIONS;
use crate::pipeline::ledger::TableLedger;
use crate::pipeline::live_source::LiveSource;
use crate::pipeline::steps::{self, StepFiles};
use crate::pipeline::window::query::ContinuousQuery;
use crate::sink::delta::{DeltaSettings, DeltaSink, DeltaSteps};
use crate::sink::kafka::{KafkaSink, KafkaSinkSettings, AUTO_REGISTER};
use crate::sink::kafka_dead_letters;
use crate::sink::kafka_steps::KafkaSteps;
use crate::sink::storage::{is_remote, local_path, open_location, Location, Spool};
use crate::sink::{
    encoder_threads, open_message_file, open_writer, BatchWriter, GroupSink, SinkError, SinkFormat,
    SinkSettings, StepSink, Target, SINK_CONNECTOR_OPTIONS, STORAGE_OPTIONS,
};
use crate::sql::{CreateSink, SqlText};
use weir_kafka::Settled;

/// What an exactly-once sink writes.
enum ExactlyOnce {
    /// The rows of a source with state, as they are.
    Rows(Arc<LiveSource>),
    /// A continuous query over a source with state.
    Query(Arc<ContinuousQuery>),
}

/// A sink: its settings, and its writer once the first rows have come.
pub(super) struct SinkState {
    pub(super) settings: SinkSettings,
    options: Options,
    /// The `file` or `kafka` sink's encoder.
    encoder: Option<Arc<dyn EncoderFactory>>,
    /// A `kafka` sink's settings.
    kafka: Option<KafkaSinkSettings>,
    writer: Option<(SchemaRef, Box<dyn BatchWriter>)>,
    /// For a `'path'` on object storage: the local file the writer fills, uploaded at the end.
    upload: Option<PendingUpload>,
    /// Rows written.
    pub(super) rows: u64,
    /// The sink's counters for the metrics.
    metrics: Arc<crate::metrics::SinkMetrics>,
}

/// A file sink's output on object storage: written to a local file, uploaded when complete (in
/// parts, so it appears whole or not at all).
struct PendingUpload {
    /// The directory the object goes in.
    location: Location,
    /// The object's name in it.
    name: String,
    /// The local file (in a spool directory removed with it).
    file: std::path::PathBuf,
    _spool: Spool,
}

impl PendingUpload {
    /// The upload of the object `url` (`s3://bucket/dir/name`) reached with `options`.
    fn new(sink: &str, url: &str, options: &Options) -> Result<Self, SinkError> {
        let bad = |why: &str| SinkError::Storage {
            path: url.to_string(),
            reason: why.to_string(),
        };
        let parsed = url::Url::parse(url).map_err(|e| bad(&e.to_string()))?;
        // The name as the store names it (percent-decoded from the URL).
        let name = object_store::path::Path::from_url_path(parsed.path())
            .map_err(|e| bad(&e.to_string()))?
            .filename()
            .filter(|_| !parsed.path().ends_with('/'))
            .ok_or_else(|| bad("names a directory; this sink writes one file: give its name"))?
            .to_string();
        let dir = parsed.join("./").map_err(|e| bad(&e.to_string()))?;
        let location = open_location(dir.as_str(), options)?;
        let spool = Spool::open(sink, &parsed)?;
        Ok(Self {
            location,
            file: spool.path().join(&name),
            name,
            _spool: spool,
        })
    }
}

impl SinkState {
    /// Completes the output (file footers), and uploads it when its place is object storage.
    pub(super) async fn finish(&mut self) -> Result<(), SinkError> {
        if let Some((_, w)) = self.writer.as_mut() {
            w.finish()?;
        }
        if let Some(up) = self.upload.take() {
            if self.writer.is_some() {
                up.location.upload(&up.file, &up.name).await?;
            }
        }
        Ok(())
    }

    /// The writer for rows of `schema`, opened at the first rows; later writes must have the
    /// same columns.
    fn writer(
        &mut self,
        sink: &str,
        schema: &SchemaRef,
        follow: bool,
    ) -> Result<&mut Box<dyn BatchWriter>, SinkError> {
        if self.settings.delta {
            return Err(SinkError::Options(format!(
                "sink {sink} is a Delta table, written in exactly-once steps: its rows must come \
                 from a source (CREATE SINK ... FROM <source>) or a continuous query over a \
                 source with 'state.dir', not INSERT INTO or another query"
            )));
        }
        if self.writer.is_none() {
            let target = match &self.settings.path {
                Some(p) if is_remote(&p.to_string_lossy()) => {
                    let up = PendingUpload::new(sink, &p.to_string_lossy(), &self.options)?;
                    let target = Target::File(up.file.clone());
                    self.upload = Some(up);
                    target
                }
                Some(p) => Target::File(local_path(&p.to_string_lossy())),
                None => Target::Stdout,
            };
            let w: Box<dyn BatchWriter> = match (&self.encoder, &self.settings.messages) {
                // One encoded message per row: records of a topic, or framed in a file.
                (Some(factory), Some((_, framing))) => {
                    let encoder = || {
                        create_encoder(
                            sink,
                            factory.as_ref(),
                            self.kafka.as_ref(),
                            schema,
                            &self.options,
                        )
                    };
                    match &self.kafka {
                        Some(kafka) => Box::new(KafkaSink::open(sink, kafka, schema, encoder()?)?),
                        None => {
                            let encoders = (0..encoder_threads(&self.options)?)
                                .map(|_| encoder())
                                .collect::<Result<Vec<_>, _>>()?;
                            open_message_file(encoders, *framing, target)?
                        }
                    }
                }
                _ => open_writer(self.settings.format, target, schema, &self.options, follow)?,
            };
            self.writer = Some((Arc::clone(schema), w));
        }
        let Some((expected, writer)) = self.writer.as_mut() else {
            return Err(SinkError::Options(format!(
                "sink {sink} has no writer; this is a bug in weir"
            )));
        };
        if expected.fields() != schema.fields() {
            let cols = |s: &SchemaRef| {
                s.fields()
                    .iter()
                    .map(|f| format!("{} {}", f.name(), f.data_type()))
                    .collect::<Vec<_>>()
                    .join(", ")
            };
            return Err(SinkError::SchemaChanged {
                expected: cols(expected),
                found: cols(schema),
            });
        }
        Ok(writer)
    }
}

impl Engine {
    pub(super) fn sink_state(&self, sink: &str) -> Option<Arc<tokio::sync::Mutex<SinkState>>> {
        self.sinks
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .get(sink)
            .cloned()
    }

    pub(super) async fn create_sink(&self, s: CreateSink) -> Result<(), StatementError> {
        let name = s.name.clone();
        let fail = |source: SinkError| StatementError::Sink {
            sink: name.clone(),
            source: Box::new(source),
        };
        if self.sink_state(&name).is_some() {
            return Err(StatementError::Invalid(format!(
                "a sink named '{name}' already exists"
            )));
        }
        let options =
            Options::new(resolve_references(s.options.clone()).map_err(|e| fail(e.into()))?);
        let settings = SinkSettings::parse(&options).map_err(fail)?;
        let encoder = match &settings.messages {
            Some((encoding, _)) => Some(
                self.encodings
                    .encoder(encoding)
                    .map_err(|e| fail(SinkError::Options(e)))?,
            ),
            None => None,
        };
        let connector = options
            .iter()
            .find(|(k, _)| *k == "connector")
            .map(|(_, v)| v);
        unknown_keys(
            &options,
            &[
                SINK_CONNECTOR_OPTIONS,
                SinkSettings::declared(connector),
                if settings.path.is_some() || settings.delta {
                    STORAGE_OPTIONS
                } else {
                    &[]
                },
                if settings.kafka {
                    &KAFKA_SECURITY_OPTIONS
                } else {
                    &[]
                },
                if settings.kafka {
                    crate::registry::REGISTRY_OPTIONS
                } else {
                    &[]
                },
                encoder.as_ref().map_or(&[], |e| e.options()),
            ],
        )
        .map_err(|e| fail(e.into()))?;
        if settings.delta {
            // Checked now, so a wrong value fails the statement rather than the pipeline.
            DeltaSettings::parse(&name, &options).map_err(fail)?;
        }
        let kafka = if settings.kafka {
            let mut kafka =
                KafkaSinkSettings::parse(&name, &options, &self.options.kafka_properties)
                    .map_err(fail)?;
            kafka.registry = registry_schema(&name, &options, settings.messages.as_ref())
                .map_err(fail)?
                .map(Arc::new);
            Some(kafka)
        } else {
            None
        };
        let kafka_transactional = kafka.as_ref().is_some_and(|k| k.transactional_id.is_some());
        let kafka_on_timeout = kafka
            .as_ref()
            .is_some_and(|k| k.continue_after_lost_transaction.is_some());
        let metrics = Arc::new(crate::metrics::SinkMetrics::default());
        self.sink_metrics
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .push((name.clone(), Arc::clone(&metrics)));
        self.sinks.lock().unwrap_or_else(|e| e.into_inner()).insert(
            name.clone(),
            Arc::new(tokio::sync::Mutex::new(SinkState {
                settings: settings.clone(),
                options,
                encoder,
                kafka,
                writer: None,
                upload: None,
                rows: 0,
                metrics,
            })),
        );
        let line = s.position.line;
        // A table sink keeps its own positions, so a source without state feeds it exactly
        // once too; so does a Kafka sink fed by a consumer group's member, whose transactions
        // carry the group's offsets.
        let stateful = s.source.as_deref().and_then(|src| {
            self.sources
                .lock()
                .unwrap_or_else(|e| e.into_inner())
                .iter()
                .find(|c| {
                    c.name == src
                        && (c.state.is_some()
                            || settings.delta
                            || (settings.kafka && c.connector.group().is_some()))
                })
                .cloned()
        });
        if let (Some(src), None, false) = (s.source.as_deref(), &stateful, settings.delta) {
            let pacing = self
                .sources
                .lock()
                .unwrap_or_else(|e| e.into_inner())
                .iter()
                .any(|c| c.name == src && c.commit_declared);
            if pacing {
                tracing::warn!(
                    "sink {name}: the 'commit.interval' of source {src} does not apply to it: \
                     without 'state.dir' only a delta sink writes in steps; this sink writes as \
                     rows arrive"
                );
            }
        }
        // A `delta` sink's format is Parquet, so it counts among the file sinks here.
        let files = matches!(
            settings.format,
            SinkFormat::Parquet | SinkFormat::IpcFile | SinkFormat::IpcStream
        );
        // File sinks write a step's rows into its own files; a `kafka` sink into its own
        // transaction.
        let steps = files || settings.kafka;
        match (s.from, stateful) {
            (Some(_), Some(source)) if steps => {
                self.exactly_once_sink(&name, ExactlyOnce::Rows(source), line)
                    .await
            }
            (Some(query), _) => {
                if steps {
                    if let Some(q) = self.continuous_with_state(&query).await? {
                        return self
                            .exactly_once_sink(&name, ExactlyOnce::Query(q), line)
                            .await;
                    }
                }
                if kafka_on_timeout {
                    return Err(fail(SinkError::Options(format!(
                        "sink {name}: 'on.transaction.timeout' decides what a start does with a \
                         step whose transaction was aborted, and only an exactly-once kafka \
                         sink (one fed by a source with 'state.dir') writes transactions a \
                         step; drop the option, or give the source 'state.dir'"
                    ))));
                }
                if kafka_transactional {
                    return Err(fail(SinkError::Options(format!(
                        "sink {name}: 'transactional.id' makes a kafka sink exactly once, one \
                         transaction a step, and steps need rows from a source with \
                         'state.dir' (or a continuous query over one), or straight from a \
                         source with 'group.id'; give the source one of them, or drop \
                         'transactional.id' to write at least once"
                    ))));
                }
                self.write_to_sink(&name, query).await
            }
            (None, _) => Ok(()),
        }
    }

    /// The query compiled whole into a continuous query over a source with state, if it is one:
    /// a sink it feeds is then exactly once.
    async fn continuous_with_state(
        &self,
        query: &SqlText,
    ) -> Result<Option<Arc<ContinuousQuery>>, StatementError> {
        let df = self.ctx.sql(&query.padded).await?;
        let plan = crate::continuous::physical_plan(df, self.options.follow)
            .await
            .map_err(super::continuous_error)?;
        let Some(c) = plan.downcast_ref::<ContinuousExec>() else {
            return Ok(None);
        };
        // A group's member keeps its windows per partition, under the group's 'state.dir'.
        let source = &c.plan().source;
        if source.state.is_none() && source.connector.group().is_none() {
            return Ok(None);
        }
        let q = c.plan().instantiate(self.ctx.task_ctx()).await?;
        Ok(Some(Arc::new(q)))
    }

    /// A file sink fed straight from a source with state, or by a continuous query over one,
    /// or a `delta` sink fed straight from any source: exactly-once steps. A file sink's
    /// `'path'` is a directory of step files; a `delta` sink's steps are table commits.
    async fn exactly_once_sink(
        &self,
        sink: &str,
        job: ExactlyOnce,
        line: u64,
    ) -> Result<(), StatementError> {
        let (source, schema) = match &job {
            ExactlyOnce::Rows(s) => (Arc::clone(s), Arc::clone(&s.schema)),
            ExactlyOnce::Query(q) => (Arc::clone(&q.source), Arc::clone(&q.schema)),
        };
        let fail = |e: SinkError| StatementError::Sink {
            sink: sink.to_string(),
            source: Box::new(e),
        };
        let state = self
            .sink_state(sink)
            .ok_or_else(|| StatementError::Invalid(format!("no sink named '{sink}'")))?;
        let (settings, options, metrics, kafka, encoder) = {
            let st = state.lock().await;
            (
                st.settings.clone(),
                st.options.clone(),
                Arc::clone(&st.metrics),
                st.kafka.clone(),
                st.encoder.clone(),
            )
        };
        if let Some(group) = source.connector.group() {
            return self
                .group_sink(sink, &source, &job, group.clone(), line)
                .await;
        }
        let mut store = match &source.state {
            Some(spec) => Some(spec.open(&source.stats)?),
            None if settings.delta && matches!(job, ExactlyOnce::Rows(_)) => None,
            None => {
                return Err(StatementError::Invalid(format!(
                    "source {} has no state",
                    source.name
                )))
            }
        };
        let mut resumed = None;
        let mut files: Box<dyn StepSink> = if settings.delta {
            let delta = DeltaSettings::parse(sink, &options).map_err(fail)?;
            let (mut table, data_files) = DeltaSink::open(sink, delta, &options, &schema)
                .await
                .map_err(fail)?;
            match &store {
                Some(store) => {
                    if let Some(step) = table
                        .settle(store.checkpoint(), store.dir())
                        .await
                        .map_err(fail)?
                    {
                        tracing::warn!(
                            sink,
                            table = %table.url(),
                            step,
                            "the last run stopped between the state commit and the table commit of step {step}; committed it to the table now"
                        );
                    }
                }
                // Without a state directory the table is the only record: resume from its
                // positions.
                None => {
                    let from = table.resume().await.map_err(fail)?;
                    tracing::info!(
                        sink,
                        table = %table.url(),
                        step = from.step,
                        "resuming from the positions in the table"
                    );
                    resumed = Some(TableLedger::new(from));
                }
            }
            Box::new(
                DeltaSteps::new(
                    table,
                    data_files,
                    tokio::runtime::Handle::current(),
                    metrics,
                    self.partitions(),
                )
                .map_err(fail)?,
            )
        } else if let (Some(mut kafka), Some(factory)) = (kafka, encoder) {
            let Some(store) = &store else {
                return Err(StatementError::Invalid(format!(
                    "source {} has no state",
                    source.name
                )));
            };
            let id = kafka
                .transactional_id
                .clone()
                .unwrap_or_else(|| format!("weir-{sink}"));
            kafka.producer.transactional_id = Some(id.clone());
            let go_on = kafka.continue_after_lost_transaction == Some(true);
            let encoder = create_encoder(sink, factory.as_ref(), Some(&kafka), &schema, &options)
                .map_err(fail)?;
            let recorded = store.checkpoint().files.clone();
            let name = sink.to_string();
            let step = store.checkpoint().step;
            // Connecting and settling wait on the brokers.
            let opened = tokio::task::spawn_blocking(move || {
                let settled = KafkaSteps::settle(&name, &kafka.producer, &recorded)?;
                if let Some(Settled::AbortedByCoordinator { timeout_ms }) = settled {
                    let lost = SinkError::TransactionLost {
                        sink: name.clone(),
                        step,
                        transactional_id: id,
                        topic: kafka.producer.topic.clone(),
                        timeout_ms,
                    };
                    // Decided before the producer connects: its new epoch would end the
                    // coordinator's record of the abort, and the next start would not see it.
                    if !go_on {
                        return Err(lost);
                    }
                    tracing::error!(
                        sink = %name,
                        step,
                        "{lost} (going on: 'on.transaction.timeout' = 'continue')"
                    );
                }
                kafka_dead_letters::restore(&name, kafka.dead_letter_path(), &recorded)?;
                let writer = KafkaSink::open(&name, &kafka, &schema, encoder)?;
                Ok::<_, SinkError>((KafkaSteps::new(writer, metrics), settled))
            })
            .await
            .map_err(|e| StatementError::PipelineLost {
                pipeline: format!("sink {sink}"),
                reason: e.to_string(),
            })?;
            let (steps, settled) = opened.map_err(fail)?;
            if settled == Some(Settled::Committed) {
                tracing::warn!(
                    sink,
                    step,
                    "the last run stopped between the state commit and the Kafka commit of step {step}; committed its transaction now"
                );
            }
            Box::new(steps)
        } else {
            let Some(store) = &store else {
                return Err(StatementError::Invalid(format!(
                    "source {} has no state",
                    source.name
                )));
            };
            let dir = settings.path.clone().ok_or_else(|| {
                fail(
                    OptionError::Missing {
                        key: "path".into(),
                        doc: "an exactly-once sink writes a directory of step files",
                    }
                    .into(),
                )
            })?;
            let files = StepFiles::new(
                &dir.to_string_lossy(),
                sink,
                settings.format,
                options,
                schema,
            )
            .map_err(fail)?
            .with_metrics(metrics);
            let deleted = files.clean(store.checkpoint().step).await.map_err(fail)?;
            if !deleted.is_empty() {
                tracing::warn!(
                    sink,
                    "deleted {} uncommitted file(s) left by an earlier run: {}",
                    deleted.len(),
                    deleted.join(", ")
                );
            }
            Box::new(files)
        };
        let in_task = sink.to_string();
        let handle = tokio::task::spawn_blocking(move || -> Result<u64, StatementError> {
            let rows = match (&job, store.as_mut(), resumed.as_mut()) {
                (ExactlyOnce::Rows(source), Some(store), _) => {
                    steps::run(source, store, files.as_mut())?
                }
                (ExactlyOnce::Rows(source), None, Some(table)) => {
                    steps::run(source, table, files.as_mut())?
                }
                (ExactlyOnce::Query(q), Some(store), _) => {
                    steps::run_query(q, store, files.as_mut())?
                }
                _ => {
                    return Err(StatementError::Invalid(format!(
                        "sink {in_task} has neither a state directory nor a table to record its steps; this is a bug in weir"
                    )))
                }
            };
            Ok(rows)
        });
        self.run_steps(sink, line, state, handle).await
    }

    /// Runs the exactly-once pipeline `handle` (on a blocking thread) as `sink`'s, adding the
    /// rows it wrote to the sink's count.
    async fn run_steps(
        &self,
        sink: &str,
        line: u64,
        state: Arc<tokio::sync::Mutex<SinkState>>,
        handle: tokio::task::JoinHandle<Result<u64, StatementError>>,
    ) -> Result<(), StatementError> {
        let name = sink.to_string();
        let pipeline = async move {
            let rows = handle.await.map_err(|e| StatementError::PipelineLost {
                pipeline: format!("sink {name}"),
                reason: e.to_string(),
            })??;
            state.lock().await.rows += rows;
            Ok(())
        };
        self.run_pipeline(sink, line, pipeline).await
    }

    /// A `delta` or `kafka` sink fed straight from a Kafka source in a consumer group: the
    /// partitions are the group's assignment, their positions the table's (or the group's
    /// offsets, committed inside the sink's transactions), fenced per partition
    /// (`pipeline::group`).
    async fn group_sink(
        &self,
        sink: &str,
        source: &Arc<LiveSource>,
        job: &ExactlyOnce,
        group: weir_kafka::GroupConfig,
        line: u64,
    ) -> Result<(), StatementError> {
        let fail = |e: SinkError| StatementError::Sink {
            sink: sink.to_string(),
            source: Box::new(e),
        };
        let state = self
            .sink_state(sink)
            .ok_or_else(|| StatementError::Invalid(format!("no sink named '{sink}'")))?;
        let (settings, options, metrics, kafka, encoder) = {
            let st = state.lock().await;
            (
                st.settings.clone(),
                st.options.clone(),
                Arc::clone(&st.metrics),
                st.kafka.clone(),
                st.encoder.clone(),
            )
        };
        if !(settings.delta || settings.kafka) || !source.follow {
            return Err(StatementError::Invalid(format!(
                "source {} joins consumer group '{}': only a `delta` or `kafka` sink fed \
                 straight from it (CREATE SINK {sink} FROM {} WITH ('connector' = 'delta', \
                 ...)), or by a continuous query over it, run with --follow, follows the \
                 group's assignments",
                source.name, group.group_id, source.name
            )));
        }
        let (query, schema) = match job {
            ExactlyOnce::Rows(_) => {
                if matches!(&source.group_state, Some(s) if s.key.is_none()) {
                    return Err(StatementError::Invalid(format!(
                        "source {} joins consumer group '{}' with 'state.dir' and no \
                         'dedup.key': a group's positions are kept by its sink, so 'state.dir' \
                         holds the partitions' dedup keys and a continuous query's windows, \
                         and sink {sink} takes the rows as they are; give 'dedup.key', or drop \
                         'state.dir'",
                        source.name, group.group_id
                    )));
                }
                (None, Arc::clone(&source.schema))
            }
            ExactlyOnce::Query(q) => {
                if source.group_state.is_none() {
                    return Err(StatementError::Invalid(format!(
                        "sink {sink} is fed by a continuous query over source {}, which joins \
                         consumer group '{}': each partition's open windows move with it, kept \
                         under the source's 'state.dir' (a directory every member reaches, or \
                         an object-storage URL); give the source 'state.dir'",
                        source.name, group.group_id
                    )));
                }
                (Some(Arc::clone(q)), Arc::clone(&q.schema))
            }
        };
        let mut steps: Box<dyn GroupSink> = if settings.delta {
            let delta = DeltaSettings::parse(sink, &options).map_err(fail)?;
            let (table, data_files) = DeltaSink::open(sink, delta, &options, &schema)
                .await
                .map_err(fail)?;
            Box::new(
                DeltaSteps::new(
                    table,
                    data_files,
                    tokio::runtime::Handle::current(),
                    metrics,
                    self.partitions(),
                )
                .map_err(fail)?,
            )
        } else {
            let (Some(mut kafka), Some(factory)) = (kafka, encoder) else {
                return Err(StatementError::Invalid(format!(
                    "sink {sink} has no encoder; this is a bug in weir"
                )));
            };
            // One transactional id per member: its transactions commit the offsets of the
            // partitions it holds, fenced by the group's generation rather than by the id. A
            // static member keeps its id across restarts, so a restart aborts at once what its
            // last run left open; a dynamic one takes a new id each run.
            let base = kafka
                .transactional_id
                .clone()
                .unwrap_or_else(|| format!("weir-{sink}"));
            let member = group.instance_id.clone().unwrap_or_else(run_id);
            kafka.producer.transactional_id = Some(format!("{base}-{member}"));
            if !kafka.transaction_timeout_given {
                // A member that dies with a transaction open holds its partitions' offsets until
                // the coordinator aborts it: short, as Kafka Streams' is.
                kafka.producer.transaction_timeout = GROUP_TRANSACTION_TIMEOUT;
            }
            let encoder = create_encoder(sink, factory.as_ref(), Some(&kafka), &schema, &options)
                .map_err(fail)?;
            let name = sink.to_string();
            let consumer = match &source.connector {
                crate::source::Connector::Kafka(k) => Some(k.consumer.clone()),
                _ => None,
            };
            let group_id = group.group_id.clone();
            let opened = tokio::task::spawn_blocking(move || {
                if let Some(consumer) = consumer {
                    same_cluster(&name, &group_id, &consumer, &kafka.producer)?;
                }
                let writer = KafkaSink::open(&name, &kafka, &schema, encoder)?;
                Ok::<_, SinkError>(KafkaSteps::new(writer, metrics))
            })
            .await
            .map_err(|e| StatementError::PipelineLost {
                pipeline: format!("sink {sink}"),
                reason: e.to_string(),
            })?;
            Box::new(opened.map_err(fail)?)
        };
        let source = Arc::clone(source);
        let handle = tokio::task::spawn_blocking(move || -> Result<u64, StatementError> {
            Ok(crate::pipeline::group::run(
                &source,
                &group,
                steps.as_mut(),
                query,
            )?)
        });
        self.run_steps(sink, line, state, handle).await
    }

    /// Writes the rows of `query` into `sink` as they come (in follow mode, until stopped).
    pub(super) async fn write_to_sink(
        &self,
        sink: &str,
        query: SqlText,
    ) -> Result<(), StatementError> {
        let state = self
            .sink_state(sink)
            .ok_or_else(|| StatementError::Invalid(format!("no sink named '{sink}'")))?;
        let df = self.ctx.sql(&query.padded).await?;
        let schema: SchemaRef = Arc::new(df.schema().as_arrow().clone());
        let mut stream = self.execute(df).await?;
        let follow = self.options.follow;
        let name = sink.to_string();
        let pipeline = async move {
            let fail = |source: SinkError| StatementError::Sink {
                sink: name.clone(),
                source: Box::new(source),
            };
            let mut st = state.lock().await;
            let st = &mut *st;
            let linger = st.writer(&name, &schema, follow).map_err(fail)?.linger();
            *st.metrics.path.lock().unwrap_or_else(|e| e.into_inner()) = st.settings.path.clone();
            loop {
                // A writer that holds rows (a kafka sink's batches) sends them when no more
                // come for its linger time, so a quiet stream does not keep them back.
                let next = match linger {
                    Some(wait) => match tokio::time::timeout(wait, stream.next()).await {
                        Ok(next) => next,
                        Err(_) => {
                            st.writer(&name, &schema, follow)
                                .map_err(fail)?
                                .idle()
                                .map_err(fail)?;
                            continue;
                        }
                    },
                    None => stream.next().await,
                };
                let Some(batch) = next else { break };
                let batch = batch?;
                let writer = st.writer(&name, &schema, follow).map_err(fail)?;
                writer.write(&batch).map_err(fail)?;
                st.rows += batch.num_rows() as u64;
                st.metrics.rows.fetch_add(
                    batch.num_rows() as u64,
                    std::sync::atomic::Ordering::Relaxed,
                );
            }
            // Rows still being encoded on a writer's threads: their errors are this statement's.
            st.writer(&name, &schema, follow)
                .map_err(fail)?
                .sync()
                .map_err(fail)?;
            Ok(())
        };
        self.run_pipeline(sink, query.start.line, pipeline).await
    }
}

/// The schema registry's schema for a `kafka` sink's values, with `'schema.registry.url'`:
/// looked up when the sink is created, so a missing subject fails the statement. The framing
/// is written for the `protobuf` encoding only, whose schema then comes from the registry.
fn registry_schema(
    sink: &str,
    options: &Options,
    messages: Option<&(String, weir_codec::Framing)>,
) -> Result<Option<crate::registry::SinkSchema>, SinkError> {
    if options.list(&crate::registry::URL).is_empty() {
        if options.flag(&AUTO_REGISTER)? {
            return Err(SinkError::Options(format!(
                "sink {sink}: 'auto.register.schemas' registers with the schema registry; give \
                 'schema.registry.url'"
            )));
        }
        return Ok(None);
    }
    match messages.map(|(encoding, _)| encoding.as_str()) {
        Some("protobuf") => {}
        other => {
            return Err(SinkError::Options(format!(
                "sink {sink}: 'schema.registry.url' frames protobuf values ('encoding' = \
                 'protobuf'), not {}",
                other.map_or("these rows".to_string(), |e| format!("'{e}'"))
            )))
        }
    }
    let location = options
        .iter()
        .find(|(k, _)| *k == "location")
        .map(|(_, v)| v);
    let register = match (options.flag(&AUTO_REGISTER)?, location) {
        (false, None) => None,
        (false, Some(_)) => {
            return Err(SinkError::Options(format!(
                "sink {sink}: give 'location' or 'schema.registry.url', not both: with the \
                 registry the schema is the subject's latest (or set 'auto.register.schemas' \
                 = 'true' to register the file 'location' names)"
            )))
        }
        (true, None) => {
            return Err(SinkError::Options(format!(
                "sink {sink}: 'auto.register.schemas' registers the .proto file 'location' \
                 names; give it"
            )))
        }
        (true, Some(path)) => Some(registrable_proto(sink, path, options)?),
    };
    crate::registry::SinkSchema::open(sink, options, register.as_ref())
        .map_err(|e| SinkError::Options(format!("sink {sink}: {e}")))
}

/// The `.proto` file at `path` and the files it imports (found as `protoc` finds them: in
/// `'proto.include'`, then the file's own directory), to register. The well-known types
/// (`google/protobuf/*.proto`) are the registry's own and are not registered.
fn registrable_proto(
    sink: &str,
    path: &str,
    options: &Options,
) -> Result<crate::registry::ProtoFiles, SinkError> {
    if !path.ends_with(".proto") {
        return Err(SinkError::Options(format!(
            "sink {sink}: 'auto.register.schemas' registers a .proto file; 'location' = '{path}' \
             is not one"
        )));
    }
    let includes: Vec<std::path::PathBuf> = options
        .iter()
        .find(|(k, _)| *k == "proto.include")
        .map(|(_, v)| {
            v.split([':', ','])
                .filter(|p| !p.is_empty())
                .map(std::path::PathBuf::from)
                .collect()
        })
        .unwrap_or_default();
    let schema = weir_codec::ProtoSchema::load(path, &includes)
        .map_err(|e| SinkError::Options(format!("sink {sink}: {e}")))?;
    // Each file comes after the files it imports; the root is the one no file imports.
    let files = schema.own_files();
    let imported: std::collections::HashSet<&String> =
        files.iter().flat_map(|(_, imports)| imports).collect();
    let Some((root, root_imports)) = files.iter().find(|(name, _)| !imported.contains(name)) else {
        return Err(SinkError::Options(format!(
            "sink {sink}: {path} holds no file to register"
        )));
    };
    let mut dirs = includes.clone();
    dirs.push(
        std::path::Path::new(path)
            .parent()
            .filter(|p| !p.as_os_str().is_empty())
            .unwrap_or(std::path::Path::new("."))
            .to_path_buf(),
    );
    let read = |file: &str| -> Result<String, SinkError> {
        let found = dirs
            .iter()
            .map(|d| d.join(file))
            .find(|p| p.is_file())
            .ok_or_else(|| {
                SinkError::Options(format!(
                    "sink {sink}: {path} imports \"{file}\", which is in none of {dirs:?}"
                ))
            })?;
        std::fs::read_to_string(&found).map_err(|source| SinkError::Io {
            path: found.display().to_string(),
            source,
        })
    };
    let mut imported_files = Vec::new();
    for (name, imports) in files.iter().filter(|(name, _)| name != root) {
        imported_files.push((name.clone(), read(name)?, imports.clone()));
    }
    let text = std::fs::read_to_string(path).map_err(|source| SinkError::Io {
        path: path.to_string(),
        source,
    })?;
    Ok(crate::registry::ProtoFiles {
        text,
        imports: root_imports.clone(),
        imported: imported_files,
    })
}

/// The encoder of a sink's messages: the encoding's own, or for a `kafka` sink with the
/// schema registry, protobuf from the registry's schema with its framing before each message.
fn create_encoder(
    sink: &str,
    factory: &dyn EncoderFactory,
    kafka: Option<&KafkaSinkSettings>,
    schema: &SchemaRef,
    options: &Options,
) -> Result<Box<dyn weir_codec::Encoder>, SinkError> {
    if let Some(registry) = kafka.and_then(|k| k.registry.as_ref()) {
        let message = registry
            .schema
            .pool()
            .get_message_by_name(&registry.message)
            .ok_or_else(|| {
                SinkError::Options(format!(
                    "sink {sink}: message {} is not in schema id {}",
                    registry.message, registry.id
                ))
            })?;
        let encoder = weir_codec::ProtoEncoder::new(&message, schema.fields())
            .map_err(|e| {
                SinkError::Options(format!(
                    "sink {sink}: schema id {} (subject '{}'): {e}",
                    registry.id, registry.subject
                ))
            })?
            .with_prefix(registry.prefix.clone());
        return Ok(Box::new(encoder));
    }
    factory
        .create_encoder(&EncoderRequest {
            sink,
            schema: Arc::clone(schema),
            options,
        })
        .map_err(SinkError::Encode)
}

/// The `transaction.timeout.ms` of a consumer group member's Kafka sink unless one is given.
const GROUP_TRANSACTION_TIMEOUT: std::time::Duration = std::time::Duration::from_secs(10);

/// A name for this run, unlikely to be another's: the process id and the clock's nanoseconds.
fn run_id() -> String {
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_nanos());
    format!("{:x}-{:x}", std::process::id(), nanos & 0xffff_ffff_ffff)
}

/// Refuses a group's `kafka` sink whose topic is on another cluster than the group: a
/// transaction commits a group's offsets only on its own cluster, so every step there would be
/// refused as fenced.
fn same_cluster(
    sink: &str,
    group_id: &str,
    consumer: &weir_kafka::ConsumerConfig,
    producer: &weir_kafka::ProducerConfig,
) -> Result<(), SinkError> {
    let id = |brokers: &[String], security| {
        weir_kafka::cluster_id(brokers, security, producer.request_timeout).map_err(|source| {
            SinkError::Kafka {
                sink: sink.to_string(),
                source,
            }
        })
    };
    let source = id(&consumer.brokers, &consumer.security)?;
    let output = id(&producer.brokers, &producer.security)?;
    match (source, output) {
        (Some(a), Some(b)) if a != b => Err(SinkError::Options(format!(
            "sink {sink}: its topic '{}' is on Kafka cluster '{b}', and consumer group \
             '{group_id}' on cluster '{a}'; a transaction commits a group's offsets only on its \
             own cluster. Write to a topic of the source's cluster (and copy it on, if need be)",
            producer.topic
        ))),
        _ => Ok(()),
    }
}
