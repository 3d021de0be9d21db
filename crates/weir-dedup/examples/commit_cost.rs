//! What one step's commit costs a key, piece by piece: putting the keys in order (the standard
//! sorts against `order::sort_hashed`, which the commit uses), then RocksDB's `SstFileWriter`
//! building the table file and the ingestion, with the table options the state uses and with
//! variants of them.
//!
//! `cargo run --release -p weir-dedup --example commit_cost [KEYS] [VARIANT ...]`; variants:
//! `state` (the state's options), `nobloom`, `restart64`, `xxh3`, `nochecksum`, `v6`, `16k`.
use std::time::Instant;

use rocksdb::{
    BlockBasedOptions, Cache, ChecksumType, DBCompressionType, IngestExternalFileOptions, Options,
    SstFileWriter, DB,
};
use xxhash_rust::xxh3::xxh3_128;

// The commit's own sort, compiled into this example (it is private to the crate).
#[path = "../src/order.rs"]
mod order;

fn table_options(variant: &str, cache: &Cache) -> Options {
    let mut table = BlockBasedOptions::default();
    table.set_block_cache(cache);
    if variant != "nobloom" {
        table.set_bloom_filter(10.0, false);
    }
    table.set_whole_key_filtering(true);
    table.set_cache_index_and_filter_blocks(true);
    table.set_block_size(if variant == "16k" { 16 << 10 } else { 4 << 10 });
    match variant {
        "restart64" => table.set_block_restart_interval(64),
        "xxh3" => table.set_checksum_type(ChecksumType::XXH3),
        "nochecksum" => table.set_checksum_type(ChecksumType::NoChecksum),
        "v6" => table.set_format_version(6),
        _ => {}
    }
    let mut options = Options::default();
    options.set_block_based_table_factory(&table);
    options.set_compression_type(DBCompressionType::None);
    options.set_disable_auto_compactions(true);
    options
}

fn per_key(start: Instant, n: usize) -> f64 {
    start.elapsed().as_nanos() as f64 / n as f64
}

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let mut args = std::env::args().skip(1);
    let n: usize = args
        .next()
        .map(|s| s.parse())
        .transpose()?
        .unwrap_or(1_000_000);
    let mut variants: Vec<String> = args.collect();
    if variants.is_empty() {
        variants.push("state".into());
    }
    let keys: Vec<order::HashedKey> = (0..n as u64)
        .map(|i| (xxh3_128(&i.to_le_bytes()).to_le_bytes(), i as i64))
        .collect();
    let mut sorted = Vec::new();
    let mut scratch = Vec::new();
    for _ in 0..3 {
        let mut k = keys.clone();
        let t = Instant::now();
        k.sort_by_key(|(k, _)| u128::from_be_bytes(*k));
        let stable = per_key(t, n);
        let mut k = keys.clone();
        let t = Instant::now();
        k.sort_unstable_by_key(|(k, _)| u128::from_be_bytes(*k));
        let unstable = per_key(t, n);
        sorted.clone_from(&keys);
        let t = Instant::now();
        order::sort_hashed(&mut sorted, &mut scratch);
        let radix = per_key(t, n);
        assert_eq!(k, sorted);
        println!(
            "sort, ns a key: stable {stable:.1}, unstable {unstable:.1}, sort_hashed {radix:.1}"
        );
    }
    let dir = tempfile::tempdir()?;
    let cache = Cache::new_lru_cache(64 << 20);
    for v in &variants {
        let options = table_options(v, &cache);
        let mut db_options = table_options(v, &cache);
        db_options.create_if_missing(true);
        let db = DB::open(&db_options, dir.path().join(format!("db-{v}")))?;
        for round in 0..3 {
            let path = dir.path().join(format!("{v}-{round}.sst"));
            let t = Instant::now();
            let mut file = SstFileWriter::create(&options);
            file.open(&path)?;
            for (k, _) in &sorted {
                file.put(k, [])?;
            }
            let put = per_key(t, n);
            file.finish()?;
            let built = per_key(t, n);
            let mut ingest = IngestExternalFileOptions::default();
            ingest.set_move_files(true);
            db.ingest_external_file_opts(&ingest, vec![&path])?;
            let all = per_key(t, n);
            println!(
                "{v:10} ns a key: put {put:.1}, finish {:.1}, ingest {:.1}, total {all:.1}",
                built - put,
                all - built
            );
        }
    }
    Ok(())
}
