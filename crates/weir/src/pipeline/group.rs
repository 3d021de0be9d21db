//! A Kafka source read as a member of a consumer group (`'group.id'`), into a sink that keeps
//! the positions of the partitions it was given: a `delta` table (a `txn` version per
//! partition), or a `kafka` topic written in transactions that also commit the group's offsets
//! (KIP-447).
//!
//! The member heartbeats on a thread of its own ([`Membership`]). The pipeline reads the
//! partitions it was given until the group gives it others: then the read ends as a stop does
//! (the open step committed to the table), the member tells the group what it still owns (so
//! the group may hand the rest to another member), takes up the new partitions at the
//! positions the table holds for them, and reads on.
//!
//! A member the group has moved past (a pause longer than the session timeout, a lost
//! network) may not yet know it. Its commits are fenced per partition. A table commits a step
//! only while every partition in it is, in the table, where this member took it up or last
//! committed it: once the partition's new owner has committed, the old one's step is refused.
//! A Kafka transaction commits only if the group's coordinator accepts its offsets, which carry
//! the member's generation: once the group has moved on, they are refused and the transaction
//! aborted. Either way the step is dropped, so no offset range is written twice.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Condvar, Mutex, MutexGuard};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use weir_dedup::Checkpoint;
use weir_kafka::{GroupConfig, GroupEvent, GroupMember, GroupMetadata};

use super::group_state::{GroupKeys, GroupStateDir};
use super::group_windows::{GroupWindows, TakenUp};
use super::ledger::{GroupLedger, Ledger};
use super::steps::run_assigned;
use super::transform::{Rows, StepTransform};
use super::window::query::ContinuousQuery;
use crate::error::{SourceError, SourceErrorKind};
use crate::metrics::GroupMetrics;
use crate::pipeline::live_source::LiveSource;
use crate::sink::{GroupSink, SinkError, StepSink};
use crate::source::Connector;

/// How often the member's thread looks for work between heartbeats (a heartbeat itself is
/// sent only when due).
const TICK: Duration = Duration::from_millis(100);

/// How long a member whose step was fenced waits for news from the group before it takes its
/// partitions up again.
const FENCED_WAIT: Duration = Duration::from_secs(2);

/// How long a stop waits for the member to leave the group.
const LEAVE_WAIT: Duration = Duration::from_secs(10);

/// What the member's thread and the pipeline share.
#[derive(Default)]
struct Shared {
    state: Mutex<MemberState>,
    changed: Condvar,
}

#[derive(Default)]
struct MemberState {
    /// The newest assignment (partition ids of the topic) the pipeline has not taken up.
    pending: Option<Vec<i32>>,
    /// What the pipeline owns now, having finished with the rest: for the group to hear.
    finished: Option<Vec<i32>>,
    /// Next offsets committed to the table, to commit to the group for lag monitors.
    offsets: Option<Vec<(i32, i64)>>,
    /// The group as the member knows it, after its last heartbeat.
    metadata: Option<GroupMetadata>,
    /// How often the group has fenced the member: a step read under an earlier count must not
    /// commit offsets stamped with what the member became after (a new generation, or none).
    fences: u64,
    /// Why the member's thread stopped.
    failed: Option<weir_kafka::Error>,
    /// The pipeline is done: leave the group.
    leave: bool,
}

/// The member's thread.
struct Membership {
    shared: Arc<Shared>,
    /// Set with a new assignment: the running read ends.
    end_run: Arc<AtomicBool>,
    thread: Option<JoinHandle<()>>,
}

impl Membership {
    /// Starts heartbeating `member` (subscribed to `topic`) on a thread of its own.
    fn start(
        source: &str,
        member: GroupMember,
        topic: String,
        metrics: Arc<GroupMetrics>,
    ) -> Result<Self, SourceError> {
        let shared = Arc::new(Shared::default());
        let end_run = Arc::new(AtomicBool::new(false));
        let (s, e) = (Arc::clone(&shared), Arc::clone(&end_run));
        let name = source.to_string();
        let thread = std::thread::Builder::new()
            .name(format!("weir-group-{source}"))
            .spawn(move || heartbeat(&name, member, &topic, &s, &e, &metrics))
            .map_err(|e| {
                SourceError::new(
                    source,
                    SourceErrorKind::Thread(format!("cannot start its group member: {e}")),
                )
            })?;
        Ok(Self {
            shared,
            end_run,
            thread: Some(thread),
        })
    }

