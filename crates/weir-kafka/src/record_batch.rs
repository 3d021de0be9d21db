//! Record batches (magic v2), parsed in place.
//!
//! This parser is written by hand rather than taken from a protocol crate because the hot path
//! demands it: every record of every fetch goes through here, and the engine must see keys,
//! values and headers as slices of the fetch buffer (or of the one reused decompression buffer)
//! with no allocation and no copy per record. Generic record decoders build owned `Record`
//! structs with `Bytes` and header maps, which costs several allocations per message.
//!
//! Every length and count read from the network is checked against the bytes that remain, so
//! no input can make this module panic or read out of bounds (the fuzz tests feed it random and
//! mutated batches).

use std::fmt;

/// Bytes of the fixed part of a v2 batch, from `baseOffset` to `recordsCount`.
pub const BATCH_HEADER_LEN: usize = 61;
/// Bytes of `baseOffset` + `batchLength`: what precedes the part `batchLength` counts.
pub const LOG_OVERHEAD: usize = 12;
/// Where the CRC-covered part (from `attributes` on) starts in a batch.
const CRC_START: usize = 21;

/// The compression codec of a batch (attribute bits 0-2).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Compression {
    /// Records are stored as they are.
    None,
    /// gzip (RFC 1952).
    Gzip,
    /// Snappy, raw or in the xerial framing the Java client writes.
    Snappy,
    /// LZ4 frame format.
    Lz4,
    /// Zstandard frame.
    Zstd,
}

impl Compression {
    /// The codec for attribute bits 0-2, `None` for an unknown id.
    pub fn from_id(id: i16) -> Option<Self> {
        match id {
            0 => Some(Self::None),
            1 => Some(Self::Gzip),
            2 => Some(Self::Snappy),
            3 => Some(Self::Lz4),
            4 => Some(Self::Zstd),
            _ => None,
        }
    }

    /// The attribute bits of this codec.
    pub fn id(self) -> i16 {
        match self {
            Self::None => 0,
            Self::Gzip => 1,
            Self::Snappy => 2,
            Self::Lz4 => 3,
            Self::Zstd => 4,
        }
    }

    /// The name Kafka uses (`compression.type`).
    pub fn name(self) -> &'static str {
        match self {
            Self::None => "none",
            Self::Gzip => "gzip",
            Self::Snappy => "snappy",
            Self::Lz4 => "lz4",
            Self::Zstd => "zstd",
        }
    }
}

impl std::str::FromStr for Compression {
    type Err = String;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        match s.to_ascii_lowercase().as_str() {
            "none" | "" => Ok(Self::None),
            "gzip" => Ok(Self::Gzip),
            "snappy" => Ok(Self::Snappy),
            "lz4" => Ok(Self::Lz4),
            "zstd" => Ok(Self::Zstd),
            _ => Err(format!(
                "unknown compression '{s}': expected none, gzip, snappy, lz4 or zstd"
            )),
        }
    }
}

/// What is wrong with a batch or a record. The consumer adds topic, partition and offset.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum BatchError {
    /// A length or count points past the end of the batch.
    Truncated(&'static str),
    /// A varint runs past 10 bytes or past the end.
    BadVarint(&'static str),
    /// A length that cannot be (negative other than -1, or larger than the batch).
    BadLength(&'static str, i64),
    /// The batch is not magic v2 (Kafka 4 writes nothing else).
    UnsupportedMagic(i8),
    /// The CRC32C stored in the batch does not match its bytes.
    CrcMismatch {
        /// The CRC in the batch header.
        stored: u32,
        /// The CRC of the bytes.
        computed: u32,
    },
    /// Attribute bits name no known codec.
    UnknownCompression(i16),
    /// The compressed records do not decompress.
    Decompress(Compression, String),
    /// A record's length disagrees with its content.
    RecordLength {
        /// The declared length.
        declared: i64,
        /// The bytes its fields took.
        used: usize,
    },
    /// The batch holds fewer or more records than `recordsCount` says.
    RecordCount {
        /// `recordsCount`.
        declared: i32,
        /// Records actually found.
        found: i32,
    },
}

impl fmt::Display for BatchError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Truncated(what) => write!(f, "truncated {what}"),
            Self::BadVarint(what) => write!(f, "malformed varint in {what}"),
            Self::BadLength(what, n) => write!(f, "impossible {what} length {n}"),
            Self::UnsupportedMagic(m) => {
                write!(f, "record batch magic {m} (only v2 is supported)")
            }
            Self::CrcMismatch { stored, computed } => write!(
                f,
                "CRC32C mismatch: batch says {stored:#010x}, bytes give {computed:#010x}"
            ),
            Self::UnknownCompression(id) => write!(f, "unknown compression codec id {id}"),
            Self::Decompress(c, e) => write!(f, "{} decompression failed: {e}", c.name()),
            Self::RecordLength { declared, used } => write!(
                f,
                "record length {declared} disagrees with its fields ({used} bytes)"
            ),
            Self::RecordCount { declared, found } => {
                write!(f, "batch declares {declared} records but holds {found}")
            }
        }
    }
}

impl std::error::Error for BatchError {}

