//! JSON lines as weir writes them: arrow-json's writer, except that floating-point values that
//! JSON numbers cannot hold are written as protobuf's JSON mapping writes them, the strings
//! `"Infinity"`, `"-Infinity"` and `"NaN"`, rather than `null` (which would lose them).

use std::io::Write;
use std::sync::Arc;

use arrow::array::{Array, AsArray};
use arrow::datatypes::{DataType, FieldRef, Float32Type, Float64Type};
use arrow::error::ArrowError;
use arrow::json::writer::{
    Encoder, EncoderFactory, EncoderOptions, LineDelimited, NullableEncoder, WriterBuilder,
};
use arrow::json::Writer;

/// A JSON-lines writer that keeps infinities and NaN.
pub(crate) fn json_writer<W: Write>(out: W) -> Writer<W, LineDelimited> {
    WriterBuilder::new()
        .with_encoder_factory(Arc::new(FloatsAsProtobufJson))
        .build::<W, LineDelimited>(out)
}

/// Supplies the float encoders (at any depth: arrow-json asks the factory for nested fields too).
#[derive(Debug)]
struct FloatsAsProtobufJson;

impl EncoderFactory for FloatsAsProtobufJson {
    fn make_default_encoder<'a>(
        &self,
        _field: &'a FieldRef,
        array: &'a dyn Array,
        _options: &'a EncoderOptions,
    ) -> Result<Option<NullableEncoder<'a>>, ArrowError> {
        let nulls = array.nulls().cloned();
        let encoder: Box<dyn Encoder + 'a> = match array.data_type() {
            DataType::Float64 => Box::new(Floats(array.as_primitive::<Float64Type>().values())),
            DataType::Float32 => Box::new(Floats32(array.as_primitive::<Float32Type>().values())),
            _ => return Ok(None),
        };
        Ok(Some(NullableEncoder::new(encoder, nulls)))
    }
}

struct Floats<'a>(&'a [f64]);

impl Encoder for Floats<'_> {
    fn encode(&mut self, idx: usize, out: &mut Vec<u8>) {
        write_float(self.0[idx], out);
    }
}

struct Floats32<'a>(&'a [f32]);

impl Encoder for Floats32<'_> {
    fn encode(&mut self, idx: usize, out: &mut Vec<u8>) {
        let v = self.0[idx];
        if v.is_finite() {
            // The shortest text that reads back as the same f32.
            let _ = write!(out, "{v:?}");
        } else {
            write_float(f64::from(v), out);
        }
    }
}

fn write_float(v: f64, out: &mut Vec<u8>) {
    if v.is_nan() {
        out.extend_from_slice(b"\"NaN\"");
    } else if v == f64::INFINITY {
        out.extend_from_slice(b"\"Infinity\"");
    } else if v == f64::NEG_INFINITY {
        out.extend_from_slice(b"\"-Infinity\"");
    } else {
        // Rust's Debug form is the shortest text that reads back as the same f64 (`0.1`,
        // `1e300`, `1.0`), a valid JSON number. Writing to a Vec cannot fail.
        let _ = write!(out, "{v:?}");
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use arrow::array::{Float32Array, Float64Array, ListArray, RecordBatch};
    use arrow::datatypes::{Field, Int32Type, Schema};

    #[test]
    fn infinities_and_nan_are_written_as_protobuf_json_strings() {
        let doubles = Float64Array::from(vec![
            Some(f64::INFINITY),
            Some(f64::NEG_INFINITY),
            Some(f64::NAN),
            Some(0.1),
            None,
        ]);
        let floats = Float32Array::from(vec![Some(f32::INFINITY), Some(1.5), None, None, None]);
        let list = ListArray::from_iter_primitive::<Int32Type, _, _>(vec![
            Some(vec![Some(1)]),
            None,
            None,
            None,
            None,
        ]);
        let batch = RecordBatch::try_new(
            Arc::new(Schema::new(vec![
                Field::new("d", DataType::Float64, true),
                Field::new("f", DataType::Float32, true),
                Field::new("l", list.data_type().clone(), true),
            ])),
            vec![Arc::new(doubles), Arc::new(floats), Arc::new(list)],
        )
        .unwrap();
        let mut out = Vec::new();
        let mut w = json_writer(&mut out);
        w.write(&batch).unwrap();
        w.finish().unwrap();
        let text = String::from_utf8(out).unwrap();
        let lines: Vec<&str> = text.lines().collect();
        assert_eq!(
            lines,
            [
                r#"{"d":"Infinity","f":"Infinity","l":[1]}"#,
                r#"{"d":"-Infinity","f":1.5}"#,
                r#"{"d":"NaN"}"#,
                r#"{"d":0.1}"#,
                r#"{}"#,
            ]
        );
    }
}
