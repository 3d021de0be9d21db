//! RocksDB's tuning for the state: the database's options, the `keys` column family's table
//! and compaction options, and the TTL's compaction filter.

use std::sync::atomic::{AtomicI64, AtomicU64, Ordering};
use std::sync::Arc;

use rocksdb::compaction_filter::Decision;
use rocksdb::{
    BlockBasedOptions, Cache, DBCompactionStyle, DBCompressionType, Options,
    UniversalCompactOptions,
};

use super::record::RECORD;

/// The database's options. Statistics are on: [`crate::DedupStats`] reports its tickers.
pub(super) fn db_options() -> Options {
    let mut db_options = Options::default();
    db_options.create_if_missing(true);
    db_options.create_missing_column_families(true);
    db_options.enable_statistics();
    db_options.set_max_background_jobs(2);
    db_options
}

/// The `keys` column family's options (without the TTL compaction filter): RocksDB's and the
/// committer's table files are built with them.
///
/// Point lookups: whole-key bloom filters (10 bits a key, about 1% false positives), and index
/// and filter blocks in the block cache with L0's and the top level's pinned, so a lookup of an
/// absent key costs filter probes in memory and no data-block read.
pub(super) fn keys_cf_options(cache: &Cache) -> Options {
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
    // Close a data block whenever the next entry would overflow it, unless the block holds
    // less than 1% (RocksDB's default closes it only once 90% full, else lets the entry in).
    // The checkpoint record, which holds the operator state (megabytes, for a continuous
    // query), follows the step's last keys in its table file: by default it joins their block,
    // and a lookup of any of those keys then reads and checks megabytes. Blocks of keys are
    // the same either way (measured: table files of 200,000 keys of 16 to 300 bytes came out
    // byte for byte the same size). 99, not 100: 100 turns the rule off. The Rust API has no
    // setter for it; an options string sets it on a copy of this table factory, with the same
    // cache. Should that fail, only the cost of those lookups is lost.
    match options.get_options_from_string("block_based_table_factory={block_size_deviation=99}") {
        Ok(closing) => closing,
        Err(_) => options,
    }
}

/// Makes compactions drop the keys whose time (their value) is older than `cutoff`, counting
/// them in `expired`. The step records are kept whatever their value.
pub(super) fn set_ttl_filter(
    keys_options: &mut Options,
    cutoff: Arc<AtomicI64>,
    expired: Arc<AtomicU64>,
) {
    keys_options.set_compaction_filter("weir-dedup-ttl", move |_, key: &[u8], value: &[u8]| {
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
    });
}

#[cfg(test)]
mod tests {
    use rocksdb::perf::set_perf_stats;
    use rocksdb::{PerfContext, PerfMetric, PerfStatsLevel, SstFileWriter, DB};

    use super::*;

    /// A large checkpoint record in a table file: a lookup of the key before it must not read it.
    #[test]
    fn a_large_record_does_not_share_a_data_block_with_keys() {
        let dir = tempfile::tempdir().unwrap();
        let cache = Cache::new_lru_cache(64 << 20);
        let path = dir.path().join("step.sst");
        let table_options = keys_cf_options(&cache);
        let mut file = SstFileWriter::create(&table_options);
        file.open(&path).unwrap();
        // 100 keys fill a block to well under 90%, where RocksDB would let the record in.
        let key = |i: u64| [[0u8; 8], i.to_be_bytes()].concat();
        for i in 0..100 {
            file.put(key(i), []).unwrap();
        }
        let record = [&RECORD[..], b"checkpoint"].concat();
        file.put(&record, vec![7u8; 4 << 20]).unwrap();
        file.finish().unwrap();
        let mut db_options = keys_cf_options(&cache);
        db_options.create_if_missing(true);
        let db = DB::open(&db_options, dir.path().join("db")).unwrap();
        db.ingest_external_file(vec![&path]).unwrap();
        // Bytes of blocks a lookup reads (this thread's, from the files).
        set_perf_stats(PerfStatsLevel::EnableCount);
        let mut perf = PerfContext::default();
        perf.reset();
        assert!(db.get(key(99)).unwrap().is_some());
        let read = perf.metric(PerfMetric::BlockReadByte);
        assert!(read < 64 << 10, "a key lookup read {read} bytes");
        perf.reset();
        assert_eq!(db.get(&record).unwrap().map(|v| v.len()), Some(4 << 20));
        let read = perf.metric(PerfMetric::BlockReadByte);
        assert!(read >= 4 << 20, "the record read {read} bytes");
    }
}
