//! The `delta` sink: rows land in a Delta Lake table, on the local disk or object storage,
//! exactly once. delta-rs writes the data files (its `RecordBatchWriter`, streamed as multipart
//! uploads, rolled at `'target.file.size'`, on a thread of their own: [`data_files`]) and commits
//! them (its `CommitBuilder`); weir writes none of Delta's protocol itself.
//!
//! Each step of an exactly-once pipeline ends in this order:
//! 1. the step's data files are completed in the table's directory (not yet part of the table),
//! 2. the state commit (RocksDB) records the positions, the dedup keys, the window state and
//!    the step's `add` actions, and is made durable,
//! 3. one Delta commit adds the files with application-transaction (`txn`) actions: `<app.id>`
//!    at the step's number and `<app.id>/<partition>` at each source partition's next offset.
//!
//! Step 2 runs on the state store's commit thread while the pipeline reads on; step 3 follows
//! once the state is durable, and always before the next step's state commit (the pipeline's
//! step loop orders them), so the table is never more than one step behind the state.
//!
//! Without a state directory (a source fed straight into the sink) there is no step 2: the
//! table is the only record, each commit's `commitInfo` also names the partitions, and a start
//! resumes from the `txn` versions ([`DeltaSink::resume`]).
//!
//! A kill between 1 and 2 leaves unreferenced files (no reader sees them; `VACUUM` removes
//! them). A kill between 2 and 3 leaves the table one step behind the state: on start, the table
//! is read, its `<app.id>` version compared with the state's step, and the recorded `add`
//! actions of that one step committed (settled). The table's `txn` versions are also the fence:
//! a commit is made only while `<app.id>` is at the step before it, so a second writer with a
//! stale view fails with an error and adds nothing.

mod compact;
mod data_files;
mod options;

pub use self::compact::{compact_delta_table, Compaction};
pub(crate) use self::data_files::DataFiles;
pub(crate) use self::options::{DeltaSettings, DELTA_OPTIONS};

use self::data_files::DataFileWriters;

use std::sync::{Arc, Once};

use arrow::datatypes::SchemaRef;
use arrow::record_batch::RecordBatch;
use deltalake_core::kernel::engine::arrow_conversion::TryFromArrow as _;
use deltalake_core::kernel::transaction::{CommitBuilder, CommitProperties, TransactionError};
use deltalake_core::kernel::{Action, Add, StructField, StructType, Transaction};
use deltalake_core::logstore::{
    default_logstore, logstore_factories, LogStore, LogStoreFactory, ObjectStoreRef, StorageConfig,
};
use deltalake_core::protocol::{DeltaOperation, OutputMode};
use deltalake_core::writer::RecordBatchWriter;
use deltalake_core::{DeltaTable, DeltaTableBuilder, DeltaTableError, TableProperty};
use futures::StreamExt as _;
use object_store::path::Path as ObjectPath;
use parquet::file::properties::WriterProperties;
use url::Url;
use weir_codec::Options;

use super::storage::{open_location, Location};
use super::SinkError;

/// How many of the latest commits are read to find other writers of the same app id (a
/// member of a consumer group outside it, or one under another app id).
const RECENT_COMMITS: usize = 200;

/// Commits tried when another commit (of another app) lands between reading the table and
/// writing the next version; each try re-reads the table and checks the fence again.
const COMMIT_TRIES: usize = 20;

/// A Delta table being written in steps.
pub(crate) struct DeltaSink {
    /// The sink's name, for messages.
    sink: String,
    /// The table's URL, for messages (it carries no credentials).
    url: Url,
    settings: DeltaSettings,
    table: DeltaTable,
    /// How data files are written (the writer's and compaction's).
    props: WriterProperties,
    /// The table version after this writer's last commit (or as opened): compaction runs when
    /// a commit takes the version across a multiple of `'compaction.interval'`, so restarts do
    /// not reset the count.
    last_version: u64,
    /// What keeps a second writer from adding the same rows.
    fence: Fence,
}

/// How a commit makes sure no other writer has committed the same rows.
#[derive(Debug)]
enum Fence {
    /// One writer per app id: the `<app.id>` step must be the one before this commit's.
    Step,
    /// Members of consumer group `group`, each writing the partitions it owns: the `txn`
    /// version of every partition in a commit must still be where this writer took the
    /// partition up, or last committed it (`None`: never committed).
    Partitions {
        group: String,
        taken: std::collections::HashMap<String, Option<i64>>,
    },
}

impl std::fmt::Debug for DeltaSink {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "DeltaSink({} at {})", self.sink, self.url)
    }
}

