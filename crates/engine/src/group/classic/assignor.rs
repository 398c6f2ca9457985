//! Client-side partition assignors of the classic consumer protocol, with the names and the
//! results of the Java client's (`org.apache.kafka.clients.consumer.RangeAssignor`,
//! `RoundRobinAssignor`), so that a kdirect member and a Java `KafkaConsumer` can lead the same
//! group and hand out the same partitions; and `cooperative-sticky` (KIP-429), whose results
//! keep each member's partitions where it can and never move a partition straight from one
//! member to another within a generation (its owner gives it up first, then a second
//! rebalance hands it on) — the same rules as Java's `CooperativeStickyAssignor`, though not
//! always the same partitions.
//!
//! Pure functions: the group leader gets every member's subscription in the JoinGroup answer
//! and each topic's partition count from the metadata, and computes every member's partitions.
//!
//! Members are ordered by `group.instance.id` when they have one (KIP-345: a static member keeps
//! its place, and so its partitions, across restarts that give it a new member id), then by
//! member id, as the Java assignors order them.

use std::collections::{BTreeMap, BTreeSet};

use crate::plan::TopicPartition;

/// A partition assignment strategy (`partition.assignment.strategy`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum Assignor {
    /// `range`: per topic, consecutive partitions to the members subscribed to it, the first
    /// `partitions % members` members getting one more (the Java client's default first choice).
    Range,
    /// `roundrobin`: every subscribed partition in (topic, partition) order, dealt in turn to
    /// the members subscribed to its topic.
    RoundRobin,
    /// `cooperative-sticky` (KIP-429): balanced, keeping what members own; a partition that
    /// changes hands is left unassigned for one generation.
    CooperativeSticky,
}

impl Assignor {
    /// The protocol name sent in JoinGroup (the Java client's names).
    pub fn name(self) -> &'static str {
        match self {
            Assignor::Range => "range",
            Assignor::RoundRobin => "roundrobin",
            Assignor::CooperativeSticky => "cooperative-sticky",
        }
    }

    /// Whether members using it keep their partitions while they rejoin (the cooperative
    /// protocol). A member is cooperative only when every assignor it offers is (as the Java
    /// client decides its rebalance protocol).
    pub fn is_cooperative(self) -> bool {
        self == Assignor::CooperativeSticky
    }

    /// The assignor named `name` (case-insensitive; Java class names accepted).
    pub fn from_name(name: &str) -> Option<Assignor> {
        let short = name.rsplit('.').next().unwrap_or(name).to_ascii_lowercase();
        match short.as_str() {
            "range" | "rangeassignor" => Some(Assignor::Range),
            "roundrobin" | "round-robin" | "roundrobinassignor" => Some(Assignor::RoundRobin),
            "cooperative-sticky" | "cooperativestickyassignor" => Some(Assignor::CooperativeSticky),
            _ => None,
        }
    }

    /// Every assignor kdirect has, by name.
    pub const ALL: [Assignor; 3] = [
        Assignor::Range,
        Assignor::RoundRobin,
        Assignor::CooperativeSticky,
    ];

    /// Computes each member's partitions. `partitions` is each topic's partition count (topics
    /// the metadata does not know are left out: nobody gets them). Every member of `members`
    /// appears in the result, with no partitions if it gets none.
    pub fn assign(
        self,
        members: &[MemberSubscription],
        partitions: &BTreeMap<String, i32>,
    ) -> BTreeMap<String, BTreeSet<TopicPartition>> {
        let mut ordered: Vec<&MemberSubscription> = members.iter().collect();
        ordered.sort_by(|a, b| {
            (a.instance_id.is_none(), &a.instance_id, &a.member_id).cmp(&(
                b.instance_id.is_none(),
                &b.instance_id,
                &b.member_id,
            ))
        });
        let mut out: BTreeMap<String, BTreeSet<TopicPartition>> = members
            .iter()
            .map(|m| (m.member_id.clone(), BTreeSet::new()))
            .collect();
        match self {
            Assignor::CooperativeSticky => return cooperative_sticky(&ordered, partitions, out),
            Assignor::Range => {
                for (topic, &count) in partitions {
                    let subscribed: Vec<&&MemberSubscription> = ordered
                        .iter()
                        .filter(|m| m.topics.iter().any(|t| t == topic))
                        .collect();
                    if subscribed.is_empty() || count <= 0 {
                        continue;
                    }
                    let n = subscribed.len() as i32;
                    let (each, extra) = (count / n, count % n);
                    let mut next = 0;
                    for (i, m) in subscribed.iter().enumerate() {
                        let take = each + i32::from((i as i32) < extra);
                        let set = out.entry(m.member_id.clone()).or_default();
                        for p in next..next + take {
                            set.insert(TopicPartition::new(topic.clone(), p));
                        }
                        next += take;
                    }
                }
            }
            Assignor::RoundRobin => {
                if ordered.is_empty() {
                    return out;
                }
                let mut turn = 0usize;
                for (topic, &count) in partitions {
                    if !ordered.iter().any(|m| m.topics.iter().any(|t| t == topic)) {
                        continue;
                    }
                    for p in 0..count.max(0) {
                        // The next member in the circle that subscribes to this topic.
                        loop {
                            let m = ordered[turn % ordered.len()];
                            turn += 1;
                            if m.topics.iter().any(|t| t == topic) {
                                out.entry(m.member_id.clone())
                                    .or_default()
                                    .insert(TopicPartition::new(topic.clone(), p));
                                break;
                            }
                        }
                    }
                }
            }
        }
        out
    }
}

