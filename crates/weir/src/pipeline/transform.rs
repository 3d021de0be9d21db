//! What an exactly-once pipeline does with the rows between the dedup and the step's output
//! ([`StepTransform`]), and the plainest one: the rows as they are ([`Rows`]). A continuous
//! query is another (`super::steps` over one process's partitions, `super::group_windows`
//! over a consumer group's).

use arrow::array::RecordBatch;

use crate::error::SourceError;

/// Turns deduplicated batches into a step's output rows, and says what state to commit with
/// each step.
pub(crate) trait StepTransform {
    /// Turns one deduplicated batch (of `channel`) into output rows.
    fn batch(
        &mut self,
        batch: RecordBatch,
        channel: usize,
        out: &mut Vec<RecordBatch>,
    ) -> Result<(), SourceError>;

    /// Nothing to read now: time may still move the output on (an idle partition).
    fn idle(&mut self, out: &mut Vec<RecordBatch>) -> Result<(), SourceError>;

    /// The state to commit with the step that ends now, with the source at `positions`. A
    /// transform that keeps its state elsewhere stores it here (before the step commits) and
    /// returns nothing.
    fn state(&mut self, positions: &[(String, i64)]) -> Result<Vec<u8>, SourceError>;

    /// The end of the input (`bounded`), or a stop; pushes the last rows.
    fn end(&mut self, bounded: bool, out: &mut Vec<RecordBatch>) -> Result<(), SourceError>;
}

/// A sink fed straight from the source: the rows as they are.
pub(crate) struct Rows;

impl StepTransform for Rows {
    fn batch(
        &mut self,
        b: RecordBatch,
        _: usize,
        out: &mut Vec<RecordBatch>,
    ) -> Result<(), SourceError> {
        out.push(b);
        Ok(())
    }

    fn idle(&mut self, _: &mut Vec<RecordBatch>) -> Result<(), SourceError> {
        Ok(())
    }

    fn state(&mut self, _: &[(String, i64)]) -> Result<Vec<u8>, SourceError> {
        Ok(Vec::new())
    }

    fn end(&mut self, _: bool, _: &mut Vec<RecordBatch>) -> Result<(), SourceError> {
        Ok(())
    }
}
