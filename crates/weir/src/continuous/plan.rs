//! A continuous query as planned: what a [`ContinuousExec`](super::exec::ContinuousExec) leaf runs, built by `compile`
//! (which folds DataFusion's steps into it) and made runnable when the query starts.

use std::sync::Arc;

use arrow::datatypes::{DataType, Field, Schema, SchemaRef};
use datafusion::common::{JoinType, NullEquality};
use datafusion::error::{DataFusionError, Result};
use datafusion::execution::TaskContext;
use datafusion::physical_expr::PhysicalExpr;
use datafusion::physical_plan::joins::utils::JoinFilter;
use datafusion::physical_plan::{collect, ExecutionPlan};

use crate::pipeline::live_source::LiveSource;
use crate::pipeline::window::aggregate::AggregateStage;
use crate::pipeline::window::join::{JoinSpec, StaticJoin};
use crate::pipeline::window::ops::Op;
use crate::pipeline::window::query::ContinuousQuery;
use crate::pipeline::window::WindowKind;

/// A stateless step as planned (a join's table is read when the query starts).
#[derive(Clone)]
pub(crate) enum OpPlan {
    /// See [`Op::Filter`].
    Filter {
        predicate: Arc<dyn PhysicalExpr>,
        projection: Option<Vec<usize>>,
    },
    /// See [`Op::Project`].
    Project {
        exprs: Vec<Arc<dyn PhysicalExpr>>,
        schema: SchemaRef,
    },
    /// A join with a static table.
    Join(Arc<JoinPlan>),
}

/// A join of the stream with the table DataFusion's plan `table` produces.
pub(crate) struct JoinPlan {
    pub(super) join_type: JoinType,
    pub(super) stream_is_left: bool,
    pub(super) stream_keys: Vec<Arc<dyn PhysicalExpr>>,
    pub(super) table_keys: Vec<Arc<dyn PhysicalExpr>>,
    pub(super) filter: Option<JoinFilter>,
    pub(super) schema: SchemaRef,
    pub(super) projection: Option<Vec<usize>>,
    pub(super) null_equality: NullEquality,
    pub(super) table: Arc<dyn ExecutionPlan>,
}

/// A continuous query as planned: what [`ContinuousExec`](super::exec::ContinuousExec) runs.
#[derive(Clone)]
pub(crate) struct QueryPlan {
    pub(crate) source: Arc<LiveSource>,
    pub(super) read: Vec<usize>,
    pub(super) time_in_read: usize,
    pub(super) time_type: DataType,
    pub(super) window: WindowKind,
    pub(super) windowed: SchemaRef,
    pub(super) scan_projection: Vec<usize>,
    pub(super) pre: Vec<OpPlan>,
    /// A partial aggregation folded in, waiting for its final half.
    pub(super) partial: Option<Arc<dyn ExecutionPlan>>,
    pub(super) aggregate: Option<Arc<AggregateStage>>,
    pub(super) post: Vec<OpPlan>,
    /// The output.
    pub(crate) schema: SchemaRef,
    /// Readers in parallel (without state).
    pub(crate) partitions: usize,
}

