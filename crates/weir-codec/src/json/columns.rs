//! Typed column buffers of the JSON decoder and their zero-copy conversion into Arrow arrays.
//! Hand-written rather than arrow builders because a failed message (or a duplicate key) must be
//! rolled back, and arrow builders cannot be truncated. The validity bitmap is created only when
//! a column gets its first null, so columns without nulls write no validity bits at all.

use arrow_array::{make_array, ArrayRef};
use arrow_buffer::{Buffer, NullBuffer};
use arrow_data::ArrayData;
use arrow_schema::DataType;

pub(crate) use crate::bits::Bits;

/// The values of one column.
#[derive(Debug)]
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
    /// Utf8: offsets (starting with 0) and bytes.
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
            $other => $else,
        }
    };
}

/// One column: values, validity (created at the first null), and its Arrow type.
#[derive(Debug)]
pub(crate) struct Column {
    pub(crate) values: Values,
    pub(crate) nulls: Option<Bits>,
    pub(crate) data_type: DataType,
    /// Rows reserved at each batch start (top-level and struct children; list items grow).
    capacity: usize,
}

impl Column {
    pub(crate) fn new(values: Values, data_type: DataType, capacity: usize) -> Self {
        let mut c = Self {
            values,
            nulls: None,
            data_type,
            capacity,
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
            _ => {}
        })
    }

    /// Empty buffers with the same shape (for a new decoder).
    pub(crate) fn clone_empty(&self) -> Self {
        let values = match &self.values {
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
            Values::Bytes { .. } => Values::Bytes {
                offsets: Vec::new(),
                data: Vec::new(),
            },
            Values::Struct { children, .. } => Values::Struct {
                children: children.clone(),
                len: 0,
            },
            Values::List { child, .. } => Values::List {
                offsets: Vec::new(),
                child: *child,
            },
        };
        Self::new(values, self.data_type.clone(), self.capacity)
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

    /// Records that the row just appended is valid (only needed once nulls exist).
    #[inline(always)]
    pub(crate) fn valid(&mut self) {
        if let Some(n) = &mut self.nulls {
            n.push(true);
        }
    }

    /// Records the validity of a row about to be appended as null; `len` rows exist before it.
    #[inline]
    fn null_bit(&mut self, len: usize) {
        let cap = self.capacity;
        self.nulls
            .get_or_insert_with(|| Bits::filled(len, true, cap))
            .push(false);
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

/// Appends a null row to column `id` (struct children get a null row too).
pub(crate) fn push_null(cols: &mut [Column], id: usize) {
    let len = cols[id].len();
    let c = &mut cols[id];
    c.null_bit(len);
    let mut children: &[usize] = &[];
    fixed!(&mut c.values, v => v.push(Default::default()), other => match other {
        Values::Bool(b) => b.push(false),
        Values::Bytes { offsets, .. } | Values::List { offsets, .. } => {
            let last = offsets.last().copied().unwrap_or(0);
            offsets.push(last);
        }
        Values::Struct { children: ch, len } => {
            *len += 1;
            children = ch;
        }
        _ => {}
    });
    if !children.is_empty() {
        // Cloned only on this rare path: a null struct needs every child to hold a row.
        let children = children.to_vec();
        for ch in children {
            push_null(cols, ch);
        }
    }
}

/// Drops every row of column `id` (and its children) at or after `len`: the rollback of a failed
/// message or of a duplicate key's earlier value.
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

/// Moves the rows of column `id` into an Arrow array and leaves the column empty.
pub(crate) fn finish(cols: &mut [Column], id: usize) -> ArrayRef {
    let len = cols[id].len();
    let cap = cols[id].capacity;
    let data_type = cols[id].data_type.clone();
    let nulls = cols[id]
        .nulls
        .take()
        .map(|mut v| NullBuffer::new(v.take(0)))
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
    // Strings are UTF-8-validated while scanning and offsets only grow, so the full validation
    // (which re-scans every string) runs in debug builds only.
    let data = if cfg!(debug_assertions) {
        match builder.build() {
            Ok(d) => d,
            Err(e) => panic!("weir-codec built invalid Arrow data (a bug in weir): {e}"),
        }
    } else {
        // SAFETY: the decoder validates UTF-8 of every string and raw JSON text it appends,
        // pushes exactly one offset per row, keeps child lengths equal to the parent's last
        // offset (or its row count for structs), checks decimal precision, and sizes each value
        // buffer to `len` elements.
        unsafe { builder.build_unchecked() }
    };
    make_array(data)
}
