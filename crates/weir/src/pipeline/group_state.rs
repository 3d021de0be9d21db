//! The dedup keys of a consumer group's partitions, kept where every member reads them: key
//! files under the source's `'state.dir'` (object storage, or a directory every member can
//! reach), one folder a partition: `<state.dir>/<topic>/<partition>/<to>-<writer>.keys`.
//!
//! Each step writes, for each of its partitions that saw a new key, a file of those keys named
//! by the offset the step read the partition to, before the step commits to the sink. A
//! member that takes a partition up reads every file whose offset is at most the one the sink
//! holds for it: together they hold exactly the keys of the records before that offset (see
//! `weir_dedup::PartitionKeys`). Files past it are a step that never committed, or one not
//! committed yet: they are left for the day the sink's offset passes them, which counts them
//! in (their keys are of records before their offset too). A restore of more than one file
//! writes the partition's keys back as one file and deletes the files it covers, so the next
//! restore reads one file.
//!
//! Why files beside the output rather than a compacted changelog topic, as Kafka Streams keeps:
//! a `delta` sink's members need no Kafka topic they may not create, the files are where the
//! table is (its store, its credentials), and a restore reads one file at the speed of the store
//! rather than replaying a topic's records. The cost is a PUT a partition for each step that
//! saw new keys.

use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::Instant;

use arrow::array::RecordBatch;
use arrow::compute::filter_record_batch;
use futures::{StreamExt as _, TryStreamExt as _};
use object_store::path::Path;
use object_store::{ObjectStore, ObjectStoreExt as _, PutPayload};
use weir_codec::Options;
use weir_dedup::{DedupKey, PartitionKeys};

use crate::error::{SourceError, SourceErrorKind};
use crate::metrics::GroupMetrics;

/// How many key files are read or written at once.
const CONCURRENCY: usize = 16;

/// Where the partitions' key files are.
pub(crate) struct GroupStateDir {
    store: Arc<dyn ObjectStore>,
    root: Path,
    /// The location as the user wrote it, for messages.
    location: String,
    /// Names this process's files apart from other writers' of the same offset.
    writer: String,
}

/// A partition's keys, held while the member reads the partition.
struct Held {
    keys: PartitionKeys,
    /// The offset the keys are exact at: the one last committed (or taken up at).
    at: Option<i64>,
}

/// The dedup keys of the partitions a member reads, and where they are kept.
pub(crate) struct GroupKeys {
    dir: GroupStateDir,
    key: DedupKey,
    source: String,
    topic: String,
    /// By partition id.
    held: Vec<Option<Held>>,
    metrics: Arc<GroupMetrics>,
}

fn failed(source: &str, location: &str, what: String, e: impl std::fmt::Display) -> SourceError {
    SourceError::new(
        source,
        SourceErrorKind::Thread(format!(
            "the partitions' state in '{location}': cannot {what}: {e}"
        )),
    )
}

impl GroupStateDir {
    /// Opens `location` (a local path or an object-storage URL, with `options`' credentials)
    /// for the source `source` whose dedup key is `key`. The first member writes the key's
    /// definition there; a member with another definition is refused, since its keys would not
    /// match the others'.
    pub(crate) fn open(
        source: &str,
        location: &str,
        options: &Options,
        key: &DedupKey,
        writer: String,
    ) -> Result<Self, SourceError> {
        let fail =
            |what: &str, e: &dyn std::fmt::Display| failed(source, location, what.to_string(), e);
        let place = crate::sink::storage::open_location(location, options)
            .map_err(|e| fail("open it", &e))?;
        let root = Path::from_url_path(place.url.path()).map_err(|e| fail("open it", &e))?;
        let dir = Self {
            store: place.store,
            root,
            location: location.to_string(),
            writer,
        };
        let definition = format!("{}\n", key.describe());
        let at = dir.root.clone().join("dedup.key");
        let store = Arc::clone(&dir.store);
        let found = crate::storage::wait_for(async move {
            match store.get(&at).await {
                Ok(got) => got.bytes().await.map(|b| Some(b.to_vec())),
                Err(object_store::Error::NotFound { .. }) => {
                    store.put(&at, PutPayload::from(definition.clone())).await?;
                    Ok(None)
                }
                Err(e) => Err(e),
            }
        })
        .ok_or_else(|| fail("reach it", &"the storage runtime did not start"))?
        .map_err(|e| fail("read its dedup key definition", &e))?;
        if let Some(found) = found {
            let found = String::from_utf8_lossy(&found);
            let now = key.describe();
            if found.trim_end() != now {
                return Err(SourceError::new(
                    source,
                    SourceErrorKind::Option(weir_codec::OptionError::Conflict(format!(
                        "'state.dir' '{location}' holds dedup keys made by '{}', and this \
                         source makes them by '{now}': every member of a group must declare the \
                         same dedup key, and another key needs another 'state.dir'",
                        found.trim_end()
                    ))),
                ));
            }
        }
        Ok(dir)
    }