/// What the table says of this writer: the last step it committed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct TableProgress {
    /// The `<app.id>` transaction version: the last step committed (0 when none).
    pub(crate) step: u64,
    /// The table version read.
    pub(crate) version: deltalake_core::kernel::Version,
}

impl DeltaSink {
    /// Opens the table of `settings` for rows of `schema`, creating it when the path holds
    /// nothing, and checking (or, with `'schema.evolution' = 'add_columns'`, widening) the
    /// schema of an existing one. Returns the table and the writer of its data files.
    pub(crate) async fn open(
        sink: &str,
        settings: DeltaSettings,
        options: &Options,
        schema: &SchemaRef,
    ) -> Result<(Self, DataFiles), SinkError> {
        let location = open_location(&settings.path, options)?;
        register_log_store();
        let url = location.url.clone();
        let err = delta_error(sink, &url);
        let mut table = DeltaTableBuilder::from_url(url.clone())
            .map_err(&err)?
            .with_storage_backend(Arc::clone(&location.store), url.clone())
            .build()
            .map_err(&err)?;
        let wanted = StructType::try_from_arrow(schema.as_ref()).map_err(|e| {
            SinkError::Options(format!(
                "sink {sink}: the query's columns cannot be a Delta table's: {e}"
            ))
        })?;
        match table.load().await {
            Ok(()) => {
                table = check_schema(sink, &url, table, &wanted, settings.add_columns).await?;
            }
            Err(DeltaTableError::NotATable(_)) => {
                refuse_foreign_files(sink, &location).await?;
                let mut create = table
                    .create()
                    .with_table_name(sink)
                    .with_columns(wanted.fields().cloned())
                    .with_configuration_property(
                        TableProperty::CheckpointInterval,
                        Some(settings.checkpoint_interval.to_string()),
                    );
                if !settings.partition_by.is_empty() {
                    for c in &settings.partition_by {
                        if wanted.field(c).is_none() {
                            return Err(SinkError::Options(format!(
                                "sink {sink}: 'partition.by' names '{c}', which the query does not have"
                            )));
                        }
                    }
                    create = create.with_partition_columns(settings.partition_by.clone());
                }
                match create.await {
                    Ok(created) => {
                        table = created;
                        tracing::info!(sink, table = %url, "created the Delta table");
                    }
                    // Another process (a member of the same group, started at the same time)
                    // created it first: write to that one.
                    Err(e) => {
                        table = DeltaTableBuilder::from_url(url.clone())
                            .map_err(&err)?
                            .with_storage_backend(Arc::clone(&location.store), url.clone())
                            .build()
                            .map_err(&err)?;
                        if table.load().await.is_err() {
                            return Err(err(e));
                        }
                        table =
                            check_schema(sink, &url, table, &wanted, settings.add_columns).await?;
                    }
                }
            }
            Err(e) => return Err(err(e)),
        }
        let props = WriterProperties::builder()
            .set_compression(settings.compression)
            .build();
        let last_version = table.version().unwrap_or(0);
        drop(err);
        let sink = Self {
            sink: sink.to_string(),
            url,
            settings,
            table,
            props,
            last_version,
            fence: Fence::Step,
        };
        let files = sink.data_files()?;
        Ok((sink, files))
    }

    /// A writer of data files for the table as it stands (its schema and partition columns),
    /// with the sink's compression and file size.
    pub(crate) fn data_files(&self) -> Result<DataFiles, SinkError> {
        let writer = RecordBatchWriter::for_table(&self.table)
            .map_err(delta_error(&self.sink, &self.url))?
            .with_writer_properties(self.props.clone())
            .with_target_file_size(self.settings.target_file_size);
        Ok(DataFiles {
            sink: self.sink.clone(),
            url: self.url.clone(),
            schema: writer.arrow_schema(),
            writer,
        })
    }

    /// After the commit that made table version `version`: every `'compaction.interval'`
    /// versions, compacts the table's small files (one more commit, which changes no rows).
    /// Returns what a compaction did.
    pub(crate) async fn after_commit(
        &mut self,
        version: u64,
    ) -> Result<Option<Compaction>, SinkError> {
        let every = self.settings.compaction_interval;
        let crossed = every > 0 && version / every > self.last_version / every;
        self.last_version = version;
        if !crossed {
            return Ok(None);
        }
        let err = delta_error(&self.sink, &self.url);
        let (table, done) = compact::compact_table(
            self.table.clone(),
            self.settings.target_file_size,
            self.props.clone(),
        )
        .await
        .map_err(err)?;
        self.table = table;
        self.last_version = done.version;
        Ok(Some(done))
    }

