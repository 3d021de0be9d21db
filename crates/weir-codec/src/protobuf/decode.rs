//! The per-message loop: read a tag, index the field table, convert, write a slot or append to
//! a column. No hashing, no string comparison, no allocation (outside JSON-text columns) and no
//! dynamic dispatch per field: `Op` and `Values` are matched as plain enums.

use prost::Message as _;
use prost_reflect::{DynamicMessage, Kind, MessageDescriptor, SerializeOptions};

use super::plan::{CommitOp, DefaultVal, Entry, LeafPlan, Op, Plan, Prefill, VarintConv, NONE};
use super::wire::{
    group_body, read_fixed32, read_fixed64, read_len, read_tag, read_varint, skip_field,
    skip_field_at, skip_varint, split_tag, zigzag32, zigzag64, WT_I32, WT_I64, WT_LEN, WT_SGROUP,
    WT_VARINT,
};
use crate::columns::{push_offset, retain_rows, truncate, Column, Native, Values};
use crate::error::{DecodeError, DecodeErrorKind};
use crate::strings::{append_bytes, is_ascii_prefix, short_chunk, utf8_error_at};
use arrow_schema::TimeUnit;

/// Value slots of one scope, with a bitset of the slots set in the current row (cleared when a
/// row or element starts; one word for up to 64 slots).
#[derive(Debug, Default)]
pub(crate) struct ScopeState {
    vals: Vec<u64>,
    set: Vec<u64>,
    /// (slot, start, end) of every occurrence of a JSON-text sub-message, in wire order.
    json: Vec<(u32, u32, u32)>,
}

impl ScopeState {
    /// Slots for scope `i` of `plan`.
    fn for_scope(plan: &Plan, i: usize) -> Box<Self> {
        let n = plan.scopes[i].nslots as usize;
        Box::new(Self {
            vals: vec![0; n],
            set: vec![0; n.div_ceil(64)],
            json: Vec::new(),
        })
    }

    /// Takes scope `i`'s state out of `scopes` while it is decoded (moving a box, not the
    /// vectors). A scope is never nested in itself (recursive messages become JSON text), so
    /// it is always there; if not, a fresh one is made rather than panicking.
    #[inline(always)]
    fn take(scopes: &mut [Option<Box<Self>>], plan: &Plan, i: usize) -> Box<Self> {
        match scopes.get_mut(i).and_then(Option::take) {
            Some(s) => s,
            None => Self::for_scope(plan, i),
        }
    }

    #[inline(always)]
    fn begin(&mut self) {
        // One word covers up to 64 slots: a store, not a call to memset.
        if let [w] = self.set.as_mut_slice() {
            *w = 0;
        } else {
            self.set.fill(0);
        }
        self.json.clear();
    }

    #[inline(always)]
    fn put(&mut self, slot: u32, v: u64) {
        self.vals[slot as usize] = v;
        self.set[(slot >> 6) as usize] |= 1u64 << (slot & 63);
    }

    #[inline(always)]
    fn has(&self, slot: u32) -> bool {
        (self.set[(slot >> 6) as usize] >> (slot & 63)) & 1 != 0
    }

    #[inline(always)]
    fn unset(&mut self, slot: u32) {
        self.set[(slot >> 6) as usize] &= !(1u64 << (slot & 63));
    }
}

/// Everything a decoder mutates.
#[derive(Debug)]
pub(crate) struct State {
    /// Each scope's slots; `None` while that scope is being decoded.
    pub(crate) scopes: Vec<Option<Box<ScopeState>>>,
    pub(crate) cols: Vec<Column>,
    pub(crate) rows: usize,
    /// Rows the top scope's direct columns hold, defaults included: they are filled ahead in
    /// runs ([`PREFILL_RUN`]) so that starting a row costs no push per column. Rows past `rows`
    /// are dropped by [`State::trim`] before a batch is taken.
    pub(crate) filled: usize,
}

/// The `row` passed for an element of a repeated message: its direct columns are written at
/// their last element (see [`row_index`]).
const ELEMENT: usize = usize::MAX;

/// Rows of defaults written to the top scope's direct columns at a time.
const PREFILL_RUN: usize = 256;

/// The element to write for the current row: `row` in the top scope (filled ahead), the last
/// element elsewhere (`row` is [`ELEMENT`] there).
#[inline(always)]
fn row_index(len: usize, row: usize) -> usize {
    row.min(len.wrapping_sub(1))
}

/// Overwrites the current row of a direct column (see [`row_index`]).
#[inline(always)]
fn set_row<T>(v: &mut [T], row: usize, x: T) {
    // The same element as `row_index`, with one bounds check on the common path: `row` is in
    // range in the top scope (filled ahead) and `ELEMENT` (out of range) elsewhere.
    if let Some(slot) = v.get_mut(row) {
        *slot = x;
    } else if let Some(slot) = v.last_mut() {
        *slot = x;
    }
}

#[inline(always)]
fn apply(conv: VarintConv, v: u64) -> u64 {
    match conv {
        VarintConv::Raw => v,
        VarintConv::Zigzag32 => zigzag32(v) as i64 as u64,
        VarintConv::Zigzag64 => zigzag64(v) as u64,
    }
}

/// Appends a decoded varint to a repeated column; the column type decides the truncation.
#[inline(always)]
fn push_varint(data: &mut Values, v: u64) {
    match data {
        Values::I32(x) => x.push(v as i32),
        Values::I64(x) => x.push(v as i64),
        Values::U32(x) => x.push(v as u32),
        Values::U64(x) => x.push(v),
        Values::Bool(x) => x.push(v != 0),
        _ => {}
    }
}

#[inline(always)]
fn push_fixed32(data: &mut Values, v: u32) {
    match data {
        Values::F32(x) => x.push(f32::from_bits(v)),
        Values::U32(x) => x.push(v),
        Values::I32(x) => x.push(v as i32),
        _ => {}
    }
}

