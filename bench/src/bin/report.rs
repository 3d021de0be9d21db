//! Times every contender with `std::time::Instant` and prints Markdown tables with ratios, for
//! BENCHMARKS.md. Before timing, checks that the decoders agree value for value.
//!
//! `cd bench && cargo run --release --bin report` (`WEIR_BENCH_REPS=N` to change the 11
//! repetitions per decoder; the median is reported).

use std::time::{Duration, Instant};

use arrow_array::builder::BinaryBuilder;

use weir_bench::check::same_batches;
use weir_bench::quote::{self, QuoteWorkload};
use weir_bench::timing::{load_average, per_round, reps, time_all, Timing};
use weir_bench::wide::{self, WideWorkload};
use weir_bench::{Contender, Corpus, Result, BATCH_SIZE};

trait PerMessage {
    fn ns_per_message(&self, corpus: &Corpus) -> f64;
}

impl PerMessage for Timing {
    fn ns_per_message(&self, corpus: &Corpus) -> f64 {
        self.median.as_secs_f64() * 1e9 / corpus.len() as f64
    }
}

fn describe(name: &str) -> &'static str {
    match name {
        "a_prost_reflect" => "reflection \"before\": DynamicMessage + by-name lookups + Box<dyn ArrayBuilder>",
        "b_prost_derive" => "generated \"after\": prost-derive struct + concrete builders (hand-written per message)",
        "c_ptars" => "ptars 0.0.26 Handler::decode_bytes (all fields, base as a struct) + C Data Interface import",
        "d_weir" => "weir ProtoDecoder, 12 columns, planned from the runtime schema",
        "weir_all_50" => "weir ProtoDecoder, all 50 top-level fields (default_columns)",
        "weir_5" => "weir ProtoDecoder, 5 scattered columns",
        "ptars_all_50" => "ptars 0.0.26 Handler::decode_bytes (always all fields)",
        _ => "",
    }
}

fn binary_copy_time(corpus: &Corpus, reps: usize) -> Duration {
    let mut times: Vec<Duration> = (0..reps + 1)
        .map(|_| {
            let start = Instant::now();
            let mut builder = BinaryBuilder::new();
            for (i, message) in corpus.iter().enumerate() {
                builder.append_value(message);
                if (i + 1) % BATCH_SIZE == 0 {
                    std::hint::black_box(builder.finish());
                }
            }
            std::hint::black_box(builder.finish());
            start.elapsed()
        })
        .collect();
    times.remove(0); // warm-up
    times.sort();
    times[times.len() / 2]
}

fn print_table(timings: &[Timing], corpus: &Corpus) {
    println!("| decoder | what | median ms | min ms | ns/message | M msg/s | MB/s |");
    println!("|---|---|---:|---:|---:|---:|---:|");
    for t in timings {
        let secs = t.median.as_secs_f64();
        println!(
            "| `{}` | {} | {:.1} | {:.1} | {:.1} | {:.2} | {:.0} |",
            t.name,
            describe(&t.name),
            secs * 1e3,
            t.min.as_secs_f64() * 1e3,
            t.ns_per_message(corpus),
            corpus.len() as f64 / secs / 1e6,
            corpus.total_bytes() as f64 / secs / 1e6,
        );
    }
    println!();
}

/// The speed of `fast` relative to `slow` (above 1: `fast` is faster), by median and by minimum
/// time (the minimum is the least disturbed by other load on a shared machine), and the median
/// of the ratios within each round: the two ran seconds apart there, so a drift in the
/// machine's speed between rounds (20-40% here within minutes) cancels out.
fn ratio(timings: &[Timing], fast: &str, slow: &str) -> String {
    let get = |n: &str| timings.iter().find(|t| t.name == n);
    let (Some(f), Some(s)) = (get(fast), get(slow)) else {
        return format!("`{fast}` vs `{slow}`: missing");
    };
    let by_median = s.median.as_secs_f64() / f.median.as_secs_f64();
    let by_min = s.min.as_secs_f64() / f.min.as_secs_f64();
    let (by_round, lo, hi) = per_round(f, s);
    let verdict = if by_median >= 1.0 {
        format!("{by_median:.2}x faster")
    } else {
        format!("{:.2}x slower", 1.0 / by_median)
    };
    format!(
        "`{fast}` vs `{slow}`: {by_median:.2}x the speed by median time ({verdict}), \
         {by_min:.2}x by minimum time, {by_round:.2}x by the median of per-round ratios \
         ({lo:.2}-{hi:.2})"
    )
}

