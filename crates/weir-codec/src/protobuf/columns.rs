//! Typed column buffers that the decoder appends to, and their conversion into Arrow arrays
//! without copying (`Buffer::from_vec`). Written here rather than with arrow's builders because a
//! failed message must be rolled back, and arrow builders cannot be truncated.

use arrow_array::{make_array, ArrayRef};
use arrow_buffer::{Buffer, NullBuffer};
use arrow_data::ArrayData;
use arrow_schema::DataType;

pub(crate) use crate::bits::Bits;

/// The values of one column.
#[derive(Debug)]
pub(crate) enum ColumnData {
    Bool(Bits),
    I32(Vec<i32>),
    I64(Vec<i64>),
    U32(Vec<u32>),
    U64(Vec<u64>),
    F32(Vec<f32>),
    F64(Vec<f64>),
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

/// One column: values, optional validity, and the Arrow type it becomes.
#[derive(Debug)]
pub(crate) struct Column {
    pub(crate) data: ColumnData,
    pub(crate) validity: Option<Bits>,
    pub(crate) data_type: DataType,
    /// Rows reserved at each batch start (only for top-level columns; nested ones grow).
    capacity: usize,
}

impl Column {
    pub(crate) fn new(
        data: ColumnData,
        nullable: bool,
        data_type: DataType,
        capacity: usize,
    ) -> Self {
        let mut c = Self {
            data,
            validity: nullable.then(|| Bits::with_capacity(capacity)),
            data_type,
            capacity,
        };
        c.reserve();
        c
    }

