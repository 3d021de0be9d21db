//! The protobuf encoder against prost's generated `encode`: 1,000,000 options quotes
//! (`stocks.QuoteNBBO`, a nested `base` message and 9 scalars), the same rows as Arrow batches
//! of 8192 (weir's decoder reads them from the corpus first) and as prost structs (built from
//! the corpus first), each encoded into one reused buffer, 11 repetitions, the median reported.
//! Checks first that both give the same bytes, message for message.
//!
//! `cd bench && cargo run --release --bin encode`

use std::time::{Duration, Instant};

use prost::Message;
use weir_bench::quote::{self, QuoteNbbo, QuoteWorkload};
use weir_bench::{Contender, Result};
use weir_codec::{default_columns, Encoder, ProtoEncoder};

fn median(mut v: Vec<Duration>) -> Duration {
    v.sort();
    v[v.len() / 2]
}

fn main() -> Result<()> {
    let reps: usize = std::env::var("WEIR_BENCH_REPS")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(11);
    let w = QuoteWorkload::new(quote::MESSAGES)?;
    let columns = default_columns(&w.weir_schema, quote::MESSAGE)?;
    let mut decoder =
        weir_bench::peers::WeirDecoder::new("weir", &w.weir_schema, quote::MESSAGE, &columns)?;
    let batches = decoder.run_collect(&w.corpus)?;
    let structs: Vec<QuoteNbbo> = w
        .corpus
        .iter()
        .map(QuoteNbbo::decode)
        .collect::<Result<_, _>>()?;
    let descriptor = w
        .weir_schema
        .pool()
        .get_message_by_name(quote::MESSAGE)
        .ok_or("no message")?;
    let mut encoder = ProtoEncoder::new(&descriptor, batches[0].schema().fields())?;

    // The same bytes, message for message.
    let (mut out, mut ends) = (Vec::new(), Vec::new());
    for b in &batches {
        encoder.encode_batch(b, &mut out, &mut ends)?;
    }
    let mut start = 0;
    let mut expected = Vec::new();
    for (i, (s, &end)) in structs.iter().zip(&ends).enumerate() {
        expected.clear();
        s.encode(&mut expected)?;
        if out[start..end] != expected[..] {
            return Err(format!("message {i} differs from prost's").into());
        }
        start = end;
    }
    let bytes = out.len();

    let mut weir_times = Vec::new();
    let mut prost_times = Vec::new();
    let mut prost_out: Vec<u8> = Vec::with_capacity(bytes);
    let mut prost_ends: Vec<usize> = Vec::with_capacity(structs.len());
    for _ in 0..=reps {
        out.clear();
        ends.clear();
        let t = Instant::now();
        for b in &batches {
            encoder.encode_batch(b, &mut out, &mut ends)?;
        }
        weir_times.push(t.elapsed());
        std::hint::black_box(&out);

        prost_out.clear();
        prost_ends.clear();
        let t = Instant::now();
        for s in &structs {
            s.encode(&mut prost_out)?;
            prost_ends.push(prost_out.len());
        }
        prost_times.push(t.elapsed());
        std::hint::black_box(&prost_out);
    }
    // The first of each is a warm-up.
    weir_times.remove(0);
    prost_times.remove(0);
    let (w, p) = (median(weir_times), median(prost_times));
    let n = structs.len() as f64;
    println!(
        "{} messages, {bytes} bytes encoded, median of {reps}",
        structs.len()
    );
    println!();
    println!("| encoder | ms | ns a message | MB/s |");
    println!("|---|---|---|---|");
    for (name, d) in [
        ("weir ProtoEncoder (Arrow batches)", w),
        ("prost derive `encode` (structs)", p),
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
        "weir / prost speed: {:.2}x",
        p.as_secs_f64() / w.as_secs_f64()
    );
    Ok(())
}
