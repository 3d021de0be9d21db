//! Hand-built Avro bytes: every type mapping and promotion, and bad input (truncated data, long
//! varints, negative lengths, unknown branches and symbols, deep nesting, trailing bytes,
//! random mutations), which must be clear errors and never a panic or a corrupt batch.

use weir_codec::{
    AvroDecoder, AvroDecoderOptions, AvroFraming, AvroSchema, ColumnSpec, DataType, Decoder, Field,
    TimeUnit,
};
use weir_testdata::Rng;

use super::{bytes, long, row_json};

const SCHEMA: &str = r#"{"type":"record","name":"T","namespace":"t","fields":[
  {"name":"b","type":"boolean"},
  {"name":"i","type":"int"},
  {"name":"l","type":"long"},
  {"name":"f","type":"float"},
  {"name":"d","type":"double"},
  {"name":"s","type":"string"},
  {"name":"y","type":"bytes"},
  {"name":"e","type":{"type":"enum","name":"Side","symbols":["BID","ASK"]}},
  {"name":"x","type":{"type":"fixed","name":"Two","size":2}},
  {"name":"ts","type":{"type":"long","logicalType":"timestamp-millis"}},
  {"name":"dec","type":{"type":"bytes","logicalType":"decimal","precision":9,"scale":2}},
  {"name":"dur","type":{"type":"fixed","name":"Dur","size":12,"logicalType":"duration"}},
  {"name":"n","type":["null",{"type":"record","name":"In","fields":[
      {"name":"a","type":"int"},{"name":"tags","type":{"type":"array","items":"string"}}]}]},
  {"name":"m","type":{"type":"map","values":["null","long"]}},
  {"name":"u","type":["int","string"]}
]}"#;

/// One message of [`SCHEMA`]; `inner` chooses the union branch of `n`.
fn message(inner: bool) -> Vec<u8> {
    let mut m = Vec::new();
    m.push(1); // b
    long(&mut m, -7); // i
    long(&mut m, 1 << 40); // l
    m.extend_from_slice(&1.5f32.to_le_bytes());
    m.extend_from_slice(&(-2.25f64).to_le_bytes());
    bytes(&mut m, "héllo".as_bytes());
    bytes(&mut m, &[0, 255]);
    long(&mut m, 1); // ASK
    m.extend_from_slice(&[7, 8]);
    long(&mut m, 1_700_000_000_123);
    bytes(&mut m, &[0xff, 0x85]); // -123 -> -1.23
    for w in [1u32, 2, 3] {
        m.extend_from_slice(&w.to_le_bytes());
    }
    if inner {
        long(&mut m, 1);
        long(&mut m, 42);
        long(&mut m, -2); // a block of 2 items, with its byte size
        long(&mut m, 4);
        bytes(&mut m, b"p");
        bytes(&mut m, b"q");
        long(&mut m, 0);
    } else {
        long(&mut m, 0);
    }
    long(&mut m, 2); // two map entries
    bytes(&mut m, b"k1");
    long(&mut m, 1);
    long(&mut m, 5);
    bytes(&mut m, b"k2");
    long(&mut m, 0); // null
    long(&mut m, 0);
    long(&mut m, 1); // u: string branch
    bytes(&mut m, b"z");
    m
}

fn decoder(columns: &[ColumnSpec]) -> AvroDecoder {
    let schema = AvroSchema::parse(SCHEMA).unwrap();
    AvroDecoder::new(&schema, columns, AvroDecoderOptions::default()).unwrap()
}

