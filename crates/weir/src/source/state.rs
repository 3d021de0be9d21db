//! A source's state settings (`'state.dir'`, `'dedup.*'`, `'commit.interval'`), as declared. The
//! dedup stage is the pipeline's (`crate::pipeline::dedup`); the state itself (keys and
//! checkpoints in RocksDB) is `weir_dedup`'s.

use std::path::PathBuf;
use std::time::{Duration, Instant};

use arrow::datatypes::{Schema, TimeUnit};
use weir_codec::{OptionError, OptionKind, OptionSpec, Options};
use weir_dedup::{DedupKey, KeyColumns, KeyMode, StateOptions, StateStore};

use crate::error::{SourceError, SourceErrorKind};
use crate::metrics::SourceStats;

/// The state options of a source.
pub(crate) const STATE_OPTIONS: &[OptionSpec] = &[
    STATE_DIR,
    DEDUP_KEY,
    DEDUP_HASH,
    DEDUP_TIME_COLUMN,
    DEDUP_TTL,
    DEDUP_BLOCK_CACHE,
    DEDUP_RECENT_KEYS,
    COMMIT_INTERVAL,
];

const STATE_DIR: OptionSpec = OptionSpec::new(
    "state.dir",
    OptionKind::Path,
    "keep state here: read positions and, with `dedup.key`, the keys seen (RocksDB); see \
     [State](#state-dedup-and-exactly-once)",
);
const DEDUP_KEY: OptionSpec = OptionSpec::new(
    "dedup.key",
    OptionKind::List,
    "drop rows whose key (`col[,col...]`) was seen before (the first occurrence is kept); \
     needs `state.dir`",
);
const DEDUP_HASH: OptionSpec = OptionSpec::new(
    "dedup.hash",
    OptionKind::Choice(&["xxh3_128", "none"]),
    "store each key as its 128-bit xxh3 hash (16 bytes), or whole",
)
.default_value("xxh3_128");
const DEDUP_TIME_COLUMN: OptionSpec = OptionSpec::new(
    "dedup.time_column",
    OptionKind::Text,
    "with `dedup.ttl`: a `TIMESTAMP` (or `BIGINT` of ms) column by which keys expire",
);
const DEDUP_TTL: OptionSpec = OptionSpec::new(
    "dedup.ttl",
    OptionKind::Duration,
    "a key older than this (`90s`, `15m`, `1h`, `7d`), relative to the largest time seen, \
     expires",
);
const DEDUP_BLOCK_CACHE: OptionSpec = OptionSpec::new(
    "dedup.block_cache",
    OptionKind::Bytes,
    "RocksDB's block cache",
)
.default_value("64MB");
const DEDUP_RECENT_KEYS: OptionSpec = OptionSpec::new(
    "dedup.recent_keys",
    OptionKind::Count,
    "keys kept in memory in front of RocksDB: two generations, each with room for twice this \
     many (at half load, 16 bytes a slot for hashed keys, 32 with a TTL or raw keys: 64 MiB a \
     generation by default; lower it for small streams)",
)
.default_value("1048576");
const COMMIT_INTERVAL: OptionSpec = OptionSpec::new(
    "commit.interval",
    OptionKind::Text,
    "the step size of checkpoints (with `state.dir`) or of a table sink's commits: a time \
     (`5s`), a row count (`100000 rows`), or both; a step ends at whichever comes first",
)
.default_value("5s, 1000000 rows");

/// When a step ends: after this much time, or this many rows read, whichever comes first.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct CommitInterval {
    /// Time since the step began.
    every: Option<Duration>,
    /// Messages read in the step.
    rows: Option<u64>,
}

impl CommitInterval {
    /// A source's `'commit.interval'` (given or the default).
    pub(crate) fn of(source: &str, options: &Options) -> Result<Self, SourceError> {
        let err = |e: OptionError| SourceError::new(source, SourceErrorKind::Option(e));
        Self::parse(options.require(&COMMIT_INTERVAL).map_err(err)?).map_err(err)
    }

