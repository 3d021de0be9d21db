//! The column arena both decoders append to: typed buffers addressed by id (a `Vec<Column>`;
//! struct, list and map columns name their children by id), rolled back row by row, and turned
//! into Arrow arrays without copying (`Buffer::from_vec`).
//!
//! Hand-written rather than arrow's builders because a failed message (or, in JSON, a duplicate
//! key, and in protobuf a repeated map key) must be undone, and arrow builders cannot be
//! truncated.
//!
//! Validity comes in two kinds, chosen per column when it is declared:
//! - *eager* ([`Column::with_validity`], the protobuf decoder): a nullable column has a bitmap
//!   from the start and writes one bit per row, which lets the decoder set a row's bit in place
//!   (rows filled ahead, direct writes);
//! - *lazy* ([`Column::new`], the JSON decoder): the bitmap is created at the column's first
//!   null, so a column without nulls writes no validity bits at all.

mod bits;

use arrow_array::{make_array, ArrayRef};
use arrow_buffer::{Buffer, NullBuffer};
use arrow_data::ArrayData;
use arrow_schema::DataType;

pub(crate) use bits::Bits;

/// The values of one column.
#[derive(Debug)]
// A one-byte tag, apart from the vectors: a typed push tests it with one compare of a byte
// (in a Vec capacity's niche it took a 64-bit constant built by two instructions).
#[repr(u8)]
pub(crate) enum Values {
    Bool(Bits),
    I8(Vec<i8>),
    I16(Vec<i16>),
    I32(Vec<i32>),
    I64(Vec<i64>),
    U8(Vec<u8>),
    U16(Vec<u16>),
    U32(Vec<u32>),
    U64(Vec<u64>),
    F32(Vec<f32>),
    F64(Vec<f64>),
    /// Decimal128.
    I128(Vec<i128>),
    /// Decimal256.
    I256(Vec<arrow_buffer::i256>),
    /// Utf8 and Binary: offsets (starting with 0) and bytes.
    Bytes {
        offsets: Vec<i32>,
        data: Vec<u8>,
    },
    /// Children are other columns; `len` rows.
    Struct {
        children: Vec<usize>,
        len: usize,
    },
    /// List and Map: offsets into the child column.
    List {
        offsets: Vec<i32>,
        child: usize,
    },
}

/// Applies `$body` to the vector of any fixed-width variant.
macro_rules! fixed {
    ($values:expr, $v:ident => $body:expr, $other:ident => $else:expr) => {
        match $values {
            Values::I8($v) => $body,
            Values::I16($v) => $body,
            Values::I32($v) => $body,
            Values::I64($v) => $body,
            Values::U8($v) => $body,
            Values::U16($v) => $body,
            Values::U32($v) => $body,
            Values::U64($v) => $body,
            Values::F32($v) => $body,
            Values::F64($v) => $body,
            Values::I128($v) => $body,
            Values::I256($v) => $body,
            $other => $else,
        }
    };
}

impl Values {
    /// Empty storage of the same kind (struct and list children kept).
    fn empty_like(&self) -> Self {
        match self {
            Values::Bool(_) => Values::Bool(Bits::default()),
            Values::I8(_) => Values::I8(Vec::new()),
            Values::I16(_) => Values::I16(Vec::new()),
            Values::I32(_) => Values::I32(Vec::new()),
            Values::I64(_) => Values::I64(Vec::new()),
            Values::U8(_) => Values::U8(Vec::new()),
            Values::U16(_) => Values::U16(Vec::new()),
            Values::U32(_) => Values::U32(Vec::new()),
            Values::U64(_) => Values::U64(Vec::new()),
            Values::F32(_) => Values::F32(Vec::new()),
            Values::F64(_) => Values::F64(Vec::new()),
            Values::I128(_) => Values::I128(Vec::new()),
            Values::I256(_) => Values::I256(Vec::new()),
            Values::Bytes { .. } => Values::bytes(),
            Values::Struct { children, .. } => Values::Struct {
                children: children.clone(),
                len: 0,
            },
            Values::List { child, .. } => Values::List {
                offsets: Vec::new(),
                child: *child,
            },
        }
    }

    /// Empty Utf8/Binary storage.
    pub(crate) fn bytes() -> Self {
        Values::Bytes {
            offsets: Vec::new(),
            data: Vec::new(),
        }
    }
}

/// A fixed-width value type and the [`Values`] variant that stores it, so code generic over the
/// type reaches its vector without a `match` written per type.
pub(crate) trait Native: Copy + Default {
    /// The vector of `values` if it stores `Self`.
    fn vec(values: &mut Values) -> Option<&mut Vec<Self>>;
}

