//! The pipeline: everything between a source's bytes and a sink's committed files.
//!
//! ```text
//! reader (file blocks | Kafka fetches, with positions) -> decode (SourceDecoder, error policy,
//!   metadata columns) -> dedup (StateStore) -> step files -> commit (positions, keys, files)
//! ```
//!
//! - [`reader`]: one positioned reader per connector; there is one Kafka loop.
//! - [`decode`]: the decode stage, shared by every kind of scan.
//! - [`dedup`]: the dedup stage.
//! - [`steps`]: exactly-once output, and the clean-up of what a crash left.
//! - [`group`]: a Kafka source read as a member of a consumer group, into a table sink.
//! - [`group_state`]: the dedup keys of a group's partitions, in key files every member reads.
//! - [`group_windows`]: a continuous query's open windows per partition of a group, in window
//!   files every member reads.
//! - [`ledger`]: where the steps are recorded (the state directory, or a table sink's log).
//! - [`scan`]: the scans DataFusion runs (stateless in parallel, or one reader with state).
//! - [`table`]: a source as a DataFusion table, whose scans are [`scan`]'s.
//! - [`threads`]: putting a reader on a thread of its own.
//! - [`transform`]: what an exactly-once pipeline makes of its rows (as they are, or a query's).
//! - [`window`]: event time, windows and their aggregation, for continuous queries.
//!
//! The engine only wires these together: it never reads a message itself.

pub(crate) mod decode;
pub(crate) mod dedup;
pub(crate) mod group;
pub(crate) mod group_state;
pub(crate) mod group_windows;
pub(crate) mod ledger;
pub(crate) mod live_source;
pub(crate) mod reader;
pub(crate) mod scan;
pub(crate) mod steps;
pub(crate) mod table;
pub(crate) mod threads;
pub(crate) mod transform;
pub(crate) mod window;
