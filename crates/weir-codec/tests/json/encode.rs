//! The JSON encoder against arrow-json's writer: random batches of every column type the
//! encoder writes in its own loops (and of the types it hands to arrow-json), with nulls,
//! escapes, non-finite floats, timestamps of every unit and fraction length, and slices. Each
//! row's object must be the text arrow-json writes, except for the floats JSON numbers cannot
//! hold, which both write as protobuf's JSON mapping does (the reference through a factory).

use std::sync::Arc;

use arrow_array::builder::{
    BinaryBuilder, BooleanBuilder, Decimal128Builder, Float32Builder, Float64Builder, Int16Builder,
    Int32Builder, Int64Builder, Int8Builder, LargeStringBuilder, ListBuilder, MapBuilder,
    PrimitiveBuilder, StringBuilder, StringDictionaryBuilder, StringViewBuilder, UInt16Builder,
    UInt32Builder, UInt64Builder, UInt8Builder,
};
use arrow_array::cast::AsArray;
use arrow_array::types::{
    Date32Type, Float32Type, Float64Type, Int32Type, TimestampMicrosecondType,
    TimestampMillisecondType, TimestampNanosecondType, TimestampSecondType,
};
use arrow_array::{Array, ArrayRef, NullArray, RecordBatch, StructArray};
use arrow_json::writer::{make_encoder, EncoderFactory, EncoderOptions, NullableEncoder};
use arrow_schema::{ArrowError, DataType, Field, FieldRef, Schema};
use weir_codec::{Encoder, JsonEncoder};
use weir_testdata::Rng;

/// What the reference writes for floats: ryu's shortest text (weir's JSON before this encoder),
/// and protobuf's JSON strings for NaN and the infinities, at any depth.
#[derive(Debug)]
struct ReferenceFloats;

impl EncoderFactory for ReferenceFloats {
    fn make_default_encoder<'a>(
        &self,
        _field: &'a FieldRef,
        array: &'a dyn Array,
        _options: &'a EncoderOptions,
    ) -> Result<Option<NullableEncoder<'a>>, ArrowError> {
        let values: Vec<f64> = match array.data_type() {
            DataType::Float64 => array.as_primitive::<Float64Type>().values().to_vec(),
            DataType::Float32 => array
                .as_primitive::<Float32Type>()
                .values()
                .iter()
                .map(|&v| f64::from(v))
                .collect(),
            _ => return Ok(None),
        };
        let single = array.data_type() == &DataType::Float32;
        Ok(Some(NullableEncoder::new(
            Box::new(Reference { values, single }),
            array.nulls().cloned(),
        )))
    }
}

struct Reference {
    values: Vec<f64>,
    single: bool,
}

impl arrow_json::writer::Encoder for Reference {
    fn encode(&mut self, idx: usize, out: &mut Vec<u8>) {
        let v = self.values[idx];
        let text = if v.is_nan() {
            "\"NaN\"".to_string()
        } else if v.is_infinite() {
            if v > 0.0 {
                "\"Infinity\""
            } else {
                "\"-Infinity\""
            }
            .to_string()
        } else if self.single {
            ryu::Buffer::new().format_finite(v as f32).to_string()
        } else {
            ryu::Buffer::new().format_finite(v).to_string()
        };
        out.extend_from_slice(text.as_bytes());
    }
}

/// arrow-json's text of each row of `batch`.
fn reference(batch: &RecordBatch) -> Vec<String> {
    let options = EncoderOptions::default().with_encoder_factory(Arc::new(ReferenceFloats));
    let array = StructArray::from(batch.clone());
    let field: FieldRef = Arc::new(Field::new("", array.data_type().clone(), false));
    let mut encoder = make_encoder(&field, &array, &options).expect("arrow-json encoder");
    (0..batch.num_rows())
        .map(|r| {
            let mut out = Vec::new();
            encoder.encode(r, &mut out);
            String::from_utf8(out).expect("arrow-json writes UTF-8")
        })
        .collect()
}

const TEXT: &[&str] = &[
    "",
    "a",
    "AAPL",
    "quote \" inside",
    "back\\slash",
    "tab\there",
    "line\nbreak",
    "\r",
    "\u{0}",
    "\u{1f}",
    "\u{7f}",
    "é",
    "日本語",
    "😀",
    "/",
    "0123456789abcdef0123456789abcdef0123",
];