#[inline(always)]
fn push_fixed64(data: &mut Values, v: u64) {
    match data {
        Values::F64(x) => x.push(f64::from_bits(v)),
        Values::U64(x) => x.push(v),
        Values::I64(x) => x.push(v as i64),
        _ => {}
    }
}

/// Appends bytes as one row of a Utf8/Binary column.
#[inline(always)]
fn push_bytes(col: &mut Column, bytes: &[u8], at: usize) -> Result<(), DecodeError> {
    if let Values::Bytes { offsets, data } = &mut col.values {
        data.extend_from_slice(bytes);
        if !push_offset(offsets, data.len()) {
            return Err(DecodeError::new(at, DecodeErrorKind::TooLarge));
        }
    }
    if let Some(v) = &mut col.nulls {
        v.push(true);
    }
    Ok(())
}

/// [`push_bytes`] for `buf[start..end]` of the input (see [`append_bytes`]).
#[inline(always)]
fn push_wire_bytes(
    col: &mut Column,
    buf: &[u8],
    start: usize,
    end: usize,
) -> Result<(), DecodeError> {
    if let Values::Bytes { offsets, data } = &mut col.values {
        append_bytes(data, buf, start, end);
        if !push_offset(offsets, data.len()) {
            return Err(DecodeError::new(start, DecodeErrorKind::TooLarge));
        }
    }
    if let Some(v) = &mut col.nulls {
        v.push(true);
    }
    Ok(())
}

fn rendered_json(
    plan: &Plan,
    desc: u32,
    buf: &[u8],
    ranges: impl Iterator<Item = (usize, usize)>,
    out: &mut Vec<u8>,
) -> Result<(), DecodeError> {
    // Cold path: only columns that ask for a sub-message as JSON text come here. The canonical
    // proto3 JSON mapping is prost-reflect's; writing it again would only add bugs.
    let mut at = 0;
    let mut msg = DynamicMessage::new(plan.json[desc as usize].clone());
    for (s, e) in ranges {
        at = s;
        msg.merge(&buf[s..e])
            .map_err(|err| DecodeError::new(s, DecodeErrorKind::Json(err.to_string())))?;
    }
    let mut ser = serde_json::Serializer::new(out);
    msg.serialize_with_options(&mut ser, &SerializeOptions::new())
        .map_err(|err| DecodeError::new(at, DecodeErrorKind::Json(err.to_string())))
}

impl State {
    pub(crate) fn new(plan: &Plan) -> Self {
        let scopes = (0..plan.scopes.len())
            .map(|i| Some(ScopeState::for_scope(plan, i)))
            .collect();
        Self {
            scopes,
            cols: plan.columns.iter().map(Column::clone_empty).collect(),
            rows: 0,
            filled: 0,
        }
    }

    /// Cuts every column back to `rows`: the rows filled ahead, and whatever a failed row
    /// wrote. Before a batch is taken, and after a row fails.
    pub(crate) fn trim(&mut self, plan: &Plan) {
        for &c in &plan.top {
            truncate(&mut self.cols, c, self.rows);
        }
        self.filled = self.rows;
    }

    /// Keeps, in every row of every map column, only the last entry of each key (protobuf's
    /// merge rule: a later entry replaces an earlier one). Once per batch, before it is taken:
    /// doing it per row, in the commit, cost every message time even without a map (it changed
    /// how the field loop was compiled). A row is checked by comparing keys (see
    /// [`last_of_each_key`]); only a batch with a repeated key is compacted.
    pub(crate) fn keep_last_map_entries(&mut self, plan: &Plan) {
        for &(map, key) in &plan.maps {
            let (map, key) = (map as usize, key as usize);
            let Values::List { offsets, child } = &self.cols[map].values else {
                continue;
            };
            let entries = *child;
            let mut keep: Option<Vec<bool>> = None;
            for w in offsets.windows(2) {
                let (first, end) = (w[0] as usize, w[1] as usize);
                if end - first < 2 {
                    continue;
                }
                if let Some(k) = last_of_each_key(&self.cols[key], first, end) {
                    let total = offsets.last().copied().unwrap_or(0) as usize;
                    keep.get_or_insert_with(|| vec![true; total])[first..end].copy_from_slice(&k);
                }
            }
            let Some(keep) = keep else {
                continue;
            };
            // The rows' new ends, then the entries themselves.
            if let Values::List { offsets, .. } = &mut self.cols[map].values {
                let mut kept = 0i32;
                let mut prev = 0usize;
                for o in offsets.iter_mut().skip(1) {
                    let end = *o as usize;
                    kept += keep[prev..end].iter().filter(|k| **k).count() as i32;
                    prev = end;
                    *o = kept;
                }
            }
            retain_rows(&mut self.cols, entries, 0, &keep);
        }
    }

    /// Decodes one top-level message as one row, or rolls the row back.
    pub(crate) fn decode_row(&mut self, plan: &Plan, buf: &[u8]) -> Result<(), DecodeError> {
        if buf.len() > u32::MAX as usize {
            return Err(DecodeError::new(0, DecodeErrorKind::TooLarge));
        }
        if self.rows >= self.filled {
            self.fill_ahead(plan);
        }
        let mut sc = ScopeState::take(&mut self.scopes, plan, 0);
        let result = self.decode_scope(plan, 0, &mut sc, buf, 0, buf.len(), 0, self.rows);
        self.scopes[0] = Some(sc);
        match result {
            Ok(()) => {
                self.rows += 1;
                Ok(())
            }
            Err(e) => {
                // Also drops the rows filled ahead: the failed row may have written into one.
                self.trim(plan);
                Err(e)
            }
        }
    }

