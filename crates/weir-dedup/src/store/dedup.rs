//! The key lookup: which rows of a batch are duplicates, answered from memory where it can (the
//! key filter, then this step's and recent keys) and from RocksDB in one batched lookup for the
//! rest.

use arrow_array::{BooleanArray, RecordBatch};
use arrow_buffer::BooleanBufferBuilder;

use super::record::KEYS;
use super::StateStore;
use crate::DedupError;

impl StateStore {
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
                let stored = got.map_err(|e| DedupError::db(&self.dir, "look keys up", e))?;
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
}
