//! weir-codec's integration tests, in one binary (one link instead of one per file):
//!
//! - `protobuf`: the protobuf decoder against hand-built wire bytes (`adversarial`), against
//!   prost-reflect's reading of random messages (`differential`: Google's semantics), and the
//!   proto2 and well-known-type features (`features`);
//! - `json`: the JSON decoder;
//! - `avro`: the Avro decoder against fastavro (Python) and against hand-built and mutated bytes;
//! - `fuzz`: a short, deterministic mutation-fuzz run of the harnesses in `fuzz/`, which the
//!   nightly cargo-fuzz targets share.
//!
//! Allocation counting installs a global allocator, so it is a binary of its own:
//! `tests/alloc.rs`.

mod avro;
mod common;
mod fuzz;
mod json;
mod protobuf;
