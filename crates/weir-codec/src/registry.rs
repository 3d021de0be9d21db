//! Protobuf schemas from a schema registry, I/O-free: the pieces that turn a registered schema
//! into a decoder of fixed, declared columns, and the decoder that follows the schema id of each
//! message.
//!
//! A registry-framed message is the magic byte `0`, a 4-byte big-endian schema id, a
//! zigzag-varint message-index list (its count first; a count of 0 means `[0]`, the file's
//! first message), then the protobuf payload. The columns of a source are fixed when it is
//! created ([`TargetColumns`]); every schema id seen compiles one [`SchemaPlan`] onto those
//! columns, by field name (then by field number, for a renamed field): a field the schema adds
//! is not read unless declared, a declared field the schema lacks reads as nulls, a narrower
//! integer or float is widened (`int32` into a `BIGINT` column), and any other change of type is
//! an [`EvolutionError::Incompatible`] naming the column, both schema ids and both types.
//!
//! [`FramedProtoDecoder`] is the per-partition decoder. It keeps the plan of the schema id of
//! the previous message and decodes with it while the id and the message-index list stay the
//! same (the comparison of a few bytes, no lookup); only a message with another id asks its
//! decoder's [`PlanSource`] (where the engine keeps the registry client and the cache of plans
//! by id), or one of the plans it already used. Rows decoded under different schema ids land in
//! the same batch, in message order.

use std::fmt;
use std::sync::Arc;

use arrow_array::cast::AsArray;
use arrow_array::types::{Float32Type, Float64Type, Int32Type, Int64Type, UInt32Type, UInt64Type};
use arrow_array::{new_null_array, Array, ArrayRef, ListArray, MapArray, RecordBatch, StructArray};
use arrow_schema::{DataType, Field, FieldRef, Fields, Schema, SchemaRef};
use prost_reflect::{FieldDescriptor, Kind, MessageDescriptor};

use crate::error::{DecodeError, DecodeErrorKind, PlanError};
pub use crate::error::{EvolutionError, SchemaIdError};
use crate::protobuf::{ColumnSpec, ProtoDecoder, ProtoDecoderOptions};
use crate::schema::ProtoSchema;
use crate::Decoder;

/// The registry framing of one message, read by [`parse_framing`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RegistryFraming<'a> {
    /// The schema id.
    pub schema_id: u32,
    /// The message-index list as it is on the wire (count first), for comparing and parsing.
    pub indexes: &'a [u8],
    /// Where the payload starts.
    pub payload_at: usize,
}

impl RegistryFraming<'_> {
    /// The message-index list as numbers; `[0]` when the wire says 0 (the first message).
    pub fn index_path(&self) -> Vec<i64> {
        let mut pos = 0;
        let count = read_zigzag(self.indexes, &mut pos).unwrap_or(0);
        if count <= 0 {
            return vec![0];
        }
        (0..count)
            .map_while(|_| read_zigzag(self.indexes, &mut pos).ok())
            .collect()
    }
}

/// Reads the registry framing of `message`: the magic byte, the schema id and (for protobuf,
/// `message_indexes`) the message-index list.
pub fn parse_framing(
    message: &[u8],
    message_indexes: bool,
) -> Result<RegistryFraming<'_>, DecodeError> {
    if message.len() < 5 {
        return Err(DecodeError::new(
            0,
            DecodeErrorKind::Confluent(format!(
                "{} bytes is shorter than the 5-byte schema-registry header",
                message.len()
            )),
        ));
    }
    if message[0] != 0 {
        return Err(DecodeError::new(
            0,
            DecodeErrorKind::Confluent(format!(
                "magic byte is {}, expected 0 (a message without schema-registry framing?)",
                message[0]
            )),
        ));
    }
    let schema_id = u32::from_be_bytes([message[1], message[2], message[3], message[4]]);
    let mut pos = 5;
    if message_indexes {
        let count = read_zigzag(message, &mut pos)?;
        if count < 0 || count as u64 > (message.len() - pos) as u64 {
            return Err(DecodeError::new(
                5,
                DecodeErrorKind::Confluent(format!("bad message-index count {count}")),
            ));
        }
        for _ in 0..count {
            read_zigzag(message, &mut pos)?;
        }
    }
    Ok(RegistryFraming {
        schema_id,
        indexes: &message[5..pos],
        payload_at: pos,
    })
}

fn read_zigzag(buf: &[u8], pos: &mut usize) -> Result<i64, DecodeError> {
    let start = *pos;
    let mut value: u64 = 0;
    for shift in (0..64).step_by(7) {
        let Some(&b) = buf.get(*pos) else {
            return Err(DecodeError::new(start, DecodeErrorKind::TruncatedVarint));
        };
        *pos += 1;
        value |= u64::from(b & 0x7f) << shift;
        if b < 0x80 {
            return Ok(((value >> 1) as i64) ^ -((value & 1) as i64));
        }
    }
    Err(DecodeError::new(start, DecodeErrorKind::VarintTooLong))
}

/// The full name of the message a message-index list selects in `file` (the registered
/// schema's own file): the first index picks a top-level message, each further one a nested
/// message of the previous. An empty list is `[0]`.
pub fn message_for_indexes(
    schema: &ProtoSchema,
    file: &str,
    indexes: &[i64],
) -> Result<String, String> {
    let fd = schema
        .pool()
        .get_file_by_name(file)
        .ok_or_else(|| format!("the schema has no file '{file}'"))?;
    let indexes = if indexes.is_empty() {
        &[0][..]
    } else {
        indexes
    };
    let pick = |mut it: Box<dyn ExactSizeIterator<Item = MessageDescriptor> + '_>, i: i64| {
        let n = it.len();
        usize::try_from(i)
            .ok()
            .and_then(|i| it.nth(i))
            .ok_or_else(|| format!("message index {i} is out of range ({n} messages)"))
    };
    let mut msg = pick(Box::new(fd.messages()), indexes[0])?;
    for &i in &indexes[1..] {
        msg = pick(Box::new(msg.child_messages()), i)?;
    }
    Ok(msg.full_name().to_string())
}

