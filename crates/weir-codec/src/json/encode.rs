//! The JSON encoder: Arrow rows to JSON objects, a column at a time.
//!
//! The text is what arrow-json's writer writes (one object per row, fields in column order,
//! nulls left out, names and strings escaped as serde_json escapes them, timestamps as chrono
//! writes a `NaiveDateTime`), except that floats JSON numbers cannot hold are written as
//! protobuf's JSON mapping writes them (`"Infinity"`, `"-Infinity"`, `"NaN"`) rather than as
//! `null`, which would lose them.
//!
//! A batch is written in two passes, as the protobuf encoder does: the first adds each field's
//! length to its row's, the second writes each field at its row's cursor in one buffer sized
//! from the first. Booleans, integers, floats, strings and timestamps without a time zone are
//! typed loops over their column, with no lookup or dispatch per row (a kafka sink writing
//! quotes as JSON spent most of its time in arrow-json's writer, a call per field and a copy of
//! every line). Other columns (lists, structs, maps, decimals, dates, binary, ...) are written
//! by arrow-json's own encoder for the column, row by row, into a buffer the second pass copies.

use std::ops::Range;
use std::sync::Arc;

use arrow_array::cast::AsArray;
use arrow_array::types::{
    ByteArrayType, Float32Type, Float64Type, Int16Type, Int32Type, Int64Type, Int8Type,
    TimestampMicrosecondType, TimestampMillisecondType, TimestampNanosecondType,
    TimestampSecondType, UInt16Type, UInt32Type, UInt64Type, UInt8Type,
};
use arrow_array::{Array, ArrowPrimitiveType, GenericByteArray, OffsetSizeTrait, RecordBatch};
use arrow_buffer::NullBuffer;
use arrow_json::writer::{make_encoder, EncoderOptions, NullableEncoder};
use arrow_schema::{ArrowError, DataType, FieldRef, Fields, TimeUnit};

use super::text::{
    digits, needs_escape, put_digits, put_escaped, put_signed, put_timestamp, quoted, signed_len,
    timestamp_len, Dates, FloatText,
};
use crate::error::CodecError;
use crate::write::put;
use crate::Encoder;

/// Encodes rows of one schema as JSON objects.
pub struct JsonEncoder {
    columns: Vec<Column>,
    /// arrow-json's options for the columns it writes: nested floats as the rest.
    options: EncoderOptions,
    /// Each row's length, then its write cursor.
    sizes: Vec<usize>,
    /// Where each line ends, for [`JsonEncoder::encode_lines`].
    line_ends: Vec<usize>,
}

impl std::fmt::Debug for JsonEncoder {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("JsonEncoder")
            .field("columns", &self.columns.len())
            .finish()
    }
}

/// One column's part of every object.
struct Column {
    field: FieldRef,
    kind: Kind,
    /// `,"name":`, and the opening quote of a string or timestamp value. The comma of a row's
    /// first field becomes the object's `{`.
    prefix: Vec<u8>,
    /// Float columns: each row's text, made in the first pass.
    floats: Vec<FloatText>,
    /// Columns arrow-json writes: every row's text, and where each row's begins (rows + 1).
    text: Vec<u8>,
    starts: Vec<usize>,
    /// This batch's strings hold a byte to escape (then each is escaped as it is written).
    escape: bool,
    /// This batch's timestamps fall outside the years 0 to 9999, which chrono writes with a
    /// sign: arrow-json writes them.
    wide_times: bool,
}

/// How a column is written.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Kind {
    Boolean,
    Signed,
    Unsigned,
    Float32,
    Float64,
    Utf8,
    LargeUtf8,
    Utf8View,
    /// A timestamp without a time zone.
    Timestamp(TimeUnit),
    /// Anything else, by arrow-json.
    Other,
}

impl Kind {
    fn of(t: &DataType) -> Self {
        match t {
            DataType::Boolean => Self::Boolean,
            DataType::Int8 | DataType::Int16 | DataType::Int32 | DataType::Int64 => Self::Signed,
            DataType::UInt8 | DataType::UInt16 | DataType::UInt32 | DataType::UInt64 => {
                Self::Unsigned
            }
            DataType::Float32 => Self::Float32,
            DataType::Float64 => Self::Float64,
            DataType::Utf8 => Self::Utf8,
            DataType::LargeUtf8 => Self::LargeUtf8,
            DataType::Utf8View => Self::Utf8View,
            DataType::Timestamp(unit, None) => Self::Timestamp(*unit),
            _ => Self::Other,
        }
    }

