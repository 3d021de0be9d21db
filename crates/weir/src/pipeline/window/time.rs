//! Event time per channel. A channel is what keeps its own order: a Kafka partition, or one
//! reader of the file connector (which reads its blocks in file order). Each channel's watermark
//! is the largest event time it has delivered minus the source's delay; a reader's watermark is
//! the smallest over its channels that are not idle, and the source's the smallest over its
//! readers (`super::query`).
//!
//! A row is late when its event time is behind its channel's watermark as of the row before it,
//! or behind the watermark already published for the whole source (a channel that was idle and
//! comes back). Deciding it row by row, in the channel's own order, makes lateness depend only
//! on the data, never on how rows were cut into batches or on thread timing.

use std::time::{Duration, Instant};

use arrow::array::{Array, ArrayRef, AsArray, BooleanArray};
use arrow::buffer::BooleanBuffer;
use arrow::datatypes::Int64Type;

/// No event time yet.
pub(crate) const NONE: i64 = i64::MIN;

#[derive(Debug, Clone)]
struct Channel {
    /// Largest event time delivered, or [`NONE`].
    max: i64,
    /// When it last delivered a row.
    last_data: Instant,
}

/// The event-time state of the channels one reader owns.
#[derive(Debug, Clone)]
pub(crate) struct EventTime {
    delay: i64,
    idle_timeout: Duration,
    channels: Vec<Option<Channel>>,
}

/// What [`EventTime::observe`] found in a batch.
pub(crate) struct Observed {
    /// The rows to keep (`None`: all of them).
    pub(crate) keep: Option<BooleanArray>,
    /// Rows dropped as late (or without an event time).
    pub(crate) late: usize,
}

impl EventTime {
    /// No channels yet.
    pub(crate) fn new(delay: i64, idle_timeout: Duration) -> Self {
        Self {
            delay,
            idle_timeout,
            channels: Vec::new(),
        }
    }

    /// Makes `channel` known before its first row, so that it holds the watermark back until it
    /// delivers data or goes idle.
    pub(crate) fn register(&mut self, channel: usize) {
        if self.channels.len() <= channel {
            self.channels.resize(channel + 1, None);
        }
        if self.channels[channel].is_none() {
            self.channels[channel] = Some(Channel {
                max: NONE,
                last_data: Instant::now(),
            });
        }
    }

    /// Takes a batch's event times from `channel` (`times` is an Int64 view of the column):
    /// marks the late rows, and moves the channel's largest time. `floor` is the watermark
    /// already published for the source.
    pub(crate) fn observe(&mut self, channel: usize, times: &ArrayRef, floor: i64) -> Observed {
        self.register(channel);
        let delay = self.delay;
        let Some(ch) = self.channels[channel].as_mut() else {
            return Observed {
                keep: None,
                late: 0,
            };
        };
        let values = times.as_primitive::<Int64Type>();
        let n = values.len();
        if n == 0 {
            return Observed {
                keep: None,
                late: 0,
            };
        }
        ch.last_data = Instant::now();
        let mut max = ch.max;
        let mut late = 0usize;
        let mut keep: Option<Vec<bool>> = None;
        let nulls = values.nulls().cloned();
        for (i, &t) in values.values().iter().enumerate() {
            let valid = nulls.as_ref().is_none_or(|nb| nb.is_valid(i));
            let behind = max.saturating_sub(delay).max(floor);
            if !valid || t < behind {
                late += 1;
                keep.get_or_insert_with(|| vec![true; n])[i] = false;
            } else if t > max {
                max = t;
            }
        }
        ch.max = max;
        Observed {
            keep: keep.map(|k| BooleanArray::new(BooleanBuffer::from(k), None)),
            late,
        }
    }

