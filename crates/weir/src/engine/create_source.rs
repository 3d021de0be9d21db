//! `CREATE SOURCE`: the options checked against what the connector, the encoding and the state
//! declare, the columns typed with DataFusion's own SQL type mapping, the encoding prepared once
//! (every schema and type error shows up here, not at the first query), and the source
//! registered as a table.

use std::sync::Arc;

use arrow::datatypes::{DataType, TimeUnit};
use datafusion::sql::sqlparser::ast::DataType as SqlDataType;
use weir_codec::{
    resolve_references, unknown_keys, ColumnSpec, DecoderFactory, DecoderRequest, Framing,
    OptionError, OptionSpec, Options,
};

use super::Engine;
use crate::error::{df_message, SourceError, SourceErrorKind, StatementError};
use crate::kafka_security::KAFKA_SECURITY_OPTIONS;
use crate::metrics::SourceStats;
use crate::pipeline::live_source::LiveSource;
use crate::pipeline::table::SourceTable;
use crate::registry;
use crate::source::file::{FileSettings, HeaderRead, FILE_OPTIONS, FRAMING};
use crate::source::kafka::{kafka_settings, KAFKA_OPTIONS};
use crate::source::meta::MetaKind;
use crate::source::state::{CommitInterval, StateSpec, STATE_OPTIONS};
use crate::source::WatermarkSpec;
use crate::source::{
    Connector, SourceDefinition, SourceSettings, CONFLUENT_WIRE, CONNECTOR, ENCODING, FIELDS,
    SCAN_BOUNDED, SOURCE_OPTIONS, TIMESTAMP_UNIT, WATERMARK_IDLE_TIMEOUT,
};
use crate::sql::{ColumnDecl, CreateSource};

