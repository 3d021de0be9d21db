//! In follow mode a source never ends, so a step that needs the whole input (an aggregation
//! without windows, a global `ORDER BY`, a window function over all rows, a join of two
//! streams) would wait forever. Such a query is refused before DataFusion plans it, in one line
//! that says why and what to write instead. Windowed aggregations read their source through a
//! window table function and are not affected.

use datafusion::common::tree_node::{TreeNode, TreeNodeRecursion};
use datafusion::datasource::source_as_provider;
use datafusion::error::{DataFusionError, Result};
use datafusion::logical_expr::{Expr, LogicalPlan};

use crate::pipeline::table::SourceTable;

/// True when `plan` reads a source that does not end (a plain scan, not a window table).
fn reads_unbounded_source(plan: &LogicalPlan) -> bool {
    let mut found = false;
    let _ = plan.apply(|node| {
        if let LogicalPlan::TableScan(scan) = node {
            if let Ok(provider) = source_as_provider(&scan.source) {
                let any: &dyn std::any::Any = provider.as_ref();
                if any
                    .downcast_ref::<SourceTable>()
                    .is_some_and(SourceTable::unbounded)
                {
                    found = true;
                    return Ok(TreeNodeRecursion::Stop);
                }
            }
        }
        Ok(TreeNodeRecursion::Continue)
    });
    found
}

/// True when one of `exprs` is a `DISTINCT` aggregate (`count(DISTINCT x)`).
fn has_distinct_aggregate(exprs: &[Expr]) -> bool {
    exprs.iter().any(|e| {
        e.exists(|e| Ok(matches!(e, Expr::AggregateFunction(f) if f.params.distinct)))
            .unwrap_or(false)
    })
}

/// Refuses a query that could never produce its result on unbounded sources.
pub(crate) fn runs_continuously(plan: &LogicalPlan) -> Result<()> {
    let mut refusal = None;
    plan.apply(|node| {
        let inputs = node.inputs();
        let unbounded = |i: usize| inputs.get(i).is_some_and(|p| reads_unbounded_source(p));
        let why = match node {
            // DataFusion plans it as an aggregation over an aggregation, whose outer half
            // cannot tell when a window is complete.
            LogicalPlan::Aggregate(a) if has_distinct_aggregate(&a.aggr_expr) => Some(
                "an aggregate with DISTINCT (count(DISTINCT x)) cannot run continuously: use \
                 approx_distinct(x), or run without --follow",
            ),
            LogicalPlan::Aggregate(_) | LogicalPlan::Distinct(_) if unbounded(0) => Some(
                "an aggregation over an unbounded source never ends: GROUP BY window_start, \
                 window_end of TUMBLE(source, ts, INTERVAL '1 minute') (or HOP, SESSION) to \
                 emit a row per window as it closes, or run without --follow",
            ),
            LogicalPlan::Sort(_) if unbounded(0) => Some(
                "a global ORDER BY waits for the end of an unbounded input: drop it, or run \
                 without --follow",
            ),
            LogicalPlan::Window(_) if unbounded(0) => Some(
                "a window function (OVER) over an unbounded source waits for its end: use \
                 TUMBLE/HOP/SESSION windows with GROUP BY, or run without --follow",
            ),
            LogicalPlan::Join(_) if unbounded(0) && unbounded(1) => Some(
                "a join of two unbounded sources is not supported: join a stream with a table \
                 (CREATE TABLE, or a source with 'scan.bounded' = 'true')",
            ),
            _ => None,
        };
        if let Some(why) = why {
            refusal = Some(why);
            return Ok(TreeNodeRecursion::Stop);
        }
        Ok(TreeNodeRecursion::Continue)
    })?;
    match refusal {
        Some(why) => Err(DataFusionError::Plan(why.into())),
        None => Ok(()),
    }
}
