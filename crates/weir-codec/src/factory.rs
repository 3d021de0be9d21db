//! Encodings as plug-ins: the [`DecoderFactory`] and [`EncoderFactory`] traits, their options,
//! and the built-in `protobuf` and `raw` factories.
//!
//! The engine names an encoding in SQL (`'encoding' = 'protobuf'`) and looks the name up in its
//! registry. A factory receives the declared columns and the source's `WITH` options and returns
//! a [`Decoder`]; built-in and user encodings go through exactly the same traits. The built-in
//! ones are `protobuf` ([`ProtobufFactory`]), `json` ([`JsonFactory`]) and `raw` ([`RawFactory`]).

use std::fmt;
use std::path::PathBuf;
use std::sync::Arc;

use arrow_array::builder::BinaryBuilder;
use arrow_array::{ArrayRef, RecordBatch};
use arrow_schema::{DataType, Field, Schema, SchemaRef, TimeUnit};

use crate::error::{CodecError, DecodeError, PlanError};
use crate::json::{JsonDecoder, JsonDecoderOptions, JsonEncoder};
use crate::options::{OptionError, OptionKind, OptionSpec, Options};
use crate::protobuf::{default_columns, ColumnSpec, ProtoDecoder, ProtoDecoderOptions};
use crate::schema::ProtoSchema;
use crate::{Decoder, Encoder};

/// What a [`DecoderFactory`] is asked to build.
#[derive(Debug)]
pub struct DecoderRequest<'a> {
    /// The source's name, for error messages.
    pub source: &'a str,
    /// The columns to produce, in order.
    pub columns: &'a [ColumnSpec],
    /// The source's `WITH` options.
    pub options: &'a Options,
    /// Rows per batch.
    pub batch_size: usize,
}

/// Builds decoders for one encoding, in two phases. Implemented by the built-in encodings and by
/// user code alike; registered with the engine under the name SQL uses in `'encoding' = '...'`.
///
/// [`DecoderFactory::prepare`] does the expensive work once per source: it reads the options,
/// loads and compiles the schema and builds the decode plan. The [`PreparedDecoder`] it returns
/// then hands each partition a decoder of its own ([`PreparedDecoder::decoder`]) that shares the
/// plan, so a scan with many partitions compiles nothing more.
pub trait DecoderFactory: Send + Sync {
    /// Prepares decoding `request.columns` with the source's options. Called once per source
    /// (at `CREATE SOURCE`), so every schema and type error surfaces there.
    fn prepare(&self, request: &DecoderRequest<'_>)
        -> Result<Arc<dyn PreparedDecoder>, CodecError>;

    /// The options this encoding reads, declared once (the engine rejects any other key that
    /// no connector or sink declares either).
    fn options(&self) -> &[OptionSpec] {
        &[]
    }

    /// The columns to use when a source declares none (or ends its column list with `...`).
    fn default_columns(&self, options: &Options) -> Result<Vec<ColumnSpec>, CodecError> {
        let _ = options;
        Err(CodecError::Unsupported(
            "this encoding cannot infer columns; declare them in the CREATE SOURCE column list"
                .into(),
        ))
    }

    /// True when messages carry the Confluent protobuf message-index list after the schema id
    /// (so `'confluent.wire' = 'true'` must strip it too).
    fn confluent_message_indexes(&self) -> bool {
        false
    }
}

/// A decoding set up once (schema compiled, plan built), from which each partition takes a
/// decoder of its own.
pub trait PreparedDecoder: Send + Sync {
    /// The schema of the batches every decoder of this preparation produces.
    fn schema(&self) -> SchemaRef;

    /// A decoder with its own buffers, sharing everything compiled. Cheap: call it once per
    /// partition.
    fn decoder(&self) -> Box<dyn Decoder>;

    /// The same decoding restricted to `columns` (indexes into this preparation's columns, in
    /// the order given), for a scan that reads only some columns. The default decodes every
    /// column and keeps the requested ones; the built-in encodings compile a narrower plan
    /// instead, which skips the other fields unread.
    fn project(&self, columns: &[usize]) -> Result<Arc<dyn PreparedDecoder>, CodecError>;

