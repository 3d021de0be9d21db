//! Event time and windows: the state a continuous query keeps between batches.
//!
//! - [`time`]: a source's watermark (`WATERMARK FOR ts AS ts - delay`), tracked per channel (a
//!   Kafka partition, or a reader of the file connector), idle channels, and late rows.
//! - [`assign`]: `TUMBLE` and `HOP` give each row its windows (`window_start`, `window_end`).
//! - [`ops`]: the stateless steps around an aggregation (filters, projections, joins with a
//!   static table), evaluated with DataFusion's own physical expressions.
//! - [`aggregate`]: windowed aggregation with DataFusion's accumulators: partial state per
//!   reader, merged per window, emitted once when the watermark passes the window's end, and
//!   snapshotted (as Arrow IPC) for exactly-once checkpoints.
//! - [`first_last`]: `first_value`/`last_value` ordered by a 64-bit column, typed, for the
//!   aggregation above.
//! - [`shards`]: the merge of fixed windows spread over threads by the hash of the group keys.
//! - [`session`]: `SESSION` windows per group key, merged as rows bridge them.
//! - [`query`]: a compiled continuous query, and the worker and merge loops that run it.

pub(crate) mod aggregate;
pub(crate) mod assign;
pub(crate) mod first_last;
pub(crate) mod join;
pub(crate) mod ops;
pub(crate) mod query;
pub(crate) mod session;
pub(crate) mod shards;
pub(crate) mod time;

use arrow::datatypes::TimeUnit;

/// The window a table function gives each row, in the event-time column's unit.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum WindowKind {
    /// `TUMBLE(t, col, size [, offset])`: back-to-back windows of `size`.
    Tumble {
        /// The window's length.
        size: i64,
        /// Where windows are aligned (0: on the epoch).
        offset: i64,
    },
    /// `HOP(t, col, slide, size [, offset])`: windows of `size` starting every `slide`.
    Hop {
        /// The distance between window starts.
        slide: i64,
        /// The window's length.
        size: i64,
        /// Where windows are aligned.
        offset: i64,
    },
    /// `SESSION(t, col, gap)`: per group key, rows closer than `gap` share a window.
    Session {
        /// The largest gap inside a session.
        gap: i64,
    },
}

impl WindowKind {
    /// The SQL function name.
    pub(crate) fn name(&self) -> &'static str {
        match self {
            Self::Tumble { .. } => "TUMBLE",
            Self::Hop { .. } => "HOP",
            Self::Session { .. } => "SESSION",
        }
    }
}

/// A duration in `unit`, saturating.
pub(crate) fn in_unit(nanos: i128, unit: TimeUnit) -> i64 {
    let v = match unit {
        TimeUnit::Second => nanos / 1_000_000_000,
        TimeUnit::Millisecond => nanos / 1_000_000,
        TimeUnit::Microsecond => nanos / 1_000,
        TimeUnit::Nanosecond => nanos,
    };
    v.clamp(i64::MIN as i128, i64::MAX as i128) as i64
}
