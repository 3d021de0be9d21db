//! Bounded file reads on any number of readers: each reader claims the next byte range of a
//! file and reads it with `pread`, in parallel with the others. Only the walk over the frame
//! headers is taken in turn, range after range, because a varint or u32 frame's start is known
//! only from the frame before it; the walk of one range is a few hundred microseconds, while
//! reading and decoding it take milliseconds, so the readers stay busy.
//!
//! Each range's walk starts at the boundary the walk before it left (the end of the last frame
//! that began in the previous range) and reads the rest of a frame that runs past its own
//! range, so every frame is handed out once, whole, by the range it begins in.
//!
//! What is taken in turn is kept short by walking ahead (see [`super::walk_ahead`]): before its
//! turn, a reader chains through its range's length prefixes from the range's first byte, in
//! parallel with the others; in its turn it walks only until the real frames meet that chain.

use std::fs::File;
use std::os::unix::fs::FileExt;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Condvar, Mutex, MutexGuard};
use std::time::Instant;

use weir_codec::{ContainerHeader, Frame, Framing};

use super::block::BlockStatus;
use super::walk_ahead::{self, Ahead, Step};
use crate::error::FileError;
use crate::metrics::ReadStages;
use crate::source::file::{FilePlace, HeaderRead};

/// Condition variables readers wait on for their turn (more than readers usually run).
const WAIT_SLOTS: usize = 64;

/// See the read in [`Ranges::next_block`].
const PAGE: usize = 4096;
const PAD_PHASE: usize = PAGE / 2;

/// Bytes read past a range to find the end of its last line (more for longer lines).
const LINE_READ_AHEAD: u64 = 64 << 10;

/// Bytes dropped with a bad frame that are kept for a dead letter.
const BAD_BYTES_KEPT: usize = 64 << 10;

/// One file of a bounded scan.
pub(crate) struct RangeFile {
    /// Where its bytes are.
    pub(crate) place: FilePlace,
    /// The path as positions and errors name it.
    pub(crate) name: Arc<str>,
    /// Its size when the scan began: a bounded read stops there.
    pub(crate) size: u64,
    /// Where its read begins (a resumed checkpoint).
    pub(crate) start: u64,
}

/// A file open for reading at offsets.
enum Opened {
    Local(File),
    Object {
        store: Arc<dyn object_store::ObjectStore>,
        key: object_store::path::Path,
    },
}

impl Opened {
    fn open(place: &FilePlace) -> std::io::Result<Self> {
        Ok(match place {
            FilePlace::Local(path) => Self::Local(File::open(path)?),
            FilePlace::Object { store, key } => Self::Object {
                store: Arc::clone(store),
                key: key.clone(),
            },
        })
    }

    /// Fills `buf` with the bytes at `offset`.
    fn read_exact_at(&self, buf: &mut [u8], offset: u64) -> std::io::Result<()> {
        match self {
            Self::Local(f) => f.read_exact_at(buf, offset),
            Self::Object { store, key } => {
                let (store, key) = (Arc::clone(store), key.clone());
                let range = offset..offset + buf.len() as u64;
                // A reader decodes on a query thread, which must not wait on a future of its
                // own runtime; the request runs on the storage runtime. The copy out of the
                // response is the one a `pread` makes too.
                let got = crate::storage::wait_for(async move {
                    store.get_ranges(&key, std::slice::from_ref(&range)).await
                })
                .ok_or_else(|| std::io::Error::other("the object-storage runtime stopped"))?
                .map_err(std::io::Error::other)?;
                let bytes = got.first().map_or(&[][..], |b| b.as_ref());
                if bytes.len() != buf.len() {
                    return Err(std::io::Error::new(
                        std::io::ErrorKind::UnexpectedEof,
                        format!(
                            "the object returned {} bytes at offset {offset}, {} were asked \
                             for (was it replaced during the read?)",
                            bytes.len(),
                            buf.len()
                        ),
                    ));
                }
                buf.copy_from_slice(bytes);
                Ok(())
            }
        }
    }
}