fn text(rng: &mut Rng) -> String {
    (0..rng.below(4))
        .map(|_| *rng.pick(TEXT))
        .collect::<Vec<_>>()
        .concat()
}

fn float(rng: &mut Rng) -> f64 {
    match rng.below(8) {
        0 => f64::NAN,
        1 => f64::INFINITY,
        2 => f64::NEG_INFINITY,
        3 => f64::from_bits(rng.next_u64()),
        4 => rng.below(10_000_000) as f64 / 100.0,
        5 => -(rng.below(1 << 20) as f64),
        6 => *rng.pick(&[0.0, -0.0, 1e16, 1e15, 1e21, 5e-324, 1e-7, f64::MAX]),
        _ => rng.unit() * 1e300,
    }
}

/// A timestamp in units of `1 / per_second` s whose text has any fraction length; in seconds,
/// milliseconds and microseconds sometimes past the years 0 to 9999 (which chrono writes with a
/// sign), and sometimes at those years' ends.
fn time(rng: &mut Rng, per_second: i64) -> i64 {
    let secs = match rng.below(100) {
        0..=2 if per_second < 1_000_000_000 => rng.range_i64(-8_000_000_000_000, 8_000_000_000_000),
        3..=4 if per_second < 1_000_000_000 => *rng.pick(&[
            -62_167_219_201,
            -62_167_219_200,
            253_402_300_799,
            253_402_300_800,
        ]),
        _ => rng.range_i64(-9_000_000_000, 9_000_000_000),
    };
    let fraction = match rng.below(4) {
        0 => 0,
        1 => rng.below(1_000) as i64 * 1_000_000,
        2 => rng.below(1_000_000) as i64 * 1_000,
        _ => rng.below(1_000_000_000) as i64,
    } / (1_000_000_000 / per_second);
    secs * per_second + fraction
}