#[inline]
fn be_i16(b: &[u8], at: usize) -> i16 {
    i16::from_be_bytes([b[at], b[at + 1]])
}
#[inline]
fn be_i32(b: &[u8], at: usize) -> i32 {
    i32::from_be_bytes([b[at], b[at + 1], b[at + 2], b[at + 3]])
}
#[inline]
fn be_i64(b: &[u8], at: usize) -> i64 {
    let mut a = [0u8; 8];
    a.copy_from_slice(&b[at..at + 8]);
    i64::from_be_bytes(a)
}

/// The fixed header of a v2 record batch.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct BatchHeader {
    /// Offset of the first record.
    pub base_offset: i64,
    /// Bytes after the `batchLength` field.
    pub batch_length: i32,
    /// Leader epoch when the batch was appended.
    pub partition_leader_epoch: i32,
    /// Format version (2).
    pub magic: i8,
    /// CRC32C of the bytes from `attributes` to the end.
    pub crc: u32,
    /// Compression, timestamp type, transactional and control bits.
    pub attributes: i16,
    /// Offset of the last record minus `base_offset` (kept even when compaction removed it).
    pub last_offset_delta: i32,
    /// Timestamp of the first record.
    pub base_timestamp: i64,
    /// Largest timestamp in the batch (the log-append time when that is the type).
    pub max_timestamp: i64,
    /// Producer id (-1 when not idempotent).
    pub producer_id: i64,
    /// Producer epoch.
    pub producer_epoch: i16,
    /// Sequence number of the first record.
    pub base_sequence: i32,
    /// Number of records.
    pub records_count: i32,
}

impl BatchHeader {
    /// Reads the header at the start of `b` (which must hold [`BATCH_HEADER_LEN`] bytes).
    fn read(b: &[u8]) -> Self {
        Self {
            base_offset: be_i64(b, 0),
            batch_length: be_i32(b, 8),
            partition_leader_epoch: be_i32(b, 12),
            magic: b[16] as i8,
            crc: be_i32(b, 17) as u32,
            attributes: be_i16(b, 21),
            last_offset_delta: be_i32(b, 23),
            base_timestamp: be_i64(b, 27),
            max_timestamp: be_i64(b, 35),
            producer_id: be_i64(b, 43),
            producer_epoch: be_i16(b, 51),
            base_sequence: be_i32(b, 53),
            records_count: be_i32(b, 57),
        }
    }

    /// The offset after the batch's last offset: where the next fetch starts.
    #[inline]
    pub fn next_offset(&self) -> i64 {
        self.base_offset
            .saturating_add(i64::from(self.last_offset_delta))
            .saturating_add(1)
    }

    /// The batch's last offset.
    #[inline]
    pub fn last_offset(&self) -> i64 {
        self.next_offset() - 1
    }

    /// The compression codec bits.
    #[inline]
    pub fn compression_id(&self) -> i16 {
        self.attributes & 0x07
    }

    /// Timestamps are the broker's log-append time (`max_timestamp`) rather than the producer's.
    #[inline]
    pub fn log_append_time(&self) -> bool {
        self.attributes & 0x08 != 0
    }

    /// Written inside a transaction.
    #[inline]
    pub fn is_transactional(&self) -> bool {
        self.attributes & 0x10 != 0
    }

    /// A control batch (transaction commit/abort markers), never handed to the caller.
    #[inline]
    pub fn is_control(&self) -> bool {
        self.attributes & 0x20 != 0
    }
}

/// One record batch, borrowed from a fetch response's records.
#[derive(Debug, Clone, Copy)]
pub struct RawBatch<'a> {
    /// The fixed header.
    pub header: BatchHeader,
    /// The whole batch, header included.
    pub bytes: &'a [u8],
}

impl<'a> RawBatch<'a> {
    /// The records section (compressed when the header says so).
    #[inline]
    pub fn body(&self) -> &'a [u8] {
        &self.bytes[BATCH_HEADER_LEN..]
    }

    /// Checks the CRC32C over `attributes` .. end.
    pub fn verify_crc(&self) -> Result<(), BatchError> {
        let computed = crc32c::crc32c(&self.bytes[CRC_START..]);
        if computed == self.header.crc {
            Ok(())
        } else {
            Err(BatchError::CrcMismatch {
                stored: self.header.crc,
                computed,
            })
        }
    }

    /// The codec of the records section.
    pub fn compression(&self) -> Result<Compression, BatchError> {
        let id = self.header.compression_id();
        Compression::from_id(id).ok_or(BatchError::UnknownCompression(id))
    }

    /// The records of an uncompressed batch, or of `decompressed` (the records section of this
    /// batch once inflated).
    pub fn records_in(&self, records: &'a [u8]) -> RecordIter<'a> {
        RecordIter::new(&self.header, records)
    }
}

/// The batches in a fetch response's `records` field, in order.
///
/// A response may end with a partial batch (the broker cuts at the size limit); iteration ends
/// before it and [`BatchIter::partial_tail`] says so. A batch whose declared length is
/// impossible, or whose magic is not 2, is an error, after which iteration ends.
#[derive(Debug, Clone)]
pub struct BatchIter<'a> {
    rest: &'a [u8],
    failed: bool,
}

