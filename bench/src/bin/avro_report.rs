//! Times the Avro contenders with `std::time::Instant` and prints Markdown tables with ratios,
//! for BENCHMARKS.md. Before timing, checks that the decoders agree value for value.
//!
//! `cd bench && cargo run --release --bin avro_report` (`WEIR_BENCH_REPS=N` to change the 11
//! repetitions per decoder; `WEIR_AVRO_ONLY=quote|wide` to run one input).

use weir_bench::avro::peers::ValueRead;
use weir_bench::avro::{self, QuoteAvroWorkload, WideAvroWorkload};
use weir_bench::check::same_batches;
use weir_bench::timing::{load_average, per_round, reps, time_all, Timing};
use weir_bench::{Contender, Corpus, Result, BATCH_SIZE};

fn describe(name: &str) -> &'static str {
    match name {
        "a_apache_avro" => "apache-avro 0.22 `GenericDatumReader::read_value` to a `Value`, then concrete Arrow builders",
        "a_apache_avro_from_datum" => "the same through `apache_avro::from_avro_datum` per datum (deprecated in 0.22; builds a reader per call)",
        "b_arrow_avro" => "arrow-avro 59.3.2 `Decoder` (single-object header + datum per message), `base` a struct",
        "c_weir" => "weir `AvroDecoder`, `avro_default_columns` (`base` a struct)",
        "c_weir_flat" => "weir `AvroDecoder`, 12 flat columns (`base.*` bound through paths)",
        "apache_avro_all_50" => "apache-avro `Value`, then 50 builders",
        "apache_avro_5" => "apache-avro `Value` (the whole record), then 5 builders",
        "arrow_avro_all_50" => "arrow-avro `Decoder`, all 50 fields",
        "arrow_avro_5" => "arrow-avro `Decoder`, `with_projection` to 5 fields",
        "weir_all_50" => "weir `AvroDecoder`, all 50 columns",
        "weir_5" => "weir `AvroDecoder`, 5 columns",
        _ => "",
    }
}

fn print_table(timings: &[Timing], corpus: &Corpus) {
    println!("| decoder | what | median ms | min ms | ns/message (median) | ns/message (min) | M msg/s | MB/s |");
    println!("|---|---|---:|---:|---:|---:|---:|---:|");
    for t in timings {
        let secs = t.median.as_secs_f64();
        println!(
            "| `{}` | {} | {:.1} | {:.1} | {:.1} | {:.1} | {:.2} | {:.0} |",
            t.name,
            describe(&t.name),
            secs * 1e3,
            t.min.as_secs_f64() * 1e3,
            secs * 1e9 / corpus.len() as f64,
            t.min.as_secs_f64() * 1e9 / corpus.len() as f64,
            corpus.len() as f64 / secs / 1e6,
            corpus.total_bytes() as f64 / secs / 1e6,
        );
    }
    println!();
}

/// `fast` against `slow` by median time, by minimum time and by the median of the per-round
/// ratios (see [`per_round`]), and whether `target` (if any) is met by all three.
fn ratio(timings: &[Timing], fast: &str, slow: &str, target: Option<f64>) -> String {
    let get = |n: &str| timings.iter().find(|t| t.name == n);
    let (Some(f), Some(s)) = (get(fast), get(slow)) else {
        return format!("`{fast}` vs `{slow}`: missing");
    };
    let by_median = s.median.as_secs_f64() / f.median.as_secs_f64();
    let by_min = s.min.as_secs_f64() / f.min.as_secs_f64();
    let (by_round, lo, hi) = per_round(f, s);
    let verdict = match target {
        None => String::new(),
        Some(target) => {
            let met = [by_median, by_min, by_round]
                .iter()
                .filter(|r| **r >= target)
                .count();
            let v = match met {
                3 => "met".to_string(),
                0 => format!("not met, {:.0}% short", (1.0 - by_round / target) * 100.0),
                n => format!("met by {n} of 3 measures"),
            };
            format!(" (target {target}x: {v})")
        }
    };
    format!(
        "`{fast}` vs `{slow}`: {by_median:.2}x by median time, {by_min:.2}x by minimum, \
         {by_round:.2}x by the median of per-round ratios ({lo:.2}-{hi:.2}){verdict}"
    )
}

fn check(
    reference: &[weir_bench::RecordBatch],
    other: &mut dyn Contender,
    head: &Corpus,
) -> Result<String> {
    let batches = other.run_collect(head)?;
    same_batches(reference, &batches)
        .map_err(|e| format!("{} differs from the reference: {e}", other.name()))?;
    Ok(format!("`{}`", other.name()))
}

