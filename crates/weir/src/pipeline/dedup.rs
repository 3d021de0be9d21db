//! The dedup stage: each batch's rows whose key the state has seen are dropped.

use arrow::array::RecordBatch;
use arrow::compute::filter_record_batch;
use weir_dedup::StateStore;

use crate::error::{SourceError, SourceErrorKind};

/// Drops the duplicate rows of `batch`.
pub(crate) fn dedup(
    store: &mut StateStore,
    batch: RecordBatch,
    source: &str,
) -> Result<RecordBatch, SourceError> {
    match store
        .dedup(&batch)
        .map_err(|e| SourceError::new(source, e))?
    {
        None => Ok(batch),
        Some(mask) => filter_record_batch(&batch, &mask).map_err(|e| {
            SourceError::new(
                source,
                SourceErrorKind::Thread(format!("cannot drop the duplicate rows: {e}")),
            )
        }),
    }
}
