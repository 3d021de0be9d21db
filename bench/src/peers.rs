//! The message-type-agnostic contenders: prost-reflect's `DynamicMessage` ("before"), ptars
//! and weir.

use arrow_array::builder::{
    make_builder, ArrayBuilder, BooleanBuilder, Float32Builder, Float64Builder, Int32Builder,
    Int64Builder, StringBuilder, TimestampNanosecondBuilder, UInt32Builder, UInt64Builder,
};
use arrow_array::{ArrayRef, RecordBatch, StructArray};
use arrow_schema::{DataType, SchemaRef, TimeUnit};
use prost_reflect::{
    Cardinality, DescriptorPool, DynamicMessage, FieldDescriptor, MessageDescriptor,
    ReflectMessage, Value,
};
use weir_codec::{ColumnSpec, Decoder, ProtoDecoder, ProtoDecoderOptions, ProtoSchema};

use crate::{Contender, Corpus, Result, BATCH_SIZE};

// ---------------------------------------------------------------------------------------------
// a. "before": prost-reflect DynamicMessage + by-name lookups + Box<dyn ArrayBuilder>
// ---------------------------------------------------------------------------------------------

/// The reflection decoder of the "10x faster by ditching reflection" write-up, reproduced as it
/// shows it: per message, decode a `DynamicMessage` (cloning the descriptor), then for each Arrow field look the protobuf field
/// up by name, read it as a `Cow<Value>`, check presence and cardinality, and append it to a
/// `Box<dyn ArrayBuilder>` found by downcasting.
///
/// Columns whose `parents` entry is `Some("base")` are read through that nested message: look
/// `base` up by name, `get_field` it, then look the column up by name on the nested message's
/// descriptor.
pub struct ReflectDecoder {
    name: String,
    message_descriptor: MessageDescriptor,
    schema: SchemaRef,
    parents: Vec<Option<String>>,
    builders: Vec<Box<dyn ArrayBuilder>>,
    batch_size: usize,
    len: usize,
}

impl ReflectDecoder {
    /// A decoder of `message_name` into `schema`; `parents[i]` names the singular message field
    /// that holds column `i`, or `None` for a top-level field.
    pub fn new(
        name: &str,
        pool: &DescriptorPool,
        message_name: &str,
        schema: SchemaRef,
        parents: Vec<Option<String>>,
    ) -> Result<Self> {
        let message_descriptor = pool
            .get_message_by_name(message_name)
            .ok_or_else(|| format!("message {message_name} not found"))?;
        assert_eq!(parents.len(), schema.fields().len());
        let builders = schema
            .fields()
            .iter()
            .map(|f| make_builder(f.data_type(), BATCH_SIZE))
            .collect();
        Ok(Self {
            name: name.to_string(),
            message_descriptor,
            schema,
            parents,
            builders,
            batch_size: BATCH_SIZE,
            len: 0,
        })
    }

    /// Decodes one message and appends it as one row.
    pub fn append_message(&mut self, bytes: &[u8]) -> Result<()> {
        // Step 1: decode into a DynamicMessage (cloning the descriptor).
        let dynamic_message = DynamicMessage::decode(self.message_descriptor.clone(), bytes)?;

        // Step 2: for each field in the Arrow schema...
        for (idx, arrow_field) in self.schema.fields().iter().enumerate() {
            match &self.parents[idx] {
                None => {
                    // ...look up the protobuf field by name (hash map lookup)...
                    let field_descriptor = self
                        .message_descriptor
                        .get_field_by_name(arrow_field.name())
                        .ok_or_else(|| format!("no field {}", arrow_field.name()))?;
                    append_field(
                        &mut self.builders[idx],
                        &dynamic_message,
                        &field_descriptor,
                        arrow_field.data_type(),
                    )?;
                }
                Some(parent) => {
                    // ...through the nested message: look `base` up, get it, then look the
                    // column up by name on the nested descriptor.
                    let parent_descriptor = self
                        .message_descriptor
                        .get_field_by_name(parent)
                        .ok_or_else(|| format!("no field {parent}"))?;
                    if !dynamic_message.has_field(&parent_descriptor) {
                        append_null(&mut self.builders[idx], arrow_field.data_type())?;
                        continue;
                    }
                    let parent_value = dynamic_message.get_field(&parent_descriptor);
                    let Value::Message(parent_message) = parent_value.as_ref() else {
                        return Err(format!("field {parent} is not a message").into());
                    };
                    let field_descriptor = parent_message
                        .descriptor()
                        .get_field_by_name(arrow_field.name())
                        .ok_or_else(|| format!("no field {parent}.{}", arrow_field.name()))?;
                    append_field(
                        &mut self.builders[idx],
                        parent_message,
                        &field_descriptor,
                        arrow_field.data_type(),
                    )?;
                }
            }
        }
        self.len += 1;
        Ok(())
    }

