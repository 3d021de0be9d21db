//! Avro object container files: the header (magic, metadata, sync marker) and the blocks after
//! it, as the Avro specification lays them out. No I/O: the file connector reads the bytes;
//! this parses them.
//!
//! A block is `count` (long), `size` (long), `size` bytes of datums written back to back and
//! compressed with the file's codec, then the 16-byte sync marker. The file connector frames a
//! container file by blocks ([`Framing::AvroContainer`](crate::Framing::AvroContainer)) and a
//! decoder splits a block into datums with [`Decoder::decode_prefix`](crate::Decoder) (Avro
//! binary is self-delimiting given its schema), so a datum is never copied out of its block.

use std::io::Read;

use super::{AvroSchema, AvroSchemaError};
use crate::framing::{put_varint, read_zigzag};

/// The four bytes every container file begins with.
pub const CONTAINER_MAGIC: [u8; 4] = *b"Obj\x01";

/// The largest header accepted: a schema of thousands of fields is a few hundred KiB.
pub const MAX_HEADER_BYTES: usize = 16 << 20;

/// How a container file's blocks are compressed (its `avro.codec`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ContainerCodec {
    /// Not compressed.
    Null,
    /// Raw deflate (RFC 1951, no zlib header).
    Deflate,
    /// Snappy, followed by the big-endian CRC-32 of the uncompressed bytes.
    Snappy,
    /// Zstandard.
    Zstandard,
}

impl ContainerCodec {
    /// The codec a header's `avro.codec` names.
    pub fn from_name(name: &str) -> Result<Self, String> {
        Ok(match name {
            "null" => Self::Null,
            "deflate" => Self::Deflate,
            "snappy" => Self::Snappy,
            "zstandard" => Self::Zstandard,
            other => {
                return Err(format!(
                    "the codec '{other}' is not supported (weir reads null, deflate, snappy \
                     and zstandard)"
                ))
            }
        })
    }

    /// The codec's name as the header writes it.
    pub fn name(self) -> &'static str {
        match self {
            Self::Null => "null",
            Self::Deflate => "deflate",
            Self::Snappy => "snappy",
            Self::Zstandard => "zstandard",
        }
    }

    /// Appends `data` compressed as one block of this codec to `out` (deflate at zlib's default
    /// level, as Avro's Java writer; zstandard at its default level 3).
    pub fn compress(self, data: &[u8], out: &mut Vec<u8>) -> std::io::Result<()> {
        match self {
            Self::Null => out.extend_from_slice(data),
            Self::Deflate => {
                let mut z = flate2::write::DeflateEncoder::new(out, flate2::Compression::default());
                std::io::Write::write_all(&mut z, data)?;
                z.finish()?;
            }
            Self::Snappy => {
                let at = out.len();
                out.resize(at + snap::raw::max_compress_len(data.len()), 0);
                let n = snap::raw::Encoder::new()
                    .compress(data, &mut out[at..])
                    .map_err(std::io::Error::other)?;
                out.truncate(at + n);
                out.extend_from_slice(&crc32fast::hash(data).to_be_bytes());
            }
            Self::Zstandard => {
                zstd::stream::copy_encode(data, out, zstd::DEFAULT_COMPRESSION_LEVEL)?;
            }
        }
        Ok(())
    }

    /// Uncompresses a block's `data` into `out` (cleared first), refusing more than `limit`
    /// bytes: a small block must not claim gigabytes. Not called for `Null`.
    pub fn uncompress(self, data: &[u8], out: &mut Vec<u8>, limit: u64) -> Result<(), String> {
        out.clear();
        let over_limit = || too_large(limit);
        match self {
            Self::Null => out.extend_from_slice(data),
            Self::Deflate => {
                let mut r = flate2::read::DeflateDecoder::new(data).take(limit.saturating_add(1));
                r.read_to_end(out)
                    .map_err(|e| format!("the deflate block is corrupt: {e}"))?;
                if out.len() as u64 > limit {
                    return Err(over_limit());
                }
            }
            Self::Snappy => {
                let Some((body, crc)) = data.split_last_chunk::<4>() else {
                    return Err(format!(
                        "the snappy block is {} bytes, too short for its CRC",
                        data.len()
                    ));
                };
                let len = snap::raw::decompress_len(body)
                    .map_err(|e| format!("the snappy block is corrupt: {e}"))?;
                if len as u64 > limit {
                    return Err(over_limit());
                }
                out.resize(len, 0);
                snap::raw::Decoder::new()
                    .decompress(body, out)
                    .map_err(|e| format!("the snappy block is corrupt: {e}"))?;
                let want = u32::from_be_bytes(*crc);
                let got = crc32fast::hash(out);
                if got != want {
                    return Err(format!(
                        "the snappy block's CRC is {want:#010x}, its data gives {got:#010x}"
                    ));
                }
            }
            Self::Zstandard => {
                let corrupt = |e: std::io::Error| format!("the zstandard block is corrupt: {e}");
                let mut d = zstd::stream::read::Decoder::new(data).map_err(corrupt)?;
                // The frame's window is allocated as declared: no larger than the limit.
                let window = (64 - limit.max(1 << 10).leading_zeros()).min(31);
                d.window_log_max(window).map_err(corrupt)?;
                let mut r = d.take(limit.saturating_add(1));
                r.read_to_end(out)
                    .map_err(|e| format!("the zstandard block is corrupt: {e}"))?;
                if out.len() as u64 > limit {
                    return Err(over_limit());
                }
            }
        }
        Ok(())
    }
}