    /// The reader's watermark: the smallest over its channels that delivered data within the
    /// idle timeout (or never delivered and are not idle yet). `None` when every channel is
    /// idle: it then holds nothing back.
    pub(crate) fn watermark(&self, now: Instant) -> Option<i64> {
        self.channels
            .iter()
            .flatten()
            .filter(|c| now.duration_since(c.last_data) < self.idle_timeout)
            .map(|c| c.max.saturating_sub(self.delay))
            .min()
    }

    /// The watermark of everything the reader has delivered, idle channels included: the
    /// largest time over its channels less the delay. `None` before any data.
    pub(crate) fn reached(&self) -> Option<i64> {
        self.channels
            .iter()
            .flatten()
            .filter(|c| c.max != NONE)
            .map(|c| c.max.saturating_sub(self.delay))
            .max()
    }

    /// Every channel's largest time (for a checkpoint).
    pub(crate) fn maxima(&self) -> Vec<(usize, i64)> {
        self.channels
            .iter()
            .enumerate()
            .filter_map(|(i, c)| Some((i, c.as_ref()?.max)))
            .collect()
    }

    /// Restores the largest times of a checkpoint.
    pub(crate) fn restore(&mut self, maxima: &[(usize, i64)]) {
        for &(channel, max) in maxima {
            self.register(channel);
            if let Some(c) = self.channels[channel].as_mut() {
                c.max = c.max.max(max);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use arrow::array::Int64Array;
    use std::sync::Arc;

    fn times(v: &[Option<i64>]) -> ArrayRef {
        Arc::new(Int64Array::from(v.to_vec()))
    }

    #[test]
    fn lateness_is_decided_row_by_row_in_channel_order() {
        let mut t = EventTime::new(5, Duration::from_secs(30));
        // 10 raises the max; 6 is within the delay (10 - 5 = 5); 4 is late; 20 raises; 14 is
        // late (20 - 5 = 15); a null has no event time.
        let o = t.observe(
            0,
            &times(&[Some(10), Some(6), Some(4), Some(20), Some(14), None]),
            NONE,
        );
        assert_eq!(o.late, 3);
        let keep: Vec<bool> = o.keep.unwrap().iter().map(|b| b.unwrap()).collect();
        assert_eq!(keep, [true, true, false, true, false, false]);
        // The same rows cut into other batches give the same answer.
        let mut u = EventTime::new(5, Duration::from_secs(30));
        let a = u.observe(0, &times(&[Some(10), Some(6)]), NONE);
        let b = u.observe(0, &times(&[Some(4), Some(20), Some(14), None]), NONE);
        assert_eq!(a.late + b.late, 3);
        assert_eq!(u.watermark(Instant::now()), Some(15));
    }

    #[test]
    fn the_watermark_is_the_smallest_over_active_channels() {
        let mut t = EventTime::new(0, Duration::from_millis(50));
        t.register(1);
        t.observe(0, &times(&[Some(100)]), NONE);
        // Channel 1 has delivered nothing and is not idle yet: it holds everything back.
        assert_eq!(t.watermark(Instant::now()), Some(NONE));
        std::thread::sleep(Duration::from_millis(60));
        // Both idle now: nothing is held back, and nothing moves the watermark.
        assert_eq!(t.watermark(Instant::now()), None);
        t.observe(0, &times(&[Some(120)]), NONE);
        assert_eq!(t.watermark(Instant::now()), Some(120));
        // A row behind the published floor is late even if its channel has not passed it.
        let o = t.observe(1, &times(&[Some(50), Some(130)]), 100);
        assert_eq!(o.late, 1);
    }

    #[test]
    fn what_a_reader_reached_counts_idle_channels_too() {
        let mut t = EventTime::new(5, Duration::from_millis(1));
        t.register(1);
        assert_eq!(t.reached(), None, "no data yet");
        t.observe(0, &times(&[Some(100)]), NONE);
        t.observe(1, &times(&[Some(40)]), NONE);
        std::thread::sleep(Duration::from_millis(5));
        assert_eq!(t.watermark(Instant::now()), None, "both idle");
        assert_eq!(t.reached(), Some(95));
    }
}
