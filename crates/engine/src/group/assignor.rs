//! Client-side partition assignors of the classic consumer protocol, with the names and the
//! results of the Java client's (`org.apache.kafka.clients.consumer.RangeAssignor`,
//! `RoundRobinAssignor`), so that a kdirect member and a Java `KafkaConsumer` can lead the same
//! group and hand out the same partitions.
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
}

impl Assignor {
    /// The protocol name sent in JoinGroup (the Java client's names).
    pub fn name(self) -> &'static str {
        match self {
            Assignor::Range => "range",
            Assignor::RoundRobin => "roundrobin",
        }
    }

    /// The assignor named `name` (case-insensitive; Java class names accepted).
    pub fn from_name(name: &str) -> Option<Assignor> {
        let short = name.rsplit('.').next().unwrap_or(name).to_ascii_lowercase();
        match short.as_str() {
            "range" | "rangeassignor" => Some(Assignor::Range),
            "roundrobin" | "round-robin" | "roundrobinassignor" => Some(Assignor::RoundRobin),
            _ => None,
        }
    }

    /// Every assignor kdirect has, by name.
    pub const ALL: [Assignor; 2] = [Assignor::Range, Assignor::RoundRobin];

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
        }
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
                if assignor == Assignor::RoundRobin {
                    let (lo, hi) = (sizes.iter().min().unwrap(), sizes.iter().max().unwrap());
                    proptest::prop_assert!(hi - lo <= 1, "{sizes:?}");
                }
            }
        }
    }
}
