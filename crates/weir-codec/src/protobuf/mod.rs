//! The protobuf decoder: wire bytes straight into Arrow columns, compiled from a runtime schema.
//! The type mapping and the rules are documented on [`ProtoDecoder`] (where `cargo doc` shows
//! them). A newcomer's map of this module:
//!
//! - `plan/`: compiling a message descriptor and the requested columns into a decode plan, once
//!   (`mod.rs`: the plan's data; `types.rs`: the type mapping; `bind.rs`: binding columns to
//!   fields; `direct.rs`: the two optimisation passes);
//! - `decode.rs`: the per-message loop, and the commit of a row;
//! - `wire.rs`: varints, tags, lengths, skipping;
//! - `encode.rs`: the other way, Arrow rows into messages.

mod decode;
mod encode;
mod plan;
// The Avro decoder reads its varints (the same base-128 encoding) with these too.
pub(crate) mod wire;

pub use encode::ProtoEncoder;

use std::sync::Arc;

use arrow_array::RecordBatch;
use arrow_schema::{DataType, SchemaRef};

use crate::error::{DecodeError, PlanError};
use crate::schema::ProtoSchema;
use crate::{Decoder, DEFAULT_BATCH_SIZE};

/// One requested column: a name, an Arrow type, and optionally the dotted field path it reads.
#[derive(Debug, Clone, PartialEq)]
pub struct ColumnSpec {
    /// The column name. Without a path it is also the field name: a top-level field, or else
    /// the one nested singular field with that name.
    pub name: String,
    /// The Arrow type of the column; checked against the field type when the plan is built.
    pub data_type: DataType,
    /// A dotted path of field names (`base.ticker`) through singular sub-messages.
    pub path: Option<String>,
}

impl ColumnSpec {
    /// A column read from the field of the same name.
    pub fn new(name: impl Into<String>, data_type: DataType) -> Self {
        Self {
            name: name.into(),
            data_type,
            path: None,
        }
    }

    /// Reads the column from a dotted field path instead.
    pub fn with_path(mut self, path: impl Into<String>) -> Self {
        self.path = Some(path.into());
        self
    }
}

/// Settings of a [`ProtoDecoder`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ProtoDecoderOptions {
    /// Rows per batch for [`Decoder::take_full_batch`] (default 8192).
    pub batch_size: usize,
    /// Deepest nesting of sub-messages and groups accepted (default 100).
    pub max_depth: usize,
}

impl Default for ProtoDecoderOptions {
    fn default() -> Self {
        Self {
            batch_size: DEFAULT_BATCH_SIZE,
            max_depth: 100,
        }
    }
}

/// Every top-level field of `message` as a column with the default type mapping.
pub fn default_columns(schema: &ProtoSchema, message: &str) -> Result<Vec<ColumnSpec>, PlanError> {
    let desc = find_message(schema, message)?;
    let mut ancestors = vec![desc.full_name().to_string()];
    Ok(desc
        .fields()
        .map(|fd| ColumnSpec::new(fd.name(), plan::default_type(&fd, &mut ancestors)))
        .collect())
}

/// The message descriptor named `message` (a leading '.' allowed); an unknown name lists some
/// the schema has.
pub(crate) fn find_message(
    schema: &ProtoSchema,
    message: &str,
) -> Result<prost_reflect::MessageDescriptor, PlanError> {
    let name = message.strip_prefix('.').unwrap_or(message);
    schema
        .pool()
        .get_message_by_name(name)
        .ok_or_else(|| PlanError::UnknownMessage {
            message: message.to_string(),
            known: schema
                .pool()
                .all_messages()
                .filter(|m| !m.full_name().starts_with("google.protobuf."))
                .take(8)
                .map(|m| m.full_name().to_string())
                .collect::<Vec<_>>()
                .join(", "),
        })
}

