//! Positioned readers: one per connector. A reader reads its share of a source (some files'
//! blocks, some Kafka partitions), decodes every message with a [`SourceDecoder`], and knows
//! after each batch it returns the next position of every partition it read: what a checkpoint
//! records. Stateless scans, scans of a source with state and exactly-once sinks all read
//! through these two readers; there is one Kafka loop. The file connector's reads (a shared
//! feed of blocks, ranges read in parallel) are in the submodules.

pub(crate) mod block;
pub(crate) mod file_feed;
mod file_ranges;
mod walk_ahead;

use std::collections::{BTreeMap, VecDeque};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use arrow::array::RecordBatch;
use weir_kafka::{Consumer, ConsumerConfig, PollStatus, Record};

use self::block::BlockStatus;
use self::file_feed::FileFeed;
use super::decode::{SourceDecoder, DEAD_LETTER_BYTES};
use crate::error::{SourceError, SourceErrorKind};
use crate::metrics::PartitionMetrics;
use crate::source::meta::Position;
use weir_codec::{BlockUncompressor, ContainerCodec, ContainerHeader, Frame, Framing};

/// What a reader has next.
pub(crate) enum Next {
    /// Decoded rows (not deduplicated).
    Batch(RecordBatch),
    /// Nothing now (follow mode); ask again after [`PositionedReader::idle_wait`].
    Idle,
    /// The end of a bounded read, or a stop.
    End,
}

/// A batch handed over the moment it is decoded (see [`PositionedReader::emit_to`]).
pub(crate) struct Decoded {
    /// The rows.
    pub(crate) batch: RecordBatch,
    /// The next position of every partition as of its last row.
    pub(crate) positions: Vec<(String, i64)>,
    /// Its channel (see [`PositionedReader::channel`]).
    pub(crate) channel: usize,
}

/// Takes each batch as it is decoded; false once nobody reads any more.
pub(crate) type Emit = Box<dyn FnMut(Decoded) -> bool + Send>;

/// A reader of one share of a source.
pub(crate) trait PositionedReader: Send {
    /// The next batch, nothing now, or the end. After an error the reader is done.
    fn next(&mut self) -> Result<Next, SourceError>;

    /// The next position of every partition read, covering exactly the batches returned so far
    /// (`file:<path>` -> byte offset, `kafka/<topic>/<partition>` -> offset).
    fn positions(&self) -> Vec<(String, i64)>;

    /// How long to wait after [`Next::Idle`] before asking again.
    fn idle_wait(&self) -> Duration;

    /// The channel of the last batch: what keeps its own event-time order (a Kafka
    /// partition; a file reader is one channel, 0).
    fn channel(&self) -> usize {
        0
    }

    /// The channels that hold the watermark back before their first row (a Kafka partition
    /// may be slow to deliver). A file reader has none: the feed hands blocks out in file
    /// order, so a reader still waiting for its first block holds nothing back.
    fn channels(&self) -> Vec<usize> {
        Vec::new()
    }

    /// Hands the batches decoded inside a read to `emit` at once, in order, rather than
    /// returning them from [`PositionedReader::next`] one by one afterwards; `next` still
    /// returns the rest (the batch an idle poll or the end flushes). A reader that returns
    /// each batch as it decodes it anyway ignores this.
    fn emit_to(&mut self, _emit: Emit) {}

    /// For a reader of files: whether no reader of its scan holds a block whose rows it has
    /// not handed on. Everything read so far has then gone to the query, and blocks read later
    /// come after it in file order (see `Progress::Drained`). `None` for Kafka readers: one
    /// partition's silence says nothing of another's time.
    fn files_drained(&self) -> Option<bool> {
        None
    }
}

/// The checkpoint key prefix of a file's position.
const FILE_PREFIX: &str = "file:";

