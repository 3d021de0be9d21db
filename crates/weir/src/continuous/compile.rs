//! Compiling a query into a continuous one. DataFusion plans the query as it would a bounded
//! one (its window tables' scans are [`ContinuousExec`] leaves); weir then folds, bottom-up,
//! every step it can run row batch by row batch into the leaf above it:
//!
//! - filters and projections, and joins with a static table (the other side has no continuous
//!   scan), before or after the aggregation;
//! - a partial aggregation over the window table, the repartitioning above it, and the final
//!   aggregation: together they become the windowed aggregation, when the `GROUP BY` has
//!   `window_start` and `window_end`.
//!
//! What is left above the folded node (a global `ORDER BY`, a `LIMIT`, an aggregation without
//! windows) is DataFusion's, which is fine on a bounded input; in follow mode a step that waits
//! for the end of its input is refused with one line that says what to write instead.

use std::sync::Arc;

use arrow::datatypes::{Field, Schema, SchemaRef};
use datafusion::error::{DataFusionError, Result};
use datafusion::physical_expr::expressions::Column;
use datafusion::physical_plan::aggregates::{aggregate_expressions, AggregateExec, AggregateMode};
// DataFusion 55 no longer plans it, but plans made elsewhere may still hold it.
#[allow(deprecated)]
use datafusion::physical_plan::coalesce_batches::CoalesceBatchesExec;
use datafusion::physical_plan::coalesce_partitions::CoalescePartitionsExec;
use datafusion::physical_plan::coop::CooperativeExec;
use datafusion::physical_plan::filter::FilterExec;
use datafusion::physical_plan::joins::HashJoinExec;
use datafusion::physical_plan::limit::{GlobalLimitExec, LocalLimitExec};
use datafusion::physical_plan::projection::ProjectionExec;
use datafusion::physical_plan::repartition::RepartitionExec;
use datafusion::physical_plan::union::UnionExec;
use datafusion::physical_plan::ExecutionPlan;

use super::exec::ContinuousExec;
use super::plan::{JoinPlan, OpPlan, QueryPlan};
use crate::pipeline::window::aggregate::{AggregateStage, GroupOut};
use crate::pipeline::window::join::StaticJoin;

/// Folds every step it can into the continuous scans below it, bottom-up. `follow` refuses
/// what would wait for the end of an unbounded input.
pub(crate) fn rewrite(
    plan: Arc<dyn ExecutionPlan>,
    follow: bool,
) -> Result<Arc<dyn ExecutionPlan>> {
    let children: Vec<Arc<dyn ExecutionPlan>> = plan
        .children()
        .into_iter()
        .map(|c| rewrite(Arc::clone(c), follow))
        .collect::<Result<_>>()?;
    let changed = children
        .iter()
        .zip(plan.children())
        .any(|(new, old)| !Arc::ptr_eq(new, old));
    let plan = if changed {
        #[allow(deprecated)]
        Arc::clone(&plan).with_new_children(children.clone())?
    } else {
        plan
    };
    if let Some(folded) = fold(&plan, &children)? {
        return Ok(Arc::new(ContinuousExec::new(folded)));
    }
    if follow {
        if let Some(i) = children.iter().position(is_continuous) {
            refuse_in_follow_mode(&plan, &children[i])?;
        }
    }
    Ok(plan)
}

fn continuous(p: &Arc<dyn ExecutionPlan>) -> Option<&QueryPlan> {
    p.downcast_ref::<ContinuousExec>().map(ContinuousExec::plan)
}

fn is_continuous(p: &Arc<dyn ExecutionPlan>) -> bool {
    continuous(p).is_some()
}

fn contains_continuous(p: &Arc<dyn ExecutionPlan>) -> bool {
    is_continuous(p) || p.children().into_iter().any(contains_continuous)
}

