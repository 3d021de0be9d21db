//! Compiling (message descriptor + requested columns) into a decode plan, once, at start-up.
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

use std::collections::BTreeMap;
use std::sync::Arc;

use arrow_schema::{DataType, Field, Fields, Schema, SchemaRef, TimeUnit};
use prost_reflect::{EnumDescriptor, FieldDescriptor, Kind, MessageDescriptor, Syntax, Value};

use super::wire::{WT_I32, WT_I64, WT_LEN, WT_SGROUP, WT_VARINT};
use super::ColumnSpec;
use crate::columns::{Bits, Column, Values};
use crate::error::PlanError;

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
    /// Singular proto2 group: as [`Op::SubMsg`], its body delimited by an end-group tag.
    Group,
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
    /// Repeated proto2 group decoded as scope `target`.
    RepGroup,
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
    /// Closes a list row at the child's current length.
    ListEnd { col: u32 },
    /// Closes a map row as [`CommitOp::ListEnd`] does, then keeps only the last entry of each
    /// key in the row (`key`: the key column), as protobuf's merge rule says.
    MapEnd { col: u32, key: u32 },
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
}

// ---------------------------------------------------------------------------------------------
// Building

struct MsgBuild {
    entries: BTreeMap<u32, Entry>,
    scope: usize,
    parent: Option<usize>,
    /// Every slot allocated in this message and below (for clearing a oneof member).
    subtree: Vec<u32>,
    /// Every list/map column bound in this message and below.
    subtree_lists: Vec<u32>,
    presence: u32,
    /// Column names bound to each repeated field (conflict detection).
    repeated_owner: BTreeMap<u32, String>,
}

struct ScopeBuild {
    root: usize,
    nslots: u32,
    prefill: Prefill,
    leaves: Leaves,
    ops: Vec<CommitOp>,
}

struct Builder {
    msgs: Vec<MsgBuild>,
    scopes: Vec<ScopeBuild>,
    columns: Vec<Column>,
    enums: Vec<EnumNames>,
    enum_ids: Vec<String>,
    json: Vec<MessageDescriptor>,
    str_defaults: Vec<Vec<u8>>,
    names: Vec<String>,
    /// (message build id, oneof full name) -> oneof index.
    oneof_keys: Vec<(usize, String)>,
    capacity: usize,
}

/// Builds the plan for `root` and `columns`.
pub(crate) fn build(
    root: &MessageDescriptor,
    columns: &[ColumnSpec],
    batch_size: usize,
    max_depth: usize,
) -> Result<Plan, PlanError> {
    let mut b = Builder {
        msgs: Vec::new(),
        scopes: Vec::new(),
        columns: Vec::new(),
        enums: Vec::new(),
        enum_ids: Vec::new(),
        json: Vec::new(),
        str_defaults: Vec::new(),
        names: Vec::new(),
        oneof_keys: Vec::new(),
        capacity: batch_size,
    };
    let scope = b.new_scope();
    let root_msg = b.scopes[scope].root;
    let mut fields = Vec::with_capacity(columns.len());
    let mut top = Vec::with_capacity(columns.len());
    for (i, spec) in columns.iter().enumerate() {
        if columns[..i].iter().any(|c| c.name == spec.name) {
            return Err(PlanError::Conflict {
                column: spec.name.clone(),
                reason: "the column name is used twice".into(),
            });
        }
        let path = resolve_path(root, spec)?;
        // Walk the singular sub-messages of the path; the last one's presence guards the leaf.
        let mut msg = root_msg;
        let mut guard = NONE;
        for fd in &path[..path.len() - 1] {
            msg = b.sub_msg(msg, fd, &spec.name)?;
            guard = b.msgs[msg].presence;
        }
        let leaf = &path[path.len() - 1];
        let (col, field) = b.bind_field(msg, leaf, &spec.name, &spec.data_type, guard)?;
        top.push(col);
        fields.push(field);
    }
    let schema = Arc::new(Schema::new(fields));
    Ok(b.finish(top, schema, max_depth))
}

/// Finds the field path a column reads: the explicit path, else the top-level field of the same
/// name, else the one nested singular field with that name.
pub(crate) fn resolve_path(
    root: &MessageDescriptor,
    spec: &ColumnSpec,
) -> Result<Vec<FieldDescriptor>, PlanError> {
    if let Some(path) = &spec.path {
        let mut out = Vec::new();
        let mut msg = root.clone();
        let parts: Vec<&str> = path.split('.').collect();
        for (i, part) in parts.iter().enumerate() {
            let fd = msg
                .get_field_by_name(part)
                .ok_or_else(|| PlanError::UnknownField {
                    column: spec.name.clone(),
                    message: msg.full_name().to_string(),
                    field: (*part).to_string(),
                })?;
            if i + 1 < parts.len() {
                let reason = if fd.is_list() || fd.is_map() {
                    Some("it is repeated; read it whole as a List column")
                } else if !matches!(fd.kind(), Kind::Message(_)) {
                    Some("it is not a message")
                } else {
                    None
                };
                if let Some(reason) = reason {
                    return Err(PlanError::BadPath {
                        column: spec.name.clone(),
                        path: path.clone(),
                        field: fd.full_name().to_string(),
                        reason: reason.into(),
                    });
                }
                if let Kind::Message(m) = fd.kind() {
                    msg = m;
                }
            }
            out.push(fd);
        }
        return Ok(out);
    }
    if let Some(fd) = root.get_field_by_name(&spec.name) {
        return Ok(vec![fd]);
    }
    let mut found: Vec<Vec<FieldDescriptor>> = Vec::new();
    let mut stack: Vec<FieldDescriptor> = Vec::new();
    let mut seen: Vec<String> = vec![root.full_name().to_string()];
    find_nested(root, &spec.name, &mut stack, &mut seen, &mut found);
    match found.len() {
        1 => Ok(found.pop().unwrap_or_default()),
        0 => Err(PlanError::UnknownField {
            column: spec.name.clone(),
            message: root.full_name().to_string(),
            field: spec.name.clone(),
        }),
        _ => Err(PlanError::AmbiguousField {
            column: spec.name.clone(),
            candidates: found
                .iter()
                .map(|p| {
                    p.iter()
                        .map(|f| f.name().to_string())
                        .collect::<Vec<_>>()
                        .join(".")
                })
                .collect::<Vec<_>>()
                .join(", "),
        }),
    }
}

