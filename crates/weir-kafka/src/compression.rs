//! Decompression of record batches into one reused buffer, and compression for the producer.
//!
//! The decompressor keeps its codec states (a zstd context, a raw-deflate state, a snappy
//! decoder) and its output buffer across batches, so that in steady state a compressed batch
//! costs no allocation: the buffer only grows, and only until it fits the largest batch seen.
//! LZ4 is decoded block by block from the frame format by hand for the same reason.

use std::io::Write;

use crate::record_batch::{BatchError, Compression};

/// The xerial snappy-java stream header the Java client writes before snappy blocks.
const XERIAL_MAGIC: &[u8] = b"\x82SNAPPY\x00";
/// LZ4 frame magic number (little-endian on the wire).
const LZ4_MAGIC: u32 = 0x184D_2204;

/// Decompresses batch bodies into a buffer it keeps.
pub struct Decompressor {
    /// Grows, never shrinks; `used` bytes of it are the last output. Its length only grows so
    /// the zero-fill of new space is paid once, not per batch.
    out: Vec<u8>,
    used: usize,
    snappy: snap::raw::Decoder,
    deflate: flate2::Decompress,
    zstd: Option<zstd::stream::raw::Decoder<'static>>,
}

impl std::fmt::Debug for Decompressor {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Decompressor")
            .field("capacity", &self.out.len())
            .finish()
    }
}

impl Default for Decompressor {
    fn default() -> Self {
        Self::new()
    }
}

fn err(c: Compression, e: impl std::fmt::Display) -> BatchError {
    BatchError::Decompress(c, e.to_string())
}

/// The most a single batch may inflate to: a guard against decompression bombs.
const MAX_INFLATED: usize = 1 << 30;

impl Decompressor {
    /// A decompressor with empty buffers.
    pub fn new() -> Self {
        Self {
            out: Vec::new(),
            used: 0,
            snappy: snap::raw::Decoder::new(),
            deflate: flate2::Decompress::new(false),
            zstd: None,
        }
    }

    /// Makes room for at least `extra` more bytes after `used`.
    fn room(&mut self, c: Compression, extra: usize) -> Result<(), BatchError> {
        let need = self
            .used
            .checked_add(extra)
            .filter(|&n| n <= MAX_INFLATED)
            .ok_or_else(|| err(c, "batch inflates beyond 1 GiB"))?;
        if self.out.len() < need {
            let grown = need.max(self.out.len().saturating_mul(2)).min(MAX_INFLATED);
            self.out.resize(grown, 0);
        }
        Ok(())
    }

