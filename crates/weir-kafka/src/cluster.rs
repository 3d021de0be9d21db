//! What the client asks the cluster besides fetching: where a topic's partitions lead
//! (Metadata), where their logs start and end (ListOffsets), and topic creation (CreateTopics,
//! for loading test and benchmark data).

use std::time::Duration;

use kafka_protocol::messages::{
    create_topics_request::CreatableTopic, list_offsets_request::ListOffsetsPartition,
    list_offsets_request::ListOffsetsTopic, metadata_request::MetadataRequestTopic, ApiKey,
    BrokerId, CreateTopicsRequest, CreateTopicsResponse, ListOffsetsRequest, MetadataRequest,
    TopicName,
};
use kafka_protocol::protocol::StrBytes;

use crate::connection::{Connection, Connector};
use crate::error::{error_name, is_retriable, Error, Result};
use crate::responses::{self, BrokerAddr, ListedOffset};
use crate::security::SecurityConfig;

/// ListOffsets timestamp asking for the offset after the last (high watermark or LSO).
pub const LATEST: i64 = -1;
/// ListOffsets timestamp asking for the log start offset.
pub const EARLIEST: i64 = -2;

/// The leaders of one topic's partitions.
#[derive(Debug, Clone)]
pub(crate) struct TopicLayout {
    /// The brokers.
    pub brokers: Vec<BrokerAddr>,
    /// Leader node id per partition id (-1: no leader right now).
    pub leaders: Vec<i32>,
}

impl TopicLayout {
    /// The address of a node.
    pub fn addr(&self, node: i32) -> Option<&str> {
        self.brokers
            .iter()
            .find(|b| b.node_id == node)
            .map(|b| b.addr.as_str())
    }
}

/// Opens a connection to the first reachable broker of `addrs`. A security failure
/// (authentication, TLS, the wrong protocol) is returned as it is: another broker of the same
/// cluster would refuse the same way, and it is not a matter of reaching one.
pub(crate) fn connect_any(connector: &Connector, addrs: &[String]) -> Result<Connection> {
    let mut last = String::from("no brokers given");
    for a in addrs {
        match connector.open(a) {
            Ok(c) => return Ok(c),
            Err(e) if e.is_security() => return Err(e),
            Err(e) => last = e.to_string(),
        }
    }
    Err(Error::NoBroker {
        brokers: addrs.to_vec(),
        last,
    })
}

fn topic_name(t: &str) -> TopicName {
    TopicName(StrBytes::from_string(t.to_string()))
}

/// Asks `conn` for the layout of `topic`. A topic that does not exist is [`Error::Topic`]; one
/// whose metadata is not ready yet (just created) is a retriable [`Error::Broker`].
pub(crate) fn topic_layout(conn: &mut Connection, topic: &str) -> Result<TopicLayout> {
    let v = conn.version(ApiKey::Metadata, "Metadata", 4, 12)?;
    let req = MetadataRequest::default()
        .with_topics(Some(vec![
            MetadataRequestTopic::default().with_name(Some(topic_name(topic)))
        ]))
        .with_allow_auto_topic_creation(false);
    let body = conn.request_body(ApiKey::Metadata, v, &req)?;
    let (brokers, topic_md) =
        responses::metadata(&body, v, topic).map_err(|e| conn.malformed("Metadata", e))?;
    let Some(t) = topic_md else {
        return Err(Error::Topic {
            topic: topic.to_string(),
            reason: "not in the metadata response".into(),
        });
    };
    if t.error_code == 3 {
        return Err(Error::Topic {
            topic: topic.to_string(),
            reason: "does not exist (UNKNOWN_TOPIC_OR_PARTITION)".into(),
        });
    }
    if t.error_code != 0 {
        return Err(Error::Broker {
            topic: topic.to_string(),
            partition: -1,
            offset: -1,
            api: "Metadata",
            code: t.error_code,
            name: error_name(t.error_code),
        });
    }
    let count = t.partitions.iter().map(|p| p.0).max().map_or(0, |m| m + 1);
    if count <= 0 || count > 1_000_000 {
        return Err(Error::Topic {
            topic: topic.to_string(),
            reason: format!("has {count} partitions"),
        });
    }
    let mut leaders = vec![-1; count as usize];
    for &(index, error_code, leader) in &t.partitions {
        if index >= 0 && error_code == 0 {
            leaders[index as usize] = leader;
        }
    }
    Ok(TopicLayout { brokers, leaders })
}

