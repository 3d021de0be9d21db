//! An open-addressing set of keys with their event times, in front of RocksDB. Written here
//! rather than taken from a crate because it must hold keys without an allocation per key: slots
//! are one flat array, and raw keys (in `'dedup.hash' = 'none'` mode) live in one byte arena.

/// Starts loading the cache line that holds `value`, so a probe a few rows later finds it there.
#[inline]
pub(crate) fn prefetch<T>(value: &T) {
    #[cfg(target_arch = "x86_64")]
    // SAFETY: a prefetch is a hint; it reads nothing and cannot fault.
    unsafe {
        use std::arch::x86_64::{_mm_prefetch, _MM_HINT_T0};
        _mm_prefetch::<_MM_HINT_T0>((value as *const T).cast::<i8>());
    }
    #[cfg(not(target_arch = "x86_64"))]
    let _ = value;
}

/// One slot: the key's 128-bit hash split in two words (`lo == 0` marks an empty slot), its
/// event time, and for raw keys where the bytes sit in the arena.
#[derive(Debug, Clone, Copy, Default)]
struct Slot {
    lo: u64,
    hi: u64,
    time: i64,
    at: u32,
    len: u32,
}

/// A set of keys. Lookups compare the full 128-bit hash, and in raw mode the key bytes too, so a
/// hit is exact in both modes.
#[derive(Debug)]
pub(crate) struct KeySet {
    slots: Vec<Slot>,
    len: usize,
    arena: Vec<u8>,
    raw: bool,
}

impl KeySet {
    /// A set sized for about `keys` keys before it first grows.
    pub(crate) fn new(keys: usize, raw: bool) -> Self {
        let cap = (keys.max(8) * 2).next_power_of_two();
        Self {
            slots: crate::table::table(cap, Slot::default()),
            len: 0,
            arena: Vec::new(),
            raw,
        }
    }

    pub(crate) fn len(&self) -> usize {
        self.len
    }

    /// Forgets every key, keeping the memory.
    pub(crate) fn clear(&mut self) {
        if self.len > 0 {
            self.slots.fill(Slot::default());
            self.len = 0;
        }
        self.arena.clear();
    }

    #[inline]
    fn split(hash: [u8; 16]) -> (u64, u64) {
        let mut lo = [0u8; 8];
        let mut hi = [0u8; 8];
        lo.copy_from_slice(&hash[..8]);
        hi.copy_from_slice(&hash[8..]);
        // 0 marks an empty slot; a hash whose low word is 0 is stored as 1 (the high word and,
        // for raw keys, the bytes still tell keys apart).
        (u64::from_le_bytes(lo).max(1), u64::from_le_bytes(hi))
    }

    /// The index of `key`'s slot, or of the empty slot where it would go.
    #[inline]
    fn probe(&self, lo: u64, hi: u64, key: &[u8]) -> (usize, bool) {
        let mask = self.slots.len() - 1;
        let mut i = (lo as usize) & mask;
        loop {
            let s = &self.slots[i];
            if s.lo == 0 {
                return (i, false);
            }
            if s.lo == lo
                && s.hi == hi
                && (!self.raw || &self.arena[s.at as usize..s.at as usize + s.len as usize] == key)
            {
                return (i, true);
            }
            i = (i + 1) & mask;
        }
    }

    /// Starts loading the slot where a probe for `hash` begins.
    #[inline]
    pub(crate) fn prefetch(&self, hash: [u8; 16]) {
        let (lo, _) = Self::split(hash);
        prefetch(&self.slots[(lo as usize) & (self.slots.len() - 1)]);
    }

    /// The time stored with `key`, if the set holds it.
    #[inline]
    pub(crate) fn get(&self, hash: [u8; 16], key: &[u8]) -> Option<i64> {
        let (lo, hi) = Self::split(hash);
        match self.probe(lo, hi, key) {
            (i, true) => Some(self.slots[i].time),
            _ => None,
        }
    }