/// The files of one bounded scan, read in ranges.
pub(crate) struct Ranges {
    files: Vec<RangeFile>,
    framing: Framing,
    block_bytes: usize,
    max_message_bytes: u64,
    claims: Mutex<Claims>,
    turn: Mutex<Turn>,
    /// Readers wait for their turn on the slot of their ticket, so passing the turn wakes the
    /// one reader whose turn it is, not all of them.
    turned: [Condvar; WAIT_SLOTS],
    /// Bad frames found by a walk that also handed out good frames, for the next call.
    pending: Mutex<Vec<BlockStatus>>,
    /// The walks ahead of readers not in [`Ranges::next_block`] now, kept for their buffers.
    aheads: Mutex<Vec<Ahead>>,
    stages: Arc<ReadStages>,
}

/// The next range to hand out.
struct Claims {
    /// Its place in the order of all ranges of the scan.
    ticket: u64,
    file: usize,
    /// Sequence number of the next range within `file`.
    seq: u64,
    /// Its first byte.
    next: u64,
    /// The open file (`None` until its first range is claimed).
    open: Option<Arc<Opened>>,
    /// Its header (container framing).
    header: Option<Arc<ContainerHeader>>,
}

/// Whose walk is next, and where it begins.
struct Turn {
    /// The ticket of the range whose walk is next.
    ticket: u64,
    /// Where its first frame begins (unused for a file's first range).
    boundary: u64,
    /// A bad frame ended this file's walk: its later ranges are dropped.
    dead: bool,
    /// A reader stopped without taking its turn (a read error or a panic): the scan fails.
    broken: bool,
}

/// A claimed range: `[start, end)` of file `file`.
struct Claim {
    ticket: u64,
    file: usize,
    seq: u64,
    start: u64,
    end: u64,
    handle: Arc<Opened>,
    header: Option<Arc<ContainerHeader>>,
}

impl Ranges {
    /// Ranges over `files`, each read from its start to its size.
    pub(crate) fn new(
        files: Vec<RangeFile>,
        framing: Framing,
        block_bytes: usize,
        max_message_bytes: u64,
        stages: Arc<ReadStages>,
    ) -> Self {
        Self {
            files,
            framing,
            block_bytes: block_bytes.max(1),
            max_message_bytes,
            claims: Mutex::new(Claims {
                ticket: 0,
                file: 0,
                seq: 0,
                next: 0,
                open: None,
                header: None,
            }),
            turn: Mutex::new(Turn {
                ticket: 0,
                boundary: 0,
                dead: false,
                broken: false,
            }),
            turned: std::array::from_fn(|_| Condvar::new()),
            pending: Mutex::new(Vec::new()),
            aheads: Mutex::new(Vec::new()),
            stages,
        }
    }

