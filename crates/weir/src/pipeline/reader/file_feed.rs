//! The file connector: reads framed messages from a file, a directory or a glob, in blocks of
//! whole messages that several partitions decode in parallel.
//!
//! One shared [`FileFeed`] hands out blocks of whole frames into each partition's own buffer,
//! where they are decoded in place (no copy per message). A bounded scan reads ranges of the
//! files in parallel (`file_ranges`); a followed one reads under a lock, since its files grow:
//! the lock covers a `read` and a scan of the frame headers, and keeps the tail for the next
//! block.

use std::fs::File;
use std::io::{Read, Seek, SeekFrom};
use std::path::PathBuf;
use std::sync::{Arc, Mutex, OnceLock};

use weir_codec::{ContainerHeader, Frame, Framing};

use super::block::BlockStatus;
use super::file_ranges::{RangeFile, Ranges};
use crate::error::FileError;
use crate::metrics::ReadStages;
use crate::source::file::{
    expand_path, FilePlace, FileSettings, FileStore, HeaderRead, ListedFile,
};

/// Bytes read per block from object storage: each is one GET request, so a block is larger
/// than a local one, to keep a request's latency small against its transfer.
const OBJECT_BLOCK_BYTES: usize = 8 << 20;

/// Bytes read per block (whole messages only; a larger message grows it). A block of 1 MiB
/// stays in a core's L2 cache between its read, its frame walk and its decoding: on 16 cores it
/// was faster than 4 MiB and 256 KiB (BENCHMARKS.md, "Cores").
pub(crate) const DEFAULT_BLOCK_BYTES: usize = 1 << 20;

struct FeedState {
    files: Vec<PathBuf>,
    /// Bounded reads stop at each file's size when the scan began; `None` in follow mode.
    sizes: Vec<Option<u64>>,
    /// Bytes still to read from the current file (bounded reads).
    remaining: u64,
    /// Files listed with their sizes when the feed was made (objects), for the ranges.
    listed: Vec<ListedFile>,
    names: Vec<Arc<str>>,
    current: usize,
    reader: Option<File>,
    /// File offset of the first byte of `carry`.
    offset: u64,
    carry: Vec<u8>,
    /// The current file's header (container framing).
    header: Option<Arc<ContainerHeader>>,
}

impl FeedState {
    fn new(
        files: Vec<PathBuf>,
        sizes: Vec<Option<u64>>,
        names: Vec<Arc<str>>,
        listed: Vec<ListedFile>,
    ) -> Self {
        Self {
            files,
            sizes,
            remaining: u64::MAX,
            listed,
            names,
            current: 0,
            reader: None,
            offset: 0,
            carry: Vec::new(),
            header: None,
        }
    }
}

/// The shared block reader of one scan of a file source.
pub(crate) struct FileFeed {
    spec: String,
    framing: Framing,
    follow: bool,
    block_bytes: usize,
    max_message_bytes: u64,
    /// Where to begin in files already partly read (a resumed checkpoint), by path.
    starts: std::collections::HashMap<String, u64>,
    /// Followed reads: the files, read one block at a time under the lock.
    state: Mutex<FeedState>,
    /// Bounded reads: ranges read in parallel (set up at the first block).
    ranges: OnceLock<Ranges>,
    /// Where bounded reads spend their time.
    stages: Arc<ReadStages>,
    /// Readers holding a block whose rows they have not all handed on.
    holders: std::sync::atomic::AtomicUsize,
}

impl std::fmt::Debug for FileFeed {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("FileFeed")
            .field("path", &self.spec)
            .field("framing", &self.framing)
            .finish()
    }
}

