//! A group's committed offsets as a transactional writer uses them (KIP-447): which group and
//! member a transaction's offsets are committed for, and the offsets read back once no
//! transaction holding some is open.

use std::time::{Duration, Instant};

use kafka_protocol::messages::offset_fetch_request::OffsetFetchRequestTopic;
use kafka_protocol::messages::{
    ApiKey, GroupId, OffsetFetchRequest, OffsetFetchResponse, TopicName,
};
use kafka_protocol::protocol::StrBytes;

use super::{locate, LOADING, NOT_AVAILABLE, NOT_COORDINATOR};
use crate::connection::Connector;
use crate::error::{error_name, Error, Result};
use crate::security::SecurityConfig;

/// UNSTABLE_OFFSET_COMMIT: a transaction that commits offsets of the partition is still open.
const UNSTABLE_OFFSET_COMMIT: i16 = 88;

/// The consumer group a transaction commits offsets for, as one of its members knows it (Kafka's
/// `ConsumerGroupMetadata`; [`super::GroupMember::metadata`] gives a member's). The group coordinator refuses the offsets when the group has moved
/// past this member, which fences a member that lost its partitions without noticing.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct GroupMetadata {
    /// The `group.id`.
    pub group_id: String,
    /// The member's epoch (consumer protocol) or generation (classic); -1 for a writer that is
    /// not a member (the offsets are then not fenced by the group).
    pub generation: i32,
    /// The member's id ("" for a writer that is not a member).
    pub member_id: String,
    /// The member's `group.instance.id`, if static.
    pub instance_id: Option<String>,
}

impl GroupMetadata {
    /// Group `group_id` for a writer that is not one of its members.
    pub fn standalone(group_id: &str) -> Self {
        Self {
            group_id: group_id.to_string(),
            generation: -1,
            member_id: String::new(),
            instance_id: None,
        }
    }
}

/// What the metadata of every offset weir-kafka commits starts with; the commit's time (ms since
/// the Unix epoch, the committing machine's clock) follows. Kafka keeps an offset's metadata and
/// returns it with the offset, so whoever reads the offset next learns when it was committed.
const STAMP: &str = "committed_at_ms=";

/// The metadata committed with offsets now: [`STAMP`] and the time.
pub(crate) fn commit_stamp() -> StrBytes {
    let ms = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_millis());
    StrBytes::from_string(format!("{STAMP}{ms}"))
}

/// An offset a group committed for a partition.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct CommittedOffset {
    /// The partition.
    pub partition: i32,
    /// The next offset to read.
    pub offset: i64,
    /// When it was committed (ms since the Unix epoch, by the committer's clock), for offsets
    /// weir-kafka committed; `None` for others (another client's, whose metadata is its own).
    pub committed_ms: Option<i64>,
}

/// The offsets group `group_id` has committed for `partitions` of `topic` (the next offset to
/// read, by partition; partitions without one are left out), read once no open transaction
/// holds offsets of them (OffsetFetch with `require_stable`, KIP-447): a writer that resumes
/// from them waits out a transaction its predecessor left open, rather than read past it.
/// Gives up after `timeout` while one stays open.
pub fn committed_offsets(
    brokers: &[String],
    security: &SecurityConfig,
    group_id: &str,
    topic: &str,
    partitions: &[i32],
    timeout: Duration,
) -> Result<Vec<(i32, i64)>> {
    Ok(
        committed_offsets_stamped(brokers, security, group_id, topic, partitions, timeout)?
            .into_iter()
            .map(|c| (c.partition, c.offset))
            .collect(),
    )
}

/// [`committed_offsets`], with when each was committed.
pub fn committed_offsets_stamped(
    brokers: &[String],
    security: &SecurityConfig,
    group_id: &str,
    topic: &str,
    partitions: &[i32],
    timeout: Duration,
) -> Result<Vec<CommittedOffset>> {
    let connector = Connector::new(security, timeout)?;
    let deadline = Instant::now() + timeout;
    // Asked by partition (a read of all the group's offsets reports only those committed, not
    // a partition whose first offsets are in an open transaction), and only those asked for:
    // other members' open transactions hold theirs.
    let partition_indexes = partitions.to_vec();
    let mut conn = locate(&connector, brokers, group_id, timeout)?;
    loop {
        // Version 7 is the first with `require_stable`; 8 and later ask for several groups.
        let v = conn.version(ApiKey::OffsetFetch, "OffsetFetch", 7, 7)?;
        let req = OffsetFetchRequest::default()
            .with_group_id(GroupId(StrBytes::from_string(group_id.to_string())))
            .with_topics(Some(vec![OffsetFetchRequestTopic::default()
                .with_name(TopicName(StrBytes::from_string(topic.to_string())))
                .with_partition_indexes(partition_indexes.clone())]))
            .with_require_stable(true);
        let resp: OffsetFetchResponse = conn.request(ApiKey::OffsetFetch, v, &req)?;
        let mut code = resp.error_code;
        let mut out = Vec::new();
        for t in resp.topics.iter().filter(|t| t.name.0.as_str() == topic) {
            for p in &t.partitions {
                if p.error_code != 0 {
                    code = p.error_code;
                } else if p.committed_offset >= 0 {
                    out.push(CommittedOffset {
                        partition: p.partition_index,
                        offset: p.committed_offset,
                        committed_ms: p
                            .metadata
                            .as_ref()
                            .and_then(|m| m.as_str().strip_prefix(STAMP))
                            .and_then(|ms| ms.parse().ok()),
                    });
                }
            }
        }
        if code == 0 {
            out.sort_unstable_by_key(|c| c.partition);
            return Ok(out);
        }
        let retry = matches!(
            code,
            UNSTABLE_OFFSET_COMMIT | LOADING | NOT_AVAILABLE | NOT_COORDINATOR
        );
        if !retry || Instant::now() >= deadline {
            let hint = if code == UNSTABLE_OFFSET_COMMIT {
                ": a transaction that commits offsets of the topic is still open (it ends when \
                 its producer commits or aborts it, or after its transaction.timeout.ms)"
            } else {
                ""
            };
            return Err(Error::Group {
                group_id: group_id.to_string(),
                reason: format!(
                    "OffsetFetch of '{topic}' answered {} ({code}){hint}",
                    error_name(code)
                ),
            });
        }
        std::thread::sleep(Duration::from_millis(100));
        if code != UNSTABLE_OFFSET_COMMIT {
            conn = locate(&connector, brokers, group_id, timeout)?;
        }
    }
}
