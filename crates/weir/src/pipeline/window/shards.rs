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

#[cfg(test)]
mod tests {
    use super::*;
    use arrow::array::{ArrayRef, AsArray, Int64Array};
    use arrow::datatypes::{DataType, Field, Int64Type, Schema};
    use datafusion::common::ScalarValue;
    use datafusion::logical_expr::function::AccumulatorArgs;
    use datafusion::logical_expr::{
        Accumulator, AggregateUDF, AggregateUDFImpl, Signature, Volatility,
    };
    use datafusion::physical_expr::aggregate::AggregateExprBuilder;
    use datafusion::physical_expr::expressions::col;

    use crate::pipeline::window::aggregate::{GroupOut, PartialWindows};

    /// A sum whose merge panics: what a merge thread meets when an accumulator fails on data
    /// it did not expect.
    #[derive(Debug, PartialEq, Eq, Hash)]
    struct PanicOnMerge {
        signature: Signature,
    }

    impl AggregateUDFImpl for PanicOnMerge {
        fn name(&self) -> &str {
            "panic_on_merge"
        }
        fn signature(&self) -> &Signature {
            &self.signature
        }
        fn return_type(&self, _: &[DataType]) -> Result<DataType> {
            Ok(DataType::Int64)
        }
        fn accumulator(&self, _: AccumulatorArgs) -> Result<Box<dyn Accumulator>> {
            Ok(Box::new(Sum(0)))
        }
    }

    #[derive(Debug)]
    struct Sum(i64);

    impl Accumulator for Sum {
        fn update_batch(&mut self, values: &[ArrayRef]) -> Result<()> {
            if let Some(v) = values.first() {
                self.0 += v.as_primitive::<Int64Type>().iter().flatten().sum::<i64>();
            }
            Ok(())
        }
        fn evaluate(&mut self) -> Result<ScalarValue> {
            Ok(ScalarValue::Int64(Some(self.0)))
        }
        fn size(&self) -> usize {
            size_of::<Self>()
        }
        fn state(&mut self) -> Result<Vec<ScalarValue>> {
            Ok(vec![ScalarValue::Int64(Some(self.0))])
        }
        fn merge_batch(&mut self, _: &[ArrayRef]) -> Result<()> {
            panic!("the merge met a state it cannot take")
        }
    }

    /// `SELECT window_start, window_end, k, f(v) ... GROUP BY window_start, window_end, k`,
    /// and one window of 100 groups as a reader hands it over.
    fn stage_and_rows(udaf: Arc<AggregateUDF>) -> (Arc<AggregateStage>, RecordBatch) {
        let int = |name: &str| Field::new(name, DataType::Int64, false);
        let input = Arc::new(Schema::new(vec![
            int("k"),
            int("window_start"),
            int("window_end"),
            int("v"),
        ]));
        let v = col("v", &input).unwrap();
        let agg = AggregateExprBuilder::new(udaf, vec![Arc::clone(&v)])
            .schema(Arc::clone(&input))
            .alias("s")
            .build()
            .unwrap();
        let output = Arc::new(Schema::new(vec![
            int("window_start"),
            int("window_end"),
            int("k"),
            Field::new("s", DataType::Int64, true),
        ]));
        let stage = AggregateStage::new(
            vec![col("k", &input).unwrap()],
            Arc::new(Schema::new(vec![int("k")])),
            1,
            2,
            vec![GroupOut::Start, GroupOut::End, GroupOut::Key(0)],
            vec![Arc::new(agg)],
            vec![vec![v]],
            vec![None],
            output,
            DataType::Int64,
        )
        .unwrap();
        let column = |v: Vec<i64>| Arc::new(Int64Array::from(v)) as ArrayRef;
        let rows = RecordBatch::try_new(
            input,
            vec![
                column((0..100).collect()),
                column(vec![0; 100]),
                column(vec![10; 100]),
                column(vec![1; 100]),
            ],
        )
        .unwrap();
        (Arc::new(stage), rows)
    }

    /// Two readers' states of one window merged on two threads, then the end of a bounded
    /// input; on a thread of its own, with the answer sent back.
    fn merge_two_readers(udaf: Arc<AggregateUDF>) -> Receiver<Result<Vec<RecordBatch>, String>> {
        let (stage, rows) = stage_and_rows(udaf);
        let (tx, rx) = channel();
        std::thread::spawn(move || {
            let run = || -> Result<Vec<RecordBatch>> {
                let mut windows = ShardedWindows::new(&stage, 2, "q")?;
                let mut out = Vec::new();
                for _ in 0..2 {
                    let mut reader = PartialWindows::new(Arc::clone(&stage));
                    reader.update(&rows)?;
                    for state in reader.take_until(None)? {
                        windows.merge(state.by_shard(2)?, &mut out)?;
                    }
                }
                windows.close_all(&mut out)?;
                Ok(out)
            };
            let _ = tx.send(run().map_err(|e| e.to_string()));
        });
        rx
    }

    #[test]
    fn each_group_is_merged_once_over_the_threads() {
        let sum = datafusion::functions_aggregate::sum::sum_udaf();
        let out = merge_two_readers(sum)
            .recv_timeout(Duration::from_secs(120))
            .expect("no answer")
            .expect("the merge");
        // Each of the 100 groups once, with both readers' rows, on one shard or the other.
        assert_eq!(out.len(), 2, "one batch a shard");
        let mut groups = Vec::new();
        for b in &out {
            let (k, s) = (b.column(2).as_primitive::<Int64Type>(), b.column(3));
            let s = arrow::compute::cast(s, &DataType::Int64).unwrap();
            for (k, s) in k.iter().zip(s.as_primitive::<Int64Type>().iter()) {
                groups.push((k, s));
            }
        }
        groups.sort_unstable();
        let want: Vec<_> = (0..100).map(|k| (Some(k), Some(2))).collect();
        assert_eq!(groups, want);
    }

    #[test]
    fn a_merge_thread_that_panics_fails_the_query_instead_of_hanging_it() {
        let udaf = Arc::new(AggregateUDF::from(PanicOnMerge {
            signature: Signature::exact(vec![DataType::Int64], Volatility::Immutable),
        }));
        let rx = merge_two_readers(udaf);
        // A liveness bound, not a speed one: before, this waited for ever.
        let got = rx
            .recv_timeout(Duration::from_secs(120))
            .expect("the watermark thread waits for a merge thread that panicked");
        let err = got.expect_err("a merge that panicked must fail the query");
        assert!(err.contains("a window merge thread panicked"), "{err}");
    }
}
