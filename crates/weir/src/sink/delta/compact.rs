//! Compaction of a Delta table's small files, Delta's OPTIMIZE: within each partition, the files
//! below the target size are packed into bins of about it, each bin's rows are rewritten as one
//! file, and one commit removes the old files and adds the new ones, marked as changing no data.
//! Streaming with short steps makes many small files; the sink runs this every
//! `'compaction.interval'` table versions, and `weir compact` runs it on demand (for a sink with
//! `'compaction.interval' = '0'`, or a table another writer made). Readers see the same rows
//! before and after; `txn` versions are untouched, so exactly-once resumption and fencing do not
//! notice it.
//!
//! Written here rather than taken from delta-rs's `optimize`, which needs its `datafusion`
//! feature: that feature builds DataFusion's default features (compression codecs, crypto
//! functions, its protobuf plans) and delta-rs's query operations into every build, minutes of a
//! first build on 2 cores, for a bin-packing that reads Parquet and writes it again. The files
//! are read with the Parquet reader and written by delta-rs's own `RecordBatchWriter`, so their
//! statistics, names and partition directories are those of every other file of the sink.

use std::collections::BTreeMap;
use std::num::NonZeroU64;
use std::sync::Arc;

use delta_kernel::expressions::Scalar;
use deltalake_core::kernel::transaction::CommitBuilder;
use deltalake_core::kernel::{Action, Add, Remove, StructType};
use deltalake_core::protocol::DeltaOperation;
use deltalake_core::writer::{DeltaWriter as _, RecordBatchWriter, WriteMode};
use deltalake_core::{DeltaTable, DeltaTableBuilder, DeltaTableError, Path};
use futures::StreamExt as _;
use indexmap::IndexMap;
use object_store::ObjectStoreExt as _;
use parquet::arrow::arrow_reader::ParquetRecordBatchReaderBuilder;
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

/// A data file of the table that compaction could not read back.
#[derive(Debug, thiserror::Error)]
#[error("the data file {path} cannot be read to compact it: {source}")]
struct UnreadableFile {
    path: String,
    #[source]
    source: Box<dyn std::error::Error + Send + Sync>,
}

/// A file that may be compacted: where it is, its `remove` action and its size.
struct SmallFile {
    path: Path,
    remove: Remove,
    size: u64,
}

/// The small files of one partition, in the order the log lists them.
struct PartitionFiles {
    /// The partition's values, typed as the table's columns, for the writer.
    values: IndexMap<String, Scalar>,
    files: Vec<SmallFile>,
}

/// Compacts `table`'s files below `target_file_size` into files of about that size, written
/// with `props`. Returns the table as of the compaction's commit and what it did.
pub(crate) async fn compact_table(
    mut table: DeltaTable,
    target_file_size: u64,
    props: WriterProperties,
) -> Result<(DeltaTable, Compaction), DeltaTableError> {
    let target = NonZeroU64::new(target_file_size).unwrap_or(NonZeroU64::MIN);
    let bins = plan(&table, target).await?;
    let mut done = Compaction {
        version: table.version().unwrap_or(0),
        ..Compaction::default()
    };
    if bins.is_empty() {
        return Ok((table, done));
    }
    let store = table.object_store();
    let mut writer = RecordBatchWriter::for_table(&table)?
        .with_writer_properties(props)
        .with_target_file_size(target.get());
    let mut actions = Vec::new();
    for (values, bin) in &bins {
        for file in bin {
            let bytes = store.get(&file.path).await?.bytes().await?;
            let unreadable =
                |e: Box<dyn std::error::Error + Send + Sync>| DeltaTableError::GenericError {
                    source: Box::new(UnreadableFile {
                        path: file.path.to_string(),
                        source: e,
                    }),
                };
            let reader = ParquetRecordBatchReaderBuilder::try_new(bytes)
                .and_then(|b| b.build())
                .map_err(|e| unreadable(Box::new(e)))?;
            for batch in reader {
                let batch = batch.map_err(|e| unreadable(Box::new(e)))?;
                writer
                    .write_partition(batch, values, WriteMode::Default)
                    .await?;
            }
            done.files_removed += 1;
            done.bytes_removed += i64::try_from(file.size).unwrap_or(i64::MAX);
            actions.push(Action::Remove(file.remove.clone()));
        }
        // One bin, one file (or more, where the writer rolls over at the target size).
        for add in writer.flush().await? {
            done.files_added += 1;
            done.bytes_added += add.size;
            actions.push(Action::Add(Add {
                data_change: false,
                ..add
            }));
        }
    }
    let operation = DeltaOperation::Optimize {
        predicate: None,
        target_size: i64::try_from(target.get()).unwrap_or(i64::MAX),
    };
    let snapshot = table.snapshot()?;
    let commit = CommitBuilder::default()
        .with_actions(actions)
        .build(Some(snapshot), table.log_store(), operation)
        .await?;
    done.version = commit.version();
    table.update_state().await?;
    Ok((table, done))
}

