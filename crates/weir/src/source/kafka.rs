//! The Kafka connector's settings: its options, the consumer configuration built from them, and
//! how a scan deals the topic's partitions out to its readers. The reading itself (one Kafka
//! loop for every kind of scan) is `crate::pipeline::reader`.

use std::time::Duration;

use weir_codec::{OptionKind, OptionSpec, Options};
use weir_kafka::{Consumer, ConsumerConfig, GroupConfig, PartitionSelection, StartupMode};

use crate::error::{SourceError, SourceErrorKind};
use crate::kafka_security::security_config;

/// The Kafka connector's options.
pub(crate) const KAFKA_OPTIONS: &[OptionSpec] = &[
    BROKERS,
    TOPIC,
    PARTITIONS,
    STARTUP_MODE,
    STARTUP_OFFSET,
    STARTUP_TIMESTAMP,
    ISOLATION_LEVEL,
    OFFSET_RESET,
    CHECK_CRCS,
    GROUP_ID,
    GROUP_PROTOCOL,
    GROUP_INSTANCE_ID,
    SESSION_TIMEOUT,
    MAX_POLL_INTERVAL,
    GROUP_REMOTE_ASSIGNOR,
];

const BROKERS: OptionSpec = OptionSpec::new(
    "brokers",
    OptionKind::List,
    "kafka: bootstrap brokers, `host:port[,host:port...]` (required)",
);
const TOPIC: OptionSpec = OptionSpec::new("topic", OptionKind::Text, "kafka: the topic (required)");
const PARTITIONS: OptionSpec = OptionSpec::new(
    "partitions",
    OptionKind::Text,
    "kafka: `all`, or ids and ranges (`0,2,5-7`): a static assignment, so several weir \
     processes can split a topic",
)
.default_value("all");
const STARTUP_MODE: OptionSpec = OptionSpec::new(
    "scan.startup.mode",
    OptionKind::Choice(&["earliest", "latest", "offset", "timestamp"]),
    "kafka: where each partition starts; `offset` reads `'scan.startup.offset'`, `timestamp` \
     reads `'scan.startup.timestamp'`",
)
.default_value("earliest");
const STARTUP_OFFSET: OptionSpec = OptionSpec::new(
    "scan.startup.offset",
    OptionKind::Text,
    "kafka: with `offset`: `N` for every partition, or `p:N,p:N`",
);
const STARTUP_TIMESTAMP: OptionSpec = OptionSpec::new(
    "scan.startup.timestamp",
    OptionKind::Count,
    "kafka: with `timestamp`: milliseconds since the epoch",
);
const ISOLATION_LEVEL: OptionSpec = OptionSpec::new(
    "isolation.level",
    OptionKind::Choice(&["read_committed", "read_uncommitted"]),
    "kafka: aborted transactions are filtered out, control batches skipped",
)
.default_value("read_committed");
const OFFSET_RESET: OptionSpec = OptionSpec::new(
    "offset.reset",
    OptionKind::Choice(&["fail", "earliest", "latest"]),
    "kafka: what an out-of-range start offset does",
)
.default_value("fail");
const CHECK_CRCS: OptionSpec = OptionSpec::new(
    "check.crcs",
    OptionKind::Bool,
    "kafka: check each record batch's CRC32C",
)
.default_value("true");

