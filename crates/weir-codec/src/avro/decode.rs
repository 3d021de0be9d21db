//! The per-message loop: runs the plan over Avro binary data, appending to the column arena.
//! A record runs as its straight-line steps (the common reads typed, skipped fields in runs);
//! arrays, maps, unions and the rarer values run as operations. Every read is bounded by the
//! message; a failed message is rolled back, and a failed value is read again, off the hot
//! path, to say where and why.
//!
//! Every function here that takes a plan and columns is given columns that fit that plan
//! ([`State::fits`], checked where a message enters); [`run_steps`] relies on it to write a
//! record's values without checking each column.

use super::plan::{Const, Num, Op, Plan, Skip, Step, NONE};
use crate::columns::{self, push_offset, Column, Native, Values};
use crate::error::{DecodeError, DecodeErrorKind};
use crate::strings::{append_bytes, is_ascii_prefix, short_chunk, utf8_error_at};
use arrow_array::RecordBatch;
use arrow_buffer::i256;
use arrow_schema::SchemaRef;
use std::mem::Discriminant;
use std::sync::Arc;

/// A decoder's buffers: the columns and the rows they hold.
#[derive(Debug)]
pub(crate) struct State {
    /// Private, and changed only by appending rows, rolling them back and taking them as a
    /// batch: none of which changes a column's variant, so they keep the variants of `layout`.
    cols: Vec<Column>,
    /// The variant of each column's values (the [`Plan::layout`] of the plan they came from).
    layout: Arc<[Discriminant<Values>]>,
    /// The layout of another plan last found equal to `layout` (held, so that its address is
    /// not reused by another).
    fitted: Option<Arc<[Discriminant<Values>]>>,
    pub(crate) rows: usize,
    /// Rows of more than one plan fill these columns (registry-framed messages of several
    /// schema ids): a column one plan never nulls may have nulls from another, so every
    /// record keeps its columns' validity.
    pub(crate) plans_mixed: bool,
}

/// What one message's decoding carries along besides the position.
#[derive(Debug)]
struct Ctx {
    /// Items of zero bytes met so far ([`MAX_EMPTY_ITEMS`]).
    empty: u64,
    /// [`State::plans_mixed`].
    nulls: bool,
}

/// What went wrong, without the field path (added once, off the hot path).
#[derive(Debug, Clone, Copy)]
enum Problem {
    Truncated,
    VarintTooLong,
    VarintOverflow,
    IntOutOfRange(i64),
    NegativeLength(i64),
    LengthPastEnd { length: u64, remaining: usize },
    BadBool(u8),
    InvalidUtf8,
    UnknownBranch { index: i64, branches: usize },
    UnknownSymbol { index: i64, symbols: usize },
    SymbolNotRead { index: i64 },
    Refused { branch: u32 },
    TooDeep(u32),
    TooLarge,
    OutOfRange,
    TooManyItems,
}

/// A problem at byte `at` of the value at path `path`.
#[derive(Debug)]
struct Fault {
    at: usize,
    path: u32,
    problem: Problem,
}

/// The most items of zero bytes each (nulls, empty records) one message may hold, in all its
/// arrays together: their count is not bounded by the message's length.
const MAX_EMPTY_ITEMS: u64 = 1 << 20;

impl State {
    pub(crate) fn new(plan: &Plan) -> Self {
        Self {
            cols: plan.templates.iter().map(Column::clone_empty).collect(),
            layout: Arc::clone(&plan.layout),
            fitted: None,
            rows: 0,
            plans_mixed: false,
        }
    }

    /// Whether these columns fit `plan`: they have the variants its steps write. Two pointer
    /// compares a message; the layouts themselves are compared when a plan differs from the
    /// last other plan met.
    #[inline(always)]
    fn fits(&mut self, plan: &Plan) -> bool {
        Arc::ptr_eq(&self.layout, &plan.layout)
            || self
                .fitted
                .as_ref()
                .is_some_and(|f| Arc::ptr_eq(f, &plan.layout))
            || self.fits_apart(plan)
    }

    #[cold]
    #[inline(never)]
    fn fits_apart(&mut self, plan: &Plan) -> bool {
        let fits = self.layout == plan.layout;
        if fits {
            self.fitted = Some(Arc::clone(&plan.layout));
        }
        fits
    }

    /// The buffered rows as a batch of columns `top` (leaving the columns empty, of the same
    /// variants).
    pub(crate) fn take_batch(&mut self, top: &[usize], schema: &SchemaRef) -> RecordBatch {
        let rows = std::mem::take(&mut self.rows);
        columns::take_batch(&mut self.cols, top, schema, rows)
    }

    /// Decodes one message as one row; on error its partial row is rolled back.
    pub(crate) fn decode_row(&mut self, plan: &Plan, message: &[u8]) -> Result<(), DecodeError> {
        if !self.fits(plan) {
            return Err(misfit());
        }
        let mut pos = 0;
        let mut ctx = Ctx {
            empty: 0,
            nulls: self.plans_mixed,
        };
        let fault = match record(
            plan,
            plan.root,
            message,
            &mut pos,
            &mut self.cols,
            0,
            &mut ctx,
        ) {
            Ok(()) if pos == message.len() => {
                self.rows += 1;
                return Ok(());
            }
            Ok(()) => {
                let rest = message.len() - pos;
                self.rollback(plan);
                return Err(DecodeError::new(
                    pos,
                    DecodeErrorKind::Avro {
                        field: String::new(),
                        problem: format!(
                            "{rest} bytes follow the record: the message was written with \
                             another schema"
                        ),
                    },
                ));
            }
            Err(f) => f,
        };
        self.rollback(plan);
        Err(fault.error(plan))
    }

    /// Decodes the datum at the front of `data` (datums back to back, as in a container
    /// block) as one row and returns its length; on error its partial row is rolled back.
    pub(crate) fn decode_prefix(&mut self, plan: &Plan, data: &[u8]) -> Result<usize, DecodeError> {
        if !self.fits(plan) {
            return Err(misfit());
        }
        let mut pos = 0;
        let mut ctx = Ctx {
            empty: 0,
            nulls: self.plans_mixed,
        };
        match record(plan, plan.root, data, &mut pos, &mut self.cols, 0, &mut ctx) {
            Ok(()) => {
                self.rows += 1;
                Ok(pos)
            }
            Err(f) => {
                self.rollback(plan);
                Err(f.error(plan))
            }
        }
    }

