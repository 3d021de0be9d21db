//! # weir
//!
//! The engine: SQL sources over weir-codec decoders, DataFusion queries, and sinks. This crate
//! owns the SQL statements weir adds (`CREATE SOURCE`, `CREATE SINK`, `INSERT INTO <sink>`), the
//! file connector, the sinks, the quote generator and the `weir` program. Decoding lives in
//! `weir-codec`; a source only hands it message slices. Dedup state and checkpoints live in
//! `weir-dedup`; `checkpoint` commits a sink's files with them.

mod checkpoint;
pub mod encode;
pub mod engine;
pub mod gen;
pub mod progress;
pub mod sink;
pub mod source;
pub mod sql;

pub use engine::{Engine, EngineError, EngineOptions, ResultOutput, SinkReport, SourceReport};
