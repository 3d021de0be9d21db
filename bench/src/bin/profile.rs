//! Runs one contender in a loop, for a sampling profiler:
//! `perf record -e cpu-clock -g target/release/profile quote|after|wide5|wide50 [loops]`, and for
//! the JSON decoder `json_quote|json_order|json_wide5|json_wide50|json_wide1` (`json_wide1`:
//! the last key only, the skip loop's floor), and for the Avro decoder
//! `avro_quote|avro_quote_flat|avro_wide50|avro_wide5` (weir) and
//! `arrow_avro_quote|arrow_avro_wide50|arrow_avro_wide5` (arrow-avro, for comparison).

use std::time::Instant;

use weir_bench::{quote::QuoteWorkload, wide::WideWorkload, Contender, Result};

fn main() -> Result<()> {
    let args: Vec<String> = std::env::args().collect();
    let which = args.get(1).map(String::as_str).unwrap_or("quote");
    let loops: usize = args.get(2).and_then(|s| s.parse().ok()).unwrap_or(10);
    let (mut c, corpus): (Box<dyn Contender>, _) = match which {
        "quote" | "quote1" | "after" => {
            let w = QuoteWorkload::new(1_000_000)?;
            let c: Box<dyn Contender> = if which == "quote" {
                Box::new(w.weir()?)
            } else if which == "quote1" {
                let cols = vec![weir_codec::ColumnSpec::new(
                    "tape",
                    weir_codec::DataType::UInt32,
                )];
                Box::new(weir_bench::peers::WeirDecoder::new(
                    "quote1",
                    &w.weir_schema,
                    "stocks.QuoteNBBO",
                    &cols,
                )?)
            } else {
                Box::new(w.after())
            };
            (c, w.corpus)
        }
        "json_quote" => {
            let w = weir_bench::json::QuoteJsonWorkload::new(1_000_000)?;
            let c = w.contenders()?.pop().ok_or("no weir contender")?;
            (c, w.corpus)
        }
        "json_order" => {
            let w = weir_bench::json::OrderWorkload::new(100_000);
            let c = w.contenders()?.pop().ok_or("no weir contender")?;
            (c, w.corpus)
        }
        "json_wide5" | "json_wide50" | "json_wide1" => {
            let w = weir_bench::json::WideJsonWorkload::new(200_000);
            let c: Box<dyn Contender> = match which {
                "json_wide5" => Box::new(w.weir_five()?),
                "json_wide1" => Box::new(w.weir_last()?),
                _ => Box::new(w.weir_all()?),
            };
            (c, w.corpus)
        }
        "avro_quote" | "avro_quote_flat" | "arrow_avro_quote" => {
            let w = weir_bench::avro::QuoteAvroWorkload::new(1_000_000)?;
            let c: Box<dyn Contender> = match which {
                "avro_quote" => Box::new(w.weir()?),
                "avro_quote_flat" => Box::new(w.weir_flat()?),
                _ => Box::new(w.arrow_avro()?),
            };
            (c, w.corpus)
        }
        "avro_wide50" | "avro_wide5" | "arrow_avro_wide50" | "arrow_avro_wide5" => {
            let w = weir_bench::avro::WideAvroWorkload::new(200_000)?;
            let c: Box<dyn Contender> = match which {
                "avro_wide50" => Box::new(w.weir_all()?),
                "avro_wide5" => Box::new(w.weir_five()?),
                "arrow_avro_wide50" => Box::new(w.arrow_all()?),
                _ => Box::new(w.arrow_five()?),
            };
            (c, w.corpus)
        }
        _ => {
            let w = WideWorkload::new(200_000)?;
            let c: Box<dyn Contender> = if which == "wide5" {
                Box::new(w.weir_five()?)
            } else {
                Box::new(w.weir_all()?)
            };
            (c, w.corpus)
        }
    };
    let n = corpus.iter().count();
    let mut times = Vec::with_capacity(loops);
    for _ in 0..loops {
        let t = Instant::now();
        c.run_count(&corpus)?;
        times.push(t.elapsed().as_secs_f64() * 1e9 / n as f64);
    }
    let runs: Vec<String> = times.iter().map(|t| format!("{t:.0}")).collect();
    times.sort_by(f64::total_cmp);
    println!(
        "{which}: best {:.1}, median {:.1} ns/message (runs: {})",
        times[0],
        times[times.len() / 2],
        runs.join(" ")
    );
    Ok(())
}