/// A reader of file blocks: takes whole-frame blocks from a feed (shared with the scan's other
/// readers, or its own) and decodes them in place, without a copy per message.
pub(crate) struct FileReader {
    feed: Arc<FileFeed>,
    decoder: SourceDecoder,
    buf: Vec<u8>,
    file: Arc<str>,
    /// File offset of `buf[origin]`.
    base: u64,
    /// Where the block's frames begin in `buf`.
    origin: usize,
    len: usize,
    at: usize,
    /// Next offset of every file read, as of the last batch returned.
    positions: BTreeMap<Arc<str>, u64>,
    /// A `fail` error held back until the rows decoded before it have been returned.
    failed: Option<SourceError>,
    /// Whether this reader is counted in the feed's readers holding a block.
    holding: bool,
    /// Container framing: the header of the block's file, and that of the file whose schema
    /// the decoder reads now.
    container: Option<Arc<ContainerHeader>>,
    decoding: Option<Arc<ContainerHeader>>,
    /// A file header whose schema the columns cannot be read from, and why.
    unreadable: Option<(Arc<ContainerHeader>, String)>,
    /// Where a compressed container block is uncompressed, and what keeps the codecs' state
    /// from block to block.
    scratch: Vec<u8>,
    uncompressor: BlockUncompressor,
}

impl Drop for FileReader {
    fn drop(&mut self) {
        self.release();
    }
}

impl FileReader {
    /// A reader of `feed`'s blocks.
    pub(crate) fn new(feed: Arc<FileFeed>, decoder: SourceDecoder) -> Self {
        Self {
            feed,
            decoder,
            buf: Vec::new(),
            file: Arc::from(""),
            base: 0,
            origin: 0,
            len: 0,
            at: 0,
            positions: BTreeMap::new(),
            failed: None,
            holding: false,
            container: None,
            decoding: None,
            unreadable: None,
            scratch: Vec::new(),
            uncompressor: BlockUncompressor::default(),
        }
    }

    /// Counts this reader as holding a block until it has handed every row on.
    fn hold_block(&mut self) {
        if !self.holding {
            self.holding = true;
            self.feed.holders().fetch_add(1, Ordering::SeqCst);
        }
    }

    fn release(&mut self) {
        if self.holding {
            self.holding = false;
            self.feed.holders().fetch_sub(1, Ordering::SeqCst);
        }
    }

    /// A reader resuming at `checkpoint`'s positions (its `file:` entries).
    pub(crate) fn resume(
        feed: FileFeed,
        decoder: SourceDecoder,
        checkpoint: &[(String, i64)],
    ) -> Self {
        let starts: Vec<(String, u64)> = checkpoint
            .iter()
            .filter_map(|(k, v)| Some((k.strip_prefix(FILE_PREFIX)?.to_string(), *v as u64)))
            .collect();
        let mut reader = Self::new(Arc::new(feed.with_starts(starts.clone())), decoder);
        reader.positions = starts.into_iter().map(|(k, v)| (Arc::from(k), v)).collect();
        reader
    }

    fn here(&self) -> u64 {
        self.base + (self.at - self.origin) as u64
    }

    /// Records where the current file is, as of what has been decoded.
    fn mark(&mut self) {
        if !self.file.is_empty() {
            let here = self.here();
            self.positions.insert(Arc::clone(&self.file), here);
        }
    }

    /// Returns the rows decoded before a `fail` error, keeping the error for the next call.
    /// The position stays at the bad message, so a commit never records past it.
    fn hold(&mut self, error: SourceError, message_start: u64) -> Result<Next, SourceError> {
        if !self.file.is_empty() {
            self.positions.insert(Arc::clone(&self.file), message_start);
        }
        match self.decoder.flush()? {
            Some(b) => {
                self.failed = Some(error);
                Ok(Next::Batch(b))
            }
            None => Err(error),
        }
    }
}