impl FileFeed {
    /// A feed over the files `settings` name (bounded unless `follow`), timing its stages
    /// into `stages`.
    pub(crate) fn open(
        settings: &FileSettings,
        follow: bool,
        stages: &Arc<ReadStages>,
    ) -> Result<Self, FileError> {
        let mut feed = match &settings.store {
            FileStore::Local => Self::new(
                &settings.path,
                settings.framing,
                follow,
                settings.max_message_bytes,
            )?,
            FileStore::Object(_) if follow => {
                return Err(FileError::Storage {
                    path: settings.path.clone(),
                    reason: "objects cannot be followed (an object does not grow); run without \
                             --follow, or follow a local directory"
                        .into(),
                })
            }
            FileStore::Object(_) => {
                let mut feed = Self::new_bounded(
                    &settings.path,
                    settings.list_files()?,
                    settings.framing,
                    settings.max_message_bytes,
                );
                feed.block_bytes = OBJECT_BLOCK_BYTES;
                feed
            }
        };
        feed.stages = Arc::clone(stages);
        Ok(feed)
    }

    /// A feed over the files `spec` names. With `follow`, the end of the last file is not the
    /// end: the feed waits for it to grow and picks up new files matching `spec`.
    pub(crate) fn new(
        spec: &str,
        framing: Framing,
        follow: bool,
        max_message_bytes: u64,
    ) -> Result<Self, FileError> {
        let files = expand_path(spec)?;
        let names = files
            .iter()
            .map(|p| Arc::from(p.display().to_string()))
            .collect();
        let sizes = files
            .iter()
            .map(|p| {
                if follow {
                    Ok(None)
                } else {
                    std::fs::metadata(p)
                        .map(|m| Some(m.len()))
                        .map_err(|source| FileError::Io {
                            path: p.clone(),
                            source,
                        })
                }
            })
            .collect::<Result<_, _>>()?;
        let state = FeedState::new(files, sizes, names, Vec::new());
        Ok(Self::with_state(
            spec,
            framing,
            follow,
            max_message_bytes,
            state,
        ))
    }

    /// A feed over the files (or listed objects) in `state`.
    fn with_state(
        spec: &str,
        framing: Framing,
        follow: bool,
        max_message_bytes: u64,
        state: FeedState,
    ) -> Self {
        Self {
            spec: spec.into(),
            framing,
            follow,
            block_bytes: DEFAULT_BLOCK_BYTES,
            max_message_bytes,
            starts: Default::default(),
            state: Mutex::new(state),
            ranges: OnceLock::new(),
            stages: Arc::default(),
            holders: Default::default(),
        }
    }

    /// A bounded feed over files already listed with their sizes (objects).
    fn new_bounded(
        spec: &str,
        listed: Vec<ListedFile>,
        framing: Framing,
        max_message_bytes: u64,
    ) -> Self {
        let state = FeedState::new(Vec::new(), Vec::new(), Vec::new(), listed);
        Self::with_state(spec, framing, false, max_message_bytes, state)
    }

    /// Sets the bytes read per block (tests use small blocks to exercise the edges).
    #[cfg(test)]
    pub(crate) fn with_block_bytes(mut self, bytes: usize) -> Self {
        self.block_bytes = bytes.max(1);
        self
    }

    /// Resumes a checkpointed read: each file named here (as its path is displayed) begins at
    /// the given byte offset instead of 0. The offset must be a frame boundary.
    pub(crate) fn with_starts(mut self, starts: impl IntoIterator<Item = (String, u64)>) -> Self {
        self.starts = starts.into_iter().collect();
        self
    }

    /// How many readers hold a block whose rows they have not all handed on (kept by them).
    pub(crate) fn holders(&self) -> &std::sync::atomic::AtomicUsize {
        &self.holders
    }

    /// The framing.
    pub(crate) fn framing(&self) -> Framing {
        self.framing
    }

    /// The largest message accepted (for a container block: uncompressed).
    pub(crate) fn max_message_bytes(&self) -> u64 {
        self.max_message_bytes
    }

