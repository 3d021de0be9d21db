//! weir's state: primary-key dedup and exactly-once checkpoints, in one RocksDB database per
//! state directory.
//!
//! This crate owns:
//! - [`StateStore`]: opens a state directory; [`StateStore::dedup`] marks the duplicate rows of
//!   a batch (first occurrence wins; a TTL on an event-time column expires old keys), and
//!   [`StateStore::commit`] writes, in one atomic RocksDB commit (a sorted table file it
//!   ingests, or a synced write batch when there is no dedup key), the keys of the step, the
//!   next position of every source partition, the files the step completed and the operator
//!   state (opaque bytes, such as a continuous query's open windows) in [`Checkpoint`].
//! - [`PartitionKeys`]: one Kafka partition's keys in memory, for a consumer group whose
//!   partitions move between processes: each step's new keys come out as a key file the caller
//!   stores beside the output, and a new owner restores the partition from those files.
//! - [`KeyColumns`] and [`KeyMode`]: which columns make a key, stored hashed (xxh3-128) or raw.
//! - [`DedupStats`]: block-cache hit rates overall and for data, index and filter blocks apart,
//!   bloom-filter usefulness, keys held and expired, duplicates dropped and bytes on disk. The
//!   overall hit rate alone can hide a poor data-block rate (a cache that answers 95% of all
//!   lookups can still miss 10% of the data blocks, which are the expensive misses), so all are
//!   shown.
//!
//! Lookups are batched per RecordBatch (`batched_multi_get`), and two generations of recently
//! seen keys sit in memory in front of RocksDB (an open-addressing table, no allocation per key),
//! so hot duplicates and repeated keys within a step never reach it. The crate does no Arrow
//! compute and no I/O besides RocksDB and its directory.

mod filter;
mod keys;
mod order;
mod partition;
mod set;
mod store;
mod table;

use std::fmt;

pub use keys::{KeyColumns, KeyMode};
pub use partition::PartitionKeys;
pub use store::{Checkpoint, CommitError, DedupKey, StateOptions, StateStore};

/// What went wrong with the state.
#[derive(Debug, thiserror::Error)]
pub enum DedupError {
    /// A setting is wrong.
    #[error("{0}")]
    Config(String),
    /// RocksDB failed.
    #[error("state directory {dir}: cannot {what}: {source}")]
    Db {
        /// The state directory.
        dir: String,
        /// What was being done.
        what: String,
        /// RocksDB's error.
        #[source]
        source: rocksdb::Error,
    },
    /// A step's commit failed: it is not durable, and the run must stop.
    #[error("state directory {dir}: cannot commit a step: {source}")]
    Commit {
        /// The state directory.
        dir: String,
        /// What failed.
        #[source]
        source: CommitError,
    },
    /// The directory could not be created or read.
    #[error("state directory {path}: {error}")]
    Io {
        /// The path.
        path: String,
        /// The cause.
        error: std::io::Error,
    },
    /// The state holds something this version cannot read.
    #[error("the state is damaged: {0}")]
    Corrupt(String),
}

impl DedupError {
    /// RocksDB's error `e` while doing `what` in the state directory `dir`.
    pub(crate) fn db(dir: &std::path::Path, what: &str, e: rocksdb::Error) -> Self {
        Self::Db {
            dir: dir.display().to_string(),
            what: what.to_string(),
            source: e,
        }
    }
}