    /// True when `options` give `'commit.interval'` (rather than take its default).
    pub(crate) fn declared(options: &Options) -> bool {
        options.given(&COMMIT_INTERVAL).is_some()
    }

    /// Parses `'commit.interval'`: a duration (`5s`), a row count (`100000 rows`), or both,
    /// comma separated.
    fn parse(s: &str) -> Result<Self, OptionError> {
        let bad = |why: String| OptionError::invalid(&COMMIT_INTERVAL, COMMIT_INTERVAL.key, s, why);
        let mut out = Self {
            every: None,
            rows: None,
        };
        for part in s.split(',').map(str::trim).filter(|p| !p.is_empty()) {
            if let Some(n) = part
                .strip_suffix("rows")
                .or_else(|| part.strip_suffix("row"))
            {
                let n: u64 = n
                    .trim()
                    .parse()
                    .map_err(|_| bad(format!("a row count; '{part}' is not one")))?;
                out.rows = Some(n.max(1));
            } else {
                let d = weir_codec::parse_duration(part).map_err(bad)?;
                out.every = Some(d.max(Duration::from_millis(1)));
            }
        }
        if out.every.is_none() && out.rows.is_none() {
            return Err(bad(
                "a time ('5s'), a row count ('100000 rows') or both".into()
            ));
        }
        Ok(out)
    }

    /// True when a step that began at `started` and has read `rows` rows is over.
    pub(crate) fn due(&self, started: Instant, rows: u64) -> bool {
        self.rows.is_some_and(|r| rows >= r) || self.every.is_some_and(|d| started.elapsed() >= d)
    }
}

/// A source's state settings, from its `WITH` options.
#[derive(Debug)]
pub(crate) struct StateSpec {
    /// `'state.dir'`.
    pub(crate) dir: PathBuf,
    options: StateOptions,
}

impl StateSpec {
    /// Reads the state options; `None` without `'state.dir'`. `schema` is the source's table.
    pub(crate) fn parse(
        source: &str,
        options: &Options,
        schema: &Schema,
    ) -> Result<Option<Self>, SourceError> {
        let err = |e: OptionError| SourceError::new(source, SourceErrorKind::Option(e));
        let conflict = |text: String| err(OptionError::Conflict(text));
        let given = |spec: &OptionSpec| options.given(spec).is_some();
        let Some(dir) = options.given(&STATE_DIR) else {
            // 'commit.interval' also paces a table sink's commits, which need no state.
            if let Some(k) = STATE_OPTIONS
                .iter()
                .find(|s| given(s) && s.key != COMMIT_INTERVAL.key)
            {
                return Err(conflict(format!(
                    "'{}' needs 'state.dir' (a directory for the dedup keys and read positions)",
                    k.key
                )));
            }
            return Ok(None);
        };
        let key_names = options.list(&DEDUP_KEY);
        if key_names.is_empty() {
            if let Some(k) = [DEDUP_TIME_COLUMN, DEDUP_TTL, DEDUP_HASH]
                .iter()
                .find(|s| given(s))
            {
                return Err(conflict(format!("'{}' needs 'dedup.key'", k.key)));
            }
        }
        let time = options.given(&DEDUP_TIME_COLUMN);
        let ttl = options.given(&DEDUP_TTL);
        if time.is_some() != ttl.is_some() {
            return Err(conflict(
                "'dedup.time_column' and 'dedup.ttl' go together: keys expire by the time column"
                    .into(),
            ));
        }
        let key = if key_names.is_empty() {
            None
        } else {
            let columns = KeyColumns::resolve(schema, &key_names, time)
                .map_err(|e| SourceError::new(source, e))?;
            let mode: KeyMode = match options.choice(&DEDUP_HASH).map_err(err)? {
                Some("none") => KeyMode::Raw,
                _ => KeyMode::Xxh3_128,
            };
            let ttl = match (
                options.duration(&DEDUP_TTL).map_err(err)?,
                columns.time_unit(),
            ) {
                (Some(d), Some(unit)) => Some(in_unit(d, unit)),
                _ => None,
            };
            Some(DedupKey { columns, mode, ttl })
        };
        let block_cache_bytes = options
            .bytes(&DEDUP_BLOCK_CACHE)
            .map_err(err)?
            .unwrap_or(64 << 20);
        let recent_keys = options
            .count(&DEDUP_RECENT_KEYS)
            .map_err(err)?
            .map_or(0, |n| usize::try_from(n).unwrap_or(usize::MAX));
        Ok(Some(Self {
            dir: PathBuf::from(dir),
            options: StateOptions {
                key,
                block_cache_bytes,
                recent_keys,
            },
        }))
    }