    /// The table's URL.
    pub(crate) fn url(&self) -> &Url {
        &self.url
    }

    fn err(&self) -> impl Fn(DeltaTableError) -> SinkError + '_ {
        delta_error(&self.sink, &self.url)
    }

    /// How far the table says this writer is.
    pub(crate) async fn progress(&mut self) -> Result<TableProgress, SinkError> {
        let err = delta_error(&self.sink, &self.url);
        self.table.update_state().await.map_err(&err)?;
        let snapshot = self.table.snapshot().map_err(&err)?;
        let step = snapshot
            .transaction_version(self.table.log_store().as_ref(), &self.settings.app_id)
            .await
            .map_err(&err)?
            .unwrap_or(0);
        Ok(TableProgress {
            step: u64::try_from(step).unwrap_or(0),
            version: snapshot.version(),
        })
    }

    /// Takes up `partitions` (position names) as a member of consumer group `group`: from now
    /// on commits are fenced per partition (see [`Fence::Partitions`]) and carry no `<app.id>`
    /// step, which is this process's own. Returns where each partition resumes: its `txn`
    /// version, for those the table has one.
    pub(crate) async fn take_partitions(
        &mut self,
        group: &str,
        partitions: &[String],
    ) -> Result<Vec<(String, i64)>, SinkError> {
        let err = delta_error(&self.sink, &self.url);
        self.table.update_state().await.map_err(&err)?;
        let app = self.settings.app_id.clone();
        let recent = self.recent_commits(RECENT_COMMITS).await?;
        // Members fence each other through the `txn` versions of one app id: a member writing
        // under another would start every partition over.
        if let Some(other) = recent.iter().find_map(|info| {
            let by = info.get(META_APP).and_then(|v| v.as_str())?;
            (info.get(META_GROUP).and_then(|v| v.as_str()) == Some(group) && by != app)
                .then(|| by.to_string())
        }) {
            return Err(SinkError::Options(format!(
                "sink {}: other members of consumer group '{group}' write the Delta table {} as writer '{other}', this one as '{app}': the members' positions would not fence each other. Give every member's sink 'app.id' = '{other}'",
                self.sink, self.url
            )));
        }
        let mut taken = std::collections::HashMap::with_capacity(partitions.len());
        let mut resume = Vec::new();
        {
            let snapshot = self.table.snapshot().map_err(&err)?;
            for p in partitions {
                let at = snapshot
                    .transaction_version(self.table.log_store().as_ref(), format!("{app}/{p}"))
                    .await
                    .map_err(&err)?;
                if let Some(next) = at {
                    resume.push((p.clone(), next));
                } else if recent.iter().any(|info| {
                    info.get(META_APP).and_then(|v| v.as_str()) == Some(app.as_str())
                        && info
                            .get(META_POSITIONS)
                            .and_then(|v| v.as_object())
                            .is_some_and(|o| o.contains_key(p))
                }) {
                    // Committed before, but its txn is gone: starting over would double it.
                    return Err(SinkError::Options(format!(
                        "sink {}: the Delta table {} holds commits of {p} by writer '{app}' but no txn version for it (expired by 'delta.setTransactionRetentionDuration'?), so where it resumes is unknown; write to a new table or with a new 'app.id'",
                        self.sink, self.url
                    )));
                }
                taken.insert(p.clone(), at);
            }
        }
        self.fence = Fence::Partitions {
            group: group.to_string(),
            taken,
        };
        Ok(resume)
    }

    /// The custom `commitInfo` entries of the table's latest `limit` commits (newest first).
    async fn recent_commits(
        &self,
        limit: usize,
    ) -> Result<Vec<std::collections::HashMap<String, serde_json::Value>>, SinkError> {
        let err = delta_error(&self.sink, &self.url);
        let mut out = Vec::new();
        let mut history = self.table.history(Some(limit));
        while let Some(info) = history.next().await {
            out.push(info.map_err(&err)?.info.into_iter().collect());
        }
        Ok(out)
    }

    /// Checks the fence of a commit of `step` with `positions` against the table as last read.
    async fn check_fence(
        &mut self,
        step: u64,
        positions: &[(String, i64)],
    ) -> Result<(), SinkError> {
        let progress = self.progress().await?;
        let app = &self.settings.app_id;
        match &self.fence {
            Fence::Step if progress.step + 1 != step => Err(SinkError::Fenced {
                sink: self.sink.clone(),
                table: self.url.to_string(),
                app_id: app.clone(),
                table_step: progress.step,
                step,
            }),
            Fence::Step if progress.version > self.last_version => {
                // Members of a consumer group writing as this app fence per partition and never
                // move the step: a writer outside the group must not add their partitions' rows.
                let newer = usize::try_from(progress.version - self.last_version)
                    .unwrap_or(usize::MAX)
                    .min(RECENT_COMMITS);
                let recent = self.recent_commits(newer).await?;
                let app = &self.settings.app_id;
                match recent.iter().find_map(|info| {
                    (info.get(META_APP).and_then(|v| v.as_str()) == Some(app.as_str()))
                        .then(|| info.get(META_GROUP).and_then(|v| v.as_str()))
                        .flatten()
                }) {
                    Some(group) => Err(SinkError::Options(format!(
                        "sink {}: members of consumer group '{group}' write the Delta table {} as writer '{app}', and this process writes as '{app}' outside the group: its rows would double theirs. Add 'group.id' = '{group}' to the source, or give this sink another 'app.id'",
                        self.sink, self.url
                    ))),
                    None => Ok(()),
                }
            }
            Fence::Step => Ok(()),
            Fence::Partitions { taken, .. } => {
                let err = delta_error(&self.sink, &self.url);
                let snapshot = self.table.snapshot().map_err(&err)?;
                for (p, _) in positions {
                    let found = snapshot
                        .transaction_version(self.table.log_store().as_ref(), format!("{app}/{p}"))
                        .await
                        .map_err(&err)?;
                    let expected = taken.get(p).copied().ok_or_else(|| {
                        SinkError::Options(format!(
                            "sink {}: a step holds rows of {p}, a partition this process did not take up; this is a bug in weir",
                            self.sink
                        ))
                    })?;
                    if found != expected {
                        return Err(SinkError::PartitionFenced(Box::new(
                            super::PartitionFenced {
                                sink: self.sink.clone(),
                                table: self.url.to_string(),
                                app_id: app.clone(),
                                partition: p.clone(),
                                expected,
                                found,
                            },
                        )));
                    }
                }
                Ok(())
            }
        }
    }

    /// Commits step `step`'s `adds` with the `txn` actions of the step and of `positions`, as
    /// one table version. Fenced: the commit is made only while the table's `<app.id>` version
    /// is `step - 1` (or, for a group member, while each partition's version is where this
    /// process took it up); otherwise another writer has moved on and this one stops. Returns
    /// the table version written.
    pub(crate) async fn commit(
        &mut self,
        step: u64,
        positions: &[(String, i64)],
        adds: Vec<Add>,
    ) -> Result<deltalake_core::kernel::Version, SinkError> {
        let app = self.settings.app_id.clone();
        let group = match &self.fence {
            Fence::Step => None,
            Fence::Partitions { group, .. } => Some(group.clone()),
        };
        let mut txns = Vec::with_capacity(positions.len() + 1);
        if group.is_none() {
            txns.push(Transaction::new_with_last_update(
                &app,
                i64::try_from(step).unwrap_or(i64::MAX),
                Some(now_ms()),
            ));
        }
        txns.extend(positions.iter().map(|(p, next)| {
            Transaction::new_with_last_update(format!("{app}/{p}"), *next, Some(now_ms()))
        }));
        let actions: Vec<Action> = adds.into_iter().map(Action::Add).collect();
        let mut last = None;
        for _ in 0..COMMIT_TRIES {
            self.check_fence(step, positions).await?;
            let err = delta_error(&self.sink, &self.url);
            let snapshot = self.table.snapshot().map_err(&err)?;
            let operation = DeltaOperation::StreamingUpdate {
                output_mode: OutputMode::Append,
                query_id: app.clone(),
                epoch_id: i64::try_from(step).unwrap_or(i64::MAX),
            };
            let props = CommitProperties::default()
                .with_application_transactions(txns.clone())
                .with_metadata(commit_metadata(&app, step, positions, group.as_deref()))
                .with_max_retries(0);
            let attempt = CommitBuilder::from(props)
                .with_actions(actions.clone())
                .build(Some(snapshot), self.table.log_store(), operation)
                .await;
            match attempt {
                Ok(done) => {
                    if let Fence::Partitions { taken, .. } = &mut self.fence {
                        for (p, next) in positions {
                            taken.insert(p.clone(), Some(*next));
                        }
                    }
                    return Ok(done.version());
                }
                // Another version landed first: read the table again and check the fence.
                Err(DeltaTableError::Transaction {
                    source:
                        TransactionError::VersionAlreadyExists(_)
                        | TransactionError::MaxCommitAttempts(_),
                })
                | Err(DeltaTableError::VersionAlreadyExists(_)) => {
                    last = Some(step);
                }
                Err(e) => return Err(self.err()(e)),
            }
        }
        Err(SinkError::Options(format!(
            "sink {}: the commit of step {} to {} lost the race for the next table version {COMMIT_TRIES} times ({last:?}); other writers commit too often",
            self.sink, step, self.url
        )))
    }
}