impl PositionedReader for FileReader {
    fn next(&mut self) -> Result<Next, SourceError> {
        // One clock read per call (a batch), for the metrics' decode time.
        let started = Instant::now();
        let next = self.read_next();
        let stats = &self.decoder.source().stats;
        stats
            .stages
            .reader_ns
            .fetch_add(started.elapsed().as_nanos() as u64, Ordering::Relaxed);
        if let Ok(n) = &next {
            let metrics = &stats.metrics;
            metrics.ready.store(true, Ordering::Relaxed);
            if let (Next::Batch(_), Some(p)) = (n, self.decoder.partition()) {
                p.decode.observe(started.elapsed());
            }
        }
        next
    }

    fn positions(&self) -> Vec<(String, i64)> {
        self.positions
            .iter()
            .map(|(k, v)| (format!("{FILE_PREFIX}{k}"), *v as i64))
            .collect()
    }

    fn idle_wait(&self) -> Duration {
        Duration::from_millis(100)
    }

    fn files_drained(&self) -> Option<bool> {
        Some(self.feed.holders().load(Ordering::SeqCst) == 0)
    }
}

impl FileReader {
    /// Counts what follows to `file`'s partition of the metrics.
    fn count_to(&mut self, file: &str) {
        let partition = self.decoder.source().stats.metrics.file(file);
        self.decoder.set_partition(&partition);
    }

    fn read_next(&mut self) -> Result<Next, SourceError> {
        if let Some(e) = self.failed.take() {
            return Err(e);
        }
        let framing = self.feed.framing();
        if framing == Framing::AvroContainer {
            return self.read_container();
        }
        loop {
            while self.at < self.len {
                let start = self.here();
                match framing.frame(&self.buf[..self.len], self.at, true) {
                    Frame::Message {
                        start: m,
                        end,
                        next,
                    } => {
                        self.at = next;
                        let pos = Position::File {
                            file: &self.file,
                            offset: start as i64,
                        };
                        if let Err(e) = self.decoder.message(&self.buf[m..end], &pos) {
                            return self.hold(e, start);
                        }
                        if self.decoder.full() {
                            self.mark();
                            if let Some(b) = self.decoder.flush()? {
                                return Ok(Next::Batch(b));
                            }
                        }
                    }
                    Frame::Empty { next } => self.at = next,
                    // The feed hands out whole frames only.
                    Frame::Partial { .. } | Frame::Corrupt(_) => {
                        return Err(SourceError::new(
                            &self.decoder.source().name,
                            SourceErrorKind::Thread(format!(
                                "a block of {} was cut inside a frame at byte {start}; this is \
                                 a bug in weir",
                                self.file
                            )),
                        ))
                    }
                }
            }
            if let Some(next) = self.take_block()? {
                return Ok(next);
            }
        }
    }

    /// Takes the feed's next block into the buffer. `Some`: what the read returns instead (the
    /// end, nothing now, the last rows, or the rows before a held error).
    fn take_block(&mut self) -> Result<Option<Next>, SourceError> {
        let status = self
            .feed
            .next_block(&mut self.buf)
            .map_err(|e| SourceError::new(&self.decoder.source().name, e))?;
        match status {
            BlockStatus::Block {
                file,
                offset,
                first,
                len,
                container,
            } => {
                self.hold_block();
                self.mark();
                if !Arc::ptr_eq(&self.file, &file) {
                    self.count_to(&file);
                }
                self.file = file;
                self.base = offset;
                self.origin = first;
                self.len = len;
                self.at = first;
                self.container = container;
                Ok(None)
            }
            BlockStatus::Bad {
                file,
                offset,
                reason,
                bytes,
            } => {
                // The feed moved past the rest of this file; a resumed read sees the bad
                // frame again and applies the policy again.
                self.mark();
                self.count_to(&file);
                self.file = Arc::clone(&file);
                self.base = offset;
                self.origin = 0;
                self.len = 0;
                self.at = 0;
                let pos = Position::File {
                    file: &file,
                    offset: offset as i64,
                };
                match self.decoder.bad_frame(&bytes, &pos, &reason) {
                    Ok(()) => Ok(None),
                    Err(e) => self.hold(e, offset).map(Some),
                }
            }
            BlockStatus::Wait | BlockStatus::End => {
                let end = matches!(status, BlockStatus::End);
                self.base += (self.len - self.origin) as u64;
                self.origin = 0;
                self.len = 0;
                self.at = 0;
                self.mark();
                let stopping = end || self.decoder.source().stop.load(Ordering::SeqCst);
                let flushed = self.decoder.flush()?;
                if flushed.is_none() {
                    // Every row read has been handed on.
                    self.release();
                }
                Ok(Some(match flushed {
                    Some(b) => Next::Batch(b),
                    None if stopping => Next::End,
                    None => Next::Idle,
                }))
            }
        }
    }

