//! What Google's parser does and weir must match, case by case: repeated map keys, proto2
//! groups, the whole range of Timestamp and Duration; and schemas compiled from sources held in
//! memory.

use arrow_array::cast::AsArray;
use arrow_array::types::{
    DurationMicrosecondType, DurationSecondType, TimestampMicrosecondType,
    TimestampMillisecondType, TimestampSecondType,
};
use arrow_array::{Array, RecordBatch};
use prost_reflect::DynamicMessage;
use weir_codec::{
    default_columns, ColumnSpec, DataType, DecodeErrorKind, Decoder, Field, ProtoDecoder,
    ProtoDecoderOptions, ProtoSchema, SchemaError, TimeUnit,
};

use crate::common::*;

/// A one-file schema compiled from memory.
fn schema_of(text: &str) -> ProtoSchema {
    ProtoSchema::from_sources(&[("t.proto", text)], "t.proto")
        .unwrap_or_else(|e| panic!("schema: {e}"))
}

fn decoder(schema: &ProtoSchema, message: &str, cols: &[ColumnSpec]) -> ProtoDecoder {
    ProtoDecoder::new(schema, message, cols, ProtoDecoderOptions::default())
        .unwrap_or_else(|e| panic!("plan: {e}"))
}

/// Decodes each message as one row and returns the batch.
fn decode(dec: &mut ProtoDecoder, msgs: &[&[u8]]) -> RecordBatch {
    for m in msgs {
        dec.decode(m)
            .unwrap_or_else(|e| panic!("decode {}: {e}", hex(m)));
    }
    dec.flush().expect("rows")
}

fn unhex(s: &str) -> Vec<u8> {
    (0..s.len())
        .step_by(2)
        .map(|i| u8::from_str_radix(&s[i..i + 2], 16).expect("hex"))
        .collect()
}

// ---------------------------------------------------------------------------------------------
// Repeated map keys
// ---------------------------------------------------------------------------------------------

const MAPS: &str = r#"
syntax = "proto3";
package m;
message Sub { int32 x = 1; repeated string tags = 2; }
message Msg {
  int32 id = 1;
  map<string, int64> counters = 5;
  map<int32, Sub> subs = 6;
  map<bool, string> flags = 7;
  map<uint64, double> big = 8;
}
"#;

fn map_cols(schema: &ProtoSchema) -> Vec<ColumnSpec> {
    default_columns(schema, "m.Msg").expect("columns")
}

/// The entries of map column `name` in `row`, as the comparison helpers see them.
fn map_cell(b: &RecordBatch, name: &str, row: usize) -> Vec<(Exp, Exp)> {
    match cell(b, name, row) {
        Exp::Map(e) => e,
        other => panic!("{name}: not a map: {other:?}"),
    }
}

#[test]
fn a_repeated_map_key_keeps_the_last_value() {
    // counters { key: "" value: 1 } counters { key: "" value: 2 }: Google reads {"": 2}.
    let s = schema_of(MAPS);
    let mut dec = decoder(&s, "m.Msg", &map_cols(&s));
    let bytes = unhex("2a040a0010012a040a001002");
    let b = decode(&mut dec, &[&bytes]);
    assert_cell(
        &b,
        "counters",
        0,
        Exp::Map(vec![(Exp::Str(String::new()), Exp::I64(2))]),
    );
    let reference = DynamicMessage::decode(message_desc(&s, "m.Msg"), bytes.as_slice()).unwrap();
    assert_row(&b, 0, &reference, &bytes, "the example message");
}

