//! Protobuf wire-format primitives. Written by hand (not prost's `decode_varint`) because the hot
//! loop needs absolute byte offsets for errors and a bound (`end`) that is not the slice end, so a
//! sub-message is read in place from the top-level buffer without re-slicing.

use crate::error::{DecodeError, DecodeErrorKind};

pub(crate) const WT_VARINT: u8 = 0;
pub(crate) const WT_I64: u8 = 1;
pub(crate) const WT_LEN: u8 = 2;
pub(crate) const WT_SGROUP: u8 = 3;
pub(crate) const WT_EGROUP: u8 = 4;
pub(crate) const WT_I32: u8 = 5;

/// Reads a varint starting at `*pos`, not consuming bytes at or past `end` (it may look at
/// them: the fast paths load up to eight bytes within `buf`, then check the bound).
#[inline(always)]
pub(crate) fn read_varint(buf: &[u8], pos: &mut usize, end: usize) -> Result<u64, DecodeError> {
    let p = *pos;
    // Fast path: one-byte varints (tags, small lengths) are the common case.
    if p < end {
        let b = buf[p];
        if b < 0x80 {
            *pos = p + 1;
            return Ok(b as u64);
        }
        if buf.len() - p >= 8 {
            // Two-byte values (128 to 16383: sizes, counts, short lengths) are common enough
            // to skip the word-wide packing, which costs about four times the instructions.
            let b1 = buf[p + 1];
            if b1 < 0x80 && p + 1 < end {
                *pos = p + 2;
                return Ok((b & 0x7f) as u64 | (b1 as u64) << 7);
            }
            return read_varint_swar(buf, pos, p, end);
        }
    }
    read_varint_slow(buf, pos, end)
}

/// Reads a field tag. Tags of fields 16 to 2047 take two bytes; they get their own branch
/// because assembling them with the general 8-byte path costs about three times as many
/// instructions, and wide messages are mostly such fields.
#[inline(always)]
pub(crate) fn read_tag(buf: &[u8], pos: &mut usize, end: usize) -> Result<u64, DecodeError> {
    let p = *pos;
    if p + 1 < end {
        let b0 = buf[p];
        if b0 < 0x80 {
            *pos = p + 1;
            return Ok(b0 as u64);
        }
        let b1 = buf[p + 1];
        if b1 < 0x80 {
            *pos = p + 2;
            return Ok((b0 & 0x7f) as u64 | (b1 as u64) << 7);
        }
    }
    read_varint(buf, pos, end)
}

/// Multi-byte varint with at least 8 readable bytes in the buffer (they may run past `end`,
/// which is checked afterwards): the first eight bytes are read as one word, the stop byte found
/// with one bit scan and the 7-bit groups packed with three masked shifts, with no per-byte loop.
#[inline(always)]
fn read_varint_swar(buf: &[u8], pos: &mut usize, p: usize, end: usize) -> Result<u64, DecodeError> {
    let Some(w) = buf[p..].first_chunk::<8>() else {
        return read_varint_slow(buf, pos, end);
    };
    let word = u64::from_le_bytes(*w);
    let stops = !word & 0x8080_8080_8080_8080;
    if stops == 0 {
        // Nine or ten bytes (values of 2^56 and above, negative int32/int64).
        if end - p >= 10 {
            let mut value = pack7(word);
            let b8 = buf[p + 8];
            value |= ((b8 & 0x7f) as u64) << 56;
            if b8 < 0x80 {
                *pos = p + 9;
                return Ok(value);
            }
            let b9 = buf[p + 9];
            if b9 < 0x80 {
                if b9 > 1 {
                    return Err(DecodeError::new(p, DecodeErrorKind::VarintOverflow));
                }
                *pos = p + 10;
                return Ok(value | ((b9 as u64) << 63));
            }
            return Err(DecodeError::new(p, DecodeErrorKind::VarintTooLong));
        }
        return read_varint_slow(buf, pos, end);
    }
    // Bits up to and including the stop byte's top bit (which is 0).
    let bits = stops.trailing_zeros() + 1;
    let len = (bits / 8) as usize;
    if len > end - p {
        // The stop byte lies past `end`: truncated; the careful path says where.
        return read_varint_slow(buf, pos, end);
    }
    let x = if bits >= 64 {
        word
    } else {
        word & ((1u64 << bits) - 1)
    };
    *pos = p + len;
    Ok(pack7(x))
}

