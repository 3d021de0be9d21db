//! The JSON encoder against arrow-json's writer, on 1,000,000 options quotes with the seven
//! columns the kafka sink benchmark writes (`scripts/bench_kafka_produce.sh`: ticker, a
//! nanosecond timestamp, the sequence number, both prices and both sizes), as Arrow batches of
//! 8192 (weir's decoder reads them from the corpus first). Each encoder writes one message per
//! row into one reused buffer:
//!
//! - weir's `JsonEncoder` (weir-codec), a column at a time;
//! - weir's `json` encoding before that encoder (`weir_bench::json::before`): arrow-json's
//!   line writer with ryu's floats and weir's timestamp writer, its lines split into messages;
//! - arrow-json's own `LineDelimitedWriter` as it comes, its lines split into messages.
//!
//! Checks first that the first two write the same bytes, message for message, and that
//! arrow-json's objects hold the same values (its float text may differ); then alternates the
//! three, `WEIR_BENCH_REPS` (11) times each, and reports the medians. For profiles,
//! `WEIR_BENCH_ONLY=weir` runs the JsonEncoder alone, and `WEIR_BENCH_ONLY=columns` times each
//! column alone (`WEIR_BENCH_COLUMN=i`: column `i` only).
//!
//! `cd bench && cargo run --release --bin json_encode`

use std::time::{Duration, Instant};

use arrow_array::RecordBatch;
use arrow_schema::{DataType, TimeUnit};
use weir_bench::json::before;
use weir_bench::quote::{self, QuoteWorkload};
use weir_bench::{Contender, Result};
use weir_codec::{ColumnSpec, Encoder, JsonEncoder};

fn median(mut v: Vec<Duration>) -> Duration {
    v.sort();
    v[v.len() / 2]
}

