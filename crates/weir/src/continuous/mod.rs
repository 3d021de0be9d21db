//! Continuous SQL: event-time windows over unbounded sources, emitted as they close.
//!
//! - [`tvf`]: the window table functions `TUMBLE`, `HOP` and `SESSION`.
//! - [`compile`]: a query's DataFusion plan, with the window scan and every step around it
//!   that can run continuously folded into one node.
//! - [`plan`]: what that node runs, as planned.
//! - [`exec`]: that node, [`exec::ContinuousExec`], and the threads that run it.
//! - [`check`]: in follow mode, a query that could never produce its result is refused with one
//!   line that says what to write instead.
//!
//! The state these keep (watermarks, windows, accumulators) is `crate::pipeline::window`'s.

pub(crate) mod check;
pub(crate) mod compile;
pub(crate) mod exec;
pub(crate) mod plan;
pub(crate) mod tvf;

use std::sync::Arc;

use datafusion::dataframe::DataFrame;
use datafusion::error::Result;
use datafusion::physical_plan::ExecutionPlan;

/// The physical plan of a query, its continuous parts folded (and, in follow mode, checked).
pub(crate) async fn physical_plan(df: DataFrame, follow: bool) -> Result<Arc<dyn ExecutionPlan>> {
    if follow {
        check::runs_continuously(df.logical_plan())?;
    }
    let plan = df.create_physical_plan().await?;
    let folded = compile::rewrite(Arc::clone(&plan), follow)?;
    if std::env::var_os("WEIR_SHOW_PLAN").is_some() {
        use datafusion::physical_plan::displayable;
        eprintln!(
            "{}\n=>\n{}",
            displayable(plan.as_ref()).indent(true),
            displayable(folded.as_ref()).indent(true)
        );
    }
    Ok(folded)
}
