//! Membership of a consumer group: the partitions of the subscribed topics that the group gives
//! this member, handed over between members so that no partition has two owners that both
//! know it. Two protocols, chosen by `'group.protocol'` as librdkafka names them: Kafka 4's
//! consumer protocol (KIP-848, [`consumer`]), where the coordinator computes the assignment,
//! and the classic one (JoinGroup and SyncGroup, [`classic`]), where the member the coordinator
//! makes leader computes it, with the cooperative-sticky assignor ([`assignor`]), for brokers
//! without the new protocol (Kafka 3.x, Redpanda).
//!
//! Either way a member hears of its partitions as a [`GroupEvent::Assigned`], finishes with the
//! partitions no longer listed (their open steps committed or dropped), then says what it still
//! owns ([`GroupMember::owned`]); only then may the group give those partitions to another.

mod assignor;
mod classic;
mod consumer;
mod offsets;

pub(crate) use offsets::commit_stamp;
pub use offsets::{committed_offsets, committed_offsets_stamped, CommittedOffset, GroupMetadata};

use std::time::{Duration, Instant};

use std::collections::BTreeMap;

use kafka_protocol::messages::{
    offset_commit_request::OffsetCommitRequestPartition,
    offset_commit_request::OffsetCommitRequestTopic, ApiKey, FindCoordinatorRequest,
    FindCoordinatorResponse, GroupId, OffsetCommitRequest, OffsetCommitResponse, TopicName,
};
use kafka_protocol::protocol::StrBytes;

use crate::cluster;
use crate::connection::{Connection, Connector};
use crate::error::{error_name, Error, Result};
use crate::security::SecurityConfig;

/// COORDINATOR_LOAD_IN_PROGRESS, COORDINATOR_NOT_AVAILABLE, NOT_COORDINATOR: find the
/// coordinator again and ask again.
pub(crate) const LOADING: i16 = 14;
pub(crate) const NOT_AVAILABLE: i16 = 15;
pub(crate) const NOT_COORDINATOR: i16 = 16;
/// ILLEGAL_GENERATION, UNKNOWN_MEMBER_ID, REBALANCE_IN_PROGRESS, MEMBER_ID_REQUIRED,
/// FENCED_MEMBER_EPOCH: how a coordinator tells a member the group moved on, or asks it to join.
pub(crate) const ILLEGAL_GENERATION: i16 = 22;
pub(crate) const UNKNOWN_MEMBER_ID: i16 = 25;
pub(crate) const REBALANCE_IN_PROGRESS: i16 = 27;
pub(crate) const MEMBER_ID_REQUIRED: i16 = 79;
pub(crate) const FENCED_MEMBER_EPOCH: i16 = 110;
/// A partition of a topic, by name.
pub type TopicPartition = (String, i32);

/// Which group protocol a member speaks (`'group.protocol'`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum GroupProtocol {
    /// `consumer`: Kafka 4's protocol (KIP-848), the coordinator assigns.
    Consumer,
    /// `classic`: JoinGroup and SyncGroup, the leader assigns (cooperative-sticky).
    Classic,
}

impl std::str::FromStr for GroupProtocol {
    type Err = Error;
    fn from_str(s: &str) -> Result<Self> {
        match s {
            "consumer" => Ok(Self::Consumer),
            "classic" => Ok(Self::Classic),
            other => Err(Error::Option {
                key: "group.protocol".into(),
                reason: format!("'{other}' is not a group protocol; use 'consumer' or 'classic'"),
            }),
        }
    }
}

/// How a member joins its group.
#[derive(Debug, Clone)]
pub struct GroupConfig {
    /// `group.id`.
    pub group_id: String,
    /// `group.protocol`.
    pub protocol: GroupProtocol,
    /// `session.timeout.ms` of the classic protocol: how long the coordinator waits for a
    /// heartbeat before it drops the member (the consumer protocol's is the broker's
    /// `group.consumer.session.timeout.ms`).
    pub session_timeout: Duration,
    /// `group.instance.id`: a static member, whose partitions wait for it through a restart
    /// within the session timeout instead of moving at once.
    pub instance_id: Option<String>,
    /// How long the coordinator waits for this member to give up a partition it takes away
    /// (`max.poll.interval.ms` in librdkafka and the Java client, whose name this follows).
    pub rebalance_timeout: Duration,
    /// `group.remote.assignor`: the coordinator's assignor (`uniform` or `range`), or its default.
    pub remote_assignor: Option<String>,
    /// How long one request to the coordinator may take, finding it included.
    pub timeout: Duration,
}