fn find_nested(
    msg: &MessageDescriptor,
    name: &str,
    stack: &mut Vec<FieldDescriptor>,
    seen: &mut Vec<String>,
    found: &mut Vec<Vec<FieldDescriptor>>,
) {
    for fd in msg.fields() {
        if fd.is_list() || fd.is_map() {
            continue;
        }
        let Kind::Message(sub) = fd.kind() else {
            continue;
        };
        if is_special_message(&sub) || seen.iter().any(|s| s == sub.full_name()) {
            continue;
        }
        stack.push(fd.clone());
        if let Some(leaf) = sub.get_field_by_name(name) {
            let mut p = stack.clone();
            p.push(leaf);
            found.push(p);
        }
        seen.push(sub.full_name().to_string());
        find_nested(&sub, name, stack, seen, found);
        seen.pop();
        stack.pop();
    }
}

fn is_special_message(m: &MessageDescriptor) -> bool {
    matches!(
        m.full_name(),
        "google.protobuf.Timestamp"
            | "google.protobuf.Duration"
            | "google.protobuf.Struct"
            | "google.protobuf.Value"
            | "google.protobuf.ListValue"
            | "google.protobuf.Any"
    ) || wrapper_inner(m).is_some()
}

/// For google.protobuf wrapper types, the Arrow type of the wrapped value.
fn wrapper_inner(m: &MessageDescriptor) -> Option<DataType> {
    Some(match m.full_name() {
        "google.protobuf.DoubleValue" => DataType::Float64,
        "google.protobuf.FloatValue" => DataType::Float32,
        "google.protobuf.Int64Value" => DataType::Int64,
        "google.protobuf.UInt64Value" => DataType::UInt64,
        "google.protobuf.Int32Value" => DataType::Int32,
        "google.protobuf.UInt32Value" => DataType::UInt32,
        "google.protobuf.BoolValue" => DataType::Boolean,
        "google.protobuf.StringValue" => DataType::Utf8,
        "google.protobuf.BytesValue" => DataType::Binary,
        _ => return None,
    })
}

fn is_json_message(m: &MessageDescriptor) -> bool {
    matches!(
        m.full_name(),
        "google.protobuf.Struct"
            | "google.protobuf.Value"
            | "google.protobuf.ListValue"
            | "google.protobuf.Any"
    )
}

/// The protobuf type of a field as a .proto file spells it.
fn proto_type_name(fd: &FieldDescriptor) -> String {
    let base = |k: &Kind| match k {
        Kind::Message(m) => format!("message {}", m.full_name()),
        Kind::Enum(e) => format!("enum {}", e.full_name()),
        other => format!("{other:?}").to_lowercase(),
    };
    if fd.is_map() {
        if let Kind::Message(entry) = fd.kind() {
            return format!(
                "map<{}, {}>",
                base(&entry.map_entry_key_field().kind()),
                base(&entry.map_entry_value_field().kind())
            );
        }
    }
    if fd.is_list() {
        return format!("repeated {}", base(&fd.kind()));
    }
    base(&fd.kind())
}

/// The Arrow type a field gets when the caller does not declare one.
pub(crate) fn default_type(fd: &FieldDescriptor, ancestors: &mut Vec<String>) -> DataType {
    if fd.is_map() {
        if let Kind::Message(entry) = fd.kind() {
            let k = entry.map_entry_key_field();
            let v = entry.map_entry_value_field();
            let kt = default_kind_type(&k.kind(), ancestors);
            let vt = default_kind_type(&v.kind(), ancestors);
            let entries = Field::new(
                "entries",
                DataType::Struct(Fields::from(vec![
                    Field::new("key", kt, false),
                    Field::new("value", vt, true),
                ])),
                false,
            );
            return DataType::Map(Arc::new(entries), false);
        }
    }
    let t = default_kind_type(&fd.kind(), ancestors);
    if fd.is_list() {
        DataType::List(Arc::new(Field::new("item", t, true)))
    } else {
        t
    }
}

fn default_kind_type(kind: &Kind, ancestors: &mut Vec<String>) -> DataType {
    match kind {
        Kind::Double => DataType::Float64,
        Kind::Float => DataType::Float32,
        Kind::Int32 | Kind::Sint32 | Kind::Sfixed32 => DataType::Int32,
        Kind::Int64 | Kind::Sint64 | Kind::Sfixed64 => DataType::Int64,
        Kind::Uint32 | Kind::Fixed32 => DataType::UInt32,
        Kind::Uint64 | Kind::Fixed64 => DataType::UInt64,
        Kind::Bool => DataType::Boolean,
        Kind::String | Kind::Enum(_) => DataType::Utf8,
        Kind::Bytes => DataType::Binary,
        Kind::Message(m) => match m.full_name() {
            "google.protobuf.Timestamp" => {
                DataType::Timestamp(TimeUnit::Nanosecond, Some("UTC".into()))
            }
            "google.protobuf.Duration" => DataType::Duration(TimeUnit::Nanosecond),
            _ => {
                if let Some(t) = wrapper_inner(m) {
                    return t;
                }
                if is_json_message(m) || ancestors.iter().any(|a| a == m.full_name()) {
                    return DataType::Utf8;
                }
                ancestors.push(m.full_name().to_string());
                let children: Vec<Field> = m
                    .fields()
                    .map(|f| Field::new(f.name(), default_type(&f, ancestors), true))
                    .collect();
                ancestors.pop();
                DataType::Struct(Fields::from(children))
            }
        },
    }
}

