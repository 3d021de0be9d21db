//! The Avro contenders: apache-avro's generic `Value` reader walked into Arrow builders (a),
//! arrow-avro's streaming `Decoder` (b) and weir's `AvroDecoder` (c). Every one of them reads
//! the same binary datums (no container file, no header in the corpus) into batches of
//! [`BATCH_SIZE`] rows.

use std::sync::Arc;

use apache_avro::reader::datum::GenericDatumReader;
use apache_avro::schema::Schema as ApacheSchema;
use apache_avro::types::Value;
use arrow_array::builder::{
    BooleanBuilder, Float64Builder, Int32Builder, Int64Builder, StringBuilder,
    TimestampNanosecondBuilder,
};
use arrow_array::{ArrayRef, RecordBatch, StructArray};
use arrow_buffer::NullBufferBuilder;
use arrow_schema::{DataType, Fields, SchemaRef, TimeUnit};
use weir_codec::{AvroDecoder, AvroDecoderOptions, AvroSchema, ColumnSpec, Decoder};

use crate::{Contender, Corpus, Result, BATCH_SIZE};

// ---------------------------------------------------------------------------------------------
// a. apache-avro: a `Value` per datum, then a walk into Arrow builders
// ---------------------------------------------------------------------------------------------

/// How each datum becomes a `Value`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ValueRead {
    /// A `GenericDatumReader` built once (its writer schema's names resolved once), then
    /// `read_value` per datum. In apache-avro 0.22 this is what the deprecated
    /// `from_avro_datum(schema, &mut bytes, None)` does, minus rebuilding the reader per call.
    Reader,
    /// `apache_avro::from_avro_datum(schema, &mut bytes, None)` per datum, as written (it builds
    /// a `GenericDatumReader`, resolving the schema's names, on every call).
    FromAvroDatum,
}

/// One Arrow column filled from `Value`s: a concrete builder per leaf type, and a struct of
/// such columns for a nested record (its children found by field position, resolved by name
/// once, when the decoder is built).
enum Col {
    Bool(BooleanBuilder),
    I32(Int32Builder),
    I64(Int64Builder),
    F64(Float64Builder),
    Utf8(StringBuilder),
    TsNs(TimestampNanosecondBuilder),
    Struct {
        fields: Fields,
        children: Vec<(usize, Col)>,
        nulls: NullBufferBuilder,
    },
}

/// The record fields of an apache-avro schema.
fn record_fields(schema: &ApacheSchema) -> Result<&[apache_avro::schema::RecordField]> {
    match schema {
        ApacheSchema::Record(r) => Ok(&r.fields),
        other => Err(format!("not a record: {other:?}").into()),
    }
}

/// The position of each of `fields` (by name) among `schema`'s record fields, and its column.
fn plan(schema: &ApacheSchema, fields: &Fields) -> Result<Vec<(usize, Col)>> {
    let record = record_fields(schema)?;
    fields
        .iter()
        .map(|f| {
            let i = record
                .iter()
                .position(|r| r.name == *f.name())
                .ok_or_else(|| format!("no field {} in the Avro schema", f.name()))?;
            Ok((i, Col::new(f.data_type(), &record[i].schema)?))
        })
        .collect()
}

impl Col {
    fn new(ty: &DataType, schema: &ApacheSchema) -> Result<Self> {
        Ok(match ty {
            DataType::Boolean => Col::Bool(BooleanBuilder::with_capacity(BATCH_SIZE)),
            DataType::Int32 => Col::I32(Int32Builder::with_capacity(BATCH_SIZE)),
            DataType::Int64 => Col::I64(Int64Builder::with_capacity(BATCH_SIZE)),
            DataType::Float64 => Col::F64(Float64Builder::with_capacity(BATCH_SIZE)),
            DataType::Utf8 => Col::Utf8(StringBuilder::with_capacity(BATCH_SIZE, 32 * BATCH_SIZE)),
            DataType::Timestamp(TimeUnit::Nanosecond, _) => Col::TsNs(
                TimestampNanosecondBuilder::with_capacity(BATCH_SIZE).with_data_type(ty.clone()),
            ),
            DataType::Struct(fields) => Col::Struct {
                fields: fields.clone(),
                children: plan(schema, fields)?,
                nulls: NullBufferBuilder::new(BATCH_SIZE),
            },
            other => return Err(format!("no builder for {other}").into()),
        })
    }

