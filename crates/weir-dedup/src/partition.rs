//! The dedup keys of one Kafka partition, held in memory, whose changes are written out step by
//! step so that another process can take the partition up with its keys.
//!
//! A consumer group moves partitions between processes, so their keys cannot live in one
//! process's RocksDB. Each partition's keys are a set in memory ([`PartitionKeys`]); each step
//! adds a *key file* of the keys it first saw (or saw again after they expired), which the
//! caller stores beside the output before the step commits there. A key file read back is a
//! fact about the partition's records between two offsets, whoever wrote it: the keys the
//! records in `[from, to)` added to the keys of the records before `from`. So the union of the
//! key files whose `to` is at most a committed offset is exactly the keys of the records before
//! it, even where a process that lost the partition wrote files that never committed: theirs
//! hold keys of records before their own `to` too. [`PartitionKeys::restore`] reads them;
//! [`PartitionKeys::snapshot`] writes all of a partition's keys as one file, so a restore reads
//! one file, not one a step.

use arrow_array::{BooleanArray, RecordBatch};
use arrow_buffer::BooleanBufferBuilder;
use xxhash_rust::xxh3::xxh3_64;

use crate::keys::{KeyMode, RowKeys};
use crate::set::KeySet;
use crate::{DedupError, DedupKey};

/// The first bytes of a key file, with its format's version.
const MAGIC: &[u8; 8] = b"WEIRKEY1";
/// Magic, flags (u8), 7 bytes reserved, key count (u64), largest event time (i64).
const HEADER: usize = 8 + 8 + 8 + 8;
/// The trailing xxh3-64 of everything before it.
const TRAILER: usize = 8;

const RAW: u8 = 1;
const TIMED: u8 = 2;

/// One partition's dedup keys.
#[derive(Debug)]
pub struct PartitionKeys {
    ttl: Option<i64>,
    columns: crate::KeyColumns,
    raw: bool,
    timed: bool,
    set: KeySet,
    rows: RowKeys,
    /// The largest event time seen (TTL), as of the last batch.
    max_time: i64,
    /// The keys this step added: entries of a key file, back to back.
    step: Vec<u8>,
    step_keys: u64,
    /// The largest time moved during this step (a TTL's clock is part of the state).
    step_moved: bool,
    /// Rows checked and dropped, since this value was made.
    rows_checked: u64,
    dropped: u64,
}

impl PartitionKeys {
    /// No keys yet, for the dedup key `key`.
    pub fn new(key: &DedupKey) -> Self {
        let raw = key.mode == KeyMode::Raw;
        let timed = key.ttl.is_some();
        Self {
            ttl: key.ttl,
            columns: key.columns.clone(),
            raw,
            timed,
            set: KeySet::new(1 << 12, raw, timed),
            rows: RowKeys::new(key.mode),
            max_time: i64::MIN,
            step: Vec::new(),
            step_keys: 0,
            step_moved: false,
            rows_checked: 0,
            dropped: 0,
        }
    }

    /// Keys held.
    pub fn len(&self) -> usize {
        self.set.len()
    }

    /// Whether no key is held.
    pub fn is_empty(&self) -> bool {
        self.set.len() == 0
    }

    /// Whether `other` (another partition's keys, under the same dedup key) holds the key of
    /// row `row` of the batch last given to [`PartitionKeys::dedup`]. A producer that sends
    /// each key to one partition never makes this true: it checks that the key determines the
    /// partition, which dedup per partition needs.
    pub fn row_key_in(&self, row: usize, other: &PartitionKeys) -> bool {
        row < self.rows.len()
            && other
                .set
                .get(self.rows.hash(row), self.rows.raw(row))
                .is_some()
    }

    /// Rows checked and rows dropped as duplicates so far.
    pub fn counts(&self) -> (u64, u64) {
        (self.rows_checked, self.dropped)
    }

    /// Bytes of memory the keys take.
    pub fn bytes(&self) -> usize {
        self.set.bytes()
    }

