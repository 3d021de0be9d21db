//! The decode stage: one partition's messages into batches of a scan's columns. Each message is
//! decoded in place (a slice of the file block or of the Kafka fetch response), the source's
//! error policy is applied to a bad one, and the metadata columns are appended from the
//! message's position. Counters are kept in plain fields and published once per batch.

use std::sync::atomic::Ordering;
use std::sync::Arc;

use arrow::array::{ArrayRef, RecordBatch, RecordBatchOptions};
use arrow::datatypes::{Schema, SchemaRef};
use weir_codec::{strip_confluent, DecodeError, Decoder, PreparedDecoder};

use crate::error::{SourceError, SourceErrorKind};
use crate::pipeline::live_source::LiveSource;
use crate::source::meta::{MetaColumn, MetaKind, Position};
use crate::source::OnError;

/// Which value goes into each output column.
#[derive(Debug, Clone, Copy)]
enum Slot {
    Decoded(usize),
    Meta(usize),
}

/// What every partition of one scan shares: the decoder prepared for the scan's columns, the
/// metadata columns it reads, and the output schema.
pub(crate) struct ScanShape {
    prepared: Arc<dyn PreparedDecoder>,
    metas: Vec<MetaKind>,
    slots: Arc<[Slot]>,
    schema: SchemaRef,
}

impl ScanShape {
    /// The shape of a scan of `projection` (every column when `None`). Only the projected
    /// columns are decoded: the decoder skips the other fields unread.
    pub(crate) fn new(
        source: &LiveSource,
        projection: Option<&[usize]>,
    ) -> Result<Self, SourceError> {
        Self::with_hidden(source, projection, &[])
    }

    /// The same, with metadata columns `hidden` appended after the projection even if the
    /// source does not include them (a continuous query's positions of late rows).
    pub(crate) fn with_hidden(
        source: &LiveSource,
        projection: Option<&[usize]>,
        hidden: &[MetaKind],
    ) -> Result<Self, SourceError> {
        let all: Vec<usize> = (0..source.schema.fields().len()).collect();
        let projection = projection.unwrap_or(&all);
        let decoded_count = source.decoded_columns();
        let mut decoded = Vec::new();
        let mut metas = Vec::new();
        let mut slots = Vec::new();
        let mut fields = Vec::new();
        for &i in projection {
            fields.push(source.schema.field(i).clone());
            if i < decoded_count {
                slots.push(Slot::Decoded(decoded.len()));
                decoded.push(i);
            } else {
                slots.push(Slot::Meta(metas.len()));
                metas.push(source.includes[i - decoded_count].0);
            }
        }
        for &kind in hidden {
            fields.push(arrow::datatypes::Field::new(
                kind.default_name(),
                kind.data_type(),
                kind.nullable(),
            ));
            slots.push(Slot::Meta(metas.len()));
            metas.push(kind);
        }
        Ok(Self {
            prepared: source.prepared_for(&decoded)?,
            metas,
            slots: slots.into(),
            schema: Arc::new(Schema::new(fields)),
        })
    }

    /// The schema of the batches.
    pub(crate) fn schema(&self) -> &SchemaRef {
        &self.schema
    }
}

/// Counts kept between two publications.
#[derive(Debug, Default, Clone, Copy)]
struct Counts {
    messages: u64,
    bytes: u64,
    decoded: u64,
    skipped: u64,
    dead: u64,
}

/// The bytes of a bad container block kept for its dead letter, as for a bad frame.
pub(crate) const DEAD_LETTER_BYTES: usize = 64 << 10;

/// The part of a bad block a dead letter keeps.
fn kept(bytes: &[u8]) -> &[u8] {
    &bytes[..bytes.len().min(DEAD_LETTER_BYTES)]
}

/// Decodes one partition's messages into batches of its scan's shape.
pub(crate) struct SourceDecoder {
    source: Arc<LiveSource>,
    /// What the decoder was made from (a container file's schema makes another from it).
    prepared: Arc<dyn PreparedDecoder>,
    decoder: Box<dyn Decoder>,
    meta: Vec<MetaColumn>,
    slots: Arc<[Slot]>,
    schema: SchemaRef,
    // Kept here so the per-message check needs no call through the decoder's vtable.
    buffered: usize,
    batch_size: usize,
    counts: Counts,
    /// The partition whose messages are being counted (for the metrics); its counts are
    /// published when it changes and with each batch.
    partition: Option<Arc<crate::metrics::PartitionMetrics>>,
}

