//! The state directory: dedup keys and checkpoints in one RocksDB database, committed together.

use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicI64, AtomicU64, Ordering};
use std::sync::Arc;

use arrow_array::{BooleanArray, RecordBatch};
use arrow_buffer::BooleanBufferBuilder;
use rocksdb::compaction_filter::Decision;
use rocksdb::statistics::Ticker;
use rocksdb::{
    BlockBasedOptions, Cache, ColumnFamilyDescriptor, DBCompactionStyle, DBCompressionType,
    IngestExternalFileOptions, Options, ReadOptions, SstFileWriter, UniversalCompactOptions,
    WriteBatch, WriteOptions, DB,
};
use xxhash_rust::xxh3::{xxh3_128, xxh3_64};

use crate::filter::KeyFilter;
use crate::keys::{KeyColumns, KeyMode, RowKeys};
use crate::order::{sort_hashed, HashedKey};
use crate::set::KeySet;
use crate::{DedupError, DedupStats};

const KEYS: &str = "keys";
const META: &str = "meta";
const SETUP: &[u8] = b"setup";
/// The key filter a clean finish leaves for the next open (see `load_filter`).
const FILTER_FILE: &str = "key-filter";
const FORMAT: u8 = 2;
/// Format 1 kept the checkpoint in the `meta` column family under this key.
const FORMAT_1_CHECKPOINT: &[u8] = b"checkpoint";
/// The prefix of the step records (the checkpoint and the committed file names) in the `keys`
/// column family, where they are committed in the same file as the step's keys. No dedup key
/// starts with it: hashed keys are exactly 16 bytes long, raw keys start with 0 or 1. And it
/// sorts after every dedup key, so the records close each step's sorted table file.
const RECORD: [u8; 17] = [0xFF; 17];

fn record_key(name: &[u8]) -> Vec<u8> {
    [&RECORD[..], name].concat()
}

fn checkpoint_key() -> Vec<u8> {
    record_key(b"checkpoint")
}

fn file_prefix() -> Vec<u8> {
    record_key(b"file/")
}

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
    fn describe(&self) -> String {
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

/// What one commit records: how far each source partition has been read, and the output files
/// this step completed.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Checkpoint {
    /// Commits so far (the first commit is step 1).
    pub step: u64,
    /// The next position to read of each source partition, by a name the engine chooses (for
    /// example `kafka/quotes/3` or `file:/data/q.bin`).
    pub positions: Vec<(String, i64)>,
    /// The files the step committed, as their final names.
    pub files: Vec<String>,
}

/// Counters kept across runs in the checkpoint record.
#[derive(Debug, Clone, Copy, Default)]
struct Counters {
    rows: u64,
    dropped: u64,
    recent_hits: u64,
    lookups: u64,
    written: u64,
    expired: u64,
    tickers: [u64; TICKERS.len()],
}

const TICKERS: [Ticker; 11] = [
    Ticker::BlockCacheHit,
    Ticker::BlockCacheMiss,
    Ticker::BlockCacheDataHit,
    Ticker::BlockCacheDataMiss,
    Ticker::BlockCacheIndexHit,
    Ticker::BlockCacheIndexMiss,
    Ticker::BlockCacheFilterHit,
    Ticker::BlockCacheFilterMiss,
    Ticker::BloomFilterUseful,
    Ticker::BloomFilterFullPositive,
    Ticker::BloomFilterFullTruePositive,
];

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
}

/// Keys of the open step, written at its commit: hashes as they are, raw keys back to back in
/// one buffer with (offset, length, time) each, so a key costs no allocation.
#[derive(Debug, Default)]
struct Pending {
    hashed: Vec<HashedKey>,
    /// The sort's working memory, kept to reuse.
    scratch: Vec<HashedKey>,
    bytes: Vec<u8>,
    raw: Vec<(u32, u32, i64)>,
}

