//! The protobuf encoder: Arrow rows to protobuf messages, compiled once from the runtime schema.
//!
//! Columns bind to the message's fields by name (a STRUCT column to a message field, whose
//! children bind to its fields the same way; a LIST column to a repeated field, of messages
//! too; a MAP column to a map field, as the repeated message of its entries). A batch is
//! encoded a column at a time, in two passes: the first adds each field's encoded size to its
//! row's size, the second writes each field at its row's cursor in one buffer sized from the
//! first. So the work per field is one typed loop over the column, with no lookup or dispatch
//! per row, and a nested message's length prefix is known before its fields are written.
//! Nulls are absent fields, as are the default values of fields without presence (proto3's
//! plain scalars), and fields are written in field-number order.

use arrow_array::cast::AsArray;
use arrow_array::types::{
    Float32Type, Float64Type, Int16Type, Int32Type, Int64Type, Int8Type, TimestampMicrosecondType,
    TimestampMillisecondType, TimestampNanosecondType, TimestampSecondType, UInt16Type, UInt32Type,
    UInt64Type, UInt8Type,
};
use arrow_array::{Array, ArrayRef, GenericByteArray, ListArray, OffsetSizeTrait, RecordBatch};
use arrow_buffer::NullBuffer;
use arrow_schema::{DataType, Fields, TimeUnit};
use prost_reflect::{FieldDescriptor, Kind, MessageDescriptor};

use crate::error::CodecError;
use crate::write::put;
use crate::Encoder;

/// Encodes rows of one schema as messages of one type.
pub struct ProtoEncoder {
    plan: MessagePlan,
    /// Each row's size, then its write cursor.
    sizes: Vec<usize>,
    /// Bytes written before every message (a schema registry's framing), empty for none.
    prefix: Vec<u8>,
}

impl ProtoEncoder {
    /// An encoder of rows with `fields` (a schema's) as messages of type `message`.
    pub fn new(message: &MessageDescriptor, fields: &Fields) -> Result<Self, CodecError> {
        Ok(Self {
            plan: MessagePlan::new(message, fields, "")?,
            sizes: Vec::new(),
            prefix: Vec::new(),
        })
    }

    /// Writes `prefix` before every message (the Confluent framing: magic byte, schema id and
    /// message indexes), in place, with no copy of the message.
    #[must_use]
    pub fn with_prefix(mut self, prefix: Vec<u8>) -> Self {
        self.prefix = prefix;
        self
    }
}

impl Encoder for ProtoEncoder {
    fn encode_batch(
        &mut self,
        batch: &RecordBatch,
        out: &mut Vec<u8>,
        ends: &mut Vec<usize>,
    ) -> Result<(), CodecError> {
        let rows = batch.num_rows();
        self.sizes.clear();
        self.sizes.resize(rows, 0);
        self.plan.size(batch.columns(), None, &mut self.sizes)?;
        // Sizes become cursors: where each row's message begins in `out`.
        let base = out.len();
        let first = ends.len();
        let prefix = self.prefix.len();
        let mut at = base;
        ends.reserve(rows);
        for s in &mut self.sizes {
            let start = at + prefix;
            at = start + *s;
            ends.push(at);
            *s = start;
        }
        out.resize(at, 0);
        if prefix > 0 {
            let mut start = base;
            for &end in &ends[first..] {
                out[start..start + prefix].copy_from_slice(&self.prefix);
                start = end;
            }
        }
        self.plan.write(batch.columns(), None, out, &mut self.sizes);
        Ok(())
    }
}

/// One message type bound to a set of columns.
struct MessagePlan {
    /// By field number.
    fields: Vec<FieldPlan>,
}

struct FieldPlan {
    /// The column's index among its siblings.
    column: usize,
    /// The column's dotted name, for errors.
    name: String,
    /// A proto3 field without presence: its default value (0, empty) is left out, as every
    /// protobuf encoder does, since a reader cannot tell it from an absent field.
    implicit: bool,
    /// The field's key (number and wire type) as a varint, for its kind's wire type.
    key: Key,
    kind: FieldKind,
}

/// A field key, encoded once.
#[derive(Clone, Copy)]
struct Key {
    bytes: [u8; 5],
    len: usize,
}

impl Key {
    fn new(number: u32, wire_type: u32) -> Self {
        let mut bytes = [0u8; 5];
        let len = put_varint(&mut bytes, 0, u64::from(number << 3 | wire_type));
        Self { bytes, len }
    }
}

const VARINT: u32 = 0;
const FIXED64: u32 = 1;
const LEN: u32 = 2;
const FIXED32: u32 = 5;

/// How a value of a scalar field is written.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
enum Scalar {
    /// int32, int64, uint32, uint64, bool, enum: the value as a varint (negative int32 and
    /// int64 as ten bytes, as protobuf writes them).
    Varint,
    /// sint32, sint64: zigzag, then varint.
    ZigZag,
    /// fixed32, sfixed32, float: four bytes.
    Fixed32,
    /// fixed64, sfixed64, double: eight bytes.
    Fixed64,
}

enum FieldKind {
    /// A numeric or bool column into a scalar field. Columns whose values are written as they
    /// are (see `with_scalar_values!`) are read in place; for the others each row's bits (0 for
    /// a null), made once in the first pass, are kept for the second.
    Scalar(Scalar, Vec<u64>),
    /// A text or binary column into a string or bytes field.
    Bytes,
    /// A STRUCT column into a message field; the child sizes of the batch are kept between the
    /// passes.
    Message(Box<MessagePlan>, Vec<usize>),
    /// A TIMESTAMP column into a `google.protobuf.Timestamp` field (seconds and nanos).
    Timestamp(TimeUnit),
    /// A LIST of numbers into a packed repeated scalar field; each row's payload size and
    /// each element's bits (a null element as 0: a repeated field holds no nulls) are kept.
    Packed(Scalar, Vec<usize>, Vec<u64>),
    /// A LIST of text or binary into a repeated string or bytes field (the key is each
    /// element's).
    RepeatedBytes,
    /// A LIST of TIMESTAMP into a repeated `google.protobuf.Timestamp` field; each element's
    /// seconds and nanos (a null element as the epoch, an empty message) are kept.
    RepeatedTimestamp(TimeUnit, Vec<(i64, i32)>),
    /// A text column into an enum field, by value name; the numbers of the batch are kept.
    EnumName(EnumNames, Vec<u64>),
    /// A LIST of text into a repeated enum field, packed; payload sizes and numbers are kept.
    PackedEnumNames(EnumNames, Vec<usize>, Vec<u64>),
    /// A scalar, text or binary column into a wrapper message (`google.protobuf.Int64Value`
    /// and the like): a message of one field, `value`, bound to the same column.
    Wrapper(Box<MessagePlan>, Vec<usize>),
    /// A LIST of STRUCT into a repeated message field, or a MAP into a map field (a repeated
    /// message of its entries: key and value bound by position). The elements' sizes, then
    /// their cursors, are kept between the passes.
    Repeated(Box<MessagePlan>, Elements),
}

/// The elements of a repeated message field in one batch: which are written (those of the
/// batch's valid rows) and each one's size, then its write cursor.
#[derive(Default)]
struct Elements {
    written: Option<NullBuffer>,
    sizes: Vec<usize>,
}

/// The elements (of `elements` in all) that belong to the rows `valid` keeps of a list with
/// `offsets`: a sliced list's values hold elements of other rows too.
fn written_elements(offsets: &[i32], elements: usize, valid: Option<&NullBuffer>) -> NullBuffer {
    let mut written = arrow_buffer::BooleanBufferBuilder::new(elements);
    written.append_n(elements, false);
    for row in 0..offsets.len().saturating_sub(1) {
        if valid.is_none_or(|v| v.is_valid(row)) {
            for e in offsets[row] as usize..offsets[row + 1] as usize {
                written.set_bit(e, true);
            }
        }
    }
    NullBuffer::new(written.finish())
}

