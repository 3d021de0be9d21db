//! Membership of a consumer group by the classic protocol (JoinGroup, SyncGroup, Heartbeat,
//! LeaveGroup), for brokers without Kafka 4's consumer protocol. Every member joins with its
//! subscription and the partitions it owns; the coordinator makes one member leader, which
//! computes everyone's partitions with the cooperative-sticky assignor and hands them out
//! through SyncGroup. A member that loses partitions in a round finishes with them, says so,
//! and joins again, so that the next round can give them to their new owner. A heartbeat
//! answered REBALANCE_IN_PROGRESS starts a new round; one answered with an unknown member or an
//! old generation means the group moved past this member: it owns nothing and joins again.

use std::collections::{BTreeMap, BTreeSet};
use std::time::{Duration, Instant};

use bytes::{Buf, BufMut, Bytes, BytesMut};
use kafka_protocol::messages::leave_group_request::MemberIdentity;
use kafka_protocol::messages::{
    consumer_protocol_assignment, consumer_protocol_subscription,
    join_group_request::JoinGroupRequestProtocol, sync_group_request::SyncGroupRequestAssignment,
    ApiKey, ConsumerProtocolAssignment, ConsumerProtocolSubscription, GroupId, HeartbeatRequest,
    HeartbeatResponse, JoinGroupRequest, JoinGroupResponse, LeaveGroupRequest, LeaveGroupResponse,
    SyncGroupRequest, SyncGroupResponse, TopicName,
};
use kafka_protocol::protocol::{Decodable, Encodable, StrBytes};

use super::assignor::{self, Subscription};
use super::{
    Coordinator, GroupConfig, GroupEvent, TopicPartition, ILLEGAL_GENERATION, MEMBER_ID_REQUIRED,
    REBALANCE_IN_PROGRESS, UNKNOWN_MEMBER_ID,
};
use crate::cluster;
use crate::error::{error_name, Error, Result};
use crate::security::SecurityConfig;

/// The only assignor weir's members offer.
const ASSIGNOR: &str = "cooperative-sticky";
/// The consumer protocol's subscription and assignment versions weir writes (a subscription of
/// version 2 carries the owned partitions' generation, which settles two members' claims).
const SUBSCRIPTION_VERSION: i16 = 2;
const ASSIGNMENT_VERSION: i16 = 1;

/// One member of a classic group.
pub(crate) struct ClassicMember {
    config: GroupConfig,
    coordinator: Coordinator,
    topics: Vec<String>,
    /// Given by the coordinator (empty before the first JoinGroup).
    member_id: String,
    generation: i32,
    owned: Vec<TopicPartition>,
    /// The last assignment took partitions away: once the member says it let them go, it
    /// joins again so that their new owner gets them.
    revoking: bool,
    must_join: bool,
    interval: Duration,
    last_beat: Instant,
    rebalances: u64,
}

impl ClassicMember {
    /// Finds the coordinator of `config.group_id`; the first poll joins.
    pub(crate) fn join(
        brokers: &[String],
        security: &SecurityConfig,
        config: GroupConfig,
        topics: &[String],
    ) -> Result<Self> {
        Ok(Self {
            coordinator: Coordinator::find(brokers, security, &config)?,
            // A tenth of the session timeout: a member stays in through a few lost heartbeats.
            interval: (config.session_timeout / 10).max(Duration::from_millis(100)),
            config,
            topics: topics.to_vec(),
            member_id: String::new(),
            generation: -1,
            owned: Vec::new(),
            revoking: false,
            must_join: true,
            last_beat: Instant::now(),
            rebalances: 0,
        })
    }

    /// The settings the member joined with.
    pub(crate) fn config(&self) -> &GroupConfig {
        &self.config
    }

    pub(crate) fn member_id(&self) -> &str {
        &self.member_id
    }

    pub(crate) fn epoch(&self) -> i32 {
        self.generation
    }

    pub(crate) fn owned_partitions(&self) -> &[TopicPartition] {
        &self.owned
    }

    pub(crate) fn rebalances(&self) -> u64 {
        self.rebalances
    }

    pub(crate) fn owned(&mut self, mut partitions: Vec<TopicPartition>) {
        partitions.sort();
        partitions.dedup();
        self.owned = partitions;
        if self.revoking {
            self.revoking = false;
            self.must_join = true;
        }
    }