impl GroupConfig {
    /// A dynamic member of `group_id` with librdkafka's defaults.
    pub fn new(group_id: &str) -> Self {
        Self {
            group_id: group_id.to_string(),
            protocol: GroupProtocol::Consumer,
            session_timeout: Duration::from_secs(45),
            instance_id: None,
            rebalance_timeout: Duration::from_secs(300),
            remote_assignor: None,
            timeout: Duration::from_secs(30),
        }
    }
}

/// What a heartbeat brought.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum GroupEvent {
    /// Nothing new: the member keeps what it owns.
    Unchanged,
    /// The coordinator gave the member these partitions (sorted), in place of those before.
    /// The member finishes with the partitions no longer listed, then calls
    /// [`GroupMember::owned`] with what it still owns.
    Assigned(Vec<TopicPartition>),
    /// The coordinator fenced the member: every partition it held may already be another's.
    /// It must drop what it had not committed; it owns nothing, and its next poll joins again.
    Fenced,
}

/// One member of a consumer group.
pub struct GroupMember(Member);

enum Member {
    Consumer(consumer::ConsumerMember),
    Classic(classic::ClassicMember),
}

macro_rules! each {
    ($self:expr, $m:ident => $e:expr) => {
        match &$self.0 {
            Member::Consumer($m) => $e,
            Member::Classic($m) => $e,
        }
    };
    (mut $self:expr, $m:ident => $e:expr) => {
        match &mut $self.0 {
            Member::Consumer($m) => $e,
            Member::Classic($m) => $e,
        }
    };
}

impl GroupMember {
    /// Joins `config.group_id` by `config.protocol`, subscribed to `topics`, through any of
    /// `brokers` (connected as `security` says). The member owns nothing until a
    /// [`GroupMember::poll`] brings its partitions.
    pub fn join(
        brokers: &[String],
        security: &SecurityConfig,
        config: GroupConfig,
        topics: &[String],
    ) -> Result<Self> {
        if config.group_id.is_empty() {
            return Err(Error::Config("'group.id' must not be empty".into()));
        }
        Ok(Self(match config.protocol {
            GroupProtocol::Consumer => Member::Consumer(consumer::ConsumerMember::join(
                brokers, security, config, topics,
            )?),
            GroupProtocol::Classic => Member::Classic(classic::ClassicMember::join(
                brokers, security, config, topics,
            )?),
        }))
    }

    /// This member's id.
    pub fn member_id(&self) -> &str {
        each!(self, m => m.member_id())
    }

    /// The member's epoch (consumer protocol) or generation (classic): the group's generation
    /// as this member knows it.
    pub fn epoch(&self) -> i32 {
        each!(self, m => m.epoch())
    }

    /// The group as this member knows it now, for the offsets of a transaction (KIP-447).
    pub fn metadata(&self) -> GroupMetadata {
        let config = each!(self, m => m.config());
        GroupMetadata {
            group_id: config.group_id.clone(),
            generation: self.epoch(),
            member_id: self.member_id().to_string(),
            instance_id: config.instance_id.clone(),
        }
    }

    /// The partitions the member says it owns.
    pub fn owned_partitions(&self) -> &[TopicPartition] {
        each!(self, m => m.owned_partitions())
    }

    /// How many assignments the member was given.
    pub fn rebalances(&self) -> u64 {
        each!(self, m => m.rebalances())
    }

    /// Records that the member owns exactly `partitions` now, having finished with those the
    /// last assignment took away; the group hears of it at the next [`GroupMember::poll`].
    pub fn owned(&mut self, partitions: Vec<TopicPartition>) {
        each!(mut self, m => m.owned(partitions))
    }

    /// Heartbeats when one is due, joins again when the group rebalances, and returns what
    /// that brought. A classic member's poll may wait for the rest of the group to join (up to
    /// `rebalance_timeout`), so each member polls on a thread of its own.
    pub fn poll(&mut self) -> Result<GroupEvent> {
        each!(mut self, m => m.poll())
    }

    /// Commits `offsets` (the next offset to read, per partition) to the group for lag
    /// monitors and Kafka's own tools, stamped with the member's epoch or generation, so a
    /// member the group has moved past cannot write them.
    pub fn commit_offsets(&mut self, offsets: &[(TopicPartition, i64)]) -> Result<()> {
        each!(mut self, m => m.commit_offsets(offsets))
    }

    /// Leaves the group; its partitions go to the others at once. A static member's wait for it
    /// through the session timeout instead (the classic protocol sends nothing for it).
    pub fn leave(self) -> Result<()> {
        match self.0 {
            Member::Consumer(m) => m.leave(),
            Member::Classic(m) => m.leave(),
        }
    }
}