/// One member as the leader sees it in the JoinGroup answer.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MemberSubscription {
    /// Its member id.
    pub member_id: String,
    /// Its `group.instance.id` (static membership), if any.
    pub instance_id: Option<String>,
    /// The topics it subscribes to.
    pub topics: Vec<String>,
    /// The partitions it owns now (subscription v1+; empty for an eager member, which gives
    /// everything up before it rejoins).
    pub owned: Vec<TopicPartition>,
    /// The generation its owned partitions are from (-1: unknown).
    pub generation: i32,
}

/// `cooperative-sticky`: see [`Assignor::CooperativeSticky`]. `members` in the assignors' order.
fn cooperative_sticky(
    members: &[&MemberSubscription],
    partitions: &BTreeMap<String, i32>,
    mut out: BTreeMap<String, BTreeSet<TopicPartition>>,
) -> BTreeMap<String, BTreeSet<TopicPartition>> {
    let subscribes = |m: &MemberSubscription, topic: &str| m.topics.iter().any(|t| t == topic);
    let exists = |tp: &TopicPartition| {
        partitions
            .get(tp.topic.as_str())
            .is_some_and(|n| (0..*n).contains(&tp.partition))
    };
    // Who owns what: the claim of the highest generation wins; two claims of one generation
    // cancel each other (neither keeps it), as Java's assignor treats them.
    let mut owner: BTreeMap<TopicPartition, (i32, Option<usize>)> = BTreeMap::new();
    for (i, m) in members.iter().enumerate() {
        for tp in m
            .owned
            .iter()
            .filter(|tp| exists(tp) && subscribes(m, &tp.topic))
        {
            match owner.get(tp) {
                Some((g, _)) if *g > m.generation => {}
                Some((g, _)) if *g == m.generation => {
                    owner.insert(tp.clone(), (*g, None));
                }
                _ => {
                    owner.insert(tp.clone(), (m.generation, Some(i)));
                }
            }
        }
    }
    let all: Vec<TopicPartition> = partitions
        .iter()
        .filter(|(t, _)| members.iter().any(|m| subscribes(m, t)))
        .flat_map(|(t, n)| (0..(*n).max(0)).map(move |p| TopicPartition::new(t.clone(), p)))
        .collect();
    // How many each member may hold: with equal subscriptions, floor or ceil of the share
    // (only `extra` members at the ceiling); otherwise the ceiling of its topics' share.
    let same = members.windows(2).all(|w| {
        let (mut a, mut b) = (w[0].topics.clone(), w[1].topics.clone());
        a.sort();
        b.sort();
        a == b
    });
    let n = members.len().max(1);
    let (floor, extra) = (all.len() / n, all.len() % n);
    let mut kept: Vec<Vec<TopicPartition>> = members
        .iter()
        .enumerate()
        .map(|(i, _)| {
            owner
                .iter()
                .filter(|(_, (_, o))| *o == Some(i))
                .map(|(tp, _)| tp.clone())
                .collect()
        })
        .collect();
    let mut caps: Vec<usize> = vec![usize::MAX; members.len()];
    if same {
        // The members that own the most keep the ceiling's slots.
        let mut by_owned: Vec<usize> = (0..members.len()).collect();
        by_owned.sort_by_key(|i| std::cmp::Reverse(kept[*i].len()));
        for (rank, i) in by_owned.into_iter().enumerate() {
            caps[i] = floor + usize::from(rank < extra);
        }
    } else {
        for (i, m) in members.iter().enumerate() {
            let mine = all.iter().filter(|tp| subscribes(m, &tp.topic)).count();
            let sharing = members
                .iter()
                .filter(|o| o.topics.iter().any(|t| m.topics.contains(t)))
                .count()
                .max(1);
            caps[i] = mine.div_ceil(sharing);
        }
    }
    for (i, k) in kept.iter_mut().enumerate() {
        k.truncate(caps[i]);
    }
    let taken: BTreeSet<&TopicPartition> = kept.iter().flatten().collect();
    let free: Vec<TopicPartition> = all
        .iter()
        .filter(|tp| !taken.contains(tp))
        .cloned()
        .collect();
    for tp in free {
        // The subscribed member with the fewest partitions, below its cap if one is.
        let pick = (0..members.len())
            .filter(|i| subscribes(members[*i], &tp.topic))
            .min_by_key(|i| (kept[*i].len() >= caps[*i], kept[*i].len(), *i));
        if let Some(i) = pick {
            kept[i].push(tp);
        }
    }
    for (i, m) in members.iter().enumerate() {
        let set = out.entry(m.member_id.clone()).or_default();
        for tp in &kept[i] {
            // Owned by another member now: it gives the partition up first; the rebalance
            // that follows hands it on.
            if matches!(owner.get(tp), Some((_, Some(o))) if *o != i) {
                continue;
            }
            set.insert(tp.clone());
        }
    }
    out
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::indexing_slicing)]
mod tests {
    use super::*;