fn all_columns() -> Vec<ColumnSpec> {
    let mut c = weir_codec::avro_default_columns(
        &AvroSchema::parse(&SCHEMA.replace(r#"["int","string"]"#, r#""string""#)).unwrap(),
    )
    .unwrap();
    // The general union reads into a column both branches fit? int does not fit Utf8: the
    // int branch is refused per message, the string branch reads.
    c.last_mut().unwrap().data_type = DataType::Utf8;
    c
}

#[test]
fn every_type_reads_as_documented() {
    let mut d = decoder(&all_columns());
    d.decode(&message(true)).unwrap();
    d.decode(&message(false)).unwrap();
    let b = d.flush().unwrap();
    let row = row_json(&b, 0);
    assert_eq!(row["b"], true);
    assert_eq!(row["i"], -7);
    assert_eq!(row["l"], 1i64 << 40);
    assert_eq!(row["f"], 1.5);
    assert_eq!(row["d"], -2.25);
    assert_eq!(row["s"], "héllo");
    assert_eq!(row["y"], "00ff");
    assert_eq!(row["e"], "ASK");
    assert_eq!(row["x"], "0708");
    assert_eq!(row["ts"], 1_700_000_000_123i64);
    assert_eq!(row["dec"], "-123");
    assert_eq!(row["n"], serde_json::json!({"a": 42, "tags": ["p", "q"]}));
    assert_eq!(row["m"], serde_json::json!([["k1", 5], ["k2", null]]));
    assert_eq!(row["u"], "z");
    assert_eq!(row_json(&b, 1)["n"], serde_json::Value::Null);
    let schema = b.schema();
    assert_eq!(
        schema.field_with_name("ts").unwrap().data_type(),
        &DataType::Timestamp(TimeUnit::Millisecond, Some("UTC".into()))
    );
    assert_eq!(
        schema.field_with_name("dec").unwrap().data_type(),
        &DataType::Decimal128(9, 2)
    );
    // The duration: 1 month, 2 days, 3 ms.
    let dur = b
        .column_by_name("dur")
        .unwrap()
        .as_any()
        .downcast_ref::<arrow_array::IntervalMonthDayNanoArray>()
        .unwrap()
        .value(0);
    assert_eq!((dur.months, dur.days, dur.nanoseconds), (1, 2, 3_000_000));
}

#[test]
fn promotions_and_paths_follow_the_declared_columns() {
    let cols = [
        ColumnSpec::new("i", DataType::Float64),
        ColumnSpec::new("l", DataType::Float32),
        ColumnSpec::new("f", DataType::Float64),
        ColumnSpec::new("s", DataType::Binary),
        ColumnSpec::new("ts", DataType::Timestamp(TimeUnit::Nanosecond, None)),
        ColumnSpec::new("dec", DataType::Decimal128(20, 2)),
        ColumnSpec::new("a", DataType::Int64).with_path("n.a"),
    ];
    let mut d = decoder(&cols);
    d.decode(&message(true)).unwrap();
    d.decode(&message(false)).unwrap();
    let b = d.flush().unwrap();
    let row = row_json(&b, 0);
    assert_eq!(row["i"], -7.0);
    assert_eq!(row["l"], (1u64 << 40) as f64);
    assert_eq!(row["ts"], 1_700_000_000_123_000_000i64);
    assert_eq!(row["dec"], "-123");
    assert_eq!(row["a"], 42);
    assert_eq!(row_json(&b, 1)["a"], serde_json::Value::Null);
    assert_eq!(row["s"], super::hex("héllo".as_bytes()));
    // Bytes into a Utf8 column must be valid UTF-8: [0, 255] is not.
    let mut d = decoder(&[ColumnSpec::new("y", DataType::Utf8)]);
    let e = d.decode(&message(true)).unwrap_err().to_string();
    assert!(
        e.contains("field 'y'") && e.contains("not valid UTF-8"),
        "{e}"
    );
}

#[test]
fn declared_columns_that_do_not_fit_are_refused_at_plan_time() {
    let schema = AvroSchema::parse(SCHEMA).unwrap();
    let plan = |c: ColumnSpec| {
        AvroDecoder::new(&schema, &[c], AvroDecoderOptions::default())
            .unwrap_err()
            .to_string()
    };
    let e = plan(ColumnSpec::new("l", DataType::Int32));
    assert!(
        e.contains("field 'l' is Avro long") && e.contains("declare BIGINT"),
        "{e}"
    );
    let e = plan(ColumnSpec::new("nope", DataType::Int32));
    assert!(e.contains("'nope'"), "{e}");
    let e = plan(ColumnSpec::new(
        "ts",
        DataType::Timestamp(TimeUnit::Second, None),
    ));
    assert!(e.contains("timestamp-millis"), "{e}");
    let e = plan(ColumnSpec::new("q", DataType::Int32).with_path("i.q"));
    assert!(e.contains("not a record"), "{e}");
    // A union reads into a column one of its branches fits (the others are refused per
    // message); none fitting is refused now.
    assert!(AvroDecoder::new(
        &schema,
        &[ColumnSpec::new("u", DataType::Int64)],
        AvroDecoderOptions::default()
    )
    .is_ok());
    let e = plan(ColumnSpec::new("u", DataType::Boolean));
    assert!(
        e.contains("Avro [int, string]") && e.contains("no branch"),
        "{e}"
    );
}

/// The error of decoding `m` with all columns, as text, and the decoder's rows after it.
fn error_of(m: &[u8]) -> String {
    let mut d = decoder(&all_columns());
    let e = d.decode(m).unwrap_err().to_string();
    assert_eq!(d.buffered_rows(), 0);
    e
}

#[test]
fn bad_input_is_a_clear_error_naming_the_field_and_offset() {
    let good = message(true);
    // Truncated anywhere: an error, never a panic; the next message still decodes.
    let mut d = decoder(&all_columns());
    for cut in 0..good.len() {
        let e = d.decode(&good[..cut]);
        assert!(e.is_err(), "a message cut at {cut} decoded");
    }
    d.decode(&good).unwrap();
    assert_eq!(d.flush().unwrap().num_rows(), 1);

    // A varint of 11 bytes in 'i' (byte 1).
    let mut m = vec![1];
    m.extend_from_slice(&[0xff; 11]);
    let e = error_of(&m);
    assert!(
        e.contains("field 'i'") && e.contains("longer than 10 bytes") && e.contains("at byte 1"),
        "{e}"
    );
    // An int past 32 bits.
    let mut m = vec![1];
    long(&mut m, 1 << 40);
    let e = error_of(&m);
    assert!(e.contains("does not fit an Avro int"), "{e}");
    // A boolean of 2.
    let e = error_of(&[2]);
    assert!(
        e.contains("field 'b'") && e.contains("boolean byte of 2"),
        "{e}"
    );
    // A negative string length.
    let mut m = good[..good.len()].to_vec();
    let s_at = 1 + 1 + 6 + 4 + 8; // b, i (1 byte), l (6 bytes), f, d
    m[s_at] = 0x03; // zigzag -2
    let e = error_of(&m);
    assert!(
        e.contains("field 's'") && e.contains("negative length"),
        "{e}"
    );
    // A string length past the end.
    m[s_at] = 0x7e; // 63
    let e = error_of(&m[..s_at + 5]);
    assert!(e.contains("runs past the end"), "{e}");
    // An unknown enum index and union branch; bytes after the record.
    let mut m = good.clone();
    let e_at = s_at + 1 + 6 + 1 + 2;
    m[e_at] = 0x06; // 3
    let e = error_of(&m);
    assert!(e.contains("field 'e'") && e.contains("enum index 3"), "{e}");
    let mut m = good.clone();
    let u_at = m.len() - 3;
    m[u_at] = 0x04; // branch 2
    let e = error_of(&m);
    assert!(
        e.contains("field 'u'") && e.contains("union branch 2"),
        "{e}"
    );
    let mut m = good.clone();
    m[u_at] = 0x00; // the int branch: the Utf8 column cannot hold it
    let e = error_of(&m);
    assert!(
        e.contains("union branch 0 (int)") && e.contains("cannot hold"),
        "{e}"
    );
    let mut m = good.clone();
    m.push(0);
    let e = error_of(&m);
    assert!(e.contains("1 bytes follow the record"), "{e}");
}

#[test]
fn deep_recursion_is_bounded() {
    // A linked list nested 150 deep, read through a column of its head only: the rest is
    // skipped, and the skip stops at the depth limit.
    let schema = AvroSchema::parse(
        r#"{"type":"record","name":"L","fields":[{"name":"v","type":"int"},
            {"name":"next","type":["null","L"]}]}"#,
    )
    .unwrap();
    let mut m = Vec::new();
    for i in 0..150 {
        long(&mut m, i);
        long(&mut m, 1);
    }
    long(&mut m, 150);
    long(&mut m, 0);
    let cols = [ColumnSpec::new("v", DataType::Int32)];
    let mut d = AvroDecoder::new(&schema, &cols, AvroDecoderOptions::default()).unwrap();
    let e = d.decode(&m).unwrap_err().to_string();
    assert!(e.contains("nesting deeper than 100"), "{e}");
    // Deeper limits, on a thread with room for unoptimised frames (a debug build's are many
    // times an optimised one's).
    std::thread::Builder::new()
        .stack_size(256 << 20)
        .spawn(move || {
            let deep = AvroDecoderOptions {
                max_depth: 400,
                ..AvroDecoderOptions::default()
            };
            let mut d = AvroDecoder::new(&schema, &cols, deep).unwrap();
            d.decode(&m).unwrap();
            // The highest limit allowed holds against a list nested deeper still.
            let mut m = Vec::new();
            for i in 0..2000 {
                long(&mut m, i);
                long(&mut m, 1);
            }
            let deepest = AvroDecoderOptions {
                max_depth: 1024,
                ..AvroDecoderOptions::default()
            };
            let mut d = AvroDecoder::new(&schema, &cols, deepest).unwrap();
            let e = d.decode(&m).unwrap_err().to_string();
            assert!(e.contains("nesting deeper than 1024"), "{e}");
        })
        .unwrap()
        .join()
        .unwrap();
    // Arrays of null items: their count is not bounded by the message's length, so all the
    // arrays of one message share one budget (a few bytes must not claim a billion rows).
    let schema = AvroSchema::parse(
        r#"{"type":"record","name":"N","fields":[
            {"name":"a","type":{"type":"array","items":{"type":"array","items":"null"}}},
            {"name":"x","type":"int"}]}"#,
    )
    .unwrap();
    let item = Field::new("item", DataType::Int64, true);
    let inner = DataType::List(std::sync::Arc::new(item));
    let nested = DataType::List(std::sync::Arc::new(Field::new("item", inner, true)));
    let mut m = Vec::new();
    long(&mut m, 1000);
    for _ in 0..1000 {
        long(&mut m, 1 << 20);
        long(&mut m, 0);
    }
    long(&mut m, 0);
    long(&mut m, 7);
    for cols in [
        vec![ColumnSpec::new("a", nested)],
        // Skipped, the same bytes would still be a billion steps.
        vec![ColumnSpec::new("x", DataType::Int32)],
    ] {
        let mut d = AvroDecoder::new(&schema, &cols, AvroDecoderOptions::default()).unwrap();
        let e = d.decode(&m).unwrap_err().to_string();
        assert!(e.contains("items of zero bytes"), "{e}");
    }
}