/// `e` with a bad element's index turned into its row's: the last row of `offsets` starting at
/// or before it.
fn at_row_of_element(offsets: &[i32], e: CodecError) -> CodecError {
    match e {
        CodecError::Row {
            row: element,
            reason,
        } => CodecError::Row {
            row: offsets
                .partition_point(|&o| o as usize <= element)
                .saturating_sub(1),
            reason,
        },
        e => e,
    }
}

/// The offsets and the element struct of a LIST of STRUCT or a MAP column.
fn repeated_parts(array: &ArrayRef) -> (&[i32], &arrow_array::StructArray) {
    match array.data_type() {
        DataType::Map(_, _) => {
            let map = array.as_map();
            (map.value_offsets(), map.entries())
        }
        _ => {
            let list = array.as_list::<i32>();
            (list.value_offsets(), list.values().as_struct())
        }
    }
}

/// An enum's value names and numbers, sorted by name.
struct EnumNames {
    enum_name: String,
    values: Vec<(Vec<u8>, i32)>,
}

impl EnumNames {
    fn new(e: &prost_reflect::EnumDescriptor) -> Self {
        let mut values: Vec<(Vec<u8>, i32)> = e
            .values()
            .map(|v| (v.name().as_bytes().to_vec(), v.number()))
            .collect();
        values.sort();
        Self {
            enum_name: e.full_name().to_string(),
            values,
        }
    }

    /// The numbers of `array`'s names (a null as 0) into `bits`, as varint bits. A name that
    /// is neither a value nor a number is an error at its index, if that index is in `rows`
    /// and valid in `written` (a sliced list's values hold elements of rows outside the batch,
    /// and a nested column rows its parent does not write).
    fn numbers(
        &self,
        array: &ArrayRef,
        bits: &mut Vec<u64>,
        column: &str,
        rows: std::ops::Range<usize>,
        written: Option<&NullBuffer>,
    ) -> Result<(), CodecError> {
        bits.clear();
        bits.resize(array.len(), 0);
        let mut unknown = None;
        let nulls = array.logical_nulls();
        for_each_bytes(array, nulls.as_ref(), |row, name| {
            // A binary search over a handful of names: no hashing per row.
            match self
                .values
                .binary_search_by(|(n, _)| n.as_slice().cmp(name))
            {
                Ok(i) => bits[row] = self.values[i].1 as i64 as u64,
                // A number the schema does not name (an open enum's unknown value, as the
                // decoder writes it) is written as that number.
                Err(_) => match std::str::from_utf8(name)
                    .ok()
                    .and_then(|t| t.parse::<i32>().ok())
                {
                    Some(n) => bits[row] = n as i64 as u64,
                    None if unknown.is_none()
                        && rows.contains(&row)
                        && written.is_none_or(|w| w.is_valid(row)) =>
                    {
                        unknown = Some((row, String::from_utf8_lossy(name).into_owned()));
                    }
                    None => {}
                },
            }
        });
        match unknown {
            None => Ok(()),
            Some((row, name)) => Err(CodecError::Row {
                row,
                reason: format!(
                    "column '{column}': '{name}' is neither a value of enum {} nor a number",
                    self.enum_name
                ),
            }),
        }
    }
}

/// Runs `$body` with `$values` bound to a scalar column's values and `$to_bits` to the function
/// giving each value's bits (as `each_value!` makes them): one typed loop per column type,
/// where a copy of every value's bits cost a tenth of the encoder's time on quotes. Other
/// columns (booleans, 8- and 16-bit integers, timestamps, unsigned zigzag, values converted to
/// another width) go through [`element_bits`] into `$owned`, which the first pass (`$fill`)
/// fills and the second reads.
macro_rules! with_scalar_values {
    ($array:expr, $scalar:expr, $owned:expr, $fill:expr, |$values:ident, $to_bits:ident| $body:expr) => {{
        let array: &ArrayRef = $array;
        let scalar: Scalar = $scalar;
        macro_rules! typed {
            ($t:ty, $f:expr) => {{
                let $values = array.as_primitive::<$t>().values().as_ref();
                let $to_bits = $f;
                $body
            }};
        }
        let zigzag = |w: i64| ((w << 1) ^ (w >> 63)) as u64;
        match (array.data_type(), scalar) {
            (DataType::Int32, Scalar::Varint | Scalar::Fixed32) => {
                typed!(Int32Type, |v: i32| v as i64 as u64)
            }
            (DataType::Int32, Scalar::ZigZag) => typed!(Int32Type, |v: i32| zigzag(v as i64)),
            (DataType::UInt32, Scalar::Varint | Scalar::Fixed32) => {
                typed!(UInt32Type, |v: u32| u64::from(v))
            }
            (DataType::Int64, Scalar::Varint | Scalar::Fixed64) => {
                typed!(Int64Type, |v: i64| v as u64)
            }
            (DataType::Int64, Scalar::ZigZag) => typed!(Int64Type, zigzag),
            (DataType::UInt64, Scalar::Varint | Scalar::Fixed64) => {
                typed!(UInt64Type, |v: u64| v)
            }
            (DataType::Float64, Scalar::Fixed64) => typed!(Float64Type, |v: f64| v.to_bits()),
            (DataType::Float32, Scalar::Fixed32) => {
                typed!(Float32Type, |v: f32| u64::from(v.to_bits()))
            }
            _ => {
                let owned: &mut Vec<u64> = $owned;
                if $fill {
                    element_bits(array, scalar, owned);
                }
                let $values: &[u64] = owned;
                let $to_bits = |v: u64| v;
                $body
            }
        }
    }};
}

impl MessagePlan {
    fn new(message: &MessageDescriptor, columns: &Fields, path: &str) -> Result<Self, CodecError> {
        let mut fields = Vec::with_capacity(columns.len());
        for (i, column) in columns.iter().enumerate() {
            let name = format!("{path}{}", column.name());
            let field = message.get_field_by_name(column.name()).ok_or_else(|| {
                CodecError::Other(format!(
                    "column '{name}' has no field of that name in message {} (its fields: {})",
                    message.full_name(),
                    message
                        .fields()
                        .map(|f| f.name().to_string())
                        .collect::<Vec<_>>()
                        .join(", ")
                ))
            })?;
            let (kind, wire) = bind(&field, column.data_type(), &name)?;
            fields.push((
                field.number(),
                FieldPlan {
                    column: i,
                    name,
                    implicit: !field.supports_presence() && !field.is_list(),
                    key: Key::new(field.number(), wire),
                    kind,
                },
            ));
        }
        fields.sort_by_key(|(n, _)| *n);
        Ok(Self {
            fields: fields.into_iter().map(|(_, f)| f).collect(),
        })
    }