    fn member(id: &str, topics: &[&str]) -> MemberSubscription {
        MemberSubscription {
            member_id: id.to_owned(),
            instance_id: None,
            topics: topics.iter().map(|t| (*t).to_owned()).collect(),
            owned: Vec::new(),
            generation: -1,
        }
    }

    fn owning(
        id: &str,
        topics: &[&str],
        generation: i32,
        owned: &[(&str, i32)],
    ) -> MemberSubscription {
        let mut m = member(id, topics);
        m.generation = generation;
        m.owned = owned
            .iter()
            .map(|(t, p)| TopicPartition::new(*t, *p))
            .collect();
        m
    }

    // A third member joins two that own 3 partitions each of t (6): each old member keeps
    // what it can (2 of its 3), the newcomer gets nothing this generation (the partitions it
    // will get are still owned), and the next rebalance, after the revocations, gives it one
    // from each.
    #[test]
    fn cooperative_sticky_moves_partitions_in_two_rebalances() {
        let counts = counts(&[("t", 6)]);
        let a = owning("a", &["t"], 5, &[("t", 0), ("t", 1), ("t", 2)]);
        let b = owning("b", &["t"], 5, &[("t", 3), ("t", 4), ("t", 5)]);
        let c = member("c", &["t"]);
        let first = Assignor::CooperativeSticky.assign(&[a, b, c], &counts);
        assert_eq!(names(&first["a"]), ["t-0", "t-1"]);
        assert_eq!(names(&first["b"]), ["t-3", "t-4"]);
        assert!(first["c"].is_empty(), "{first:?}");
        // a and b gave up t-2 and t-5, and rejoin owning what they kept.
        let a = owning("a", &["t"], 6, &[("t", 0), ("t", 1)]);
        let b = owning("b", &["t"], 6, &[("t", 3), ("t", 4)]);
        let c = owning("c", &["t"], 6, &[]);
        let second = Assignor::CooperativeSticky.assign(&[a, b, c], &counts);
        assert_eq!(names(&second["a"]), ["t-0", "t-1"]);
        assert_eq!(names(&second["b"]), ["t-3", "t-4"]);
        assert_eq!(names(&second["c"]), ["t-2", "t-5"]);
    }

    // Two members claiming one partition: the newer generation keeps it; one generation each
    // cancels both claims.
    #[test]
    fn cooperative_sticky_resolves_double_claims_by_generation() {
        let counts = counts(&[("t", 2)]);
        let a = owning("a", &["t"], 3, &[("t", 0)]);
        let b = owning("b", &["t"], 4, &[("t", 0), ("t", 1)]);
        let r = Assignor::CooperativeSticky.assign(&[a, b], &counts);
        assert_eq!(names(&r["b"]), ["t-0"], "{r:?}");
        // b owned t-1 too but may keep only one: t-1 goes to a in a later generation.
        assert!(r["a"].is_empty(), "{r:?}");
        let a = owning("a", &["t"], 4, &[("t", 0)]);
        let b = owning("b", &["t"], 4, &[("t", 0)]);
        let r = Assignor::CooperativeSticky.assign(&[a, b], &counts);
        assert_eq!(r.values().map(BTreeSet::len).sum::<usize>(), 2, "{r:?}");
    }