    fn reserve(&mut self) {
        let cap = self.capacity;
        match &mut self.data {
            ColumnData::Bool(b) => b.reserve(cap),
            ColumnData::I32(v) => v.reserve(cap),
            ColumnData::I64(v) => v.reserve(cap),
            ColumnData::U32(v) => v.reserve(cap),
            ColumnData::U64(v) => v.reserve(cap),
            ColumnData::F32(v) => v.reserve(cap),
            ColumnData::F64(v) => v.reserve(cap),
            ColumnData::Bytes { offsets, data } => {
                offsets.reserve(cap + 1);
                data.reserve(cap * 16);
                if offsets.is_empty() {
                    offsets.push(0);
                }
            }
            ColumnData::Struct { .. } => {}
            ColumnData::List { offsets, .. } => {
                offsets.reserve(cap + 1);
                if offsets.is_empty() {
                    offsets.push(0);
                }
            }
        }
    }
}

/// Pushes the offset that closes the row just appended to `data`.
#[inline(always)]
pub(crate) fn push_offset(offsets: &mut Vec<i32>, end: usize) -> bool {
    if end > i32::MAX as usize {
        return false;
    }
    offsets.push(end as i32);
    true
}

/// Number of rows in column `id`.
pub(crate) fn column_len(cols: &[Column], id: usize) -> usize {
    match &cols[id].data {
        ColumnData::Bool(b) => b.len(),
        ColumnData::I32(v) => v.len(),
        ColumnData::I64(v) => v.len(),
        ColumnData::U32(v) => v.len(),
        ColumnData::U64(v) => v.len(),
        ColumnData::F32(v) => v.len(),
        ColumnData::F64(v) => v.len(),
        ColumnData::Bytes { offsets, .. } => offsets.len() - 1,
        ColumnData::Struct { len, .. } => *len,
        ColumnData::List { offsets, .. } => offsets.len() - 1,
    }
}

/// Drops every row of column `id` (and its children) at or after `len`: the rollback of a failed
/// message. Only runs on the error path.
pub(crate) fn truncate(cols: &mut [Column], id: usize, len: usize) {
    let mut child_truncate: Vec<(usize, usize)> = Vec::new();
    {
        let c = &mut cols[id];
        if let Some(v) = &mut c.validity {
            v.truncate(len);
        }
        match &mut c.data {
            ColumnData::Bool(b) => b.truncate(len),
            ColumnData::I32(v) => v.truncate(len),
            ColumnData::I64(v) => v.truncate(len),
            ColumnData::U32(v) => v.truncate(len),
            ColumnData::U64(v) => v.truncate(len),
            ColumnData::F32(v) => v.truncate(len),
            ColumnData::F64(v) => v.truncate(len),
            ColumnData::Bytes { offsets, data } => {
                if len + 1 < offsets.len() {
                    offsets.truncate(len + 1);
                }
                // Also drops bytes a direct column wrote for a row whose offset is not pushed.
                let keep = offsets.last().copied().unwrap_or(0) as usize;
                data.truncate(keep);
            }
            ColumnData::Struct { children, len: n } => {
                if len < *n {
                    *n = len;
                }
                child_truncate.extend(children.iter().map(|&ch| (ch, len)));
            }
            ColumnData::List { offsets, child } => {
                if len + 1 < offsets.len() {
                    offsets.truncate(len + 1);
                }
                let child_len = offsets[offsets.len() - 1] as usize;
                child_truncate.push((*child, child_len));
            }
        }
    }
    for (ch, l) in child_truncate {
        truncate(cols, ch, l);
    }
}

/// Moves the rows of column `id` into an Arrow array and leaves the column empty.
pub(crate) fn finish(cols: &mut [Column], id: usize) -> ArrayRef {
    let len = column_len(cols, id);
    let data_type = cols[id].data_type.clone();
    let cap = cols[id].capacity;
    let nulls = cols[id]
        .validity
        .as_mut()
        .map(|v| NullBuffer::new(v.take(cap)))
        .filter(|n| n.null_count() > 0);
    let mut buffers: Vec<Buffer> = Vec::with_capacity(2);
    let mut child_data: Vec<ArrayData> = Vec::new();
    fn take_vec<T>(v: &mut Vec<T>, cap: usize) -> Vec<T> {
        std::mem::replace(v, Vec::with_capacity(cap))
    }
    let children_ids: Vec<usize>;
    match &mut cols[id].data {
        ColumnData::Bool(b) => {
            buffers.push(b.take(cap).into_inner());
            children_ids = vec![];
        }
        ColumnData::I32(v) => {
            buffers.push(Buffer::from_vec(take_vec(v, cap)));
            children_ids = vec![];
        }
        ColumnData::I64(v) => {
            buffers.push(Buffer::from_vec(take_vec(v, cap)));
            children_ids = vec![];
        }
        ColumnData::U32(v) => {
            buffers.push(Buffer::from_vec(take_vec(v, cap)));
            children_ids = vec![];
        }
        ColumnData::U64(v) => {
            buffers.push(Buffer::from_vec(take_vec(v, cap)));
            children_ids = vec![];
        }
        ColumnData::F32(v) => {
            buffers.push(Buffer::from_vec(take_vec(v, cap)));
            children_ids = vec![];
        }
        ColumnData::F64(v) => {
            buffers.push(Buffer::from_vec(take_vec(v, cap)));
            children_ids = vec![];
        }
        ColumnData::Bytes { offsets, data } => {
            let data_cap = data.capacity().max(cap * 16);
            let o = std::mem::replace(offsets, Vec::with_capacity(cap + 1));
            offsets.push(0);
            let d = std::mem::replace(data, Vec::with_capacity(data_cap));
            buffers.push(Buffer::from_vec(o));
            buffers.push(Buffer::from_vec(d));
            children_ids = vec![];
        }
        ColumnData::Struct { children, len: n } => {
            *n = 0;
            children_ids = children.clone();
        }
        ColumnData::List { offsets, child } => {
            let o = std::mem::replace(offsets, Vec::with_capacity(cap + 1));
            offsets.push(0);
            buffers.push(Buffer::from_vec(o));
            children_ids = vec![*child];
        }
    }
    for ch in children_ids {
        child_data.push(finish(cols, ch).to_data());
    }
    let builder = ArrayData::builder(data_type)
        .len(len)
        .buffers(buffers)
        .child_data(child_data)
        .nulls(nulls);
    // The decoder has already validated every UTF-8 string and keeps offsets monotonic, so the
    // full validation (which would re-scan every string) runs in debug builds only.
    let data = if cfg!(debug_assertions) {
        match builder.build() {
            Ok(d) => d,
            Err(e) => panic!("weir-codec built invalid Arrow data (a bug in weir): {e}"),
        }
    } else {
        // SAFETY: buffers were produced by the decoder, which checks UTF-8 on every string
        // field before it is appended, pushes exactly one offset per row, keeps child lengths
        // equal to the parent's last offset, and sizes each value buffer to `len` elements.
        unsafe { builder.build_unchecked() }
    };
    make_array(data)
}

/// Shared, immutable column definitions plus fresh buffers for a new decoder.
pub(crate) fn clone_empty(defs: &[Column]) -> Vec<Column> {
    defs.iter()
        .map(|c| {
            let data = match &c.data {
                ColumnData::Bool(_) => ColumnData::Bool(Bits::default()),
                ColumnData::I32(_) => ColumnData::I32(Vec::new()),
                ColumnData::I64(_) => ColumnData::I64(Vec::new()),
                ColumnData::U32(_) => ColumnData::U32(Vec::new()),
                ColumnData::U64(_) => ColumnData::U64(Vec::new()),
                ColumnData::F32(_) => ColumnData::F32(Vec::new()),
                ColumnData::F64(_) => ColumnData::F64(Vec::new()),
                ColumnData::Bytes { .. } => ColumnData::Bytes {
                    offsets: Vec::new(),
                    data: Vec::new(),
                },
                ColumnData::Struct { children, .. } => ColumnData::Struct {
                    children: children.clone(),
                    len: 0,
                },
                ColumnData::List { child, .. } => ColumnData::List {
                    offsets: Vec::new(),
                    child: *child,
                },
            };
            Column::new(data, c.validity.is_some(), c.data_type.clone(), c.capacity)
        })
        .collect()
}
