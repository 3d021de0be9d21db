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

use std::collections::{BTreeMap, HashSet};
use std::num::NonZeroU64;
use std::sync::Arc;

use delta_kernel::expressions::Scalar;
use deltalake_core::kernel::transaction::{CommitBuilder, TransactionError};
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
    // The writer's handle is as of before its own last commit: plan on the table as it is.
    table.update_state().await?;
    let rewrite = rewrite(&table, target_file_size, props).await?;
    commit_rewrite(table, rewrite).await
}

/// A compaction written and not yet committed: its actions, what it did, and its operation.
struct Rewrite {
    actions: Vec<Action>,
    done: Compaction,
    operation: DeltaOperation,
}

/// Writes the compacted files of `table` as last read (see [`compact_table`]).
async fn rewrite(
    table: &DeltaTable,
    target_file_size: u64,
    props: WriterProperties,
) -> Result<Rewrite, DeltaTableError> {
    let target = NonZeroU64::new(target_file_size).unwrap_or(NonZeroU64::MIN);
    let bins = plan(table, target).await?;
    let mut done = Compaction {
        version: table.version().unwrap_or(0),
        ..Compaction::default()
    };
    let operation = DeltaOperation::Optimize {
        predicate: None,
        target_size: i64::try_from(target.get()).unwrap_or(i64::MAX),
    };
    if bins.is_empty() {
        return Ok(Rewrite {
            actions: Vec::new(),
            done,
            operation,
        });
    }
    let store = table.object_store();
    let mut writer = RecordBatchWriter::for_table(table)?
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
    Ok(Rewrite {
        actions,
        done,
        operation,
    })
}

/// Commits `rewrite` to `table`.
async fn commit_rewrite(
    mut table: DeltaTable,
    rewrite: Rewrite,
) -> Result<(DeltaTable, Compaction), DeltaTableError> {
    let Rewrite {
        actions,
        mut done,
        operation,
    } = rewrite;
    if actions.is_empty() {
        return Ok((table, done));
    }
    // delta-rs's conflict checker lets two OPTIMIZE commits remove the same files (it only
    // counts removes that change data), which would leave both rewrites, every row twice, in the
    // table. So the commit is made only on a snapshot that still holds every file it removes:
    // when another writer's commit lands first, the table is read again and, if another
    // compaction took any of the files, this one gives up (its files stay unreferenced).
    let removed: HashSet<String> = actions
        .iter()
        .filter_map(|a| match a {
            Action::Remove(r) => Some(r.path.clone()),
            _ => None,
        })
        .collect();
    for _ in 0..COMMIT_TRIES {
        let snapshot = table.snapshot()?;
        let attempt = CommitBuilder::default()
            .with_actions(actions.clone())
            .with_max_retries(0)
            .build(Some(snapshot), table.log_store(), operation.clone())
            .await;
        match attempt {
            Ok(commit) => {
                done.version = commit.version();
                table.update_state().await?;
                return Ok((table, done));
            }
            Err(DeltaTableError::Transaction {
                source:
                    TransactionError::VersionAlreadyExists(_) | TransactionError::MaxCommitAttempts(_),
            })
            | Err(DeltaTableError::VersionAlreadyExists(_)) => {
                table.update_state().await?;
                if !all_active(&table, &removed).await? {
                    let version = table.version().unwrap_or(0);
                    let nothing = Compaction {
                        version,
                        ..Compaction::default()
                    };
                    return Ok((table, nothing));
                }
            }
            Err(e) => return Err(e),
        }
    }
    Err(DeltaTableError::Generic(format!(
        "the compaction lost the race for the next table version {COMMIT_TRIES} times; other writers commit too often"
    )))
}

/// Commits a compaction tries when other writers' commits land first.
const COMMIT_TRIES: usize = 20;

