//! The schema-driven JSON contenders: serde_json `Value` walked into builders (a), arrow-json's
//! `ReaderBuilder` decoder (c) and weir's `JsonDecoder` (d). The hand-written serde derive
//! decoders (b) are in `derive.rs`.

use std::sync::Arc;

use arrow_array::builder::{
    make_builder, ArrayBuilder, BooleanBuilder, Float64Builder, Int32Builder, Int64Builder,
    ListBuilder, StringBuilder, StructBuilder, TimestampMillisecondBuilder,
    TimestampNanosecondBuilder, UInt32Builder,
};
use arrow_array::{Array, ArrayRef, RecordBatch, StructArray};
use arrow_schema::{DataType, SchemaRef, TimeUnit};
use serde_json::Value;
use weir_codec::{ColumnSpec, Decoder, JsonDecoder, JsonDecoderOptions};

use crate::{Contender, Corpus, Result, BATCH_SIZE};

// ---------------------------------------------------------------------------------------------
// a. serde_json::Value, then a walk into Arrow builders (parse into a tree, then convert: a double parse)
// ---------------------------------------------------------------------------------------------

/// Parses each message into a `serde_json::Value` tree, then walks each column's path in the
/// tree and appends what it finds to a `Box<dyn ArrayBuilder>` found by downcasting: the
/// "parse into a tree, then convert" pattern of general-purpose ingestion systems.
pub struct ValueWalkDecoder {
    name: String,
    schema: SchemaRef,
    paths: Vec<Vec<String>>,
    builders: Vec<Box<dyn ArrayBuilder>>,
    len: usize,
}

impl ValueWalkDecoder {
    /// A decoder producing `schema` (flat), column `i` read from the dotted `paths[i]`.
    pub fn new(name: &str, schema: SchemaRef, paths: &[&str]) -> Self {
        let builders = schema
            .fields()
            .iter()
            .map(|f| make_builder(f.data_type(), BATCH_SIZE))
            .collect();
        Self {
            name: name.to_string(),
            schema,
            paths: paths
                .iter()
                .map(|p| p.split('.').map(str::to_string).collect())
                .collect(),
            builders,
            len: 0,
        }
    }

    fn finish(&mut self) -> Result<RecordBatch> {
        self.len = 0;
        let columns: Vec<ArrayRef> = self.builders.iter_mut().map(|b| b.finish()).collect();
        Ok(RecordBatch::try_new(self.schema.clone(), columns)?)
    }
}

fn downcast<T: 'static>(b: &mut dyn ArrayBuilder) -> Result<&mut T> {
    b.as_any_mut()
        .downcast_mut::<T>()
        .ok_or_else(|| "builder of an unexpected type".into())
}

/// Appends `v` (None or JSON null: a null) to a builder of type `dt`.
fn append(b: &mut dyn ArrayBuilder, dt: &DataType, v: Option<&Value>) -> Result<()> {
    let v = v.filter(|v| !v.is_null());
    match dt {
        DataType::Int64 => downcast::<Int64Builder>(b)?.append_option(v.and_then(Value::as_i64)),
        DataType::Int32 => {
            downcast::<Int32Builder>(b)?.append_option(v.and_then(Value::as_i64).map(|x| x as i32))
        }
        DataType::UInt32 => {
            downcast::<UInt32Builder>(b)?.append_option(v.and_then(Value::as_u64).map(|x| x as u32))
        }
        DataType::Float64 => {
            downcast::<Float64Builder>(b)?.append_option(v.and_then(Value::as_f64))
        }
        DataType::Boolean => {
            downcast::<BooleanBuilder>(b)?.append_option(v.and_then(Value::as_bool))
        }
        DataType::Utf8 => downcast::<StringBuilder>(b)?.append_option(v.and_then(Value::as_str)),
        DataType::Timestamp(TimeUnit::Nanosecond, _) => {
            downcast::<TimestampNanosecondBuilder>(b)?.append_option(v.and_then(Value::as_i64))
        }
        DataType::Timestamp(TimeUnit::Millisecond, _) => {
            downcast::<TimestampMillisecondBuilder>(b)?.append_option(v.and_then(Value::as_i64))
        }
        DataType::List(item) => {
            let lb = downcast::<ListBuilder<Box<dyn ArrayBuilder>>>(b)?;
            match v {
                Some(Value::Array(items)) => {
                    for it in items {
                        append(lb.values().as_mut(), item.data_type(), Some(it))?;
                    }
                    lb.append(true);
                }
                _ => lb.append(false),
            }
        }
        DataType::Struct(fields) => {
            let sb = downcast::<StructBuilder>(b)?;
            for (i, f) in fields.iter().enumerate() {
                let child = v.and_then(|v| v.get(f.name()));
                append(sb.field_builders_mut()[i].as_mut(), f.data_type(), child)?;
            }
            sb.append(v.is_some());
        }
        other => return Err(format!("no walker for {other}").into()),
    }
    Ok(())
}

impl Contender for ValueWalkDecoder {
    fn name(&self) -> &str {
        &self.name
    }