/// A member id as the Java client makes one: 16 random bytes in URL-safe base64.
pub(crate) fn new_member_id() -> Result<String> {
    use base64::Engine as _;
    let mut raw = [0u8; 16];
    crate::security::tls::provider()
        .secure_random
        .fill(&mut raw)
        .map_err(|_| Error::Config("no secure random numbers for a group member id".into()))?;
    Ok(base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(raw))
}

/// A connection to the coordinator of group `group`, asked of any of `brokers`.
pub(crate) fn locate(
    connector: &Connector,
    brokers: &[String],
    group: &str,
    timeout: Duration,
) -> Result<Connection> {
    let deadline = Instant::now() + timeout;
    loop {
        let mut conn = cluster::connect_any(connector, brokers)?;
        let v = conn.version(ApiKey::FindCoordinator, "FindCoordinator", 4, 6)?;
        // Key type 0: a group coordinator.
        let req = FindCoordinatorRequest::default()
            .with_key_type(0)
            .with_coordinator_keys(vec![StrBytes::from_string(group.to_string())]);
        let resp: FindCoordinatorResponse = conn.request(ApiKey::FindCoordinator, v, &req)?;
        let (code, node, addr) = match resp.coordinators.first() {
            Some(c) => (c.error_code, c.node_id.0, format!("{}:{}", c.host, c.port)),
            None => (resp.error_code, -1, String::new()),
        };
        if code == 0 && node >= 0 {
            return connector.open(&addr);
        }
        if Instant::now() >= deadline || !matches!(code, LOADING | NOT_AVAILABLE | NOT_COORDINATOR)
        {
            return Err(Error::Group {
                group_id: group.to_string(),
                reason: format!(
                    "no group coordinator: FindCoordinator answered {} ({code})",
                    error_name(code)
                ),
            });
        }
        std::thread::sleep(Duration::from_millis(100));
    }
}

/// The connection to a group's coordinator, found again when the coordinator moves or the
/// connection fails.
pub(crate) struct Coordinator {
    connector: Connector,
    brokers: Vec<String>,
    conn: Connection,
}

impl Coordinator {
    /// Finds the coordinator of `config.group_id` through any of `brokers`.
    pub(crate) fn find(
        brokers: &[String],
        security: &SecurityConfig,
        config: &GroupConfig,
    ) -> Result<Self> {
        let connector = Connector::new(security, config.timeout)?;
        let conn = locate(&connector, brokers, &config.group_id, config.timeout)?;
        Ok(Self {
            connector,
            brokers: brokers.to_vec(),
            conn,
        })
    }

    /// A connection to any broker of the cluster (for metadata).
    pub(crate) fn any_broker(&self) -> Result<Connection> {
        cluster::connect_any(&self.connector, &self.brokers)
    }