const GROUP_ID: OptionSpec = OptionSpec::new(
    "group.id",
    OptionKind::Text,
    "kafka: join this consumer group; the group's coordinator spreads the topic's partitions \
     over the processes that join it (a `delta` sink fed straight from the source, `--follow`)",
);
const GROUP_PROTOCOL: OptionSpec = OptionSpec::new(
    "group.protocol",
    OptionKind::Choice(&["consumer", "classic"]),
    "kafka: with `'group.id'`: `consumer` (Kafka 4, the coordinator assigns) or `classic` \
     (JoinGroup/SyncGroup, cooperative-sticky; Kafka 3.x, Redpanda)",
)
.default_value("consumer");
const GROUP_INSTANCE_ID: OptionSpec = OptionSpec::new(
    "group.instance.id",
    OptionKind::Text,
    "kafka: with `'group.id'`: a static member, whose partitions wait for it through a restart \
     within the session timeout",
);
const SESSION_TIMEOUT: OptionSpec = OptionSpec::new(
    "session.timeout.ms",
    OptionKind::Count,
    "kafka: with `'group.protocol'` = `classic`: a member silent this long is dropped (the \
     consumer protocol uses the broker's `group.consumer.session.timeout.ms`)",
)
.default_value("45000");
const MAX_POLL_INTERVAL: OptionSpec = OptionSpec::new(
    "max.poll.interval.ms",
    OptionKind::Count,
    "kafka: with `'group.id'`: how long the coordinator waits for a member to give up a \
     partition it takes away",
)
.default_value("300000");
const GROUP_REMOTE_ASSIGNOR: OptionSpec = OptionSpec::new(
    "group.remote.assignor",
    OptionKind::Text,
    "kafka: with `'group.protocol'` = `consumer`: the coordinator's assignor (`uniform`, \
     `range`); the broker's default when not set",
);

/// A Kafka source's settings: the consumer's, and the consumer group it joins, if any.
#[derive(Debug, Clone)]
pub(crate) struct KafkaSettings {
    /// The consumer of every scan (with a group, its partitions are the group's assignment).
    pub(crate) consumer: ConsumerConfig,
    /// `'group.id'` and the group options: the partitions come from the group.
    pub(crate) group: Option<GroupConfig>,
}

/// The Kafka source settings from its `WITH` options, on top of the engine's Kafka
/// properties (`--kafka-config`).
pub(crate) fn kafka_settings(
    source: &str,
    options: &Options,
    defaults: &[(String, String)],
) -> Result<KafkaSettings, SourceError> {
    let consumer = consumer_config(source, options, defaults)?;
    let group = group_config(source, options)?;
    if group.is_some() && consumer.partitions != PartitionSelection::All {
        return Err(SourceError::new(
            source,
            SourceErrorKind::Option(weir_codec::OptionError::Conflict(
                "'partitions' and 'group.id' both say which partitions to read: a static \
                 list, or the group's assignment; give one"
                    .into(),
            )),
        ));
    }
    Ok(KafkaSettings { consumer, group })
}

/// The consumer group of `'group.id'` and its options; none without `'group.id'` (and then
/// no group option may be given).
fn group_config(source: &str, options: &Options) -> Result<Option<GroupConfig>, SourceError> {
    let option = |e| SourceError::new(source, SourceErrorKind::Option(e));
    let Some(id) = options.given(&GROUP_ID) else {
        for spec in [
            &GROUP_PROTOCOL,
            &GROUP_INSTANCE_ID,
            &SESSION_TIMEOUT,
            &MAX_POLL_INTERVAL,
            &GROUP_REMOTE_ASSIGNOR,
        ] {
            if options.given(spec).is_some() {
                return Err(option(weir_codec::OptionError::Conflict(format!(
                    "'{}' is a consumer group option, and the source names no 'group.id'",
                    spec.key
                ))));
            }
        }
        return Ok(None);
    };
    if id.trim().is_empty() {
        return Err(option(weir_codec::OptionError::invalid(
            &GROUP_ID,
            GROUP_ID.key,
            id,
            "a group name",
        )));
    }
    let mut group = GroupConfig::new(id);
    if let Some(p) = options.choice(&GROUP_PROTOCOL).map_err(option)? {
        group.protocol = p.parse().map_err(|e: weir_kafka::Error| {
            option(weir_codec::OptionError::invalid(
                &GROUP_PROTOCOL,
                GROUP_PROTOCOL.key,
                p,
                e.to_string(),
            ))
        })?;
    }
    group.instance_id = options.given(&GROUP_INSTANCE_ID).map(str::to_string);
    if let Some(ms) = options.count(&SESSION_TIMEOUT).map_err(option)? {
        group.session_timeout = Duration::from_millis(ms);
    }
    if let Some(ms) = options.count(&MAX_POLL_INTERVAL).map_err(option)? {
        group.rebalance_timeout = Duration::from_millis(ms);
    }
    group.remote_assignor = options.given(&GROUP_REMOTE_ASSIGNOR).map(str::to_string);
    Ok(Some(group))
}