    fn names(set: &BTreeSet<TopicPartition>) -> Vec<String> {
        set.iter()
            .map(|tp| format!("{}-{}", tp.topic, tp.partition))
            .collect()
    }

    fn counts(list: &[(&str, i32)]) -> BTreeMap<String, i32> {
        list.iter().map(|(t, n)| ((*t).to_owned(), *n)).collect()
    }

    // The examples in the Java client's RangeAssignor javadoc: t0 and t1 with 3 partitions
    // each, members C0 and C1 → C0: [t0p0, t0p1, t1p0, t1p1], C1: [t0p2, t1p2].
    #[test]
    fn range_matches_the_java_javadoc() {
        let members = [member("C0", &["t0", "t1"]), member("C1", &["t0", "t1"])];
        let a = Assignor::Range.assign(&members, &counts(&[("t0", 3), ("t1", 3)]));
        assert_eq!(names(&a["C0"]), ["t0-0", "t0-1", "t1-0", "t1-1"]);
        assert_eq!(names(&a["C1"]), ["t0-2", "t1-2"]);
    }

    // RoundRobinAssignor's javadoc: same topics and members → C0: [t0p0, t0p2, t1p1],
    // C1: [t0p1, t1p0, t1p2].
    #[test]
    fn roundrobin_matches_the_java_javadoc() {
        let members = [member("C0", &["t0", "t1"]), member("C1", &["t0", "t1"])];
        let a = Assignor::RoundRobin.assign(&members, &counts(&[("t0", 3), ("t1", 3)]));
        assert_eq!(names(&a["C0"]), ["t0-0", "t0-2", "t1-1"]);
        assert_eq!(names(&a["C1"]), ["t0-1", "t1-0", "t1-2"]);
    }

    // RoundRobinAssignor's javadoc, unequal subscriptions: C0 [t0], C1 [t0, t1], C2 [t0, t1, t2]
    // with t0: 1, t1: 2, t2: 3 partitions → C0 [t0p0], C1 [t1p0], C2 [t1p1, t2p0, t2p1, t2p2].
    #[test]
    fn roundrobin_skips_members_not_subscribed() {
        let members = [
            member("C0", &["t0"]),
            member("C1", &["t0", "t1"]),
            member("C2", &["t0", "t1", "t2"]),
        ];
        let a = Assignor::RoundRobin.assign(&members, &counts(&[("t0", 1), ("t1", 2), ("t2", 3)]));
        assert_eq!(names(&a["C0"]), ["t0-0"]);
        assert_eq!(names(&a["C1"]), ["t1-0"]);
        assert_eq!(names(&a["C2"]), ["t1-1", "t2-0", "t2-1", "t2-2"]);
    }

    #[test]
    fn more_members_than_partitions_leaves_some_empty() {
        let members = [
            member("a", &["t"]),
            member("b", &["t"]),
            member("c", &["t"]),
        ];
        for assignor in Assignor::ALL {
            let a = assignor.assign(&members, &counts(&[("t", 2)]));
            assert_eq!(a.len(), 3, "{assignor:?}");
            assert_eq!(a.values().map(BTreeSet::len).sum::<usize>(), 2);
            assert!(a["c"].is_empty(), "{assignor:?}: {a:?}");
        }
    }

    // Static members sort by instance id, so a restarted member (new member id) keeps its place.
    #[test]
    fn static_members_keep_their_place() {
        let mut m1 = member("zzz-new-id", &["t"]);
        m1.instance_id = Some("i-1".to_owned());
        let mut m2 = member("aaa", &["t"]);
        m2.instance_id = Some("i-2".to_owned());
        let a = Assignor::Range.assign(&[m1, m2], &counts(&[("t", 4)]));
        assert_eq!(names(&a["zzz-new-id"]), ["t-0", "t-1"]);
        assert_eq!(names(&a["aaa"]), ["t-2", "t-3"]);
    }

