//! The cooperative-sticky assignment the leader of a classic group computes: balanced (member
//! counts differ by at most one where subscriptions allow), sticky (a member keeps what it owns
//! up to its share), and cooperative (a partition that moves is first taken from its owner and
//! given to the new one only in the next round, once the owner has let it go, so no partition
//! has two owners at once).

use std::collections::{BTreeMap, BTreeSet};

use super::TopicPartition;

/// What one member of the group sent with its JoinGroup.
#[derive(Debug, Clone)]
pub(crate) struct Subscription {
    pub(crate) member_id: String,
    pub(crate) topics: BTreeSet<String>,
    /// What it owns now.
    pub(crate) owned: Vec<TopicPartition>,
    /// The generation in which it was given `owned` (-1: unknown); the newer claim wins when two
    /// members claim one partition.
    pub(crate) generation: i32,
}

/// The partitions of each member (by member id), given the subscriptions and the partition
/// counts of the topics.
pub(crate) fn assign(
    members: &[Subscription],
    partitions: &BTreeMap<String, i32>,
) -> BTreeMap<String, Vec<TopicPartition>> {
    let mut out: BTreeMap<String, Vec<TopicPartition>> = members
        .iter()
        .map(|m| (m.member_id.clone(), Vec::new()))
        .collect();
    if members.is_empty() {
        return out;
    }
    // Every partition some member subscribes to.
    let all: BTreeSet<TopicPartition> = partitions
        .iter()
        .filter(|(t, _)| members.iter().any(|m| m.topics.contains(*t)))
        .flat_map(|(t, &n)| (0..n).map(move |p| (t.clone(), p)))
        .collect();
    // Who owns what: a valid claim (an existing partition of a topic the member subscribes
    // to), the newest generation's where two members claim one partition.
    // Two claims of one generation: neither keeps it, and no one gets it this round (both
    // may still be working on it); the round after, it is unclaimed.
    let mut owner: BTreeMap<&TopicPartition, (i32, usize)> = BTreeMap::new();
    let mut disputed: BTreeSet<&TopicPartition> = BTreeSet::new();
    let mut disputed_lost: BTreeSet<&TopicPartition> = BTreeSet::new();
    for (i, m) in members.iter().enumerate() {
        for tp in &m.owned {
            if !all.contains(tp) || !m.topics.contains(&tp.0) {
                continue;
            }
            match owner.get(tp) {
                Some(&(g, o)) if g == m.generation && o != i => {
                    disputed.insert(tp);
                }
                Some(&(g, _)) if g > m.generation => {}
                _ => {
                    owner.insert(tp, (m.generation, i));
                }
            }
        }
    }
    for tp in &disputed {
        if let Some(&(g, _)) = owner.get(tp) {
            // Only a dispute at the winning generation takes it from both.
            if members
                .iter()
                .filter(|m| m.generation == g && m.owned.contains(tp))
                .count()
                > 1
            {
                owner.remove(tp);
            } else {
                disputed_lost.insert(tp);
            }
        }
    }
    disputed.retain(|tp| !disputed_lost.contains(tp));
    let mut claimed: Vec<Vec<TopicPartition>> = vec![Vec::new(); members.len()];
    for (tp, &(_, i)) in &owner {
        claimed[i].push((*tp).clone());
    }
    // Shares: total / n each, one more for the first `extra` members, those that claim the
    // most first (the fewest moves).
    let n = members.len();
    let (base, extra) = (all.len() / n, all.len() % n);
    let mut order: Vec<usize> = (0..n).collect();
    order.sort_by(|&a, &b| {
        claimed[b]
            .len()
            .cmp(&claimed[a].len())
            .then_with(|| members[a].member_id.cmp(&members[b].member_id))
    });
    let mut share = vec![base; n];
    for &i in order.iter().take(extra) {
        share[i] += 1;
    }
    // Each keeps what it claims, up to its share.
    let mut target: Vec<Vec<TopicPartition>> = vec![Vec::new(); n];
    let mut placed: BTreeSet<TopicPartition> = BTreeSet::new();
    for i in 0..n {
        for tp in claimed[i].iter().take(share[i]) {
            target[i].push(tp.clone());
            placed.insert(tp.clone());
        }
    }
    // The rest go to the members furthest under their share that subscribe to the topic; a
    // partition no one under its share can take goes to the least loaded subscriber.
    for tp in all.iter().filter(|tp| !placed.contains(*tp)) {
        let subscribers = (0..n).filter(|&i| members[i].topics.contains(&tp.0));
        let pick = subscribers
            .clone()
            .filter(|&i| target[i].len() < share[i])
            .max_by_key(|&i| (share[i] - target[i].len(), std::cmp::Reverse(i)))
            .or_else(|| subscribers.min_by_key(|&i| (target[i].len(), i)));
        if let Some(i) = pick {
            target[i].push(tp.clone());
        }
    }
    // Cooperative: a partition whose owner loses it is given to no one this round.
    for (i, mut parts) in target.into_iter().enumerate() {
        parts.retain(|tp| owner.get(tp).is_none_or(|&(_, o)| o == i) && !disputed.contains(tp));
        parts.sort();
        out.insert(members[i].member_id.clone(), parts);
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sub(id: &str, owned: &[i32], generation: i32) -> Subscription {
        Subscription {
            member_id: id.into(),
            topics: ["t".to_string()].into(),
            owned: owned.iter().map(|&p| ("t".to_string(), p)).collect(),
            generation,
        }
    }

    fn parts(a: &BTreeMap<String, Vec<TopicPartition>>, id: &str) -> Vec<i32> {
        a[id].iter().map(|(_, p)| *p).collect()
    }

    #[test]
    fn a_lone_member_takes_all_and_a_newcomer_waits_for_the_owner_to_let_go() {
        let counts: BTreeMap<String, i32> = [("t".to_string(), 6)].into();
        let a = assign(&[sub("a", &[], -1)], &counts);
        assert_eq!(parts(&a, "a"), [0, 1, 2, 3, 4, 5]);
        // b joins: a keeps three, the three it gives up go to no one yet.
        let a = assign(
            &[sub("a", &[0, 1, 2, 3, 4, 5], 1), sub("b", &[], -1)],
            &counts,
        );
        assert_eq!(parts(&a, "a").len(), 3);
        assert!(parts(&a, "b").is_empty());
        // Next round, a owns three: b gets the other three, a keeps its own.
        let kept = parts(&a, "a");
        let a2 = assign(&[sub("a", &kept, 2), sub("b", &[], 2)], &counts);
        assert_eq!(parts(&a2, "a"), kept);
        let mut all: Vec<i32> = parts(&a2, "a");
        all.extend(parts(&a2, "b"));
        all.sort();
        assert_eq!(all, [0, 1, 2, 3, 4, 5]);
    }

    #[test]
    fn shares_differ_by_one_and_the_newer_claim_wins() {
        let counts: BTreeMap<String, i32> = [("t".to_string(), 7)].into();
        // Both claim 3; b's claim is newer. a keeps 0..3 (its share), b keeps 3..6.
        let a = assign(
            &[sub("a", &[0, 1, 2, 3], 1), sub("b", &[3, 4, 5, 6], 2)],
            &counts,
        );
        assert_eq!(parts(&a, "a"), [0, 1, 2]);
        assert_eq!(parts(&a, "b"), [3, 4, 5, 6]);
        // Three members: 3, 2, 2 (the one that owned the most keeps the larger share).
        let a = assign(
            &[
                sub("a", &[0, 1, 2, 3, 4], 3),
                sub("b", &[5, 6], 3),
                sub("c", &[], -1),
            ],
            &counts,
        );
        assert_eq!(parts(&a, "a"), [0, 1, 2]);
        assert_eq!(parts(&a, "b"), [5, 6]);
        // 3 and 4 leave a this round; c gets them next round.
        assert!(parts(&a, "c").is_empty());
    }

    #[test]
    fn two_claims_of_one_generation_leave_the_partition_to_the_next_round() {
        let counts: BTreeMap<String, i32> = [("t".to_string(), 2)].into();
        let a = assign(&[sub("a", &[0, 1], 4), sub("b", &[1], 4)], &counts);
        // 0 stays with a; 1, claimed by both, goes to no one this round.
        assert_eq!(parts(&a, "a"), [0]);
        assert!(parts(&a, "b").is_empty());
        // A newer claim beats an older dispute.
        let a = assign(
            &[sub("a", &[1], 3), sub("b", &[1], 3), sub("c", &[1], 5)],
            &counts,
        );
        assert_eq!(parts(&a, "c"), [1]);
    }

    #[test]
    fn a_member_gets_only_topics_it_subscribes_to() {
        let counts: BTreeMap<String, i32> = [("t".to_string(), 2), ("u".to_string(), 2)].into();
        let mut b = sub("b", &[], -1);
        b.topics = ["u".to_string()].into();
        let mut a = sub("a", &[], -1);
        a.topics = ["t".to_string(), "u".to_string()].into();
        let got = assign(&[a, b], &counts);
        assert!(got["b"].iter().all(|(t, _)| t == "u"));
        let total: usize = got.values().map(Vec::len).sum();
        assert_eq!(total, 4);
    }
}