impl<'a> BatchIter<'a> {
    /// Iterates over the batches in `records`.
    pub fn new(records: &'a [u8]) -> Self {
        Self {
            rest: records,
            failed: false,
        }
    }

    /// Bytes left after the last whole batch (a batch cut by the fetch size limit).
    pub fn partial_tail(&self) -> usize {
        self.rest.len()
    }

    /// The base offset of the next (possibly partial) batch, when 8 bytes of it remain.
    pub fn next_base_offset(&self) -> Option<i64> {
        (self.rest.len() >= 8).then(|| be_i64(self.rest, 0))
    }
}

impl<'a> Iterator for BatchIter<'a> {
    type Item = Result<RawBatch<'a>, BatchError>;

    fn next(&mut self) -> Option<Self::Item> {
        if self.failed || self.rest.len() < BATCH_HEADER_LEN {
            return None;
        }
        let batch_length = be_i32(self.rest, 8);
        let magic = self.rest[16] as i8;
        if magic != 2 {
            self.failed = true;
            return Some(Err(BatchError::UnsupportedMagic(magic)));
        }
        if (batch_length as i64) < (BATCH_HEADER_LEN - LOG_OVERHEAD) as i64 {
            self.failed = true;
            return Some(Err(BatchError::BadLength("batch", batch_length as i64)));
        }
        let total = LOG_OVERHEAD + batch_length as usize;
        if total > self.rest.len() {
            // The broker cut the last batch at the size limit: not an error, fetch it next time.
            return None;
        }
        let (bytes, rest) = self.rest.split_at(total);
        self.rest = rest;
        Some(Ok(RawBatch {
            header: BatchHeader::read(bytes),
            bytes,
        }))
    }
}

/// Reads a zigzag varint (i32 range) from `b` at `*pos`.
#[inline]
fn varint(b: &[u8], pos: &mut usize, what: &'static str) -> Result<i32, BatchError> {
    let v = varlong(b, pos, what)?;
    i32::try_from(v).map_err(|_| BatchError::BadVarint(what))
}

/// Reads a zigzag varlong from `b` at `*pos`.
#[inline]
fn varlong(b: &[u8], pos: &mut usize, what: &'static str) -> Result<i64, BatchError> {
    let mut raw: u64 = 0;
    let mut shift = 0u32;
    loop {
        let Some(&byte) = b.get(*pos) else {
            return Err(BatchError::BadVarint(what));
        };
        *pos += 1;
        raw |= u64::from(byte & 0x7f) << shift;
        if byte & 0x80 == 0 {
            break;
        }
        shift += 7;
        if shift > 63 {
            return Err(BatchError::BadVarint(what));
        }
    }
    Ok(((raw >> 1) as i64) ^ -((raw & 1) as i64))
}

/// Reads a varint-length-prefixed byte string (-1 is null).
#[inline]
fn bytes_field<'a>(
    b: &'a [u8],
    pos: &mut usize,
    what: &'static str,
) -> Result<Option<&'a [u8]>, BatchError> {
    let len = varint(b, pos, what)?;
    if len == -1 {
        return Ok(None);
    }
    if len < 0 {
        return Err(BatchError::BadLength(what, len as i64));
    }
    let end = pos
        .checked_add(len as usize)
        .filter(|&e| e <= b.len())
        .ok_or(BatchError::Truncated(what))?;
    let s = &b[*pos..end];
    *pos = end;
    Ok(Some(s))
}

/// The headers of one record: an iterator of `(key, value)` slices. The record parser has
/// already checked every length, so iterating cannot fail.
#[derive(Debug, Clone, Copy)]
pub struct Headers<'a> {
    bytes: &'a [u8],
    count: u32,
}

impl<'a> Headers<'a> {
    /// No headers.
    pub const EMPTY: Headers<'static> = Headers {
        bytes: &[],
        count: 0,
    };

    /// Number of headers.
    pub fn len(&self) -> usize {
        self.count as usize
    }

    /// True when the record has no headers.
    pub fn is_empty(&self) -> bool {
        self.count == 0
    }

    /// Walks the headers of `b` from `*pos`, checking every length; returns their extent.
    fn scan(b: &'a [u8], pos: &mut usize) -> Result<Self, BatchError> {
        let count = varint(b, pos, "header count")?;
        if count < 0 {
            return Err(BatchError::BadLength("header count", count as i64));
        }
        let start = *pos;
        for _ in 0..count {
            if bytes_field(b, pos, "header key")?.is_none() {
                return Err(BatchError::BadLength("header key", -1));
            }
            bytes_field(b, pos, "header value")?;
        }
        Ok(Self {
            bytes: &b[start..*pos],
            count: count as u32,
        })
    }
}

impl<'a> Iterator for Headers<'a> {
    type Item = (&'a [u8], Option<&'a [u8]>);

    fn next(&mut self) -> Option<Self::Item> {
        if self.count == 0 {
            return None;
        }
        self.count -= 1;
        let mut pos = 0;
        // Lengths were validated in `scan`; a failure here would be a bug, so end quietly.
        let key = bytes_field(self.bytes, &mut pos, "header key").ok()??;
        let value = bytes_field(self.bytes, &mut pos, "header value").ok()?;
        self.bytes = &self.bytes[pos..];
        Some((key, value))
    }