fn check_quote(w: &QuoteWorkload) -> Result<()> {
    let head = w.corpus.head(3 * BATCH_SIZE);
    let reference = w.after().run_collect(&head)?;
    let others: Vec<Box<dyn Contender>> = vec![
        Box::new(w.weir()?),
        Box::new(w.before()?),
        Box::new(w.ptars()?),
    ];
    for mut other in others {
        let batches = other.run_collect(&head)?;
        same_batches(&reference, &batches)
            .map_err(|e| format!("{} differs from b_prost_derive: {e}", other.name()))?;
    }
    println!(
        "Correctness: `d_weir`, `a_prost_reflect` and `c_ptars` hold the same values as `b_prost_derive` \
         in all 12 columns for the first {} messages.\n",
        head.len()
    );
    Ok(())
}

fn check_wide(w: &WideWorkload) -> Result<()> {
    let head = w.corpus.head(2 * BATCH_SIZE);
    let all = w.weir_all()?.run_collect(&head)?;
    let five = w.weir_five()?.run_collect(&head)?;
    let ptars = w.ptars_all()?.run_collect(&head)?;
    same_batches(&all, &ptars)
        .map_err(|e| format!("weir_all_50 differs from ptars_all_50: {e}"))?;
    same_batches(&five, &all).map_err(|e| format!("weir_5 differs from weir_all_50: {e}"))?;
    println!(
        "Correctness: `weir_all_50` holds the same values as `ptars_all_50` in all {} columns, and \
         `weir_5` the same as `weir_all_50`, for the first {} messages.\n",
        all[0].num_columns(),
        head.len()
    );
    let schema = all[0].schema();
    for name in ["route", "fill_ids"] {
        if let Ok(field) = schema.field_with_name(name) {
            println!("- weir's `{name}` column: `{}`", field.data_type());
        }
    }
    println!();
    Ok(())
}

/// `/proc/loadavg`'s 1/5/15-minute figures: a busy machine makes every number noisier.
fn main() -> Result<()> {
    let reps = reps()?;
    let cores = std::thread::available_parallelism().map_or(0, |n| n.get());
    println!("# weir-bench report\n");
    println!(
        "Single-threaded; median and minimum of {reps} interleaved runs after one warm-up run; {cores} cores visible; \
         batches of {BATCH_SIZE} rows; MB = 10^6 bytes of encoded protobuf. \
         Load average at the start: {}.\n",
        load_average()
    );

    // Workload 1
    let start = Instant::now();
    let w = QuoteWorkload::new(quote::MESSAGES)?;
    eprintln!(
        "quote_nbbo: generated in {:.1} s",
        start.elapsed().as_secs_f64()
    );
    println!("## quote_nbbo: `stocks.QuoteNBBO` (the options-quotes workload), 12 columns\n");
    println!(
        "{} messages over {} option symbols, {} bytes, {:.1} bytes/message on average.\n",
        w.corpus.len(),
        quote::TICKERS,
        w.corpus.total_bytes(),
        w.corpus.avg_message_size()
    );
    check_quote(&w)?;
    let timings = time_all(&mut w.contenders()?, &w.corpus, reps)?;
    print_table(&timings, &w.corpus);
    for other in ["a_prost_reflect", "b_prost_derive", "c_ptars"] {
        println!("- {}", ratio(&timings, "d_weir", other));
    }
    println!("- {}", ratio(&timings, "b_prost_derive", "a_prost_reflect"));
    if let Some(ptars) = timings.iter().find(|t| t.name == "c_ptars") {
        let copy = binary_copy_time(&w.corpus, reps);
        println!(
            "- `c_ptars` includes copying each 8192-message slice into a BinaryArray (what \
             `decode_bytes` does first): that copy alone takes {:.1} ms, {:.0}% of its time",
            copy.as_secs_f64() * 1e3,
            100.0 * copy.as_secs_f64() / ptars.median.as_secs_f64()
        );
    }
    println!();
    drop(w);
    println!("Load average after quote_nbbo: {}\n", load_average());

    // Workload 2
    let start = Instant::now();
    let w = WideWorkload::new(wide::MESSAGES)?;
    eprintln!("wide: generated in {:.1} s", start.elapsed().as_secs_f64());
    println!("## wide: `bench.Wide`, 50 fields, all columns vs 5 columns\n");
    println!(
        "{} messages, {} bytes, {:.1} bytes/message on average.\n",
        w.corpus.len(),
        w.corpus.total_bytes(),
        w.corpus.avg_message_size()
    );
    check_wide(&w)?;
    let timings = time_all(&mut w.contenders()?, &w.corpus, reps)?;
    print_table(&timings, &w.corpus);
    println!("- {}", ratio(&timings, "weir_5", "weir_all_50"));
    println!("- {}", ratio(&timings, "weir_all_50", "ptars_all_50"));
    println!("\nLoad average at the end: {}", load_average());
    Ok(())
}