#[test]
fn schemas_that_nest_a_record_twice_per_level_stay_linear() {
    // R0 is empty; each Rk holds two R(k-1): 2^40 empty records per value, none of them bytes.
    let mut types = String::from(r#"{"type":"record","name":"R0","fields":[]}"#);
    for k in 1..=40 {
        types = format!(
            r#"{{"type":"record","name":"R{k}","fields":[{{"name":"a","type":{types}}},{{"name":"b","type":"R{}"}}]}}"#,
            k - 1
        );
    }
    let text = format!(
        r#"{{"type":"record","name":"Top","fields":[{{"name":"f","type":{types}}},{{"name":"x","type":"int"}}]}}"#
    );
    let schema = AvroSchema::parse(&text).unwrap();
    let cols = [ColumnSpec::new("x", DataType::Int32)];
    let mut d = AvroDecoder::new(&schema, &cols, AvroDecoderOptions::default()).unwrap();
    d.decode(&[14]).unwrap();
    assert_eq!(row_json(&d.flush().unwrap(), 0)["x"], 7);
    // Inferred columns would spell out 2^40 fields: refused, naming the field.
    let e = weir_codec::avro_default_columns(&schema)
        .unwrap_err()
        .to_string();
    assert!(
        e.contains("'f'") && e.contains("declare the columns"),
        "{e}"
    );
    // The nesting limit is bounded too: each level is a stack frame.
    let deep = AvroDecoderOptions {
        max_depth: 100_000,
        ..AvroDecoderOptions::default()
    };
    let e = AvroDecoder::new(&schema, &cols, deep)
        .unwrap_err()
        .to_string();
    assert!(e.contains("between 1 and 1024"), "{e}");
}

#[test]
fn wide_fixed_decimals_and_always_null_fields() {
    // A decimal in a fixed of 20 bytes (leading sign bytes), and a field that is only null.
    let schema = AvroSchema::parse(
        r#"{"type":"record","name":"W","fields":[
            {"name":"d","type":{"type":"fixed","name":"D20","size":20,"logicalType":"decimal","precision":30,"scale":3}},
            {"name":"nothing","type":"null"}]}"#,
    )
    .unwrap();
    let cols = weir_codec::avro_default_columns(&schema).unwrap();
    assert_eq!(cols.len(), 1, "the null field has no column");
    let mut d = AvroDecoder::new(&schema, &cols, AvroDecoderOptions::default()).unwrap();
    let mut m = vec![0xff; 18];
    m.extend_from_slice(&(-5i16).to_be_bytes());
    d.decode(&m).unwrap();
    assert_eq!(row_json(&d.flush().unwrap(), 0)["d"], "-5");
}