impl SourceDecoder {
    /// A decoder of its own for one partition of a scan of `shape`.
    pub(crate) fn new(source: &Arc<LiveSource>, shape: &ScanShape) -> Self {
        let decoder = shape.prepared.decoder();
        let batch_size = decoder.batch_size().max(1);
        Self {
            source: Arc::clone(source),
            prepared: Arc::clone(&shape.prepared),
            decoder,
            meta: shape.metas.iter().map(|&m| MetaColumn::new(m)).collect(),
            slots: Arc::clone(&shape.slots),
            schema: Arc::clone(&shape.schema),
            buffered: 0,
            batch_size,
            counts: Counts::default(),
            partition: None,
        }
    }

    /// Counts the next messages to `partition` (the readers call it when the partition or
    /// file changes, not per message).
    pub(crate) fn set_partition(&mut self, partition: &Arc<crate::metrics::PartitionMetrics>) {
        if self
            .partition
            .as_ref()
            .is_some_and(|p| Arc::ptr_eq(p, partition))
        {
            return;
        }
        self.publish();
        self.partition = Some(Arc::clone(partition));
    }

    /// The partition being counted.
    pub(crate) fn partition(&self) -> Option<&Arc<crate::metrics::PartitionMetrics>> {
        self.partition.as_ref()
    }

    /// The source this decodes for.
    pub(crate) fn source(&self) -> &Arc<LiveSource> {
        &self.source
    }

    /// Takes one message: decodes it, or applies the error policy. An error means the policy
    /// is `fail`: the rows decoded before the message are still buffered.
    #[inline]
    pub(crate) fn message(&mut self, value: &[u8], pos: &Position<'_>) -> Result<(), SourceError> {
        self.counts.messages += 1;
        self.counts.bytes += value.len() as u64;
        let (payload, header) = match self.source.settings.confluent {
            Some(indexes) => match strip_confluent(value, indexes) {
                Ok((p, _)) => (p, value.len() - p.len()),
                Err(e) => return self.bad(value, pos, e),
            },
            None => (value, 0),
        };
        match self.decoder.decode(payload) {
            Ok(()) => {
                self.counts.decoded += 1;
                self.buffered += 1;
                for m in &mut self.meta {
                    m.append(pos);
                }
                Ok(())
            }
            Err(mut e) => {
                e.offset += header;
                self.bad(value, pos, e)
            }
        }
    }

    /// Rows decoded and not yet flushed.
    pub(crate) fn buffered(&self) -> usize {
        self.buffered
    }

    /// Decodes the next values with the plan for a container file written with `header`'s
    /// schema. Nothing may be buffered: the plans do not share buffers.
    pub(crate) fn use_container(
        &mut self,
        header: &weir_codec::ContainerHeader,
    ) -> Result<(), SourceError> {
        let prepared = self.prepared.for_container(header).map_err(|source| {
            SourceError::new(
                &self.source.name,
                SourceErrorKind::Encoding {
                    encoding: self.source.settings.encoding.clone(),
                    source,
                },
            )
        })?;
        self.decoder = prepared.decoder();
        Ok(())
    }

    /// Takes one container block's (uncompressed) data: `count` values back to back, each a
    /// row. A value that does not decode drops the rest of the block under the error policy,
    /// since the values after it cannot be found; the rows before it stay. An error means the
    /// policy is `fail`.
    pub(crate) fn values(
        &mut self,
        data: &[u8],
        count: u64,
        pos: &Position<'_>,
    ) -> Result<(), SourceError> {
        // Values of zero bytes (a record of nulls) make the count unbounded by the data.
        if count > data.len() as u64 + (1 << 20) {
            let reason = format!("the block declares {count} values in {} bytes", data.len());
            return self.bad_frame(kept(data), pos, &reason);
        }
        self.counts.bytes += data.len() as u64;
        let mut at = 0usize;
        for i in 0..count {
            let rest = data.get(at..).unwrap_or_default();
            match self.decoder.decode_prefix(rest) {
                Ok(n) => {
                    at += n;
                    self.counts.messages += 1;
                    self.counts.decoded += 1;
                    self.buffered += 1;
                    for m in &mut self.meta {
                        m.append(pos);
                    }
                }
                Err(e) => {
                    let reason = format!(
                        "value {i} of the block's {count} (from byte {at} of its data): {e}; \
                         the block's values from there on are dropped"
                    );
                    return self.bad_frame(kept(rest), pos, &reason);
                }
            }
        }
        if at != data.len() {
            let reason = format!(
                "the block's {count} values end at byte {at} of its {}: the bytes after them \
                 are dropped (the block was not written with its file header's schema)",
                data.len()
            );
            return self.bad_frame(kept(data.get(at..).unwrap_or_default()), pos, &reason);
        }
        Ok(())
    }

