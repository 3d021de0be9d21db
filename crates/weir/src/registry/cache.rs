//! The schemas of one source's subject by id, fetched once: the cache every registry-backed
//! encoding keeps, with the failures remembered so that an unreachable registry is not asked
//! again for every message of an id it could not give.

use std::collections::{HashMap, HashSet};
use std::sync::atomic::Ordering;
use std::sync::{Arc, Mutex};
use std::time::Instant;

use weir_codec::SchemaIdError;

use super::{Error, RETRY_AFTER};
use crate::metrics::SourceStats;

/// Failed schema ids remembered before the ones due for a retry are forgotten.
const MAX_FAILURES: usize = 1024;

/// Schemas (of any kind `T`: compiled protobuf, parsed Avro) by id.
pub(crate) struct SchemaCache<T> {
    /// The subject, for errors.
    subject: String,
    schemas: Mutex<HashMap<u32, Arc<T>>>,
    /// Ids that could not be fetched, when, and why.
    failures: Mutex<HashMap<u32, (Instant, SchemaIdError)>>,
    /// Every schema id met (fetched or not), for the run summary.
    seen: Mutex<HashSet<u32>>,
    stats: Arc<SourceStats>,
}

impl<T> SchemaCache<T> {
    /// A cache holding the subject's latest schema `(id, schema)`, already counted.
    pub(crate) fn new(subject: &str, stats: &Arc<SourceStats>, latest: (u32, Arc<T>)) -> Self {
        Self {
            subject: subject.to_string(),
            seen: Mutex::new(HashSet::from([latest.0])),
            schemas: Mutex::new(HashMap::from([latest])),
            failures: Mutex::default(),
            stats: Arc::clone(stats),
        }
    }

    /// Schema `id`, when fetched already.
    pub(crate) fn cached(&self, id: u32) -> Option<Arc<T>> {
        self.schemas
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .get(&id)
            .cloned()
    }

    /// Keeps schema `id` (fetched by other means, such as a subject's versions).
    pub(crate) fn insert(&self, id: u32, schema: Arc<T>) {
        self.schemas
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .insert(id, schema);
    }

    /// Schema `id`: from the cache, or from `fetch` (which retries as the client does). A
    /// failure is the answer for `id` for the next [`RETRY_AFTER`] without asking again.
    pub(crate) fn get(
        &self,
        id: u32,
        fetch: impl FnOnce() -> Result<T, Error>,
    ) -> Result<Arc<T>, SchemaIdError> {
        if let Some(c) = self.cached(id) {
            return Ok(c);
        }
        let mut failures = self.failures.lock().unwrap_or_else(|e| e.into_inner());
        if let Some((at, why)) = failures.get(&id) {
            if at.elapsed() < RETRY_AFTER {
                return Err(why.clone());
            }
        }
        if self
            .seen
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .insert(id)
        {
            self.stats.schema_ids.fetch_add(1, Ordering::Relaxed);
        }
        // Held while fetching: the partitions that meet the same new id wait for one request.
        match fetch() {
            Ok(c) => {
                failures.remove(&id);
                let c = Arc::new(c);
                self.insert(id, Arc::clone(&c));
                Ok(c)
            }
            Err(e) => {
                let why =
                    SchemaIdError::unavailable(id, format!("source subject '{}'", self.subject), e);
                // Ids from damaged messages are random: forget the failures that are due again
                // rather than keep one for every id ever met.
                if failures.len() >= MAX_FAILURES {
                    failures.retain(|_, (at, _)| at.elapsed() < RETRY_AFTER);
                }
                failures.insert(id, (Instant::now(), why.clone()));
                Err(why)
            }
        }
    }
}