    /// Reads Avro container files: each frame is a block of values, decoded with the plan of
    /// its file's schema. A batch ends only after a whole block, so every position a batch
    /// records is a block's start.
    fn read_container(&mut self) -> Result<Next, SourceError> {
        loop {
            while self.at < self.len {
                let Some(header) = self.container.clone() else {
                    return Err(self.bug("a container block came without its file's header"));
                };
                let same = |d: &Arc<ContainerHeader>| {
                    Arc::ptr_eq(d, &header) || d.schema_text == header.schema_text
                };
                let unreadable = match &self.unreadable {
                    Some((h, reason)) if same(h) => Some(reason.clone()),
                    _ => None,
                };
                if unreadable.is_none() && !self.decoding.as_ref().is_some_and(same) {
                    // Another writer's schema is another plan, with buffers of its own: the
                    // rows of the last one go first.
                    if self.decoder.buffered() > 0 {
                        self.mark();
                        if let Some(b) = self.decoder.flush()? {
                            return Ok(Next::Batch(b));
                        }
                    }
                    match self.decoder.use_container(&header) {
                        Ok(()) => self.decoding = Some(Arc::clone(&header)),
                        Err(e) => {
                            self.unreadable = Some((Arc::clone(&header), e.to_string()));
                            continue;
                        }
                    }
                }
                let start = self.here();
                let rows_before = self.decoder.buffered();
                let (data, next, count) = match (
                    Framing::AvroContainer.frame(&self.buf[..self.len], self.at, true),
                    weir_codec::block_head(&self.buf[..self.len], self.at),
                ) {
                    (Frame::Message { start, end, next }, Ok(Some(head))) => {
                        (start..end, next, head.count)
                    }
                    _ => {
                        return Err(self.bug(&format!(
                            "a block of {} was cut inside a container block at byte {start}",
                            self.file
                        )))
                    }
                };
                self.at = next;
                let pos = Position::File {
                    file: &self.file,
                    offset: start as i64,
                };
                let block = &self.buf[data.clone()];
                let kept = &block[..block.len().min(DEAD_LETTER_BYTES)];
                let limit = self.feed.max_message_bytes();
                let result = if let Some(reason) = unreadable {
                    // Every block of a file whose schema does not fit the columns is a bad
                    // message of its own, as a resumed read would find it again.
                    self.decoder.bad_frame(kept, &pos, &reason)
                } else if self.buf.get(data.end..next) != Some(&header.sync[..]) {
                    self.decoder.bad_frame(
                        kept,
                        &pos,
                        "the block's sync marker is not the file header's: the file is corrupt \
                         here",
                    )
                } else if header.codec == ContainerCodec::Null && block.len() as u64 > limit {
                    let reason = format!(
                        "the block holds {} bytes, more than 'max.message.bytes' ({limit})",
                        block.len()
                    );
                    self.decoder.bad_frame(kept, &pos, &reason)
                } else if header.codec == ContainerCodec::Null {
                    self.decoder.values(block, count, &pos)
                } else {
                    let mut scratch = std::mem::take(&mut self.scratch);
                    let result =
                        match self
                            .uncompressor
                            .uncompress(header.codec, block, &mut scratch, limit)
                        {
                            Ok(()) => self.decoder.values(&scratch, count, &pos),
                            Err(reason) => self.decoder.bad_frame(kept, &pos, &reason),
                        };
                    self.scratch = scratch;
                    result
                };
                if let Err(e) = result {
                    return self.hold_block_start(e, start, rows_before);
                }
                if self.decoder.full() {
                    self.mark();
                    if let Some(b) = self.decoder.flush()? {
                        return Ok(Next::Batch(b));
                    }
                }
            }
            if let Some(next) = self.take_block()? {
                return Ok(next);
            }
        }
    }