/// The message-index list of `message` in `file` of `schema` (the inverse of
/// [`message_for_indexes`]): its place among the file's top-level messages, then among each
/// nested level's. `None` when the file does not hold it.
pub fn indexes_for_message(schema: &ProtoSchema, file: &str, message: &str) -> Option<Vec<i64>> {
    fn find(messages: impl Iterator<Item = MessageDescriptor>, message: &str) -> Option<Vec<i64>> {
        for (i, m) in messages.enumerate() {
            if m.full_name() == message {
                return Some(vec![i as i64]);
            }
            if let Some(mut path) = find(m.child_messages(), message) {
                path.insert(0, i as i64);
                return Some(path);
            }
        }
        None
    }
    find(schema.pool().get_file_by_name(file)?.messages(), message)
}

/// The registry framing written before a message of schema `schema_id` whose type is at
/// `indexes` (what [`parse_framing`] reads): magic byte 0, the id in 4 bytes big-endian, then
/// the message indexes as zigzag varints, count first (a lone 0 for `[0]`, as Confluent's
/// serializers write it).
pub fn registry_prefix(schema_id: u32, indexes: &[i64]) -> Vec<u8> {
    fn zigzag(out: &mut Vec<u8>, v: i64) {
        let mut z = ((v << 1) ^ (v >> 63)) as u64;
        while z >= 0x80 {
            out.push((z as u8) | 0x80);
            z >>= 7;
        }
        out.push(z as u8);
    }
    let mut out = vec![0];
    out.extend_from_slice(&schema_id.to_be_bytes());
    if indexes == [0] {
        out.push(0);
    } else {
        zigzag(&mut out, indexes.len() as i64);
        for &i in indexes {
            zigzag(&mut out, i);
        }
    }
    out
}

/// The declared columns of a registry source, fixed when it is created, and the schema they
/// were declared against (the reference for the error of an incompatible change).
#[derive(Debug)]
pub struct TargetColumns {
    columns: Vec<ColumnSpec>,
    schema: SchemaRef,
    reference_id: u32,
    /// Per column: the field's type in the reference schema, and its number when top-level.
    reference: Vec<(Option<String>, Option<u32>)>,
    options: ProtoDecoderOptions,
}

impl TargetColumns {
    /// The columns, checked against the reference schema (`reference_id`, `message` in
    /// `schema`): every column must bind there, with its declared type.
    pub fn new(
        columns: &[ColumnSpec],
        reference_id: u32,
        schema: &ProtoSchema,
        message: &str,
        options: ProtoDecoderOptions,
    ) -> Result<Self, EvolutionError> {
        let plan_err = |source| EvolutionError::Plan {
            schema_id: reference_id,
            source: Arc::new(source),
        };
        let desc = crate::protobuf::find_message(schema, message).map_err(plan_err)?;
        let reference = columns
            .iter()
            .map(|c| match resolve(&desc, c) {
                Some(f) => (
                    Some(type_name(&f)),
                    (c.path.is_none() && desc.get_field(f.number()).is_some_and(|x| x == f))
                        .then(|| f.number()),
                ),
                None => (None, None),
            })
            .collect();
        let mut target = Self {
            columns: columns.to_vec(),
            schema: Arc::new(Schema::empty()),
            reference_id,
            reference,
            options,
        };
        let (decoder, slots) = bind(&target, reference_id, schema, message)?;
        let decoded = decoder.schema();
        let mut fields = Vec::with_capacity(columns.len());
        for (c, slot) in columns.iter().zip(&slots) {
            fields.push(match *slot {
                Slot::Direct(i) => loosen_field(decoded.field(i), true),
                Slot::Widened(_) => Field::new(&c.name, c.data_type.clone(), true),
                Slot::Null => {
                    // Declared against this very schema: a column it lacks is a mistake (the
                    // plain decoder's error says which).
                    let err = ProtoDecoder::new(schema, message, std::slice::from_ref(c), options)
                        .err()
                        .unwrap_or_else(|| PlanError::UnknownField {
                            column: c.name.clone(),
                            message: message.to_string(),
                            field: c.path.clone().unwrap_or_else(|| c.name.clone()),
                        });
                    return Err(plan_err(err));
                }
            });
        }
        target.schema = Arc::new(Schema::new(fields));
        Ok(target)
    }

    /// The schema of every batch: the declared columns, all nullable (a field that a later
    /// schema removes reads as nulls).
    pub fn schema(&self) -> SchemaRef {
        Arc::clone(&self.schema)
    }

    /// The columns.
    pub fn columns(&self) -> &[ColumnSpec] {
        &self.columns
    }

    /// The schema id the columns were declared against.
    pub fn reference_id(&self) -> u32 {
        self.reference_id
    }

    /// The same target narrowed to `indexes` (for a scan that reads only some columns).
    pub fn project(&self, indexes: &[usize]) -> Option<Self> {
        let fields = indexes
            .iter()
            .map(|&i| self.schema.fields().get(i).cloned())
            .collect::<Option<Vec<FieldRef>>>()?;
        Some(Self {
            columns: indexes
                .iter()
                .map(|&i| self.columns.get(i).cloned())
                .collect::<Option<_>>()?,
            schema: Arc::new(Schema::new(fields)),
            reference_id: self.reference_id,
            reference: indexes.iter().map(|&i| self.reference[i].clone()).collect(),
            options: self.options,
        })
    }
}

