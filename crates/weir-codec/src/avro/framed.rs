//! Registry-framed Avro (Confluent's wire format: the magic byte `0`, a 4-byte big-endian
//! schema id, the datum): the decoder that follows each message's schema id.
//!
//! Every schema id compiles one [`AvroPlan`] onto the same declared columns: the writer's
//! schema (the id's) resolved against the columns as the Avro specification resolves a writer
//! against a reader (fields by name, promotions, a declared column the writer lacks reads as
//! null). Because every plan fills the same columns, rows of different schema ids share one set
//! of buffers in message order: a change of schema id only switches the plan.

use std::fmt;
use std::sync::Arc;

use arrow_array::RecordBatch;
use arrow_schema::SchemaRef;

use super::plan::{self, Missing};
use super::{decode, AvroDecoderOptions, AvroSchema};
use crate::error::{DecodeError, DecodeErrorKind, EvolutionError, PlanError, SchemaIdError};
use crate::{ColumnSpec, Decoder};

/// One schema id's decoding onto the declared columns, compiled once and shared by every
/// partition.
#[derive(Debug)]
pub struct AvroPlan {
    schema_id: u32,
    plan: plan::Plan,
}

impl AvroPlan {
    /// Compiles the reading of `writer` (registered under `schema_id`) into `columns`. With
    /// `exact`, every column must be a field of `writer` (the schema the columns were declared
    /// against); otherwise a column the writer lacks reads as null, or as the default of
    /// `reader` (the schema the columns were declared against), whose aliases and enum
    /// symbols also resolve the writer's fields and symbols, as the Avro specification says.
    pub fn compile(
        writer: &AvroSchema,
        reader: Option<&AvroSchema>,
        schema_id: u32,
        columns: &[ColumnSpec],
        exact: bool,
        options: AvroDecoderOptions,
    ) -> Result<Self, EvolutionError> {
        let missing = if exact { Missing::Error } else { Missing::Null };
        let plan = plan::compile(
            writer,
            reader,
            columns,
            missing,
            options.batch_size.min(1 << 16),
            options.max_depth,
        )
        .map_err(|e: PlanError| EvolutionError::Plan {
            schema_id,
            source: Arc::new(e),
        })?;
        Ok(Self { schema_id, plan })
    }

    /// The schema id.
    pub fn schema_id(&self) -> u32 {
        self.schema_id
    }

    /// Declared columns the writer's schema lacks (they read as nulls).
    pub fn missing_columns(&self) -> usize {
        self.plan.missing
    }

    /// The schema of the batches (the declared columns, all nullable).
    pub fn schema(&self) -> SchemaRef {
        Arc::clone(&self.plan.schema)
    }
}

/// The plans of schema ids, as the engine keeps them (fetched from the registry, compiled once,
/// cached). Asked only when a message's schema id differs from the previous message's.
pub trait AvroPlanSource: Send + Sync {
    /// The plan for `schema_id`. The error becomes the message's [`DecodeError`].
    fn plan(&self, schema_id: u32) -> Result<Arc<AvroPlan>, SchemaIdError>;
}

/// Decodes registry-framed Avro into the declared columns, following each message's schema id.
/// One per partition.
pub struct FramedAvroDecoder {
    source: Arc<dyn AvroPlanSource>,
    schema: SchemaRef,
    /// The plans met, and the index of the previous message's.
    plans: Vec<Arc<AvroPlan>>,
    current: usize,
    /// The previous message's schema id (`u64::MAX`: none yet).
    current_id: u64,
    state: decode::State,
    batch_size: usize,
}

impl fmt::Debug for FramedAvroDecoder {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("FramedAvroDecoder")
            .field("plans", &self.plans.len())
            .field("current_id", &self.current_id)
            .field("rows", &self.state.rows)
            .finish()
    }
}

impl FramedAvroDecoder {
    /// A decoder of the columns of `reference` (any plan of these columns: they all fill the
    /// same buffers) with plans from `source`.
    pub fn new(
        source: Arc<dyn AvroPlanSource>,
        reference: Arc<AvroPlan>,
        batch_size: usize,
    ) -> Self {
        Self {
            source,
            schema: reference.schema(),
            state: decode::State::new(&reference.plan),
            current_id: u64::from(reference.schema_id),
            plans: vec![reference],
            current: 0,
            batch_size: batch_size.max(1),
        }
    }

    /// The message's schema id differs from the previous message's: find (or fetch) its plan.
    #[cold]
    #[inline(never)]
    fn switch(&mut self, id: u32) -> Result<(), DecodeError> {
        let index = match self.plans.iter().position(|p| p.schema_id == id) {
            Some(i) => i,
            None => {
                let plan = self
                    .source
                    .plan(id)
                    .map_err(|e| DecodeError::new(1, DecodeErrorKind::SchemaId(Box::new(e))))?;
                self.plans.push(plan);
                self.plans.len() - 1
            }
        };
        self.current = index;
        self.current_id = u64::from(id);
        self.state.plans_mixed |= self.plans.len() > 1;
        Ok(())
    }
}

impl Decoder for FramedAvroDecoder {
    fn schema(&self) -> SchemaRef {
        Arc::clone(&self.schema)
    }

    #[inline]
    fn decode(&mut self, message: &[u8]) -> Result<(), DecodeError> {
        let Some(&[magic, a, b, c, d]) = message.first_chunk::<5>() else {
            return Err(DecodeError::new(
                0,
                DecodeErrorKind::Confluent(format!(
                    "the message is {} bytes, shorter than the 5-byte header",
                    message.len()
                )),
            ));
        };
        if magic != 0 {
            return Err(DecodeError::new(
                0,
                DecodeErrorKind::Confluent(format!(
                    "the magic byte is {magic}, not 0: the message is not registry-framed"
                )),
            ));
        }
        let id = u32::from_be_bytes([a, b, c, d]);
        if u64::from(id) != self.current_id {
            self.switch(id)?;
        }
        let plan = &self.plans[self.current].plan;
        self.state.decode_row(plan, &message[5..]).map_err(|mut e| {
            e.offset += 5;
            e
        })
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
        // The reference plan's: the columns were made from it (a plan met later that does not
        // fit them is refused, yet stays `current`).
        let top = &self.plans[0].plan.top;
        Some(self.state.take_batch(top, &self.schema))
    }
}
