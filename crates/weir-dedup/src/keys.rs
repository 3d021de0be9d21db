//! Row keys from Arrow columns: the bytes that identify a row, built for a whole batch at once
//! into buffers that are reused from batch to batch (no allocation per row).

use arrow_array::cast::AsArray;
use arrow_array::types::{
    Date32Type, Date64Type, Int16Type, Int32Type, Int64Type, Int8Type, UInt16Type, UInt32Type,
    UInt64Type, UInt8Type,
};
use arrow_array::{Array, ArrayRef, OffsetSizeTrait, RecordBatch};
use arrow_buffer::NullBuffer;
use arrow_schema::{DataType, Schema, TimeUnit};
use xxhash_rust::xxh3::xxh3_128;

use crate::DedupError;

/// How a key is stored.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum KeyMode {
    /// The key's 128-bit xxh3 hash: 16 bytes a key whatever its size. Two different keys share
    /// a hash with a probability of about n²/2¹²⁹, which is negligible for any real key count.
    #[default]
    Xxh3_128,
    /// The key bytes themselves: exact, at the cost of their size.
    Raw,
}

impl std::str::FromStr for KeyMode {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        match s.to_ascii_lowercase().as_str() {
            "xxh3_128" => Ok(Self::Xxh3_128),
            "none" | "raw" => Ok(Self::Raw),
            other => Err(format!(
                "'dedup.hash' = '{other}': expected 'xxh3_128' or 'none'"
            )),
        }
    }
}

/// The columns a key is made of and the optional event-time column, resolved against a schema.
#[derive(Debug, Clone)]
pub struct KeyColumns {
    columns: Vec<(usize, String)>,
    time: Option<(usize, String, TimeUnit)>,
}

impl KeyColumns {
    /// Resolves `names` (and `time_column`) in `schema`, checking that each has a type a key
    /// can hold: integers, booleans, dates, timestamps, strings and binaries.
    pub fn resolve(
        schema: &Schema,
        names: &[String],
        time_column: Option<&str>,
    ) -> Result<Self, DedupError> {
        if names.is_empty() {
            return Err(DedupError::Config(
                "'dedup.key' names no column; give one or more, comma separated".into(),
            ));
        }
        let find = |name: &str| {
            schema.index_of(name).map_err(|_| {
                DedupError::Config(format!(
                    "'dedup.key' column '{name}' is not a column of the source; its columns are: {}",
                    schema
                        .fields()
                        .iter()
                        .map(|f| f.name().as_str())
                        .collect::<Vec<_>>()
                        .join(", ")
                ))
            })
        };
        let mut columns = Vec::new();
        for name in names {
            let i = find(name)?;
            let ty = schema.field(i).data_type();
            if !key_type(ty) {
                return Err(DedupError::Config(format!(
                    "'dedup.key' column '{name}' is {ty}; a key column must be an integer, boolean, date, timestamp, string or binary"
                )));
            }
            columns.push((i, name.clone()));
        }
        let time = match time_column {
            None => None,
            Some(name) => {
                let i = find(name)?;
                let unit = match schema.field(i).data_type() {
                    DataType::Timestamp(u, _) => *u,
                    // Plain integers are read as milliseconds since the epoch.
                    DataType::Int64 => TimeUnit::Millisecond,
                    ty => {
                        return Err(DedupError::Config(format!(
                            "'dedup.time_column' '{name}' is {ty}; it must be a TIMESTAMP or a BIGINT of milliseconds"
                        )))
                    }
                };
                Some((i, name.to_string(), unit))
            }
        };
        Ok(Self { columns, time })
    }

    /// The unit of the time column, if there is one.
    pub fn time_unit(&self) -> Option<TimeUnit> {
        self.time.as_ref().map(|t| t.2)
    }

    /// The key column names, comma separated (for messages).
    pub fn describe(&self) -> String {
        self.columns
            .iter()
            .map(|(_, n)| n.as_str())
            .collect::<Vec<_>>()
            .join(",")
    }
}

fn key_type(ty: &DataType) -> bool {
    matches!(
        ty,
        DataType::Int8
            | DataType::Int16
            | DataType::Int32
            | DataType::Int64
            | DataType::UInt8
            | DataType::UInt16
            | DataType::UInt32
            | DataType::UInt64
            | DataType::Boolean
            | DataType::Date32
            | DataType::Date64
            | DataType::Timestamp(_, _)
            | DataType::Utf8
            | DataType::LargeUtf8
            | DataType::Utf8View
            | DataType::Binary
            | DataType::LargeBinary
    )
}