macro_rules! native {
    ($($t:ty => $variant:ident),*) => {
        $(impl Native for $t {
            #[inline(always)]
            fn vec(values: &mut Values) -> Option<&mut Vec<Self>> {
                match values {
                    Values::$variant(v) => Some(v),
                    _ => None,
                }
            }
        })*
    };
}

native!(i8 => I8, i16 => I16, i32 => I32, i64 => I64, u8 => U8, u16 => U16, u32 => U32,
    u64 => U64, f32 => F32, f64 => F64, i128 => I128, arrow_buffer::i256 => I256);

/// One column: values, validity, and the Arrow type it becomes.
#[derive(Debug)]
pub(crate) struct Column {
    pub(crate) values: Values,
    /// One bit per row once it exists (see the module docs for when it does).
    pub(crate) nulls: Option<Bits>,
    pub(crate) data_type: DataType,
    /// Rows reserved at each batch start (0: the column grows as needed).
    capacity: usize,
    /// Eager validity: a nullable column keeps its bitmap across batches (module docs).
    eager: bool,
}

impl Column {
    /// A column with lazy validity (created at its first null).
    pub(crate) fn new(values: Values, data_type: DataType, capacity: usize) -> Self {
        Self::build(values, data_type, capacity, false, false)
    }

    /// A column with eager validity: a bitmap from the start when `nullable`, none otherwise.
    pub(crate) fn with_validity(
        values: Values,
        nullable: bool,
        data_type: DataType,
        capacity: usize,
    ) -> Self {
        Self::build(values, data_type, capacity, nullable, true)
    }

    fn build(
        values: Values,
        data_type: DataType,
        capacity: usize,
        nullable: bool,
        eager: bool,
    ) -> Self {
        let mut c = Self {
            values,
            nulls: nullable.then(|| Bits::with_capacity(capacity)),
            data_type,
            capacity,
            eager,
        };
        c.reserve();
        c
    }

    fn reserve(&mut self) {
        let cap = self.capacity;
        fixed!(&mut self.values, v => v.reserve(cap), other => match other {
            Values::Bool(b) => b.reserve(cap),
            Values::Bytes { offsets, data } => {
                offsets.reserve(cap + 1);
                data.reserve(cap * 16);
                if offsets.is_empty() {
                    offsets.push(0);
                }
            }
            Values::List { offsets, .. } => {
                offsets.reserve(cap + 1);
                if offsets.is_empty() {
                    offsets.push(0);
                }
            }
            Values::Struct { .. } => {}
            _ => {}
        })
    }

    /// Empty buffers with the same shape and validity kind (for a new decoder).
    pub(crate) fn clone_empty(&self) -> Self {
        Self::build(
            self.values.empty_like(),
            self.data_type.clone(),
            self.capacity,
            self.eager && self.nulls.is_some(),
            self.eager,
        )
    }

    /// Rows in this column.
    pub(crate) fn len(&self) -> usize {
        fixed!(&self.values, v => v.len(), other => match other {
            Values::Bool(b) => b.len(),
            Values::Bytes { offsets, .. } | Values::List { offsets, .. } => {
                offsets.len().saturating_sub(1)
            }
            Values::Struct { len, .. } => *len,
            _ => 0,
        })
    }

    /// Records that the row just appended is valid (a no-op while the column has no bitmap).
    #[inline(always)]
    pub(crate) fn valid(&mut self) {
        if let Some(n) = &mut self.nulls {
            n.push(true);
        }
    }

    /// Records the validity bit of a null row about to be appended; `len` rows exist before it.
    #[inline]
    fn null_bit(&mut self, len: usize) {
        let cap = self.capacity;
        self.nulls
            .get_or_insert_with(|| Bits::filled(len, true, cap))
            .push(false);
    }

    /// Appends a null row to this column alone: a zero value (an empty string or list, a struct
    /// row) under a cleared validity bit. A struct's children are not touched.
    pub(crate) fn push_null(&mut self) {
        let len = self.len();
        self.null_bit(len);
        fixed!(&mut self.values, v => v.push(Default::default()), other => match other {
            Values::Bool(b) => b.push(false),
            Values::Bytes { offsets, .. } | Values::List { offsets, .. } => {
                let last = offsets.last().copied().unwrap_or(0);
                offsets.push(last);
            }
            Values::Struct { len, .. } => *len += 1,
            _ => {}
        });
    }
}

/// Pushes the offset that closes the row just appended to `data`; false past i32::MAX.
#[inline(always)]
pub(crate) fn push_offset(offsets: &mut Vec<i32>, end: usize) -> bool {
    if end > i32::MAX as usize {
        return false;
    }
    offsets.push(end as i32);
    true
}

