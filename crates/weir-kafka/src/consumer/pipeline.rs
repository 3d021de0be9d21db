//! The fetch pipeline: one encoded Fetch request per leader broker, patched and sent again as
//! soon as its response arrives; failures retried with backoff after a metadata refresh.
//!
//! A response is handled in two passes ([`Consumer::handle`]): first its errors and the next
//! fetch positions (from the batch headers alone), then, after the next request is on its way,
//! the records, through the delivery loop in `delivery.rs`.

use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

use kafka_protocol::messages::{
    fetch_request::{FetchPartition, FetchTopic},
    ApiKey, BrokerId, FetchRequest, TopicName,
};
use kafka_protocol::protocol::StrBytes;

use super::delivery::{deliver, Delivery, Record};
use super::Consumer;
use crate::cluster::retriable;
use crate::connection::Connection;
use crate::error::{error_name, is_retriable, Error, Result};
use crate::fetch_response::{aborted, parse_fetch, PartitionView};
use crate::record_batch::BatchIter;

/// The fetch request to one leader broker, encoded once, and its connection.
pub(super) struct LeaderFetch {
    pub(super) node: i32,
    pub(super) conn: Connection,
    /// The encoded request frame.
    pub(super) frame: Vec<u8>,
    /// `(partition, byte position of its fetch_offset in frame)`.
    pub(super) slots: Vec<(i32, usize)>,
    pub(super) max_wait_at: usize,
    /// Correlation id of the request in flight.
    pub(super) in_flight: Option<i32>,
    /// The partition set changed (one finished, leadership moved): re-encode before sending.
    pub(super) stale: bool,
    /// When the request in flight was sent (for the fetch latency).
    pub(super) sent_at: Instant,
}

/// A fetch request frame and where its patchable fields are.
struct EncodedFetch {
    frame: Vec<u8>,
    /// `(partition, byte position of its fetch_offset)`.
    slots: Vec<(i32, usize)>,
    max_wait_at: usize,
}

/// Fetch offsets are written as these placeholders (plus the slot index) while encoding, then
/// found in the frame: the request is laid out by `kafka-protocol`, and weir only needs to
/// know where the offsets landed to patch them before each send.
const OFFSET_MARK: i64 = 0x5EED_CAFE_0000_0000;
const WAIT_MARK: i32 = 0x5EED_BEEF;

impl Consumer {
    /// Groups the unfinished partitions by leader and encodes one fetch request per leader,
    /// keeping connections to leaders that did not change.
    pub(super) fn rebuild_fetches(&mut self) -> Result<()> {
        let mut old = std::mem::take(&mut self.fetches);
        let mut nodes: Vec<i32> = self
            .parts
            .iter()
            .filter(|s| s.selected && !s.done)
            .map(|s| s.leader)
            .collect();
        nodes.sort_unstable();
        nodes.dedup();
        for node in nodes {
            if node < 0 {
                // No leader right now: refresh later.
                self.refresh = true;
                continue;
            }
            let parts: Vec<i32> = (0..self.parts.len() as i32)
                .filter(|&p| {
                    let s = &self.parts[p as usize];
                    s.selected && !s.done && s.leader == node
                })
                .collect();
            let EncodedFetch {
                frame,
                slots,
                max_wait_at,
            } = self.encode_fetch(&parts)?;
            let conn = match old
                .iter()
                .position(|f| f.node == node && f.in_flight.is_none())
            {
                Some(i) => old.swap_remove(i).conn,
                None => self.open(node)?,
            };
            self.fetches.push(LeaderFetch {
                node,
                conn,
                frame,
                slots,
                max_wait_at,
                in_flight: None,
                stale: false,
                sent_at: Instant::now(),
            });
        }
        Ok(())
    }