    /// Opens the state directory of the source whose counters are `stats`; they show the state
    /// as its last commit left it from the start, not only after this run's first commit.
    pub(crate) fn open(&self, stats: &SourceStats) -> Result<StateStore, SourceError> {
        let store = StateStore::open(&self.dir, self.options.clone())
            .map_err(|e| SourceError::new(&stats.name, e))?;
        stats.remember_state(&store);
        Ok(store)
    }
}

/// The state of a source read by a member of a consumer group: each partition's dedup keys and
/// a continuous query's open windows, in files under `'state.dir'` that every member of the
/// group reads (`crate::pipeline::group_state`, `crate::pipeline::group_windows`).
pub(crate) struct GroupStateSpec {
    /// `'state.dir'`: a local path or an object-storage URL.
    pub(crate) location: String,
    /// The dedup key, if the source has one.
    pub(crate) key: Option<DedupKey>,
    /// The source's options, for the object store's credentials.
    pub(crate) options: Options,
}

impl std::fmt::Debug for GroupStateSpec {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        // Not the options: they may hold the store's credentials.
        f.debug_struct("GroupStateSpec")
            .field("location", &self.location)
            .field("key", &self.key.as_ref().map(DedupKey::describe))
            .finish()
    }
}

impl StateSpec {
    /// The state of the source `source` as a member of consumer group `group_id`: its dedup
    /// keys and a continuous query's open windows move with their partitions, so they are kept
    /// per partition in files every member reads, not in this process's RocksDB.
    pub(crate) fn for_group(
        self,
        source: &str,
        group_id: &str,
        options: &Options,
    ) -> Result<GroupStateSpec, SourceError> {
        let conflict = |text: String| {
            SourceError::new(source, SourceErrorKind::Option(OptionError::Conflict(text)))
        };
        let key = self.options.key;
        if let Some(k) = [DEDUP_BLOCK_CACHE, DEDUP_RECENT_KEYS]
            .iter()
            .find(|s| options.given(s).is_some())
        {
            return Err(conflict(format!(
                "'{}' tunes the RocksDB state of a source outside a consumer group; with \
                 'group.id' = '{group_id}' each partition's keys are held in memory and kept in \
                 key files under 'state.dir': drop it",
                k.key
            )));
        }
        Ok(GroupStateSpec {
            location: self.dir.to_string_lossy().into_owned(),
            key,
            options: options.clone(),
        })
    }
}

fn in_unit(d: Duration, unit: TimeUnit) -> i64 {
    let v = match unit {
        TimeUnit::Second => d.as_secs() as u128,
        TimeUnit::Millisecond => d.as_millis(),
        TimeUnit::Microsecond => d.as_micros(),
        TimeUnit::Nanosecond => d.as_nanos(),
    };
    v.min(i64::MAX as u128) as i64
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn commit_intervals() {
        let c = CommitInterval::parse("5s, 1000 rows").unwrap();
        assert_eq!(c.every, Some(Duration::from_secs(5)));
        assert_eq!(c.rows, Some(1000));
        assert_eq!(CommitInterval::parse("1 row").unwrap().rows, Some(1));
        let e = CommitInterval::parse("often").unwrap_err().to_string();
        assert!(e.contains("commit.interval"), "{e}");
        assert!(CommitInterval::parse(" , ").is_err());
    }
}
