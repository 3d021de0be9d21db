//! Compiling (message descriptor + requested columns) into a decode plan, once, at start-up.
//! This file holds the plan's data; `types.rs` the type mapping, `bind.rs` the binding of columns
//! to fields, `direct.rs` the passes that make the plan cheaper to run.
//!
//! The plan has three parts:
//! - one field table per message *position* (the root message, each sub-message reached through
//!   a requested path, each repeated element type): a dense array indexed by field number whose
//!   entries say which conversion to run and where the value goes;
//! - *scopes*: a row of the top-level message, or one element of a repeated message / map. A
//!   scope owns a small array of value *slots*. Singular fields write their latest value into a
//!   slot (so the last occurrence wins, and a sub-message seen twice merges into the same slots),
//!   and when the scope ends its *commit ops* append one value per column from the slots.
//!   Repeated scalars append straight into their list's child column;
//! - the column buffers those ops append to.

mod bind;
mod direct;
mod types;

use arrow_schema::{SchemaRef, TimeUnit};
use prost_reflect::{EnumDescriptor, MessageDescriptor};

use crate::columns::Column;

pub(crate) use bind::build;
pub(crate) use types::default_type;

/// "No slot": the value has no guard / is always present.
pub(crate) const NONE: u32 = u32::MAX;

/// Field numbers below this get a dense table entry; larger ones go to a sorted fallback.
const DENSE_LIMIT: u32 = 4096;

/// How a varint becomes a slot value. Truncation to 32 bits happens when the value is appended
/// to its column, so int32, uint32, int64, uint64, bool and enum all store the raw varint.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum VarintConv {
    Raw,
    Zigzag32,
    Zigzag64,
}

/// What to do with one field number.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Op {
    /// Not requested or unknown: skip without decoding.
    Skip,
    /// Singular varint into `slot`.
    Varint(VarintConv),
    /// Singular 4-byte value (raw bits) into `slot`.
    Fixed32,
    /// Singular 8-byte value (raw bits) into `slot`.
    Fixed64,
    /// Singular string: UTF-8 checked, its (offset, length) into `slot`.
    Str,
    /// Singular bytes: (offset, length) into `slot`.
    Bytes,
    /// Singular sub-message decoded with field table `target`; `slot` marks presence (and
    /// holds where the field's tag starts, for errors found at commit).
    SubMsg,
    /// Singular sub-message kept as JSON text: byte ranges recorded for `slot`; checked
    /// against descriptor `target`.
    Json,
    /// Repeated varint appended to column `target`.
    RepVarint(VarintConv),
    /// Repeated 4-byte values appended to column `target`.
    RepFixed32,
    /// Repeated 8-byte values appended to column `target`.
    RepFixed64,
    /// Repeated string appended to column `target`.
    RepStr,
    /// Repeated bytes appended to column `target`.
    RepBytes,
    /// Repeated enum as its name: column `target`, enum table `slot`.
    RepEnumName,
    /// Repeated message (or map entry) decoded as scope `target`.
    RepMsg,
    /// Repeated message as JSON text: column `target`, descriptor `slot`.
    RepJson,
    // Direct writes: a singular scalar read by exactly one plain column overwrites that
    // column's current row (pre-filled with the default when the row started), so it needs no
    // slot and no commit. `target` is the column; `slot` is 1 when a write must set the row's
    // validity bit: the column is nullable and not guarded (a proto2 or proto3 `optional` field
    // without a declared default; a guarded one is valid through its sub-message's presence).
    // Named by wire encoding, then column type.
    /// varint -> Int32 (int32, enum number).
    DVarI32,
    /// varint -> Int64 / Timestamp.
    DVarI64,
    /// varint -> UInt32.
    DVarU32,
    /// varint -> UInt64.
    DVarU64,
    /// varint -> Boolean.
    DVarBool,
    /// zigzag varint -> Int32.
    DZig32,
    /// zigzag varint -> Int64.
    DZig64,
    /// 4 bytes -> Float32.
    DF32,
    /// 4 bytes -> UInt32 (fixed32).
    DFixU32,
    /// 4 bytes -> Int32 (sfixed32).
    DFixI32,
    /// 8 bytes -> Float64.
    DF64,
    /// 8 bytes -> UInt64 (fixed64).
    DFixU64,
    /// 8 bytes -> Int64 (sfixed64).
    DFixI64,
    /// string -> Utf8.
    DStr,
    /// bytes -> Binary.
    DBytes,
    // proto2 groups: decoded on the checked path (a group entry has no fast tag), so they come
    // last, out of the way of the field loop's dispatch.
    /// Singular proto2 group: as [`Op::SubMsg`], its body delimited by an end-group tag
    /// (decoded on the checked path: a group entry has no fast tag).
    Group,
    /// Repeated proto2 group decoded as scope `target`.
    RepGroup,
}