    /// The same columns read from a container file whose header names the writer's schema
    /// (an Avro object container file), resolved against this preparation's schema. Its
    /// decoders split a block into values with [`Decoder::decode_prefix`]. The default: the
    /// encoding reads no container files.
    fn for_container(
        &self,
        header: &crate::ContainerHeader,
    ) -> Result<Arc<dyn PreparedDecoder>, CodecError> {
        let _ = header;
        Err(CodecError::Unsupported(
            "only the 'avro' encoding reads Avro container files".into(),
        ))
    }
}

/// The default [`PreparedDecoder::project`]: decode everything, then keep `columns` of each
/// batch. Call it from an encoding that cannot compile a narrower decoder.
pub fn project_batches(
    prepared: Arc<dyn PreparedDecoder>,
    columns: &[usize],
) -> Result<Arc<dyn PreparedDecoder>, CodecError> {
    let schema = prepared.schema();
    if let Some(&bad) = columns.iter().find(|&&c| c >= schema.fields().len()) {
        return Err(CodecError::Other(format!(
            "column {bad} is out of range: the decoder produces {} columns",
            schema.fields().len()
        )));
    }
    let projected = Arc::new(
        schema
            .project(columns)
            .map_err(|e| CodecError::Other(e.to_string()))?,
    );
    Ok(Arc::new(ProjectedBatches {
        inner: prepared,
        columns: columns.to_vec(),
        schema: projected,
    }))
}

/// See [`project_batches`].
struct ProjectedBatches {
    inner: Arc<dyn PreparedDecoder>,
    columns: Vec<usize>,
    schema: SchemaRef,
}

impl PreparedDecoder for ProjectedBatches {
    fn schema(&self) -> SchemaRef {
        Arc::clone(&self.schema)
    }

    fn decoder(&self) -> Box<dyn Decoder> {
        Box::new(ProjectingDecoder {
            inner: self.inner.decoder(),
            columns: self.columns.clone(),
            schema: Arc::clone(&self.schema),
        })
    }

    fn project(&self, columns: &[usize]) -> Result<Arc<dyn PreparedDecoder>, CodecError> {
        let mapped = columns
            .iter()
            .map(|&c| {
                self.columns.get(c).copied().ok_or_else(|| {
                    CodecError::Other(format!(
                        "column {c} is out of range: the decoder produces {} columns",
                        self.columns.len()
                    ))
                })
            })
            .collect::<Result<Vec<_>, _>>()?;
        project_batches(Arc::clone(&self.inner), &mapped)
    }
}

/// A decoder of every column whose batches are cut down to the requested ones.
struct ProjectingDecoder {
    inner: Box<dyn Decoder>,
    columns: Vec<usize>,
    schema: SchemaRef,
}

impl Decoder for ProjectingDecoder {
    fn schema(&self) -> SchemaRef {
        Arc::clone(&self.schema)
    }

    fn decode(&mut self, message: &[u8]) -> Result<(), DecodeError> {
        self.inner.decode(message)
    }

    fn buffered_rows(&self) -> usize {
        self.inner.buffered_rows()
    }

    fn batch_size(&self) -> usize {
        self.inner.batch_size()
    }

    fn flush(&mut self) -> Option<RecordBatch> {
        let batch = self.inner.flush()?;
        let rows = batch.num_rows();
        let columns = self
            .columns
            .iter()
            .map(|&c| Arc::clone(batch.column(c)))
            .collect();
        Some(crate::batch_of(&self.schema, columns, rows))
    }
}

/// What an [`EncoderFactory`] is asked to build.
#[derive(Debug)]
pub struct EncoderRequest<'a> {
    /// The sink's name, for error messages.
    pub sink: &'a str,
    /// The schema of the rows to encode.
    pub schema: SchemaRef,
    /// The sink's `WITH` options.
    pub options: &'a Options,
}

/// Builds encoders for one encoding.
pub trait EncoderFactory: Send + Sync {
    /// The options this encoder reads, declared once.
    fn options(&self) -> &[OptionSpec] {
        &[]
    }

