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
//! restore reads one file; a member that holds a partition long writes every key as one file
//! in place of the step's once the partition has [`SNAPSHOT_EVERY`] files, and deletes the
//! files it replaces once that step is committed.
//!
//! `<state.dir>/group` records the consumer group, the topic and the dedup key the files are
//! of: file names are offsets in that topic, and keys are that key's, so another group, topic
//! or key is refused.
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
use object_store::{ObjectStore, ObjectStoreExt as _, PutMode, PutOptions, PutPayload};
use weir_codec::Options;
use weir_dedup::{DedupKey, PartitionKeys};

use crate::error::{SourceError, SourceErrorKind};
use crate::metrics::GroupMetrics;

/// How many key files are read or written at once.
const CONCURRENCY: usize = 16;

/// A member holding a partition writes all its keys as one file, in place of the step's, once
/// the partition has this many files: a restore then reads few files however long a member
/// held the partition.
const SNAPSHOT_EVERY: usize = 64;

/// Where the partitions' key files (and window files, `super::group_windows`) are.
#[derive(Clone)]
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
    /// The partition's key files this member knows hold its keys up to `at`.
    files: Vec<Path>,
    /// Files a snapshot written by the last step replaces: deleted once that step is known
    /// committed (at the next step), since until then a restore at the offset before it needs
    /// them.
    replaced: Vec<Path>,
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
    /// for the source `source`, reading `topic` in consumer group `group_id`, whose dedup key,
    /// if it has one, is `key`. The first member writes what the directory holds state of
    /// (`<state.dir>/group`: the group, the topic and the key); a member of another group or
    /// topic, or with another key, is refused: its offsets are not the ones the files are named
    /// by, or its keys would not match the others'.
    pub(crate) fn open(
        source: &str,
        location: &str,
        options: &Options,
        group_id: &str,
        topic: &str,
        key: Option<&DedupKey>,
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
            writer: writer_token(),
        };
        let definition = Definition {
            group_id: group_id.to_string(),
            topic: topic.to_string(),
            key: key.map_or_else(|| "none".to_string(), DedupKey::describe),
        };
        let text = definition.text();
        let at = dir.root.clone().join("group");
        let store = Arc::clone(&dir.store);
        let found = crate::storage::wait_for(async move {
            // Created only if absent: of two first members, one writes it and the other reads it.
            let create = PutOptions {
                mode: PutMode::Create,
                ..PutOptions::default()
            };
            match store
                .put_opts(&at, PutPayload::from(text.clone()), create)
                .await
            {
                Ok(_) => Ok(None),
                Err(object_store::Error::NotImplemented { .. }) => {
                    // A store without conditional writes: read first, write if absent.
                    match store.get(&at).await {
                        Ok(got) => got.bytes().await.map(|b| Some(b.to_vec())),
                        Err(object_store::Error::NotFound { .. }) => {
                            store.put(&at, PutPayload::from(text)).await.map(|_| None)
                        }
                        Err(e) => Err(e),
                    }
                }
                Err(object_store::Error::AlreadyExists { .. }) => store
                    .get(&at)
                    .await?
                    .bytes()
                    .await
                    .map(|b| Some(b.to_vec())),
                Err(e) => Err(e),
            }
        })
        .ok_or_else(|| fail("reach it", &"the storage runtime did not start"))?
        .map_err(|e| fail("read what it holds state of", &e))?;
        if let Some(found) = found {
            let found = String::from_utf8_lossy(&found);
            if let Some((what, theirs, ours)) = definition.differs(&found) {
                return Err(SourceError::new(
                    source,
                    SourceErrorKind::Option(weir_codec::OptionError::Conflict(format!(
                        "'state.dir' '{location}' holds the state of {what} '{theirs}', and this \
                         source's is '{ours}': a 'state.dir' belongs to one consumer group \
                         reading one topic, and every member must declare the same dedup key; \
                         give this source another 'state.dir'"
                    ))),
                ));
            }
        }
        Ok(dir)
    }

    /// The folder of `partition`'s files.
    pub(crate) fn folder(&self, topic: &str, partition: i32) -> Path {
        self.root.clone().join(topic).join(partition.to_string())
    }

    /// Names this process's files apart from other writers' of the same offset.
    pub(crate) fn writer(&self) -> &str {
        &self.writer
    }

    /// The location as the user wrote it, for messages.
    pub(crate) fn location(&self) -> &str {
        &self.location
    }

    /// The store the files are in.
    pub(crate) fn store(&self) -> &Arc<dyn ObjectStore> {
        &self.store
    }

    /// Stores `files` and deletes `stale` (a file already gone counts as deleted), at most
    /// [`CONCURRENCY`] requests at once, and waits until all are done.
    pub(crate) fn put_and_delete(
        &self,
        files: Vec<(Path, Vec<u8>)>,
        stale: Vec<Path>,
    ) -> Result<(), object_store::Error> {
        if files.is_empty() && stale.is_empty() {
            return Ok(());
        }
        let store = Arc::clone(&self.store);
        crate::storage::wait_for(async move {
            let puts = futures::stream::iter(files)
                .map(|(path, file)| {
                    let store = Arc::clone(&store);
                    async move { store.put(&path, PutPayload::from(file)).await.map(|_| ()) }
                })
                .buffer_unordered(CONCURRENCY)
                .try_collect::<Vec<()>>();
            let deletes = futures::stream::iter(stale)
                .map(|path| {
                    let store = Arc::clone(&store);
                    async move {
                        match store.delete(&path).await {
                            Ok(()) | Err(object_store::Error::NotFound { .. }) => Ok(()),
                            Err(e) => Err(e),
                        }
                    }
                })
                .buffer_unordered(CONCURRENCY)
                .try_collect::<Vec<()>>();
            futures::try_join!(puts, deletes).map(|_| ())
        })
        .unwrap_or_else(|| {
            Err(object_store::Error::Generic {
                store: "state.dir",
                source: "the storage runtime did not start".into(),
            })
        })
    }
}