    fn encode_fetch(&self, parts: &[i32]) -> Result<EncodedFetch> {
        let topic = TopicName(StrBytes::from_string(self.cfg.topic.clone()));
        let req = FetchRequest::default()
            .with_replica_id(BrokerId(-1))
            .with_max_wait_ms(WAIT_MARK)
            .with_min_bytes(self.cfg.fetch_min_bytes)
            .with_max_bytes(self.cfg.fetch_max_bytes)
            .with_isolation_level(i8::from(self.read_committed()))
            .with_session_id(0)
            // Epoch -1: a full fetch outside any fetch session (KIP-227), so the broker needs
            // no per-client state and every request carries all its partitions.
            .with_session_epoch(-1)
            .with_topics(vec![FetchTopic::default()
                .with_topic(topic)
                .with_partitions(
                    parts
                        .iter()
                        .enumerate()
                        .map(|(i, &p)| {
                            FetchPartition::default()
                                .with_partition(p)
                                .with_current_leader_epoch(-1)
                                .with_fetch_offset(OFFSET_MARK + i as i64)
                                .with_last_fetched_epoch(-1)
                                .with_log_start_offset(-1)
                                .with_partition_max_bytes(self.cfg.partition_max_bytes)
                        })
                        .collect(),
                )]);
        let frame =
            Connection::encode_frame(ApiKey::Fetch, self.fetch_version, 0, &req).map_err(|e| {
                Error::Protocol {
                    broker: "-".into(),
                    api: "Fetch",
                    reason: format!("cannot encode the request: {e}"),
                }
            })?;
        let mut slots: Vec<(i32, usize)> = parts.iter().map(|&p| (p, usize::MAX)).collect();
        let mut wait_at = usize::MAX;
        for at in 0..frame.len().saturating_sub(3) {
            if at + 8 <= frame.len() {
                let mut w = [0u8; 8];
                w.copy_from_slice(&frame[at..at + 8]);
                let v = i64::from_be_bytes(w);
                if v & !0xffff_ffff == OFFSET_MARK {
                    let i = (v & 0xffff_ffff) as usize;
                    if let Some(s) = slots.get_mut(i) {
                        s.1 = at;
                    }
                }
            }
            if i32::from_be_bytes([frame[at], frame[at + 1], frame[at + 2], frame[at + 3]])
                == WAIT_MARK
            {
                wait_at = at;
            }
        }
        if wait_at == usize::MAX || slots.iter().any(|s| s.1 == usize::MAX) {
            return Err(Error::Protocol {
                broker: "-".into(),
                api: "Fetch",
                reason: "fetch offsets not found in the encoded request".into(),
            });
        }
        Ok(EncodedFetch {
            frame,
            slots,
            max_wait_at: wait_at,
        })
    }

    /// Closes connections with a request in flight (its answer would start past `position`)
    /// and rewinds the fetch positions to what was handed out.
    pub(super) fn abandon_in_flight(&mut self) {
        let before = self.fetches.len();
        self.fetches.retain(|f| f.in_flight.is_none());
        if self.fetches.len() != before {
            // A dropped fetch's partitions need a new request: rebuild on the next poll.
            self.refresh = true;
            self.retry_at.get_or_insert_with(Instant::now);
        }
        for s in &mut self.parts {
            s.fetch_position = s.position;
        }
    }

    /// Records a transient failure: drop what is in flight, back off, refresh metadata.
    pub(super) fn fail(&mut self, e: Error) -> Result<()> {
        let now = Instant::now();
        let since = *self.failing_since.get_or_insert(now);
        log::warn!(
            "kafka {}: {e}; retrying in {:?}",
            self.cfg.topic,
            self.backoff
        );
        self.last_failure = e.to_string();
        self.retries += 1;
        for (s, st) in self.parts.iter().zip(&self.stats) {
            if s.selected && !s.done {
                st.reconnects.fetch_add(1, Ordering::Relaxed);
            }
        }
        if now.duration_since(since) > self.cfg.retry_timeout {
            let (p, s) = self
                .parts
                .iter()
                .enumerate()
                .find(|(_, s)| s.selected && !s.done)
                .map_or((-1, 0), |(p, s)| (p as i32, s.position));
            return Err(Error::RetriesExhausted {
                topic: self.cfg.topic.clone(),
                partition: p,
                offset: s,
                secs: self.cfg.retry_timeout.as_secs(),
                last: self.last_failure.clone(),
            });
        }
        self.abandon_in_flight();
        // A broken socket may be any of them; a restarted broker breaks them all anyway.
        if e.is_transient() {
            self.fetches.clear();
        }
        self.refresh = true;
        self.retry_at = Some(now + self.backoff);
        self.backoff = (self.backoff * 2).min(self.cfg.retry_backoff_max);
        Ok(())
    }