    fn lock(&self) -> MutexGuard<'_, MemberState> {
        self.shared.state.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// The newest assignment not yet taken up, waiting up to `wait` for one; `Err` when the
    /// member's thread has stopped.
    fn take_pending(&self, source: &str, wait: Duration) -> Result<Option<Vec<i32>>, SourceError> {
        let mut st = self.lock();
        if st.pending.is_none() && st.failed.is_none() && !wait.is_zero() {
            // One wait: a wake-up without news is answered with none, and the caller asks again.
            st = self
                .shared
                .changed
                .wait_timeout(st, wait)
                .map(|(g, _)| g)
                .unwrap_or_else(|e| e.into_inner().0);
        }
        if let Some(e) = st.failed.take() {
            return Err(SourceError::new(source, e));
        }
        let pending = st.pending.take();
        if pending.is_some() {
            // Under the lock: a newer assignment sets the flag again after this.
            self.end_run.store(false, Ordering::SeqCst);
        }
        Ok(pending)
    }

    /// Waits up to `wait` for a new assignment (or the thread's end), taking nothing.
    fn wait_for_news(&self, wait: Duration) {
        let st = self.lock();
        if st.pending.is_none() && st.failed.is_none() {
            let _ = self.shared.changed.wait_timeout(st, wait);
        }
    }

    /// The pipeline owns exactly `partitions` now.
    fn finished(&self, partitions: Vec<i32>) {
        self.lock().finished = Some(partitions);
    }

    /// Offsets the table now holds, for the group's committed offsets.
    fn committed(&self, offsets: Vec<(i32, i64)>) {
        self.lock().offsets = Some(offsets);
    }

    /// The group as the member knows it now, and how often it was fenced so far.
    fn metadata(&self) -> (Option<GroupMetadata>, u64) {
        let st = self.lock();
        (st.metadata.clone(), st.fences)
    }

    /// How often the member was fenced so far.
    fn fences(&self) -> u64 {
        self.lock().fences
    }

    /// Leaves the group (the partitions go to the others at once) and waits for the thread,
    /// at most [`LEAVE_WAIT`]: a classic member may be inside a join that waits for the rest of
    /// the group, and a stop should not wait for that (the group then drops the member after
    /// its session timeout).
    fn leave(mut self) {
        self.lock().leave = true;
        if let Some(t) = self.thread.take() {
            let deadline = Instant::now() + LEAVE_WAIT;
            while !t.is_finished() && Instant::now() < deadline {
                std::thread::sleep(Duration::from_millis(20));
            }
            if t.is_finished() {
                let _ = t.join();
            }
        }
    }
}

impl Drop for Membership {
    fn drop(&mut self) {
        // An error path: leave without waiting for the thread (it exits at its next tick).
        self.lock().leave = true;
    }
}