    /// An encoder for rows of `request.schema`. A sink may create several, one for each of
    /// its encoder threads, and give each a share of the batches: an encoder's output for a
    /// batch must depend on that batch alone.
    fn create_encoder(&self, request: &EncoderRequest<'_>) -> Result<Box<dyn Encoder>, CodecError>;
}

/// The built-in `protobuf` encoding: a [`ProtoDecoder`] from a runtime schema.
///
/// Options: `'message'` (required: the full message name), `'location'` (required: a `.proto`
/// file or a descriptor set), `'proto.include'` (import paths, separated by `:` or `,`),
/// `'protobuf.max.depth'` (100). A column's [`ColumnSpec::path`] binds it to a nested field.
#[derive(Debug, Default, Clone, Copy)]
pub struct ProtobufFactory;

/// The `protobuf` encoding's options.
pub const PROTOBUF_OPTIONS: &[OptionSpec] = &[MESSAGE, LOCATION, PROTO_INCLUDE, PROTOBUF_MAX_DEPTH];

/// The options of the `protobuf` encoding's encoder (a sink's).
const PROTOBUF_ENCODER_OPTIONS: &[OptionSpec] = &[MESSAGE, LOCATION, PROTO_INCLUDE];

const MESSAGE: OptionSpec = OptionSpec::new(
    "message",
    OptionKind::Text,
    "protobuf: the message type, `package.Message` (required)",
);
const LOCATION: OptionSpec = OptionSpec::new(
    "location",
    OptionKind::Path,
    "protobuf: the schema, a `.proto` file or a descriptor set (`.pb`, `.desc`) (required)",
);
const PROTO_INCLUDE: OptionSpec = OptionSpec::new(
    "proto.include",
    OptionKind::List,
    "protobuf: import paths for a `.proto` file, separated by `:` or `,`",
);
const PROTOBUF_MAX_DEPTH: OptionSpec = OptionSpec::new(
    "protobuf.max.depth",
    OptionKind::Count,
    "protobuf: the deepest nesting accepted",
)
.default_value("100");

impl ProtobufFactory {
    fn schema(options: &Options) -> Result<(ProtoSchema, String), CodecError> {
        let message = options.require(&MESSAGE)?.to_string();
        let location = options.require(&LOCATION)?;
        let includes: Vec<PathBuf> = options
            .text(&PROTO_INCLUDE)
            .map(|s| {
                s.split([':', ','])
                    .map(str::trim)
                    .filter(|p| !p.is_empty())
                    .map(PathBuf::from)
                    .collect()
            })
            .unwrap_or_default();
        Ok((ProtoSchema::load(location, &includes)?, message))
    }
}

impl DecoderFactory for ProtobufFactory {
    fn options(&self) -> &[OptionSpec] {
        PROTOBUF_OPTIONS
    }

    fn prepare(
        &self,
        request: &DecoderRequest<'_>,
    ) -> Result<Arc<dyn PreparedDecoder>, CodecError> {
        let (schema, message) = Self::schema(request.options)?;
        let options = ProtoDecoderOptions {
            batch_size: request.batch_size,
            max_depth: request
                .options
                .count(&PROTOBUF_MAX_DEPTH)?
                .map_or(usize::MAX, |d| usize::try_from(d).unwrap_or(usize::MAX)),
        };
        let decoder = ProtoDecoder::new(&schema, &message, request.columns, options)?;
        Ok(Arc::new(PreparedProtobuf {
            schema,
            message,
            columns: request.columns.to_vec(),
            options,
            decoder,
        }))
    }

    fn default_columns(&self, options: &Options) -> Result<Vec<ColumnSpec>, CodecError> {
        let (schema, message) = Self::schema(options)?;
        Ok(default_columns(&schema, &message)?)
    }

    fn confluent_message_indexes(&self) -> bool {
        true
    }
}

impl EncoderFactory for ProtobufFactory {
    fn options(&self) -> &[OptionSpec] {
        PROTOBUF_ENCODER_OPTIONS
    }