/// Where an output column comes from under one schema.
#[derive(Debug, Clone)]
enum Slot {
    /// Decoded column `i`, already of the column's type.
    Direct(usize),
    /// Decoded column `i`, of a narrower type, widened per batch.
    Widened(usize),
    /// The schema has no such field: nulls.
    Null,
}

/// One schema id's decoding onto the declared columns, compiled once and shared by every
/// partition.
#[derive(Debug)]
pub struct SchemaPlan {
    schema_id: u32,
    decoder: ProtoDecoder,
    slots: Vec<Slot>,
    target: SchemaRef,
    /// True when the decoder's batches are the target's as they are.
    identity: bool,
    /// The compiled plan and the slots as text, when two plans can be compared that way: a
    /// partition decodes the messages of schema ids with the same fingerprint with one decoder.
    fingerprint: Option<String>,
}

impl SchemaPlan {
    /// Compiles the decoding of `message` in `schema` (registered under `schema_id`) onto
    /// `target`'s columns.
    pub fn compile(
        target: &TargetColumns,
        schema_id: u32,
        schema: &ProtoSchema,
        message: &str,
    ) -> Result<Self, EvolutionError> {
        let (decoder, slots) = bind(target, schema_id, schema, message)?;
        let identity = slots
            .iter()
            .enumerate()
            .all(|(i, s)| matches!(s, Slot::Direct(j) if *j == i))
            && decoder.schema().fields().len() == target.schema.fields().len()
            && decoder
                .schema()
                .fields()
                .iter()
                .zip(target.schema.fields())
                .all(|(a, b)| a.data_type() == b.data_type());
        let fingerprint = decoder
            .plan_fingerprint()
            .map(|plan| format!("{plan}\n{slots:?}"));
        Ok(Self {
            schema_id,
            decoder,
            slots,
            target: target.schema(),
            identity,
            fingerprint,
        })
    }

    /// The schema id.
    pub fn schema_id(&self) -> u32 {
        self.schema_id
    }

    /// Columns the schema lacks (they read as nulls).
    pub fn missing_columns(&self) -> usize {
        self.slots
            .iter()
            .filter(|s| matches!(s, Slot::Null))
            .count()
    }

    /// True when this plan decodes exactly as `other` does (the same compiled plan onto the same
    /// slots): their messages can share one decoder and one run of rows.
    pub fn decodes_as(&self, other: &SchemaPlan) -> bool {
        matches!((&self.fingerprint, &other.fingerprint), (Some(a), Some(b)) if a == b)
    }

    /// Columns read from a narrower type and widened.
    pub fn widened_columns(&self) -> usize {
        self.slots
            .iter()
            .filter(|s| matches!(s, Slot::Widened(_)))
            .count()
    }

    /// A batch of the decoder's columns as a batch of the target's.
    fn assemble(&self, batch: RecordBatch) -> RecordBatch {
        let rows = batch.num_rows();
        let fields = self.target.fields();
        let columns: Vec<ArrayRef> = if self.identity {
            batch
                .columns()
                .iter()
                .zip(fields)
                .map(|(a, f)| conform(a, f.data_type()))
                .collect()
        } else {
            self.slots
                .iter()
                .zip(fields)
                .map(|(s, f)| match *s {
                    Slot::Direct(i) => conform(batch.column(i), f.data_type()),
                    Slot::Widened(i) => widen(batch.column(i), f.data_type()),
                    Slot::Null => new_null_array(f.data_type(), rows),
                })
                .collect()
        };
        crate::batch_of(&self.target, columns, rows)
    }
}

/// Binds `target`'s columns to `message` in `schema`: by name (or path), then by the reference
/// field's number; the decoder of the fields found and where each column comes from.
fn bind(
    target: &TargetColumns,
    schema_id: u32,
    schema: &ProtoSchema,
    message: &str,
) -> Result<(ProtoDecoder, Vec<Slot>), EvolutionError> {
    let plan_err = |source| EvolutionError::Plan {
        schema_id,
        source: Arc::new(source),
    };
    let desc = crate::protobuf::find_message(schema, message).map_err(plan_err)?;
    let name = desc.full_name().to_string();
    let trial = ProtoDecoderOptions {
        batch_size: 1,
        ..target.options
    };
    let mut decoded: Vec<ColumnSpec> = Vec::new();
    let mut slots = Vec::new();
    for (c, (old_type, number)) in target.columns.iter().zip(&target.reference) {
        // By name (or path); a top-level field renamed keeps its number.
        let column = match resolve(&desc, c) {
            Some(_) => c.clone(),
            None => match number.and_then(|n| desc.get_field(n)) {
                Some(f) => c.clone().with_path(f.name()),
                None => {
                    slots.push(Slot::Null);
                    continue;
                }
            },
        };
        let fits = |t: &DataType| {
            let mut probe = column.clone();
            probe.data_type = t.clone();
            ProtoDecoder::new(schema, &name, &[probe], trial).is_ok()
        };
        if fits(&c.data_type) {
            slots.push(Slot::Direct(decoded.len()));
            decoded.push(column);
        } else if let Some(narrow) = narrower(&c.data_type).iter().find(|t| fits(t)) {
            slots.push(Slot::Widened(decoded.len()));
            let mut col = column;
            col.data_type = narrow.clone();
            decoded.push(col);
        } else if schema_id == target.reference_id {
            // The declared type does not fit the schema declared against: the plain
            // decoder's error names the field and both types.
            let err = ProtoDecoder::new(schema, &name, &[column], trial)
                .err()
                .unwrap_or_else(|| PlanError::Options("no plan".into()));
            return Err(plan_err(err));
        } else {
            let new_type = resolve(&desc, &column)
                .map(|f| type_name(&f))
                .unwrap_or_else(|| "another type".into());
            return Err(EvolutionError::Incompatible {
                column: c.name.clone(),
                old_id: target.reference_id,
                old_type: old_type.clone().unwrap_or_else(|| "no such field".into()),
                new_id: schema_id,
                new_type,
                column_type: c.data_type.to_string(),
            });
        }
    }
    let decoder = ProtoDecoder::new(schema, &name, &decoded, target.options).map_err(plan_err)?;
    Ok((decoder, slots))
}