    pub(crate) fn poll(&mut self) -> Result<GroupEvent> {
        if !self.must_join {
            if self.last_beat.elapsed() < self.interval {
                return Ok(GroupEvent::Unchanged);
            }
            match self.heartbeat()? {
                0 => return Ok(GroupEvent::Unchanged),
                REBALANCE_IN_PROGRESS => self.must_join = true,
                ILLEGAL_GENERATION | UNKNOWN_MEMBER_ID => return Ok(self.fenced()),
                code => return Err(self.refused("Heartbeat", code)),
            }
        }
        self.join_and_sync()
    }

    /// The group moved past this member: it owns nothing and joins again.
    fn fenced(&mut self) -> GroupEvent {
        log::warn!(
            "kafka group '{}': member {} was fenced at generation {}; it gives up its partitions \
             and joins again",
            self.config.group_id,
            self.member_id,
            self.generation
        );
        self.member_id.clear();
        self.generation = -1;
        self.owned.clear();
        self.revoking = false;
        self.must_join = true;
        GroupEvent::Fenced
    }

    /// One Heartbeat; its error code.
    fn heartbeat(&mut self) -> Result<i16> {
        let deadline = Instant::now() + self.config.timeout;
        loop {
            let req = HeartbeatRequest::default()
                .with_group_id(self.group())
                .with_generation_id(self.generation)
                .with_member_id(StrBytes::from_string(self.member_id.clone()))
                .with_group_instance_id(self.instance());
            let resp: HeartbeatResponse = self.coordinator.call(
                &self.config,
                (ApiKey::Heartbeat, "Heartbeat", 3, 4),
                self.config.timeout,
                deadline,
                |_| req.clone(),
            )?;
            self.last_beat = Instant::now();
            if !self
                .coordinator
                .moved(resp.error_code, &self.config, deadline)?
            {
                return Ok(resp.error_code);
            }
        }
    }

    /// JoinGroup then SyncGroup until a round completes; the partitions it gave.
    fn join_and_sync(&mut self) -> Result<GroupEvent> {
        let deadline = Instant::now() + self.config.rebalance_timeout + self.config.timeout;
        // Each exchange sets its own read timeout (the rounds' is long).
        self.rounds(deadline)
    }

    /// JoinGroup and SyncGroup wait for the whole group (up to the rebalance timeout).
    fn round_read_timeout(&self) -> Duration {
        self.config.rebalance_timeout + Duration::from_secs(5)
    }

    fn rounds(&mut self, deadline: Instant) -> Result<GroupEvent> {
        let wait = self.round_read_timeout();
        loop {
            if Instant::now() >= deadline {
                return Err(self.refused_reason(format!(
                    "no rebalance completed within {:?}",
                    self.config.rebalance_timeout
                )));
            }
            let req = JoinGroupRequest::default()
                .with_group_id(self.group())
                .with_session_timeout_ms(millis(self.config.session_timeout))
                .with_rebalance_timeout_ms(millis(self.config.rebalance_timeout))
                .with_member_id(StrBytes::from_string(self.member_id.clone()))
                .with_group_instance_id(self.instance())
                .with_protocol_type(StrBytes::from_static_str("consumer"))
                .with_protocols(vec![JoinGroupRequestProtocol::default()
                    .with_name(StrBytes::from_static_str(ASSIGNOR))
                    .with_metadata(self.subscription()?)]);
            let join: JoinGroupResponse = self.coordinator.call(
                &self.config,
                (ApiKey::JoinGroup, "JoinGroup", 5, 9),
                wait,
                deadline,
                |_| req.clone(),
            )?;
            match join.error_code {
                0 => {}
                MEMBER_ID_REQUIRED => {
                    // The coordinator names the member, then expects it back with that id.
                    self.member_id = join.member_id.to_string();
                    continue;
                }
                UNKNOWN_MEMBER_ID | ILLEGAL_GENERATION => {
                    // A member that owns partitions lost them: say so before joining again.
                    if self.generation >= 0 || !self.owned.is_empty() {
                        return Ok(self.fenced());
                    }
                    self.member_id.clear();
                    continue;
                }
                REBALANCE_IN_PROGRESS => {
                    std::thread::sleep(Duration::from_millis(100));
                    continue;
                }
                code if self.coordinator.moved(code, &self.config, deadline)? => continue,
                code => return Err(self.refused("JoinGroup", code)),
            }
            self.member_id = join.member_id.to_string();
            self.generation = join.generation_id;
            let assignments = if join.leader == join.member_id {
                self.lead(&join)?
            } else {
                Vec::new()
            };
            let req = SyncGroupRequest::default()
                .with_group_id(self.group())
                .with_generation_id(self.generation)
                .with_member_id(StrBytes::from_string(self.member_id.clone()))
                .with_group_instance_id(self.instance())
                .with_protocol_type(Some(StrBytes::from_static_str("consumer")))
                .with_protocol_name(Some(StrBytes::from_static_str(ASSIGNOR)))
                .with_assignments(assignments);
            let sync: SyncGroupResponse = self.coordinator.call(
                &self.config,
                (ApiKey::SyncGroup, "SyncGroup", 3, 5),
                wait,
                deadline,
                |_| req.clone(),
            )?;
            match sync.error_code {
                0 => {}
                REBALANCE_IN_PROGRESS => {
                    std::thread::sleep(Duration::from_millis(100));
                    continue;
                }
                UNKNOWN_MEMBER_ID | ILLEGAL_GENERATION => {
                    if !self.owned.is_empty() {
                        return Ok(self.fenced());
                    }
                    self.member_id.clear();
                    continue;
                }
                code if self.coordinator.moved(code, &self.config, deadline)? => continue,
                code => return Err(self.refused("SyncGroup", code)),
            }
            let given = self.decode_assignment(sync.assignment)?;
            self.must_join = false;
            self.last_beat = Instant::now();
            // Partitions taken away: once the member lets them go, it joins again. Until then
            // it owns those and the new ones, and says so if another round starts meanwhile.
            self.revoking = self.owned.iter().any(|tp| !given.contains(tp));
            let mut owns: BTreeSet<TopicPartition> = self.owned.drain(..).collect();
            owns.extend(given.iter().cloned());
            self.owned = owns.into_iter().collect();
            self.rebalances += 1;
            log::info!(
                "kafka group '{}': member {} at generation {} is given {} partition(s)",
                self.config.group_id,
                self.member_id,
                self.generation,
                given.len()
            );
            return Ok(GroupEvent::Assigned(given));
        }
    }

