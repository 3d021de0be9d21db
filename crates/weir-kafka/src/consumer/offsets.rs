//! Where each partition starts and, for a bounded read, ends: ListOffsets at the leaders, the
//! startup mode, and `offset.reset` for positions outside the log.

use std::time::Instant;

use super::{Consumer, OffsetReset, StartupMode};
use crate::cluster::{self, listed_error, retriable, EARLIEST, LATEST};
use crate::error::{error_name, Error, Result};

impl Consumer {
    /// Asks each leader for offsets of `partitions` at `timestamp`.
    fn list(&mut self, partitions: &[i32], timestamp: i64, committed: bool) -> Result<Vec<i64>> {
        let mut out = vec![-1; partitions.len()];
        let mut leaders: Vec<i32> = partitions
            .iter()
            .map(|&p| self.parts[p as usize].leader)
            .collect();
        leaders.sort_unstable();
        leaders.dedup();
        for node in leaders {
            if node < 0 {
                return Err(Error::Broker {
                    topic: self.cfg.topic.clone(),
                    partition: partitions[0],
                    offset: -1,
                    api: "Metadata",
                    code: 5,
                    name: error_name(5),
                });
            }
            let mine: Vec<i32> = partitions
                .iter()
                .copied()
                .filter(|&p| self.parts[p as usize].leader == node)
                .collect();
            // Reuse an idle fetch connection to the node when there is one.
            let idle = self
                .fetches
                .iter_mut()
                .find(|f| f.node == node && f.in_flight.is_none());
            let listed = match idle {
                Some(f) => cluster::list_offsets(
                    &mut f.conn,
                    &self.cfg.topic,
                    &mine,
                    timestamp,
                    committed,
                )?,
                None => {
                    let mut conn = self.open(node)?;
                    cluster::list_offsets(&mut conn, &self.cfg.topic, &mine, timestamp, committed)?
                }
            };
            for o in listed {
                if o.error_code != 0 {
                    return Err(listed_error(&self.cfg.topic, &o));
                }
                if let Some(i) = partitions.iter().position(|&p| p == o.partition) {
                    out[i] = o.offset;
                }
            }
        }
        Ok(out)
    }

    /// Start (and end) offsets at connect; retried while leaders settle.
    pub(super) fn init_offsets(&mut self, selected: &[i32]) -> Result<()> {
        let deadline = Instant::now() + self.cfg.retry_timeout;
        loop {
            match self.try_init_offsets(selected) {
                Ok(()) => return Ok(()),
                Err(e) if retriable(&e) && Instant::now() < deadline => {
                    log::warn!("kafka {}: {e}; retrying", self.cfg.topic);
                    std::thread::sleep(self.cfg.retry_backoff);
                    let layout = self.load_layout()?;
                    for &p in selected {
                        // A partition gone from the metadata has no leader: retried, then the
                        // deadline turns it into an error.
                        self.parts[p as usize].leader =
                            layout.leaders.get(p as usize).copied().unwrap_or(-1);
                    }
                    self.layout = Some(layout);
                }
                Err(e) => return Err(e),
            }
        }
    }

    fn try_init_offsets(&mut self, selected: &[i32]) -> Result<()> {
        let starts = self.list(selected, EARLIEST, false)?;
        let hws = self.list(selected, LATEST, false)?;
        let ends = if self.read_committed() {
            self.list(selected, LATEST, true)?
        } else {
            hws.clone()
        };
        let ts = match self.cfg.startup {
            StartupMode::Timestamp(t) => Some(self.list(selected, t, false)?),
            _ => None,
        };
        for (i, &p) in selected.iter().enumerate() {
            let resumed = self
                .cfg
                .resume
                .iter()
                .find(|(q, _)| *q == p)
                .map(|&(_, o)| o);
            let mut pos = match (resumed, &self.cfg.startup) {
                (Some(o), _) => o,
                (None, startup) => match startup {
                    StartupMode::Earliest => starts[i],
                    StartupMode::Latest => ends[i],
                    StartupMode::Offset(o) => *o,
                    StartupMode::Offsets(list) => list
                        .iter()
                        .find(|(q, _)| *q == p)
                        .map_or(starts[i], |&(_, o)| o),
                    // No record at or after the timestamp: start at the end.
                    StartupMode::Timestamp(_) => match ts.as_ref().map(|t| t[i]) {
                        Some(o) if o >= 0 => o,
                        _ => ends[i],
                    },
                },
            };
            if pos < starts[i] || pos > hws[i] {
                pos = self.reset_offset(p, pos, starts[i], hws[i])?;
            }
            let s = &mut self.parts[p as usize];
            s.position = pos;
            s.fetch_position = pos;
            if self.cfg.bounded {
                s.end = ends[i];
                s.done = pos >= s.end;
            }
        }
        Ok(())
    }

    /// Applies `offset.reset` to an out-of-range position.
    fn reset_offset(&self, p: i32, offset: i64, log_start: i64, log_end: i64) -> Result<i64> {
        let to = match self.cfg.offset_reset {
            OffsetReset::Fail => {
                return Err(Error::OffsetOutOfRange {
                    topic: self.cfg.topic.clone(),
                    partition: p,
                    offset,
                    log_start,
                    log_end,
                })
            }
            OffsetReset::Earliest => log_start,
            OffsetReset::Latest => log_end,
        };
        log::warn!(
            "kafka {}/{p}: offset {offset} is out of range (log is {log_start}..{log_end}); \
             'offset.reset' moves it to {to}",
            self.cfg.topic
        );
        Ok(to)
    }

    /// OFFSET_OUT_OF_RANGE from a fetch: look the log bounds up and apply `offset.reset`.
    pub(super) fn out_of_range(&mut self, p: i32, offset: i64) -> Result<i64> {
        let start = self.list(&[p], EARLIEST, false)?[0];
        let end = self.list(&[p], LATEST, false)?[0];
        if offset >= start && offset <= end {
            // The log moved under us (a restart, a truncation) but the offset is valid now.
            return Ok(offset);
        }
        self.reset_offset(p, offset, start, end)
    }
}