/// The plans of schema ids, as the engine keeps them (fetched from the registry, compiled once,
/// cached). Asked only when a message's schema id or message-index list differs from the
/// previous message's.
pub trait PlanSource: Send + Sync {
    /// The plan for `schema_id` with the message-index list `indexes` (as on the wire). The
    /// error becomes the message's [`DecodeError`] (its kind [`DecodeErrorKind::SchemaId`]).
    fn plan(&self, schema_id: u32, indexes: &[u8]) -> Result<Arc<SchemaPlan>, SchemaIdError>;
}

/// A plan this decoder has used, with a decoder of its own (holding that plan's rows).
struct Local {
    plan: Arc<SchemaPlan>,
    decoder: ProtoDecoder,
}

/// Decodes registry-framed protobuf messages into the declared columns, following each
/// message's schema id. One per partition; see the module documentation.
///
/// Each distinct plan used keeps its own decoder and rows (schema ids whose plans decode alike,
/// as versions that differ only in fields nobody reads, share one); a switch of plan only
/// records where the run of the previous plan ended. A batch of one plan's rows is that
/// decoder's batch as it is; rows of several plans are put back in message order when the
/// batch is taken.
pub struct FramedProtoDecoder {
    source: Arc<dyn PlanSource>,
    schema: SchemaRef,
    batch_size: usize,
    /// The schema ids and index lists met, and the index in `locals` of their decoder.
    keys: Vec<(u32, Vec<u8>, usize)>,
    locals: Vec<Local>,
    /// The index in `locals` of the previous message's plan, and its id when its index list
    /// is `[0]` (`u64::MAX`: none; `u64::MAX - 1`: another list, always the slow path).
    current: usize,
    current_id: u64,
    /// Another `[0]` schema id whose plan decodes with the current decoder (the previous one
    /// met, when it shares it): two such versions interleaved both take the fast path.
    sibling_id: u64,
    /// The current frame's header (magic byte, id, index list) when its index list is not
    /// `[0]` and it is at most 16 bytes; `frame_len` 0: none. A message that starts with the
    /// same bytes has the same framing (varints are prefix-free), so it takes the current
    /// decoder without parsing its framing again.
    frame: [u8; 16],
    frame_len: usize,
    /// The runs of this batch before the current one: (plan, rows).
    runs: Vec<(usize, usize)>,
    /// The current plan's buffered rows when its run began.
    run_start: usize,
}

impl fmt::Debug for FramedProtoDecoder {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("FramedProtoDecoder")
            .field("schema_ids", &self.keys.len())
            .field("plans", &self.locals.len())
            .field("current_id", &self.current_id)
            .finish()
    }
}

impl FramedProtoDecoder {
    /// A decoder of batches of `schema` (a [`TargetColumns::schema`]) with plans from `source`.
    pub fn new(source: Arc<dyn PlanSource>, schema: SchemaRef, batch_size: usize) -> Self {
        Self {
            source,
            schema,
            batch_size: batch_size.max(1),
            keys: Vec::new(),
            locals: Vec::new(),
            current: 0,
            current_id: u64::MAX,
            sibling_id: u64::MAX,
            frame: [0; 16],
            frame_len: 0,
            runs: Vec::new(),
            run_start: 0,
        }
    }

    /// The message's schema id or index list differs from the previous message's: find (or
    /// fetch) its plan and make it current.
    #[cold]
    #[inline(never)]
    fn switch(&mut self, message: &[u8]) -> Result<usize, DecodeError> {
        let framing = parse_framing(message, true)?;
        let found = self
            .keys
            .iter()
            .find(|(id, idx, _)| *id == framing.schema_id && idx == framing.indexes)
            .map(|k| k.2);
        let index = match found {
            Some(i) => i,
            None => {
                let plan = self
                    .source
                    .plan(framing.schema_id, framing.indexes)
                    .map_err(|e| DecodeError::new(1, DecodeErrorKind::SchemaId(Box::new(e))))?;
                let index = match self.locals.iter().position(|l| l.plan.decodes_as(&plan)) {
                    Some(i) => i,
                    None => {
                        self.locals.push(Local {
                            decoder: plan.decoder.fresh(),
                            plan,
                        });
                        self.locals.len() - 1
                    }
                };
                self.keys
                    .push((framing.schema_id, framing.indexes.to_vec(), index));
                index
            }
        };
        if index != self.current {
            self.end_run();
            self.current = index;
            self.run_start = self.locals[index].decoder.buffered_rows();
            self.sibling_id = u64::MAX;
        } else if self.current_id < u64::MAX - 1 {
            // The same decoder under another id: keep the previous id on the fast path too.
            self.sibling_id = self.current_id;
        }
        // The `[0]` list (one byte, 0) takes the id comparison in `decode`; another list up to
        // 16 header bytes takes the header comparison.
        self.frame_len = 0;
        self.current_id = if framing.indexes == [0] {
            u64::from(framing.schema_id)
        } else {
            if let Some(header) = message.get(..framing.payload_at).filter(|h| h.len() <= 16) {
                self.frame[..header.len()].copy_from_slice(header);
                self.frame_len = header.len();
            }
            u64::MAX - 1
        };
        Ok(framing.payload_at)
    }