    /// Adds each included row's encoded size to `sizes` (rows where `mask` is set, or all).
    fn size(
        &mut self,
        columns: &[ArrayRef],
        mask: Option<&NullBuffer>,
        sizes: &mut [usize],
    ) -> Result<(), CodecError> {
        for f in &mut self.fields {
            let array = &columns[f.column];
            let valid = NullBuffer::union(mask, array.logical_nulls().as_ref());
            let key = f.key.len;
            let implicit = f.implicit;
            match &mut f.kind {
                FieldKind::Scalar(s, bits) => {
                    let v = valid.as_ref();
                    with_scalar_values!(array, *s, bits, true, |values, to_bits| {
                        scalar_sizes(values, to_bits, *s, key, implicit, v, sizes)
                    })
                }
                FieldKind::Bytes => {
                    for_each_bytes(array, valid.as_ref(), |row, b| {
                        if !(implicit && b.is_empty()) {
                            sizes[row] += key + varint_len(b.len() as u64) + b.len();
                        }
                    });
                }
                FieldKind::Timestamp(unit) => {
                    for_each_timestamp(array, *unit, valid.as_ref(), |row, secs, nanos| {
                        let inner = timestamp_size(secs, nanos);
                        sizes[row] += key + varint_len(inner as u64) + inner;
                    });
                }
                FieldKind::Message(plan, child) => {
                    let s = array.as_struct();
                    child.clear();
                    child.resize(s.len(), 0);
                    plan.size(s.columns(), valid.as_ref(), child)?;
                    for (row, c) in child.iter().enumerate() {
                        if valid.as_ref().is_none_or(|v| v.is_valid(row)) {
                            sizes[row] += key + varint_len(*c as u64) + c;
                        }
                    }
                }
                FieldKind::Packed(s, payload, bits) => {
                    let list = array.as_list::<i32>();
                    element_bits(list.values(), *s, bits);
                    packed_sizes(list, *s, bits, key, valid.as_ref(), payload, sizes);
                }
                FieldKind::EnumName(names, bits) => {
                    names.numbers(array, bits, &f.name, 0..array.len(), valid.as_ref())?;
                    for (row, &v) in bits.iter().enumerate() {
                        if valid.as_ref().is_none_or(|n| n.is_valid(row)) && !(implicit && v == 0) {
                            sizes[row] += key + varint_len(v);
                        }
                    }
                }
                FieldKind::PackedEnumNames(names, payload, bits) => {
                    let list = array.as_list::<i32>();
                    let offsets = list.value_offsets();
                    // Only the elements of the rows written are checked (inside a repeated
                    // message the values hold every element); a bad one is reported at its
                    // row: the last row starting at or before it.
                    let elements = list.values().len();
                    let written = written_elements(offsets, elements, valid.as_ref());
                    names
                        .numbers(list.values(), bits, &f.name, 0..elements, Some(&written))
                        .map_err(|e| at_row_of_element(offsets, e))?;
                    let s = Scalar::Varint;
                    packed_sizes(list, s, bits, key, valid.as_ref(), payload, sizes);
                }
                FieldKind::Wrapper(plan, child) => {
                    child.clear();
                    child.resize(array.len(), 0);
                    plan.size(std::slice::from_ref(array), valid.as_ref(), child)?;
                    for (row, c) in child.iter().enumerate() {
                        if valid.as_ref().is_none_or(|v| v.is_valid(row)) {
                            sizes[row] += key + varint_len(*c as u64) + c;
                        }
                    }
                }
                FieldKind::Repeated(plan, elements) => {
                    let (offsets, entries) = repeated_parts(array);
                    // Only the elements of the batch's valid rows are written (a sliced list's
                    // values hold others); a null element is an empty message, as a repeated
                    // field holds no nulls.
                    let written = written_elements(offsets, entries.len(), valid.as_ref());
                    let nulls = NullBuffer::union(Some(&written), entries.nulls());
                    elements.sizes.clear();
                    elements.sizes.resize(entries.len(), 0);
                    // A bad value is reported at its row: the last row starting at or before
                    // its element.
                    plan.size(entries.columns(), nulls.as_ref(), &mut elements.sizes)
                        .map_err(|e| at_row_of_element(offsets, e))?;
                    for row in 0..array.len() {
                        if valid.as_ref().is_none_or(|v| v.is_valid(row)) {
                            let (a, b) = (offsets[row] as usize, offsets[row + 1] as usize);
                            sizes[row] += elements.sizes[a..b]
                                .iter()
                                .map(|&c| key + varint_len(c as u64) + c)
                                .sum::<usize>();
                        }
                    }
                    elements.written = Some(written);
                }
                FieldKind::RepeatedTimestamp(unit, times) => {
                    let list = array.as_list::<i32>();
                    let offsets = list.value_offsets();
                    times.clear();
                    times.resize(list.values().len(), (0, 0));
                    for_each_timestamp(list.values(), *unit, None, |e, secs, nanos| {
                        times[e] = (secs, nanos);
                    });
                    for row in 0..list.len() {
                        if valid.as_ref().is_none_or(|v| v.is_valid(row)) {
                            let (a, b) = (offsets[row] as usize, offsets[row + 1] as usize);
                            sizes[row] += times[a..b]
                                .iter()
                                .map(|&(secs, nanos)| {
                                    let inner = timestamp_size(secs, nanos);
                                    key + varint_len(inner as u64) + inner
                                })
                                .sum::<usize>();
                        }
                    }
                }
                FieldKind::RepeatedBytes => {
                    let list = array.as_list::<i32>();
                    let offsets = list.value_offsets();
                    let elements = element_bytes(list.values());
                    for row in 0..list.len() {
                        if valid.as_ref().is_none_or(|v| v.is_valid(row)) {
                            let (a, b) = (offsets[row] as usize, offsets[row + 1] as usize);
                            sizes[row] += elements[a..b]
                                .iter()
                                .map(|e| key + varint_len(e.len() as u64) + e.len())
                                .sum::<usize>();
                        }
                    }
                }
            }
        }
        Ok(())
    }

    /// Writes each included row's fields at `cursors[row]` in `out`, advancing the cursors.
    fn write(
        &mut self,
        columns: &[ArrayRef],
        mask: Option<&NullBuffer>,
        out: &mut [u8],
        cursors: &mut [usize],
    ) {
        for f in &mut self.fields {
            let array = &columns[f.column];
            let valid = NullBuffer::union(mask, array.logical_nulls().as_ref());
            let key = &f.key.bytes[..f.key.len];
            let implicit = f.implicit;
            match &mut f.kind {
                FieldKind::Scalar(s, bits) => {
                    let v = valid.as_ref();
                    with_scalar_values!(array, *s, bits, false, |values, to_bits| {
                        write_scalars(values, to_bits, *s, key, implicit, v, out, cursors)
                    })
                }
                FieldKind::Bytes => for_each_bytes(array, valid.as_ref(), |row, b| {
                    if !(implicit && b.is_empty()) {
                        let at = put(out, cursors[row], key);
                        let at = put_varint(out, at, b.len() as u64);
                        cursors[row] = put(out, at, b);
                    }
                }),
                FieldKind::Timestamp(unit) => {
                    for_each_timestamp(array, *unit, valid.as_ref(), |row, secs, nanos| {
                        let at = put(out, cursors[row], key);
                        let at = put_varint(out, at, timestamp_size(secs, nanos) as u64);
                        cursors[row] = put_timestamp(out, at, secs, nanos);
                    })
                }
                FieldKind::Message(plan, child) => {
                    let s = array.as_struct();
                    for (row, c) in child.iter().enumerate() {
                        if valid.as_ref().is_none_or(|v| v.is_valid(row)) {
                            let at = put(out, cursors[row], key);
                            cursors[row] = put_varint(out, at, *c as u64);
                        }
                    }
                    plan.write(s.columns(), valid.as_ref(), out, cursors);
                }
                FieldKind::Packed(s, payload, bits) => {
                    let list = array.as_list::<i32>();
                    write_packed(list, *s, bits, payload, key, valid.as_ref(), out, cursors);
                }
                FieldKind::EnumName(_, bits) => {
                    for (row, &v) in bits.iter().enumerate() {
                        if valid.as_ref().is_none_or(|n| n.is_valid(row)) && !(implicit && v == 0) {
                            let at = put(out, cursors[row], key);
                            cursors[row] = put_varint(out, at, v);
                        }
                    }
                }
                FieldKind::PackedEnumNames(_, payload, bits) => {
                    let list = array.as_list::<i32>();
                    let s = Scalar::Varint;
                    write_packed(list, s, bits, payload, key, valid.as_ref(), out, cursors);
                }
                FieldKind::Wrapper(plan, child) => {
                    for (row, c) in child.iter().enumerate() {
                        if valid.as_ref().is_none_or(|v| v.is_valid(row)) {
                            let at = put(out, cursors[row], key);
                            cursors[row] = put_varint(out, at, *c as u64);
                        }
                    }
                    plan.write(std::slice::from_ref(array), valid.as_ref(), out, cursors);
                }
                FieldKind::Repeated(plan, elements) => {
                    let (offsets, entries) = repeated_parts(array);
                    // Each element's key and length go in its row; its size becomes the cursor
                    // its fields are written at.
                    for row in 0..array.len() {
                        if valid.as_ref().is_some_and(|v| v.is_null(row)) {
                            continue;
                        }
                        let mut at = cursors[row];
                        for e in offsets[row] as usize..offsets[row + 1] as usize {
                            let size = elements.sizes[e];
                            at = put(out, at, key);
                            at = put_varint(out, at, size as u64);
                            elements.sizes[e] = at;
                            at += size;
                        }
                        cursors[row] = at;
                    }
                    let nulls = NullBuffer::union(elements.written.as_ref(), entries.nulls());
                    plan.write(entries.columns(), nulls.as_ref(), out, &mut elements.sizes);
                }
                FieldKind::RepeatedTimestamp(_, times) => {
                    let list = array.as_list::<i32>();
                    let offsets = list.value_offsets();
                    for row in 0..list.len() {
                        if valid.as_ref().is_some_and(|v| v.is_null(row)) {
                            continue;
                        }
                        let (a, b) = (offsets[row] as usize, offsets[row + 1] as usize);
                        let mut at = cursors[row];
                        for &(secs, nanos) in &times[a..b] {
                            at = put(out, at, key);
                            at = put_varint(out, at, timestamp_size(secs, nanos) as u64);
                            at = put_timestamp(out, at, secs, nanos);
                        }
                        cursors[row] = at;
                    }
                }
                FieldKind::RepeatedBytes => {
                    let list = array.as_list::<i32>();
                    let offsets = list.value_offsets();
                    let elements = element_bytes(list.values());
                    for row in 0..list.len() {
                        if valid.as_ref().is_some_and(|v| v.is_null(row)) {
                            continue;
                        }
                        let (a, b) = (offsets[row] as usize, offsets[row + 1] as usize);
                        let mut at = cursors[row];
                        for bytes in &elements[a..b] {
                            at = put(out, at, key);
                            at = put_varint(out, at, bytes.len() as u64);
                            at = put(out, at, bytes);
                        }
                        cursors[row] = at;
                    }
                }
            }
        }
    }
}

