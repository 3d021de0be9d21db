//! A source as a DataFusion table. Each scan reads it from the start (a bounded read, unless the
//! engine follows), decodes only the columns the query uses (the projection goes into the
//! decoder), and runs one reader per partition (`crate::pipeline::scan`).

use std::sync::Arc;

use arrow::datatypes::SchemaRef;
use async_trait::async_trait;
use datafusion::catalog::Session;
use datafusion::datasource::{TableProvider, TableType};
use datafusion::error::Result as DfResult;
use datafusion::logical_expr::Expr;
use datafusion::physical_plan::ExecutionPlan;

use crate::error::SourceError;
use crate::pipeline::live_source::LiveSource;

/// A source as a DataFusion table.
#[derive(Debug)]
pub(crate) struct SourceTable {
    source: Arc<LiveSource>,
    partitions: usize,
}

impl SourceTable {
    /// True when a scan of it never ends (follow mode).
    pub(crate) fn unbounded(&self) -> bool {
        self.source.follow
    }

    /// A table over `source`, scanned by `partitions` readers in parallel.
    pub(crate) fn new(source: Arc<LiveSource>, partitions: usize) -> Self {
        Self {
            source,
            partitions: partitions.max(1),
        }
    }
}

#[async_trait]
impl TableProvider for SourceTable {
    fn schema(&self) -> SchemaRef {
        Arc::clone(&self.source.schema)
    }

    fn table_type(&self) -> TableType {
        TableType::Base
    }

    async fn scan(
        &self,
        _state: &dyn Session,
        projection: Option<&Vec<usize>>,
        _filters: &[Expr],
        limit: Option<usize>,
    ) -> DfResult<Arc<dyn ExecutionPlan>> {
        super::scan::plan(
            &self.source,
            projection.map(Vec::as_slice),
            limit,
            self.partitions,
        )
        .await
        .map_err(SourceError::into_df)
    }
}