/// Asks the leader on `conn` for an offset per partition (`timestamp` is [`EARLIEST`],
/// [`LATEST`] or milliseconds since the epoch). `read_committed` makes LATEST the last stable
/// offset.
pub(crate) fn list_offsets(
    conn: &mut Connection,
    topic: &str,
    partitions: &[i32],
    timestamp: i64,
    read_committed: bool,
) -> Result<Vec<ListedOffset>> {
    let v = conn.version(ApiKey::ListOffsets, "ListOffsets", 2, 7)?;
    let req = ListOffsetsRequest::default()
        .with_replica_id(BrokerId(-1))
        .with_isolation_level(i8::from(read_committed))
        .with_topics(vec![ListOffsetsTopic::default()
            .with_name(topic_name(topic))
            .with_partitions(
                partitions
                    .iter()
                    .map(|&p| {
                        ListOffsetsPartition::default()
                            .with_partition_index(p)
                            .with_current_leader_epoch(-1)
                            .with_timestamp(timestamp)
                    })
                    .collect(),
            )]);
    let body = conn.request_body(ApiKey::ListOffsets, v, &req)?;
    let out =
        responses::list_offsets(&body, v, topic).map_err(|e| conn.malformed("ListOffsets", e))?;
    for &p in partitions {
        if !out.iter().any(|o| o.partition == p) {
            return Err(conn.protocol("ListOffsets", format!("no answer for partition {p}")));
        }
    }
    Ok(out)
}

/// Turns a ListOffsets error code into an error (retriable or not).
pub(crate) fn listed_error(topic: &str, o: &ListedOffset) -> Error {
    Error::Broker {
        topic: topic.to_string(),
        partition: o.partition,
        offset: -1,
        api: "ListOffsets",
        code: o.error_code,
        name: error_name(o.error_code),
    }
}

/// True when `e` is a partition error worth a metadata refresh and another try.
pub(crate) fn retriable(e: &Error) -> bool {
    match e {
        Error::Broker { code, .. } => is_retriable(*code),
        other => other.is_transient(),
    }
}

/// The id of the cluster that `brokers` belong to (Metadata's `cluster_id`; `None` when the
/// broker names none): what tells two bootstrap lists of one cluster from two clusters.
pub fn cluster_id(
    brokers: &[String],
    security: &SecurityConfig,
    timeout: Duration,
) -> Result<Option<String>> {
    let connector = Connector::new(security, timeout)?;
    let mut conn = connect_any(&connector, brokers)?;
    let v = conn.version(ApiKey::Metadata, "Metadata", 4, 12)?;
    // No topics: only the brokers and the cluster id come back.
    let req = MetadataRequest::default()
        .with_topics(Some(Vec::new()))
        .with_allow_auto_topic_creation(false);
    let resp: kafka_protocol::messages::MetadataResponse =
        conn.request(ApiKey::Metadata, v, &req)?;
    Ok(resp.cluster_id.map(|id| id.to_string()))
}

/// Creates `topic` with `partitions` partitions (replication factor 1 unless given) and waits
/// until its partitions have leaders. `configs` are topic settings such as
/// `("compression.type", "zstd")`. An existing topic is an error unless `if_not_exists`.
/// Connects in plaintext; [`create_topic_with`] takes a [`SecurityConfig`].
pub fn create_topic(
    brokers: &[String],
    topic: &str,
    partitions: i32,
    replication: i16,
    configs: &[(&str, &str)],
    if_not_exists: bool,
) -> Result<()> {
    create_topic_with(
        brokers,
        &SecurityConfig::default(),
        topic,
        partitions,
        replication,
        configs,
        if_not_exists,
    )
}

