//! weir's `json` encoding as it was before weir-codec's `JsonEncoder` (commit 62ce8df,
//! `crates/weir/src/sink/json.rs` and `src/encode.rs`), frozen here as the baseline of
//! `src/bin/json_encode.rs`: arrow-json's line writer with ryu's floats and a timestamp writer
//! of its own, its lines then split into messages.

use std::sync::Arc;

use arrow_array::cast::AsArray;
use arrow_array::types::{Float64Type, TimestampNanosecondType};
use arrow_array::{Array, RecordBatch};
use arrow_json::writer::{Encoder, EncoderFactory, EncoderOptions, NullableEncoder};
use arrow_schema::{ArrowError, DataType, FieldRef, TimeUnit};

/// Encodes `batch` as the old `json` encoding did: one message a row appended to `out`, its end
/// to `ends` (`lines` is the writer's buffer, reused).
pub fn encode(batch: &RecordBatch, lines: &mut Vec<u8>, out: &mut Vec<u8>, ends: &mut Vec<usize>) {
    lines.clear();
    {
        let mut w = arrow_json::WriterBuilder::new()
            .with_encoder_factory(Arc::new(Before))
            .build::<_, arrow_json::writer::LineDelimited>(&mut *lines);
        w.write(batch).expect("arrow-json writes the quotes");
        w.finish().expect("arrow-json finishes");
    }
    let mut start = 0;
    for i in memchr::memchr_iter(b'\n', lines) {
        out.extend_from_slice(&lines[start..i]);
        ends.push(out.len());
        start = i + 1;
    }
}

#[derive(Debug)]
struct Before;

impl EncoderFactory for Before {
    fn make_default_encoder<'a>(
        &self,
        _field: &'a FieldRef,
        array: &'a dyn Array,
        _options: &'a EncoderOptions,
    ) -> Result<Option<NullableEncoder<'a>>, ArrowError> {
        let nulls = array.nulls().cloned();
        let encoder: Box<dyn Encoder + 'a> = match array.data_type() {
            DataType::Float64 => Box::new(Floats(array.as_primitive::<Float64Type>().values())),
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
        // The quotes' prices are finite; the old writer's NaN and infinities are left out.
        out.extend_from_slice(ryu::Buffer::new().format_finite(self.0[idx]).as_bytes());
    }
}

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