    fn create_encoder(&self, request: &EncoderRequest<'_>) -> Result<Box<dyn Encoder>, CodecError> {
        let (schema, message) = Self::schema(request.options)?;
        let descriptor = schema.pool().get_message_by_name(&message).ok_or_else(|| {
            CodecError::Other(format!(
                "sink {}: message {message} is not in the schema given by 'location'",
                request.sink
            ))
        })?;
        let encoder = crate::ProtoEncoder::new(&descriptor, request.schema.fields())
            .map_err(|e| CodecError::Other(format!("sink {}: {e}", request.sink)))?;
        Ok(Box::new(encoder))
    }
}

/// The `protobuf` encoding prepared: the schema loaded once, the plan compiled once.
struct PreparedProtobuf {
    schema: ProtoSchema,
    message: String,
    columns: Vec<ColumnSpec>,
    options: ProtoDecoderOptions,
    decoder: ProtoDecoder,
}

impl PreparedDecoder for PreparedProtobuf {
    fn schema(&self) -> SchemaRef {
        self.decoder.schema()
    }

    fn decoder(&self) -> Box<dyn Decoder> {
        Box::new(self.decoder.fresh())
    }

    fn project(&self, columns: &[usize]) -> Result<Arc<dyn PreparedDecoder>, CodecError> {
        let columns = pick(&self.columns, columns)?;
        // The schema already loaded: a projection compiles a plan, never reads a file.
        let decoder = ProtoDecoder::new(&self.schema, &self.message, &columns, self.options)?;
        Ok(Arc::new(PreparedProtobuf {
            schema: self.schema.clone(),
            message: self.message.clone(),
            columns,
            options: self.options,
            decoder,
        }))
    }
}

/// `columns[i]` for each requested index.
pub(crate) fn pick(
    columns: &[ColumnSpec],
    indexes: &[usize],
) -> Result<Vec<ColumnSpec>, CodecError> {
    indexes
        .iter()
        .map(|&i| {
            columns.get(i).cloned().ok_or_else(|| {
                CodecError::Other(format!(
                    "column {i} is out of range: the decoder produces {} columns",
                    columns.len()
                ))
            })
        })
        .collect()
}

/// The built-in `json` encoding: a [`JsonDecoder`] for the declared columns, and a
/// [`JsonEncoder`] for a sink's rows (one object per row, nulls left out).
///
/// Options: `'json.on.mismatch'` = `'error'` (default) or `'null'` (a value of the wrong type
/// or out of range becomes a null instead of rejecting the message), `'json.max.depth'` (128),
/// and `'timestamp.unit.<column>'` = `'seconds'` | `'millis'` | `'micros'` | `'nanos'` for the
/// unit of numbers in a Timestamp column (default: the column's own unit).
#[derive(Debug, Default, Clone, Copy)]
pub struct JsonFactory;

/// The `json` encoding's options.
pub const JSON_OPTIONS: &[OptionSpec] = &[JSON_ON_MISMATCH, JSON_MAX_DEPTH, JSON_TIMESTAMP_UNIT];

const JSON_ON_MISMATCH: OptionSpec = OptionSpec::new(
    "json.on.mismatch",
    OptionKind::Choice(&["error", "null"]),
    "json: a value of the wrong type or out of range rejects the message, or becomes a null",
)
.default_value("error");
const JSON_MAX_DEPTH: OptionSpec = OptionSpec::new(
    "json.max.depth",
    OptionKind::Count,
    "json: the deepest nesting accepted",
)
.default_value("128");
const JSON_TIMESTAMP_UNIT: OptionSpec = OptionSpec::new(
    "timestamp.unit.<column>",
    OptionKind::Choice(&["seconds", "millis", "micros", "nanos"]),
    "json: the unit of epoch numbers in that Timestamp column (RFC 3339 text is always accepted)",
);

impl DecoderFactory for JsonFactory {
    fn options(&self) -> &[OptionSpec] {
        JSON_OPTIONS
    }

