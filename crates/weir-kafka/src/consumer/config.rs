//! What a consumer is told: [`ConsumerConfig`] and the option types it is made of, each with
//! the parser of its SQL option.

use std::str::FromStr;
use std::time::Duration;

use crate::security::SecurityConfig;

/// Which partitions of the topic this consumer reads.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub enum PartitionSelection {
    /// Every partition the topic has at connect.
    #[default]
    All,
    /// These partition ids (a static assignment: several processes can split a topic).
    List(Vec<i32>),
}

impl FromStr for PartitionSelection {
    type Err = String;

    /// `all`, or a list of ids and inclusive ranges: `0,2,5-7`.
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        let s = s.trim();
        if s.eq_ignore_ascii_case("all") || s.is_empty() {
            return Ok(Self::All);
        }
        let bad = |p: &str| format!("bad 'partitions' entry '{p}': expected 'all', N or N-M");
        let mut out = Vec::new();
        for part in s.split(',').map(str::trim).filter(|p| !p.is_empty()) {
            if let Some((a, b)) = part.split_once('-') {
                let a: i32 = a.trim().parse().map_err(|_| bad(part))?;
                let b: i32 = b.trim().parse().map_err(|_| bad(part))?;
                if a < 0 || b < a {
                    return Err(bad(part));
                }
                out.extend(a..=b);
            } else {
                let p: i32 = part.parse().map_err(|_| bad(part))?;
                if p < 0 {
                    return Err(bad(part));
                }
                out.push(p);
            }
        }
        out.sort_unstable();
        out.dedup();
        Ok(Self::List(out))
    }
}

/// Where each partition starts (`scan.startup.mode`).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub enum StartupMode {
    /// The log start offset.
    #[default]
    Earliest,
    /// The end: only records written after connect (an unbounded read's usual start).
    Latest,
    /// The same offset in every partition.
    Offset(i64),
    /// An offset per partition id; partitions not listed start at the earliest offset.
    Offsets(Vec<(i32, i64)>),
    /// The first record whose timestamp (ms since the epoch) is at or after this one.
    Timestamp(i64),
}

impl StartupMode {
    /// Parses `scan.startup.mode` and its value (`scan.startup.offset` as `N` or
    /// `p:N,p:N`, `scan.startup.timestamp` in ms).
    pub fn parse(mode: &str, value: Option<&str>) -> Result<Self, String> {
        let need = |what: &str| {
            value.ok_or_else(|| format!("'scan.startup.mode' = '{mode}' needs a {what}"))
        };
        match mode.to_ascii_lowercase().as_str() {
            "earliest" => Ok(Self::Earliest),
            "latest" => Ok(Self::Latest),
            "offset" => {
                let v = need("offset")?.trim();
                if v.contains(':') {
                    let mut out = Vec::new();
                    for e in v.split(',') {
                        let (p, o) = e
                            .split_once(':')
                            .ok_or_else(|| format!("bad offset entry '{e}': expected p:offset"))?;
                        out.push((
                            p.trim().parse().map_err(|_| format!("bad partition in '{e}'"))?,
                            o.trim().parse().map_err(|_| format!("bad offset in '{e}'"))?,
                        ));
                    }
                    Ok(Self::Offsets(out))
                } else {
                    v.parse()
                        .map(Self::Offset)
                        .map_err(|_| format!("bad offset '{v}'"))
                }
            }
            "timestamp" => {
                let v = need("timestamp (ms since the epoch)")?.trim();
                v.parse()
                    .map(Self::Timestamp)
                    .map_err(|_| format!("bad timestamp '{v}'"))
            }
            _ => Err(format!(
                "unknown 'scan.startup.mode' = '{mode}': expected earliest, latest, offset or timestamp"
            )),
        }
    }
}

/// `isolation.level`.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub enum Isolation {
    /// Only committed transactional data; aborted transactions are filtered out and reads stop
    /// at the last stable offset.
    #[default]
    ReadCommitted,
    /// Everything, aborted transactions included.
    ReadUncommitted,
}

impl FromStr for Isolation {
    type Err = String;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        match s.to_ascii_lowercase().as_str() {
            "read_committed" => Ok(Self::ReadCommitted),
            "read_uncommitted" => Ok(Self::ReadUncommitted),
            _ => Err(format!(
                "unknown 'isolation.level' = '{s}': expected read_committed or read_uncommitted"
            )),
        }
    }
}

/// What to do when a position is outside the log (`offset.reset`).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub enum OffsetReset {
    /// Stop with [`Error::OffsetOutOfRange`](crate::Error::OffsetOutOfRange).
    #[default]
    Fail,
    /// Move to the log start (logged).
    Earliest,
    /// Move to the log end (logged).
    Latest,
}