    /// The rows of `batch` (all of this partition) to keep: `None` keeps every row, else a
    /// mask false for duplicates. The first occurrence of a key is kept unless it expired; kept
    /// keys join this step's key file.
    pub fn dedup(&mut self, batch: &RecordBatch) -> Result<Option<BooleanArray>, DedupError> {
        let n = batch.num_rows();
        self.rows.encode(batch, &self.columns)?;
        self.rows_checked += n as u64;
        // The TTL's clock moves row by row, in the partition's order: whether a key expired
        // depends on the records before it only, never on how they were cut into batches, so
        // two members that read the same records keep the same rows.
        let before = self.max_time;
        let timed_rows = self.rows.has_times();
        let mut keep = BooleanBufferBuilder::new(n);
        keep.append_n(n, true);
        let mut dropped = 0u64;
        // The set is far larger than the caches: a row's slot is fetched some rows ahead.
        const AHEAD: usize = 16;
        for r in 0..n {
            if r + AHEAD < n {
                self.set.prefetch(self.rows.hash(r + AHEAD));
            }
            let (h, raw, time) = (self.rows.hash(r), self.rows.raw(r), self.rows.time(r));
            if timed_rows {
                self.max_time = self.max_time.max(time);
            }
            let cutoff = self
                .ttl
                .map(|ttl| self.max_time.saturating_sub(ttl))
                .unwrap_or(i64::MIN);
            match self.set.get(h, raw) {
                Some(t) if self.ttl.is_none() || t >= cutoff => {
                    keep.set_bit(r, false);
                    dropped += 1;
                }
                Some(_) => {
                    self.set.insert(h, raw, time);
                    self.step_keys += 1;
                    push_entry(&mut self.step, self.raw, self.timed, h, raw, time);
                }
                None => {
                    self.set.insert_new(h, raw, time);
                    self.step_keys += 1;
                    push_entry(&mut self.step, self.raw, self.timed, h, raw, time);
                }
            }
        }
        self.step_moved |= self.max_time != before;
        self.dropped += dropped;
        Ok((dropped > 0).then(|| BooleanArray::new(keep.finish(), None)))
    }

    /// The key file of the step that ends now, or `None` when the step changed nothing (no
    /// new key, the TTL's clock where it was). The step's keys are cleared either way.
    pub fn take_step(&mut self) -> Option<Vec<u8>> {
        let changed = self.step_keys > 0 || (self.timed && self.step_moved);
        let file = changed.then(|| {
            let mut file = Vec::with_capacity(HEADER + self.step.len() + TRAILER);
            self.header(&mut file, self.step_keys);
            file.extend_from_slice(&self.step);
            seal(file)
        });
        self.step.clear();
        self.step_keys = 0;
        self.step_moved = false;
        file
    }

    /// Forgets the keys of the step not yet taken (a step dropped): the set keeps them, so
    /// the caller restores the partition again rather than read on with this value.
    pub fn drop_step(&mut self) {
        self.step.clear();
        self.step_keys = 0;
        self.step_moved = false;
    }

    /// Every key held, as one key file, less the keys past their TTL (which dedup already
    /// treats as unseen, and the clock never moves back).
    pub fn snapshot(&self) -> Vec<u8> {
        let cutoff = self
            .ttl
            .map(|ttl| self.max_time.saturating_sub(ttl))
            .unwrap_or(i64::MIN);
        let entry = 16 + if self.timed { 8 } else { 0 } + if self.raw { 4 } else { 0 };
        let mut entries = Vec::with_capacity(self.set.len() * entry);
        let mut keys = 0u64;
        self.set.for_each(|hash, key, time| {
            if time >= cutoff {
                keys += 1;
                push_entry(&mut entries, self.raw, self.timed, hash, key, time);
            }
        });
        let mut file = Vec::with_capacity(HEADER + entries.len() + TRAILER);
        self.header(&mut file, keys);
        file.extend_from_slice(&entries);
        seal(file)
    }

    fn header(&self, file: &mut Vec<u8>, keys: u64) {
        file.extend_from_slice(MAGIC);
        let flags = if self.raw { RAW } else { 0 } | if self.timed { TIMED } else { 0 };
        file.extend_from_slice(&[flags, 0, 0, 0, 0, 0, 0, 0]);
        file.extend_from_slice(&keys.to_le_bytes());
        file.extend_from_slice(&self.max_time.to_le_bytes());
    }

