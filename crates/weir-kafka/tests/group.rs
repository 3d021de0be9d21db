//! Consumer group membership against the real broker of `scripts/kafka.sh` (whose consumer
//! protocol heartbeats every second and drops a silent member after 6 s), by both protocols:
//! Kafka 4's consumer protocol and the classic one with the cooperative-sticky assignor. Each
//! member runs on a thread of its own, as a classic member's join waits for the whole group.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::mpsc::{channel, Receiver, Sender};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use crate::common::{bootstrap, classpath, serial, topic, PrivateBroker};
use weir_kafka::{
    create_topic, GroupConfig, GroupEvent, GroupMember, GroupProtocol, SecurityConfig,
    TopicPartition,
};

/// What the members' threads share with the test: what each says it owns (those heartbeating
/// only: a silent member still believes it owns what it had), how often each was fenced, and
/// what a silent member's offset commit answered when it woke.
#[derive(Default)]
struct Seen {
    owned: BTreeMap<&'static str, BTreeSet<TopicPartition>>,
    fenced: BTreeMap<&'static str, u32>,
    stale_commit: Option<String>,
}

enum Ctl {
    /// Commit these offsets (and report the result).
    Commit(Vec<(TopicPartition, i64)>, Sender<Result<(), String>>),
    /// Stop heartbeating this long, then try to commit offsets for what it owned.
    Silence(Duration),
    Leave,
}

/// Starts member `name` of `group` on a thread of its own.
fn member(
    name: &'static str,
    broker: &str,
    group: &str,
    topic: &str,
    protocol: GroupProtocol,
    seen: &Arc<Mutex<Seen>>,
) -> (Sender<Ctl>, JoinHandle<()>) {
    let (tx, rx): (Sender<Ctl>, Receiver<Ctl>) = channel();
    let config = GroupConfig {
        protocol,
        session_timeout: Duration::from_secs(6),
        rebalance_timeout: Duration::from_secs(30),
        ..GroupConfig::new(group)
    };
    let mut m = GroupMember::join(
        &[broker.to_string()],
        &SecurityConfig::default(),
        config,
        &[topic.to_string()],
    )
    .unwrap();
    let seen = Arc::clone(seen);
    let handle = std::thread::spawn(move || loop {
        match rx.try_recv() {
            Ok(Ctl::Commit(offsets, answer)) => {
                let _ = answer.send(m.commit_offsets(&offsets).map_err(|e| e.to_string()));
            }
            Ok(Ctl::Silence(d)) => {
                let had = seen.lock().unwrap().owned.remove(name).unwrap_or_default();
                std::thread::sleep(d);
                let stale: Vec<_> = had.into_iter().map(|tp| (tp, 1)).collect();
                let r = m.commit_offsets(&stale);
                seen.lock().unwrap().stale_commit = Some(match r {
                    Ok(()) => "accepted".into(),
                    Err(e) => e.to_string(),
                });
            }
            Ok(Ctl::Leave) | Err(std::sync::mpsc::TryRecvError::Disconnected) => {
                seen.lock().unwrap().owned.remove(name);
                m.leave().unwrap();
                return;
            }
            Err(std::sync::mpsc::TryRecvError::Empty) => {}
        }
        match m.poll().unwrap() {
            GroupEvent::Unchanged => {}
            GroupEvent::Assigned(given) => {
                // Nothing to finish here: it lets go of what it lost at once. What it owns is
                // published before the group hears of it (the next poll), as a real member
                // finishes before it tells.
                let mine: BTreeSet<TopicPartition> = given.iter().cloned().collect();
                let mut s = seen.lock().unwrap();
                for (other, theirs) in &s.owned {
                    assert!(
                        *other == name || theirs.is_disjoint(&mine),
                        "{name} was given {mine:?} while {other} owns {theirs:?}"
                    );
                }
                s.owned.insert(name, mine);
                drop(s);
                m.owned(given);
            }
            GroupEvent::Fenced => {
                let mut s = seen.lock().unwrap();
                s.owned.insert(name, BTreeSet::new());
                *s.fenced.entry(name).or_default() += 1;
            }
        }
        std::thread::sleep(Duration::from_millis(20));
    });
    (tx, handle)
}