/// arrow-json's own line writer, as it comes, its lines split into messages.
fn arrow_json(batch: &RecordBatch, lines: &mut Vec<u8>, out: &mut Vec<u8>, ends: &mut Vec<usize>) {
    lines.clear();
    {
        let mut w = arrow_json::LineDelimitedWriter::new(&mut *lines);
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

/// Each column's objects alone: `{"name":value}` a row.
fn columns_alone(batches: &[RecordBatch], reps: usize) -> Result<()> {
    let rows: usize = batches.iter().map(RecordBatch::num_rows).sum();
    let only: Option<usize> = std::env::var("WEIR_BENCH_COLUMN")
        .ok()
        .and_then(|c| c.parse().ok());
    let (mut out, mut ends) = (Vec::new(), Vec::new());
    for c in (0..batches[0].num_columns()).filter(|&c| only.is_none_or(|o| o == c)) {
        let columns = batches
            .iter()
            .map(|b| b.project(&[c]))
            .collect::<Result<Vec<_>, _>>()?;
        let mut encoder = JsonEncoder::new(columns[0].schema().fields())?;
        let mut best = Duration::MAX;
        for _ in 0..reps.max(1) {
            out.clear();
            ends.clear();
            let t = Instant::now();
            for b in &columns {
                encoder.encode_batch(b, &mut out, &mut ends)?;
            }
            best = best.min(t.elapsed());
        }
        println!(
            "{}: {:.1} ns, {} bytes a row",
            columns[0].schema().field(0).name(),
            best.as_secs_f64() * 1e9 / rows as f64,
            out.len() / rows
        );
    }
    Ok(())
}

fn main() -> Result<()> {
    let reps: usize = std::env::var("WEIR_BENCH_REPS")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(11);
    let w = QuoteWorkload::new(quote::MESSAGES)?;
    let columns = [
        ColumnSpec::new("ticker", DataType::Utf8),
        ColumnSpec::new("timestamp", DataType::Timestamp(TimeUnit::Nanosecond, None)),
        ColumnSpec::new("sequence_number", DataType::Int64),
        ColumnSpec::new("bid_price", DataType::Float64),
        ColumnSpec::new("ask_price", DataType::Float64),
        ColumnSpec::new("bid_size", DataType::UInt32),
        ColumnSpec::new("ask_size", DataType::UInt32),
    ];
    let mut decoder =
        weir_bench::peers::WeirDecoder::new("weir", &w.weir_schema, quote::MESSAGE, &columns)?;
    let batches = decoder.run_collect(&w.corpus)?;
    let rows: usize = batches.iter().map(RecordBatch::num_rows).sum();
    let mut encoder = JsonEncoder::new(batches[0].schema().fields())?;

    if std::env::var("WEIR_BENCH_ONLY").as_deref() == Ok("columns") {
        return columns_alone(&batches, reps);
    }
    // The same bytes as before, message for message; the same values as arrow-json's.
    let (mut out, mut ends) = (Vec::new(), Vec::new());
    let (mut old, mut old_ends, mut lines) = (Vec::new(), Vec::new(), Vec::new());
    let (mut theirs, mut their_ends) = (Vec::new(), Vec::new());
    for b in &batches {
        encoder.encode_batch(b, &mut out, &mut ends)?;
        before::encode(b, &mut lines, &mut old, &mut old_ends);
        arrow_json(b, &mut lines, &mut theirs, &mut their_ends);
    }
    if out != old || ends != old_ends {
        let i = ends
            .iter()
            .zip(&old_ends)
            .position(|(a, b)| a != b)
            .unwrap_or(0);
        return Err(format!("message {i} differs from the old encoding's").into());
    }
    let (mut start, mut their_start) = (0, 0);
    for (i, (&end, &their_end)) in ends.iter().zip(&their_ends).enumerate().take(20_000) {
        let ours: serde_json::Value = serde_json::from_slice(&out[start..end])?;
        let arrow: serde_json::Value = serde_json::from_slice(&theirs[their_start..their_end])?;
        if ours != arrow {
            return Err(format!("message {i}: {ours} against arrow-json's {arrow}").into());
        }
        (start, their_start) = (end, their_end);
    }
    let bytes = out.len();

    if std::env::var("WEIR_BENCH_ONLY").as_deref() == Ok("weir") {
        for _ in 0..=reps {
            out.clear();
            ends.clear();
            for b in &batches {
                encoder.encode_batch(b, &mut out, &mut ends)?;
            }
            std::hint::black_box(&out);
        }
        return Ok(());
    }
    let mut times = [Vec::new(), Vec::new(), Vec::new()];
    for _ in 0..=reps {
        out.clear();
        ends.clear();
        let t = Instant::now();
        for b in &batches {
            encoder.encode_batch(b, &mut out, &mut ends)?;
        }
        times[0].push(t.elapsed());
        std::hint::black_box(&out);

        old.clear();
        old_ends.clear();
        let t = Instant::now();
        for b in &batches {
            before::encode(b, &mut lines, &mut old, &mut old_ends);
        }
        times[1].push(t.elapsed());
        std::hint::black_box(&old);

        theirs.clear();
        their_ends.clear();
        let t = Instant::now();
        for b in &batches {
            arrow_json(b, &mut lines, &mut theirs, &mut their_ends);
        }
        times[2].push(t.elapsed());
        std::hint::black_box(&theirs);
    }
    // The first of each is a warm-up.
    let [ours, old, arrow] = times.map(|mut t| {
        t.remove(0);
        median(t)
    });
    let n = rows as f64;
    println!("{rows} messages, {bytes} bytes of JSON, median of {reps}");
    println!();
    println!("| encoder | ms | ns a message | MB/s |");
    println!("|---|---|---|---|");
    for (name, d) in [
        ("weir JsonEncoder", ours),
        (
            "weir before (arrow-json's writer, ryu floats, its own timestamps)",
            old,
        ),
        ("arrow-json's LineDelimitedWriter", arrow),
    ] {
        println!(
            "| {name} | {:.1} | {:.1} | {:.0} |",
            d.as_secs_f64() * 1e3,
            d.as_secs_f64() * 1e9 / n,
            bytes as f64 / d.as_secs_f64() / 1e6
        );
    }
    println!();
    println!(
        "JsonEncoder speed over weir before: {:.2}x; over arrow-json: {:.2}x",
        old.as_secs_f64() / ours.as_secs_f64(),
        arrow.as_secs_f64() / ours.as_secs_f64()
    );
    Ok(())
}