    #[cold]
    fn rollback(&mut self, plan: &Plan) {
        for &c in &plan.top {
            columns::truncate(&mut self.cols, c, self.rows);
        }
    }
}

/// A plan met columns made for a plan of other column types.
#[cold]
fn misfit() -> DecodeError {
    DecodeError::new(
        0,
        DecodeErrorKind::Avro {
            field: String::new(),
            problem: "the decoder's columns were made for a plan of other column types (a bug \
                      in weir: please report it with the schemas)"
                .into(),
        },
    )
}

impl Fault {
    #[cold]
    fn error(self, plan: &Plan) -> DecodeError {
        let field = plan
            .paths
            .get(self.path as usize)
            .cloned()
            .unwrap_or_default();
        let problem = match self.problem {
            Problem::Truncated => "the data ends inside the value".to_string(),
            Problem::VarintTooLong => "a varint longer than 10 bytes".into(),
            Problem::VarintOverflow => "a 10-byte varint past 64 bits".into(),
            Problem::IntOutOfRange(v) => format!("{v} does not fit an Avro int"),
            Problem::NegativeLength(v) => format!("negative length or count {v}"),
            Problem::LengthPastEnd { length, remaining } => {
                format!("length {length} runs past the end ({remaining} bytes remain)")
            }
            Problem::BadBool(b) => format!("a boolean byte of {b} (expected 0 or 1)"),
            Problem::InvalidUtf8 => "a string that is not valid UTF-8".into(),
            Problem::UnknownBranch { index, branches } => {
                format!("union branch {index} does not exist (the union has {branches})")
            }
            Problem::UnknownSymbol { index, symbols } => {
                format!("enum index {index} does not exist (the enum has {symbols} symbols)")
            }
            Problem::SymbolNotRead { index } => format!(
                "the writer's enum symbol {index} is not in the reader's enum, which has no default"
            ),
            Problem::Refused { branch } => format!(
                "the value is in union branch {}, whose type the column cannot hold",
                plan.refusals
                    .get(branch as usize)
                    .map_or("?", String::as_str)
            ),
            Problem::TooDeep(limit) => format!("nesting deeper than {limit} ('avro.max.depth')"),
            Problem::TooLarge => "a column past 2 GiB in one batch".into(),
            Problem::OutOfRange => "the value does not fit its column type".into(),
            Problem::TooManyItems => {
                format!("more than {MAX_EMPTY_ITEMS} items of zero bytes in one message")
            }
        };
        DecodeError::new(self.at, DecodeErrorKind::Avro { field, problem })
    }
}

/// Reads a zigzag varint `long`, with the protobuf reader's word-at-a-time varint (the same
/// base-128 encoding): the quotes' timestamps and sequence numbers are 5 to 9 bytes. A call
/// of its own in debug builds, where inlining it would grow the recursive reader's frames.
#[cfg_attr(not(debug_assertions), inline(always))]
#[cfg_attr(debug_assertions, inline(never))]
fn read_long(buf: &[u8], pos: &mut usize) -> Result<i64, Problem> {
    match crate::protobuf::wire::read_varint(buf, pos, buf.len()) {
        Ok(v) => Ok((v >> 1) as i64 ^ -((v & 1) as i64)),
        Err(e) => Err(match e.kind {
            DecodeErrorKind::TruncatedVarint => Problem::Truncated,
            DecodeErrorKind::VarintOverflow => Problem::VarintOverflow,
            _ => Problem::VarintTooLong,
        }),
    }
}

#[inline(always)]
fn read_int(buf: &[u8], pos: &mut usize) -> Result<i32, Problem> {
    let v = read_long(buf, pos)?;
    i32::try_from(v).map_err(|_| Problem::IntOutOfRange(v))
}

/// `n` bytes at `*pos`.
#[inline(always)]
fn take<'a>(buf: &'a [u8], pos: &mut usize, n: usize) -> Result<&'a [u8], Problem> {
    let p = *pos;
    match buf.get(p..p.saturating_add(n)) {
        Some(s) if p.checked_add(n).is_some() => {
            *pos = p + n;
            Ok(s)
        }
        _ => Err(Problem::LengthPastEnd {
            length: n as u64,
            remaining: buf.len().saturating_sub(p),
        }),
    }
}

/// A length-prefixed value (`bytes`, `string`).
#[inline(always)]
fn read_bytes<'a>(buf: &'a [u8], pos: &mut usize) -> Result<&'a [u8], Problem> {
    let len = read_long(buf, pos)?;
    let n = usize::try_from(len).map_err(|_| Problem::NegativeLength(len))?;
    take(buf, pos, n)
}

#[inline(always)]
fn push<T: Native>(cols: &mut [Column], col: u32, v: T) {
    let c = &mut cols[col as usize];
    if let Some(values) = T::vec(&mut c.values) {
        values.push(v);
    }
    c.valid();
}

#[inline(always)]
fn push_bytes(cols: &mut [Column], col: u32, bytes: &[u8]) -> Result<(), Problem> {
    let c = &mut cols[col as usize];
    if let Values::Bytes { offsets, data } = &mut c.values {
        data.extend_from_slice(bytes);
        if !push_offset(offsets, data.len()) {
            return Err(Problem::TooLarge);
        }
    }
    c.valid();
    Ok(())
}

/// Closes a list row at its child's current length.
fn close_list(cols: &mut [Column], col: u32) -> Result<(), Problem> {
    let child = match &cols[col as usize].values {
        Values::List { child, .. } => *child,
        _ => return Ok(()),
    };
    let end = cols[child].len();
    let c = &mut cols[col as usize];
    if let Values::List { offsets, .. } = &mut c.values {
        if !push_offset(offsets, end) {
            return Err(Problem::TooLarge);
        }
    }
    c.valid();
    Ok(())
}