/// The commit's provenance (in its `commitInfo`): the writer, the step and every position, so a
/// pipeline without a state directory can find the names of the partitions whose `txn`
/// versions it resumes from (Delta has no way to list a table's application ids).
/// A group member's commit also names its group (its step is the process's own).
fn commit_metadata(
    app: &str,
    step: u64,
    positions: &[(String, i64)],
    group: Option<&str>,
) -> Vec<(String, serde_json::Value)> {
    let positions: serde_json::Map<String, serde_json::Value> = positions
        .iter()
        .map(|(p, next)| (p.clone(), serde_json::Value::from(*next)))
        .collect();
    let mut meta = vec![
        (META_APP.into(), serde_json::Value::from(app)),
        (META_STEP.into(), serde_json::Value::from(step)),
        (META_POSITIONS.into(), serde_json::Value::Object(positions)),
    ];
    if let Some(g) = group {
        meta.push((META_GROUP.into(), serde_json::Value::from(g)));
    }
    meta
}

/// `commitInfo` keys of a weir commit.
const META_APP: &str = "weir.appId";
const META_STEP: &str = "weir.step";
const META_POSITIONS: &str = "weir.positions";
const META_GROUP: &str = "weir.groupId";

/// Reads `adds` back from what a state commit recorded (one JSON `add` action each).
pub(crate) fn adds_from_records(records: &[String]) -> Result<Vec<Add>, SinkError> {
    records
        .iter()
        .map(|r| {
            serde_json::from_str::<Add>(r).map_err(|e| {
                SinkError::Options(format!(
                    "a committed step's Delta file record cannot be read ({e}): the state directory holds another sink's files"
                ))
            })
        })
        .collect()
}