    fn size_hint(&self) -> (usize, Option<usize>) {
        (self.count as usize, Some(self.count as usize))
    }
}

/// One record, borrowed from the batch it is in.
#[derive(Debug, Clone, Copy)]
pub struct RecordView<'a> {
    /// Absolute offset.
    pub offset: i64,
    /// Timestamp (ms since the epoch): create time, or log-append time for such topics.
    pub timestamp: i64,
    /// Key (`None` when null).
    pub key: Option<&'a [u8]>,
    /// Value (`None` for a tombstone).
    pub value: Option<&'a [u8]>,
    /// Headers.
    pub headers: Headers<'a>,
}

/// The records of one batch, parsed in place without allocating.
#[derive(Debug, Clone)]
pub struct RecordIter<'a> {
    bytes: &'a [u8],
    pos: usize,
    left: i32,
    declared: i32,
    base_offset: i64,
    base_timestamp: i64,
    max_timestamp: i64,
    log_append_time: bool,
    failed: bool,
}

impl<'a> RecordIter<'a> {
    /// Iterates over `records` (the uncompressed records section) of the batch `header`.
    pub fn new(header: &BatchHeader, records: &'a [u8]) -> Self {
        Self {
            bytes: records,
            pos: 0,
            left: header.records_count.max(0),
            declared: header.records_count,
            base_offset: header.base_offset,
            base_timestamp: header.base_timestamp,
            max_timestamp: header.max_timestamp,
            log_append_time: header.log_append_time(),
            failed: header.records_count < 0,
        }
    }

    fn parse(&mut self) -> Result<RecordView<'a>, BatchError> {
        let b = self.bytes;
        let mut pos = self.pos;
        let length = varint(b, &mut pos, "record length")?;
        if length < 0 {
            return Err(BatchError::BadLength("record", length as i64));
        }
        let start = pos;
        let end = start
            .checked_add(length as usize)
            .filter(|&e| e <= b.len())
            .ok_or(BatchError::Truncated("record"))?;
        // Parse within the record's own bytes so no field can reach into the next record.
        let r = &b[..end];
        if pos >= end {
            return Err(BatchError::Truncated("record attributes"));
        }
        pos += 1; // attributes: unused in v2
        let ts_delta = varlong(r, &mut pos, "timestamp delta")?;
        let off_delta = varint(r, &mut pos, "offset delta")?;
        let key = bytes_field(r, &mut pos, "key")?;
        let value = bytes_field(r, &mut pos, "value")?;
        let headers = Headers::scan(r, &mut pos)?;
        if pos != end {
            return Err(BatchError::RecordLength {
                declared: length as i64,
                used: pos - start,
            });
        }
        self.pos = end;
        Ok(RecordView {
            offset: self.base_offset.wrapping_add(i64::from(off_delta)),
            timestamp: if self.log_append_time {
                self.max_timestamp
            } else {
                self.base_timestamp.wrapping_add(ts_delta)
            },
            key,
            value,
            headers,
        })
    }
}

impl<'a> Iterator for RecordIter<'a> {
    type Item = Result<RecordView<'a>, BatchError>;

    #[inline]
    fn next(&mut self) -> Option<Self::Item> {
        if self.failed {
            return None;
        }
        if self.left == 0 {
            if self.pos != self.bytes.len() {
                self.failed = true;
                return Some(Err(BatchError::RecordCount {
                    declared: self.declared,
                    found: self.declared + 1,
                }));
            }
            return None;
        }
        match self.parse() {
            Ok(r) => {
                self.left -= 1;
                Some(Ok(r))
            }
            Err(e) => {
                self.failed = true;
                if self.pos == self.bytes.len() {
                    Some(Err(BatchError::RecordCount {
                        declared: self.declared,
                        found: self.declared - self.left,
                    }))
                } else {
                    Some(Err(e))
                }
            }
        }
    }
}

/// The type of a control record (the key of a record in a control batch).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ControlType {
    /// The transaction was aborted.
    Abort,
    /// The transaction was committed.
    Commit,
    /// Another control record (a newer broker's marker).
    Other(i16),
}

/// Reads the control type from a control batch's first record key (version i16, type i16).
pub fn control_type(key: Option<&[u8]>) -> Option<ControlType> {
    let k = key?;
    if k.len() < 4 {
        return None;
    }
    Some(match be_i16(k, 2) {
        0 => ControlType::Abort,
        1 => ControlType::Commit,
        t => ControlType::Other(t),
    })
}

/// Tracks the transactions that a fetch response lists as aborted, so that read_committed can
/// drop their batches (Kafka's consumer algorithm: a producer's data is aborted from the first
/// offset the response lists until its ABORT marker).
#[derive(Debug, Default)]
pub struct AbortedFilter {
    /// `(producer_id, first_offset)`, sorted by first offset, consumed from `next`.
    pending: Vec<(i64, i64)>,
    next: usize,
    /// Producers whose aborted transaction is open at the current batch.
    active: Vec<i64>,
}