fn type_mismatch(column: &str, fd: &FieldDescriptor, dt: &DataType) -> PlanError {
    let mut ancestors = vec![fd.parent_message().full_name().to_string()];
    let suggested = default_type(fd, &mut ancestors);
    PlanError::TypeMismatch {
        column: column.to_string(),
        field: fd.full_name().to_string(),
        field_type: proto_type_name(fd),
        column_type: dt.to_string(),
        hint: format!("; declare it as {suggested}"),
    }
}

/// Can a singular or repeated scalar of this kind be read into this Arrow type?
fn scalar_fits(kind: &Kind, dt: &DataType) -> bool {
    match kind {
        Kind::Double => *dt == DataType::Float64,
        Kind::Float => *dt == DataType::Float32,
        Kind::Int32 | Kind::Sint32 | Kind::Sfixed32 => *dt == DataType::Int32,
        Kind::Int64 | Kind::Sint64 | Kind::Sfixed64 => {
            matches!(dt, DataType::Int64 | DataType::Timestamp(_, _))
        }
        Kind::Uint32 | Kind::Fixed32 => *dt == DataType::UInt32,
        Kind::Uint64 | Kind::Fixed64 => *dt == DataType::UInt64,
        Kind::Bool => *dt == DataType::Boolean,
        Kind::String => *dt == DataType::Utf8,
        Kind::Bytes => *dt == DataType::Binary,
        Kind::Enum(_) => matches!(dt, DataType::Utf8 | DataType::Int32),
        Kind::Message(_) => false,
    }
}

/// (op for a singular field, wire type) of a scalar kind.
fn scalar_op(kind: &Kind) -> (Op, u8) {
    match kind {
        Kind::Double | Kind::Fixed64 | Kind::Sfixed64 => (Op::Fixed64, WT_I64),
        Kind::Float | Kind::Fixed32 | Kind::Sfixed32 => (Op::Fixed32, WT_I32),
        Kind::Sint32 => (Op::Varint(VarintConv::Zigzag32), WT_VARINT),
        Kind::Sint64 => (Op::Varint(VarintConv::Zigzag64), WT_VARINT),
        Kind::String => (Op::Str, WT_LEN),
        Kind::Bytes => (Op::Bytes, WT_LEN),
        _ => (Op::Varint(VarintConv::Raw), WT_VARINT),
    }
}

fn repeated_op(kind: &Kind, enum_name: bool) -> (Op, u8) {
    match scalar_op(kind) {
        (Op::Fixed64, w) => (Op::RepFixed64, w),
        (Op::Fixed32, w) => (Op::RepFixed32, w),
        (Op::Varint(_), w) if enum_name => (Op::RepEnumName, w),
        (Op::Varint(c), w) => (Op::RepVarint(c), w),
        (Op::Str, w) => (Op::RepStr, w),
        (_, w) => (Op::RepBytes, w),
    }
}

fn storage_for(dt: &DataType) -> Option<Values> {
    Some(match dt {
        DataType::Boolean => Values::Bool(Bits::default()),
        DataType::Int32 => Values::I32(Vec::new()),
        DataType::Int64 | DataType::Timestamp(_, _) | DataType::Duration(_) => {
            Values::I64(Vec::new())
        }
        DataType::UInt32 => Values::U32(Vec::new()),
        DataType::UInt64 => Values::U64(Vec::new()),
        DataType::Float32 => Values::F32(Vec::new()),
        DataType::Float64 => Values::F64(Vec::new()),
        DataType::Utf8 | DataType::Binary => Values::bytes(),
        _ => return None,
    })
}

/// The wire type a message field arrives with: start-group for a proto2 group, else LEN.
fn message_wire(fd: &FieldDescriptor) -> u8 {
    if fd.is_group() {
        WT_SGROUP
    } else {
        WT_LEN
    }
}

/// Does the field have explicit presence (null when absent)?
fn has_presence(fd: &FieldDescriptor) -> bool {
    !fd.is_list() && !fd.is_map() && fd.supports_presence()
}

fn declared_default(fd: &FieldDescriptor) -> bool {
    fd.parent_file().syntax() == Syntax::Proto2
        && fd.field_descriptor_proto().default_value.is_some()
}

impl Builder {
    fn new_scope(&mut self) -> usize {
        let scope = self.scopes.len();
        let msg = self.msgs.len();
        self.msgs.push(MsgBuild {
            entries: BTreeMap::new(),
            scope,
            parent: None,
            subtree: Vec::new(),
            subtree_lists: Vec::new(),
            presence: NONE,
            repeated_owner: BTreeMap::new(),
        });
        self.scopes.push(ScopeBuild {
            root: msg,
            nslots: 0,
            prefill: Prefill::default(),
            leaves: Leaves::default(),
            ops: Vec::new(),
        });
        scope
    }

    fn alloc_slot(&mut self, msg: usize) -> u32 {
        let scope = self.msgs[msg].scope;
        let slot = self.scopes[scope].nslots;
        self.scopes[scope].nslots += 1;
        let mut m = Some(msg);
        while let Some(i) = m {
            self.msgs[i].subtree.push(slot);
            m = self.msgs[i].parent;
        }
        slot
    }

    fn name_id(&mut self, fd: &FieldDescriptor) -> u32 {
        let n = fd.full_name();
        if let Some(i) = self.names.iter().position(|x| x == n) {
            return i as u32;
        }
        self.names.push(n.to_string());
        (self.names.len() - 1) as u32
    }

    fn oneof_id(&mut self, msg: usize, fd: &FieldDescriptor) -> u32 {
        let Some(o) = fd.containing_oneof() else {
            return 0;
        };
        // proto3 `optional` is a synthetic oneof of one member: nothing to clear.
        if o.fields().count() < 2 {
            return 0;
        }
        let key = (msg, o.full_name().to_string());
        if let Some(i) = self.oneof_keys.iter().position(|k| *k == key) {
            return i as u32 + 1;
        }
        self.oneof_keys.push(key);
        self.oneof_keys.len() as u32
    }

