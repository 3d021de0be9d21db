//! The commit path: the open step's keys, and the thread that makes each step durable in one
//! atomic RocksDB commit.

use std::path::PathBuf;
use std::sync::atomic::{AtomicI64, Ordering};
use std::sync::mpsc::{Receiver, SyncSender};
use std::sync::Arc;
use std::thread::JoinHandle;

use rocksdb::{IngestExternalFileOptions, Options, SstFileWriter, WriteBatch, WriteOptions, DB};

use super::record::KEYS;
use crate::order::{sort_hashed, HashedKey};

/// Why a step's commit failed.
#[derive(Debug, thiserror::Error)]
pub enum CommitError {
    /// The thread that writes commits is gone (it panicked, or the store is closing).
    #[error("the commit thread stopped")]
    ThreadStopped,
    /// The state has no `keys` column family (a damaged or foreign directory).
    #[error("the keys column family is missing")]
    NoKeysFamily,
    /// RocksDB failed on the step's write batch or table file.
    #[error("{what} {}: {source}", path.display())]
    Db {
        /// What was being done: `write`, `create`, `add a key to`, `finish`, `ingest`.
        what: &'static str,
        /// The table file, or the state directory for a write batch.
        path: PathBuf,
        /// RocksDB's error.
        #[source]
        source: rocksdb::Error,
    },
    /// The table file just built could not be opened again.
    #[error("open {}: {source}", path.display())]
    Io {
        /// The file.
        path: PathBuf,
        /// The cause.
        #[source]
        source: std::io::Error,
    },
}

/// Keys of the open step, written at its commit: hashes as they are, raw keys back to back in
/// one buffer with (offset, length, time) each, so a key costs no allocation.
#[derive(Debug, Default)]
pub(super) struct Pending {
    hashed: Vec<HashedKey>,
    /// The sort's working memory, kept to reuse.
    scratch: Vec<HashedKey>,
    bytes: Vec<u8>,
    raw: Vec<(u32, u32, i64)>,
}

impl Pending {
    /// Adds a key: its hash, or in raw mode its bytes.
    #[inline]
    pub(super) fn push(&mut self, raw_mode: bool, hash: [u8; 16], key: &[u8], time: i64) {
        if raw_mode {
            self.raw
                .push((self.bytes.len() as u32, key.len() as u32, time));
            self.bytes.extend_from_slice(key);
        } else {
            self.hashed.push((hash, time));
        }
    }

    fn clear(&mut self) {
        self.hashed.clear();
        self.bytes.clear();
        self.raw.clear();
    }

    fn raw_key(&self, i: usize) -> &[u8] {
        let (at, len, _) = self.raw[i];
        &self.bytes[at as usize..(at + len) as usize]
    }

    /// Calls `put` with every key and its time in key order, once per key: when a key was
    /// pushed twice (it expired and came back), its last push wins.
    fn sorted(
        &mut self,
        mut put: impl FnMut(&[u8], i64) -> Result<(), CommitError>,
    ) -> Result<(), CommitError> {
        // Stable: equal keys stay in push order.
        sort_hashed(&mut self.hashed, &mut self.scratch);
        for (i, (k, t)) in self.hashed.iter().enumerate() {
            if self.hashed.get(i + 1).is_some_and(|(next, _)| next == k) {
                continue;
            }
            put(k, *t)?;
        }
        let mut order: Vec<u32> = (0..self.raw.len() as u32).collect();
        order.sort_by(|&a, &b| self.raw_key(a as usize).cmp(self.raw_key(b as usize)));
        for (n, &i) in order.iter().enumerate() {
            let key = self.raw_key(i as usize);
            if order
                .get(n + 1)
                .is_some_and(|&next| self.raw_key(next as usize) == key)
            {
                continue;
            }
            put(key, self.raw[i as usize].2)?;
        }
        Ok(())
    }
}

