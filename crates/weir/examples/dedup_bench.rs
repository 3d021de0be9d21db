//! What dedup adds to decoding: the dedup benchmark. Generates the quote stream in memory with
//! a share of exact repeats (default 10%), then in one process:
//! 1. decodes every message into Arrow batches on one thread (the reference: decode only);
//! 2. decodes again and runs every batch through a fresh `StateStore` keyed on
//!    `(ticker, sequence_number)` on a second thread, as the engine does, committing every
//!    `--commit-rows` rows, so the state ends up holding every distinct key (about 10,000,000
//!    by default);
//! 3. decodes alone once more, so machine noise shows as a gap between 1 and 3.
//!
//! Then it reopens the state (now about 10,000,000 keys), timing an open with the key filter
//! the first phase's clean finish saved and one that rebuilds it from RocksDB (as after a
//! crash), and runs the same three steps on a stream of 1,000,000 where a share are replays of
//! keys from anywhere in the first stream, which only RocksDB still holds: its block cache and
//! bloom filters at work.
//!
//! It prints both times, the overhead, the dedup run's CPU time by thread (decoding and
//! dedup, the commit thread, RocksDB's background threads), and the state's statistics (block
//! cache hit rates by block kind, bloom filters, keys, bytes on disk).
//!
//! ```text
//! cargo run --release -p weir --example dedup_bench -- [--messages N] [--duplicates 0.1]
//!     [--block-cache 256MB] [--commit-rows 1000000] [--hash xxh3_128|none] [--state DIR]
//!     [--one-thread]
//! ```
//!
//! `--one-thread` decodes and dedups on the same thread, as the engine did until 2026-11-23.

use std::time::Instant;

use anyhow::{bail, Context, Result};
use arrow::compute::filter_record_batch;
use arrow::datatypes::{DataType, TimeUnit};
use weir_codec::{
    parse_bytes, ColumnSpec, Decoder, DecoderFactory, DecoderRequest, Options, ProtobufFactory,
};
use weir_dedup::{Checkpoint, DedupKey, KeyColumns, KeyMode, StateOptions, StateStore};
use weir_testdata::{QuoteGenerator, DEFAULT_SEED, QUOTE_MESSAGE, STOCKS_PROTO};

struct Args {
    messages: usize,
    duplicates: f64,
    block_cache: usize,
    commit_rows: usize,
    mode: KeyMode,
    state: Option<std::path::PathBuf>,
    pipelined: bool,
}

const USAGE: &str = "usage: dedup_bench [--messages N] [--duplicates 0.1] [--block-cache 256MB] \
[--commit-rows 1000000] [--hash xxh3_128|none] [--state DIR] [--one-thread]";