fn push_struct_row(cols: &mut [Column], col: u32) {
    let c = &mut cols[col as usize];
    if let Values::Struct { len, .. } = &mut c.values {
        *len += 1;
    }
    c.valid();
}

#[inline(always)]
fn store_num(cols: &mut [Column], col: u32, v: i64, to: Num) -> Result<(), Problem> {
    match to {
        // An int into an Int32 column: in range by construction.
        Num::I32 => push(cols, col, v as i32),
        Num::I64 => push(cols, col, v),
        Num::F32 => push(cols, col, v as f32),
        Num::F64 => push(cols, col, v as f64),
        Num::Mul(k) => push(cols, col, v.checked_mul(k).ok_or(Problem::OutOfRange)?),
    }
    Ok(())
}

/// 10^p for p in 0..=76: the bound of a decimal of precision p.
const POW10: [i256; 77] = {
    let mut t = [i256::ONE; 77];
    let mut i = 1;
    while i < 77 {
        t[i] = t[i - 1].wrapping_mul(i256::from_i128(10));
        i += 1;
    }
    t
};

/// A big-endian two's-complement integer (an Avro decimal's unscaled value), below
/// 10^precision in magnitude: redundant leading sign bytes (a wide fixed) are allowed, the rest
/// must fit 32 bytes. Of precision 38 or less, it fits an i128 (Decimal128).
fn decimal_value(bytes: &[u8], precision: u8) -> Result<i256, Problem> {
    let negative = bytes.first().is_some_and(|b| b & 0x80 != 0);
    let sign = if negative { 0xff } else { 0 };
    let cut = bytes.len().saturating_sub(32);
    if bytes[..cut].iter().any(|&b| b != sign) {
        return Err(Problem::OutOfRange);
    }
    let rest = &bytes[cut..];
    let mut be = [sign; 32];
    be[32 - rest.len()..].copy_from_slice(rest);
    let v = i256::from_be_bytes(be);
    let bound = POW10[usize::from(precision.min(76))];
    if v >= bound || v <= bound.wrapping_neg() {
        return Err(Problem::OutOfRange);
    }
    Ok(v)
}

/// Runs operation `op` at `*pos`. Only the nesting operations are here; values are read by
/// [`value`], so the frame that recursion repeats stays small.
fn run(
    plan: &Plan,
    op: u32,
    buf: &[u8],
    pos: &mut usize,
    cols: &mut [Column],
    depth: u32,
    ctx: &mut Ctx,
) -> Result<(), Fault> {
    let at = *pos;
    let fault = |path: u32| move |problem| Fault { at, path, problem };
    match plan.ops[op as usize] {
        Op::Record { .. } => record(plan, op, buf, pos, cols, depth, ctx)?,
        Op::Array {
            col,
            item,
            item_bytes,
            path,
        } => {
            if depth > plan.max_depth {
                return Err(fault(path)(Problem::TooDeep(plan.max_depth)));
            }
            loop {
                let at = *pos;
                let n = match next_block(buf, pos, col == NONE, item_bytes, &mut ctx.empty) {
                    Ok(Block::End) => break,
                    Ok(Block::Skipped) => continue,
                    Ok(Block::Items(n)) => n,
                    Err(problem) => return Err(Fault { at, path, problem }),
                };
                for _ in 0..n {
                    run(plan, item, buf, pos, cols, depth + 1, ctx)?;
                }
            }
            if col != NONE {
                close_list(cols, col).map_err(fault(path))?;
            }
        }
        Op::Map {
            col,
            entries,
            key,
            value,
            path,
        } => {
            if depth > plan.max_depth {
                return Err(fault(path)(Problem::TooDeep(plan.max_depth)));
            }
            loop {
                let at = *pos;
                // Each entry holds at least its key's length byte.
                let n = match next_block(buf, pos, col == NONE, 1, &mut ctx.empty) {
                    Ok(Block::End) => break,
                    Ok(Block::Skipped) => continue,
                    Ok(Block::Items(n)) => n,
                    Err(problem) => return Err(Fault { at, path, problem }),
                };
                for _ in 0..n {
                    let k = *pos;
                    let name = read_bytes(buf, pos).map_err(fault_at(k, path))?;
                    if key != NONE {
                        if utf8_error_at(name, 0, name.len()).is_some() {
                            return Err(Fault {
                                at: k,
                                path,
                                problem: Problem::InvalidUtf8,
                            });
                        }
                        push_bytes(cols, key, name).map_err(fault_at(k, path))?;
                    }
                    run(plan, value, buf, pos, cols, depth + 1, ctx)?;
                    if entries != NONE {
                        push_struct_row(cols, entries);
                    }
                }
            }
            if col != NONE {
                close_list(cols, col).map_err(fault(path))?;
            }
        }
        Op::Union { branches, path } => {
            let i = read_long(buf, pos).map_err(fault(path))?;
            let list = &plan.lists[branches as usize];
            let Some(&b) = usize::try_from(i).ok().and_then(|i| list.get(i)) else {
                return Err(fault(path)(Problem::UnknownBranch {
                    index: i,
                    branches: list.len(),
                }));
            };
            if depth > plan.max_depth {
                return Err(fault(path)(Problem::TooDeep(plan.max_depth)));
            }
            run(plan, b, buf, pos, cols, depth + 1, ctx)?;
        }
        Op::Refuse { branch, path } => {
            // `at` is past the branch index already; point at the index.
            return Err(Fault {
                at: at.saturating_sub(1),
                path,
                problem: Problem::Refused { branch },
            });
        }
        other => value(plan, other, buf, pos, cols)?,
    }
    Ok(())
}