/// The bins to rewrite, with their partition values: per partition, consecutive small files
/// while their sizes add up to at most `target`. A bin of one file would be rewritten as itself,
/// so none is made. Files with deletion vectors are left alone (their rows are not all live).
async fn plan(
    table: &DeltaTable,
    target: NonZeroU64,
) -> Result<Vec<(IndexMap<String, Scalar>, Vec<SmallFile>)>, DeltaTableError> {
    let state = table.snapshot()?;
    let partition_columns = state.metadata().partition_columns().to_vec();
    let schema = state.schema();
    let log_store = table.log_store();
    // Keyed by the raw partition values, so the order of partitions (and so of the commit's
    // actions) does not depend on a hash.
    let mut partitions: BTreeMap<Vec<Option<String>>, PartitionFiles> = BTreeMap::new();
    let mut views = state.snapshot().file_views(log_store.as_ref(), None);
    while let Some(view) = views.next().await {
        let view = view?;
        let size = u64::try_from(view.size()).unwrap_or(u64::MAX);
        if size >= target.get() || view.deletion_vector_descriptor().is_some() {
            continue;
        }
        let raw = view.partition_values_map();
        let key: Vec<Option<String>> = partition_columns
            .iter()
            .map(|c| raw.get(c).cloned().flatten())
            .collect();
        let partition = match partitions.entry(key) {
            std::collections::btree_map::Entry::Occupied(e) => e.into_mut(),
            std::collections::btree_map::Entry::Vacant(e) => {
                let values = typed_partition_values(e.key(), &partition_columns, &schema)?;
                e.insert(PartitionFiles {
                    values,
                    files: Vec::new(),
                })
            }
        };
        partition.files.push(SmallFile {
            path: view.object_store_path(),
            remove: view.remove_action(false),
            size,
        });
    }
    let mut bins = Vec::new();
    for partition in partitions.into_values() {
        for bin in pack(partition.files, target.get()) {
            bins.push((partition.values.clone(), bin));
        }
    }
    Ok(bins)
}

/// Packs `files`, in order, into bins whose sizes add up to at most `target`; bins of one
/// file are dropped.
fn pack(files: Vec<SmallFile>, target: u64) -> Vec<Vec<SmallFile>> {
    let mut bins: Vec<Vec<SmallFile>> = Vec::new();
    let mut bin: Vec<SmallFile> = Vec::new();
    let mut bin_size = 0u64;
    for file in files {
        if !bin.is_empty() && bin_size.saturating_add(file.size) > target {
            bins.push(std::mem::take(&mut bin));
            bin_size = 0;
        }
        bin_size = bin_size.saturating_add(file.size);
        bin.push(file);
    }
    bins.push(bin);
    bins.retain(|b| b.len() > 1);
    bins
}

/// A partition's raw values (as the log writes them) typed as the table's columns, in the
/// table's partition order, as delta-rs's writer takes them.
fn typed_partition_values(
    raw: &[Option<String>],
    columns: &[String],
    schema: &StructType,
) -> Result<IndexMap<String, Scalar>, DeltaTableError> {
    let mut values = IndexMap::with_capacity(columns.len());
    for (column, raw) in columns.iter().zip(raw) {
        let mismatch = |what: &str| DeltaTableError::SchemaMismatch {
            msg: format!("partition column '{column}' {what}"),
        };
        let field = schema
            .field(column)
            .ok_or_else(|| mismatch("is not in the table's schema"))?;
        let value = match raw {
            Some(raw) => field
                .data_type()
                .as_primitive_opt()
                .ok_or_else(|| mismatch("is not of a primitive type"))?
                .parse_scalar(raw)
                .map_err(|e| mismatch(&format!("has a value that cannot be read: {e}")))?,
            None => Scalar::Null(field.data_type().clone()),
        };
        values.insert(column.clone(), value);
    }
    Ok(values)
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
