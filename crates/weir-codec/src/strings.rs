//! Strings as the decoders read them: UTF-8 checks and copies of values straight from the
//! input. Most string values (tickers, ids, codes) are short ASCII; they are checked and copied
//! as one fixed-size chunk, with no loop and no call to memcpy.

/// Strings up to this long, with this many bytes readable from their start (the fields after
/// them in the same message), are checked and copied as one fixed-size chunk; a string in the
/// last 32 bytes of a message takes the general path.
pub(crate) const SHORT: usize = 32;

/// The [`SHORT`]-byte chunk starting at a string of `len` bytes, if the string fits in it and
/// the buffer holds it.
#[inline(always)]
pub(crate) fn short_chunk(buf: &[u8], start: usize, len: usize) -> Option<&[u8; SHORT]> {
    if len > SHORT {
        return None;
    }
    buf.get(start..)?.first_chunk::<SHORT>()
}

/// Whether the first `len` bytes of `chunk` are ASCII, without a loop or a branch on `len`:
/// the bytes past `len` are masked off with a window into a constant (0xff for the first
/// `SHORT` bytes, 0 after).
#[inline(always)]
pub(crate) fn is_ascii_prefix(chunk: &[u8; SHORT], len: usize) -> bool {
    const WINDOW: [u8; 2 * SHORT] = {
        let mut w = [0u8; 2 * SHORT];
        let mut i = 0;
        while i < SHORT {
            w[i] = 0xff;
            i += 1;
        }
        w
    };
    let Some(mask) = WINDOW
        .get(SHORT - len.min(SHORT)..)
        .and_then(|m| m.first_chunk::<SHORT>())
    else {
        return false;
    };
    let half = |a: &[u8; SHORT], i: usize| {
        let mut h = [0u8; 16];
        h.copy_from_slice(&a[i..i + 16]);
        u128::from_le_bytes(h)
    };
    let high = (half(chunk, 0) & half(mask, 0)) | (half(chunk, 16) & half(mask, 16));
    high & 0x8080_8080_8080_8080_8080_8080_8080_8080 == 0
}

/// Where `buf[start..end]` stops being UTF-8, or None if it is valid.
#[inline(always)]
pub(crate) fn utf8_error_at(buf: &[u8], start: usize, end: usize) -> Option<usize> {
    let bytes = &buf[start..end];
    // Most string fields (tickers, ids, codes) are short ASCII: check eight bytes at a time
    // before handing anything else to the SIMD validator, whose setup dominates for short input.
    let mut words = bytes.chunks_exact(8);
    let mut high = 0u64;
    for w in words.by_ref() {
        high |= u64::from_le_bytes([w[0], w[1], w[2], w[3], w[4], w[5], w[6], w[7]]);
    }
    for &b in words.remainder() {
        high |= b as u64;
    }
    if high & 0x8080_8080_8080_8080 == 0 || simdutf8::basic::from_utf8(bytes).is_ok() {
        return None;
    }
    // Slow path only to find where the bad byte is.
    Some(match simdutf8::compat::from_utf8(bytes) {
        Err(err) => start + err.valid_up_to(),
        Ok(_) => start,
    })
}

/// Appends `buf[start..end]` to `data`. A short value is copied as one fixed-size chunk and the
/// surplus cut off again: no call to memcpy and no loop over the bytes, which for short
/// strings (tickers, codes, ids) cost more than the copy itself.
#[inline(always)]
pub(crate) fn append_bytes(data: &mut Vec<u8>, buf: &[u8], start: usize, end: usize) {
    let len = end - start;
    match short_chunk(buf, start, len) {
        Some(c) => {
            data.extend_from_slice(c);
            data.truncate(data.len() - (SHORT - len));
        }
        None => data.extend_from_slice(&buf[start..end]),
    }
}