    /// [`FileReader::hold`] for a container block: the position stays at the block's start, so
    /// the rows it gave before the error are dropped with it (a resumed read decodes them again).
    fn hold_block_start(
        &mut self,
        error: SourceError,
        block_start: u64,
        rows_before: usize,
    ) -> Result<Next, SourceError> {
        if !self.file.is_empty() {
            self.positions.insert(Arc::clone(&self.file), block_start);
        }
        match self.decoder.flush()? {
            Some(b) if rows_before > 0 => {
                self.failed = Some(error);
                Ok(Next::Batch(b.slice(0, rows_before.min(b.num_rows()))))
            }
            _ => Err(error),
        }
    }

    #[cold]
    fn bug(&self, what: &str) -> SourceError {
        SourceError::new(
            &self.decoder.source().name,
            SourceErrorKind::Thread(format!("{what}; this is a bug in weir")),
        )
    }
}

/// A Kafka consumer over a share of a topic's partitions, decoding each record value in place
/// inside the consumer's handler (the value is a slice of the fetch response, never copied).
/// Its batches carry the next offset of each partition as of their last row.
pub(crate) struct KafkaReader {
    consumer: Consumer,
    decoder: SourceDecoder,
    prefix: String,
    bounded: bool,
    /// Next offset by partition id (-1: not read), as of the last record decoded.
    next: Vec<i64>,
    /// As of the last batch returned.
    current: Vec<i64>,
    /// Batches ready, with the positions as of their last row and their partition.
    ready: VecDeque<(RecordBatch, Vec<i64>, usize)>,
    ended: bool,
    failed: Option<SourceError>,
    /// Whether every batch holds one partition's records only (event time is tracked per
    /// partition), and the partition of the rows being decoded.
    split: bool,
    partition: usize,
    /// The partition of the last batch returned.
    channel: usize,
    /// The metrics of each partition read, by partition id, and the one being counted.
    metrics: Vec<Option<Arc<PartitionMetrics>>>,
    counted: usize,
    /// Where batches decoded inside a poll go at once (see [`PositionedReader::emit_to`]): a
    /// fetch response holds up to `partition.max.bytes` for each partition (hundreds of
    /// thousands of quotes), and batches queued until all of it is decoded would leave the
    /// query idle while the reader decodes, and the reader idle while the query catches up.
    emit: Option<Emit>,
    /// `emit` was refused: the reading side stopped.
    closed: bool,
    /// Counted among the source's failing readers (its consumer lost a broker).
    failing: bool,
    /// Ends the read like the source's stop, for this reader only: its partitions were
    /// reassigned (a consumer group's rebalance).
    yield_run: Option<Arc<AtomicBool>>,
}

/// The positions of `next` (offsets by partition id, -1: not read) as checkpoint names.
fn positions_of(prefix: &str, next: &[i64]) -> Vec<(String, i64)> {
    next.iter()
        .enumerate()
        .filter(|(_, o)| **o >= 0)
        .map(|(p, o)| (format!("{prefix}{p}"), *o))
        .collect()
}

/// Hands a batch decoded inside a poll on: to `emit` when set, else to `ready` for
/// [`PositionedReader::next`]. False when `emit` refused it.
fn deliver(
    emit: &mut Option<Emit>,
    ready: &mut VecDeque<(RecordBatch, Vec<i64>, usize)>,
    prefix: &str,
    (batch, next, channel): (RecordBatch, &[i64], usize),
) -> bool {
    match emit {
        Some(emit) => emit(Decoded {
            batch,
            positions: positions_of(prefix, next),
            channel,
        }),
        None => {
            ready.push_back((batch, next.to_vec(), channel));
            true
        }
    }
}