impl Engine {
    pub(super) async fn create_source(&self, s: CreateSource) -> Result<(), StatementError> {
        let name = s.name.clone();
        if self.ctx.table_exist(name.as_str())? {
            if s.if_not_exists {
                return Ok(());
            }
            return Err(StatementError::Invalid(format!(
                "a source or table named '{name}' already exists"
            )));
        }
        let fail = |kind: SourceErrorKind| StatementError::Source(SourceError::new(&name, kind));
        let mut options =
            Options::new(resolve_references(s.options.clone()).map_err(|e| fail(e.into()))?);
        let connector = options
            .choice(&CONNECTOR)
            .map_err(|e| fail(e.into()))?
            .ok_or_else(|| fail(missing(&CONNECTOR)))?;
        let encoding = options
            .require(&ENCODING)
            .map_err(|e| fail(e.into()))?
            .to_string();
        let factory = self.encodings.decoder(&encoding).map_err(|e| {
            fail(
                OptionError::Invalid {
                    key: ENCODING.key.into(),
                    shown: format!("'{encoding}'"),
                    expected: e,
                }
                .into(),
            )
        })?;
        // 'schema.registry.url': protobuf schemas by id from the registry, or framing only.
        let stats = Arc::new(SourceStats::new(&name));
        let registry =
            registry::Use::open(&name, &options, &encoding, &stats).map_err(|e| fail(e.into()))?;
        let factory: Arc<dyn DecoderFactory> = match &registry {
            registry::Use::Decode(r) => Arc::new(registry::RegistryFactory(Arc::clone(r))),
            registry::Use::Avro(r) => Arc::new(registry::AvroRegistryFactory(Arc::clone(r))),
            _ => factory,
        };
        let connector_options: &[&[OptionSpec]] = match connector {
            "kafka" => &[
                KAFKA_OPTIONS,
                &KAFKA_SECURITY_OPTIONS,
                crate::storage::STORAGE_OPTIONS,
            ],
            _ => &[FILE_OPTIONS, crate::storage::STORAGE_OPTIONS],
        };
        let mut declared = vec![
            SOURCE_OPTIONS,
            STATE_OPTIONS,
            registry::REGISTRY_OPTIONS,
            factory.options(),
        ];
        declared.extend_from_slice(connector_options);
        unknown_keys(&options, &declared).map_err(|e| fail(e.into()))?;
        let mut container = None;
        let connector = match connector {
            "kafka" => Connector::Kafka(Box::new(kafka_settings(
                &name,
                &options,
                &self.options.kafka_properties,
            )?)),
            _ => {
                let mut file = FileSettings::parse(&name, &options)?;
                container = container_header(&name, &mut file, &mut options, &encoding, &registry)?;
                Connector::File(file)
            }
        };
        let mut settings =
            SourceSettings::parse(&name, &options, factory.confluent_message_indexes())?;
        match registry {
            // The registry's decoder reads the framing itself (it selects the schema).
            registry::Use::Decode(_) | registry::Use::Avro(_) => settings.confluent = None,
            registry::Use::Framing => {
                settings.confluent = Some(factory.confluent_message_indexes())
            }
            registry::Use::None => {}
        }
        let columns = self.columns(&s, &options, factory.as_ref()).await?;
        let includes =
            includes(&s, connector.name()).map_err(|e| fail(SourceErrorKind::Columns(e)))?;
        for (_, col) in &includes {
            if columns.iter().any(|c| &c.name == col) {
                return Err(fail(SourceErrorKind::Columns(format!(
                    "the metadata column '{col}' clashes with a declared column of that name"
                ))));
            }
        }
        let prepared = factory
            .prepare(&DecoderRequest {
                source: &name,
                columns: &columns,
                options: &options,
                batch_size: self.options.batch_size,
            })
            .map_err(|source| {
                fail(SourceErrorKind::Encoding {
                    encoding: encoding.clone(),
                    source,
                })
            })?;
        if let Some(header) = &container {
            // The first file's schema resolved against the columns now, not at the first query.
            prepared.for_container(header).map_err(|source| {
                fail(SourceErrorKind::Encoding {
                    encoding: encoding.clone(),
                    source,
                })
            })?;
        }
        let decoded = prepared.schema().fields().len();
        if decoded != columns.len() {
            return Err(fail(SourceErrorKind::Columns(format!(
                "encoding '{encoding}' produced {decoded} columns for {} declared",
                columns.len()
            ))));
        }
        let schema = SourceDefinition::table_schema(&prepared.schema(), &includes);
        let mut state = StateSpec::parse(&name, &options, &schema)?;
        let commit = CommitInterval::of(&name, &options)?;
        // A member of a consumer group keeps its dedup keys per partition, where every member
        // reads them: they move with the partitions.
        let group_state = match (connector.group(), state.take()) {
            (Some(group), Some(spec)) => Some(spec.for_group(&name, &group.group_id, &options)?),
            (None, spec) => {
                state = spec;
                None
            }
            (Some(_), None) => None,
        };
        if matches!(&connector, Connector::Kafka(_)) {
            let storage = crate::storage::given_storage_options(&options);
            let remote = group_state
                .as_ref()
                .is_some_and(|g| crate::storage::is_remote(&g.location));
            if let (Some(k), false) = (storage.first(), remote) {
                return Err(fail(SourceErrorKind::Option(OptionError::Conflict(
                    format!(
                        "'{k}' is an object-storage option: on a Kafka source it applies to a \
                     consumer group's 'state.dir' given as an s3://, gs:// or az:// URL"
                    ),
                ))));
            }
        }
        let watermark = self
            .watermark(&s, &options, &schema)
            .await
            .map_err(|e| fail(SourceErrorKind::Columns(e)))?;
        let definition = SourceDefinition {
            name: name.clone(),
            connector,
            settings,
            includes,
            schema,
            follow: self.options.follow
                && !options.flag(&SCAN_BOUNDED).map_err(|e| fail(e.into()))?,
            state,
            group_state,
            commit,
            commit_declared: CommitInterval::declared(&options),
            watermark,
            bad_message_hint: self.options.bad_message_hint,
        };
        let source = Arc::new(LiveSource::new(
            definition,
            prepared,
            stats,
            Arc::clone(&self.stop),
        ));
        let partitions = self.ctx.state().config().target_partitions();
        self.ctx.register_table(
            name.as_str(),
            Arc::new(SourceTable::new(Arc::clone(&source), partitions)),
        )?;
        self.source_stats
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .push(Arc::clone(&source.stats));
        self.sources
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .push(source);
        Ok(())
    }