#[test]
fn concatenated_messages_keep_each_key_once() {
    let s = schema_of(MAPS);
    let desc = message_desc(&s, "m.Msg");
    let entry = |k: &str, v: i64| {
        let mut e = Wire::new();
        e.field_str(1, k).field_int(2, v);
        e
    };
    let sub = |x: i64, tags: &[&str]| {
        let mut m = Wire::new();
        m.field_int(1, x);
        for t in tags {
            m.field_str(2, t);
        }
        m
    };
    let sub_entry = |k: i64, v: &Wire| {
        let mut e = Wire::new();
        e.field_int(1, k).field_msg(2, v);
        e
    };
    let mut first = Wire::new();
    first
        .field_int(1, 7)
        .field_msg(5, &entry("a", 1))
        .field_msg(5, &entry("b", 2))
        .field_msg(6, &sub_entry(1, &sub(10, &["x", "y"])))
        .field_msg(6, &sub_entry(2, &sub(20, &["z"])));
    let mut second = Wire::new();
    second
        .field_msg(5, &entry("b", 3))
        .field_msg(5, &entry("c", 4))
        .field_msg(5, &entry("a", 5))
        .field_msg(6, &sub_entry(1, &sub(11, &["w"])));
    let both = [first.bytes(), second.bytes()].concat();
    // A row before and after, so the rows around the one that drops entries stay intact.
    let mut plain = Wire::new();
    plain
        .field_msg(5, &entry("only", 9))
        .field_msg(6, &sub_entry(5, &sub(50, &["p", "q"])));
    let plain = plain.bytes();
    let mut dec = decoder(&s, "m.Msg", &map_cols(&s));
    let b = decode(&mut dec, &[&plain, &both, &plain]);
    let kv = |k: &str, v: i64| (Exp::Str(k.into()), Exp::I64(v));
    // The later entry of a key takes the place of the last occurrence.
    assert_cell(
        &b,
        "counters",
        1,
        Exp::Map(vec![kv("b", 3), kv("c", 4), kv("a", 5)]),
    );
    for row in [0, 2] {
        assert_eq!(map_cell(&b, "counters", row).len(), 1);
        assert_eq!(map_cell(&b, "subs", row).len(), 1);
    }
    let subs = map_cell(&b, "subs", 1);
    assert_eq!(subs.len(), 2, "{subs:?}");
    let reference = DynamicMessage::decode(desc.clone(), both.as_slice()).unwrap();
    assert_row(&b, 1, &reference, &both, "two messages back to back");
    let reference = DynamicMessage::decode(desc, plain.as_slice()).unwrap();
    assert_row(&b, 0, &reference, &plain, "the row before");
    assert_row(&b, 2, &reference, &plain, "the row after");
}

#[test]
fn large_maps_with_repeated_keys_of_every_key_type() {
    // More entries than the pairwise scan covers, so the sorted path runs too.
    let s = schema_of(MAPS);
    let desc = message_desc(&s, "m.Msg");
    let mut rng = Rng::new(0x6d_6170);
    let mut msgs = Vec::new();
    for n in [0usize, 1, 2, 3, 15, 16, 17, 40, 200] {
        let mut w = Wire::new();
        for _ in 0..n {
            let mut e = Wire::new();
            e.field_str(1, &format!("k{}", rng.below(n as u64 / 2 + 1)))
                .field_int(2, rng.below(1000) as i64);
            w.field_msg(5, &e);
            let mut e = Wire::new();
            let mut v = Wire::new();
            v.field_int(1, rng.below(9) as i64).field_str(2, "t");
            e.field_int(1, rng.below(n as u64 / 3 + 1) as i64 - 2)
                .field_msg(2, &v);
            w.field_msg(6, &e);
            let mut e = Wire::new();
            e.field_int(1, rng.below(2) as i64).field_str(2, "f");
            w.field_msg(7, &e);
            let mut e = Wire::new();
            e.field_int(1, rng.below(5) as i64).field_double(2, 0.5);
            w.field_msg(8, &e);
        }
        msgs.push(w.bytes());
    }
    let mut dec = decoder(&s, "m.Msg", &map_cols(&s));
    let refs: Vec<&[u8]> = msgs.iter().map(Vec::as_slice).collect();
    let b = decode(&mut dec, &refs);
    for (row, bytes) in msgs.iter().enumerate() {
        let reference = DynamicMessage::decode(desc.clone(), bytes.as_slice()).unwrap();
        assert_row(&b, row, &reference, bytes, &format!("row {row}"));
    }
}