/// One field-table entry.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Entry {
    /// The whole tag (field number and wire type) that takes the fast path: the expected wire
    /// type, not in a oneof. `u64::MAX` for entries that always take the checked path.
    pub(crate) fast_tag: u64,
    pub(crate) op: Op,
    /// The wire type the field must arrive with (packed repeated scalars also accept LEN).
    pub(crate) wire: u8,
    pub(crate) slot: u32,
    pub(crate) target: u32,
    /// Index into `Plan::names` (for errors).
    pub(crate) name: u32,
    /// 1 + index into `Plan::oneofs`, or 0.
    pub(crate) oneof: u32,
}

const SKIP: Entry = Entry {
    fast_tag: u64::MAX,
    op: Op::Skip,
    wire: 0,
    slot: NONE,
    target: NONE,
    name: NONE,
    oneof: 0,
};

/// The field table of one message position.
#[derive(Debug)]
pub(crate) struct MsgPlan {
    dense: Box<[Entry]>,
    sparse: Box<[(u32, Entry)]>,
}

impl MsgPlan {
    /// The entry for a raw tag (any u64 off the wire).
    #[inline(always)]
    pub(crate) fn lookup_tag(&self, tag: u64) -> &Entry {
        let field = tag >> 3;
        if field < self.dense.len() as u64 {
            &self.dense[field as usize]
        } else {
            self.lookup_sparse(field)
        }
    }

    #[inline(never)]
    fn lookup_sparse(&self, field: u64) -> &Entry {
        if self.sparse.is_empty() || field > u32::MAX as u64 {
            return &SKIP;
        }
        let field = field as u32;
        match self.sparse.binary_search_by_key(&field, |(f, _)| *f) {
            Ok(i) => &self.sparse[i].1,
            Err(_) => &SKIP,
        }
    }
}

/// A value a column gets when its field is absent.
#[derive(Clone, Copy, Debug)]
pub(crate) enum DefaultVal {
    Null,
    Bits(u64),
    /// Index into `Plan::str_defaults`.
    Str(u32),
}

/// Appends one value per column when a scope ends.
#[derive(Clone, Copy, Debug)]
pub(crate) enum CommitOp {
    /// The enum number in `slot` written as its name; if unset: `default` when `guard` is NONE
    /// or set, else null. (Plain scalar columns are [`LeafPlan`]s, not commit ops.)
    EnumName {
        col: u32,
        slot: u32,
        guard: u32,
        default: DefaultVal,
        table: u32,
    },
    /// A struct row: valid when `presence` is NONE or set.
    Struct { col: u32, presence: u32 },
    /// Closes a list or map row at the child's current length (a map's repeated keys are
    /// settled when the batch is taken: [`Plan::maps`]).
    ListEnd { col: u32 },
    /// google.protobuf.Timestamp / Duration from (seconds, nanos) slots.
    Time {
        col: u32,
        secs: u32,
        nanos: u32,
        presence: u32,
        unit: TimeUnit,
        name: u32,
    },
    /// A sub-message rendered as JSON text from the byte ranges recorded for `slot`.
    Json { col: u32, slot: u32, desc: u32 },
}

/// A singular scalar column committed from a slot. Kept out of [`CommitOp`] and grouped by
/// column type, so the commit of ordinary columns is a few tight loops with no indirect jump.
#[derive(Clone, Copy, Debug)]
pub(crate) struct LeafPlan {
    pub(crate) col: u32,
    pub(crate) slot: u32,
    /// Presence slot that must be set for an absent value to take its default (NONE: always).
    pub(crate) guard: u32,
    /// The default's bits (for Utf8/Binary: offset 0, length 0, the empty string).
    pub(crate) default: u64,
    /// An absent value is null rather than the default.
    pub(crate) null_default: bool,
    /// Index into `Plan::str_defaults` for a non-empty string default, or NONE.
    pub(crate) str_default: u32,
}

/// The [`LeafPlan`]s of a scope, by column storage.
#[derive(Debug, Default)]
pub(crate) struct Leaves {
    pub(crate) i32: Vec<LeafPlan>,
    pub(crate) i64: Vec<LeafPlan>,
    pub(crate) u32: Vec<LeafPlan>,
    pub(crate) u64: Vec<LeafPlan>,
    pub(crate) f32: Vec<LeafPlan>,
    pub(crate) f64: Vec<LeafPlan>,
    pub(crate) bool: Vec<LeafPlan>,
    pub(crate) bytes: Vec<LeafPlan>,
}