/// A random column of `kind` (an index into the kinds below) and `rows` rows, a share null.
fn column(rng: &mut Rng, kind: usize, rows: usize) -> (Field, ArrayRef) {
    let nulls = *rng.pick(&[0u64, 0, 10, 50, 100]);
    let null = |rng: &mut Rng| rng.percent(nulls);
    macro_rules! primitive {
        ($builder:ty, $name:expr, $value:expr) => {{
            let mut b = <$builder>::new();
            for _ in 0..rows {
                if null(rng) {
                    b.append_null();
                } else {
                    b.append_value($value(&mut *rng));
                }
            }
            let a: ArrayRef = Arc::new(b.finish());
            (Field::new($name, a.data_type().clone(), true), a)
        }};
    }
    match kind {
        0 => primitive!(BooleanBuilder, "flag", |r: &mut Rng| r.percent(50)),
        1 => primitive!(Int8Builder, "i8", |r: &mut Rng| r.next_u64() as i8),
        2 => primitive!(Int16Builder, "i16", |r: &mut Rng| r.next_u64() as i16),
        3 => primitive!(Int32Builder, "i32", |r: &mut Rng| r.next_u64() as i32),
        4 => primitive!(Int64Builder, "i64", |r: &mut Rng| {
            let v = r.next_u64() as i64;
            v >> r.below(64)
        }),
        5 => primitive!(UInt8Builder, "u8", |r: &mut Rng| r.next_u64() as u8),
        6 => primitive!(UInt16Builder, "u16", |r: &mut Rng| r.next_u64() as u16),
        7 => primitive!(UInt32Builder, "u32", |r: &mut Rng| r.next_u64() as u32),
        8 => primitive!(UInt64Builder, "u64", |r: &mut Rng| r.next_u64()
            >> r.below(64)),
        9 => primitive!(Float64Builder, "price", float),
        10 => primitive!(Float32Builder, "f32", |r: &mut Rng| float(r) as f32),
        11 => primitive!(StringBuilder, "ticker", text),
        12 => primitive!(LargeStringBuilder, "large \"name\"\n", text),
        13 => primitive!(StringViewBuilder, "view", text),
        14 => primitive!(
            PrimitiveBuilder::<TimestampNanosecondType>,
            "ns",
            |r: &mut Rng| time(r, 1_000_000_000)
        ),
        15 => primitive!(
            PrimitiveBuilder::<TimestampMicrosecondType>,
            "us",
            |r: &mut Rng| time(r, 1_000_000)
        ),
        16 => primitive!(
            PrimitiveBuilder::<TimestampMillisecondType>,
            "ms",
            |r: &mut Rng| time(r, 1_000)
        ),
        17 => primitive!(
            PrimitiveBuilder::<TimestampSecondType>,
            "s",
            |r: &mut Rng| { time(r, 1) }
        ),
        18 => {
            // A time zone: arrow-json writes these.
            let mut b = PrimitiveBuilder::<TimestampMillisecondType>::new().with_timezone("+02:00");
            for _ in 0..rows {
                if null(rng) {
                    b.append_null();
                } else {
                    b.append_value(time(rng, 1_000));
                }
            }
            let a: ArrayRef = Arc::new(b.finish());
            (Field::new("tz", a.data_type().clone(), true), a)
        }
        19 => primitive!(PrimitiveBuilder::<Date32Type>, "day", |r: &mut Rng| {
            r.range_i64(-800_000, 2_900_000) as i32
        }),
        20 => {
            let mut b = Decimal128Builder::new();
            for _ in 0..rows {
                if null(rng) {
                    b.append_null();
                } else {
                    b.append_value(rng.next_u64() as i64 as i128 >> rng.below(60));
                }
            }
            let a: ArrayRef = Arc::new(b.finish().with_precision_and_scale(20, 4).expect("p,s"));
            (Field::new("amount", a.data_type().clone(), true), a)
        }
        21 => {
            let mut b = ListBuilder::new(Float64Builder::new());
            for _ in 0..rows {
                if null(rng) {
                    b.append_null();
                } else {
                    for _ in 0..rng.below(4) {
                        b.values().append_value(float(rng));
                    }
                    b.append(true);
                }
            }
            let a: ArrayRef = Arc::new(b.finish());
            (Field::new("prices", a.data_type().clone(), true), a)
        }
        22 => {
            let mut b = MapBuilder::new(None, StringBuilder::new(), Int64Builder::new());
            for _ in 0..rows {
                if null(rng) {
                    b.append(false).expect("map row");
                } else {
                    for _ in 0..rng.below(3) {
                        b.keys().append_value(text(rng));
                        b.values().append_value(rng.next_u64() as i64);
                    }
                    b.append(true).expect("map row");
                }
            }
            let a: ArrayRef = Arc::new(b.finish());
            (Field::new("tags", a.data_type().clone(), true), a)
        }
        23 => {
            let (fa, a) = column(rng, 3, rows);
            let (fb, b) = column(rng, 9, rows);
            let (fc, c) = column(rng, 14, rows);
            let s = StructArray::from(vec![
                (Arc::new(fa), a),
                (Arc::new(fb), b),
                (Arc::new(fc), c),
            ]);
            let a: ArrayRef = Arc::new(s);
            (Field::new("nested", a.data_type().clone(), true), a)
        }
        24 => primitive!(BinaryBuilder, "raw", |r: &mut Rng| {
            let n = r.below(6) as usize;
            r.bytes(n)
        }),
        25 => {
            let mut b = StringDictionaryBuilder::<Int32Type>::new();
            for _ in 0..rows {
                if null(rng) {
                    b.append_null();
                } else {
                    b.append_value(*rng.pick(&["call", "put", "a \"b\""]));
                }
            }
            let a: ArrayRef = Arc::new(b.finish());
            (Field::new("side", a.data_type().clone(), true), a)
        }
        _ => {
            let a: ArrayRef = Arc::new(NullArray::new(rows));
            (Field::new("nothing", DataType::Null, true), a)
        }
    }
}

const KINDS: usize = 27;