    /// Appends `v` (a union's branch is unwrapped; null, or a value of another type, is a null).
    fn append(&mut self, v: &Value) {
        let v = match v {
            Value::Union(_, inner) => inner.as_ref(),
            v => v,
        };
        match (self, v) {
            (Col::Bool(b), Value::Boolean(x)) => b.append_value(*x),
            (Col::I32(b), Value::Int(x)) => b.append_value(*x),
            (Col::I64(b), Value::Long(x)) => b.append_value(*x),
            (Col::F64(b), Value::Double(x)) => b.append_value(*x),
            (Col::Utf8(b), Value::String(x)) => b.append_value(x),
            (Col::TsNs(b), Value::TimestampNanos(x)) => b.append_value(*x),
            (
                Col::Struct {
                    children, nulls, ..
                },
                Value::Record(fields),
            ) => {
                for (i, child) in children.iter_mut() {
                    child.append(&fields[*i].1);
                }
                nulls.append_non_null();
            }
            (col, _) => col.append_null(),
        }
    }

    fn append_null(&mut self) {
        match self {
            Col::Bool(b) => b.append_null(),
            Col::I32(b) => b.append_null(),
            Col::I64(b) => b.append_null(),
            Col::F64(b) => b.append_null(),
            Col::Utf8(b) => b.append_null(),
            Col::TsNs(b) => b.append_null(),
            Col::Struct {
                children, nulls, ..
            } => {
                for (_, child) in children.iter_mut() {
                    child.append_null();
                }
                nulls.append_null();
            }
        }
    }

    fn finish(&mut self) -> ArrayRef {
        match self {
            Col::Bool(b) => Arc::new(b.finish()),
            Col::I32(b) => Arc::new(b.finish()),
            Col::I64(b) => Arc::new(b.finish()),
            Col::F64(b) => Arc::new(b.finish()),
            Col::Utf8(b) => Arc::new(b.finish()),
            Col::TsNs(b) => Arc::new(b.finish()),
            Col::Struct {
                fields,
                children,
                nulls,
            } => {
                let arrays = children.iter_mut().map(|(_, c)| c.finish()).collect();
                Arc::new(StructArray::new(fields.clone(), arrays, nulls.finish()))
            }
        }
    }
}

/// apache-avro: each datum read into a `Value` tree (a `Value::Record` of `(String, Value)`
/// pairs), then each requested column's value, found by field position, appended to a concrete
/// Arrow builder: the "decode to a generic value, then build Arrow" path.
pub struct ApacheAvroDecoder {
    name: String,
    read: ValueRead,
    writer: &'static ApacheSchema,
    reader: GenericDatumReader<'static>,
    schema: SchemaRef,
    cols: Vec<(usize, Col)>,
    len: usize,
}

impl ApacheAvroDecoder {
    /// A decoder of datums written with `avsc`, producing the columns of `schema` (fields of the
    /// record by name; a struct column reads a nested record).
    pub fn new(name: &str, avsc: &str, schema: SchemaRef, read: ValueRead) -> Result<Self> {
        // Leaked so the reader (which borrows its schema) can live in the contender.
        let writer: &'static ApacheSchema = Box::leak(Box::new(ApacheSchema::parse_str(avsc)?));
        let reader = GenericDatumReader::builder(writer).build()?;
        let cols = plan(writer, schema.fields())?;
        Ok(Self {
            name: name.to_string(),
            read,
            writer,
            reader,
            schema,
            cols,
            len: 0,
        })
    }

    fn finish(&mut self) -> Result<RecordBatch> {
        self.len = 0;
        let columns: Vec<ArrayRef> = self.cols.iter_mut().map(|(_, c)| c.finish()).collect();
        Ok(RecordBatch::try_new(self.schema.clone(), columns)?)
    }
}

impl Contender for ApacheAvroDecoder {
    fn name(&self) -> &str {
        &self.name
    }