/// What a state commit records of `adds`: one JSON `add` action each.
pub(crate) fn records_of(adds: &[Add]) -> Result<Vec<String>, SinkError> {
    adds.iter()
        .map(|a| {
            serde_json::to_string(a)
                .map_err(|e| SinkError::Options(format!("cannot record a Delta add action: {e}")))
        })
        .collect()
}

fn now_ms() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| i64::try_from(d.as_millis()).unwrap_or(i64::MAX))
}

fn delta_error<'a>(sink: &'a str, url: &'a Url) -> impl Fn(DeltaTableError) -> SinkError + 'a {
    move |source| SinkError::Delta {
        sink: sink.to_string(),
        table: url.to_string(),
        source: Box::new(source),
    }
}

/// A path that holds files but no Delta log is not a table weir may take over.
async fn refuse_foreign_files(sink: &str, location: &Location) -> Result<(), SinkError> {
    let prefix =
        ObjectPath::from_url_path(location.url.path()).map_err(|e| SinkError::Storage {
            path: location.url.to_string(),
            reason: e.to_string(),
        })?;
    let listing = location
        .store
        .list_with_delimiter(Some(&prefix))
        .await
        .map_err(|e| SinkError::Storage {
            path: location.url.to_string(),
            reason: e.to_string(),
        })?;
    let foreign: Vec<String> = listing
        .objects
        .iter()
        .map(|o| o.location.to_string())
        .chain(listing.common_prefixes.iter().map(|p| format!("{p}/")))
        .filter(|p| !p.ends_with("_delta_log/"))
        .take(3)
        .collect();
    if foreign.is_empty() {
        return Ok(());
    }
    Err(SinkError::Options(format!(
        "sink {sink}: {} is not a Delta table (no _delta_log/) but holds {}{}; write the table to an empty path",
        location.url,
        foreign.join(", "),
        if foreign.len() == 3 { ", ..." } else { "" }
    )))
}