    fn prepare(
        &self,
        request: &DecoderRequest<'_>,
    ) -> Result<Arc<dyn PreparedDecoder>, CodecError> {
        let o = request.options;
        let mut options = JsonDecoderOptions {
            batch_size: request.batch_size,
            ..JsonDecoderOptions::default()
        };
        if let Some(v) = o.choice(&JSON_ON_MISMATCH)? {
            options.mismatch = v.parse().map_err(|_| {
                OptionError::invalid(
                    &JSON_ON_MISMATCH,
                    JSON_ON_MISMATCH.key,
                    v,
                    "'error' or 'null'",
                )
            })?;
        }
        if let Some(depth) = o.count(&JSON_MAX_DEPTH)? {
            options.max_depth = usize::try_from(depth).unwrap_or(usize::MAX);
        }
        for (column, unit) in o.family(&JSON_TIMESTAMP_UNIT) {
            let key = format!("timestamp.unit.{column}");
            if !request.columns.iter().any(|c| c.name == column) {
                return Err(OptionError::invalid(
                    &JSON_TIMESTAMP_UNIT,
                    &key,
                    &unit,
                    format!("a declared column; there is no column '{column}'"),
                )
                .into());
            }
            let unit = unit.parse().map_err(|_| {
                OptionError::invalid(
                    &JSON_TIMESTAMP_UNIT,
                    &key,
                    &unit,
                    "one of 'seconds', 'millis', 'micros', 'nanos'",
                )
            })?;
            options.timestamp_units.push((column, unit));
        }
        let decoder = JsonDecoder::new(request.columns, options.clone())?;
        Ok(Arc::new(PreparedJson {
            columns: request.columns.to_vec(),
            options,
            decoder,
        }))
    }
}

impl EncoderFactory for JsonFactory {
    fn create_encoder(&self, request: &EncoderRequest<'_>) -> Result<Box<dyn Encoder>, CodecError> {
        JsonEncoder::new(request.schema.fields()).map(|e| Box::new(e) as Box<dyn Encoder>)
    }
}

/// The `json` encoding prepared: the key matchers built once.
struct PreparedJson {
    columns: Vec<ColumnSpec>,
    options: JsonDecoderOptions,
    decoder: JsonDecoder,
}

impl PreparedDecoder for PreparedJson {
    fn schema(&self) -> SchemaRef {
        self.decoder.schema()
    }

    fn decoder(&self) -> Box<dyn Decoder> {
        Box::new(self.decoder.fresh())
    }

    fn project(&self, columns: &[usize]) -> Result<Arc<dyn PreparedDecoder>, CodecError> {
        let columns = pick(&self.columns, columns)?;
        let mut options = self.options.clone();
        options
            .timestamp_units
            .retain(|(c, _)| columns.iter().any(|x| &x.name == c));
        let decoder = JsonDecoder::new(&columns, options.clone())?;
        Ok(Arc::new(PreparedJson {
            columns,
            options,
            decoder,
        }))
    }
}

/// The built-in `raw` encoding: the whole message as one Binary column (any name; `value` when
/// inferred). As an encoder it writes the bytes of a Binary or Utf8 column (the only column, or
/// the one named by `'raw.column'`) as the message.
#[derive(Debug, Default, Clone, Copy)]
pub struct RawFactory;

impl DecoderFactory for RawFactory {
    fn prepare(
        &self,
        request: &DecoderRequest<'_>,
    ) -> Result<Arc<dyn PreparedDecoder>, CodecError> {
        let fields = match request.columns {
            [] => Vec::new(),
            [c] if matches!(c.data_type, DataType::Binary) => {
                vec![Field::new(&c.name, DataType::Binary, false)]
            }
            [c] => {
                return Err(CodecError::Plan(PlanError::TypeMismatch {
                    column: c.name.clone(),
                    field: "the raw message".into(),
                    field_type: "bytes".into(),
                    column_type: c.data_type.to_string(),
                    hint: "; declare it BYTEA (Arrow Binary)".into(),
                }))
            }
            _ => {
                return Err(CodecError::Unsupported(
                    "the raw encoding produces exactly one Binary column".into(),
                ))
            }
        };
        Ok(Arc::new(PreparedRaw {
            schema: Arc::new(Schema::new(fields)),
            batch_size: request.batch_size.max(1),
        }))
    }