impl AbortedFilter {
    /// Starts a partition's response with its aborted-transaction list.
    pub fn reset(&mut self, aborted: impl Iterator<Item = (i64, i64)>) {
        self.pending.clear();
        self.pending.extend(aborted);
        self.pending.sort_unstable_by_key(|&(_, first)| first);
        self.next = 0;
        self.active.clear();
    }

    /// True when the (non-control) batch belongs to an aborted transaction and must be skipped.
    pub fn is_aborted(&mut self, header: &BatchHeader) -> bool {
        if !header.is_transactional() {
            return false;
        }
        let last = header.last_offset();
        while let Some(&(pid, first)) = self.pending.get(self.next) {
            if first > last {
                break;
            }
            if !self.active.contains(&pid) {
                self.active.push(pid);
            }
            self.next += 1;
        }
        self.active.contains(&header.producer_id)
    }

    /// A control batch went by: an ABORT marker closes its producer's aborted transaction.
    pub fn control(&mut self, header: &BatchHeader, kind: Option<ControlType>) {
        if kind == Some(ControlType::Abort) {
            self.active.retain(|&p| p != header.producer_id);
        }
    }
}

/// Appends a zigzag varint.
pub(crate) fn put_varint(out: &mut Vec<u8>, v: i64) {
    let mut z = ((v << 1) ^ (v >> 63)) as u64;
    while z >= 0x80 {
        out.push((z as u8) | 0x80);
        z >>= 7;
    }
    out.push(z as u8);
}

/// Bytes a zigzag varint takes.
pub(crate) fn varint_len(v: i64) -> usize {
    let mut z = ((v << 1) ^ (v >> 63)) as u64;
    let mut n = 1;
    while z >= 0x80 {
        z >>= 7;
        n += 1;
    }
    n
}

/// Builds the uncompressed records section of a v2 batch, one record at a time. The producer
/// and the tests use it; [`RecordsWriter::take_batch`] writes the header in front of the
/// records in place, [`finish_batch`] wraps them (or their compressed form) in a copy.
#[derive(Debug, Clone)]
pub struct RecordsWriter {
    /// Room for a batch header, then the encoded records: an uncompressed batch is finished
    /// where it was written, without copying its records behind a header.
    buf: Vec<u8>,
    /// How many.
    pub count: i32,
    /// Timestamp of the first record.
    pub base_timestamp: i64,
    /// Largest timestamp so far.
    pub max_timestamp: i64,
}

impl Default for RecordsWriter {
    fn default() -> Self {
        Self {
            buf: vec![0; BATCH_HEADER_LEN],
            count: 0,
            base_timestamp: 0,
            max_timestamp: 0,
        }
    }
}

impl RecordsWriter {
    /// The encoded records so far.
    pub fn records(&self) -> &[u8] {
        &self.buf[BATCH_HEADER_LEN..]
    }

    /// Forgets every record, keeping the buffer.
    pub fn clear(&mut self) {
        self.buf.truncate(BATCH_HEADER_LEN);
        self.count = 0;
        self.base_timestamp = 0;
        self.max_timestamp = 0;
    }

    /// The records as a complete uncompressed v2 batch (header and CRC32C written in front of
    /// them, where room was kept); the writer starts again empty, with a buffer of the same
    /// capacity, or of `max_capacity` bytes if that is less.
    pub fn take_batch(&mut self, spec: &BatchSpec, max_capacity: usize) -> Vec<u8> {
        let body_len = self.buf.len() - BATCH_HEADER_LEN;
        let stamps = (self.count, self.base_timestamp, self.max_timestamp);
        write_header(&mut self.buf[..BATCH_HEADER_LEN], spec, stamps, body_len);
        write_crc(&mut self.buf);
        let mut next = Vec::with_capacity(self.buf.capacity().min(max_capacity));
        next.resize(BATCH_HEADER_LEN, 0);
        let batch = std::mem::replace(&mut self.buf, next);
        self.clear();
        batch
    }

    /// Appends a record at offset delta `count`.
    pub fn push(
        &mut self,
        timestamp: i64,
        key: Option<&[u8]>,
        value: Option<&[u8]>,
        headers: &[(&[u8], Option<&[u8]>)],
    ) {
        if self.count == 0 {
            self.base_timestamp = timestamp;
            self.max_timestamp = timestamp;
        }
        self.max_timestamp = self.max_timestamp.max(timestamp);
        let ts_delta = timestamp - self.base_timestamp;
        let off_delta = i64::from(self.count);
        let blen = |b: Option<&[u8]>| match b {
            None => varint_len(-1),
            Some(b) => varint_len(b.len() as i64) + b.len(),
        };
        let mut len = 1 + varint_len(ts_delta) + varint_len(off_delta) + blen(key) + blen(value);
        len += varint_len(headers.len() as i64);
        for (k, v) in headers {
            len += blen(Some(k)) + blen(*v);
        }
        put_varint(&mut self.buf, len as i64);
        self.buf.push(0);
        put_varint(&mut self.buf, ts_delta);
        put_varint(&mut self.buf, off_delta);
        let put = |buf: &mut Vec<u8>, b: Option<&[u8]>| match b {
            None => put_varint(buf, -1),
            Some(b) => {
                put_varint(buf, b.len() as i64);
                buf.extend_from_slice(b);
            }
        };
        put(&mut self.buf, key);
        put(&mut self.buf, value);
        put_varint(&mut self.buf, headers.len() as i64);
        for (k, v) in headers {
            put(&mut self.buf, Some(k));
            put(&mut self.buf, *v);
        }
        self.count += 1;
    }
}