/// How `column` of type `data_type` binds to `field`: its kind and wire type, or why not.
fn bind(
    field: &FieldDescriptor,
    data_type: &DataType,
    name: &str,
) -> Result<(FieldKind, u32), CodecError> {
    let refuse = |what: &str| {
        CodecError::Other(format!(
            "column '{name}' is {data_type}, which cannot be written to field {} ({}{:?}): {what}",
            field.full_name(),
            if field.is_list() { "repeated " } else { "" },
            field.kind()
        ))
    };
    if field.is_map() {
        let (DataType::Map(entries, _), Kind::Message(entry)) = (data_type, field.kind()) else {
            return Err(refuse("a map field takes a MAP column"));
        };
        let DataType::Struct(children) = entries.data_type() else {
            return Err(refuse("a MAP's entries are a STRUCT"));
        };
        // The entries' two children are the key and the value, whatever Arrow names them.
        let mut fields = Vec::with_capacity(2);
        for (i, (number, what)) in [(1, "key"), (2, "value")].into_iter().enumerate() {
            let (Some(target), Some(column)) = (entry.get_field(number), children.get(i)) else {
                return Err(refuse(&format!("the map has no {what}")));
            };
            let name = format!("{name}.{what}");
            let (kind, wire) = bind(&target, column.data_type(), &name)?;
            fields.push(FieldPlan {
                column: i,
                name,
                implicit: !target.supports_presence(),
                key: Key::new(number, wire),
                kind,
            });
        }
        let plan = MessagePlan { fields };
        return Ok((
            FieldKind::Repeated(Box::new(plan), Elements::default()),
            LEN,
        ));
    }
    if field.is_list() {
        let DataType::List(element) = data_type else {
            return Err(refuse("a repeated field takes a LIST column"));
        };
        let t = element.data_type();
        match (field.kind(), t) {
            (Kind::Message(m), DataType::Struct(children)) => {
                let plan = MessagePlan::new(&m, children, &format!("{name}."))?;
                return Ok((
                    FieldKind::Repeated(Box::new(plan), Elements::default()),
                    LEN,
                ));
            }
            (Kind::Message(m), DataType::Timestamp(unit, _))
                if m.full_name() == "google.protobuf.Timestamp" =>
            {
                return Ok((FieldKind::RepeatedTimestamp(*unit, Vec::new()), LEN));
            }
            _ => {}
        }
        return match scalar_of(field.kind(), t) {
            Some(s) => Ok((FieldKind::Packed(s, Vec::new(), Vec::new()), LEN)),
            None if is_bytes_type(t) && matches!(field.kind(), Kind::String | Kind::Bytes) => {
                Ok((FieldKind::RepeatedBytes, LEN))
            }
            None if is_text_type(t) && matches!(field.kind(), Kind::Enum(_)) => {
                let Kind::Enum(e) = field.kind() else {
                    return Err(refuse("not an enum"));
                };
                Ok((
                    FieldKind::PackedEnumNames(EnumNames::new(&e), Vec::new(), Vec::new()),
                    LEN,
                ))
            }
            None => Err(refuse(
                "a repeated field of numbers takes a LIST of numbers, one of text or bytes a \
                 LIST of VARCHAR or BYTEA, one of messages a LIST of STRUCT",
            )),
        };
    }
    if let Some(s) = scalar_of(field.kind(), data_type) {
        let wire = match s {
            Scalar::Varint | Scalar::ZigZag => VARINT,
            Scalar::Fixed32 => FIXED32,
            Scalar::Fixed64 => FIXED64,
        };
        return Ok((FieldKind::Scalar(s, Vec::new()), wire));
    }
    match (field.kind(), data_type) {
        (Kind::String | Kind::Bytes, t) if is_bytes_type(t) => Ok((FieldKind::Bytes, LEN)),
        (Kind::Enum(e), t) if is_text_type(t) => {
            Ok((FieldKind::EnumName(EnumNames::new(&e), Vec::new()), VARINT))
        }
        (Kind::Message(m), t) if is_wrapper(&m) => {
            let Some(value) = m.get_field(1) else {
                return Err(refuse("the wrapper has no field 1"));
            };
            let (kind, wire) = bind(&value, t, name)?;
            let plan = MessagePlan {
                fields: vec![FieldPlan {
                    column: 0,
                    name: name.to_string(),
                    implicit: !value.supports_presence(),
                    key: Key::new(1, wire),
                    kind,
                }],
            };
            Ok((FieldKind::Wrapper(Box::new(plan), Vec::new()), LEN))
        }
        (Kind::Message(m), DataType::Timestamp(unit, _))
            if m.full_name() == "google.protobuf.Timestamp" =>
        {
            Ok((FieldKind::Timestamp(*unit), LEN))
        }
        (Kind::Message(m), DataType::Struct(children)) => Ok((
            FieldKind::Message(
                Box::new(MessagePlan::new(&m, children, &format!("{name}."))?),
                Vec::new(),
            ),
            LEN,
        )),
        _ => Err(refuse(
            "numbers go to numeric fields (integers also to enums), VARCHAR to string fields and \
             enums (by value name), BYTEA to bytes fields, STRUCT to message fields, TIMESTAMP \
             to int64 or google.protobuf.Timestamp fields, and each of these to its wrapper type",
        )),
    }
}

/// The scalar encoding of a `kind` field from a column of type `t`, if it is one: integer
/// fields from integer (or TIMESTAMP, its raw value) columns, float fields from float columns.
fn scalar_of(kind: Kind, t: &DataType) -> Option<Scalar> {
    let int = t.is_integer() || matches!(t, DataType::Timestamp(_, _));
    let float = matches!(t, DataType::Float32 | DataType::Float64);
    match kind {
        Kind::Int32 | Kind::Int64 | Kind::Uint32 | Kind::Uint64 | Kind::Enum(_) if int => {
            Some(Scalar::Varint)
        }
        Kind::Bool if matches!(t, DataType::Boolean) => Some(Scalar::Varint),
        Kind::Sint32 | Kind::Sint64 if int => Some(Scalar::ZigZag),
        Kind::Fixed32 | Kind::Sfixed32 if int => Some(Scalar::Fixed32),
        Kind::Fixed64 | Kind::Sfixed64 if int => Some(Scalar::Fixed64),
        Kind::Float if float => Some(Scalar::Fixed32),
        Kind::Double if float => Some(Scalar::Fixed64),
        _ => None,
    }
}