impl KafkaReader {
    /// Connects a consumer for `config` (a share of the partitions, bounded or not), resuming
    /// the partitions `checkpoint` names at their recorded offsets.
    pub(crate) fn open(
        mut config: ConsumerConfig,
        decoder: SourceDecoder,
        checkpoint: &[(String, i64)],
    ) -> Result<Self, SourceError> {
        let prefix = format!("kafka/{}/", config.topic);
        let resume: Vec<(i32, i64)> = checkpoint
            .iter()
            .filter_map(|(k, v)| Some((k.strip_prefix(&prefix)?.parse().ok()?, *v)))
            .collect();
        // The partitions without a recorded position start as 'scan.startup.mode' says.
        config.resume.clone_from(&resume);
        let mut consumer =
            Consumer::connect(&config).map_err(|e| SourceError::new(&decoder.source().name, e))?;
        // Each partition's counters outlive this consumer: a later scan carries them on.
        let mut metrics = Vec::new();
        for p in consumer.partitions() {
            let m = decoder.source().stats.metrics.kafka(p);
            if let Some(k) = &m.kafka {
                consumer.set_partition_stats(p, Arc::clone(k));
            }
            let i = p.max(0) as usize;
            if metrics.len() <= i {
                metrics.resize(i + 1, None);
            }
            metrics[i] = Some(m);
        }
        // Every partition's start is a position from the outset, so a step records where a
        // partition that has not had a record yet resumes (not the start mode again, which
        // for `latest` would skip what arrived while weir was down).
        let mut next = Vec::new();
        for p in consumer.partitions() {
            if let Some(o) = consumer.position(p) {
                set_next(&mut next, p, o);
            }
        }
        for (p, o) in resume {
            set_next(&mut next, p, o);
        }
        Ok(Self {
            consumer,
            decoder,
            prefix,
            bounded: config.bounded,
            current: next.clone(),
            next,
            ready: VecDeque::new(),
            ended: false,
            failed: None,
            split: false,
            partition: 0,
            channel: 0,
            metrics,
            counted: usize::MAX,
            emit: None,
            closed: false,
            failing: false,
            yield_run: None,
        })
    }

    /// Makes the read end (as a stop does: what was decoded is delivered, then `End`) once
    /// `flag` is set.
    pub(crate) fn ending_on(mut self, flag: Arc<AtomicBool>) -> Self {
        self.yield_run = Some(flag);
        self
    }

    /// Makes every batch hold the records of one partition only.
    pub(crate) fn split_by_partition(mut self) -> Self {
        self.split = true;
        self
    }

    fn finish(&mut self) -> Result<(), SourceError> {
        if let Some(b) = self.decoder.flush()? {
            self.ready.push_back((b, self.next.clone(), self.partition));
        }
        self.ended = true;
        Ok(())
    }
}

fn set_next(next: &mut Vec<i64>, partition: i32, offset: i64) {
    let p = partition.max(0) as usize;
    if next.len() <= p {
        next.resize(p + 1, -1);
    }
    next[p] = offset;
}

impl Drop for KafkaReader {
    fn drop(&mut self) {
        if self.failing {
            let metrics = &self.decoder.source().stats.metrics;
            metrics.failing.fetch_sub(1, Ordering::Relaxed);
        }
    }
}

impl PositionedReader for KafkaReader {
    fn next(&mut self) -> Result<Next, SourceError> {
        let next = self.read_next();
        if next.is_ok() {
            let metrics = &self.decoder.source().stats.metrics;
            metrics.ready.store(true, Ordering::Relaxed);
            let failing = self.consumer.is_failing();
            if failing != self.failing {
                self.failing = failing;
                if failing {
                    metrics.failing.fetch_add(1, Ordering::Relaxed);
                } else {
                    metrics.failing.fetch_sub(1, Ordering::Relaxed);
                }
            }
        }
        next
    }