/// The member's thread: heartbeats, hands assignments to the pipeline, tells the group what
/// the pipeline finished, commits offsets for tools, and leaves when asked.
fn heartbeat(
    source: &str,
    mut member: GroupMember,
    topic: &str,
    shared: &Shared,
    end_run: &AtomicBool,
    metrics: &GroupMetrics,
) {
    // A member that never got an answer is misconfigured (or its group cannot be reached):
    // that fails the run. Once in the group, a failing heartbeat is retried; the pipeline
    // reads on meanwhile, and the table's fence keeps a member the group dropped from
    // committing.
    let mut answered = false;
    let mut failing_since: Option<Instant> = None;
    loop {
        let (finished, offsets, leave) = {
            let mut st = shared.state.lock().unwrap_or_else(|e| e.into_inner());
            (st.finished.take(), st.offsets.take(), st.leave)
        };
        if let Some(owned) = finished {
            metrics
                .partitions
                .store(owned.len() as i64, Ordering::Relaxed);
            tracing::info!(source, partitions = ?owned, "reading these partitions of the group's assignment");
            member.owned(owned.into_iter().map(|p| (topic.to_string(), p)).collect());
        }
        if let Some(offsets) = offsets {
            let offsets: Vec<_> = offsets
                .into_iter()
                .map(|(p, o)| ((topic.to_string(), p), o))
                .collect();
            if let Err(e) = member.commit_offsets(&offsets) {
                // For tools only: the table holds the positions weir resumes from.
                tracing::debug!(source, "committing offsets to the group failed: {e}");
            }
        }
        // After the last offsets: lag monitors see where the member stopped.
        if leave {
            if let Err(e) = member.leave() {
                tracing::warn!(source, "leaving the consumer group failed (the group drops this member after its session timeout): {e}");
            }
            return;
        }
        let event = member.poll();
        {
            let mut st = shared.state.lock().unwrap_or_else(|e| e.into_inner());
            if matches!(event, Ok(GroupEvent::Fenced)) {
                st.fences += 1;
            }
            st.metadata = Some(member.metadata());
        }
        metrics
            .epoch
            .store(i64::from(member.epoch()), Ordering::Relaxed);
        metrics
            .rebalances
            .store(member.rebalances(), Ordering::Relaxed);
        let assigned = match event {
            Ok(GroupEvent::Unchanged) => None,
            Ok(GroupEvent::Assigned(given)) => Some(
                given
                    .into_iter()
                    .filter(|(t, _)| t == topic)
                    .map(|(_, p)| p)
                    .collect::<Vec<_>>(),
            ),
            Ok(GroupEvent::Fenced) => {
                tracing::warn!(source, "the group fenced this member (it was silent past the session timeout): it ends its read, its open step is committed only if the sink's fence lets it (no new owner has committed its partitions to the table, or the group still accepts its offsets), and it joins again");
                Some(Vec::new())
            }
            Err(e) if !answered => {
                let mut st = shared.state.lock().unwrap_or_else(|e| e.into_inner());
                st.failed = Some(e);
                shared.changed.notify_all();
                return;
            }
            Err(e) => {
                let since = *failing_since.get_or_insert_with(Instant::now);
                tracing::warn!(
                    source,
                    failing_for_ms = since.elapsed().as_millis() as u64,
                    "the consumer group's heartbeat failed, trying again: {e}"
                );
                std::thread::sleep(Duration::from_secs(1));
                continue;
            }
        };
        answered = true;
        failing_since = None;
        if let Some(partitions) = assigned {
            let mut st = shared.state.lock().unwrap_or_else(|e| e.into_inner());
            st.pending = Some(partitions);
            end_run.store(true, Ordering::SeqCst);
            shared.changed.notify_all();
        }
        std::thread::sleep(TICK);
    }
}

/// Forwards to the sink's steps, stamping each step's offsets with the member's generation,
/// and tells the group each committed step's offsets (where the sink does not).
struct MemberSteps<'a> {
    steps: &'a mut dyn GroupSink,
    membership: &'a Membership,
    group_id: String,
    topic: String,
    prefix: String,
    /// [`Membership::fences`] when this run's partitions were taken up.
    fences: u64,
}

