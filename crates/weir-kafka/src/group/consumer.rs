//! Membership of a consumer group by Kafka 4's consumer group protocol (KIP-848): the group
//! coordinator computes each member's partitions, and a member learns them from its heartbeats
//! (ConsumerGroupHeartbeat). A member joins with epoch 0, is given an epoch and, in the answers
//! to its heartbeats, the partitions it may own. When a rebalance takes a partition away, the
//! member finishes with it first (its open step committed or dropped) and then says so in its
//! next heartbeat, by the partitions it still owns; only then does the coordinator give that
//! partition to another member, so no partition ever has two owners that both know it. A member
//! that stops heartbeating for the group's session timeout (`group.consumer.session.timeout.ms`
//! on the broker, 45 s by default) loses its partitions; one the coordinator fenced (an unknown
//! member id, or an epoch the group has moved past) owns nothing and joins again.

use std::collections::{BTreeMap, HashMap};
use std::time::{Duration, Instant};

use kafka_protocol::messages::{
    consumer_group_heartbeat_request::TopicPartitions, metadata_request::MetadataRequestTopic,
    ApiKey, ConsumerGroupHeartbeatRequest, ConsumerGroupHeartbeatResponse, GroupId,
    MetadataRequest, MetadataResponse, TopicName,
};
use kafka_protocol::protocol::StrBytes;
use uuid::Uuid;

use super::{
    new_member_id, Coordinator, GroupConfig, GroupEvent, TopicPartition, FENCED_MEMBER_EPOCH,
    UNKNOWN_MEMBER_ID,
};
use crate::error::{error_name, Error, Result};
use crate::security::SecurityConfig;

/// One member of a group of the consumer protocol, speaking to the group's coordinator.
pub(crate) struct ConsumerMember {
    config: GroupConfig,
    coordinator: Coordinator,
    topics: Vec<String>,
    member_id: String,
    epoch: i32,
    /// Topic ids (in the coordinator's answers) to names.
    names: HashMap<Uuid, String>,
    /// The partitions the member owns, to be reported in the next heartbeat when changed.
    owned: Vec<TopicPartition>,
    report_owned: bool,
    /// The next heartbeat is a full one: the first of a membership, and any after a failed
    /// exchange; the others send only what changed.
    full: bool,
    interval: Duration,
    last_beat: Option<Instant>,
    rebalances: u64,
}

impl ConsumerMember {
    /// Joins `config.group_id`, subscribed to `topics`, through any of `brokers` (connected as
    /// `security` says): finds the coordinator and learns the topics' ids; the first
    /// [`ConsumerMember::poll`] sends the heartbeat that joins. The member owns nothing until a
    /// heartbeat answers with its partitions.
    pub(crate) fn join(
        brokers: &[String],
        security: &SecurityConfig,
        config: GroupConfig,
        topics: &[String],
    ) -> Result<Self> {
        let mut member = Self {
            member_id: new_member_id()?,
            coordinator: Coordinator::find(brokers, security, &config)?,
            topics: topics.to_vec(),
            config,
            epoch: 0,
            names: HashMap::new(),
            owned: Vec::new(),
            report_owned: false,
            full: true,
            interval: Duration::from_secs(1),
            last_beat: None,
            rebalances: 0,
        };
        member.learn_topic_ids()?;
        Ok(member)
    }

    /// The settings the member joined with.
    pub(crate) fn config(&self) -> &GroupConfig {
        &self.config
    }

    /// This member's id (made by the client, as the protocol's version 1 wants).
    pub(crate) fn member_id(&self) -> &str {
        &self.member_id
    }

    /// The member's epoch: the group's generation as this member knows it (0 before it is
    /// given one).
    pub(crate) fn epoch(&self) -> i32 {
        self.epoch
    }

    /// The partitions the member says it owns.
    pub(crate) fn owned_partitions(&self) -> &[TopicPartition] {
        &self.owned
    }

    /// How many times the coordinator changed this member's partitions.
    pub(crate) fn rebalances(&self) -> u64 {
        self.rebalances
    }

    /// How long until the next heartbeat is due (zero: now).
    pub(crate) fn next_heartbeat_in(&self) -> Duration {
        match self.last_beat {
            None => Duration::ZERO,
            Some(t) => self.interval.saturating_sub(t.elapsed()),
        }
    }

    /// Records that the member owns exactly `partitions` now (having finished with those the
    /// last assignment took away); the next heartbeat tells the coordinator, which may then give
    /// the others to other members.
    pub(crate) fn owned(&mut self, mut partitions: Vec<TopicPartition>) {
        partitions.sort();
        partitions.dedup();
        if partitions != self.owned {
            self.owned = partitions;
            self.report_owned = true;
        }
    }