    /// Fills `buf` with a range's whole frames; the first begins at `buf[first]`.
    pub(crate) fn next_block(&self, buf: &mut Vec<u8>) -> Result<BlockStatus, FileError> {
        loop {
            if let Some(bad) = lock(&self.pending).pop() {
                return Ok(bad);
            }
            let Some(claim) = self.claim()? else {
                // Another reader may have queued a bad frame after the check above.
                return Ok(lock(&self.pending).pop().unwrap_or(BlockStatus::End));
            };
            // If this reader stops before passing the turn on, the readers after it must not
            // wait for ever: the guard marks the scan broken.
            let mut guard = TurnGuard {
                ranges: self,
                passed: false,
            };
            let started = Instant::now();
            // The range goes to `buf[pad..]`, placed half a page away from where the file's
            // bytes sit in their page: a copy whose destination lies a few bytes past its
            // source modulo 4 KiB (as malloc's 16-byte header puts a large buffer against a
            // page-aligned range) runs 5x slower in the kernel, measured on an AMD EPYC.
            let raw = (claim.end - claim.start) as usize;
            if buf.len() < raw + PAGE {
                buf.resize(raw + PAGE, 0);
            }
            let pad = PAD_PHASE
                .wrapping_add(claim.start as usize)
                .wrapping_sub(buf.as_ptr() as usize)
                % PAGE;
            let read = claim
                .handle
                .read_exact_at(&mut buf[pad..pad + raw], claim.start)
                .map_err(|source| self.io(claim.file, source));
            let read_at = Instant::now();
            let mut ahead = PooledAhead::take(&self.aheads);
            if let (Ok(()), Some(step)) = (&read, self.step()) {
                ahead.walk(&buf[..pad + raw], pad, pad + raw, step);
            }
            let ahead_at = Instant::now();
            let mut turn = self.wait_turn(&claim)?;
            let turn_at = Instant::now();
            add(&self.stages.read_ns, read_at - started);
            add(&self.stages.ahead_ns, ahead_at - read_at);
            add(&self.stages.waiting_ns, turn_at - ahead_at);
            read?;
            let begin = if claim.seq == 0 {
                claim.start
            } else {
                turn.boundary
            };
            if turn.dead || begin >= claim.end {
                // Nothing begins in this range: a bad frame ended the file, or the frame before
                // spans the whole range.
                let dead = turn.dead;
                self.pass(&mut turn, &claim, begin, dead);
                guard.passed = true;
                continue;
            }
            let first = pad + (begin - claim.start) as usize;
            let walk = self.walk(&claim, buf, pad, first, pad + raw, &ahead);
            add(&self.stages.framing_ns, turn_at.elapsed());
            // On an error the guard leaves the scan broken.
            let Walked {
                end: len,
                valid,
                bad,
            } = walk?;
            self.pass(
                &mut turn,
                &claim,
                claim.start + (len - pad) as u64,
                bad.is_some(),
            );
            guard.passed = true;
            drop(turn);
            let file = Arc::clone(&self.files[claim.file].name);
            let bad = bad.map(|(at, reason)| {
                let kept = valid.min(at + BAD_BYTES_KEPT);
                BlockStatus::Bad {
                    file: Arc::clone(&file),
                    offset: claim.start + (at - pad) as u64,
                    reason,
                    bytes: buf.get(at..kept).map(<[u8]>::to_vec).unwrap_or_default(),
                }
            });
            if len > first {
                if let Some(bad) = bad {
                    lock(&self.pending).push(bad);
                }
                return Ok(BlockStatus::Block {
                    file,
                    offset: begin,
                    first,
                    len,
                    container: claim.header.clone(),
                });
            }
            if let Some(bad) = bad {
                return Ok(bad);
            }
        }
    }

    /// Claims the next range, opening files as the claims reach them; `None` at the end.
    fn claim(&self) -> Result<Option<Claim>, FileError> {
        let mut c = lock(&self.claims);
        loop {
            if c.file >= self.files.len() {
                return Ok(None);
            }
            let size = self.files[c.file].size;
            let handle = match &c.open {
                Some(h) => Arc::clone(h),
                None => {
                    let file = &self.files[c.file];
                    let mut start = file.start;
                    c.header = None;
                    if self.framing == Framing::AvroContainer {
                        let bad = match file.place.container_header(&file.name, size)? {
                            HeaderRead::Header(h) => {
                                start = start.max(h.len as u64);
                                c.header = Some(Arc::new(h));
                                None
                            }
                            HeaderRead::Empty => {
                                // No rows.
                                c.file += 1;
                                continue;
                            }
                            HeaderRead::Short => {
                                Some("the file ends inside its Avro container header".to_string())
                            }
                            HeaderRead::NotContainer(reason) | HeaderRead::Bad(reason) => {
                                Some(reason)
                            }
                        };
                        if let Some(reason) = bad {
                            // The whole file is one bad frame; it takes no range.
                            lock(&self.pending).push(BlockStatus::Bad {
                                file: Arc::clone(&file.name),
                                offset: 0,
                                reason,
                                bytes: Vec::new(),
                            });
                            c.file += 1;
                            continue;
                        }
                    }
                    let f = Opened::open(&file.place).map_err(|source| self.io(c.file, source))?;
                    let h = Arc::new(f);
                    c.open = Some(Arc::clone(&h));
                    c.next = start.min(size);
                    c.seq = 0;
                    h
                }
            };
            // Every file gets at least one range (an empty file an empty one), so the walk
            // that ends a file always runs and moves the turn to the next file.
            if c.seq > 0 && c.next >= size {
                c.file += 1;
                c.open = None;
                continue;
            }
            let start = c.next;
            let end = start.saturating_add(self.block_bytes as u64).min(size);
            let claim = Claim {
                ticket: c.ticket,
                file: c.file,
                seq: c.seq,
                start,
                end,
                handle,
                header: c.header.clone(),
            };
            c.ticket += 1;
            c.seq += 1;
            c.next = end;
            return Ok(Some(claim));
        }
    }