/// Uncompresses the blocks of container files one after another, keeping a zstandard context
/// from one block to the next: a new one per block cost about a fifth of the time a 64 KiB
/// block takes to uncompress (137.9 against 112.4 microseconds; BENCHMARKS.md).
#[derive(Default)]
pub struct BlockUncompressor {
    zstd: Option<zstd::stream::raw::Decoder<'static>>,
}

impl std::fmt::Debug for BlockUncompressor {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("BlockUncompressor")
            .field("zstd_context", &self.zstd.is_some())
            .finish()
    }
}

impl BlockUncompressor {
    /// As [`ContainerCodec::uncompress`]: `data` (a block compressed with `codec`) into `out`,
    /// refusing more than `limit` bytes.
    pub fn uncompress(
        &mut self,
        codec: ContainerCodec,
        data: &[u8],
        out: &mut Vec<u8>,
        limit: u64,
    ) -> Result<(), String> {
        if codec != ContainerCodec::Zstandard {
            return codec.uncompress(data, out, limit);
        }
        use zstd::stream::raw::{DParameter, Decoder, InBuffer, Operation, OutBuffer};
        out.clear();
        if data.is_empty() {
            return Ok(());
        }
        let corrupt = |e: std::io::Error| format!("the zstandard block is corrupt: {e}");
        let d = match &mut self.zstd {
            Some(d) => {
                d.reinit().map_err(corrupt)?;
                d
            }
            None => self.zstd.insert(Decoder::new().map_err(corrupt)?),
        };
        // The frame's window is allocated as declared: no larger than the limit.
        let window = (64 - limit.max(1 << 10).leading_zeros()).min(31);
        d.set_parameter(DParameter::WindowLogMax(window))
            .map_err(corrupt)?;
        let mut input = InBuffer::around(data);
        loop {
            if out.len() as u64 > limit {
                return Err(too_large(limit));
            }
            if out.len() == out.capacity() {
                let room = (limit + 1 - out.len() as u64).min((data.len() as u64 * 4).max(1 << 16));
                out.reserve(usize::try_from(room).unwrap_or(1 << 16));
            }
            let before = (input.pos(), out.len());
            let pos = out.len();
            let hint = d
                .run(&mut input, &mut OutBuffer::around_pos(out, pos))
                .map_err(corrupt)?;
            if input.pos() == data.len() {
                if hint == 0 {
                    break;
                }
                if (input.pos(), out.len()) == before {
                    return Err("the zstandard block is corrupt: it ends inside a frame".into());
                }
            }
        }
        if out.len() as u64 > limit {
            return Err(too_large(limit));
        }
        Ok(())
    }
}

fn too_large(limit: u64) -> String {
    format!(
        "the block uncompresses to more than {limit} bytes ('max.message.bytes'); raise it if \
         the file is good"
    )
}

/// A container file's header.
#[derive(Debug, Clone)]
pub struct ContainerHeader {
    /// The writer's schema, as the header's `avro.schema` holds it.
    pub schema_text: String,
    /// The schema parsed.
    pub schema: AvroSchema,
    /// How its blocks are compressed.
    pub codec: ContainerCodec,
    /// The marker after every block.
    pub sync: [u8; 16],
    /// The header's length in bytes: where the first block begins.
    pub len: usize,
}

/// Why a container header cannot be read.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ContainerError {
    /// The bytes do not begin with the container magic: not a container file at all.
    #[error("not an Avro container file: {0}")]
    NotContainer(String),
    /// The magic is there, but the header after it cannot be read.
    #[error("its Avro container header cannot be read: {0}")]
    Header(String),
    /// The header's schema does not parse.
    #[error("the container header's schema: {0}")]
    Schema(#[from] AvroSchemaError),
}

