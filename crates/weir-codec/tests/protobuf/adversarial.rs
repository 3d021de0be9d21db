//! Adversarial tests with hand-made wire bytes (schema `tests/proto/wire.proto`): legal but
//! unusual encodings must decode to the same values prost-reflect reads, malformed input must be
//! rejected with the right error kind and byte offset, without panicking, and a rejected
//! message must leave no trace in the buffered rows. Also the plan errors.

use prost_reflect::{DynamicMessage, MessageDescriptor};
use weir_codec::{
    default_columns, ColumnSpec, DataType, DecodeError, DecodeErrorKind, Decoder, PlanError,
    ProtoDecoder, ProtoDecoderOptions, ProtoSchema, RecordBatch,
};

use crate::common::*;

const ROOT: &str = "wire.Msg";

// Field numbers of wire.Msg.
const I32: u32 = 1;
const I64: u32 = 2;
const U64: u32 = 3;
const S: u32 = 4;
const B: u32 = 5;
const FX32: u32 = 6;
const FX64: u32 = 7;
const NUMS: u32 = 8;
const INNER: u32 = 9;
const REC: u32 = 10;
const Z32: u32 = 11;
const D: u32 = 12;
const NAMES: u32 = 13;
const M: u32 = 14;
const ITEMS: u32 = 15;
const OPT: u32 = 16;
const PF32: u32 = 17;
const PD: u32 = 18;
const P_INT: u32 = 19;
const P_STR: u32 = 20;
const P_LEAF: u32 = 21;
const P_INNER: u32 = 22;
const FAR: u32 = 100_000;

fn schema() -> ProtoSchema {
    load_schema("wire.proto")
}

fn desc(s: &ProtoSchema) -> MessageDescriptor {
    message_desc(s, ROOT)
}

fn decoder(s: &ProtoSchema) -> ProtoDecoder {
    let cols = default_columns(s, ROOT).expect("default columns");
    ProtoDecoder::new(s, ROOT, &cols, ProtoDecoderOptions::default()).expect("plan")
}

/// A decoder over a subset of the columns (the rest of the fields are skipped, not decoded).
fn projected_decoder(s: &ProtoSchema) -> ProtoDecoder {
    let all = default_columns(s, ROOT).expect("default columns");
    let cols: Vec<ColumnSpec> = all
        .into_iter()
        .filter(|c| ["nums", "inner", "names", "i64", "items"].contains(&c.name.as_str()))
        .collect();
    assert_eq!(cols.len(), 5);
    ProtoDecoder::new(s, ROOT, &cols, ProtoDecoderOptions::default()).expect("plan")
}

/// prost-reflect's reading of `bytes` (the reference for valid input).
fn reference(s: &ProtoSchema, bytes: &[u8]) -> DynamicMessage {
    DynamicMessage::decode(desc(s), bytes)
        .unwrap_or_else(|e| panic!("prost-reflect rejects the test input {}: {e}", hex(bytes)))
}

/// Decodes one valid message and checks the row against prost-reflect (all columns).
fn decode_one(s: &ProtoSchema, bytes: &[u8], what: &str) -> RecordBatch {
    let mut dec = decoder(s);
    if let Err(e) = dec.decode(bytes) {
        panic!(
            "{what}: valid input rejected: {e} ({e:?}); bytes {}",
            hex(bytes)
        );
    }
    let batch = dec.flush().expect("one row");
    assert_eq!(batch.num_rows(), 1);
    assert_row(&batch, 0, &reference(s, bytes), bytes, what);
    batch
}

fn i32s(v: &[i32]) -> Exp {
    Exp::List(v.iter().map(|&x| Exp::I32(x)).collect())
}

fn strs(v: &[&str]) -> Exp {
    Exp::List(v.iter().map(|x| Exp::Str(x.to_string())).collect())
}

fn json(text: &str) -> Exp {
    Exp::Json(serde_json::from_str(text).unwrap())
}

// ---------------------------------------------------------------------------------------------
// Valid but unusual encodings
// ---------------------------------------------------------------------------------------------

#[test]
fn fields_out_of_order() {
    let s = schema();
    let mut leaf = Wire::new();
    leaf.field_int(2, 22).field_int(1, 11);
    let mut inner = Wire::new();
    inner
        .field_msg(4, &leaf)
        .field_packed_varints(3, &[3, 4])
        .field_str(2, "in")
        .field_int(1, 9);
    let mut w = Wire::new();
    w.field_int(FAR, 100)
        .field_fixed64(PD, 1.5f64.to_bits())
        .field_int(OPT, 0)
        .field_msg(INNER, &inner)
        .field_packed_varints(NUMS, &[1, 2])
        .field_fixed64(FX64, u64::MAX)
        .field_fixed32(FX32, 7)
        .field_str(S, "text")
        .field_varint(U64, u64::MAX)
        .field_int(I64, i64::MIN)
        .field_int(I32, -7);
    let b = decode_one(&s, &w.buf, "out of order");
    assert_cell(&b, "i32", 0, Exp::I32(-7));
    assert_cell(&b, "i64", 0, Exp::I64(i64::MIN));
    assert_cell(&b, "u64", 0, Exp::U64(u64::MAX));
    assert_cell(&b, "s", 0, Exp::Str("text".into()));
    assert_cell(&b, "fx32", 0, Exp::U32(7));
    assert_cell(&b, "fx64", 0, Exp::U64(u64::MAX));
    assert_cell(&b, "nums", 0, i32s(&[1, 2]));
    assert_cell(&b, "opt", 0, Exp::I32(0));
    assert_cell(&b, "far", 0, Exp::I32(100));
    assert_cell(&b, "pd", 0, Exp::List(vec![Exp::F64(1.5)]));
    assert_cell(
        &b,
        "inner",
        0,
        Exp::Struct {
            valid: true,
            fields: vec![
                ("a".into(), Exp::I32(9)),
                ("s".into(), Exp::Str("in".into())),
                ("r".into(), i32s(&[3, 4])),
                (
                    "leaf".into(),
                    Exp::Struct {
                        valid: true,
                        fields: vec![("x".into(), Exp::I64(11)), ("y".into(), Exp::I64(22))],
                    },
                ),
            ],
        },
    );
}

#[test]
fn singular_scalar_seen_twice_last_wins() {
    let s = schema();
    let mut w = Wire::new();
    w.field_int(I32, 1)
        .field_int(OPT, 5)
        .field_fixed32(FX32, 1)
        .field_double(D, 1.0)
        .field_sint32(Z32, -1)
        .field_int(I32, 2)
        .field_fixed32(FX32, 2)
        .field_double(D, -0.0)
        .field_int(OPT, 0)
        .field_sint32(Z32, i32::MIN)
        .field_int(I32, -3)
        .field_int(FAR, 1)
        .field_int(FAR, 0);
    let b = decode_one(&s, &w.buf, "scalar repeated");
    assert_cell(&b, "i32", 0, Exp::I32(-3));
    assert_cell(&b, "fx32", 0, Exp::U32(2));
    assert_cell(&b, "d", 0, Exp::F64(-0.0));
    assert_cell(&b, "opt", 0, Exp::I32(0));
    assert_cell(&b, "z32", 0, Exp::I32(i32::MIN));
    assert_cell(&b, "far", 0, Exp::I32(0));
}

#[test]
fn singular_string_seen_twice_last_wins() {
    let s = schema();
    let mut inner1 = Wire::new();
    inner1.field_str(2, "a long first inner string");
    let mut inner2 = Wire::new();
    inner2.field_str(2, "2");
    let mut w = Wire::new();
    w.field_str(S, "first, and longer than the second")
        .field_bytes(B, &[1, 2, 3, 4, 5])
        .field_msg(INNER, &inner1)
        .field_str(S, "second")
        .field_bytes(B, &[])
        .field_msg(INNER, &inner2)
        .field_str(S, "third ü");
    let b = decode_one(&s, &w.buf, "string repeated");
    assert_cell(&b, "s", 0, Exp::Str("third ü".into()));
    assert_cell(&b, "b", 0, Exp::Bin(vec![]));
    let mut w = Wire::new();
    w.field_str(S, "non-empty").field_str(S, "");
    let b = decode_one(&s, &w.buf, "string replaced by empty");
    assert_cell(&b, "s", 0, Exp::Str(String::new()));
}

