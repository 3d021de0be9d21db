//! The JSON decoder's behaviour, type by type: values, nulls, paths, nesting, duplicate keys,
//! validation, error contents, rollback and plan errors.

use std::sync::Arc;

use arrow_array::cast::AsArray;
use arrow_array::types::*;
use arrow_array::{Array, RecordBatch};
use arrow_schema::{DataType, Field, Fields, TimeUnit};
use weir_codec::{
    ColumnSpec, DecodeError, DecodeErrorKind, Decoder, EpochUnit, JsonDecoder, JsonDecoderOptions,
    JsonMismatch, PlanError,
};

fn decoder(cols: &[ColumnSpec]) -> JsonDecoder {
    JsonDecoder::new(cols, JsonDecoderOptions::default()).expect("plan")
}

fn lenient(cols: &[ColumnSpec]) -> JsonDecoder {
    let options = JsonDecoderOptions {
        mismatch: JsonMismatch::Null,
        ..Default::default()
    };
    JsonDecoder::new(cols, options).expect("plan")
}

/// Decodes every message (all must be accepted) into one batch.
fn decode_all(dec: &mut JsonDecoder, msgs: &[&str]) -> RecordBatch {
    for m in msgs {
        if let Err(e) = dec.decode(m.as_bytes()) {
            panic!("{m}: {e}");
        }
    }
    let batch = dec.flush().expect("rows");
    for c in batch.columns() {
        c.to_data().validate_full().expect("valid arrow");
    }
    batch
}

fn error(dec: &mut JsonDecoder, msg: &[u8]) -> DecodeError {
    let before = dec.buffered_rows();
    let e = dec.decode(msg).expect_err(&String::from_utf8_lossy(msg));
    assert_eq!(dec.buffered_rows(), before, "a rejected message left a row");
    assert!(e.offset <= msg.len());
    e
}

fn col(name: &str, t: DataType) -> ColumnSpec {
    ColumnSpec::new(name, t)
}

