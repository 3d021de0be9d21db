//! The window table functions: `TUMBLE(source, col, size [, offset])`,
//! `HOP(source, col, slide, size [, offset])` and `SESSION(source, col, gap)`, as RisingWave
//! spells them. Each is a table with the source's columns and `window_start` and `window_end`
//! (of the event-time column's type). Its scan is a [`ContinuousExec`] that reads the source
//! and assigns windows; the aggregation and the steps around it are folded into that node when
//! the plan is compiled (`super::compile`).

use std::sync::{Arc, Mutex};

use arrow::datatypes::{DataType, Field, Schema, SchemaRef};
use async_trait::async_trait;
use datafusion::catalog::{Session, TableFunctionArgs, TableFunctionImpl};
use datafusion::common::ScalarValue;
use datafusion::datasource::{TableProvider, TableType};
use datafusion::error::{DataFusionError, Result};
use datafusion::logical_expr::Expr;
use datafusion::physical_plan::ExecutionPlan;

use super::exec::ContinuousExec;
use super::plan::QueryPlan;
use crate::pipeline::live_source::LiveSource;
use crate::pipeline::window::{in_unit, WindowKind};

/// The sources a window function can name.
pub(crate) type Sources = Arc<Mutex<Vec<Arc<LiveSource>>>>;

/// `TUMBLE`, `HOP` or `SESSION`.
#[derive(Debug)]
pub(crate) struct WindowFunction {
    name: &'static str,
    sources: Sources,
    partitions: usize,
}

impl WindowFunction {
    /// The three functions, by the names SQL uses.
    pub(crate) fn all(sources: &Sources, partitions: usize) -> Vec<(&'static str, Arc<Self>)> {
        ["tumble", "hop", "session"]
            .into_iter()
            .map(|name| {
                (
                    name,
                    Arc::new(Self {
                        name,
                        sources: Arc::clone(sources),
                        partitions,
                    }),
                )
            })
            .collect()
    }

    fn usage(&self) -> &'static str {
        match self.name {
            "tumble" => "TUMBLE(source, time_column, INTERVAL 'size' [, INTERVAL 'offset'])",
            "hop" => {
                "HOP(source, time_column, INTERVAL 'slide', INTERVAL 'size' [, INTERVAL 'offset'])"
            }
            _ => "SESSION(source, time_column, INTERVAL 'gap')",
        }
    }
}

impl TableFunctionImpl for WindowFunction {
    fn call_with_args(&self, args: TableFunctionArgs) -> Result<Arc<dyn TableProvider>> {
        let exprs = args.exprs();
        let usage = || DataFusionError::Plan(format!("write {}", self.usage()));
        let name_of = |e: &Expr| match e {
            Expr::Column(c) => Some(c.name.clone()),
            _ => None,
        };
        let (Some(source_name), Some(column)) = (
            exprs.first().and_then(name_of),
            exprs.get(1).and_then(name_of),
        ) else {
            return Err(usage());
        };
        let source = self
            .sources
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .iter()
            .find(|s| s.name == source_name)
            .cloned()
            .ok_or_else(|| {
                DataFusionError::Plan(format!(
                    "{}: '{source_name}' is not a source; its first argument names a CREATE SOURCE",
                    self.name.to_uppercase()
                ))
            })?;
        let time = source.schema.index_of(&column).map_err(|_| {
            DataFusionError::Plan(format!(
                "{}: source {source_name} has no column '{column}'",
                self.name.to_uppercase()
            ))
        })?;
        let DataType::Timestamp(unit, _) = source.schema.field(time).data_type() else {
            return Err(DataFusionError::Plan(format!(
                "{}: column {column} of {source_name} is {}, not a TIMESTAMP",
                self.name.to_uppercase(),
                source.schema.field(time).data_type()
            )));
        };
        let unit = *unit;
        let intervals = exprs[2..]
            .iter()
            .map(|e| interval_nanos(e).map(|n| in_unit(n, unit)))
            .collect::<Option<Vec<i64>>>()
            .ok_or_else(usage)?;
        let positive = |v: i64, what: &str| {
            if v > 0 {
                Ok(v)
            } else {
                Err(DataFusionError::Plan(format!(
                    "{}: the {what} must be positive and at least one {unit:?} (the time \
                     column's unit)",
                    self.name.to_uppercase()
                )))
            }
        };
        let kind = match (self.name, intervals.as_slice()) {
            ("tumble", [size]) => WindowKind::Tumble {
                size: positive(*size, "size")?,
                offset: 0,
            },
            ("tumble", [size, offset]) => WindowKind::Tumble {
                size: positive(*size, "size")?,
                offset: *offset,
            },
            ("hop", [slide, size]) => WindowKind::Hop {
                slide: positive(*slide, "slide")?,
                size: positive(*size, "size")?,
                offset: 0,
            },
            ("hop", [slide, size, offset]) => WindowKind::Hop {
                slide: positive(*slide, "slide")?,
                size: positive(*size, "size")?,
                offset: *offset,
            },
            ("session", [gap]) => WindowKind::Session {
                gap: positive(*gap, "gap")?,
            },
            _ => return Err(usage()),
        };
        if let WindowKind::Hop { slide, size, .. } = kind {
            if size / slide > 1000 {
                return Err(DataFusionError::Plan(format!(
                    "HOP: a size of {} slides puts each row in as many windows; keep it under 1000",
                    size / slide
                )));
            }
        }
        Ok(Arc::new(WindowedTable::new(
            source,
            time,
            kind,
            self.partitions,
        )))
    }
}