    /// Adds `key` with `time`, or sets the time of the key already there.
    #[inline]
    pub(crate) fn insert(&mut self, hash: [u8; 16], key: &[u8], time: i64) {
        if (self.len + 1) * 2 > self.slots.len() {
            self.grow();
        }
        let (lo, hi) = Self::split(hash);
        match self.probe(lo, hi, key) {
            (i, true) => self.slots[i].time = time,
            (i, false) => {
                let (at, len) = if self.raw {
                    let at = self.arena.len();
                    self.arena.extend_from_slice(key);
                    (at as u32, key.len() as u32)
                } else {
                    (0, 0)
                };
                self.slots[i] = Slot {
                    lo,
                    hi,
                    time,
                    at,
                    len,
                };
                self.len += 1;
            }
        }
    }

    /// Adds `key`, which the set certainly does not hold (the key filter has never seen it), so
    /// the probe stops at the first empty slot without comparing keys.
    #[inline]
    pub(crate) fn insert_new(&mut self, hash: [u8; 16], key: &[u8], time: i64) {
        if (self.len + 1) * 2 > self.slots.len() {
            self.grow();
        }
        let (lo, hi) = Self::split(hash);
        let mask = self.slots.len() - 1;
        let mut i = (lo as usize) & mask;
        while self.slots[i].lo != 0 {
            i = (i + 1) & mask;
        }
        let (at, len) = if self.raw {
            let at = self.arena.len();
            self.arena.extend_from_slice(key);
            (at as u32, key.len() as u32)
        } else {
            (0, 0)
        };
        self.slots[i] = Slot {
            lo,
            hi,
            time,
            at,
            len,
        };
        self.len += 1;
    }

    /// Doubles the table: amortised over the keys that filled it, never per key.
    #[cold]
    fn grow(&mut self) {
        let doubled = crate::table::table(self.slots.len() * 2, Slot::default());
        let old = std::mem::replace(&mut self.slots, doubled);
        let mask = self.slots.len() - 1;
        for s in old.into_iter().filter(|s| s.lo != 0) {
            let mut i = (s.lo as usize) & mask;
            while self.slots[i].lo != 0 {
                i = (i + 1) & mask;
            }
            self.slots[i] = s;
        }
    }

    /// Bytes held (slots and arena), for the statistics.
    pub(crate) fn bytes(&self) -> usize {
        self.slots.len() * std::mem::size_of::<Slot>() + self.arena.capacity()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn h(n: u64) -> [u8; 16] {
        xxhash_rust::xxh3::xxh3_128(&n.to_le_bytes()).to_le_bytes()
    }

    #[test]
    fn holds_keys_through_growth_and_clear() {
        let mut s = KeySet::new(4, false);
        for n in 0..10_000u64 {
            s.insert(h(n), &[], n as i64);
        }
        assert_eq!(s.len(), 10_000);
        for n in 0..10_000u64 {
            assert_eq!(s.get(h(n), &[]), Some(n as i64));
        }
        assert_eq!(s.get(h(10_001), &[]), None);
        s.insert(h(5), &[], -1);
        assert_eq!(s.get(h(5), &[]), Some(-1));
        assert_eq!(s.len(), 10_000);
        s.clear();
        assert_eq!(s.get(h(5), &[]), None);
        assert_eq!(s.len(), 0);
    }

    #[test]
    fn raw_keys_compare_their_bytes_even_when_hashes_collide() {
        let mut s = KeySet::new(4, true);
        let same = [7u8; 16];
        s.insert(same, b"alpha", 1);
        // A forced collision: same hash, other bytes, must be a different key.
        assert_eq!(s.get(same, b"beta"), None);
        s.insert(same, b"beta", 2);
        assert_eq!(s.get(same, b"alpha"), Some(1));
        assert_eq!(s.get(same, b"beta"), Some(2));
        assert_eq!(s.len(), 2);
    }
}