    fn run(&mut self, corpus: &Corpus, sink: &mut dyn FnMut(RecordBatch)) -> Result<()> {
        for message in corpus.iter() {
            let mut bytes = message;
            let value = match self.read {
                ValueRead::Reader => self.reader.read_value(&mut bytes)?,
                #[allow(deprecated)]
                ValueRead::FromAvroDatum => {
                    apache_avro::from_avro_datum(self.writer, &mut bytes, None)?
                }
            };
            if !bytes.is_empty() {
                return Err(format!("{} bytes left after the datum", bytes.len()).into());
            }
            let Value::Record(fields) = value else {
                return Err("the datum is not a record".into());
            };
            for (i, col) in self.cols.iter_mut() {
                col.append(&fields[*i].1);
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
// b. arrow-avro
// ---------------------------------------------------------------------------------------------

/// arrow-avro 59.3's streaming `Decoder` (`ReaderBuilder::with_writer_schema_store(store)
/// .with_batch_size(8192)[.with_projection(..)].build_decoder()`), the lowest-level public
/// reader: it takes framed datums only (single-object `C3 01` + the schema's Rabin fingerprint,
/// or a registry's id header). Each datum is fed as two calls, the constant 10-byte
/// single-object header of the writer schema, then the datum's own slice (no copy), and the
/// decoder is flushed whenever its batch is full.
pub struct ArrowAvroDecoder {
    name: String,
    decoder: arrow_avro::reader::Decoder,
    header: [u8; 10],
}

impl ArrowAvroDecoder {
    /// A decoder of datums written with `avsc`; `projection` (top-level field positions, in
    /// output order) prunes the reader schema to those fields.
    pub fn new(name: &str, avsc: &str, projection: Option<Vec<usize>>) -> Result<Self> {
        use arrow_avro::schema::{AvroSchema as ArrowAvroSchema, Fingerprint, SchemaStore};
        let mut store = SchemaStore::new();
        let fingerprint = store.register(ArrowAvroSchema::new(avsc.to_string()))?;
        let Fingerprint::Rabin(rabin) = fingerprint else {
            return Err("the schema store did not give a Rabin fingerprint".into());
        };
        let mut header = [0u8; 10];
        header[..2].copy_from_slice(&arrow_avro::schema::SINGLE_OBJECT_MAGIC);
        header[2..].copy_from_slice(&rabin.to_le_bytes());
        let mut builder = arrow_avro::reader::ReaderBuilder::new()
            .with_batch_size(BATCH_SIZE)
            .with_writer_schema_store(store);
        if let Some(p) = projection {
            builder = builder.with_projection(p);
        }
        Ok(Self {
            name: name.to_string(),
            decoder: builder.build_decoder()?,
            header,
        })
    }
}

impl Contender for ArrowAvroDecoder {
    fn name(&self) -> &str {
        &self.name
    }

    fn run(&mut self, corpus: &Corpus, sink: &mut dyn FnMut(RecordBatch)) -> Result<()> {
        for message in corpus.iter() {
            let h = self.decoder.decode(&self.header)?;
            let n = self.decoder.decode(message)?;
            if h != self.header.len() || n != message.len() {
                return Err(format!(
                    "arrow-avro took {h} of {} header bytes and {n} of {} datum bytes",
                    self.header.len(),
                    message.len()
                )
                .into());
            }
            if self.decoder.batch_is_full() {
                if let Some(batch) = self.decoder.flush()? {
                    sink(batch);
                }
            }
        }
        if let Some(batch) = self.decoder.flush()? {
            sink(batch);
        }
        Ok(())
    }
}

// ---------------------------------------------------------------------------------------------
// c. weir
// ---------------------------------------------------------------------------------------------

/// `weir_codec::AvroDecoder` (plain framing: the datum alone): `decode` per message,
/// `take_full_batch` after each, `flush` at the end.
pub struct WeirAvroDecoder {
    name: String,
    decoder: AvroDecoder,
}

impl WeirAvroDecoder {
    /// Plans `columns` against `schema` in batches of [`BATCH_SIZE`].
    pub fn new(name: &str, schema: &AvroSchema, columns: &[ColumnSpec]) -> Result<Self> {
        let options = AvroDecoderOptions {
            batch_size: BATCH_SIZE,
            ..AvroDecoderOptions::default()
        };
        Ok(Self {
            name: name.to_string(),
            decoder: AvroDecoder::new(schema, columns, options)?,
        })
    }

    /// The Arrow schema of its batches.
    pub fn schema(&self) -> SchemaRef {
        self.decoder.schema()
    }
}

impl Contender for WeirAvroDecoder {
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