    /// Whether the value's text begins with a quote the prefix can carry.
    fn quoted(self) -> bool {
        matches!(
            self,
            Self::Utf8 | Self::LargeUtf8 | Self::Utf8View | Self::Timestamp(_)
        )
    }
}

/// The first and last second of the years 0 to 9999, which chrono writes with four digits.
const FOUR_DIGIT_YEARS: std::ops::RangeInclusive<i64> = -62_167_219_200..=253_402_300_799;

impl JsonEncoder {
    /// An encoder of rows with `fields` (a schema's). A column of a type JSON cannot hold (a
    /// union, say) is refused here, by name.
    pub fn new(fields: &Fields) -> Result<Self, CodecError> {
        let options = EncoderOptions::default().with_encoder_factory(Arc::new(NestedFloats));
        let columns = fields
            .iter()
            .map(|field| {
                let kind = Kind::of(field.data_type());
                if kind == Kind::Other {
                    let empty = arrow_array::new_empty_array(field.data_type());
                    make_encoder(field, empty.as_ref(), &options).map_err(|e| {
                        CodecError::Unsupported(format!(
                            "column {} ({}) cannot be written as JSON: {e}",
                            field.name(),
                            field.data_type()
                        ))
                    })?;
                }
                let mut prefix = vec![b','];
                prefix.extend_from_slice(&quoted(field.name()));
                prefix.push(b':');
                if kind.quoted() {
                    prefix.push(b'"');
                }
                Ok(Column {
                    field: Arc::clone(field),
                    kind,
                    prefix,
                    floats: Vec::new(),
                    text: Vec::new(),
                    starts: Vec::new(),
                    escape: false,
                    wide_times: false,
                })
            })
            .collect::<Result<_, CodecError>>()?;
        Ok(Self {
            columns,
            options,
            sizes: Vec::new(),
            line_ends: Vec::new(),
        })
    }

    /// Appends each row of `batch` to `out` as a line: the object, then `\n` (JSON lines; a
    /// line never holds a raw newline, since strings escape theirs).
    pub fn encode_lines(
        &mut self,
        batch: &RecordBatch,
        out: &mut Vec<u8>,
    ) -> Result<(), CodecError> {
        let mut ends = std::mem::take(&mut self.line_ends);
        ends.clear();
        let done = self.encode(batch, out, &mut ends, true);
        self.line_ends = ends;
        done
    }

    fn encode(
        &mut self,
        batch: &RecordBatch,
        out: &mut Vec<u8>,
        ends: &mut Vec<usize>,
        newline: bool,
    ) -> Result<(), CodecError> {
        if batch.num_columns() != self.columns.len() {
            return Err(CodecError::Other(format!(
                "the JSON encoder was made for {} columns and was given a batch of {}",
                self.columns.len(),
                batch.num_columns()
            )));
        }
        for (column, array) in self.columns.iter_mut().zip(batch.columns()) {
            if array.data_type() != column.field.data_type() {
                return Err(CodecError::Other(format!(
                    "column {} was planned as {} and is {} in this batch",
                    column.field.name(),
                    column.field.data_type(),
                    array.data_type()
                )));
            }
            column.prepare(array.as_ref(), &self.options)?;
        }
        let rows = batch.num_rows();
        ends.reserve(rows);
        // The two passes run over chunks of rows whose objects fit in the second-level cache:
        // over a whole batch (1.4 MB of quotes' JSON), each column's pass read the output back
        // from memory.
        let mut from = 0;
        while from < rows {
            let to = rows.min(from + CHUNK);
            self.chunk(batch, from..to, out, ends, newline);
            from = to;
        }
        Ok(())
    }