/// Where and how the committer writes a step's table file (only when there is a dedup key).
pub(super) struct TableFiles {
    /// The `keys` column family's options: the file is built as RocksDB would build it.
    pub(super) options: Options,
    /// `<state dir>/ingest`: files being built; RocksDB moves each in when it ingests it.
    pub(super) dir: PathBuf,
}

/// One step's commit, for the committer thread.
pub(super) struct CommitJob {
    pub(super) step: u64,
    pub(super) pending: Pending,
    /// Store each key's time (a TTL is set) or an empty value.
    pub(super) with_time: bool,
    /// The step records (checkpoint, file names), in key order.
    pub(super) records: Vec<(Vec<u8>, Vec<u8>)>,
    /// The compaction filter's new cutoff, applied once the commit is durable.
    pub(super) cutoff: Option<i64>,
}

/// Writes commits on a thread of its own, one at a time and in order, so the next step's
/// reading, decoding and dedup go on while the last step's keys are sorted and written. A commit is
/// only asked for once the previous one is durable, which keeps the exactly-once order: files
/// of a step whose commit never finished are removed on restart like any other uncommitted file.
pub(super) struct Committer {
    jobs: Option<SyncSender<CommitJob>>,
    /// Each commit's outcome, and its key list emptied for the next step to reuse (a step's
    /// list holds up to millions of keys; fresh memory each step costs page faults).
    acks: Receiver<(Result<(), CommitError>, Pending)>,
    in_flight: bool,
    spare: Option<Pending>,
    thread: Option<JoinHandle<()>>,
}

impl Committer {
    pub(super) fn start(
        db: Arc<DB>,
        tables: Option<TableFiles>,
        cutoff: Arc<AtomicI64>,
    ) -> Result<Self, std::io::Error> {
        let (jobs, rx) = std::sync::mpsc::sync_channel::<CommitJob>(1);
        let (ack_tx, acks) = std::sync::mpsc::sync_channel(1);
        let thread = std::thread::Builder::new()
            .name("weir-dedup-commit".into())
            .spawn(move || {
                for mut job in rx {
                    let done = write_commit(&db, tables.as_ref(), &mut job, &cutoff);
                    job.pending.clear();
                    if ack_tx.send((done, job.pending)).is_err() {
                        break;
                    }
                }
            })?;
        Ok(Self {
            jobs: Some(jobs),
            acks,
            in_flight: false,
            spare: None,
            thread: Some(thread),
        })
    }

    /// True while a commit is being written.
    pub(super) fn in_flight(&self) -> bool {
        self.in_flight
    }

    /// Whether the commit in flight, if any, has finished, without waiting for it: `Ok(true)`
    /// when every commit asked for is durable, its outcome when the last one just finished.
    pub(super) fn try_wait(&mut self) -> Result<bool, CommitError> {
        if !self.in_flight {
            return Ok(true);
        }
        match self.acks.try_recv() {
            Ok((done, pending)) => {
                self.in_flight = false;
                self.spare = Some(pending);
                done.map(|()| true)
            }
            Err(std::sync::mpsc::TryRecvError::Empty) => Ok(false),
            Err(std::sync::mpsc::TryRecvError::Disconnected) => {
                self.in_flight = false;
                Err(CommitError::ThreadStopped)
            }
        }
    }

    /// Waits for the commit in flight, if any.
    pub(super) fn wait(&mut self) -> Result<(), CommitError> {
        if !self.in_flight {
            return Ok(());
        }
        self.in_flight = false;
        let (done, pending) = self.acks.recv().map_err(|_| CommitError::ThreadStopped)?;
        self.spare = Some(pending);
        done
    }

    /// The key list the last finished commit gave back, emptied, for the next step.
    pub(super) fn take_spare(&mut self) -> Option<Pending> {
        self.spare.take()
    }

