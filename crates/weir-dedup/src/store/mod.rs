//! The state directory: dedup keys and checkpoints in one RocksDB database, committed together.
//!
//! [`StateStore`]'s API is here: opening and inspecting a directory, committing a step, the
//! statistics. The rest, one job a file:
//! - `dedup`: the key lookup ([`StateStore::dedup`]);
//! - `commit`: the open step's keys, and the thread that writes each commit;
//! - `tuning`: RocksDB's options;
//! - `record`: the column families, the step records' keys and the checkpoint record's codec;
//! - `filter_file`: the key filter at open, loaded as a clean finish saved it or scanned;
//! - `stats`: the counters kept across runs, and [`DedupStats`].

mod commit;
mod dedup;
mod filter_file;
mod record;
mod stats;
mod tuning;

use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicI64, AtomicU64, Ordering};
use std::sync::Arc;

use rocksdb::{Cache, ColumnFamilyDescriptor, Options, WriteOptions, DB};
use xxhash_rust::xxh3::xxh3_64;

pub use self::commit::CommitError;
use self::commit::{CommitJob, Committer, Pending, TableFiles};
use self::filter_file::{load_filter, save_filter, scan_filter};
pub use self::record::Checkpoint;
use self::record::{
    checkpoint_key, encode_checkpoint, file_key, file_name, file_prefix, read_checkpoint,
    FORMAT_1_CHECKPOINT, KEYS, MAX_RECORD, META, SETUP,
};
use self::stats::{dir_bytes, stats_of, Counters, TICKERS};
use crate::filter::KeyFilter;
use crate::keys::{KeyColumns, KeyMode, RowKeys};
use crate::set::KeySet;
use crate::{DedupError, DedupStats};

/// What a state directory is opened with.
#[derive(Debug, Clone)]
pub struct StateOptions {
    /// The dedup key; `None` keeps checkpoints only.
    pub key: Option<DedupKey>,
    /// Block cache size in bytes (`'dedup.block_cache'`).
    pub block_cache_bytes: usize,
    /// Keys kept in memory in front of RocksDB (per generation; two generations are kept).
    pub recent_keys: usize,
}

impl Default for StateOptions {
    fn default() -> Self {
        Self {
            key: None,
            block_cache_bytes: 64 << 20,
            recent_keys: 1 << 20,
        }
    }
}

/// A dedup key: its columns, how it is stored, and the TTL in the time column's unit.
#[derive(Debug, Clone)]
pub struct DedupKey {
    /// The key (and time) columns.
    pub columns: KeyColumns,
    /// Hash or raw.
    pub mode: KeyMode,
    /// A key older than this, relative to the largest time seen, expires.
    pub ttl: Option<i64>,
}

impl DedupKey {
    /// The key's definition as one line (columns, hash, TTL): state kept under one definition
    /// is not read under another.
    pub fn describe(&self) -> String {
        format!(
            "key={};hash={};ttl={}",
            self.columns.describe(),
            match self.mode {
                KeyMode::Xxh3_128 => "xxh3_128",
                KeyMode::Raw => "none",
            },
            self.ttl.map(|t| t.to_string()).unwrap_or_default()
        )
    }
}

/// A state directory, open for one writer.
pub struct StateStore {
    dir: PathBuf,
    db: Arc<DB>,
    db_options: Options,
    cache: Cache,
    block_cache_bytes: usize,
    key: Option<DedupKey>,
    committed: Checkpoint,
    /// A hash of the committed checkpoint record: names the committed state for the saved
    /// key filter.
    committed_record: u64,
    max_time: i64,
    compaction_expired: Arc<AtomicU64>,
    /// Keys of this step (not committed yet) and the recently seen ones: two generations, the
    /// current one holds every key of the open step.
    recent: [KeySet; 2],
    current: usize,
    recent_keys: usize,
    /// Keys are stored whole (`'dedup.hash' = 'none'`).
    raw_mode: bool,
    rows: RowKeys,
    candidates: Vec<usize>,
    /// Per row of the batch: the key filter had certainly never seen its key.
    fresh: Vec<bool>,
    /// Every key of the state (committed and open step), so new keys skip RocksDB.
    filter: KeyFilter,
    /// The open step's new keys, written at its commit.
    pending: Pending,
    committer: Committer,
    base: Counters,
    run: Counters,
    /// The counters the last commit recorded (what `inspect` reads back).
    committed_counters: Counters,
}

impl std::fmt::Debug for StateStore {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("StateStore")
            .field("dir", &self.dir)
            .field("step", &self.committed.step)
            .finish()
    }
}

