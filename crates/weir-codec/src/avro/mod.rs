//! Avro binary data straight into Arrow columns.
//!
//! [`AvroDecoder`] compiles, once per writer schema, a plan of one operation per value the
//! schema puts on the wire (read into a column, or skip); the per-message loop runs that plan
//! over the bytes and appends to the same column arena as the protobuf and JSON decoders. A
//! field no column asks for costs a skip (a varint or a length), never a decode.
//!
//! # Type mapping
//!
//! | Avro (writer) | Arrow column types accepted (the first is the inferred one) |
//! |---|---|
//! | `boolean` | Boolean |
//! | `int` | Int32, Int64, Float32, Float64 |
//! | `long` | Int64, Float32, Float64 |
//! | `float` | Float32, Float64 |
//! | `double` | Float64 |
//! | `string` (also `uuid`) | Utf8, Binary |
//! | `bytes` | Binary, Utf8 (validated) |
//! | `fixed` | Binary |
//! | `enum` | Utf8 (the symbol) |
//! | `record` | Struct (children by name; one the record lacks reads as null) |
//! | `array` | List |
//! | `map` | Map(Utf8, value), the writer's order |
//! | `["null", T]` | T, nullable |
//! | another union | a column every branch can be read as (a branch that cannot is an error for that message) |
//! | `decimal` (bytes, fixed) | Decimal128 of the same scale and at least the precision (1 to 38) |
//! | `date` | Date32 |
//! | `time-millis` | Time32(ms), Time64(us), Time64(ns) |
//! | `time-micros` | Time64(us), Time64(ns) |
//! | `timestamp-millis/-micros/-nanos` | Timestamp(its unit or a finer one, UTC); `local-timestamp-*` without a zone |
//! | `duration` | Interval(MonthDayNano) |
//!
//! Every column is nullable. A column binds to the top-level field of its name, or to a dotted
//! path through records (`customer.address.city`, also through `["null", record]`).
//!
//! # Errors
//!
//! A message that does not follow its schema is a [`DecodeError`] of kind
//! [`DecodeErrorKind::Avro`](crate::DecodeErrorKind::Avro): the field path, what was wrong and
//! the byte offset (a truncated value, a varint past 10 bytes, a negative length, a length past
//! the end, an unknown union branch or enum index, nesting past the limit, bytes left after the
//! record). Its partial row is rolled back.

pub(crate) mod container;
mod decode;
mod factory;
mod framed;
mod plan;
mod schema;

use std::sync::Arc;

use arrow_array::RecordBatch;
use arrow_schema::SchemaRef;

pub use factory::{AvroFactory, AVRO_OPTIONS};
pub use framed::{AvroPlan, AvroPlanSource, FramedAvroDecoder};
pub use schema::{AvroSchema, AvroSchemaError};

use crate::error::{DecodeError, DecodeErrorKind, PlanError};
use crate::{ColumnSpec, Decoder, DEFAULT_BATCH_SIZE};

/// How each message is framed.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum AvroFraming {
    /// The binary datum alone (or after a Confluent header stripped by the source).
    #[default]
    Plain,
    /// Avro's single-object encoding: `C3 01`, the schema's 8-byte little-endian fingerprint
    /// (CRC-64-AVRO), then the datum. A message of another fingerprint is an error.
    SingleObject,
}

/// Settings of an [`AvroDecoder`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct AvroDecoderOptions {
    /// Rows per batch for [`Decoder::take_full_batch`].
    pub batch_size: usize,
    /// The deepest nesting of records, arrays, maps and unions accepted.
    pub max_depth: usize,
    /// How messages are framed.
    pub framing: AvroFraming,
}

impl Default for AvroDecoderOptions {
    fn default() -> Self {
        Self {
            batch_size: DEFAULT_BATCH_SIZE,
            max_depth: 100,
            framing: AvroFraming::Plain,
        }
    }
}

/// Decodes Avro binary messages of one writer schema into the declared columns. See the module
/// documentation for the type mapping and the errors.
#[derive(Debug)]
pub struct AvroDecoder {
    plan: Arc<plan::Plan>,
    state: decode::State,
    batch_size: usize,
    /// The single-object header every message must start with, when that is the framing.
    header: Option<[u8; 10]>,
}

impl AvroDecoder {
    /// Plans `columns` against `schema` (the writer's, whose root must be a record): every
    /// column must bind to a field whose type it can hold.
    pub fn new(
        schema: &AvroSchema,
        columns: &[ColumnSpec],
        options: AvroDecoderOptions,
    ) -> Result<Self, PlanError> {
        let header = (options.framing == AvroFraming::SingleObject).then(|| {
            let mut h = [0u8; 10];
            h[0] = 0xC3;
            h[1] = 0x01;
            h[2..].copy_from_slice(&schema.fingerprint().to_le_bytes());
            h
        });
        Self::planned(schema, None, columns, options, header)
    }

