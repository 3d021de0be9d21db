//! What dedup adds to decoding (issue 6's benchmark). Generates the quote stream in memory with
//! a share of exact repeats (default 10%), then in one process, single-threaded:
//! 1. decodes every message into Arrow batches (the reference: decode only);
//! 2. decodes again and runs every batch through a fresh `StateStore` keyed on
//!    `(ticker, sequence_number)`, committing every `--commit-rows` rows, so the state ends up
//!    holding every distinct key (about 10,000,000 by default);
//! 3. decodes alone once more, so machine noise shows as a gap between 1 and 3.
//!
//! It prints both times, the overhead, and the state's statistics (block cache hit rates by block
//! kind, bloom filters, keys, bytes on disk).
//!
//! ```text
//! cargo run --release -p weir --example dedup_bench -- [--messages N] [--duplicates 0.1]
//!     [--block-cache 256MB] [--commit-rows 1000000] [--hash xxh3_128|none] [--state DIR]
//! ```

use std::time::Instant;

use anyhow::{bail, Context, Result};
use arrow::compute::filter_record_batch;
use arrow::datatypes::{DataType, TimeUnit};
use weir::gen::{QuoteGenerator, DEFAULT_SEED, QUOTE_MESSAGE, STOCKS_PROTO};
use weir_codec::{ColumnSpec, Decoder, DecoderFactory, DecoderRequest, Options, ProtobufFactory};
use weir_dedup::{
    parse_bytes, Checkpoint, DedupKey, KeyColumns, KeyMode, StateOptions, StateStore,
};

struct Args {
    messages: usize,
    duplicates: f64,
    block_cache: usize,
    commit_rows: usize,
    mode: KeyMode,
    state: Option<std::path::PathBuf>,
}

fn args() -> Result<Args> {
    let mut a = Args {
        messages: 11_111_111,
        duplicates: 0.1,
        block_cache: 256 << 20,
        commit_rows: 1_000_000,
        mode: KeyMode::Xxh3_128,
        state: None,
    };
    let mut it = std::env::args().skip(1);
    while let Some(flag) = it.next() {
        let mut value = || it.next().with_context(|| format!("{flag} needs a value"));
        match flag.as_str() {
            "--messages" => a.messages = value()?.parse()?,
            "--duplicates" => a.duplicates = value()?.parse()?,
            "--block-cache" => {
                a.block_cache = parse_bytes(&value()?).map_err(anyhow::Error::msg)?
            }
            "--commit-rows" => a.commit_rows = value()?.parse()?,
            "--hash" => a.mode = value()?.parse().map_err(anyhow::Error::msg)?,
            "--state" => a.state = Some(value()?.into()),
            other => bail!("unknown flag {other}"),
        }
    }
    Ok(a)
}

fn decoder(dir: &std::path::Path) -> Result<Box<dyn Decoder>> {
    std::fs::write(dir.join("stocks.proto"), STOCKS_PROTO)?;
    let options = Options::new(vec![
        ("message".into(), QUOTE_MESSAGE.into()),
        (
            "location".into(),
            dir.join("stocks.proto").display().to_string(),
        ),
    ]);
    let columns = vec![
        ColumnSpec::new("ticker", DataType::Utf8),
        ColumnSpec::new("sequence_number", DataType::Int64),
        ColumnSpec::new(
            "timestamp",
            DataType::Timestamp(TimeUnit::Nanosecond, Some("UTC".into())),
        ),
        ColumnSpec::new("bid_price", DataType::Float64),
        ColumnSpec::new("ask_price", DataType::Float64),
        ColumnSpec::new("bid_size", DataType::UInt32),
        ColumnSpec::new("ask_size", DataType::UInt32),
    ];
    Ok(ProtobufFactory.create_decoder(&DecoderRequest {
        source: "quotes",
        columns: &columns,
        options: &options,
        batch_size: weir_codec::DEFAULT_BATCH_SIZE,
    })?)
}

