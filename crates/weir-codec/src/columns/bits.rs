//! A growable bitmap (validity, or boolean values) shared by the protobuf and JSON column
//! buffers. Hand-written rather than arrow's builder because a failed message must be rolled
//! back (`truncate`), and the result becomes an Arrow buffer without a copy (`take`).

use arrow_buffer::{BooleanBuffer, Buffer};

/// A growable bitmap.
#[derive(Debug, Default, Clone)]
pub(crate) struct Bits {
    bytes: Vec<u8>,
    len: usize,
}

impl Bits {
    /// An empty bitmap with room for `bits` bits.
    pub(crate) fn with_capacity(bits: usize) -> Self {
        Self {
            bytes: Vec::with_capacity(bits.div_ceil(8)),
            len: 0,
        }
    }

    /// `len` bits, all `value`, with room for `capacity` bits.
    pub(crate) fn filled(len: usize, value: bool, capacity: usize) -> Self {
        let mut bytes = Vec::with_capacity(capacity.max(len).div_ceil(8));
        bytes.resize(len.div_ceil(8), if value { 0xFF } else { 0 });
        let mut b = Self { bytes, len };
        b.clear_tail();
        b
    }

    /// Bits held.
    #[inline(always)]
    pub(crate) fn len(&self) -> usize {
        self.len
    }

    /// Makes room for `bits` more bits.
    pub(crate) fn reserve(&mut self, bits: usize) {
        self.bytes.reserve(bits.div_ceil(8));
    }

    /// Appends one bit.
    #[inline(always)]
    pub(crate) fn push(&mut self, v: bool) {
        let i = self.len;
        if i % 8 == 0 {
            self.bytes.push(0);
        }
        if v {
            if let Some(last) = self.bytes.last_mut() {
                *last |= 1 << (i % 8);
            }
        }
        self.len = i + 1;
    }

    /// Appends `n` bits, all `v`.
    pub(crate) fn extend_constant(&mut self, n: usize, v: bool) {
        let len = self.len + n;
        if v {
            // Fill the partial last byte, then whole bytes; `clear_tail` trims the excess.
            if self.len % 8 != 0 {
                if let Some(last) = self.bytes.last_mut() {
                    *last |= !((1u8 << (self.len % 8)) - 1);
                }
            }
            self.bytes.resize(len.div_ceil(8), 0xFF);
        } else {
            self.bytes.resize(len.div_ceil(8), 0);
        }
        self.len = len;
        self.clear_tail();
    }

    /// Sets bit `i`; an `i` past the end is ignored.
    #[inline(always)]
    pub(crate) fn set(&mut self, i: usize, v: bool) {
        if i >= self.len {
            return;
        }
        if let Some(b) = self.bytes.get_mut(i / 8) {
            let mask = 1u8 << (i % 8);
            // Branch-free: set or clear by the value.
            *b = (*b & !mask) | (mask & (v as u8).wrapping_neg());
        }
    }

    /// Makes this bitmap a copy of `other`, reusing this one's buffer.
    pub(crate) fn copy_from(&mut self, other: &Bits) {
        self.bytes.clone_from(&other.bytes);
        self.len = other.len;
    }

    /// Zeroes the bits past `len` in the last byte (Arrow ignores them; tidy for equality).
    fn clear_tail(&mut self) {
        if self.len % 8 != 0 {
            if let Some(last) = self.bytes.last_mut() {
                *last &= (1u8 << (self.len % 8)) - 1;
            }
        }
    }

    /// Bit `i` (false past the end).
    #[inline]
    pub(crate) fn get(&self, i: usize) -> bool {
        i < self.len && self.bytes[i / 8] >> (i % 8) & 1 != 0
    }

    /// Drops the bits from `len` on (a rolled-back row).
    pub(crate) fn truncate(&mut self, len: usize) {
        if len >= self.len {
            return;
        }
        self.len = len;
        self.bytes.truncate(len.div_ceil(8));
        self.clear_tail();
    }

    /// The bits as an Arrow buffer; the bitmap starts again empty with room for `capacity`.
    pub(crate) fn take(&mut self, capacity: usize) -> BooleanBuffer {
        let len = self.len;
        let bytes = std::mem::replace(&mut self.bytes, Vec::with_capacity(capacity.div_ceil(8)));
        self.len = 0;
        BooleanBuffer::new(Buffer::from_vec(bytes), 0, len)
    }
}

#[cfg(test)]
mod tests {
    use super::Bits;

    fn bits(b: &Bits) -> Vec<bool> {
        let buf = b.clone().take(0);
        (0..buf.len()).map(|i| buf.value(i)).collect()
    }

    #[test]
    fn extend_constant_and_set_match_pushes() {
        for start in 0..10 {
            for n in [0, 1, 7, 8, 9, 23] {
                for v in [false, true] {
                    let mut a = Bits::default();
                    let mut b = Bits::default();
                    for i in 0..start {
                        a.push(i % 3 == 0);
                        b.push(i % 3 == 0);
                    }
                    a.extend_constant(n, v);
                    for _ in 0..n {
                        b.push(v);
                    }
                    assert_eq!(bits(&a), bits(&b), "start {start} n {n} v {v}");
                    assert_eq!(a.bytes, b.bytes, "tail bits: start {start} n {n} v {v}");
                    if start + n > 0 {
                        let i = (start + n) / 2;
                        a.set(i, !v);
                        let mut want = bits(&b);
                        want[i] = !v;
                        assert_eq!(bits(&a), want);
                    }
                    a.set(start + n, true); // past the end: ignored
                    assert_eq!(a.len(), start + n);
                }
            }
        }
    }
}