    /// Writes the objects of rows `range` of `batch`.
    fn chunk(
        &mut self,
        batch: &RecordBatch,
        range: Range<usize>,
        out: &mut Vec<u8>,
        ends: &mut Vec<usize>,
        newline: bool,
    ) {
        self.sizes.clear();
        self.sizes.resize(range.len(), 0);
        for (column, array) in self.columns.iter_mut().zip(batch.columns()) {
            column.size(array.as_ref(), range.start, &mut self.sizes);
        }
        // Lengths become cursors: where each row's object begins in `out`. An object is its
        // fields (the first one's comma becoming `{`) and `}`, or `{}` without fields.
        let base = out.len();
        let first = ends.len();
        let tail = 1 + usize::from(newline);
        let mut at = base;
        for s in &mut self.sizes {
            let start = at;
            at = start + (*s).max(1) + tail;
            ends.push(at);
            *s = start;
        }
        out.resize(at, 0);
        for (column, array) in self.columns.iter().zip(batch.columns()) {
            column.write(array.as_ref(), range.start, out, &mut self.sizes);
        }
        let mut start = base;
        for &end in &ends[first..] {
            out[start] = b'{';
            if newline {
                out[end - 2] = b'}';
                out[end - 1] = b'\n';
            } else {
                out[end - 1] = b'}';
            }
            start = end;
        }
    }
}

/// Rows written together, two passes at a time: at most about 200 KB of quotes' JSON.
const CHUNK: usize = 1024;

impl Encoder for JsonEncoder {
    fn encode_batch(
        &mut self,
        batch: &RecordBatch,
        out: &mut Vec<u8>,
        ends: &mut Vec<usize>,
    ) -> Result<(), CodecError> {
        self.encode(batch, out, ends, false)
    }
}

/// Calls `f(i, from + i)` for each `i` below `len` whose row `from + i` `nulls` holds valid.
/// One loop, one call of `f`, so that `f` is inlined into it (with a loop for each case, it was
/// not: a call per row).
#[inline(always)]
fn each_valid(
    nulls: Option<&NullBuffer>,
    from: usize,
    len: usize,
    mut f: impl FnMut(usize, usize),
) {
    let nulls = nulls.filter(|n| n.null_count() > 0);
    for i in 0..len {
        let r = from + i;
        if nulls.is_none_or(|n| n.is_valid(r)) {
            f(i, r);
        }
    }
}

impl Column {
    /// What a batch needs before its chunks are written: the text arrow-json writes for a
    /// column it writes, and whether a timestamp column reaches past the years chrono writes
    /// with four digits.
    fn prepare(&mut self, array: &dyn Array, options: &EncoderOptions) -> Result<(), CodecError> {
        self.wide_times = match self.kind {
            // Nanoseconds in an i64 span the years 1677 to 2262; coarser units can reach past
            // 9999.
            Kind::Timestamp(unit) if unit != TimeUnit::Nanosecond => {
                let values = timestamps(array, unit);
                let mut wide = false;
                each_valid(array.nulls(), 0, array.len(), |_, r| {
                    wide |= !FOUR_DIGIT_YEARS.contains(&split_time(values[r], unit).0);
                });
                wide
            }
            _ => false,
        };
        if self.kind != Kind::Other && !self.wide_times {
            return Ok(());
        }
        let field = &self.field;
        let mut encoder: NullableEncoder<'_> =
            make_encoder(field, array, options).map_err(|e: ArrowError| {
                CodecError::Other(format!(
                    "column {} cannot be written as JSON: {e}",
                    field.name()
                ))
            })?;
        self.text.clear();
        self.starts.clear();
        for r in 0..array.len() {
            self.starts.push(self.text.len());
            if !encoder.is_null(r) {
                encoder.encode(r, &mut self.text);
            }
        }
        self.starts.push(self.text.len());
        Ok(())
    }

    /// Whether arrow-json's text is this batch's (made in [`Column::prepare`]).
    fn by_arrow_json(&self) -> bool {
        self.kind == Kind::Other || self.wide_times
    }