    #[test]
    fn unknown_topics_and_empty_groups() {
        let a = Assignor::Range.assign(&[member("a", &["gone"])], &counts(&[("t", 3)]));
        assert!(a["a"].is_empty());
        assert!(Assignor::RoundRobin
            .assign(&[], &counts(&[("t", 3)]))
            .is_empty());
    }

    proptest::proptest! {
        // cooperative-sticky from any valid previous assignment: nothing goes to a member
        // while another owns it, and the round after the revocations assigns everything,
        // balanced within one when subscriptions are equal.
        #[test]
        fn cooperative_sticky_converges_in_two_rounds(
            n_before in 1usize..5,
            n_after in 1usize..5,
            count in 0i32..24,
            seed in 0u64..1000,
        ) {
            let counts: BTreeMap<String, i32> = [("t".to_owned(), count)].into();
            let before: Vec<MemberSubscription> =
                (0..n_before).map(|i| member(&format!("m{i}"), &["t"])).collect();
            let prev = Assignor::RoundRobin.assign(&before, &counts);
            // Members leave and join: m0.. m{n_after-1}, some new, shifted by the seed.
            let ids: Vec<String> =
                (0..n_after).map(|i| format!("m{}", (i as u64 + seed) % 6)).collect();
            let mut ids = ids;
            ids.sort();
            ids.dedup();
            let round1_in: Vec<MemberSubscription> = ids
                .iter()
                .map(|id| {
                    let mut m = member(id, &["t"]);
                    m.generation = 1;
                    m.owned = prev.get(id).map(|s| s.iter().cloned().collect()).unwrap_or_default();
                    m
                })
                .collect();
            let round1 = Assignor::CooperativeSticky.assign(&round1_in, &counts);
            for m in &round1_in {
                for tp in &round1[&m.member_id] {
                    let owned_elsewhere = round1_in
                        .iter()
                        .any(|o| o.member_id != m.member_id && o.owned.contains(tp));
                    proptest::prop_assert!(!owned_elsewhere, "{tp:?} moved straight to {}", m.member_id);
                }
            }
            let round2_in: Vec<MemberSubscription> = ids
                .iter()
                .map(|id| {
                    let mut m = member(id, &["t"]);
                    m.generation = 2;
                    m.owned = round1[id].iter().cloned().collect();
                    m
                })
                .collect();
            let round2 = Assignor::CooperativeSticky.assign(&round2_in, &counts);
            let total: usize = round2.values().map(BTreeSet::len).sum();
            proptest::prop_assert_eq!(total, count as usize);
            let sizes: Vec<usize> = round2.values().map(BTreeSet::len).collect();
            let (lo, hi) = (sizes.iter().min().unwrap(), sizes.iter().max().unwrap());
            proptest::prop_assert!(hi - lo <= 1, "{sizes:?}");
            // Sticky: what a member kept in round 1 it still has.
            for id in &ids {
                proptest::prop_assert!(round1[id].is_subset(&round2[id]));
            }
        }

        // Every partition of a subscribed topic goes to exactly one member subscribed to it,
        // and the counts per member differ by at most one within a topic (range) or overall
        // when every member subscribes to everything (roundrobin).
        #[test]
        fn every_partition_once(n_members in 1usize..7, parts in proptest::collection::vec(0i32..20, 1..4)) {
            let topics: Vec<String> = (0..parts.len()).map(|i| format!("t{i}")).collect();
            let refs: Vec<&str> = topics.iter().map(String::as_str).collect();
            let members: Vec<MemberSubscription> =
                (0..n_members).map(|i| member(&format!("m{i}"), &refs)).collect();
            let counts: BTreeMap<String, i32> =
                topics.iter().cloned().zip(parts.iter().copied()).collect();
            for assignor in Assignor::ALL {
                let a = assignor.assign(&members, &counts);
                let mut seen = BTreeSet::new();
                for set in a.values() {
                    for tp in set {
                        proptest::prop_assert!(seen.insert(tp.clone()), "{tp:?} twice");
                    }
                }
                let total: i32 = parts.iter().sum();
                proptest::prop_assert_eq!(seen.len(), total as usize);
                let sizes: Vec<usize> = a.values().map(BTreeSet::len).collect();
                if assignor != Assignor::Range {
                    let (lo, hi) = (sizes.iter().min().unwrap(), sizes.iter().max().unwrap());
                    proptest::prop_assert!(hi - lo <= 1, "{sizes:?}");
                }
            }
        }
    }
}