    /// Records the current plan's run (the rows it buffered since the run began).
    fn end_run(&mut self) {
        if let Some(l) = self.locals.get(self.current) {
            let rows = l.decoder.buffered_rows() - self.run_start;
            if rows > 0 {
                self.runs.push((self.current, rows));
            }
        }
    }

    #[cold]
    #[inline(never)]
    fn decode_slow(&mut self, message: &[u8]) -> Result<(), DecodeError> {
        let at = self.switch(message)?;
        let local = &mut self.locals[self.current];
        local.decoder.decode(&message[at..]).map_err(|mut e| {
            e.offset += at;
            e
        })
    }
}

impl Decoder for FramedProtoDecoder {
    fn schema(&self) -> SchemaRef {
        Arc::clone(&self.schema)
    }

    #[inline]
    fn decode(&mut self, message: &[u8]) -> Result<(), DecodeError> {
        // The common frame: magic 0, the id, and the one-byte `[0]` index list.
        if message.len() >= 6 && message[0] == 0 && message[5] == 0 {
            let id = u32::from_be_bytes([message[1], message[2], message[3], message[4]]);
            let id = u64::from(id);
            if id == self.current_id || id == self.sibling_id {
                if let Some(local) = self.locals.get_mut(self.current) {
                    return local.decoder.decode(&message[6..]).map_err(|mut e| {
                        e.offset += 6;
                        e
                    });
                }
            }
        }
        let n = self.frame_len;
        if n > 0 && message.get(..n) == Some(&self.frame[..n]) {
            if let Some(local) = self.locals.get_mut(self.current) {
                return local.decoder.decode(&message[n..]).map_err(|mut e| {
                    e.offset += n;
                    e
                });
            }
        }
        self.decode_slow(message)
    }

    fn buffered_rows(&self) -> usize {
        match self.locals.as_slice() {
            [one] => one.decoder.buffered_rows(),
            all => all.iter().map(|l| l.decoder.buffered_rows()).sum(),
        }
    }

    fn batch_size(&self) -> usize {
        self.batch_size
    }

    fn flush(&mut self) -> Option<RecordBatch> {
        self.end_run();
        let runs = std::mem::take(&mut self.runs);
        self.run_start = 0;
        let &(first, _) = runs.first()?;
        if runs.iter().all(|&(l, _)| l == first) {
            // One plan's rows: its batch as it is.
            let l = &mut self.locals[first];
            let b = l.decoder.flush()?;
            return Some(l.plan.assemble(b));
        }
        // Rows of several plans: each plan's batch, then the rows in message order.
        let mut batches: Vec<RecordBatch> = Vec::new();
        let mut slot = vec![usize::MAX; self.locals.len()];
        for &(l, _) in &runs {
            if slot[l] == usize::MAX {
                let local = &mut self.locals[l];
                if let Some(b) = local.decoder.flush() {
                    slot[l] = batches.len();
                    batches.push(local.plan.assemble(b));
                }
            }
        }
        let rows: usize = runs.iter().map(|r| r.1).sum();
        let mut next = vec![0usize; self.locals.len()];
        let result = if rows / runs.len() >= 64 {
            // Long runs (a schema change now and then): the runs' slices concatenated, a copy
            // by whole buffers.
            let slices: Vec<RecordBatch> = runs
                .iter()
                .map(|&(l, n)| {
                    let b = batches[slot[l]].slice(next[l], n);
                    next[l] += n;
                    b
                })
                .collect();
            arrow_select::concat::concat_batches(&self.schema, &slices)
        } else {
            // Short runs (producers of two versions interleaved): row by row.
            let mut indices = Vec::with_capacity(rows);
            for &(l, n) in &runs {
                let b = slot[l];
                indices.extend((next[l]..next[l] + n).map(|r| (b, r)));
                next[l] += n;
            }
            let refs: Vec<&RecordBatch> = batches.iter().collect();
            arrow_select::interleave::interleave_record_batch(&refs, &indices)
        };
        match result {
            Ok(b) => Some(b),
            Err(e) => panic!("weir-codec built batches of different schemas (a bug): {e}"),
        }
    }
}

/// The field a column binds to (its path, its name at the top, or the one nested singular
/// field of that name), for type names and presence; the decoder's own binding decides the rest.
fn resolve(desc: &MessageDescriptor, c: &ColumnSpec) -> Option<FieldDescriptor> {
    if let Some(path) = &c.path {
        let mut msg = desc.clone();
        let mut parts = path.split('.').peekable();
        while let Some(p) = parts.next() {
            let f = msg.get_field_by_name(p)?;
            if parts.peek().is_none() {
                return Some(f);
            }
            match f.kind() {
                Kind::Message(m) if !f.is_list() => msg = m,
                _ => return None,
            }
        }
        return None;
    }
    if let Some(f) = desc.get_field_by_name(&c.name) {
        return Some(f);
    }
    // Breadth first through singular sub-messages, as the decoder's own search.
    let mut level = vec![desc.clone()];
    let mut seen = vec![desc.full_name().to_string()];
    for _ in 0..8 {
        let mut next = Vec::new();
        let mut hits = Vec::new();
        for m in &level {
            for f in m.fields() {
                if let Kind::Message(sub) = f.kind() {
                    if f.is_list() || f.is_map() {
                        continue;
                    }
                    if let Some(hit) = sub.get_field_by_name(&c.name) {
                        hits.push(hit);
                    }
                    if !seen.iter().any(|s| s == sub.full_name()) {
                        seen.push(sub.full_name().to_string());
                        next.push(sub);
                    }
                }
            }
        }
        if !hits.is_empty() {
            return hits.into_iter().next();
        }
        if next.is_empty() {
            break;
        }
        level = next;
    }
    None
}