    /// Waits for the commit in flight, then hands `job` to the thread.
    pub(super) fn send(&mut self, job: CommitJob) -> Result<(), CommitError> {
        self.wait()?;
        self.jobs
            .as_ref()
            .ok_or(CommitError::ThreadStopped)?
            .send(job)
            .map_err(|_| CommitError::ThreadStopped)?;
        self.in_flight = true;
        Ok(())
    }
}

impl Drop for Committer {
    fn drop(&mut self) {
        let _ = self.wait();
        self.jobs = None;
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

/// Makes one step durable. With a dedup key, the step's keys (sorted) and its records go into
/// one table file that RocksDB ingests: the ingestion is atomic (one MANIFEST record), syncs the
/// file and the directory, and costs no write-ahead log or memtable insert per key, which is
/// what writing millions of keys a step through a write batch spent. Without a key, the records
/// alone go in as one synced write batch.
fn write_commit(
    db: &DB,
    tables: Option<&TableFiles>,
    job: &mut CommitJob,
    cutoff: &AtomicI64,
) -> Result<(), CommitError> {
    let keys = db.cf_handle(KEYS).ok_or(CommitError::NoKeysFamily)?;
    match tables {
        None => {
            let mut batch = WriteBatch::default();
            for (k, v) in &job.records {
                batch.put_cf(keys, k, v);
            }
            let mut write = WriteOptions::default();
            write.set_sync(true);
            db.write_opt(batch, &write)
                .map_err(db_error("write the step's records to", db.path()))?;
        }
        Some(tables) => {
            let path = tables.dir.join(format!("step-{:020}.sst", job.step));
            let mut file = SstFileWriter::create(&tables.options);
            file.open(&path).map_err(db_error("create", &path))?;
            let with_time = job.with_time;
            job.pending.sorted(|key, time| {
                let time = time.to_le_bytes();
                let value: &[u8] = if with_time { &time } else { &[] };
                file.put(key, value)
                    .map_err(db_error("add a key to", &path))
            })?;
            for (k, v) in &job.records {
                file.put(k, v).map_err(db_error("add a record to", &path))?;
            }
            file.finish().map_err(db_error("finish", &path))?;
            // Held across the ingestion: the same file under RocksDB's name once moved in.
            let built = std::fs::File::open(&path).map_err(|source| CommitError::Io {
                path: path.clone(),
                source,
            })?;
            let mut ingest = IngestExternalFileOptions::default();
            ingest.set_move_files(true);
            db.ingest_external_file_cf_opts(keys, &ingest, vec![&path])
                .map_err(db_error("ingest", &path))?;
            read_back(&built);
        }
    }
    if let Some(c) = job.cutoff {
        cutoff.store(c, Ordering::Relaxed);
    }
    Ok(())
}

/// The error of RocksDB failing to `what` the file (or directory) `path`; the path is copied
/// only when there is an error (a step writes millions of keys through this).
fn db_error<'a>(
    what: &'static str,
    path: &'a std::path::Path,
) -> impl FnOnce(rocksdb::Error) -> CommitError + 'a {
    move |source| CommitError::Db {
        what,
        path: path.to_path_buf(),
        source,
    }
}

/// Asks the kernel to read a just-ingested table file back into the page cache, in the
/// background. `SstFileWriter` drops every page it writes from the cache (RocksDB's C API has
/// no way to turn that off), so without this the first lookups and the compactions that touch
/// the newest step read it from disk: measured, about 150 us a 4 KiB block read on this
/// machine, where the page cache answers in a few.
fn read_back(file: &std::fs::File) {
    #[cfg(target_os = "linux")]
    {
        use std::os::fd::AsRawFd;
        // SAFETY: the descriptor is open for the call's duration; the advice reads nothing
        // into this process and its failure only means the pages stay uncached.
        unsafe {
            libc::posix_fadvise(file.as_raw_fd(), 0, 0, libc::POSIX_FADV_WILLNEED);
        }
    }
    #[cfg(not(target_os = "linux"))]
    let _ = file;
}
