//! `weir stats STATE_DIR`: what a source's state directory holds, read-only (it works while weir
//! runs).

use std::path::Path;

use anyhow::{Context, Result};

pub(crate) fn stats(dir: &Path) -> Result<()> {
    let (checkpoint, setup, stats) = weir_dedup::StateStore::inspect(dir)
        .with_context(|| format!("cannot read the state in {}", dir.display()))?;
    println!("state directory:        {}", dir.display());
    println!(
        "dedup settings:         {}",
        if setup.is_empty() {
            "none (checkpoints only)"
        } else {
            &setup
        }
    );
    print!("{stats}");
    println!("read positions (next to read):");
    for (name, next) in &checkpoint.positions {
        println!("  {name} {next}");
    }
    if !checkpoint.files.is_empty() {
        // A Delta sink records each file as its `add` action (JSON); show its path.
        let names: Vec<String> = checkpoint
            .files
            .iter()
            .map(|f| {
                serde_json::from_str::<serde_json::Value>(f)
                    .ok()
                    .and_then(|v| v.get("path").and_then(|p| p.as_str()).map(str::to_string))
                    .unwrap_or_else(|| f.clone())
            })
            .collect();
        // A kafka sink records its step's transaction instead of files.
        // and, when it refused rows, where they go in its dead-letter file.
        let (records, files): (Vec<String>, Vec<String>) =
            names.into_iter().partition(|n| n.starts_with("kafka-"));
        if !files.is_empty() {
            println!("files of the last step:  {}", files.join(", "));
        }
        for r in records {
            if let Some(t) = r.strip_prefix("kafka-transaction:") {
                println!("transaction of the last step: {t} (transactional.id:producer id:epoch)");
            } else if let Some(d) = r.strip_prefix("kafka-dead-letters:") {
                println!(
                    "refused rows of the last step: {d} (offset in the dead-letter file:bytes:CRC-32)"
                );
            }
        }
    }
    if let Some(w) = weir::WindowStateReport::from_state(&checkpoint.state) {
        println!("windows (continuous query):");
        println!("  watermark:            {}", time(w.watermark));
        println!("  emitted through:      {}", time(w.closed_through));
        println!("  open windows:         {}", w.open_windows);
        println!("  late rows (all runs): {}", w.late_rows);
        for (channel, t) in &w.event_times {
            println!("  latest event time, partition {channel}: {}", time(*t));
        }
    }
    Ok(())
}

/// A time in nanoseconds since the epoch, as UTC.
fn time(ns: i64) -> String {
    if ns == i64::MIN {
        return "none yet".into();
    }
    match arrow::temporal_conversions::timestamp_ns_to_datetime(ns) {
        Some(t) => format!("{}Z", t.format("%Y-%m-%dT%H:%M:%S%.3f")),
        None => ns.to_string(),
    }
}
