//! `weir demo`: generates the options-quotes workload into a file, runs the options-quotes
//! source on the file connector with a `GROUP BY ticker` query, and prints the top groups and
//! the throughput. Needs no broker.

use std::path::PathBuf;
use std::time::Instant;

use anyhow::{Context, Result};
use weir::{Engine, EngineOptions, ResultWriter, StdoutFormat};
use weir_codec::Framing;
use weir_testdata::{QuoteFormat, QuoteGenerator, DEFAULT_SEED, QUOTE_MESSAGE};

use super::progress::{bytes, count};

pub(crate) fn demo(
    n: u64,
    partitions: Option<usize>,
    dir: Option<PathBuf>,
    quiet: bool,
) -> Result<()> {
    let temp;
    let dir = match dir {
        Some(d) => d,
        None => {
            temp = tempfile::tempdir().context("cannot create a temporary directory")?;
            temp.path().to_path_buf()
        }
    };
    let data = dir.join("quotes.bin");
    eprintln!("generating {} quotes into {} ...", count(n), data.display());
    let t = Instant::now();
    let written = super::gen::write_file(
        &data,
        n,
        &mut QuoteGenerator::new(DEFAULT_SEED),
        QuoteFormat::Protobuf,
        Framing::Varint,
    )?;
    super::gen::write_schema(&dir.join("descriptors"))?;
    eprintln!("  {} in {:.2} s", bytes(written), t.elapsed().as_secs_f64());
    let script = format!(
        "-- the options-quotes source, on the file connector
CREATE SOURCE opra_quotes (
    ticker VARCHAR,
    timestamp TIMESTAMP,
    bid_price DOUBLE,
    ask_price DOUBLE,
    ...
) WITH (
    'connector' = 'file',
    'path'      = '{data}',
    'encoding'  = 'protobuf',
    'message'   = '{QUOTE_MESSAGE}',
    'location'  = '{pb}'
);
SELECT ticker, count(*) AS quotes, min(bid_price) AS min_bid, max(ask_price) AS max_ask, avg(bid_size) AS avg_bid_size
FROM opra_quotes GROUP BY ticker ORDER BY quotes DESC, ticker LIMIT 10;",
        data = data.display(),
        pb = dir.join("descriptors/stocks.pb").display(),
    );
    eprintln!("\n{script}\n");
    let engine = Engine::new(EngineOptions {
        partitions: partitions.unwrap_or(0),
        ..EngineOptions::default()
    });
    super::runtime(partitions)?.block_on(async {
        let mut out = ResultWriter::stdout(StdoutFormat::Table, false);
        let started = Instant::now();
        let progress = super::run::start_progress(&engine, quiet);
        let result = engine.run_script(&script, &mut out).await;
        progress.stop();
        result?;
        out.finish()?;
        let secs = started.elapsed().as_secs_f64();
        let r = engine.source_reports();
        let msgs: u64 = r.iter().map(|s| s.messages).sum();
        let b: u64 = r.iter().map(|s| s.bytes).sum();
        println!(
            "{} quotes ({}) decoded and grouped in {:.2} s: {} quotes/s, {}/s on {} partitions",
            count(msgs),
            bytes(b),
            secs,
            count((msgs as f64 / secs) as u64),
            bytes((b as f64 / secs) as u64),
            engine.partitions(),
        );
        anyhow::Ok(())
    })
}
