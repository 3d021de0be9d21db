//! A join of a stream with a static table (a `CREATE TABLE`, or a source read once): the table
//! is read to its end once, when the query starts, and hashed on its join keys; each batch of
//! the stream then probes it. This is what DataFusion's hash join does with a bounded build
//! side, kept here so that a continuous query holds no rows between batches (its commits are
//! exact) and so that the same table serves every reader.
//!
//! The stream may be either side. Inner joins, outer joins that keep the stream's unmatched
//! rows, and semi and anti joins on the stream's side are supported; a join that would have to
//! wait for the end of the stream (keeping the table's unmatched rows) is refused when the
//! query is compiled.

use std::collections::HashMap;
use std::sync::Arc;

use arrow::array::{Array, ArrayRef, RecordBatch, RecordBatchOptions, UInt32Array};
use arrow::compute::{concat_batches, filter_record_batch, take};
use arrow::datatypes::SchemaRef;
use arrow::row::{RowConverter, SortField};
use datafusion::common::{JoinSide, JoinType, NullEquality};
use datafusion::error::{DataFusionError, Result};
use datafusion::physical_expr::PhysicalExpr;
use datafusion::physical_plan::joins::utils::JoinFilter;

/// What a probe keeps of the stream's rows.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Keep {
    /// Matched pairs.
    Inner,
    /// Matched pairs, and unmatched stream rows with nulls for the table.
    Outer,
    /// Stream rows with a match, once each.
    Semi,
    /// Stream rows without a match.
    Anti,
}

/// A hashed static table and how the stream joins it.
pub(crate) struct StaticJoin {
    stream_is_left: bool,
    keep: Keep,
    stream_keys: Vec<Arc<dyn PhysicalExpr>>,
    table: RecordBatch,
    index: HashMap<Box<[u8]>, Vec<u32>>,
    converter: RowConverter,
    filter: Option<JoinFilter>,
    /// The join's output before `projection` (DataFusion's join schema).
    schema: SchemaRef,
    projection: Option<Vec<usize>>,
    nulls_match: bool,
}

/// The parts of a hash join that describe it.
pub(crate) struct JoinSpec<'a> {
    pub(crate) join_type: JoinType,
    pub(crate) stream_is_left: bool,
    pub(crate) stream_keys: Vec<Arc<dyn PhysicalExpr>>,
    pub(crate) table_keys: Vec<Arc<dyn PhysicalExpr>>,
    pub(crate) filter: Option<&'a JoinFilter>,
    pub(crate) schema: SchemaRef,
    pub(crate) projection: Option<Vec<usize>>,
    pub(crate) null_equality: NullEquality,
}

impl StaticJoin {
    /// Why a join of this type with the stream on this side cannot run continuously, if it
    /// cannot.
    pub(crate) fn refusal(join_type: JoinType, stream_is_left: bool) -> Option<String> {
        keep_of(join_type, stream_is_left).err()
    }

    /// Hashes `table` (every batch of the static side) for `spec`.
    pub(crate) fn new(
        spec: JoinSpec<'_>,
        table: &[RecordBatch],
        table_schema: &SchemaRef,
    ) -> Result<Self> {
        let keep = keep_of(spec.join_type, spec.stream_is_left).map_err(DataFusionError::Plan)?;
        let table = concat_batches(table_schema, table)?;
        let keys = evaluate(&spec.table_keys, &table)?;
        let converter = RowConverter::new(
            keys.iter()
                .map(|k| SortField::new(k.data_type().clone()))
                .collect(),
        )?;
        let nulls_match = spec.null_equality == NullEquality::NullEqualsNull;
        let rows = converter.convert_columns(&keys)?;
        let mut index: HashMap<Box<[u8]>, Vec<u32>> = HashMap::new();
        for i in 0..table.num_rows() {
            if !nulls_match && keys.iter().any(|k| k.is_null(i)) {
                continue;
            }
            index
                .entry(rows.row(i).as_ref().into())
                .or_default()
                .push(i as u32);
        }
        Ok(Self {
            stream_is_left: spec.stream_is_left,
            keep,
            stream_keys: spec.stream_keys,
            table,
            index,
            converter,
            filter: spec.filter.cloned(),
            schema: spec.schema,
            projection: spec.projection,
            nulls_match,
        })
    }