    fn succeeded(&mut self) {
        self.failing_since = None;
        self.backoff = self.cfg.retry_backoff;
    }

    /// Refreshes metadata and rebuilds the fetches once the backoff has passed.
    pub(super) fn recover(&mut self, timeout: Duration) -> Result<bool> {
        if let Some(at) = self.retry_at {
            let now = Instant::now();
            if now < at {
                std::thread::sleep((at - now).min(timeout));
                if Instant::now() < at {
                    return Ok(false);
                }
            }
        }
        let attempt = (|| -> Result<()> {
            let layout = self.load_layout()?;
            if layout.leaders.len() < self.parts.len() {
                return Err(Error::Topic {
                    topic: self.cfg.topic.clone(),
                    reason: format!(
                        "now has {} partitions, had {}",
                        layout.leaders.len(),
                        self.parts.len()
                    ),
                });
            }
            for (p, s) in self.parts.iter_mut().enumerate() {
                s.leader = layout.leaders[p];
            }
            self.layout = Some(layout);
            self.fetches.retain(|f| f.in_flight.is_none());
            self.refresh = false;
            self.rebuild_fetches()
        })();
        match attempt {
            Ok(()) => {
                self.retry_at = None;
                Ok(!self.refresh)
            }
            Err(e) if retriable(&e) => {
                self.fail(e)?;
                Ok(false)
            }
            Err(e) => Err(e),
        }
    }

    /// Patches the fetch positions and the wait into the request and sends it.
    pub(super) fn send(&mut self, i: usize) -> Result<()> {
        let f = &mut self.fetches[i];
        for &(p, at) in &f.slots {
            let pos = self.parts[p as usize].fetch_position;
            f.frame[at..at + 8].copy_from_slice(&pos.to_be_bytes());
        }
        let wait = self.wait.as_millis().min(i32::MAX as u128) as i32;
        f.frame[f.max_wait_at..f.max_wait_at + 4].copy_from_slice(&wait.to_be_bytes());
        f.conn
            .set_read_timeout(self.wait + self.cfg.request_timeout)?;
        let id = f.conn.send_frame(&mut f.frame)?;
        f.in_flight = Some(id);
        f.sent_at = Instant::now();
        Ok(())
    }