impl StateStore {
    /// Opens (or creates) the state in `dir`. Fails when another process holds it, or when it
    /// was written with another dedup key, hash mode or TTL (its keys would mean something else).
    pub fn open(dir: &Path, options: StateOptions) -> Result<Self, DedupError> {
        std::fs::create_dir_all(dir).map_err(|e| DedupError::Io {
            path: dir.display().to_string(),
            error: e,
        })?;
        let cache = Cache::new_lru_cache(options.block_cache_bytes);
        let cutoff = Arc::new(AtomicI64::new(i64::MIN));
        let compaction_expired = Arc::new(AtomicU64::new(0));

        let db_options = tuning::db_options();
        let mut keys_options = tuning::keys_cf_options(&cache);
        // The TTL filter only where there is a TTL: it is a call per key in every compaction.
        if options.key.as_ref().is_some_and(|k| k.ttl.is_some()) {
            tuning::set_ttl_filter(
                &mut keys_options,
                Arc::clone(&cutoff),
                Arc::clone(&compaction_expired),
            );
        }
        let meta_options = Options::default();
        let db = DB::open_cf_descriptors(
            &db_options,
            dir,
            [
                ColumnFamilyDescriptor::new(KEYS, keys_options),
                ColumnFamilyDescriptor::new(META, meta_options),
            ],
        )
        .map_err(|e| DedupError::db(dir, "open the state database", e))?;

        let setup = options
            .key
            .as_ref()
            .map(DedupKey::describe)
            .unwrap_or_default();
        let meta = db
            .cf_handle(META)
            .ok_or_else(|| DedupError::Corrupt("the meta column family is missing".into()))?;
        if db
            .get_cf(meta, FORMAT_1_CHECKPOINT)
            .map_err(|e| DedupError::db(dir, "read the format", e))?
            .is_some()
        {
            return Err(DedupError::Config(format!(
                "state directory {} was written by an older weir (state format 1), which this one cannot continue; use another 'state.dir'",
                dir.display()
            )));
        }
        match db
            .get_cf(meta, SETUP)
            .map_err(|e| DedupError::db(dir, "read the setup", e))?
        {
            Some(found) => {
                let found = String::from_utf8_lossy(&found).into_owned();
                if found != setup {
                    return Err(DedupError::Config(format!(
                        "state directory {} was written with dedup settings '{found}', not '{setup}'; use another 'state.dir' or the same settings",
                        dir.display()
                    )));
                }
            }
            None => {
                // Fixed before the first step: a directory's keys mean one thing for its life.
                let mut write = WriteOptions::default();
                write.set_sync(true);
                db.put_cf_opt(meta, SETUP, setup.as_bytes(), &write)
                    .map_err(|e| DedupError::db(dir, "write the setup", e))?;
            }
        }
        // Table files a crash left half built or not yet ingested belong to no committed step.
        let ingest_dir = dir.join("ingest");
        if ingest_dir.exists() {
            std::fs::remove_dir_all(&ingest_dir).map_err(|e| DedupError::Io {
                path: ingest_dir.display().to_string(),
                error: e,
            })?;
        }
        let tables = if options.key.is_some() {
            std::fs::create_dir_all(&ingest_dir).map_err(|e| DedupError::Io {
                path: ingest_dir.display().to_string(),
                error: e,
            })?;
            Some(TableFiles {
                options: tuning::keys_cf_options(&cache),
                dir: ingest_dir,
            })
        } else {
            None
        };
        let (committed, max_time, base, committed_record) = read_checkpoint(&db, dir)?;
        let raw = matches!(
            options.key,
            Some(DedupKey {
                mode: KeyMode::Raw,
                ..
            })
        );
        let mode = options.key.as_ref().map(|k| k.mode).unwrap_or_default();
        let ttl = options.key.as_ref().and_then(|k| k.ttl);
        if let Some(ttl) = ttl {
            cutoff.store(max_time.saturating_sub(ttl), Ordering::Relaxed);
        }
        let recent_keys = options.recent_keys.max(1024);
        // Every key already in the state goes into the filter: the one a clean finish saved
        // for exactly this committed state, or else one scan of the keys.
        let saved = options
            .key
            .as_ref()
            .and_then(|_| load_filter(dir, committed_record));
        let filter = match saved {
            Some(filter) => filter,
            None => scan_filter(&db, dir, options.key.is_some(), mode)?,
        };
        let db = Arc::new(db);
        let committer =
            Committer::start(Arc::clone(&db), tables, Arc::clone(&cutoff)).map_err(|e| {
                DedupError::Io {
                    path: dir.display().to_string(),
                    error: e,
                }
            })?;
        Ok(Self {
            dir: dir.to_path_buf(),
            db,
            db_options,
            cache,
            block_cache_bytes: options.block_cache_bytes,
            key: options.key,
            committed,
            committed_record,
            max_time,
            compaction_expired,
            // A generation turns over at a commit once it holds `recent_keys`, so it holds up to
            // that plus a step's keys: sized for twice as many, it does not grow in steady
            // state (growing rehashes every key at random: measured, 0.6 s of the bench's 11 M
            // rows).
            recent: [
                KeySet::new(recent_keys * 2, raw, ttl.is_some()),
                KeySet::new(recent_keys * 2, raw, ttl.is_some()),
            ],
            current: 0,
            recent_keys,
            raw_mode: raw,
            rows: RowKeys::new(mode),
            candidates: Vec::new(),
            fresh: Vec::new(),
            filter,
            pending: Pending::default(),
            committer,
            base,
            run: Counters::default(),
            committed_counters: base,
        })
    }