    /// Joins one batch of the stream.
    pub(crate) fn probe(&self, batch: &RecordBatch) -> Result<RecordBatch> {
        let keys = evaluate(&self.stream_keys, batch)?;
        let rows = self.converter.convert_columns(&keys)?;
        let mut stream_idx: Vec<u32> = Vec::new();
        let mut table_idx: Vec<u32> = Vec::new();
        for i in 0..batch.num_rows() {
            if !self.nulls_match && keys.iter().any(|k| k.is_null(i)) {
                continue;
            }
            if let Some(m) = self.index.get(rows.row(i).as_ref()) {
                for &j in m {
                    stream_idx.push(i as u32);
                    table_idx.push(j);
                }
            }
        }
        if let Some(filter) = &self.filter {
            let keep = self.filter_pairs(filter, batch, &stream_idx, &table_idx)?;
            let mut s2 = Vec::with_capacity(stream_idx.len());
            let mut t2 = Vec::with_capacity(table_idx.len());
            for (k, (s, t)) in stream_idx.iter().zip(&table_idx).enumerate() {
                if keep.value(k) && keep.is_valid(k) {
                    s2.push(*s);
                    t2.push(*t);
                }
            }
            stream_idx = s2;
            table_idx = t2;
        }
        let out = match self.keep {
            Keep::Inner => self.assemble(batch, &stream_idx, table_idx.into_iter().map(Some))?,
            Keep::Outer => {
                let mut matched = vec![false; batch.num_rows()];
                for &s in &stream_idx {
                    matched[s as usize] = true;
                }
                let mut s_all = Vec::with_capacity(stream_idx.len());
                let mut t_all = Vec::with_capacity(stream_idx.len());
                let mut k = 0;
                // Keep the stream's order: each row's matches, or the row alone.
                for (i, &m) in matched.iter().enumerate() {
                    if m {
                        while k < stream_idx.len() && stream_idx[k] as usize == i {
                            s_all.push(stream_idx[k]);
                            t_all.push(Some(table_idx[k]));
                            k += 1;
                        }
                    } else {
                        s_all.push(i as u32);
                        t_all.push(None);
                    }
                }
                self.assemble(batch, &s_all, t_all.into_iter())?
            }
            Keep::Semi | Keep::Anti => {
                let mut matched = vec![false; batch.num_rows()];
                for &s in &stream_idx {
                    matched[s as usize] = true;
                }
                let want = self.keep == Keep::Semi;
                let mask = arrow::array::BooleanArray::from(
                    matched.iter().map(|&m| m == want).collect::<Vec<_>>(),
                );
                filter_record_batch(batch, &mask)?
            }
        };
        match &self.projection {
            Some(p) => Ok(out.project(p)?),
            None => Ok(out),
        }
    }

    /// The join's columns for the pairs (stream row, table row or none).
    fn assemble(
        &self,
        batch: &RecordBatch,
        stream_idx: &[u32],
        table_idx: impl Iterator<Item = Option<u32>>,
    ) -> Result<RecordBatch> {
        let s = UInt32Array::from(stream_idx.to_vec());
        let t = UInt32Array::from_iter(table_idx);
        let stream_cols = batch
            .columns()
            .iter()
            .map(|c| take(c.as_ref(), &s, None))
            .collect::<std::result::Result<Vec<_>, _>>()?;
        let table_cols = self
            .table
            .columns()
            .iter()
            .map(|c| take(c.as_ref(), &t, None))
            .collect::<std::result::Result<Vec<_>, _>>()?;
        let columns: Vec<ArrayRef> = if self.stream_is_left {
            stream_cols.into_iter().chain(table_cols).collect()
        } else {
            table_cols.into_iter().chain(stream_cols).collect()
        };
        let options = RecordBatchOptions::new().with_row_count(Some(stream_idx.len()));
        Ok(RecordBatch::try_new_with_options(
            Arc::clone(&self.schema),
            columns,
            &options,
        )?)
    }

    /// Evaluates the join's filter on candidate pairs.
    fn filter_pairs(
        &self,
        filter: &JoinFilter,
        batch: &RecordBatch,
        stream_idx: &[u32],
        table_idx: &[u32],
    ) -> Result<arrow::array::BooleanArray> {
        let s = UInt32Array::from(stream_idx.to_vec());
        let t = UInt32Array::from(table_idx.to_vec());
        let columns = filter
            .column_indices()
            .iter()
            .map(|ci| {
                let stream_side = matches!(
                    (ci.side, self.stream_is_left),
                    (JoinSide::Left, true) | (JoinSide::Right, false)
                );
                if stream_side {
                    take(batch.column(ci.index).as_ref(), &s, None)
                } else {
                    take(self.table.column(ci.index).as_ref(), &t, None)
                }
            })
            .collect::<std::result::Result<Vec<_>, _>>()?;
        let options = RecordBatchOptions::new().with_row_count(Some(stream_idx.len()));
        let pairs =
            RecordBatch::try_new_with_options(Arc::clone(filter.schema()), columns, &options)?;
        let v = filter
            .expression()
            .evaluate(&pairs)?
            .into_array(pairs.num_rows())?;
        Ok(arrow::array::AsArray::as_boolean(&v).clone())
    }
}

fn keep_of(join_type: JoinType, stream_is_left: bool) -> std::result::Result<Keep, String> {
    use JoinType::*;
    match (join_type, stream_is_left) {
        (Inner, _) => Ok(Keep::Inner),
        (Left, true) | (Right, false) => Ok(Keep::Outer),
        (LeftSemi, true) | (RightSemi, false) => Ok(Keep::Semi),
        (LeftAnti, true) | (RightAnti, false) => Ok(Keep::Anti),
        (other, _) => Err(format!(
            "a {other} join that keeps the static table's unmatched rows waits for the end of the \
             stream; join the stream with the table (stream LEFT JOIN table, or an inner join)"
        )),
    }
}

fn evaluate(exprs: &[Arc<dyn PhysicalExpr>], batch: &RecordBatch) -> Result<Vec<ArrayRef>> {
    exprs
        .iter()
        .map(|e| e.evaluate(batch)?.into_array(batch.num_rows()))
        .collect()
}
