//! Reading the fields of a response body: a bounds-checked cursor shared by the hand-read
//! responses (`fetch_response.rs`, `responses.rs`).

use std::ops::Range;

/// Reads fields from a byte slice, every read bounds-checked.
pub(crate) struct Cursor<'a> {
    pub(crate) b: &'a [u8],
    pub(crate) pos: usize,
}

/// What is wrong with a response body; `what` names the field.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum WireError {
    /// The body ends inside a field.
    #[error("truncated {what} at byte {at}")]
    Truncated {
        /// The field.
        what: &'static str,
        /// Where it starts.
        at: usize,
    },
    /// A varint runs over five bytes.
    #[error("malformed varint in {what}")]
    Varint {
        /// The field.
        what: &'static str,
    },
    /// An array count that is negative or larger than the bytes left could hold.
    #[error("impossible {what} count {count} at byte {at}")]
    Count {
        /// The array.
        what: &'static str,
        /// The count read.
        count: i64,
        /// Where the array's elements start.
        at: usize,
    },
    /// A negative length other than null's -1.
    #[error("negative {what} length {len}")]
    NegativeLength {
        /// The field.
        what: &'static str,
        /// The length read.
        len: i64,
    },
    /// Null where the protocol allows none.
    #[error("null {0}")]
    Null(&'static str),
    /// Text that is not UTF-8.
    #[error("{0} is not UTF-8")]
    NotUtf8(&'static str),
    /// A response version this client does not read (it asked for another).
    #[error("{api} v{version} is not read by this client")]
    Version {
        /// The API.
        api: &'static str,
        /// The version.
        version: i16,
    },
}

pub(crate) type Parse<T> = Result<T, WireError>;

impl<'a> Cursor<'a> {
    pub(crate) fn take(&mut self, n: usize, what: &'static str) -> Parse<&'a [u8]> {
        let end = self
            .pos
            .checked_add(n)
            .filter(|&e| e <= self.b.len())
            .ok_or(WireError::Truncated { what, at: self.pos })?;
        let s = &self.b[self.pos..end];
        self.pos = end;
        Ok(s)
    }
    pub(crate) fn i16(&mut self, what: &'static str) -> Parse<i16> {
        let s = self.take(2, what)?;
        Ok(i16::from_be_bytes([s[0], s[1]]))
    }
    pub(crate) fn i32(&mut self, what: &'static str) -> Parse<i32> {
        let s = self.take(4, what)?;
        Ok(i32::from_be_bytes([s[0], s[1], s[2], s[3]]))
    }
    pub(crate) fn i64(&mut self, what: &'static str) -> Parse<i64> {
        let s = self.take(8, what)?;
        let mut a = [0u8; 8];
        a.copy_from_slice(s);
        Ok(i64::from_be_bytes(a))
    }
    pub(crate) fn uvarint(&mut self, what: &'static str) -> Parse<u32> {
        let mut v = 0u32;
        for shift in (0..35).step_by(7) {
            let byte = self.take(1, what)?[0];
            v |= u32::from(byte & 0x7f) << shift;
            if byte & 0x80 == 0 {
                return Ok(v);
            }
        }
        Err(WireError::Varint { what })
    }
    /// An array length: INT32 (-1 null) or, flexible, UNSIGNED_VARINT n+1 (0 null). `None` is
    /// null. The count is checked against the bytes left at `min_size` bytes per element.
    pub(crate) fn array_len(
        &mut self,
        flexible: bool,
        min_size: usize,
        what: &'static str,
    ) -> Parse<Option<usize>> {
        let n: i64 = if flexible {
            i64::from(self.uvarint(what)?) - 1
        } else {
            i64::from(self.i32(what)?)
        };
        if n == -1 {
            return Ok(None);
        }
        if n < 0 || (n as u64).saturating_mul(min_size as u64) > (self.b.len() - self.pos) as u64 {
            return Err(WireError::Count {
                what,
                count: n,
                at: self.pos,
            });
        }
        Ok(Some(n as usize))
    }
    /// A string or nullable bytes: INT16/INT32 length or, flexible, UNSIGNED_VARINT n+1.
    pub(crate) fn bytes(
        &mut self,
        flexible: bool,
        wide: bool,
        what: &'static str,
    ) -> Parse<Option<Range<usize>>> {
        let n: i64 = if flexible {
            i64::from(self.uvarint(what)?) - 1
        } else if wide {
            i64::from(self.i32(what)?)
        } else {
            i64::from(self.i16(what)?)
        };
        if n == -1 {
            return Ok(None);
        }
        if n < 0 {
            return Err(WireError::NegativeLength { what, len: n });
        }
        let start = self.pos;
        self.take(n as usize, what)?;
        Ok(Some(start..self.pos))
    }
    /// Skips a tagged-field section (flexible versions).
    pub(crate) fn tagged(&mut self, what: &'static str) -> Parse<()> {
        let n = self.uvarint(what)?;
        for _ in 0..n {
            self.uvarint(what)?;
            let size = self.uvarint(what)? as usize;
            self.take(size, what)?;
        }
        Ok(())
    }
}
