//! The JSON decoder: one pass from message bytes to Arrow columns, reading only the requested
//! keys. The type mapping and the rules are documented on [`JsonDecoder`] (where `cargo doc`
//! shows them). A newcomer's map of this module:
//!
//! - `plan.rs`: compiling the requested columns into key matchers and a column arena;
//! - `decode.rs`: the per-message loop (objects, arrays, values into columns);
//! - `convert.rs`: one JSON value into one column type (numbers, timestamps, decimals);
//! - `scan/`: scanning JSON text (`lanes.rs`: the SIMD lanes; `skip.rs`: the validating
//!   skipper; `strings.rs`: strings and escapes);
//! - `shape.rs`: predicting each object's key order, to skip runs of unrequested keys;
//! - `encode.rs`: the encoder, Arrow rows to JSON objects a column at a time, and `text.rs`
//!   the text of its values.

mod convert;
mod decode;
mod encode;
mod plan;
mod scan;
mod shape;
mod text;

pub use encode::JsonEncoder;

use std::str::FromStr;
use std::sync::Arc;

use arrow_array::RecordBatch;
use arrow_schema::{SchemaRef, TimeUnit};

use crate::error::{DecodeError, PlanError};
use crate::{ColumnSpec, Decoder, DEFAULT_BATCH_SIZE};

/// The largest [`JsonDecoderOptions::max_depth`] accepted (the decoder recurses per level).
pub(crate) const MAX_DEPTH_LIMIT: usize = 1024;

/// What a value of the wrong type (or out of range) does.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum JsonMismatch {
    /// Reject the message with a [`DecodeError`] naming the key, the type and the offset.
    #[default]
    Error,
    /// Store a null for that value and keep the row.
    Null,
}

impl FromStr for JsonMismatch {
    type Err = PlanError;

    /// `error` or `null` (the engine's `'json.on.mismatch'` option).
    fn from_str(s: &str) -> Result<Self, PlanError> {
        match s.trim().to_ascii_lowercase().as_str() {
            "error" => Ok(Self::Error),
            "null" => Ok(Self::Null),
            _ => Err(PlanError::Options(format!(
                "JSON mismatch policy '{s}' is neither 'error' nor 'null'"
            ))),
        }
    }
}

/// The unit of a number read into a Timestamp column (seconds, milliseconds, ... since
/// 1970-01-01T00:00:00Z).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum EpochUnit {
    /// Seconds.
    Seconds,
    /// Milliseconds.
    Millis,
    /// Microseconds.
    Micros,
    /// Nanoseconds.
    Nanos,
}

impl EpochUnit {
    fn from_time_unit(unit: TimeUnit) -> Self {
        match unit {
            TimeUnit::Second => Self::Seconds,
            TimeUnit::Millisecond => Self::Millis,
            TimeUnit::Microsecond => Self::Micros,
            TimeUnit::Nanosecond => Self::Nanos,
        }
    }

    fn time_unit(self) -> TimeUnit {
        match self {
            Self::Seconds => TimeUnit::Second,
            Self::Millis => TimeUnit::Millisecond,
            Self::Micros => TimeUnit::Microsecond,
            Self::Nanos => TimeUnit::Nanosecond,
        }
    }
}

impl FromStr for EpochUnit {
    type Err = PlanError;

    /// `seconds`/`s`, `millis`/`ms`, `micros`/`us`, `nanos`/`ns` (the engine's
    /// `'timestamp.unit'` option).
    fn from_str(s: &str) -> Result<Self, PlanError> {
        match s.trim().to_ascii_lowercase().as_str() {
            "seconds" | "second" | "s" => Ok(Self::Seconds),
            "millis" | "milliseconds" | "ms" => Ok(Self::Millis),
            "micros" | "microseconds" | "us" => Ok(Self::Micros),
            "nanos" | "nanoseconds" | "ns" => Ok(Self::Nanos),
            _ => Err(PlanError::Options(format!(
                "timestamp unit '{s}' is not one of seconds, millis, micros, nanos"
            ))),
        }
    }
}

/// Settings of a [`JsonDecoder`]: plain data, so that they can come from SQL options.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct JsonDecoderOptions {
    /// Rows per batch for [`Decoder::take_full_batch`] (default 8192).
    pub batch_size: usize,
    /// Deepest nesting of objects and arrays accepted, the top-level object counting as 1
    /// (default 128, at most 1024).
    pub max_depth: usize,
    /// Type mismatches and out-of-range values: an error (default) or a null.
    pub mismatch: JsonMismatch,
    /// Per top-level Timestamp column (by column name): the unit of numbers in it. Columns not
    /// listed read numbers in their own Arrow unit.
    pub timestamp_units: Vec<(String, EpochUnit)>,
}