    /// Adds the keys of the key file `file` (a key held twice keeps the later time); returns
    /// how many it held. A file written for another key mode, cut short or altered is refused,
    /// and nothing of it is added.
    pub fn restore(&mut self, file: &[u8]) -> Result<u64, DedupError> {
        let bad = |why: &str| DedupError::Corrupt(format!("a partition's key file: {why}"));
        if file.len() < HEADER + TRAILER || &file[..8] != MAGIC {
            return Err(bad("it is not a key file of this version of weir"));
        }
        let (body, sum) = file.split_at(file.len() - TRAILER);
        if xxh3_64(body).to_le_bytes() != sum {
            return Err(bad(
                "its checksum does not match (it was cut short or altered)",
            ));
        }
        let flags = body[8];
        if (flags & RAW != 0) != self.raw || (flags & TIMED != 0) != self.timed {
            return Err(bad(
                "it was written for another 'dedup.hash' or 'dedup.ttl' than the source has now",
            ));
        }
        let keys = read_u64(&body[16..24]);
        let max_time = read_u64(&body[24..32]) as i64;
        // Read it all before adding any of it: a bad entry leaves the set as it was.
        let mut entries = Vec::new();
        let mut at = HEADER;
        for _ in 0..keys {
            let e = next_entry(body, &mut at, self.raw, self.timed)
                .ok_or_else(|| bad("an entry runs past its end"))?;
            entries.push(e);
        }
        if at != body.len() {
            return Err(bad("it holds more than its header says"));
        }
        for (hash, key, time) in entries {
            match self.set.get(hash, key) {
                Some(t) if t >= time => {}
                Some(_) => self.set.insert(hash, key, time),
                None => self.set.insert_new(hash, key, time),
            }
        }
        self.max_time = self.max_time.max(max_time);
        Ok(keys)
    }
}

fn push_entry(out: &mut Vec<u8>, raw: bool, timed: bool, hash: [u8; 16], key: &[u8], time: i64) {
    out.extend_from_slice(&hash);
    if timed {
        out.extend_from_slice(&time.to_le_bytes());
    }
    if raw {
        out.extend_from_slice(&(key.len() as u32).to_le_bytes());
        out.extend_from_slice(key);
    }
}

/// The entry at `*at` of `body`, moving `at` past it; `None` when it runs past the end.
fn next_entry<'a>(
    body: &'a [u8],
    at: &mut usize,
    raw: bool,
    timed: bool,
) -> Option<([u8; 16], &'a [u8], i64)> {
    let hash: [u8; 16] = body.get(*at..*at + 16)?.try_into().ok()?;
    *at += 16;
    let mut time = i64::MIN;
    if timed {
        time = read_u64(body.get(*at..*at + 8)?) as i64;
        *at += 8;
    }
    let mut key: &[u8] = &[];
    if raw {
        let len = read_u64_from_u32(body.get(*at..*at + 4)?) as usize;
        *at += 4;
        key = body.get(*at..at.checked_add(len)?)?;
        *at += len;
    }
    Some((hash, key, time))
}

fn read_u64(b: &[u8]) -> u64 {
    let mut w = [0u8; 8];
    w.copy_from_slice(&b[..8]);
    u64::from_le_bytes(w)
}

fn read_u64_from_u32(b: &[u8]) -> u64 {
    let mut w = [0u8; 4];
    w.copy_from_slice(&b[..4]);
    u64::from(u32::from_le_bytes(w))
}