impl ContainerHeader {
    /// Parses the header at the start of `bytes`; `Ok(None)` when `bytes` end before it does
    /// (read more and ask again).
    pub fn parse(bytes: &[u8]) -> Result<Option<Self>, ContainerError> {
        let bad = |what: String| ContainerError::Header(what);
        match bytes.get(..4) {
            None if CONTAINER_MAGIC.starts_with(bytes) => return Ok(None),
            Some(m) if m == CONTAINER_MAGIC => {}
            _ => {
                return Err(ContainerError::NotContainer(format!(
                    "it begins {:02X?}, not with the container magic 'Obj' 01",
                    bytes.get(..4).unwrap_or(bytes)
                )))
            }
        }
        let mut pos = 4;
        let mut schema_text = None;
        let mut codec = ContainerCodec::Null;
        // The metadata: a map of bytes, in blocks of entries ending with a count of 0.
        loop {
            let Some(count) = long(bytes, &mut pos)? else {
                return Ok(None);
            };
            if count == 0 {
                break;
            }
            if count < 0 {
                // A negative count is followed by the block's size in bytes.
                if long(bytes, &mut pos)?.is_none() {
                    return Ok(None);
                }
            }
            for _ in 0..count.unsigned_abs() {
                let Some(key) = length_prefixed(bytes, &mut pos)? else {
                    return Ok(None);
                };
                let Some(value) = length_prefixed(bytes, &mut pos)? else {
                    return Ok(None);
                };
                match key {
                    b"avro.schema" => {
                        let text = std::str::from_utf8(value)
                            .map_err(|_| bad("its 'avro.schema' is not UTF-8".into()))?;
                        schema_text = Some(text.to_string());
                    }
                    b"avro.codec" => {
                        let name = std::str::from_utf8(value)
                            .map_err(|_| bad("its 'avro.codec' is not UTF-8".into()))?;
                        codec = ContainerCodec::from_name(name).map_err(bad)?;
                    }
                    _ => {}
                }
            }
        }
        let Some(sync) = bytes.get(pos..pos + 16) else {
            return Ok(None);
        };
        let mut marker = [0u8; 16];
        marker.copy_from_slice(sync);
        let schema_text =
            schema_text.ok_or_else(|| bad("its metadata has no 'avro.schema'".into()))?;
        let schema = AvroSchema::parse(&schema_text)?;
        Ok(Some(Self {
            schema_text,
            schema,
            codec,
            sync: marker,
            len: pos + 16,
        }))
    }
}

/// Appends a container file's header: the magic, the metadata (`avro.schema` = `schema`,
/// `avro.codec` = `null`) and the sync marker.
pub fn write_container_header(
    out: &mut Vec<u8>,
    schema: &str,
    codec: ContainerCodec,
    sync: &[u8; 16],
) {
    out.extend_from_slice(&CONTAINER_MAGIC);
    put_long(out, 2);
    for (key, value) in [("avro.schema", schema), ("avro.codec", codec.name())] {
        put_long(out, key.len() as i64);
        out.extend_from_slice(key.as_bytes());
        put_long(out, value.len() as i64);
        out.extend_from_slice(value.as_bytes());
    }
    put_long(out, 0);
    out.extend_from_slice(sync);
}

/// Appends one block of `count` values (`data`, written back to back), compressed with `codec`
/// (in `scratch`, which keeps its room for the next block).
pub fn write_container_block(
    out: &mut Vec<u8>,
    count: u64,
    data: &[u8],
    codec: ContainerCodec,
    sync: &[u8; 16],
    scratch: &mut Vec<u8>,
) -> std::io::Result<()> {
    let body = if codec == ContainerCodec::Null {
        data
    } else {
        scratch.clear();
        codec.compress(data, scratch)?;
        scratch.as_slice()
    };
    put_long(out, count as i64);
    put_long(out, body.len() as i64);
    out.extend_from_slice(body);
    out.extend_from_slice(sync);
    Ok(())
}

fn put_long(out: &mut Vec<u8>, v: i64) {
    put_varint(out, ((v << 1) ^ (v >> 63)) as u64);
}

/// A zigzag varint `long`; `None` when the bytes end inside it.
fn long(bytes: &[u8], pos: &mut usize) -> Result<Option<i64>, ContainerError> {
    read_zigzag(bytes, pos).map_err(|e| ContainerError::Header(e.into()))
}