/// Waits (up to 90 s) until `done` holds of what the members own.
fn until(seen: &Arc<Mutex<Seen>>, what: &str, done: impl Fn(&Seen) -> bool) {
    let deadline = Instant::now() + Duration::from_secs(90);
    loop {
        {
            let s = seen.lock().unwrap();
            if done(&s) {
                return;
            }
            assert!(
                Instant::now() < deadline,
                "{what}: not after 90 s; owned: {:?}",
                s.owned
            );
        }
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// The members in `names` own `each` partitions apiece, all six between them.
fn shared(s: &Seen, names: &[&str], each: usize) -> bool {
    let mut union = BTreeSet::new();
    for n in names {
        match s.owned.get(n) {
            Some(o) if o.len() == each => union.extend(o.iter().cloned()),
            _ => return false,
        }
    }
    union.len() == 6
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

/// Three members of one group share a 6-partition topic: the first takes all six; a second and
/// a third get their shares only after the owners let go; offsets an owner commits are what
/// Kafka's tool shows; a member that leaves hands its partitions over; one that stops
/// heartbeating loses them after the session timeout, cannot commit offsets for them, and is
/// fenced when it comes back. Among the members that heartbeat, no partition ever has two
/// owners (a silent one still believes it owns its partitions until it hears otherwise: what
/// the sinks' fencing is for).
fn members_share_a_topic_and_hand_partitions_over(protocol: GroupProtocol, test: &str) {
    let _serial = serial();
    let Some(b) = bootstrap(test) else {
        return;
    };
    let t = topic("wgroup");
    create_topic(std::slice::from_ref(&b), &t, 6, 1, &[], false).unwrap();
    let group = format!("{t}-group");
    let seen = Arc::new(Mutex::new(Seen::default()));

    let (a, a_thread) = member("a", &b, &group, &t, protocol, &seen);
    until(&seen, "the first member owns all six", |s| {
        shared(s, &["a"], 6)
    });
    let (b2, b_thread) = member("b", &b, &group, &t, protocol, &seen);
    until(&seen, "two members own three each", |s| {
        shared(s, &["a", "b"], 3)
    });

    let offsets: Vec<(TopicPartition, i64)> = seen.lock().unwrap().owned["a"]
        .iter()
        .map(|(t, p)| ((t.clone(), *p), 100 + i64::from(*p)))
        .collect();
    let (tx, rx) = channel();
    let before = now_ms();
    a.send(Ctl::Commit(offsets.clone(), tx)).unwrap();
    rx.recv().unwrap().unwrap();
    let after = now_ms();
    let shown = described_offsets(&b, &group, &t);
    for ((_, p), o) in &offsets {
        assert!(shown.contains(&(*p, *o)), "{p} at {o} not in {shown:?}");
    }
    // Each offset carries the time it was committed, for the member that reads it next.
    let parts: Vec<i32> = offsets.iter().map(|((_, p), _)| *p).collect();
    let stamped = weir_kafka::committed_offsets_stamped(
        std::slice::from_ref(&b),
        &SecurityConfig::default(),
        &group,
        &t,
        &parts,
        Duration::from_secs(20),
    )
    .unwrap();
    assert_eq!(stamped.len(), offsets.len());
    for c in &stamped {
        let ms = c
            .committed_ms
            .unwrap_or_else(|| panic!("no commit time: {c:?}"));
        assert!(
            (before..=after).contains(&ms),
            "{c:?} not in {before}..={after}"
        );
    }

    let (c, c_thread) = member("c", &b, &group, &t, protocol, &seen);
    until(&seen, "three members own two each", |s| {
        shared(s, &["a", "b", "c"], 2)
    });
    c.send(Ctl::Leave).unwrap();
    c_thread.join().unwrap();
    until(&seen, "the two left own three each", |s| {
        shared(s, &["a", "b"], 3)
    });

    // The session timeout is 6 s; the silent member sleeps past it.
    let silent_since = Instant::now();
    a.send(Ctl::Silence(Duration::from_secs(10))).unwrap();
    until(&seen, "the member still heard from owns all six", |s| {
        shared(s, &["b"], 6)
    });
    assert!(
        silent_since.elapsed() >= Duration::from_secs(4),
        "moved before the session timeout"
    );
    until(&seen, "the silent member is fenced", |s| {
        s.fenced.get("a").is_some_and(|&n| n > 0)
    });
    let stale = seen.lock().unwrap().stale_commit.clone().unwrap();
    assert!(
        [
            "UNKNOWN_MEMBER_ID",
            "ILLEGAL_GENERATION",
            "FENCED_MEMBER_EPOCH",
            "STALE_MEMBER_EPOCH"
        ]
        .iter()
        .any(|code| stale.contains(code)),
        "a fenced member's offsets were {stale}"
    );
    until(&seen, "the fenced member joined again", |s| {
        shared(s, &["a", "b"], 3)
    });
    a.send(Ctl::Leave).unwrap();
    b2.send(Ctl::Leave).unwrap();
    a_thread.join().unwrap();
    b_thread.join().unwrap();
}

#[test]
fn group_members_of_the_consumer_protocol_hand_partitions_over() {
    members_share_a_topic_and_hand_partitions_over(
        GroupProtocol::Consumer,
        "group_members_of_the_consumer_protocol_hand_partitions_over",
    );
}

#[test]
fn group_members_of_the_classic_protocol_hand_partitions_over() {
    members_share_a_topic_and_hand_partitions_over(
        GroupProtocol::Classic,
        "group_members_of_the_classic_protocol_hand_partitions_over",
    );
}

/// A broker restarted under a member: its heartbeats fail, it finds the coordinator again once
/// the broker is back (rejoining if its session ran out meanwhile), its poll never returns an
/// error, and it goes on as a member: a second one joining gets a share. The test runs its own
/// broker.
fn a_member_rides_out_a_broker_restart(protocol: GroupProtocol, test: &str) {
    let _serial = serial();
    if bootstrap(test).is_none() {
        return;
    }
    let (broker, b) = PrivateBroker::start();
    let t = topic("wgroup-restart");
    create_topic(std::slice::from_ref(&b), &t, 3, 1, &[], false).unwrap();
    let group = format!("{t}-group");
    let seen = Arc::new(Mutex::new(Seen::default()));
    let (a, a_thread) = member("a", &b, &group, &t, protocol, &seen);
    let owns_three = |s: &Seen| s.owned.get("a").is_some_and(|o| o.len() == 3);
    until(&seen, "the member owns all three", owns_three);
    let out = PrivateBroker::kafka_sh(&broker.run, "restart");
    assert!(
        out.status.success(),
        "restart: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    // A few heartbeats against the restarted broker, then a second member: the first is still
    // a live member, as the group gives part of the topic to the newcomer only once the first
    // lets go of it.
    std::thread::sleep(Duration::from_secs(3));
    assert!(!a_thread.is_finished(), "the member's poll failed");
    let (b2, b_thread) = member("b", &b, &group, &t, protocol, &seen);
    until(&seen, "the two members share the topic", |s| {
        let (x, y) = (s.owned.get("a"), s.owned.get("b"));
        x.zip(y).is_some_and(|(x, y)| {
            !x.is_empty() && !y.is_empty() && x.len() + y.len() == 3 && x.is_disjoint(y)
        })
    });
    assert!(!a_thread.is_finished(), "the member's poll failed");
    a.send(Ctl::Leave).unwrap();
    b2.send(Ctl::Leave).unwrap();
    a_thread.join().unwrap();
    b_thread.join().unwrap();
    drop(broker);
}

#[test]
fn a_member_of_the_consumer_protocol_rides_out_a_broker_restart() {
    a_member_rides_out_a_broker_restart(
        GroupProtocol::Consumer,
        "a_member_of_the_consumer_protocol_rides_out_a_broker_restart",
    );
}

#[test]
fn a_member_of_the_classic_protocol_rides_out_a_broker_restart() {
    a_member_rides_out_a_broker_restart(
        GroupProtocol::Classic,
        "a_member_of_the_classic_protocol_rides_out_a_broker_restart",
    );
}

/// Milliseconds since the Unix epoch.
fn now_ms() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_millis() as i64
}