/// Packs the low 7 bits of each of eight bytes into one 56-bit value.
#[inline(always)]
fn pack7(x: u64) -> u64 {
    let x = x & 0x7f7f_7f7f_7f7f_7f7f;
    let x = (x & 0x007f_007f_007f_007f) | ((x & 0x7f00_7f00_7f00_7f00) >> 1);
    let x = (x & 0x0000_3fff_0000_3fff) | ((x & 0x3fff_0000_3fff_0000) >> 2);
    (x & 0x0000_0000_0fff_ffff) | ((x & 0x0fff_ffff_0000_0000) >> 4)
}

/// The byte-at-a-time varint reader (near the end of the buffer, and for errors). The caller's
/// position is passed by value and returned: a `&mut` into an out-of-line function would keep
/// the hot loop's position in memory instead of a register.
#[inline(always)]
fn read_varint_slow(buf: &[u8], pos: &mut usize, end: usize) -> Result<u64, DecodeError> {
    let (v, p) = read_varint_slow_at(buf, *pos, end)?;
    *pos = p;
    Ok(v)
}

#[inline(never)]
fn read_varint_slow_at(buf: &[u8], start: usize, end: usize) -> Result<(u64, usize), DecodeError> {
    let avail = &buf[start..end];
    let mut value: u64 = 0;
    for (i, &b) in avail.iter().take(10).enumerate() {
        value |= ((b & 0x7f) as u64) << (7 * i);
        if b < 0x80 {
            // The 10th byte holds only bit 63: anything more overflows 64 bits (rejected like
            // prost and protobuf-go do, rather than silently dropping bits).
            if i == 9 && b > 1 {
                return Err(DecodeError::new(start, DecodeErrorKind::VarintOverflow));
            }
            return Ok((value, start + i + 1));
        }
    }
    if avail.len() >= 10 {
        Err(DecodeError::new(start, DecodeErrorKind::VarintTooLong))
    } else {
        Err(DecodeError::new(start, DecodeErrorKind::TruncatedVarint))
    }
}

/// Skips a varint without assembling its value.
#[inline(always)]
pub(crate) fn skip_varint(buf: &[u8], pos: &mut usize, end: usize) -> Result<(), DecodeError> {
    let start = *pos;
    let avail = &buf[start..end];
    if let Some(&b) = avail.first() {
        if b < 0x80 {
            *pos = start + 1;
            return Ok(());
        }
    }
    // Up to eight bytes at once: the stop byte is the first with its top bit clear.
    if let Some(w) = avail.first_chunk::<8>() {
        let stops = !u64::from_le_bytes(*w) & 0x8080_8080_8080_8080;
        if stops != 0 {
            *pos = start + (stops.trailing_zeros() / 8 + 1) as usize;
            return Ok(());
        }
    }
    match avail.iter().take(10).position(|&b| b < 0x80) {
        Some(9) if avail[9] > 1 => Err(DecodeError::new(start, DecodeErrorKind::VarintOverflow)),
        Some(i) => {
            *pos = start + i + 1;
            Ok(())
        }
        None if avail.len() >= 10 => Err(DecodeError::new(start, DecodeErrorKind::VarintTooLong)),
        None => Err(DecodeError::new(start, DecodeErrorKind::TruncatedVarint)),
    }
}

/// Reads a length prefix and checks that the payload fits before `end`. Returns the payload end.
#[inline(always)]
pub(crate) fn read_len(buf: &[u8], pos: &mut usize, end: usize) -> Result<usize, DecodeError> {
    let at = *pos;
    let len = read_varint(buf, pos, end)?;
    let remaining = end - *pos;
    if len > remaining as u64 {
        return Err(DecodeError::new(
            at,
            DecodeErrorKind::LengthPastEnd {
                length: len,
                remaining,
            },
        ));
    }
    Ok(*pos + len as usize)
}

#[inline(always)]
pub(crate) fn read_fixed32(buf: &[u8], pos: &mut usize, end: usize) -> Result<u32, DecodeError> {
    let p = *pos;
    if end - p < 4 {
        return Err(DecodeError::new(p, DecodeErrorKind::TruncatedField));
    }
    *pos = p + 4;
    let mut b = [0u8; 4];
    b.copy_from_slice(&buf[p..p + 4]);
    Ok(u32::from_le_bytes(b))
}

