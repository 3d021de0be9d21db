//! Times the JSON contenders with `std::time::Instant` and prints Markdown tables with ratios,
//! for BENCHMARKS.md. Before timing, checks that the decoders agree value for value.
//!
//! `cd bench && cargo run --release --bin json_report` (`WEIR_BENCH_REPS=N` to change the 11
//! repetitions per decoder; `WEIR_JSON_ONLY=quote|order|wide` to run one input).

use weir_bench::check::same_batches;
use weir_bench::json::derive::{OrderDeriveDecoder, QuoteDeriveDecoder};
use weir_bench::json::peers::{flatten, ArrowJsonDecoder, ValueWalkDecoder};
use weir_bench::json::{
    self, OrderWorkload, QuoteJsonWorkload, WideJsonWorkload, ORDER_NAMES, ORDER_PATHS, QUOTE_PATHS,
};
use weir_bench::timing::{load_average, per_round, reps, time_all, Timing};
use weir_bench::{quote, Contender, Corpus, RecordBatch, Result, BATCH_SIZE};

fn describe(name: &str) -> &'static str {
    match name {
        "a_serde_value" => "serde_json `Value`, then a walk into `Box<dyn ArrayBuilder>`s (the parse-into-a-tree-then-convert pattern, which parses twice)",
        "b_serde_derive" => "serde derive into a typed struct + concrete builders (hand-written per document)",
        "c_arrow_json" => "arrow-json 59.3 `ReaderBuilder::build_decoder` (nested paths as struct columns)",
        "d_weir" => "weir `JsonDecoder`",
        "weir_all_50" => "weir `JsonDecoder`, all 50 keys",
        "weir_5" => "weir `JsonDecoder`, 5 keys",
        "arrow_json_all_50" => "arrow-json, all 50 keys",
        "arrow_json_5" => "arrow-json, 5 keys",
        _ => "",
    }
}

/// Times every contender `reps` times, interleaved (round r runs each in turn) so background
/// load hits them alike, after one untimed warm-up run each.
fn print_table(timings: &[Timing], corpus: &Corpus) {
    println!("| decoder | what | median ms | min ms | ns/message | M msg/s | MB/s |");
    println!("|---|---|---:|---:|---:|---:|---:|");
    for t in timings {
        let secs = t.median.as_secs_f64();
        println!(
            "| `{}` | {} | {:.1} | {:.1} | {:.0} | {:.2} | {:.0} |",
            t.name,
            describe(&t.name),
            secs * 1e3,
            t.min.as_secs_f64() * 1e3,
            secs * 1e9 / corpus.len() as f64,
            corpus.len() as f64 / secs / 1e6,
            corpus.total_bytes() as f64 / secs / 1e6,
        );
    }
    println!();
}

/// `fast` against `slow` by median time, by minimum time and by the median of the per-round
/// ratios (see [`per_round`]), and whether `target` is met by all three.
fn ratio(timings: &[Timing], fast: &str, slow: &str, target: f64) -> String {
    let get = |n: &str| timings.iter().find(|t| t.name == n);
    let (Some(f), Some(s)) = (get(fast), get(slow)) else {
        return format!("`{fast}` vs `{slow}`: missing");
    };
    let by_median = s.median.as_secs_f64() / f.median.as_secs_f64();
    let by_min = s.min.as_secs_f64() / f.min.as_secs_f64();
    let (by_round, lo, hi) = per_round(f, s);
    let met = [by_median, by_min, by_round]
        .iter()
        .filter(|r| **r >= target)
        .count();
    let verdict = match met {
        3 => "met".to_string(),
        0 => format!("missed by {:.0}%", (1.0 - by_round / target) * 100.0),
        n => format!("met by {n} of 3 measures"),
    };
    format!(
        "`{fast}` vs `{slow}`: {by_median:.2}x by median time, {by_min:.2}x by minimum, \
         {by_round:.2}x by the median of per-round ratios ({lo:.2}-{hi:.2}) \
         (target {target}x: {verdict})"
    )
}