    /// Fills `buf` with the next block of whole frames.
    pub(crate) fn next_block(&self, buf: &mut Vec<u8>) -> Result<BlockStatus, FileError> {
        if self.follow {
            self.next_followed(buf)
        } else {
            self.ranges().next_block(buf)
        }
    }

    /// The ranges of a bounded read, from the files and sizes found when the feed was made.
    fn ranges(&self) -> &Ranges {
        self.ranges.get_or_init(|| {
            let mut st = self.state.lock().unwrap_or_else(|e| e.into_inner());
            let listed = std::mem::take(&mut st.listed);
            let local =
                (st.files.iter().zip(&st.names).zip(&st.sizes)).map(|((path, name), size)| {
                    ListedFile {
                        place: FilePlace::Local(path.clone()),
                        name: Arc::clone(name),
                        size: size.unwrap_or(0),
                    }
                });
            let files = listed
                .into_iter()
                .chain(local)
                .map(|file| RangeFile {
                    start: self.starts.get(file.name.as_ref()).copied().unwrap_or(0),
                    place: file.place,
                    name: file.name,
                    size: file.size,
                })
                .collect();
            Ranges::new(
                files,
                self.framing,
                self.block_bytes,
                self.max_message_bytes,
                Arc::clone(&self.stages),
            )
        })
    }

