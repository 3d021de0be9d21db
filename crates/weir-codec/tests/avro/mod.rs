//! The Avro decoder: against fastavro's writing of random schemas and records
//! (`differential`), against hand-built and mutated bytes (`adversarial`), and registry-framed
//! messages of several schema versions (`evolution`).

mod adversarial;
mod differential;
mod evolution;

use arrow_array::cast::AsArray;
use arrow_array::types::{
    Date32Type, Decimal128Type, Decimal256Type, Float32Type, Float64Type, Int32Type, Int64Type,
    Time32MillisecondType, Time64MicrosecondType, Time64NanosecondType,
};
use arrow_array::{Array, ArrayRef, RecordBatch};
use serde_json::{json, Value};
use weir_codec::{DataType, TimeUnit};

/// Row `row` of `batch` as a JSON object, in the form `fastavro_cases.py` writes its expected
/// values: bytes as hex, decimals as their unscaled integer in a string, times as integers,
/// maps as `[key, value]` pairs.
pub fn row_json(batch: &RecordBatch, row: usize) -> Value {
    let mut obj = serde_json::Map::new();
    for (f, a) in batch.schema().fields().iter().zip(batch.columns()) {
        obj.insert(f.name().clone(), cell(a, row));
    }
    Value::Object(obj)
}

/// One cell as JSON (see [`row_json`]).
pub fn cell(a: &ArrayRef, i: usize) -> Value {
    if a.is_null(i) {
        return Value::Null;
    }
    match a.data_type() {
        DataType::Null => Value::Null,
        DataType::Boolean => json!(a.as_boolean().value(i)),
        DataType::Int32 => json!(a.as_primitive::<Int32Type>().value(i)),
        DataType::Int64 => json!(a.as_primitive::<Int64Type>().value(i)),
        DataType::Float32 => json!(f64::from(a.as_primitive::<Float32Type>().value(i))),
        DataType::Float64 => json!(a.as_primitive::<Float64Type>().value(i)),
        DataType::Date32 => json!(a.as_primitive::<Date32Type>().value(i)),
        DataType::Time32(TimeUnit::Millisecond) => {
            json!(a.as_primitive::<Time32MillisecondType>().value(i))
        }
        DataType::Time64(TimeUnit::Microsecond) => {
            json!(a.as_primitive::<Time64MicrosecondType>().value(i))
        }
        DataType::Time64(TimeUnit::Nanosecond) => {
            json!(a.as_primitive::<Time64NanosecondType>().value(i))
        }
        DataType::Timestamp(_, _) => {
            let v = a.to_data().buffers()[0].typed_data::<i64>()[a.offset() + i];
            json!(v)
        }
        DataType::Decimal256(_, _) => {
            json!(a.as_primitive::<Decimal256Type>().value(i).to_string())
        }
        DataType::Decimal128(_, _) => {
            json!(a.as_primitive::<Decimal128Type>().value(i).to_string())
        }
        DataType::Utf8 => json!(a.as_string::<i32>().value(i)),
        DataType::Binary => json!(hex(a.as_binary::<i32>().value(i))),
        DataType::Struct(_) => {
            let s = a.as_struct();
            let mut obj = serde_json::Map::new();
            for (f, c) in s.fields().iter().zip(s.columns()) {
                obj.insert(f.name().clone(), cell(c, i));
            }
            Value::Object(obj)
        }
        DataType::List(_) => {
            let l = a.as_list::<i32>();
            let items = l.value(i);
            Value::Array((0..items.len()).map(|j| cell(&items, j)).collect())
        }
        DataType::Map(_, _) => {
            let m = a.as_map();
            let e = m.value(i);
            let (k, v) = (e.column(0), e.column(1));
            Value::Array(
                (0..e.len())
                    .map(|j| json!([cell(k, j), cell(v, j)]))
                    .collect(),
            )
        }
        DataType::Interval(_) => {
            let v = a
                .as_any()
                .downcast_ref::<arrow_array::IntervalMonthDayNanoArray>()
                .expect("MonthDayNano")
                .value(i);
            json!([v.months, v.days, v.nanoseconds])
        }
        other => panic!("no JSON form for {other} in this test"),
    }
}

pub fn hex(b: &[u8]) -> String {
    b.iter().map(|x| format!("{x:02x}")).collect()
}

/// Appends Avro's zigzag varint of `v`.
pub fn long(out: &mut Vec<u8>, v: i64) {
    let mut z = ((v << 1) ^ (v >> 63)) as u64;
    while z >= 0x80 {
        out.push((z as u8) | 0x80);
        z >>= 7;
    }
    out.push(z as u8);
}

/// Appends a length-prefixed value.
pub fn bytes(out: &mut Vec<u8>, b: &[u8]) {
    long(out, b.len() as i64);
    out.extend_from_slice(b);
}