    fn column(&mut self, data: Values, nullable: bool, dt: DataType, capacity: usize) -> usize {
        self.columns
            .push(Column::with_validity(data, nullable, dt, capacity));
        self.columns.len() - 1
    }

    /// Records list/map column `col` as bound in `msg` (for oneof displacement).
    fn note_list(&mut self, msg: usize, col: usize) {
        let mut m = Some(msg);
        while let Some(i) = m {
            self.msgs[i].subtree_lists.push(col as u32);
            m = self.msgs[i].parent;
        }
    }

    fn op(&mut self, msg: usize, op: CommitOp) {
        let scope = self.msgs[msg].scope;
        self.scopes[scope].ops.push(op);
    }

    /// A plain scalar column committed from `slot`: its value if set; if not, `default` when
    /// `guard` is NONE or set, else null. Filed by column type (see [`Leaves`]).
    fn leaf(&mut self, msg: usize, col: usize, slot: u32, guard: u32, default: DefaultVal) {
        let scope = self.msgs[msg].scope;
        let (bits, null_default, str_default) = match default {
            DefaultVal::Null => (0, true, NONE),
            DefaultVal::Bits(b) => (b, false, NONE),
            DefaultVal::Str(i) => (0, false, i),
        };
        let leaf = LeafPlan {
            col: col as u32,
            slot,
            guard,
            default: bits,
            null_default,
            str_default,
        };
        let l = &mut self.scopes[scope].leaves;
        // Leaves only ever get primitive or byte storage (`storage_for`).
        let list = match &self.columns[col].values {
            Values::I32(_) => &mut l.i32,
            Values::I64(_) => &mut l.i64,
            Values::U32(_) => &mut l.u32,
            Values::U64(_) => &mut l.u64,
            Values::F32(_) => &mut l.f32,
            Values::F64(_) => &mut l.f64,
            Values::Bool(_) => &mut l.bool,
            _ => &mut l.bytes,
        };
        list.push(leaf);
    }

    /// Top-level columns get batch-sized buffers; nested ones grow as needed.
    fn cap_for(&self, msg: usize) -> usize {
        if self.msgs[msg].scope == 0 {
            self.capacity
        } else {
            0
        }
    }

    /// The field table entry of a singular sub-message (created on first use).
    fn sub_msg(
        &mut self,
        msg: usize,
        fd: &FieldDescriptor,
        column: &str,
    ) -> Result<usize, PlanError> {
        let num = fd.number();
        if let Some(e) = self.msgs[msg].entries.get(&num) {
            if matches!(e.op, Op::SubMsg | Op::Group) {
                return Ok(e.target as usize);
            }
            return Err(PlanError::Conflict {
                column: column.into(),
                reason: format!(
                    "field {} is already read as JSON text by another column",
                    fd.full_name()
                ),
            });
        }
        let Kind::Message(_) = fd.kind() else {
            return Err(PlanError::BadPath {
                column: column.into(),
                path: fd.full_name().into(),
                field: fd.full_name().into(),
                reason: "it is not a message".into(),
            });
        };
        let child = self.msgs.len();
        let scope = self.msgs[msg].scope;
        self.msgs.push(MsgBuild {
            entries: BTreeMap::new(),
            scope,
            parent: Some(msg),
            subtree: Vec::new(),
            subtree_lists: Vec::new(),
            presence: NONE,
            repeated_owner: BTreeMap::new(),
        });
        let presence = self.alloc_slot(child);
        self.msgs[child].presence = presence;
        let name = self.name_id(fd);
        let oneof = self.oneof_id(msg, fd);
        self.msgs[msg].entries.insert(
            num,
            Entry {
                fast_tag: u64::MAX,
                op: if fd.is_group() { Op::Group } else { Op::SubMsg },
                wire: message_wire(fd),
                slot: presence,
                target: child as u32,
                name,
                oneof,
            },
        );
        Ok(child)
    }

    /// The slot of a singular scalar field (created on first use).
    fn scalar_slot(&mut self, msg: usize, fd: &FieldDescriptor) -> u32 {
        let num = fd.number();
        if let Some(e) = self.msgs[msg].entries.get(&num) {
            return e.slot;
        }
        let (op, wire) = scalar_op(&fd.kind());
        let slot = self.alloc_slot(msg);
        let name = self.name_id(fd);
        let oneof = self.oneof_id(msg, fd);
        self.msgs[msg].entries.insert(
            num,
            Entry {
                fast_tag: u64::MAX,
                op,
                wire,
                slot,
                target: NONE,
                name,
                oneof,
            },
        );
        slot
    }

    fn claim_repeated(
        &mut self,
        msg: usize,
        fd: &FieldDescriptor,
        column: &str,
    ) -> Result<(), PlanError> {
        if let Some(owner) = self.msgs[msg].repeated_owner.get(&fd.number()) {
            return Err(PlanError::Conflict {
                column: column.into(),
                reason: format!(
                    "repeated field {} is already read by column '{owner}'",
                    fd.full_name()
                ),
            });
        }
        self.msgs[msg]
            .repeated_owner
            .insert(fd.number(), column.to_string());
        Ok(())
    }

    fn set_entry(
        &mut self,
        msg: usize,
        fd: &FieldDescriptor,
        op: Op,
        wire: u8,
        slot: u32,
        target: u32,
    ) {
        let name = self.name_id(fd);
        self.msgs[msg].entries.insert(
            fd.number(),
            Entry {
                fast_tag: u64::MAX,
                op,
                wire,
                slot,
                target,
                name,
                oneof: 0,
            },
        );
    }

