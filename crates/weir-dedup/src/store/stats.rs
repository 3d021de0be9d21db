//! The statistics: the counters a state keeps across runs (in its checkpoint record), and how
//! they and RocksDB's own make a [`DedupStats`].

use std::path::Path;

use rocksdb::statistics::Ticker;

use crate::DedupStats;

/// Counters kept across runs in the checkpoint record.
#[derive(Debug, Clone, Copy, Default)]
pub(super) struct Counters {
    pub(super) rows: u64,
    pub(super) dropped: u64,
    pub(super) recent_hits: u64,
    pub(super) lookups: u64,
    pub(super) written: u64,
    pub(super) expired: u64,
    pub(super) tickers: [u64; TICKERS.len()],
}

/// RocksDB's tickers the counters keep, in the checkpoint record's order.
pub(super) const TICKERS: [Ticker; 11] = [
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

pub(super) fn stats_of(
    c: &Counters,
    dedup: bool,
    (step, state_bytes): (u64, u64),
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
        state_bytes,
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

/// Bytes of the files directly in `dir`.
pub(super) fn dir_bytes(dir: &Path) -> u64 {
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