/// What a group's `'state.dir'` holds state of, as `<state.dir>/group` records it.
struct Definition {
    group_id: String,
    topic: String,
    /// The dedup key as [`DedupKey::describe`] gives it, or `none`.
    key: String,
}

impl Definition {
    fn text(&self) -> String {
        format!(
            "group.id = {}\ntopic = {}\ndedup.key = {}\n",
            self.group_id, self.topic, self.key
        )
    }

    /// The first thing `found` (a file's text) records otherwise, as (what, found, this).
    fn differs(&self, found: &str) -> Option<(&'static str, String, String)> {
        let value = |name: &str| {
            found.lines().find_map(|l| {
                let (k, v) = l.split_once(" = ")?;
                (k == name).then(|| v.to_string())
            })
        };
        [
            ("consumer group", "group.id", &self.group_id),
            ("topic", "topic", &self.topic),
            ("dedup keys made by", "dedup.key", &self.key),
        ]
        .into_iter()
        .find_map(|(what, name, ours)| {
            let theirs = value(name).unwrap_or_default();
            (theirs != *ours).then(|| (what, theirs, ours.clone()))
        })
    }
}

/// A name for this process's files, apart from every other writer's: a random 64-bit number
/// and the process id. (A member's id will not do: a classic member has none until it joins.)
fn writer_token() -> String {
    use std::hash::{BuildHasher as _, Hasher as _};
    let mut h = std::collections::hash_map::RandomState::new().build_hasher();
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_nanos());
    h.write_u128(nanos);
    h.write_u32(std::process::id());
    format!("{:016x}{:x}", h.finish(), std::process::id())
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
        let slots = hold_only(&mut self.held, partitions)
            .map_err(|p| self.fail(format!("hold partition {p}"), "a negative partition id"))?;
        for (&p, i) in partitions.iter().zip(slots) {
            let c = committed_offset(positions, &self.topic, p);
            if matches!(&self.held[i], Some(h) if h.at == c) {
                continue;
            }
            let mut keys = PartitionKeys::new(&self.key);
            let mut files = Vec::new();
            if let Some(c) = c {
                let started = Instant::now();
                let (r, known) = self.restore(p, c, &mut keys)?;
                files = known;
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
            self.held[i] = Some(Held {
                keys,
                at: c,
                files,
                replaced: Vec::new(),
            });
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
        let mask = held
            .keys
            .dedup(&batch)
            .map_err(|e| SourceError::new(&self.source, e))?;
        // One key a batch, the first new one, is looked for among the other partitions held:
        // dedup per partition is exact only if the producer sends each key to one partition.
        let first_new = match &mask {
            None => (batch.num_rows() > 0).then_some(0),
            Some(m) => m.values().set_indices().next(),
        };
        if let (Some(row), Some(Some(this))) = (first_new, self.held.get(partition)) {
            let other = self.held.iter().enumerate().find_map(|(q, h)| {
                let h = h.as_ref().filter(|_| q != partition)?;
                this.keys.row_key_in(row, &h.keys).then_some(q)
            });
            if let Some(q) = other {
                let before = self.metrics.split_keys.fetch_add(1, Ordering::Relaxed);
                if before == 0 {
                    tracing::warn!(
                        source = %self.source,
                        partition,
                        other = q,
                        "a dedup key of this partition was seen in another partition too: the \
                         producer does not send each key to one partition, so a repeat in \
                         another partition is not dropped. Partition the topic by the dedup key \
                         (the Kafka key); weir_source_group_state_split_keys_total counts such keys"
                    );
                }
            }
        }
        match mask {
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
        let mut files = Vec::new();
        let mut stale = Vec::new();
        for (p, next) in partition_positions(positions, &self.topic) {
            let path = self
                .dir
                .folder(&self.topic, p as i32)
                .join(format!("{next:020}-{}.keys", self.dir.writer));
            let Some(Some(held)) = self.held.get_mut(p) else {
                continue;
            };
            // This step follows the last one, so that one is committed: what its snapshot
            // replaced is no longer read by any restore.
            stale.append(&mut held.replaced);
            if let Some(file) = held.keys.take_step() {
                if held.files.len() + 1 >= SNAPSHOT_EVERY {
                    // Every key, in place of the step's: the files before it go at the next step.
                    files.push((path.clone(), held.keys.snapshot()));
                    held.replaced = std::mem::replace(&mut held.files, vec![path]);
                } else {
                    files.push((path.clone(), file));
                    held.files.push(path);
                }
            }
            held.at = Some(next);
        }
        let n = files.len();
        self.dir
            .put_and_delete(files, stale)
            .map_err(|e| self.fail(format!("write the step's key files ({n})"), e))?;
        self.count_keys();
        Ok(())
    }

    /// Reads into `keys` the key files of `partition` up to offset `committed`, then writes
    /// them back as one file and deletes those it covers. Returns what it read, and the files
    /// that hold the keys now.
    fn restore(
        &self,
        partition: i32,
        committed: i64,
        keys: &mut PartitionKeys,
    ) -> Result<(Restored, Vec<Path>), SourceError> {
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
                if let Some(snapshot) = self.compact(partition, committed, keys, &covered) {
                    return Ok((restored, vec![snapshot]));
                }
            }
            return Ok((restored, covered));
        }
        Err(self.fail(
            format!("read the key files of partition {partition}"),
            "they were deleted while read, three times",
        ))
    }

    /// Writes `keys` (the partition's at `committed`) as one file and deletes the files
    /// `covered` it replaces; returns the file. Best effort: a failure leaves the files, which
    /// are still right.
    fn compact(
        &self,
        partition: i32,
        committed: i64,
        keys: &PartitionKeys,
        covered: &[Path],
    ) -> Option<Path> {
        let snapshot = self
            .dir
            .folder(&self.topic, partition)
            .join(format!("{committed:020}-{}.keys", self.dir.writer));
        let file = keys.snapshot();
        // Written before any delete: a restore meanwhile finds it when it lists again.
        let written = self
            .dir
            .put_and_delete(vec![(snapshot.clone(), file)], Vec::new());
        let stale: Vec<Path> = covered
            .iter()
            .filter(|p| **p != snapshot)
            .cloned()
            .collect();
        match written.and_then(|()| self.dir.put_and_delete(Vec::new(), stale)) {
            Ok(()) => Some(snapshot),
            Err(e) => {
                tracing::warn!(source = %self.source, partition, "cannot write the partition's keys back as one file (the files stay, and are read as they are): {e}");
                None
            }
        }
    }
}