/// Runs record operation `op` at `depth`: its steps, then its struct row.
#[inline(always)]
fn record(
    plan: &Plan,
    op: u32,
    buf: &[u8],
    pos: &mut usize,
    cols: &mut [Column],
    depth: u32,
    ctx: &mut Ctx,
) -> Result<(), Fault> {
    let Op::Record {
        col,
        steps,
        len,
        nest,
        nulls,
        skips,
        ..
    } = plan.ops[op as usize]
    else {
        return run(plan, op, buf, pos, cols, depth, ctx);
    };
    if depth.saturating_add(nest) > plan.max_depth {
        return Err(Fault {
            at: *pos,
            path: NONE,
            problem: Problem::TooDeep(plan.max_depth),
        });
    }
    let steps = (steps as usize, len as usize);
    match (nulls || ctx.nulls, skips) {
        (true, true) => run_steps::<true, true>(plan, steps, buf, pos, cols, depth, ctx)?,
        (true, false) => run_steps::<true, false>(plan, steps, buf, pos, cols, depth, ctx)?,
        (false, true) => run_steps::<false, true>(plan, steps, buf, pos, cols, depth, ctx)?,
        (false, false) => run_steps::<false, false>(plan, steps, buf, pos, cols, depth, ctx)?,
    }
    if col != NONE {
        push_struct_row(cols, col);
    }
    Ok(())
}

/// Runs the `steps.1` steps from `steps.0` of a record at `depth`. `NULLS`: some step writes a
/// column that can hold nulls, so each keeps its validity; otherwise no column written here
/// ever has a validity bitmap (`Compiler::mark_nulls`), and the steps do not look for one.
/// `SKIPS`: some steps are skips, passed over in line (a loop that reads every field keeps its
/// registers for the reads instead).
/// A function of its own, apart from the rarer operations of [`run`], so that the loop keeps
/// its values in registers.
#[inline(never)]
fn run_steps<const NULLS: bool, const SKIPS: bool>(
    plan: &Plan,
    steps: (usize, usize),
    buf: &[u8],
    pos: &mut usize,
    cols: &mut [Column],
    depth: u32,
    ctx: &mut Ctx,
) -> Result<(), Fault> {
    let (from, len) = steps;
    // The position lives in a local that no call sees (calls get a copy), so that it stays in
    // a register.
    let mut p = *pos;
    let steps = &plan.steps[from..from + len];
    for step in steps {
        let at = p;
        let pos = &mut p;
        // The common reads say only whether they succeeded; a failed one is read again by
        // `step_fault`, off the hot path, to say why.
        // SAFETY (each `unsafe` below): `col` is a record step's column, and `cols` fit the
        // plan (see the module documentation); `SKIPS` only makes the write checked.
        let read = match *step {
            Step::Long { col } => {
                let v = fast_long(buf, pos);
                // SAFETY: as above.
                v.map(|v| unsafe { put::<_, NULLS, SKIPS>(cols, col, v) })
            }
            Step::Int { col } => {
                let v = fast_int(buf, pos);
                // SAFETY: as above.
                v.map(|v| unsafe { put::<_, NULLS, SKIPS>(cols, col, v) })
            }
            Step::Double { col } => {
                let v = fast_array::<8>(buf, pos).map(f64::from_le_bytes);
                // SAFETY: as above.
                v.map(|v| unsafe { put::<_, NULLS, SKIPS>(cols, col, v) })
            }
            Step::Float { col } => {
                let v = fast_array::<4>(buf, pos).map(f32::from_le_bytes);
                // SAFETY: as above.
                v.map(|v| unsafe { put::<_, NULLS, SKIPS>(cols, col, v) })
            }
            // SAFETY: as above.
            Step::Str { col } => unsafe { fast_string::<NULLS, SKIPS>(buf, pos, cols, col, true) },
            // SAFETY: as above.
            Step::Bin { col } => unsafe { fast_string::<NULLS, SKIPS>(buf, pos, cols, col, false) },
            // SAFETY: as above.
            Step::Bool { col } => unsafe { fast_bool::<NULLS, SKIPS>(buf, pos, cols, col) },
            Step::StructRow { col } => {
                push_struct_row(cols, col);
                Some(())
            }
            Step::SkipVarints { n, .. } if SKIPS => skip_varints(buf, pos, n).then_some(()),
            Step::SkipBytes { .. } if SKIPS => skip_bytes(buf, pos).then_some(()),
            Step::SkipFixed { n, .. } if SKIPS => skip_fixed(buf, pos, n),
            // The loop of a record that reads every field has no skip steps: there they are a
            // call of their own, which keeps its registers for the reads.
            Step::SkipVarints { .. } | Step::SkipBytes { .. } | Step::SkipFixed { .. } => {
                skip_apart(step, buf, at).map(|q| *pos = q)
            }
            Step::Op { op, level } => {
                let mut q = at;
                run(
                    plan,
                    op,
                    buf,
                    &mut q,
                    cols,
                    depth.saturating_add(level),
                    ctx,
                )?;
                *pos = q;
                Some(())
            }
        };
        if read.is_none() {
            // The step's index from its address: a counter kept for errors alone would take a
            // register and an instruction a field.
            let i =
                (std::ptr::from_ref(step) as usize - steps.as_ptr() as usize) / size_of::<Step>();
            return Err(step_fault(plan, from + i, buf, at));
        }
    }
    *pos = p;
    Ok(())
}

/// Why step `index` of [`Plan::steps`], which started at byte `at`, failed: its value read
/// again with the reads that say why.
#[cold]
#[inline(never)]
fn step_fault(plan: &Plan, index: usize, buf: &[u8], at: usize) -> Fault {
    let mut pos = at;
    let pos = &mut pos;
    let problem = match plan.steps.get(index) {
        Some(Step::Long { .. }) => read_long(buf, pos).err(),
        Some(Step::Int { .. }) => read_int(buf, pos).err(),
        Some(Step::Double { .. }) => take(buf, pos, 8).err(),
        Some(Step::Float { .. }) => take(buf, pos, 4).err(),
        Some(Step::Bool { .. }) => match buf.get(at) {
            None => Some(Problem::Truncated),
            Some(&b) => Some(Problem::BadBool(b)),
        },
        Some(Step::Str { .. }) => match read_bytes(buf, pos) {
            Err(problem) => Some(problem),
            Ok(b) if std::str::from_utf8(b).is_err() => Some(Problem::InvalidUtf8),
            Ok(_) => Some(Problem::TooLarge),
        },
        Some(Step::Bin { .. }) => Some(read_bytes(buf, pos).err().unwrap_or(Problem::TooLarge)),
        Some(
            Step::SkipVarints { run, .. } | Step::SkipBytes { run } | Step::SkipFixed { run, .. },
        ) => return skip_fault(plan, *run, buf, at),
        _ => None,
    };
    Fault {
        at,
        path: plan.step_paths.get(index).copied().unwrap_or(NONE),
        problem: problem.unwrap_or(Problem::Truncated),
    }
}