/// The keys (and event times) of one batch's rows.
#[derive(Debug, Default)]
pub(crate) struct RowKeys {
    /// Every row's encoded key bytes, back to back.
    bytes: Vec<u8>,
    /// `offsets[r]..offsets[r + 1]` is row `r`'s slice of `bytes`.
    offsets: Vec<usize>,
    /// Row `r`'s 128-bit hash (both modes: it places the key in the in-memory sets).
    hashes: Vec<[u8; 16]>,
    /// Row `r`'s event time, or `None` for every row when there is no time column.
    times: Vec<i64>,
    /// Where the next column's bytes go in each row while a batch is encoded.
    cursor: Vec<usize>,
    mode: KeyMode,
}

impl RowKeys {
    pub(crate) fn new(mode: KeyMode) -> Self {
        Self {
            mode,
            ..Self::default()
        }
    }

    /// Encodes the key of every row of `batch`. A null key value encodes as its own marker, so
    /// null is a value like any other (two rows with null keys are duplicates).
    pub(crate) fn encode(
        &mut self,
        batch: &RecordBatch,
        columns: &KeyColumns,
    ) -> Result<(), DedupError> {
        let rows = batch.num_rows();
        self.bytes.clear();
        self.offsets.clear();
        self.hashes.clear();
        self.times.clear();
        // One downcast per column per batch; the row loop below only matches on the view.
        let views: Vec<KeyView<'_>> = columns
            .columns
            .iter()
            .map(|(i, name)| KeyView::new(batch.column(*i), name))
            .collect::<Result<_, _>>()?;
        // Column at a time, not row at a time: each column's loop is one type with no per-row
        // dispatch. First every row's length, then its start, then each column fills its part
        // of every row.
        self.offsets.resize(rows + 1, 0);
        for v in &views {
            v.add_lengths(&mut self.offsets[1..]);
        }
        let mut total = 0;
        for o in self.offsets.iter_mut() {
            total += *o;
            *o = total;
        }
        self.bytes.resize(total, 0);
        self.cursor.clear();
        self.cursor.extend_from_slice(&self.offsets[..rows]);
        for v in &views {
            v.write_column(&mut self.bytes, &mut self.cursor);
        }
        debug_assert!(self.cursor.iter().eq(&self.offsets[1..]));
        for row in 0..rows {
            let k = &self.bytes[self.offsets[row]..self.offsets[row + 1]];
            self.hashes.push(xxh3_128(k).to_le_bytes());
        }
        if let Some((i, name, _)) = &columns.time {
            let col = batch.column(*i);
            let values = i64_values(col).ok_or_else(|| {
                DedupError::Config(format!(
                    "'dedup.time_column' '{name}' is {} in this batch",
                    col.data_type()
                ))
            })?;
            self.times.extend_from_slice(values);
            if let Some(nulls) = col.nulls() {
                // A row without a time never moves the clock and expires with its neighbours.
                for row in 0..rows {
                    if nulls.is_null(row) {
                        self.times[row] = i64::MIN;
                    }
                }
            }
        }
        Ok(())
    }

    pub(crate) fn len(&self) -> usize {
        self.hashes.len()
    }

    /// The bytes stored for row `r`: the hash, or the raw key.
    #[inline]
    pub(crate) fn stored(&self, r: usize) -> &[u8] {
        match self.mode {
            KeyMode::Xxh3_128 => &self.hashes[r],
            KeyMode::Raw => self.raw(r),
        }
    }

    /// The raw key bytes of row `r`.
    #[inline]
    pub(crate) fn raw(&self, r: usize) -> &[u8] {
        &self.bytes[self.offsets[r]..self.offsets[r + 1]]
    }

    #[inline]
    pub(crate) fn hash(&self, r: usize) -> [u8; 16] {
        self.hashes[r]
    }

    /// Row `r`'s event time (`i64::MIN` when unknown or when there is no time column).
    #[inline]
    pub(crate) fn time(&self, r: usize) -> i64 {
        self.times.get(r).copied().unwrap_or(i64::MIN)
    }

    pub(crate) fn has_times(&self) -> bool {
        !self.times.is_empty()
    }
}

