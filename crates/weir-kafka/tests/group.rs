//! Consumer group membership (Kafka 4's consumer group protocol) against the real broker of
//! `scripts/kafka.sh`, which heartbeats every second and drops a silent member after 6 s.

use std::collections::BTreeSet;
use std::time::{Duration, Instant};

use crate::common::{bootstrap, classpath, serial, topic};
use weir_kafka::{
    create_topic, GroupConfig, GroupEvent, GroupMember, SecurityConfig, TopicPartition,
};

/// One member and what it was last given.
struct Member {
    name: &'static str,
    group: GroupMember,
    given: Vec<TopicPartition>,
    fenced: u32,
}

impl Member {
    fn join(broker: &str, group: &str, topic: &str, name: &'static str) -> Self {
        let group = GroupMember::join(
            &[broker.to_string()],
            &SecurityConfig::default(),
            GroupConfig::new(group),
            &[topic.to_string()],
        )
        .unwrap();
        Self {
            name,
            group,
            given: Vec::new(),
            fenced: 0,
        }
    }

    /// One poll. A member here has nothing to finish, so it gives up what it lost and takes
    /// what it was given at once.
    fn poll(&mut self) {
        match self.group.poll().unwrap() {
            GroupEvent::Unchanged => {}
            GroupEvent::Assigned(p) => {
                self.group.owned(p.clone());
                self.given = p;
            }
            GroupEvent::Fenced => {
                self.fenced += 1;
                self.given.clear();
            }
        }
    }

    fn owns(&self) -> BTreeSet<TopicPartition> {
        self.group.owned_partitions().iter().cloned().collect()
    }
}

