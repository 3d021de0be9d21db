//! A membership filter over every key of the state, in memory: a blocked bloom filter (each key
//! sets one bit in each of the 8 words of one 64-byte block, so a probe touches one cache line). A "no" is certain,
//! so a key the filter has never seen needs no RocksDB lookup at all; only "maybe" keys (the
//! duplicates not held in memory, and about 0.2% false positives) are looked up.
//!
//! RocksDB's own bloom filters answer the same question, but only after a call through its C
//! API, a memtable probe and a filter probe per level, about a microsecond a key; this answers
//! in one cache line, and the batch loop prefetches that line ahead of use.
//!
//! It grows by layers: when the newest layer holds its capacity, a layer twice its size is
//! added, so the false-positive rate stays bounded without rebuilding from RocksDB.

use crate::table::{hash_words as words, prefetch};

const BITS_PER_KEY: usize = 16;

/// Odd multipliers, one per 64-bit word of a block: each picks that word's bit from the key's
/// high hash word (a split-block layout like Parquet's bloom filters: one bit in each word,
/// so the eight tests and sets are independent and vectorise, with no loop-carried chain).
const SALT: [u64; 8] = [
    0x47b6_137b_4497_4d91,
    0x8824_ad5b_a2b7_289d,
    0x7054_95c7_2df1_424b,
    0x9efc_4947_5c6b_fb31,
    0x2ce2_0ecb_5aba_c9f1,
    0x3c6a_1a3d_fe1d_7b0f,
    0x705b_b26f_1a53_0c51,
    0x1ed3_a0b1_98f4_d5d7,
];

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
            blocks: crate::table::table(blocks, [0u64; 8]),
            mask: blocks - 1,
            capacity,
            count: 0,
        }
    }

    #[inline]
    fn block(&self, lo: u64) -> usize {
        (lo.rotate_right(32) as usize) & self.mask
    }

    #[inline]
    fn contains(&self, lo: u64, bits: &[u64; 8]) -> bool {
        let block = &self.blocks[self.block(lo)];
        let mut missing = 0;
        for i in 0..8 {
            missing |= bits[i] & !block[i];
        }
        missing == 0
    }
}

/// The bit each word of a block holds for a key.
#[inline]
fn bits(hi: u64) -> [u64; 8] {
    let mut out = [0u64; 8];
    for i in 0..8 {
        out[i] = 1 << (hi.wrapping_mul(SALT[i]) >> 58);
    }
    out
}

/// The first bytes of a saved filter (format 1).
const MAGIC: &[u8; 8] = b"WEIRKF\x00\x01";
/// Blocks converted per write or read call.
const CHUNK: usize = 1024;

fn read_u64(input: &mut impl std::io::Read) -> std::io::Result<u64> {
    let mut b = [0u8; 8];
    input.read_exact(&mut b)?;
    Ok(u64::from_le_bytes(b))
}

/// See the module docs.
pub(crate) struct KeyFilter {
    /// Full layers, oldest first; they only answer.
    full: Vec<Layer>,
    /// The layer keys go into.
    open: Layer,
}

impl KeyFilter {
    /// A filter for about `capacity` keys before its first new layer.
    pub(crate) fn new(capacity: usize) -> Self {
        Self {
            full: Vec::new(),
            open: Layer::new(capacity.max(1 << 16)),
        }
    }

    /// Adds a key's hash.
    #[inline]
    pub(crate) fn insert(&mut self, hash: [u8; 16]) {
        let (lo, hi) = words(hash);
        self.set(lo, &bits(hi));
    }

    #[inline]
    fn set(&mut self, lo: u64, bits: &[u64; 8]) {
        if self.open.count >= self.open.capacity {
            self.add_layer();
        }
        let b = self.open.block(lo);
        let block = &mut self.open.blocks[b];
        for i in 0..8 {
            block[i] |= bits[i];
        }
        self.open.count += 1;
    }

    #[cold]
    fn add_layer(&mut self) {
        let next = Layer::new(self.open.capacity * 2);
        self.full.push(std::mem::replace(&mut self.open, next));
    }

    /// False when the key was certainly never inserted.
    #[cfg(test)]
    pub(crate) fn may_contain(&self, hash: [u8; 16]) -> bool {
        let (lo, hi) = words(hash);
        let bits = bits(hi);
        self.open.contains(lo, &bits) || self.full.iter().any(|l| l.contains(lo, &bits))
    }

    /// Inserts the key when the filter has certainly never seen it and says so (true); says
    /// false, inserting nothing, when it may have. One hash split and one block read for both.
    #[inline]
    pub(crate) fn insert_if_new(&mut self, hash: [u8; 16]) -> bool {
        let (lo, hi) = words(hash);
        let bits = bits(hi);
        if self.open.contains(lo, &bits) || self.full.iter().any(|l| l.contains(lo, &bits)) {
            return false;
        }
        self.set(lo, &bits);
        true
    }