    /// Writes the next run of default rows into the top scope's direct columns, stopping at
    /// the batch capacity while below it (so a full batch never reallocates).
    #[cold]
    fn fill_ahead(&mut self, plan: &Plan) {
        let cap = plan.batch_capacity;
        let n = if self.filled < cap {
            PREFILL_RUN.min(cap - self.filled)
        } else {
            PREFILL_RUN
        };
        self.prefill_values(&plan.scopes[0].prefill, n);
        self.filled += n;
    }

    /// Decodes one scope (a row, or an element of a repeated message) and commits it. `row` is
    /// the row being written in the top scope (its direct columns are filled ahead), and
    /// [`ELEMENT`] for an element (its direct columns get one default pushed here).
    #[allow(clippy::too_many_arguments)]
    fn decode_scope(
        &mut self,
        plan: &Plan,
        scope: usize,
        sc: &mut ScopeState,
        buf: &[u8],
        start: usize,
        end: usize,
        depth: usize,
        row: usize,
    ) -> Result<(), DecodeError> {
        sc.begin();
        let p = &plan.scopes[scope].prefill;
        if row == ELEMENT {
            self.prefill_values(p, 1);
        }
        self.prefill_strings(p, plan);
        let root = plan.scopes[scope].root;
        self.decode_fields(plan, root, sc, buf, start, end, depth, row)?;
        self.commit(plan, scope, sc, buf, start, row)
    }

    #[allow(clippy::too_many_arguments)]
    fn decode_fields(
        &mut self,
        plan: &Plan,
        msg: u32,
        sc: &mut ScopeState,
        buf: &[u8],
        mut pos: usize,
        end: usize,
        depth: usize,
        row: usize,
    ) -> Result<(), DecodeError> {
        let table = &plan.msgs[msg as usize];
        while pos < end {
            let tag_at = pos;
            let tag = read_tag(buf, &mut pos, end)?;
            let e = table.lookup_tag(tag);
            // Fast path: the tag is exactly the expected field and wire type of a requested
            // field outside any oneof. Everything else is checked here.
            if tag != e.fast_tag || matches!(e.op, Op::Skip) {
                let (field, wt) = split_tag(tag, tag_at)?;
                if matches!(e.op, Op::Skip) {
                    // Unrequested field: common wire types inline, groups and errors out of line.
                    match wt {
                        WT_VARINT => skip_varint(buf, &mut pos, end)?,
                        WT_LEN => pos = read_len(buf, &mut pos, end)?,
                        WT_I64 if end - pos >= 8 => pos += 8,
                        WT_I32 if end - pos >= 4 => pos += 4,
                        _ => {
                            pos = skip_field_at(
                                buf,
                                pos,
                                end,
                                field,
                                wt,
                                tag_at,
                                depth,
                                plan.max_depth,
                            )?
                        }
                    }
                    continue;
                }
                // A wire type other than the expected one, or a oneof member: out of line.
                if let Some(p) =
                    self.checked_entry(plan, e, sc, field, wt, tag_at, buf, pos, end, depth, row)?
                {
                    pos = p;
                    continue;
                }
            }
            match e.op {
                Op::Varint(conv) => {
                    let v = read_varint(buf, &mut pos, end)?;
                    sc.put(e.slot, apply(conv, v));
                }
                Op::Fixed32 => {
                    let v = read_fixed32(buf, &mut pos, end)?;
                    sc.put(e.slot, v as u64);
                }
                Op::Fixed64 => {
                    let v = read_fixed64(buf, &mut pos, end)?;
                    sc.put(e.slot, v);
                }
                Op::Str | Op::Bytes => {
                    let vend = read_len(buf, &mut pos, end)?;
                    if matches!(e.op, Op::Str) {
                        check_utf8(plan, e, buf, pos, vend)?;
                    }
                    sc.put(e.slot, ((pos as u64) << 32) | (vend - pos) as u64);
                    pos = vend;
                }
                Op::SubMsg => {
                    let vend = read_len(buf, &mut pos, end)?;
                    if depth >= plan.max_depth {
                        return Err(DecodeError::new(
                            tag_at,
                            DecodeErrorKind::TooDeep(plan.max_depth),
                        ));
                    }
                    // Presence, and where the field starts (for errors found at commit).
                    sc.put(e.slot, tag_at as u64);
                    self.decode_fields(plan, e.target, sc, buf, pos, vend, depth + 1, row)?;
                    pos = vend;
                }
                Op::Json | Op::RepJson | Op::RepEnumName => {
                    pos = self.rare_op(plan, e, sc, buf, pos, end, tag_at, depth)?;
                }
                Op::RepVarint(conv) => {
                    let v = read_varint(buf, &mut pos, end)?;
                    push_varint(&mut self.cols[e.target as usize].values, apply(conv, v));
                }
                Op::RepFixed32 => {
                    let v = read_fixed32(buf, &mut pos, end)?;
                    push_fixed32(&mut self.cols[e.target as usize].values, v);
                }
                Op::RepFixed64 => {
                    let v = read_fixed64(buf, &mut pos, end)?;
                    push_fixed64(&mut self.cols[e.target as usize].values, v);
                }
                Op::RepStr | Op::RepBytes => {
                    let vend = read_len(buf, &mut pos, end)?;
                    if matches!(e.op, Op::RepStr) {
                        check_utf8(plan, e, buf, pos, vend)?;
                    }
                    push_wire_bytes(&mut self.cols[e.target as usize], buf, pos, vend)?;
                    pos = vend;
                }
                Op::RepMsg => {
                    let vend = read_len(buf, &mut pos, end)?;
                    if depth >= plan.max_depth {
                        return Err(DecodeError::new(
                            tag_at,
                            DecodeErrorKind::TooDeep(plan.max_depth),
                        ));
                    }
                    let t = e.target as usize;
                    let mut inner = ScopeState::take(&mut self.scopes, plan, t);
                    let r =
                        self.decode_scope(plan, t, &mut inner, buf, pos, vend, depth + 1, ELEMENT);
                    self.scopes[t] = Some(inner);
                    r?;
                    pos = vend;
                }
                Op::DVarI32 => {
                    let v = read_varint(buf, &mut pos, end)?;
                    self.put_direct(e, row, |d| {
                        if let Values::I32(x) = d {
                            set_row(x, row, v as i32);
                        }
                    });
                }
                Op::DVarI64 => {
                    let v = read_varint(buf, &mut pos, end)?;
                    self.put_direct(e, row, |d| {
                        if let Values::I64(x) = d {
                            set_row(x, row, v as i64);
                        }
                    });
                }
                Op::DVarU32 => {
                    let v = read_varint(buf, &mut pos, end)?;
                    self.put_direct(e, row, |d| {
                        if let Values::U32(x) = d {
                            set_row(x, row, v as u32);
                        }
                    });
                }
                Op::DVarU64 => {
                    let v = read_varint(buf, &mut pos, end)?;
                    self.put_direct(e, row, |d| {
                        if let Values::U64(x) = d {
                            set_row(x, row, v);
                        }
                    });
                }
                Op::DVarBool => {
                    let v = read_varint(buf, &mut pos, end)?;
                    self.put_direct(e, row, |d| {
                        if let Values::Bool(x) = d {
                            x.set(row_index(x.len(), row), v != 0);
                        }
                    });
                }
                Op::DZig32 => {
                    let v = zigzag32(read_varint(buf, &mut pos, end)?);
                    self.put_direct(e, row, |d| {
                        if let Values::I32(x) = d {
                            set_row(x, row, v);
                        }
                    });
                }
                Op::DZig64 => {
                    let v = zigzag64(read_varint(buf, &mut pos, end)?);
                    self.put_direct(e, row, |d| {
                        if let Values::I64(x) = d {
                            set_row(x, row, v);
                        }
                    });
                }
                Op::DF32 | Op::DFixU32 | Op::DFixI32 => {
                    let v = read_fixed32(buf, &mut pos, end)?;
                    self.put_direct(e, row, |d| match d {
                        Values::F32(x) => set_row(x, row, f32::from_bits(v)),
                        Values::U32(x) => set_row(x, row, v),
                        Values::I32(x) => set_row(x, row, v as i32),
                        _ => {}
                    });
                }
                Op::DF64 => {
                    let v = read_fixed64(buf, &mut pos, end)?;
                    self.put_direct(e, row, |d| {
                        if let Values::F64(x) = d {
                            set_row(x, row, f64::from_bits(v));
                        }
                    });
                }
                Op::DFixU64 | Op::DFixI64 => {
                    let v = read_fixed64(buf, &mut pos, end)?;
                    self.put_direct(e, row, |d| match d {
                        Values::U64(x) => set_row(x, row, v),
                        Values::I64(x) => set_row(x, row, v as i64),
                        _ => {}
                    });
                }
                Op::DStr | Op::DBytes => {
                    let vend = read_len(buf, &mut pos, end)?;
                    if matches!(e.op, Op::DStr) {
                        check_utf8(plan, e, buf, pos, vend)?;
                    }
                    self.put_direct(e, row, |d| {
                        if let Values::Bytes { offsets, data } = d {
                            // Last occurrence wins: drop what this row held so far.
                            let start = offsets.last().copied().unwrap_or(0) as usize;
                            data.truncate(start);
                            append_bytes(data, buf, pos, vend);
                        }
                    });
                    pos = vend;
                }
                // Groups come through the checked path (`checked_entry`).
                Op::Skip | Op::Group | Op::RepGroup => {}
            }
        }
        Ok(())
    }