    fn positions(&self) -> Vec<(String, i64)> {
        positions_of(&self.prefix, &self.current)
    }

    fn emit_to(&mut self, emit: Emit) {
        self.emit = Some(emit);
    }

    fn idle_wait(&self) -> Duration {
        // The poll itself waited for records.
        Duration::ZERO
    }

    fn channel(&self) -> usize {
        self.channel
    }

    fn channels(&self) -> Vec<usize> {
        self.consumer
            .partitions()
            .into_iter()
            .map(|p| p.max(0) as usize)
            .collect()
    }
}

impl KafkaReader {
    fn read_next(&mut self) -> Result<Next, SourceError> {
        loop {
            if let Some((b, pos, channel)) = self.ready.pop_front() {
                self.current = pos;
                self.channel = channel;
                return Ok(Next::Batch(b));
            }
            if let Some(e) = self.failed.take() {
                return Err(e);
            }
            if self.closed {
                return Ok(Next::End);
            }
            if self.ended {
                self.current = self.next.clone();
                return Ok(Next::End);
            }
            if !self.bounded
                && (self.decoder.source().stop.load(Ordering::SeqCst)
                    || self
                        .yield_run
                        .as_ref()
                        .is_some_and(|f| f.load(Ordering::SeqCst)))
            {
                self.finish()?;
                continue;
            }
            let Self {
                consumer,
                decoder,
                prefix,
                next,
                ready,
                failed,
                split,
                partition,
                metrics,
                counted,
                emit,
                closed,
                ..
            } = self;
            let status = consumer.poll(Duration::from_millis(200), |rec: &Record<'_>| {
                let p = rec.partition.max(0) as usize;
                if p != *counted {
                    // A new partition's records (a few times per fetch, not per message).
                    if let Some(Some(m)) = metrics.get(p) {
                        decoder.set_partition(m);
                    }
                    *counted = p;
                }
                if *split && p != *partition {
                    match decoder.flush() {
                        Ok(Some(batch)) => {
                            if !deliver(emit, ready, prefix, (batch, next, *partition)) {
                                *closed = true;
                                return Err("the reading side stopped");
                            }
                        }
                        Ok(None) => {}
                        Err(e) => {
                            *failed = Some(e);
                            return Err("the source failed");
                        }
                    }
                    *partition = p;
                }
                if let Err(e) = decoder.record(rec) {
                    // The rows before the bad record go out first, positioned at it.
                    set_next(next, rec.partition, rec.offset);
                    *failed = Some(e);
                    return Err("the source stopped on a bad message");
                }
                set_next(next, rec.partition, rec.offset + 1);
                if decoder.full() {
                    match decoder.flush() {
                        Ok(Some(batch)) => {
                            if !deliver(emit, ready, prefix, (batch, next, *partition)) {
                                *closed = true;
                                return Err("the reading side stopped");
                            }
                        }
                        Ok(None) => {}
                        Err(e) => {
                            *failed = Some(e);
                            return Err("the source failed");
                        }
                    }
                }
                Ok(())
            });
            if self.closed {
                return Ok(Next::End);
            }
            if self.failed.is_some() {
                if let Some(b) = self.decoder.flush()? {
                    self.ready.push_back((b, self.next.clone(), self.partition));
                }
                continue;
            }
            let status = status.map_err(|e| SourceError::new(&self.decoder.source().name, e))?;
            match status {
                PollStatus::Records(_) => {}
                // A quiet topic: hand over what is buffered rather than keep it back.
                PollStatus::Idle => match self.decoder.flush()? {
                    Some(b) => self.ready.push_back((b, self.next.clone(), self.partition)),
                    None => {
                        self.current = self.next.clone();
                        return Ok(Next::Idle);
                    }
                },
                PollStatus::End => self.finish()?,
            }
        }
    }
}