    /// Waits until the walks of the ranges before `claim` are done.
    fn wait_turn(&self, claim: &Claim) -> Result<MutexGuard<'_, Turn>, FileError> {
        let mut turn = lock(&self.turn);
        let slot = &self.turned[claim.ticket as usize % WAIT_SLOTS];
        while !turn.broken && turn.ticket != claim.ticket {
            turn = slot.wait(turn).unwrap_or_else(|e| e.into_inner());
        }
        if turn.broken {
            return Err(self.io(
                claim.file,
                std::io::Error::other("another reader of this scan failed"),
            ));
        }
        Ok(turn)
    }

    /// Hands the turn to the next range: the same file's next one, whose frames begin at
    /// `boundary`, or the next file's first.
    fn pass(&self, turn: &mut Turn, claim: &Claim, boundary: u64, dead: bool) {
        turn.ticket = claim.ticket + 1;
        if claim.end == self.files[claim.file].size {
            // The next range is the next file's first.
            turn.boundary = 0;
            turn.dead = false;
        } else {
            turn.boundary = boundary;
            turn.dead = dead;
        }
        // Readers further on may share the slot: they check the ticket and wait again.
        self.turned[turn.ticket as usize % WAIT_SLOTS].notify_all();
    }

    /// The fast walk's step over one length-prefixed frame; `None` for lines.
    fn step(&self) -> Option<Step> {
        match self.framing {
            Framing::Varint => Some(walk_ahead::varint_step),
            Framing::U32Be => Some(walk_ahead::u32be_step),
            Framing::Lines | Framing::AvroContainer => None,
        }
    }

    /// Walks the frames that begin in `buf[at..end]` (the range read to `buf[pad..end]`),
    /// reading the rest of one that runs past the range. Returns the end of the last whole
    /// frame, the end of the bytes now in `buf`, and a bad frame that ends the file's read (its
    /// position in `buf` and why).
    fn walk(
        &self,
        claim: &Claim,
        buf: &mut Vec<u8>,
        pad: usize,
        mut at: usize,
        end: usize,
        ahead: &Ahead,
    ) -> Result<Walked, FileError> {
        let size = self.files[claim.file].size;
        let mut valid = end;
        while at < end {
            // This walk is the part of a scan that does not spread over cores: skip the
            // common frames in a tight loop, along the walk ahead once it meets it, and leave
            // the rest (a frame that runs past the range, a long header, the end of the file)
            // to `Framing::frame`.
            at = match self.step() {
                Some(step) => ahead.skip(&buf[..valid], at, end, step),
                // Only the range's last line end matters here.
                None if self.framing == Framing::Lines => {
                    memchr::memrchr(b'\n', &buf[at..end]).map_or(at, |i| at + i + 1)
                }
                // Container blocks are tens of KiB: each is walked below.
                None => at,
            };
            if at >= end {
                break;
            }
            let at_eof = claim.start + (valid - pad) as u64 == size;
            match self.framing.frame(&buf[..valid], at, at_eof) {
                Frame::Message { next, .. } | Frame::Empty { next } => at = next,
                Frame::Corrupt(reason) => return Ok(Walked::bad(at, valid, reason)),
                partial @ Frame::Partial { .. } => {
                    if let Frame::Partial {
                        message_len: Some(len),
                        ..
                    } = partial
                    {
                        // Checked before reading on: a length near 2^64 is refused here.
                        if len > self.max_message_bytes {
                            let reason = format!(
                                "the frame declares a message of {len} bytes, more than \
                                 'max.message.bytes' ({})",
                                self.max_message_bytes
                            );
                            return Ok(Walked::bad(at, valid, reason));
                        }
                    }
                    if at_eof {
                        let reason = match partial.needed() {
                            Some(n) => format!(
                                "the file ends inside a message: the frame needs {n} bytes, {} \
                                 remain",
                                valid - at
                            ),
                            None => format!(
                                "the file ends inside a frame header ({} bytes remain)",
                                valid - at
                            ),
                        };
                        return Ok(Walked::bad(at, valid, reason));
                    }
                    // The frame runs past the range: read what it still needs (a header's
                    // worth when its length is not known yet). A line's end is not known: read
                    // 64 KiB, or as much again as the line has so far.
                    let want = match partial.needed() {
                        Some(n) => n.saturating_sub((valid - at) as u64),
                        None if self.framing == Framing::Lines => {
                            ((valid - at) as u64).max(LINE_READ_AHEAD)
                        }
                        None => 16,
                    };
                    let have = claim.start + (valid - pad) as u64;
                    let more = want.max(1).min(size - have) as usize;
                    if buf.len() < valid + more {
                        buf.resize(valid + more, 0);
                    }
                    claim
                        .handle
                        .read_exact_at(&mut buf[valid..valid + more], have)
                        .map_err(|source| self.io(claim.file, source))?;
                    valid += more;
                }
            }
        }
        Ok(Walked {
            end: at,
            valid,
            bad: None,
        })
    }

    fn io(&self, file: usize, source: std::io::Error) -> FileError {
        FileError::Io {
            path: std::path::PathBuf::from(&*self.files[file].name),
            source,
        }
    }
}