    /// The ops no common message needs at speed: sub-messages kept as JSON text and repeated
    /// enums by name. Out of line, so that their many arguments do not crowd the field loop's
    /// registers. Returns the position after the field.
    #[inline(never)]
    #[allow(clippy::too_many_arguments)]
    fn rare_op(
        &mut self,
        plan: &Plan,
        e: &Entry,
        sc: &mut ScopeState,
        buf: &[u8],
        mut pos: usize,
        end: usize,
        tag_at: usize,
        depth: usize,
    ) -> Result<usize, DecodeError> {
        match e.op {
            Op::Json => {
                let vend = read_len(buf, &mut pos, end)?;
                check_json_subtree(plan, e.target, buf, pos, vend, tag_at, depth)?;
                // Presence, and where the field starts (for errors found at commit).
                sc.put(e.slot, tag_at as u64);
                sc.json.push((e.slot, pos as u32, vend as u32));
                Ok(vend)
            }
            Op::RepJson => {
                let vend = read_len(buf, &mut pos, end)?;
                check_json_subtree(plan, e.slot, buf, pos, vend, tag_at, depth)?;
                let col = &mut self.cols[e.target as usize];
                if let Values::Bytes { offsets, data } = &mut col.values {
                    rendered_json(plan, e.slot, buf, std::iter::once((pos, vend)), data)?;
                    if !push_offset(offsets, data.len()) {
                        return Err(DecodeError::new(pos, DecodeErrorKind::TooLarge));
                    }
                }
                Ok(vend)
            }
            Op::RepEnumName => {
                let at = pos;
                let v = read_varint(buf, &mut pos, end)?;
                self.push_enum_name(plan, e.target, e.slot, v as i32, at)?;
                Ok(pos)
            }
            _ => Ok(pos),
        }
    }

