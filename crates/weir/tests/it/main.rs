//! The engine's integration tests, in one binary (each test binary links DataFusion and
//! RocksDB, so fewer binaries mean far less linking): the engine on the file connector, sources
//! with state, the Kafka connector against a real broker, the `weir` program, and the
//! custom-decoder example.

mod avro_files;
mod cli;
mod common;
mod custom_decoder;
mod delta;
mod engine;
mod group;
mod kafka;
mod metrics;
mod modules;
mod object_storage;
mod readme;
mod registry;
mod state;
mod windows;