impl StepSink for MemberSteps<'_> {
    fn name(&self) -> &str {
        self.steps.name()
    }

    fn metrics(&self) -> &crate::metrics::SinkMetrics {
        self.steps.metrics()
    }

    fn write(&mut self, step: u64, batch: &arrow::array::RecordBatch) -> Result<(), SinkError> {
        self.steps.write(step, batch)
    }

    fn seal(&mut self, step: u64) -> Result<Vec<String>, SinkError> {
        self.steps.seal(step)
    }

    fn publishes(&self) -> bool {
        self.steps.publishes()
    }

    fn publish(&mut self, checkpoint: &Checkpoint) -> Result<(), SinkError> {
        let offsets: Vec<(i32, i64)> = checkpoint
            .positions
            .iter()
            .filter_map(|(name, next)| {
                Some((name.strip_prefix(&self.prefix)?.parse().ok()?, *next))
            })
            .collect();
        let (member, fences) = self.membership.metadata();
        // Offsets stamped with what the member became after a fence (a classic member has no
        // id and generation -1 then, which Kafka takes as a writer outside the group; a
        // consumer-protocol member rejoins under a new epoch) would not be fenced: the step
        // is refused here instead. Metadata from before the fence is the old member's, which
        // the group's coordinator refuses once it has moved on.
        let member = match member {
            Some(m)
                if self.steps.commits_group_offsets()
                    && (fences != self.fences || m.generation < 0 || m.member_id.is_empty()) =>
            {
                return Err(self.fenced(m.generation));
            }
            Some(m) => m,
            None if self.steps.commits_group_offsets() => return Err(self.fenced(-1)),
            None => GroupMetadata::standalone(&self.group_id),
        };
        let stamped = offsets
            .iter()
            .map(|&(p, o)| ((self.topic.clone(), p), o))
            .collect();
        self.steps.publish_as(checkpoint, stamped, &member)?;
        if !self.steps.commits_group_offsets() {
            self.membership.committed(offsets);
        }
        Ok(())
    }
}

impl MemberSteps<'_> {
    /// The error of a step refused because the group fenced this member since its run began.
    fn fenced(&self, generation: i32) -> SinkError {
        SinkError::Kafka {
            sink: self.steps.name().to_string(),
            source: weir_kafka::Error::OffsetsFenced {
                group_id: self.group_id.clone(),
                generation,
                reason: "the group fenced this member after it took these partitions up".into(),
            },
        }
    }
}

/// How long an OffsetFetch for the time without an owner may wait (on a transaction that holds
/// the offsets; the sink's own read waited for it already).
const UNOWNED_READ_WAIT: Duration = Duration::from_secs(5);

/// Logs and records, for each partition in `taken` (newly taken up), how long it went without
/// an owner: from the last commit of its offsets to the group (each step's, stamped with the
/// committer's clock) to now. Best effort: a failed read is logged, the run goes on.
fn report_unowned(
    source: &str,
    consumer: &weir_kafka::ConsumerConfig,
    group_id: &str,
    topic: &str,
    taken: &[i32],
    metrics: &GroupMetrics,
) {
    // Before the read: about when the member began reading them.
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_millis() as i64);
    let committed = match weir_kafka::committed_offsets_stamped(
        &consumer.brokers,
        &consumer.security,
        group_id,
        topic,
        taken,
        UNOWNED_READ_WAIT,
    ) {
        Ok(c) => c,
        Err(e) => {
            tracing::debug!(
                source,
                "reading when the partitions' offsets were last committed failed: {e}"
            );
            return;
        }
    };
    let mut unowned = metrics.unowned.lock().unwrap_or_else(|e| e.into_inner());
    for c in committed {
        // A stamp after `now` is this member's own first commit (the read waited on it), or a
        // clock ahead of this one: neither says how long the partition waited.
        let Some(at) = c.committed_ms.filter(|&at| at <= now) else {
            continue;
        };
        let secs = now.saturating_sub(at).max(0) as f64 / 1e3;
        unowned.insert(c.partition, secs);
        tracing::info!(
            source,
            partition = c.partition,
            offset = c.offset,
            "the partition went {secs:.1} s without an owner (from its offsets' last commit to this member reading it)"
        );
    }
}

/// Whether `e` is a step of `steps` refused because another member owns one of its partitions
/// now.
fn partition_fenced(e: &SourceError, steps: &dyn GroupSink) -> bool {
    matches!(
        e.kind.as_ref(),
        SourceErrorKind::Sink { source, .. } if steps.is_fenced(source)
    )
}

/// How often in a row a take-up may find a partition's windows moved on before the run fails.
const MOVED_ON_TRIES: u32 = 5;

