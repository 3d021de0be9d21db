//! The merge of fixed windows spread over threads by group.
//!
//! One thread merging every reader's windows caps a query's speed on many cores. Here each
//! reader splits a window's partial state by the hash of its group keys, on its own thread
//! ([`PartialState::by_shard`]), and part `i` of every reader's state goes to merge thread `i`,
//! which owns those groups of every window ([`FinalWindows`]). The thread that runs the source's
//! watermark ([`super::query::Merge`]) hands the parts on in the order the readers sent them,
//! so a window's states reach its shards before the progress that closes it; when the watermark
//! passes windows it asks every shard for their rows and, without waiting for them (a shard
//! still merging does not hold the readers back), emits them once every shard has answered,
//! window by window, oldest first, as one merge would (a window's rows then come as one batch
//! a shard).

use std::collections::{BTreeSet, VecDeque};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::mpsc::{channel, sync_channel, Receiver, Sender, SyncSender, TryRecvError};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use arrow::array::RecordBatch;
use datafusion::error::{DataFusionError, Result};

use super::aggregate::{AggregateStage, Bounds, FinalWindows, PartialState};

/// What the watermark thread asks of a shard.
enum Job {
    /// Merge a reader's part of a window.
    Merge(PartialState),
    /// Emit the windows ending at or before this.
    Close(i64),
}

/// What a shard answers a [`Job::Close`]: its rows of the closed windows, oldest first.
type Closed = Result<Vec<(Bounds, RecordBatch)>>;

/// A close the shards have been asked for, with the answers so far.
struct Pending {
    /// Which shards answered.
    answered: Vec<bool>,
    /// Their rows, keyed `(end, start, shard)` for the order of the output.
    rows: Vec<((i64, i64, usize), RecordBatch)>,
}

/// The merged windows of a source, over several threads.
pub(crate) struct ShardedWindows {
    jobs: Vec<SyncSender<Job>>,
    threads: Vec<JoinHandle<()>>,
    replies: Receiver<(usize, Closed)>,
    /// Closes asked for and not yet answered by every shard, oldest first (a shard answers
    /// its closes in order).
    pending: VecDeque<Pending>,
    /// Windows some state went to and that were not emitted yet, as `(end, start)`.
    open: BTreeSet<(i64, i64)>,
    /// Windows ending at or before this have been emitted (or dropped).
    closed_through: i64,
    /// Nanoseconds the shards were busy, summed.
    busy: Arc<AtomicU64>,
}

impl ShardedWindows {
    /// `shards` merge threads, named after `name` (the source).
    pub(crate) fn new(stage: &Arc<AggregateStage>, shards: usize, name: &str) -> Result<Self> {
        let (reply, replies) = channel();
        let busy = Arc::new(AtomicU64::new(0));
        let mut jobs = Vec::with_capacity(shards);
        let mut threads = Vec::with_capacity(shards);
        for i in 0..shards {
            // Bounded, so that a shard behind the readers holds them back rather than memory
            // growing; replies are unbounded, so a shard never waits on the watermark thread.
            let (tx, rx) = sync_channel(16);
            let (stage, reply, busy) = (Arc::clone(stage), reply.clone(), Arc::clone(&busy));
            let thread = std::thread::Builder::new()
                .name(format!("weir-merge-{name}-{i}"))
                .spawn(move || {
                    let windows = FinalWindows::new(stage);
                    // A panic (an accumulator on data it did not expect) is answered as an
                    // error, so the watermark thread never waits for a shard that is gone.
                    let run =
                        std::panic::AssertUnwindSafe(|| shard(i, windows, &rx, &reply, &busy));
                    if std::panic::catch_unwind(run).is_err() {
                        let _ = reply.send((i, Err(failed_shard("panicked"))));
                    }
                })
                .map_err(|e| {
                    DataFusionError::Execution(format!("cannot start a window merge thread: {e}"))
                })?;
            jobs.push(tx);
            threads.push(thread);
        }
        Ok(Self {
            jobs,
            threads,
            replies,
            pending: VecDeque::new(),
            open: BTreeSet::new(),
            closed_through: i64::MIN,
            busy,
        })
    }

    /// Hands a reader's window state, split by shard, to the shards. Returns the rows it held
    /// when its window was already emitted (they are late), as [`FinalWindows::merge`] does.
    /// Pushes the rows of earlier closes every shard has answered since.
    pub(crate) fn merge(
        &mut self,
        parts: Vec<(usize, PartialState)>,
        out: &mut Vec<RecordBatch>,
    ) -> Result<u64> {
        self.answers(false, out)?;
        let Some((_, first)) = parts.first() else {
            return Ok(0);
        };
        let bounds = first.bounds;
        if bounds.1 <= self.closed_through {
            return Ok(parts.iter().map(|(_, p)| p.rows).sum());
        }
        self.open.insert((bounds.1, bounds.0));
        for (shard, part) in parts {
            let tx = self.jobs.get(shard).ok_or_else(|| {
                DataFusionError::Internal(format!("window state for merge shard {shard}"))
            })?;
            if tx.send(Job::Merge(part)).is_err() {
                return Err(self.why_stopped());
            }
        }
        Ok(0)
    }

