//! The built-in `json` encoder: one JSON object per row (weir's JSON-lines writer, whose lines
//! never contain a raw newline, split into messages).

use arrow::record_batch::RecordBatch;
use weir_codec::{CodecError, Encoder, EncoderFactory, EncoderRequest};

use crate::sink::json_writer;

/// Builds [`JsonEncoder`]s.
#[derive(Debug, Default, Clone, Copy)]
pub(crate) struct JsonEncoderFactory;

impl EncoderFactory for JsonEncoderFactory {
    fn create_encoder(
        &self,
        _request: &EncoderRequest<'_>,
    ) -> Result<Box<dyn Encoder>, CodecError> {
        Ok(Box::new(JsonEncoder {
            lines: Vec::with_capacity(1 << 16),
        }))
    }
}

/// Encodes each row as a JSON object (nulls omitted, infinities and NaN as protobuf's JSON
/// mapping writes them).
pub(crate) struct JsonEncoder {
    lines: Vec<u8>,
}

impl Encoder for JsonEncoder {
    fn encode_batch(
        &mut self,
        batch: &RecordBatch,
        out: &mut Vec<u8>,
        ends: &mut Vec<usize>,
    ) -> Result<(), CodecError> {
        self.lines.clear();
        {
            let mut w = json_writer(&mut self.lines);
            w.write(batch)
                .and_then(|_| w.finish())
                .map_err(|e| CodecError::Other(format!("cannot write JSON: {e}")))?;
        }
        let mut start = 0;
        for i in memchr::memchr_iter(b'\n', &self.lines) {
            out.extend_from_slice(&self.lines[start..i]);
            ends.push(out.len());
            start = i + 1;
        }
        if ends.len() < batch.num_rows() {
            return Err(CodecError::Other(format!(
                "arrow-json wrote {} lines for {} rows",
                ends.len(),
                batch.num_rows()
            )));
        }
        Ok(())
    }
}