/// Appends a null row to column `id` and, for a struct, to each of its children.
pub(crate) fn push_null(cols: &mut [Column], id: usize) {
    cols[id].push_null();
    if let Values::Struct { children, .. } = &cols[id].values {
        if !children.is_empty() {
            // Cloned only on this rare path: a null struct needs every child to hold a row.
            let children = children.clone();
            for ch in children {
                push_null(cols, ch);
            }
        }
    }
}

/// Drops every row of column `id` (and its children) at or after `len`: the rollback of a failed
/// message, or of a duplicate JSON key's earlier value. Only runs off the hot path.
pub(crate) fn truncate(cols: &mut [Column], id: usize, len: usize) {
    let mut next: Vec<(usize, usize)> = Vec::new();
    {
        let c = &mut cols[id];
        if let Some(n) = &mut c.nulls {
            n.truncate(len);
        }
        fixed!(&mut c.values, v => v.truncate(len), other => match other {
            Values::Bool(b) => b.truncate(len),
            Values::Bytes { offsets, data } => {
                if len + 1 < offsets.len() {
                    offsets.truncate(len + 1);
                }
                // Also drops bytes a direct write put in a row whose offset is not pushed yet.
                let keep = offsets.last().copied().unwrap_or(0) as usize;
                data.truncate(keep);
            }
            Values::Struct { children, len: n } => {
                if len < *n {
                    *n = len;
                }
                next.extend(children.iter().map(|&ch| (ch, len)));
            }
            Values::List { offsets, child } => {
                if len + 1 < offsets.len() {
                    offsets.truncate(len + 1);
                }
                next.push((*child, offsets.last().copied().unwrap_or(0) as usize));
            }
            _ => {}
        })
    }
    for (ch, l) in next {
        truncate(cols, ch, l);
    }
}

/// Removes the rows `from + i` of column `id` (and their children's rows) for which `keep[i]` is
/// false; the rows from `from + keep.len()` on must not exist. Cold: for a protobuf map whose
/// row repeats a key (the earlier entries give way to the last).
#[cold]
pub(crate) fn retain_rows(cols: &mut [Column], id: usize, from: usize, keep: &[bool]) {
    fn squeeze<T: Copy>(v: &mut Vec<T>, from: usize, keep: &[bool]) {
        let mut w = from;
        for (i, k) in keep.iter().enumerate() {
            if *k {
                v[w] = v[from + i];
                w += 1;
            }
        }
        v.truncate(w);
    }
    fn squeeze_bits(b: &mut Bits, from: usize, keep: &[bool]) {
        let tail: Vec<bool> = (0..keep.len())
            .filter(|&i| keep[i])
            .map(|i| b.get(from + i))
            .collect();
        b.truncate(from);
        for v in tail {
            b.push(v);
        }
    }
    let mut next: Option<(usize, usize, Vec<bool>)> = None;
    let mut struct_children: Vec<usize> = Vec::new();
    {
        let c = &mut cols[id];
        if let Some(n) = &mut c.nulls {
            squeeze_bits(n, from, keep);
        }
        fixed!(&mut c.values, v => squeeze(v, from, keep), other => match other {
            Values::Bool(b) => squeeze_bits(b, from, keep),
            Values::Bytes { offsets, data } => {
                let base = offsets[from] as usize;
                let mut out: Vec<u8> = Vec::new();
                let mut ends: Vec<i32> = Vec::new();
                for (i, k) in keep.iter().enumerate() {
                    if *k {
                        let (s, e) = (offsets[from + i] as usize, offsets[from + i + 1] as usize);
                        out.extend_from_slice(&data[s..e]);
                        ends.push((base + out.len()) as i32);
                    }
                }
                data.truncate(base);
                data.extend_from_slice(&out);
                offsets.truncate(from + 1);
                offsets.extend_from_slice(&ends);
            }
            Values::Struct { children, len } => {
                *len = from + keep.iter().filter(|k| **k).count();
                struct_children.clone_from(children);
            }
            Values::List { offsets, child } => {
                let first = offsets[from] as usize;
                let mut child_keep = Vec::new();
                let mut ends: Vec<i32> = Vec::new();
                let mut end = first;
                for (i, k) in keep.iter().enumerate() {
                    let (s, e) = (offsets[from + i] as usize, offsets[from + i + 1] as usize);
                    child_keep.extend(std::iter::repeat_n(*k, e - s));
                    if *k {
                        end += e - s;
                        ends.push(end as i32);
                    }
                }
                offsets.truncate(from + 1);
                offsets.extend_from_slice(&ends);
                next = Some((*child, first, child_keep));
            }
            _ => {}
        })
    }
    for ch in struct_children {
        retain_rows(cols, ch, from, keep);
    }
    if let Some((child, first, child_keep)) = next {
        retain_rows(cols, child, first, &child_keep);
    }
}