    /// The decoded columns: the declared ones typed as DataFusion types them, bound to explicit
    /// field paths (`'fields.<column>'`), then the encoding's remaining columns when the list
    /// is absent or ends with `...`.
    async fn columns(
        &self,
        s: &CreateSource,
        options: &Options,
        factory: &dyn DecoderFactory,
    ) -> Result<Vec<ColumnSpec>, StatementError> {
        let name = &s.name;
        let fail = |kind: SourceErrorKind| StatementError::Source(SourceError::new(name, kind));
        let unit = match options
            .choice(&TIMESTAMP_UNIT)
            .map_err(|e| fail(e.into()))?
        {
            Some("seconds") => Some(TimeUnit::Second),
            Some("millis") => Some(TimeUnit::Millisecond),
            Some("micros") => Some(TimeUnit::Microsecond),
            _ => Some(TimeUnit::Nanosecond),
        };
        let mut columns: Vec<ColumnSpec> = Vec::new();
        for c in &s.columns {
            let ty = self
                .column_type(c, unit)
                .await
                .map_err(|e| fail(SourceErrorKind::Columns(e)))?;
            if columns.iter().any(|x| x.name == c.name) {
                return Err(fail(SourceErrorKind::Columns(format!(
                    "column '{}' is declared twice",
                    c.name
                ))));
            }
            columns.push(ColumnSpec::new(c.name.clone(), ty));
        }
        for (column, path) in options.family(&FIELDS) {
            match columns.iter_mut().find(|c| c.name == column) {
                Some(c) => c.path = Some(path),
                None => {
                    return Err(fail(
                        OptionError::invalid(
                            &FIELDS,
                            &format!("fields.{column}"),
                            &path,
                            format!("a declared column; there is no column '{column}'"),
                        )
                        .into(),
                    ))
                }
            }
        }
        if s.infer_rest {
            let rest = factory.default_columns(options).map_err(|source| {
                fail(SourceErrorKind::Encoding {
                    encoding: options.given(&ENCODING).unwrap_or_default().to_string(),
                    source,
                })
            })?;
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
        Ok(columns)
    }

    /// The source's watermark: `WATERMARK FOR col AS col - INTERVAL '...'` over a `TIMESTAMP`
    /// column, and `'watermark.idle.timeout'`.
    async fn watermark(
        &self,
        s: &CreateSource,
        options: &Options,
        schema: &arrow::datatypes::Schema,
    ) -> Result<Option<WatermarkSpec>, String> {
        let idle_timeout = options
            .duration(&WATERMARK_IDLE_TIMEOUT)
            .map_err(|e| e.to_string())?
            .unwrap_or(std::time::Duration::from_secs(30));
        let Some(w) = &s.watermark else {
            if options.given(&WATERMARK_IDLE_TIMEOUT).is_some() {
                return Err("'watermark.idle.timeout' needs a WATERMARK in the column list".into());
            }
            return Ok(None);
        };
        let at = format!(
            "WATERMARK (line {}, column {})",
            w.position.line, w.position.column
        );
        let column = schema
            .index_of(&w.column)
            .map_err(|_| format!("{at}: there is no column '{}'", w.column))?;
        let DataType::Timestamp(unit, _) = schema.field(column).data_type() else {
            return Err(format!(
                "{at}: column {} is {}, not a TIMESTAMP",
                w.column,
                schema.field(column).data_type()
            ));
        };
        let delay = match &w.delay {
            None => 0,
            Some(expr) => {
                let plan = self
                    .ctx
                    .state()
                    .create_logical_plan(&format!("SELECT {expr}"))
                    .await
                    .map_err(|e| format!("{at}: {}", df_message(&e)))?;
                let value = match &plan {
                    datafusion::logical_expr::LogicalPlan::Projection(p) => match p.expr.first() {
                        Some(datafusion::logical_expr::Expr::Literal(v, _)) => Some(v.clone()),
                        Some(datafusion::logical_expr::Expr::Alias(a)) => match a.expr.as_ref() {
                            datafusion::logical_expr::Expr::Literal(v, _) => Some(v.clone()),
                            _ => None,
                        },
                        _ => None,
                    },
                    _ => None,
                };
                let nanos = match value {
                    Some(datafusion::common::ScalarValue::IntervalMonthDayNano(Some(i)))
                        if i.months == 0 =>
                    {
                        i128::from(i.days) * 86_400_000_000_000 + i128::from(i.nanoseconds)
                    }
                    Some(datafusion::common::ScalarValue::IntervalDayTime(Some(i))) => {
                        i128::from(i.days) * 86_400_000_000_000
                            + i128::from(i.milliseconds) * 1_000_000
                    }
                    _ => {
                        return Err(format!(
                            "{at}: the delay {expr} is not an interval of fixed length (write \
                             INTERVAL '5 seconds')"
                        ))
                    }
                };
                if nanos < 0 {
                    return Err(format!("{at}: the delay {expr} is negative"));
                }
                crate::pipeline::window::in_unit(nanos, *unit)
            }
        };
        Ok(Some(WatermarkSpec {
            column,
            name: w.column.clone(),
            unit: *unit,
            delay,
            idle_timeout,
        }))
    }

    /// A declared column's Arrow type: DataFusion's own SQL-to-Arrow mapping, so a column type
    /// means exactly what it means in a DataFusion `CAST`; `'timestamp.unit'` sets the unit of
    /// `TIMESTAMP` columns declared without a precision.
    async fn column_type(
        &self,
        c: &ColumnDecl,
        unit: Option<TimeUnit>,
    ) -> Result<DataType, String> {
        let at = format!(
            "column {} (line {}, column {})",
            c.name, c.position.line, c.position.column
        );
        let ty = &c.sql_type;
        let plan = self
            .ctx
            .state()
            .create_logical_plan(&format!("SELECT CAST(NULL AS {ty})"))
            .await
            .map_err(|e| format!("{at}: type {ty}: {}", df_message(&e)))?;
        let mut data_type = plan.schema().field(0).data_type().clone();
        if let (Some(unit), SqlDataType::Timestamp(None, _), DataType::Timestamp(_, tz)) =
            (unit, ty, &data_type)
        {
            data_type = DataType::Timestamp(unit, tz.clone());
        }
        Ok(data_type)
    }
}

/// Avro container files (`'framing'` = `'avro-container'`, or `'encoding'` = `'avro'` with no
/// `'framing'` and a first file that is one): the first file's header, whose schema becomes
/// `'avro.schema'` when none is given (the columns a file source reads without declaring them).
fn container_header(
    name: &str,
    file: &mut FileSettings,
    options: &mut Options,
    encoding: &str,
    registry: &registry::Use,
) -> Result<Option<weir_codec::ContainerHeader>, StatementError> {
    let fail = |kind: SourceErrorKind| StatementError::Source(SourceError::new(name, kind));
    let conflict = |what: &str| fail(OptionError::Conflict(what.to_string()).into());
    let declared = file.framing == Framing::AvroContainer;
    if !declared && (encoding != "avro" || options.given(&FRAMING).is_some()) {
        return Ok(None);
    }
    if encoding != "avro" {
        return Err(conflict(
            "'framing' = 'avro-container' reads Avro container files: it needs 'encoding' = \
             'avro'",
        ));
    }
    let schema_given = ["avro.schema", "avro.schema.file"]
        .iter()
        .any(|k| options.iter().any(|(key, _)| key == *k));
    let found = file
        .first_container_header()
        .map_err(|e| StatementError::Source(SourceError::new(name, e)))?;
    let header = match found {
        Some((_, HeaderRead::Header(h))) => Some(h),
        // Not a container file: with 'encoding' = 'avro' and no 'framing', the default.
        Some((_, HeaderRead::NotContainer(_))) | None if !declared => return Ok(None),
        Some((first, HeaderRead::Short)) if !declared => {
            return Err(conflict(&format!(
                "'{first}' is shorter than an Avro container header; give 'framing'"
            )))
        }
        Some((_, HeaderRead::Short | HeaderRead::Empty)) | None if schema_given => None,
        Some((first, HeaderRead::Short | HeaderRead::Empty)) => {
            return Err(conflict(&format!(
                "'{first}' ends before its Avro container header does, so it gives no schema \
                 yet; give the schema in 'avro.schema' or 'avro.schema.file'"
            )))
        }
        None => {
            return Err(conflict(
                "every file is empty, so none gives a schema; give the schema in \
                 'avro.schema' or 'avro.schema.file'",
            ))
        }
        Some((first, HeaderRead::NotContainer(reason) | HeaderRead::Bad(reason))) => {
            return Err(StatementError::Source(SourceError::new(
                name,
                crate::error::FileError::Storage {
                    path: first.to_string(),
                    reason,
                },
            )))
        }
    };
    if !matches!(registry, registry::Use::None) {
        return Err(conflict(
            "a container file's header gives its schema: leave out 'schema.registry.url'",
        ));
    }
    if options.flag(&CONFLUENT_WIRE).map_err(|e| fail(e.into()))? {
        return Err(conflict(
            "a container file's values carry no registry framing: leave out 'confluent.wire'",
        ));
    }
    file.framing = Framing::AvroContainer;
    if let (false, Some(h)) = (schema_given, &header) {
        options.set("avro.schema", h.schema_text.clone());
    }
    Ok(header)
}

fn missing(spec: &OptionSpec) -> SourceErrorKind {
    OptionError::Missing {
        key: spec.key.into(),
        doc: spec.doc,
    }
    .into()
}

/// The metadata columns (`INCLUDE kind [AS name]`), checked against the connector.
fn includes(s: &CreateSource, connector: &str) -> Result<Vec<(MetaKind, String)>, String> {
    let mut out: Vec<(MetaKind, String)> = Vec::new();
    for inc in &s.includes {
        let kind = MetaKind::parse(&inc.kind, connector).map_err(|e| {
            format!(
                "{e} (line {}, column {})",
                inc.position.line, inc.position.column
            )
        })?;
        let col = inc
            .alias
            .clone()
            .unwrap_or_else(|| kind.default_name().to_string());
        if out.iter().any(|(_, n)| n == &col) {
            return Err(format!(
                "INCLUDE {} AS {col} clashes with another column named '{col}'",
                inc.kind
            ));
        }
        out.push((kind, col));
    }
    Ok(out)
}