    /// Sends a heartbeat when one is due (or a change of the owned partitions waits to be told)
    /// and returns what it brought.
    pub(crate) fn poll(&mut self) -> Result<GroupEvent> {
        if self.report_owned || self.next_heartbeat_in().is_zero() {
            self.heartbeat()
        } else {
            Ok(GroupEvent::Unchanged)
        }
    }

    /// Sends one heartbeat now and returns what it brought.
    pub(crate) fn heartbeat(&mut self) -> Result<GroupEvent> {
        let deadline = Instant::now() + self.config.timeout;
        loop {
            let (partial, full) = (
                self.request(self.epoch, self.full),
                self.request(self.epoch, true),
            );
            let resp: ConsumerGroupHeartbeatResponse = self.coordinator.call(
                &self.config,
                (
                    ApiKey::ConsumerGroupHeartbeat,
                    "ConsumerGroupHeartbeat",
                    1,
                    1,
                ),
                self.config.timeout,
                deadline,
                |again| if again { full.clone() } else { partial.clone() },
            )?;
            self.last_beat = Some(Instant::now());
            match resp.error_code {
                0 => return self.answered(resp),
                UNKNOWN_MEMBER_ID | FENCED_MEMBER_EPOCH => {
                    log::warn!(
                        "kafka group '{}': member {} was fenced at epoch {} ({}); it gives up \
                         its partitions and joins again",
                        self.config.group_id,
                        self.member_id,
                        self.epoch,
                        error_name(resp.error_code)
                    );
                    self.epoch = 0;
                    self.full = true;
                    self.owned.clear();
                    self.report_owned = false;
                    return Ok(GroupEvent::Fenced);
                }
                code if self.coordinator.moved(code, &self.config, deadline)? => {
                    self.full = true;
                }
                code => return Err(self.refused("ConsumerGroupHeartbeat", code, &resp)),
            }
        }
    }

    /// Commits `offsets` (the next offset to read, per partition) to the group, as the offsets
    /// lag monitors and Kafka's own tools read (`kafka-consumer-groups.sh --describe`). They are
    /// stamped with the member's epoch, so a member the group has moved past cannot write them;
    /// weir keeps its own positions with its output and never reads these back.
    pub(crate) fn commit_offsets(&mut self, offsets: &[(TopicPartition, i64)]) -> Result<()> {
        // Version 9: the first that takes a member epoch of the consumer protocol.
        let (config, epoch) = (&self.config, self.epoch);
        self.coordinator
            .commit_offsets(config, epoch, &self.member_id, offsets, (9, 9))
    }

    /// Leaves the group (epoch -1; -2 for a static member, whose partitions then wait for it
    /// through the session timeout). The coordinator gives the partitions to the others at once.
    pub(crate) fn leave(mut self) -> Result<()> {
        let epoch = if self.config.instance_id.is_some() {
            -2
        } else {
            -1
        };
        let req = self.request(epoch, false);
        let resp: ConsumerGroupHeartbeatResponse = self.coordinator.call(
            &self.config,
            (
                ApiKey::ConsumerGroupHeartbeat,
                "ConsumerGroupHeartbeat",
                1,
                1,
            ),
            self.config.timeout,
            Instant::now() + self.config.timeout,
            |_| req.clone(),
        )?;
        match resp.error_code {
            0 | UNKNOWN_MEMBER_ID | FENCED_MEMBER_EPOCH => Ok(()),
            code => Err(self.refused("ConsumerGroupHeartbeat (leave)", code, &resp)),
        }
    }

    /// A heartbeat at `epoch`; a `full` one carries the subscription, the settings and the
    /// owned partitions, as the first of a membership and any after a failed exchange must.
    fn request(&self, epoch: i32, full: bool) -> ConsumerGroupHeartbeatRequest {
        let mut req = ConsumerGroupHeartbeatRequest::default()
            .with_group_id(GroupId(StrBytes::from_string(self.config.group_id.clone())))
            .with_member_id(StrBytes::from_string(self.member_id.clone()))
            .with_member_epoch(epoch)
            .with_rebalance_timeout_ms(-1);
        // A static member names itself in every heartbeat that joins or leaves.
        if full || epoch < 0 {
            req = req.with_instance_id(self.config.instance_id.clone().map(StrBytes::from_string));
        }
        if full {
            req = req
                .with_rebalance_timeout_ms(
                    i32::try_from(self.config.rebalance_timeout.as_millis()).unwrap_or(i32::MAX),
                )
                .with_subscribed_topic_names(Some(
                    self.topics
                        .iter()
                        .map(|t| TopicName(StrBytes::from_string(t.clone())))
                        .collect(),
                ))
                .with_server_assignor(
                    self.config
                        .remote_assignor
                        .clone()
                        .map(StrBytes::from_string),
                );
        }
        if epoch == 0 {
            // Joining (or joining again): the coordinator wants an empty list.
            req = req.with_topic_partitions(Some(Vec::new()));
        } else if full || self.report_owned {
            req = req.with_topic_partitions(Some(self.owned_by_id()));
        }
        req
    }