    /// The first pass over rows `from..` (as many as `sizes`): adds this column's part of each
    /// row to its size.
    fn size(&mut self, array: &dyn Array, from: usize, sizes: &mut [usize]) {
        let len = sizes.len();
        let p = self.prefix.len();
        let nulls = array.nulls();
        if self.by_arrow_json() {
            // A timestamp column arrow-json writes has no quote in its prefix: arrow-json
            // writes one.
            let p = p - usize::from(self.kind.quoted());
            let starts = &self.starts;
            for (i, size) in sizes.iter_mut().enumerate() {
                let text = starts[from + i + 1] - starts[from + i];
                *size += if text > 0 { p + text } else { 0 };
            }
            return;
        }
        match self.kind {
            Kind::Boolean => {
                let values = array.as_boolean().values();
                each_valid(nulls, from, len, |i, r| {
                    sizes[i] += p + 5 - usize::from(values.value(r));
                });
            }
            Kind::Signed => match array.data_type() {
                DataType::Int8 => signed_sizes::<Int8Type>(array, p, from, sizes),
                DataType::Int16 => signed_sizes::<Int16Type>(array, p, from, sizes),
                DataType::Int32 => signed_sizes::<Int32Type>(array, p, from, sizes),
                _ => signed_sizes::<Int64Type>(array, p, from, sizes),
            },
            Kind::Unsigned => match array.data_type() {
                DataType::UInt8 => unsigned_sizes::<UInt8Type>(array, p, from, sizes),
                DataType::UInt16 => unsigned_sizes::<UInt16Type>(array, p, from, sizes),
                DataType::UInt32 => unsigned_sizes::<UInt32Type>(array, p, from, sizes),
                _ => unsigned_sizes::<UInt64Type>(array, p, from, sizes),
            },
            Kind::Float64 => {
                let values = array.as_primitive::<Float64Type>().values();
                self.floats.clear();
                self.floats.resize(len, FloatText::EMPTY);
                let floats = &mut self.floats;
                each_valid(nulls, from, len, |i, r| {
                    sizes[i] += p + floats[i].set_f64(values[r]);
                });
            }
            Kind::Float32 => {
                let values = array.as_primitive::<Float32Type>().values();
                self.floats.clear();
                self.floats.resize(len, FloatText::EMPTY);
                let floats = &mut self.floats;
                each_valid(nulls, from, len, |i, r| {
                    sizes[i] += p + floats[i].set_f32(values[r]);
                });
            }
            Kind::Utf8 => {
                self.escape = string_sizes(array.as_string::<i32>(), p, from, sizes);
            }
            Kind::LargeUtf8 => {
                self.escape = string_sizes(array.as_string::<i64>(), p, from, sizes);
            }
            Kind::Utf8View => {
                let strings = array.as_string_view();
                each_valid(nulls, from, len, |i, r| {
                    sizes[i] += p + 1 + text_len(strings.value(r).as_bytes());
                });
            }
            Kind::Timestamp(unit) => {
                let values = timestamps(array, unit);
                each_valid(nulls, from, len, |i, r| {
                    sizes[i] += p - 1 + timestamp_len(split_time(values[r], unit).1);
                });
            }
            Kind::Other => {}
        }
    }

    /// The second pass over rows `from..` (as many as `cursors`): writes this column's part of
    /// each row at its cursor.
    fn write(&self, array: &dyn Array, from: usize, out: &mut [u8], cursors: &mut [usize]) {
        let len = cursors.len();
        let prefix = &self.prefix[..];
        let nulls = array.nulls();
        if self.by_arrow_json() {
            let prefix = &prefix[..prefix.len() - usize::from(self.kind.quoted())];
            for (i, cursor) in cursors.iter_mut().enumerate() {
                let (start, end) = (self.starts[from + i], self.starts[from + i + 1]);
                if start < end {
                    let at = put(out, *cursor, prefix);
                    *cursor = put(out, at, &self.text[start..end]);
                }
            }
            return;
        }
        match self.kind {
            Kind::Boolean => {
                let values = array.as_boolean().values();
                each_valid(nulls, from, len, |i, r| {
                    let at = put(out, cursors[i], prefix);
                    let text: &[u8] = if values.value(r) { b"true" } else { b"false" };
                    cursors[i] = put(out, at, text);
                });
            }
            Kind::Signed => match array.data_type() {
                DataType::Int8 => write_signed::<Int8Type>(array, prefix, from, out, cursors),
                DataType::Int16 => write_signed::<Int16Type>(array, prefix, from, out, cursors),
                DataType::Int32 => write_signed::<Int32Type>(array, prefix, from, out, cursors),
                _ => write_signed::<Int64Type>(array, prefix, from, out, cursors),
            },
            Kind::Unsigned => match array.data_type() {
                DataType::UInt8 => write_unsigned::<UInt8Type>(array, prefix, from, out, cursors),
                DataType::UInt16 => {
                    write_unsigned::<UInt16Type>(array, prefix, from, out, cursors);
                }
                DataType::UInt32 => {
                    write_unsigned::<UInt32Type>(array, prefix, from, out, cursors);
                }
                _ => write_unsigned::<UInt64Type>(array, prefix, from, out, cursors),
            },
            Kind::Float32 | Kind::Float64 => each_valid(nulls, from, len, |i, _| {
                let at = put(out, cursors[i], prefix);
                cursors[i] = put(out, at, self.floats[i].bytes());
            }),
            Kind::Utf8 => {
                let strings = array.as_string::<i32>();
                write_strings(strings, self.escape, prefix, from, out, cursors);
            }
            Kind::LargeUtf8 => {
                let strings = array.as_string::<i64>();
                write_strings(strings, self.escape, prefix, from, out, cursors);
            }
            Kind::Utf8View => {
                let strings = array.as_string_view();
                each_valid(nulls, from, len, |i, r| {
                    let at = put(out, cursors[i], prefix);
                    let at = put_text(out, at, strings.value(r).as_bytes());
                    cursors[i] = close(out, at);
                });
            }
            Kind::Timestamp(unit) => {
                let values = timestamps(array, unit);
                // The prefix's quote is the timestamp's own.
                let prefix = &prefix[..prefix.len() - 1];
                let mut dates = Dates::new();
                each_valid(nulls, from, len, |i, r| {
                    let (secs, nanos) = split_time(values[r], unit);
                    let at = put(out, cursors[i], prefix);
                    cursors[i] = put_timestamp(out, at, &mut dates, secs, nanos);
                });
            }
            Kind::Other => {}
        }
    }
}

