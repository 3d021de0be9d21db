//! The passes that make a bound plan cheaper to run, and the plan's final form: leaves whose
//! slot nothing else reads become direct writes into their column (no slot, no commit), the
//! top scope's columns under one sub-message share its validity, and the field tables are laid
//! out dense by field number.

use std::collections::BTreeMap;

use arrow_schema::SchemaRef;

use super::bind::Builder;
use super::{
    CommitOp, LeafPlan, Leaves, MsgPlan, OneofMember, OneofPlan, Op, Plan, ScopePlan, VarintConv,
    DENSE_LIMIT, NONE, SKIP,
};
use crate::columns::Values;
use crate::protobuf::wire::WT_SGROUP;

impl Builder {
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
                    CommitOp::ListEnd { .. } => {}
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

    pub(super) fn finish(mut self, top: Vec<usize>, schema: SchemaRef, max_depth: usize) -> Plan {
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
                    // Groups and oneof members always take the checked path.
                    if e.op != Op::Skip && e.oneof == 0 && e.wire != WT_SGROUP {
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
            maps: self.maps,
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