    /// Reads a state directory without taking it over (a running writer may hold it): the last
    /// checkpoint, the dedup settings it was written with, and the statistics as of the last
    /// commit (RocksDB's own counters only cover the runs up to then).
    pub fn inspect(dir: &Path) -> Result<(Checkpoint, String, DedupStats), DedupError> {
        if !dir.join("CURRENT").exists() {
            return Err(DedupError::Config(format!(
                "{} is not a state directory (no RocksDB database in it)",
                dir.display()
            )));
        }
        let db = DB::open_cf_for_read_only(&Options::default(), dir, [KEYS, META], false)
            .map_err(|e| DedupError::db(dir, "open the state database read-only", e))?;
        let meta = db
            .cf_handle(META)
            .ok_or_else(|| DedupError::Corrupt("the meta column family is missing".into()))?;
        let setup = db
            .get_cf(meta, SETUP)
            .map_err(|e| DedupError::db(dir, "read the setup", e))?
            .map(|v| String::from_utf8_lossy(&v).into_owned())
            .unwrap_or_default();
        let (checkpoint, _, c, _) = read_checkpoint(&db, dir)?;
        let estimate = db
            .cf_handle(KEYS)
            .and_then(|cf| {
                db.property_int_value_cf(cf, "rocksdb.estimate-num-keys")
                    .ok()
                    .flatten()
            })
            .unwrap_or(0);
        let stats = stats_of(
            &c,
            !setup.is_empty(),
            (checkpoint.step, checkpoint.state.len() as u64),
            estimate,
            (0, 0),
            (0, 0),
            dir_bytes(dir),
        );
        Ok((checkpoint, setup, stats))
    }

    /// The last committed checkpoint (step 0 when nothing was committed yet).
    pub fn checkpoint(&self) -> &Checkpoint {
        &self.committed
    }

    /// The directory.
    pub fn dir(&self) -> &Path {
        &self.dir
    }

    /// Commits the open step: this step's keys and `checkpoint` (its positions, files and
    /// operator state) in one atomic RocksDB commit (see `write_commit`). Call it only once the
    /// step's output is durable under its final name. It returns once the previous step's
    /// commit is durable; this one's is written on the commit thread ([`StateStore::finish`]
    /// waits for it). A checkpoint record over 3 GiB (RocksDB's limit for a value) is refused
    /// before anything is written, and the step stays open.
    pub fn commit(&mut self, mut checkpoint: Checkpoint) -> Result<(), DedupError> {
        checkpoint.step = self.committed.step + 1;
        let counters = self.counters();
        let record = encode_checkpoint(&checkpoint, self.max_time, &counters);
        if record.len() > MAX_RECORD {
            return Err(DedupError::Config(format!(
                "state directory {}: the checkpoint of step {} is {} bytes with {} bytes of operator state, over the {} bytes a checkpoint can hold",
                self.dir.display(),
                checkpoint.step,
                record.len(),
                checkpoint.state.len(),
                MAX_RECORD
            )));
        }
        let record_hash = xxh3_64(&record);
        let mut records = vec![(checkpoint_key(), record)];
        let mut files: Vec<&String> = checkpoint.files.iter().collect();
        files.sort();
        files.dedup();
        for f in files {
            records.push((file_key(checkpoint.step, f), Vec::new()));
        }
        let ttl = self.key.as_ref().and_then(|k| k.ttl);
        let job = CommitJob {
            step: checkpoint.step,
            pending: std::mem::take(&mut self.pending),
            with_time: ttl.is_some(),
            records,
            cutoff: ttl.map(|ttl| self.max_time.saturating_sub(ttl)),
        };
        // Waits for the previous commit: after this, every step before this one is durable.
        self.committer
            .send(job)
            .map_err(|source| DedupError::Commit {
                dir: self.dir.display().to_string(),
                source,
            })?;
        if let Some(spare) = self.committer.take_spare() {
            self.pending = spare;
        }
        self.committed = checkpoint;
        self.committed_record = record_hash;
        self.committed_counters = counters;
        // Every key in the older generation was committed by an earlier, finished commit;
        // start a new generation when this one is full.
        if self.recent[self.current].len() >= self.recent_keys {
            self.current = 1 - self.current;
            self.recent[self.current].clear();
        }
        Ok(())
    }