    fn folder(&self, topic: &str, partition: i32) -> Path {
        self.root.clone().join(topic).join(partition.to_string())
    }
}

/// What a restore of a partition read.
#[derive(Debug, Default, Clone, Copy)]
pub(crate) struct Restored {
    pub(crate) files: usize,
    pub(crate) bytes: u64,
    pub(crate) keys: usize,
}

impl GroupKeys {
    /// No partition held yet.
    pub(crate) fn new(
        dir: GroupStateDir,
        key: DedupKey,
        source: &str,
        topic: &str,
        metrics: Arc<GroupMetrics>,
    ) -> Self {
        Self {
            dir,
            key,
            source: source.to_string(),
            topic: topic.to_string(),
            held: Vec::new(),
            metrics,
        }
    }

    fn fail(&self, what: String, e: impl std::fmt::Display) -> SourceError {
        failed(&self.source, &self.dir.location, what, e)
    }

    /// Holds the keys of exactly `partitions`, whose committed offsets the sink gave as
    /// `positions` (`kafka/<topic>/<p>` -> next offset): a partition held already at its
    /// committed offset keeps its keys, any other is restored from its key files (none when
    /// the sink holds no offset for it).
    pub(crate) fn take_up(
        &mut self,
        partitions: &[i32],
        positions: &[(String, i64)],
    ) -> Result<(), SourceError> {
        let prefix = format!("kafka/{}/", self.topic);
        let committed = |p: i32| {
            positions
                .iter()
                .find(|(n, _)| n.strip_prefix(&prefix) == Some(p.to_string().as_str()))
                .map(|(_, o)| *o)
        };
        for (p, slot) in self.held.iter_mut().enumerate() {
            if !partitions.contains(&(p as i32)) {
                *slot = None;
            }
        }
        for &p in partitions {
            let i = usize::try_from(p)
                .map_err(|_| self.fail(format!("hold partition {p}"), "a negative partition id"))?;
            if self.held.len() <= i {
                self.held.resize_with(i + 1, || None);
            }
            let c = committed(p);
            if matches!(&self.held[i], Some(h) if h.at == c) {
                continue;
            }
            let mut keys = PartitionKeys::new(&self.key);
            if let Some(c) = c {
                let started = Instant::now();
                let r = self.restore(p, c, &mut keys)?;
                let took = started.elapsed();
                self.metrics
                    .restore_micros
                    .fetch_add(took.as_micros() as u64, Ordering::Relaxed);
                self.metrics
                    .restored_bytes
                    .fetch_add(r.bytes, Ordering::Relaxed);
                self.metrics.restores.fetch_add(1, Ordering::Relaxed);
                tracing::info!(
                    source = %self.source,
                    partition = p,
                    offset = c,
                    keys = r.keys,
                    files = r.files,
                    bytes = r.bytes,
                    ms = took.as_millis() as u64,
                    "restored the partition's dedup keys"
                );
            }
            self.held[i] = Some(Held { keys, at: c });
        }
        self.count_keys();
        Ok(())
    }

    fn count_keys(&self) {
        let n: usize = self.held.iter().flatten().map(|h| h.keys.len()).sum();
        self.metrics.state_keys.store(n as i64, Ordering::Relaxed);
    }

    /// Forgets every partition's keys (a step was dropped: its keys are in memory and not in
    /// the sink), so the next take-up restores them all.
    pub(crate) fn forget(&mut self) {
        self.held.clear();
    }

    /// Drops the rows of `batch` (all from `partition`) whose key the partition has seen.
    pub(crate) fn dedup(
        &mut self,
        batch: RecordBatch,
        partition: usize,
    ) -> Result<RecordBatch, SourceError> {
        let Some(Some(held)) = self.held.get_mut(partition) else {
            return Err(self.fail(
                format!("dedup rows of partition {partition}"),
                "the member does not hold it; this is a bug in weir",
            ));
        };
        match held
            .keys
            .dedup(&batch)
            .map_err(|e| SourceError::new(&self.source, e))?
        {
            None => Ok(batch),
            Some(mask) => filter_record_batch(&batch, &mask).map_err(|e| {
                SourceError::new(
                    &self.source,
                    SourceErrorKind::Thread(format!("cannot drop the duplicate rows: {e}")),
                )
            }),
        }
    }