    /// The checked path of a requested field whose tag is not its fast tag: a packed repeated
    /// scalar (decoded here; returns the position after it), a wire-type mismatch (an error),
    /// a proto2 group (decoded here, see [`Self::decode_group`]), or a oneof member (clears the
    /// others; returns `None` to go on with the field's op). Out of line so the hot loop stays
    /// small enough to keep its state in registers.
    #[inline(never)]
    #[allow(clippy::too_many_arguments)]
    fn checked_entry(
        &mut self,
        plan: &Plan,
        e: &Entry,
        sc: &mut ScopeState,
        field: u32,
        wt: u8,
        tag_at: usize,
        buf: &[u8],
        pos: usize,
        end: usize,
        depth: usize,
        row: usize,
    ) -> Result<Option<usize>, DecodeError> {
        if wt != e.wire {
            let packable = matches!(
                e.op,
                Op::RepVarint(_) | Op::RepFixed32 | Op::RepFixed64 | Op::RepEnumName
            );
            if packable && wt == WT_LEN {
                return self.decode_packed(plan, e, buf, pos, end).map(Some);
            }
            return Err(DecodeError::new(
                tag_at,
                DecodeErrorKind::WireTypeMismatch {
                    field: plan.names[e.name as usize].clone(),
                    found: wt,
                    expected: e.wire,
                },
            ));
        }
        if e.oneof != 0 {
            self.clear_oneof(plan, sc, e.oneof - 1, field);
        }
        if e.wire == WT_SGROUP {
            let mut pos = pos;
            self.decode_group(plan, e, sc, field, buf, &mut pos, end, tag_at, depth, row)?;
            return Ok(Some(pos));
        }
        Ok(None)
    }

    /// A requested proto2 group (its start tag at `tag_at` ends at `pos`), read as its entry
    /// says: a sub-message ([`Op::Group`]), an element of a repeated one ([`Op::RepGroup`]),
    /// or JSON text. Groups never take the fast path (their entries have no fast tag): the body
    /// is found first ([`group_body`]), then decoded like a sub-message's. Moves `pos` past the
    /// end-group tag.
    #[allow(clippy::too_many_arguments)]
    fn decode_group(
        &mut self,
        plan: &Plan,
        e: &Entry,
        sc: &mut ScopeState,
        field: u32,
        buf: &[u8],
        pos: &mut usize,
        end: usize,
        tag_at: usize,
        depth: usize,
        row: usize,
    ) -> Result<(), DecodeError> {
        if depth >= plan.max_depth {
            return Err(DecodeError::new(
                tag_at,
                DecodeErrorKind::TooDeep(plan.max_depth),
            ));
        }
        let body = *pos;
        let body_end = group_body(buf, pos, end, field, tag_at, depth, plan.max_depth)?;
        match e.op {
            Op::Group => {
                sc.put(e.slot, tag_at as u64);
                self.decode_fields(plan, e.target, sc, buf, body, body_end, depth + 1, row)
            }
            Op::RepGroup => {
                let t = e.target as usize;
                let mut inner = ScopeState::take(&mut self.scopes, plan, t);
                let r =
                    self.decode_scope(plan, t, &mut inner, buf, body, body_end, depth + 1, ELEMENT);
                self.scopes[t] = Some(inner);
                r
            }
            Op::Json => {
                check_json_subtree(plan, e.target, buf, body, body_end, tag_at, depth)?;
                sc.put(e.slot, tag_at as u64);
                sc.json.push((e.slot, body as u32, body_end as u32));
                Ok(())
            }
            Op::RepJson => {
                check_json_subtree(plan, e.slot, buf, body, body_end, tag_at, depth)?;
                let col = &mut self.cols[e.target as usize];
                if let Values::Bytes { offsets, data } = &mut col.values {
                    let range = std::iter::once((body, body_end));
                    rendered_json(plan, e.slot, buf, range, data)?;
                    if !push_offset(offsets, data.len()) {
                        return Err(DecodeError::new(body, DecodeErrorKind::TooLarge));
                    }
                }
                Ok(())
            }
            _ => Ok(()),
        }
    }

    /// Writes into the current row of a direct column, and marks the row valid when `e.slot` is
    /// 1 (nullable and not guarded: see [`Op::DVarI32`]).
    #[inline(always)]
    fn put_direct(&mut self, e: &Entry, row: usize, write: impl FnOnce(&mut Values)) {
        let c = &mut self.cols[e.target as usize];
        write(&mut c.values);
        if e.slot != 0 {
            if let Some(v) = &mut c.nulls {
                v.set(row_index(v.len(), row), true);
            }
        }
    }

    /// Starts `n` rows (or elements) in every direct column of a scope: its default, and null
    /// if it can be. Non-empty string defaults are [`Self::prefill_strings`]'s.
    #[inline(always)]
    fn prefill_values(&mut self, p: &Prefill, n: usize) {
        let cols = &mut self.cols;
        fn each<T: Native>(list: &[(u32, T)], cols: &mut [Column], n: usize) {
            for &(c, d) in list {
                if let Some(v) = T::vec(&mut cols[c as usize].values) {
                    if n == 1 {
                        v.push(d);
                    } else {
                        v.resize(v.len() + n, d);
                    }
                }
            }
        }
        each(&p.f64, cols, n);
        each(&p.i64, cols, n);
        each(&p.u32, cols, n);
        each(&p.i32, cols, n);
        each(&p.u64, cols, n);
        each(&p.f32, cols, n);
        for &(c, d) in &p.bool {
            if let Values::Bool(v) = &mut cols[c as usize].values {
                v.extend_constant(n, d);
            }
        }
        for &c in &p.invalid {
            if let Some(v) = &mut cols[c as usize].nulls {
                v.extend_constant(n, false);
            }
        }
    }

