//! JSON lines as weir writes them: arrow-json's writer, except that floating-point values that
//! JSON numbers cannot hold are written as protobuf's JSON mapping writes them, the strings
//! `"Infinity"`, `"-Infinity"` and `"NaN"`, rather than `null` (which would lose them), and
//! that floats and nanosecond timestamps are written by faster code than `core::fmt` (the same
//! text: a kafka sink writing JSON spent a fifth of its time formatting them).

use std::io::Write;
use std::sync::Arc;

use arrow::array::{Array, AsArray};
use arrow::datatypes::{
    DataType, FieldRef, Float32Type, Float64Type, TimeUnit, TimestampNanosecondType,
};
use arrow::error::ArrowError;
use arrow::json::writer::{
    Encoder, EncoderFactory, EncoderOptions, LineDelimited, NullableEncoder, WriterBuilder,
};
use arrow::json::Writer;

/// A JSON-lines writer that keeps infinities and NaN.
pub(crate) fn json_writer<W: Write>(out: W) -> Writer<W, LineDelimited> {
    WriterBuilder::new()
        .with_encoder_factory(Arc::new(FloatsAsProtobufJson))
        .build::<W, LineDelimited>(out)
}

/// Supplies the float encoders (at any depth: arrow-json asks the factory for nested fields too).
#[derive(Debug)]
struct FloatsAsProtobufJson;

impl EncoderFactory for FloatsAsProtobufJson {
    fn make_default_encoder<'a>(
        &self,
        _field: &'a FieldRef,
        array: &'a dyn Array,
        _options: &'a EncoderOptions,
    ) -> Result<Option<NullableEncoder<'a>>, ArrowError> {
        let nulls = array.nulls().cloned();
        let encoder: Box<dyn Encoder + 'a> = match array.data_type() {
            DataType::Float64 => Box::new(Floats(array.as_primitive::<Float64Type>().values())),
            DataType::Float32 => Box::new(Floats32(array.as_primitive::<Float32Type>().values())),
            DataType::Timestamp(TimeUnit::Nanosecond, None) => Box::new(Timestamps(
                array.as_primitive::<TimestampNanosecondType>().values(),
            )),
            _ => return Ok(None),
        };
        Ok(Some(NullableEncoder::new(encoder, nulls)))
    }
}

struct Floats<'a>(&'a [f64]);

impl Encoder for Floats<'_> {
    fn encode(&mut self, idx: usize, out: &mut Vec<u8>) {
        write_float(self.0[idx], out);
    }
}

struct Floats32<'a>(&'a [f32]);

impl Encoder for Floats32<'_> {
    fn encode(&mut self, idx: usize, out: &mut Vec<u8>) {
        let v = self.0[idx];
        if v.is_finite() {
            // The shortest text that reads back as the same f32.
            out.extend_from_slice(ryu::Buffer::new().format_finite(v).as_bytes());
        } else {
            write_float(f64::from(v), out);
        }
    }
}

fn write_float(v: f64, out: &mut Vec<u8>) {
    if v.is_nan() {
        out.extend_from_slice(b"\"NaN\"");
    } else if v == f64::INFINITY {
        out.extend_from_slice(b"\"Infinity\"");
    } else if v == f64::NEG_INFINITY {
        out.extend_from_slice(b"\"-Infinity\"");
    } else {
        // The shortest text that reads back as the same f64 (`0.1`, `1e300`, `1.0`), a valid
        // JSON number. ryu writes it several times faster than `core::fmt` (BENCHMARKS.md,
        // the kafka sink against librdkafka), and it is what serde_json uses.
        out.extend_from_slice(ryu::Buffer::new().format_finite(v).as_bytes());
    }
}
/// Timestamps without a time zone, in nanoseconds since the epoch: written as arrow-json writes
/// them (chrono's `NaiveDateTime` debug form, `2026-03-02T14:30:20.270`), without `core::fmt`.
/// An i64 of nanoseconds spans the years 1677 to 2262, so the year always has four digits.
struct Timestamps<'a>(&'a [i64]);

impl Encoder for Timestamps<'_> {
    fn encode(&mut self, idx: usize, out: &mut Vec<u8>) {
        write_timestamp_nanos(self.0[idx], out);
    }
}