    /// Closes the windows that end at or before `watermark`: asks the shards for their rows,
    /// and pushes the rows of the closes every shard has answered, oldest first.
    pub(crate) fn close_until(&mut self, watermark: i64, out: &mut Vec<RecordBatch>) -> Result<()> {
        self.closed_through = self.closed_through.max(watermark);
        let keep = self
            .open
            .split_off(&(watermark.saturating_add(1), i64::MIN));
        // No round trip when no shard holds a window this closes.
        if !std::mem::replace(&mut self.open, keep).is_empty() {
            for tx in &self.jobs {
                if tx.send(Job::Close(watermark)).is_err() {
                    return Err(self.why_stopped());
                }
            }
            self.pending.push_back(Pending {
                answered: vec![false; self.jobs.len()],
                rows: Vec::new(),
            });
        }
        self.answers(false, out)
    }

    /// Closes every open window (the end of a bounded input) and pushes the rows of every
    /// close, waiting for the shards.
    pub(crate) fn close_all(&mut self, out: &mut Vec<RecordBatch>) -> Result<()> {
        let before = self.closed_through;
        let last = self.open.last().map_or(before, |(end, _)| *end);
        self.close_until(i64::MAX, out)?;
        self.closed_through = before.max(last);
        self.answers(true, out)
    }

    /// Pushes the rows of the closes asked for so far, waiting for the shards, then forgets
    /// every open window (a stop without state); returns how many there were.
    pub(crate) fn drop_open(&mut self, out: &mut Vec<RecordBatch>) -> Result<usize> {
        self.answers(true, out)?;
        Ok(std::mem::take(&mut self.open).len())
    }

    /// Pushes the rows of the closes every shard has answered so far, without waiting.
    pub(crate) fn answered(&mut self, out: &mut Vec<RecordBatch>) -> Result<()> {
        self.answers(false, out)
    }

    /// Takes the shards' answers (all of them with `wait`, else those already sent) and pushes
    /// the rows of each close every shard has answered, oldest first.
    /// A shard's failure is returned whether or not a close waits for it.
    fn answers(&mut self, wait: bool, out: &mut Vec<RecordBatch>) -> Result<()> {
        loop {
            let (shard, rows) = if wait && !self.pending.is_empty() {
                // Every way a shard stops sends an answer first, so this cannot wait forever.
                self.replies.recv().map_err(|_| failed_shard("stopped"))?
            } else {
                match self.replies.try_recv() {
                    Ok(answer) => answer,
                    Err(TryRecvError::Empty) => break,
                    Err(TryRecvError::Disconnected) => return Err(failed_shard("stopped")),
                }
            };
            let rows = rows?;
            // A shard answers its closes in order: this is its oldest unanswered one.
            let close = self
                .pending
                .iter_mut()
                .find(|p| p.answered.get(shard) == Some(&false))
                .ok_or_else(|| {
                    DataFusionError::Internal(format!("merge shard {shard} answered no close"))
                })?;
            close.answered[shard] = true;
            close
                .rows
                .extend(rows.into_iter().map(|(b, r)| ((b.1, b.0, shard), r)));
            while self
                .pending
                .front()
                .is_some_and(|p| p.answered.iter().all(|&a| a))
            {
                if let Some(mut done) = self.pending.pop_front() {
                    done.rows.sort_unstable_by_key(|(at, _)| *at);
                    out.extend(done.rows.into_iter().map(|(_, r)| r));
                }
            }
        }
        Ok(())
    }
    /// Why a shard no longer takes jobs: the error it answered, when it is there to read.
    fn why_stopped(&self) -> DataFusionError {
        while let Ok((_, answer)) = self.replies.try_recv() {
            if let Err(e) = answer {
                return e;
            }
        }
        failed_shard("stopped")
    }

    /// Windows open now.
    pub(crate) fn open_windows(&self) -> usize {
        self.open.len()
    }

    /// How many merge threads there are.
    pub(crate) fn shards(&self) -> usize {
        self.jobs.len()
    }

    /// The time the shards were busy, summed over them.
    pub(crate) fn busy(&self) -> Duration {
        Duration::from_nanos(self.busy.load(Ordering::Relaxed))
    }
}

impl Drop for ShardedWindows {
    fn drop(&mut self) {
        // Closing the job channels ends the threads.
        self.jobs.clear();
        for t in self.threads.drain(..) {
            let _ = t.join();
        }
    }
}

/// A merge thread that stopped without an error of its own to tell.
fn failed_shard(how: &str) -> DataFusionError {
    DataFusionError::Execution(format!("a window merge thread {how}"))
}

/// One shard's loop: merges its parts of the windows and answers closes. An error is answered
/// at once, and the shard stops.
fn shard(
    i: usize,
    mut windows: FinalWindows,
    jobs: &Receiver<Job>,
    reply: &Sender<(usize, Closed)>,
    busy: &AtomicU64,
) {
    while let Ok(job) = jobs.recv() {
        let t = Instant::now();
        let answer = match job {
            // Nothing comes here late: the watermark thread kept late states back.
            Job::Merge(part) => windows.merge(part).err().map(Err),
            Job::Close(watermark) => Some(windows.close_until(watermark)),
        };
        let ns = u64::try_from(t.elapsed().as_nanos()).unwrap_or(u64::MAX);
        busy.fetch_add(ns, Ordering::Relaxed);
        if let Some(answer) = answer {
            let stop = answer.is_err();
            if reply.send((i, answer)).is_err() || stop {
                return;
            }
        }
    }
}