/// The values of a timestamp column of `unit`.
fn timestamps(array: &dyn Array, unit: TimeUnit) -> &[i64] {
    match unit {
        TimeUnit::Second => array.as_primitive::<TimestampSecondType>().values(),
        TimeUnit::Millisecond => array.as_primitive::<TimestampMillisecondType>().values(),
        TimeUnit::Microsecond => array.as_primitive::<TimestampMicrosecondType>().values(),
        TimeUnit::Nanosecond => array.as_primitive::<TimestampNanosecondType>().values(),
    }
}

/// A timestamp of `unit` as seconds and nanoseconds since the epoch.
#[inline(always)]
fn split_time(v: i64, unit: TimeUnit) -> (i64, u32) {
    let per_second = match unit {
        TimeUnit::Second => 1,
        TimeUnit::Millisecond => 1_000,
        TimeUnit::Microsecond => 1_000_000,
        TimeUnit::Nanosecond => 1_000_000_000,
    };
    let nanos = v.rem_euclid(per_second) * (1_000_000_000 / per_second);
    (v.div_euclid(per_second), nanos as u32)
}

fn signed_sizes<T: ArrowPrimitiveType>(
    array: &dyn Array,
    p: usize,
    from: usize,
    sizes: &mut [usize],
) where
    T::Native: Into<i64>,
{
    let values = array.as_primitive::<T>().values();
    each_valid(array.nulls(), from, sizes.len(), |i, r| {
        sizes[i] += p + signed_len(values[r].into());
    });
}

fn unsigned_sizes<T: ArrowPrimitiveType>(
    array: &dyn Array,
    p: usize,
    from: usize,
    sizes: &mut [usize],
) where
    T::Native: Into<u64>,
{
    let values = array.as_primitive::<T>().values();
    each_valid(array.nulls(), from, sizes.len(), |i, r| {
        sizes[i] += p + digits(values[r].into());
    });
}

fn write_signed<T: ArrowPrimitiveType>(
    array: &dyn Array,
    prefix: &[u8],
    from: usize,
    out: &mut [u8],
    cursors: &mut [usize],
) where
    T::Native: Into<i64>,
{
    let values = array.as_primitive::<T>().values();
    each_valid(array.nulls(), from, cursors.len(), |i, r| {
        let at = put(out, cursors[i], prefix);
        cursors[i] = put_signed(out, at, values[r].into());
    });
}

fn write_unsigned<T: ArrowPrimitiveType>(
    array: &dyn Array,
    prefix: &[u8],
    from: usize,
    out: &mut [u8],
    cursors: &mut [usize],
) where
    T::Native: Into<u64>,
{
    let values = array.as_primitive::<T>().values();
    each_valid(array.nulls(), from, cursors.len(), |i, r| {
        let at = put(out, cursors[i], prefix);
        let v: u64 = values[r].into();
        cursors[i] = put_digits(out, at, v, digits(v));
    });
}

/// The length of a string's contents, escaped where it must be.
#[inline(always)]
fn text_len(v: &[u8]) -> usize {
    if needs_escape(v) {
        super::text::escaped_len(v)
    } else {
        v.len()
    }
}