impl FromStr for OffsetReset {
    type Err = String;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        match s.to_ascii_lowercase().as_str() {
            "fail" | "none" => Ok(Self::Fail),
            "earliest" => Ok(Self::Earliest),
            "latest" => Ok(Self::Latest),
            _ => Err(format!(
                "unknown 'offset.reset' = '{s}': expected earliest, latest or fail"
            )),
        }
    }
}

/// Everything a [`Consumer`](crate::Consumer) needs. Each SQL source option maps onto one field.
#[derive(Debug, Clone)]
pub struct ConsumerConfig {
    /// Bootstrap brokers, `host:port` (`'brokers'`).
    pub brokers: Vec<String>,
    /// The topic (`'topic'`).
    pub topic: String,
    /// The partitions read (`'partitions'`).
    pub partitions: PartitionSelection,
    /// Where reading starts (`'scan.startup.mode'` and its value).
    pub startup: StartupMode,
    /// Positions to resume at (next offset by partition id), overriding `startup` for the
    /// partitions listed; the others start as `startup` says.
    pub resume: Vec<(i32, i64)>,
    /// Stop at the end offsets taken at connect (a `SELECT`); `false` follows the topic.
    pub bounded: bool,
    /// `'isolation.level'`.
    pub isolation: Isolation,
    /// Check each batch's CRC32C (`'check.crcs'`).
    pub check_crc: bool,
    /// `'offset.reset'`.
    pub offset_reset: OffsetReset,
    /// Longest time the broker holds a fetch waiting for data (`poll`'s timeout caps it).
    pub fetch_max_wait: Duration,
    /// Bytes the broker waits for before answering a fetch.
    pub fetch_min_bytes: i32,
    /// Most bytes one fetch response may carry.
    pub fetch_max_bytes: i32,
    /// Most bytes per partition in one fetch response.
    pub partition_max_bytes: i32,
    /// Socket timeout for connects and for requests other than fetch waits.
    pub request_timeout: Duration,
    /// First wait after a failure; doubled up to `retry_backoff_max`.
    pub retry_backoff: Duration,
    /// Longest wait between retries.
    pub retry_backoff_max: Duration,
    /// How long failures may go on without any progress before the consumer gives up.
    pub retry_timeout: Duration,
    /// TLS and SASL for every broker connection (`'security.protocol'` and the rest; see
    /// [`SecurityConfig::from_properties`]).
    pub security: SecurityConfig,
}

impl Default for ConsumerConfig {
    fn default() -> Self {
        Self {
            brokers: Vec::new(),
            topic: String::new(),
            partitions: PartitionSelection::All,
            startup: StartupMode::Earliest,
            resume: Vec::new(),
            bounded: true,
            isolation: Isolation::ReadCommitted,
            check_crc: true,
            offset_reset: OffsetReset::Fail,
            fetch_max_wait: Duration::from_millis(500),
            fetch_min_bytes: 1,
            fetch_max_bytes: 64 << 20,
            partition_max_bytes: 8 << 20,
            request_timeout: Duration::from_secs(30),
            retry_backoff: Duration::from_millis(100),
            retry_backoff_max: Duration::from_secs(2),
            retry_timeout: Duration::from_secs(120),
            security: SecurityConfig::default(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn options_parse() {
        assert_eq!(
            "all".parse::<PartitionSelection>().unwrap(),
            PartitionSelection::All
        );
        assert_eq!(
            "3, 0,5-7".parse::<PartitionSelection>().unwrap(),
            PartitionSelection::List(vec![0, 3, 5, 6, 7])
        );
        assert!("2-1".parse::<PartitionSelection>().is_err());
        assert!("x".parse::<PartitionSelection>().is_err());
        assert_eq!(
            StartupMode::parse("offset", Some("0:10,2:5")).unwrap(),
            StartupMode::Offsets(vec![(0, 10), (2, 5)])
        );
        assert_eq!(
            StartupMode::parse("offset", Some("42")).unwrap(),
            StartupMode::Offset(42)
        );
        assert_eq!(
            StartupMode::parse("TIMESTAMP", Some("1700000000000")).unwrap(),
            StartupMode::Timestamp(1_700_000_000_000)
        );
        assert!(StartupMode::parse("offset", None).is_err());
        assert!(StartupMode::parse("group", None).is_err());
        assert_eq!(
            "read_uncommitted".parse::<Isolation>().unwrap(),
            Isolation::ReadUncommitted
        );
        assert_eq!(
            "earliest".parse::<OffsetReset>().unwrap(),
            OffsetReset::Earliest
        );
        assert!("sometimes".parse::<OffsetReset>().is_err());
    }
}