/// The header fields a writer chooses for a batch.
#[derive(Debug, Clone, Copy)]
pub struct BatchSpec {
    /// Base offset (0 for a produce request: the broker assigns offsets).
    pub base_offset: i64,
    /// Attributes (compression id, transactional, control bits).
    pub attributes: i16,
    /// Producer id (-1: not idempotent).
    pub producer_id: i64,
    /// Producer epoch (-1).
    pub producer_epoch: i16,
    /// Base sequence (-1).
    pub base_sequence: i32,
}

impl Default for BatchSpec {
    fn default() -> Self {
        Self {
            base_offset: 0,
            attributes: 0,
            producer_id: -1,
            producer_epoch: -1,
            base_sequence: -1,
        }
    }
}

/// Appends a complete v2 batch to `out`: header, CRC32C, and `body` (the records section,
/// already compressed when `spec.attributes` names a codec).
pub fn finish_batch(out: &mut Vec<u8>, spec: &BatchSpec, records: &RecordsWriter, body: &[u8]) {
    let start = out.len();
    out.resize(start + BATCH_HEADER_LEN, 0);
    let stamps = (records.count, records.base_timestamp, records.max_timestamp);
    write_header(&mut out[start..], spec, stamps, body.len());
    out.extend_from_slice(body);
    write_crc(&mut out[start..]);
}

/// Writes the CRC32C of a whole batch (`attributes` to its end) into its header.
fn write_crc(batch: &mut [u8]) {
    let crc = crc32c::crc32c(&batch[CRC_START..]);
    batch[CRC_START - 4..CRC_START].copy_from_slice(&crc.to_be_bytes());
}