    /// The leader's part: every member's partitions, encoded for SyncGroup.
    fn lead(&mut self, join: &JoinGroupResponse) -> Result<Vec<SyncGroupRequestAssignment>> {
        let mut members = Vec::with_capacity(join.members.len());
        for m in &join.members {
            let mut buf = m.metadata.clone();
            let s =
                decode_versioned::<ConsumerProtocolSubscription>(&mut buf).map_err(|reason| {
                    self.refused_reason(format!(
                        "member {}'s subscription does not decode: {reason}",
                        m.member_id
                    ))
                })?;
            members.push(Subscription {
                member_id: m.member_id.to_string(),
                topics: s.topics.iter().map(ToString::to_string).collect(),
                owned: s
                    .owned_partitions
                    .iter()
                    .flat_map(|t| {
                        t.partitions
                            .iter()
                            .map(move |&p| (t.topic.0.to_string(), p))
                    })
                    .collect(),
                generation: s.generation_id,
            });
        }
        let topics: BTreeSet<String> = members.iter().flat_map(|m| m.topics.clone()).collect();
        let mut counts = BTreeMap::new();
        let mut conn = self.coordinator.any_broker()?;
        for t in topics {
            match cluster::topic_layout(&mut conn, &t) {
                Ok(layout) => {
                    counts.insert(t, i32::try_from(layout.leaders.len()).unwrap_or(i32::MAX));
                }
                // A topic that does not exist has no partitions to give.
                Err(Error::Topic { .. }) => {}
                Err(e) => return Err(e),
            }
        }
        let assigned = assignor::assign(&members, &counts);
        let mut out = Vec::with_capacity(assigned.len());
        for (member, parts) in assigned {
            let mut by_topic: BTreeMap<String, Vec<i32>> = BTreeMap::new();
            for (t, p) in parts {
                by_topic.entry(t).or_default().push(p);
            }
            let a = ConsumerProtocolAssignment::default().with_assigned_partitions(
                by_topic
                    .into_iter()
                    .map(|(t, ps)| {
                        consumer_protocol_assignment::TopicPartition::default()
                            .with_topic(TopicName(StrBytes::from_string(t)))
                            .with_partitions(ps)
                    })
                    .collect(),
            );
            out.push(
                SyncGroupRequestAssignment::default()
                    .with_member_id(StrBytes::from_string(member))
                    .with_assignment(encode_versioned(&a, ASSIGNMENT_VERSION)?),
            );
        }
        Ok(out)
    }