/// Decodes every message; calls `each` with every full batch (and the last one).
fn decode_all(
    dec: &mut dyn Decoder,
    bytes: &[u8],
    ends: &[usize],
    mut each: impl FnMut(arrow::array::RecordBatch) -> Result<()>,
) -> Result<()> {
    let batch = dec.batch_size();
    let mut start = 0;
    let mut buffered = 0;
    for &end in ends {
        dec.decode(&bytes[start..end])?;
        start = end;
        buffered += 1;
        if buffered == batch {
            buffered = 0;
            if let Some(b) = dec.flush() {
                each(b)?;
            }
        }
    }
    if let Some(b) = dec.flush() {
        each(b)?;
    }
    Ok(())
}

fn main() -> Result<()> {
    let a = args()?;
    let tmp = tempfile::tempdir()?;
    eprintln!(
        "generating {} quotes, {:.0}% repeats ...",
        a.messages,
        a.duplicates * 100.0
    );
    let mut generator = QuoteGenerator::new(DEFAULT_SEED).with_duplicates(a.duplicates);
    let mut bytes = Vec::with_capacity(a.messages * 80);
    let mut ends = Vec::with_capacity(a.messages);
    for _ in 0..a.messages {
        generator.next_or_repeat().encode_protobuf(&mut bytes);
        ends.push(bytes.len());
    }
    let mut dec = decoder(tmp.path())?;
    let schema = dec.schema();

    let decode_only = |dec: &mut dyn Decoder| -> Result<(f64, usize)> {
        let t = Instant::now();
        let mut rows = 0;
        decode_all(dec, &bytes, &ends, |b| {
            rows += b.num_rows();
            Ok(())
        })?;
        Ok((t.elapsed().as_secs_f64(), rows))
    };
    let (first, rows) = decode_only(dec.as_mut())?;

    let state_dir = a.state.clone().unwrap_or_else(|| tmp.path().join("state"));
    if state_dir.exists() {
        std::fs::remove_dir_all(&state_dir)?;
    }
    let key = DedupKey {
        columns: KeyColumns::resolve(
            &schema,
            &["ticker".to_string(), "sequence_number".to_string()],
            None,
        )?,
        mode: a.mode,
        ttl: None,
    };
    let mut store = StateStore::open(
        &state_dir,
        StateOptions {
            key: Some(key),
            block_cache_bytes: a.block_cache,
            ..StateOptions::default()
        },
    )?;
    let t = Instant::now();
    let mut kept = 0usize;
    let mut step_rows = 0usize;
    let mut read = 0usize;
    let mut commit_secs = 0.0;
    decode_all(dec.as_mut(), &bytes, &ends, |b| {
        read += b.num_rows();
        step_rows += b.num_rows();
        let b = match store.dedup(&b)? {
            None => b,
            Some(mask) => filter_record_batch(&b, &mask)?,
        };
        kept += b.num_rows();
        if step_rows >= a.commit_rows {
            let c = Instant::now();
            store.commit(Checkpoint {
                positions: vec![("bench".into(), read as i64)],
                ..Checkpoint::default()
            })?;
            commit_secs += c.elapsed().as_secs_f64();
            step_rows = 0;
        }
        Ok(())
    })?;
    let c = Instant::now();
    store.commit(Checkpoint {
        positions: vec![("bench".into(), read as i64)],
        ..Checkpoint::default()
    })?;
    commit_secs += c.elapsed().as_secs_f64();
    let with_dedup = t.elapsed().as_secs_f64();
    let (second, _) = decode_only(dec.as_mut())?;
    let reference = first.min(second);

    let ns = |s: f64| s * 1e9 / rows as f64;
    println!(
        "{} messages, {} distinct keys kept, {} dropped; block cache {} MiB; commit every {} rows; {:?} keys",
        rows,
        kept,
        rows - kept,
        a.block_cache >> 20,
        a.commit_rows,
        a.mode
    );
    println!();
    println!("| run | seconds | ns/msg | M msg/s |");
    println!("|---|---|---|---|");
    for (name, s) in [
        ("decode only (first)", first),
        ("decode + dedup", with_dedup),
        ("decode only (again)", second),
    ] {
        println!(
            "| {name} | {s:.2} | {:.0} | {:.2} |",
            ns(s),
            rows as f64 / s / 1e6
        );
    }
    println!();
    println!(
        "dedup adds {:.0}% to decoding (reference: the faster decode-only run); commits took {:.2} s of it",
        100.0 * (with_dedup - reference) / reference,
        commit_secs
    );
    println!();
    print!("{}", store.stats());
    Ok(())
}