#[test]
fn mutated_messages_never_panic() {
    let cols = all_columns();
    let mut d = decoder(&cols);
    let seeds = [message(true), message(false)];
    let mut rng = Rng::new(7);
    let (mut ok, mut bad) = (0, 0);
    for n in 0..30_000 {
        let mut m = seeds[n % 2].clone();
        for _ in 0..=rng.below(4) {
            let at = rng.index(m.len());
            match rng.below(4) {
                0 => m[at] = rng.next_u64() as u8,
                1 => m[at] ^= 1 << rng.below(8),
                2 => m.truncate(at),
                _ => m.insert(at, rng.next_u64() as u8),
            }
            if m.is_empty() {
                break;
            }
        }
        match d.decode(&m) {
            Ok(()) => ok += 1,
            Err(_) => bad += 1,
        }
        if n % 1000 == 999 {
            // Built with full validation in debug builds: a corrupt column would panic here.
            let b = d.flush();
            assert_eq!(b.map_or(0, |b| b.num_rows()), ok);
            ok = 0;
        }
    }
    assert!(
        bad > 1000,
        "the mutations should break most messages ({bad})"
    );
}

#[test]
fn single_object_messages_carry_the_schema_fingerprint() {
    let schema = AvroSchema::parse(SCHEMA).unwrap();
    let options = AvroDecoderOptions {
        framing: AvroFraming::SingleObject,
        ..AvroDecoderOptions::default()
    };
    let mut d = AvroDecoder::new(&schema, &all_columns(), options).unwrap();
    let mut m = vec![0xC3, 0x01];
    m.extend_from_slice(&schema.fingerprint().to_le_bytes());
    m.extend_from_slice(&message(true));
    d.decode(&m).unwrap();
    m[3] ^= 1;
    let e = d.decode(&m).unwrap_err().to_string();
    assert!(e.contains("schema fingerprint"), "{e}");
    let e = d.decode(&message(true)).unwrap_err().to_string();
    assert!(e.contains("C3 01"), "{e}");
    assert_eq!(d.flush().unwrap().num_rows(), 1);
}