/// The next offset `positions` (`kafka/<topic>/<p>` -> next offset, as a sink gives them)
/// holds for partition `partition` of `topic`.
pub(crate) fn committed_offset(
    positions: &[(String, i64)],
    topic: &str,
    partition: i32,
) -> Option<i64> {
    let name = format!("kafka/{topic}/{partition}");
    positions.iter().find(|(n, _)| *n == name).map(|(_, o)| *o)
}

/// The partitions of `topic` in `positions` (`kafka/<topic>/<p>` -> next offset), with their
/// next offsets; other names are left out.
pub(crate) fn partition_positions<'a>(
    positions: &'a [(String, i64)],
    topic: &str,
) -> impl Iterator<Item = (usize, i64)> + 'a {
    let prefix = format!("kafka/{topic}/");
    positions.iter().filter_map(move |(name, next)| {
        let p = name.strip_prefix(&prefix)?.parse::<usize>().ok()?;
        Some((p, *next))
    })
}

/// Empties the slots (by partition id) of `held` that are not of `partitions`, and makes room
/// for each of `partitions`; returns their slots, in order. `Err` gives a negative id.
pub(crate) fn hold_only<T>(
    held: &mut Vec<Option<T>>,
    partitions: &[i32],
) -> Result<Vec<usize>, i32> {
    for (p, slot) in held.iter_mut().enumerate() {
        if !partitions.contains(&(p as i32)) {
            *slot = None;
        }
    }
    let mut slots = Vec::with_capacity(partitions.len());
    for &p in partitions {
        let i = usize::try_from(p).map_err(|_| p)?;
        if held.len() <= i {
            held.resize_with(i + 1, || None);
        }
        slots.push(i);
    }
    Ok(slots)
}