fn write_timestamp_nanos(v: i64, out: &mut Vec<u8>) {
    let secs = v.div_euclid(1_000_000_000);
    let nanos = v.rem_euclid(1_000_000_000) as u32;
    let days = secs.div_euclid(86_400);
    let of_day = secs.rem_euclid(86_400) as u32;
    // Civil date from days since 1970-01-01 (Howard Hinnant's algorithm).
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z.rem_euclid(146_097);
    let yoe = (doe - doe / 1_460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let day = (doy - (153 * mp + 2) / 5 + 1) as u32;
    let month = if mp < 10 { mp + 3 } else { mp - 9 } as u32;
    let year = (yoe + era * 400 + i64::from(month <= 2)) as u32;
    let mut b = [0u8; 30];
    let digits = |b: &mut [u8], mut v: u32| {
        for c in b.iter_mut().rev() {
            *c = b'0' + (v % 10) as u8;
            v /= 10;
        }
    };
    digits(&mut b[0..4], year);
    b[4] = b'-';
    digits(&mut b[5..7], month);
    b[7] = b'-';
    digits(&mut b[8..10], day);
    b[10] = b'T';
    digits(&mut b[11..13], of_day / 3_600);
    b[13] = b':';
    digits(&mut b[14..16], of_day / 60 % 60);
    b[16] = b':';
    digits(&mut b[17..19], of_day % 60);
    // As chrono: no fraction at 0, else milli-, micro- or nanoseconds, the fewest that hold it.
    let len = if nanos == 0 {
        19
    } else {
        b[19] = b'.';
        if nanos % 1_000_000 == 0 {
            digits(&mut b[20..23], nanos / 1_000_000);
            23
        } else if nanos % 1_000 == 0 {
            digits(&mut b[20..26], nanos / 1_000);
            26
        } else {
            digits(&mut b[20..29], nanos);
            29
        }
    };
    out.push(b'"');
    out.extend_from_slice(&b[..len]);
    out.push(b'"');
}

#[cfg(test)]
mod tests {
    use super::*;
    use arrow::array::{Float32Array, Float64Array, ListArray, RecordBatch};
    use arrow::datatypes::{Field, Int32Type, Schema};

    #[test]
    fn infinities_and_nan_are_written_as_protobuf_json_strings() {
        let doubles = Float64Array::from(vec![
            Some(f64::INFINITY),
            Some(f64::NEG_INFINITY),
            Some(f64::NAN),
            Some(0.1),
            None,
        ]);
        let floats = Float32Array::from(vec![Some(f32::INFINITY), Some(1.5), None, None, None]);
        let list = ListArray::from_iter_primitive::<Int32Type, _, _>(vec![
            Some(vec![Some(1)]),
            None,
            None,
            None,
            None,
        ]);
        let batch = RecordBatch::try_new(
            Arc::new(Schema::new(vec![
                Field::new("d", DataType::Float64, true),
                Field::new("f", DataType::Float32, true),
                Field::new("l", list.data_type().clone(), true),
            ])),
            vec![Arc::new(doubles), Arc::new(floats), Arc::new(list)],
        )
        .unwrap();
        let mut out = Vec::new();
        let mut w = json_writer(&mut out);
        w.write(&batch).unwrap();
        w.finish().unwrap();
        let text = String::from_utf8(out).unwrap();
        let lines: Vec<&str> = text.lines().collect();
        assert_eq!(
            lines,
            [
                r#"{"d":"Infinity","f":"Infinity","l":[1]}"#,
                r#"{"d":"-Infinity","f":1.5}"#,
                r#"{"d":"NaN"}"#,
                r#"{"d":0.1}"#,
                r#"{}"#,
            ]
        );
    }

    /// Against arrow-json's own writer (chrono's text), over the whole range of an i64 of
    /// nanoseconds: its ends, the epoch, leap days, and values of every fraction length.
    #[test]
    fn timestamps_are_written_as_arrow_json_writes_them() {
        use arrow::array::TimestampNanosecondArray;
        let mut values = vec![
            i64::MIN,
            i64::MAX,
            0,
            -1,
            1,
            951_782_400_000_000_000,   // 2000-02-29
            1_772_461_820_270_000_000, // milliseconds only
            1_772_461_820_270_001_000, // microseconds
            1_772_461_820_000_000_000, // whole seconds
            -86_400_000_000_000,
        ];
        let mut x = 0x9e37_79b9_7f4a_7c15u64;
        for i in 0..20_000 {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            // Every fraction length: the low digits cleared for some.
            let v = x as i64;
            values.push(match i % 4 {
                0 => v,
                1 => v - v % 1_000,
                2 => v - v % 1_000_000,
                _ => v - v % 1_000_000_000,
            });
        }
        let batch = RecordBatch::try_new(
            Arc::new(Schema::new(vec![Field::new(
                "t",
                DataType::Timestamp(TimeUnit::Nanosecond, None),
                false,
            )])),
            vec![Arc::new(TimestampNanosecondArray::from(values.clone()))],
        )
        .unwrap();
        let write = |ours: bool| {
            let mut out = Vec::new();
            if ours {
                let mut w = json_writer(&mut out);
                w.write(&batch).unwrap();
                w.finish().unwrap();
            } else {
                let mut w = arrow::json::LineDelimitedWriter::new(&mut out);
                w.write(&batch).unwrap();
                w.finish().unwrap();
            }
            String::from_utf8(out).unwrap()
        };
        let (ours, arrows) = (write(true), write(false));
        for ((o, a), v) in ours.lines().zip(arrows.lines()).zip(&values) {
            assert_eq!(o, a, "{v}");
        }
        assert_eq!(ours.lines().count(), values.len());
    }
}