/// Fields whose skip checks exactly what their read does (no boolean, int or string: a skip
/// does not look at a boolean's byte, an int's range or a string's UTF-8), with a nested
/// record.
const SKIPPABLE: &str = r#"{"type":"record","name":"S","fields":[
  {"name":"a","type":"long"},
  {"name":"b","type":"long"},
  {"name":"c","type":"double"},
  {"name":"d","type":"double"},
  {"name":"e","type":"bytes"},
  {"name":"f","type":"long"},
  {"name":"g","type":"long"},
  {"name":"h","type":"long"},
  {"name":"i","type":{"type":"fixed","name":"Three","size":3}},
  {"name":"j","type":{"type":"record","name":"J","fields":[
      {"name":"k","type":"long"},{"name":"l","type":"bytes"},{"name":"m","type":"long"}]}},
  {"name":"n","type":"long"},
  {"name":"z","type":"long"}
]}"#;

#[test]
fn skipped_fields_fail_where_read_ones_do() {
    // The same messages through every column, and through the last column only (every other
    // field skipped, consecutive ones together): the same rows, and the same errors, naming the
    // same field and byte, for varints of every length, truncations and random damage.
    let schema = AvroSchema::parse(SKIPPABLE).unwrap();
    let all = weir_codec::avro_default_columns(&schema).unwrap();
    let last = vec![ColumnSpec::new("z", DataType::Int64)];
    let mut read = AvroDecoder::new(&schema, &all, AvroDecoderOptions::default()).unwrap();
    let mut skip = AvroDecoder::new(&schema, &last, AvroDecoderOptions::default()).unwrap();
    let mut rng = Rng::new(11);
    let (mut same_ok, mut same_err) = (0, 0);
    for n in 0..20_000 {
        let mut m = Vec::new();
        let varint = |m: &mut Vec<u8>, rng: &mut Rng| {
            // A zigzag long of 1 to 10 bytes, sometimes a damaged 10-byte one or 11 bytes.
            match rng.below(64) {
                62 => m.extend_from_slice(&[
                    0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0x03,
                ]),
                63 => m.extend_from_slice(&[0x80; 11]),
                k => long(m, (rng.next_u64() >> (63 - 7 * (k % 10) as u32)) as i64),
            }
        };
        varint(&mut m, &mut rng);
        varint(&mut m, &mut rng);
        m.extend_from_slice(&1.5f64.to_le_bytes());
        m.extend_from_slice(&2.5f64.to_le_bytes());
        bytes(&mut m, &b"a string of some length"[..rng.index(24)]);
        for _ in 0..3 {
            varint(&mut m, &mut rng);
        }
        m.extend_from_slice(&[1, 2, 3]);
        varint(&mut m, &mut rng);
        bytes(&mut m, &[9; 5][..rng.index(6)]);
        varint(&mut m, &mut rng);
        varint(&mut m, &mut rng);
        long(&mut m, n);
        if n % 2 == 1 {
            for _ in 0..=rng.below(3) {
                let at = rng.index(m.len());
                match rng.below(3) {
                    0 => m[at] = rng.next_u64() as u8,
                    1 => m.truncate(at),
                    _ => m.insert(at, 0x80 | rng.next_u64() as u8),
                }
                if m.is_empty() {
                    break;
                }
            }
        }
        let (r, s) = (read.decode(&m), skip.decode(&m));
        match (r, s) {
            (Ok(()), Ok(())) => same_ok += 1,
            (Err(r), Err(s)) => {
                assert_eq!(r.to_string(), s.to_string(), "message {n}: {m:02x?}");
                same_err += 1;
            }
            (r, s) => panic!("message {n} read {r:?} but skipped {s:?}: {m:02x?}"),
        }
    }
    let (r, s) = (read.flush().unwrap(), skip.flush().unwrap());
    assert_eq!(r.num_rows(), same_ok);
    assert_eq!(r.column_by_name("z").unwrap(), s.column(0));
    assert!(
        same_ok > 5_000 && same_err > 5_000,
        "{same_ok} read, {same_err} refused"
    );
}