/// [`create_topic`] over connections secured by `security` (TLS, SASL).
pub fn create_topic_with(
    brokers: &[String],
    security: &SecurityConfig,
    topic: &str,
    partitions: i32,
    replication: i16,
    configs: &[(&str, &str)],
    if_not_exists: bool,
) -> Result<()> {
    let timeout = Duration::from_secs(30);
    let connector = Connector::new(security, timeout)?;
    let mut conn = connect_any(&connector, brokers)?;
    let v = conn.version(ApiKey::CreateTopics, "CreateTopics", 2, 7)?;
    let req = CreateTopicsRequest::default()
        .with_timeout_ms(30_000)
        .with_topics(vec![CreatableTopic::default()
        .with_name(topic_name(topic))
        .with_num_partitions(partitions)
        .with_replication_factor(replication)
        .with_configs(
            configs
                .iter()
                .map(|(k, val)| {
                    kafka_protocol::messages::create_topics_request::CreatableTopicConfig::default()
                        .with_name(StrBytes::from_string((*k).to_string()))
                        .with_value(Some(StrBytes::from_string((*val).to_string())))
                })
                .collect(),
        )]);
    let resp: CreateTopicsResponse = conn.request(ApiKey::CreateTopics, v, &req)?;
    // An existing topic keeps its own partition count; wait for those, not for `partitions`.
    let mut existed = false;
    for t in &resp.topics {
        if t.error_code == 36 && if_not_exists {
            existed = true;
            continue;
        }
        if t.error_code != 0 {
            return Err(Error::Topic {
                topic: topic.to_string(),
                reason: format!(
                    "cannot create: {} {}",
                    error_name(t.error_code),
                    t.error_message.as_ref().map_or("", |m| m.as_str())
                ),
            });
        }
    }
    // The topic exists once the controller says so; wait until every partition has a leader.
    let deadline = std::time::Instant::now() + timeout;
    loop {
        match topic_layout(&mut conn, topic) {
            Ok(l)
                if (l.leaders.len() >= partitions as usize || existed && !l.leaders.is_empty())
                    && l.leaders.iter().all(|&x| x >= 0) =>
            {
                // Metadata can name a leader before that broker serves the partition; a
                // ListOffsets answered without error by every leader means it does.
                if leaders_serve(&connector, &l, topic)? {
                    return Ok(());
                }
                std::thread::sleep(Duration::from_millis(50));
            }
            Ok(_) | Err(Error::Topic { .. }) | Err(Error::Broker { .. })
                if std::time::Instant::now() < deadline =>
            {
                std::thread::sleep(Duration::from_millis(50));
            }
            Ok(_) => {
                return Err(Error::Topic {
                    topic: topic.to_string(),
                    reason: "partitions have no leader 30 s after creation".into(),
                })
            }
            Err(e) => return Err(e),
        }
    }
}

/// True when every partition's leader answers ListOffsets for it without error.
fn leaders_serve(connector: &Connector, layout: &TopicLayout, topic: &str) -> Result<bool> {
    let mut nodes = layout.leaders.clone();
    nodes.sort_unstable();
    nodes.dedup();
    for node in nodes {
        let Some(addr) = layout.addr(node) else {
            return Ok(false);
        };
        let mine: Vec<i32> = (0..layout.leaders.len() as i32)
            .filter(|&p| layout.leaders[p as usize] == node)
            .collect();
        let mut conn = connector.open(addr)?;
        let listed = list_offsets(&mut conn, topic, &mine, LATEST, false)?;
        if listed.iter().any(|o| o.error_code != 0) {
            return Ok(false);
        }
    }
    Ok(true)
}