/// Reads `source` as a member of `group` into the sink `steps` until the source stops, its
/// rows as they are or, given `query`, that continuous query's output (its windows kept per
/// partition); returns the rows written.
pub(crate) fn run(
    source: &Arc<LiveSource>,
    group: &GroupConfig,
    steps: &mut dyn GroupSink,
    query: Option<Arc<ContinuousQuery>>,
) -> Result<u64, SourceError> {
    let Connector::Kafka(settings) = &source.connector else {
        return Err(SourceError::new(
            &source.name,
            SourceErrorKind::Thread(
                "only a Kafka source joins a consumer group; this is a bug in weir".into(),
            ),
        ));
    };
    // One member per source: a second sink would join as a second member and each table
    // would get only its share of the partitions.
    if source.in_group.swap(true, Ordering::SeqCst) {
        return Err(SourceError::new(
            &source.name,
            SourceErrorKind::Option(weir_codec::OptionError::Conflict(format!(
                "the source is already read by a member of consumer group '{}' for another sink; \
                 a source in a group feeds one sink (declare a second source for a second sink)",
                group.group_id
            ))),
        ));
    }
    let _joined = InGroup(source);
    let topic = settings.consumer.topic.clone();
    let prefix = format!("kafka/{topic}/");
    let member = GroupMember::join(
        &settings.consumer.brokers,
        &settings.consumer.security,
        group.clone(),
        std::slice::from_ref(&topic),
    )
    .map_err(|e| SourceError::new(&source.name, e))?;
    tracing::info!(
        source = %source.name,
        group = %group.group_id,
        member = member.member_id(),
        "joined the consumer group"
    );
    let metrics = source.stats.metrics.join_group();
    let dir = match &source.group_state {
        Some(spec) => Some(GroupStateDir::open(
            &source.name,
            &spec.location,
            &spec.options,
            &group.group_id,
            &topic,
            spec.key.as_ref(),
        )?),
        None => None,
    };
    let mut keys = match (&source.group_state, &dir) {
        (Some(spec), Some(dir)) => match &spec.key {
            Some(key) => {
                tracing::info!(
                    source = %source.name,
                    state = %spec.location,
                    key = %key.describe(),
                    "dedup keys are kept per partition and move with it: a key is dropped as a \
                     duplicate only within its partition, so the producer must partition by it \
                     (the Kafka key)"
                );
                Some(GroupKeys::new(
                    dir.clone(),
                    key.clone(),
                    &source.name,
                    &topic,
                    Arc::clone(&metrics),
                ))
            }
            None => None,
        },
        _ => None,
    };
    let mut windows = match (query, &dir) {
        (Some(q), Some(dir)) => {
            tracing::info!(
                source = %source.name,
                state = %dir.location(),
                "the query's windows are kept per partition and move with it: each partition \
                 has its own watermark, and a window holds one partition's rows, so the producer \
                 must partition by the query's GROUP BY key"
            );
            Some(GroupWindows::new(
                dir.clone(),
                q,
                &topic,
                Arc::clone(&metrics),
            ))
        }
        (Some(_), None) => {
            return Err(SourceError::new(
                &source.name,
                SourceErrorKind::Option(weir_codec::OptionError::Missing {
                    key: "state.dir".into(),
                    doc: "a continuous query over a consumer group's source keeps each \
                          partition's open windows there, so that they move with it",
                }),
            ))
        }
        (None, _) => None,
    };
    let membership = Membership::start(&source.name, member, topic.clone(), Arc::clone(&metrics))?;
    let mut current: Vec<i32> = Vec::new();
    // The partitions taken up at the last assignment, so a new one's time without an owner is
    // reported once.
    let mut held: Vec<i32> = Vec::new();
    let mut again = false;
    let mut moved_on = 0u32;
    let mut step = 0u64;
    let mut rows = 0u64;
    while !source.stop.load(Ordering::SeqCst) {
        // Counted before the assignment is taken: a fence after it fails the run's commits.
        let fences = membership.fences();
        match membership.take_pending(&source.name, if again { Duration::ZERO } else { TICK })? {
            Some(given) => current = given,
            None if again => {}
            None => continue,
        }
        again = false;
        let names: Vec<String> = current.iter().map(|p| format!("{prefix}{p}")).collect();
        let positions = if current.is_empty() {
            Vec::new()
        } else {
            steps
                .take_partitions(&group.group_id, &names)
                .map_err(|e| sink_error(source, steps, e))?
        };
        if let Some(keys) = &mut keys {
            // Before the group hears the partitions are taken: their keys are restored first.
            keys.take_up(&current, &positions)?;
        }
        if let Some(w) = &mut windows {
            if let TakenUp::MovedOn(p) = w.take_up(&current, &positions)? {
                // Another member committed the partition after the sink was read: its owner
                // now is not this member, or the table says more at the next read.
                moved_on += 1;
                if moved_on >= MOVED_ON_TRIES {
                    return Err(SourceError::new(
                        &source.name,
                        SourceErrorKind::Thread(format!(
                            "partition {p}'s windows in 'state.dir' moved past the offset the \
                             sink holds for it {MOVED_ON_TRIES} times in a row, each time the \
                             sink was read again: another pipeline writes them, or the sink's \
                             offsets are not this query's; give this query its own 'state.dir'"
                        )),
                    ));
                }
                tracing::warn!(source = %source.name, partition = p, "the partition's windows moved on since its offset was read from the sink; reading it again");
                membership.wait_for_news(FENCED_WAIT);
                again = true;
                continue;
            }
        }
        moved_on = 0;
        membership.finished(current.clone());
        let taken: Vec<i32> = current
            .iter()
            .filter(|p| !held.contains(p))
            .copied()
            .collect();
        held.clone_from(&current);
        metrics
            .unowned
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .retain(|p, _| current.contains(p));
        if !taken.is_empty() {
            // On a thread of its own: reading starts now, not after another round trip.
            let (name, consumer, group_id, topic, metrics) = (
                source.name.clone(),
                settings.consumer.clone(),
                group.group_id.clone(),
                topic.clone(),
                Arc::clone(&metrics),
            );
            std::thread::spawn(move || {
                report_unowned(&name, &consumer, &group_id, &topic, &taken, &metrics);
            });
        }
        if current.is_empty() {
            continue;
        }
        let mut ledger = GroupLedger::new(
            Checkpoint {
                step,
                positions,
                ..Checkpoint::default()
            },
            keys.as_mut(),
        );
        let mut sink = MemberSteps {
            steps: &mut *steps,
            membership: &membership,
            group_id: group.group_id.clone(),
            topic: topic.clone(),
            prefix: prefix.clone(),
            fences,
        };
        // Windows are kept per partition: each batch holds one partition's rows.
        let windows_held = windows.is_some();
        let mut rows_as_they_are = Rows;
        let (transform, hidden): (&mut dyn StepTransform, Vec<_>) = match &mut windows {
            Some(w) => {
                let hidden = w.hidden().to_vec();
                (w, hidden)
            }
            None => (&mut rows_as_they_are, Vec::new()),
        };
        let ran = run_assigned(
            source,
            &mut ledger,
            &mut sink,
            &current,
            &membership.end_run,
            transform,
            &hidden,
            windows_held,
        );
        step = ledger.checkpoint().step;
        drop(ledger);
        match ran {
            Ok(n) => rows += n,
            Err(e) if partition_fenced(&e, steps) => {
                tracing::warn!(source = %source.name, "{e}");
                steps.discard().map_err(|e| sink_error(source, steps, e))?;
                // The dropped step's keys are in memory and not in the sink.
                if let Some(keys) = &mut keys {
                    keys.forget();
                }
                if let Some(w) = &mut windows {
                    w.forget();
                }
                // Most likely the group has moved on and says so at the next heartbeat: give it
                // that long before taking the partitions up again from the table.
                membership.wait_for_news(FENCED_WAIT);
                again = true;
            }
            Err(e) => return Err(e),
        }
    }
    membership.leave();
    Ok(rows)
}

/// Clears the source's membership flag when its run ends, however it ends.
struct InGroup<'a>(&'a LiveSource);

impl Drop for InGroup<'_> {
    fn drop(&mut self) {
        self.0.in_group.store(false, Ordering::SeqCst);
    }
}

fn sink_error(source: &LiveSource, steps: &dyn GroupSink, e: SinkError) -> SourceError {
    SourceError::new(
        &source.name,
        SourceErrorKind::Sink {
            sink: steps.name().to_string(),
            source: Box::new(e),
        },
    )
}