    fn enum_table(&mut self, e: &EnumDescriptor) -> u32 {
        if let Some(i) = self.enum_ids.iter().position(|n| n == e.full_name()) {
            return i as u32;
        }
        self.enum_ids.push(e.full_name().to_string());
        self.enums.push(EnumNames::new(e));
        (self.enums.len() - 1) as u32
    }

    /// The value an absent singular field takes, and whether the column can be null.
    fn leaf_default(&mut self, fd: &FieldDescriptor) -> DefaultVal {
        if has_presence(fd) && !declared_default(fd) {
            return DefaultVal::Null;
        }
        match fd.default_value() {
            Value::Bool(b) => DefaultVal::Bits(b as u64),
            Value::I32(v) => DefaultVal::Bits(v as i64 as u64),
            Value::I64(v) => DefaultVal::Bits(v as u64),
            Value::U32(v) => DefaultVal::Bits(v as u64),
            Value::U64(v) => DefaultVal::Bits(v),
            Value::F32(v) => DefaultVal::Bits(v.to_bits() as u64),
            Value::F64(v) => DefaultVal::Bits(v.to_bits()),
            Value::EnumNumber(v) => DefaultVal::Bits(v as i64 as u64),
            Value::String(s) => self.str_default(s.into_bytes()),
            Value::Bytes(b) => self.str_default(b.to_vec()),
            _ => DefaultVal::Null,
        }
    }

    fn str_default(&mut self, bytes: Vec<u8>) -> DefaultVal {
        if bytes.is_empty() {
            // (offset 0, length 0) in the message: the empty string.
            return DefaultVal::Bits(0);
        }
        self.str_defaults.push(bytes);
        DefaultVal::Str((self.str_defaults.len() - 1) as u32)
    }

    /// Binds field `fd` of message position `msg` to a new column of type `dt`.
    /// `guard` is the presence slot that must be set for an absent value to take its default
    /// (NONE: always). Returns the column id and its Arrow field (nullability decided here).
    fn bind_field(
        &mut self,
        msg: usize,
        fd: &FieldDescriptor,
        column: &str,
        dt: &DataType,
        guard: u32,
    ) -> Result<(usize, Field), PlanError> {
        if fd.is_map() {
            return self.bind_map(msg, fd, column, dt);
        }
        if fd.is_list() {
            return self.bind_list(msg, fd, column, dt);
        }
        let cap = self.cap_for(msg);
        match fd.kind() {
            Kind::Message(m) => {
                let json = *dt == DataType::Utf8 && wrapper_inner(&m).is_none();
                if json {
                    let num = fd.number();
                    let (slot, desc) = match self.msgs[msg].entries.get(&num) {
                        Some(e) if e.op == Op::Json => (e.slot, e.target),
                        Some(_) => {
                            return Err(PlanError::Conflict {
                                column: column.into(),
                                reason: format!(
                                    "field {} is already read as a structure by another column",
                                    fd.full_name()
                                ),
                            })
                        }
                        None => {
                            let slot = self.alloc_slot(msg);
                            let desc = self.json.len() as u32;
                            self.json.push(m.clone());
                            self.set_entry(msg, fd, Op::Json, message_wire(fd), slot, desc);
                            let oneof = self.oneof_id(msg, fd);
                            if let Some(e) = self.msgs[msg].entries.get_mut(&num) {
                                e.oneof = oneof;
                            }
                            (slot, desc)
                        }
                    };
                    let col = self.column(Values::bytes(), true, dt.clone(), cap);
                    self.op(
                        msg,
                        CommitOp::Json {
                            col: col as u32,
                            slot,
                            desc,
                        },
                    );
                    return Ok((col, Field::new(column, dt.clone(), true)));
                }
                let child = self.sub_msg(msg, fd, column)?;
                self.bind_message_value(child, &m, fd, column, dt)
            }
            kind => {
                if !scalar_fits(&kind, dt) {
                    return Err(type_mismatch(column, fd, dt));
                }
                let slot = self.scalar_slot(msg, fd);
                let default = self.leaf_default(fd);
                let nullable = guard != NONE || matches!(default, DefaultVal::Null);
                let storage = storage_for(dt).ok_or_else(|| type_mismatch(column, fd, dt))?;
                let col = self.column(storage, nullable, dt.clone(), cap);
                match (&kind, dt) {
                    (Kind::Enum(e), DataType::Utf8) => {
                        let table = self.enum_table(e);
                        let op = CommitOp::EnumName {
                            col: col as u32,
                            slot,
                            guard,
                            default,
                            table,
                        };
                        self.op(msg, op);
                    }
                    _ => self.leaf(msg, col, slot, guard, default),
                }
                Ok((col, Field::new(column, dt.clone(), nullable)))
            }
        }
    }

