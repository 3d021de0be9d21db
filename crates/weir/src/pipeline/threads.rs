//! The two ways a pipeline puts a reader on a thread of its own: a DataFusion partition stream
//! fed through a small bounded channel ([`thread_stream`]), and a read-ahead thread feeding a
//! body that runs on the caller's thread ([`with_read_ahead`]). Both bound what waits in
//! memory: a slow consumer slows the reader instead of piling up batches.

use std::time::Duration;

use arrow::array::RecordBatch;
use arrow::datatypes::SchemaRef;
use datafusion::error::{DataFusionError, Result as DfResult};
use datafusion::execution::SendableRecordBatchStream;
use datafusion::physical_plan::stream::RecordBatchStreamAdapter;

use super::reader::{Decoded, Next, PositionedReader};
use crate::error::{SourceError, SourceErrorKind};

/// A partition stream fed by `read`, which runs on a thread named `name` (it blocks on sockets
/// or files) and sends batches through a channel of two. An error `read` returns ends the
/// stream.
pub(crate) fn thread_stream(
    name: String,
    schema: SchemaRef,
    read: impl FnOnce(&tokio::sync::mpsc::Sender<DfResult<RecordBatch>>) -> DfResult<()>
        + Send
        + 'static,
) -> SendableRecordBatchStream {
    let (tx, rx) = tokio::sync::mpsc::channel::<DfResult<RecordBatch>>(2);
    let spawned = std::thread::Builder::new().name(name).spawn(move || {
        if let Err(e) = read(&tx) {
            // The query may have stopped reading already; then nobody needs the error.
            let _ = tx.blocking_send(Err(e));
        }
    });
    let stream = futures::stream::unfold((rx, spawned.err()), |(mut rx, spawn_error)| async move {
        if let Some(e) = spawn_error {
            let e = DataFusionError::External(Box::new(e));
            return Some((Err(e), (rx, None)));
        }
        rx.recv().await.map(|b| (b, (rx, None)))
    });
    Box::pin(RecordBatchStreamAdapter::new(schema, stream))
}

/// How many items the reading thread may run ahead: enough to cover a commit's short waits,
/// few enough that little decoded data waits in memory.
const READ_AHEAD: usize = 4;

/// What the reading thread read: what [`PositionedReader::next`] returned, the next position of
/// every partition as of it (what a commit after it records), and the batch's channel.
pub(crate) struct Read {
    /// The reader's answer.
    pub(crate) next: Next,
    /// Positions as of it.
    pub(crate) positions: Vec<(String, i64)>,
    /// The channel of a batch (see [`PositionedReader::channel`]).
    pub(crate) channel: usize,
}

/// One item of the reading thread.
pub(crate) type ReadItem = Result<Read, SourceError>;

/// Runs `reader` on a thread of its own (`weir-read-<source>`) and `body` on this one, fed the
/// reader's channels (see [`PositionedReader::channels`]) and its items in order. Reading and decoding then overlap dedup, the output and the commits
/// (measured on 2 cores, 5 M quotes from a file with 10% repeats into a sink: ipc 1.17 -> 1.05 s,
/// parquet 1.61 -> 1.29 s). When `body` returns, the reading thread stops at its next item.
pub(crate) fn with_read_ahead<T>(
    source: &str,
    mut reader: Box<dyn PositionedReader>,
    body: impl FnOnce(&[usize], &mut dyn FnMut() -> ReadItem) -> T,
) -> Result<T, SourceError> {
    let channels = reader.channels();
    std::thread::scope(|scope| {
        let (tx, rx) = std::sync::mpsc::sync_channel::<ReadItem>(READ_AHEAD);
        // Batches decoded inside a read come through here at once, in order with the rest.
        let out = tx.clone();
        reader.emit_to(Box::new(move |d: Decoded| {
            out.send(Ok(Read {
                next: Next::Batch(d.batch),
                positions: d.positions,
                channel: d.channel,
            }))
            .is_ok()
        }));
        std::thread::Builder::new()
            .name(format!("weir-read-{source}"))
            .spawn_scoped(scope, move || loop {
                let item = reader.next();
                let last = !matches!(item, Ok(Next::Batch(_) | Next::Idle));
                let idle = matches!(item, Ok(Next::Idle));
                let item = item.map(|next| Read {
                    next,
                    positions: reader.positions(),
                    channel: reader.channel(),
                });
                if tx.send(item).is_err() || last {
                    return;
                }
                if idle {
                    // Nothing to read now (follow mode): ask again shortly, not in a spin.
                    std::thread::sleep(reader.idle_wait().max(Duration::from_millis(20)));
                }
            })
            .map_err(|e| {
                SourceError::new(
                    source,
                    SourceErrorKind::Thread(format!("cannot start its reading thread: {e}")),
                )
            })?;
        let mut next = || {
            rx.recv().unwrap_or_else(|_| {
                Err(SourceError::new(
                    source,
                    SourceErrorKind::Thread("its reading thread stopped".into()),
                ))
            })
        };
        Ok(body(&channels, &mut next))
    })
}