/// The state's statistics: cumulative over every run on the state directory.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct DedupStats {
    /// Whether a dedup key is set (else the state holds checkpoints only).
    pub dedup: bool,
    /// Steps committed.
    pub step: u64,
    /// Bytes of operator state in the last checkpoint ([`Checkpoint::state`]).
    pub state_bytes: u64,
    /// Rows checked.
    pub rows: u64,
    /// Rows dropped as duplicates.
    pub duplicates_dropped: u64,
    /// Duplicates answered from memory, without RocksDB.
    pub recent_hits: u64,
    /// Keys looked up in RocksDB.
    pub lookups: u64,
    /// Keys written (first occurrences, and expired keys seen again).
    pub keys_written: u64,
    /// Keys found expired, at lookup or dropped by compaction.
    pub keys_expired: u64,
    /// Keys in RocksDB, as RocksDB estimates them.
    pub keys_held_estimate: u64,
    /// Keys in the in-memory sets now.
    pub recent_keys_in_memory: usize,
    /// Bytes of the in-memory sets and the key filter.
    pub recent_bytes: usize,
    /// The block cache's configured size.
    pub block_cache_bytes: u64,
    /// The block cache's use now.
    pub block_cache_usage: u64,
    /// Block cache hits, all blocks.
    pub cache_hit: u64,
    /// Block cache misses, all blocks.
    pub cache_miss: u64,
    /// Data-block hits.
    pub data_hit: u64,
    /// Data-block misses.
    pub data_miss: u64,
    /// Index-block hits.
    pub index_hit: u64,
    /// Index-block misses.
    pub index_miss: u64,
    /// Filter-block hits.
    pub filter_hit: u64,
    /// Filter-block misses.
    pub filter_miss: u64,
    /// Lookups a bloom filter answered "absent" (no data block read).
    pub bloom_useful: u64,
    /// Lookups a bloom filter let through.
    pub bloom_positive: u64,
    /// Of those, the key was really there.
    pub bloom_true_positive: u64,
    /// Bytes of the state directory's files.
    pub bytes_on_disk: u64,
}

fn rate(hit: u64, miss: u64) -> String {
    if hit + miss == 0 {
        "-".to_string()
    } else {
        format!(
            "{:.2}% ({hit} hits, {miss} misses)",
            100.0 * hit as f64 / (hit + miss) as f64
        )
    }
}

impl fmt::Display for DedupStats {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        writeln!(f, "steps committed:        {}", self.step)?;
        if self.state_bytes == 0 {
            writeln!(f, "operator state:         none")?;
        } else {
            writeln!(
                f,
                "operator state:         {} bytes ({:.1} MiB)",
                self.state_bytes,
                self.state_bytes as f64 / (1u64 << 20) as f64
            )?;
        }
        if !self.dedup {
            return writeln!(f, "dedup:                  off (checkpoints only)");
        }
        writeln!(f, "rows checked:           {}", self.rows)?;
        writeln!(f, "duplicates dropped:     {}", self.duplicates_dropped)?;
        writeln!(
            f,
            "  answered in memory:   {} (RocksDB lookups: {})",
            self.recent_hits, self.lookups
        )?;
        writeln!(f, "keys written:           {}", self.keys_written)?;
        writeln!(f, "keys expired:           {}", self.keys_expired)?;
        writeln!(f, "keys held (estimate):   {}", self.keys_held_estimate)?;
        if self.recent_bytes > 0 {
            writeln!(
                f,
                "keys in memory:         {} ({} MiB with the key filter)",
                self.recent_keys_in_memory,
                self.recent_bytes >> 20
            )?;
        }
        if self.block_cache_bytes > 0 {
            writeln!(
                f,
                "block cache:            {} MiB configured, {} MiB used",
                self.block_cache_bytes >> 20,
                self.block_cache_usage >> 20
            )?;
        } else {
            writeln!(f, "block cache:            (as of the last commit)")?;
        }
        writeln!(
            f,
            "  hit rate, all blocks: {}",
            rate(self.cache_hit, self.cache_miss)
        )?;
        writeln!(
            f,
            "  data blocks:          {}",
            rate(self.data_hit, self.data_miss)
        )?;
        writeln!(
            f,
            "  index blocks:         {}",
            rate(self.index_hit, self.index_miss)
        )?;
        writeln!(
            f,
            "  filter blocks:        {}",
            rate(self.filter_hit, self.filter_miss)
        )?;
        let checked = self.bloom_useful + self.bloom_positive;
        let false_pos = self.bloom_positive.saturating_sub(self.bloom_true_positive);
        writeln!(
            f,
            "bloom filters:          {} checks, {} answered absent ({}), {} false positives",
            checked,
            self.bloom_useful,
            if checked == 0 {
                "-".to_string()
            } else {
                format!("{:.2}%", 100.0 * self.bloom_useful as f64 / checked as f64)
            },
            false_pos
        )?;
        writeln!(f, "bytes on disk:          {}", self.bytes_on_disk)
    }
}
