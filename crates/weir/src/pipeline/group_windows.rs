//! The open windows of a continuous query over a consumer group's source, kept per partition
//! so that they move with it: each partition has its own event time, watermark and windows,
//! and a window of a partition is emitted when that partition's watermark passes its end.
//!
//! Each step writes, for each partition it moved, the partition's open windows (the same
//! snapshot a single process commits to its state directory: the watermark, the event time and
//! the windows' partial aggregates) to `<state.dir>/<topic>/<partition>/<to>-<writer>.window`,
//! named by the offset the step read the partition to, before the step commits to the sink. A
//! member that takes a partition up reads the file of exactly the offset the sink holds for it.
//!
//! A partition's windows are a function of its records before that offset only: lateness is
//! decided row by row in the partition's order, and its watermark moves with its own event
//! times, never with the clock or with other partitions. So the file any member wrote for an
//! offset is the one to resume from, even one a fenced member wrote and never committed. Files
//! of earlier offsets are deleted once a later one is committed.
//!
//! A window holds the rows of one partition: a `GROUP BY` key in several partitions gives a
//! row for each, so the producer must partition by the grouping key (the README says so).

use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::Instant;

use arrow::array::RecordBatch;
use futures::TryStreamExt as _;
use object_store::path::Path;
use object_store::ObjectStoreExt as _;

use super::group_state::{
    committed_offset, file_offset, hold_only, partition_positions, GroupStateDir,
};
use super::transform::StepTransform;
use super::window::query::{ContinuousQuery, Emit, Merge, Worker};
use super::window::time::NONE;
use crate::error::{SourceError, SourceErrorKind};
use crate::metrics::GroupMetrics;
use crate::source::meta::MetaKind;

/// A partition's share of the query, held while the member reads the partition.
struct Held {
    worker: Worker,
    merge: Merge,
    /// Late rows over every owner of the partition.
    late_rows: u64,
    /// The offset the windows are exact at: the one last committed (or taken up at).
    at: Option<i64>,
    /// Files this member wrote for the partition, by offset, not yet known to be superseded.
    written: Vec<(i64, Path)>,
}

/// What [`GroupWindows::take_up`] found.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum TakenUp {
    /// Every partition's windows are held, at the offset the sink gave.
    Ready,
    /// A partition's windows at the offset the sink gave are gone, and a later offset's are
    /// there: the partition moved on since the sink was read. Read the sink again.
    MovedOn(i32),
}

/// The windows of the partitions a member reads, and where they are kept.
pub(crate) struct GroupWindows {
    dir: GroupStateDir,
    query: Arc<ContinuousQuery>,
    /// The query's columns (and hidden position columns) among those read.
    project: Vec<usize>,
    source: String,
    topic: String,
    /// By partition id.
    held: Vec<Option<Held>>,
    /// The partition and offset of the last [`TakenUp::MovedOn`]: if the sink, read again,
    /// still holds that offset, the later files are a step that never committed.
    moved_on: Option<(i32, i64)>,
    metrics: Arc<GroupMetrics>,
}

impl GroupWindows {
    /// No partition held yet.
    pub(crate) fn new(
        dir: GroupStateDir,
        query: Arc<ContinuousQuery>,
        topic: &str,
        metrics: Arc<GroupMetrics>,
    ) -> Self {
        let columns = query.source.schema.fields().len();
        let mut project = query.read.clone();
        project.extend(columns..columns + query.hidden.len());
        Self {
            dir,
            source: query.source.name.clone(),
            query,
            project,
            topic: topic.to_string(),
            held: Vec::new(),
            moved_on: None,
            metrics,
        }
    }

    /// The metadata columns the query reads after the source's (positions of late rows).
    pub(crate) fn hidden(&self) -> &[MetaKind] {
        &self.query.hidden
    }

    fn fail(&self, what: String, e: impl std::fmt::Display) -> SourceError {
        SourceError::new(
            &self.source,
            SourceErrorKind::Thread(format!(
                "the partitions' windows in '{}': cannot {what}: {e}",
                self.dir.location()
            )),
        )
    }