    /// Binds a message value whose fields decode into position `child` (a singular sub-message,
    /// or the root of an element scope) to a column of type `dt`.
    fn bind_message_value(
        &mut self,
        child: usize,
        m: &MessageDescriptor,
        fd: &FieldDescriptor,
        column: &str,
        dt: &DataType,
    ) -> Result<(usize, Field), PlanError> {
        let presence = self.msgs[child].presence;
        let nullable = presence != NONE;
        let cap = self.cap_for(child);
        match (m.full_name(), dt) {
            ("google.protobuf.Timestamp", DataType::Timestamp(unit, _))
            | ("google.protobuf.Duration", DataType::Duration(unit)) => {
                let (Some(s), Some(n)) = (m.get_field(1), m.get_field(2)) else {
                    return Err(type_mismatch(column, fd, dt));
                };
                let secs = self.scalar_slot(child, &s);
                let nanos = self.scalar_slot(child, &n);
                let name = self.name_id(fd);
                let col = self.column(Values::I64(Vec::new()), nullable, dt.clone(), cap);
                self.op(
                    child,
                    CommitOp::Time {
                        col: col as u32,
                        secs,
                        nanos,
                        presence,
                        unit: *unit,
                        name,
                    },
                );
                Ok((col, Field::new(column, dt.clone(), nullable)))
            }
            _ if wrapper_inner(m).is_some() => {
                if wrapper_inner(m).as_ref() != Some(dt) {
                    return Err(type_mismatch(column, fd, dt));
                }
                let Some(v) = m.get_field(1) else {
                    return Err(type_mismatch(column, fd, dt));
                };
                let slot = self.scalar_slot(child, &v);
                let default = self.leaf_default(&v);
                let storage = storage_for(dt).ok_or_else(|| type_mismatch(column, fd, dt))?;
                let col = self.column(storage, nullable, dt.clone(), cap);
                self.leaf(child, col, slot, presence, default);
                Ok((col, Field::new(column, dt.clone(), nullable)))
            }
            (_, DataType::Struct(children)) => {
                let mut ids = Vec::with_capacity(children.len());
                let mut fields = Vec::with_capacity(children.len());
                for cf in children.iter() {
                    let sub =
                        m.get_field_by_name(cf.name())
                            .ok_or_else(|| PlanError::UnknownField {
                                column: format!("{column}.{}", cf.name()),
                                message: m.full_name().to_string(),
                                field: cf.name().to_string(),
                            })?;
                    let (id, f) = self.bind_field(
                        child,
                        &sub,
                        &format!("{column}.{}", cf.name()),
                        cf.data_type(),
                        NONE,
                    )?;
                    ids.push(id);
                    fields.push(f.with_name(cf.name()));
                }
                let out = DataType::Struct(Fields::from(fields));
                let col = self.column(
                    Values::Struct {
                        children: ids,
                        len: 0,
                    },
                    nullable,
                    out.clone(),
                    cap,
                );
                self.op(
                    child,
                    CommitOp::Struct {
                        col: col as u32,
                        presence,
                    },
                );
                Ok((col, Field::new(column, out, nullable)))
            }
            _ => Err(type_mismatch(column, fd, dt)),
        }
    }

    fn bind_list(
        &mut self,
        msg: usize,
        fd: &FieldDescriptor,
        column: &str,
        dt: &DataType,
    ) -> Result<(usize, Field), PlanError> {
        let DataType::List(item) = dt else {
            return Err(type_mismatch(column, fd, dt));
        };
        self.claim_repeated(msg, fd, column)?;
        let cap = self.cap_for(msg);
        let item_dt = item.data_type();
        let item_col = format!("{column}[]");
        let (child_col, child_field) = match fd.kind() {
            Kind::Message(m) => {
                if *item_dt == DataType::Utf8 && wrapper_inner(&m).is_none() {
                    let desc = self.json.len() as u32;
                    self.json.push(m.clone());
                    let c = self.column(Values::bytes(), false, item_dt.clone(), 0);
                    self.set_entry(msg, fd, Op::RepJson, message_wire(fd), desc, c as u32);
                    (c, item.as_ref().clone())
                } else {
                    let scope = self.new_scope();
                    let root = self.scopes[scope].root;
                    let (c, f) = self.bind_message_value(root, &m, fd, &item_col, item_dt)?;
                    let op = if fd.is_group() {
                        Op::RepGroup
                    } else {
                        Op::RepMsg
                    };
                    self.set_entry(msg, fd, op, message_wire(fd), NONE, scope as u32);
                    (
                        c,
                        f.with_name(item.name()).with_nullable(item.is_nullable()),
                    )
                }
            }
            kind => {
                if !scalar_fits(&kind, item_dt) {
                    return Err(type_mismatch(column, fd, dt));
                }
                let enum_name = matches!(kind, Kind::Enum(_)) && *item_dt == DataType::Utf8;
                let (op, wire) = repeated_op(&kind, enum_name);
                let storage = storage_for(item_dt).ok_or_else(|| type_mismatch(column, fd, dt))?;
                let c = self.column(storage, false, item_dt.clone(), 0);
                let slot = match &kind {
                    Kind::Enum(e) if enum_name => self.enum_table(e),
                    _ => NONE,
                };
                self.set_entry(msg, fd, op, wire, slot, c as u32);
                (c, item.as_ref().clone())
            }
        };
        let out = DataType::List(Arc::new(child_field));
        let col = self.column(
            Values::List {
                offsets: Vec::new(),
                child: child_col,
            },
            false,
            out.clone(),
            cap,
        );
        self.note_list(msg, col);
        self.op(msg, CommitOp::ListEnd { col: col as u32 });
        Ok((col, Field::new(column, out, false)))
    }

    fn bind_map(
        &mut self,
        msg: usize,
        fd: &FieldDescriptor,
        column: &str,
        dt: &DataType,
    ) -> Result<(usize, Field), PlanError> {
        let (DataType::Map(entries, sorted), Kind::Message(entry)) = (dt, fd.kind()) else {
            return Err(type_mismatch(column, fd, dt));
        };
        let DataType::Struct(kv) = entries.data_type() else {
            return Err(type_mismatch(column, fd, dt));
        };
        if kv.len() != 2 {
            return Err(type_mismatch(column, fd, dt));
        }
        self.claim_repeated(msg, fd, column)?;
        let cap = self.cap_for(msg);
        let scope = self.new_scope();
        let root = self.scopes[scope].root;
        let kf = entry.map_entry_key_field();
        let vf = entry.map_entry_value_field();
        let (kc, kfield) =
            self.bind_field(root, &kf, &format!("{column}.key"), kv[0].data_type(), NONE)?;
        let (vc, vfield) = self.bind_field(
            root,
            &vf,
            &format!("{column}.value"),
            kv[1].data_type(),
            NONE,
        )?;
        // A map value that is a message is null when the entry has none.
        let struct_dt = DataType::Struct(Fields::from(vec![
            kfield.with_name(kv[0].name()).with_nullable(false),
            vfield.with_name(kv[1].name()),
        ]));
        let ec = self.column(
            Values::Struct {
                children: vec![kc, vc],
                len: 0,
            },
            false,
            struct_dt.clone(),
            0,
        );
        self.scopes[scope].ops.push(CommitOp::Struct {
            col: ec as u32,
            presence: NONE,
        });
        self.set_entry(msg, fd, Op::RepMsg, WT_LEN, NONE, scope as u32);
        let out = DataType::Map(
            Arc::new(Field::new(entries.name(), struct_dt, false)),
            *sorted,
        );
        let col = self.column(
            Values::List {
                offsets: Vec::new(),
                child: ec,
            },
            false,
            out.clone(),
            cap,
        );
        self.note_list(msg, col);
        self.op(
            msg,
            CommitOp::MapEnd {
                col: col as u32,
                key: kc as u32,
            },
        );
        Ok((col, Field::new(column, out, false)))
    }

