//! Encodings as plug-ins: the [`DecoderFactory`] and [`EncoderFactory`] traits, their options,
//! and the built-in `protobuf` and `raw` factories.
//!
//! The engine names an encoding in SQL (`'encoding' = 'protobuf'`) and looks the name up in its
//! registry. A factory receives the declared columns and the source's `WITH` options and returns
//! a [`Decoder`]; built-in and user encodings go through exactly the same traits. The built-in
//! ones are `protobuf` ([`ProtobufFactory`]), `json` ([`JsonFactory`]) and `raw` ([`RawFactory`]).

use std::collections::{BTreeMap, BTreeSet};
use std::fmt;
use std::path::PathBuf;
use std::sync::{Arc, Mutex};

use arrow_array::builder::BinaryBuilder;
use arrow_array::{ArrayRef, RecordBatch};
use arrow_schema::{DataType, Field, Schema, SchemaRef, TimeUnit};

use crate::error::{DecodeError, PlanError, SchemaError};
use crate::json::{JsonDecoder, JsonDecoderOptions};
use crate::protobuf::{default_columns, ColumnSpec, ProtoDecoder, ProtoDecoderOptions};
use crate::schema::ProtoSchema;
use crate::Decoder;

/// An encoding could not be set up: a missing or bad option, an unreadable schema, or columns
/// that do not fit.
#[derive(Debug, thiserror::Error)]
pub enum CodecError {
    /// A required option is missing.
    #[error("option '{0}' is required by this encoding")]
    MissingOption(String),
    /// An option has a value the encoding does not accept.
    #[error("option '{key}' = '{value}': {reason}")]
    BadOption {
        /// The option.
        key: String,
        /// Its value.
        value: String,
        /// What is accepted.
        reason: String,
    },
    /// The schema file could not be loaded.
    #[error(transparent)]
    Schema(#[from] SchemaError),
    /// The columns do not fit the message.
    #[error(transparent)]
    Plan(#[from] PlanError),
    /// The encoding cannot do what was asked (for example infer columns).
    #[error("{0}")]
    Unsupported(String),
    /// Anything else a user encoding reports.
    #[error("{0}")]
    Other(String),
}

/// The `WITH` options of a source or sink, as text. Reads are recorded so the engine can reject
/// options that nobody read (a typo such as `'mesage'` fails loudly instead of being ignored).
#[derive(Debug, Default)]
pub struct Options {
    values: BTreeMap<String, String>,
    // A Mutex rather than a RefCell so a source definition holding its options can be shared
    // with the partitions that run on other threads; it is only touched while setting up.
    read: Mutex<BTreeSet<String>>,
}

impl Clone for Options {
    fn clone(&self) -> Self {
        Self {
            values: self.values.clone(),
            read: Mutex::new(self.read_keys().clone()),
        }
    }
}

impl Options {
    /// Options from key/value pairs; a later duplicate key replaces an earlier one.
    pub fn new(pairs: impl IntoIterator<Item = (String, String)>) -> Self {
        Self {
            values: pairs.into_iter().collect(),
            read: Mutex::default(),
        }
    }

    fn read_keys(&self) -> std::sync::MutexGuard<'_, BTreeSet<String>> {
        // A poisoned set of read keys is still a valid set.
        self.read.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// True when no option was given.
    pub fn is_empty(&self) -> bool {
        self.values.is_empty()
    }

    /// The value of `key`, if given.
    pub fn get(&self, key: &str) -> Option<&str> {
        self.read_keys().insert(key.to_string());
        self.values.get(key).map(String::as_str)
    }

    /// The value of `key`, or an error naming it.
    pub fn require(&self, key: &str) -> Result<&str, CodecError> {
        self.get(key)
            .ok_or_else(|| CodecError::MissingOption(key.to_string()))
    }

    /// A boolean option (`true`/`false`), `default` when absent.
    pub fn get_bool(&self, key: &str, default: bool) -> Result<bool, CodecError> {
        match self.get(key) {
            None => Ok(default),
            Some(v) if v.eq_ignore_ascii_case("true") => Ok(true),
            Some(v) if v.eq_ignore_ascii_case("false") => Ok(false),
            Some(v) => Err(CodecError::BadOption {
                key: key.into(),
                value: v.into(),
                reason: "expected 'true' or 'false'".into(),
            }),
        }
    }

    /// Every option whose key starts with `prefix`, with the prefix removed.
    pub fn with_prefix(&self, prefix: &str) -> Vec<(String, String)> {
        let mut out = Vec::new();
        for (k, v) in &self.values {
            if let Some(rest) = k.strip_prefix(prefix) {
                self.read_keys().insert(k.clone());
                out.push((rest.to_string(), v.clone()));
            }
        }
        out
    }

    /// Keys that were given but never read.
    pub fn unread(&self) -> Vec<String> {
        let read = self.read_keys();
        self.values
            .keys()
            .filter(|k| !read.contains(*k))
            .cloned()
            .collect()
    }

    /// All options, in key order.
    pub fn iter(&self) -> impl Iterator<Item = (&str, &str)> {
        self.values.iter().map(|(k, v)| (k.as_str(), v.as_str()))
    }
}

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

/// Builds decoders for one encoding. Implemented by the built-in encodings and by user code
/// alike; registered with the engine under the name SQL uses in `'encoding' = '...'`.
pub trait DecoderFactory: Send + Sync {
    /// A decoder producing `request.columns`. Called once per partition, so the decoder may
    /// keep mutable buffers without locking.
    fn create_decoder(&self, request: &DecoderRequest<'_>) -> Result<Box<dyn Decoder>, CodecError>;

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

/// Turns rows back into message bytes (for sinks that write messages). Works a batch at a time
/// so an encoder can use columnar code; one message per row.
pub trait Encoder: Send {
    /// Appends one message per row of `batch` to `out`, and the end offset of each message in
    /// `out` to `ends` (so row `i` is `out[ends[i - 1]..ends[i]]`, starting from `out`'s length
    /// before the call).
    fn encode_batch(
        &mut self,
        batch: &RecordBatch,
        out: &mut Vec<u8>,
        ends: &mut Vec<usize>,
    ) -> Result<(), CodecError>;
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
    /// An encoder for rows of `request.schema`.
    fn create_encoder(&self, request: &EncoderRequest<'_>) -> Result<Box<dyn Encoder>, CodecError>;
}

/// The built-in `protobuf` encoding: a [`ProtoDecoder`] from a runtime schema.
///
/// Options: `'message'` (required: the full message name), `'location'` (required: a `.proto`
/// file or a descriptor set), `'proto.include'` (import paths, separated by `:` or `,`),
/// `'protobuf.max.depth'` (100). A column's [`ColumnSpec::path`] binds it to a nested field.
#[derive(Debug, Default, Clone, Copy)]
pub struct ProtobufFactory;

impl ProtobufFactory {
    fn schema(options: &Options) -> Result<(ProtoSchema, String), CodecError> {
        let message = options.require("message")?.to_string();
        let location = options.require("location")?;
        let includes: Vec<PathBuf> = options
            .get("proto.include")
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
    fn create_decoder(&self, request: &DecoderRequest<'_>) -> Result<Box<dyn Decoder>, CodecError> {
        let (schema, message) = Self::schema(request.options)?;
        let columns = request.columns;
        let mut options = ProtoDecoderOptions {
            batch_size: request.batch_size,
            ..ProtoDecoderOptions::default()
        };
        if let Some(depth) = request.options.get("protobuf.max.depth") {
            options.max_depth = depth.parse().map_err(|_| CodecError::BadOption {
                key: "protobuf.max.depth".into(),
                value: depth.into(),
                reason: "expected a whole number".into(),
            })?;
        }
        Ok(Box::new(ProtoDecoder::new(
            &schema, &message, columns, options,
        )?))
    }

    fn default_columns(&self, options: &Options) -> Result<Vec<ColumnSpec>, CodecError> {
        let (schema, message) = Self::schema(options)?;
        Ok(default_columns(&schema, &message)?)
    }

    fn confluent_message_indexes(&self) -> bool {
        true
    }
}

/// The built-in `json` encoding: a [`JsonDecoder`] for the declared columns.
///
/// Options: `'json.on.mismatch'` = `'error'` (default) or `'null'` (a value of the wrong type
/// or out of range becomes a null instead of rejecting the message), `'json.max.depth'` (128),
/// and `'timestamp.unit.<column>'` = `'seconds'` | `'millis'` | `'micros'` | `'nanos'` for the
/// unit of numbers in a Timestamp column (default: the column's own unit).
#[derive(Debug, Default, Clone, Copy)]
pub struct JsonFactory;

impl DecoderFactory for JsonFactory {
    fn create_decoder(&self, request: &DecoderRequest<'_>) -> Result<Box<dyn Decoder>, CodecError> {
        let o = request.options;
        let mut options = JsonDecoderOptions {
            batch_size: request.batch_size,
            ..JsonDecoderOptions::default()
        };
        if let Some(v) = o.get("json.on.mismatch") {
            options.mismatch = v.parse().map_err(|_| CodecError::BadOption {
                key: "json.on.mismatch".into(),
                value: v.into(),
                reason: "expected 'error' or 'null'".into(),
            })?;
        }
        if let Some(v) = o.get("json.max.depth") {
            options.max_depth = v.parse().map_err(|_| CodecError::BadOption {
                key: "json.max.depth".into(),
                value: v.into(),
                reason: "expected a whole number".into(),
            })?;
        }
        for (column, unit) in o.with_prefix("timestamp.unit.") {
            if !request.columns.iter().any(|c| c.name == column) {
                continue; // a column the scan does not read
            }
            let unit = unit.parse().map_err(|_| CodecError::BadOption {
                key: format!("timestamp.unit.{column}"),
                value: unit.clone(),
                reason: "expected one of 'seconds', 'millis', 'micros', 'nanos'".into(),
            })?;
            options.timestamp_units.push((column, unit));
        }
        Ok(Box::new(JsonDecoder::new(request.columns, options)?))
    }
}

/// The built-in `raw` encoding: the whole message as one Binary column (any name; `value` when
/// inferred). As an encoder it writes the bytes of a Binary or Utf8 column (the only column, or
/// the one named by `'raw.column'`) as the message.
#[derive(Debug, Default, Clone, Copy)]
pub struct RawFactory;

impl DecoderFactory for RawFactory {
    fn create_decoder(&self, request: &DecoderRequest<'_>) -> Result<Box<dyn Decoder>, CodecError> {
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
        Ok(Box::new(RawDecoder {
            schema: Arc::new(Schema::new(fields)),
            values: BinaryBuilder::new(),
            rows: 0,
            batch_size: request.batch_size.max(1),
        }))
    }

    fn default_columns(&self, _options: &Options) -> Result<Vec<ColumnSpec>, CodecError> {
        Ok(vec![ColumnSpec::new("value", DataType::Binary)])
    }
}

impl EncoderFactory for RawFactory {
    fn create_encoder(&self, request: &EncoderRequest<'_>) -> Result<Box<dyn Encoder>, CodecError> {
        let fields = request.schema.fields();
        let index = match request.options.get("raw.column") {
            Some(name) => fields
                .iter()
                .position(|f| f.name() == name)
                .ok_or_else(|| CodecError::BadOption {
                    key: "raw.column".into(),
                    value: name.into(),
                    reason: format!("sink {} writes no column '{name}'", request.sink),
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
        _ => Err(CodecError::BadOption {
            key: key.into(),
            value: value.into(),
            reason: "expected one of 'seconds', 'millis', 'micros', 'nanos'".into(),
        }),
    }
}

/// Strips the Confluent schema-registry framing from a message: the magic byte `0`, the 4-byte
/// schema id, and (for protobuf, `message_indexes`) the zigzag-varint message-index list.
/// Returns the payload and the schema id.
pub fn strip_confluent(message: &[u8], message_indexes: bool) -> Result<(&[u8], u32), DecodeError> {
    use crate::error::DecodeErrorKind;
    if message.len() < 5 {
        return Err(DecodeError::new(
            0,
            DecodeErrorKind::Confluent(format!(
                "{} bytes is shorter than the 5-byte Confluent header",
                message.len()
            )),
        ));
    }
    if message[0] != 0 {
        return Err(DecodeError::new(
            0,
            DecodeErrorKind::Confluent(format!(
                "magic byte is {}, expected 0 (is 'confluent.wire' set for plain messages?)",
                message[0]
            )),
        ));
    }
    let schema_id = u32::from_be_bytes([message[1], message[2], message[3], message[4]]);
    let mut pos = 5;
    if message_indexes {
        let count = read_zigzag(message, &mut pos)?;
        if count < 0 || count as u64 > (message.len() - pos) as u64 {
            return Err(DecodeError::new(
                5,
                DecodeErrorKind::Confluent(format!("bad message-index count {count}")),
            ));
        }
        for _ in 0..count {
            read_zigzag(message, &mut pos)?;
        }
    }
    Ok((&message[pos..], schema_id))
}

fn read_zigzag(buf: &[u8], pos: &mut usize) -> Result<i64, DecodeError> {
    use crate::error::DecodeErrorKind;
    let start = *pos;
    let mut value: u64 = 0;
    for shift in (0..64).step_by(7) {
        let Some(&b) = buf.get(*pos) else {
            return Err(DecodeError::new(start, DecodeErrorKind::TruncatedVarint));
        };
        *pos += 1;
        value |= u64::from(b & 0x7f) << shift;
        if b < 0x80 {
            return Ok(((value >> 1) as i64) ^ -((value & 1) as i64));
        }
    }
    Err(DecodeError::new(start, DecodeErrorKind::VarintTooLong))
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
    fn options_track_unread_keys() {
        let o = Options::new([
            ("message".to_string(), "a.B".to_string()),
            ("mesage".to_string(), "x".to_string()),
            ("fields.t".to_string(), "b.t".to_string()),
        ]);
        assert_eq!(o.get("message"), Some("a.B"));
        assert_eq!(o.with_prefix("fields."), vec![("t".into(), "b.t".into())]);
        assert_eq!(o.unread(), vec!["mesage".to_string()]);
        assert!(o.get_bool("message", false).is_err());
    }

    #[test]
    fn raw_decoder_keeps_every_message() {
        let opts = Options::default();
        let cols = [ColumnSpec::new("v", DataType::Binary)];
        let mut d = RawFactory
            .create_decoder(&DecoderRequest {
                source: "s",
                columns: &cols,
                options: &opts,
                batch_size: 2,
            })
            .unwrap();
        d.decode(b"ab").unwrap();
        assert!(d.take_full_batch().is_none());
        d.decode(b"").unwrap();
        let b = d.take_full_batch().unwrap();
        assert_eq!(b.num_rows(), 2);
        let wrong = [ColumnSpec::new("v", DataType::Utf8)];
        assert!(RawFactory
            .create_decoder(&DecoderRequest {
                source: "s",
                columns: &wrong,
                options: &opts,
                batch_size: 2,
            })
            .is_err());
    }
}
