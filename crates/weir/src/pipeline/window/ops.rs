//! The stateless steps of a continuous query: DataFusion plans them (type coercion, expression
//! simplification, projection pushdown) and weir evaluates the physical expressions it planned,
//! batch by batch. Nothing is buffered between batches, so when a step of the pipeline ends
//! every row it took has gone through.

use std::sync::Arc;

use arrow::array::{AsArray, RecordBatch, RecordBatchOptions};
use arrow::compute::filter_record_batch;
use arrow::datatypes::SchemaRef;
use datafusion::error::Result;
use datafusion::physical_expr::PhysicalExpr;

use super::join::StaticJoin;

/// One stateless step.
pub(crate) enum Op {
    /// Keeps the rows the predicate is true for, then keeps `projection`'s columns.
    Filter {
        /// The predicate.
        predicate: Arc<dyn PhysicalExpr>,
        /// The columns kept after filtering, when the plan folded a projection in.
        projection: Option<Vec<usize>>,
    },
    /// Computes new columns.
    Project {
        /// One expression a column.
        exprs: Vec<Arc<dyn PhysicalExpr>>,
        /// The output schema.
        schema: SchemaRef,
    },
    /// Joins a static table.
    Join(Arc<StaticJoin>),
}

impl Op {
    /// Applies the step to one batch.
    pub(crate) fn apply(&self, batch: RecordBatch) -> Result<RecordBatch> {
        match self {
            Self::Filter {
                predicate,
                projection,
            } => {
                let mask = predicate.evaluate(&batch)?.into_array(batch.num_rows())?;
                let kept = filter_record_batch(&batch, mask.as_boolean())?;
                Ok(match projection {
                    Some(p) => kept.project(p)?,
                    None => kept,
                })
            }
            Self::Project { exprs, schema } => {
                let columns = exprs
                    .iter()
                    .map(|e| e.evaluate(&batch)?.into_array(batch.num_rows()))
                    .collect::<Result<Vec<_>>>()?;
                let options = RecordBatchOptions::new().with_row_count(Some(batch.num_rows()));
                Ok(RecordBatch::try_new_with_options(
                    Arc::clone(schema),
                    columns,
                    &options,
                )?)
            }
            Self::Join(join) => join.probe(&batch),
        }
    }
}

/// Applies `ops` in order; `None` when no row is left.
pub(crate) fn apply_all(ops: &[Op], mut batch: RecordBatch) -> Result<Option<RecordBatch>> {
    for op in ops {
        if batch.num_rows() == 0 {
            return Ok(None);
        }
        batch = op.apply(batch)?;
    }
    Ok((batch.num_rows() > 0).then_some(batch))
}