/// A varint, or `None` where it is cut short, longer than 10 bytes or past 64 bits. One to
/// eight bytes are read from one word (the stop byte found with a bit scan, the 7-bit groups
/// packed with three masked shifts); the rest byte by byte.
#[inline(always)]
fn fast_varint(buf: &[u8], pos: &mut usize) -> Option<u64> {
    let p = *pos;
    let &b = buf.get(p)?;
    if b < 0x80 {
        *pos = p + 1;
        return Some(u64::from(b));
    }
    // Two bytes (64 to 8191: sizes, counts, small ids) without the packing, also within a
    // message's last 8 bytes, where its last fields are.
    let &b1 = buf.get(p + 1)?;
    if b1 < 0x80 {
        *pos = p + 2;
        return Some(u64::from(b & 0x7f) | u64::from(b1) << 7);
    }
    if let Some(w) = buf.get(p..).and_then(<[u8]>::first_chunk::<8>) {
        let word = u64::from_le_bytes(*w);
        let stops = !word & 0x8080_8080_8080_8080;
        if stops != 0 {
            let bytes = stops.trailing_zeros() / 8 + 1;
            *pos = p + bytes as usize;
            // The varint's bytes only (bytes is 2 to 8), their high bits cleared.
            let x = (word & (u64::MAX >> (64 - 8 * bytes))) & 0x7f7f_7f7f_7f7f_7f7f;
            let x = (x & 0x007f_007f_007f_007f) | ((x & 0x7f00_7f00_7f00_7f00) >> 1);
            let x = (x & 0x0000_3fff_0000_3fff) | ((x & 0x3fff_0000_3fff_0000) >> 2);
            return Some((x & 0x0000_0000_0fff_ffff) | ((x & 0x0fff_ffff_0000_0000) >> 4));
        }
    }
    read_long(buf, pos)
        .ok()
        .map(|v| ((v << 1) ^ (v >> 63)) as u64)
}

/// [`fast_varint`] as a zigzag `long`.
#[inline(always)]
fn fast_long(buf: &[u8], pos: &mut usize) -> Option<i64> {
    let v = fast_varint(buf, pos)?;
    Some((v >> 1) as i64 ^ -((v & 1) as i64))
}

/// [`fast_long`] within an `int`'s range.
#[inline(always)]
fn fast_int(buf: &[u8], pos: &mut usize) -> Option<i32> {
    i32::try_from(fast_long(buf, pos)?).ok()
}

/// `N` bytes at `*pos`, as an array.
#[inline(always)]
fn fast_array<const N: usize>(buf: &[u8], pos: &mut usize) -> Option<[u8; N]> {
    let b = buf.get(*pos..)?.first_chunk::<N>()?;
    *pos += N;
    Some(*b)
}

/// A `boolean` into column `col`.
///
/// # Safety
/// As [`step_column`], for a Bool column.
#[inline(always)]
unsafe fn fast_bool<const NULLS: bool, const CHECKED: bool>(
    buf: &[u8],
    pos: &mut usize,
    cols: &mut [Column],
    col: u32,
) -> Option<()> {
    let b = *buf.get(*pos)?;
    if b > 1 {
        return None;
    }
    *pos += 1;
    // SAFETY: as this function's.
    let c = unsafe { step_column::<CHECKED>(cols, col) };
    let Values::Bool(bits) = &mut c.values else {
        if CHECKED {
            // Cannot happen (`Plan::check_steps`); the value is not written.
            return Some(());
        }
        // SAFETY: the variant the step writes, as this function's caller promises.
        unsafe { std::hint::unreachable_unchecked() }
    };
    bits.push(b == 1);
    valid::<NULLS>(c);
    Some(())
}

/// Column `col`, for a record step. Unchecked unless `CHECKED`: a message's steps spend about
/// one instruction in twenty checking bounds and variants, which are checked once per plan
/// instead. The loop that also skips (`SKIPS` of [`run_steps`]) keeps the checks: without them
/// its registers went otherwise, and 5 of 50 columns took 3.6% more instructions a message.
///
/// # Safety
/// Unless `CHECKED`: `col` is the column of a record step of a plan that `cols` fit
/// ([`State::fits`]). It is then in bounds, and the column has the variant the step writes
/// ([`Plan::check_steps`]), which the callers rely on too.
#[inline(always)]
unsafe fn step_column<const CHECKED: bool>(cols: &mut [Column], col: u32) -> &mut Column {
    if CHECKED {
        return &mut cols[col as usize];
    }
    debug_assert!(
        (col as usize) < cols.len(),
        "a step's column past the columns"
    );
    // SAFETY: in bounds, as the caller promises.
    unsafe { cols.get_unchecked_mut(col as usize) }
}

/// A `string` or `bytes` into a Utf8 (`utf8`: checked) or Binary column. Short values are
/// checked and copied as one chunk ([`crate::strings`]).
///
/// # Safety
/// As [`step_column`], for a Utf8 or Binary column.
#[inline(always)]
unsafe fn fast_string<const NULLS: bool, const CHECKED: bool>(
    buf: &[u8],
    pos: &mut usize,
    cols: &mut [Column],
    col: u32,
    utf8: bool,
) -> Option<()> {
    let n = usize::try_from(fast_long(buf, pos)?).ok()?;
    let start = *pos;
    let end = start.checked_add(n).filter(|&end| end <= buf.len())?;
    if utf8 {
        let ascii = short_chunk(buf, start, n).is_some_and(|c| is_ascii_prefix(c, n));
        if !ascii && utf8_error_at(buf, start, end).is_some() {
            return None;
        }
    }
    // SAFETY: as this function's.
    let c = unsafe { step_column::<CHECKED>(cols, col) };
    let Values::Bytes { offsets, data } = &mut c.values else {
        if CHECKED {
            // Cannot happen (`Plan::check_steps`); the value is passed over, not written.
            *pos = end;
            return Some(());
        }
        // SAFETY: the variant the step writes, as this function's caller promises.
        unsafe { std::hint::unreachable_unchecked() }
    };
    append_bytes(data, buf, start, end);
    if !push_offset(offsets, data.len()) {
        return None;
    }
    valid::<NULLS>(c);
    *pos = end;
    Some(())
}