    fn df(&self, e: datafusion::error::DataFusionError) -> SourceError {
        thread_error(&self.source, e)
    }

    fn file(&self, partition: i32, offset: i64) -> Path {
        self.dir
            .folder(&self.topic, partition)
            .join(format!("{offset:020}-{}.window", self.dir.writer()))
    }

    /// Holds the windows of exactly `partitions`, whose committed offsets the sink gave as
    /// `positions` (`kafka/<topic>/<p>` -> next offset): a partition held already at its
    /// committed offset keeps its windows, any other is restored from the file of that offset
    /// (none when the sink holds no offset for it).
    pub(crate) fn take_up(
        &mut self,
        partitions: &[i32],
        positions: &[(String, i64)],
    ) -> Result<TakenUp, SourceError> {
        let slots = hold_only(&mut self.held, partitions)
            .map_err(|p| self.fail(format!("hold partition {p}"), "a negative partition id"))?;
        for (&p, i) in partitions.iter().zip(slots) {
            let c = committed_offset(positions, &self.topic, p);
            if matches!(&self.held[i], Some(h) if h.at == c) {
                continue;
            }
            self.held[i] = None;
            let mut held = Held {
                worker: Worker::new(&self.query),
                merge: Merge::new(&self.query, 1),
                late_rows: 0,
                at: c,
                written: Vec::new(),
            };
            held.worker.register(i);
            if let Some(c) = c {
                let again = self.moved_on == Some((p, c));
                if !self.restore(p, c, again, &mut held)? {
                    self.moved_on = Some((p, c));
                    return Ok(TakenUp::MovedOn(p));
                }
            }
            self.held[i] = Some(held);
        }
        self.moved_on = None;
        self.count_windows();
        Ok(TakenUp::Ready)
    }