    /// Turns every leaf whose slot nothing else reads into a direct write (see [`Op::DVarI32`]).
    fn make_direct(&mut self) {
        // How many readers each (scope, slot) has.
        let mut readers: BTreeMap<(usize, u32), usize> = BTreeMap::new();
        let mut count = |scope: usize, slot: u32| {
            if slot != NONE {
                *readers.entry((scope, slot)).or_insert(0) += 1;
            }
        };
        for (si, sc) in self.scopes.iter().enumerate() {
            let l = &sc.leaves;
            for leaf in l
                .i32
                .iter()
                .chain(&l.i64)
                .chain(&l.u32)
                .chain(&l.u64)
                .chain(&l.f32)
                .chain(&l.f64)
                .chain(&l.bool)
                .chain(&l.bytes)
            {
                count(si, leaf.slot);
                count(si, leaf.guard);
            }
            for op in &sc.ops {
                match *op {
                    CommitOp::EnumName { slot, guard, .. } => {
                        count(si, slot);
                        count(si, guard);
                    }
                    CommitOp::Struct { presence, .. } => count(si, presence),
                    CommitOp::Time {
                        secs,
                        nanos,
                        presence,
                        ..
                    } => {
                        count(si, secs);
                        count(si, nanos);
                        count(si, presence);
                    }
                    CommitOp::Json { slot, .. } => count(si, slot),
                    CommitOp::ListEnd { .. } | CommitOp::MapEnd { .. } => {}
                }
            }
        }
        // Slots in a oneof are cleared by other members: they stay slots.
        for m in &self.msgs {
            for e in m.entries.values() {
                if e.oneof != 0 {
                    count(m.scope, e.slot);
                    count(m.scope, e.slot);
                }
            }
        }
        for (mi, m) in self.msgs.iter().enumerate() {
            for e in m.entries.values() {
                if matches!(e.op, Op::SubMsg | Op::Group) && e.oneof != 0 {
                    for &slot in &self.msgs[e.target as usize].subtree {
                        count(self.msgs[mi].scope, slot);
                        count(self.msgs[mi].scope, slot);
                    }
                }
            }
        }
        // Which entry writes each slot.
        let mut writer: BTreeMap<(usize, u32), (usize, u32)> = BTreeMap::new();
        for (mi, m) in self.msgs.iter().enumerate() {
            for (num, e) in &m.entries {
                if matches!(
                    e.op,
                    Op::Varint(_) | Op::Fixed32 | Op::Fixed64 | Op::Str | Op::Bytes
                ) {
                    writer.insert((m.scope, e.slot), (mi, *num));
                }
            }
        }
        for si in 0..self.scopes.len() {
            let leaves = std::mem::take(&mut self.scopes[si].leaves);
            let mut kept = Leaves::default();
            let groups: [(&Vec<LeafPlan>, &mut Vec<LeafPlan>); 8] = [
                (&leaves.i32, &mut kept.i32),
                (&leaves.i64, &mut kept.i64),
                (&leaves.u32, &mut kept.u32),
                (&leaves.u64, &mut kept.u64),
                (&leaves.f32, &mut kept.f32),
                (&leaves.f64, &mut kept.f64),
                (&leaves.bool, &mut kept.bool),
                (&leaves.bytes, &mut kept.bytes),
            ];
            for (list, keep) in groups {
                for leaf in list {
                    if readers.get(&(si, leaf.slot)) != Some(&1) || !self.direct(si, leaf, &writer)
                    {
                        keep.push(*leaf);
                    }
                }
            }
            self.scopes[si].leaves = kept;
        }
    }