    /// Starts the row's value in every direct Utf8/Binary column with a non-empty default (its
    /// end offset is pushed at commit, so it cannot be filled ahead).
    #[inline(always)]
    fn prefill_strings(&mut self, p: &Prefill, plan: &Plan) {
        for &(c, i) in &p.bytes {
            if let Values::Bytes { data, .. } = &mut self.cols[c as usize].values {
                data.extend_from_slice(&plan.str_defaults[i as usize]);
            }
        }
    }

    /// A packed repeated scalar: a length, then values back to back.
    fn decode_packed(
        &mut self,
        plan: &Plan,
        e: &Entry,
        buf: &[u8],
        mut pos: usize,
        end: usize,
    ) -> Result<usize, DecodeError> {
        let len_at = pos;
        let vend = read_len(buf, &mut pos, end)?;
        let bad_len = || {
            DecodeError::new(
                len_at,
                DecodeErrorKind::BadPackedLength {
                    field: plan.names[e.name as usize].clone(),
                },
            )
        };
        match e.op {
            Op::RepFixed32 => {
                let bytes = &buf[pos..vend];
                if bytes.len() % 4 != 0 {
                    return Err(bad_len());
                }
                let data = &mut self.cols[e.target as usize].values;
                for c in bytes.chunks_exact(4) {
                    push_fixed32(data, u32::from_le_bytes([c[0], c[1], c[2], c[3]]));
                }
            }
            Op::RepFixed64 => {
                let bytes = &buf[pos..vend];
                if bytes.len() % 8 != 0 {
                    return Err(bad_len());
                }
                let data = &mut self.cols[e.target as usize].values;
                for c in bytes.chunks_exact(8) {
                    let mut b = [0u8; 8];
                    b.copy_from_slice(c);
                    push_fixed64(data, u64::from_le_bytes(b));
                }
            }
            Op::RepVarint(conv) => {
                let data = &mut self.cols[e.target as usize].values;
                while pos < vend {
                    let v = read_varint(buf, &mut pos, vend)?;
                    push_varint(data, apply(conv, v));
                }
            }
            Op::RepEnumName => {
                while pos < vend {
                    let at = pos;
                    let v = read_varint(buf, &mut pos, vend)?;
                    self.push_enum_name(plan, e.target, e.slot, v as i32, at)?;
                }
            }
            _ => {}
        }
        Ok(vend)
    }

    fn push_enum_name(
        &mut self,
        plan: &Plan,
        col: u32,
        table: u32,
        n: i32,
        at: usize,
    ) -> Result<(), DecodeError> {
        let col = &mut self.cols[col as usize];
        match plan.enums[table as usize].name(n) {
            Some(name) => push_bytes(col, name.as_bytes(), at),
            None => push_unknown_enum(col, n, at),
        }
    }

    /// A oneof member arrived: forget the other members' values in this row, including the
    /// elements a displaced message member appended to its lists.
    #[cold]
    fn clear_oneof(&mut self, plan: &Plan, sc: &mut ScopeState, oneof: u32, field: u32) {
        let mut cleared_json = false;
        for m in &plan.oneofs[oneof as usize].members {
            if m.field == field {
                continue;
            }
            for &slot in &m.slots {
                if sc.has(slot) {
                    sc.unset(slot);
                    cleared_json = true;
                }
            }
            for &list in &m.lists {
                // This row's elements sit after the list's last committed offset.
                if let Values::List { offsets, child } = &self.cols[list as usize].values {
                    let (child, keep) = (*child, offsets.last().copied().unwrap_or(0) as usize);
                    truncate(&mut self.cols, child, keep);
                }
            }
        }
        if cleared_json && !sc.json.is_empty() {
            let set = sc.set.clone();
            sc.json
                .retain(|(slot, _, _)| (set[(*slot >> 6) as usize] >> (*slot & 63)) & 1 != 0);
        }
    }

    #[inline(always)]
    /// The number in `slot` for enum-name and time ops (whose defaults are numbers), or None
    /// for null.
    fn value(sc: &ScopeState, slot: u32, guard: u32, default: DefaultVal) -> Option<u64> {
        if sc.has(slot) {
            Some(sc.vals[slot as usize])
        } else if guard == NONE || sc.has(guard) {
            match default {
                DefaultVal::Bits(b) => Some(b),
                DefaultVal::Null | DefaultVal::Str(_) => None,
            }
        } else {
            None
        }
    }

    /// Appends one value to every column of `scope` from its slots. `start` is where the
    /// scope's bytes start (for errors).
    fn commit(
        &mut self,
        plan: &Plan,
        scope: usize,
        sc: &ScopeState,
        buf: &[u8],
        start: usize,
        row: usize,
    ) -> Result<(), DecodeError> {
        let sp = &plan.scopes[scope];
        let s = sc;
        let cols = &mut self.cols;
        let p = &sp.prefill;
        for &c in &p.string_ends {
            if let Values::Bytes { offsets, data } = &mut cols[c as usize].values {
                if !push_offset(offsets, data.len()) {
                    return Err(DecodeError::new(start, DecodeErrorKind::TooLarge));
                }
            }
        }
        for &(c, guard) in &p.guards {
            if s.has(guard) {
                if let Some(v) = &mut cols[c as usize].nulls {
                    v.set(row_index(v.len(), row), true);
                }
            }
        }
        if sp.has_slots {
            self.commit_slots(plan, scope, sc, buf, start)?;
        }
        Ok(())
    }