/// Whether every file in `paths` is still part of `table` as last read.
async fn all_active(table: &DeltaTable, paths: &HashSet<String>) -> Result<bool, DeltaTableError> {
    let state = table.snapshot()?;
    let log_store = table.log_store();
    let mut views = state.snapshot().file_views(log_store.as_ref(), None);
    let mut found = 0;
    while let Some(view) = views.next().await {
        if paths.contains(&view?.remove_action(false).path) {
            found += 1;
        }
    }
    Ok(found == paths.len())
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

#[cfg(test)]
mod tests {
    use std::collections::BTreeMap;

    use arrow::array::{AsArray, Int64Array, RecordBatch};
    use arrow::datatypes::{DataType, Field, Int64Type, Schema};
    use deltalake_core::kernel::{DataType as DeltaType, PrimitiveType, StructField};
    use deltalake_core::writer::{DeltaWriter as _, RecordBatchWriter};
    use deltalake_core::{DeltaTable, DeltaTableBuilder};
    use parquet::file::properties::WriterProperties;
    use std::sync::Arc;

    use super::{commit_rewrite, rewrite};

    async fn open(dir: &std::path::Path) -> DeltaTable {
        let url = url::Url::from_directory_path(dir).unwrap();
        let mut table = DeltaTableBuilder::from_url(url).unwrap().build().unwrap();
        table.load().await.unwrap();
        table
    }

    /// How often each id is in the table's current files.
    fn ids(table: &DeltaTable) -> BTreeMap<i64, usize> {
        let mut ids = BTreeMap::new();
        for uri in table.get_file_uris().unwrap() {
            let path = match url::Url::parse(&uri) {
                Ok(u) => u.to_file_path().unwrap(),
                Err(_) => std::path::PathBuf::from(&uri),
            };
            let f = std::fs::File::open(path).unwrap();
            for b in
                parquet::arrow::arrow_reader::ParquetRecordBatchReader::try_new(f, 1024).unwrap()
            {
                let b: RecordBatch = b.unwrap();
                for id in b.column(0).as_primitive::<Int64Type>().values() {
                    *ids.entry(*id).or_insert(0) += 1;
                }
            }
        }
        ids
    }

    /// Two writers that plan a compaction of the same small files: the second to commit finds
    /// them gone and adds nothing (delta-rs's conflict checker would let both rewrites in).
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_compaction_that_lost_the_race_for_its_files_adds_nothing() {
        let dir = tempfile::tempdir().unwrap();
        let url = url::Url::from_directory_path(dir.path()).unwrap();
        let mut table = DeltaTableBuilder::from_url(url)
            .unwrap()
            .build()
            .unwrap()
            .create()
            .with_columns([StructField::new(
                "id",
                DeltaType::Primitive(PrimitiveType::Long),
                false,
            )])
            .await
            .unwrap();
        let schema = Arc::new(Schema::new(vec![Field::new("id", DataType::Int64, false)]));
        for step in 0..4 {
            let ids = Int64Array::from_iter_values(step * 10..step * 10 + 10);
            let batch = RecordBatch::try_new(Arc::clone(&schema), vec![Arc::new(ids)]).unwrap();
            let mut writer = RecordBatchWriter::for_table(&table).unwrap();
            writer.write(batch).await.unwrap();
            writer.flush_and_commit(&mut table).await.unwrap();
        }
        // Both plan and write their files before either commits.
        let other = open(dir.path()).await;
        let props = WriterProperties::builder().build();
        let mine = rewrite(&table, 1 << 20, props.clone()).await.unwrap();
        let theirs = rewrite(&other, 1 << 20, props).await.unwrap();
        let (_, first) = commit_rewrite(table, mine).await.unwrap();
        assert_eq!(first.files_removed, 4);
        let (_, second) = commit_rewrite(other, theirs).await.unwrap();
        assert_eq!(second.files_removed, 0, "{second:?}");
        assert_eq!(second.version, first.version);
        let table = open(dir.path()).await;
        assert_eq!(table.version(), Some(first.version));
        let got = ids(&table);
        assert_eq!(got.len(), 40);
        assert!(got.values().all(|&n| n == 1), "{got:?}");
        drop(table);
    }
}