    fn default_columns(&self, _options: &Options) -> Result<Vec<ColumnSpec>, CodecError> {
        Ok(vec![ColumnSpec::new("value", DataType::Binary)])
    }
}

/// The `raw` encoding prepared: its one column, or none.
struct PreparedRaw {
    schema: SchemaRef,
    batch_size: usize,
}

impl PreparedDecoder for PreparedRaw {
    fn schema(&self) -> SchemaRef {
        Arc::clone(&self.schema)
    }

    fn decoder(&self) -> Box<dyn Decoder> {
        Box::new(RawDecoder {
            schema: Arc::clone(&self.schema),
            values: BinaryBuilder::new(),
            rows: 0,
            batch_size: self.batch_size,
        })
    }

    fn project(&self, columns: &[usize]) -> Result<Arc<dyn PreparedDecoder>, CodecError> {
        let schema = self
            .schema
            .project(columns)
            .map_err(|e| CodecError::Other(e.to_string()))?;
        Ok(Arc::new(PreparedRaw {
            schema: Arc::new(schema),
            batch_size: self.batch_size,
        }))
    }
}

/// The `raw` encoder's options.
pub const RAW_ENCODER_OPTIONS: &[OptionSpec] = &[RAW_COLUMN];

const RAW_COLUMN: OptionSpec = OptionSpec::new(
    "raw.column",
    OptionKind::Text,
    "raw: the Binary or Utf8 column written as the message, when the rows have several",
);

impl EncoderFactory for RawFactory {
    fn options(&self) -> &[OptionSpec] {
        RAW_ENCODER_OPTIONS
    }

    fn create_encoder(&self, request: &EncoderRequest<'_>) -> Result<Box<dyn Encoder>, CodecError> {
        let fields = request.schema.fields();
        let index = match request.options.text(&RAW_COLUMN) {
            Some(name) => fields
                .iter()
                .position(|f| f.name() == name)
                .ok_or_else(|| {
                    OptionError::invalid(
                        &RAW_COLUMN,
                        RAW_COLUMN.key,
                        name,
                        format!("a column sink {} writes", request.sink),
                    )
                })?,
            None if fields.len() == 1 => 0,
            None => {
                return Err(CodecError::Unsupported(format!(
                "the raw encoding writes one column; sink {} has {} (name one with 'raw.column')",
                request.sink,
                fields.len()
            )))
            }
        };
        match fields[index].data_type() {
            DataType::Binary | DataType::Utf8 => Ok(Box::new(RawEncoder { index })),
            other => Err(CodecError::Unsupported(format!(
                "the raw encoding writes a Binary or Utf8 column, not {other}"
            ))),
        }
    }
}

/// The encoder of the `raw` encoding.
struct RawEncoder {
    index: usize,
}

impl Encoder for RawEncoder {
    fn encode_batch(
        &mut self,
        batch: &RecordBatch,
        out: &mut Vec<u8>,
        ends: &mut Vec<usize>,
    ) -> Result<(), CodecError> {
        use arrow_array::cast::AsArray;
        use arrow_array::Array;
        let column = batch.column(self.index);
        let value = |i: usize| -> Option<&[u8]> {
            if column.is_null(i) {
                return None;
            }
            Some(match column.data_type() {
                DataType::Utf8 => column.as_string::<i32>().value(i).as_bytes(),
                _ => column.as_binary::<i32>().value(i),
            })
        };
        for i in 0..batch.num_rows() {
            // A null becomes an empty message; Kafka's null value is for the Kafka sink.
            out.extend_from_slice(value(i).unwrap_or_default());
            ends.push(out.len());
        }
        Ok(())
    }
}

/// The decoder of the `raw` encoding.
struct RawDecoder {
    schema: SchemaRef,
    values: BinaryBuilder,
    rows: usize,
    batch_size: usize,
}

impl fmt::Debug for RawDecoder {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("RawDecoder")
            .field("rows", &self.rows)
            .finish()
    }
}

impl Decoder for RawDecoder {
    fn schema(&self) -> SchemaRef {
        Arc::clone(&self.schema)
    }

    fn decode(&mut self, message: &[u8]) -> Result<(), DecodeError> {
        if !self.schema.fields().is_empty() {
            self.values.append_value(message);
        }
        self.rows += 1;
        Ok(())
    }

    fn buffered_rows(&self) -> usize {
        self.rows
    }