/// A field's type as a `.proto` file spells it.
fn type_name(f: &FieldDescriptor) -> String {
    let kind = |k: &Kind| match k {
        Kind::Message(m) => m.full_name().to_string(),
        Kind::Enum(e) => e.full_name().to_string(),
        other => format!("{other:?}").to_ascii_lowercase(),
    };
    if f.is_map() {
        if let Kind::Message(entry) = f.kind() {
            return format!(
                "map<{}, {}>",
                kind(&entry.map_entry_key_field().kind()),
                kind(&entry.map_entry_value_field().kind())
            );
        }
    }
    if f.is_list() {
        format!("repeated {}", kind(&f.kind()))
    } else {
        kind(&f.kind())
    }
}

/// The narrower Arrow types a column of type `t` also accepts (widened per batch).
fn narrower(t: &DataType) -> &'static [DataType] {
    match t {
        DataType::Int64 => &[DataType::Int32, DataType::UInt32],
        DataType::UInt64 => &[DataType::UInt32],
        DataType::Float64 => &[DataType::Float32],
        _ => &[],
    }
}

/// Widens a decoded column to `target` (one of the pairs of [`narrower`]).
fn widen(a: &ArrayRef, target: &DataType) -> ArrayRef {
    match (a.data_type(), target) {
        (DataType::Int32, DataType::Int64) => Arc::new(
            a.as_primitive::<Int32Type>()
                .unary::<_, Int64Type>(i64::from),
        ),
        (DataType::UInt32, DataType::Int64) => Arc::new(
            a.as_primitive::<UInt32Type>()
                .unary::<_, Int64Type>(i64::from),
        ),
        (DataType::UInt32, DataType::UInt64) => Arc::new(
            a.as_primitive::<UInt32Type>()
                .unary::<_, UInt64Type>(u64::from),
        ),
        (DataType::Float32, DataType::Float64) => Arc::new(
            a.as_primitive::<Float32Type>()
                .unary::<_, Float64Type>(f64::from),
        ),
        _ => conform(a, target),
    }
}

/// `f` with every nested field nullable, except what Arrow requires not to be (a map's
/// entries and keys); `nullable` for `f` itself.
fn loosen_field(f: &Field, nullable: bool) -> Field {
    Field::new(f.name(), loosen(f.data_type()), nullable).with_metadata(f.metadata().clone())
}

fn loosen(t: &DataType) -> DataType {
    match t {
        DataType::Struct(fields) => DataType::Struct(
            fields
                .iter()
                .map(|f| loosen_field(f, true))
                .collect::<Fields>(),
        ),
        DataType::List(f) => DataType::List(Arc::new(loosen_field(f, true))),
        DataType::LargeList(f) => DataType::LargeList(Arc::new(loosen_field(f, true))),
        DataType::Map(entries, sorted) => {
            let DataType::Struct(kv) = entries.data_type() else {
                return t.clone();
            };
            let kv: Fields = kv
                .iter()
                .enumerate()
                .map(|(i, f)| loosen_field(f, i != 0))
                .collect();
            DataType::Map(
                Arc::new(Field::new(entries.name(), DataType::Struct(kv), false)),
                *sorted,
            )
        }
        other => other.clone(),
    }
}