    /// Takes one Kafka record (a null value, a tombstone, is a bad message).
    #[inline]
    pub(crate) fn record(&mut self, rec: &weir_kafka::Record<'_>) -> Result<(), SourceError> {
        let pos = Position::Kafka {
            topic: rec.topic,
            partition: rec.partition,
            offset: rec.offset,
            timestamp: rec.timestamp,
            key: rec.key,
            headers: rec.headers,
        };
        match rec.value {
            Some(value) => self.message(value, &pos),
            None => self.bad_frame(&[], &pos, "the record's value is null (a tombstone)"),
        }
    }

    /// Takes bytes that are not a message at all (a truncated or corrupt frame).
    pub(crate) fn bad_frame(
        &mut self,
        bytes: &[u8],
        pos: &Position<'_>,
        reason: &str,
    ) -> Result<(), SourceError> {
        self.counts.messages += 1;
        self.apply_policy(bytes, pos, &reason, |hint| SourceErrorKind::BadFrame {
            position: pos.to_string(),
            reason: reason.to_string(),
            hint,
        })
    }

    #[cold]
    fn bad(
        &mut self,
        value: &[u8],
        pos: &Position<'_>,
        error: DecodeError,
    ) -> Result<(), SourceError> {
        let text = error.to_string();
        self.apply_policy(value, pos, &text, move |hint| SourceErrorKind::BadMessage {
            position: pos.to_string(),
            error,
            hint,
        })
    }

    #[cold]
    fn apply_policy(
        &mut self,
        value: &[u8],
        pos: &Position<'_>,
        error: &dyn std::fmt::Display,
        fail: impl FnOnce(&'static str) -> SourceErrorKind,
    ) -> Result<(), SourceError> {
        match self.source.settings.on_error {
            OnError::Fail => {
                self.publish();
                Err(SourceError::new(
                    &self.source.name,
                    fail(self.source.bad_message_hint),
                ))
            }
            OnError::Skip => {
                self.counts.skipped += 1;
                Ok(())
            }
            OnError::DeadLetter => {
                if let Some(dl) = &self.source.settings.dead_letter {
                    dl.write(&self.source.name, pos, &error.to_string(), value)
                        .map_err(|source| {
                            SourceError::new(
                                &self.source.name,
                                SourceErrorKind::DeadLetter {
                                    path: dl.path().display().to_string(),
                                    source,
                                },
                            )
                        })?;
                }
                self.counts.dead += 1;
                Ok(())
            }
        }
    }

    /// True once a whole batch is buffered.
    #[inline]
    pub(crate) fn full(&self) -> bool {
        self.buffered >= self.batch_size
    }

    /// Every buffered row as a batch (none when nothing is buffered); publishes the counters.
    pub(crate) fn flush(&mut self) -> Result<Option<RecordBatch>, SourceError> {
        self.publish();
        self.buffered = 0;
        let Some(decoded) = self.decoder.flush() else {
            return Ok(None);
        };
        let rows = decoded.num_rows();
        let meta: Vec<ArrayRef> = self.meta.iter_mut().map(MetaColumn::finish).collect();
        let columns: Vec<ArrayRef> = self
            .slots
            .iter()
            .map(|s| match *s {
                Slot::Decoded(i) => Arc::clone(decoded.column(i)),
                Slot::Meta(j) => Arc::clone(&meta[j]),
            })
            .collect();
        let options = RecordBatchOptions::new().with_row_count(Some(rows));
        RecordBatch::try_new_with_options(Arc::clone(&self.schema), columns, &options)
            .map(Some)
            .map_err(|e| {
                SourceError::new(
                    &self.source.name,
                    SourceErrorKind::Encoding {
                        encoding: self.source.settings.encoding.clone(),
                        source: weir_codec::CodecError::Other(format!(
                            "the decoder's batch does not match its schema: {e}"
                        )),
                    },
                )
            })
    }

    fn publish(&mut self) {
        let c = std::mem::take(&mut self.counts);
        let s = &self.source.stats;
        s.messages.fetch_add(c.messages, Ordering::Relaxed);
        s.bytes.fetch_add(c.bytes, Ordering::Relaxed);
        s.decoded.fetch_add(c.decoded, Ordering::Relaxed);
        s.skipped.fetch_add(c.skipped, Ordering::Relaxed);
        s.dead_lettered.fetch_add(c.dead, Ordering::Relaxed);
        if let Some(p) = &self.partition {
            p.messages.fetch_add(c.messages, Ordering::Relaxed);
            p.bytes.fetch_add(c.bytes, Ordering::Relaxed);
            p.decoded.fetch_add(c.decoded, Ordering::Relaxed);
            p.skipped.fetch_add(c.skipped, Ordering::Relaxed);
            p.dead_lettered.fetch_add(c.dead, Ordering::Relaxed);
        }
    }
}