    /// Rows buffered and not yet taken.
    pub fn len(&self) -> usize {
        self.len
    }

    /// Whether no row is buffered.
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// Takes every buffered row as one batch.
    pub fn finish(&mut self) -> Result<RecordBatch> {
        let columns: Vec<ArrayRef> = self.builders.iter_mut().map(|b| b.finish()).collect();
        self.len = 0;
        Ok(RecordBatch::try_new(self.schema.clone(), columns)?)
    }
}

/// Checks cardinality and presence, then appends the field's value (or a null).
fn append_field(
    builder: &mut Box<dyn ArrayBuilder>,
    message: &DynamicMessage,
    field_descriptor: &FieldDescriptor,
    data_type: &DataType,
) -> Result<()> {
    if field_descriptor.is_list()
        || field_descriptor.is_map()
        || field_descriptor.cardinality() == Cardinality::Repeated
    {
        return Err(format!(
            "repeated field {} is not supported",
            field_descriptor.name()
        )
        .into());
    }
    if field_descriptor.supports_presence() && !message.has_field(field_descriptor) {
        return append_null(builder, data_type);
    }
    // ...extract the value (a Cow<Value> enum)...
    let field_value: std::borrow::Cow<'_, Value> = message.get_field(field_descriptor);
    // ...pattern-match on the Value variant and append to the builder (vtable dispatch).
    append_value_to_builder(builder, &field_value, data_type)
}

fn downcast<T: ArrayBuilder>(builder: &mut Box<dyn ArrayBuilder>) -> Result<&mut T> {
    builder
        .as_any_mut()
        .downcast_mut::<T>()
        .ok_or_else(|| format!("builder is not a {}", std::any::type_name::<T>()).into())
}

fn append_value_to_builder(
    builder: &mut Box<dyn ArrayBuilder>,
    field_value: &Value,
    data_type: &DataType,
) -> Result<()> {
    match (data_type, field_value) {
        (DataType::Utf8, Value::String(v)) => downcast::<StringBuilder>(builder)?.append_value(v),
        (DataType::Timestamp(TimeUnit::Nanosecond, _), Value::I64(v)) => {
            downcast::<TimestampNanosecondBuilder>(builder)?.append_value(*v)
        }
        (DataType::Int64, Value::I64(v)) => downcast::<Int64Builder>(builder)?.append_value(*v),
        (DataType::Int32, Value::I32(v)) => downcast::<Int32Builder>(builder)?.append_value(*v),
        (DataType::UInt64, Value::U64(v)) => downcast::<UInt64Builder>(builder)?.append_value(*v),
        (DataType::UInt32, Value::U32(v)) => downcast::<UInt32Builder>(builder)?.append_value(*v),
        (DataType::Float64, Value::F64(v)) => downcast::<Float64Builder>(builder)?.append_value(*v),
        (DataType::Float32, Value::F32(v)) => downcast::<Float32Builder>(builder)?.append_value(*v),
        (DataType::Boolean, Value::Bool(v)) => {
            downcast::<BooleanBuilder>(builder)?.append_value(*v)
        }
        (data_type, value) => {
            return Err(format!("cannot append {value:?} to a {data_type} column").into())
        }
    }
    Ok(())
}

fn append_null(builder: &mut Box<dyn ArrayBuilder>, data_type: &DataType) -> Result<()> {
    match data_type {
        DataType::Utf8 => downcast::<StringBuilder>(builder)?.append_null(),
        DataType::Timestamp(TimeUnit::Nanosecond, _) => {
            downcast::<TimestampNanosecondBuilder>(builder)?.append_null()
        }
        DataType::Int64 => downcast::<Int64Builder>(builder)?.append_null(),
        DataType::Int32 => downcast::<Int32Builder>(builder)?.append_null(),
        DataType::UInt64 => downcast::<UInt64Builder>(builder)?.append_null(),
        DataType::UInt32 => downcast::<UInt32Builder>(builder)?.append_null(),
        DataType::Float64 => downcast::<Float64Builder>(builder)?.append_null(),
        DataType::Float32 => downcast::<Float32Builder>(builder)?.append_null(),
        DataType::Boolean => downcast::<BooleanBuilder>(builder)?.append_null(),
        other => return Err(format!("unsupported column type {other}").into()),
    }
    Ok(())
}