    /// The part of [`Self::commit`] for columns filled from value slots (not written directly):
    /// leaves of nested and repeated scopes, oneof members, enums by name, structs, lists,
    /// times and JSON text. Out of line; a scope of direct columns only never calls it.
    #[inline(never)]
    fn commit_slots(
        &mut self,
        plan: &Plan,
        scope: usize,
        sc: &ScopeState,
        buf: &[u8],
        start: usize,
    ) -> Result<(), DecodeError> {
        let sp = &plan.scopes[scope];
        let s = sc;
        let cols = &mut self.cols;
        let l = &sp.leaves;
        commit_leaves(&l.f64, cols, s, f64::from_bits);
        commit_leaves(&l.i64, cols, s, |b| b as i64);
        commit_leaves(&l.u32, cols, s, |b| b as u32);
        commit_leaves(&l.i32, cols, s, |b| b as i32);
        commit_leaves(&l.u64, cols, s, |b| b);
        commit_leaves(&l.f32, cols, s, |b| f32::from_bits(b as u32));
        for leaf in &l.bool {
            let (bits, present) = leaf_value(leaf, s);
            let c = &mut cols[leaf.col as usize];
            if let Values::Bool(v) = &mut c.values {
                v.push(bits != 0);
            }
            if let Some(v) = &mut c.nulls {
                v.push(present);
            }
        }
        for leaf in &l.bytes {
            let (bits, present) = leaf_value(leaf, s);
            let c = &mut cols[leaf.col as usize];
            if present && leaf.str_default != NONE && !s.has(leaf.slot) {
                push_bytes(c, &plan.str_defaults[leaf.str_default as usize], start)?;
            } else if present {
                let start = (bits >> 32) as usize;
                let len = (bits & 0xffff_ffff) as usize;
                push_wire_bytes(c, buf, start, start + len)?;
            } else {
                c.push_null();
            }
        }
        for op in &sp.ops {
            match *op {
                CommitOp::EnumName {
                    col,
                    slot,
                    guard,
                    default,
                    table,
                } => match Self::value(sc, slot, guard, default) {
                    Some(n) => self.push_enum_name(plan, col, table, n as i32, start)?,
                    None => self.cols[col as usize].push_null(),
                },
                CommitOp::Struct { col, presence } => {
                    let valid = presence == NONE || sc.has(presence);
                    let c = &mut self.cols[col as usize];
                    if let Values::Struct { len, .. } = &mut c.values {
                        *len += 1;
                    }
                    if let Some(v) = &mut c.nulls {
                        v.push(valid);
                    }
                }
                CommitOp::ListEnd { col } => {
                    let child = match &self.cols[col as usize].values {
                        Values::List { child, .. } => *child,
                        _ => continue,
                    };
                    let n = self.cols[child].len();
                    let c = &mut self.cols[col as usize];
                    if let Values::List { offsets, .. } = &mut c.values {
                        if !push_offset(offsets, n) {
                            return Err(DecodeError::new(start, DecodeErrorKind::TooLarge));
                        }
                    }
                    c.valid();
                }
                CommitOp::Time {
                    col,
                    secs,
                    nanos,
                    presence,
                    unit,
                    name,
                } => {
                    if presence != NONE && !sc.has(presence) {
                        self.cols[col as usize].push_null();
                        continue;
                    }
                    let get = |slot| Self::value(sc, slot, NONE, DefaultVal::Bits(0)).unwrap_or(0);
                    let s = get(secs) as i64;
                    let n = get(nanos) as i32 as i64;
                    let v = match unit {
                        TimeUnit::Second => Some(s),
                        TimeUnit::Millisecond => s
                            .checked_mul(1_000)
                            .and_then(|x| x.checked_add(n.div_euclid(1_000_000))),
                        TimeUnit::Microsecond => s
                            .checked_mul(1_000_000)
                            .and_then(|x| x.checked_add(n.div_euclid(1_000))),
                        TimeUnit::Nanosecond => {
                            s.checked_mul(1_000_000_000).and_then(|x| x.checked_add(n))
                        }
                    };
                    let Some(v) = v else {
                        // Where the Timestamp / Duration field starts: its tag's offset, kept
                        // in its presence slot; an element of a repeated field starts the scope.
                        let at = if presence == NONE {
                            start
                        } else {
                            sc.vals[presence as usize] as usize
                        };
                        return Err(DecodeError::new(
                            at,
                            DecodeErrorKind::OutOfRange {
                                field: plan.names[name as usize].clone(),
                            },
                        ));
                    };
                    let c = &mut self.cols[col as usize];
                    if let Values::I64(x) = &mut c.values {
                        x.push(v);
                    }
                    if let Some(val) = &mut c.nulls {
                        val.push(true);
                    }
                }
                CommitOp::Json { col, slot, desc } => {
                    if !sc.has(slot) {
                        self.cols[col as usize].push_null();
                        continue;
                    }
                    let s = sc;
                    let c = &mut self.cols[col as usize];
                    if let Values::Bytes { offsets, data } = &mut c.values {
                        let ranges = s
                            .json
                            .iter()
                            .filter(|r| r.0 == slot)
                            .map(|r| (r.1 as usize, r.2 as usize));
                        rendered_json(plan, desc, buf, ranges, data)?;
                        if !push_offset(offsets, data.len()) {
                            return Err(DecodeError::new(start, DecodeErrorKind::TooLarge));
                        }
                    }
                    if let Some(v) = &mut c.nulls {
                        v.push(true);
                    }
                }
            }
        }
        Ok(())
    }
}

/// Walks a sub-message that will be rendered as JSON text with weir's own wire checks, so that
/// the depth limit counts from the real root and errors carry weir's kinds and offsets; only
/// then does prost-reflect render it. Cold path: it looks fields up in the descriptor.
#[cold]
fn check_json_subtree(
    plan: &Plan,
    desc: u32,
    buf: &[u8],
    start: usize,
    end: usize,
    tag_at: usize,
    depth: usize,
) -> Result<(), DecodeError> {
    if depth >= plan.max_depth {
        return Err(DecodeError::new(
            tag_at,
            DecodeErrorKind::TooDeep(plan.max_depth),
        ));
    }
    check_wire(plan, &plan.json[desc as usize], buf, start, end, depth + 1)
}