/// `plan` (whose children are `children`, already folded) folded into a continuous child, if
/// it can be.
fn fold(
    plan: &Arc<dyn ExecutionPlan>,
    children: &[Arc<dyn ExecutionPlan>],
) -> Result<Option<QueryPlan>> {
    // Joins first: one side continuous, the other a static table.
    if let Some(j) = plan.downcast_ref::<HashJoinExec>() {
        let (l, r) = (continuous(&children[0]), continuous(&children[1]));
        let (q, stream_is_left, table) = match (l, r) {
            (Some(q), None) if !contains_continuous(&children[1]) => (q, true, &children[1]),
            (None, Some(q)) if !contains_continuous(&children[0]) => (q, false, &children[0]),
            (Some(_), Some(_)) => {
                return Err(DataFusionError::Plan(
                    "a join of two streams is not supported: join a stream with a table (a \
                     CREATE TABLE, or a source read once)"
                        .into(),
                ))
            }
            _ => return Ok(None),
        };
        if q.partial.is_some() {
            return Ok(None);
        }
        if let Some(why) = StaticJoin::refusal(*j.join_type(), stream_is_left) {
            return Err(DataFusionError::Plan(why));
        }
        let (stream_keys, table_keys): (Vec<_>, Vec<_>) = j
            .on()
            .iter()
            .map(|(l, r)| {
                if stream_is_left {
                    (Arc::clone(l), Arc::clone(r))
                } else {
                    (Arc::clone(r), Arc::clone(l))
                }
            })
            .unzip();
        let join = JoinPlan {
            join_type: *j.join_type(),
            stream_is_left,
            stream_keys,
            table_keys,
            filter: j.filter().cloned(),
            schema: Arc::clone(j.join_schema()),
            projection: j.projection.as_ref().map(|p| p.to_vec()),
            null_equality: j.null_equality(),
            table: Arc::clone(table),
        };
        return Ok(Some(
            q.clone().push(OpPlan::Join(Arc::new(join)), plan.schema()),
        ));
    }
    let [child] = children else {
        return Ok(None);
    };
    let Some(q) = continuous(child) else {
        return Ok(None);
    };
    let q = q.clone();
    if let Some(f) = plan.downcast_ref::<FilterExec>() {
        if q.partial.is_some() {
            return Ok(None);
        }
        let op = OpPlan::Filter {
            predicate: Arc::clone(f.predicate()),
            projection: f.projection().as_ref().map(|p| p.to_vec()),
        };
        return Ok(Some(q.push(op, plan.schema())));
    }
    if let Some(p) = plan.downcast_ref::<ProjectionExec>() {
        if q.partial.is_some() {
            return Ok(None);
        }
        let op = OpPlan::Project {
            exprs: p.expr().iter().map(|e| Arc::clone(&e.expr)).collect(),
            schema: plan.schema(),
        };
        return Ok(Some(q.push(op, plan.schema())));
    }
    // The continuous node has one partition and no batching of its own to undo.
    #[allow(deprecated)]
    let batching = plan.is::<CoalesceBatchesExec>();
    if batching
        || plan.is::<CoalescePartitionsExec>()
        || plan.is::<RepartitionExec>()
        || plan.is::<CooperativeExec>()
    {
        return Ok(Some(q));
    }
    if let Some(a) = plan.downcast_ref::<AggregateExec>() {
        return fold_aggregate(q, a, plan);
    }
    Ok(None)
}

fn fold_aggregate(
    mut q: QueryPlan,
    a: &AggregateExec,
    plan: &Arc<dyn ExecutionPlan>,
) -> Result<Option<QueryPlan>> {
    match a.mode() {
        AggregateMode::Partial => {
            if q.aggregate.is_some() || q.partial.is_some() || windows_of(a)?.is_none() {
                return Ok(None);
            }
            q.partial = Some(Arc::clone(plan));
            q.schema = plan.schema();
            Ok(Some(q))
        }
        AggregateMode::Final | AggregateMode::FinalPartitioned => {
            let Some(partial) = q.partial.take() else {
                return Ok(None);
            };
            let Some(partial) = partial.downcast_ref::<AggregateExec>() else {
                return Ok(None);
            };
            q.aggregate = Some(Arc::new(stage(partial, plan.schema())?));
            q.schema = plan.schema();
            Ok(Some(q))
        }
        AggregateMode::Single | AggregateMode::SinglePartitioned => {
            if q.aggregate.is_some() || q.partial.is_some() || windows_of(a)?.is_none() {
                return Ok(None);
            }
            q.aggregate = Some(Arc::new(stage(a, plan.schema())?));
            q.schema = plan.schema();
            Ok(Some(q))
        }
        AggregateMode::PartialReduce => Ok(None),
    }
}

