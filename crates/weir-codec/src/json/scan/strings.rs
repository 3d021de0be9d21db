//! Strings: finding the end of a string body eight bytes at a time, checking its escapes and
//! UTF-8, and unescaping it on demand.

use crate::error::DecodeError;

use super::syntax;

const ONES: u64 = 0x0101_0101_0101_0101;
const HIGH: u64 = 0x8080_8080_8080_8080;

/// Bytes of `v` that are zero, as their high bit. Bits above a true hit may be false hits
/// (borrows), so only the lowest set bit is meaningful; that is the only one we use.
#[inline(always)]
pub(super) fn zero_bytes(v: u64) -> u64 {
    v.wrapping_sub(ONES) & !v & HIGH
}

/// The high bit of every byte of `w` that ends the fast string loop: `"`, `\`, a control
/// character (< 0x20) or a non-ASCII byte. Eight bytes per step instead of one.
#[inline(always)]
pub(super) fn special_bytes(w: u64) -> u64 {
    zero_bytes(w ^ (ONES * b'"' as u64))
        | zero_bytes(w ^ (ONES * b'\\' as u64))
        | (w.wrapping_sub(ONES * 0x20) & !w & HIGH)
        | (w & HIGH)
}

/// The index of the first byte at or after `i` that ends the fast string loop (see
/// [`special_bytes`]), or `buf.len()`.
#[inline(always)]
pub(super) fn find_special(buf: &[u8], mut i: usize) -> usize {
    #[cfg(target_arch = "x86_64")]
    {
        use std::arch::x86_64::{
            _mm_cmpeq_epi8, _mm_cmplt_epi8, _mm_loadu_si128, _mm_movemask_epi8, _mm_or_si128,
            _mm_set1_epi8,
        };
        // SSE2 is part of the x86_64 baseline: 16 bytes per step. A signed compare below 0x20
        // catches control characters and every byte >= 0x80 (negative as i8) at once.
        while i + 16 <= buf.len() {
            // SAFETY: `i + 16 <= buf.len()`, so the unaligned 16-byte load stays inside `buf`;
            // the intrinsics need only SSE2, which every x86_64 CPU has.
            let mask = unsafe {
                let v = _mm_loadu_si128(buf.as_ptr().add(i).cast());
                let quote = _mm_cmpeq_epi8(v, _mm_set1_epi8(b'"' as i8));
                let backslash = _mm_cmpeq_epi8(v, _mm_set1_epi8(b'\\' as i8));
                let low_or_high = _mm_cmplt_epi8(v, _mm_set1_epi8(0x20));
                _mm_movemask_epi8(_mm_or_si128(_mm_or_si128(quote, backslash), low_or_high))
            };
            if mask != 0 {
                return i + mask.trailing_zeros() as usize;
            }
            i += 16;
        }
    }
    while let Some(chunk) = buf.get(i..i + 8) {
        let mut word = [0u8; 8];
        word.copy_from_slice(chunk);
        let m = special_bytes(u64::from_le_bytes(word));
        if m != 0 {
            return i + (m.trailing_zeros() / 8) as usize;
        }
        i += 8;
    }
    while let Some(&b) = buf.get(i) {
        if matches!(b, b'"' | b'\\' | 0..=0x1f | 0x80..=0xff) {
            return i;
        }
        i += 1;
    }
    i
}

fn hex(b: u8) -> Option<u16> {
    match b {
        b'0'..=b'9' => Some((b - b'0') as u16),
        b'a'..=b'f' => Some((b - b'a' + 10) as u16),
        b'A'..=b'F' => Some((b - b'A' + 10) as u16),
        _ => None,
    }
}

/// The code unit of `\uXXXX` whose backslash is at `i`.
pub(super) fn hex4(buf: &[u8], i: usize) -> Result<u16, DecodeError> {
    let Some(digits) = buf.get(i + 2..i + 6) else {
        return Err(syntax(i, "truncated \\u escape"));
    };
    let mut v = 0u16;
    for &d in digits {
        match hex(d) {
            Some(h) => v = (v << 4) | h,
            None => return Err(syntax(i, "invalid \\u escape (needs four hex digits)")),
        }
    }
    Ok(v)
}