/// A `bytes` or `string` value; `None` when the bytes end inside it.
fn length_prefixed<'a>(
    bytes: &'a [u8],
    pos: &mut usize,
) -> Result<Option<&'a [u8]>, ContainerError> {
    let mut at = *pos;
    let Some(len) = long(bytes, &mut at)? else {
        return Ok(None);
    };
    let len = usize::try_from(len)
        .map_err(|_| ContainerError::Header(format!("a negative length {len} in its metadata")))?;
    if len > MAX_HEADER_BYTES {
        return Err(ContainerError::Header(format!(
            "a metadata value of {len} bytes, more than {MAX_HEADER_BYTES}"
        )));
    }
    let Some(value) = bytes.get(at..at + len) else {
        return Ok(None);
    };
    *pos = at + len;
    Ok(Some(value))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::framing::{block_head, BlockHead};

    fn put_bytes(out: &mut Vec<u8>, b: &[u8]) {
        put_long(out, b.len() as i64);
        out.extend_from_slice(b);
    }

    fn header(codec: &str, negative: bool) -> Vec<u8> {
        let mut h = CONTAINER_MAGIC.to_vec();
        let mut entries = Vec::new();
        put_bytes(&mut entries, b"avro.schema");
        put_bytes(
            &mut entries,
            br#"{"type":"record","name":"r","fields":[{"name":"a","type":"long"}]}"#,
        );
        put_bytes(&mut entries, b"avro.codec");
        put_bytes(&mut entries, codec.as_bytes());
        if negative {
            put_long(&mut h, -2);
            put_long(&mut h, entries.len() as i64);
        } else {
            put_long(&mut h, 2);
        }
        h.extend_from_slice(&entries);
        put_long(&mut h, 0);
        h.extend_from_slice(&[7u8; 16]);
        h
    }

    #[test]
    fn a_header_parses_whole_and_asks_for_more_when_cut() {
        for negative in [false, true] {
            let h = header("deflate", negative);
            let got = ContainerHeader::parse(&h).unwrap().unwrap();
            assert_eq!(got.len, h.len());
            assert_eq!(got.codec, ContainerCodec::Deflate);
            assert_eq!(got.sync, [7u8; 16]);
            assert!(got.schema_text.contains("\"a\""));
            for cut in 0..h.len() {
                assert!(
                    ContainerHeader::parse(&h[..cut]).unwrap().is_none(),
                    "cut at {cut}"
                );
            }
        }
    }

    #[test]
    fn bad_headers_say_what_is_wrong() {
        let e = ContainerHeader::parse(b"PAR1....").unwrap_err();
        assert!(matches!(e, ContainerError::NotContainer(_)), "{e}");
        assert!(e.to_string().contains("container magic"), "{e}");
        let e = ContainerHeader::parse(&header("bzip2", false))
            .unwrap_err()
            .to_string();
        assert!(e.contains("'bzip2' is not supported"), "{e}");
        let mut h = CONTAINER_MAGIC.to_vec();
        put_long(&mut h, 0);
        h.extend_from_slice(&[0u8; 16]);
        let e = ContainerHeader::parse(&h).unwrap_err().to_string();
        assert!(e.contains("no 'avro.schema'"), "{e}");
    }

    #[test]
    fn codecs_round_trip_and_refuse_too_much() {
        let data: Vec<u8> = (0..10_000u32)
            .flat_map(|i| (i % 251).to_le_bytes())
            .collect();
        let mut out = Vec::new();
        // deflate
        let mut z = flate2::write::DeflateEncoder::new(Vec::new(), flate2::Compression::fast());
        std::io::Write::write_all(&mut z, &data).unwrap();
        let deflated = z.finish().unwrap();
        ContainerCodec::Deflate
            .uncompress(&deflated, &mut out, 1 << 20)
            .unwrap();
        assert_eq!(out, data);
        let e = ContainerCodec::Deflate
            .uncompress(&deflated, &mut out, 100)
            .unwrap_err();
        assert!(e.contains("more than 100 bytes"), "{e}");
        // snappy with its CRC
        let mut s = snap::raw::Encoder::new().compress_vec(&data).unwrap();
        s.extend_from_slice(&crc32fast::hash(&data).to_be_bytes());
        ContainerCodec::Snappy
            .uncompress(&s, &mut out, 1 << 20)
            .unwrap();
        assert_eq!(out, data);
        let last = s.len() - 1;
        s[last] ^= 1;
        let e = ContainerCodec::Snappy
            .uncompress(&s, &mut out, 1 << 20)
            .unwrap_err();
        assert!(e.contains("CRC"), "{e}");
        // zstandard
        let z = zstd::encode_all(&data[..], 1).unwrap();
        ContainerCodec::Zstandard
            .uncompress(&z, &mut out, 1 << 20)
            .unwrap();
        assert_eq!(out, data);
        assert!(ContainerCodec::Zstandard
            .uncompress(&data[..50], &mut out, 1 << 20)
            .is_err());
    }

    #[test]
    fn one_uncompressor_reads_block_after_block_and_refuses_bad_ones() {
        let block = |seed: u32| -> Vec<u8> {
            (0..20_000u32)
                .flat_map(|i| ((i * seed) % 251).to_le_bytes())
                .collect()
        };
        let mut u = BlockUncompressor::default();
        let mut out = Vec::new();
        for seed in 1..6 {
            let data = block(seed);
            for codec in [
                ContainerCodec::Zstandard,
                ContainerCodec::Deflate,
                ContainerCodec::Snappy,
            ] {
                let mut c = Vec::new();
                codec.compress(&data, &mut c).unwrap();
                u.uncompress(codec, &c, &mut out, 1 << 20).unwrap();
                assert_eq!(out, data, "{codec:?}, block {seed}");
            }
        }
        // Two zstandard frames in one block read as their concatenation.
        let (a, b) = (block(7), block(8));
        let mut two = zstd::encode_all(&a[..], 1).unwrap();
        two.extend(zstd::encode_all(&b[..], 1).unwrap());
        u.uncompress(ContainerCodec::Zstandard, &two, &mut out, 1 << 20)
            .unwrap();
        assert_eq!(out, [a.clone(), b].concat());
        // Cut short, too large, not zstandard: refused, and the next good block still reads.
        let z = zstd::encode_all(&a[..], 1).unwrap();
        let e = u
            .uncompress(
                ContainerCodec::Zstandard,
                &z[..z.len() / 2],
                &mut out,
                1 << 20,
            )
            .unwrap_err();
        assert!(e.contains("zstandard block is corrupt"), "{e}");
        // (With its size in the frame, the frame's window is that size, which the limit allows.)
        let sized = zstd::bulk::compress(&a, 1).unwrap();
        let e = u
            .uncompress(ContainerCodec::Zstandard, &sized, &mut out, 70_000)
            .unwrap_err();
        assert!(e.contains("more than 70000 bytes"), "{e}");
        assert!(u
            .uncompress(ContainerCodec::Zstandard, &a[..100], &mut out, 1 << 20)
            .is_err());
        u.uncompress(ContainerCodec::Zstandard, &z, &mut out, 1 << 20)
            .unwrap();
        assert_eq!(out, a);
    }

    #[test]
    fn written_headers_and_blocks_read_back_with_every_codec() {
        let schema = r#"{"type":"record","name":"r","fields":[{"name":"a","type":"long"}]}"#;
        // Longs 1..=3000, zigzag varints back to back: compressible, as real blocks are.
        let mut data = Vec::new();
        for v in 1..=3000i64 {
            put_long(&mut data, v % 97);
        }
        let mut scratch = Vec::new();
        for codec in [
            ContainerCodec::Null,
            ContainerCodec::Deflate,
            ContainerCodec::Snappy,
            ContainerCodec::Zstandard,
        ] {
            let mut file = Vec::new();
            write_container_header(&mut file, schema, codec, &[3u8; 16]);
            let header = ContainerHeader::parse(&file).unwrap().unwrap();
            assert_eq!((header.len, header.codec), (file.len(), codec));
            assert_eq!(header.schema_text, schema);
            write_container_block(&mut file, 3000, &data, codec, &[3u8; 16], &mut scratch).unwrap();
            let head = block_head(&file, header.len).unwrap().unwrap();
            assert_eq!(head.count, 3000);
            assert_eq!(file[file.len() - 16..], [3u8; 16]);
            let start = header.len + head.header_len;
            let body = &file[start..start + head.size as usize];
            assert_eq!(start + body.len() + 16, file.len());
            if codec != ContainerCodec::Null {
                assert!(body.len() < data.len() / 2, "{codec:?}: {}", body.len());
            }
            let mut out = Vec::new();
            codec.uncompress(body, &mut out, 1 << 20).unwrap();
            assert_eq!(out, data, "{codec:?}");
        }
    }

    #[test]
    fn block_heads_read_count_and_size() {
        let mut b = Vec::new();
        put_long(&mut b, 300);
        put_long(&mut b, 70_000);
        assert_eq!(
            block_head(&b, 0).unwrap(),
            Some(BlockHead {
                count: 300,
                header_len: b.len(),
                size: 70_000
            })
        );
        assert_eq!(block_head(&b[..2], 0).unwrap(), None);
        let mut n = Vec::new();
        put_long(&mut n, -1);
        put_long(&mut n, 5);
        assert!(block_head(&n, 0).unwrap_err().contains("negative"));
    }
}