#[test]
fn integers_of_every_width_with_range_checks() {
    let cols = [
        col("i8", DataType::Int8),
        col("i16", DataType::Int16),
        col("i32", DataType::Int32),
        col("i64", DataType::Int64),
        col("u8", DataType::UInt8),
        col("u16", DataType::UInt16),
        col("u32", DataType::UInt32),
        col("u64", DataType::UInt64),
    ];
    let mut dec = decoder(&cols);
    let b = decode_all(
        &mut dec,
        &[
            r#"{"i8":-128,"i16":-32768,"i32":-2147483648,"i64":-9223372036854775808,"u8":0,"u16":0,"u32":0,"u64":0}"#,
            r#"{"i8":127,"i16":32767,"i32":2147483647,"i64":9223372036854775807,"u8":255,"u16":65535,"u32":4294967295,"u64":18446744073709551615}"#,
            r#"{"i8":-0, "u64": 7}"#,
        ],
    );
    assert_eq!(
        b.column(0).as_primitive::<Int8Type>().values(),
        &[-128, 127, 0]
    );
    assert_eq!(b.column(1).as_primitive::<Int16Type>().value(1), 32767);
    assert_eq!(b.column(2).as_primitive::<Int32Type>().value(0), i32::MIN);
    assert_eq!(b.column(3).as_primitive::<Int64Type>().value(0), i64::MIN);
    assert_eq!(b.column(3).as_primitive::<Int64Type>().value(1), i64::MAX);
    assert_eq!(b.column(4).as_primitive::<UInt8Type>().value(1), 255);
    assert_eq!(b.column(5).as_primitive::<UInt16Type>().value(1), 65535);
    assert_eq!(b.column(6).as_primitive::<UInt32Type>().value(1), u32::MAX);
    assert_eq!(
        b.column(7).as_primitive::<UInt64Type>().values(),
        &[0, u64::MAX, 7]
    );
    assert!(b.column(1).is_null(2) && b.column(7).is_valid(2));

    for (msg, key) in [
        (r#"{"i8":128}"#, "i8"),
        (r#"{"i8":-129}"#, "i8"),
        (r#"{"u8":256}"#, "u8"),
        (r#"{"u8":-1}"#, "u8"),
        (r#"{"i32":2147483648}"#, "i32"),
        (r#"{"i64":9223372036854775808}"#, "i64"),
        (r#"{"u64":18446744073709551616}"#, "u64"),
        (r#"{"u64":123456789012345678901234567890}"#, "u64"),
    ] {
        let e = error(&mut dec, msg.as_bytes());
        match &e.kind {
            DecodeErrorKind::JsonOutOfRange { key: k, .. } => assert_eq!(k, key, "{msg}"),
            other => panic!("{msg}: {other:?}"),
        }
        assert_eq!(e.offset, msg.find(':').unwrap() + 1, "{msg}");
    }
    for (msg, found) in [
        (r#"{"i64":"12"}"#, "string"),
        (r#"{"i64":1.0}"#, "number with a fraction or exponent"),
        (r#"{"i64":1e2}"#, "number with a fraction or exponent"),
        (r#"{"i64":true}"#, "boolean"),
        (r#"{"i64":[1]}"#, "array"),
        (r#"{"i64":{}}"#, "object"),
    ] {
        let e = error(&mut dec, msg.as_bytes());
        assert_eq!(
            e.kind,
            DecodeErrorKind::JsonTypeMismatch {
                key: "i64".into(),
                expected: "Int64".into(),
                found
            },
            "{msg}"
        );
        assert_eq!(e.offset, 7);
    }
}

#[test]
fn floats_are_correctly_rounded() {
    let cols = [col("f", DataType::Float64), col("g", DataType::Float32)];
    let texts = [
        "0",
        "-0",
        "1",
        "-1.5",
        "0.1",
        "0.30000000000000004",
        "1e22",
        "1e23",
        "123456789.987654321",
        "9007199254740993",
        "2.2250738585072011e-308",
        "4.9e-324",
        "1.7976931348623157e308",
        "3.4028235e38",
        "1.17549435e-38",
        "7.038531e-26",
        "98765432109876543210987654321",
        "0.000000000000000000000000000001",
        "5e-324",
        "1E+2",
        "2.5E-3",
    ];
    let msgs: Vec<String> = texts
        .iter()
        .map(|t| {
            // Past f32's range is out of range (tested below), so g reads 0 there.
            let g = if t.parse::<f32>().unwrap().is_finite() {
                t
            } else {
                "0"
            };
            format!(r#"{{"f": {t}, "g": {g}}}"#)
        })
        .collect();
    let refs: Vec<&str> = msgs.iter().map(String::as_str).collect();
    let b = decode_all(&mut decoder(&cols), &refs);
    let f = b.column(0).as_primitive::<Float64Type>();
    let g = b.column(1).as_primitive::<Float32Type>();
    for (i, t) in texts.iter().enumerate() {
        assert_eq!(
            f.value(i).to_bits(),
            t.parse::<f64>().unwrap().to_bits(),
            "{t}"
        );
        let want = t.parse::<f32>().unwrap();
        if want.is_finite() {
            assert_eq!(g.value(i).to_bits(), want.to_bits(), "{t}");
        }
    }
    let mut dec = decoder(&cols);
    let e = error(&mut dec, br#"{"f": 1e309}"#);
    assert!(matches!(e.kind, DecodeErrorKind::JsonOutOfRange { .. }));
    let e = error(&mut dec, br#"{"g": 1e39}"#);
    assert!(matches!(e.kind, DecodeErrorKind::JsonOutOfRange { .. }));
}

#[test]
fn floats_take_protobuf_json_strings_for_infinities_and_nan() {
    let cols = [col("d", DataType::Float64), col("f", DataType::Float32)];
    let mut dec = decoder(&cols);
    let b = decode_all(
        &mut dec,
        &[
            r#"{"d": "Infinity", "f": "-Infinity"}"#,
            r#"{"d": "NaN", "f": "NaN"}"#,
            r#"{"d": "-Infinity", "f": 1.5}"#,
        ],
    );
    let d = b.column(0).as_primitive::<Float64Type>();
    let f = b.column(1).as_primitive::<Float32Type>();
    assert_eq!(d.value(0), f64::INFINITY);
    assert!(d.value(1).is_nan());
    assert_eq!(d.value(2), f64::NEG_INFINITY);
    assert_eq!(f.value(0), f32::NEG_INFINITY);
    assert!(f.value(1).is_nan());
    // Any other string is a mismatch, as before; bare literals are not JSON at all.
    let e = error(&mut dec, br#"{"d": "infinity"}"#);
    assert!(e.to_string().contains("\"NaN\""), "{e}");
    assert!(dec.decode(br#"{"d": Infinity}"#).is_err());
}

#[test]
fn decimals_are_exact() {
    let cols = [col("d", DataType::Decimal128(12, 3))];
    let mut dec = decoder(&cols);
    let b = decode_all(
        &mut dec,
        &[
            r#"{"d": 12.345}"#,
            r#"{"d": -0.5}"#,
            r#"{"d": "999999999.999"}"#,
            r#"{"d": 1.2e2}"#,
            r#"{"d": 7.50000}"#,
            r#"{"d": null}"#,
        ],
    );
    let d = b.column(0).as_primitive::<Decimal128Type>();
    assert_eq!(d.value(0), 12345);
    assert_eq!(d.value(1), -500);
    assert_eq!(d.value(2), 999_999_999_999);
    assert_eq!(d.value(3), 120_000);
    assert_eq!(d.value(4), 7500);
    assert!(d.is_null(5));
    for msg in [
        r#"{"d": 1.2345}"#,
        r#"{"d": 1000000000}"#,
        r#"{"d": "1e40"}"#,
    ] {
        let e = error(&mut dec, msg.as_bytes());
        assert!(
            matches!(e.kind, DecodeErrorKind::JsonOutOfRange { .. }),
            "{msg}: {e}"
        );
    }
    let e = error(&mut dec, br#"{"d": "12,5"}"#);
    assert!(
        matches!(e.kind, DecodeErrorKind::JsonTypeMismatch { .. }),
        "{e}"
    );
}

#[test]
fn timestamps_from_text_and_epoch_units() {
    let cols = [
        col("ns", DataType::Timestamp(TimeUnit::Nanosecond, None)),
        col(
            "ms",
            DataType::Timestamp(TimeUnit::Millisecond, Some("UTC".into())),
        ),
        col("s", DataType::Timestamp(TimeUnit::Second, None)),
    ];
    let options = JsonDecoderOptions {
        timestamp_units: vec![
            ("ms".into(), EpochUnit::Seconds),
            ("s".into(), EpochUnit::Millis),
        ],
        ..Default::default()
    };
    let mut dec = JsonDecoder::new(&cols, options).unwrap();
    let b = decode_all(
        &mut dec,
        &[
            r#"{"ns": "2026-11-22T10:15:30.123456789Z", "ms": "2026-11-22T11:15:30.1239+01:00", "s": "1969-12-31T23:59:59.5Z"}"#,
            r#"{"ns": 1795342530123456789, "ms": 1795342530.5, "s": 1795342530999}"#,
            r#"{"ns": -1, "ms": -0.0015, "s": -1}"#,
        ],
    );
    let ns = b.column(0).as_primitive::<TimestampNanosecondType>();
    let ms = b.column(1).as_primitive::<TimestampMillisecondType>();
    let s = b.column(2).as_primitive::<TimestampSecondType>();
    assert_eq!(ns.value(0), 1_795_342_530_123_456_789);
    assert_eq!(ms.value(0), 1_795_342_530_123);
    assert_eq!(s.value(0), -1);
    assert_eq!(ns.value(1), 1_795_342_530_123_456_789);
    assert_eq!(ms.value(1), 1_795_342_530_500);
    assert_eq!(s.value(1), 1_795_342_530);
    assert_eq!((ns.value(2), ms.value(2), s.value(2)), (-1, -2, -1));
    assert_eq!(
        b.schema().field(1).data_type(),
        &DataType::Timestamp(TimeUnit::Millisecond, Some("UTC".into()))
    );
    for msg in [
        r#"{"ns": "2026-11-22T10:15:30"}"#,
        r#"{"ns": "2026-02-30T10:15:30Z"}"#,
        r#"{"ns": "yesterday"}"#,
        r#"{"ns": true}"#,
    ] {
        let e = error(&mut dec, msg.as_bytes());
        assert!(
            matches!(e.kind, DecodeErrorKind::JsonTypeMismatch { .. }),
            "{msg}: {e}"
        );
    }
    for msg in [r#"{"ns": "2300-01-01T00:00:00Z"}"#, r#"{"ms": 1e300}"#] {
        let e = error(&mut dec, msg.as_bytes());
        assert!(
            matches!(e.kind, DecodeErrorKind::JsonOutOfRange { .. }),
            "{msg}: {e}"
        );
    }
}

#[test]
fn dates_bools_and_nulls() {
    let cols = [
        col("d", DataType::Date32),
        col("d64", DataType::Date64),
        col("b", DataType::Boolean),
    ];
    let mut dec = decoder(&cols);
    let b = decode_all(
        &mut dec,
        &[
            r#"{"d": "2024-02-29", "d64": "1970-01-02", "b": true}"#,
            r#"{"d": null, "b": false}"#,
            r#"{}"#,
            r#"{"d": "1969-12-31", "b": null}"#,
        ],
    );
    let d = b.column(0).as_primitive::<Date32Type>();
    assert_eq!((d.value(0), d.value(3)), (19_782, -1));
    assert!(d.is_null(1) && d.is_null(2));
    assert_eq!(
        b.column(1).as_primitive::<Date64Type>().value(0),
        86_400_000
    );
    let bools = b.column(2).as_boolean();
    assert!(bools.value(0) && !bools.value(1) && bools.is_null(2) && bools.is_null(3));
    for msg in [
        r#"{"d": "2024-2-29"}"#,
        r#"{"d": 20240229}"#,
        r#"{"b": 1}"#,
        r#"{"b": "true"}"#,
    ] {
        let e = error(&mut dec, msg.as_bytes());
        assert!(
            matches!(e.kind, DecodeErrorKind::JsonTypeMismatch { .. }),
            "{msg}: {e}"
        );
    }
}

#[test]
fn strings_with_every_escape_and_raw_json_text() {
    let cols = [col("s", DataType::Utf8)];
    let mut dec = decoder(&cols);
    let b = decode_all(
        &mut dec,
        &[
            r#"{"s": "plain"}"#,
            r#"{"s": "q\" b\\ s\/ \b\f\n\r\t"}"#,
            r#"{"s": "\u00e9\u4E16\uD83D\uDE00\u0000"}"#,
            "{\"s\": \"h\u{e9}llo \u{1F600}\"}",
            r#"{"s": 12.50}"#,
            r#"{"s": {"a": [1, true, null],  "b": "x\n"}}"#,
            r#"{"s": false}"#,
            r#"{"s": null}"#,
            r#"{"s": ""}"#,
        ],
    );
    let s = b.column(0).as_string::<i32>();
    assert_eq!(s.value(0), "plain");
    assert_eq!(s.value(1), "q\" b\\ s/ \u{8}\u{c}\n\r\t");
    assert_eq!(s.value(2), "\u{e9}\u{4e16}\u{1F600}\u{0}");
    assert_eq!(s.value(3), "h\u{e9}llo \u{1F600}");
    assert_eq!(s.value(4), "12.50");
    assert_eq!(s.value(5), r#"{"a": [1, true, null],  "b": "x\n"}"#);
    assert_eq!(s.value(6), "false");
    assert!(s.is_null(7));
    assert_eq!(s.value(8), "");
}

#[test]
fn escaped_keys_match_their_unescaped_names() {
    let cols = [col("é", DataType::Int64), col("a\"b", DataType::Int64)];
    let b = decode_all(&mut decoder(&cols), &[r#"{"\u00e9": 1, "a\"b": 2}"#]);
    assert_eq!(b.column(0).as_primitive::<Int64Type>().value(0), 1);
    assert_eq!(b.column(1).as_primitive::<Int64Type>().value(0), 2);
}

#[test]
fn nested_paths() {
    let cols = [
        col("id", DataType::Int64).with_path("order.customer.id"),
        col("name", DataType::Utf8).with_path("order.customer.name"),
        col("total", DataType::Float64).with_path("order.total"),
        col("top", DataType::Utf8),
        col("a.b", DataType::Int64),
    ];
    let mut dec = decoder(&cols);
    let b = decode_all(
        &mut dec,
        &[
            r#"{"order": {"customer": {"id": 7, "name": "Ann", "x": [1]}, "total": 9.5}, "top": "t", "a.b": 3}"#,
            r#"{"order": {"total": 1}}"#,
            r#"{"order": null, "top": "u"}"#,
            r#"{"order": {"customer": null, "total": 2}}"#,
            r#"{}"#,
        ],
    );
    let id = b.column(0).as_primitive::<Int64Type>();
    assert_eq!(id.value(0), 7);
    assert!(id.is_null(1) && id.is_null(2) && id.is_null(3) && id.is_null(4));
    assert_eq!(b.column(1).as_string::<i32>().value(0), "Ann");
    let total = b.column(2).as_primitive::<Float64Type>();
    assert_eq!(
        (total.value(0), total.value(1), total.value(3)),
        (9.5, 1.0, 2.0)
    );
    assert!(total.is_null(2));
    assert_eq!(b.column(4).as_primitive::<Int64Type>().value(0), 3);
    let e = error(&mut dec, br#"{"order": {"customer": 5}}"#);
    assert_eq!(
        e.kind,
        DecodeErrorKind::JsonTypeMismatch {
            key: "order.customer".into(),
            expected: "an object (it holds requested columns)".into(),
            found: "number"
        }
    );
    assert_eq!(e.offset, 23);
    let mut dec = lenient(&cols);
    let b = decode_all(&mut dec, &[r#"{"order": [1, 2], "top": "v"}"#]);
    assert!(b.column(0).is_null(0) && b.column(2).is_null(0));
    assert_eq!(b.column(3).as_string::<i32>().value(0), "v");
}

fn struct_type() -> DataType {
    DataType::Struct(Fields::from(vec![
        Field::new("x", DataType::Int64, true),
        Field::new(
            "tags",
            DataType::List(Arc::new(Field::new("item", DataType::Utf8, true))),
            true,
        ),
    ]))
}

#[test]
fn structs_lists_and_maps() {
    let map = DataType::Map(
        Arc::new(Field::new(
            "entries",
            DataType::Struct(Fields::from(vec![
                Field::new("key", DataType::Utf8, false),
                Field::new("value", DataType::Float64, true),
            ])),
            false,
        )),
        false,
    );
    let cols = [
        col("s", struct_type()),
        col(
            "items",
            DataType::List(Arc::new(Field::new("item", struct_type(), true))),
        ),
        col(
            "matrix",
            DataType::List(Arc::new(Field::new(
                "item",
                DataType::List(Arc::new(Field::new("item", DataType::Int32, false))),
                false,
            ))),
        ),
        col("m", map),
    ];
    let mut dec = decoder(&cols);
    let b = decode_all(
        &mut dec,
        &[
            r#"{"s": {"x": 1, "tags": ["a", "b"], "other": {}}, "items": [{"x": 2}, {"tags": []}, null], "matrix": [[1, 2], [], [3]], "m": {"k": 1.5, "j": null}}"#,
            r#"{"s": null, "items": [], "matrix": null, "m": {}}"#,
            r#"{}"#,
        ],
    );
    let s = b.column(0).as_struct();
    assert!(s.is_valid(0) && s.is_null(1) && s.is_null(2));
    assert_eq!(s.column(0).as_primitive::<Int64Type>().value(0), 1);
    let tags = s.column(1).as_list::<i32>();
    assert_eq!(tags.value(0).as_string::<i32>().value(1), "b");

    let items = b.column(1).as_list::<i32>();
    assert_eq!(items.value_length(0), 3);
    assert_eq!(items.value_length(1), 0);
    assert!(items.is_null(2));
    let first = items.value(0);
    let first = first.as_struct();
    assert_eq!(first.column(0).as_primitive::<Int64Type>().value(0), 2);
    assert!(first.column(0).is_null(1) && first.is_null(2));
    assert!(first.column(1).is_null(0));
    assert_eq!(first.column(1).as_list::<i32>().value_length(1), 0);

    let matrix = b.column(2).as_list::<i32>();
    let rows = matrix.value(0);
    let rows = rows.as_list::<i32>();
    assert_eq!(rows.value(0).as_primitive::<Int32Type>().values(), &[1, 2]);
    assert_eq!(rows.value(2).as_primitive::<Int32Type>().values(), &[3]);
    assert!(matrix.is_null(1));
    // Declared non-nullable items come out nullable: any JSON element may be null.
    let DataType::List(item) = b.schema().field(2).data_type().clone() else {
        panic!()
    };
    assert!(item.is_nullable());

    let m = b.column(3).as_map();
    assert_eq!(m.value_length(0), 2);
    assert_eq!(m.keys().as_string::<i32>().value(1), "j");
    assert!(m.values().is_null(1));
    assert_eq!(m.value_length(1), 0);
    assert!(m.is_null(2));

    let e = error(&mut dec, br#"{"items": [{"x": "no"}]}"#);
    assert_eq!(
        e.kind,
        DecodeErrorKind::JsonTypeMismatch {
            key: "items[].x".into(),
            expected: "Int64".into(),
            found: "string"
        }
    );
    let e = error(&mut dec, br#"{"m": {"a": true}}"#);
    assert!(matches!(&e.kind, DecodeErrorKind::JsonTypeMismatch { key, .. } if key == "m{}"));
}

#[test]
fn duplicate_keys_last_one_wins() {
    let cols = [
        col("a", DataType::Int64),
        col("s", DataType::Utf8),
        col(
            "l",
            DataType::List(Arc::new(Field::new("item", DataType::Int64, true))),
        ),
        col("st", struct_type()),
        col("p", DataType::Int64).with_path("o.p"),
        col("q", DataType::Int64).with_path("o.q"),
    ];
    let mut dec = decoder(&cols);
    let b = decode_all(
        &mut dec,
        &[
            r#"{"a": 1, "s": "first", "l": [1, 2, 3], "st": {"x": 1, "tags": ["t"]}, "o": {"p": 1, "q": 2},
                "a": 2, "s": "second", "l": [4], "st": {"x": 2}, "o": {"p": 3}, "a": null}"#,
            r#"{"a": 5, "s": "x", "l": [], "st": {"x": 3, "x": 4}, "o": {"q": 1, "q": 9}}"#,
        ],
    );
    let a = b.column(0).as_primitive::<Int64Type>();
    assert!(a.is_null(0));
    assert_eq!(a.value(1), 5);
    assert_eq!(b.column(1).as_string::<i32>().value(0), "second");
    let l = b.column(2).as_list::<i32>();
    assert_eq!(l.value(0).as_primitive::<Int64Type>().values(), &[4]);
    let st = b.column(3).as_struct();
    assert_eq!(st.column(0).as_primitive::<Int64Type>().values(), &[2, 4]);
    assert!(st.column(1).is_null(0));
    assert_eq!(b.column(4).as_primitive::<Int64Type>().value(0), 3);
    // The whole earlier `o` was replaced, so `q` from it is gone.
    assert!(b.column(5).is_null(0));
    assert_eq!(b.column(5).as_primitive::<Int64Type>().value(1), 9);
}

#[test]
fn invalid_json_is_rejected_everywhere() {
    let cols = [col("a", DataType::Int64), col("s", DataType::Utf8)];
    let mut dec = decoder(&cols);
    let bad: &[&[u8]] = &[
        b"",
        b"   ",
        b"{",
        b"{\"a\": 1",
        b"{\"a\": 1,}",
        b"{\"a\": 1 \"s\": \"x\"}",
        b"{\"a\" 1}",
        b"{a: 1}",
        b"{\"a\": 01}",
        b"{\"a\": +1}",
        b"{\"a\": NaN}",
        b"{\"a\": Infinity}",
        b"{\"a\": 1}x",
        b"{\"a\": 1}{}",
        b"{\"a\": 1}}",
        b"{\"s\": \"a\tb\"}",
        b"{\"s\": \"\\x\"}",
        b"{\"s\": \"\\ud800\"}",
        b"{\"s\": \"\\udc00x\"}",
        b"{\"s\": \"\xff\"}",
        b"{\"s\": \"\xc3\"}",
        b"{\"s\": \"abc}",
        b"{\"s\": [1, 2,]}",
        b"{\"s\": [1 2]}",
        b"{\"s\": tru}",
        b"{\"s\": nulll}",
        // The same faults inside values nobody asked for.
        b"{\"x\": [1, 2,], \"a\": 1}",
        b"{\"x\": {\"y\": 01}, \"a\": 1}",
        b"{\"x\": \"\\ud83d\", \"a\": 1}",
        b"{\"x\": \"\x01\", \"a\": 1}",
        b"{\"x\": \"\xed\xa0\x80\", \"a\": 1}",
        b"{\"x\": -, \"a\": 1}",
        b"{\"x\": 1.e5, \"a\": 1}",
        b"{\"x\": {\"y\" 1}, \"a\": 1}",
        b"{\"x\": {,}, \"a\": 1}",
        b"{\"x\": [}, \"a\": 1}",
        b"{\"\xff\": 1}",
        b"\xef\xbb\xbf{\"a\": 1}",
    ];
    for msg in bad {
        let e = error(&mut dec, msg);
        assert!(
            matches!(e.kind, DecodeErrorKind::JsonSyntax(_)),
            "{}: {e:?}",
            String::from_utf8_lossy(msg)
        );
    }
    let e = error(&mut dec, b"{\"a\": 1,}");
    assert_eq!(
        e.kind,
        DecodeErrorKind::JsonSyntax("trailing comma before '}'")
    );
    assert_eq!(e.offset, 8);
    let e = error(&mut dec, b"{\"a\": 012}");
    assert_eq!(
        e.kind,
        DecodeErrorKind::JsonSyntax("leading zero in a number")
    );
    assert_eq!(e.offset, 6);
    let e = error(&mut dec, b"{\"a\": 1} x");
    assert_eq!(e.offset, 9);
    assert!(e.to_string().contains("trailing characters"), "{e}");
}

#[test]
fn top_level_must_be_one_object() {
    let mut dec = decoder(&[col("a", DataType::Int64)]);
    for (msg, found) in [
        (&b"[{\"a\": 1}, {\"a\": 2}]"[..], "array"),
        (b" \"text\"", "string"),
        (b"12", "number"),
        (b"null", "null"),
    ] {
        let e = error(&mut dec, msg);
        assert_eq!(e.kind, DecodeErrorKind::JsonNotAnObject { found });
        assert!(e.to_string().contains("one JSON object"), "{e}");
    }
}

#[test]
fn depth_is_limited() {
    let cols = [col("a", DataType::Utf8)];
    let mut dec = decoder(&cols);
    // 128 containers including the top-level object: accepted, skipped or as raw text.
    let ok = format!("{{\"x\": {}{}}}", "[".repeat(127), "]".repeat(127));
    dec.decode(ok.as_bytes()).unwrap();
    let ok = format!("{{\"a\": {}{}}}", "[".repeat(127), "]".repeat(127));
    dec.decode(ok.as_bytes()).unwrap();
    for key in ["x", "a"] {
        let deep = format!("{{\"{key}\": {}{}}}", "[".repeat(128), "]".repeat(128));
        let e = error(&mut dec, deep.as_bytes());
        assert_eq!(e.kind, DecodeErrorKind::TooDeep(128));
    }
    // Far deeper than the stack could take if it were not limited.
    let deep = format!("{{\"x\": {}", "[".repeat(1_000_000));
    assert_eq!(
        error(&mut dec, deep.as_bytes()).kind,
        DecodeErrorKind::TooDeep(128)
    );
    let options = JsonDecoderOptions {
        max_depth: 3,
        ..Default::default()
    };
    let cols = [col("s", struct_type())];
    let mut dec = JsonDecoder::new(&cols, options).unwrap();
    dec.decode(br#"{"s": {"tags": ["a"]}}"#).unwrap();
    assert_eq!(
        error(&mut dec, br#"{"s": {"tags": [["a"]]}}"#).kind,
        DecodeErrorKind::TooDeep(3)
    );
}

#[test]
fn errors_roll_back_the_partial_row() {
    let cols = [
        col("a", DataType::Int64),
        col("s", DataType::Utf8),
        col(
            "l",
            DataType::List(Arc::new(Field::new("item", struct_type(), true))),
        ),
        col("z", DataType::Int8),
    ];
    let mut dec = decoder(&cols);
    dec.decode(br#"{"a": 1, "s": "one", "l": [{"x": 1, "tags": ["p"]}], "z": 1}"#)
        .unwrap();
    // Fails after a, s and most of l are written.
    let e = error(
        &mut dec,
        br#"{"a": 2, "s": "two", "l": [{"x": 2, "tags": ["q", "r"]}, {"x": 3}], "z": 300}"#,
    );
    assert!(matches!(e.kind, DecodeErrorKind::JsonOutOfRange { .. }));
    error(
        &mut dec,
        br#"{"a": 2, "s": "two", "l": [{"x": 2, "tags": ["q", "r"#,
    );
    dec.decode(br#"{"z": 3, "l": [{"tags": ["s"]}], "s": "three", "a": 3}"#)
        .unwrap();
    let b = dec.flush().unwrap();
    for c in b.columns() {
        c.to_data().validate_full().unwrap();
    }
    assert_eq!(b.num_rows(), 2);
    assert_eq!(b.column(0).as_primitive::<Int64Type>().values(), &[1, 3]);
    let s = b.column(1).as_string::<i32>();
    assert_eq!((s.value(0), s.value(1)), ("one", "three"));
    let l = b.column(2).as_list::<i32>();
    assert_eq!(l.value_offsets(), &[0, 1, 2]);
    let inner = l.values().as_struct();
    let tags = inner.column(1).as_list::<i32>();
    assert_eq!(tags.values().as_string::<i32>().value(1), "s");
    assert_eq!(tags.values().len(), 2);
}

#[test]
fn mismatches_become_nulls_when_asked() {
    let cols = [
        col("a", DataType::Int64),
        col("b", DataType::UInt8),
        col("t", DataType::Timestamp(TimeUnit::Second, None)),
        col("st", struct_type()),
        col("after", DataType::Utf8),
    ];
    let mut dec = lenient(&cols);
    let b = decode_all(
        &mut dec,
        &[
            r#"{"a": "12", "b": 300, "t": "noon", "st": {"x": 1.5, "tags": "t"}, "after": "ok"}"#,
            r#"{"a": [1, {"deep": [null]}], "b": -1, "t": [], "st": 4, "after": "ok2"}"#,
        ],
    );
    for c in 0..3 {
        assert_eq!(b.column(c).null_count(), 2, "column {c}");
    }
    let st = b.column(3).as_struct();
    assert!(st.is_valid(0) && st.is_null(1));
    assert!(st.column(0).is_null(0) && st.column(1).is_null(0));
    assert_eq!(b.column(4).as_string::<i32>().value(1), "ok2");
    // Syntax errors are still errors.
    error(&mut dec, br#"{"a": [1,]}"#);
}

#[test]
fn error_messages_say_what_and_where() {
    let mut dec = decoder(&[col("price", DataType::Int64).with_path("order.price")]);
    let e = error(&mut dec, br#"{"order": {"price": "12"}}"#);
    assert_eq!(
        e.to_string(),
        "key 'order.price': expected Int64, found a JSON string at byte 20"
    );
    let e = error(&mut dec, br#"{"order": {"price": 1e999999999}}"#);
    assert!(
        e.to_string()
            .starts_with("key 'order.price': expected Int64"),
        "{e}"
    );
    let e = error(&mut dec, br#"{"order": {"price": 99999999999999999999}}"#);
    assert_eq!(
        e.to_string(),
        "key 'order.price': the value does not fit Int64 at byte 20"
    );
    let e = error(&mut dec, b"{\"order\": {\"price\": 1,}}");
    assert_eq!(
        e.to_string(),
        "invalid JSON: trailing comma before '}' at byte 22"
    );
}

#[test]
fn batches_and_fresh_decoders() {
    let options = JsonDecoderOptions {
        batch_size: 3,
        ..Default::default()
    };
    let mut dec = JsonDecoder::new(&[col("a", DataType::Int64)], options).unwrap();
    let mut fresh = dec.fresh();
    for i in 0..7 {
        dec.decode(format!("{{\"a\": {i}}}").as_bytes()).unwrap();
        if let Some(b) = dec.take_full_batch() {
            assert_eq!(b.num_rows(), 3);
        }
    }
    assert_eq!(dec.buffered_rows(), 1);
    assert_eq!(
        dec.flush()
            .unwrap()
            .column(0)
            .as_primitive::<Int64Type>()
            .value(0),
        6
    );
    assert!(dec.flush().is_none());
    fresh.decode(b"{}").unwrap();
    assert_eq!(fresh.flush().unwrap().num_rows(), 1);
    assert_eq!(dec.schema().field(0).name(), "a");
}

#[test]
fn bad_declarations_are_plan_errors() {
    let plan = |cols: &[ColumnSpec]| JsonDecoder::new(cols, JsonDecoderOptions::default()).err();
    assert!(matches!(
        plan(&[col("b", DataType::Binary)]),
        Some(PlanError::Unsupported { .. })
    ));
    assert!(matches!(
        plan(&[col("d", DataType::Decimal128(39, 0))]),
        Some(PlanError::Unsupported { .. })
    ));
    assert!(matches!(
        plan(&[col("a", DataType::Int64), col("a", DataType::Utf8)]),
        Some(PlanError::Conflict { .. })
    ));
    assert!(matches!(
        plan(&[
            col("o", DataType::Utf8),
            col("id", DataType::Int64).with_path("o.id")
        ]),
        Some(PlanError::Conflict { .. })
    ));
    assert!(matches!(
        plan(&[
            col("x", DataType::Int64).with_path("o.id"),
            col("y", DataType::Int64).with_path("o.id")
        ]),
        Some(PlanError::Conflict { .. })
    ));
    assert!(matches!(
        plan(&[col("x", DataType::Int64).with_path("o..id")]),
        Some(PlanError::BadPath { .. })
    ));
    let sorted_map = DataType::Map(
        Arc::new(Field::new(
            "entries",
            DataType::Struct(Fields::from(vec![
                Field::new("key", DataType::Utf8, false),
                Field::new("value", DataType::Int64, true),
            ])),
            false,
        )),
        true,
    );
    assert!(matches!(
        plan(&[col("m", sorted_map)]),
        Some(PlanError::Unsupported { .. })
    ));
    let opts = |o: JsonDecoderOptions| JsonDecoder::new(&[col("a", DataType::Int64)], o).err();
    assert!(matches!(
        opts(JsonDecoderOptions {
            batch_size: 0,
            ..Default::default()
        }),
        Some(PlanError::Options(_))
    ));
    assert!(matches!(
        opts(JsonDecoderOptions {
            max_depth: 0,
            ..Default::default()
        }),
        Some(PlanError::Options(_))
    ));
    assert!(matches!(
        opts(JsonDecoderOptions {
            timestamp_units: vec![("a".into(), EpochUnit::Millis)],
            ..Default::default()
        }),
        Some(PlanError::Options(_))
    ));
    assert_eq!("millis".parse::<EpochUnit>().unwrap(), EpochUnit::Millis);
    assert_eq!(
        " NULL ".parse::<JsonMismatch>().unwrap(),
        JsonMismatch::Null
    );
    assert!("drop".parse::<JsonMismatch>().is_err());
    assert!("days".parse::<EpochUnit>().is_err());
}