/// Writes a v2 batch header into `out` (its first [`BATCH_HEADER_LEN`] bytes), the CRC left
/// zero: the CRC covers the records after it, so it is written once they are in place.
/// `stamps`: the record count, the first and the largest timestamp.
fn write_header(out: &mut [u8], spec: &BatchSpec, stamps: (i32, i64, i64), body_len: usize) {
    let (count, base_timestamp, max_timestamp) = stamps;
    let batch_length = (BATCH_HEADER_LEN - LOG_OVERHEAD + body_len) as i32;
    let mut at = 0;
    let mut put = |b: &[u8]| {
        out[at..at + b.len()].copy_from_slice(b);
        at += b.len();
    };
    put(&spec.base_offset.to_be_bytes());
    put(&batch_length.to_be_bytes());
    put(&(-1i32).to_be_bytes()); // partition leader epoch: set by the broker
    put(&[2]);
    put(&[0; 4]); // CRC
    put(&spec.attributes.to_be_bytes());
    put(&(count - 1).max(0).to_be_bytes());
    put(&base_timestamp.to_be_bytes());
    put(&max_timestamp.to_be_bytes());
    put(&spec.producer_id.to_be_bytes());
    put(&spec.producer_epoch.to_be_bytes());
    put(&spec.base_sequence.to_be_bytes());
    put(&count.to_be_bytes());
    debug_assert_eq!(at, BATCH_HEADER_LEN);
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sample_batch(base: i64, n: i32, attributes: i16) -> Vec<u8> {
        let mut w = RecordsWriter::default();
        for i in 0..n {
            let k = format!("k{i}");
            let v = format!("value-{i}");
            let h = format!("{i}");
            w.push(
                1_000 + i64::from(i),
                Some(k.as_bytes()),
                if i % 5 == 4 { None } else { Some(v.as_bytes()) },
                &[(b"h", Some(h.as_bytes())), (b"n", None)],
            );
        }
        let mut out = Vec::new();
        finish_batch(
            &mut out,
            &BatchSpec {
                base_offset: base,
                attributes,
                ..BatchSpec::default()
            },
            &w,
            w.records(),
        );
        out
    }

    #[test]
    fn a_batch_taken_in_place_is_the_batch_finish_batch_builds() {
        let spec = BatchSpec {
            base_offset: 0,
            attributes: 0x10,
            producer_id: 7,
            producer_epoch: 3,
            base_sequence: 41,
        };
        let mut w = RecordsWriter::default();
        // Twice over one writer: the second batch starts empty, its header room kept.
        for round in 0..2i64 {
            for i in 0..(5 + round) {
                let v = format!("value-{round}-{i}");
                w.push(
                    2_000 + i * 3,
                    Some(b"k"),
                    Some(v.as_bytes()),
                    &[(b"h", None)],
                );
            }
            let mut expected = Vec::new();
            finish_batch(&mut expected, &spec, &w, w.records());
            let taken = w.take_batch(&spec, 1 << 20);
            assert_eq!(taken, expected, "round {round}");
            assert_eq!((w.count, w.records().len()), (0, 0));
            let batch = BatchIter::new(&taken).next().unwrap().unwrap();
            batch.verify_crc().unwrap();
            assert_eq!(batch.header.producer_id, 7);
            assert_eq!(batch.records_in(batch.body()).count(), 5 + round as usize);
        }
    }

    #[test]
    fn records_of_every_shape_read_back_as_pushed() {
        // Null and empty keys and values, lengths of one to three varint bytes, timestamps
        // before the first record's (a negative delta), and headers.
        let long = vec![b'x'; 20_000];
        type Case<'a> = (i64, Option<&'a [u8]>, Option<&'a [u8]>, HeaderList<'a>);
        type HeaderList<'a> = Vec<(&'a [u8], Option<&'a [u8]>)>;
        let cases: Vec<Case<'_>> = vec![
            (5_000, None, Some(b"v"), vec![]),
            (4_000, Some(b""), None, vec![(b"a", Some(b"1"))]),
            (i64::from(i32::MAX), Some(&long[..200]), Some(&long), vec![]),
            (
                0,
                Some(b"k"),
                Some(&long[..127]),
                vec![(b"", None), (b"h", Some(&long[..300]))],
            ),
            (5_001, None, None, vec![]),
        ];
        let mut w = RecordsWriter::default();
        for (t, k, v, h) in &cases {
            w.push(*t, *k, *v, h);
        }
        let batch = w.take_batch(&BatchSpec::default(), 1 << 20);
        let b = BatchIter::new(&batch).next().unwrap().unwrap();
        b.verify_crc().unwrap();
        let records: Vec<_> = b.records_in(b.body()).map(|r| r.unwrap()).collect();
        assert_eq!(records.len(), cases.len());
        for (i, (r, (t, k, v, h))) in records.iter().zip(&cases).enumerate() {
            assert_eq!(r.offset, i as i64);
            assert_eq!((r.timestamp, r.key, r.value), (*t, *k, *v), "record {i}");
            let headers: Vec<_> = r.headers.collect();
            assert_eq!(&headers, h, "record {i}");
        }
    }

    #[test]
    fn parses_hand_built_batches_in_place() {
        let mut data = sample_batch(100, 7, 0);
        data.extend(sample_batch(107, 3, 0));
        let mut it = BatchIter::new(&data);
        let b = it.next().unwrap().unwrap();
        b.verify_crc().unwrap();
        assert_eq!(b.header.base_offset, 100);
        assert_eq!(b.header.next_offset(), 107);
        let recs: Vec<_> = b.records_in(b.body()).map(|r| r.unwrap()).collect();
        assert_eq!(recs.len(), 7);
        for (i, r) in recs.iter().enumerate() {
            assert_eq!(r.offset, 100 + i as i64);
            assert_eq!(r.timestamp, 1000 + i as i64);
            assert_eq!(r.key.unwrap(), format!("k{i}").as_bytes());
            if i % 5 == 4 {
                assert_eq!(r.value, None);
            } else {
                assert_eq!(r.value.unwrap(), format!("value-{i}").as_bytes());
            }
            let hs: Vec<_> = r.headers.collect();
            assert_eq!(hs.len(), 2);
            assert_eq!(hs[0], (&b"h"[..], Some(format!("{i}").as_bytes())));
            assert_eq!(hs[1], (&b"n"[..], None));
            // Slices point into the input buffer: no copy.
            let v = r.key.unwrap();
            let base = data.as_ptr() as usize;
            assert!(v.as_ptr() as usize >= base && (v.as_ptr() as usize) < base + data.len());
        }
        let b2 = it.next().unwrap().unwrap();
        assert_eq!(b2.header.base_offset, 107);
        assert!(it.next().is_none());
        assert_eq!(it.partial_tail(), 0);
    }

    #[test]
    fn partial_trailing_batch_ends_iteration_without_error() {
        let mut data = sample_batch(0, 4, 0);
        let second = sample_batch(4, 4, 0);
        data.extend_from_slice(&second[..second.len() - 3]);
        let mut it = BatchIter::new(&data);
        assert!(it.next().unwrap().is_ok());
        assert!(it.next().is_none());
        assert_eq!(it.partial_tail(), second.len() - 3);
        assert_eq!(it.next_base_offset(), Some(4));
    }

    #[test]
    fn crc_mismatch_is_detected() {
        let mut data = sample_batch(0, 3, 0);
        let last = data.len() - 1;
        data[last] ^= 0x40;
        let b = BatchIter::new(&data).next().unwrap().unwrap();
        assert!(matches!(
            b.verify_crc(),
            Err(BatchError::CrcMismatch { .. })
        ));
    }

    #[test]
    fn log_append_time_uses_max_timestamp() {
        let data = sample_batch(0, 3, 0x08);
        let b = BatchIter::new(&data).next().unwrap().unwrap();
        assert!(b.records_in(b.body()).all(|r| r.unwrap().timestamp == 1002));
    }

    #[test]
    fn wrong_magic_and_bad_length_are_errors() {
        let mut data = sample_batch(0, 2, 0);
        data[16] = 1;
        assert_eq!(
            BatchIter::new(&data).next().unwrap().unwrap_err(),
            BatchError::UnsupportedMagic(1)
        );
        let mut data = sample_batch(0, 2, 0);
        data[8..12].copy_from_slice(&5i32.to_be_bytes());
        assert!(matches!(
            BatchIter::new(&data).next().unwrap(),
            Err(BatchError::BadLength(..))
        ));
    }

    #[test]
    fn record_count_mismatch_is_an_error() {
        let mut data = sample_batch(0, 3, 0);
        data[57..61].copy_from_slice(&4i32.to_be_bytes());
        let b = BatchIter::new(&data).next().unwrap().unwrap();
        let r: Vec<_> = b.records_in(b.body()).collect();
        assert!(matches!(
            r.last().unwrap(),
            Err(BatchError::RecordCount {
                declared: 4,
                found: 3
            })
        ));
        data[57..61].copy_from_slice(&2i32.to_be_bytes());
        let b = BatchIter::new(&data).next().unwrap().unwrap();
        let r: Vec<_> = b.records_in(b.body()).collect();
        assert_eq!(r.len(), 3);
        assert!(r[2].is_err());
    }

    #[test]
    fn control_records_and_aborted_filter() {
        // Producer 7 aborts at offsets 10..12 (marker at 12); producer 8 commits 13..14.
        let mk = |pid: i64, base: i64, ctl: bool| BatchHeader {
            base_offset: base,
            batch_length: 0,
            partition_leader_epoch: 0,
            magic: 2,
            crc: 0,
            attributes: if ctl { 0x30 } else { 0x10 },
            last_offset_delta: if ctl { 0 } else { 1 },
            base_timestamp: 0,
            max_timestamp: 0,
            producer_id: pid,
            producer_epoch: 0,
            base_sequence: 0,
            records_count: 1,
        };
        let mut f = AbortedFilter::default();
        f.reset([(7, 10)].into_iter());
        assert!(f.is_aborted(&mk(7, 10, false)));
        assert!(!f.is_aborted(&mk(8, 13, false)));
        f.control(&mk(7, 12, true), Some(ControlType::Abort));
        // A later transaction of producer 7 that the response does not list is committed data.
        assert!(!f.is_aborted(&mk(7, 20, false)));
        assert_eq!(control_type(Some(&[0, 0, 0, 1])), Some(ControlType::Commit));
        assert_eq!(control_type(Some(&[0, 0, 0, 0])), Some(ControlType::Abort));
        assert_eq!(control_type(Some(&[0])), None);
    }

    #[test]
    fn varints_round_trip_and_reject_overlong() {
        for v in [
            0i64,
            1,
            -1,
            63,
            -64,
            64,
            300,
            -300,
            i32::MAX as i64,
            i64::MIN,
            i64::MAX,
        ] {
            let mut b = Vec::new();
            put_varint(&mut b, v);
            assert_eq!(b.len(), varint_len(v));
            let mut p = 0;
            assert_eq!(varlong(&b, &mut p, "t").unwrap(), v);
            assert_eq!(p, b.len());
        }
        let mut p = 0;
        assert!(varlong(&[0xff; 11], &mut p, "t").is_err());
        let mut p = 0;
        assert!(varint(&[0xff, 0xff, 0xff, 0xff, 0x7f], &mut p, "t").is_err());
    }

    /// A small xorshift generator so the fuzz loop is reproducible without a dependency.
    struct Rng(u64);
    impl Rng {
        fn next(&mut self) -> u64 {
            self.0 ^= self.0 << 13;
            self.0 ^= self.0 >> 7;
            self.0 ^= self.0 << 17;
            self.0
        }
    }

    fn walk(data: &[u8]) -> usize {
        let mut n = 0;
        for b in BatchIter::new(data) {
            let Ok(b) = b else { break };
            let _ = b.verify_crc();
            for r in b.records_in(b.body()) {
                match r {
                    Ok(r) => {
                        n += r.key.map_or(0, |k| k.len()) + r.value.map_or(0, |v| v.len());
                        n += r.headers.map(|(k, _)| k.len()).sum::<usize>();
                    }
                    Err(_) => break,
                }
            }
        }
        n
    }

    #[test]
    fn fuzzed_bytes_never_panic() {
        let mut rng = Rng(0x9E37_79B9_7F4A_7C15);
        let mut good = sample_batch(0, 20, 0);
        good.extend(sample_batch(20, 5, 0));
        // Mutations of a valid batch reach deep into the record parser.
        for _ in 0..20_000 {
            let mut d = good.clone();
            let flips = 1 + rng.next() % 8;
            for _ in 0..flips {
                let at = (rng.next() as usize) % d.len();
                d[at] = rng.next() as u8;
            }
            if rng.next() % 4 == 0 {
                let cut = (rng.next() as usize) % d.len();
                d.truncate(cut);
            }
            walk(&d);
        }
        // Pure noise, with a plausible header so the record parser is reached too.
        for _ in 0..5_000 {
            let len = (rng.next() % 300) as usize;
            let mut d: Vec<u8> = (0..len).map(|_| rng.next() as u8).collect();
            if d.len() > BATCH_HEADER_LEN {
                d[16] = 2;
                let bl = (d.len() - LOG_OVERHEAD) as i32;
                d[8..12].copy_from_slice(&bl.to_be_bytes());
            }
            walk(&d);
        }
    }
}