/// Validates the escape whose backslash is at `i`; returns the index after it.
#[cold]
pub(super) fn check_escape(buf: &[u8], i: usize) -> Result<usize, DecodeError> {
    match buf.get(i + 1) {
        Some(b'"' | b'\\' | b'/' | b'b' | b'f' | b'n' | b'r' | b't') => Ok(i + 2),
        Some(b'u') => {
            let unit = hex4(buf, i)?;
            match unit {
                0xD800..=0xDBFF => {
                    if buf.get(i + 6) == Some(&b'\\') && buf.get(i + 7) == Some(&b'u') {
                        let low = hex4(buf, i + 6)?;
                        if (0xDC00..=0xDFFF).contains(&low) {
                            return Ok(i + 12);
                        }
                    }
                    Err(syntax(i, "lone high surrogate in a \\u escape"))
                }
                0xDC00..=0xDFFF => Err(syntax(i, "lone low surrogate in a \\u escape")),
                _ => Ok(i + 6),
            }
        }
        None => Err(syntax(i, "unterminated string")),
        _ => Err(syntax(i, "invalid escape in a string")),
    }
}

/// Validates the UTF-8 sequence whose first byte (>= 0x80) is at `i`; returns the index after.
#[inline]
pub(super) fn check_utf8(buf: &[u8], i: usize) -> Result<usize, DecodeError> {
    let cont = |k: usize| matches!(buf.get(i + k), Some(0x80..=0xBF));
    let in_range =
        |k: usize, lo: u8, hi: u8| matches!(buf.get(i + k), Some(&b) if b >= lo && b <= hi);
    let ok = match buf[i] {
        0xC2..=0xDF => cont(1).then_some(2),
        0xE0 => (in_range(1, 0xA0, 0xBF) && cont(2)).then_some(3),
        0xE1..=0xEC | 0xEE..=0xEF => (cont(1) && cont(2)).then_some(3),
        0xED => (in_range(1, 0x80, 0x9F) && cont(2)).then_some(3),
        0xF0 => (in_range(1, 0x90, 0xBF) && cont(2) && cont(3)).then_some(4),
        0xF1..=0xF3 => (cont(1) && cont(2) && cont(3)).then_some(4),
        0xF4 => (in_range(1, 0x80, 0x8F) && cont(2) && cont(3)).then_some(4),
        _ => None,
    };
    match ok {
        Some(n) => Ok(i + n),
        None => Err(syntax(i, "invalid UTF-8 in a string")),
    }
}

/// Appends the unescaped form of a validated string body to `out`.
pub(crate) fn unescape(body: &[u8], out: &mut Vec<u8>) {
    let mut i = 0;
    while i < body.len() {
        let Some(rel) = body[i..].iter().position(|&b| b == b'\\') else {
            out.extend_from_slice(&body[i..]);
            return;
        };
        out.extend_from_slice(&body[i..i + rel]);
        i += rel;
        let c = body.get(i + 1).copied().unwrap_or(b'\\');
        let simple = match c {
            b'"' => Some(b'"'),
            b'\\' => Some(b'\\'),
            b'/' => Some(b'/'),
            b'b' => Some(0x08),
            b'f' => Some(0x0C),
            b'n' => Some(b'\n'),
            b'r' => Some(b'\r'),
            b't' => Some(b'\t'),
            _ => None,
        };
        if let Some(s) = simple {
            out.push(s);
            i += 2;
            continue;
        }
        // `\uXXXX`, possibly a surrogate pair; the scanner has validated both.
        let unit = hex4(body, i).unwrap_or(0xFFFD);
        let (code, used) = if (0xD800..=0xDBFF).contains(&unit) {
            let low = hex4(body, i + 6).unwrap_or(0xDC00);
            (
                0x10000 + (((unit as u32) - 0xD800) << 10) + ((low as u32) - 0xDC00),
                12,
            )
        } else {
            (unit as u32, 6)
        };
        let ch = char::from_u32(code).unwrap_or('\u{FFFD}');
        let mut utf8 = [0u8; 4];
        out.extend_from_slice(ch.encode_utf8(&mut utf8).as_bytes());
        i += used;
    }
}
