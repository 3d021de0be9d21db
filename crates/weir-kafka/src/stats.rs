//! Per-partition statistics a [`Consumer`](crate::Consumer) keeps for monitoring: plain atomics
//! written once per fetch response (never per record), read from any thread (a metrics scrape)
//! without a lock.

use std::sync::atomic::{AtomicI64, AtomicU64, Ordering};
use std::time::Duration;

/// The upper bounds (seconds) of [`Histogram`]'s buckets: 100 µs to 10 s, roughly 1-2.5-5.
pub const DURATION_BUCKETS: [f64; 16] = [
    0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5,
    5.0, 10.0,
];

/// A histogram of durations with fixed buckets ([`DURATION_BUCKETS`]), lock-free: an
/// observation is a few relaxed atomic adds, so it can be taken per batch or per fetch from a
/// hot loop while another thread reads it.
#[derive(Debug, Default)]
pub struct Histogram {
    /// Observations per bucket (not cumulative); the last slot is above the largest bound.
    buckets: [AtomicU64; DURATION_BUCKETS.len() + 1],
    sum_nanos: AtomicU64,
    count: AtomicU64,
}

impl Histogram {
    /// Records one duration.
    pub fn observe(&self, d: Duration) {
        let secs = d.as_secs_f64();
        let i = DURATION_BUCKETS
            .iter()
            .position(|&b| secs <= b)
            .unwrap_or(DURATION_BUCKETS.len());
        self.buckets[i].fetch_add(1, Ordering::Relaxed);
        let nanos = u64::try_from(d.as_nanos()).unwrap_or(u64::MAX);
        self.sum_nanos.fetch_add(nanos, Ordering::Relaxed);
        self.count.fetch_add(1, Ordering::Relaxed);
    }

    /// The observations so far: `(sum in seconds, count, cumulative buckets)`, each bucket as
    /// `(upper bound in seconds, observations at or below it)`, the last bound `f64::MAX`
    /// (+Inf), as the Prometheus exposition wants them.
    pub fn snapshot(&self) -> (f64, u64, Vec<(f64, u64)>) {
        let mut cumulative = 0;
        let mut buckets = Vec::with_capacity(self.buckets.len());
        for (i, b) in self.buckets.iter().enumerate() {
            cumulative += b.load(Ordering::Relaxed);
            let bound = DURATION_BUCKETS.get(i).copied().unwrap_or(f64::MAX);
            buckets.push((bound, cumulative));
        }
        let sum = self.sum_nanos.load(Ordering::Relaxed) as f64 / 1e9;
        // The count is the +Inf bucket, so the two always agree in one snapshot.
        (sum, cumulative, buckets)
    }
}

/// What the consumer knows about one partition, updated once per fetch response. `-1` means
/// not known yet.
#[derive(Debug)]
pub struct PartitionStats {
    /// The next offset to hand to the caller.
    pub position: AtomicI64,
    /// The partition's high watermark (log end offset of committed data) from the last fetch
    /// response.
    pub high_watermark: AtomicI64,
    /// The timestamp (ms since the epoch) of the last record handed over.
    pub last_timestamp_ms: AtomicI64,
    /// Fetch responses that carried this partition.
    pub fetches: AtomicU64,
    /// Transient failures (a dropped connection, a restarting broker, a moved leader) that
    /// interrupted this partition's fetching and were retried after a reconnect.
    pub reconnects: AtomicU64,
    /// From sending a fetch request to its response arriving (includes the broker's wait for
    /// data, at most `fetch_max_wait`).
    pub fetch_latency: Histogram,
    /// Time spent handing one response's records of this partition to the caller:
    /// decompression, CRC checks and the caller's handler (the decoding).
    pub deliver_time: Histogram,
}

impl Default for PartitionStats {
    fn default() -> Self {
        Self {
            position: AtomicI64::new(-1),
            high_watermark: AtomicI64::new(-1),
            last_timestamp_ms: AtomicI64::new(-1),
            fetches: AtomicU64::new(0),
            reconnects: AtomicU64::new(0),
            fetch_latency: Histogram::default(),
            deliver_time: Histogram::default(),
        }
    }
}

impl PartitionStats {
    /// Records behind the log end: high watermark minus position (0 until both are known).
    pub fn lag(&self) -> i64 {
        let hw = self.high_watermark.load(Ordering::Relaxed);
        let pos = self.position.load(Ordering::Relaxed);
        if hw < 0 || pos < 0 {
            0
        } else {
            (hw - pos).max(0)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn histogram_buckets_are_cumulative() {
        let h = Histogram::default();
        h.observe(Duration::from_micros(50));
        h.observe(Duration::from_millis(3));
        h.observe(Duration::from_secs(60));
        let (sum, count, buckets) = h.snapshot();
        assert_eq!(count, 3);
        assert!((sum - 60.00305).abs() < 1e-9, "{sum}");
        assert_eq!(buckets.first(), Some(&(0.0001, 1)));
        assert_eq!(buckets.iter().find(|b| b.0 == 0.005).map(|b| b.1), Some(2));
        assert_eq!(buckets.iter().find(|b| b.0 == 10.0).map(|b| b.1), Some(2));
        assert_eq!(buckets.last(), Some(&(f64::MAX, 3)));
    }

    #[test]
    fn lag_needs_both_offsets() {
        let s = PartitionStats::default();
        assert_eq!(s.lag(), 0);
        s.high_watermark.store(100, Ordering::Relaxed);
        assert_eq!(s.lag(), 0);
        s.position.store(40, Ordering::Relaxed);
        assert_eq!(s.lag(), 60);
        s.position.store(100, Ordering::Relaxed);
        assert_eq!(s.lag(), 0);
    }
}