/// `google.protobuf.Int64Value` and the other wrappers of one scalar, text or bytes.
fn is_wrapper(m: &MessageDescriptor) -> bool {
    matches!(
        m.full_name(),
        "google.protobuf.DoubleValue"
            | "google.protobuf.FloatValue"
            | "google.protobuf.Int64Value"
            | "google.protobuf.UInt64Value"
            | "google.protobuf.Int32Value"
            | "google.protobuf.UInt32Value"
            | "google.protobuf.BoolValue"
            | "google.protobuf.StringValue"
            | "google.protobuf.BytesValue"
    )
}

fn is_text_type(t: &DataType) -> bool {
    matches!(t, DataType::Utf8 | DataType::LargeUtf8 | DataType::Utf8View)
}

fn is_bytes_type(t: &DataType) -> bool {
    matches!(
        t,
        DataType::Utf8
            | DataType::LargeUtf8
            | DataType::Utf8View
            | DataType::Binary
            | DataType::LargeBinary
            | DataType::BinaryView
    )
}

/// Calls `each(row, value)` with the value of every included row of a numeric or bool column,
/// as the bits the field's encoding takes: for varints the two's-complement value (signed
/// values sign-extended, as protobuf writes negative int32), for zigzag the zigzagged value,
/// for fixed fields the little-endian bits (floats' IEEE bits, converted to the field's width).
macro_rules! each_value {
    ($array:expr, $scalar:expr, $valid:expr, $each:expr) => {{
        let array: &ArrayRef = $array;
        let scalar: Scalar = $scalar;
        let valid: Option<&NullBuffer> = $valid;
        let mut each = $each;
        macro_rules! ints {
            ($t:ty, $signed:expr) => {{
                let values = array.as_primitive::<$t>().values();
                for (row, &v) in values.iter().enumerate() {
                    if valid.is_some_and(|n| n.is_null(row)) {
                        continue;
                    }
                    let wide = if $signed { v as i64 } else { v as u64 as i64 };
                    let bits = match scalar {
                        Scalar::ZigZag => ((wide << 1) ^ (wide >> 63)) as u64,
                        _ => wide as u64,
                    };
                    each(row, bits);
                }
            }};
        }
        match array.data_type() {
            DataType::Int8 => ints!(Int8Type, true),
            DataType::Int16 => ints!(Int16Type, true),
            DataType::Int32 => ints!(Int32Type, true),
            DataType::Int64 => ints!(Int64Type, true),
            DataType::UInt8 => ints!(UInt8Type, false),
            DataType::UInt16 => ints!(UInt16Type, false),
            DataType::UInt32 => ints!(UInt32Type, false),
            DataType::UInt64 => ints!(UInt64Type, false),
            DataType::Timestamp(TimeUnit::Second, _) => ints!(TimestampSecondType, true),
            DataType::Timestamp(TimeUnit::Millisecond, _) => ints!(TimestampMillisecondType, true),
            DataType::Timestamp(TimeUnit::Microsecond, _) => ints!(TimestampMicrosecondType, true),
            DataType::Timestamp(TimeUnit::Nanosecond, _) => ints!(TimestampNanosecondType, true),
            DataType::Float32 => {
                for (row, &v) in array
                    .as_primitive::<Float32Type>()
                    .values()
                    .iter()
                    .enumerate()
                {
                    if valid.is_some_and(|n| n.is_null(row)) {
                        continue;
                    }
                    let bits = match scalar {
                        Scalar::Fixed64 => f64::from(v).to_bits(),
                        _ => u64::from(v.to_bits()),
                    };
                    each(row, bits);
                }
            }
            DataType::Float64 => {
                for (row, &v) in array
                    .as_primitive::<Float64Type>()
                    .values()
                    .iter()
                    .enumerate()
                {
                    if valid.is_some_and(|n| n.is_null(row)) {
                        continue;
                    }
                    let bits = match scalar {
                        Scalar::Fixed32 => u64::from((v as f32).to_bits()),
                        _ => v.to_bits(),
                    };
                    each(row, bits);
                }
            }
            DataType::Boolean => {
                let b = array.as_boolean();
                for row in 0..b.len() {
                    if valid.is_some_and(|n| n.is_null(row)) {
                        continue;
                    }
                    each(row, u64::from(b.value(row)));
                }
            }
            _ => {}
        }
    }};
}

/// A packed repeated field's sizes: each row's payload (kept in `payload` for the write) from
/// its elements' `bits`, and the field's whole size added to `sizes[row]` (nothing for an empty
/// list or a null row).
fn packed_sizes(
    list: &ListArray,
    scalar: Scalar,
    bits: &[u64],
    key: usize,
    valid: Option<&NullBuffer>,
    payload: &mut Vec<usize>,
    sizes: &mut [usize],
) {
    payload.clear();
    payload.resize(list.len(), 0);
    let offsets = list.value_offsets();
    for row in 0..list.len() {
        if valid.is_some_and(|v| v.is_null(row)) {
            continue;
        }
        let (a, b) = (offsets[row] as usize, offsets[row + 1] as usize);
        if a == b {
            continue;
        }
        let p: usize = match scalar {
            Scalar::Varint | Scalar::ZigZag => bits[a..b].iter().map(|&v| varint_len(v)).sum(),
            Scalar::Fixed32 => 4 * (b - a),
            Scalar::Fixed64 => 8 * (b - a),
        };
        payload[row] = p;
        sizes[row] += key + varint_len(p as u64) + p;
    }
}

/// Writes a packed repeated field sized by [`packed_sizes`]: the key, the payload's length and
/// each element, at `cursors[row]`.
#[allow(clippy::too_many_arguments)]
fn write_packed(
    list: &ListArray,
    scalar: Scalar,
    bits: &[u64],
    payload: &[usize],
    key: &[u8],
    valid: Option<&NullBuffer>,
    out: &mut [u8],
    cursors: &mut [usize],
) {
    let offsets = list.value_offsets();
    for row in 0..list.len() {
        if payload.get(row).is_none_or(|&p| p == 0) || valid.is_some_and(|v| v.is_null(row)) {
            continue;
        }
        let at = put(out, cursors[row], key);
        let mut at = put_varint(out, at, payload[row] as u64);
        let (a, b) = (offsets[row] as usize, offsets[row + 1] as usize);
        for &v in &bits[a..b] {
            at = match scalar {
                Scalar::Varint | Scalar::ZigZag => put_varint(out, at, v),
                Scalar::Fixed32 => put(out, at, &(v as u32).to_le_bytes()),
                Scalar::Fixed64 => put(out, at, &v.to_le_bytes()),
            };
        }
        cursors[row] = at;
    }
}

/// Adds `key` plus each included value's size to `sizes[row]`.
fn scalar_sizes<T: Copy>(
    values: &[T],
    to_bits: impl Fn(T) -> u64,
    scalar: Scalar,
    key: usize,
    implicit: bool,
    valid: Option<&NullBuffer>,
    sizes: &mut [usize],
) {
    // Zero bits are 0, false, +0.0: the default a field without presence leaves out.
    let width = match scalar {
        Scalar::Fixed32 => 4,
        Scalar::Fixed64 => 8,
        Scalar::Varint | Scalar::ZigZag => 0,
    };
    let size = |v: u64| -> usize {
        if implicit && v == 0 {
            0
        } else {
            key + if width == 0 { varint_len(v) } else { width }
        }
    };
    match valid {
        // Without nulls the loop has no null check (the default's is a select, not a branch).
        None => {
            for (&v, s) in values.iter().zip(sizes.iter_mut()) {
                *s += size(to_bits(v));
            }
        }
        Some(n) => {
            for (row, (&v, s)) in values.iter().zip(sizes.iter_mut()).enumerate() {
                if n.is_valid(row) {
                    *s += size(to_bits(v));
                }
            }
        }
    }
}