#[test]
fn rows_are_written_as_arrow_json_writes_them() {
    let mut rng = Rng::new(0x4a53_4f4e);
    let mut checked = 0;
    for round in 0..400 {
        let rows = rng.below(300) as usize;
        let width = rng.below(7) as usize;
        let (fields, columns): (Vec<Field>, Vec<ArrayRef>) = (0..width)
            .map(|i| {
                let kind = if round < KINDS && i == 0 {
                    round
                } else {
                    rng.index(KINDS)
                };
                let (f, a) = column(&mut rng, kind, rows);
                // Names unique within the batch (arrow-json does not check, JSON readers may).
                (
                    Field::new(format!("{}{i}", f.name()), f.data_type().clone(), true),
                    a,
                )
            })
            .unzip();
        let batch = RecordBatch::try_new_with_options(
            Arc::new(Schema::new(fields)),
            columns,
            &arrow_array::RecordBatchOptions::new().with_row_count(Some(rows)),
        )
        .expect("batch");
        // A slice too: arrays whose offset is not 0.
        let from = rng.index(rows + 1);
        let len = rng.index(rows - from + 1);
        for batch in [batch.clone(), batch.slice(from, len)] {
            let mut encoder = JsonEncoder::new(batch.schema().fields()).expect("encoder");
            let (mut out, mut ends) = (b"before".to_vec(), Vec::new());
            encoder
                .encode_batch(&batch, &mut out, &mut ends)
                .expect("encode");
            let expected = reference(&batch);
            assert_eq!(ends.len(), expected.len());
            let mut start = 6;
            for (r, (&end, expected)) in ends.iter().zip(&expected).enumerate() {
                let ours = std::str::from_utf8(&out[start..end]).expect("UTF-8");
                assert_eq!(
                    ours,
                    expected,
                    "round {round}, row {r} of {:?}",
                    batch.schema()
                );
                start = end;
            }
            assert_eq!(&out[..6], b"before");
            // As lines: the same objects, each ending in a newline.
            let mut lines = Vec::new();
            encoder.encode_lines(&batch, &mut lines).expect("lines");
            let joined: String = expected.iter().map(|l| format!("{l}\n")).collect();
            assert_eq!(String::from_utf8(lines).expect("UTF-8"), joined);
            checked += expected.len();
        }
    }
    assert!(checked > 50_000, "{checked} rows");
}

/// What a JSON reader makes of the encoder's text: the values, exactly (floats bit for bit).
#[test]
fn written_values_read_back_exactly() {
    let mut rng = Rng::new(7);
    let (_, prices) = column(&mut rng, 9, 5_000);
    let (_, names) = column(&mut rng, 11, 5_000);
    let batch = RecordBatch::try_from_iter([("p", prices), ("n", names)]).expect("batch");
    let mut out = Vec::new();
    JsonEncoder::new(batch.schema().fields())
        .expect("encoder")
        .encode_lines(&batch, &mut out)
        .expect("encode");
    let (p, n) = (
        batch.column(0).as_primitive::<Float64Type>(),
        batch.column(1).as_string::<i32>(),
    );
    for (r, line) in std::str::from_utf8(&out)
        .expect("UTF-8")
        .lines()
        .enumerate()
    {
        let v: serde_json::Value = serde_json::from_str(line).expect("valid JSON");
        match v.get("p") {
            None => assert!(p.is_null(r)),
            Some(serde_json::Value::String(s)) => {
                let f = p.value(r);
                assert!(f.is_nan() && s == "NaN" || f.is_infinite() && s.ends_with("Infinity"));
            }
            Some(x) => assert_eq!(
                x.as_f64().map(f64::to_bits),
                Some(p.value(r).to_bits()),
                "{x}"
            ),
        }
        match v.get("n") {
            None => assert!(n.is_null(r)),
            Some(x) => assert_eq!(x.as_str(), Some(n.value(r))),
        }
    }
}

/// A column of a type JSON has no text for is refused when the encoder is made, by name.
#[test]
fn a_column_json_cannot_hold_is_refused_by_name() {
    let union = DataType::Union(
        arrow_schema::UnionFields::try_new(vec![0], vec![Field::new("a", DataType::Int32, true)])
            .expect("union fields"),
        arrow_schema::UnionMode::Dense,
    );
    let fields = arrow_schema::Fields::from(vec![Field::new("choice", union, true)]);
    let err = JsonEncoder::new(&fields).expect_err("a union is refused");
    assert!(err.to_string().contains("column choice"), "{err}");
}
