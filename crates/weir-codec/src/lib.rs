//! # weir-codec
//!
//! Decoders that turn message bytes into Apache Arrow [`RecordBatch`]es. This crate owns the
//! [`Decoder`] trait, the schema loading ([`ProtoSchema`]) and the protobuf decoder
//! ([`ProtoDecoder`]). It does no I/O beyond reading schema files: sources hand it message slices.
//!
//! The protobuf decoder is compiled at start-up from a runtime schema (a `.proto` file compiled
//! with `protox`, or a `FileDescriptorSet`) and the columns the caller asks for. Every question
//! about the schema is answered once, when the decode plan is built; the per-message loop only
//! reads a tag, indexes a table by field number and appends to a typed column buffer.
//! See [`ProtoDecoder`] for the type mapping and the presence rules.
//!
//! The JSON decoder ([`JsonDecoder`]) takes the same column declarations and follows the same
//! error contract: one pass from bytes to typed columns, only the requested keys converted, every
//! byte validated. See [`JsonDecoder`] for its type mapping and rules.
//!
//! The Avro decoder ([`AvroDecoder`]) compiles one plan per writer schema ([`AvroSchema`]) onto
//! the declared columns and reads binary Avro with it, skipping the fields no column reads.

mod avro;
mod columns;
mod error;
mod factory;
pub mod framing;
mod json;
mod options;
mod protobuf;
pub mod registry;
mod schema;
mod strings;
mod write;

pub use arrow_array::RecordBatch;
pub use arrow_schema::{DataType, Field, Schema, SchemaRef, TimeUnit};
pub use avro::container::{
    write_container_block, write_container_header, BlockUncompressor, ContainerCodec,
    ContainerError, ContainerHeader, CONTAINER_MAGIC,
    MAX_HEADER_BYTES as MAX_CONTAINER_HEADER_BYTES,
};
pub use avro::{
    avro_default_columns, AvroDecoder, AvroDecoderOptions, AvroFactory, AvroFraming, AvroPlan,
    AvroPlanSource, AvroSchema, AvroSchemaError, FramedAvroDecoder, AVRO_OPTIONS,
};
pub use error::{CodecError, DecodeError, DecodeErrorKind, PlanError, SchemaError, SchemaIdError};
pub use factory::{
    parse_time_unit, project_batches, strip_confluent, DecoderFactory, DecoderRequest,
    EncoderFactory, EncoderRequest, JsonFactory, PreparedDecoder, ProtobufFactory, RawFactory,
    JSON_OPTIONS, PROTOBUF_OPTIONS, RAW_ENCODER_OPTIONS,
};
pub use framing::{block_head, BlockHead, Frame, FrameError, Framing};
pub use json::{EpochUnit, JsonDecoder, JsonDecoderOptions, JsonEncoder, JsonMismatch};
pub use options::{
    markdown_table, parse_bytes, parse_duration, resolve_references, unknown_keys, OptionError,
    OptionKind, OptionSpec, Options,
};
pub use protobuf::{default_columns, ColumnSpec, ProtoDecoder, ProtoDecoderOptions, ProtoEncoder};
pub use schema::{ProtoSchema, SourceText};

/// A batch of `rows` rows from columns a decoder built for `schema` (a zero-column schema still
/// carries its row count). The decoders build columns to match their own schema, so a mismatch
/// is a bug in weir-codec, not bad input.
pub(crate) fn batch_of(
    schema: &SchemaRef,
    columns: Vec<arrow_array::ArrayRef>,
    rows: usize,
) -> RecordBatch {
    let options = arrow_array::RecordBatchOptions::new().with_row_count(Some(rows));
    match RecordBatch::try_new_with_options(std::sync::Arc::clone(schema), columns, &options) {
        Ok(b) => b,
        Err(e) => panic!("weir-codec built an inconsistent batch (a bug in weir): {e}"),
    }
}

/// Rows per batch when the caller does not choose.
pub const DEFAULT_BATCH_SIZE: usize = 8192;

/// Turns rows back into message bytes (for sinks that write messages). Works a batch at a time
/// so an encoder can use columnar code; one message per row.
pub trait Encoder: Send {
    /// Appends one message per row of `batch` to `out`, and the end offset of each message in
    /// `out` to `ends` (so row `i` is `out[ends[i - 1]..ends[i]]`, starting from `out`'s length
    /// before the call). A row that cannot be encoded is a [`CodecError::Row`] naming it (the
    /// first such row the encoder finds, not necessarily the first in the batch); `out` and
    /// `ends` then hold nothing usable of this call.
    fn encode_batch(
        &mut self,
        batch: &RecordBatch,
        out: &mut Vec<u8>,
        ends: &mut Vec<usize>,
    ) -> Result<(), CodecError>;
}

/// Turns one message at a time into rows of Arrow columns.
///
/// A decoder buffers rows until the caller takes them with [`Decoder::flush`] (on demand) or
/// [`Decoder::take_full_batch`] (once `batch_size` rows are buffered). A message that fails to
/// decode leaves no trace: its partial row is rolled back and the rows before it stay intact.
pub trait Decoder: Send {
    /// The Arrow schema of the batches this decoder produces.
    fn schema(&self) -> SchemaRef;

    /// Decodes one message and appends it as one row.
    fn decode(&mut self, message: &[u8]) -> Result<(), DecodeError>;

    /// Decodes the value at the front of `data`, where values follow one another with no
    /// framing (an Avro container block), appends it as one row, and returns the bytes it took.
    /// Only a self-delimiting encoding can; the default says so.
    fn decode_prefix(&mut self, data: &[u8]) -> Result<usize, DecodeError> {
        let _ = data;
        Err(DecodeError::new(
            0,
            DecodeErrorKind::Other(
                "this encoding cannot split values written back to back; only 'avro' reads \
                 container files"
                    .into(),
            ),
        ))
    }

    /// Rows decoded and not yet taken.
    fn buffered_rows(&self) -> usize;

    /// The number of rows at which [`Decoder::take_full_batch`] returns a batch.
    fn batch_size(&self) -> usize;

    /// Takes every buffered row as one batch; `None` when nothing is buffered.
    fn flush(&mut self) -> Option<RecordBatch>;

    /// Takes a batch once `batch_size` rows are buffered; `None` before that.
    fn take_full_batch(&mut self) -> Option<RecordBatch> {
        if self.buffered_rows() >= self.batch_size() {
            self.flush()
        } else {
            None
        }
    }
}