// ---------------------------------------------------------------------------------------------
// proto2 groups
// ---------------------------------------------------------------------------------------------

fn p2() -> ProtoSchema {
    load_schema("proto2.proto")
}

/// A P2 with its required fields, then `rest`.
fn p2_message(rest: impl FnOnce(&mut Wire)) -> Vec<u8> {
    let mut sub = Wire::new();
    sub.field_int(4, 1);
    let mut w = Wire::new();
    w.field_int(20, 1).field_str(21, "r").field_msg(22, &sub);
    rest(&mut w);
    w.bytes()
}

#[test]
fn groups_read_as_structs_and_lists_of_structs() {
    let s = p2();
    let desc = message_desc(&s, "test2.P2");
    let cols = vec![
        ColumnSpec::new("grp", default_type_of(&s, "grp")),
        ColumnSpec::new("rgrp", default_type_of(&s, "rgrp")),
        ColumnSpec::new("o_int", DataType::Int32),
    ];
    let with_groups = p2_message(|w| {
        w.tag(60, WT_SGROUP)
            .field_int(61, -3)
            .field_int(63, 1)
            .field_int(63, 2)
            .tag(64, WT_SGROUP)
            .field_varint(65, zigzag32(-9) as u64)
            .tag(64, WT_EGROUP)
            .tag(60, WT_EGROUP)
            .field_int(1, 5)
            .tag(66, WT_SGROUP)
            .field_int(67, 1)
            .tag(66, WT_EGROUP)
            .tag(66, WT_SGROUP)
            .tag(66, WT_EGROUP)
            // A second occurrence of the singular group merges into the first.
            .tag(60, WT_SGROUP)
            .field_str(62, "later")
            .field_int(63, 3)
            .tag(60, WT_EGROUP);
    });
    let without = p2_message(|_| {});
    let mut dec = decoder(&s, "test2.P2", &cols);
    let b = decode(&mut dec, &[&with_groups, &without]);
    for (row, bytes) in [(0, &with_groups), (1, &without)] {
        let reference = DynamicMessage::decode(desc.clone(), bytes.as_slice()).unwrap();
        assert_row(&b, row, &reference, bytes, &format!("row {row}"));
    }
    // Presence as for a sub-message: null when absent; a repeated group is empty.
    assert!(b.column(0).is_valid(0));
    assert!(b.column(0).is_null(1));
    assert_eq!(b.column(1).as_list::<i32>().value_length(0), 2);
    assert_eq!(b.column(1).as_list::<i32>().value_length(1), 0);
}

/// The default column type of top-level field `name` of test2.P2.
fn default_type_of(s: &ProtoSchema, name: &str) -> DataType {
    default_columns(s, "test2.P2")
        .expect("columns")
        .into_iter()
        .find(|c| c.name == name)
        .expect("field")
        .data_type
}

#[test]
fn a_schema_with_groups_decodes_with_its_default_columns() {
    // What `weir decode` does with a legacy schema: every field, groups included.
    let s = p2();
    let cols = default_columns(&s, "test2.P2").expect("columns");
    let bytes = p2_message(|w| {
        w.tag(66, WT_SGROUP)
            .field_msg(68, {
                let mut sub = Wire::new();
                sub.field_int(4, 0).field_int(1, 8);
                &sub.clone()
            })
            .tag(66, WT_EGROUP);
    });
    let mut dec = decoder(&s, "test2.P2", &cols);
    let b = decode(&mut dec, &[&bytes]);
    let reference = DynamicMessage::decode(message_desc(&s, "test2.P2"), bytes.as_slice()).unwrap();
    assert_row(&b, 0, &reference, &bytes, "default columns");
}

