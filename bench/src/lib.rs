//! # weir-bench
//!
//! Peer comparison for weir's protobuf decoder. Every contender turns the same encoded
//! messages (a [`Corpus`]) into Arrow [`RecordBatch`]es of [`BATCH_SIZE`] rows:
//!
//! * `a_prost_reflect`: the reflection "before" decoder (reflection per field), `DynamicMessage::decode` then a
//!   by-name field lookup, a `Cow<Value>` match and a downcast `Box<dyn ArrayBuilder>` per field
//!   ([`peers::ReflectDecoder`]).
//! * `b_prost_derive`: the generated-code "after" decoder, a `#[derive(prost::Message)]` struct and
//!   concrete builders written by hand for one message type ([`quote::StocksQuoteNbboDecoder`]).
//! * `c_ptars`: the `ptars` crate, which decodes the wire format straight into its own arrow
//!   (imported here through the C Data Interface, as its README shows) ([`peers::PtarsDecoder`]).
//! * `d_weir`: `weir_codec::ProtoDecoder`, planned at start-up from the runtime schema and the
//!   requested columns ([`peers::WeirDecoder`]).
//!
//! The library holds the inputs and the decoders; `benches/protobuf.rs` (criterion) and
//! `src/bin/report.rs` (a Markdown table with ratios) both use it.

pub mod avro;
pub mod check;
pub mod corpus;
pub mod json;
pub mod peers;
pub mod quote;
pub mod timing;
pub mod wide;

use std::path::{Path, PathBuf};

pub use arrow_array::RecordBatch;
pub use corpus::Corpus;

/// Rows per batch for every contender (weir's default).
pub const BATCH_SIZE: usize = 8192;

/// Errors from any contender.
pub type BoxError = Box<dyn std::error::Error + Send + Sync>;

/// Results with [`BoxError`].
pub type Result<T, E = BoxError> = std::result::Result<T, E>;

/// One decoder in the race.
pub trait Contender {
    /// A short stable name (criterion's function id and the report's row label).
    fn name(&self) -> &str;

    /// Decodes every message of `corpus`, in order, into batches of [`BATCH_SIZE`] rows (the
    /// last one shorter), handing each batch to `sink`.
    fn run(&mut self, corpus: &Corpus, sink: &mut dyn FnMut(RecordBatch)) -> Result<()>;

    /// Decodes `corpus` and drops the batches; returns the number of rows produced.
    fn run_count(&mut self, corpus: &Corpus) -> Result<usize> {
        let mut rows = 0;
        self.run(corpus, &mut |batch| {
            rows += std::hint::black_box(batch).num_rows();
        })?;
        Ok(rows)
    }

    /// Decodes `corpus` and keeps the batches.
    fn run_collect(&mut self, corpus: &Corpus) -> Result<Vec<RecordBatch>> {
        let mut batches = Vec::new();
        self.run(corpus, &mut |batch| batches.push(batch))?;
        Ok(batches)
    }
}

/// The directory holding `wide.proto`.
pub fn proto_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("proto")
}

/// The directory holding `stocks.proto` (the options-quotes workload's schema, in
/// weir-testdata, which weir's own tests use too).
pub fn stocks_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../crates/weir-testdata/src")
}

/// Compiles `file` (found in [`proto_dir`] or [`stocks_dir`]) with protox into an encoded
/// `FileDescriptorSet`, independently of weir's own schema loader.
pub fn descriptor_set(file: &str) -> Result<Vec<u8>> {
    let mut compiler = protox::Compiler::new([proto_dir(), stocks_dir()])?;
    compiler.include_imports(true).include_source_info(false);
    compiler.open_file(file)?;
    Ok(compiler.encode_file_descriptor_set())
}