    fn run(&mut self, corpus: &Corpus, sink: &mut dyn FnMut(RecordBatch)) -> Result<()> {
        for message in corpus.iter() {
            // Parse 1: the whole message into a tree of Values (every key, every string).
            let root: Value = serde_json::from_slice(message)?;
            // Parse 2: walk the tree per column.
            for (i, field) in self.schema.fields().iter().enumerate() {
                let mut node = Some(&root);
                for key in &self.paths[i] {
                    node = node.and_then(|n| n.get(key));
                }
                append(self.builders[i].as_mut(), field.data_type(), node)?;
            }
            self.len += 1;
            if self.len >= BATCH_SIZE {
                sink(self.finish()?);
            }
        }
        if self.len > 0 {
            sink(self.finish()?);
        }
        Ok(())
    }
}

// ---------------------------------------------------------------------------------------------
// c. arrow-json
// ---------------------------------------------------------------------------------------------

/// arrow-json's `ReaderBuilder::build_decoder` (a tape decoder), fed one message at a time and
/// flushed every [`BATCH_SIZE`] rows. It reads nested paths as nested struct columns.
pub struct ArrowJsonDecoder {
    name: String,
    decoder: arrow_json::reader::Decoder,
}

impl ArrowJsonDecoder {
    /// A decoder producing `schema` (unknown keys ignored, as weir does).
    pub fn new(name: &str, schema: SchemaRef) -> Result<Self> {
        let decoder = arrow_json::ReaderBuilder::new(schema)
            .with_batch_size(BATCH_SIZE)
            .build_decoder()?;
        Ok(Self {
            name: name.to_string(),
            decoder,
        })
    }
}

impl Contender for ArrowJsonDecoder {
    fn name(&self) -> &str {
        &self.name
    }

    fn run(&mut self, corpus: &Corpus, sink: &mut dyn FnMut(RecordBatch)) -> Result<()> {
        for message in corpus.iter() {
            let mut rest = message;
            while !rest.is_empty() {
                let n = self.decoder.decode(rest)?;
                rest = &rest[n..];
                if n == 0 || self.decoder.len() >= BATCH_SIZE {
                    if let Some(batch) = self.decoder.flush()? {
                        sink(batch);
                    }
                }
            }
        }
        if let Some(batch) = self.decoder.flush()? {
            sink(batch);
        }
        Ok(())
    }
}

/// The flat columns of `batch` at dotted `paths` (through struct columns), for comparing
/// arrow-json's nested output with the flat output of the others. Not timed.
pub fn flatten(batch: &RecordBatch, names: &[&str], paths: &[&str]) -> Result<RecordBatch> {
    let mut columns: Vec<ArrayRef> = Vec::new();
    let mut fields = Vec::new();
    for (name, path) in names.iter().zip(paths) {
        let mut segs = path.split('.');
        let first = segs.next().ok_or("empty path")?;
        let mut col = batch
            .column_by_name(first)
            .ok_or_else(|| format!("no column {first}"))?
            .clone();
        let mut parent_nulls = col.logical_nulls();
        for seg in segs {
            let s = col
                .as_any()
                .downcast_ref::<StructArray>()
                .ok_or_else(|| format!("{path}: not a struct at {seg}"))?;
            let child = s
                .column_by_name(seg)
                .ok_or_else(|| format!("{path}: no field {seg}"))?
                .clone();
            parent_nulls = arrow_buffer::NullBuffer::union(parent_nulls.as_ref(), s.nulls());
            col = child;
        }
        // A null parent makes the child null, as a path column does.
        let data = col.to_data();
        let nulls = arrow_buffer::NullBuffer::union(parent_nulls.as_ref(), data.nulls());
        let data = data.into_builder().nulls(nulls).build()?;
        let col = arrow_array::make_array(data);
        fields.push(arrow_schema::Field::new(
            *name,
            col.data_type().clone(),
            true,
        ));
        columns.push(col);
    }
    Ok(RecordBatch::try_new(
        Arc::new(arrow_schema::Schema::new(fields)),
        columns,
    )?)
}

// ---------------------------------------------------------------------------------------------
// d. weir
// ---------------------------------------------------------------------------------------------

/// `weir_codec::JsonDecoder`: `decode` per message, `take_full_batch` after each, `flush` at
/// the end.
pub struct WeirJsonDecoder {
    name: String,
    decoder: JsonDecoder,
}

impl WeirJsonDecoder {
    /// Plans the decoder for `columns` with `options` (batch size forced to [`BATCH_SIZE`]).
    pub fn new(name: &str, columns: &[ColumnSpec], options: JsonDecoderOptions) -> Result<Self> {
        let options = JsonDecoderOptions {
            batch_size: BATCH_SIZE,
            ..options
        };
        Ok(Self {
            name: name.to_string(),
            decoder: JsonDecoder::new(columns, options)?,
        })
    }
}

impl Contender for WeirJsonDecoder {
    fn name(&self) -> &str {
        &self.name
    }

    fn run(&mut self, corpus: &Corpus, sink: &mut dyn FnMut(RecordBatch)) -> Result<()> {
        for message in corpus.iter() {
            self.decoder.decode(message)?;
            if let Some(batch) = self.decoder.take_full_batch() {
                sink(batch);
            }
        }
        if let Some(batch) = self.decoder.flush() {
            sink(batch);
        }
        Ok(())
    }
}