/// A key column seen through its concrete type.
enum KeyView<'a> {
    Fixed {
        values: &'a [u8],
        width: usize,
        array: &'a ArrayRef,
    },
    Bool(&'a arrow_array::BooleanArray),
    Utf8(&'a arrow_array::StringArray),
    LargeUtf8(&'a arrow_array::LargeStringArray),
    Utf8View(&'a arrow_array::StringViewArray),
    Binary(&'a arrow_array::BinaryArray),
    LargeBinary(&'a arrow_array::LargeBinaryArray),
}

impl<'a> KeyView<'a> {
    fn new(array: &'a ArrayRef, name: &str) -> Result<Self, DedupError> {
        fn fixed<'a, T: arrow_array::types::ArrowPrimitiveType>(
            array: &'a ArrayRef,
        ) -> KeyView<'a> {
            let values = array.as_primitive::<T>().values();
            // SAFETY: primitive values are plain bytes; u8 has alignment 1.
            let values = unsafe {
                std::slice::from_raw_parts(values.as_ptr().cast::<u8>(), size_of_val(&values[..]))
            };
            KeyView::Fixed {
                values,
                width: size_of::<T::Native>(),
                array,
            }
        }
        Ok(match array.data_type() {
            DataType::Int8 => fixed::<Int8Type>(array),
            DataType::Int16 => fixed::<Int16Type>(array),
            DataType::Int32 => fixed::<Int32Type>(array),
            DataType::Int64 | DataType::Timestamp(_, _) => KeyView::Fixed {
                // Timestamps of any unit are i64 underneath.
                values: as_bytes(i64_values(array).unwrap_or(&[])),
                width: 8,
                array,
            },
            DataType::UInt8 => fixed::<UInt8Type>(array),
            DataType::UInt16 => fixed::<UInt16Type>(array),
            DataType::UInt32 => fixed::<UInt32Type>(array),
            DataType::UInt64 => fixed::<UInt64Type>(array),
            DataType::Date32 => fixed::<Date32Type>(array),
            DataType::Date64 => fixed::<Date64Type>(array),
            DataType::Boolean => Self::Bool(array.as_boolean()),
            DataType::Utf8 => Self::Utf8(array.as_string::<i32>()),
            DataType::LargeUtf8 => Self::LargeUtf8(array.as_string::<i64>()),
            DataType::Utf8View => Self::Utf8View(array.as_string_view()),
            DataType::Binary => Self::Binary(array.as_binary::<i32>()),
            DataType::LargeBinary => Self::LargeBinary(array.as_binary::<i64>()),
            ty => {
                return Err(DedupError::Config(format!(
                    "'dedup.key' column '{name}' is {ty} in this batch"
                )))
            }
        })
    }

    /// Adds each row's encoded length for this column to `lens` (one entry per row): a null
    /// is one byte, a value its marker byte, then (variable-length) a 4-byte length, then
    /// the value.
    fn add_lengths(&self, lens: &mut [usize]) {
        fn var<O: OffsetSizeTrait>(lens: &mut [usize], offsets: &[O], nulls: Option<&NullBuffer>) {
            for (r, l) in lens.iter_mut().enumerate() {
                *l += if nulls.is_some_and(|n| n.is_null(r)) {
                    1
                } else {
                    5 + offsets[r + 1].as_usize() - offsets[r].as_usize()
                };
            }
        }
        fn fixed(lens: &mut [usize], width: usize, nulls: Option<&NullBuffer>) {
            match nulls {
                None => lens.iter_mut().for_each(|l| *l += 1 + width),
                Some(n) => {
                    for (r, l) in lens.iter_mut().enumerate() {
                        *l += if n.is_null(r) { 1 } else { 1 + width };
                    }
                }
            }
        }
        match self {
            Self::Fixed { width, array, .. } => fixed(lens, *width, array.nulls()),
            Self::Bool(a) => fixed(lens, 1, a.nulls()),
            Self::Utf8(a) => var(lens, a.value_offsets(), a.nulls()),
            Self::LargeUtf8(a) => var(lens, a.value_offsets(), a.nulls()),
            Self::Binary(a) => var(lens, a.value_offsets(), a.nulls()),
            Self::LargeBinary(a) => var(lens, a.value_offsets(), a.nulls()),
            Self::Utf8View(a) => {
                for (r, l) in lens.iter_mut().enumerate() {
                    *l += if a.is_null(r) {
                        1
                    } else {
                        5 + a.value(r).len()
                    };
                }
            }
        }
    }

    /// Writes this column's part of every row at `cursor[row]`, and moves the cursors on.
    fn write_column(&self, out: &mut [u8], cursor: &mut [usize]) {
        fn value(out: &mut [u8], c: &mut usize, v: &[u8]) {
            out[*c] = 1;
            out[*c + 1..*c + 1 + v.len()].copy_from_slice(v);
            *c += 1 + v.len();
        }
        fn var(out: &mut [u8], c: &mut usize, v: &[u8]) {
            out[*c] = 1;
            out[*c + 1..*c + 5].copy_from_slice(&(v.len() as u32).to_le_bytes());
            out[*c + 5..*c + 5 + v.len()].copy_from_slice(v);
            *c += 5 + v.len();
        }
        // A null is its marker byte (0), already in place.
        fn each(
            cursor: &mut [usize],
            nulls: Option<&NullBuffer>,
            mut f: impl FnMut(usize, &mut usize),
        ) {
            for (r, c) in cursor.iter_mut().enumerate() {
                if nulls.is_some_and(|n| n.is_null(r)) {
                    *c += 1;
                } else {
                    f(r, c);
                }
            }
        }
        match self {
            Self::Fixed {
                values,
                width,
                array,
            } => {
                let w = *width;
                each(cursor, array.nulls(), |r, c| {
                    value(out, c, &values[r * w..(r + 1) * w])
                })
            }
            Self::Bool(a) => each(cursor, a.nulls(), |r, c| value(out, c, &[a.value(r) as u8])),
            Self::Utf8(a) => each(cursor, a.nulls(), |r, c| var(out, c, a.value(r).as_bytes())),
            Self::LargeUtf8(a) => {
                each(cursor, a.nulls(), |r, c| var(out, c, a.value(r).as_bytes()))
            }
            Self::Utf8View(a) => each(cursor, a.nulls(), |r, c| var(out, c, a.value(r).as_bytes())),
            Self::Binary(a) => each(cursor, a.nulls(), |r, c| var(out, c, a.value(r))),
            Self::LargeBinary(a) => each(cursor, a.nulls(), |r, c| var(out, c, a.value(r))),
        }
    }

    /// Appends row `row`'s value: a null marker, or 1 then the value (variable-length values
    /// with their length first, so "ab","c" and "a","bc" differ). The row-at-a-time reference
    /// for `write_column`, kept for the test that compares the two.
    #[cfg(test)]
    fn write(&self, row: usize, out: &mut Vec<u8>) {
        let null = match self {
            Self::Fixed { array, .. } => array.is_null(row),
            Self::Bool(a) => a.is_null(row),
            Self::Utf8(a) => a.is_null(row),
            Self::LargeUtf8(a) => a.is_null(row),
            Self::Utf8View(a) => a.is_null(row),
            Self::Binary(a) => a.is_null(row),
            Self::LargeBinary(a) => a.is_null(row),
        };
        if null {
            out.push(0);
            return;
        }
        out.push(1);
        let var = |out: &mut Vec<u8>, v: &[u8]| {
            out.extend_from_slice(&(v.len() as u32).to_le_bytes());
            out.extend_from_slice(v);
        };
        match self {
            Self::Fixed { values, width, .. } => {
                out.extend_from_slice(&values[row * width..(row + 1) * width])
            }
            Self::Bool(a) => out.push(a.value(row) as u8),
            Self::Utf8(a) => var(out, a.value(row).as_bytes()),
            Self::LargeUtf8(a) => var(out, a.value(row).as_bytes()),
            Self::Utf8View(a) => var(out, a.value(row).as_bytes()),
            Self::Binary(a) => var(out, a.value(row)),
            Self::LargeBinary(a) => var(out, a.value(row)),
        }
    }
}

/// The values of an Int64 or Timestamp array (of any unit), from its offset on.
fn i64_values(array: &ArrayRef) -> Option<&[i64]> {
    use arrow_array::types::{
        TimestampMicrosecondType as Us, TimestampMillisecondType as Ms,
        TimestampNanosecondType as Ns, TimestampSecondType as S,
    };
    Some(match array.data_type() {
        DataType::Int64 => array.as_primitive::<Int64Type>().values(),
        DataType::Timestamp(TimeUnit::Second, _) => array.as_primitive::<S>().values(),
        DataType::Timestamp(TimeUnit::Millisecond, _) => array.as_primitive::<Ms>().values(),
        DataType::Timestamp(TimeUnit::Microsecond, _) => array.as_primitive::<Us>().values(),
        DataType::Timestamp(TimeUnit::Nanosecond, _) => array.as_primitive::<Ns>().values(),
        _ => return None,
    })
}

fn as_bytes(v: &[i64]) -> &[u8] {
    // SAFETY: any initialised i64 memory is valid as bytes, and u8 has alignment 1.
    unsafe { std::slice::from_raw_parts(v.as_ptr().cast::<u8>(), size_of_val(v)) }
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use arrow_array::{
        BinaryArray, BooleanArray, Date32Array, Int16Array, Int64Array, Int8Array,
        LargeBinaryArray, LargeStringArray, StringArray, StringViewArray,
        TimestampMillisecondArray, UInt32Array, UInt64Array,
    };
    use arrow_schema::Field;

    use super::*;

    /// The column-at-a-time encoder writes exactly the bytes of the row-at-a-time reference,
    /// for every key type, with and without nulls, on whole and on sliced arrays.
    #[test]
    fn column_encoding_matches_the_row_reference() {
        let n = 300usize;
        let mut seed = 0x2545_F491_4F6C_DD1Du64;
        let mut next = move || {
            seed ^= seed << 13;
            seed ^= seed >> 7;
            seed ^= seed << 17;
            seed
        };
        let mut bits: Vec<u64> = (0..n * 4).map(|_| next()).collect();
        let mut take = move || bits.pop().unwrap_or(0);
        let mut opt = |every: u64| -> Vec<Option<u64>> {
            (0..n)
                .map(|_| {
                    let v = take();
                    (every == 0 || v % every != 0).then_some(v)
                })
                .collect()
        };
        let text = |v: Option<u64>| v.map(|v| "k".repeat((v % 7) as usize) + &v.to_string());
        let a = opt(0);
        let b = opt(5);
        let c = opt(3);
        let d = opt(4);
        let columns: Vec<ArrayRef> = vec![
            Arc::new(Int64Array::from_iter(a.iter().map(|v| v.map(|v| v as i64)))),
            Arc::new(Int64Array::from_iter(b.iter().map(|v| v.map(|v| v as i64)))),
            Arc::new(Int8Array::from_iter(c.iter().map(|v| v.map(|v| v as i8)))),
            Arc::new(Int16Array::from_iter(a.iter().map(|v| v.map(|v| v as i16)))),
            Arc::new(UInt32Array::from_iter(
                d.iter().map(|v| v.map(|v| v as u32)),
            )),
            Arc::new(UInt64Array::from_iter(b.iter().copied())),
            Arc::new(Date32Array::from_iter(
                c.iter().map(|v| v.map(|v| v as i32)),
            )),
            Arc::new(TimestampMillisecondArray::from_iter(
                d.iter().map(|v| v.map(|v| v as i64)),
            )),
            Arc::new(BooleanArray::from_iter(
                b.iter().map(|v| v.map(|v| v % 2 == 0)),
            )),
            Arc::new(StringArray::from_iter(b.iter().map(|&v| text(v)))),
            Arc::new(StringArray::from_iter(a.iter().map(|&v| text(v)))),
            Arc::new(LargeStringArray::from_iter(c.iter().map(|&v| text(v)))),
            Arc::new(StringViewArray::from_iter(d.iter().map(|&v| text(v)))),
            Arc::new(BinaryArray::from_iter(
                c.iter().map(|&v| text(v).map(String::into_bytes)),
            )),
            Arc::new(LargeBinaryArray::from_iter(
                b.iter().map(|&v| text(v).map(String::into_bytes)),
            )),
        ];
        let fields: Vec<Field> = columns
            .iter()
            .enumerate()
            .map(|(i, c)| Field::new(format!("c{i}"), c.data_type().clone(), true))
            .collect();
        let batch = RecordBatch::try_new(Arc::new(Schema::new(fields)), columns).unwrap();
        let schema = batch.schema();
        // Single columns, then pairs, then all of them at once.
        let mut key_sets: Vec<Vec<String>> = (0..batch.num_columns())
            .map(|i| vec![format!("c{i}")])
            .collect();
        key_sets.push(vec!["c9".into(), "c1".into()]);
        key_sets.push(vec!["c8".into(), "c12".into(), "c2".into()]);
        key_sets.push((0..batch.num_columns()).map(|i| format!("c{i}")).collect());
        let mut keys = RowKeys::new(KeyMode::Raw);
        for names in &key_sets {
            let cols = KeyColumns::resolve(&schema, names, None).unwrap();
            for (off, len) in [(0, n), (37, 200), (n - 1, 1), (5, 0)] {
                let b = batch.slice(off, len);
                keys.encode(&b, &cols).unwrap();
                let views: Vec<KeyView<'_>> = cols
                    .columns
                    .iter()
                    .map(|(i, name)| KeyView::new(b.column(*i), name).unwrap())
                    .collect();
                assert_eq!(keys.len(), len, "{names:?} slice {off}+{len}");
                for r in 0..len {
                    let mut want = Vec::new();
                    for v in &views {
                        v.write(r, &mut want);
                    }
                    assert_eq!(
                        keys.raw(r),
                        &want[..],
                        "{names:?} slice {off}+{len} row {r}"
                    );
                    assert_eq!(keys.hash(r), xxh3_128(&want).to_le_bytes());
                }
            }
        }
    }
}