    /// Decompresses `input` (a batch's records section) with codec `c`; returns the output,
    /// valid until the next call.
    pub fn decompress<'a>(
        &'a mut self,
        c: Compression,
        input: &'a [u8],
    ) -> Result<&'a [u8], BatchError> {
        self.used = 0;
        match c {
            Compression::None => return Ok(input),
            Compression::Gzip => self.gzip(input)?,
            Compression::Snappy => self.snappy(input)?,
            Compression::Lz4 => self.lz4(input)?,
            Compression::Zstd => self.zstd(input)?,
        }
        Ok(&self.out[..self.used])
    }

    fn snappy_block(&mut self, block: &[u8]) -> Result<(), BatchError> {
        let c = Compression::Snappy;
        let n = snap::raw::decompress_len(block).map_err(|e| err(c, e))?;
        self.room(c, n)?;
        let wrote = self
            .snappy
            .decompress(block, &mut self.out[self.used..self.used + n])
            .map_err(|e| err(c, e))?;
        self.used += wrote;
        Ok(())
    }

    fn snappy(&mut self, input: &[u8]) -> Result<(), BatchError> {
        let c = Compression::Snappy;
        if !input.starts_with(XERIAL_MAGIC) {
            // librdkafka and others write one raw snappy block.
            return self.snappy_block(input);
        }
        // xerial framing: 8-byte magic, 4-byte version, 4-byte compatible version, then
        // blocks of [u32 big-endian length][raw snappy].
        let mut rest = input
            .get(16..)
            .ok_or_else(|| err(c, "truncated xerial header"))?;
        while !rest.is_empty() {
            if rest.len() < 4 {
                return Err(err(c, "truncated xerial block length"));
            }
            let n = u32::from_be_bytes([rest[0], rest[1], rest[2], rest[3]]) as usize;
            let block = rest
                .get(4..4usize.saturating_add(n))
                .ok_or_else(|| err(c, "truncated xerial block"))?;
            self.snappy_block(block)?;
            rest = &rest[4 + n..];
        }
        Ok(())
    }

    fn gzip(&mut self, input: &[u8]) -> Result<(), BatchError> {
        let c = Compression::Gzip;
        let mut rest = input;
        // Several members may follow each other; each is inflated into the same output.
        loop {
            let body = gzip_body(rest).ok_or_else(|| err(c, "bad gzip header"))?;
            self.deflate.reset(false);
            let start_in = self.deflate.total_in();
            let mut consumed = 0usize;
            loop {
                if self.out.len() - self.used < 32 * 1024 {
                    let extra = (body.len() * 4).max(64 * 1024);
                    self.room(c, extra)?;
                }
                let before_out = self.deflate.total_out();
                let before_in = self.deflate.total_in();
                let status = self
                    .deflate
                    .decompress(
                        &body[consumed..],
                        &mut self.out[self.used..],
                        flate2::FlushDecompress::None,
                    )
                    .map_err(|e| err(c, e))?;
                self.used += (self.deflate.total_out() - before_out) as usize;
                consumed = (self.deflate.total_in() - start_in) as usize;
                match status {
                    flate2::Status::StreamEnd => break,
                    flate2::Status::Ok | flate2::Status::BufError => {
                        let stalled = self.deflate.total_in() == before_in
                            && self.deflate.total_out() == before_out;
                        if (consumed >= body.len() || stalled) && self.out.len() > self.used {
                            return Err(err(c, "truncated deflate stream"));
                        }
                    }
                }
            }
            // 8-byte trailer (CRC32, size): the batch CRC already covers these bytes.
            let after = consumed.saturating_add(8);
            rest = body.get(after..).unwrap_or(&[]);
            if rest.len() < 10 || rest[0] != 0x1f || rest[1] != 0x8b {
                return Ok(());
            }
        }
    }

    fn lz4(&mut self, input: &[u8]) -> Result<(), BatchError> {
        let c = Compression::Lz4;
        let mut rest = input;
        // Frames may be concatenated; Kafka writes one.
        while rest.len() >= 4 {
            let magic = u32::from_le_bytes([rest[0], rest[1], rest[2], rest[3]]);
            if magic != LZ4_MAGIC {
                return Err(err(c, format!("bad LZ4 frame magic {magic:#x}")));
            }
            let flg = *rest.get(4).ok_or_else(|| err(c, "truncated frame"))?;
            let bd = *rest.get(5).ok_or_else(|| err(c, "truncated frame"))?;
            if flg >> 6 != 1 {
                return Err(err(c, "unsupported LZ4 frame version"));
            }
            let independent = flg & 0x20 != 0;
            let block_checksum = flg & 0x10 != 0;
            let content_size = flg & 0x08 != 0;
            let content_checksum = flg & 0x04 != 0;
            let dict_id = flg & 0x01 != 0;
            let block_max = match (bd >> 4) & 0x07 {
                4 => 64 << 10,
                5 => 256 << 10,
                6 => 1 << 20,
                7 => 4 << 20,
                _ => return Err(err(c, "bad LZ4 block size id")),
            };
            // magic, FLG, BD, [content size], [dict id], header checksum
            let mut pos = 6 + if content_size { 8 } else { 0 } + if dict_id { 4 } else { 0 } + 1;
            let frame_start = self.used;
            loop {
                let sz = rest
                    .get(pos..pos + 4)
                    .ok_or_else(|| err(c, "truncated block size"))?;
                let word = u32::from_le_bytes([sz[0], sz[1], sz[2], sz[3]]);
                pos += 4;
                if word == 0 {
                    break; // end mark
                }
                let stored = word & 0x8000_0000 != 0;
                let n = (word & 0x7fff_ffff) as usize;
                let block = rest
                    .get(pos..pos.saturating_add(n))
                    .ok_or_else(|| err(c, "truncated block"))?;
                pos += n + if block_checksum { 4 } else { 0 };
                if stored {
                    self.room(c, n)?;
                    self.out[self.used..self.used + n].copy_from_slice(block);
                    self.used += n;
                    continue;
                }
                self.room(c, block_max)?;
                let (prev, cur) = self.out.split_at_mut(self.used);
                let wrote = if independent {
                    lz4_flex::block::decompress_into(block, &mut cur[..block_max])
                } else {
                    // Linked blocks may refer back up to 64 KiB into this frame's output.
                    let frame_prev = &prev[frame_start..];
                    let dict = &frame_prev[frame_prev.len().saturating_sub(64 << 10)..];
                    lz4_flex::block::decompress_into_with_dict(block, &mut cur[..block_max], dict)
                }
                .map_err(|e| err(c, e))?;
                self.used += wrote;
            }
            if content_checksum {
                pos += 4;
            }
            rest = rest.get(pos..).unwrap_or(&[]);
        }
        Ok(())
    }

    fn zstd(&mut self, input: &[u8]) -> Result<(), BatchError> {
        use zstd::stream::raw::{InBuffer, Operation, OutBuffer};
        let c = Compression::Zstd;
        if self.zstd.is_none() {
            self.zstd = Some(zstd::stream::raw::Decoder::new().map_err(|e| err(c, e))?);
        }
        let Some(dec) = self.zstd.as_mut() else {
            return Err(err(c, "no zstd context"));
        };
        dec.reinit().map_err(|e| err(c, e))?;
        let mut inb = InBuffer::around(input);
        loop {
            if self.out.len() - self.used < 64 * 1024 {
                let extra = (input.len() * 4).max(128 * 1024);
                // `room` borrows self mutably; the decoder lives in self too, so re-borrow.
                let need = self.used + extra;
                if need > MAX_INFLATED {
                    return Err(err(c, "batch inflates beyond 1 GiB"));
                }
                let grown = need.max(self.out.len() * 2).min(MAX_INFLATED);
                self.out.resize(grown, 0);
            }
            let Some(dec) = self.zstd.as_mut() else {
                return Err(err(c, "no zstd context"));
            };
            let in_before = inb.pos();
            let out_before = self.used;
            let mut outb = OutBuffer::around_pos(&mut self.out[..], self.used);
            let hint = dec.run(&mut inb, &mut outb).map_err(|e| err(c, e))?;
            self.used = outb.pos();
            if hint == 0 && inb.pos() == input.len() {
                return Ok(());
            }
            let stalled = inb.pos() == in_before && self.used == out_before;
            if (inb.pos() == input.len() || stalled) && self.used < self.out.len() {
                return Err(err(c, "truncated zstd frame"));
            }
        }
    }
}