    /// Waits until the last commit is durable. A sink that publishes a step elsewhere (a table
    /// commit) calls it first, so that the state never lags what it published.
    pub fn sync(&mut self) -> Result<(), DedupError> {
        self.committer.wait().map_err(|source| DedupError::Commit {
            dir: self.dir.display().to_string(),
            source,
        })
    }

    /// True while a commit is being written on the commit thread.
    pub fn is_committing(&self) -> bool {
        self.committer.in_flight()
    }

    /// True when the last commit is durable; false while it is still being written. Waits
    /// for nothing: a sink that publishes a step elsewhere once its state is durable (a table
    /// commit) asks this between batches instead of stopping the pipeline in [`Self::sync`].
    pub fn try_sync(&mut self) -> Result<bool, DedupError> {
        self.committer
            .try_wait()
            .map_err(|source| DedupError::Commit {
                dir: self.dir.display().to_string(),
                source,
            })
    }

    /// Waits until the last commit is durable (a run calls it before it reports success), then
    /// saves the key filter so the next open need not rebuild it from every key in RocksDB.
    /// The save is an optimisation only: if it fails, the next open scans as after a crash.
    pub fn finish(&mut self) -> Result<(), DedupError> {
        self.committer.wait().map_err(|source| DedupError::Commit {
            dir: self.dir.display().to_string(),
            source,
        })?;
        if self.key.is_some() {
            let _ = save_filter(&self.dir, self.committed_record, &self.filter);
        }
        Ok(())
    }

    fn counters(&self) -> Counters {
        let mut c = Counters {
            rows: self.base.rows + self.run.rows,
            dropped: self.base.dropped + self.run.dropped,
            recent_hits: self.base.recent_hits + self.run.recent_hits,
            lookups: self.base.lookups + self.run.lookups,
            written: self.base.written + self.run.written,
            expired: self.base.expired
                + self.run.expired
                + self.compaction_expired.load(Ordering::Relaxed),
            tickers: self.base.tickers,
        };
        for (i, t) in TICKERS.iter().enumerate() {
            c.tickers[i] += self.db_options.get_ticker_count(*t);
        }
        c
    }

    /// The statistics: cumulative over every run on this state directory, up to now.
    pub fn stats(&self) -> DedupStats {
        self.stats_with(&self.counters())
    }

    /// The statistics as of the last commit: the counters it recorded, the figures
    /// [`StateStore::inspect`] reads back (so a live report and `weir stats` agree), with the
    /// sizes (keys held, memory, block cache use, bytes on disk) as they are now.
    pub fn committed_stats(&self) -> DedupStats {
        self.stats_with(&self.committed_counters)
    }

    fn stats_with(&self, counters: &Counters) -> DedupStats {
        let estimate = self
            .db
            .cf_handle(KEYS)
            .and_then(|cf| {
                self.db
                    .property_int_value_cf(cf, "rocksdb.estimate-num-keys")
                    .ok()
                    .flatten()
            })
            .unwrap_or(0);
        let mut st = stats_of(
            counters,
            self.key.is_some(),
            (self.committed.step, self.committed.state.len() as u64),
            estimate,
            (
                self.recent[0].len() + self.recent[1].len(),
                self.recent[0].bytes() + self.recent[1].bytes() + self.filter.bytes(),
            ),
            (self.block_cache_bytes as u64, self.cache.get_usage() as u64),
            dir_bytes(&self.dir),
        );
        st.dedup = self.key.is_some();
        st
    }

    /// The files committed by every step so far, oldest first.
    pub fn committed_files(&self) -> Result<Vec<String>, DedupError> {
        let keys = self
            .db
            .cf_handle(KEYS)
            .ok_or_else(|| DedupError::Corrupt("the keys column family is missing".into()))?;
        let prefix = file_prefix();
        let mut files = Vec::new();
        let mut it = self.db.raw_iterator_cf(keys);
        it.seek(&prefix);
        while let Some(k) = it.key() {
            // "<prefix><20-digit step>/<name>"
            let Some(rest) = k.strip_prefix(prefix.as_slice()) else {
                break;
            };
            if let Some(name) = file_name(rest) {
                files.push(String::from_utf8_lossy(name).into_owned());
            }
            it.next();
        }
        it.status()
            .map_err(|e| DedupError::db(&self.dir, "list committed files", e))?;
        Ok(files)
    }
}