/// Moves the `rows` rows of the top-level columns `top` into one batch of `schema` and leaves
/// the columns empty (a decoder's `flush`).
pub(crate) fn take_batch(
    cols: &mut [Column],
    top: &[usize],
    schema: &arrow_schema::SchemaRef,
    rows: usize,
) -> arrow_array::RecordBatch {
    let arrays = top.iter().map(|&c| finish(cols, c)).collect();
    crate::batch_of(schema, arrays, rows)
}

/// Moves the rows of column `id` into an Arrow array and leaves the column empty.
pub(crate) fn finish(cols: &mut [Column], id: usize) -> ArrayRef {
    let len = cols[id].len();
    let cap = cols[id].capacity;
    let data_type = cols[id].data_type.clone();
    let nulls = if cols[id].eager {
        // Eager: the bitmap stays, empty, for the next batch.
        cols[id]
            .nulls
            .as_mut()
            .map(|v| NullBuffer::new(v.take(cap)))
    } else {
        // Lazy: the next batch starts without one again.
        cols[id]
            .nulls
            .take()
            .map(|mut v| NullBuffer::new(v.take(0)))
    }
    .filter(|n| n.null_count() > 0);
    let mut buffers: Vec<Buffer> = Vec::with_capacity(2);
    let mut children: Vec<usize> = Vec::new();
    fn take<T>(v: &mut Vec<T>, cap: usize) -> Buffer
    where
        T: arrow_buffer::ArrowNativeType,
    {
        Buffer::from_vec(std::mem::replace(v, Vec::with_capacity(cap)))
    }
    match &mut cols[id].values {
        Values::Bool(b) => buffers.push(b.take(cap).into_inner()),
        Values::I8(v) => buffers.push(take(v, cap)),
        Values::I16(v) => buffers.push(take(v, cap)),
        Values::I32(v) => buffers.push(take(v, cap)),
        Values::I64(v) => buffers.push(take(v, cap)),
        Values::U8(v) => buffers.push(take(v, cap)),
        Values::U16(v) => buffers.push(take(v, cap)),
        Values::U32(v) => buffers.push(take(v, cap)),
        Values::U64(v) => buffers.push(take(v, cap)),
        Values::F32(v) => buffers.push(take(v, cap)),
        Values::F64(v) => buffers.push(take(v, cap)),
        Values::I128(v) => buffers.push(take(v, cap)),
        Values::I256(v) => buffers.push(take(v, cap)),
        Values::Bytes { offsets, data } => {
            let data_cap = data.capacity().max(cap * 16);
            let o = std::mem::replace(offsets, Vec::with_capacity(cap + 1));
            offsets.push(0);
            buffers.push(Buffer::from_vec(o));
            buffers.push(Buffer::from_vec(std::mem::replace(
                data,
                Vec::with_capacity(data_cap),
            )));
        }
        Values::Struct {
            children: ch,
            len: n,
        } => {
            *n = 0;
            children.clone_from(ch);
        }
        Values::List { offsets, child } => {
            let o = std::mem::replace(offsets, Vec::with_capacity(cap + 1));
            offsets.push(0);
            buffers.push(Buffer::from_vec(o));
            children.push(*child);
        }
    }
    let child_data: Vec<ArrayData> = children
        .into_iter()
        .map(|ch| finish(cols, ch).to_data())
        .collect();
    let builder = ArrayData::builder(data_type)
        .len(len)
        .buffers(buffers)
        .child_data(child_data)
        .nulls(nulls);
    // Both decoders validate the UTF-8 of every string (and JSON text) they append and only
    // ever grow offsets, so the full validation (which re-scans every string) runs in debug
    // builds only.
    let data = if cfg!(debug_assertions) {
        match builder.build() {
            Ok(d) => d,
            Err(e) => panic!("weir-codec built invalid Arrow data (a bug in weir): {e}"),
        }
    } else {
        // SAFETY: the decoders validate the UTF-8 of every string and JSON text they append,
        // push exactly one offset per row (offsets start at 0 and never decrease), keep a list's
        // child length equal to its last offset and a struct child's length equal to the
        // struct's row count, check decimal precision, and size each value buffer to `len`
        // elements; that is all `build` would check.
        unsafe { builder.build_unchecked() }
    };
    make_array(data)
}