#[test]
fn a_group_field_on_a_path_and_as_json_text() {
    let s = p2();
    let cols = vec![
        ColumnSpec::new("g_int", DataType::Int32).with_path("grp.g_int"),
        ColumnSpec::new("i_val", DataType::Int32).with_path("grp.inner.i_val"),
    ];
    let bytes = p2_message(|w| {
        w.tag(60, WT_SGROUP)
            .field_int(61, 4)
            .tag(64, WT_SGROUP)
            .field_varint(65, zigzag32(6) as u64)
            .tag(64, WT_EGROUP)
            .tag(60, WT_EGROUP)
            .tag(66, WT_SGROUP)
            .field_int(67, 2)
            .tag(66, WT_EGROUP);
    });
    let absent = p2_message(|_| {});
    let mut dec = decoder(&s, "test2.P2", &cols);
    let b = decode(&mut dec, &[&bytes, &absent]);
    assert_cell(&b, "g_int", 0, Exp::I32(4));
    assert_cell(&b, "i_val", 0, Exp::I32(6));
    assert_cell(&b, "g_int", 1, Exp::Null);
    // The group as JSON text (a field is read either as a structure or as text, not both).
    let text_list = DataType::List(std::sync::Arc::new(Field::new(
        "item",
        DataType::Utf8,
        true,
    )));
    let cols = vec![
        ColumnSpec::new("grp_json", DataType::Utf8).with_path("grp"),
        ColumnSpec::new("rgrp_json", text_list).with_path("rgrp"),
    ];
    let b = decode(&mut decoder(&s, "test2.P2", &cols), &[&bytes, &absent]);
    let json = |t: &str| Exp::Json(serde_json::from_str(t).unwrap());
    assert_cell(
        &b,
        "grp_json",
        0,
        json(r#"{"gInt": 4, "inner": {"iVal": 6}}"#),
    );
    assert_cell(&b, "grp_json", 1, Exp::Null);
    assert_cell(&b, "rgrp_json", 0, Exp::List(vec![json(r#"{"rgInt": 2}"#)]));
}

#[test]
fn a_broken_group_is_rejected_at_its_offset() {
    let s = p2();
    let cols = vec![ColumnSpec::new("grp", default_type_of(&s, "grp"))];
    let mut at = 0;
    let unterminated = p2_message(|w| {
        at = w.pos();
        w.tag(60, WT_SGROUP).field_int(61, 1);
    });
    let mut dec = decoder(&s, "test2.P2", &cols);
    let e = dec.decode(&unterminated).expect_err("unterminated group");
    assert!(
        matches!(e.kind, DecodeErrorKind::UnterminatedGroup(60)),
        "{e}"
    );
    assert_eq!(e.offset, at);
    let mut end_at = 0;
    let mismatched = p2_message(|w| {
        w.tag(60, WT_SGROUP).field_int(61, 1);
        end_at = w.pos();
        w.tag(61, WT_EGROUP);
    });
    let e = dec.decode(&mismatched).expect_err("wrong end tag");
    assert!(
        matches!(
            e.kind,
            DecodeErrorKind::EndGroupMismatch {
                expected: 60,
                found: 61
            }
        ),
        "{e}"
    );
    assert_eq!(e.offset, end_at);
    // The group's field seen with a length instead: a wire-type error, not a silent drop.
    let as_len = p2_message(|w| {
        w.field_msg(60, &Wire::new());
    });
    let e = dec.decode(&as_len).expect_err("LEN for a group");
    assert!(
        matches!(e.kind, DecodeErrorKind::WireTypeMismatch { .. }),
        "{e}"
    );
    assert_eq!(dec.buffered_rows(), 0, "failed messages leave no rows");
}

// ---------------------------------------------------------------------------------------------
// Timestamp and Duration over their whole range
// ---------------------------------------------------------------------------------------------

const TIMES: &str = r#"
syntax = "proto3";
package t;
import "google/protobuf/timestamp.proto";
import "google/protobuf/duration.proto";
message Msg {
  int32 id = 1;
  google.protobuf.Timestamp ts = 2;
  google.protobuf.Duration dur = 3;
  repeated google.protobuf.Timestamp tss = 4;
}
"#;

/// 0001-01-01T00:00:00Z and 9999-12-31T23:59:59.999999999Z: the range of a valid Timestamp.
const TS_MIN: i64 = -62_135_596_800;
const TS_MAX: i64 = 253_402_300_799;
/// +-10,000 years: the range of a valid Duration.
const DUR_MAX: i64 = 315_576_000_000;

fn time_value(secs: i64, nanos: i32) -> Wire {
    let mut t = Wire::new();
    t.field_int(1, secs).field_int(2, nanos as i64);
    t
}

fn time_msg(ts: (i64, i32), dur: (i64, i32)) -> Vec<u8> {
    let mut w = Wire::new();
    w.field_int(1, 1)
        .field_msg(2, &time_value(ts.0, ts.1))
        .field_msg(3, &time_value(dur.0, dur.1));
    w.bytes()
}

fn time_cols(unit: TimeUnit) -> Vec<ColumnSpec> {
    vec![
        ColumnSpec::new("ts", DataType::Timestamp(unit, Some("UTC".into()))),
        ColumnSpec::new("dur", DataType::Duration(unit)),
    ]
}

#[test]
fn coarser_units_hold_the_whole_range() {
    let s = schema_of(TIMES);
    let msgs = [
        time_msg((TS_MAX, 999_999_999), (DUR_MAX, 999_999_999)),
        time_msg((TS_MIN, 0), (-DUR_MAX, -999_999_999)),
    ];
    let refs: Vec<&[u8]> = msgs.iter().map(Vec::as_slice).collect();

    let b = decode(
        &mut decoder(&s, "t.Msg", &time_cols(TimeUnit::Second)),
        &refs,
    );
    let ts = b.column(0).as_primitive::<TimestampSecondType>();
    assert_eq!((ts.value(0), ts.value(1)), (TS_MAX, TS_MIN));
    let d = b.column(1).as_primitive::<DurationSecondType>();
    assert_eq!((d.value(0), d.value(1)), (DUR_MAX, -DUR_MAX));

    let b = decode(
        &mut decoder(&s, "t.Msg", &time_cols(TimeUnit::Millisecond)),
        &refs,
    );
    let ts = b.column(0).as_primitive::<TimestampMillisecondType>();
    assert_eq!(ts.value(0), TS_MAX * 1_000 + 999);
    assert_eq!(ts.value(1), TS_MIN * 1_000);

    let b = decode(
        &mut decoder(&s, "t.Msg", &time_cols(TimeUnit::Microsecond)),
        &refs,
    );
    let ts = b.column(0).as_primitive::<TimestampMicrosecondType>();
    assert_eq!(ts.value(0), TS_MAX * 1_000_000 + 999_999);
    assert_eq!(ts.value(1), TS_MIN * 1_000_000);
    let d = b.column(1).as_primitive::<DurationMicrosecondType>();
    assert_eq!(d.value(0), DUR_MAX * 1_000_000 + 999_999);
    // A coarser unit floors, as for a Timestamp: -0.999999999 s is -1,000,000 us.
    assert_eq!(d.value(1), -DUR_MAX * 1_000_000 - 1_000_000);
}

#[test]
fn a_time_past_nanoseconds_is_rejected_at_its_field() {
    let s = schema_of(TIMES);
    let mut dec = decoder(&s, "t.Msg", &time_cols(TimeUnit::Nanosecond));
    let ok = time_msg((1, 0), (1, 0));
    dec.decode(&ok).expect("in range");
    let late = time_msg((TS_MAX, 0), (1, 0));
    let e = dec
        .decode(&late)
        .expect_err("9999-12-31 is past 2262 in nanoseconds");
    assert!(matches!(e.kind, DecodeErrorKind::OutOfRange { .. }), "{e}");
    // The `ts` field starts after `id` (2 bytes).
    assert_eq!(e.offset, 2, "{e}");
    let long = time_msg((1, 0), (DUR_MAX, 0));
    let e = dec
        .decode(&long)
        .expect_err("10,000 years do not fit in nanoseconds");
    let dur_at = 2 + time_value(1, 0).bytes().len() + 2;
    assert_eq!(e.offset, dur_at, "{e}");
    // An element of a repeated Timestamp: the element's bytes.
    let cols = vec![ColumnSpec::new(
        "tss",
        DataType::List(std::sync::Arc::new(Field::new(
            "item",
            DataType::Timestamp(TimeUnit::Nanosecond, Some("UTC".into())),
            true,
        ))),
    )];
    let mut dec2 = decoder(&s, "t.Msg", &cols);
    let mut w = Wire::new();
    w.field_msg(4, &time_value(1, 0));
    let second_at = w.pos() + 2;
    w.field_msg(4, &time_value(TS_MAX, 0));
    let e = dec2.decode(&w.bytes()).expect_err("element out of range");
    assert_eq!(e.offset, second_at, "{e}");
    let b = dec.flush().expect("the good row");
    assert_eq!(b.num_rows(), 1);
    assert_eq!(
        b.column(0)
            .as_primitive::<arrow_array::types::TimestampNanosecondType>()
            .value(0),
        1_000_000_000
    );
}

// ---------------------------------------------------------------------------------------------
// Schemas from sources in memory
// ---------------------------------------------------------------------------------------------

#[test]
fn sources_resolve_imports_among_themselves_and_the_well_known_types() {
    let base = r#"syntax = "proto3"; package reg.base;
        import "google/protobuf/timestamp.proto";
        message Base { string ticker = 1; google.protobuf.Timestamp at = 2; }"#;
    let quote = r#"syntax = "proto3"; package reg;
        import "reg/base.proto";
        message Quote { reg.base.Base base = 1; double bid = 2; }"#;
    let files = [("reg/base.proto", base), ("reg/quote.proto", quote)];
    let s = ProtoSchema::from_sources(&files, "reg/quote.proto").expect("compiles");
    let cols = vec![
        ColumnSpec::new("ticker", DataType::Utf8).with_path("base.ticker"),
        ColumnSpec::new("bid", DataType::Float64),
    ];
    let mut base_msg = Wire::new();
    base_msg.field_str(1, "SPY");
    let mut w = Wire::new();
    w.field_msg(1, &base_msg).field_double(2, 1.5);
    let b = decode(&mut decoder(&s, "reg.Quote", &cols), &[&w.bytes()]);
    assert_cell(&b, "ticker", 0, Exp::Str("SPY".into()));
    assert_cell(&b, "bid", 0, Exp::F64(1.5));
    // The same schema, compiled from the weir-testdata text of the options quote.
    let stocks = [("stocks.proto", weir_testdata::STOCKS_PROTO)];
    let s = ProtoSchema::from_sources(&stocks, "stocks.proto").expect("stocks");
    assert!(s.pool().get_message_by_name("stocks.QuoteNBBO").is_some());
}

#[test]
fn a_missing_import_or_a_bad_source_is_a_compile_error() {
    let quote = r#"syntax = "proto3"; import "nowhere.proto"; message Q { int32 a = 1; }"#;
    let e = ProtoSchema::from_sources(&[("q.proto", quote)], "q.proto").expect_err("import");
    assert!(matches!(e, SchemaError::Compile { .. }), "{e}");
    assert!(e.to_string().contains("nowhere.proto"), "{e}");
    let e = ProtoSchema::from_sources(&[("q.proto", "message {")], "q.proto").expect_err("syntax");
    assert!(matches!(e, SchemaError::Compile { .. }), "{e}");
    let e = ProtoSchema::from_sources(&[("q.proto", quote)], "other.proto").expect_err("root");
    assert!(e.to_string().contains("other.proto"), "{e}");
}