/// The deflate stream of a gzip member (after its header), or `None` if the header is bad.
fn gzip_body(b: &[u8]) -> Option<&[u8]> {
    if b.len() < 10 || b[0] != 0x1f || b[1] != 0x8b || b[2] != 8 {
        return None;
    }
    let flags = b[3];
    let mut pos = 10usize;
    if flags & 0x04 != 0 {
        let xlen = u16::from_le_bytes([*b.get(pos)?, *b.get(pos + 1)?]) as usize;
        pos += 2 + xlen;
    }
    if flags & 0x08 != 0 {
        pos += b.get(pos..)?.iter().position(|&x| x == 0)? + 1;
    }
    if flags & 0x10 != 0 {
        pos += b.get(pos..)?.iter().position(|&x| x == 0)? + 1;
    }
    if flags & 0x02 != 0 {
        pos += 2;
    }
    b.get(pos..)
}

/// Compresses a records section for the producer (allocation here is fine: producing is not
/// the hot path this crate is tuned for).
pub fn compress(c: Compression, input: &[u8], out: &mut Vec<u8>) -> std::io::Result<()> {
    out.clear();
    match c {
        Compression::None => out.extend_from_slice(input),
        Compression::Gzip => {
            let mut e = flate2::write::GzEncoder::new(out, flate2::Compression::fast());
            e.write_all(input)?;
            e.finish()?;
        }
        Compression::Snappy => {
            // The xerial framing, which every Kafka client reads (the Java one expects it).
            out.extend_from_slice(XERIAL_MAGIC);
            out.extend_from_slice(&1i32.to_be_bytes());
            out.extend_from_slice(&1i32.to_be_bytes());
            let mut enc = snap::raw::Encoder::new();
            for chunk in input.chunks(32 * 1024) {
                let block = enc.compress_vec(chunk).map_err(std::io::Error::other)?;
                out.extend_from_slice(&(block.len() as u32).to_be_bytes());
                out.extend_from_slice(&block);
            }
        }
        Compression::Lz4 => {
            let info = lz4_flex::frame::FrameInfo::new()
                .block_mode(lz4_flex::frame::BlockMode::Independent)
                .block_size(lz4_flex::frame::BlockSize::Max64KB);
            let mut e = lz4_flex::frame::FrameEncoder::with_frame_info(info, out);
            e.write_all(input)?;
            e.finish().map_err(std::io::Error::other)?;
        }
        Compression::Zstd => {
            let mut e = zstd::stream::write::Encoder::new(out, 1)?;
            e.write_all(input)?;
            e.finish()?;
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sample() -> Vec<u8> {
        (0..200_000u32)
            .flat_map(|i| format!("quote {i} bid {} ask {};", i % 97, i % 89).into_bytes())
            .collect()
    }

    #[test]
    fn every_codec_round_trips_into_the_reused_buffer() {
        let data = sample();
        let mut d = Decompressor::new();
        let mut packed = Vec::new();
        for c in [
            Compression::None,
            Compression::Gzip,
            Compression::Snappy,
            Compression::Lz4,
            Compression::Zstd,
        ] {
            compress(c, &data, &mut packed).unwrap();
            for _ in 0..2 {
                assert_eq!(d.decompress(c, &packed).unwrap(), &data[..], "{c:?}");
            }
            let small = b"tiny";
            compress(c, small, &mut packed).unwrap();
            assert_eq!(d.decompress(c, &packed).unwrap(), small, "{c:?}");
        }
    }

    #[test]
    fn raw_snappy_and_linked_lz4_blocks_decode() {
        let data = sample();
        let mut d = Decompressor::new();
        let raw = snap::raw::Encoder::new().compress_vec(&data).unwrap();
        assert_eq!(d.decompress(Compression::Snappy, &raw).unwrap(), &data[..]);
        let info = lz4_flex::frame::FrameInfo::new()
            .block_mode(lz4_flex::frame::BlockMode::Linked)
            .block_size(lz4_flex::frame::BlockSize::Max64KB)
            .content_checksum(true);
        let mut e = lz4_flex::frame::FrameEncoder::with_frame_info(info, Vec::new());
        e.write_all(&data).unwrap();
        let packed = e.finish().unwrap();
        assert_eq!(d.decompress(Compression::Lz4, &packed).unwrap(), &data[..]);
    }

    #[test]
    fn corrupt_input_is_an_error_not_a_panic() {
        let data = sample();
        let mut d = Decompressor::new();
        let mut packed = Vec::new();
        let mut seed = 0x1234_5678_9abc_def0u64;
        for c in [
            Compression::Gzip,
            Compression::Snappy,
            Compression::Lz4,
            Compression::Zstd,
        ] {
            compress(c, &data[..20_000], &mut packed).unwrap();
            for i in 0..300 {
                let mut p = packed.clone();
                seed ^= seed << 13;
                seed ^= seed >> 7;
                seed ^= seed << 17;
                let at = (seed as usize) % p.len();
                p[at] ^= (seed >> 32) as u8 | 1;
                if i % 3 == 0 {
                    p.truncate((seed as usize >> 8) % p.len());
                }
                let _ = d.decompress(c, &p);
            }
            assert!(d.decompress(c, b"\x00\x01garbage").is_err(), "{c:?}");
        }
    }
}
