//! The key filter's start at open: the one the last clean finish saved for exactly the
//! committed state, or else one built by a scan of every key RocksDB holds.

use std::io::{Read, Write};
use std::path::Path;

use rocksdb::{ReadOptions, DB};
use xxhash_rust::xxh3::xxh3_128;

use super::record::{KEYS, RECORD};
use crate::filter::KeyFilter;
use crate::keys::KeyMode;
use crate::DedupError;

/// The key filter a clean finish leaves for the next open (see `load_filter`).
const FILTER_FILE: &str = "key-filter";

/// The key filter saved by the last clean [`super::StateStore::finish`], if it was saved at
/// exactly the committed state `record` names: a crash after it, or any other history, leaves a
/// file whose record does not match, and the filter is rebuilt from RocksDB instead.
pub(super) fn load_filter(dir: &Path, record: u64) -> Option<KeyFilter> {
    let file = std::fs::File::open(dir.join(FILTER_FILE)).ok()?;
    let mut input = std::io::BufReader::with_capacity(1 << 20, file);
    let mut saved = [0u8; 8];
    input.read_exact(&mut saved).ok()?;
    if u64::from_le_bytes(saved) != record {
        return None;
    }
    KeyFilter::read(&mut input).ok().flatten()
}

/// Saves the key filter for the next open, bound to the committed state `record` names:
/// written aside, synced, then renamed over the last one. On failure the file written aside is
/// removed; the last one stays, and as it names an older state, the next open scans instead.
pub(super) fn save_filter(dir: &Path, record: u64, filter: &KeyFilter) -> std::io::Result<()> {
    let tmp = dir.join(format!("{FILTER_FILE}.tmp"));
    let saved = write_filter(&tmp, record, filter)
        .and_then(|()| std::fs::rename(&tmp, dir.join(FILTER_FILE)));
    if saved.is_err() {
        let _ = std::fs::remove_file(&tmp);
    }
    saved
}

fn write_filter(path: &Path, record: u64, filter: &KeyFilter) -> std::io::Result<()> {
    let file = std::fs::File::create(path)?;
    let mut out = std::io::BufWriter::with_capacity(1 << 20, file);
    out.write_all(&record.to_le_bytes())?;
    filter.write(&mut out)?;
    out.into_inner().map_err(|e| e.into_error())?.sync_all()
}

/// Builds the key filter from every key RocksDB holds (one pass, reading ahead; the blocks it
/// reads stay in the block cache, empty at this point, so lookups of old keys start warm).
pub(super) fn scan_filter(
    db: &DB,
    dir: &Path,
    dedup: bool,
    mode: KeyMode,
) -> Result<KeyFilter, DedupError> {
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
            .map_err(|e| DedupError::db(dir, "read the keys held", e))?;
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
