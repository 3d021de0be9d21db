//! `weir compact TABLE`: compacts a Delta table's small files (Delta's OPTIMIZE), for tables
//! whose sink runs without `'compaction.interval'` or that another writer made.

use anyhow::{Context, Result};

/// Compacts the table at `table` into files of about `target_file_size` (`128MB`), reaching
/// object storage with `options` (`KEY=VALUE`, the `delta` sink's object-storage options).
pub(crate) fn compact(table: &str, options: &[String], target_file_size: &str) -> Result<()> {
    let pairs = options
        .iter()
        .map(|o| {
            o.split_once('=')
                .map(|(k, v)| (k.trim().to_string(), v.trim().to_string()))
                .with_context(|| {
                    // The value may be a secret: only the key side is shown.
                    let key: String = o.chars().take_while(|c| *c != '=').take(40).collect();
                    format!("--option '{key}...' is not KEY=VALUE")
                })
        })
        .collect::<Result<Vec<_>>>()?;
    let target = weir_codec::parse_bytes(target_file_size)
        .map_err(anyhow::Error::msg)
        .with_context(|| format!("--target-file-size '{target_file_size}'"))?;
    let runtime = super::runtime(None)?;
    let done = runtime
        .block_on(weir::compact_delta_table(table, pairs, target as u64))
        .with_context(|| format!("cannot compact the Delta table {table}"))?;
    if done.files_removed == 0 {
        println!("{table}: nothing to compact (version {})", done.version);
    } else {
        println!(
            "{table}: {} files ({} bytes) compacted into {} ({} bytes) at version {}",
            done.files_removed,
            done.bytes_removed,
            done.files_added,
            done.bytes_added,
            done.version
        );
    }
    Ok(())
}
