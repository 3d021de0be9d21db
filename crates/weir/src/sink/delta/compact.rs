//! Compaction of a Delta table's small files: delta-rs's OPTIMIZE (bin-packing files below the
//! target size into files of about it, one commit that removes the old files and adds the new
//! ones, marked as changing no data). Streaming with short steps makes many small files; the
//! sink runs this every `'compaction.interval'` table versions, and `weir compact` runs it on
//! demand (for a sink with `'compaction.interval' = '0'`, or a table another writer made).
//! Readers see the same rows before and after; `txn` versions are untouched, so exactly-once
//! resumption and fencing do not notice it.

use std::num::NonZeroU64;
use std::sync::Arc;

use deltalake_core::{DeltaTable, DeltaTableBuilder};
use parquet::file::properties::WriterProperties;
use weir_codec::{unknown_keys, Options};

use super::{delta_error, register_log_store};
use crate::sink::storage::{is_remote, local_path, open_location, STORAGE_OPTIONS};
use crate::sink::SinkError;

/// What one compaction did.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Compaction {
    /// Small files removed from the table (still on storage until `VACUUM`).
    pub files_removed: u64,
    /// Files written in their place.
    pub files_added: u64,
    /// Bytes of the files removed.
    pub bytes_removed: i64,
    /// Bytes of the files added.
    pub bytes_added: i64,
    /// The table version after it (the same as before when there was nothing to compact).
    pub version: u64,
}

/// Compacts `table`'s files below `target_file_size` into files of about that size, written
/// with `props`. Returns the table as of the compaction's commit and what it did.
pub(crate) async fn compact_table(
    table: DeltaTable,
    target_file_size: u64,
    props: WriterProperties,
) -> Result<(DeltaTable, Compaction), deltalake_core::DeltaTableError> {
    let target = NonZeroU64::new(target_file_size).unwrap_or(NonZeroU64::MIN);
    let (table, metrics) = table
        .optimize()
        .with_target_size(target)
        .with_writer_properties(props)
        .await?;
    let version = table.version().unwrap_or(0);
    Ok((
        table,
        Compaction {
            files_removed: metrics.num_files_removed,
            files_added: metrics.num_files_added,
            bytes_removed: metrics.files_removed.total_size,
            bytes_added: metrics.files_added.total_size,
            version,
        },
    ))
}

/// `weir compact`: compacts the Delta table at `path` (a local directory or an object-storage
/// URL, reached with the object-storage `options` a `delta` sink takes) into files of about
/// `target_file_size` bytes.
pub async fn compact_delta_table(
    path: &str,
    options: Vec<(String, String)>,
    target_file_size: u64,
) -> Result<Compaction, SinkError> {
    let options = Options::new(weir_codec::resolve_references(options)?);
    unknown_keys(&options, &[STORAGE_OPTIONS])?;
    let local = local_path(path);
    if !is_remote(path) && !local.join("_delta_log").is_dir() {
        return Err(SinkError::Options(format!(
            "{} is not a Delta table (no _delta_log/ in it)",
            local.display()
        )));
    }
    let location = open_location(path, &options)?;
    register_log_store();
    let url = location.url.clone();
    let err = delta_error("compact", &url);
    let mut table = DeltaTableBuilder::from_url(url.clone())
        .map_err(&err)?
        .with_storage_backend(Arc::clone(&location.store), url.clone())
        .build()
        .map_err(&err)?;
    table.load().await.map_err(&err)?;
    let props = WriterProperties::builder()
        .set_compression(parquet::basic::Compression::SNAPPY)
        .build();
    let (_, done) = compact_table(table, target_file_size, props)
        .await
        .map_err(&err)?;
    Ok(done)
}