fn add(counter: &AtomicU64, d: std::time::Duration) {
    counter.fetch_add(d.as_nanos() as u64, Ordering::Relaxed);
}

/// What a range's walk found.
struct Walked {
    /// The end of the last whole frame in the buffer.
    end: usize,
    /// The end of the bytes in the buffer.
    valid: usize,
    /// A bad frame that ends the file's read: where it is in the buffer, and why.
    bad: Option<(usize, String)>,
}

impl Walked {
    fn bad(at: usize, valid: usize, reason: String) -> Self {
        Self {
            end: at,
            valid,
            bad: Some((at, reason)),
        }
    }
}

/// A reader's walk ahead, back in the pool when the reader leaves [`Ranges::next_block`].
struct PooledAhead<'a> {
    pool: &'a Mutex<Vec<Ahead>>,
    ahead: Ahead,
}

impl<'a> PooledAhead<'a> {
    fn take(pool: &'a Mutex<Vec<Ahead>>) -> Self {
        let ahead = lock(pool).pop().unwrap_or_default();
        Self { pool, ahead }
    }
}

impl std::ops::Deref for PooledAhead<'_> {
    type Target = Ahead;
    fn deref(&self) -> &Ahead {
        &self.ahead
    }
}

impl std::ops::DerefMut for PooledAhead<'_> {
    fn deref_mut(&mut self) -> &mut Ahead {
        &mut self.ahead
    }
}

impl Drop for PooledAhead<'_> {
    fn drop(&mut self) {
        lock(self.pool).push(std::mem::take(&mut self.ahead));
    }
}

/// Marks the scan broken when a reader leaves between its claim and passing the turn on.
struct TurnGuard<'a> {
    ranges: &'a Ranges,
    passed: bool,
}

impl Drop for TurnGuard<'_> {
    fn drop(&mut self) {
        if !self.passed {
            lock(&self.ranges.turn).broken = true;
            for slot in &self.ranges.turned {
                slot.notify_all();
            }
        }
    }
}

/// A poisoned lock means another reader panicked; the state it guards is still consistent (the
/// guard above marks the scan broken), and that reader reports the panic.
fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}