    /// The owned partitions by topic id, as the heartbeat reports them.
    fn owned_by_id(&self) -> Vec<TopicPartitions> {
        let mut by_topic: BTreeMap<&str, Vec<i32>> = BTreeMap::new();
        for (t, p) in &self.owned {
            by_topic.entry(t).or_default().push(*p);
        }
        by_topic
            .into_iter()
            .filter_map(|(t, partitions)| {
                let id = self.names.iter().find(|(_, n)| n.as_str() == t)?.0;
                Some(
                    TopicPartitions::default()
                        .with_topic_id(*id)
                        .with_partitions(partitions),
                )
            })
            .collect()
    }

    fn answered(&mut self, resp: ConsumerGroupHeartbeatResponse) -> Result<GroupEvent> {
        self.epoch = resp.member_epoch;
        if let Ok(ms) = u64::try_from(resp.heartbeat_interval_ms) {
            if ms > 0 {
                self.interval = Duration::from_millis(ms);
            }
        }
        let Some(assignment) = resp.assignment else {
            self.full = false;
            self.report_owned = false;
            return Ok(GroupEvent::Unchanged);
        };
        // Every topic id named first; one the metadata does not show yet (a topic just created)
        // leaves the assignment for a full heartbeat to bring again.
        let mut partitions = Vec::new();
        for tp in &assignment.topic_partitions {
            if !self.names.contains_key(&tp.topic_id) {
                if let Err(e) = self.learn_topic_ids() {
                    log::warn!(
                        "kafka group '{}': the topics of an assignment are not known yet ({e}); \
                         asking again",
                        self.config.group_id
                    );
                }
            }
            let Some(name) = self.names.get(&tp.topic_id) else {
                log::warn!(
                    "kafka group '{}': the assignment names topic id {} that the metadata does \
                     not show yet; asking again",
                    self.config.group_id,
                    tp.topic_id
                );
                self.full = true;
                return Ok(GroupEvent::Unchanged);
            };
            partitions.extend(tp.partitions.iter().map(|&p| (name.clone(), p)));
        }
        self.full = false;
        self.report_owned = false;
        partitions.sort();
        self.rebalances += 1;
        log::info!(
            "kafka group '{}': member {} at epoch {} is given {} partition(s)",
            self.config.group_id,
            self.member_id,
            self.epoch,
            partitions.len()
        );
        Ok(GroupEvent::Assigned(partitions))
    }

    /// Asks the cluster for the ids of the subscribed topics.
    fn learn_topic_ids(&mut self) -> Result<()> {
        let mut conn = self.coordinator.any_broker()?;
        let v = conn.version(ApiKey::Metadata, "Metadata", 10, 12)?;
        let req = MetadataRequest::default()
            .with_topics(Some(
                self.topics
                    .iter()
                    .map(|t| {
                        MetadataRequestTopic::default()
                            .with_name(Some(TopicName(StrBytes::from_string(t.clone()))))
                    })
                    .collect(),
            ))
            .with_allow_auto_topic_creation(false);
        let resp: MetadataResponse = conn.request(ApiKey::Metadata, v, &req)?;
        for t in resp.topics {
            if let (0, Some(name)) = (t.error_code, t.name) {
                self.names.insert(t.topic_id, name.0.to_string());
            }
        }
        Ok(())
    }

    fn refused(&self, api: &str, code: i16, resp: &ConsumerGroupHeartbeatResponse) -> Error {
        let detail = resp
            .error_message
            .as_ref()
            .map(|m| format!(": {m}"))
            .unwrap_or_default();
        let hint = super::hint(code, &self.config);
        Error::Group {
            group_id: self.config.group_id.clone(),
            reason: format!("{api} failed: {} ({code}){detail}{hint}", error_name(code)),
        }
    }
}