    /// This member's subscription: its topics, and what it owns with the generation it was
    /// given them in.
    fn subscription(&self) -> Result<Bytes> {
        let mut by_topic: BTreeMap<&str, Vec<i32>> = BTreeMap::new();
        for (t, p) in &self.owned {
            by_topic.entry(t).or_default().push(*p);
        }
        let s = ConsumerProtocolSubscription::default()
            .with_topics(
                self.topics
                    .iter()
                    .map(|t| StrBytes::from_string(t.clone()))
                    .collect(),
            )
            .with_owned_partitions(
                by_topic
                    .into_iter()
                    .map(|(t, ps)| {
                        consumer_protocol_subscription::TopicPartition::default()
                            .with_topic(TopicName(StrBytes::from_string(t.to_string())))
                            .with_partitions(ps)
                    })
                    .collect(),
            )
            .with_generation_id(self.generation);
        encode_versioned(&s, SUBSCRIPTION_VERSION)
    }

    fn decode_assignment(&self, mut bytes: Bytes) -> Result<Vec<TopicPartition>> {
        if bytes.is_empty() {
            return Ok(Vec::new());
        }
        let a = decode_versioned::<ConsumerProtocolAssignment>(&mut bytes).map_err(|reason| {
            self.refused_reason(format!("the assignment does not decode: {reason}"))
        })?;
        let mut out: Vec<TopicPartition> = a
            .assigned_partitions
            .iter()
            .flat_map(|t| {
                t.partitions
                    .iter()
                    .map(move |&p| (t.topic.0.to_string(), p))
            })
            .collect();
        out.sort();
        Ok(out)
    }

    pub(crate) fn commit_offsets(&mut self, offsets: &[(TopicPartition, i64)]) -> Result<()> {
        let (config, generation) = (&self.config, self.generation);
        self.coordinator
            .commit_offsets(config, generation, &self.member_id, offsets, (7, 9))
    }

    pub(crate) fn leave(mut self) -> Result<()> {
        // A static member does not leave: its partitions wait for it through the session
        // timeout, as the Java client's static members do.
        if self.member_id.is_empty() || self.config.instance_id.is_some() {
            return Ok(());
        }
        let req = LeaveGroupRequest::default()
            .with_group_id(self.group())
            .with_members(vec![MemberIdentity::default()
                .with_member_id(StrBytes::from_string(self.member_id.clone()))
                .with_group_instance_id(self.instance())]);
        let resp: LeaveGroupResponse = self.coordinator.call(
            &self.config,
            (ApiKey::LeaveGroup, "LeaveGroup", 3, 5),
            self.config.timeout,
            Instant::now() + self.config.timeout,
            |_| req.clone(),
        )?;
        let code = resp
            .members
            .iter()
            .map(|m| m.error_code)
            .find(|&c| c != 0)
            .unwrap_or(resp.error_code);
        match code {
            0 | UNKNOWN_MEMBER_ID => Ok(()),
            code => Err(self.refused("LeaveGroup", code)),
        }
    }

    fn group(&self) -> GroupId {
        GroupId(StrBytes::from_string(self.config.group_id.clone()))
    }

    fn instance(&self) -> Option<StrBytes> {
        self.config.instance_id.clone().map(StrBytes::from_string)
    }

    fn refused(&self, api: &str, code: i16) -> Error {
        self.refused_reason(format!(
            "{api} failed: {} ({code}){}",
            error_name(code),
            super::hint(code, &self.config)
        ))
    }

    fn refused_reason(&self, reason: String) -> Error {
        Error::Group {
            group_id: self.config.group_id.clone(),
            reason,
        }
    }
}

fn millis(d: Duration) -> i32 {
    i32::try_from(d.as_millis()).unwrap_or(i32::MAX)
}

/// A consumer-protocol message as the group protocol carries it: its version, then its body.
fn encode_versioned<M: Encodable>(m: &M, version: i16) -> Result<Bytes> {
    let mut buf = BytesMut::new();
    buf.put_i16(version);
    m.encode(&mut buf, version)
        .map_err(|e| Error::Config(format!("cannot encode a group message: {e}")))?;
    Ok(buf.freeze())
}

/// The other side of [`encode_versioned`]: a version newer than the message's known ones is read
/// as the newest (the protocol only adds fields at the end).
fn decode_versioned<M: Decodable>(buf: &mut Bytes) -> std::result::Result<M, String> {
    if buf.remaining() < 2 {
        return Err("shorter than its version".into());
    }
    let version = buf.get_i16().clamp(0, 3);
    M::decode(buf, version).map_err(|e| e.to_string())
}