/// Appends `v` to column `col`; `NULLS`: the column may have a validity bitmap to extend.
///
/// # Safety
/// As [`step_column`], for a column of `T`.
#[inline(always)]
unsafe fn put<T: Native, const NULLS: bool, const CHECKED: bool>(
    cols: &mut [Column],
    col: u32,
    v: T,
) {
    // SAFETY: as this function's.
    let c = unsafe { step_column::<CHECKED>(cols, col) };
    let Some(values) = T::vec(&mut c.values) else {
        if CHECKED {
            // Cannot happen (`Plan::check_steps`); the value is not written.
            return;
        }
        // SAFETY: the variant the step writes, as this function's caller promises.
        unsafe { std::hint::unreachable_unchecked() }
    };
    values.push(v);
    valid::<NULLS>(c);
}

/// Marks the row just appended to `c` valid, where `c` may have a validity bitmap (`NULLS`).
#[inline(always)]
fn valid<const NULLS: bool>(c: &mut Column) {
    if NULLS {
        c.valid();
    } else {
        debug_assert!(
            c.nulls.is_none(),
            "a column the plan never nulls has a bitmap"
        );
    }
}

/// Passes over the values of skip step `step` from `at`, a call of its own: where they end.
/// (It takes and returns the position, so that the loop's stays in a register.)
#[inline(never)]
fn skip_apart(step: &Step, buf: &[u8], at: usize) -> Option<usize> {
    let mut q = at;
    let pos = &mut q;
    match *step {
        Step::SkipVarints { n, .. } => skip_varints(buf, pos, n).then_some(()),
        Step::SkipBytes { .. } => skip_bytes(buf, pos).then_some(()),
        Step::SkipFixed { n, .. } => skip_fixed(buf, pos, n),
        _ => None,
    }?;
    Some(q)
}

/// Passes over `n` bytes.
#[inline(always)]
fn skip_fixed(buf: &[u8], pos: &mut usize, n: u32) -> Option<()> {
    let end = pos
        .checked_add(n as usize)
        .filter(|&end| end <= buf.len())?;
    *pos = end;
    Some(())
}

/// Passes over a length and that many bytes; a length under 64 (one byte) without a call.
#[inline(always)]
fn skip_bytes(buf: &[u8], pos: &mut usize) -> bool {
    let p = *pos;
    match buf.get(p) {
        Some(&b) if b < 0x80 => {
            // A one-byte zigzag length: odd is negative.
            let end = p + 1 + usize::from(b >> 1);
            if b & 1 != 0 || end > buf.len() {
                return false;
            }
            *pos = end;
            true
        }
        _ => read_bytes(buf, pos).is_ok(),
    }
}

/// Passes over the skips of run `r` one by one from `start`, to name the field and offset
/// where the run failed.
#[cold]
#[inline(never)]
fn skip_fault(plan: &Plan, run: u32, buf: &[u8], start: usize) -> Fault {
    let r = plan.runs[run as usize];
    let mut pos = start;
    for i in r.skips.0 as usize..r.skips.1 as usize {
        let at = pos;
        let passed = match plan.skips[i] {
            Skip::Varint => read_long(buf, &mut pos).map(drop),
            Skip::Bytes => read_bytes(buf, &mut pos).map(drop),
            Skip::Fixed(n) => take(buf, &mut pos, n as usize).map(drop),
        };
        if let Err(problem) = passed {
            return Fault {
                at,
                path: plan.skip_paths[i],
                problem,
            };
        }
    }
    // Unreachable while the two passes agree; an error all the same.
    Fault {
        at: pos,
        path: NONE,
        problem: Problem::Truncated,
    }
}

/// Passes over `n` varints, counting their last bytes (high bit clear) a word at a time. Each
/// word is taken at the start of a varint, so one that ends within it is at most 8 bytes; a
/// longer one is checked by its ninth and tenth bytes. In a message's last 8 bytes they are
/// found byte by byte. False where one fails.
#[inline(always)]
fn skip_varints(buf: &[u8], pos: &mut usize, mut n: u32) -> bool {
    let mut p = *pos;
    while n > 0 {
        let Some(w) = buf.get(p..).and_then(<[u8]>::first_chunk::<8>) else {
            let Some(end) = short_varint_end(buf, p) else {
                return false;
            };
            p = end;
            n -= 1;
            continue;
        };
        let stops = !u64::from_le_bytes(*w) & 0x8080_8080_8080_8080;
        if stops == 0 {
            // Nine or ten bytes (a long of 2^55 or more: hashes, ids, negative values): the
            // ninth byte ends it, or the tenth, which may only hold the 64th bit.
            let Some(&b8) = buf.get(p + 8) else {
                return false;
            };
            if b8 < 0x80 {
                p += 9;
            } else if buf.get(p + 9).is_some_and(|&b9| b9 <= 1) {
                p += 10;
            } else {
                return false;
            }
            n -= 1;
            continue;
        }
        // The stop bits are bits 7, 15, ..., 63; one multiply gathers them into a byte whose
        // bit k says that byte k ends a varint.
        let ends = ((stops >> 7).wrapping_mul(0x0102_0408_1020_4080) >> 56) as usize;
        if n <= 8 {
            let past = VARINT_ENDS[ends][n as usize - 1];
            if past != 0 {
                p += usize::from(past);
                break;
            }
        }
        p += ((63 - stops.leading_zeros()) / 8) as usize + 1;
        n -= u32::from(VARINT_END_COUNT[ends]);
    }
    *pos = p;
    true
}