/// Polls `members` until `done` holds (or fails after 60 s), checking after every poll that no
/// partition has two owners, neither by what they say they own nor by what they were given.
fn until(members: &mut [&mut Member], what: &str, done: impl Fn(&[&mut Member]) -> bool) {
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        for i in 0..members.len() {
            members[i].poll();
            for a in 0..members.len() {
                for b in a + 1..members.len() {
                    let (x, y) = (&members[a], &members[b]);
                    assert!(
                        x.owns().is_disjoint(&y.owns()),
                        "{} and {} both own some of {:?} / {:?}",
                        x.name,
                        y.name,
                        x.owns(),
                        y.owns()
                    );
                    let given: BTreeSet<_> = x.given.iter().collect();
                    assert!(
                        y.given.iter().all(|p| !given.contains(p)),
                        "{} and {} were both given some of {:?} / {:?}",
                        x.name,
                        y.name,
                        x.given,
                        y.given
                    );
                }
            }
        }
        if done(members) {
            return;
        }
        assert!(
            Instant::now() < deadline,
            "{what}: not after 60 s; {}",
            members
                .iter()
                .map(|m| format!("{} owns {:?} (epoch {})", m.name, m.owns(), m.group.epoch()))
                .collect::<Vec<_>>()
                .join("; ")
        );
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// The committed offsets of `group` as Kafka's own tool shows them: (partition, offset) of each
/// row of `kafka-consumer-groups.sh --describe --offsets`.
fn described_offsets(broker: &str, group: &str, topic: &str) -> BTreeSet<(i32, i64)> {
    let out = std::process::Command::new("java")
        .arg("-Xmx256m")
        .arg("-cp")
        .arg(classpath())
        .arg("org.apache.kafka.tools.consumer.group.ConsumerGroupCommand")
        .args([
            "--bootstrap-server",
            broker,
            "--describe",
            "--offsets",
            "--group",
            group,
        ])
        .output()
        .expect("run Kafka's ConsumerGroupCommand");
    let text = String::from_utf8_lossy(&out.stdout).to_string();
    assert!(
        out.status.success(),
        "ConsumerGroupCommand: {text}{}",
        String::from_utf8_lossy(&out.stderr)
    );
    // GROUP TOPIC PARTITION CURRENT-OFFSET LOG-END-OFFSET LAG ...
    text.lines()
        .map(|l| l.split_whitespace().collect::<Vec<_>>())
        .filter(|f| f.len() >= 4 && f[1] == topic)
        .filter_map(|f| Some((f[2].parse().ok()?, f[3].parse().ok()?)))
        .collect()
}

/// Three members of one group share a 6-partition topic: the first takes all six; a second
/// joining takes half only after the first gave them up; a third gets its share the same way;
/// a member leaving hands its partitions to the others, and one that stops heartbeating loses
/// them after the session timeout and is fenced when it comes back (offsets it commits meanwhile
/// are refused; those committed by an owner are what Kafka's tool shows). While the members
/// heartbeat, no partition ever has two owners (a silent one still believes it owns its
/// partitions until it hears otherwise: what the sinks' fencing is for).
#[test]
fn group_members_share_a_topic_and_hand_partitions_over() {
    let _serial = serial();
    let Some(b) = bootstrap("group_members_share_a_topic_and_hand_partitions_over") else {
        return;
    };
    let t = topic("wgroup");
    create_topic(std::slice::from_ref(&b), &t, 6, 1, &[], false).unwrap();
    let group = format!("{t}-group");
    let all: BTreeSet<TopicPartition> = (0..6).map(|p| (t.clone(), p)).collect();
    let owns_all = |ms: &[&mut Member]| {
        let mut union = BTreeSet::new();
        for m in ms {
            union.extend(m.owns());
        }
        union == all
    };

    let mut a = Member::join(&b, &group, &t, "a");
    until(&mut [&mut a], "the first member owns all six", |ms| {
        ms[0].owns().len() == 6
    });
    let first_epoch = a.group.epoch();
    assert!(first_epoch > 0);

    let mut b2 = Member::join(&b, &group, &t, "b");
    until(&mut [&mut a, &mut b2], "two members own three each", |ms| {
        owns_all(ms) && ms.iter().all(|m| m.owns().len() == 3)
    });
    assert!(
        a.group.epoch() > first_epoch,
        "a rebalance gives a new epoch"
    );

    // Offsets committed with the member's epoch are what Kafka's own tool shows.
    let offsets: Vec<(TopicPartition, i64)> = a
        .owns()
        .into_iter()
        .map(|(t, p)| ((t, p), 100 + i64::from(p)))
        .collect();
    a.group.commit_offsets(&offsets).unwrap();
    let shown = described_offsets(&b, &group, &t);
    for ((_, p), o) in &offsets {
        assert!(shown.contains(&(*p, *o)), "{p} at {o} not in {shown:?}");
    }

    let mut c = Member::join(&b, &group, &t, "c");
    until(
        &mut [&mut a, &mut b2, &mut c],
        "three members own two each",
        |ms| owns_all(ms) && ms.iter().all(|m| m.owns().len() == 2),
    );

    // A member that leaves hands its partitions over at once.
    c.group.leave().unwrap();
    until(&mut [&mut a, &mut b2], "the two left own all six", |ms| {
        owns_all(ms) && ms.iter().all(|m| m.owns().len() == 3)
    });

    // A member that stops heartbeating loses its partitions after the session timeout; when it
    // comes back it is fenced, owns nothing, and joins again.
    let silent_since = Instant::now();
    until(
        &mut [&mut b2],
        "the member still heard from owns all six",
        |ms| ms[0].owns().len() == 6,
    );
    assert!(
        silent_since.elapsed() >= Duration::from_secs(4),
        "moved before the session timeout"
    );
    // The silent member, not told yet, cannot commit offsets for what it believes it owns.
    let stale: Vec<(TopicPartition, i64)> = a.owns().into_iter().map(|tp| (tp, 1)).collect();
    let e = a.group.commit_offsets(&stale).unwrap_err().to_string();
    assert!(e.contains("OffsetCommit") && e.contains(&group), "{e}");
    until(&mut [&mut a], "the silent member is fenced", |ms| {
        ms[0].fenced > 0
    });
    assert!(a.owns().is_empty());
    until(
        &mut [&mut a, &mut b2],
        "the fenced member joined again",
        |ms| owns_all(ms) && ms.iter().all(|m| m.owns().len() == 3),
    );
    a.group.leave().unwrap();
    b2.group.leave().unwrap();
}