/// Checks an existing table's columns against the query's: the same names and types, or (with
/// `add_columns`) the query's new columns added to the table as nullable.
async fn check_schema(
    sink: &str,
    url: &Url,
    table: DeltaTable,
    wanted: &StructType,
    add_columns: bool,
) -> Result<DeltaTable, SinkError> {
    let err = delta_error(sink, url);
    let have = table.snapshot().map_err(&err)?.schema();
    let mut differences = Vec::new();
    let mut new_columns: Vec<StructField> = Vec::new();
    for f in wanted.fields() {
        match have.field(f.name()) {
            None => new_columns.push(StructField::nullable(f.name(), f.data_type().clone())),
            Some(h) if h.data_type() != f.data_type() => differences.push(format!(
                "'{}' is {} in the table, {} in the query",
                f.name(),
                h.data_type(),
                f.data_type()
            )),
            Some(_) => {}
        }
    }
    for h in have.fields() {
        if wanted.field(h.name()).is_none() && !h.is_nullable() {
            differences.push(format!(
                "'{}' ({}, not null) is in the table, not in the query",
                h.name(),
                h.data_type()
            ));
        }
    }
    if !add_columns {
        differences.extend(new_columns.iter().map(|f| {
            format!(
                "'{}' ({}) is in the query, not in the table",
                f.name(),
                f.data_type()
            )
        }));
    }
    if !differences.is_empty() {
        return Err(SinkError::Options(format!(
            "sink {sink}: the table {url} has other columns than the query: {}{}",
            differences.join("; "),
            if add_columns {
                ""
            } else {
                " (new columns can be added with 'schema.evolution' = 'add_columns')"
            }
        )));
    }
    if new_columns.is_empty() {
        return Ok(table);
    }
    let names: Vec<String> = new_columns.iter().map(|f| f.name().to_string()).collect();
    let table = table
        .add_columns()
        .with_fields(new_columns)
        .await
        .map_err(&err)?;
    tracing::info!(sink, table = %url, columns = %names.join(", "), "added columns to the Delta table");
    Ok(table)
}

/// delta-rs finds the log store of a table by its URL's scheme and knows only `file://` and
/// `memory://` without its cloud crates (which would bring the AWS SDK). weir hands it the
/// object store itself, so the default log store (commits by conditional put) serves every
/// scheme weir opens.
fn register_log_store() {
    static ONCE: Once = Once::new();
    ONCE.call_once(|| {
        for s in ["s3", "s3a", "gs", "az", "abfs", "abfss", "azure"] {
            if let Ok(url) = Url::parse(&format!("{s}://")) {
                logstore_factories().insert(url, Arc::new(ConditionalPutLogStore));
            }
        }
    });
}

/// The default log store over weir's own object store: a commit is a put that fails if the
/// version exists (S3's `If-None-Match`, GCS's and Azure's preconditions).
struct ConditionalPutLogStore;

impl LogStoreFactory for ConditionalPutLogStore {
    fn with_options(
        &self,
        prefixed_store: ObjectStoreRef,
        root_store: ObjectStoreRef,
        location: &Url,
        options: &StorageConfig,
    ) -> deltalake_core::DeltaResult<Arc<dyn LogStore>> {
        Ok(default_logstore(
            prefixed_store,
            root_store,
            location,
            options,
        ))
    }
}

/// The `delta` sink as an exactly-once pipeline drives it: the data files are written on a
/// thread of their own; the commits on the pipeline's thread, waiting for delta-rs's futures on
/// the engine's runtime.
pub(crate) struct DeltaSteps {
    table: DeltaSink,
    files: DataFileWriters,
    runtime: tokio::runtime::Handle,
    metrics: Arc<crate::metrics::SinkMetrics>,
    /// The `add` actions of the step last sealed, kept for its publication.
    sealed: Option<(u64, Vec<Add>)>,
}

impl DeltaSteps {
    /// Drives `table` from a blocking thread, waiting on `runtime`, and starts the thread that
    /// writes its data `files`; up to `'sink.parallelism'` threads write them once one falls
    /// behind. Not given, half the `cores`: the reader, the dedup and the state commits take
    /// cores of their own, and where every core is busy a full queue says only that (on 2
    /// cores a second writer added CPU and no speed).
    pub(crate) fn new(
        table: DeltaSink,
        files: DataFiles,
        runtime: tokio::runtime::Handle,
        metrics: Arc<crate::metrics::SinkMetrics>,
        cores: usize,
    ) -> Result<Self, SinkError> {
        let writers = table.settings.parallelism.unwrap_or(cores / 2).max(1);
        let spare = (1..writers)
            .map(|_| table.data_files())
            .collect::<Result<Vec<_>, _>>()?;
        Ok(Self {
            files: DataFileWriters::start(files, spare, runtime.clone())?,
            table,
            runtime,
            metrics,
            sealed: None,
        })
    }
}

