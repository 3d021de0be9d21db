//! JSON lines, as every part of weir writes them (the `.jsonl` and stdout sinks, dead-letter
//! rows, late rows): weir-codec's JSON encoder, the same text the `json` encoding sends.

use arrow::datatypes::SchemaRef;
use arrow::record_batch::RecordBatch;
use weir_codec::{CodecError, JsonEncoder};

use super::encoded_file::EncodeBatch;
use super::SinkError;

/// The rows of `batch` as JSON lines, each ending in `\n` (for the few rows of an error report,
/// where an encoder is made for the one batch).
pub(crate) fn json_lines(batch: &RecordBatch) -> Result<Vec<u8>, CodecError> {
    let mut out = Vec::new();
    JsonEncoder::new(batch.schema().fields())?.encode_lines(batch, &mut out)?;
    Ok(out)
}

/// One thread's encoder of JSON lines for rows of `schema` (see [`super::EncodedFile`]).
pub(super) fn lines_encoder(schema: &SchemaRef) -> Result<EncodeBatch, SinkError> {
    let mut encoder = JsonEncoder::new(schema.fields()).map_err(SinkError::Encode)?;
    Ok(Box::new(move |batch: &RecordBatch, out: &mut Vec<u8>| {
        encoder.encode_lines(batch, out).map_err(SinkError::Encode)
    }))
}