/// Values pushed to the direct-write columns of a scope when a row (or element) starts.
#[derive(Debug, Default)]
pub(crate) struct Prefill {
    pub(crate) i32: Vec<(u32, i32)>,
    pub(crate) i64: Vec<(u32, i64)>,
    pub(crate) u32: Vec<(u32, u32)>,
    pub(crate) u64: Vec<(u32, u64)>,
    pub(crate) f32: Vec<(u32, f32)>,
    pub(crate) f64: Vec<(u32, f64)>,
    pub(crate) bool: Vec<(u32, bool)>,
    /// Utf8/Binary columns with a non-empty default: (column, index into `str_defaults`).
    pub(crate) bytes: Vec<(u32, u32)>,
    /// Nullable direct columns: start the row null (in the top scope, not the columns that
    /// copy another's validity: see [`Plan::shared_validity`]).
    pub(crate) invalid: Vec<u32>,
    /// Direct Utf8/Binary columns: the row's end offset is pushed at commit.
    pub(crate) string_ends: Vec<u32>,
    /// (column, presence slot): a direct column on a path is valid (holding its default) once
    /// the sub-message that holds it was seen (in the top scope, one column per presence slot:
    /// see [`Plan::shared_validity`]).
    pub(crate) guards: Vec<(u32, u32)>,
}

/// One scope: its root field table, slot count and commit ops.
#[derive(Debug)]
pub(crate) struct ScopePlan {
    pub(crate) root: u32,
    pub(crate) nslots: u32,
    pub(crate) prefill: Prefill,
    pub(crate) leaves: Leaves,
    pub(crate) ops: Vec<CommitOp>,
    /// Whether any leaf or commit op reads the value slots (if not, the commit is only the
    /// direct columns' string ends and guards).
    pub(crate) has_slots: bool,
}

/// One member of a oneof: its field number, the slots it sets and, for a message member, the
/// list columns below it (whose elements of the current row are dropped when it is displaced).
#[derive(Debug)]
pub(crate) struct OneofMember {
    pub(crate) field: u32,
    pub(crate) slots: Vec<u32>,
    pub(crate) lists: Vec<u32>,
}

/// A oneof: setting one member clears the slots of the others.
#[derive(Debug)]
pub(crate) struct OneofPlan {
    pub(crate) members: Vec<OneofMember>,
}

/// Names of an enum's values by number.
#[derive(Debug)]
pub(crate) struct EnumNames {
    min: i32,
    dense: Vec<Option<Box<str>>>,
    sparse: Vec<(i32, Box<str>)>,
}

impl EnumNames {
    fn new(e: &EnumDescriptor) -> Self {
        let mut vals: Vec<(i32, Box<str>)> = Vec::new();
        for v in e.values() {
            // The first name declared for a number wins (allow_alias).
            if !vals.iter().any(|(n, _)| *n == v.number()) {
                vals.push((v.number(), v.name().into()));
            }
        }
        vals.sort_by_key(|(n, _)| *n);
        let min = vals.first().map_or(0, |v| v.0);
        let max = vals.last().map_or(0, |v| v.0);
        if (max as i64 - min as i64) < 1024 {
            let mut dense = vec![None; (max as i64 - min as i64 + 1) as usize];
            for (n, name) in vals {
                dense[(n as i64 - min as i64) as usize] = Some(name);
            }
            Self {
                min,
                dense,
                sparse: Vec::new(),
            }
        } else {
            Self {
                min,
                dense: Vec::new(),
                sparse: vals,
            }
        }
    }

    #[inline]
    pub(crate) fn name(&self, n: i32) -> Option<&str> {
        if !self.dense.is_empty() {
            let i = n as i64 - self.min as i64;
            if i >= 0 && (i as usize) < self.dense.len() {
                return self.dense[i as usize].as_deref();
            }
            return None;
        }
        self.sparse
            .binary_search_by_key(&n, |(k, _)| *k)
            .ok()
            .map(|i| &*self.sparse[i].1)
    }
}

/// The compiled plan. Immutable; shared by every decoder built from it.
#[derive(Debug)]
pub(crate) struct Plan {
    pub(crate) msgs: Vec<MsgPlan>,
    pub(crate) scopes: Vec<ScopePlan>,
    pub(crate) columns: Vec<Column>,
    pub(crate) top: Vec<usize>,
    pub(crate) schema: SchemaRef,
    pub(crate) enums: Vec<EnumNames>,
    pub(crate) json: Vec<MessageDescriptor>,
    pub(crate) str_defaults: Vec<Vec<u8>>,
    pub(crate) names: Vec<String>,
    pub(crate) oneofs: Vec<OneofPlan>,
    pub(crate) max_depth: usize,
    /// Rows a batch holds (the column buffers are reserved for this many).
    pub(crate) batch_capacity: usize,
    /// (follower, leader): top-scope direct columns guarded by the same sub-message, so with
    /// the same validity. Only the leader's is kept row by row; the follower gets a copy when
    /// the batch is taken (rows / 8 bytes per column per batch, about 1 KiB at 8192 rows,
    /// instead of a bit written per row).
    pub(crate) shared_validity: Vec<(u32, u32)>,
    /// (map column, its key column) of every map column: before a batch is taken, each row
    /// keeps only the last entry of each key.
    pub(crate) maps: Vec<(u32, u32)>,
}