    /// Restores `held` from partition `partition`'s file of offset `committed`, and deletes the
    /// files of earlier offsets. False when that file is missing and a later one is there
    /// (the partition moved on since the sink was read), unless `again`: the sink was read
    /// again and still holds `committed`, so the later files are of a step that never
    /// committed.
    fn restore(
        &self,
        partition: i32,
        committed: i64,
        again: bool,
        held: &mut Held,
    ) -> Result<bool, SourceError> {
        let started = Instant::now();
        let folder = self.dir.folder(&self.topic, partition);
        let store = Arc::clone(self.dir.store());
        let listed = crate::storage::wait_for(async move {
            let listed: Vec<_> = store.list(Some(&folder)).try_collect().await?;
            Ok::<_, object_store::Error>(listed)
        })
        .ok_or_else(|| {
            self.fail(
                "list window files".into(),
                "the storage runtime did not start",
            )
        })?
        .map_err(|e| self.fail(format!("list the window files of partition {partition}"), e))?;
        let files: Vec<(i64, Path)> = listed
            .into_iter()
            .filter_map(|m| Some((window_offset(&m.location)?, m.location)))
            .collect();
        let Some((_, exact)) = files.iter().find(|(o, _)| *o == committed) else {
            if !again && files.iter().any(|(o, _)| *o > committed) {
                return Ok(false);
            }
            if let Some((o, _)) = files
                .iter()
                .filter(|(o, _)| *o < committed)
                .max_by_key(|(o, _)| *o)
            {
                return Err(self.fail(
                    format!("restore the windows of partition {partition} at offset {committed}"),
                    format!(
                        "its file is missing and the latest before it is of offset {o}: the \
                         directory lost files, or the sink's offsets were written by another \
                         pipeline (or reset). Give the query a new 'state.dir' and a new sink \
                         (a new 'app.id', or a new 'group.id' for a kafka sink)"
                    ),
                ));
            }
            tracing::warn!(
                source = %self.source,
                partition,
                offset = committed,
                "the sink holds output of this partition up to the offset, and 'state.dir' holds \
                 none of its windows: they start empty there (windows open before it lose those \
                 rows)"
            );
            return Ok(true);
        };
        let store = Arc::clone(self.dir.store());
        let path = exact.clone();
        let body = crate::storage::wait_for(async move { store.get(&path).await?.bytes().await })
            .ok_or_else(|| {
            self.fail(
                "read a window file".into(),
                "the storage runtime did not start",
            )
        })?;
        let body = match body {
            Ok(b) => b,
            // Deleted since it was listed: a later offset's file is committed now.
            Err(object_store::Error::NotFound { .. }) => return Ok(false),
            Err(e) => return Err(self.fail(format!("read {exact}"), e)),
        };
        let header = held
            .merge
            .restore(&body)
            .map_err(|e| self.fail(format!("read {exact}"), e))?;
        if let Some((channel, _)) = header
            .maxima
            .iter()
            .find(|(c, _)| i32::try_from(*c).ok() != Some(partition))
        {
            return Err(self.fail(
                format!("read {exact}"),
                format!("it holds the event time of partition {channel}, not {partition}"),
            ));
        }
        held.worker.restore(&header.maxima);
        held.late_rows = header.late_rows;
        let took = started.elapsed();
        self.metrics
            .restore_micros
            .fetch_add(took.as_micros() as u64, Ordering::Relaxed);
        self.metrics
            .restored_bytes
            .fetch_add(body.len() as u64, Ordering::Relaxed);
        self.metrics.restores.fetch_add(1, Ordering::Relaxed);
        tracing::info!(
            source = %self.source,
            partition,
            offset = committed,
            windows = header.open_windows,
            watermark = header.watermark,
            bytes = body.len(),
            ms = took.as_millis() as u64,
            "restored the partition's open windows"
        );
        // What earlier owners wrote for earlier offsets is superseded. Best effort: a file left
        // is never read again.
        let stale: Vec<Path> = files
            .into_iter()
            .filter(|(o, _)| *o < committed)
            .map(|(_, p)| p)
            .collect();
        if let Err(e) = self.dir.put_and_delete(Vec::new(), stale) {
            tracing::debug!(source = %self.source, partition, "cannot delete superseded window files: {e}");
        }
        Ok(true)
    }

    /// Forgets every partition's windows (a step was dropped: they are in memory and not in
    /// the sink), so the next take-up restores them all.
    pub(crate) fn forget(&mut self) {
        self.held.clear();
    }

    fn count_windows(&self) {
        let n: usize = self
            .held
            .iter()
            .flatten()
            .map(|h| h.merge.open_windows())
            .sum();
        self.metrics
            .state_windows
            .store(n as i64, Ordering::Relaxed);
    }

    /// Hands a partition's worker output to its merge, moves its watermark, and counts what
    /// was late.
    fn pass(
        &mut self,
        partition: usize,
        emits: Vec<Emit>,
        progress: super::window::query::Progress,
        out: &mut Vec<RecordBatch>,
    ) -> Result<(), SourceError> {
        let Some(Some(h)) = self.held.get_mut(partition) else {
            return Ok(());
        };
        let mut result = Ok(());
        for e in emits {
            result = result.and_then(|()| h.merge.take(e, out));
        }
        result = result.and_then(|()| h.merge.progress(0, progress, out));
        let late = h.worker.take_late() + h.merge.take_late();
        h.late_rows += late;
        result.map_err(|e| self.df(e))?;
        self.query
            .source
            .stats
            .late
            .fetch_add(late, Ordering::Relaxed);
        // The source's watermark gauge: the least over the partitions held.
        let least = self
            .held
            .iter()
            .flatten()
            .map(|h| h.merge.watermark())
            .filter(|w| *w != NONE)
            .min()
            .unwrap_or(NONE);
        self.query
            .source
            .stats
            .metrics
            .watermark
            .store(least, Ordering::Relaxed);
        Ok(())
    }
}