    /// Writes the key files of the step that ends with the partitions at `positions`, and
    /// waits until they are stored: the step may commit to the sink after this.
    pub(crate) fn commit(&mut self, positions: &[(String, i64)]) -> Result<(), SourceError> {
        let prefix = format!("kafka/{}/", self.topic);
        let mut files = Vec::new();
        for (name, next) in positions {
            let Some(p) = name
                .strip_prefix(&prefix)
                .and_then(|p| p.parse::<usize>().ok())
            else {
                continue;
            };
            let Some(Some(held)) = self.held.get_mut(p) else {
                continue;
            };
            if let Some(file) = held.keys.take_step() {
                let path = self
                    .dir
                    .folder(&self.topic, p as i32)
                    .join(format!("{next:020}-{}.keys", self.dir.writer));
                files.push((path, file));
            }
            held.at = Some(*next);
        }
        if files.is_empty() {
            self.count_keys();
            return Ok(());
        }
        let store = Arc::clone(&self.dir.store);
        let n = files.len();
        crate::storage::wait_for(async move {
            futures::stream::iter(files)
                .map(|(path, file)| {
                    let store = Arc::clone(&store);
                    async move { store.put(&path, PutPayload::from(file)).await.map(|_| ()) }
                })
                .buffer_unordered(CONCURRENCY)
                .try_collect::<Vec<()>>()
                .await
        })
        .ok_or_else(|| {
            self.fail(
                format!("write {n} key files"),
                "the storage runtime did not start",
            )
        })?
        .map_err(|e| self.fail(format!("write the step's key files ({n})"), e))?;
        self.count_keys();
        Ok(())
    }

    /// Reads into `keys` the key files of `partition` up to offset `committed`, then writes
    /// them back as one file and deletes those it covers.
    fn restore(
        &self,
        partition: i32,
        committed: i64,
        keys: &mut PartitionKeys,
    ) -> Result<Restored, SourceError> {
        let folder = self.dir.folder(&self.topic, partition);
        let store = Arc::clone(&self.dir.store);
        // A file listed may be deleted before it is read, by another member compacting the
        // same files into a snapshot it wrote first: listing again finds that snapshot.
        for _ in 0..3 {
            let (store, folder) = (Arc::clone(&store), folder.clone());
            let read = crate::storage::wait_for(async move {
                let listed: Vec<_> = store.list(Some(&folder)).try_collect().await?;
                let covered: Vec<Path> = listed
                    .into_iter()
                    .map(|m| m.location)
                    .filter(|path| offset_of(path).is_some_and(|to| to <= committed))
                    .collect();
                let bodies = futures::stream::iter(covered.clone())
                    .map(|path| {
                        let store = Arc::clone(&store);
                        async move { store.get(&path).await?.bytes().await }
                    })
                    .buffered(CONCURRENCY)
                    .try_collect::<Vec<_>>()
                    .await;
                Ok::<_, object_store::Error>((covered, bodies))
            })
            .ok_or_else(|| self.fail("read key files".into(), "the storage runtime did not start"))?
            .map_err(|e| self.fail(format!("list the key files of partition {partition}"), e))?;
            let (covered, bodies) = read;
            let bodies = match bodies {
                Ok(b) => b,
                Err(object_store::Error::NotFound { .. }) => continue,
                Err(e) => {
                    return Err(self.fail(format!("read the key files of partition {partition}"), e))
                }
            };
            let mut restored = Restored {
                files: covered.len(),
                ..Restored::default()
            };
            for (path, body) in covered.iter().zip(&bodies) {
                restored.bytes += body.len() as u64;
                keys.restore(body)
                    .map_err(|e| self.fail(format!("read {path}"), e))?;
            }
            restored.keys = keys.len();
            if covered.len() > 1 {
                self.compact(partition, committed, keys, covered);
            }
            return Ok(restored);
        }
        Err(self.fail(
            format!("read the key files of partition {partition}"),
            "they were deleted while read, three times",
        ))
    }

    /// Writes `keys` (the partition's at `committed`) as one file and deletes the files
    /// `covered` it replaces. Best effort: a failure leaves the files, which are still right.
    fn compact(&self, partition: i32, committed: i64, keys: &PartitionKeys, covered: Vec<Path>) {
        let snapshot = self
            .dir
            .folder(&self.topic, partition)
            .join(format!("{committed:020}-{}.keys", self.dir.writer));
        let file = keys.snapshot();
        let store = Arc::clone(&self.dir.store);
        let done = crate::storage::wait_for(async move {
            store.put(&snapshot, PutPayload::from(file)).await?;
            for path in covered.iter().filter(|p| **p != snapshot) {
                match store.delete(path).await {
                    Ok(()) | Err(object_store::Error::NotFound { .. }) => {}
                    Err(e) => return Err(e),
                }
            }
            Ok(())
        });
        if let Some(Err(e)) = done {
            tracing::warn!(source = %self.source, partition, "cannot write the partition's keys back as one file (the files stay, and are read as they are): {e}");
        }
    }
}

/// The offset a key file's name gives (`<to>-<writer>.keys`); `None` for anything else.
fn offset_of(path: &Path) -> Option<i64> {
    let name = path.filename()?.strip_suffix(".keys")?;
    name.split_once('-')?.0.parse().ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn key_file_names() {
        let p = Path::from("state/quotes/3/00000000000000001200-abc-12.keys");
        assert_eq!(offset_of(&p), Some(1200));
        assert_eq!(offset_of(&Path::from("state/dedup.key")), None);
        assert_eq!(offset_of(&Path::from("state/quotes/3/x-y.keys")), None);
    }
}