impl QueryPlan {
    /// The scan of a window table: `projection` indexes the source's columns followed by
    /// `window_start` and `window_end`.
    pub(crate) fn scan(
        source: Arc<LiveSource>,
        time: usize,
        window: WindowKind,
        projection: &[usize],
        partitions: usize,
    ) -> Result<Self> {
        let name = window.name();
        match &source.watermark {
            Some(w) if w.column != time => {
                return Err(DataFusionError::Plan(format!(
                    "{name} over {} must use its watermark column {}",
                    source.name, w.name
                )))
            }
            None if source.follow => {
                return Err(DataFusionError::Plan(format!(
                    "source {} declares no watermark, so its windows could never close in follow \
                     mode; add WATERMARK FOR {} AS {} - INTERVAL '5 seconds' to its column list",
                    source.name,
                    source.schema.field(time).name(),
                    source.schema.field(time).name()
                )))
            }
            _ => {}
        }
        let n = source.schema.fields().len();
        let mut read: Vec<usize> = projection.iter().copied().filter(|&i| i < n).collect();
        read.push(time);
        read.sort_unstable();
        read.dedup();
        let time_in_read = read.iter().position(|&c| c == time).unwrap_or(0);
        let time_type = source.schema.field(time).data_type().clone();
        let mut fields: Vec<Field> = read
            .iter()
            .map(|&c| source.schema.field(c).clone())
            .collect();
        fields.push(Field::new("window_start", time_type.clone(), false));
        fields.push(Field::new("window_end", time_type.clone(), false));
        let windowed = Arc::new(Schema::new(fields));
        let scan_projection: Vec<usize> = projection
            .iter()
            .map(|&i| {
                if i < n {
                    read.iter().position(|&c| c == i).unwrap_or(0)
                } else {
                    read.len() + (i - n)
                }
            })
            .collect();
        let schema = Arc::new(windowed.project(&scan_projection)?);
        Ok(Self {
            source,
            read,
            time_in_read,
            time_type,
            window,
            windowed,
            scan_projection,
            pre: Vec::new(),
            partial: None,
            aggregate: None,
            post: Vec::new(),
            schema,
            partitions: partitions.max(1),
        })
    }

    /// True when the query has a windowed aggregation.
    pub(crate) fn aggregates(&self) -> bool {
        self.aggregate.is_some()
    }

    /// Adds a stateless step on top, producing `schema`.
    pub(super) fn push(mut self, op: OpPlan, schema: SchemaRef) -> Self {
        if self.aggregate.is_some() {
            self.post.push(op);
        } else {
            self.pre.push(op);
        }
        self.schema = schema;
        self
    }

    /// The query ready to run: joins' tables read (with `ctx`).
    pub(crate) async fn instantiate(&self, ctx: Arc<TaskContext>) -> Result<ContinuousQuery> {
        if self.partial.is_some() {
            return Err(DataFusionError::Internal(
                "a partial aggregation was compiled without its final half".into(),
            ));
        }
        if self.aggregate.is_none() {
            if let WindowKind::Session { .. } = self.window {
                return Err(DataFusionError::Plan(
                    "SESSION windows are formed by an aggregation: GROUP BY window_start, \
                     window_end and the session's key"
                        .into(),
                ));
            }
        }
        let pre = ops(&self.pre, &ctx).await?;
        let post = ops(&self.post, &ctx).await?;
        Ok(ContinuousQuery {
            source: Arc::clone(&self.source),
            read: self.read.clone(),
            hidden: ContinuousQuery::hidden_for(&self.source),
            time_in_read: self.time_in_read,
            time_type: self.time_type.clone(),
            window: self.window,
            windowed: Arc::clone(&self.windowed),
            scan_projection: self.scan_projection.clone(),
            watermark: self.source.watermark.clone(),
            pre,
            aggregate: self.aggregate.clone(),
            post,
            schema: Arc::clone(&self.schema),
        })
    }
}

async fn ops(plans: &[OpPlan], ctx: &Arc<TaskContext>) -> Result<Vec<Op>> {
    let mut out = Vec::with_capacity(plans.len());
    for p in plans {
        out.push(match p {
            OpPlan::Filter {
                predicate,
                projection,
            } => Op::Filter {
                predicate: Arc::clone(predicate),
                projection: projection.clone(),
            },
            OpPlan::Project { exprs, schema } => Op::Project {
                exprs: exprs.clone(),
                schema: Arc::clone(schema),
            },
            OpPlan::Join(j) => {
                let table = collect(Arc::clone(&j.table), Arc::clone(ctx)).await?;
                let join = StaticJoin::new(
                    JoinSpec {
                        join_type: j.join_type,
                        stream_is_left: j.stream_is_left,
                        stream_keys: j.stream_keys.clone(),
                        table_keys: j.table_keys.clone(),
                        filter: j.filter.as_ref(),
                        schema: Arc::clone(&j.schema),
                        projection: j.projection.clone(),
                        null_equality: j.null_equality,
                    },
                    &table,
                    &j.table.schema(),
                )?;
                Op::Join(Arc::new(join))
            }
        });
    }
    Ok(out)
}