    /// Followed reads: the next block, read and cut under the lock (the files may grow).
    fn next_followed(&self, buf: &mut Vec<u8>) -> Result<BlockStatus, FileError> {
        // A poisoned lock means another partition panicked mid-read; its state is still a
        // consistent position in the files, and the panic is reported by that partition.
        let mut st = self.state.lock().unwrap_or_else(|e| e.into_inner());
        loop {
            if st.reader.is_none() {
                if st.current >= st.files.len() {
                    if self.follow {
                        self.discover(&mut st);
                        if st.current < st.files.len() {
                            continue;
                        }
                        return Ok(BlockStatus::Wait);
                    }
                    return Ok(BlockStatus::End);
                }
                let path = st.files[st.current].clone();
                let mut start = self
                    .starts
                    .get(st.names[st.current].as_ref())
                    .copied()
                    .unwrap_or(0);
                st.header = None;
                if self.framing == Framing::AvroContainer {
                    let name = Arc::clone(&st.names[st.current]);
                    let last = st.current + 1 >= st.files.len();
                    match FilePlace::Local(path.clone()).container_header(&name, 0)? {
                        HeaderRead::Header(h) => {
                            start = start.max(h.len as u64);
                            st.header = Some(Arc::new(h));
                        }
                        // A followed file may still be getting its header.
                        HeaderRead::Short | HeaderRead::Empty if self.follow && last => {
                            self.discover(&mut st);
                            if st.current + 1 >= st.files.len() {
                                return Ok(BlockStatus::Wait);
                            }
                            continue;
                        }
                        HeaderRead::Empty => {
                            self.next_file(&mut st);
                            continue;
                        }
                        HeaderRead::Short => {
                            let reason = "the file ends inside its Avro container header".into();
                            return Ok(self.bad_header(&mut st, buf, name, reason));
                        }
                        HeaderRead::NotContainer(reason) | HeaderRead::Bad(reason) => {
                            return Ok(self.bad_header(&mut st, buf, name, reason));
                        }
                    }
                }
                let mut f = File::open(&path).map_err(|source| FileError::Io {
                    path: path.clone(),
                    source,
                })?;
                if start > 0 {
                    f.seek(SeekFrom::Start(start))
                        .map_err(|source| FileError::Io { path, source })?;
                }
                st.reader = Some(f);
                st.remaining = st
                    .sizes
                    .get(st.current)
                    .copied()
                    .flatten()
                    .map_or(u64::MAX, |size| size.saturating_sub(start));
                st.offset = start;
                st.carry.clear();
            }
            let file = Arc::clone(&st.names[st.current]);
            let last = st.current + 1 >= st.files.len();
            buf.clear();
            buf.append(&mut st.carry);
            let mut eof = self.fill(&mut st, buf, self.block_bytes)?;
            let mut partial: Option<Frame>;
            loop {
                // Find the end of the last whole frame. In follow mode the end of the last
                // file is not final: a line without its newline may still be being written.
                let final_bytes = eof && !(self.follow && last);
                let mut at = 0;
                let mut corrupt = None;
                partial = None;
                while at < buf.len() {
                    match self.framing.frame(buf, at, final_bytes) {
                        Frame::Message { next, .. } | Frame::Empty { next } => at = next,
                        f @ Frame::Partial { .. } => {
                            partial = Some(f);
                            break;
                        }
                        Frame::Corrupt(reason) => {
                            corrupt = Some(reason);
                            break;
                        }
                    }
                }
                if at > 0 {
                    st.carry.extend_from_slice(&buf[at..]);
                    buf.truncate(at);
                    let offset = st.offset;
                    st.offset += at as u64;
                    return Ok(BlockStatus::Block {
                        file,
                        offset,
                        first: 0,
                        len: at,
                        container: st.header.clone(),
                    });
                }
                if let Some(reason) = corrupt {
                    return Ok(self.drop_rest(&mut st, buf, file, reason));
                }
                // The declared length is checked before anything more is read: a length near
                // 2^64 is refused here, not after reading the rest of the file.
                if let Some(Frame::Partial {
                    message_len: Some(len),
                    ..
                }) = partial
                {
                    if len > self.max_message_bytes {
                        let reason = format!(
                            "the frame declares a message of {len} bytes, more than \
                             'max.message.bytes' ({})",
                            self.max_message_bytes
                        );
                        return Ok(self.drop_rest(&mut st, buf, file, reason));
                    }
                }
                if eof {
                    break;
                }
                // The first frame is larger than a block: read until it is whole.
                let needed = partial.as_ref().and_then(Frame::needed);
                let more = needed
                    .map_or(0, |n| {
                        usize::try_from(n)
                            .unwrap_or(usize::MAX)
                            .saturating_sub(buf.len())
                    })
                    .max(self.block_bytes);
                eof = self.fill(&mut st, buf, more)?;
            }
            // At the end of the file with no whole frame in the buffer.
            if self.follow && last {
                // Keep the file open (and any partial frame) and look again later.
                st.carry = std::mem::take(buf);
                self.discover(&mut st);
                if st.current + 1 >= st.files.len() {
                    return Ok(BlockStatus::Wait);
                }
                // More files appeared: read this one's end again as final.
                continue;
            }
            if buf.is_empty() {
                self.next_file(&mut st);
                continue;
            }
            let reason = match partial.as_ref().and_then(Frame::needed) {
                Some(n) => format!(
                    "the file ends inside a message: the frame needs {n} bytes, {} remain",
                    buf.len()
                ),
                None => format!(
                    "the file ends inside a frame header ({} bytes remain)",
                    buf.len()
                ),
            };
            return Ok(self.drop_rest(&mut st, buf, file, reason));
        }
    }

    /// Reads up to `want` more bytes into `buf`; true at the end of the file.
    fn fill(&self, st: &mut FeedState, buf: &mut Vec<u8>, want: usize) -> Result<bool, FileError> {
        let FeedState {
            reader,
            files,
            current,
            remaining,
            ..
        } = st;
        let Some(reader) = reader.as_mut() else {
            return Ok(true);
        };
        let want = (want as u64).min(*remaining);
        buf.reserve(want as usize);
        let mut take = Read::take(&mut *reader, want);
        let got = take.read_to_end(buf).map_err(|source| FileError::Io {
            path: files[*current].clone(),
            source,
        })? as u64;
        *remaining -= got;
        Ok(got < want || *remaining == 0)
    }