#[inline(always)]
pub(crate) fn read_fixed64(buf: &[u8], pos: &mut usize, end: usize) -> Result<u64, DecodeError> {
    let p = *pos;
    if end - p < 8 {
        return Err(DecodeError::new(p, DecodeErrorKind::TruncatedField));
    }
    *pos = p + 8;
    let mut b = [0u8; 8];
    b.copy_from_slice(&buf[p..p + 8]);
    Ok(u64::from_le_bytes(b))
}

/// Splits a tag into (field number, wire type), rejecting field 0 and wire types 6/7.
#[inline(always)]
pub(crate) fn split_tag(tag: u64, at: usize) -> Result<(u32, u8), DecodeError> {
    let wt = (tag & 7) as u8;
    let field = tag >> 3;
    if field == 0 {
        return Err(DecodeError::new(at, DecodeErrorKind::FieldNumberZero));
    }
    if tag > u32::MAX as u64 {
        return Err(DecodeError::new(at, DecodeErrorKind::FieldNumberTooLarge));
    }
    if wt > 5 {
        return Err(DecodeError::new(at, DecodeErrorKind::InvalidWireType(wt)));
    }
    Ok((field as u32, wt))
}

/// [`skip_field`] from `pos`, returning the position after the field (by value, so that the
/// caller's position can stay in a register).
#[inline(never)]
#[allow(clippy::too_many_arguments)]
pub(crate) fn skip_field_at(
    buf: &[u8],
    pos: usize,
    end: usize,
    field: u32,
    wt: u8,
    tag_at: usize,
    depth: usize,
    max_depth: usize,
) -> Result<usize, DecodeError> {
    let mut p = pos;
    skip_field(buf, &mut p, end, field, wt, tag_at, depth, max_depth)?;
    Ok(p)
}

/// Skips the value of a field that is not requested, without decoding it.
/// `tag_at` is where the field's tag starts (for errors).
#[inline]
#[allow(clippy::too_many_arguments)]
pub(crate) fn skip_field(
    buf: &[u8],
    pos: &mut usize,
    end: usize,
    field: u32,
    wt: u8,
    tag_at: usize,
    depth: usize,
    max_depth: usize,
) -> Result<(), DecodeError> {
    match wt {
        WT_VARINT => skip_varint(buf, pos, end)?,
        WT_I64 => {
            if end - *pos < 8 {
                return Err(DecodeError::new(*pos, DecodeErrorKind::TruncatedField));
            }
            *pos += 8;
        }
        WT_I32 => {
            if end - *pos < 4 {
                return Err(DecodeError::new(*pos, DecodeErrorKind::TruncatedField));
            }
            *pos += 4;
        }
        WT_LEN => {
            *pos = read_len(buf, pos, end)?;
        }
        WT_SGROUP => {
            skip_group(buf, pos, end, field, tag_at, depth + 1, max_depth)?;
        }
        WT_EGROUP => {
            return Err(DecodeError::new(
                tag_at,
                DecodeErrorKind::UnexpectedEndGroup(field),
            ))
        }
        _ => {
            return Err(DecodeError::new(
                tag_at,
                DecodeErrorKind::InvalidWireType(wt),
            ))
        }
    }
    Ok(())
}

/// The body of a group whose start tag (at `tag_at`) ends at `pos`: returns where its end-group
/// tag starts (the body is `pos..that`) and moves `pos` past the end-group tag. The body is
/// checked as [`skip_field`] checks an unrequested group; `depth` is the group's parent's.
#[allow(clippy::too_many_arguments)]
pub(crate) fn group_body(
    buf: &[u8],
    pos: &mut usize,
    end: usize,
    field: u32,
    tag_at: usize,
    depth: usize,
    max_depth: usize,
) -> Result<usize, DecodeError> {
    skip_group(buf, pos, end, field, tag_at, depth + 1, max_depth)
}