    /// Makes one leaf a direct write if its writer and column allow it.
    fn direct(
        &mut self,
        si: usize,
        leaf: &LeafPlan,
        writer: &BTreeMap<(usize, u32), (usize, u32)>,
    ) -> bool {
        let Some(&(mi, num)) = writer.get(&(si, leaf.slot)) else {
            return false;
        };
        let Some(e) = self.msgs[mi].entries.get(&num).copied() else {
            return false;
        };
        let col = leaf.col;
        let d = leaf.default;
        let pf = &mut self.scopes[si].prefill;
        let op = match (&e.op, &self.columns[col as usize].values) {
            (Op::Varint(VarintConv::Raw), Values::I32(_)) => {
                pf.i32.push((col, d as i32));
                Op::DVarI32
            }
            (Op::Varint(VarintConv::Raw), Values::I64(_)) => {
                pf.i64.push((col, d as i64));
                Op::DVarI64
            }
            (Op::Varint(VarintConv::Raw), Values::U32(_)) => {
                pf.u32.push((col, d as u32));
                Op::DVarU32
            }
            (Op::Varint(VarintConv::Raw), Values::U64(_)) => {
                pf.u64.push((col, d));
                Op::DVarU64
            }
            (Op::Varint(VarintConv::Raw), Values::Bool(_)) => {
                pf.bool.push((col, d != 0));
                Op::DVarBool
            }
            (Op::Varint(VarintConv::Zigzag32), Values::I32(_)) => {
                pf.i32.push((col, d as i32));
                Op::DZig32
            }
            (Op::Varint(VarintConv::Zigzag64), Values::I64(_)) => {
                pf.i64.push((col, d as i64));
                Op::DZig64
            }
            (Op::Fixed32, Values::F32(_)) => {
                pf.f32.push((col, f32::from_bits(d as u32)));
                Op::DF32
            }
            (Op::Fixed32, Values::U32(_)) => {
                pf.u32.push((col, d as u32));
                Op::DFixU32
            }
            (Op::Fixed32, Values::I32(_)) => {
                pf.i32.push((col, d as i32));
                Op::DFixI32
            }
            (Op::Fixed64, Values::F64(_)) => {
                pf.f64.push((col, f64::from_bits(d)));
                Op::DF64
            }
            (Op::Fixed64, Values::U64(_)) => {
                pf.u64.push((col, d));
                Op::DFixU64
            }
            (Op::Fixed64, Values::I64(_)) => {
                pf.i64.push((col, d as i64));
                Op::DFixI64
            }
            (Op::Str | Op::Bytes, Values::Bytes { .. }) => {
                if leaf.str_default != NONE && !leaf.null_default {
                    pf.bytes.push((col, leaf.str_default));
                }
                pf.string_ends.push(col);
                if e.op == Op::Str {
                    Op::DStr
                } else {
                    Op::DBytes
                }
            }
            _ => return false,
        };
        let nullable = self.columns[col as usize].nulls.is_some();
        let guarded = nullable && leaf.guard != NONE && !leaf.null_default;
        if nullable {
            pf.invalid.push(col);
            if guarded {
                pf.guards.push((col, leaf.guard));
            }
        }
        if let Some(entry) = self.msgs[mi].entries.get_mut(&num) {
            entry.op = op;
            entry.target = col;
            // 1: a write marks the row valid. Not for a guarded column: its field lies inside
            // the guarding sub-message, so a write implies the guard, which the commit turns
            // into validity anyway.
            entry.slot = (nullable && !guarded) as u32;
        }
        true
    }

    fn finish(mut self, top: Vec<usize>, schema: SchemaRef, max_depth: usize) -> Plan {
        self.make_direct();
        let shared_validity = self.share_validity();
        // Oneof groups: each member's slots (a sub-message member: its whole subtree).
        let mut oneofs: Vec<OneofPlan> = (0..self.oneof_keys.len())
            .map(|_| OneofPlan {
                members: Vec::new(),
            })
            .collect();
        for m in &self.msgs {
            for (num, e) in &m.entries {
                if e.oneof == 0 {
                    continue;
                }
                let (slots, lists) = if matches!(e.op, Op::SubMsg | Op::Group) {
                    let child = &self.msgs[e.target as usize];
                    (child.subtree.clone(), child.subtree_lists.clone())
                } else {
                    (vec![e.slot], Vec::new())
                };
                oneofs[e.oneof as usize - 1].members.push(OneofMember {
                    field: *num,
                    slots,
                    lists,
                });
            }
        }
        let msgs = self
            .msgs
            .iter()
            .map(|m| {
                let max_dense = m
                    .entries
                    .keys()
                    .copied()
                    .filter(|n| *n < DENSE_LIMIT)
                    .max()
                    .map_or(0, |n| n as usize + 1);
                let mut dense = vec![SKIP; max_dense];
                let mut sparse = Vec::new();
                for (num, e) in &m.entries {
                    let mut e = *e;
                    if e.op != Op::Skip && e.oneof == 0 {
                        e.fast_tag = ((*num as u64) << 3) | e.wire as u64;
                    }
                    if *num < DENSE_LIMIT {
                        dense[*num as usize] = e;
                    } else {
                        sparse.push((*num, e));
                    }
                }
                MsgPlan {
                    dense: dense.into_boxed_slice(),
                    sparse: sparse.into_boxed_slice(),
                }
            })
            .collect();
        let scopes = self
            .scopes
            .into_iter()
            .map(|s| {
                let l = &s.leaves;
                let has_slots = !(l.i32.is_empty()
                    && l.i64.is_empty()
                    && l.u32.is_empty()
                    && l.u64.is_empty()
                    && l.f32.is_empty()
                    && l.f64.is_empty()
                    && l.bool.is_empty()
                    && l.bytes.is_empty()
                    && s.ops.is_empty());
                ScopePlan {
                    root: s.root as u32,
                    nslots: s.nslots,
                    prefill: s.prefill,
                    leaves: s.leaves,
                    ops: s.ops,
                    has_slots,
                }
            })
            .collect();
        Plan {
            msgs,
            scopes,
            columns: self.columns,
            top,
            schema,
            enums: self.enums,
            json: self.json,
            str_defaults: self.str_defaults,
            names: self.names,
            oneofs,
            max_depth,
            batch_capacity: self.capacity,
            shared_validity,
        }
    }

    /// Finds the top scope's direct columns that share a guard (the fields of one optional
    /// sub-message, like `base.ticker` and `base.timestamp`): the first of each group keeps its
    /// validity row by row, the others copy it when a batch is taken (see
    /// [`Plan::shared_validity`]).
    fn share_validity(&mut self) -> Vec<(u32, u32)> {
        let Some(top) = self.scopes.first_mut() else {
            return Vec::new();
        };
        let pf = &mut top.prefill;
        let mut leader_of: BTreeMap<u32, u32> = BTreeMap::new();
        let mut shared = Vec::new();
        pf.guards
            .retain(|&(col, guard)| match leader_of.get(&guard) {
                Some(&leader) => {
                    shared.push((col, leader));
                    false
                }
                None => {
                    leader_of.insert(guard, col);
                    true
                }
            });
        pf.invalid
            .retain(|c| !shared.iter().any(|&(follower, _)| follower == *c));
        shared
    }
}