    /// Starts loading the cache lines [`KeyFilter::may_contain`] will read for `hash`.
    #[inline]
    pub(crate) fn prefetch(&self, hash: [u8; 16]) {
        let (lo, _) = words(hash);
        prefetch(&self.open.blocks[self.open.block(lo)]);
        for layer in &self.full {
            prefetch(&layer.blocks[layer.block(lo)]);
        }
    }

    /// Writes the filter, every layer's sizes and blocks (see [`KeyFilter::read`]).
    pub(crate) fn write(&self, out: &mut impl std::io::Write) -> std::io::Result<()> {
        out.write_all(MAGIC)?;
        out.write_all(&(self.full.len() as u64 + 1).to_le_bytes())?;
        let mut buf = Vec::with_capacity(CHUNK * 64);
        for layer in self.full.iter().chain(std::iter::once(&self.open)) {
            for v in [layer.capacity, layer.count, layer.blocks.len()] {
                out.write_all(&(v as u64).to_le_bytes())?;
            }
            for chunk in layer.blocks.chunks(CHUNK) {
                buf.clear();
                for word in chunk.iter().flatten() {
                    buf.extend_from_slice(&word.to_le_bytes());
                }
                out.write_all(&buf)?;
            }
        }
        Ok(())
    }

    /// Reads what [`KeyFilter::write`] wrote: `Ok(None)` when the bytes are not a filter
    /// (another format, impossible sizes), an error when they end early.
    pub(crate) fn read(input: &mut impl std::io::Read) -> std::io::Result<Option<Self>> {
        let mut magic = [0u8; 8];
        input.read_exact(&mut magic)?;
        if &magic != MAGIC {
            return Ok(None);
        }
        let layers = read_u64(input)?;
        if layers == 0 || layers > 64 {
            return Ok(None);
        }
        let mut all = Vec::new();
        let mut buf = vec![0u8; CHUNK * 64];
        for _ in 0..layers {
            let capacity = read_u64(input)? as usize;
            let count = read_u64(input)? as usize;
            let blocks = read_u64(input)? as usize;
            // At most 64 GiB of blocks: anything larger is not a filter this crate wrote.
            if !blocks.is_power_of_two() || blocks > 1 << 30 {
                return Ok(None);
            }
            let mut layer = Layer {
                blocks: crate::table::table(blocks, [0u64; 8]),
                mask: blocks - 1,
                capacity,
                count,
            };
            for chunk in layer.blocks.chunks_mut(CHUNK) {
                let bytes = &mut buf[..chunk.len() * 64];
                input.read_exact(bytes)?;
                for (word, b) in chunk.iter_mut().flatten().zip(bytes.chunks_exact(8)) {
                    let mut w = [0u8; 8];
                    w.copy_from_slice(b);
                    *word = u64::from_le_bytes(w);
                }
            }
            all.push(layer);
        }
        let Some(open) = all.pop() else {
            return Ok(None);
        };
        Ok(Some(Self { full: all, open }))
    }

    /// Bytes held.
    pub(crate) fn bytes(&self) -> usize {
        (self.full.iter().map(|l| l.blocks.len()).sum::<usize>() + self.open.blocks.len()) * 64
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
        assert!(f.full.len() >= 2);
        assert!((0..n).all(|i| f.may_contain(h(i))));
        assert!((0..n).all(|i| !f.insert_if_new(h(i))));
        assert!(f.insert_if_new(h(n + 200_000)));
        assert!(f.may_contain(h(n + 200_000)));
        let fp = (n..n + 100_000).filter(|&i| f.may_contain(h(i))).count();
        // About 0.1-0.3% a layer at 16 bits a key; a few layers add up.
        assert!(fp < 1_000, "{fp} false positives in 100000");

        let mut saved = Vec::new();
        f.write(&mut saved).unwrap();
        let mut back = KeyFilter::read(&mut saved.as_slice()).unwrap().unwrap();
        assert_eq!(back.full.len(), f.full.len());
        assert!((0..n).all(|i| back.may_contain(h(i))));
        let fp_back = (n..n + 100_000).filter(|&i| back.may_contain(h(i))).count();
        assert_eq!(fp_back, fp);
        // It goes on growing where it left off.
        assert!(back.insert_if_new(h(n + 300_000)));
        // Truncated, or not a filter at all.
        assert!(KeyFilter::read(&mut &saved[..saved.len() - 1]).is_err());
        assert!(KeyFilter::read(&mut &b"not a filter, long enough"[..])
            .unwrap()
            .is_none());
    }
}