#[test]
fn decimals_past_38_digits_read_as_decimal256() {
    // 39 to 76 digits: Decimal256, from bytes and from a fixed (here 40 bytes: 8 redundant
    // sign bytes); a value of more digits than declared is an error; 77 digits is no decimal.
    let schema = AvroSchema::parse(
        r#"{"type":"record","name":"B","fields":[
            {"name":"b","type":{"type":"bytes","logicalType":"decimal","precision":50,"scale":4}},
            {"name":"f","type":{"type":"fixed","name":"F40","size":40,"logicalType":"decimal","precision":76,"scale":0}}]}"#,
    )
    .unwrap();
    let cols = weir_codec::avro_default_columns(&schema).unwrap();
    assert_eq!(cols[0].data_type, DataType::Decimal256(50, 4));
    assert_eq!(cols[1].data_type, DataType::Decimal256(76, 0));
    let mut d = AvroDecoder::new(&schema, &cols, AvroDecoderOptions::default()).unwrap();
    // Big-endian two's complement, as Avro writes it.
    let be = |digits: &str| {
        let v = arrow_buffer_i256(digits);
        v.to_be_bytes()
    };
    let b = "-12345678901234567890123456789012345678901234567890";
    let f = "9999999999999999999999999999999999999999999999999999999999999999999999999999";
    let mut m = Vec::new();
    let bb = be(b);
    let first = bb.iter().position(|&x| x != 0xff).unwrap() - 1;
    bytes(&mut m, &bb[first..]);
    m.extend_from_slice(&[0; 8]);
    m.extend_from_slice(&be(f));
    d.decode(&m).unwrap();
    let row = row_json(&d.flush().unwrap(), 0);
    assert_eq!(row["b"], b);
    assert_eq!(row["f"], f);
    // 51 digits into decimal(50, 4): out of range, named.
    let mut m = Vec::new();
    bytes(&mut m, &be(&format!("1{}", "0".repeat(50)))[8..]);
    m.extend_from_slice(&[0; 40]);
    let e = d.decode(&m).unwrap_err().to_string();
    assert!(e.contains("field 'b'") && e.contains("does not fit"), "{e}");
    let too_wide = AvroSchema::parse(
        r#"{"type":"record","name":"C","fields":[
            {"name":"c","type":{"type":"bytes","logicalType":"decimal","precision":77,"scale":0}}]}"#,
    )
    .unwrap();
    // As the specification says of a logical type that is not valid: the underlying type.
    let c = weir_codec::avro_default_columns(&too_wide).unwrap();
    assert_eq!(c[0].data_type, DataType::Binary);
}

/// An i256 from its decimal digits.
fn arrow_buffer_i256(digits: &str) -> arrow_buffer::i256 {
    arrow_buffer::i256::from_string(digits).unwrap()
}