/// Writes a string's contents at `at`, escaped where it must be; returns the end.
#[inline(always)]
fn put_text(out: &mut [u8], at: usize, v: &[u8]) -> usize {
    if needs_escape(v) {
        put_escaped(out, at, v)
    } else {
        put(out, at, v)
    }
}

/// Writes a string's closing quote at `at`; returns the end.
#[inline(always)]
fn close(out: &mut [u8], at: usize) -> usize {
    out[at] = b'"';
    at + 1
}

/// The first pass of a string column over rows `from..`: whether any of their bytes must be
/// escaped (checked once over the chunk's strings, so that most are only copied).
fn string_sizes<O: OffsetSizeTrait, T: ByteArrayType<Offset = O>>(
    strings: &GenericByteArray<T>,
    p: usize,
    from: usize,
    sizes: &mut [usize],
) -> bool {
    let offsets = strings.value_offsets();
    let data = strings.value_data();
    let (start, end) = (
        offsets[from].as_usize(),
        offsets[from + sizes.len()].as_usize(),
    );
    let escape = needs_escape(data.get(start..end).unwrap_or_default());
    each_valid(strings.nulls(), from, sizes.len(), |i, r| {
        let (s, e) = (offsets[r].as_usize(), offsets[r + 1].as_usize());
        let len = if escape { text_len(&data[s..e]) } else { e - s };
        sizes[i] += p + 1 + len;
    });
    escape
}

fn write_strings<O: OffsetSizeTrait, T: ByteArrayType<Offset = O>>(
    strings: &GenericByteArray<T>,
    escape: bool,
    prefix: &[u8],
    from: usize,
    out: &mut [u8],
    cursors: &mut [usize],
) {
    let offsets = strings.value_offsets();
    let data = strings.value_data();
    each_valid(strings.nulls(), from, cursors.len(), |i, r| {
        let v = &data[offsets[r].as_usize()..offsets[r + 1].as_usize()];
        let at = put(out, cursors[i], prefix);
        let at = if escape {
            put_text(out, at, v)
        } else {
            put(out, at, v)
        };
        cursors[i] = close(out, at);
    });
}

/// Floats inside the columns arrow-json writes (a list of doubles, a struct's float field),
/// written as the encoder's own float columns are.
#[derive(Debug)]
struct NestedFloats;

impl arrow_json::writer::EncoderFactory for NestedFloats {
    fn make_default_encoder<'a>(
        &self,
        _field: &'a FieldRef,
        array: &'a dyn Array,
        _options: &'a EncoderOptions,
    ) -> Result<Option<NullableEncoder<'a>>, ArrowError> {
        let nulls = array.nulls().cloned();
        let encoder: Box<dyn arrow_json::writer::Encoder + 'a> = match array.data_type() {
            DataType::Float64 => Box::new(Floats64(array.as_primitive::<Float64Type>().values())),
            DataType::Float32 => Box::new(Floats32(array.as_primitive::<Float32Type>().values())),
            DataType::Timestamp(TimeUnit::Nanosecond, None) => Box::new(Nanos(
                array.as_primitive::<TimestampNanosecondType>().values(),
            )),
            _ => return Ok(None),
        };
        Ok(Some(NullableEncoder::new(encoder, nulls)))
    }
}

struct Floats64<'a>(&'a [f64]);

impl arrow_json::writer::Encoder for Floats64<'_> {
    fn encode(&mut self, idx: usize, out: &mut Vec<u8>) {
        out.extend_from_slice(FloatText::of_f64(self.0[idx]).bytes());
    }
}

struct Floats32<'a>(&'a [f32]);

impl arrow_json::writer::Encoder for Floats32<'_> {
    fn encode(&mut self, idx: usize, out: &mut Vec<u8>) {
        out.extend_from_slice(FloatText::of_f32(self.0[idx]).bytes());
    }
}

/// Timestamps of nanoseconds without a time zone inside nested columns.
struct Nanos<'a>(&'a [i64]);

impl arrow_json::writer::Encoder for Nanos<'_> {
    fn encode(&mut self, idx: usize, out: &mut Vec<u8>) {
        let (secs, nanos) = split_time(self.0[idx], TimeUnit::Nanosecond);
        let at = out.len();
        out.resize(at + timestamp_len(nanos), 0);
        put_timestamp(out, at, &mut Dates::new(), secs, nanos);
    }
}