/// Skips a group body up to and including its end-group tag; returns where that tag starts.
fn skip_group(
    buf: &[u8],
    pos: &mut usize,
    end: usize,
    group_field: u32,
    group_at: usize,
    depth: usize,
    max_depth: usize,
) -> Result<usize, DecodeError> {
    if depth > max_depth {
        return Err(DecodeError::new(
            group_at,
            DecodeErrorKind::TooDeep(max_depth),
        ));
    }
    while *pos < end {
        let tag_at = *pos;
        let tag = read_varint(buf, pos, end)?;
        let (field, wt) = split_tag(tag, tag_at)?;
        if wt == WT_EGROUP {
            if field != group_field {
                return Err(DecodeError::new(
                    tag_at,
                    DecodeErrorKind::EndGroupMismatch {
                        expected: group_field,
                        found: field,
                    },
                ));
            }
            return Ok(tag_at);
        }
        skip_field(buf, pos, end, field, wt, tag_at, depth, max_depth)?;
    }
    Err(DecodeError::new(
        group_at,
        DecodeErrorKind::UnterminatedGroup(group_field),
    ))
}

#[inline(always)]
pub(crate) fn zigzag32(v: u64) -> i32 {
    let v = v as u32;
    ((v >> 1) as i32) ^ -((v & 1) as i32)
}

#[inline(always)]
pub(crate) fn zigzag64(v: u64) -> i64 {
    ((v >> 1) as i64) ^ -((v & 1) as i64)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn varints() {
        let buf = [0x96, 0x01, 0x7f];
        let mut p = 0;
        assert_eq!(read_varint(&buf, &mut p, 3).unwrap(), 150);
        assert_eq!(p, 2);
        assert_eq!(read_varint(&buf, &mut p, 3).unwrap(), 127);
        let mut p = 0;
        assert_eq!(
            read_varint(&buf, &mut p, 1).unwrap_err().kind,
            DecodeErrorKind::TruncatedVarint
        );
        let long = [0xffu8; 11];
        let mut p = 0;
        assert_eq!(
            read_varint(&long, &mut p, 11).unwrap_err().kind,
            DecodeErrorKind::VarintTooLong
        );
        // -1 as int32 is a 10-byte varint
        let neg = [0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0x01];
        let mut p = 0;
        assert_eq!(read_varint(&neg, &mut p, 10).unwrap() as i32, -1);
        // A 10th byte above 1 would need bit 64: rejected, both when read and when skipped.
        let over = [0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0x02];
        let mut p = 0;
        assert_eq!(
            read_varint(&over, &mut p, 10).unwrap_err().kind,
            DecodeErrorKind::VarintOverflow
        );
        let mut p = 0;
        assert_eq!(
            skip_field(&over, &mut p, 10, 1, WT_VARINT, 0, 0, 100)
                .unwrap_err()
                .kind,
            DecodeErrorKind::VarintOverflow
        );
    }

    #[test]
    fn swar_matches_the_byte_loop() {
        let mut vals: Vec<u64> = vec![0, 1, 127, 128, 300, 16383, 16384, u32::MAX as u64, u64::MAX];
        for shift in 0..64 {
            vals.push(1u64 << shift);
            vals.push((1u64 << shift) - 1);
            vals.push((1u64 << shift) | 0x55);
        }
        for v in vals {
            let mut buf = Vec::new();
            let mut x = v;
            while x >= 0x80 {
                buf.push((x as u8) | 0x80);
                x >>= 7;
            }
            buf.push(x as u8);
            let len = buf.len();
            buf.extend_from_slice(&[0xaa; 12]);
            let (mut p1, mut p2) = (0, 0);
            let end = buf.len();
            assert_eq!(read_varint(&buf, &mut p1, end).unwrap(), v);
            assert_eq!(read_varint_slow(&buf, &mut p2, end).unwrap(), v);
            assert_eq!(
                skip_field_at(&buf, 0, end, 1, WT_VARINT, 0, 0, 100).unwrap(),
                len
            );
            assert_eq!((p1, p2), (len, len));
        }
        // Overlong but valid: 1 written in 10 bytes.
        let mut buf = vec![0x81, 0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0x00];
        buf.extend_from_slice(&[0; 4]);
        let mut p = 0;
        assert_eq!(read_varint(&buf, &mut p, buf.len()).unwrap(), 1);
        assert_eq!(p, 10);
    }

    #[test]
    fn zigzag() {
        assert_eq!(zigzag32(1), -1);
        assert_eq!(zigzag32(4294967294), 2147483647);
        assert_eq!(zigzag64(3), -2);
    }
}
