//! JSON lines, as every part of weir writes them (the `.jsonl` and stdout sinks, dead-letter
//! rows, late rows): weir-codec's JSON encoder, the same text the `json` encoding sends.

use std::io::Write;

use arrow::datatypes::SchemaRef;
use arrow::record_batch::RecordBatch;
use weir_codec::{CodecError, JsonEncoder};

use super::{finished, io, BatchWriter, SinkError, Target};

/// The rows of `batch` as JSON lines, each ending in `\n` (for the few rows of an error report,
/// where an encoder is made for the one batch).
pub(crate) fn json_lines(batch: &RecordBatch) -> Result<Vec<u8>, CodecError> {
    let mut out = Vec::new();
    JsonEncoder::new(batch.schema().fields())?.encode_lines(batch, &mut out)?;
    Ok(out)
}

/// Writes JSON lines to a file or standard output.
pub(super) struct JsonSink {
    encoder: JsonEncoder,
    /// One batch's lines, reused.
    lines: Vec<u8>,
    out: Option<Box<dyn Write + Send>>,
    target: Target,
    streaming: bool,
}

impl JsonSink {
    pub(super) fn new(
        schema: &SchemaRef,
        out: Box<dyn Write + Send>,
        target: Target,
        streaming: bool,
    ) -> Result<Self, SinkError> {
        Ok(Self {
            encoder: JsonEncoder::new(schema.fields()).map_err(SinkError::Encode)?,
            lines: Vec::new(),
            out: Some(out),
            target,
            streaming,
        })
    }
}

impl BatchWriter for JsonSink {
    fn write(&mut self, batch: &RecordBatch) -> Result<(), SinkError> {
        let Some(out) = &mut self.out else {
            return Err(finished(&self.target));
        };
        self.lines.clear();
        self.encoder
            .encode_lines(batch, &mut self.lines)
            .map_err(SinkError::Encode)?;
        out.write_all(&self.lines)
            .map_err(|e| io(&self.target, e))?;
        if self.streaming {
            out.flush().map_err(|e| io(&self.target, e))?;
        }
        Ok(())
    }

    fn finish(&mut self) -> Result<(), SinkError> {
        if let Some(mut out) = self.out.take() {
            out.flush().map_err(|e| io(&self.target, e))?;
        }
        Ok(())
    }
}