    /// Plans `columns` against `reader` (the schema they were declared against) for data
    /// written with `writer`, resolved as the Avro specification says: fields by name and
    /// aliases, promotions, the reader's defaults, and a column the writer lacks reads as null.
    pub fn resolving(
        writer: &AvroSchema,
        reader: &AvroSchema,
        columns: &[ColumnSpec],
        options: AvroDecoderOptions,
    ) -> Result<Self, PlanError> {
        Self::planned(writer, Some(reader), columns, options, None)
    }

    /// Compiles the plan: exact without `reader` (every column must be a writer field),
    /// resolved against it otherwise.
    fn planned(
        writer: &AvroSchema,
        reader: Option<&AvroSchema>,
        columns: &[ColumnSpec],
        options: AvroDecoderOptions,
        header: Option<[u8; 10]>,
    ) -> Result<Self, PlanError> {
        let missing = match reader {
            None => plan::Missing::Error,
            Some(_) => plan::Missing::Null,
        };
        let plan = plan::compile(
            writer,
            reader,
            columns,
            missing,
            options.batch_size.min(1 << 16),
            options.max_depth,
        )?;
        let state = decode::State::new(&plan);
        Ok(Self {
            plan: Arc::new(plan),
            state,
            batch_size: options.batch_size.max(1),
            header,
        })
    }

    /// A new decoder with the same plan and empty buffers (one per partition).
    pub fn fresh(&self) -> Self {
        Self {
            plan: Arc::clone(&self.plan),
            state: decode::State::new(&self.plan),
            batch_size: self.batch_size,
            header: self.header,
        }
    }

    #[cold]
    fn bad_header(&self, message: &[u8]) -> DecodeError {
        let problem = if message.len() < 10 || message[..2] != [0xC3, 0x01] {
            "the message does not start with the single-object marker C3 01".to_string()
        } else {
            let mut f = [0u8; 8];
            f.copy_from_slice(&message[2..10]);
            format!(
                "the message's schema fingerprint is {:#018x}; this source reads {:#018x} \
                 (the schema of 'avro.schema')",
                u64::from_le_bytes(f),
                self.header
                    .map(|h| u64::from_le_bytes([h[2], h[3], h[4], h[5], h[6], h[7], h[8], h[9]]))
                    .unwrap_or_default()
            )
        };
        DecodeError::new(
            0,
            DecodeErrorKind::Avro {
                field: String::new(),
                problem,
            },
        )
    }
}

impl Decoder for AvroDecoder {
    fn schema(&self) -> SchemaRef {
        Arc::clone(&self.plan.schema)
    }

    #[inline]
    fn decode(&mut self, message: &[u8]) -> Result<(), DecodeError> {
        match &self.header {
            None => self.state.decode_row(&self.plan, message),
            Some(h) => {
                if message.get(..10) != Some(&h[..]) {
                    return Err(self.bad_header(message));
                }
                self.state
                    .decode_row(&self.plan, &message[10..])
                    .map_err(|mut e| {
                        e.offset += 10;
                        e
                    })
            }
        }
    }

    #[inline]
    fn decode_prefix(&mut self, data: &[u8]) -> Result<usize, DecodeError> {
        self.state.decode_prefix(&self.plan, data)
    }

    fn buffered_rows(&self) -> usize {
        self.state.rows
    }

    fn batch_size(&self) -> usize {
        self.batch_size
    }

    fn flush(&mut self) -> Option<RecordBatch> {
        if self.state.rows == 0 {
            return None;
        }
        Some(self.state.take_batch(&self.plan.top, &self.plan.schema))
    }
}

/// The columns a schema gives when none are declared: one per top-level field, of the inferred
/// type (see the module documentation).
pub fn avro_default_columns(schema: &AvroSchema) -> Result<Vec<ColumnSpec>, PlanError> {
    let schema::Node::Record { fields, .. } = schema.node(schema.root()) else {
        return Err(PlanError::Unsupported {
            column: String::new(),
            what: format!(
                "an Avro schema whose top level is {} (weir reads a record's fields as columns)",
                schema.describe(schema.root())
            ),
        });
    };
    let mut columns = Vec::with_capacity(fields.len());
    for f in fields {
        let (t, _) = schema
            .field_type(f.schema, 0)
            .map_err(|what| PlanError::Unsupported {
                column: f.name.clone(),
                what,
            })?;
        // A field that is always null holds nothing to read.
        if t != arrow_schema::DataType::Null {
            columns.push(ColumnSpec::new(&f.name, t));
        }
    }
    Ok(columns)
}