/// The offset a state file's name gives (`<to>-<writer>.<ext>`, `ext` being `keys` or
/// `window`); `None` for anything else.
pub(crate) fn file_offset(path: &Path, ext: &str) -> Option<i64> {
    let name = path.filename()?.strip_suffix(ext)?.strip_suffix('.')?;
    name.split_once('-')?.0.parse().ok()
}

/// The key file's offset (see [`file_offset`]).
fn offset_of(path: &Path) -> Option<i64> {
    file_offset(path, "keys")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn what_a_state_dir_holds_state_of() {
        let d = Definition {
            group_id: "g".into(),
            topic: "quotes".into(),
            key: "xxh3_128 of (ticker, sequence_number)".into(),
        };
        assert_eq!(d.differs(&d.text()), None);
        let other = Definition {
            group_id: "h".into(),
            topic: "quotes".into(),
            key: "none".into(),
        };
        let (what, theirs, ours) = d.differs(&other.text()).unwrap();
        assert_eq!(
            (what, theirs.as_str(), ours.as_str()),
            ("consumer group", "h", "g")
        );
        let (what, ..) = d.differs("group.id = g\ntopic = quotes\n").unwrap();
        assert_eq!(what, "dedup keys made by");
    }

    /// A batch of one `id` column.
    fn ids(ids: &[String]) -> RecordBatch {
        let schema = Arc::new(arrow::datatypes::Schema::new(vec![
            arrow::datatypes::Field::new("id", arrow::datatypes::DataType::Utf8, false),
        ]));
        RecordBatch::try_new(
            schema,
            vec![Arc::new(arrow::array::StringArray::from(ids.to_vec()))],
        )
        .unwrap()
    }

    /// The dedup key `id`, hashed.
    fn id_key() -> DedupKey {
        DedupKey {
            columns: weir_dedup::KeyColumns::resolve(&ids(&[]).schema(), &["id".into()], None)
                .unwrap(),
            mode: weir_dedup::KeyMode::Xxh3_128,
            ttl: None,
        }
    }

    #[test]
    fn a_partition_held_long_keeps_few_files_and_restores_every_key() {
        let tmp = tempfile::tempdir().unwrap();
        let location = tmp.path().to_string_lossy().into_owned();
        let key = id_key();
        let open = || {
            GroupStateDir::open("s", &location, &Options::default(), "g", "t", Some(&key)).unwrap()
        };
        let mut owner = GroupKeys::new(open(), key.clone(), "s", "t", Arc::default());
        owner.take_up(&[0], &[]).unwrap();
        let steps = 3 * SNAPSHOT_EVERY as i64;
        for step in 0..steps {
            let b = ids(&[format!("k{step}"), format!("k{}", step / 2)]);
            owner.dedup(b, 0).unwrap();
            owner
                .commit(&[("kafka/t/0".to_string(), step + 1)])
                .unwrap();
        }
        let files = std::fs::read_dir(tmp.path().join("t").join("0"))
            .unwrap()
            .filter(|e| {
                e.as_ref()
                    .is_ok_and(|e| e.file_name().to_string_lossy().ends_with(".keys"))
            })
            .count();
        assert!(files <= SNAPSHOT_EVERY + 1, "{files} key files");
        // Another member takes the partition up at the last committed offset: every key.
        let mut next = GroupKeys::new(open(), key.clone(), "s", "t", Arc::default());
        next.take_up(&[0], &[("kafka/t/0".to_string(), steps)])
            .unwrap();
        let mut all: Vec<String> = (0..steps).map(|s| format!("k{s}")).collect();
        all.push("new".into());
        let kept = next.dedup(ids(&all), 0).unwrap();
        assert_eq!(kept.num_rows(), 1, "only the new key is new");
        // Another key in the same directory is refused.
        let other = DedupKey {
            mode: weir_dedup::KeyMode::Raw,
            ..key
        };
        let refused =
            GroupStateDir::open("s", &location, &Options::default(), "g", "t", Some(&other));
        assert!(refused.is_err_and(|e| e.to_string().contains("dedup keys made by")));
    }

    #[test]
    fn a_key_sent_to_two_partitions_is_counted() {
        let tmp = tempfile::tempdir().unwrap();
        let location = tmp.path().to_string_lossy().into_owned();
        let key = id_key();
        let dir =
            GroupStateDir::open("s", &location, &Options::default(), "g", "t", Some(&key)).unwrap();
        let metrics = Arc::new(GroupMetrics::default());
        let mut keys = GroupKeys::new(dir, key, "s", "t", Arc::clone(&metrics));
        keys.take_up(&[0, 1], &[]).unwrap();
        keys.dedup(ids(&["a".into(), "b".into()]), 0).unwrap();
        keys.dedup(ids(&["c".into()]), 1).unwrap();
        assert_eq!(metrics.split_keys.load(Ordering::Relaxed), 0);
        // "b" is new in partition 1 (kept there), and partition 0 has it.
        let kept = keys.dedup(ids(&["c".into(), "b".into()]), 1).unwrap();
        assert_eq!(kept.num_rows(), 1);
        assert_eq!(metrics.split_keys.load(Ordering::Relaxed), 1);
    }

    #[test]
    fn writers_are_told_apart() {
        assert_ne!(writer_token(), writer_token());
    }

    #[test]
    fn key_file_names() {
        let p = Path::from("state/quotes/3/00000000000000001200-abc-12.keys");
        assert_eq!(offset_of(&p), Some(1200));
        assert_eq!(offset_of(&Path::from("state/dedup.key")), None);
        assert_eq!(offset_of(&Path::from("state/quotes/3/x-y.keys")), None);
    }
}
