//! A declared source made ready to read: what runs share and change, kept apart from the
//! declaration itself.

use std::fmt;
use std::ops::Deref;
use std::sync::atomic::AtomicBool;
use std::sync::{Arc, Mutex};

use weir_codec::PreparedDecoder;

use crate::error::{SourceError, SourceErrorKind};
use crate::metrics::SourceStats;
use crate::source::SourceDefinition;

/// A preparation narrowed to some decoded columns, and those columns.
type Projection = (Vec<usize>, Arc<dyn PreparedDecoder>);

/// A source as the engine keeps it from `CREATE SOURCE` on: its immutable declaration, the
/// encoding prepared for its columns (and narrowed per scan), its counters and the run's stop
/// flag. It dereferences to the declaration, which every stage reads.
pub(crate) struct LiveSource {
    definition: SourceDefinition,
    /// The encoding prepared for every declared column, once.
    pub(crate) prepared: Arc<dyn PreparedDecoder>,
    /// Preparations narrowed to a scan's columns, by the decoded columns they keep.
    projections: Mutex<Vec<Projection>>,
    /// Set when a follow-mode run is asked to stop: the source ends at its next wait.
    pub(crate) stop: Arc<AtomicBool>,
    /// Counters.
    pub(crate) stats: Arc<SourceStats>,
    /// Set while a pipeline reads the source as a member of its consumer group.
    pub(crate) in_group: AtomicBool,
}

impl LiveSource {
    /// `definition` ready to read with `prepared` (its schema's decoded columns), counting into
    /// `stats` and stopping when `stop` is set.
    pub(crate) fn new(
        definition: SourceDefinition,
        prepared: Arc<dyn PreparedDecoder>,
        stats: Arc<SourceStats>,
        stop: Arc<AtomicBool>,
    ) -> Self {
        Self {
            definition,
            prepared,
            projections: Mutex::default(),
            stop,
            stats,
            in_group: AtomicBool::new(false),
        }
    }

    /// The encoding prepared for the decoded columns `keep` (indexes into the table), compiled
    /// once per distinct projection.
    pub(crate) fn prepared_for(
        &self,
        keep: &[usize],
    ) -> Result<Arc<dyn PreparedDecoder>, SourceError> {
        if keep.len() == self.decoded_columns() && keep.iter().enumerate().all(|(i, &c)| i == c) {
            return Ok(Arc::clone(&self.prepared));
        }
        let mut cache = self.projections.lock().unwrap_or_else(|e| e.into_inner());
        if let Some((_, p)) = cache.iter().find(|(k, _)| k == keep) {
            return Ok(Arc::clone(p));
        }
        let p = self.prepared.project(keep).map_err(|source| {
            SourceError::new(
                &self.name,
                SourceErrorKind::Encoding {
                    encoding: self.settings.encoding.clone(),
                    source,
                },
            )
        })?;
        cache.push((keep.to_vec(), Arc::clone(&p)));
        Ok(p)
    }
}

impl Deref for LiveSource {
    type Target = SourceDefinition;

    fn deref(&self) -> &SourceDefinition {
        &self.definition
    }
}

impl fmt::Debug for LiveSource {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        self.definition.fmt(f)
    }
}