fn run_quote(reps: usize) -> Result<()> {
    let w = QuoteAvroWorkload::new(avro::QUOTE_MESSAGES)?;
    println!("## Input 1: the options quotes as Avro datums, 12 leaf values\n");
    println!(
        "{} datums (`QuoteGenerator`, the protobuf and JSON benchmarks' quotes, `encode_avro`), {} bytes, \
         {:.1} bytes/datum on average; schema `stocks.avsc` (`base` a nested record of 3 fields, 9 top-level scalars). \
         weir, arrow-avro and apache-avro produce `base` as a struct column plus 9 columns; `c_weir_flat` \
         produces 12 flat columns.\n",
        w.corpus.len(),
        w.corpus.total_bytes(),
        w.corpus.avg_message_size()
    );
    let head = w.corpus.head(3 * BATCH_SIZE);
    let reference = w.apache(ValueRead::Reader)?.run_collect(&head)?;
    let mut names = Vec::new();
    names.push(check(
        &reference,
        &mut w.apache(ValueRead::FromAvroDatum)?,
        &head,
    )?);
    names.push(check(&reference, &mut w.arrow_avro()?, &head)?);
    names.push(check(&reference, &mut w.weir()?, &head)?);
    // The flat columns are looked up among the struct's children of the reference.
    let flat = w.weir_flat()?.run_collect(&head)?;
    same_batches(&flat, &reference).map_err(|e| format!("c_weir_flat differs: {e}"))?;
    names.push("`c_weir_flat`".into());
    println!(
        "Correctness: {} hold the same values as `a_apache_avro` in all 12 leaf columns for the first {} datums \
         (timestamps compared as their i64s).\n",
        names.join(", "),
        head.len()
    );
    let timings = time_all(&mut w.contenders()?, &w.corpus, reps)?;
    print_table(&timings, &w.corpus);
    println!("- {}", ratio(&timings, "c_weir", "b_arrow_avro", Some(2.0)));
    println!(
        "- {}",
        ratio(&timings, "c_weir", "a_apache_avro", Some(5.0))
    );
    println!(
        "- {}",
        ratio(&timings, "c_weir", "a_apache_avro_from_datum", Some(5.0))
    );
    println!("- {}", ratio(&timings, "c_weir_flat", "b_arrow_avro", None));
    println!("- {}", ratio(&timings, "c_weir_flat", "c_weir", None));
    println!();
    Ok(())
}

fn run_wide(reps: usize) -> Result<()> {
    let w = WideAvroWorkload::new(avro::WIDE_MESSAGES)?;
    println!("## Input 2: a 50-field record, all 50 columns against 5\n");
    println!(
        "{} datums, {} bytes, {:.1} bytes/datum on average; 26 longs, 9 doubles, 11 strings, 4 booleans; \
         the 5 columns are `{}` (scattered).\n",
        w.corpus.len(),
        w.corpus.total_bytes(),
        w.corpus.avg_message_size(),
        avro::FIVE.join("`, `")
    );
    let head = w.corpus.head(2 * BATCH_SIZE);
    let all = w.apache_all()?.run_collect(&head)?;
    let five = w.weir_five()?.run_collect(&head)?;
    let names = [
        check(&all, &mut w.arrow_all()?, &head)?,
        check(&all, &mut w.weir_all()?, &head)?,
    ];
    // weir's 5 columns are looked up among the reference's 50.
    same_batches(&five, &all)
        .map_err(|e| format!("weir_5 differs from apache_avro_all_50: {e}"))?;
    let mut five_names = vec!["`weir_5`".to_string()];
    five_names.push(check(&five, &mut w.arrow_five()?, &head)?);
    five_names.push(check(&five, &mut w.apache_five()?, &head)?);
    println!(
        "Correctness: {} hold the same values as `apache_avro_all_50` in all 50 columns, and {} the same 5 \
         columns as it, for the first {} datums.\n",
        names.join(", "),
        five_names.join(", "),
        head.len()
    );
    let timings = time_all(&mut w.contenders()?, &w.corpus, reps)?;
    print_table(&timings, &w.corpus);
    println!(
        "- {}",
        ratio(&timings, "weir_all_50", "arrow_avro_all_50", Some(2.0))
    );
    println!(
        "- {}",
        ratio(&timings, "weir_all_50", "apache_avro_all_50", Some(5.0))
    );
    println!("- {}", ratio(&timings, "weir_5", "arrow_avro_5", Some(2.0)));
    println!(
        "- {}",
        ratio(&timings, "weir_5", "apache_avro_5", Some(5.0))
    );
    println!("- {}", ratio(&timings, "weir_5", "weir_all_50", Some(2.5)));
    println!(
        "- {}",
        ratio(&timings, "arrow_avro_5", "arrow_avro_all_50", None)
    );
    println!();
    Ok(())
}

fn main() -> Result<()> {
    let reps = reps()?;
    let only = std::env::var("WEIR_AVRO_ONLY").unwrap_or_default();
    let cores = std::thread::available_parallelism().map_or(0, |n| n.get());
    println!("# weir-bench Avro report\n");
    println!(
        "Single-threaded; median and minimum of {reps} interleaved runs after one warm-up run; {cores} cores visible; \
         batches of {BATCH_SIZE} rows; MB = 10^6 bytes of Avro datums. Load average at the start: {}.\n",
        load_average()
    );
    if only.is_empty() || only == "quote" {
        run_quote(reps)?;
        println!("Load average after input 1: {}\n", load_average());
    }
    if only.is_empty() || only == "wide" {
        run_wide(reps)?;
    }
    println!("Load average at the end: {}", load_average());
    Ok(())
}