    /// A file whose container header cannot be read: all of it is one bad frame.
    fn bad_header(
        &self,
        st: &mut FeedState,
        buf: &mut Vec<u8>,
        file: Arc<str>,
        reason: String,
    ) -> BlockStatus {
        // `buf` still holds the last file's bytes.
        buf.clear();
        st.offset = 0;
        self.drop_rest(st, buf, file, reason)
    }

    fn drop_rest(
        &self,
        st: &mut FeedState,
        buf: &mut Vec<u8>,
        file: Arc<str>,
        reason: String,
    ) -> BlockStatus {
        let offset = st.offset;
        buf.truncate(64 << 10);
        let bytes = std::mem::take(buf);
        self.next_file(st);
        BlockStatus::Bad {
            file,
            offset,
            reason,
            bytes,
        }
    }

    fn next_file(&self, st: &mut FeedState) {
        st.reader = None;
        st.carry.clear();
        st.current += 1;
        st.offset = 0;
    }

    /// Follow mode: adds files that appeared since the last look (sorted after the known ones).
    fn discover(&self, st: &mut FeedState) {
        if let Ok(found) = expand_path(&self.spec) {
            for f in found {
                if !st.files.contains(&f) {
                    st.names.push(Arc::from(f.display().to_string()));
                    st.sizes.push(None);
                    st.files.push(f);
                }
            }
        }
    }
}