/// Writes each included value, after `key`, at `cursors[row]`, advancing it.
#[allow(clippy::too_many_arguments)]
fn write_scalars<T: Copy>(
    values: &[T],
    to_bits: impl Fn(T) -> u64,
    scalar: Scalar,
    key: &[u8],
    implicit: bool,
    valid: Option<&NullBuffer>,
    out: &mut [u8],
    cursors: &mut [usize],
) {
    // One loop per encoding and per key length, so those branches are taken once a column,
    // not once a value; without nulls, nor is the null check.
    macro_rules! each {
        ($write:expr) => {{
            let write = $write;
            let rows = values.iter().zip(cursors.iter_mut());
            match valid {
                None => {
                    for (&v, cursor) in rows {
                        let v = to_bits(v);
                        if !(implicit && v == 0) {
                            *cursor = write(out, *cursor, v);
                        }
                    }
                }
                Some(n) => {
                    for (row, (&v, cursor)) in rows.enumerate() {
                        let v = to_bits(v);
                        if !(implicit && v == 0) && n.is_valid(row) {
                            *cursor = write(out, *cursor, v);
                        }
                    }
                }
            }
        }};
    }
    macro_rules! by_key {
        ($value:expr) => {{
            let value = $value;
            match *key {
                [k] => each!(|out: &mut [u8], at: usize, v: u64| {
                    out[at] = k;
                    value(out, at + 1, v)
                }),
                _ => each!(|out: &mut [u8], at: usize, v: u64| {
                    let at = put(out, at, key);
                    value(out, at, v)
                }),
            }
        }};
    }
    match scalar {
        Scalar::Varint | Scalar::ZigZag => by_key!(put_varint),
        Scalar::Fixed32 => by_key!(|out: &mut [u8], at: usize, v: u64| {
            out[at..at + 4].copy_from_slice(&(v as u32).to_le_bytes());
            at + 4
        }),
        Scalar::Fixed64 => by_key!(|out: &mut [u8], at: usize, v: u64| {
            out[at..at + 8].copy_from_slice(&v.to_le_bytes());
            at + 8
        }),
    }
}

/// Each value's bits of a column or a list's values (a null as 0), into `bits`.
fn element_bits(values: &ArrayRef, scalar: Scalar, bits: &mut Vec<u64>) {
    bits.clear();
    bits.resize(values.len(), 0);
    let nulls = values.logical_nulls();
    each_value!(values, scalar, nulls.as_ref(), |e: usize, v: u64| {
        bits[e] = v;
    });
}

/// Each element's bytes of a list's text or binary values (a null element as empty).
fn element_bytes(values: &ArrayRef) -> Vec<&[u8]> {
    let nulls = values.logical_nulls();
    let null = |i: usize| nulls.as_ref().is_some_and(|n| n.is_null(i));
    let n = values.len();
    fn all<'a>(
        n: usize,
        null: impl Fn(usize) -> bool,
        value: impl Fn(usize) -> &'a [u8],
    ) -> Vec<&'a [u8]> {
        (0..n)
            .map(|i| if null(i) { &[][..] } else { value(i) })
            .collect()
    }
    match values.data_type() {
        DataType::Utf8 => {
            let a = values.as_string::<i32>();
            all(n, null, |i| a.value(i).as_bytes())
        }
        DataType::LargeUtf8 => {
            let a = values.as_string::<i64>();
            all(n, null, |i| a.value(i).as_bytes())
        }
        DataType::Utf8View => {
            let a = values.as_string_view();
            all(n, null, |i| a.value(i).as_bytes())
        }
        DataType::Binary => {
            let a = values.as_binary::<i32>();
            all(n, null, |i| a.value(i))
        }
        DataType::LargeBinary => {
            let a = values.as_binary::<i64>();
            all(n, null, |i| a.value(i))
        }
        DataType::BinaryView => {
            let a = values.as_binary_view();
            all(n, null, |i| a.value(i))
        }
        _ => vec![&[][..]; n],
    }
}

/// Calls `each(row, bytes)` for every included row of a text or binary column.
fn for_each_bytes(
    array: &ArrayRef,
    valid: Option<&NullBuffer>,
    mut each: impl FnMut(usize, &[u8]),
) {
    fn offsets<O: OffsetSizeTrait, T: arrow_array::types::ByteArrayType<Offset = O>>(
        a: &GenericByteArray<T>,
        valid: Option<&NullBuffer>,
        each: &mut impl FnMut(usize, &[u8]),
    ) {
        let offsets = a.value_offsets();
        let data = a.value_data();
        for row in 0..a.len() {
            if valid.is_some_and(|n| n.is_null(row)) {
                continue;
            }
            let (s, e) = (offsets[row].as_usize(), offsets[row + 1].as_usize());
            each(row, &data[s..e]);
        }
    }
    match array.data_type() {
        DataType::Utf8 => offsets(array.as_string::<i32>(), valid, &mut each),
        DataType::LargeUtf8 => offsets(array.as_string::<i64>(), valid, &mut each),
        DataType::Binary => offsets(array.as_binary::<i32>(), valid, &mut each),
        DataType::LargeBinary => offsets(array.as_binary::<i64>(), valid, &mut each),
        DataType::Utf8View => {
            let a = array.as_string_view();
            for row in 0..a.len() {
                if !valid.is_some_and(|n| n.is_null(row)) {
                    each(row, a.value(row).as_bytes());
                }
            }
        }
        DataType::BinaryView => {
            let a = array.as_binary_view();
            for row in 0..a.len() {
                if !valid.is_some_and(|n| n.is_null(row)) {
                    each(row, a.value(row));
                }
            }
        }
        _ => {}
    }
}

/// Calls `each(row, seconds, nanos)` for every included row of a TIMESTAMP column.
fn for_each_timestamp(
    array: &ArrayRef,
    unit: TimeUnit,
    valid: Option<&NullBuffer>,
    mut each: impl FnMut(usize, i64, i32),
) {
    let per_second: i64 = match unit {
        TimeUnit::Second => 1,
        TimeUnit::Millisecond => 1_000,
        TimeUnit::Microsecond => 1_000_000,
        TimeUnit::Nanosecond => 1_000_000_000,
    };
    let nanos_per_unit = 1_000_000_000 / per_second;
    each_value!(array, Scalar::Varint, valid, |row: usize, bits: u64| {
        let v = bits as i64;
        let secs = v.div_euclid(per_second);
        let nanos = (v.rem_euclid(per_second) * nanos_per_unit) as i32;
        each(row, secs, nanos);
    });
}

/// The size of a `google.protobuf.Timestamp` message (zero fields are absent).
fn timestamp_size(secs: i64, nanos: i32) -> usize {
    let mut n = 0;
    if secs != 0 {
        n += 1 + varint_len(secs as u64);
    }
    if nanos != 0 {
        n += 1 + varint_len(nanos as i64 as u64);
    }
    n
}

fn put_timestamp(out: &mut [u8], mut at: usize, secs: i64, nanos: i32) -> usize {
    if secs != 0 {
        at = put(out, at, &[0x08]);
        at = put_varint(out, at, secs as u64);
    }
    if nanos != 0 {
        at = put(out, at, &[0x10]);
        at = put_varint(out, at, nanos as i64 as u64);
    }
    at
}

/// Bytes of `v` as a varint.
#[inline]
fn varint_len(v: u64) -> usize {
    // ceil(bits / 7) with 0 taking one byte, as (bits * 9 + 64) / 64: a multiply and a shift
    // where a division by 7 is a longer sequence (the first pass runs this for every varint).
    let bits = 64 - (v | 1).leading_zeros() as usize;
    (bits * 9 + 64) >> 6
}