fn check_against(
    reference: &[RecordBatch],
    mut others: Vec<Box<dyn Contender>>,
    head: &Corpus,
    nested: Option<(&[&str], &[&str])>,
) -> Result<Vec<String>> {
    let mut names = Vec::new();
    for other in others.iter_mut() {
        let mut batches = other.run_collect(head)?;
        if other.name().starts_with("c_arrow_json") {
            if let Some((n, p)) = nested {
                batches = batches
                    .iter()
                    .map(|b| flatten(b, n, p))
                    .collect::<Result<_>>()?;
            }
        }
        same_batches(reference, &batches)
            .map_err(|e| format!("{} differs from the reference: {e}", other.name()))?;
        names.push(format!("`{}`", other.name()));
    }
    Ok(names)
}

fn run_quote(reps: usize) -> Result<()> {
    let w = QuoteJsonWorkload::new(json::QUOTE_MESSAGES)?;
    println!("## Input 1: the protobuf benchmark's quotes as JSON, 12 columns\n");
    println!(
        "{} messages (the protobuf benchmark's generator and seed), {} bytes, {:.1} bytes/message on average. \
         weir and serde read the three `base` columns by path; arrow-json reads `base` as a struct.\n",
        w.corpus.len(),
        w.corpus.total_bytes(),
        w.corpus.avg_message_size()
    );
    let head = w.corpus.head(3 * BATCH_SIZE);
    let reference = QuoteDeriveDecoder::new(quote::arrow_schema()).run_collect(&head)?;
    let mut contenders = w.contenders()?;
    let others: Vec<Box<dyn Contender>> = contenders
        .drain(..)
        .filter(|c| c.name() != "b_serde_derive")
        .collect();
    let names = check_against(
        &reference,
        others,
        &head,
        Some((
            &[
                "ticker",
                "timestamp",
                "sequence_number",
                "bid_price",
                "bid_size",
                "bid_exchange",
                "ask_price",
                "ask_size",
                "ask_exchange",
                "conditions",
                "indicators",
                "tape",
            ],
            &QUOTE_PATHS,
        )),
    )?;
    println!(
        "Correctness: {} hold the same values as `b_serde_derive` in all 12 columns for the first {} messages.\n",
        names.join(", "),
        head.len()
    );
    let timings = time_all(&mut w.contenders()?, &w.corpus, reps)?;
    print_table(&timings, &w.corpus);
    println!("- {}", ratio(&timings, "d_weir", "c_arrow_json", 2.0));
    println!("- {}", ratio(&timings, "d_weir", "a_serde_value", 4.0));
    println!("- {}", ratio(&timings, "d_weir", "b_serde_derive", 1.0));
    println!();
    Ok(())
}

