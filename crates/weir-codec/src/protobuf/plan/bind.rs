//! Binding requested columns to fields: resolving each column's path, walking its
//! sub-messages, and giving each field a table entry, a slot or a column, and each scope its
//! commit ops.

use std::collections::BTreeMap;
use std::sync::Arc;

use arrow_schema::{DataType, Field, Fields, Schema};
use prost_reflect::{EnumDescriptor, FieldDescriptor, Kind, MessageDescriptor, Value};

use super::types::{
    declared_default, has_presence, is_special_message, message_wire, repeated_op, scalar_fits,
    scalar_op, storage_for, type_mismatch, wrapper_inner,
};
use super::{CommitOp, DefaultVal, Entry, EnumNames, LeafPlan, Leaves, Op, Plan, Prefill, NONE};
use crate::columns::{Column, Values};
use crate::error::PlanError;
use crate::protobuf::wire::WT_LEN;
use crate::protobuf::ColumnSpec;

pub(super) struct MsgBuild {
    pub(super) entries: BTreeMap<u32, Entry>,
    pub(super) scope: usize,
    pub(super) parent: Option<usize>,
    /// Every slot allocated in this message and below (for clearing a oneof member).
    pub(super) subtree: Vec<u32>,
    /// Every list/map column bound in this message and below.
    pub(super) subtree_lists: Vec<u32>,
    pub(super) presence: u32,
    /// Column names bound to each repeated field (conflict detection).
    pub(super) repeated_owner: BTreeMap<u32, String>,
}

pub(super) struct ScopeBuild {
    pub(super) root: usize,
    pub(super) nslots: u32,
    pub(super) prefill: Prefill,
    pub(super) leaves: Leaves,
    pub(super) ops: Vec<CommitOp>,
}

pub(super) struct Builder {
    pub(super) msgs: Vec<MsgBuild>,
    pub(super) scopes: Vec<ScopeBuild>,
    pub(super) columns: Vec<Column>,
    pub(super) enums: Vec<EnumNames>,
    pub(super) enum_ids: Vec<String>,
    pub(super) json: Vec<MessageDescriptor>,
    pub(super) str_defaults: Vec<Vec<u8>>,
    pub(super) names: Vec<String>,
    /// (message build id, oneof full name) -> oneof index.
    pub(super) oneof_keys: Vec<(usize, String)>,
    pub(super) capacity: usize,
    /// (map column, key column) of every map column.
    pub(super) maps: Vec<(u32, u32)>,
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
        maps: Vec::new(),
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
        self.op(msg, CommitOp::ListEnd { col: col as u32 });
        self.maps.push((col as u32, kc as u32));
        Ok((col, Field::new(column, out, false)))
    }
}