/// Why [`for_each_message`] stopped.
#[derive(Debug, thiserror::Error)]
pub enum MessagesError {
    /// The files could not be read.
    #[error(transparent)]
    File(#[from] FileError),
    /// A frame holds no message.
    #[error("{file} at byte {offset}: {reason}")]
    BadFrame {
        /// The file.
        file: String,
        /// Where the frame starts.
        offset: u64,
        /// What is wrong.
        reason: String,
    },
    /// The caller's function failed.
    #[error(transparent)]
    Callback(Box<dyn std::error::Error + Send + Sync>),
    /// The framing holds no messages one by one.
    #[error("{0}")]
    Framing(String),
}

/// Calls `each` with every message of the files `spec` names (a file, a directory or a glob,
/// read in name order), each a slice of the block read; returns the messages and their bytes.
pub fn for_each_message(
    spec: &str,
    framing: Framing,
    mut each: impl FnMut(&[u8]) -> Result<(), Box<dyn std::error::Error + Send + Sync>>,
) -> Result<(u64, u64), MessagesError> {
    if framing == Framing::AvroContainer {
        return Err(MessagesError::Framing(
            "an Avro container file holds blocks of values, not messages one by one; read it \
             with a source of 'encoding' = 'avro'"
                .into(),
        ));
    }
    let feed = FileFeed::new(spec, framing, false, u64::MAX)?;
    let mut buf = Vec::new();
    let (mut n, mut bytes) = (0u64, 0u64);
    loop {
        match feed.next_block(&mut buf)? {
            BlockStatus::Block { first, len, .. } => {
                let mut at = first;
                while at < len {
                    match framing.frame(&buf[..len], at, true) {
                        Frame::Message { start, end, next } => {
                            each(&buf[start..end]).map_err(MessagesError::Callback)?;
                            n += 1;
                            bytes += (end - start) as u64;
                            at = next;
                        }
                        Frame::Empty { next } => at = next,
                        // The feed hands out whole frames only.
                        Frame::Partial { .. } | Frame::Corrupt(_) => break,
                    }
                }
            }
            BlockStatus::Bad {
                file,
                offset,
                reason,
                ..
            } => {
                return Err(MessagesError::BadFrame {
                    file: file.to_string(),
                    offset,
                    reason,
                })
            }
            BlockStatus::Wait | BlockStatus::End => return Ok((n, bytes)),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::Write;
    use std::path::Path;

    fn varint_file(dir: &Path, name: &str, messages: &[&[u8]]) -> PathBuf {
        let p = dir.join(name);
        let mut f = File::create(&p).unwrap();
        for m in messages {
            let mut len = m.len() as u64;
            loop {
                let b = (len & 0x7f) as u8;
                len >>= 7;
                if len == 0 {
                    f.write_all(&[b]).unwrap();
                    break;
                }
                f.write_all(&[b | 0x80]).unwrap();
            }
            f.write_all(m).unwrap();
        }
        p
    }

    /// A bounded varint feed over the files of `dir`, in blocks of `block` bytes.
    fn varint_feed(dir: &Path, block: usize) -> FileFeed {
        FileFeed::new(dir.to_str().unwrap(), Framing::Varint, false, 1 << 20)
            .unwrap()
            .with_block_bytes(block)
    }

    /// (file, offset, message) of every message, and the bad frames.
    type Drained = (Vec<(String, u64, Vec<u8>)>, Vec<String>);

    fn drain(feed: &FileFeed) -> Drained {
        let mut out = Vec::new();
        let mut bad = Vec::new();
        let mut buf = Vec::new();
        loop {
            match feed.next_block(&mut buf).unwrap() {
                BlockStatus::Block {
                    file,
                    offset,
                    first,
                    len,
                    ..
                } => {
                    let mut at = first;
                    while at < len {
                        match feed.framing().frame(&buf[..len], at, true) {
                            Frame::Message { start, end, next } => {
                                out.push((
                                    file.to_string(),
                                    offset + (at - first) as u64,
                                    buf[start..end].to_vec(),
                                ));
                                at = next;
                            }
                            Frame::Empty { next } => at = next,
                            other => panic!("{other:?}"),
                        }
                    }
                }
                BlockStatus::Bad { offset, reason, .. } => bad.push(format!("{offset}: {reason}")),
                BlockStatus::Wait => panic!("wait without follow"),
                BlockStatus::End => return (out, bad),
            }
        }
    }

    #[test]
    fn blocks_split_only_between_frames() {
        let dir = tempfile::tempdir().unwrap();
        let big = vec![7u8; 300];
        let msgs: Vec<&[u8]> = vec![b"a", b"bb", &big, b"", b"ccc"];
        varint_file(dir.path(), "1.bin", &msgs);
        varint_file(dir.path(), "2.bin", &[b"z"]);
        for block in [1, 2, 3, 5, 64, 1 << 20] {
            let feed = varint_feed(dir.path(), block);
            let (got, bad) = drain(&feed);
            assert!(bad.is_empty(), "{bad:?}");
            let values: Vec<&[u8]> = got.iter().map(|m| m.2.as_slice()).collect();
            assert_eq!(
                values,
                [b"a" as &[u8], b"bb", &big, b"", b"ccc", b"z"],
                "block {block}"
            );
            let offsets: Vec<u64> = got.iter().map(|m| m.1).collect();
            assert_eq!(offsets, [0, 2, 5, 307, 308, 0], "block {block}");
            assert!(got[5].0.ends_with("2.bin"));
        }
    }

    #[test]
    fn a_truncated_tail_is_reported_and_the_next_file_still_read() {
        let dir = tempfile::tempdir().unwrap();
        let p = varint_file(dir.path(), "1.bin", &[b"ok"]);
        let mut f = std::fs::OpenOptions::new().append(true).open(&p).unwrap();
        f.write_all(&[10, 1, 2]).unwrap();
        varint_file(dir.path(), "2.bin", &[b"next"]);
        for block in [1, 4, 1024] {
            let feed = varint_feed(dir.path(), block);
            let (got, bad) = drain(&feed);
            assert_eq!(got.len(), 2, "block {block}");
            assert_eq!(
                bad,
                ["3: the file ends inside a message: the frame needs 11 bytes, 3 remain"]
            );
        }
    }

    #[test]
    fn oversized_and_corrupt_frames() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("x.bin");
        std::fs::write(&p, [0x80, 0x80, 0x80, 0x80, 0x01, 1, 2]).unwrap();
        let feed = FileFeed::new(p.to_str().unwrap(), Framing::Varint, false, 1000).unwrap();
        let (_, bad) = drain(&feed);
        assert!(bad[0].contains("more than 'max.message.bytes'"), "{bad:?}");
        std::fs::write(
            &p,
            [
                1, 9, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff,
            ],
        )
        .unwrap();
        let feed = FileFeed::new(p.to_str().unwrap(), Framing::Varint, false, 1000).unwrap();
        let (got, bad) = drain(&feed);
        assert_eq!(got.len(), 1);
        assert!(bad[0].starts_with("2: length prefix"), "{bad:?}");
    }

    #[test]
    fn a_bounded_read_stops_at_the_size_the_file_had_when_it_began() {
        let dir = tempfile::tempdir().unwrap();
        let p = varint_file(dir.path(), "1.bin", &[b"a", b"b"]);
        let feed = FileFeed::new(p.to_str().unwrap(), Framing::Varint, false, 100).unwrap();
        let mut f = std::fs::OpenOptions::new().append(true).open(&p).unwrap();
        f.write_all(&[1, b'c']).unwrap();
        let (got, bad) = drain(&feed);
        assert!(bad.is_empty());
        assert_eq!(got.len(), 2);
    }

    /// Messages of pseudo-random lengths (1 to 600 bytes, and some of 20,000; no newlines), the
    /// same every run.
    fn messages(seed: u64, n: usize) -> Vec<Vec<u8>> {
        let mut x = seed;
        (0..n)
            .map(|i| {
                x = x
                    .wrapping_mul(6364136223846793005)
                    .wrapping_add(1442695040888963407);
                // Now and then one over 16 KiB (a three-byte varint length).
                let len = if i % 37 == 5 {
                    20_000
                } else {
                    ((x >> 33) % 601) as usize
                };
                // Lines framing skips blank lines: keep one visible byte in every message.
                let mut m = vec![b'a' + (i % 26) as u8; len.max(1)];
                m[0] = b'#';
                m
            })
            .collect()
    }

    fn framed(framing: Framing, messages: &[Vec<u8>]) -> Vec<u8> {
        let mut out = Vec::new();
        for m in messages {
            framing.write(&mut out, m).unwrap();
        }
        out
    }

    /// Drains `feed` on `threads` threads at once; every message, sorted by file and offset.
    fn drain_on(feed: &FileFeed, threads: usize) -> Drained {
        let parts: Vec<Drained> = std::thread::scope(|s| {
            let handles: Vec<_> = (0..threads).map(|_| s.spawn(|| drain(feed))).collect();
            handles.into_iter().map(|h| h.join().unwrap()).collect()
        });
        let (mut got, mut bad) = (Vec::new(), Vec::new());
        for (g, b) in parts {
            got.extend(g);
            bad.extend(b);
        }
        got.sort();
        (got, bad)
    }

    #[test]
    fn parallel_readers_get_every_frame_once_whatever_the_block_size() {
        let dir = tempfile::tempdir().unwrap();
        for framing in [Framing::Varint, Framing::U32Be, Framing::Lines] {
            let files: Vec<Vec<Vec<u8>>> = (0..3).map(|f| messages(f, 100)).collect();
            let mut expected = Vec::new();
            for (i, msgs) in files.iter().enumerate() {
                let bytes = framed(framing, msgs);
                let name = dir.path().join(format!("{framing}-{i}.bin"));
                std::fs::write(&name, &bytes).unwrap();
                let mut at = 0u64;
                for m in msgs {
                    let header = framed(framing, std::slice::from_ref(m)).len() - m.len();
                    expected.push((name.display().to_string(), at, m.clone()));
                    at += (header + m.len()) as u64;
                }
            }
            expected.sort();
            let glob = format!("{}/{framing}-*.bin", dir.path().display());
            // Ranges that end inside headers and inside most messages, and whole files.
            for block in [5, 64, 1000, 1 << 20] {
                for threads in [1, 4] {
                    let feed = FileFeed::new(&glob, framing, false, 1 << 20)
                        .unwrap()
                        .with_block_bytes(block);
                    let (got, bad) = drain_on(&feed, threads);
                    assert!(bad.is_empty(), "{framing} block {block}: {bad:?}");
                    assert_eq!(
                        got.len(),
                        expected.len(),
                        "{framing} block {block} x{threads}"
                    );
                    assert!(
                        got == expected,
                        "{framing} block {block} x{threads}: messages differ"
                    );
                }
            }
        }
    }

    #[test]
    fn a_corrupt_frame_ends_its_file_for_every_reader_and_the_next_file_is_read() {
        let dir = tempfile::tempdir().unwrap();
        let msgs = messages(7, 300);
        let mut bytes = framed(Framing::Varint, &msgs[..150]);
        let good = bytes.len() as u64;
        bytes.extend_from_slice(&[0xff; 11]);
        bytes.extend_from_slice(&framed(Framing::Varint, &msgs[150..]));
        std::fs::write(dir.path().join("1.bin"), &bytes).unwrap();
        std::fs::write(dir.path().join("2.bin"), framed(Framing::Varint, &msgs)).unwrap();
        for block in [5, 100, 1 << 20] {
            let feed = varint_feed(dir.path(), block);
            let (got, bad) = drain_on(&feed, 4);
            assert_eq!(
                bad,
                [format!(
                    "{good}: length prefix is a varint longer than 10 bytes"
                )],
                "block {block}"
            );
            let first = got.iter().filter(|m| m.0.ends_with("1.bin")).count();
            assert_eq!((first, got.len() - first), (150, 300), "block {block}");
        }
    }

    #[test]
    fn a_resumed_read_begins_at_the_checkpointed_offset() {
        let dir = tempfile::tempdir().unwrap();
        let msgs = messages(3, 200);
        let bytes = framed(Framing::U32Be, &msgs);
        let p = dir.path().join("1.bin");
        std::fs::write(&p, &bytes).unwrap();
        let start = framed(Framing::U32Be, &msgs[..120]).len() as u64;
        for block in [2, 333, 1 << 20] {
            let feed = FileFeed::new(p.to_str().unwrap(), Framing::U32Be, false, 1 << 20)
                .unwrap()
                .with_block_bytes(block)
                .with_starts([(p.display().to_string(), start)]);
            let (got, bad) = drain(&feed);
            assert!(bad.is_empty(), "{bad:?}");
            assert_eq!(got.first().map(|m| m.1), Some(start), "block {block}");
            let values: Vec<&Vec<u8>> = got.iter().map(|m| &m.2).collect();
            assert_eq!(
                values,
                msgs[120..].iter().collect::<Vec<_>>(),
                "block {block}"
            );
        }
    }

    #[test]
    fn lines_and_missing_paths() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("x.jsonl");
        std::fs::write(&p, "{\"a\":1}\n\n{\"a\":2}").unwrap();
        let feed = FileFeed::new(p.to_str().unwrap(), Framing::Lines, false, 1000)
            .unwrap()
            .with_block_bytes(3);
        let (got, bad) = drain(&feed);
        assert!(bad.is_empty());
        assert_eq!(got.iter().map(|m| m.1).collect::<Vec<_>>(), [0, 9]);
        let e = FileFeed::new(
            dir.path().join("nope").to_str().unwrap(),
            Framing::Lines,
            false,
            1,
        )
        .unwrap_err();
        assert!(e.to_string().contains("nope"), "{e}");
        let e = FileFeed::new(
            dir.path().join("*.none").to_str().unwrap(),
            Framing::Lines,
            false,
            1,
        )
        .unwrap_err();
        assert!(e.to_string().contains("matches no file"), "{e}");
    }
}