impl Default for JsonDecoderOptions {
    fn default() -> Self {
        Self {
            batch_size: DEFAULT_BATCH_SIZE,
            max_depth: 128,
            mismatch: JsonMismatch::Error,
            timestamp_units: Vec::new(),
        }
    }
}

/// Decodes JSON objects into Arrow record batches, reading only the requested keys. Built once
/// per source.
///
/// Each message is one JSON object (a Kafka message value, or one line of a JSON-lines file).
/// The decoder scans it once: keys are looked up in a matcher built at start-up for the requested
/// names (a multiplicative hash of length and first/last bytes, then a byte comparison; never a
/// `String` hash), requested values are converted straight into typed column buffers, and every
/// other value is skipped by a validating skipper that builds nothing (no allocation, no number
/// parsing, no unescaping). Column buffers grow per batch, not per message.
///
/// # Columns
///
/// A [`ColumnSpec`] without a path reads the top-level key equal to its name (a name with dots is
/// one key). With a path (`order.customer.id`) it reads through nested objects; a path segment
/// that is absent or `null` makes the column null. Two columns may not overlap (one reading
/// `order` and another `order.id`): read the enclosing object as one Struct or Utf8 column.
///
/// # Type mapping
///
/// | Arrow column type | JSON value accepted |
/// |---|---|
/// | Int8 .. Int64, UInt8 .. UInt64 | an integer literal (no fraction, no exponent) within the type's range |
/// | Float32, Float64 | any number, correctly rounded to the type (overflow is out of range); the strings `"NaN"`, `"Infinity"`, `"-Infinity"`, as protobuf's JSON mapping writes them |
/// | Decimal128(p, s) | a number, or a string holding a number, read exactly; more than `s` fraction digits (other than trailing zeros) or more than `p` digits is out of range |
/// | Timestamp(unit, tz) | RFC 3339 text (`2026-11-22T10:15:30.5+01:00`; fractions below `unit` truncated), or a number of epoch units (per-column [`EpochUnit`], default: the column's unit; fractions allowed, rounded down) |
/// | Date32, Date64 | a `YYYY-MM-DD` string |
/// | Boolean | `true` / `false` |
/// | Utf8 | a string, unescaped (every escape, `\uXXXX` surrogate pairs included); any other value as its raw JSON text (`12.50`, `{"a": [1]}`) |
/// | Struct(fields) | an object; fields read the keys of the same name (any subset) |
/// | List(item) | an array; each element read as `item` |
/// | Map(entries(key: Utf8, value), unsorted) | an object, one entry per key in input order |
///
/// `null` is a null of any column, and a missing key is null. Every field the decoder outputs is
/// nullable (list items and struct children included), except map keys.
///
/// # Duplicate keys
///
/// When a requested key appears twice in one object, the last one wins: the earlier value is
/// dropped (for a key on a column path, everything the earlier object gave is dropped). Map
/// columns are the exception: they keep every entry, in input order, duplicates included (an
/// Arrow map is a list of entries).
///
/// # Validation
///
/// Input is checked against RFC 8259 everywhere, inside skipped values too: trailing commas,
/// leading zeros, bare `NaN`/`Infinity` (not in quotes), unescaped control characters, invalid escapes, lone
/// surrogates, invalid UTF-8, unterminated input and anything after the top-level object are
/// rejected. Nesting is limited to [`JsonDecoderOptions::max_depth`] (128) containers, the
/// top-level object included. A top-level array is rejected (it is not split into rows).
///
/// # Errors
///
/// A rejected message returns a [`DecodeError`] with the byte offset and a
/// [`DecodeErrorKind`](crate::DecodeErrorKind): `JsonSyntax` (what was wrong or expected),
/// `JsonNotAnObject`, `JsonTypeMismatch` (the key path, the expected Arrow type and the JSON type
/// found), `JsonOutOfRange` (the key path and type), `TooDeep`, `TooLarge`. Its partial row is
/// rolled back; rows before and after it are intact. With [`JsonMismatch::Null`], type
/// mismatches and out-of-range values become nulls instead (syntax errors still reject the
/// message).
#[derive(Debug)]
pub struct JsonDecoder {
    plan: Arc<plan::Plan>,
    state: decode::State,
    batch_size: usize,
}

impl JsonDecoder {
    /// Plans the columns: checks their types and paths and builds the key matchers.
    pub fn new(columns: &[ColumnSpec], options: JsonDecoderOptions) -> Result<Self, PlanError> {
        let plan = plan::build(columns, &options)?;
        let state = decode::State::new(&plan);
        Ok(Self {
            plan: Arc::new(plan),
            state,
            batch_size: options.batch_size,
        })
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

impl Decoder for JsonDecoder {
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
        self.state.rows = 0;
        let (cols, plan) = (&mut self.state.cols, &self.plan);
        Some(crate::columns::take_batch(
            cols,
            &plan.top,
            &plan.schema,
            rows,
        ))
    }
}