impl StepTransform for GroupWindows {
    fn batch(
        &mut self,
        b: RecordBatch,
        channel: usize,
        out: &mut Vec<RecordBatch>,
    ) -> Result<(), SourceError> {
        let b = b.project(&self.project).map_err(|e| self.df(e.into()))?;
        let mut emits = Vec::new();
        let Some(Some(h)) = self.held.get_mut(channel) else {
            return Err(self.fail(
                format!("aggregate rows of partition {channel}"),
                "the member does not hold it; this is a bug in weir",
            ));
        };
        let floor = h.merge.watermark();
        let progress = h
            .worker
            .batch(b, channel, floor, &mut emits)
            .and_then(|()| h.worker.progress(&mut emits));
        let progress = progress.map_err(|e| self.df(e))?;
        self.pass(channel, emits, progress, out)
    }

    fn idle(&mut self, out: &mut Vec<RecordBatch>) -> Result<(), SourceError> {
        for p in 0..self.held.len() {
            let mut emits = Vec::new();
            let Some(Some(h)) = self.held.get_mut(p) else {
                continue;
            };
            let progress = h.worker.progress(&mut emits).map_err(|e| self.df(e))?;
            self.pass(p, emits, progress, out)?;
        }
        Ok(())
    }

    /// Writes the windows of each partition the step moved, and deletes this member's files
    /// of offsets before the last committed one; returns nothing for the sink's checkpoint.
    fn state(&mut self, positions: &[(String, i64)]) -> Result<Vec<u8>, SourceError> {
        let mut files = Vec::new();
        let mut stale = Vec::new();
        for (p, next) in partition_positions(positions, &self.topic) {
            let path = self.file(p as i32, next);
            let Some(Some(h)) = self.held.get_mut(p) else {
                continue;
            };
            if h.at == Some(next) {
                continue;
            }
            // Every partial window goes to the merge, whose windows are the state.
            let mut emits = Vec::new();
            let mut none = Vec::new();
            let snapshot = h.worker.flush_all(&mut emits).and_then(|()| {
                for e in emits {
                    h.merge.take(e, &mut none)?;
                }
                h.merge.snapshot(h.worker.maxima(), h.late_rows)
            });
            let snapshot = snapshot.map_err(|e| thread_error(&self.source, e))?;
            // The step before this one is committed (else this one would not run): files of
            // offsets before it are superseded.
            if let Some(at) = h.at {
                h.written.retain(|(o, path)| {
                    let keep = *o >= at;
                    if !keep {
                        stale.push(path.clone());
                    }
                    keep
                });
            }
            h.written.push((next, path.clone()));
            h.at = Some(next);
            files.push((path, snapshot));
        }
        let n = files.len();
        self.dir
            .put_and_delete(files, stale)
            .map_err(|e| self.fail(format!("write the step's window files ({n})"), e))?;
        self.count_windows();
        Ok(Vec::new())
    }

    fn end(&mut self, _: bool, _: &mut Vec<RecordBatch>) -> Result<(), SourceError> {
        // A group's member runs until stopped, and a stop keeps the open windows: the last
        // step's files hold them for the partitions' next owner.
        Ok(())
    }
}

/// A query's failure, as the source's.
fn thread_error(source: &str, e: datafusion::error::DataFusionError) -> SourceError {
    SourceError::new(source, SourceErrorKind::Thread(e.to_string()))
}

/// The window file's offset (see [`file_offset`]).
fn window_offset(path: &Path) -> Option<i64> {
    file_offset(path, "window")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn window_file_names() {
        let p = Path::from("state/quotes/3/00000000000000001200-abc-12.window");
        assert_eq!(window_offset(&p), Some(1200));
        assert_eq!(
            window_offset(&Path::from("state/quotes/3/00000000000000001200-abc.keys")),
            None
        );
        assert_eq!(
            window_offset(&Path::from("state/quotes/3/x-y.window")),
            None
        );
    }
}
