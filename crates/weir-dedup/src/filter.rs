//! A membership filter over every key of the state, in memory: a blocked bloom filter (each key
//! sets 8 bits inside one 64-byte block, so a probe touches one cache line). A "no" is certain,
//! so a key the filter has never seen needs no RocksDB lookup at all; only "maybe" keys (the
//! duplicates not held in memory, and about 0.2% false positives) are looked up.
//!
//! RocksDB's own bloom filters answer the same question, but only after a call through its C
//! API, a memtable probe and a filter probe per level, about a microsecond a key; this answers
//! in one cache line, and the batch loop prefetches that line ahead of use.
//!
//! It grows by layers: when the newest layer holds its capacity, a layer twice its size is
//! added, so the false-positive rate stays bounded without rebuilding from RocksDB.

const BITS_PER_KEY: usize = 16;
const PROBES: u32 = 8;

struct Layer {
    blocks: Vec<[u64; 8]>,
    mask: usize,
    capacity: usize,
    count: usize,
}

impl Layer {
    fn new(capacity: usize) -> Self {
        let blocks = (capacity * BITS_PER_KEY / 512).next_power_of_two().max(1);
        Self {
            blocks: vec![[0u64; 8]; blocks],
            mask: blocks - 1,
            capacity,
            count: 0,
        }
    }

    #[inline]
    fn block(&self, lo: u64) -> usize {
        (lo.rotate_right(32) as usize) & self.mask
    }
}

/// Bit positions inside a block, from the hash's high word.
#[inline]
fn positions(hi: u64) -> impl Iterator<Item = u32> {
    let mut h = hi | 1;
    (0..PROBES).map(move |_| {
        h = h.wrapping_mul(0x9E37_79B9_7F4A_7C15);
        (h >> 55) as u32
    })
}

#[inline]
fn words(hash: [u8; 16]) -> (u64, u64) {
    let mut lo = [0u8; 8];
    let mut hi = [0u8; 8];
    lo.copy_from_slice(&hash[..8]);
    hi.copy_from_slice(&hash[8..]);
    (u64::from_le_bytes(lo), u64::from_le_bytes(hi))
}

/// See the module docs.
pub(crate) struct KeyFilter {
    layers: Vec<Layer>,
}

impl KeyFilter {
    /// A filter for about `capacity` keys before its first new layer.
    pub(crate) fn new(capacity: usize) -> Self {
        Self {
            layers: vec![Layer::new(capacity.max(1 << 16))],
        }
    }

    /// Adds a key's hash.
    #[inline]
    pub(crate) fn insert(&mut self, hash: [u8; 16]) {
        let full = self.layers.last().is_some_and(|l| l.count >= l.capacity);
        if full {
            let cap = self.layers.last().map_or(1 << 16, |l| l.capacity * 2);
            self.layers.push(Layer::new(cap));
        }
        let (lo, hi) = words(hash);
        if let Some(layer) = self.layers.last_mut() {
            let b = layer.block(lo);
            let block = &mut layer.blocks[b];
            for p in positions(hi) {
                block[(p >> 6) as usize] |= 1 << (p & 63);
            }
            layer.count += 1;
        }
    }

    /// False when the key was certainly never inserted.
    #[inline]
    pub(crate) fn may_contain(&self, hash: [u8; 16]) -> bool {
        let (lo, hi) = words(hash);
        self.layers.iter().any(|layer| {
            let block = &layer.blocks[layer.block(lo)];
            positions(hi).all(|p| block[(p >> 6) as usize] & (1 << (p & 63)) != 0)
        })
    }

    /// Starts loading the cache lines [`KeyFilter::may_contain`] will read for `hash`.
    #[inline]
    pub(crate) fn prefetch(&self, hash: [u8; 16]) {
        let (lo, _) = words(hash);
        for layer in &self.layers {
            crate::set::prefetch(&layer.blocks[layer.block(lo)]);
        }
    }

    /// Bytes held.
    pub(crate) fn bytes(&self) -> usize {
        self.layers.iter().map(|l| l.blocks.len() * 64).sum()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn h(n: u64) -> [u8; 16] {
        xxhash_rust::xxh3::xxh3_128(&n.to_le_bytes()).to_le_bytes()
    }

    #[test]
    fn no_false_negatives_and_few_false_positives_across_layers() {
        let mut f = KeyFilter::new(1 << 16);
        let n = 300_000u64; // past the first layer's capacity: three layers
        for i in 0..n {
            f.insert(h(i));
        }
        assert!(f.layers.len() >= 3);
        assert!((0..n).all(|i| f.may_contain(h(i))));
        let fp = (n..n + 100_000).filter(|&i| f.may_contain(h(i))).count();
        // About 0.1-0.3% a layer at 16 bits a key; a few layers add up.
        assert!(fp < 1_000, "{fp} false positives in 100000");
    }
}