impl Pending {
    /// Adds a key: its hash, or in raw mode its bytes.
    #[inline]
    fn push(&mut self, raw_mode: bool, hash: [u8; 16], key: &[u8], time: i64) {
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
        mut put: impl FnMut(&[u8], i64) -> Result<(), String>,
    ) -> Result<(), String> {
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
struct TableFiles {
    /// The `keys` column family's options: the file is built as RocksDB would build it.
    options: Options,
    /// `<state dir>/ingest`: files being built; RocksDB moves each in when it ingests it.
    dir: PathBuf,
}

/// One step's commit, for the committer thread.
struct CommitJob {
    step: u64,
    pending: Pending,
    /// Store each key's time (a TTL is set) or an empty value.
    with_time: bool,
    /// The step records (checkpoint, file names), in key order.
    records: Vec<(Vec<u8>, Vec<u8>)>,
    /// The compaction filter's new cutoff, applied once the commit is durable.
    cutoff: Option<i64>,
}

/// Writes commits on a thread of its own, one at a time and in order, so the next step's
/// reading, decoding and dedup go on while the last step's keys are sorted and written. A commit is
/// only asked for once the previous one is durable, which keeps the exactly-once order: files
/// of a step whose commit never finished are removed on restart like any other uncommitted file.
struct Committer {
    jobs: Option<std::sync::mpsc::SyncSender<CommitJob>>,
    /// Each commit's outcome, and its key list emptied for the next step to reuse (a step's
    /// list holds up to millions of keys; fresh memory each step costs page faults).
    acks: std::sync::mpsc::Receiver<(Result<(), String>, Pending)>,
    in_flight: bool,
    spare: Option<Pending>,
    thread: Option<std::thread::JoinHandle<()>>,
}

impl Committer {
    fn start(
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

    /// Waits for the commit in flight, if any.
    fn wait(&mut self) -> Result<(), String> {
        if !self.in_flight {
            return Ok(());
        }
        self.in_flight = false;
        let (done, pending) = self
            .acks
            .recv()
            .map_err(|_| "the commit thread stopped".to_string())?;
        self.spare = Some(pending);
        done
    }

    fn send(&mut self, job: CommitJob) -> Result<(), String> {
        self.wait()?;
        self.jobs
            .as_ref()
            .ok_or("the commit thread stopped")?
            .send(job)
            .map_err(|_| "the commit thread stopped".to_string())?;
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
) -> Result<(), String> {
    let keys = db
        .cf_handle(KEYS)
        .ok_or("the keys column family is missing")?;
    match tables {
        None => {
            let mut batch = WriteBatch::default();
            for (k, v) in &job.records {
                batch.put_cf(keys, k, v);
            }
            let mut write = WriteOptions::default();
            write.set_sync(true);
            db.write_opt(batch, &write).map_err(|e| e.to_string())?;
        }
        Some(tables) => {
            let path = tables.dir.join(format!("step-{:020}.sst", job.step));
            let mut file = SstFileWriter::create(&tables.options);
            file.open(&path)
                .map_err(|e| format!("create {}: {e}", path.display()))?;
            let with_time = job.with_time;
            job.pending.sorted(|key, time| {
                let time = time.to_le_bytes();
                let value: &[u8] = if with_time { &time } else { &[] };
                file.put(key, value).map_err(|e| e.to_string())
            })?;
            for (k, v) in &job.records {
                file.put(k, v).map_err(|e| e.to_string())?;
            }
            file.finish()
                .map_err(|e| format!("finish {}: {e}", path.display()))?;
            // Held across the ingestion: the same file under RocksDB's name once moved in.
            let built =
                std::fs::File::open(&path).map_err(|e| format!("open {}: {e}", path.display()))?;
            let mut ingest = IngestExternalFileOptions::default();
            ingest.set_move_files(true);
            db.ingest_external_file_cf_opts(keys, &ingest, vec![&path])
                .map_err(|e| format!("ingest {}: {e}", path.display()))?;
            read_back(&built);
        }
    }
    if let Some(c) = job.cutoff {
        cutoff.store(c, Ordering::Relaxed);
    }
    Ok(())
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

impl std::fmt::Debug for StateStore {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("StateStore")
            .field("dir", &self.dir)
            .field("step", &self.committed.step)
            .finish()
    }
}

/// The `keys` column family's options (without the TTL compaction filter): RocksDB's and the
/// committer's table files are built with them.
///
/// Point lookups: whole-key bloom filters (10 bits a key, about 1% false positives), and index
/// and filter blocks in the block cache with L0's and the top level's pinned, so a lookup of an
/// absent key costs filter probes in memory and no data-block read.
fn keys_cf_options(cache: &Cache) -> Options {
    let mut table = BlockBasedOptions::default();
    table.set_block_cache(cache);
    table.set_bloom_filter(10.0, false);
    table.set_whole_key_filtering(true);
    table.set_cache_index_and_filter_blocks(true);
    table.set_cache_index_and_filter_blocks_with_high_priority(true);
    table.set_pin_l0_filter_and_index_blocks_in_cache(true);
    table.set_pin_top_level_index_and_filter(true);
    table.set_block_size(4 << 10);
    let mut options = Options::default();
    options.set_block_based_table_factory(&table);
    // Hashes do not compress; raw keys little. No codec keeps the C++ build small too.
    options.set_compression_type(DBCompressionType::None);
    // Tiered (universal) compaction, merging 8 sorted runs at a time: every step's file spans
    // the whole key range (keys are hashes, or arrive in no order), so levelled compaction
    // rewrote the whole first level at every L0 compaction, which cost more CPU than building
    // the files. Merging 8 runs at a time writes each key about log8(steps) times, for up to
    // about 8 runs per tier to look in; lookups are rare (the in-memory key filter answers
    // almost every key) and each run's bloom filter is pinned in memory, so the trade pays.
    options.set_compaction_style(DBCompactionStyle::Universal);
    options.set_level_zero_file_num_compaction_trigger(8);
    let mut tiers = UniversalCompactOptions::default();
    tiers.set_min_merge_width(8);
    tiers.set_max_size_amplification_percent(400);
    options.set_universal_compaction_options(&tiers);
    options
}

/// Builds the key filter from every key RocksDB holds (one pass, reading ahead; the blocks it
/// reads stay in the block cache, empty at this point, so lookups of old keys start warm).
fn scan_filter(db: &DB, dir: &Path, dedup: bool, mode: KeyMode) -> Result<KeyFilter, DedupError> {
    let mut hashes = Vec::new();
    if dedup {
        let cf = db
            .cf_handle(KEYS)
            .ok_or_else(|| DedupError::Corrupt("the keys column family is missing".into()))?;
        let mut read = ReadOptions::default();
        read.set_readahead_size(4 << 20);
        let mut it = db.raw_iterator_cf_opt(cf, read);
        it.seek_to_first();
        while let Some(k) = it.key() {
            if k.starts_with(&RECORD) {
                break;
            }
            hashes.push(match mode {
                KeyMode::Xxh3_128 => k.try_into().unwrap_or_else(|_| xxh3_128(k).to_le_bytes()),
                KeyMode::Raw => xxh3_128(k).to_le_bytes(),
            });
            it.next();
        }
        it.status()
            .map_err(|e| db_error(dir, "read the keys held", e))?;
    }
    // Room for twice the keys held, and at least 16 M (32 MiB): past its capacity the filter
    // adds a layer, and every layer is one more random cache line for each new key (measured:
    // starting at 4 M, 10 M keys took two layers and `dedup` 1.9-2.2 s of the bench's 11 M
    // rows; starting at 16 M, one layer and 1.35-1.46 s).
    let mut filter = KeyFilter::new((hashes.len() * 2).max(16 << 20));
    for h in hashes {
        filter.insert(h);
    }
    Ok(filter)
}

fn db_error(dir: &Path, what: &str, e: rocksdb::Error) -> DedupError {
    DedupError::Db {
        dir: dir.display().to_string(),
        what: what.to_string(),
        error: e.to_string(),
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

        let mut db_options = Options::default();
        db_options.create_if_missing(true);
        db_options.create_missing_column_families(true);
        db_options.enable_statistics();
        db_options.set_max_background_jobs(2);

        let mut keys_options = keys_cf_options(&cache);
        // The TTL filter only where there is a TTL: it is a call per key in every compaction.
        if options.key.as_ref().is_some_and(|k| k.ttl.is_some()) {
            let cutoff = Arc::clone(&cutoff);
            let expired = Arc::clone(&compaction_expired);
            keys_options.set_compaction_filter(
                "weir-dedup-ttl",
                move |_, key: &[u8], value: &[u8]| {
                    if key.starts_with(&RECORD) {
                        return Decision::Keep;
                    }
                    match value.try_into().map(i64::from_le_bytes) {
                        Ok(t) if t < cutoff.load(Ordering::Relaxed) => {
                            expired.fetch_add(1, Ordering::Relaxed);
                            Decision::Remove
                        }
                        _ => Decision::Keep,
                    }
                },
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
        .map_err(|e| db_error(dir, "open the state database", e))?;

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
            .map_err(|e| db_error(dir, "read the format", e))?
            .is_some()
        {
            return Err(DedupError::Config(format!(
                "state directory {} was written by an older weir (state format 1), which this one cannot continue; use another 'state.dir'",
                dir.display()
            )));
        }
        match db
            .get_cf(meta, SETUP)
            .map_err(|e| db_error(dir, "read the setup", e))?
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
                    .map_err(|e| db_error(dir, "write the setup", e))?;
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
                options: keys_cf_options(&cache),
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
            .map_err(|e| db_error(dir, "open the state database read-only", e))?;
        let meta = db
            .cf_handle(META)
            .ok_or_else(|| DedupError::Corrupt("the meta column family is missing".into()))?;
        let setup = db
            .get_cf(meta, SETUP)
            .map_err(|e| db_error(dir, "read the setup", e))?
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
            checkpoint.step,
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

    /// The rows of `batch` to keep: `None` keeps every row, else a mask that is false for
    /// duplicates. The first occurrence of a key is kept, in this batch or any earlier one,
    /// unless it expired. Kept keys become part of the open step and are written at
    /// [`StateStore::commit`].
    pub fn dedup(&mut self, batch: &RecordBatch) -> Result<Option<BooleanArray>, DedupError> {
        let Some(key) = &self.key else {
            return Ok(None);
        };
        let n = batch.num_rows();
        self.rows.encode(batch, &key.columns)?;
        debug_assert_eq!(self.rows.len(), n);
        self.run.rows += n as u64;
        if self.rows.has_times() {
            for r in 0..n {
                self.max_time = self.max_time.max(self.rows.time(r));
            }
        }
        let cutoff = key
            .ttl
            .map(|ttl| self.max_time.saturating_sub(ttl))
            .unwrap_or(i64::MIN);
        let live = |t: i64| key.ttl.is_none() || t >= cutoff;
        let mut keep = BooleanBufferBuilder::new(n);
        keep.append_n(n, true);
        let mut dropped = 0u64;

        // Pass 1: settle what memory can. Every key of the state, the open step's included, is
        // in the filter, so a key it has never seen is new without any other probe (most keys).
        // The others are looked for in the in-memory sets (this step's and recent keys), and
        // only the ones not there go to RocksDB.
        //
        // The filter and the sets are each probed in a loop of their own (1a, then 1b), each
        // prefetching the line a row AHEAD rows on will touch. Both are far larger than the
        // caches; measured (`bench/src/bin/random_lines.rs`), one loop touching both costs
        // about 1.5-2x the two loops apart, as the two streams of misses get in each other's
        // way. Order is kept: 1a only adds keys to the filter, and 1b walks the rows in order,
        // so a key's first row is in the set before a later row of the batch looks for it.
        const AHEAD: usize = 16;
        self.candidates.clear();
        let (cur, old) = (self.current, 1 - self.current);
        let raw_mode = self.raw_mode;
        let mut written = 0u64;
        self.fresh.clear();
        for r in 0..n {
            if r + AHEAD < n {
                self.filter.prefetch(self.rows.hash(r + AHEAD));
            }
            let fresh = self.filter.insert_if_new(self.rows.hash(r));
            self.fresh.push(fresh);
        }
        for r in 0..n {
            if r + AHEAD < n {
                self.recent[cur].prefetch(self.rows.hash(r + AHEAD));
            }
            let (h, raw, time) = (self.rows.hash(r), self.rows.raw(r), self.rows.time(r));
            if self.fresh[r] {
                self.recent[cur].insert_new(h, raw, time);
                self.pending.push(raw_mode, h, raw, time);
                written += 1;
                continue;
            }
            let seen = self.recent[cur]
                .get(h, raw)
                .or_else(|| self.recent[old].get(h, raw));
            match seen {
                Some(t) if live(t) => {
                    keep.set_bit(r, false);
                    dropped += 1;
                    self.run.recent_hits += 1;
                }
                // Held in memory with its latest time, and expired: RocksDB holds no newer one.
                Some(_) => {
                    self.run.expired += 1;
                    self.recent[cur].insert(h, raw, time);
                    self.pending.push(raw_mode, h, raw, time);
                    written += 1;
                }
                None => self.candidates.push(r),
            }
        }
        // Pass 2: one batched lookup for the keys the filter may hold.
        if !self.candidates.is_empty() {
            let keys_cf = self
                .db
                .cf_handle(KEYS)
                .ok_or_else(|| DedupError::Corrupt("the keys column family is missing".into()))?;
            let rows = &self.rows;
            let found = self.db.batched_multi_get_cf(
                keys_cf,
                self.candidates.iter().map(|&r| rows.stored(r)),
                false,
            );
            self.run.lookups += self.candidates.len() as u64;
            for (&r, got) in self.candidates.iter().zip(found) {
                let (h, raw, time) = (rows.hash(r), rows.raw(r), rows.time(r));
                // An earlier row of this batch may have brought the key in.
                if matches!(self.recent[cur].get(h, raw), Some(t) if live(t)) {
                    keep.set_bit(r, false);
                    dropped += 1;
                    self.run.recent_hits += 1;
                    continue;
                }
                let stored = got.map_err(|e| db_error(&self.dir, "look keys up", e))?;
                let stored_time = stored
                    .as_deref()
                    .map(|v| v.try_into().map(i64::from_le_bytes).unwrap_or(i64::MIN));
                match stored_time {
                    Some(t) if live(t) => {
                        keep.set_bit(r, false);
                        dropped += 1;
                        // Hot duplicates are then answered from memory.
                        self.recent[cur].insert(h, raw, t);
                    }
                    expired => {
                        if expired.is_some() {
                            self.run.expired += 1;
                        }
                        self.recent[cur].insert(h, raw, time);
                        self.filter.insert(h);
                        self.pending.push(raw_mode, h, rows.raw(r), time);
                        written += 1;
                    }
                }
            }
        }
        self.run.dropped += dropped;
        self.run.written += written;
        Ok((dropped > 0).then(|| BooleanArray::new(keep.finish(), None)))
    }

    /// Commits the open step: this step's keys and `checkpoint` in one atomic RocksDB commit
    /// (see `write_commit`). Call it only once the step's output is durable under its final
    /// name. It returns once the previous step's commit is durable; this one's is written on
    /// the commit thread ([`StateStore::finish`] waits for it).
    pub fn commit(&mut self, mut checkpoint: Checkpoint) -> Result<(), DedupError> {
        checkpoint.step = self.committed.step + 1;
        let counters = self.counters();
        let record = encode_checkpoint(&checkpoint, self.max_time, &counters);
        let record_hash = xxh3_64(&record);
        let mut records = vec![(checkpoint_key(), record)];
        let mut files: Vec<&String> = checkpoint.files.iter().collect();
        files.sort();
        files.dedup();
        for f in files {
            records.push((
                [
                    file_prefix(),
                    format!("{:020}/{f}", checkpoint.step).into_bytes(),
                ]
                .concat(),
                Vec::new(),
            ));
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
        self.committer.send(job).map_err(|error| DedupError::Db {
            dir: self.dir.display().to_string(),
            what: "commit a step".into(),
            error,
        })?;
        if let Some(spare) = self.committer.spare.take() {
            self.pending = spare;
        }
        self.committed = checkpoint;
        self.committed_record = record_hash;
        // Every key in the older generation was committed by an earlier, finished commit;
        // start a new generation when this one is full.
        if self.recent[self.current].len() >= self.recent_keys {
            self.current = 1 - self.current;
            self.recent[self.current].clear();
        }
        Ok(())
    }

    /// Waits until the last commit is durable (a run calls it before it reports success), then
    /// saves the key filter so the next open need not rebuild it from every key in RocksDB.
    /// The save is an optimisation only: if it fails, the next open scans as after a crash.
    pub fn finish(&mut self) -> Result<(), DedupError> {
        self.committer.wait().map_err(|error| DedupError::Db {
            dir: self.dir.display().to_string(),
            what: "commit a step".into(),
            error,
        })?;
        if self.key.is_some()
            && save_filter(&self.dir, self.committed_record, &self.filter).is_err()
        {
            let _ = std::fs::remove_file(self.dir.join(format!("{FILTER_FILE}.tmp")));
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
            &self.counters(),
            self.key.is_some(),
            self.committed.step,
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
            if let Some(name) = rest.get(21..) {
                files.push(String::from_utf8_lossy(name).into_owned());
            }
            it.next();
        }
        it.status()
            .map_err(|e| db_error(&self.dir, "list committed files", e))?;
        Ok(files)
    }
}

fn stats_of(
    c: &Counters,
    dedup: bool,
    step: u64,
    keys_held_estimate: u64,
    (recent_keys_in_memory, recent_bytes): (usize, usize),
    (block_cache_bytes, block_cache_usage): (u64, u64),
    bytes_on_disk: u64,
) -> DedupStats {
    let t = |k: Ticker| {
        TICKERS
            .iter()
            .position(|x| *x == k)
            .map(|i| c.tickers[i])
            .unwrap_or(0)
    };
    DedupStats {
        dedup,
        step,
        rows: c.rows,
        duplicates_dropped: c.dropped,
        recent_hits: c.recent_hits,
        lookups: c.lookups,
        keys_written: c.written,
        keys_expired: c.expired,
        keys_held_estimate,
        recent_keys_in_memory,
        recent_bytes,
        block_cache_bytes,
        block_cache_usage,
        cache_hit: t(Ticker::BlockCacheHit),
        cache_miss: t(Ticker::BlockCacheMiss),
        data_hit: t(Ticker::BlockCacheDataHit),
        data_miss: t(Ticker::BlockCacheDataMiss),
        index_hit: t(Ticker::BlockCacheIndexHit),
        index_miss: t(Ticker::BlockCacheIndexMiss),
        filter_hit: t(Ticker::BlockCacheFilterHit),
        filter_miss: t(Ticker::BlockCacheFilterMiss),
        bloom_useful: t(Ticker::BloomFilterUseful),
        bloom_positive: t(Ticker::BloomFilterFullPositive),
        bloom_true_positive: t(Ticker::BloomFilterFullTruePositive),
        bytes_on_disk,
    }
}

/// The last checkpoint, the largest event time and the counters (defaults before a commit).
/// The last checkpoint, the largest event time, the counters (defaults before a commit), and a
/// hash of the checkpoint record that names this exact committed state.
fn read_checkpoint(db: &DB, dir: &Path) -> Result<(Checkpoint, i64, Counters, u64), DedupError> {
    let keys = db
        .cf_handle(KEYS)
        .ok_or_else(|| DedupError::Corrupt("the keys column family is missing".into()))?;
    match db
        .get_cf(keys, checkpoint_key())
        .map_err(|e| db_error(dir, "read the checkpoint", e))?
    {
        Some(bytes) => {
            let (c, t, n) = decode_checkpoint(&bytes).ok_or_else(|| {
                DedupError::Corrupt(format!(
                    "the checkpoint record in {} cannot be read",
                    dir.display()
                ))
            })?;
            Ok((c, t, n, xxh3_64(&bytes)))
        }
        None => Ok((Checkpoint::default(), i64::MIN, Counters::default(), 0)),
    }
}

/// The key filter saved by the last clean [`StateStore::finish`], if it was saved at exactly
/// the committed state `record` names: a crash after it, or any other history, leaves a file
/// whose record does not match, and the filter is rebuilt from RocksDB instead.
fn load_filter(dir: &Path, record: u64) -> Option<KeyFilter> {
    let file = std::fs::File::open(dir.join(FILTER_FILE)).ok()?;
    let mut input = std::io::BufReader::with_capacity(1 << 20, file);
    let mut saved = [0u8; 8];
    std::io::Read::read_exact(&mut input, &mut saved).ok()?;
    if u64::from_le_bytes(saved) != record {
        return None;
    }
    KeyFilter::read(&mut input).ok().flatten()
}

/// Saves the key filter for the next open, bound to the committed state `record` names:
/// written aside, synced, then renamed over the last one.
fn save_filter(dir: &Path, record: u64, filter: &KeyFilter) -> std::io::Result<()> {
    use std::io::Write;
    let tmp = dir.join(format!("{FILTER_FILE}.tmp"));
    let file = std::fs::File::create(&tmp)?;
    let mut out = std::io::BufWriter::with_capacity(1 << 20, file);
    out.write_all(&record.to_le_bytes())?;
    filter.write(&mut out)?;
    out.into_inner().map_err(|e| e.into_error())?.sync_all()?;
    std::fs::rename(&tmp, dir.join(FILTER_FILE))
}

fn dir_bytes(dir: &Path) -> u64 {
    std::fs::read_dir(dir)
        .map(|it| {
            it.filter_map(Result::ok)
                .filter_map(|e| e.metadata().ok())
                .filter(|m| m.is_file())
                .map(|m| m.len())
                .sum()
        })
        .unwrap_or(0)
}

fn put_str(out: &mut Vec<u8>, s: &str) {
    out.extend_from_slice(&(s.len() as u32).to_le_bytes());
    out.extend_from_slice(s.as_bytes());
}

fn encode_checkpoint(c: &Checkpoint, max_time: i64, counters: &Counters) -> Vec<u8> {
    let mut out = vec![FORMAT];
    out.extend_from_slice(&c.step.to_le_bytes());
    out.extend_from_slice(&max_time.to_le_bytes());
    out.extend_from_slice(&(c.positions.len() as u32).to_le_bytes());
    for (name, pos) in &c.positions {
        put_str(&mut out, name);
        out.extend_from_slice(&pos.to_le_bytes());
    }
    out.extend_from_slice(&(c.files.len() as u32).to_le_bytes());
    for f in &c.files {
        put_str(&mut out, f);
    }
    for v in [
        counters.rows,
        counters.dropped,
        counters.recent_hits,
        counters.lookups,
        counters.written,
        counters.expired,
    ]
    .iter()
    .chain(counters.tickers.iter())
    {
        out.extend_from_slice(&v.to_le_bytes());
    }
    out
}

struct Reader<'a>(&'a [u8]);

impl Reader<'_> {
    fn take<const N: usize>(&mut self) -> Option<[u8; N]> {
        let (head, rest) = self.0.split_at_checked(N)?;
        self.0 = rest;
        head.try_into().ok()
    }
    fn u64(&mut self) -> Option<u64> {
        self.take::<8>().map(u64::from_le_bytes)
    }
    fn u32(&mut self) -> Option<u32> {
        self.take::<4>().map(u32::from_le_bytes)
    }
    fn string(&mut self) -> Option<String> {
        let n = self.u32()? as usize;
        let (s, rest) = self.0.split_at_checked(n)?;
        self.0 = rest;
        String::from_utf8(s.to_vec()).ok()
    }
}

fn decode_checkpoint(bytes: &[u8]) -> Option<(Checkpoint, i64, Counters)> {
    let mut r = Reader(bytes);
    if r.take::<1>()? != [FORMAT] {
        return None;
    }
    let step = r.u64()?;
    let max_time = r.u64()? as i64;
    let mut positions = Vec::new();
    for _ in 0..r.u32()? {
        let name = r.string()?;
        positions.push((name, r.u64()? as i64));
    }
    let mut files = Vec::new();
    for _ in 0..r.u32()? {
        files.push(r.string()?);
    }
    let mut counters = Counters {
        rows: r.u64()?,
        dropped: r.u64()?,
        recent_hits: r.u64()?,
        lookups: r.u64()?,
        written: r.u64()?,
        expired: r.u64()?,
        tickers: [0; TICKERS.len()],
    };
    for t in counters.tickers.iter_mut() {
        *t = r.u64()?;
    }
    Some((
        Checkpoint {
            step,
            positions,
            files,
        },
        max_time,
        counters,
    ))
}