fn check_wire(
    plan: &Plan,
    desc: &MessageDescriptor,
    buf: &[u8],
    mut pos: usize,
    end: usize,
    depth: usize,
) -> Result<(), DecodeError> {
    while pos < end {
        let tag_at = pos;
        let tag = read_varint(buf, &mut pos, end)?;
        let (field, wt) = split_tag(tag, tag_at)?;
        let fd = desc.get_field(field);
        match fd.as_ref().map(|f| f.kind()) {
            Some(Kind::Message(m)) if wt == WT_LEN => {
                let vend = read_len(buf, &mut pos, end)?;
                if depth >= plan.max_depth {
                    return Err(DecodeError::new(
                        tag_at,
                        DecodeErrorKind::TooDeep(plan.max_depth),
                    ));
                }
                check_wire(plan, &m, buf, pos, vend, depth + 1)?;
                pos = vend;
            }
            Some(Kind::String) if wt == WT_LEN => {
                let vend = read_len(buf, &mut pos, end)?;
                if let Some(at) = utf8_error_at(buf, pos, vend) {
                    let field = fd.map(|f| f.full_name().to_string()).unwrap_or_default();
                    return Err(DecodeError::new(at, DecodeErrorKind::InvalidUtf8 { field }));
                }
                pos = vend;
            }
            _ => skip_field(buf, &mut pos, end, field, wt, tag_at, depth, plan.max_depth)?,
        }
    }
    Ok(())
}

#[inline(always)]
fn check_utf8(
    plan: &Plan,
    e: &Entry,
    buf: &[u8],
    start: usize,
    end: usize,
) -> Result<(), DecodeError> {
    // Short ASCII (the usual string) is settled with one masked chunk, no loop.
    let len = end - start;
    if short_chunk(buf, start, len).is_some_and(|c| is_ascii_prefix(c, len)) {
        return Ok(());
    }
    match utf8_error_at(buf, start, end) {
        None => Ok(()),
        Some(at) => Err(DecodeError::new(
            at,
            DecodeErrorKind::InvalidUtf8 {
                field: plan.names[e.name as usize].clone(),
            },
        )),
    }
}

#[cold]
fn push_unknown_enum(col: &mut Column, n: i32, at: usize) -> Result<(), DecodeError> {
    // An open enum may carry a number the schema does not name; like the proto3 JSON mapping,
    // write the number.
    let mut tmp = [0u8; 12];
    let mut i = tmp.len();
    let neg = n < 0;
    let mut v = (n as i64).unsigned_abs();
    loop {
        i -= 1;
        tmp[i] = b'0' + (v % 10) as u8;
        v /= 10;
        if v == 0 {
            break;
        }
    }
    if neg {
        i -= 1;
        tmp[i] = b'-';
    }
    push_bytes(col, &tmp[i..], at)
}

/// A leaf's value bits and whether it is present (not null).
#[inline(always)]
fn leaf_value(l: &LeafPlan, s: &ScopeState) -> (u64, bool) {
    if s.has(l.slot) {
        (s.vals[l.slot as usize], true)
    } else {
        let present = !l.null_default && (l.guard == NONE || s.has(l.guard));
        (l.default, present)
    }
}

/// Commits the leaves of one primitive type: one push per column, no indirect jump.
#[inline(always)]
fn commit_leaves<T: Native>(
    leaves: &[LeafPlan],
    cols: &mut [Column],
    s: &ScopeState,
    conv: impl Fn(u64) -> T,
) {
    for leaf in leaves {
        let (bits, present) = leaf_value(leaf, s);
        let c = &mut cols[leaf.col as usize];
        if let Some(v) = T::vec(&mut c.values) {
            v.push(conv(bits));
        }
        if let Some(v) = &mut c.nulls {
            v.push(present);
        }
    }
}

/// Map rows up to this many entries look for a repeated key by comparing each key with the ones
/// before it; larger rows sort the keys' positions instead.
const SCAN_KEYS: usize = 16;

/// Which of the map entries `first..end` of the current row to keep when a key repeats: the
/// last entry of each key (protobuf's merge rule: a later entry replaces an earlier one).
/// `None` when every key is distinct, the usual case, which costs a scan of the earlier keys
/// for small rows and no allocation.
fn last_of_each_key(keys: &Column, first: usize, end: usize) -> Option<Vec<bool>> {
    fn keep_last<K: Ord>(n: usize, key: impl Fn(usize) -> K) -> Option<Vec<bool>> {
        if n <= SCAN_KEYS {
            // Is any key the same as one before it?
            if !(1..n).any(|j| (0..j).any(|i| key(i) == key(j))) {
                return None;
            }
            return Some(
                (0..n)
                    .map(|i| !(i + 1..n).any(|j| key(i) == key(j)))
                    .collect(),
            );
        }
        let mut order: Vec<usize> = (0..n).collect();
        order.sort_by(|&a, &b| key(a).cmp(&key(b)).then(a.cmp(&b)));
        let mut keep = vec![true; n];
        let mut dup = false;
        for w in order.windows(2) {
            if key(w[0]) == key(w[1]) {
                keep[w[0]] = false;
                dup = true;
            }
        }
        dup.then_some(keep)
    }
    let n = end - first;
    match &keys.values {
        Values::Bytes { offsets, data } => keep_last(n, |i| {
            let i = first + i;
            &data[offsets[i] as usize..offsets[i + 1] as usize]
        }),
        Values::I32(v) => keep_last(n, |i| v[first + i]),
        Values::I64(v) => keep_last(n, |i| v[first + i]),
        Values::U32(v) => keep_last(n, |i| v[first + i]),
        Values::U64(v) => keep_last(n, |i| v[first + i]),
        Values::Bool(b) => keep_last(n, |i| b.get(first + i)),
        _ => None,
    }
}