impl DeltaSteps {
    /// Drops the step being written and the one sealed but not committed (a fenced step): their
    /// data files stay unreferenced (no reader sees them; `VACUUM` removes them).
    fn discard_step(&mut self) -> Result<(), SinkError> {
        self.sealed = None;
        let dropped = self.files.seal()?;
        if !dropped.is_empty() {
            tracing::debug!(
                sink = %self.table.sink,
                files = dropped.len(),
                "dropped the data files of a step that was not committed"
            );
        }
        Ok(())
    }
}

impl super::StepSink for DeltaSteps {
    fn name(&self) -> &str {
        &self.table.sink
    }

    fn metrics(&self) -> &crate::metrics::SinkMetrics {
        &self.metrics
    }

    fn write(&mut self, _step: u64, batch: &RecordBatch) -> Result<(), SinkError> {
        self.files.write(batch)
    }

    fn seal(&mut self, step: u64) -> Result<Vec<String>, SinkError> {
        let adds = self.files.seal()?;
        let bytes: i64 = adds.iter().map(|a| a.size).sum();
        self.metrics.bytes.fetch_add(
            u64::try_from(bytes).unwrap_or(0),
            std::sync::atomic::Ordering::Relaxed,
        );
        self.metrics
            .files
            .fetch_add(adds.len() as u64, std::sync::atomic::Ordering::Relaxed);
        let records = records_of(&adds)?;
        self.sealed = Some((step, adds));
        Ok(records)
    }

    fn publishes(&self) -> bool {
        true
    }

    fn publish(&mut self, checkpoint: &weir_dedup::Checkpoint) -> Result<(), SinkError> {
        let adds = match self.sealed.take() {
            Some((step, adds)) if step == checkpoint.step => adds,
            _ => adds_from_records(&checkpoint.files)?,
        };
        let files = adds.len();
        let started = std::time::Instant::now();
        let version = self.runtime.block_on(self.table.commit(
            checkpoint.step,
            &checkpoint.positions,
            adds,
        ))?;
        // One line a step (at debug): what the commit-latency benchmark reads.
        tracing::debug!(
            sink = %self.table.sink,
            step = checkpoint.step,
            version,
            files,
            micros = started.elapsed().as_micros() as u64,
            "Delta commit"
        );
        let started = std::time::Instant::now();
        // The step is committed: a compaction that fails (another OPTIMIZE removed the same
        // files first, storage trouble) is retried at the next interval, not a reason to stop.
        match self.runtime.block_on(self.table.after_commit(version)) {
            Err(e) => tracing::warn!(
                sink = %self.table.sink,
                step = checkpoint.step,
                "compaction after step {} failed, the step itself is committed; it is tried again after the next 'compaction.interval' commits: {e}",
                checkpoint.step
            ),
            Ok(None) => {}
            // Another writer compacted the same files first.
            Ok(Some(done)) if done.files_removed == 0 => {}
            Ok(Some(done)) => tracing::info!(
                sink = %self.table.sink,
                table = %self.table.url,
                version = done.version,
                removed = done.files_removed,
                added = done.files_added,
                bytes_removed = done.bytes_removed,
                bytes_added = done.bytes_added,
                micros = started.elapsed().as_micros() as u64,
                "compacted the table's small files"
            ),
        }
        Ok(())
    }
}

impl DeltaSink {
    /// Brings the table level with the state's last committed step `checkpoint`: when the table
    /// is one step behind (a stop between the state commit and the table commit), commits that
    /// step's recorded files; when it is level, nothing. Any other gap is an error naming both.
    /// Returns the step settled, if any.
    pub(crate) async fn settle(
        &mut self,
        checkpoint: &weir_dedup::Checkpoint,
        state_dir: &std::path::Path,
    ) -> Result<Option<u64>, SinkError> {
        let table = self.progress().await?;
        let state = checkpoint.step;
        if table.step == state {
            return Ok(None);
        }
        if table.step + 1 == state {
            let adds = adds_from_records(&checkpoint.files)?;
            self.commit(state, &checkpoint.positions, adds).await?;
            return Ok(Some(state));
        }
        if table.step > state {
            return Err(SinkError::Fenced {
                sink: self.sink.clone(),
                table: self.url.to_string(),
                app_id: self.settings.app_id.clone(),
                table_step: table.step,
                step: state + 1,
            });
        }
        Err(SinkError::Options(format!(
            "sink {}: the state at {} has committed step {state}, but the Delta table {} holds only step {} of writer '{}': steps in between are missing from the table (was it replaced or restored?). Write to a new table, or start with a new state directory",
            self.sink,
            state_dir.display(),
            self.url,
            table.step,
            self.settings.app_id
        )))
    }
}