impl Contender for ReflectDecoder {
    fn name(&self) -> &str {
        &self.name
    }

    fn run(&mut self, corpus: &Corpus, sink: &mut dyn FnMut(RecordBatch)) -> Result<()> {
        for message in corpus.iter() {
            self.append_message(message)?;
            if self.len >= self.batch_size {
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
// c. ptars
// ---------------------------------------------------------------------------------------------

/// The `ptars` crate's public API: `Handler::decode_bytes` on a slice of [`BATCH_SIZE`]
/// messages. It decodes every field of the message (nested messages become struct columns)
/// with its own arrow (60.x) and hands the batch over the Arrow C Data Interface; the batch is
/// imported zero-copy into this crate's arrow (59.x), as the ptars README shows.
pub struct PtarsDecoder {
    name: String,
    handler: ptars::Handler,
}

impl PtarsDecoder {
    /// A handler for `message_name` from an encoded `FileDescriptorSet`.
    pub fn new(name: &str, descriptor_set: &[u8], message_name: &str) -> Result<Self> {
        let handler =
            ptars::Handler::try_new(descriptor_set, message_name, ptars::PtarsConfig::default())?;
        Ok(Self {
            name: name.to_string(),
            handler,
        })
    }

    /// Decodes one batch of messages.
    pub fn decode_batch(&self, messages: &[Option<&[u8]>]) -> Result<RecordBatch> {
        let (array, schema) = self.handler.decode_bytes(messages)?;
        // SAFETY: ptars' `ArrowArray`/`ArrowSchema` and arrow-rs' FFI structs are both
        // `#[repr(C)]` definitions of the frozen Arrow C Data Interface ABI (ptars asserts the
        // layout at compile time; `transmute` checks the sizes), and ptars hands us ownership of
        // valid exported data.
        let array: arrow_array::ffi::FFI_ArrowArray = unsafe { std::mem::transmute(array) };
        let schema: arrow_array::ffi::FFI_ArrowSchema = unsafe { std::mem::transmute(schema) };
        let data = unsafe { arrow_array::ffi::from_ffi(array, &schema) }?;
        Ok(RecordBatch::from(StructArray::from(data)))
    }
}

impl Contender for PtarsDecoder {
    fn name(&self) -> &str {
        &self.name
    }

    fn run(&mut self, corpus: &Corpus, sink: &mut dyn FnMut(RecordBatch)) -> Result<()> {
        let mut chunk: Vec<Option<&[u8]>> = Vec::with_capacity(BATCH_SIZE);
        for message in corpus.iter() {
            chunk.push(Some(message));
            if chunk.len() == BATCH_SIZE {
                sink(self.decode_batch(&chunk)?);
                chunk.clear();
            }
        }
        if !chunk.is_empty() {
            sink(self.decode_batch(&chunk)?);
        }
        Ok(())
    }
}

// ---------------------------------------------------------------------------------------------
// d. weir
// ---------------------------------------------------------------------------------------------

/// `weir_codec::ProtoDecoder` with the given columns, one `decode` per message and
/// `take_full_batch` after each.
pub struct WeirDecoder {
    name: String,
    decoder: ProtoDecoder,
}

impl WeirDecoder {
    /// Plans a decoder of `message_name` producing `columns`.
    pub fn new(
        name: &str,
        schema: &ProtoSchema,
        message_name: &str,
        columns: &[ColumnSpec],
    ) -> Result<Self> {
        let options = ProtoDecoderOptions::default();
        let decoder = ProtoDecoder::new(schema, message_name, columns, options)?;
        assert_eq!(decoder.batch_size(), BATCH_SIZE);
        Ok(Self {
            name: name.to_string(),
            decoder,
        })
    }

    /// The Arrow schema of the batches.
    pub fn schema(&self) -> SchemaRef {
        self.decoder.schema()
    }
}

impl Contender for WeirDecoder {
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