/// Writes `v` as a varint at `at`; returns the end.
#[inline(always)]
fn put_varint(out: &mut [u8], at: usize, mut v: u64) -> usize {
    if v < 0x80 {
        out[at] = v as u8;
        return at + 1;
    }
    // The length first, so the bytes are checked against `out` once, not one at a time.
    let end = at + varint_len(v);
    if let Some((last, head)) = out[at..end].split_last_mut() {
        for b in head {
            *b = (v as u8) | 0x80;
            v >>= 7;
        }
        *last = v as u8;
    }
    end
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ProtoSchema;
    use arrow_array::builder::{ListBuilder, StringBuilder};
    use arrow_array::StringArray;
    use arrow_schema::{Field, Schema};
    use std::sync::Arc;

    /// Rows of `t` and a LIST of Side names; the third holds a name Side does not have.
    fn rows() -> (MessageDescriptor, RecordBatch) {
        let schema = ProtoSchema::from_sources(
            &[(
                "s.proto",
                r#"syntax = "proto3"; package s; enum Side { BID = 0; ASK = 1; }
                message T { string t = 1; repeated Side sides = 2; }"#,
            )],
            "s.proto",
        )
        .unwrap();
        let message = schema.pool().get_message_by_name("s.T").unwrap();
        let mut sides = ListBuilder::new(StringBuilder::new());
        for row in [&["BID"][..], &["ASK", "BID"], &["BAD"], &["ASK"]] {
            for s in row {
                sides.values().append_value(s);
            }
            sides.append(true);
        }
        let sides = sides.finish();
        let fields = Schema::new(vec![
            Field::new("t", DataType::Utf8, true),
            Field::new("sides", sides.data_type().clone(), true),
        ]);
        let batch = RecordBatch::try_new(
            Arc::new(fields),
            vec![
                Arc::new(StringArray::from(vec!["a", "b", "c", "d"])),
                Arc::new(sides),
            ],
        )
        .unwrap();
        (message, batch)
    }

    /// A bad name in a packed repeated enum is reported at its row, relative to the batch
    /// (a slice too), and one outside a slice's rows is not reported at all.
    #[test]
    fn a_bad_element_of_a_list_is_reported_at_its_row() {
        let (message, batch) = rows();
        let mut e = ProtoEncoder::new(&message, batch.schema().fields()).unwrap();
        let (mut out, mut ends) = (Vec::new(), Vec::new());
        let row = |r: Result<(), CodecError>| match r {
            Err(CodecError::Row { row, reason }) => {
                assert!(
                    reason.contains("'BAD'") && reason.contains("s.Side"),
                    "{reason}"
                );
                Some(row)
            }
            Err(e) => panic!("{e}"),
            Ok(()) => None,
        };
        assert_eq!(row(e.encode_batch(&batch, &mut out, &mut ends)), Some(2));
        assert_eq!(
            row(e.encode_batch(&batch.slice(1, 2), &mut out, &mut ends)),
            Some(1)
        );
        out.clear();
        ends.clear();
        assert_eq!(
            row(e.encode_batch(&batch.slice(3, 1), &mut out, &mut ends)),
            None
        );
        assert_eq!(ends.len(), 1);
    }

    /// A prefix goes before every message, after what `out` already held, and the messages
    /// are the same bytes as without it.
    #[test]
    fn a_prefix_goes_before_every_message() {
        let (message, batch) = rows();
        let batch = batch.slice(0, 2);
        let mut plain = ProtoEncoder::new(&message, batch.schema().fields()).unwrap();
        let (mut want, mut want_ends) = (Vec::new(), Vec::new());
        plain
            .encode_batch(&batch, &mut want, &mut want_ends)
            .unwrap();
        let mut framed = ProtoEncoder::new(&message, batch.schema().fields())
            .unwrap()
            .with_prefix(vec![0, 0, 0, 0, 7, 0]);
        let (mut out, mut ends) = (b"xyz".to_vec(), vec![3]);
        framed.encode_batch(&batch, &mut out, &mut ends).unwrap();
        assert_eq!(&out[..3], b"xyz");
        assert_eq!(ends.len(), 3);
        let mut start = 3;
        let mut plain_start = 0;
        for (end, plain_end) in ends[1..].iter().zip(&want_ends) {
            assert_eq!(&out[start..start + 6], &[0, 0, 0, 0, 7, 0]);
            assert_eq!(&out[start + 6..*end], &want[plain_start..*plain_end]);
            start = *end;
            plain_start = *plain_end;
        }
    }

    /// A MAP column into a map field and a LIST of STRUCT into a repeated message field: a
    /// slice writes only its rows' elements, a null element is an empty message, a null row
    /// writes none, and a bad enum name in a map value is reported at its row.
    #[test]
    fn maps_and_repeated_messages_of_a_slice() {
        use arrow_array::builder::{Int64Builder, MapBuilder, StructBuilder};
        use prost_reflect::{DynamicMessage, MapKey, Value};
        let schema = ProtoSchema::from_sources(
            &[(
                "m.proto",
                r#"syntax = "proto3"; package m; enum Side { BID = 0; ASK = 1; }
                message Leg { string name = 1; int64 qty = 2; }
                message T { map<string, Side> sides = 1; repeated Leg legs = 2; }"#,
            )],
            "m.proto",
        )
        .unwrap();
        let message = schema.pool().get_message_by_name("m.T").unwrap();
        let mut sides = MapBuilder::new(None, StringBuilder::new(), StringBuilder::new());
        let leg_fields = vec![
            Field::new("name", DataType::Utf8, true),
            Field::new("qty", DataType::Int64, true),
        ];
        let mut legs = ListBuilder::new(StructBuilder::from_fields(leg_fields.clone(), 4));
        // Row 0: {x: ASK}, one leg. Row 1: {y: BID, z: ASK}, a leg and a null leg. Row 2: a
        // null map, no legs (null list). Row 3: {w: BAD}, one leg.
        type Row<'a> = (
            Option<&'a [(&'a str, &'a str)]>,
            Option<&'a [Option<(&'a str, i64)>]>,
        );
        let rows: [Row; 4] = [
            (Some(&[("x", "ASK")]), Some(&[Some(("a", 1))])),
            (
                Some(&[("y", "BID"), ("z", "ASK")]),
                Some(&[Some(("b", 2)), None]),
            ),
            (None, None),
            (Some(&[("w", "BAD")]), Some(&[Some(("c", 3))])),
        ];
        for (map, list) in rows {
            for (k, v) in map.unwrap_or_default() {
                sides.keys().append_value(k);
                sides.values().append_value(v);
            }
            sides.append(map.is_some()).unwrap();
            for leg in list.unwrap_or_default() {
                let s = legs.values();
                match leg {
                    Some((n, q)) => {
                        s.field_builder::<StringBuilder>(0).unwrap().append_value(n);
                        s.field_builder::<Int64Builder>(1).unwrap().append_value(*q);
                        s.append(true);
                    }
                    None => {
                        s.field_builder::<StringBuilder>(0).unwrap().append_null();
                        s.field_builder::<Int64Builder>(1).unwrap().append_null();
                        s.append(false);
                    }
                }
            }
            legs.append(list.is_some());
        }
        let (sides, legs) = (sides.finish(), legs.finish());
        let fields = Schema::new(vec![
            Field::new("sides", sides.data_type().clone(), true),
            Field::new("legs", legs.data_type().clone(), true),
        ]);
        let batch =
            RecordBatch::try_new(Arc::new(fields), vec![Arc::new(sides), Arc::new(legs)]).unwrap();
        let mut e = ProtoEncoder::new(&message, batch.schema().fields()).unwrap();
        let (mut out, mut ends) = (Vec::new(), Vec::new());
        match e.encode_batch(&batch, &mut out, &mut ends) {
            Err(CodecError::Row { row, reason }) => {
                assert_eq!(row, 3, "{reason}");
                assert!(
                    reason.contains("'BAD'") && reason.contains("sides.value"),
                    "{reason}"
                );
            }
            other => panic!("{other:?}"),
        }
        out.clear();
        ends.clear();
        e.encode_batch(&batch.slice(1, 2), &mut out, &mut ends)
            .unwrap();
        assert_eq!(ends.len(), 2);
        let first = DynamicMessage::decode(message.clone(), &out[..ends[0]]).unwrap();
        let map = first.get_field_by_name("sides").unwrap();
        let map = map.as_map().unwrap();
        assert_eq!(map.len(), 2);
        assert_eq!(map[&MapKey::String("y".into())], Value::EnumNumber(0));
        assert_eq!(map[&MapKey::String("z".into())], Value::EnumNumber(1));
        let legs = first.get_field_by_name("legs").unwrap();
        let legs = legs.as_list().unwrap();
        assert_eq!(legs.len(), 2);
        let leg = legs[0].as_message().unwrap();
        assert_eq!(leg.get_field_by_name("name").unwrap().as_str(), Some("b"));
        assert_eq!(leg.get_field_by_name("qty").unwrap().as_i64(), Some(2));
        // The null leg: present, empty.
        assert_eq!(legs[1].as_message().unwrap().fields().count(), 0);
        // The null map and list: no field at all.
        assert!(out[ends[0]..ends[1]].is_empty());
    }

    /// A repeated enum inside a repeated message: a bad name is reported at its row, and one in
    /// a row outside the batch's slice is not reported at all.
    #[test]
    fn a_bad_name_in_a_nested_repeated_enum_is_reported_at_its_row_only() {
        use arrow_array::builder::StructBuilder;
        let schema = ProtoSchema::from_sources(
            &[(
                "n.proto",
                r#"syntax = "proto3"; package n; enum Side { BID = 0; ASK = 1; }
                message Leg { repeated Side sides = 1; }
                message T { repeated Leg legs = 1; }"#,
            )],
            "n.proto",
        )
        .unwrap();
        let message = schema.pool().get_message_by_name("n.T").unwrap();
        let sides = Field::new(
            "sides",
            DataType::List(Arc::new(Field::new("item", DataType::Utf8, true))),
            true,
        );
        let mut legs = ListBuilder::new(StructBuilder::from_fields(vec![sides], 3));
        for name in ["ASK", "BAD", "BID"] {
            let leg = legs.values();
            let list = leg
                .field_builder::<ListBuilder<Box<dyn arrow_array::builder::ArrayBuilder>>>(0)
                .unwrap();
            list.values()
                .as_any_mut()
                .downcast_mut::<StringBuilder>()
                .unwrap()
                .append_value(name);
            list.append(true);
            leg.append(true);
            legs.append(true);
        }
        let legs = legs.finish();
        let fields = Schema::new(vec![Field::new("legs", legs.data_type().clone(), true)]);
        let batch = RecordBatch::try_new(Arc::new(fields), vec![Arc::new(legs)]).unwrap();
        let mut e = ProtoEncoder::new(&message, batch.schema().fields()).unwrap();
        let (mut out, mut ends) = (Vec::new(), Vec::new());
        match e.encode_batch(&batch, &mut out, &mut ends) {
            Err(CodecError::Row { row, reason }) => {
                assert_eq!(row, 1, "{reason}");
                assert!(reason.contains("'BAD'"), "{reason}");
            }
            other => panic!("{other:?}"),
        }
        for (start, len) in [(0, 1), (2, 1)] {
            out.clear();
            ends.clear();
            e.encode_batch(&batch.slice(start, len), &mut out, &mut ends)
                .unwrap();
            assert_eq!(ends.len(), 1);
        }
    }

    /// Scalar columns are read in place, where a null row's slot holds whatever the array
    /// left there: such values are never written, and zeros of fields with presence are.
    #[test]
    fn the_values_under_nulls_are_never_written() {
        use arrow_array::PrimitiveArray;
        use arrow_buffer::ScalarBuffer;
        let schema = ProtoSchema::from_sources(
            &[(
                "n.proto",
                r#"syntax = "proto3"; package n;
                message N {
                  optional int32 a = 1; sint32 b = 2; optional uint32 c = 3; int64 d = 4;
                  optional sint64 e = 5; uint64 f = 6; optional double g = 7; float h = 8;
                  optional sfixed32 i = 9; fixed64 j = 10;
                }"#,
            )],
            "n.proto",
        )
        .unwrap();
        let message = schema.pool().get_message_by_name("n.N").unwrap();
        let n = 64;
        let nulls = NullBuffer::from((0..n).map(|i| i % 3 != 1).collect::<Vec<_>>());
        // `under` is what a null row's slot holds: zero, or something else.
        let batch = |under: i64| {
            let value = |i: usize| {
                if nulls.is_null(i) {
                    under
                } else {
                    (i as i64 % 4 - 1) * 1_000_003
                }
            };
            let nulls = Some(nulls.clone());
            fn column<T: arrow_array::ArrowPrimitiveType>(
                values: impl Iterator<Item = T::Native>,
                nulls: &Option<NullBuffer>,
            ) -> ArrayRef {
                Arc::new(PrimitiveArray::<T>::new(
                    ScalarBuffer::from_iter(values),
                    nulls.clone(),
                ))
            }
            let rows = || (0..n).map(value);
            let columns: Vec<(&str, ArrayRef)> = vec![
                ("a", column::<Int32Type>(rows().map(|v| v as i32), &nulls)),
                ("b", column::<Int32Type>(rows().map(|v| v as i32), &nulls)),
                ("c", column::<UInt32Type>(rows().map(|v| v as u32), &nulls)),
                ("d", column::<Int64Type>(rows(), &nulls)),
                ("e", column::<Int64Type>(rows(), &nulls)),
                ("f", column::<UInt64Type>(rows().map(|v| v as u64), &nulls)),
                ("g", column::<Float64Type>(rows().map(|v| v as f64), &nulls)),
                ("h", column::<Float32Type>(rows().map(|v| v as f32), &nulls)),
                ("i", column::<Int32Type>(rows().map(|v| v as i32), &nulls)),
                ("j", column::<UInt64Type>(rows().map(|v| v as u64), &nulls)),
            ];
            let fields: Vec<Field> = columns
                .iter()
                .map(|(name, a)| Field::new(*name, a.data_type().clone(), true))
                .collect();
            RecordBatch::try_new(
                Arc::new(Schema::new(fields)),
                columns.into_iter().map(|(_, a)| a).collect(),
            )
            .unwrap()
        };
        let encode = |b: &RecordBatch| {
            let mut e = ProtoEncoder::new(&message, b.schema().fields()).unwrap();
            let (mut out, mut ends) = (Vec::new(), Vec::new());
            e.encode_batch(b, &mut out, &mut ends).unwrap();
            (out, ends)
        };
        let clean = encode(&batch(0));
        assert_eq!(encode(&batch(-77_777_777_777)), clean);
        assert_eq!(encode(&batch(i64::MAX)), clean);
        // A null row is an empty message; a row with a zero in a field with presence is not.
        let (out, ends) = &clean;
        assert_eq!(ends[1] - ends[0], 0, "row 1 is null in every column");
        let row = |r: usize| {
            let start = if r == 0 { 0 } else { ends[r - 1] };
            prost_reflect::DynamicMessage::decode(message.clone(), &out[start..ends[r]]).unwrap()
        };
        // Row 2: value(2) = (2 % 4 - 1) * 1_000_003 = 1_000_003; row 3: 2_000_006; row 5: 0.
        assert!(row(5).has_field_by_name("a") && !row(5).has_field_by_name("b"));
        assert_eq!(
            row(3).get_field_by_name("e").unwrap().as_i64(),
            Some(2_000_006)
        );
    }

    /// The varint length and writer agree with prost's at every length, 1 to 10 bytes.
    #[test]
    fn varints_of_every_length() {
        let mut values = vec![0u64, 1, 127, 128, u64::MAX, i64::MIN as u64];
        for shift in 1..64 {
            values.extend([(1u64 << shift) - 1, 1 << shift, (1 << shift) + 1]);
        }
        for v in values {
            let mut expected = Vec::new();
            prost::encoding::encode_varint(v, &mut expected);
            assert_eq!(varint_len(v), expected.len(), "{v}");
            let mut out = vec![0xaa; expected.len() + 2];
            assert_eq!(put_varint(&mut out, 1, v), expected.len() + 1, "{v}");
            assert_eq!(&out[1..=expected.len()], &expected[..], "{v}");
            assert_eq!((out[0], out[expected.len() + 1]), (0xaa, 0xaa), "{v}");
        }
    }
}