/// Where the varint at `p` ends, fewer than 8 bytes before the end of `buf`: at the first byte
/// with the high bit clear (so it is at most 7 bytes), or `None`, cut short.
#[inline(never)]
fn short_varint_end(buf: &[u8], p: usize) -> Option<usize> {
    let rest = buf.get(p..)?;
    Some(p + rest.iter().position(|&b| b < 0x80)? + 1)
}

/// For each byte of varint ends (bit k: byte k of a word ends a varint), the bytes from the
/// word's start past the first, second, ... eighth varint to end in it (0: fewer end there).
/// Looked up, the n-th end costs one load instead of clearing n - 1 bits in turn.
static VARINT_ENDS: [[u8; 8]; 256] = {
    let mut t = [[0u8; 8]; 256];
    let mut m = 0;
    while m < 256 {
        let (mut k, mut bit) = (0, 0);
        while bit < 8 {
            if m & (1 << bit) != 0 {
                t[m][k] = bit as u8 + 1;
                k += 1;
            }
            bit += 1;
        }
        m += 1;
    }
    t
};

/// For each byte of varint ends, how many there are: a load, where `count_ones` without the
/// `popcnt` instruction (not in the x86-64 baseline) is a dozen.
static VARINT_END_COUNT: [u8; 256] = {
    let mut t = [0u8; 256];
    let mut m = 0;
    while m < 256 {
        t[m] = (m as u8).count_ones() as u8;
        m += 1;
    }
    t
};

/// Reads one value (anything but a record, array, map or union). Inlined into the record loop
/// of optimised builds; a call of its own in debug builds, whose frames are large.
#[cfg_attr(not(debug_assertions), inline(always))]
fn value(
    plan: &Plan,
    op: Op,
    buf: &[u8],
    pos: &mut usize,
    cols: &mut [Column],
) -> Result<(), Fault> {
    let at = *pos;
    let fault = |path: u32| move |problem| Fault { at, path, problem };
    match op {
        Op::Null { cols: list } => {
            for &c in &plan.lists[list as usize] {
                columns::push_null(cols, c as usize);
            }
        }
        Op::Bool { col, path } => {
            let b = *buf.get(at).ok_or(Problem::Truncated).map_err(fault(path))?;
            if b > 1 {
                return Err(fault(path)(Problem::BadBool(b)));
            }
            *pos = at + 1;
            let c = &mut cols[col as usize];
            if let Values::Bool(bits) = &mut c.values {
                bits.push(b == 1);
            }
            c.valid();
        }
        Op::Int { col, to, path } => {
            let v = read_int(buf, pos).map_err(fault(path))?;
            store_num(cols, col, i64::from(v), to).map_err(fault(path))?;
        }
        Op::Long { col, to, path } => {
            let v = read_long(buf, pos).map_err(fault(path))?;
            store_num(cols, col, v, to).map_err(fault(path))?;
        }
        Op::Float { col, to, path } => {
            let b = take(buf, pos, 4).map_err(fault(path))?;
            let v = f32::from_le_bytes([b[0], b[1], b[2], b[3]]);
            match to {
                Num::F64 => push(cols, col, f64::from(v)),
                _ => push(cols, col, v),
            }
        }
        Op::Double { col, path } => {
            let b = take(buf, pos, 8).map_err(fault(path))?;
            let mut a = [0u8; 8];
            a.copy_from_slice(b);
            push(cols, col, f64::from_le_bytes(a));
        }
        Op::Bytes { col, utf8, path } => {
            let b = read_bytes(buf, pos).map_err(fault(path))?;
            if utf8 && utf8_error_at(b, 0, b.len()).is_some() {
                return Err(fault(path)(Problem::InvalidUtf8));
            }
            push_bytes(cols, col, b).map_err(fault(path))?;
        }
        Op::Fixed { col, size, path } => {
            let b = take(buf, pos, size as usize).map_err(fault(path))?;
            push_bytes(cols, col, b).map_err(fault(path))?;
        }
        Op::Decimal {
            wide,
            col,
            size,
            precision,
            path,
        } => {
            let b = if size == 0 {
                read_bytes(buf, pos)
            } else {
                take(buf, pos, size as usize)
            }
            .map_err(fault(path))?;
            let v = decimal_value(b, precision).map_err(fault(path))?;
            if wide {
                push(cols, col, v);
            } else {
                push(cols, col, v.as_i128());
            }
        }
        Op::Duration { col, path } => {
            let b = take(buf, pos, 12).map_err(fault(path))?;
            let word = |i: usize| u32::from_le_bytes([b[i], b[i + 1], b[i + 2], b[i + 3]]);
            let (months, days, millis) = (word(0), word(4), word(8));
            let (Ok(months), Ok(days)) = (i32::try_from(months), i32::try_from(days)) else {
                return Err(fault(path)(Problem::OutOfRange));
            };
            let nanos = i64::from(millis) * 1_000_000;
            // Arrow's MonthDayNano layout: months, days (i32 each), then nanoseconds (i64),
            // little-endian: as one i128, months in the low 32 bits.
            let v = i128::from(months as u32)
                | (i128::from(days as u32) << 32)
                | (i128::from(nanos as u64) << 64);
            push(cols, col, v);
        }
        Op::Enum { col, symbols, path } => {
            let i = read_long(buf, pos).map_err(fault(path))?;
            let table = &plan.enums[symbols as usize];
            let Some(entry) = usize::try_from(i).ok().and_then(|i| table.get(i)) else {
                return Err(fault(path)(Problem::UnknownSymbol {
                    index: i,
                    symbols: table.len(),
                }));
            };
            let Some(s) = entry else {
                return Err(fault(path)(Problem::SymbolNotRead { index: i }));
            };
            push_bytes(cols, col, s).map_err(fault(path))?;
        }
        Op::SkipVarint { path } => {
            read_long(buf, pos).map_err(fault(path))?;
        }
        Op::SkipBytes { path } => {
            read_bytes(buf, pos).map_err(fault(path))?;
        }
        Op::SkipFixed { size, path } => {
            take(buf, pos, size as usize).map_err(fault(path))?;
        }
        Op::Fill { col, value: NONE } => columns::push_null(cols, col as usize),
        Op::Fill { col, value } => match &plan.consts[value as usize] {
            Const::Bool(b) => {
                let c = &mut cols[col as usize];
                if let Values::Bool(bits) = &mut c.values {
                    bits.push(*b);
                }
                c.valid();
            }
            Const::I32(v) => push(cols, col, *v),
            Const::I64(v) => push(cols, col, *v),
            Const::F32(v) => push(cols, col, *v),
            Const::F64(v) => push(cols, col, *v),
            Const::Bytes(b) => push_bytes(cols, col, b).map_err(fault(NONE))?,
            Const::Empty => close_list(cols, col).map_err(fault(NONE))?,
        },
        Op::Record { .. }
        | Op::Array { .. }
        | Op::Map { .. }
        | Op::Union { .. }
        | Op::Refuse { .. } => {
            unreachable!("nesting operations are run by `run`")
        }
    }
    Ok(())
}