fn run_order(reps: usize) -> Result<()> {
    let w = OrderWorkload::new(json::ORDER_MESSAGES);
    println!("## Input 2: order events (nested objects and arrays), 11 columns\n");
    println!(
        "{} messages, {} bytes, {:.1} bytes/message on average. Columns: 3 top-level strings, \
         an epoch-millisecond timestamp, 5 columns through nested paths (`customer.address.country`, ...), \
         a `List<Utf8>`, a `List<Float64>` and a `List<Struct<sku, qty, price>>`; \
         about two thirds of each message is keys nobody asked for.\n",
        w.corpus.len(),
        w.corpus.total_bytes(),
        w.corpus.avg_message_size()
    );
    let head = w.corpus.head(2 * BATCH_SIZE);
    let reference = OrderDeriveDecoder::new(OrderWorkload::schema(), OrderWorkload::item_fields())
        .run_collect(&head)?;
    let others: Vec<Box<dyn Contender>> = vec![
        Box::new(ValueWalkDecoder::new(
            "a_serde_value",
            OrderWorkload::schema(),
            &ORDER_PATHS,
        )),
        Box::new(ArrowJsonDecoder::new(
            "c_arrow_json",
            OrderWorkload::nested_schema(),
        )?),
        Box::new(weir_bench::json::peers::WeirJsonDecoder::new(
            "d_weir",
            &OrderWorkload::weir_columns(),
            Default::default(),
        )?),
    ];
    let names = check_against(
        &reference,
        others,
        &head,
        Some((&ORDER_NAMES, &ORDER_PATHS)),
    )?;
    println!(
        "Correctness: {} hold the same values as `b_serde_derive` in all 11 columns for the first {} messages.\n",
        names.join(", "),
        head.len()
    );
    let timings = time_all(&mut w.contenders()?, &w.corpus, reps)?;
    print_table(&timings, &w.corpus);
    println!("- {}", ratio(&timings, "d_weir", "c_arrow_json", 2.0));
    println!("- {}", ratio(&timings, "d_weir", "a_serde_value", 4.0));
    println!("- {}", ratio(&timings, "d_weir", "b_serde_derive", 1.0));
    println!();
    Ok(())
}

fn run_wide(reps: usize) -> Result<()> {
    let w = WideJsonWorkload::new(json::WIDE_MESSAGES);
    println!("## Input 3: a 50-key object, all 50 keys against 5\n");
    println!(
        "{} messages, {} bytes, {:.1} bytes/message on average; keys are ints, floats, strings, \
         bools and RFC 3339 timestamps; the 5 are one of each kind, scattered.\n",
        w.corpus.len(),
        w.corpus.total_bytes(),
        w.corpus.avg_message_size()
    );
    let head = w.corpus.head(2 * BATCH_SIZE);
    let all = w.weir_all()?.run_collect(&head)?;
    let five = w.weir_five()?.run_collect(&head)?;
    same_batches(&all, &w.arrow_all()?.run_collect(&head)?)
        .map_err(|e| format!("weir_all_50 differs from arrow_json_all_50: {e}"))?;
    same_batches(&five, &all).map_err(|e| format!("weir_5 differs from weir_all_50: {e}"))?;
    same_batches(&five, &w.arrow_five()?.run_collect(&head)?)
        .map_err(|e| format!("weir_5 differs from arrow_json_5: {e}"))?;
    println!(
        "Correctness: `weir_all_50` equals `arrow_json_all_50` in all 50 columns, and `weir_5` equals \
         `weir_all_50` and `arrow_json_5`, for the first {} messages.\n",
        head.len()
    );
    let timings = time_all(&mut w.contenders()?, &w.corpus, reps)?;
    print_table(&timings, &w.corpus);
    println!("- {}", ratio(&timings, "weir_5", "weir_all_50", 3.0));
    println!(
        "- {}",
        ratio(&timings, "weir_all_50", "arrow_json_all_50", 1.0)
    );
    println!("- {}", ratio(&timings, "weir_5", "arrow_json_5", 1.0));
    println!();
    Ok(())
}

fn main() -> Result<()> {
    let reps = reps()?;
    let only = std::env::var("WEIR_JSON_ONLY").unwrap_or_default();
    let cores = std::thread::available_parallelism().map_or(0, |n| n.get());
    println!("# weir-bench JSON report\n");
    println!(
        "Single-threaded; median and minimum of {reps} interleaved runs after one warm-up run; {cores} cores visible; \
         batches of {BATCH_SIZE} rows; MB = 10^6 bytes of JSON. Load average at the start: {}.\n",
        load_average()
    );
    if only.is_empty() || only == "quote" {
        run_quote(reps)?;
    }
    if only.is_empty() || only == "order" {
        run_order(reps)?;
    }
    if only.is_empty() || only == "wide" {
        run_wide(reps)?;
    }
    println!("Load average at the end: {}", load_average());
    Ok(())
}