#[test]
fn sub_message_seen_twice_is_merged() {
    let s = schema();
    let mut leaf1 = Wire::new();
    leaf1.field_int(1, 5);
    let mut inner1 = Wire::new();
    inner1
        .field_int(1, 1)
        .field_str(2, "kept")
        .field_packed_varints(3, &[1, 2])
        .field_msg(4, &leaf1);
    let mut leaf2 = Wire::new();
    leaf2.field_int(2, 6);
    let mut inner2 = Wire::new();
    inner2.field_int(3, 3).field_msg(4, &leaf2).field_int(1, 7);
    // rec (struct) whose `child` (recursive, so JSON) is also split across the two occurrences.
    let mut c1 = Wire::new();
    c1.field_int(1, 2);
    let mut rec1 = Wire::new();
    rec1.field_int(1, 1).field_msg(2, &c1);
    let mut cc = Wire::new();
    cc.field_int(1, 3);
    let mut c2 = Wire::new();
    c2.field_msg(2, &cc);
    let mut rec2 = Wire::new();
    rec2.field_msg(2, &c2);
    let mut w = Wire::new();
    w.field_msg(INNER, &inner1)
        .field_msg(REC, &rec1)
        .field_int(I32, 4)
        .field_msg(INNER, &inner2)
        .field_msg(REC, &rec2);
    let b = decode_one(&s, &w.buf, "merged sub-message");
    assert_cell(
        &b,
        "inner",
        0,
        Exp::Struct {
            valid: true,
            fields: vec![
                ("a".into(), Exp::I32(7)),
                ("s".into(), Exp::Str("kept".into())),
                ("r".into(), i32s(&[1, 2, 3])),
                (
                    "leaf".into(),
                    Exp::Struct {
                        valid: true,
                        fields: vec![("x".into(), Exp::I64(5)), ("y".into(), Exp::I64(6))],
                    },
                ),
            ],
        },
    );
    assert_cell(
        &b,
        "rec",
        0,
        Exp::Struct {
            valid: true,
            fields: vec![
                ("v".into(), Exp::I32(1)),
                ("child".into(), json(r#"{"v":2,"child":{"v":3}}"#)),
            ],
        },
    );
}

#[test]
fn packed_and_unpacked_elements_mix() {
    let s = schema();
    let mut item1 = Wire::new();
    item1.field_int(1, 1).field_int(3, 10);
    let mut item2 = Wire::new();
    item2.field_packed_varints(3, &[20, 21]).field_int(3, 22);
    let mut w = Wire::new();
    w.field_int(NUMS, 1)
        .field_packed_varints(NUMS, &[2, 3])
        .field_str(NAMES, "a")
        .field_msg(ITEMS, &item1)
        .field_int(NUMS, -4)
        .field_int(I32, 99)
        .field_packed_varints(NUMS, &[])
        .field_str(NAMES, "b")
        .field_packed_varints(NUMS, &[5, (-6i64) as u64])
        .field_msg(ITEMS, &item2)
        .field_int(NUMS, 7)
        .field_fixed32(PF32, 1)
        .tag(PF32, WT_LEN)
        .varint(8)
        .raw(&2u32.to_le_bytes())
        .raw(&3u32.to_le_bytes())
        .field_fixed32(PF32, 4)
        .field_double(PD, 0.5)
        .tag(PD, WT_LEN)
        .varint(16)
        .raw(&1.25f64.to_le_bytes())
        .raw(&f64::NEG_INFINITY.to_le_bytes());
    let b = decode_one(&s, &w.buf, "packed+unpacked");
    assert_cell(&b, "nums", 0, i32s(&[1, 2, 3, -4, 5, -6, 7]));
    assert_cell(&b, "names", 0, strs(&["a", "b"]));
    assert_cell(
        &b,
        "pf32",
        0,
        Exp::List(vec![Exp::U32(1), Exp::U32(2), Exp::U32(3), Exp::U32(4)]),
    );
    assert_cell(
        &b,
        "pd",
        0,
        Exp::List(vec![
            Exp::F64(0.5),
            Exp::F64(1.25),
            Exp::F64(f64::NEG_INFINITY),
        ]),
    );
    let Exp::List(items) = cell(&b, "items", 0) else {
        panic!("items is a list")
    };
    assert_eq!(items.len(), 2);
}

#[test]
fn unknown_fields_of_every_wire_type_are_skipped() {
    let s = schema();
    // A group with nested content, including a nested group and bytes that are not UTF-8.
    let mut group = Wire::new();
    group
        .tag(53, WT_SGROUP)
        .field_varint(1, u64::MAX)
        .field_bytes(2, &[0xff, 0xfe, 0x00])
        .field_fixed32(3, 0xdead_beef)
        .tag(54, WT_SGROUP)
        .field_fixed64(55, 1)
        .tag(56, WT_SGROUP)
        .tag(56, WT_EGROUP)
        .field_str(4, "inside")
        .tag(54, WT_EGROUP)
        .field_int(I32, 12345) // a known number, but inside an unknown group: skipped
        .tag(53, WT_EGROUP);
    let mut inner = Wire::new();
    inner
        .field_varint(60, 1)
        .raw(&group.buf)
        .field_int(1, 8)
        .field_bytes(61, b"\x80\x80\x80")
        .field_fixed64(62, 0);
    let mut w = Wire::new();
    w.field_varint(50, 300)
        .field_int(I32, 42)
        .field_fixed64(51, 0x0102_0304_0506_0708)
        .field_bytes(52, &[0xc0, 0x80, 0xff])
        .raw(&group.buf)
        .field_str(S, "kept")
        .field_fixed32(57, 9)
        .field_msg(INNER, &inner)
        .field_varint(536_870_911, 1) // largest legal field number
        .field_bytes(99_999, b"x")
        .field_fixed32(100_001, 3)
        .tag(1000, WT_SGROUP)
        .tag(1000, WT_EGROUP)
        .field_packed_varints(NUMS, &[1]);
    let b = decode_one(&s, &w.buf, "unknown fields");
    assert_cell(&b, "i32", 0, Exp::I32(42));
    assert_cell(&b, "s", 0, Exp::Str("kept".into()));
    assert_cell(&b, "nums", 0, i32s(&[1]));
    assert_cell(&b, "far", 0, Exp::I32(0));
    let Exp::Struct { fields, .. } = cell(&b, "inner", 0) else {
        panic!("inner is a struct")
    };
    assert!(
        matches!(fields[0], (ref n, Exp::I32(8)) if n == "a"),
        "{fields:?}"
    );
    // The same input through a projection that skips most known fields too.
    let mut dec = projected_decoder(&s);
    dec.decode(&w.buf).expect("projection decodes");
    let pb = dec.flush().unwrap();
    assert_row(
        &pb,
        0,
        &reference(&s, &w.buf),
        &w.buf,
        "unknown fields, projected",
    );
}

#[test]
fn overlong_varints_are_accepted() {
    let s = schema();
    let mut inner = Wire::new();
    inner.tag(1, WT_VARINT).varint_overlong(3, 10);
    let mut w = Wire::new();
    w.tag(I32, WT_VARINT)
        .varint_overlong(1, 10)
        .tag(U64, WT_VARINT)
        .varint_overlong(300, 5)
        .tag(I64, WT_VARINT)
        .varint_overlong(0, 10)
        // Length prefix in 3 bytes.
        .tag(S, WT_LEN)
        .varint_overlong(3, 3)
        .raw(b"abc")
        // Tag in 4 bytes (field 16, varint).
        .varint_overlong((OPT as u64) << 3, 4)
        .varint(6)
        // Sub-message with an overlong length and an overlong value inside.
        .tag(INNER, WT_LEN)
        .varint_overlong(inner.buf.len() as u64, 2)
        .raw(&inner.buf)
        // Packed elements overlong.
        .tag(NUMS, WT_LEN)
        .varint(12)
        .varint_overlong(5, 2)
        .varint_overlong(6, 10)
        // A sint32 zig-zag value overlong.
        .tag(Z32, WT_VARINT)
        .varint_overlong(zigzag32(-2) as u64, 6);
    let b = decode_one(&s, &w.buf, "overlong varints");
    assert_cell(&b, "i32", 0, Exp::I32(1));
    assert_cell(&b, "u64", 0, Exp::U64(300));
    assert_cell(&b, "i64", 0, Exp::I64(0));
    assert_cell(&b, "s", 0, Exp::Str("abc".into()));
    assert_cell(&b, "opt", 0, Exp::I32(6));
    assert_cell(&b, "nums", 0, i32s(&[5, 6]));
    assert_cell(&b, "z32", 0, Exp::I32(-2));
}

#[test]
fn negative_int32_as_ten_byte_varint() {
    let s = schema();
    let mut inner = Wire::new();
    inner
        .field_int(1, -5)
        .field_packed_varints(3, &[(-1i64) as u64, 1]);
    let mut w = Wire::new();
    w.field_int(I32, -1);
    assert_eq!(w.buf.len(), 11, "tag + 10-byte varint");
    w.field_int(OPT, i32::MIN as i64)
        .field_packed_varints(NUMS, &[(-2i64) as u64, (i32::MIN as i64) as u64, 3])
        .field_int(NUMS, -100)
        .field_msg(INNER, &inner)
        .field_int(FAR, -9);
    let b = decode_one(&s, &w.buf, "negative int32");
    assert_cell(&b, "i32", 0, Exp::I32(-1));
    assert_cell(&b, "opt", 0, Exp::I32(i32::MIN));
    assert_cell(&b, "nums", 0, i32s(&[-2, i32::MIN, 3, -100]));
    assert_cell(&b, "far", 0, Exp::I32(-9));
    // Not sign-extended (5 bytes) and wider than 32 bits: int32 keeps the low 32 bits.
    let mut w = Wire::new();
    w.field_varint(I32, 0xffff_ffff)
        .field_varint(OPT, 0x1_0000_0005)
        .field_packed_varints(NUMS, &[0xffff_fffe]);
    let b = decode_one(&s, &w.buf, "int32 truncation");
    assert_cell(&b, "i32", 0, Exp::I32(-1));
    assert_cell(&b, "opt", 0, Exp::I32(5));
    assert_cell(&b, "nums", 0, i32s(&[-2]));
}

#[test]
fn map_entries_with_missing_parts() {
    let s = schema();
    let entry = |k: Option<&str>, v: Option<i64>, reversed: bool| {
        let mut e = Wire::new();
        if reversed {
            if let Some(v) = v {
                e.field_int(2, v);
            }
            if let Some(k) = k {
                e.field_str(1, k);
            }
        } else {
            if let Some(k) = k {
                e.field_str(1, k);
            }
            if let Some(v) = v {
                e.field_int(2, v);
            }
        }
        e
    };
    let mut with_unknown = entry(Some("u"), Some(3), false);
    with_unknown.field_fixed32(7, 1);
    let mut w = Wire::new();
    w.field_msg(M, &entry(Some("b"), Some(2), false))
        .field_msg(M, &entry(Some("a"), Some(-1), true))
        .field_int(I32, 1)
        .field_msg(M, &entry(None, Some(5), false))
        .field_msg(M, &entry(Some("k"), None, false))
        .field_msg(M, &entry(None, None, false))
        .field_msg(M, &with_unknown);
    let mut dec = decoder(&s);
    dec.decode(&w.buf).expect("valid map entries");
    let b = dec.flush().unwrap();
    let kv = |k: &str, v: i64| (Exp::Str(k.into()), Exp::I64(v));
    assert_cell(
        &b,
        "m",
        0,
        // The entry without a key and the empty one share the key "": the later one stays.
        Exp::Map(vec![
            kv("b", 2),
            kv("a", -1),
            kv("k", 0),
            kv("", 0),
            kv("u", 3),
        ]),
    );
}

#[test]
fn oneof_last_member_on_the_wire_wins() {
    let s = schema();
    let mut w = Wire::new();
    w.field_int(P_INT, 5).field_str(P_STR, "x");
    let b = decode_one(&s, &w.buf, "int then string");
    assert_cell(&b, "p_int", 0, Exp::Null);
    assert_cell(&b, "p_str", 0, Exp::Str("x".into()));
    let mut w = Wire::new();
    w.field_str(P_STR, "x").field_int(P_INT, 0);
    let b = decode_one(&s, &w.buf, "string then int 0");
    assert_cell(&b, "p_str", 0, Exp::Null);
    assert_cell(&b, "p_int", 0, Exp::I32(0));
    let mut leaf = Wire::new();
    leaf.field_int(1, 4);
    let mut w = Wire::new();
    w.field_int(P_INT, 5).field_msg(P_LEAF, &leaf);
    let b = decode_one(&s, &w.buf, "int then message");
    assert_cell(&b, "p_int", 0, Exp::Null);
}

#[test]
fn oneof_displaced_message_leaves_no_children() {
    // A message member displaced by a later member is absent: its struct is null and its
    // children hold their own defaults (scalars 0/"", lists empty, sub-messages null).
    let s = schema();
    let mut leaf = Wire::new();
    leaf.field_int(1, 4);
    let mut inner = Wire::new();
    inner
        .field_int(1, 9)
        .field_str(2, "stale")
        .field_packed_varints(3, &[1, 2])
        .field_msg(4, &leaf);
    let mut w = Wire::new();
    w.field_msg(P_INNER, &inner).field_int(P_INT, 7);
    let b = decode_one(&s, &w.buf, "message then int");
    assert_cell(&b, "p_int", 0, Exp::I32(7));
    assert_cell(
        &b,
        "p_inner",
        0,
        Exp::Struct {
            valid: false,
            fields: vec![
                ("a".into(), Exp::I32(0)),
                ("s".into(), Exp::Str(String::new())),
                ("r".into(), i32s(&[])),
                (
                    "leaf".into(),
                    Exp::Struct {
                        valid: false,
                        fields: vec![("x".into(), Exp::I64(0)), ("y".into(), Exp::I64(0))],
                    },
                ),
            ],
        },
    );
}

#[test]
fn oneof_message_after_displacement_starts_fresh() {
    // inner{...}, then p_int, then inner{a: 3}: the second occurrence is not merged into the
    // displaced first one.
    let s = schema();
    let mut first = Wire::new();
    first
        .field_int(1, 9)
        .field_str(2, "stale")
        .field_packed_varints(3, &[1, 2]);
    let mut second = Wire::new();
    second.field_int(1, 3);
    let mut w = Wire::new();
    w.field_msg(P_INNER, &first)
        .field_int(P_INT, 7)
        .field_msg(P_INNER, &second);
    let b = decode_one(&s, &w.buf, "message, int, message");
    assert_cell(&b, "p_int", 0, Exp::Null);
    assert_cell(
        &b,
        "p_inner",
        0,
        Exp::Struct {
            valid: true,
            fields: vec![
                ("a".into(), Exp::I32(3)),
                ("s".into(), Exp::Str(String::new())),
                ("r".into(), i32s(&[])),
                (
                    "leaf".into(),
                    Exp::Struct {
                        valid: false,
                        fields: vec![("x".into(), Exp::I64(0)), ("y".into(), Exp::I64(0))],
                    },
                ),
            ],
        },
    );
    // Without displacement the two occurrences merge.
    let mut w = Wire::new();
    w.field_msg(P_INNER, &first).field_msg(P_INNER, &second);
    let b = decode_one(&s, &w.buf, "message, message");
    let Exp::Struct { fields, .. } = cell(&b, "p_inner", 0) else {
        panic!("struct")
    };
    assert!(
        matches!(&fields[1].1, Exp::Str(x) if x == "stale"),
        "{fields:?}"
    );
}

// ---------------------------------------------------------------------------------------------
// Malformed input
// ---------------------------------------------------------------------------------------------

/// A valid message with lists, a struct with a list inside, a map entry and a JSON column;
/// `k` varies the values.
fn good(k: i64) -> Vec<u8> {
    let mut inner = Wire::new();
    inner
        .field_int(1, k)
        .field_str(2, &format!("in{k}"))
        .field_packed_varints(3, &[(k * 10) as u64, (k * 10 + 1) as u64]);
    let mut item = Wire::new();
    item.field_int(1, k).field_int(3, k);
    let mut entry = Wire::new();
    entry.field_str(1, &format!("g{k}")).field_int(2, k);
    let mut child = Wire::new();
    child.field_int(1, k + 1);
    let mut rec = Wire::new();
    rec.field_int(1, k).field_msg(2, &child);
    let mut w = Wire::new();
    w.field_int(I32, k)
        .field_int(I64, -k)
        .field_str(S, &format!("good{k}"))
        .field_packed_varints(NUMS, &(0..k as u64 + 2).collect::<Vec<_>>())
        .field_str(NAMES, &format!("n{k}"))
        .field_msg(INNER, &inner)
        .field_msg(ITEMS, &item)
        .field_msg(M, &entry)
        .field_msg(REC, &rec)
        .field_fixed32(PF32, k as u32)
        .field_int(OPT, k)
        .field_int(FAR, k);
    w.buf
}

/// The start of a bad message: valid fields that append list elements, a struct with a list
/// inside, a map entry and a JSON value before the bad bytes, to prove the rollback.
fn prefix() -> Wire {
    let mut inner = Wire::new();
    inner
        .field_packed_varints(3, &[1, 2, 3])
        .field_str(2, "partial");
    let mut item = Wire::new();
    item.field_packed_varints(3, &[4, 5]);
    let mut entry = Wire::new();
    entry.field_str(1, "pk").field_int(2, 5);
    let mut child = Wire::new();
    child.field_int(1, 77);
    let mut rec = Wire::new();
    rec.field_int(1, 9).field_msg(2, &child);
    let mut w = Wire::new();
    w.field_packed_varints(NUMS, &[7, 8, 9])
        .field_str(NAMES, "p1")
        .field_str(NAMES, "p2")
        .field_msg(INNER, &inner)
        .field_msg(ITEMS, &item)
        .field_msg(M, &entry)
        .field_msg(REC, &rec)
        .field_fixed32(PF32, 1)
        .field_str(S, "pre")
        .field_int(OPT, 3);
    w
}

/// Where the error must point.
#[derive(Debug, Clone, Copy)]
enum At {
    Exactly(usize),
    /// Anywhere in `lo..=hi` (for errors whose "start" has more than one reasonable reading).
    Within(usize, usize),
}

/// Decodes good(1), `bad`, good(2) and checks: `bad` fails with a matching kind and offset,
/// nothing panics, and the batch holds exactly the two good rows with correct values.
fn check_bad(
    s: &ProtoSchema,
    mut dec: ProtoDecoder,
    what: &str,
    bad: &[u8],
    kind_ok: fn(&DecodeErrorKind) -> bool,
    at: At,
) -> DecodeError {
    let g1 = good(1);
    let g2 = good(2);
    dec.decode(&g1).expect("first good message");
    let err = match dec.decode(bad) {
        Ok(()) => panic!("{what}: malformed input accepted: {}", hex(bad)),
        Err(e) => e,
    };
    assert!(
        kind_ok(&err.kind),
        "{what}: unexpected error kind {:?} ({err}) for {}",
        err.kind,
        hex(bad)
    );
    match at {
        At::Exactly(o) => assert_eq!(
            err.offset,
            o,
            "{what}: error offset ({err}) for {}",
            hex(bad)
        ),
        At::Within(lo, hi) => assert!(
            (lo..=hi).contains(&err.offset),
            "{what}: error offset {} not in {lo}..={hi} ({err}) for {}",
            err.offset,
            hex(bad)
        ),
    }
    let text = err.to_string();
    assert!(!text.is_empty());
    assert_eq!(dec.buffered_rows(), 1, "{what}: the bad row is rolled back");
    dec.decode(&g2).expect("second good message");
    assert_eq!(dec.buffered_rows(), 2);
    let batch = dec.flush().expect("two rows");
    assert_eq!(batch.num_rows(), 2, "{what}: exactly the two good rows");
    // Compare with the full reference where the decoder has every column, else the projection.
    for (row, g) in [(0, &g1), (1, &g2)] {
        let reference = reference(s, g);
        assert_row(
            &batch,
            row,
            &reference,
            g,
            &format!("{what}: good row {row}"),
        );
    }
    err
}

/// `check_bad` with all columns, and (for `top_level` problems, which a projection must still
/// detect while skipping) with a projection.
fn bad_case(
    what: &str,
    bad: &[u8],
    kind_ok: fn(&DecodeErrorKind) -> bool,
    at: At,
    top_level: bool,
) {
    let s = schema();
    check_bad(&s, decoder(&s), what, bad, kind_ok, at);
    if top_level {
        check_bad(
            &s,
            projected_decoder(&s),
            &format!("{what} (projected)"),
            bad,
            kind_ok,
            at,
        );
    }
}

/// Top-level columns are filled with defaults ahead of the rows being decoded (in runs of 256).
/// Over many batches of an odd size, with flushes on demand and failed rows in between, every
/// row must still hold exactly its own values: an empty message right after a failed one that
/// set fields gets the defaults, not what the failed row wrote.
#[test]
fn rows_filled_ahead_survive_failures_and_flushes() {
    let s = schema();
    for (batch_size, cols) in [(300, None), (1, None), (300, Some(()))] {
        let mut dec = if cols.is_some() {
            projected_decoder(&s)
        } else {
            ProtoDecoder::new(
                &s,
                ROOT,
                &default_columns(&s, ROOT).expect("default columns"),
                ProtoDecoderOptions {
                    batch_size,
                    ..ProtoDecoderOptions::default()
                },
            )
            .expect("plan")
        };
        let mut bad = prefix();
        bad.tag(I32, WT_VARINT);
        bad.raw(&[0x80, 0x80]);
        let mut expected: Vec<Vec<u8>> = Vec::new();
        let mut checked = 0usize;
        let check = |batch: RecordBatch, expected: &[Vec<u8>], checked: &mut usize| {
            for row in 0..batch.num_rows() {
                let bytes = &expected[*checked];
                let what = format!("batch size {batch_size}, row {}", *checked);
                assert_row(&batch, row, &reference(&s, bytes), bytes, &what);
                *checked += 1;
            }
        };
        for i in 0..1_000i64 {
            if i % 7 == 3 {
                assert!(dec.decode(&bad.buf).is_err(), "row {i}: bad input accepted");
                continue;
            }
            let msg = if i % 5 == 0 || i % 7 == 4 {
                Vec::new()
            } else {
                good(i)
            };
            dec.decode(&msg).expect("valid message");
            expected.push(msg);
            if let Some(b) = dec.take_full_batch() {
                check(b, &expected, &mut checked);
            }
            if i % 123 == 0 {
                if let Some(b) = dec.flush() {
                    check(b, &expected, &mut checked);
                }
            }
        }
        if let Some(b) = dec.flush() {
            check(b, &expected, &mut checked);
        }
        assert_eq!(checked, expected.len());
    }
}

#[test]
fn truncated_varint_value() {
    let mut w = prefix();
    w.tag(I32, WT_VARINT);
    let at = w.pos();
    w.raw(&[0x80, 0x80]);
    bad_case(
        "truncated varint value",
        &w.buf,
        |k| matches!(k, DecodeErrorKind::TruncatedVarint),
        At::Exactly(at),
        true,
    );
}

#[test]
fn truncated_varint_tag() {
    let mut w = prefix();
    let at = w.pos();
    w.raw(&[0x80]);
    bad_case(
        "truncated tag",
        &w.buf,
        |k| matches!(k, DecodeErrorKind::TruncatedVarint),
        At::Exactly(at),
        true,
    );
}

#[test]
fn truncated_varint_in_unknown_field() {
    let mut w = prefix();
    w.tag(70, WT_VARINT);
    let at = w.pos();
    w.raw(&[0xff; 9]);
    bad_case(
        "truncated unknown varint",
        &w.buf,
        |k| matches!(k, DecodeErrorKind::TruncatedVarint),
        At::Exactly(at),
        true,
    );
}

#[test]
fn truncated_varint_at_sub_message_end() {
    // The varint's continuation byte is the last byte of the sub-message; the parent's next
    // byte would complete it if the sub-message bound were ignored.
    let mut w = prefix();
    let mut inner = Wire::new();
    inner.field_int(1, 1).tag(1, WT_VARINT);
    let rel = inner.pos();
    inner.raw(&[0x80]);
    w.tag(INNER, WT_LEN).varint(inner.buf.len() as u64);
    let at = w.pos() + rel;
    w.raw(&inner.buf).field_int(I32, 1);
    bad_case(
        "varint truncated at sub-message end",
        &w.buf,
        |k| matches!(k, DecodeErrorKind::TruncatedVarint),
        At::Exactly(at),
        false,
    );
}

#[test]
fn truncated_varint_at_packed_end() {
    let mut w = prefix();
    w.tag(NUMS, WT_LEN).varint(3).raw(&[0x01, 0x02]);
    let at = w.pos();
    w.raw(&[0x80]).raw(&[0x01]).field_int(I32, 1);
    bad_case(
        "varint truncated at packed end",
        &w.buf,
        |k| matches!(k, DecodeErrorKind::TruncatedVarint),
        At::Exactly(at),
        true,
    );
}

#[test]
fn varint_longer_than_ten_bytes() {
    let mut w = prefix();
    w.tag(I64, WT_VARINT);
    let at = w.pos();
    w.raw(&[0x80; 10]).raw(&[0x01]).field_int(I32, 1);
    bad_case(
        "11-byte varint",
        &w.buf,
        |k| matches!(k, DecodeErrorKind::VarintTooLong),
        At::Exactly(at),
        true,
    );
    let mut w = prefix();
    w.tag(71, WT_VARINT);
    let at = w.pos();
    w.raw(&[0xff; 11]).raw(&[0x01]);
    bad_case(
        "11-byte varint, unknown field",
        &w.buf,
        |k| matches!(k, DecodeErrorKind::VarintTooLong),
        At::Exactly(at),
        true,
    );
}

#[test]
fn truncated_fixed32() {
    let mut w = prefix();
    w.tag(FX32, WT_I32);
    let at = w.pos();
    w.raw(&[1, 2, 3]);
    bad_case(
        "truncated fixed32",
        &w.buf,
        |k| matches!(k, DecodeErrorKind::TruncatedField),
        At::Exactly(at),
        true,
    );
    let mut w = prefix();
    w.tag(72, WT_I32);
    let at = w.pos();
    w.raw(&[1]);
    bad_case(
        "truncated unknown fixed32",
        &w.buf,
        |k| matches!(k, DecodeErrorKind::TruncatedField),
        At::Exactly(at),
        true,
    );
}

#[test]
fn truncated_fixed64() {
    let mut w = prefix();
    w.tag(FX64, WT_I64);
    let at = w.pos();
    w.raw(&[1, 2, 3, 4, 5, 6, 7]);
    bad_case(
        "truncated fixed64",
        &w.buf,
        |k| matches!(k, DecodeErrorKind::TruncatedField),
        At::Exactly(at),
        true,
    );
    let mut w = prefix();
    w.tag(D, WT_I64);
    let at = w.pos();
    bad_case(
        "double with no bytes",
        &w.buf,
        |k| matches!(k, DecodeErrorKind::TruncatedField),
        At::Exactly(at),
        true,
    );
}

#[test]
fn fixed_value_crossing_sub_message_end() {
    let mut w = prefix();
    let mut inner = Wire::new();
    inner.field_int(1, 1).tag(20, WT_I32);
    let rel = inner.pos();
    inner.raw(&[1, 2]);
    w.tag(INNER, WT_LEN).varint(inner.buf.len() as u64);
    let at = w.pos() + rel;
    w.raw(&inner.buf).field_int(I32, 1).field_int(I64, 1);
    bad_case(
        "fixed32 crossing sub-message end",
        &w.buf,
        |k| matches!(k, DecodeErrorKind::TruncatedField),
        At::Exactly(at),
        false,
    );
}

#[test]
fn length_past_end() {
    let mut w = prefix();
    w.tag(S, WT_LEN);
    let at = w.pos();
    w.varint(100).raw(b"abc");
    bad_case(
        "string length past end",
        &w.buf,
        |k| {
            matches!(
                k,
                DecodeErrorKind::LengthPastEnd {
                    length: 100,
                    remaining: 3
                }
            )
        },
        At::Exactly(at),
        true,
    );
    let mut w = prefix();
    w.tag(73, WT_LEN);
    let at = w.pos();
    w.varint(5).raw(&[1]);
    bad_case(
        "unknown length past end",
        &w.buf,
        |k| {
            matches!(
                k,
                DecodeErrorKind::LengthPastEnd {
                    length: 5,
                    remaining: 1
                }
            )
        },
        At::Exactly(at),
        true,
    );
    let mut w = prefix();
    w.tag(INNER, WT_LEN);
    let at = w.pos();
    w.varint(u64::MAX).raw(&[8, 1]);
    bad_case(
        "sub-message length u64::MAX",
        &w.buf,
        |k| {
            matches!(
                k,
                DecodeErrorKind::LengthPastEnd {
                    length: u64::MAX,
                    ..
                }
            )
        },
        At::Exactly(at),
        true,
    );
    let mut w = prefix();
    w.tag(NUMS, WT_LEN);
    let at = w.pos();
    w.varint(1 << 62).raw(&[1, 2, 3]);
    bad_case(
        "packed length 2^62",
        &w.buf,
        |k| matches!(k, DecodeErrorKind::LengthPastEnd { .. }),
        At::Exactly(at),
        true,
    );
}

#[test]
fn length_past_end_of_enclosing_sub_message() {
    // Fits in the whole buffer, but not in the sub-message that contains it.
    let mut w = prefix();
    let mut inner = Wire::new();
    inner.field_int(1, 1).tag(2, WT_LEN);
    let rel = inner.pos();
    inner.varint(10).raw(b"ab");
    w.tag(INNER, WT_LEN).varint(inner.buf.len() as u64);
    let at = w.pos() + rel;
    w.raw(&inner.buf).field_str(S, "0123456789abcdef");
    bad_case(
        "length past sub-message end",
        &w.buf,
        |k| {
            matches!(
                k,
                DecodeErrorKind::LengthPastEnd {
                    length: 10,
                    remaining: 2
                }
            )
        },
        At::Exactly(at),
        false,
    );
}

#[test]
fn wire_types_6_and_7() {
    for (field, wt) in [(I32, 6u8), (S, 7), (74, 6), (75, 7)] {
        let mut w = prefix();
        let at = w.pos();
        w.tag(field, wt).raw(&[0, 0, 0, 0, 0, 0, 0, 0]);
        let ok: fn(&DecodeErrorKind) -> bool = if wt == 6 {
            |k| matches!(k, DecodeErrorKind::InvalidWireType(6))
        } else {
            |k| matches!(k, DecodeErrorKind::InvalidWireType(7))
        };
        bad_case(
            &format!("wire type {wt} on field {field}"),
            &w.buf,
            ok,
            At::Exactly(at),
            true,
        );
    }
}

#[test]
fn wire_type_mismatch_on_known_field() {
    let mut w = prefix();
    let at = w.pos();
    w.field_fixed64(I32, 1);
    bad_case(
        "int32 sent as fixed64",
        &w.buf,
        |k| {
            matches!(k, DecodeErrorKind::WireTypeMismatch { field, found: 1, expected: 0 }
                if field.ends_with("i32"))
        },
        At::Exactly(at),
        false,
    );
    let mut w = prefix();
    let at = w.pos();
    w.field_varint(S, 1);
    bad_case(
        "string sent as varint",
        &w.buf,
        |k| {
            matches!(
                k,
                DecodeErrorKind::WireTypeMismatch {
                    found: 0,
                    expected: 2,
                    ..
                }
            )
        },
        At::Exactly(at),
        false,
    );
    let mut w = prefix();
    let at = w.pos();
    w.field_fixed32(INNER, 1);
    bad_case(
        "message sent as fixed32",
        &w.buf,
        |k| matches!(k, DecodeErrorKind::WireTypeMismatch { found: 5, .. }),
        At::Exactly(at),
        false,
    );
}

#[test]
fn end_group_without_start() {
    let mut w = prefix();
    let at = w.pos();
    w.tag(76, WT_EGROUP).field_int(I32, 1);
    bad_case(
        "end-group without start",
        &w.buf,
        |k| matches!(k, DecodeErrorKind::UnexpectedEndGroup(76)),
        At::Exactly(at),
        true,
    );
    // Inside a sub-message: an end-group that would match nothing in the sub-message.
    let mut w = prefix();
    let mut inner = Wire::new();
    inner.field_int(1, 1);
    let rel = inner.pos();
    inner.tag(INNER, WT_EGROUP);
    w.tag(INNER, WT_LEN).varint(inner.buf.len() as u64);
    let at = w.pos() + rel;
    w.raw(&inner.buf);
    bad_case(
        "end-group without start in a sub-message",
        &w.buf,
        |k| matches!(k, DecodeErrorKind::UnexpectedEndGroup(9)),
        At::Exactly(at),
        false,
    );
}

#[test]
fn end_group_number_mismatch() {
    let mut w = prefix();
    w.tag(77, WT_SGROUP).field_varint(1, 5);
    let at = w.pos();
    w.tag(78, WT_EGROUP).field_int(I32, 1);
    bad_case(
        "end-group number mismatch",
        &w.buf,
        |k| {
            matches!(
                k,
                DecodeErrorKind::EndGroupMismatch {
                    expected: 77,
                    found: 78
                }
            )
        },
        At::Exactly(at),
        true,
    );
    let mut w = prefix();
    w.tag(77, WT_SGROUP).tag(79, WT_SGROUP);
    let at = w.pos();
    w.tag(77, WT_EGROUP).tag(79, WT_EGROUP);
    bad_case(
        "crossed nested groups",
        &w.buf,
        |k| {
            matches!(
                k,
                DecodeErrorKind::EndGroupMismatch {
                    expected: 79,
                    found: 77
                }
            )
        },
        At::Exactly(at),
        true,
    );
}

#[test]
fn unterminated_group() {
    let mut w = prefix();
    let at = w.pos();
    w.tag(80, WT_SGROUP).field_varint(1, 5).field_str(2, "x");
    bad_case(
        "unterminated group",
        &w.buf,
        |k| matches!(k, DecodeErrorKind::UnterminatedGroup(80)),
        At::Exactly(at),
        true,
    );
    // A group opened inside a sub-message and "closed" after it, in the parent.
    let mut w = prefix();
    let mut inner = Wire::new();
    inner.field_int(1, 1);
    let rel = inner.pos();
    inner.tag(81, WT_SGROUP).field_int(1, 2);
    w.tag(INNER, WT_LEN).varint(inner.buf.len() as u64);
    let at = w.pos() + rel;
    w.raw(&inner.buf).tag(81, WT_EGROUP);
    bad_case(
        "group crossing the sub-message end",
        &w.buf,
        |k| matches!(k, DecodeErrorKind::UnterminatedGroup(81)),
        At::Exactly(at),
        false,
    );
}

fn utf8_case(what: &str, build: impl Fn(&mut Wire) -> (usize, usize)) {
    let mut w = prefix();
    let (lo, hi) = build(&mut w);
    let s = schema();
    check_bad(
        &s,
        decoder(&s),
        what,
        &w.buf,
        |k| matches!(k, DecodeErrorKind::InvalidUtf8 { .. }),
        At::Within(lo, hi),
    );
}

/// Appends a string field; returns (tag offset, offset of the first invalid byte).
fn put_bad_string(w: &mut Wire, field: u32, payload: &[u8], bad_index: usize) -> (usize, usize) {
    let tag_at = w.pos();
    w.tag(field, WT_LEN).varint(payload.len() as u64);
    let data_at = w.pos();
    w.raw(payload);
    (tag_at, data_at + bad_index)
}

#[test]
fn invalid_utf8_in_string_fields() {
    utf8_case("0xff in a string", |w| put_bad_string(w, S, b"a\xffb", 1));
    utf8_case("truncated multi-byte sequence", |w| {
        let r = put_bad_string(w, S, "ok日".as_bytes().split_at(4).0, 2);
        w.field_int(I32, 1);
        r
    });
    utf8_case("overlong encoding of NUL", |w| {
        put_bad_string(w, S, b"\xc0\x80", 0)
    });
    utf8_case("UTF-16 surrogate", |w| {
        put_bad_string(w, S, b"x\xed\xa0\x80", 1)
    });
    utf8_case("invalid element of a repeated string", |w| {
        w.field_str(NAMES, "fine");
        put_bad_string(w, NAMES, b"\xfe", 0)
    });
    utf8_case("invalid string inside a sub-message", |w| {
        let mut inner = Wire::new();
        inner.field_packed_varints(3, &[1]);
        let (t, b) = put_bad_string(&mut inner, 2, b"abc\x80", 3);
        w.tag(INNER, WT_LEN).varint(inner.buf.len() as u64);
        let base = w.pos();
        w.raw(&inner.buf);
        (base + t, base + b)
    });
    utf8_case("invalid map key", |w| {
        let mut e = Wire::new();
        let (t, b) = put_bad_string(&mut e, 1, b"k\xff", 1);
        e.field_int(2, 1);
        w.tag(M, WT_LEN).varint(e.buf.len() as u64);
        let base = w.pos();
        w.raw(&e.buf);
        (base + t, base + b)
    });
}

/// A chain of `levels` sub-messages through `Msg.rec` then `Rec.child` (the first level is
/// `rec`), the innermost one holding v = 1. Returns the bytes and the offset of each level's
/// tag. Built outside-in with precomputed lengths (linear in `levels`).
fn rec_chain(levels: usize) -> (Vec<u8>, Vec<usize>) {
    let innermost = {
        let mut w = Wire::new();
        w.field_int(1, 1);
        w.buf
    };
    // lens[i]: payload length of level i+1 (0-based from the outside).
    let mut lens = vec![0usize; levels];
    let mut len = innermost.len();
    for i in (0..levels).rev() {
        lens[i] = len;
        let mut head = Wire::new();
        head.tag(2, WT_LEN).varint(len as u64);
        len += head.buf.len();
    }
    let mut w = Wire::new();
    let mut tags = Vec::with_capacity(levels);
    for (i, &l) in lens.iter().enumerate() {
        tags.push(w.pos());
        w.tag(if i == 0 { REC } else { 2 }, WT_LEN).varint(l as u64);
    }
    w.raw(&innermost);
    (w.buf, tags)
}

/// `levels` nested unknown groups (numbers 90, 91, ...), closed, after `prefix`.
fn group_chain(w: &mut Wire, levels: usize) -> Vec<usize> {
    let mut tags = Vec::new();
    for i in 0..levels {
        tags.push(w.pos());
        w.tag(90 + (i as u32 % 1000), WT_SGROUP);
    }
    w.field_int(1, 1);
    for i in (0..levels).rev() {
        w.tag(90 + (i as u32 % 1000), WT_EGROUP);
    }
    tags
}

#[test]
fn nesting_of_100_levels_is_accepted() {
    let s = schema();
    let (bytes, _) = rec_chain(100);
    decode_one(&s, &bytes, "100 nested sub-messages");
    let mut w = Wire::new();
    group_chain(&mut w, 100);
    w.field_int(I32, 5);
    decode_one(&s, &w.buf, "100 nested groups");
}

#[test]
fn nesting_deeper_than_100_sub_messages() {
    let (chain, tags) = rec_chain(101);
    let mut w = prefix();
    let base = w.pos();
    w.raw(&chain);
    // The 101st level is the one too deep: its tag (or anywhere up to its payload start).
    let lo = base + tags[100];
    let hi = base + tags[100] + 2;
    let s = schema();
    check_bad(
        &s,
        decoder(&s),
        "101 nested sub-messages",
        &w.buf,
        |k| matches!(k, DecodeErrorKind::TooDeep(100)),
        At::Within(lo, hi),
    );
}

#[test]
fn nesting_deeper_than_100_groups() {
    let mut w = prefix();
    let tags = group_chain(&mut w, 101);
    let lo = tags[100];
    bad_case(
        "101 nested unknown groups",
        &w.buf,
        |k| matches!(k, DecodeErrorKind::TooDeep(100)),
        At::Within(lo, lo + 2),
        true,
    );
    // Groups inside a sub-message count from the sub-message's depth: 1 + 100 > 100.
    let mut g = Wire::new();
    let tags = group_chain(&mut g, 100);
    let mut w = prefix();
    w.tag(INNER, WT_LEN).varint(g.buf.len() as u64);
    let base = w.pos();
    w.raw(&g.buf);
    let lo = base + tags[99];
    bad_case(
        "100 groups inside a sub-message",
        &w.buf,
        |k| matches!(k, DecodeErrorKind::TooDeep(100)),
        At::Within(lo, lo + 2),
        false,
    );
}

#[test]
fn very_deep_sub_messages_do_not_overflow_the_stack() {
    let s = schema();
    let (chain, _) = rec_chain(100_000);
    let mut w = prefix();
    w.raw(&chain);
    let mut dec = decoder(&s);
    let e = dec.decode(&w.buf).expect_err("100000 nested sub-messages");
    assert!(matches!(e.kind, DecodeErrorKind::TooDeep(100)), "{e}");
    assert_eq!(dec.buffered_rows(), 0);
}

#[test]
fn very_deep_groups_do_not_overflow_the_stack() {
    let s = schema();
    let mut w = prefix();
    for _ in 0..100_000 {
        w.tag(91, WT_SGROUP);
    }
    let mut dec = decoder(&s);
    let e = dec.decode(&w.buf).expect_err("100000 nested groups");
    assert!(matches!(e.kind, DecodeErrorKind::TooDeep(100)), "{e}");
    assert_eq!(dec.buffered_rows(), 0);
}

fn decoder_with_depth(s: &ProtoSchema, max_depth: usize) -> ProtoDecoder {
    let cols = default_columns(s, ROOT).unwrap();
    let opts = ProtoDecoderOptions {
        max_depth,
        ..ProtoDecoderOptions::default()
    };
    ProtoDecoder::new(s, ROOT, &cols, opts).unwrap()
}

#[test]
fn max_depth_option_applies_to_struct_sub_messages() {
    let s = schema();
    let mut dec = decoder_with_depth(&s, 1);
    let mut inner = Wire::new();
    inner.field_int(1, 1);
    let mut w = Wire::new();
    w.field_msg(INNER, &inner);
    dec.decode(&w.buf).expect("1 level with max_depth 1");
    let mut leaf = Wire::new();
    leaf.field_int(1, 1);
    let mut inner = Wire::new();
    inner.field_int(1, 1);
    let rel = inner.pos();
    inner.field_msg(4, &leaf);
    let mut w = Wire::new();
    w.field_packed_varints(NUMS, &[1, 2]);
    w.tag(INNER, WT_LEN).varint(inner.buf.len() as u64);
    let at = w.pos() + rel;
    w.raw(&inner.buf);
    let e = dec.decode(&w.buf).expect_err("2 levels with max_depth 1");
    assert!(matches!(e.kind, DecodeErrorKind::TooDeep(1)), "{e}");
    assert!(
        (at..=at + 2).contains(&e.offset),
        "{e}: expected about {at}"
    );
    assert_eq!(dec.buffered_rows(), 1);
}

#[test]
fn max_depth_option_applies_to_groups() {
    let s = schema();
    let mut dec = decoder_with_depth(&s, 2);
    let mut w = Wire::new();
    group_chain(&mut w, 2);
    dec.decode(&w.buf).expect("2 groups with max_depth 2");
    let mut w = Wire::new();
    let tags = group_chain(&mut w, 3);
    let e = dec.decode(&w.buf).expect_err("3 groups with max_depth 2");
    assert!(matches!(e.kind, DecodeErrorKind::TooDeep(2)), "{e}");
    assert!((tags[2]..=tags[2] + 2).contains(&e.offset), "{e}");
    assert_eq!(dec.buffered_rows(), 1);
}

#[test]
fn max_depth_option_applies_to_json_sub_messages() {
    // rec (level 1) is a struct; rec.child (level 2 and below) is rendered as JSON: the limit
    // still counts every level.
    let s = schema();
    let mut dec = decoder_with_depth(&s, 3);
    let (ok, _) = rec_chain(3);
    dec.decode(&ok).expect("3 levels with max_depth 3");
    let (bad, tags) = rec_chain(4);
    let e = dec.decode(&bad).expect_err("4 levels with max_depth 3");
    assert!(matches!(e.kind, DecodeErrorKind::TooDeep(3)), "{e}");
    assert!((tags[3]..=tags[3] + 2).contains(&e.offset), "{e}");
    assert_eq!(dec.buffered_rows(), 1);
}

#[test]
fn field_number_zero() {
    let mut w = prefix();
    let at = w.pos();
    w.tag(0, WT_VARINT).varint(1);
    bad_case(
        "field 0, varint",
        &w.buf,
        |k| matches!(k, DecodeErrorKind::FieldNumberZero),
        At::Exactly(at),
        true,
    );
    let mut w = prefix();
    let at = w.pos();
    w.tag(0, WT_LEN).varint(0).field_int(I32, 3);
    bad_case(
        "field 0, length-delimited",
        &w.buf,
        |k| matches!(k, DecodeErrorKind::FieldNumberZero),
        At::Exactly(at),
        true,
    );
    let mut w = prefix();
    let mut inner = Wire::new();
    inner.field_int(1, 1);
    let rel = inner.pos();
    inner.tag(0, WT_I32).raw(&[0; 4]);
    w.tag(INNER, WT_LEN).varint(inner.buf.len() as u64);
    let at = w.pos() + rel;
    w.raw(&inner.buf);
    bad_case(
        "field 0 inside a sub-message",
        &w.buf,
        |k| matches!(k, DecodeErrorKind::FieldNumberZero),
        At::Exactly(at),
        false,
    );
}

#[test]
fn packed_fixed_with_partial_element() {
    let mut w = prefix();
    let at = w.pos();
    w.tag(PF32, WT_LEN).varint(5).raw(&[0; 5]).field_int(I32, 1);
    bad_case(
        "packed fixed32 of 5 bytes",
        &w.buf,
        |k| matches!(k, DecodeErrorKind::BadPackedLength { .. }),
        At::Within(at, at + 2),
        false,
    );
    let mut w = prefix();
    let at = w.pos();
    w.tag(PD, WT_LEN).varint(12).raw(&[0; 12]);
    bad_case(
        "packed double of 12 bytes",
        &w.buf,
        |k| matches!(k, DecodeErrorKind::BadPackedLength { .. }),
        At::Within(at, at + 2),
        false,
    );
}

#[test]
fn error_inside_a_json_rendered_sub_message() {
    // rec.child is recursive, so it is rendered as JSON; a truncated varint inside it is still
    // a malformed message, reported where the bad byte is.
    let mut w = prefix();
    let mut child = Wire::new();
    child.field_int(1, 1).tag(1, WT_VARINT);
    let rel_child = child.pos();
    child.raw(&[0x80]);
    let mut rec = Wire::new();
    rec.field_int(1, 1)
        .tag(2, WT_LEN)
        .varint(child.buf.len() as u64);
    let rel_rec = rec.pos();
    rec.raw(&child.buf);
    w.tag(REC, WT_LEN).varint(rec.buf.len() as u64);
    let at = w.pos() + rel_rec + rel_child;
    w.raw(&rec.buf).field_int(I32, 1);
    bad_case(
        "truncated varint inside a JSON sub-message",
        &w.buf,
        |k| matches!(k, DecodeErrorKind::TruncatedVarint),
        At::Exactly(at),
        false,
    );
}

#[test]
fn empty_and_tiny_inputs() {
    let s = schema();
    let mut dec = decoder(&s);
    dec.decode(&[]).expect("empty message is valid");
    for bytes in [
        &[0x00u8][..],
        &[0x07],
        &[0x0e],
        &[0x08],
        &[0x0a],
        &[0x0a, 0x01],
        &[0xff],
    ] {
        assert!(
            dec.decode(bytes).is_err(),
            "{} must be rejected",
            hex(bytes)
        );
    }
    assert_eq!(dec.buffered_rows(), 1);
    let b = dec.flush().unwrap();
    assert_row(&b, 0, &DynamicMessage::new(desc(&s)), &[], "empty");
}

/// Whether `bytes` hold 9 continuation bytes followed by a final byte of 2..=0x7f: a 10-byte
/// varint that overflows 64 bits.
fn has_overflowing_varint(bytes: &[u8]) -> bool {
    bytes
        .windows(10)
        .any(|w| w[..9].iter().all(|&b| b >= 0x80) && (2..0x80).contains(&w[9]))
}

/// Every truncation and many single-byte corruptions of valid messages: weir never panics,
/// accepts exactly what prost-reflect accepts, rolls back what it rejects, and every accepted
/// row equals prost-reflect's reading.
#[test]
fn truncations_and_corruptions_agree_with_prost_reflect() {
    let s = schema();
    let cols = default_columns(&s, ROOT).unwrap();
    let mut rng = Rng::new(0xbad_c0de);
    let mut sources = vec![good(1), good(3), prefix().buf];
    {
        let mut w = prefix();
        group_chain(&mut w, 3);
        w.field_double(D, -2.5)
            .field_fixed64(FX64, 9)
            .field_sint32(Z32, -9);
        sources.push(w.buf);
    }
    let mut disagreements = Vec::new();
    let mut inputs: Vec<Vec<u8>> = Vec::new();
    for src in &sources {
        for n in 0..src.len() {
            inputs.push(src[..n].to_vec());
        }
        for _ in 0..300 {
            let mut m = src.clone();
            let i = rng.below(m.len() as u64) as usize;
            match rng.below(3) {
                0 => m[i] ^= 1 << rng.below(8),
                1 => m[i] = rng.next_u64() as u8,
                _ => {
                    m.remove(i);
                }
            }
            inputs.push(m);
        }
    }
    let mut dec = ProtoDecoder::new(&s, ROOT, &cols, ProtoDecoderOptions::default()).unwrap();
    let mut accepted: Vec<(DynamicMessage, Vec<u8>)> = Vec::new();
    for input in &inputs {
        let before = dec.buffered_rows();
        let ours = dec.decode(input);
        let theirs = DynamicMessage::decode(desc(&s), input.as_slice());
        match (&ours, &theirs) {
            (Ok(()), Ok(m)) => accepted.push((m.clone(), input.clone())),
            (Err(_), Err(_)) => {}
            (Ok(()), Err(e)) => {
                // Known, tolerated: a 10-byte varint whose last byte sets bits above 64.
                // protobuf-go and prost reject it ("invalid varint"); protobuf C++ and upb drop
                // the extra bits and accept. weir accepts (the C++ behaviour).
                if !(e.to_string().contains("invalid varint") && has_overflowing_varint(input)) {
                    disagreements.push(format!(
                        "weir accepts, prost-reflect rejects ({e}): {}",
                        hex(input)
                    ));
                }
                // Keep the row aligned with `accepted` so later rows are still checked.
                accepted.push((DynamicMessage::new(desc(&s)), input.clone()));
            }
            // Known, tolerated: prost-reflect does not check the wire type of a map field
            // (it reads any wire type as length-delimited); weir's rejection is correct.
            (
                Err(DecodeError {
                    kind: DecodeErrorKind::WireTypeMismatch { field, .. },
                    ..
                }),
                Ok(_),
            ) if field == "wire.Msg.m" => {}
            (Err(e), Ok(_)) => disagreements.push(format!(
                "weir rejects ({e}), prost-reflect accepts: {}",
                hex(input)
            )),
        }
        let after = dec.buffered_rows();
        assert_eq!(
            after,
            before + usize::from(ours.is_ok()),
            "a rejected message must leave no row"
        );
    }
    let batch = dec.flush().expect("rows");
    assert_eq!(batch.num_rows(), accepted.len());
    // The map column is not compared: prost-reflect's HashMap loses the wire order.
    let keep: Vec<usize> = (0..batch.num_columns())
        .filter(|&i| batch.schema().field(i).name() != "m")
        .collect();
    let batch = batch.project(&keep).unwrap();
    let mut row_failures = Vec::new();
    for (row, (m, bytes)) in accepted.iter().enumerate() {
        if DynamicMessage::decode(desc(&s), bytes.as_slice()).is_err() {
            continue;
        }
        let d = row_diffs(&batch, row, m);
        if !d.is_empty() {
            row_failures.push(format!("{}: {}", hex(bytes), d.join("; ")));
        }
    }
    assert!(
        disagreements.is_empty() && row_failures.is_empty(),
        "{} accept/reject disagreements:\n  {}\n{} row differences:\n  {}",
        disagreements.len(),
        disagreements
            .iter()
            .take(10)
            .cloned()
            .collect::<Vec<_>>()
            .join("\n  "),
        row_failures.len(),
        row_failures
            .iter()
            .take(10)
            .cloned()
            .collect::<Vec<_>>()
            .join("\n  ")
    );
}

// ---------------------------------------------------------------------------------------------
// Plan errors
// ---------------------------------------------------------------------------------------------

fn plan_err(s: &ProtoSchema, message: &str, cols: &[ColumnSpec]) -> PlanError {
    match ProtoDecoder::new(s, message, cols, ProtoDecoderOptions::default()) {
        Ok(_) => panic!("plan for {cols:?} should fail"),
        Err(e) => e,
    }
}

#[test]
fn plan_error_type_mismatch_names_column_field_and_types() {
    let s = schema();
    let e = plan_err(
        &s,
        ROOT,
        &[ColumnSpec::new("my_column", DataType::Int64).with_path("s")],
    );
    let text = e.to_string();
    assert!(matches!(e, PlanError::TypeMismatch { .. }), "{e:?}");
    assert!(text.contains("my_column"), "names the column: {text}");
    assert!(
        text.contains("wire.Msg.s") || text.contains("'s'") || text.contains("\"s\""),
        "names the field: {text}"
    );
    assert!(text.contains("Int64"), "names the declared type: {text}");
    assert!(
        text.contains("string") || text.contains("Utf8"),
        "names the field type: {text}"
    );
    // Without a path, the column name is the field name.
    let e = plan_err(&s, ROOT, &[ColumnSpec::new("i32", DataType::Utf8)]);
    let text = e.to_string();
    assert!(matches!(e, PlanError::TypeMismatch { .. }), "{e:?}");
    assert!(
        text.contains("i32") && text.contains("Utf8") && text.contains("int32"),
        "{text}"
    );
    // Other misfits.
    for (col, why) in [
        (
            ColumnSpec::new("inner", DataType::Int32),
            "message as Int32",
        ),
        (
            ColumnSpec::new("nums", DataType::Int32),
            "repeated as a scalar",
        ),
        (
            ColumnSpec::new(
                "i32",
                DataType::List(std::sync::Arc::new(weir_codec::Field::new(
                    "item",
                    DataType::Int32,
                    true,
                ))),
            ),
            "scalar as a list",
        ),
        (ColumnSpec::new("b", DataType::Utf8), "bytes as Utf8"),
        (ColumnSpec::new("u64", DataType::Int32), "uint64 as Int32"),
        (ColumnSpec::new("d", DataType::Float32), "double as Float32"),
        (ColumnSpec::new("m", DataType::Utf8), "map as Utf8"),
    ] {
        let e = plan_err(&s, ROOT, std::slice::from_ref(&col));
        let text = e.to_string();
        assert!(
            text.contains(&col.name),
            "{why}: error names the column: {text}"
        );
    }
}

#[test]
fn plan_error_unknown_column_and_message() {
    let s = schema();
    let e = plan_err(
        &s,
        ROOT,
        &[ColumnSpec::new("no_such_field", DataType::Int32)],
    );
    let text = e.to_string();
    assert!(matches!(e, PlanError::UnknownField { .. }), "{e:?}");
    assert!(text.contains("no_such_field"), "{text}");
    let e = plan_err(
        &s,
        ROOT,
        &[ColumnSpec::new("c", DataType::Int32).with_path("inner.nope")],
    );
    let text = e.to_string();
    assert!(text.contains("nope"), "{text}");
    let e = plan_err(
        &s,
        "wire.NoSuchMessage",
        &[ColumnSpec::new("i32", DataType::Int32)],
    );
    let text = e.to_string();
    assert!(matches!(e, PlanError::UnknownMessage { .. }), "{e:?}");
    assert!(text.contains("wire.NoSuchMessage"), "{text}");
    match default_columns(&s, "wire.NoSuchMessage") {
        Ok(_) => panic!("default_columns of an unknown message"),
        Err(e) => assert!(e.to_string().contains("wire.NoSuchMessage"), "{e}"),
    }
}

#[test]
fn path_column_reads_nested_field() {
    let s = schema();
    let mut leaf = Wire::new();
    leaf.field_int(1, -77);
    let mut inner = Wire::new();
    inner.field_msg(4, &leaf).field_str(2, "deep");
    let mut w = Wire::new();
    w.field_msg(INNER, &inner);
    let cols = vec![
        ColumnSpec::new("leaf_x", DataType::Int64).with_path("inner.leaf.x"),
        ColumnSpec::new("inner_s", DataType::Utf8).with_path("inner.s"),
    ];
    let mut dec = ProtoDecoder::new(&s, ROOT, &cols, ProtoDecoderOptions::default()).unwrap();
    dec.decode(&w.buf).unwrap();
    let b = dec.flush().unwrap();
    assert_cell(&b, "leaf_x", 0, Exp::I64(-77));
    assert_cell(&b, "inner_s", 0, Exp::Str("deep".into()));
}

/// Strings of up to 32 bytes are checked and copied as one fixed-size chunk read past their
/// end (the bytes after them are masked off or cut away). At every length around that limit,
/// as a direct column (`s`), a repeated one (`names`) and inside a sub-message (`inner.s`),
/// followed by bytes with the high bit set (which must not count against the string), or at
/// the very end of the message (too few bytes left for a chunk): valid strings, ASCII or not,
/// decode to exactly their text, and a string whose last byte is invalid is rejected there.
#[test]
fn short_strings_at_every_length_and_position() {
    let s = schema();
    for len in 0..=40usize {
        let ascii: String = (0..len).map(|i| (b'a' + (i % 26) as u8) as char).collect();
        // Non-ASCII ending: the last two bytes are one two-byte character.
        let accented = if len >= 2 {
            format!("{}é", &ascii[..len - 2])
        } else {
            ascii.clone()
        };
        for text in [&ascii, &accented] {
            for at_end in [false, true] {
                let mut inner = Wire::new();
                inner.field_str(2, text);
                if !at_end {
                    inner.field_int(1, -1);
                }
                let mut w = Wire::new();
                if !at_end {
                    // After each string a tag, then a ten-byte varint of high-bit bytes.
                    w.field_str(S, text).field_int(I64, -1);
                    w.field_str(NAMES, text).field_int(I64, -2);
                    w.field_msg(INNER, &inner).field_int(I64, -3);
                } else {
                    w.field_msg(INNER, &inner).field_str(NAMES, text);
                    w.field_str(S, text);
                }
                let what = format!("{len}-byte string {text:?}, at end: {at_end}");
                let b = decode_one(&s, &w.buf, &what);
                assert_cell(&b, "s", 0, Exp::Str(text.to_string()));
            }
        }
        if len == 0 {
            continue;
        }
        // The last byte invalid (a lone continuation byte), then ASCII bytes that would make
        // the chunk look valid if the check read the wrong bytes.
        let mut payload = ascii.clone().into_bytes();
        payload[len - 1] = 0x80;
        for field in [S, NAMES] {
            utf8_case(&format!("{len}-byte string, last byte invalid"), |w| {
                let r = put_bad_string(w, field, &payload, len - 1);
                w.field_str(S, "abcdefghijklmnopqrstuvwxyz0123456789");
                (r.1, r.1)
            });
            utf8_case(
                &format!("{len}-byte string at the end, last byte invalid"),
                |w| {
                    let r = put_bad_string(w, field, &payload, len - 1);
                    (r.1, r.1)
                },
            );
        }
    }
}

/// Varints of two bytes (128 to 16383) take their own branch when eight bytes are left in the
/// buffer: at every boundary value, at the top level and as the last bytes of a sub-message
/// (with the parent's fields after it), they decode like prost-reflect reads them.
#[test]
fn two_byte_varints() {
    let s = schema();
    for v in [
        127i64, 128, 129, 255, 256, 1000, 16383, 16384, 16385, 2_097_151, 2_097_152,
    ] {
        let mut inner = Wire::new();
        inner.field_int(1, v);
        let mut w = Wire::new();
        w.field_int(I32, v)
            .field_int(I64, v)
            .field_msg(INNER, &inner);
        w.field_int(U64, v)
            .field_str(S, "padding of more than eight bytes");
        decode_one(&s, &w.buf, &format!("varint {v}"));
    }
}

/// A two-byte varint (a value, a length, a packed element) whose second byte lies past the end
/// of its sub-message or packed field, where the parent's next byte would complete it: with
/// enough of the buffer left for the two-byte branch, it must still be cut at the bound.
#[test]
fn two_byte_varint_cut_at_a_bound() {
    let padding = "padding of more than eight bytes";
    for (what, inner_tag) in [("value", WT_VARINT), ("length", WT_LEN)] {
        let field = if inner_tag == WT_VARINT { 1 } else { 2 };
        let mut inner = Wire::new();
        inner.tag(field, inner_tag);
        let rel = inner.pos();
        inner.raw(&[0x80]);
        let mut w = prefix();
        w.tag(INNER, WT_LEN).varint(inner.buf.len() as u64);
        let at = w.pos() + rel;
        // The parent's next byte (a one-byte tag) would end the varint if the bound were missed.
        w.raw(&inner.buf).field_str(S, padding);
        bad_case(
            &format!("two-byte {what} cut at the sub-message end"),
            &w.buf,
            |k| matches!(k, DecodeErrorKind::TruncatedVarint),
            At::Exactly(at),
            false,
        );
    }
    let mut w = prefix();
    w.tag(NUMS, WT_LEN).varint(3).raw(&[0x01, 0x02]);
    let at = w.pos();
    w.raw(&[0x80]).field_str(S, padding);
    bad_case(
        "two-byte element cut at the packed end",
        &w.buf,
        |k| matches!(k, DecodeErrorKind::TruncatedVarint),
        At::Exactly(at),
        true,
    );
}

/// Columns read through the same optional sub-message (`inner.a` and `inner.s`) are
/// null exactly when it is absent (`inner.leaf.x` when `inner.leaf` is); the columns guarded by
/// one sub-message share one validity bitmap, copied when the batch is taken. Over batch
/// boundaries, flushes on demand and failed rows, every row's nulls must be its own.
#[test]
fn columns_under_one_optional_sub_message_share_its_nulls() {
    let s = schema();
    let cols = vec![
        ColumnSpec::new("a", DataType::Int32).with_path("inner.a"),
        ColumnSpec::new("i64", DataType::Int64),
        ColumnSpec::new("inner_s", DataType::Utf8).with_path("inner.s"),
        ColumnSpec::new("leaf_x", DataType::Int64).with_path("inner.leaf.x"),
    ];
    let opts = ProtoDecoderOptions {
        batch_size: 7,
        ..ProtoDecoderOptions::default()
    };
    let mut dec = ProtoDecoder::new(&s, ROOT, &cols, opts).unwrap();
    // Row k: inner absent (k % 3 == 0), present and empty (k % 3 == 1), or with values
    // (k % 3 == 2, and then its leaf too when k % 2 == 0). Every fifth message is followed by
    // a malformed one that sets inner first.
    let mut expected = Vec::new();
    let mut batches = Vec::new();
    for k in 0..60i64 {
        let mut w = Wire::new();
        w.field_int(I64, k);
        match k % 3 {
            0 => {}
            1 => {
                w.field_msg(INNER, &Wire::new());
            }
            _ => {
                let mut inner = Wire::new();
                inner.field_int(1, k).field_str(2, &format!("s{k}"));
                if k % 2 == 0 {
                    let mut leaf = Wire::new();
                    leaf.field_int(1, -k);
                    inner.field_msg(4, &leaf);
                }
                w.field_msg(INNER, &inner);
            }
        }
        dec.decode(&w.buf).unwrap();
        expected.push(k);
        if k % 5 == 4 {
            let mut inner = Wire::new();
            inner.field_int(1, 99).field_str(2, "rolled back");
            let mut bad = Wire::new();
            bad.field_msg(INNER, &inner).raw(&[0x80]);
            assert!(dec.decode(&bad.buf).is_err());
        }
        if k % 11 == 10 {
            batches.extend(dec.flush());
        }
        batches.extend(dec.take_full_batch());
    }
    batches.extend(dec.flush());
    let mut row = 0;
    for b in &batches {
        for r in 0..b.num_rows() {
            let k = expected[row];
            assert_cell(b, "i64", r, Exp::I64(k));
            let (a, st, x) = match k % 3 {
                0 => (Exp::Null, Exp::Null, Exp::Null),
                1 => (Exp::I32(0), Exp::Str(String::new()), Exp::Null),
                _ if k % 2 == 0 => (Exp::I32(k as i32), Exp::Str(format!("s{k}")), Exp::I64(-k)),
                _ => (Exp::I32(k as i32), Exp::Str(format!("s{k}")), Exp::Null),
            };
            assert_cell(b, "a", r, a);
            assert_cell(b, "inner_s", r, st);
            assert_cell(b, "leaf_x", r, x);
            row += 1;
        }
    }
    assert_eq!(row, expected.len());
}

/// Proto2 fields read through an optional sub-message: one with a declared default (`sub.y`,
/// valid whenever `sub` is present) and ones without (`sub.x`, `sub.must`, null unless set,
/// even when `sub` is present). Only the first kind follows its sub-message's presence; the
/// others must never share its validity.
#[test]
fn proto2_fields_under_an_optional_sub_message() {
    let s = load_schema("proto2.proto");
    let cols = vec![
        ColumnSpec::new("x", DataType::Int32).with_path("sub.x"),
        ColumnSpec::new("y", DataType::Utf8).with_path("sub.y"),
        ColumnSpec::new("must", DataType::Boolean).with_path("sub.must"),
    ];
    let opts = ProtoDecoderOptions {
        batch_size: 4,
        ..ProtoDecoderOptions::default()
    };
    let mut dec = ProtoDecoder::new(&s, "test2.P2", &cols, opts).unwrap();
    let mut batches = Vec::new();
    for k in 0..12i64 {
        let mut w = Wire::new();
        match k % 4 {
            0 => {}
            1 => {
                w.field_msg(40, &Wire::new());
            }
            2 => {
                let mut sub = Wire::new();
                sub.field_int(1, k);
                w.field_msg(40, &sub);
            }
            _ => {
                let mut sub = Wire::new();
                sub.field_str(2, &format!("y{k}")).field_int(4, 1);
                w.field_msg(40, &sub);
            }
        }
        dec.decode(&w.buf).unwrap();
        batches.extend(dec.take_full_batch());
    }
    batches.extend(dec.flush());
    let mut k = 0i64;
    for b in &batches {
        for r in 0..b.num_rows() {
            let (x, y, must) = match k % 4 {
                0 => (Exp::Null, Exp::Null, Exp::Null),
                1 => (Exp::Null, Exp::Str("why".into()), Exp::Null),
                2 => (Exp::I32(k as i32), Exp::Str("why".into()), Exp::Null),
                _ => (Exp::Null, Exp::Str(format!("y{k}")), Exp::Bool(true)),
            };
            assert_cell(b, "x", r, x);
            assert_cell(b, "y", r, y);
            assert_cell(b, "must", r, must);
            k += 1;
        }
    }
    assert_eq!(k, 12);
}

/// Field numbers above 2^29 - 1 (tags above `u32::MAX`), up to the largest tag a ten-byte varint
/// holds, are rejected at the tag, whether the decoder reads every field or a projection; none
/// is mistaken for an unrequested field and skipped.
#[test]
fn field_numbers_too_large() {
    for tag in [1u64 << 32, (1u64 << 32) | 2, (1u64 << 60) << 3, u64::MAX] {
        let mut w = prefix();
        let at = w.pos();
        w.varint(tag).raw(&[0; 12]).field_int(I32, 1);
        bad_case(
            &format!("tag {tag:#x}"),
            &w.buf,
            |k| matches!(k, DecodeErrorKind::FieldNumberTooLarge),
            At::Exactly(at),
            true,
        );
    }
}