fn fault_at(at: usize, path: u32) -> impl Fn(Problem) -> Fault {
    move |problem| Fault { at, path, problem }
}

/// What the header of an array's or a map's next block says.
enum Block {
    /// The count 0: the array or map ends.
    End,
    /// A block that gave its byte size, skipped whole (nothing reads its items).
    Skipped,
    /// This many items follow.
    Items(u64),
}

/// Reads a block header at `*pos`: its count (negative: followed by the block's byte size,
/// which lets a block nobody reads (`skip`) be skipped whole), checked against the bytes left
/// ([`check_count`]).
#[inline]
fn next_block(
    buf: &[u8],
    pos: &mut usize,
    skip: bool,
    item_bytes: u32,
    empty: &mut u64,
) -> Result<Block, Problem> {
    let count = read_long(buf, pos)?;
    if count == 0 {
        return Ok(Block::End);
    }
    if count < 0 {
        let size = read_long(buf, pos)?;
        let size = usize::try_from(size).map_err(|_| Problem::NegativeLength(size))?;
        if skip {
            take(buf, pos, size)?;
            return Ok(Block::Skipped);
        }
    }
    let n = count.unsigned_abs();
    check_count(n, item_bytes, buf.len() - *pos, empty)?;
    Ok(Block::Items(n))
}

/// A block of `n` items of at least `item_bytes` bytes each must fit in the `remaining` bytes;
/// items of no bytes are limited per message instead.
#[inline]
fn check_count(n: u64, item_bytes: u32, remaining: usize, empty: &mut u64) -> Result<(), Problem> {
    if item_bytes == 0 {
        *empty += n;
        if *empty > MAX_EMPTY_ITEMS {
            return Err(Problem::TooManyItems);
        }
    } else if n.saturating_mul(u64::from(item_bytes)) > remaining as u64 {
        return Err(Problem::LengthPastEnd {
            length: n.saturating_mul(u64::from(item_bytes)),
            remaining,
        });
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::{read_long, skip_varints, State};
    use crate::avro::plan::{compile, Missing};
    use crate::avro::AvroSchema;
    use crate::ColumnSpec;
    use arrow_schema::DataType;

    /// Columns made for one plan take rows of another plan of the same column types (compiled
    /// apart, as for another schema id), and refuse those of a plan of other types, whose
    /// steps would write a column of another variant.
    #[test]
    fn columns_take_only_plans_they_fit() {
        let plan = |field: &str, ty: DataType| {
            let schema = AvroSchema::parse(&format!(
                r#"{{"type": "record", "name": "R", "fields": [{{"name": "a", "type": "{field}"}}]}}"#
            ))
            .expect("schema");
            let columns = [ColumnSpec {
                name: "a".into(),
                data_type: ty,
                path: None,
            }];
            compile(&schema, None, &columns, Missing::Error, 16, 64).expect("plan")
        };
        let longs = plan("long", DataType::Int64);
        let mut state = State::new(&longs);
        state.decode_row(&longs, &[0x04]).expect("its own plan");
        let same = plan("long", DataType::Int64);
        state
            .decode_row(&same, &[0x06])
            .expect("a plan of the same types");
        state
            .decode_row(&same, &[0x08])
            .expect("again, from the cache");
        let strings = plan("string", DataType::Utf8);
        let err = state
            .decode_row(&strings, &[0x02, b'x'])
            .expect_err("a plan of other types");
        assert!(err.to_string().contains("other column types"), "{err}");
        assert_eq!(state.rows, 3);
    }

    /// Varints of every length from 1 to 10 bytes (and broken ones: an 11-byte run, a tenth
    /// byte past bit 63, a cut end), passed over `n` at a time from every start: `skip_varints`
    /// ends where `n` calls of `read_long` end, and fails where one of them fails.
    #[test]
    fn skipping_varints_agrees_with_reading_them() {
        let mut seed = 0x9e37_79b9_7f4a_7c15u64;
        let mut next = move || {
            seed ^= seed << 13;
            seed ^= seed >> 7;
            seed ^= seed << 17;
            seed
        };
        for round in 0..2000 {
            let mut buf = Vec::new();
            for _ in 0..next() % 24 {
                let len = 1 + next() % 10;
                for i in 0..len {
                    let last = i + 1 == len;
                    let mut b = (next() & 0x7f) as u8;
                    if last && len == 10 {
                        b &= 1;
                    }
                    buf.push(if last { b } else { b | 0x80 });
                }
                match next() % 64 {
                    0 => buf.extend_from_slice(&[0xff; 11]),
                    1 => buf.extend_from_slice(&[
                        0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0x02,
                    ]),
                    _ => {}
                }
            }
            if round % 5 == 0 {
                buf.push(0x80);
            }
            for start in 0..buf.len() {
                for n in 1..12u32 {
                    let mut want = start;
                    let ok = (0..n).all(|_| read_long(&buf, &mut want).is_ok());
                    let mut got = start;
                    assert_eq!(
                        skip_varints(&buf, &mut got, n),
                        ok,
                        "{buf:02x?} from {start}, {n} varints"
                    );
                    if ok {
                        assert_eq!(got, want, "{buf:02x?} from {start}, {n} varints");
                    }
                }
            }
        }
    }
}