/// Where `window_start` and `window_end` are among an aggregation's group keys (by name, as
/// DataFusion plans a `GROUP BY window_start, window_end`).
fn windows_of(a: &AggregateExec) -> Result<Option<(usize, usize)>> {
    let g = a.group_expr();
    if !g.is_single() {
        return Ok(None);
    }
    let col = |name: &str| {
        g.expr().iter().find_map(|(e, _)| {
            e.downcast_ref::<Column>()
                .filter(|c| c.name() == name)
                .map(Column::index)
        })
    };
    Ok(col("window_start").zip(col("window_end")))
}

/// The windowed aggregation of a partial (or single) aggregation whose output is `output`.
fn stage(a: &AggregateExec, output: SchemaRef) -> Result<AggregateStage> {
    let Some((start_col, end_col)) = windows_of(a)? else {
        return Err(DataFusionError::Internal(
            "a windowed aggregation without its window columns".into(),
        ));
    };
    let input = a.input_schema();
    let mut key_exprs = Vec::new();
    let mut key_fields = Vec::new();
    let mut layout = Vec::new();
    for (e, name) in a.group_expr().expr() {
        let is = |n: &str| e.downcast_ref::<Column>().is_some_and(|c| c.name() == n);
        if is("window_start") {
            layout.push(GroupOut::Start);
        } else if is("window_end") {
            layout.push(GroupOut::End);
        } else {
            layout.push(GroupOut::Key(key_exprs.len()));
            key_fields.push(Field::new(name, e.data_type(&input)?, e.nullable(&input)?));
            key_exprs.push(Arc::clone(e));
        }
    }
    let aggs = a.aggr_expr().to_vec();
    let args = aggregate_expressions(&aggs, &AggregateMode::Partial, 0)?;
    let window_type = input.field(start_col).data_type().clone();
    AggregateStage::new(
        key_exprs,
        Arc::new(Schema::new(key_fields)),
        start_col,
        end_col,
        layout,
        aggs,
        args,
        a.filter_expr().to_vec(),
        output,
        window_type,
    )
}

/// In follow mode, a step over a continuous input that was not folded must not wait for its
/// end; say what to write instead.
fn refuse_in_follow_mode(
    plan: &Arc<dyn ExecutionPlan>,
    child: &Arc<dyn ExecutionPlan>,
) -> Result<()> {
    if plan.is::<GlobalLimitExec>()
        || plan.is::<LocalLimitExec>()
        || plan.is::<UnionExec>()
        || plan.is::<CoalescePartitionsExec>()
        || plan.is::<RepartitionExec>()
    {
        return Ok(());
    }
    let windowed = continuous(child).is_some_and(QueryPlan::aggregates);
    let why = if plan.is::<AggregateExec>() {
        if windowed {
            "an aggregation over the output of a windowed aggregation waits for the end of the \
             stream; aggregate once, grouped by window_start, window_end and your keys"
                .to_string()
        } else {
            "an aggregation over an unbounded source never ends: GROUP BY window_start, \
             window_end of TUMBLE(source, ts, INTERVAL '1 minute') (or HOP, SESSION) to emit a \
             row per window as it closes, or run without --follow"
                .to_string()
        }
    } else if plan.name().contains("Sort") {
        "a global ORDER BY waits for the end of an unbounded input: drop it (windows are \
         emitted in the order they close), or run without --follow"
            .to_string()
    } else {
        format!(
            "{} cannot run on an unbounded input; run without --follow",
            plan.name()
        )
    };
    Err(DataFusionError::Plan(why))
}