impl DeltaSink {
    /// Where a pipeline without a state directory resumes: the last step this writer committed
    /// to the table and the next offset of every partition, as the table's `txn` versions say
    /// (the partitions' names come from that step's `commitInfo`; each is checked against its
    /// `txn` version). Step 0 and no positions when the writer never committed.
    pub(crate) async fn resume(&mut self) -> Result<weir_dedup::Checkpoint, SinkError> {
        let progress = self.progress().await?;
        let app = self.settings.app_id.clone();
        let err = delta_error(&self.sink, &self.url);
        let mut found = None;
        {
            let mut history = self.table.history(None);
            while let Some(info) = history.next().await {
                let info = info.map_err(&err)?;
                let by_app = info.info.get(META_APP).and_then(|v| v.as_str()) == Some(app.as_str());
                if let (true, Some(group)) =
                    (by_app, info.info.get(META_GROUP).and_then(|v| v.as_str()))
                {
                    // A group's members keep no common step: positions are per partition.
                    return Err(SinkError::Options(format!(
                        "sink {}: the Delta table {} is written by the members of consumer group '{group}' as writer '{app}'; add 'group.id' = '{group}' to the source to join them, or write with another 'app.id'",
                        self.sink, self.url
                    )));
                }
                if by_app && progress.step == 0 {
                    // Its commits are in the log but its txn is gone (expired by the table's
                    // 'delta.setTransactionRetentionDuration'?): starting over would double
                    // every row.
                    return Err(SinkError::Options(format!(
                        "sink {}: the Delta table {} holds commits of writer '{app}' but no txn version for it (expired by 'delta.setTransactionRetentionDuration'?), so where to resume is unknown; give the source a 'state.dir', or write to a new table or with a new 'app.id'",
                        self.sink, self.url
                    )));
                }
                let ours = by_app
                    && info.info.get(META_STEP).and_then(serde_json::Value::as_u64)
                        == Some(progress.step);
                if ours {
                    found = info
                        .info
                        .get(META_POSITIONS)
                        .and_then(|v| v.as_object())
                        .cloned();
                    break;
                }
            }
        }
        if progress.step == 0 {
            return Ok(weir_dedup::Checkpoint::default());
        }
        let Some(names) = found else {
            return Err(SinkError::Options(format!(
                "sink {}: the Delta table {} is at step {} of writer '{app}', but its log holds no commit of that step naming its partitions (older than the table's log retention, or written with 'state.dir' or by an older weir), so where to resume is unknown. Give the source a 'state.dir', or write to a new table",
                self.sink, self.url, progress.step
            )));
        };
        let snapshot = self.table.snapshot().map_err(&err)?;
        let mut positions = Vec::with_capacity(names.len());
        for (name, recorded) in names {
            let txn = snapshot
                .transaction_version(self.table.log_store().as_ref(), format!("{app}/{name}"))
                .await
                .map_err(&err)?;
            match (txn, recorded.as_i64()) {
                (Some(next), Some(r)) if next == r => positions.push((name, next)),
                _ => {
                    return Err(SinkError::Options(format!(
                        "sink {}: in the Delta table {}, the position of '{name}' that step {} of writer '{app}' recorded ({recorded}) differs from its txn version ({txn:?}); another writer uses the app id '{app}'? Set a distinct 'app.id'",
                        self.sink, self.url, progress.step
                    )))
                }
            }
        }
        positions.sort();
        Ok(weir_dedup::Checkpoint {
            step: progress.step,
            positions,
            ..weir_dedup::Checkpoint::default()
        })
    }
}

/// The table keeps each partition's position as a `txn` version, checked at every commit.
impl super::GroupSink for DeltaSteps {
    /// See [`DeltaSink::take_partitions`].
    fn take_partitions(
        &mut self,
        group_id: &str,
        partitions: &[String],
    ) -> Result<Vec<(String, i64)>, SinkError> {
        self.runtime
            .block_on(self.table.take_partitions(group_id, partitions))
    }

    fn publish_as(
        &mut self,
        checkpoint: &weir_dedup::Checkpoint,
        _offsets: Vec<(weir_kafka::TopicPartition, i64)>,
        _member: &weir_kafka::GroupMetadata,
    ) -> Result<(), SinkError> {
        super::StepSink::publish(self, checkpoint)
    }

    fn discard(&mut self) -> Result<(), SinkError> {
        self.discard_step()
    }

    fn is_fenced(&self, e: &SinkError) -> bool {
        matches!(e, SinkError::PartitionFenced(_))
    }
}