    /// Sends a request to the coordinator and returns its answer. When the connection fails
    /// (I/O, TLS, a garbled or late reply: a broker restarting, a network cut), the coordinator
    /// is found again, a new connection replaces the old, and the request is sent again, until
    /// `deadline`; `request(true)` builds the one sent again (a heartbeat of the consumer
    /// protocol after a lost answer must be a full one, or the assignment it carried is never
    /// sent again). Each attempt reads with `read_timeout`.
    pub(crate) fn call<Req, Resp>(
        &mut self,
        config: &GroupConfig,
        (key, api, min, max): (ApiKey, &'static str, i16, i16),
        read_timeout: Duration,
        deadline: Instant,
        request: impl Fn(bool) -> Req,
    ) -> Result<Resp>
    where
        Req: kafka_protocol::protocol::Encodable
            + kafka_protocol::protocol::HeaderVersion
            + kafka_protocol::protocol::Message,
        Resp: kafka_protocol::protocol::Decodable,
    {
        let mut again = false;
        loop {
            let conn = &mut self.conn;
            let attempt = conn.set_read_timeout(read_timeout).and_then(|()| {
                let v = conn.version(key, api, min, max)?;
                conn.request::<Req, Resp>(key, v, &request(again))
            });
            match attempt {
                Ok(resp) => return Ok(resp),
                Err(e) if e.is_transient() && Instant::now() < deadline => {
                    log::warn!(
                        "kafka group '{}': {api} to the coordinator failed ({e}); finding it again",
                        config.group_id
                    );
                    std::thread::sleep(Duration::from_millis(200));
                    match locate(
                        &self.connector,
                        &self.brokers,
                        &config.group_id,
                        config.timeout,
                    ) {
                        Ok(c) => self.conn = c,
                        Err(e) if e.is_transient() && Instant::now() < deadline => {}
                        Err(e) => return Err(e),
                    }
                    again = true;
                }
                Err(e) => return Err(e),
            }
        }
    }

    /// For an answer saying the coordinator is loading or has moved, while `deadline` is ahead:
    /// finds it again and returns true (ask again); false for any other answer.
    pub(crate) fn moved(
        &mut self,
        code: i16,
        config: &GroupConfig,
        deadline: Instant,
    ) -> Result<bool> {
        if !matches!(code, LOADING | NOT_AVAILABLE | NOT_COORDINATOR) || Instant::now() >= deadline
        {
            return Ok(false);
        }
        std::thread::sleep(Duration::from_millis(100));
        self.conn = locate(
            &self.connector,
            &self.brokers,
            &config.group_id,
            config.timeout,
        )?;
        Ok(true)
    }

    /// Commits `offsets` for member `member_id` at `epoch` (its member epoch, or its generation
    /// in a classic group) with an OffsetCommit of a version in `versions`.
    pub(crate) fn commit_offsets(
        &mut self,
        config: &GroupConfig,
        epoch: i32,
        member_id: &str,
        offsets: &[(TopicPartition, i64)],
        (min, max): (i16, i16),
    ) -> Result<()> {
        if offsets.is_empty() {
            return Ok(());
        }
        let req = offset_commit_request(config, epoch, member_id, offsets);
        let resp: OffsetCommitResponse = self.call(
            config,
            (ApiKey::OffsetCommit, "OffsetCommit", min, max),
            config.timeout,
            Instant::now() + config.timeout,
            |_| req.clone(),
        )?;
        offset_commit_result(&config.group_id, epoch, &resp)
    }
}

/// What to do about a group error code, for the message that reports it.
pub(crate) fn hint(code: i16, config: &GroupConfig) -> String {
    match code {
        23 => "; the group is in use with the other protocol: set 'group.protocol' to match".into(),
        30 => format!(
            "; grant this client's principal Read on group '{}'",
            config.group_id
        ),
        35 => "; the broker does not run the consumer group protocol for this group (Kafka 4.0 \
               or later runs it by default): set 'group.protocol' = 'classic'"
            .into(),
        82 | 111 => format!(
            "; another process uses 'group.instance.id' = '{}': give each process its own",
            config.instance_id.as_deref().unwrap_or("")
        ),
        _ => String::new(),
    }
}

/// The OffsetCommit of `offsets` by member `member_id` at `epoch` (its member epoch, or its
/// generation in a classic group).
fn offset_commit_request(
    config: &GroupConfig,
    epoch: i32,
    member_id: &str,
    offsets: &[(TopicPartition, i64)],
) -> OffsetCommitRequest {
    let mut by_topic: BTreeMap<&str, Vec<OffsetCommitRequestPartition>> = BTreeMap::new();
    let stamp = commit_stamp();
    for ((topic, partition), offset) in offsets {
        by_topic.entry(topic).or_default().push(
            OffsetCommitRequestPartition::default()
                .with_partition_index(*partition)
                .with_committed_offset(*offset)
                .with_committed_leader_epoch(-1)
                .with_committed_metadata(Some(stamp.clone())),
        );
    }
    OffsetCommitRequest::default()
        .with_group_id(GroupId(StrBytes::from_string(config.group_id.clone())))
        .with_generation_id_or_member_epoch(epoch)
        .with_member_id(StrBytes::from_string(member_id.to_string()))
        .with_group_instance_id(config.instance_id.clone().map(StrBytes::from_string))
        .with_topics(
            by_topic
                .into_iter()
                .map(|(t, partitions)| {
                    OffsetCommitRequestTopic::default()
                        .with_name(TopicName(StrBytes::from_string(t.to_string())))
                        .with_partitions(partitions)
                })
                .collect(),
        )
}

/// An OffsetCommit's answer: `Ok`, or the partitions it refused and why.
fn offset_commit_result(group: &str, epoch: i32, resp: &OffsetCommitResponse) -> Result<()> {
    let failed: Vec<String> = resp
        .topics
        .iter()
        .flat_map(|t| {
            t.partitions
                .iter()
                .filter(|p| p.error_code != 0)
                .map(move |p| {
                    format!(
                        "{}/{}: {} ({})",
                        t.name.0,
                        p.partition_index,
                        error_name(p.error_code),
                        p.error_code
                    )
                })
        })
        .collect();
    if failed.is_empty() {
        return Ok(());
    }
    Err(Error::Group {
        group_id: group.to_string(),
        reason: format!(
            "OffsetCommit at epoch {epoch} failed for {}",
            failed.join(", ")
        ),
    })
}