/// `a` relabelled as `target`, a type that differs from its own at most in the nullability of
/// nested fields (loosened), so nothing is copied or checked beyond lengths.
fn conform(a: &ArrayRef, target: &DataType) -> ArrayRef {
    if a.data_type() == target {
        return Arc::clone(a);
    }
    let built: Result<ArrayRef, arrow_schema::ArrowError> = match target {
        DataType::Struct(fields) => {
            let s = a.as_struct();
            let children = s
                .columns()
                .iter()
                .zip(fields)
                .map(|(c, f)| conform(c, f.data_type()))
                .collect();
            StructArray::try_new(fields.clone(), children, s.nulls().cloned())
                .map(|x| Arc::new(x) as ArrayRef)
        }
        DataType::List(f) => {
            let l = a.as_list::<i32>();
            ListArray::try_new(
                Arc::clone(f),
                l.offsets().clone(),
                conform(l.values(), f.data_type()),
                l.nulls().cloned(),
            )
            .map(|x| Arc::new(x) as ArrayRef)
        }
        DataType::Map(entries, sorted) => {
            let m = a.as_map();
            let e: ArrayRef = Arc::new(m.entries().clone());
            let e = conform(&e, entries.data_type());
            MapArray::try_new(
                Arc::clone(entries),
                m.offsets().clone(),
                e.as_struct().clone(),
                m.nulls().cloned(),
                *sorted,
            )
            .map(|x| Arc::new(x) as ArrayRef)
        }
        _ => Err(arrow_schema::ArrowError::SchemaError(format!(
            "{} is not {target}",
            a.data_type()
        ))),
    };
    match built {
        Ok(x) => x,
        Err(e) => panic!("weir-codec could not relabel a column (a bug in weir): {e}"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const V1: &str = r#"syntax = "proto3"; package ex;
        message Base { string ticker = 1; }
        message Quote { Base base = 1; int32 size = 2; double price = 3; string venue = 4; }"#;
    const V2: &str = r#"syntax = "proto3"; package ex;
        message Base { string ticker = 1; }
        message Quote { Base base = 1; int64 size = 2; double price = 3; bool halted = 5; }"#;
    const V3: &str = r#"syntax = "proto3"; package ex;
        message Base { string ticker = 1; }
        message Quote { Base base = 1; string size = 2; double price = 3; }"#;

    fn schema(text: &str) -> ProtoSchema {
        ProtoSchema::from_sources(&[("q.proto", text)], "q.proto").unwrap()
    }

    fn columns() -> Vec<ColumnSpec> {
        vec![
            ColumnSpec::new("ticker", DataType::Utf8),
            ColumnSpec::new("size", DataType::Int64),
            ColumnSpec::new("price", DataType::Float64),
            ColumnSpec::new("venue", DataType::Utf8),
        ]
    }

    struct Fixed(Vec<(u32, Arc<SchemaPlan>)>);

    impl PlanSource for Fixed {
        fn plan(&self, id: u32, _indexes: &[u8]) -> Result<Arc<SchemaPlan>, SchemaIdError> {
            self.0
                .iter()
                .find(|(i, _)| *i == id)
                .map(|(_, p)| Arc::clone(p))
                .ok_or_else(|| SchemaIdError::unavailable(id, "the test's plans", "not registered"))
        }
    }

    /// The framing a sink writes is the one a source reads: the id and the message indexes of
    /// a top-level message, a later one, and a nested one come back, as does the message.
    #[test]
    fn registry_prefix_is_what_parse_framing_reads() {
        let s = ProtoSchema::from_sources(
            &[(
                "n.proto",
                r#"syntax = "proto3"; package n;
                message A { int64 x = 1; }
                message B { message C { int64 y = 1; } message D { message E { int64 z = 1; } } }"#,
            )],
            "n.proto",
        )
        .unwrap();
        for (message, indexes) in [
            ("n.A", vec![0]),
            ("n.B", vec![1]),
            ("n.B.C", vec![1, 0]),
            ("n.B.D.E", vec![1, 1, 0]),
        ] {
            let found = indexes_for_message(&s, "n.proto", message).unwrap();
            assert_eq!(found, indexes, "{message}");
            let mut framed = registry_prefix(70_000, &found);
            let payload_at = framed.len();
            framed.extend_from_slice(b"payload");
            let f = parse_framing(&framed, true).unwrap();
            assert_eq!(
                (f.schema_id, f.payload_at),
                (70_000, payload_at),
                "{message}"
            );
            assert_eq!(f.index_path(), indexes, "{message}");
            assert_eq!(
                message_for_indexes(&s, "n.proto", &f.index_path()).unwrap(),
                message
            );
        }
        assert_eq!(indexes_for_message(&s, "n.proto", "n.Missing"), None);
    }

    fn frame(id: u32, payload: &[u8]) -> Vec<u8> {
        let mut m = vec![0];
        m.extend_from_slice(&id.to_be_bytes());
        m.push(0);
        m.extend_from_slice(payload);
        m
    }

    #[test]
    fn plans_follow_the_schema_id_in_one_batch() {
        let v1 = schema(V1);
        // Declared against v1 (int32 size) with a BIGINT column: v1 itself widens.
        let target = TargetColumns::new(&columns(), 1, &v1, "ex.Quote", Default::default());
        assert_eq!(
            target.unwrap().schema().field(1).data_type(),
            &DataType::Int64
        );
        // Declared against v2, which has no venue: a mistake, named.
        let target = TargetColumns::new(&columns(), 2, &schema(V2), "ex.Quote", Default::default());
        let Err(e) = target else {
            panic!("venue is not in v2")
        };
        assert!(e.to_string().contains("venue"), "{e}");
        let cols: Vec<ColumnSpec> = columns().into_iter().take(3).collect();
        let target =
            TargetColumns::new(&cols, 2, &schema(V2), "ex.Quote", Default::default()).unwrap();
        let p1 = Arc::new(SchemaPlan::compile(&target, 1, &v1, "ex.Quote").unwrap());
        assert_eq!(p1.widened_columns(), 1);
        let p2 = Arc::new(SchemaPlan::compile(&target, 2, &schema(V2), "ex.Quote").unwrap());
        let err = SchemaPlan::compile(&target, 3, &schema(V3), "ex.Quote").unwrap_err();
        let text = err.to_string();
        for needle in ["'size'", "schema id 2 has int64", "schema id 3 has string"] {
            assert!(text.contains(needle), "{text}");
        }
        let source = Arc::new(Fixed(vec![(1, p1), (2, p2)]));
        let mut d = FramedProtoDecoder::new(source, target.schema(), 8192);
        // v1: base{ticker "A"}, size 7, price 1.5; v2: base{ticker "B"}, size 2^40.
        let m1 = frame(
            1,
            &[10, 3, 10, 1, b'A', 16, 7, 25, 0, 0, 0, 0, 0, 0, 0xF8, 0x3F],
        );
        let m2 = frame(
            2,
            &[10, 3, 10, 1, b'B', 16, 0x80, 0x80, 0x80, 0x80, 0x80, 0x20],
        );
        d.decode(&m1).unwrap();
        d.decode(&m2).unwrap();
        d.decode(&m1).unwrap();
        // An id without a plan fails the message with the plan source's error as its cause.
        let err = d.decode(&frame(9, &[])).unwrap_err();
        assert!(err.to_string().contains("schema id 9"), "{err}");
        assert!(matches!(
            &err.kind,
            DecodeErrorKind::SchemaId(e) if matches!(**e, SchemaIdError::Unavailable { schema_id: 9, .. })
        ));
        let cause = std::error::Error::source(&err).and_then(std::error::Error::source);
        assert_eq!(
            cause.map(ToString::to_string).as_deref(),
            Some("not registered")
        );
        assert_eq!(d.buffered_rows(), 3);
        let b = d.flush().unwrap();
        assert_eq!(b.num_rows(), 3);
        let size = b.column(1).as_primitive::<Int64Type>();
        assert_eq!(size.values().to_vec(), vec![7, 1 << 40, 7]);
        let ticker = b.column(0).as_string::<i32>();
        assert_eq!(ticker.value(1), "B");
    }

    #[test]
    fn versions_that_differ_in_unread_fields_share_one_decoder() {
        let cols: Vec<ColumnSpec> = columns().into_iter().take(3).collect();
        let v2 = schema(V2);
        let target = TargetColumns::new(&cols, 2, &v2, "ex.Quote", Default::default()).unwrap();
        // v2 with one more field nobody reads, and a field renumbered that nobody reads.
        let added = V2.replace("bool halted = 5;", "bool halted = 6; string note = 9;");
        let p2 = Arc::new(SchemaPlan::compile(&target, 2, &v2, "ex.Quote").unwrap());
        let p4 = Arc::new(SchemaPlan::compile(&target, 4, &schema(&added), "ex.Quote").unwrap());
        let p1 = Arc::new(SchemaPlan::compile(&target, 1, &schema(V1), "ex.Quote").unwrap());
        assert!(p4.decodes_as(&p2) && p2.decodes_as(&p4));
        assert!(!p1.decodes_as(&p2), "v1 widens size: another plan");
        let source = Arc::new(Fixed(vec![(1, p1), (2, p2), (4, p4)]));
        let mut d = FramedProtoDecoder::new(source, target.schema(), 8192);
        let m2 = frame(2, &[10, 3, 10, 1, b'A', 16, 5]);
        let m4 = frame(4, &[10, 3, 10, 1, b'B', 16, 6, 74, 1, b'x']);
        let m1 = frame(1, &[10, 3, 10, 1, b'C', 16, 7]);
        for m in [&m2, &m4, &m2, &m4, &m1, &m4] {
            d.decode(m).unwrap();
        }
        assert_eq!(d.locals.len(), 2, "ids 2 and 4 share a decoder");
        let b = d.flush().unwrap();
        let size = b.column(1).as_primitive::<Int64Type>();
        assert_eq!(size.values().to_vec(), vec![5, 6, 5, 6, 7, 6]);
    }

    #[test]
    fn a_message_index_list_other_than_0_keeps_its_plan_without_parsing_again() {
        let cols: Vec<ColumnSpec> = columns().into_iter().take(3).collect();
        let v2 = schema(V2);
        let target = TargetColumns::new(&cols, 2, &v2, "ex.Quote", Default::default()).unwrap();
        let p1 = Arc::new(SchemaPlan::compile(&target, 1, &schema(V1), "ex.Quote").unwrap());
        let p2 = Arc::new(SchemaPlan::compile(&target, 2, &v2, "ex.Quote").unwrap());
        let source = Arc::new(Fixed(vec![(1, p1), (2, p2)]));
        let mut d = FramedProtoDecoder::new(source, target.schema(), 8192);
        // The index list [1]: count 1 and index 1, both zigzag varints (2, 2).
        let indexed = |id: u32, payload: &[u8]| {
            let mut m = vec![0];
            m.extend_from_slice(&id.to_be_bytes());
            m.extend_from_slice(&[2, 2]);
            m.extend_from_slice(payload);
            m
        };
        let a = indexed(2, &[10, 3, 10, 1, b'A', 16, 5]);
        let b = indexed(2, &[10, 3, 10, 1, b'B', 16, 6]);
        let c = indexed(1, &[10, 3, 10, 1, b'C', 16, 7]);
        let z = frame(2, &[10, 3, 10, 1, b'Z', 16, 8]);
        d.decode(&a).unwrap();
        assert_eq!(
            d.frame_len, 7,
            "magic, id and [1] are the header to compare"
        );
        for m in [&b, &a, &c, &c, &z, &b] {
            d.decode(m).unwrap();
        }
        // A truncated payload after the same header: the error's offset counts the header.
        let err = d.decode(&indexed(2, &[10, 9, 10])).unwrap_err();
        assert_eq!(err.offset, 7 + 1, "{err}");
        let batch = d.flush().unwrap();
        let ticker = batch.column(0).as_string::<i32>();
        let tickers: Vec<&str> = (0..batch.num_rows()).map(|i| ticker.value(i)).collect();
        assert_eq!(tickers, ["A", "B", "A", "C", "C", "Z", "B"]);
        let size = batch.column(1).as_primitive::<Int64Type>();
        assert_eq!(size.values().to_vec(), vec![5, 6, 5, 7, 7, 8, 6]);
    }

    #[test]
    fn a_removed_field_reads_as_nulls() {
        let cols = columns();
        let target = TargetColumns::new(
            &[cols[0].clone(), cols[3].clone()],
            1,
            &schema(V1),
            "ex.Quote",
            Default::default(),
        )
        .unwrap();
        let p2 = SchemaPlan::compile(&target, 2, &schema(V2), "ex.Quote").unwrap();
        assert_eq!(p2.missing_columns(), 1);
        let source = Arc::new(Fixed(vec![(2, Arc::new(p2))]));
        let mut d = FramedProtoDecoder::new(source, target.schema(), 8192);
        d.decode(&frame(2, &[10, 3, 10, 1, b'B'])).unwrap();
        let b = d.flush().unwrap();
        assert!(b.column(1).is_null(0));
        assert_eq!(b.column(0).as_string::<i32>().value(0), "B");
    }

    #[test]
    fn message_indexes_pick_nested_messages() {
        let s = schema(
            r#"syntax = "proto3"; package ex; message A { message B { int32 x = 1; } }
               message C { int32 y = 1; }"#,
        );
        assert_eq!(message_for_indexes(&s, "q.proto", &[]).unwrap(), "ex.A");
        assert_eq!(message_for_indexes(&s, "q.proto", &[1]).unwrap(), "ex.C");
        assert_eq!(
            message_for_indexes(&s, "q.proto", &[0, 0]).unwrap(),
            "ex.A.B"
        );
        assert!(message_for_indexes(&s, "q.proto", &[2]).is_err());
        let f = parse_framing(&[0, 0, 0, 0, 5, 4, 2, 0, 0xAA], true).unwrap();
        assert_eq!((f.schema_id, f.payload_at), (5, 8));
        assert_eq!(f.index_path(), vec![1, 0]);
    }
}