    /// Receives the response of fetch `i`, sends the next request, delivers the records.
    pub(super) fn receive<F, E>(&mut self, i: usize, n: &mut usize, handler: &mut F) -> Result<()>
    where
        F: FnMut(&Record<'_>) -> std::result::Result<(), E>,
        E: Into<Box<dyn std::error::Error + Send + Sync>>,
    {
        let Some(id) = self.fetches[i].in_flight else {
            return Ok(());
        };
        let version = self.fetch_version;
        let f = &mut self.fetches[i];
        let body = f.conn.recv_frame("Fetch", id)?;
        f.in_flight = None;
        let latency = f.sent_at.elapsed();
        let mut views = std::mem::take(&mut self.views);
        views.clear();
        let top = parse_fetch(&body, version, &self.cfg.topic, &mut views)
            .map_err(|e| f.conn.malformed("Fetch", e))?;
        for pr in &views {
            if let Some(st) = usize::try_from(pr.partition)
                .ok()
                .and_then(|p| self.stats.get(p))
            {
                st.fetch_latency.observe(latency);
                st.fetches.fetch_add(1, Ordering::Relaxed);
                if pr.error_code == 0 && pr.high_watermark >= 0 {
                    st.high_watermark
                        .store(pr.high_watermark, Ordering::Relaxed);
                }
            }
        }
        let r = self.handle(i, &body, top, &views, n, handler);
        // Handing the vector back keeps its capacity for the next response.
        self.views = views;
        r
    }

    /// Handles one parsed Fetch response: errors first, then the next request, then the records.
    fn handle<F, E>(
        &mut self,
        i: usize,
        body: &[u8],
        top_error: i16,
        views: &[PartitionView],
        n: &mut usize,
        handler: &mut F,
    ) -> Result<()>
    where
        F: FnMut(&Record<'_>) -> std::result::Result<(), E>,
        E: Into<Box<dyn std::error::Error + Send + Sync>>,
    {
        let version = self.fetch_version;
        if top_error != 0 {
            return Err(Error::Broker {
                topic: self.cfg.topic.clone(),
                partition: -1,
                offset: -1,
                api: "Fetch",
                code: top_error,
                name: error_name(top_error),
            });
        }
        // First pass: errors, and the next fetch positions from the batch headers alone.
        let mut clean = true;
        let mut finished = false;
        for pr in views {
            let Some(s) = usize::try_from(pr.partition)
                .ok()
                .and_then(|p| self.parts.get_mut(p))
                .filter(|s| s.selected && !s.done)
            else {
                continue;
            };
            match pr.error_code {
                0 => {}
                1 => {
                    clean = false;
                    let p = pr.partition;
                    let offset = s.position;
                    let to = self.out_of_range(p, offset)?;
                    let s = &mut self.parts[p as usize];
                    s.position = to;
                    s.fetch_position = to;
                    if to >= s.end {
                        s.done = true;
                        finished = true;
                    }
                    continue;
                }
                code if is_retriable(code) => {
                    clean = false;
                    self.refresh = true;
                    log::warn!(
                        "kafka {}/{}: fetch at offset {}: {}; refreshing metadata",
                        self.cfg.topic,
                        pr.partition,
                        s.position,
                        error_name(code)
                    );
                    continue;
                }
                code => {
                    return Err(Error::Broker {
                        topic: self.cfg.topic.clone(),
                        partition: pr.partition,
                        offset: s.position,
                        api: "Fetch",
                        code,
                        name: error_name(code),
                    })
                }
            }
            for b in BatchIter::new(&body[pr.records.clone()]).flatten() {
                s.fetch_position = s.fetch_position.max(b.header.next_offset());
            }
            if s.fetch_position >= s.end {
                finished = true;
            }
        }
        if finished {
            self.fetches[i].stale = true;
        }
        if self.refresh {
            self.retry_at = Some(Instant::now() + self.backoff);
        }
        // Pipelining: the next request goes out before the records are handed over.
        if clean && !finished && !self.refresh {
            self.send(i)?;
        }
        // Second pass: hand the records over.
        let read_committed = self.read_committed();
        let check_crc = self.cfg.check_crc;
        let topic = self.cfg.topic.as_str();
        for pr in views {
            if pr.error_code != 0 || pr.records.is_empty() {
                continue;
            }
            let Some(s) = usize::try_from(pr.partition)
                .ok()
                .and_then(|p| self.parts.get_mut(p))
                .filter(|s| s.selected && !s.done)
            else {
                continue;
            };
            if read_committed {
                self.aborted.reset(aborted(body, version, pr));
            }
            let started = Instant::now();
            let mut last_timestamp = -1;
            let r = deliver(
                pr.partition,
                &mut s.position,
                s.end,
                &body[pr.records.clone()],
                &mut Delivery {
                    topic,
                    decompressor: &mut self.decompressor,
                    aborted: &mut self.aborted,
                    read_committed,
                    check_crc,
                    last_timestamp: &mut last_timestamp,
                },
                n,
                handler,
            );
            if let Some(st) = self.stats.get(pr.partition as usize) {
                st.deliver_time.observe(started.elapsed());
                st.position.store(s.position, Ordering::Relaxed);
                if last_timestamp >= 0 {
                    st.last_timestamp_ms
                        .store(last_timestamp, Ordering::Relaxed);
                }
            }
            if s.position >= s.end {
                s.done = true;
                self.fetches[i].stale = true;
            }
            r?;
        }
        self.succeeded();
        Ok(())
    }
}