/// Nanoseconds of an interval literal (`INTERVAL '1 minute'`); months are refused (they have no
/// fixed length).
fn interval_nanos(e: &Expr) -> Option<i128> {
    let Expr::Literal(v, _) = e else {
        return None;
    };
    match v {
        ScalarValue::IntervalMonthDayNano(Some(i)) if i.months == 0 => {
            Some(i128::from(i.days) * 86_400_000_000_000 + i128::from(i.nanoseconds))
        }
        ScalarValue::IntervalDayTime(Some(i)) => {
            Some(i128::from(i.days) * 86_400_000_000_000 + i128::from(i.milliseconds) * 1_000_000)
        }
        _ => None,
    }
}

/// A window table function's result: the source's columns and the window's.
#[derive(Debug)]
pub(crate) struct WindowedTable {
    source: Arc<LiveSource>,
    time: usize,
    kind: WindowKind,
    partitions: usize,
    schema: SchemaRef,
}

impl WindowedTable {
    fn new(source: Arc<LiveSource>, time: usize, kind: WindowKind, partitions: usize) -> Self {
        let time_type = source.schema.field(time).data_type().clone();
        let mut fields: Vec<Field> = source
            .schema
            .fields()
            .iter()
            .map(|f| f.as_ref().clone())
            .collect();
        fields.push(Field::new("window_start", time_type.clone(), false));
        fields.push(Field::new("window_end", time_type, false));
        Self {
            schema: Arc::new(Schema::new(fields)),
            source,
            time,
            kind,
            partitions,
        }
    }
}

#[async_trait]
impl TableProvider for WindowedTable {
    fn schema(&self) -> SchemaRef {
        Arc::clone(&self.schema)
    }

    fn table_type(&self) -> TableType {
        TableType::View
    }

    async fn scan(
        &self,
        _state: &dyn Session,
        projection: Option<&Vec<usize>>,
        _filters: &[Expr],
        _limit: Option<usize>,
    ) -> Result<Arc<dyn ExecutionPlan>> {
        let all: Vec<usize> = (0..self.schema.fields().len()).collect();
        let projection = projection.map_or(all.as_slice(), Vec::as_slice);
        let plan = QueryPlan::scan(
            Arc::clone(&self.source),
            self.time,
            self.kind,
            projection,
            self.partitions,
        )?;
        Ok(Arc::new(ContinuousExec::new(plan)))
    }
}