/// The consumer settings of a Kafka source from its `WITH` options, on top of the engine's
/// Kafka properties (`--kafka-config`).
fn consumer_config(
    source: &str,
    options: &Options,
    defaults: &[(String, String)],
) -> Result<ConsumerConfig, SourceError> {
    let option = |e| SourceError::new(source, SourceErrorKind::Option(e));
    let invalid = |spec: &OptionSpec, value: &str, why: String| {
        option(weir_codec::OptionError::invalid(spec, spec.key, value, why))
    };
    let brokers = options.list(&BROKERS);
    if brokers.is_empty() {
        return Err(option(weir_codec::OptionError::Missing {
            key: BROKERS.key.into(),
            doc: BROKERS.doc,
        }));
    }
    let topic = options.require(&TOPIC).map_err(option)?.to_string();
    let mut config = ConsumerConfig {
        brokers,
        topic,
        ..ConsumerConfig::default()
    };
    let partitions = options.require(&PARTITIONS).map_err(option)?;
    config.partitions = partitions
        .parse()
        .map_err(|e: String| invalid(&PARTITIONS, partitions, e))?;
    let mode = options
        .choice(&STARTUP_MODE)
        .map_err(option)?
        .unwrap_or("earliest");
    let value = match mode {
        "offset" => options.given(&STARTUP_OFFSET),
        "timestamp" => options.given(&STARTUP_TIMESTAMP),
        _ => None,
    };
    config.startup =
        StartupMode::parse(mode, value).map_err(|e| invalid(&STARTUP_MODE, mode, e))?;
    if let Some(v) = options.choice(&ISOLATION_LEVEL).map_err(option)? {
        config.isolation = v
            .parse()
            .map_err(|e: String| invalid(&ISOLATION_LEVEL, v, e))?;
    }
    if let Some(v) = options.choice(&OFFSET_RESET).map_err(option)? {
        config.offset_reset = v
            .parse()
            .map_err(|e: String| invalid(&OFFSET_RESET, v, e))?;
    }
    config.check_crc = options.flag(&CHECK_CRCS).map_err(option)?;
    config.security =
        security_config(defaults, options).map_err(|e| SourceError::new(source, e))?;
    Ok(config)
}

/// The selected partitions of the topic dealt round-robin over at most `readers` consumer
/// configurations (never more than there are partitions). Asks a broker for the metadata.
pub(crate) fn shares(
    source: &str,
    template: &ConsumerConfig,
    readers: usize,
    bounded: bool,
) -> Result<Vec<ConsumerConfig>, SourceError> {
    let selected = Consumer::connect(template)
        .map(|c| c.partitions())
        .map_err(|e| SourceError::new(source, e))?;
    if selected.is_empty() {
        return Err(SourceError::new(
            source,
            SourceErrorKind::Option(weir_codec::OptionError::Conflict(format!(
                "topic {} has none of the partitions 'partitions' selects",
                template.topic
            ))),
        ));
    }
    let readers = readers.clamp(1, selected.len());
    let mut shares = vec![Vec::new(); readers];
    for (i, p) in selected.into_iter().enumerate() {
        shares[i % readers].push(p);
    }
    Ok(shares
        .into_iter()
        .map(|share| {
            let mut config = template.clone();
            config.partitions = PartitionSelection::List(share);
            config.bounded = bounded;
            config
        })
        .collect())
}