    fn batch_size(&self) -> usize {
        self.batch_size
    }

    fn flush(&mut self) -> Option<RecordBatch> {
        if self.rows == 0 {
            return None;
        }
        let columns: Vec<ArrayRef> = if self.schema.fields().is_empty() {
            Vec::new()
        } else {
            vec![Arc::new(self.values.finish())]
        };
        let rows = std::mem::take(&mut self.rows);
        Some(crate::batch_of(&self.schema, columns, rows))
    }
}

/// Parses a `'timestamp.unit'`-style value: `s`/`seconds`, `ms`/`millis`, `us`/`micros`,
/// `ns`/`nanos`.
pub fn parse_time_unit(key: &str, value: &str) -> Result<TimeUnit, CodecError> {
    match value.to_ascii_lowercase().as_str() {
        "s" | "second" | "seconds" => Ok(TimeUnit::Second),
        "ms" | "milli" | "millis" | "milliseconds" => Ok(TimeUnit::Millisecond),
        "us" | "micro" | "micros" | "microseconds" => Ok(TimeUnit::Microsecond),
        "ns" | "nano" | "nanos" | "nanoseconds" => Ok(TimeUnit::Nanosecond),
        _ => Err(OptionError::Invalid {
            key: key.into(),
            shown: format!("'{value}'"),
            expected: "one of 'seconds', 'millis', 'micros', 'nanos'".into(),
        }
        .into()),
    }
}

/// Strips the Confluent schema-registry framing from a message: the magic byte `0`, the 4-byte
/// schema id, and (for protobuf, `message_indexes`) the zigzag-varint message-index list.
/// Returns the payload and the schema id.
pub fn strip_confluent(message: &[u8], message_indexes: bool) -> Result<(&[u8], u32), DecodeError> {
    let framing = crate::registry::parse_framing(message, message_indexes)?;
    Ok((&message[framing.payload_at..], framing.schema_id))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn confluent_header_and_indexes_are_stripped() {
        // magic, schema id 7, one index (zigzag 2 = 1) of value 3 (zigzag 6), payload.
        let msg = [0u8, 0, 0, 0, 7, 2, 6, 0xAA, 0xBB];
        let (payload, id) = strip_confluent(&msg, true).unwrap();
        assert_eq!(id, 7);
        assert_eq!(payload, &[0xAA, 0xBB]);
        // The common [0] shortcut: a count of 0.
        let msg = [0u8, 0, 0, 1, 0, 0, 0xAA];
        assert_eq!(strip_confluent(&msg, true).unwrap().0, &[0xAA]);
        // JSON: no index list.
        assert_eq!(strip_confluent(&msg, false).unwrap().0, &[0, 0xAA]);
    }

    #[test]
    fn confluent_errors_name_the_problem() {
        let err = strip_confluent(&[1, 0, 0, 0, 1, 0], true).unwrap_err();
        assert!(err.to_string().contains("magic byte is 1"), "{err}");
        let err = strip_confluent(&[0, 0], true).unwrap_err();
        assert!(err.to_string().contains("shorter"), "{err}");
        let err = strip_confluent(&[0, 0, 0, 0, 1, 0x80], true).unwrap_err();
        assert_eq!(err.offset, 5);
    }

    #[test]
    fn raw_decoder_keeps_every_message() {
        let opts = Options::default();
        let cols = [ColumnSpec::new("v", DataType::Binary)];
        let prepared = RawFactory
            .prepare(&DecoderRequest {
                source: "s",
                columns: &cols,
                options: &opts,
                batch_size: 2,
            })
            .unwrap();
        let mut d = prepared.decoder();
        d.decode(b"ab").unwrap();
        assert!(d.take_full_batch().is_none());
        d.decode(b"").unwrap();
        let b = d.take_full_batch().unwrap();
        assert_eq!(b.num_rows(), 2);
        let wrong = [ColumnSpec::new("v", DataType::Utf8)];
        assert!(RawFactory
            .prepare(&DecoderRequest {
                source: "s",
                columns: &wrong,
                options: &opts,
                batch_size: 2,
            })
            .is_err());
    }
}
