//! Where an exactly-once pipeline records its steps: the source's state directory (RocksDB:
//! positions, dedup keys, window state, the step's files), or, for a table sink on a source
//! without one, the table's own log, whose commits carry the positions (so the pipeline keeps
//! only the last committed step in memory and resumes from the table).

use arrow::array::RecordBatch;
use weir_dedup::{Checkpoint, StateStore};

use super::dedup::dedup;
use super::group_state::GroupKeys;
use crate::error::SourceError;
use crate::pipeline::live_source::LiveSource;

/// The record of a pipeline's committed steps.
pub(crate) trait Ledger {
    /// The last committed step (step 0, no positions, when none).
    fn checkpoint(&self) -> &Checkpoint;

    /// Drops the rows of `batch` seen before (none without a dedup key). `channel` is the
    /// reader's (a Kafka partition's id when [`Ledger::per_partition`]).
    fn dedup(
        &mut self,
        batch: RecordBatch,
        channel: usize,
        source: &str,
    ) -> Result<RecordBatch, SourceError>;

    /// Whether the ledger keeps state per Kafka partition, so that each batch must hold one
    /// partition's rows.
    fn per_partition(&self) -> bool {
        false
    }

    /// Records the step that ends now (its number is the last one's plus one).
    fn commit(&mut self, checkpoint: Checkpoint, source: &LiveSource) -> Result<(), SourceError>;

    /// Waits until the last commit is durable.
    fn sync(&mut self, source: &LiveSource) -> Result<(), SourceError>;

    /// True when the last commit is durable; waits for nothing.
    fn try_sync(&mut self, source: &LiveSource) -> Result<bool, SourceError>;

    /// The end of the run: every commit durable.
    fn finish(&mut self, source: &LiveSource) -> Result<(), SourceError>;
}

impl Ledger for StateStore {
    fn checkpoint(&self) -> &Checkpoint {
        StateStore::checkpoint(self)
    }

    fn dedup(
        &mut self,
        batch: RecordBatch,
        _: usize,
        source: &str,
    ) -> Result<RecordBatch, SourceError> {
        dedup(self, batch, source)
    }

    fn commit(&mut self, checkpoint: Checkpoint, source: &LiveSource) -> Result<(), SourceError> {
        // The commit before this one is durable now (a commit waits for it): its figures are
        // what `weir stats` would read. This one's keys are written on the commit thread.
        let durable = !self.is_committing();
        StateStore::commit(self, checkpoint).map_err(|e| SourceError::new(&source.name, e))?;
        if !durable {
            source.stats.remember_state(self);
        }
        Ok(())
    }

    fn sync(&mut self, source: &LiveSource) -> Result<(), SourceError> {
        let was = self.is_committing();
        StateStore::sync(self).map_err(|e| SourceError::new(&source.name, e))?;
        if was {
            source.stats.remember_state(self);
        }
        Ok(())
    }

    fn try_sync(&mut self, source: &LiveSource) -> Result<bool, SourceError> {
        let was = self.is_committing();
        let durable = StateStore::try_sync(self).map_err(|e| SourceError::new(&source.name, e))?;
        // Once per commit, when it is found durable: the keys it wrote are counted now.
        if was && durable {
            source.stats.remember_state(self);
        }
        Ok(durable)
    }

    fn finish(&mut self, source: &LiveSource) -> Result<(), SourceError> {
        StateStore::finish(self).map_err(|e| SourceError::new(&source.name, e))?;
        source.stats.remember_state(self);
        Ok(())
    }
}

/// The steps of a pipeline whose table sink keeps its positions: the last step committed to
/// the table, nothing on disk. There is no dedup state, so rows pass as they are.
#[derive(Debug, Default)]
pub(crate) struct TableLedger {
    committed: Checkpoint,
}

impl TableLedger {
    /// Resumes after `committed`, the step and positions read from the table.
    pub(crate) fn new(committed: Checkpoint) -> Self {
        Self { committed }
    }
}

impl Ledger for TableLedger {
    fn checkpoint(&self) -> &Checkpoint {
        &self.committed
    }

    fn dedup(&mut self, batch: RecordBatch, _: usize, _: &str) -> Result<RecordBatch, SourceError> {
        Ok(batch)
    }

    fn commit(&mut self, mut checkpoint: Checkpoint, _: &LiveSource) -> Result<(), SourceError> {
        checkpoint.step = self.committed.step + 1;
        self.committed = checkpoint;
        Ok(())
    }

    fn sync(&mut self, _: &LiveSource) -> Result<(), SourceError> {
        Ok(())
    }

    fn try_sync(&mut self, _: &LiveSource) -> Result<bool, SourceError> {
        Ok(true)
    }

    fn finish(&mut self, _: &LiveSource) -> Result<(), SourceError> {
        Ok(())
    }
}

/// The steps of a consumer group's member: positions in the sink, as [`TableLedger`]'s, and,
/// with a dedup key, each partition's keys ([`GroupKeys`]), whose step's key files are stored
/// before the step commits to the sink.
pub(crate) struct GroupLedger<'a> {
    table: TableLedger,
    keys: Option<&'a mut GroupKeys>,
}

impl<'a> GroupLedger<'a> {
    /// Resumes after `committed` (read from the sink), deduplicating with `keys` if given.
    pub(crate) fn new(committed: Checkpoint, keys: Option<&'a mut GroupKeys>) -> Self {
        Self {
            table: TableLedger::new(committed),
            keys,
        }
    }
}

impl Ledger for GroupLedger<'_> {
    fn checkpoint(&self) -> &Checkpoint {
        self.table.checkpoint()
    }

    fn dedup(
        &mut self,
        batch: RecordBatch,
        channel: usize,
        source: &str,
    ) -> Result<RecordBatch, SourceError> {
        match &mut self.keys {
            Some(keys) => keys.dedup(batch, channel),
            None => self.table.dedup(batch, channel, source),
        }
    }

    fn per_partition(&self) -> bool {
        self.keys.is_some()
    }

    fn commit(&mut self, checkpoint: Checkpoint, source: &LiveSource) -> Result<(), SourceError> {
        if let Some(keys) = &mut self.keys {
            keys.commit(&checkpoint.positions)?;
        }
        self.table.commit(checkpoint, source)
    }

    fn sync(&mut self, _: &LiveSource) -> Result<(), SourceError> {
        Ok(())
    }

    fn try_sync(&mut self, _: &LiveSource) -> Result<bool, SourceError> {
        Ok(true)
    }

    fn finish(&mut self, _: &LiveSource) -> Result<(), SourceError> {
        Ok(())
    }
}