fn args() -> Result<Args> {
    let mut a = Args {
        messages: 11_111_111,
        duplicates: 0.1,
        block_cache: 256 << 20,
        commit_rows: 1_000_000,
        mode: KeyMode::Xxh3_128,
        state: None,
        pipelined: true,
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
            "--one-thread" => a.pipelined = false,
            "--help" | "-h" => {
                println!("{USAGE}");
                std::process::exit(0);
            }
            other => bail!("unknown flag {other}\n{USAGE}"),
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
    Ok(ProtobufFactory
        .prepare(&DecoderRequest {
            source: "quotes",
            columns: &columns,
            options: &options,
            batch_size: weir_codec::DEFAULT_BATCH_SIZE,
        })?
        .decoder())
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

/// One phase: decode alone, decode + dedup, decode alone again; prints the table.
struct Phase<'a> {
    name: &'a str,
    bytes: &'a [u8],
    ends: &'a [usize],
}

/// CPU seconds (user + system) of each live thread of this process by thread id, with its
/// name, and of the whole process (threads that exited included).
type CpuTimes = (std::collections::BTreeMap<u64, (String, f64)>, f64);

/// This process's [`CpuTimes`] now. Linux only: elsewhere, empty.
fn cpu_times() -> CpuTimes {
    // /proc counts in clock ticks: USER_HZ, 100 on every Linux ABI this runs on.
    const TICK: f64 = 0.01;
    // `pid (comm) state ppid ...`: utime and stime are the 12th and 13th fields after `)`.
    let times = |stat: &str| -> Option<(String, f64)> {
        let (head, rest) = stat.rsplit_once(')')?;
        let name = head.split_once('(')?.1.to_string();
        let f: Vec<&str> = rest.split_whitespace().collect();
        let ticks = f.get(11)?.parse::<u64>().ok()? + f.get(12)?.parse::<u64>().ok()?;
        Some((name, ticks as f64 * TICK))
    };
    let mut threads = std::collections::BTreeMap::new();
    if let Ok(tasks) = std::fs::read_dir("/proc/self/task") {
        for task in tasks.flatten() {
            let Ok(tid) = task.file_name().to_string_lossy().parse::<u64>() else {
                continue;
            };
            if let Some(t) = std::fs::read_to_string(task.path().join("stat"))
                .ok()
                .and_then(|s| times(&s))
            {
                threads.insert(tid, t);
            }
        }
    }
    let total = std::fs::read_to_string("/proc/self/stat")
        .ok()
        .and_then(|s| times(&s))
        .map_or(0.0, |(_, t)| t);
    (threads, total)
}

/// Where the CPU went between two [`cpu_times`] snapshots: seconds by thread name (threads
/// that exited in between count as "exited threads").
fn cpu_spent(before: &CpuTimes, after: &CpuTimes) -> String {
    let mut by_name = std::collections::BTreeMap::<String, f64>::new();
    for (tid, (name, t)) in &after.0 {
        let was = before.0.get(tid).map_or(0.0, |(_, t)| *t);
        *by_name.entry(name.clone()).or_default() += t - was;
    }
    let live: f64 = by_name.values().sum();
    let exited = (after.1 - before.1) - live;
    if exited > 0.005 {
        by_name.insert("exited threads".into(), exited);
    }
    let mut parts: Vec<(String, f64)> = by_name.into_iter().filter(|(_, t)| *t >= 0.005).collect();
    parts.sort_by(|a, b| b.1.total_cmp(&a.1));
    let parts: Vec<String> = parts.iter().map(|(n, t)| format!("{n} {t:.2} s")).collect();
    format!("{:.2} s: {}", after.1 - before.1, parts.join(", "))
}

fn run_phase(
    phase: &Phase<'_>,
    dec: &mut dyn Decoder,
    store: &mut StateStore,
    commit_rows: usize,
    pipelined: bool,
) -> Result<()> {
    let decode_only = |dec: &mut dyn Decoder| -> Result<(f64, usize)> {
        let t = Instant::now();
        let mut rows = 0;
        decode_all(dec, phase.bytes, phase.ends, |b| {
            rows += b.num_rows();
            Ok(())
        })?;
        Ok((t.elapsed().as_secs_f64(), rows))
    };
    let (first, rows) = decode_only(dec)?;
    let cpu_before = cpu_times();
    let t = Instant::now();
    let mut kept = 0usize;
    let mut step_rows = 0usize;
    let mut read = 0usize;
    let mut commit_secs = 0.0;
    let (mut dedup_secs, mut filter_secs) = (0.0, 0.0);
    let mut commit = |store: &mut StateStore, read: usize| -> Result<()> {
        let c = Instant::now();
        store.commit(Checkpoint {
            positions: vec![("bench".into(), read as i64)],
            ..Checkpoint::default()
        })?;
        commit_secs += c.elapsed().as_secs_f64();
        Ok(())
    };
    let mut each = |b: arrow::array::RecordBatch| -> Result<()> {
        read += b.num_rows();
        step_rows += b.num_rows();
        let d = Instant::now();
        let mask = store.dedup(&b)?;
        let f = Instant::now();
        dedup_secs += (f - d).as_secs_f64();
        let b = match mask {
            None => b,
            Some(mask) => filter_record_batch(&b, &mask)?,
        };
        filter_secs += f.elapsed().as_secs_f64();
        kept += b.num_rows();
        if step_rows >= commit_rows {
            commit(store, read)?;
            step_rows = 0;
        }
        Ok(())
    };
    if pipelined {
        // The decoding thread hands each batch to this dedup thread (a few batches of slack).
        std::thread::scope(|scope| -> Result<()> {
            let (tx, rx) = std::sync::mpsc::sync_channel::<arrow::array::RecordBatch>(4);
            let dedup = scope.spawn(move || -> Result<()> {
                for b in rx {
                    each(b)?;
                }
                Ok(())
            });
            let decoded = decode_all(dec, phase.bytes, phase.ends, |b| {
                tx.send(b)
                    .map_err(|_| anyhow::anyhow!("the dedup thread stopped"))
            });
            drop(tx);
            let deduped = dedup
                .join()
                .map_err(|_| anyhow::anyhow!("the dedup thread panicked"))?;
            deduped.and(decoded)
        })?;
    } else {
        decode_all(dec, phase.bytes, phase.ends, each)?;
    }
    commit(store, read)?;
    let c = Instant::now();
    store.finish()?;
    commit_secs += c.elapsed().as_secs_f64();
    let with_dedup = t.elapsed().as_secs_f64();
    let cpu = cpu_spent(&cpu_before, &cpu_times());
    let (second, _) = decode_only(dec)?;
    let reference = first.min(second);
    let ns = |s: f64| s * 1e9 / rows as f64;
    println!(
        "### {}: {rows} messages, {kept} kept, {} dropped",
        phase.name,
        rows - kept
    );
    println!();
    println!("| run | seconds | ns/msg | M msg/s |");
    println!("|---|---|---|---|");
    for (name, s) in [
        ("decode only", first),
        (
            if pipelined {
                "decode + dedup (dedup on a second thread)"
            } else {
                "decode + dedup (one thread)"
            },
            with_dedup,
        ),
        ("decode only, again", second),
    ] {
        println!(
            "| {name} | {s:.2} | {:.0} | {:.2} |",
            ns(s),
            rows as f64 / s / 1e6
        );
    }
    println!();
    println!(
        "dedup adds {:.0}% to decoding (against the faster decode-only run); of the dedup run, {:.2} s went to `StateStore::dedup`, {:.2} s to dropping the duplicate rows from the batches (`filter_record_batch`) and {:.2} s to waiting for commits",
        100.0 * (with_dedup - reference) / reference,
        dedup_secs,
        filter_secs,
        commit_secs
    );
    println!();
    // On 2 cores, the dedup run's CPU beyond decoding bounds what overlapping can win.
    println!("CPU time of the dedup run (user + system, by thread; {with_dedup:.2} s of wall time): {cpu}");
    println!();
    Ok(())
}

fn main() -> Result<()> {
    let a = match args() {
        Ok(a) => a,
        Err(e) => {
            eprintln!("dedup_bench: {e:#}");
            std::process::exit(2);
        }
    };
    let tmp = tempfile::tempdir()?;
    eprintln!(
        "generating {} quotes, {:.0}% repeats of recent ones ...",
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
    // Phase 2's stream: 1,000,000 messages, new quotes except for a share of replays of
    // messages from anywhere in phase 1 (keys that only RocksDB still holds).
    let warm_n = (a.messages / 10).clamp(1, 1_000_000);
    let mut warm = Vec::with_capacity(warm_n * 80);
    let mut warm_ends = Vec::with_capacity(warm_n);
    let mut pick = 0x9E37_79B9_7F4A_7C15u64;
    for _ in 0..warm_n {
        pick ^= pick << 13;
        pick ^= pick >> 7;
        pick ^= pick << 17;
        if (pick % 1000) as f64 <= a.duplicates * 1000.0 && !ends.is_empty() {
            let i = ((pick >> 10) % ends.len() as u64) as usize;
            let start = if i == 0 { 0 } else { ends[i - 1] };
            warm.extend_from_slice(&bytes[start..ends[i]]);
        } else {
            generator.next_quote().encode_protobuf(&mut warm);
        }
        warm_ends.push(warm.len());
    }
    let mut dec = decoder(tmp.path())?;
    let schema = dec.schema();
    let state_dir = a.state.clone().unwrap_or_else(|| tmp.path().join("state"));
    if state_dir.exists() {
        std::fs::remove_dir_all(&state_dir)?;
    }
    let options = || -> Result<StateOptions> {
        Ok(StateOptions {
            key: Some(DedupKey {
                columns: KeyColumns::resolve(
                    &schema,
                    &["ticker".to_string(), "sequence_number".to_string()],
                    None,
                )?,
                mode: a.mode,
                ttl: None,
            }),
            block_cache_bytes: a.block_cache,
            ..StateOptions::default()
        })
    };
    println!(
        "block cache {} MiB; a commit every {} rows; {:?} keys",
        a.block_cache >> 20,
        a.commit_rows,
        a.mode
    );
    println!();
    {
        let mut store = StateStore::open(&state_dir, options()?)?;
        run_phase(
            &Phase {
                name: "phase 1, the state grows from empty",
                bytes: &bytes,
                ends: &ends,
            },
            dec.as_mut(),
            &mut store,
            a.commit_rows,
            a.pipelined,
        )?;
        print!("{}", store.stats());
        println!();
    }
    // Reopening: once with the key filter phase 1's clean finish saved, once as after a crash
    // (the filter rebuilt from every key in RocksDB; this also warms the block cache, and
    // phase 2 runs on this one).
    let t = Instant::now();
    drop(StateStore::open(&state_dir, options()?)?);
    let saved = t.elapsed().as_secs_f64();
    std::fs::remove_file(state_dir.join("key-filter"))?;
    let t = Instant::now();
    let mut store = StateStore::open(&state_dir, options()?)?;
    println!(
        "reopened the state in {saved:.2} s with the saved key filter, {:.2} s rebuilding it from RocksDB's keys (as after a crash)",
        t.elapsed().as_secs_f64()
    );
    println!();
    let before = store.stats();
    run_phase(
        &Phase {
            name: "phase 2, against the full state (replays of old keys go to RocksDB)",
            bytes: &warm,
            ends: &warm_ends,
        },
        dec.as_mut(),
        &mut store,
        a.commit_rows,
        a.pipelined,
    )?;
    let after = store.stats();
    print!("{after}");
    println!();
    println!(
        "phase 2 alone: {} RocksDB lookups; data blocks {} hits, {} misses; filter blocks {} hits, {} misses; bloom said absent {} times",
        after.lookups - before.lookups,
        after.data_hit - before.data_hit,
        after.data_miss - before.data_miss,
        after.filter_hit - before.filter_hit,
        after.filter_miss - before.filter_miss,
        after.bloom_useful - before.bloom_useful,
    );
    Ok(())
}