/// Decodes protobuf messages of one type into Arrow record batches, reading only the requested
/// columns. Built once per source.
///
/// The plan is compiled at start-up from a runtime schema ([`ProtoSchema`]) and the columns the
/// caller asks for: every question about the schema is answered then, and the per-message loop
/// only reads a tag, indexes a table by field number and appends to a typed column buffer.
///
/// # Type mapping
///
/// | protobuf | Arrow (default) | also accepted |
/// |---|---|---|
/// | double / float | Float64 / Float32 | |
/// | int32, sint32, sfixed32 | Int32 | |
/// | int64, sint64, sfixed64 | Int64 | Timestamp(unit, tz): the raw value in that unit |
/// | uint32, fixed32 / uint64, fixed64 | UInt32 / UInt64 | |
/// | bool | Boolean | |
/// | string | Utf8 (UTF-8 validated) | |
/// | bytes | Binary | |
/// | enum | Utf8: the value's name (an unknown number: its decimal text) | Int32: the number |
/// | message, proto2 group | Struct of the declared children (matched by name; any subset) | Utf8: JSON text |
/// | repeated T | List(T) (packed and unpacked both read) | |
/// | map<K, V> | Map(entries: Struct(key, value)), one entry per key | |
/// | google.protobuf.Timestamp | Timestamp(Nanosecond, "UTC") | Timestamp(any unit, any tz) |
/// | google.protobuf.Duration | Duration(Nanosecond) | Duration(any unit) |
/// | wrapper types (Int32Value, StringValue, ...) | the wrapped primitive, nullable | |
/// | Struct, Value, ListValue, Any, recursive messages | Utf8: canonical proto3 JSON | |
///
/// # Timestamp and Duration units
///
/// A Timestamp or Duration column holds an i64 count of its unit; a value is floored to the unit
/// (-0.5 s is -1 s in seconds). What each unit holds of protobuf's range (a Timestamp is valid
/// from 0001-01-01 to 9999-12-31, a Duration within +-10,000 years):
///
/// | unit | Timestamp | Duration |
/// |---|---|---|
/// | Second, Millisecond, Microsecond | the whole range | the whole range |
/// | Nanosecond (the default) | 1677-09-21T00:12:43.145224192Z to 2262-04-11T23:47:16.854775807Z | +-292 years |
///
/// A value its column cannot hold rejects the message (`OutOfRange`, at the field's offset):
/// declare a coarser unit (`TIMESTAMP(6)`, `TIMESTAMP(3)`) to read protobuf's whole range.
///
/// # Presence
///
/// Fields without presence (proto3 scalars, enums, strings, bytes) are never null: an absent one
/// reads as its default. Fields with presence (sub-messages, groups, proto3 `optional`, proto2
/// `optional`/`required`, oneof members, wrappers, Timestamp, Duration) are null when absent,
/// except a proto2 field with a declared `[default = ...]`, which reads as that default. A column
/// bound to a nested path (`base.ticker`) is null when a message on the path is absent. Repeated
/// and map columns are never null (absent is empty). weir decides the nullability of every Arrow
/// field it outputs from these rules; declared nullability is ignored, except for list items.
///
/// # Semantics
///
/// As Google's parser: a singular field seen twice keeps the last value; a singular sub-message
/// (or group) seen twice is merged; repeated fields append; a later oneof member clears the
/// earlier one, including what a displaced message member had appended to its lists; a map keeps
/// the last entry of a key that repeats (in one message, or across messages concatenated), in
/// the place of that last entry, and otherwise keeps wire order. Two messages concatenated are
/// one message. Fields not requested and unknown fields (groups included) are skipped without
/// being decoded. A known field with the wrong wire type is an error rather than a silent drop.
///
/// # Errors
///
/// A message that is malformed is rejected with a [`DecodeError`] naming the problem and the byte
/// offset; its partial row is rolled back, and rows before and after it are intact. Nesting is
/// limited to [`ProtoDecoderOptions::max_depth`] (100), counted from the root, through
/// sub-messages, groups and sub-messages rendered as JSON alike. A 10-byte varint that
/// overflows 64 bits is rejected.
#[derive(Debug)]
pub struct ProtoDecoder {
    plan: Arc<plan::Plan>,
    state: decode::State,
    batch_size: usize,
}

impl ProtoDecoder {
    /// Compiles the decode plan for `message` and `columns`.
    pub fn new(
        schema: &ProtoSchema,
        message: &str,
        columns: &[ColumnSpec],
        options: ProtoDecoderOptions,
    ) -> Result<Self, PlanError> {
        if options.batch_size == 0 {
            return Err(PlanError::Options("batch_size must be at least 1".into()));
        }
        let desc = find_message(schema, message)?;
        let plan = plan::build(&desc, columns, options.batch_size, options.max_depth)?;
        let state = decode::State::new(&plan);
        Ok(Self {
            plan: Arc::new(plan),
            state,
            batch_size: options.batch_size,
        })
    }

    /// Everything the compiled plan holds, as text, when two plans that print the same decode
    /// the same bytes into the same columns: `None` for a plan that renders sub-messages as
    /// JSON (that goes through a descriptor the text does not show in full). Two schema
    /// versions whose differences touch no requested field compile to the same plan.
    pub(crate) fn plan_fingerprint(&self) -> Option<String> {
        self.plan
            .json
            .is_empty()
            .then(|| format!("{:?}", self.plan))
    }

    /// A new decoder with the same plan and empty buffers (one per thread or partition).
    pub fn fresh(&self) -> Self {
        Self {
            plan: Arc::clone(&self.plan),
            state: decode::State::new(&self.plan),
            batch_size: self.batch_size,
        }
    }
}

impl Decoder for ProtoDecoder {
    fn schema(&self) -> SchemaRef {
        Arc::clone(&self.plan.schema)
    }

    #[inline]
    fn decode(&mut self, message: &[u8]) -> Result<(), DecodeError> {
        self.state.decode_row(&self.plan, message)
    }

    fn buffered_rows(&self) -> usize {
        self.state.rows
    }

    fn batch_size(&self) -> usize {
        self.batch_size
    }

    fn flush(&mut self) -> Option<RecordBatch> {
        let rows = self.state.rows;
        if rows == 0 {
            return None;
        }
        self.state.trim(&self.plan);
        self.state.keep_last_map_entries(&self.plan);
        for &(follower, leader) in &self.plan.shared_validity {
            let (f, l) = (follower as usize, leader as usize);
            // Copied into the follower's own buffer (empty since its last batch was taken).
            let bits = self.state.cols[l].nulls.take();
            match (&mut self.state.cols[f].nulls, &bits) {
                (Some(dst), Some(src)) => dst.copy_from(src),
                (dst, src) => *dst = src.clone(),
            }
            self.state.cols[l].nulls = bits;
        }
        let arrays = self
            .plan
            .top
            .iter()
            .map(|&c| crate::columns::finish(&mut self.state.cols, c))
            .collect();
        self.state.rows = 0;
        self.state.filled = 0;
        Some(crate::batch_of(&self.plan.schema, arrays, rows))
    }
}