fn seal(mut file: Vec<u8>) -> Vec<u8> {
    let sum = xxh3_64(&file);
    file.extend_from_slice(&sum.to_le_bytes());
    file
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use arrow_array::{Int64Array, StringArray};
    use arrow_schema::{DataType, Field, Schema};

    use super::*;
    use crate::KeyColumns;

    fn batch(ids: &[&str], times: &[i64]) -> RecordBatch {
        let schema = Arc::new(Schema::new(vec![
            Field::new("id", DataType::Utf8, false),
            Field::new("ts", DataType::Int64, false),
        ]));
        RecordBatch::try_new(
            schema,
            vec![
                Arc::new(StringArray::from(ids.to_vec())),
                Arc::new(Int64Array::from(times.to_vec())),
            ],
        )
        .unwrap()
    }

    fn key(mode: KeyMode, ttl: Option<i64>) -> DedupKey {
        let b = batch(&[], &[]);
        let time = ttl.map(|_| "ts");
        DedupKey {
            columns: KeyColumns::resolve(&b.schema(), &["id".to_string()], time).unwrap(),
            mode,
            ttl,
        }
    }

    fn kept(keys: &mut PartitionKeys, ids: &[&str], times: &[i64]) -> Vec<String> {
        let b = batch(ids, times);
        let mask = keys.dedup(&b).unwrap();
        ids.iter()
            .enumerate()
            .filter(|(i, _)| mask.as_ref().is_none_or(|m| m.value(*i)))
            .map(|(_, s)| s.to_string())
            .collect()
    }

    #[test]
    fn what_expires_does_not_depend_on_batches() {
        let k = key(KeyMode::Xxh3_128, Some(10));
        let ids = ["a", "b", "a", "c", "a"];
        let times = [0, 5, 9, 20, 21];
        let mut whole = PartitionKeys::new(&k);
        let all = kept(&mut whole, &ids, &times);
        for cut in 1..ids.len() {
            let mut split = PartitionKeys::new(&k);
            let mut got = kept(&mut split, &ids[..cut], &times[..cut]);
            got.extend(kept(&mut split, &ids[cut..], &times[cut..]));
            assert_eq!(got, all, "cut at {cut}");
        }
        // "a" at 9 repeats "a" at 0 (the clock at 9: not expired, whatever comes later in the
        // batch); at 21 the clock has passed 0 + 10, so it is new again.
        assert_eq!(all, ["a", "b", "c", "a"]);
    }

    #[test]
    fn a_key_in_two_partitions_is_found() {
        for mode in [KeyMode::Xxh3_128, KeyMode::Raw] {
            let k = key(mode, None);
            let mut a = PartitionKeys::new(&k);
            let mut b = PartitionKeys::new(&k);
            kept(&mut a, &["x"], &[1]);
            assert_eq!(kept(&mut b, &["x", "y"], &[2, 3]), ["x", "y"]);
            assert!(b.row_key_in(0, &a), "x is in both");
            assert!(!b.row_key_in(1, &a), "y is in one");
            assert!(!b.row_key_in(2, &a), "no third row");
        }
    }

    #[test]
    fn step_files_restore_exactly_the_keys_seen_in_both_modes() {
        for mode in [KeyMode::Xxh3_128, KeyMode::Raw] {
            let k = key(mode, None);
            let mut a = PartitionKeys::new(&k);
            assert_eq!(kept(&mut a, &["x", "y", "x"], &[1, 2, 3]), ["x", "y"]);
            let first = a.take_step().expect("new keys");
            assert_eq!(kept(&mut a, &["y", "z"], &[4, 5]), ["z"]);
            let second = a.take_step().expect("a new key");
            assert_eq!(kept(&mut a, &["z"], &[6]), Vec::<String>::new());
            assert!(a.take_step().is_none(), "no new key, no TTL: no file");

            // Another process takes the partition up from the two files, in either order.
            let mut b = PartitionKeys::new(&k);
            assert_eq!(b.restore(&second).unwrap(), 1);
            assert_eq!(b.restore(&first).unwrap(), 2);
            assert_eq!(b.len(), 3);
            assert_eq!(kept(&mut b, &["x", "z", "w"], &[7, 8, 9]), ["w"]);

            // A snapshot holds the same keys.
            let mut c = PartitionKeys::new(&k);
            assert_eq!(c.restore(&b.snapshot()).unwrap(), 4);
            assert_eq!(kept(&mut c, &["w", "v", "x"], &[1, 1, 1]), ["v"]);
        }
    }

    #[test]
    fn a_ttl_clock_and_key_times_survive_a_restore() {
        let k = key(KeyMode::Xxh3_128, Some(10));
        let mut a = PartitionKeys::new(&k);
        assert_eq!(kept(&mut a, &["x"], &[100]), ["x"]);
        let first = a.take_step().unwrap();
        // Only the clock moves: the step still writes a file, as the clock decides expiry.
        assert_eq!(kept(&mut a, &["x"], &[105]), Vec::<String>::new());
        let second = a.take_step().expect("the clock moved");
        let mut b = PartitionKeys::new(&k);
        b.restore(&first).unwrap();
        b.restore(&second).unwrap();
        // A snapshot leaves out keys past their TTL, and drops the same rows.
        assert_eq!(kept(&mut b, &["y"], &[120]), ["y"]);
        let mut c = PartitionKeys::new(&k);
        assert_eq!(c.restore(&b.snapshot()).unwrap(), 1, "x expired at 110");
        assert_eq!(kept(&mut c, &["y", "x"], &[121, 121]), ["x"]);
        // x (time 100) expires once the clock passes 110, in both.
        assert_eq!(kept(&mut a, &["x"], &[111]), ["x"]);
        assert_eq!(kept(&mut b, &["x"], &[111]), ["x"]);
    }

    #[test]
    fn damaged_or_foreign_files_are_refused_whole() {
        let k = key(KeyMode::Xxh3_128, None);
        let mut a = PartitionKeys::new(&k);
        kept(&mut a, &["x", "y"], &[1, 2]);
        let file = a.take_step().unwrap();
        let mut b = PartitionKeys::new(&k);
        for cut in [0, 7, HEADER, file.len() - 1] {
            assert!(b.restore(&file[..cut]).is_err(), "cut at {cut}");
        }
        let mut flipped = file.clone();
        flipped[HEADER + 3] ^= 1;
        let e = b.restore(&flipped).unwrap_err().to_string();
        assert!(e.contains("checksum"), "{e}");
        assert!(PartitionKeys::new(&key(KeyMode::Raw, None))
            .restore(&file)
            .is_err());
        assert_eq!(b.len(), 0);
    }
}
