//! Incremental fetch sessions (KIP-227), without I/O.
//!
//! A broker that opens a fetch session for a client remembers the partitions the client
//! fetches and what it asked of each (fetch offset, bytes, epochs). Each later request of the
//! session lists only the partitions added or changed since the one before, and the
//! partitions dropped (`forgotten_topics_data`); each answer lists only the partitions with
//! records, an error, or ends (high watermark, last stable offset, log start) that changed
//! since the session's last answer. A wide topic whose partitions mostly sit still, above all
//! the idle long-poll over every partition, then costs a few bytes per request instead of
//! every partition twice.
//!
//! [`IncrementalSession::prepare`] turns the full set of partitions a request wants into the
//! session's request; [`IncrementalSession::complete`] reads the answer back into a full one,
//! adding each partition the broker left out with the ends the session last saw for it and no
//! records, which is what leaving it out means. So the fetch state machine
//! ([`crate::fetch::FetchSession`]) sees the same answers with or without a session.
//!
//! Requests of one session must be sent one at a time, each after the answer to the one
//! before (the epoch orders them), so the fetcher checks a session out of the
//! [`SessionPool`] for each request and gives it back with the answer; a request that finds
//! every session of its broker in use goes without one. Any failure resets the session: the
//! next request is a full one under epoch 0, which closes the broker's old session and opens a
//! new one, as the Java client's `FetchSessionHandler` does.

use std::collections::{BTreeMap, HashMap, HashSet};
use std::sync::{Arc, Mutex, PoisonError};

use kdirect_proto::api::fetch::{
    FetchView, FetchedPartition, PartitionFetch, SessionFields, TopicFetch, TopicForget,
};
use kdirect_proto::ErrorCode;

/// Sessions one client keeps open with one broker: enough for every group's requests in
/// flight (`fetch.in.flight.per.leader`) for the current batch, the prefetched one and the
/// idle long-poll. A broker holds `max.incremental.fetch.session.cache.slots` (default 1000)
/// sessions for all clients together.
const MAX_SESSIONS_PER_BROKER: usize = 8;

/// What a partition was last asked with in the session.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Asked {
    topic_id: [u8; 16],
    fetch: PartitionFetch,
}

/// A partition's ends as the session's last answer listing it gave them.
#[derive(Debug, Clone, Copy)]
struct Ends {
    high_watermark: i64,
    last_stable_offset: i64,
    log_start_offset: i64,
}

/// A partition in a session: its topic's index in [`IncrementalSession::names`] and its
/// number. Copy, so that the session's maps are read and written without building a key
/// `String` per partition per request (they were: a third of a trickle batch's allocations).
type Key = (u32, i32);

/// The request in flight, remembered until its answer.
#[derive(Debug)]
struct Pending {
    /// Whether it was a full request (epoch 0 or -1).
    full: bool,
}

/// The request a session sends for a set of wanted partitions.
#[derive(Debug, Clone)]
pub(crate) struct SessionRequest {
    /// Session id and epoch.
    pub(crate) session: SessionFields,
    /// The partitions to list: all of them in a full request, else those added or changed.
    pub(crate) topics: Vec<TopicFetch>,
    /// The partitions the session stops fetching.
    pub(crate) forgotten: Vec<TopicForget>,
}

/// What an answer means for the session.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Completed {
    /// The answer is whole (the partitions the broker left out were added back).
    Answer,
    /// The broker no longer knows the session, or its epoch: send the request again, now as
    /// a full request (the session was reset).
    Resend(ErrorCode),
}

/// One fetch session with one broker; see the module docs.
#[derive(Debug, Default)]
pub(crate) struct IncrementalSession {
    /// The broker's id for the session, 0 while none is open.
    id: i32,
    /// The epoch of the next request: 0 opens a session (closing `id`'s, if any), 1 and on are
    /// the open session's incremental requests.
    epoch: i32,
    /// The topics of the keys below, by index (cleared with them); shared with the
    /// partitions an answer left out, which get them back.
    names: Vec<Arc<str>>,
    /// The partitions in the broker's session and what each was last asked with.
    asked: HashMap<Key, Asked>,
    /// The ends of each partition in the session, as its last listing answer gave them.
    ends: HashMap<Key, Ends>,
    /// Every partition the request in flight wanted, as the session holds them once it is
    /// answered (swapped with `asked` then, so both keep their allocations).
    wanted: HashMap<Key, Asked>,
    /// The partitions an answer listed (kept for its allocation).
    listed: HashSet<Key>,
    pending: Option<Pending>,
}

/// The index of `name` in `names`, added if new.
fn key_of(names: &mut Vec<Arc<str>>, name: &str) -> u32 {
    match names.iter().position(|n| **n == *name) {
        Some(i) => i as u32,
        None => {
            names.push(Arc::from(name));
            (names.len() - 1) as u32
        }
    }
}

impl IncrementalSession {
    /// The broker's id for the session (0: none open).
    #[cfg(test)]
    pub(crate) fn id(&self) -> i32 {
        self.id
    }

    /// The request that fetches `wanted` (every partition, full) in this session.
    pub(crate) fn prepare(&mut self, wanted: &[TopicFetch]) -> SessionRequest {
        let mut want = std::mem::take(&mut self.wanted);
        want.clear();
        for t in wanted {
            let topic = key_of(&mut self.names, &t.name);
            for p in &t.partitions {
                want.insert(
                    (topic, p.partition),
                    Asked {
                        topic_id: t.id,
                        fetch: *p,
                    },
                );
            }
        }
        // A topic whose id changed (deleted and created again) is another topic to the
        // broker: start over rather than forget one and add the other.
        let renamed = want.iter().any(|(k, a)| {
            self.asked
                .get(k)
                .is_some_and(|old| old.topic_id != a.topic_id)
        });
        let full = self.id == 0 || self.epoch <= 0 || renamed;
        let req = if full {
            self.epoch = 0;
            SessionRequest {
                session: SessionFields {
                    id: self.id,
                    epoch: 0,
                },
                topics: wanted.to_vec(),
                forgotten: Vec::new(),
            }
        } else {
            let topics: Vec<TopicFetch> = wanted
                .iter()
                .filter_map(|t| {
                    let topic = key_of(&mut self.names, &t.name);
                    let changed: Vec<PartitionFetch> = t
                        .partitions
                        .iter()
                        .filter(|p| {
                            self.asked.get(&(topic, p.partition))
                                != Some(&Asked {
                                    topic_id: t.id,
                                    fetch: **p,
                                })
                        })
                        .copied()
                        .collect();
                    (!changed.is_empty()).then(|| TopicFetch {
                        name: t.name.clone(),
                        id: t.id,
                        partitions: changed,
                    })
                })
                .collect();
            let mut gone: BTreeMap<&str, TopicForget> = BTreeMap::new();
            for (key @ (topic, partition), a) in &self.asked {
                if !want.contains_key(key) {
                    let name = self.names.get(*topic as usize).map_or("", |n| &**n);
                    gone.entry(name)
                        .or_insert_with(|| TopicForget {
                            name: name.to_owned(),
                            id: a.topic_id,
                            partitions: Vec::new(),
                        })
                        .partitions
                        .push(*partition);
                }
            }
            let mut forgotten: Vec<TopicForget> = gone.into_values().collect();
            for f in &mut forgotten {
                f.partitions.sort_unstable();
            }
            SessionRequest {
                session: SessionFields {
                    id: self.id,
                    epoch: self.epoch,
                },
                topics,
                forgotten,
            }
        };
        self.wanted = want;
        self.pending = Some(Pending { full });
        req
    }

    /// Reads the answer to the last [`Self::prepare`]d request: the session moves on, and
    /// `view` gets back the partitions an incremental answer left out.
    pub(crate) fn complete(&mut self, view: &mut FetchView) -> Completed {
        let Some(pending) = self.pending.take() else {
            return Completed::Answer;
        };
        match view.error {
            ErrorCode::FETCH_SESSION_ID_NOT_FOUND => {
                // Evicted (or the broker restarted): open a new one.
                self.reset();
                self.id = 0;
                return Completed::Resend(view.error);
            }
            ErrorCode::INVALID_FETCH_SESSION_EPOCH => {
                self.reset();
                return Completed::Resend(view.error);
            }
            e if e.err().is_some() => {
                self.reset();
                return Completed::Answer;
            }
            _ => {}
        }
        if pending.full {
            // The broker opened a session (its id), or declined to (0: full requests until it
            // opens one).
            self.id = view.session_id;
            self.epoch = i32::from(view.session_id != 0);
        } else if view.session_id != self.id {
            // An answer for another session than the one asked: nothing it left out can be
            // trusted to be unchanged. Start over.
            self.reset();
            return Completed::Answer;
        } else {
            self.epoch = if self.epoch == i32::MAX {
                1
            } else {
                self.epoch + 1
            };
        }
        let mut listed = std::mem::take(&mut self.listed);
        listed.clear();
        for p in &view.partitions {
            // A topic the session never asked for is none of its business (and must not grow
            // `names` at a broker's word): it would be dropped below with what was not wanted.
            let Some(topic) = self.names.iter().position(|n| **n == *p.topic) else {
                continue;
            };
            let key = (topic as u32, p.partition);
            listed.insert(key);
            self.ends.insert(
                key,
                Ends {
                    high_watermark: p.high_watermark,
                    last_stable_offset: p.last_stable_offset,
                    log_start_offset: p.log_start_offset,
                },
            );
        }
        if !pending.full && self.id != 0 {
            let mut left_out: Vec<FetchedPartition> = Vec::new();
            for key @ (topic, partition) in self.wanted.keys() {
                if listed.contains(key) {
                    continue;
                }
                // Left out: no records and the ends of the session's last answer listing it.
                // A partition never listed with known ends stays left out (the fetcher
                // treats that as an answer without it).
                let Some(e) = self.ends.get(key) else {
                    continue;
                };
                if e.high_watermark < 0 {
                    continue;
                }
                let Some(topic) = self.names.get(*topic as usize) else {
                    continue;
                };
                left_out.push(FetchedPartition {
                    topic: Arc::clone(topic),
                    partition: *partition,
                    error: ErrorCode::NONE,
                    high_watermark: e.high_watermark,
                    last_stable_offset: e.last_stable_offset,
                    log_start_offset: e.log_start_offset,
                    aborted_transactions: Vec::new(),
                    preferred_read_replica: -1,
                    current_leader: (-1, -1),
                    diverging_epoch: None,
                    records: bytes::Bytes::new(),
                });
            }
            left_out.sort_by(|a, b| (&a.topic, a.partition).cmp(&(&b.topic, b.partition)));
            view.partitions.extend(left_out);
        }
        self.listed = listed;
        if self.id == 0 {
            self.asked.clear();
            self.ends.clear();
            self.wanted.clear();
            self.names.clear();
        } else {
            let wanted = &self.wanted;
            self.ends.retain(|k, _| wanted.contains_key(k));
            std::mem::swap(&mut self.asked, &mut self.wanted);
        }
        Completed::Answer
    }

    /// After a request failed (no answer, or one that could not be read): what the broker's
    /// session holds is unknown, so the next request is a full one that closes it and opens
    /// another.
    pub(crate) fn reset(&mut self) {
        self.epoch = 0;
        self.pending = None;
        self.asked.clear();
        self.ends.clear();
        self.wanted.clear();
        self.names.clear();
    }
}

/// The sessions a client holds, per broker, lent out one request at a time.
#[derive(Debug, Default)]
pub(crate) struct SessionPool {
    inner: Mutex<HashMap<i32, NodeSessions>>,
    stats: Mutex<FetchSessionStats>,
}

/// What the client's fetch sessions did, over every broker ([`crate::cluster::Cluster::fetch_session_stats`]).
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub struct FetchSessionStats {
    /// Sessions brokers opened for this client.
    pub opened: u64,
    /// Full requests sent in a session (opening one), and incremental ones.
    pub full_requests: u64,
    pub incremental_requests: u64,
    /// Partitions listed in those requests, and partitions the requests wanted in all (the
    /// difference is what the sessions saved).
    pub partitions_listed: u64,
    pub partitions_wanted: u64,
    /// Partitions incremental answers left out (unchanged, no records).
    pub partitions_left_out: u64,
    /// Sessions a broker had lost (FETCH_SESSION_ID_NOT_FOUND) or whose epoch it refused
    /// (INVALID_FETCH_SESSION_EPOCH).
    pub lost: u64,
}

#[derive(Debug, Default)]
struct NodeSessions {
    idle: Vec<IncrementalSession>,
    /// Sessions of this broker, idle or lent.
    open: usize,
}

impl SessionPool {
    /// A session of broker `node` for one request (an idle one, or a new one while the broker
    /// has fewer than the bound); `None` when every one is in use (the request goes without).
    pub(crate) fn checkout(self: &Arc<Self>, node: i32) -> Option<Lent> {
        let mut inner = self.inner.lock().unwrap_or_else(PoisonError::into_inner);
        let n = inner.entry(node).or_default();
        let session = match n.idle.pop() {
            Some(s) => s,
            None if n.open < MAX_SESSIONS_PER_BROKER => {
                n.open += 1;
                IncrementalSession::default()
            }
            None => return None,
        };
        Some(Lent {
            pool: self.clone(),
            node,
            session,
        })
    }

    /// The counters so far.
    pub(crate) fn stats(&self) -> FetchSessionStats {
        *self.stats.lock().unwrap_or_else(PoisonError::into_inner)
    }

    fn count(&self, f: impl FnOnce(&mut FetchSessionStats)) {
        f(&mut self.stats.lock().unwrap_or_else(PoisonError::into_inner));
    }

    fn give_back(&self, node: i32, session: IncrementalSession) {
        let mut inner = self.inner.lock().unwrap_or_else(PoisonError::into_inner);
        inner.entry(node).or_default().idle.push(session);
    }

    /// Takes every idle session out of the pool, as (broker, session id) for those a broker
    /// holds open, to close them.
    pub(crate) fn drain_open(&self) -> Vec<(i32, i32)> {
        let mut inner = self.inner.lock().unwrap_or_else(PoisonError::into_inner);
        let mut out = Vec::new();
        for (node, n) in inner.iter_mut() {
            for s in n.idle.drain(..) {
                n.open = n.open.saturating_sub(1);
                if s.id != 0 {
                    out.push((*node, s.id));
                }
            }
        }
        out
    }

    /// Open sessions per broker, idle or lent (for tests and diagnostics).
    #[cfg(test)]
    pub(crate) fn open(&self, node: i32) -> usize {
        let inner = self.inner.lock().unwrap_or_else(PoisonError::into_inner);
        inner.get(&node).map_or(0, |n| n.open)
    }
}

/// A session lent for one request; given back when dropped. One dropped with its request in
/// flight (the fetch cancelled) is reset first: its broker state is unknown.
#[derive(Debug)]
pub(crate) struct Lent {
    pool: Arc<SessionPool>,
    node: i32,
    session: IncrementalSession,
}

impl Lent {
    /// [`IncrementalSession::prepare`], counted.
    pub(crate) fn prepare(&mut self, wanted: &[TopicFetch]) -> SessionRequest {
        let r = self.session.prepare(wanted);
        let listed: usize = r.topics.iter().map(|t| t.partitions.len()).sum();
        let want: usize = wanted.iter().map(|t| t.partitions.len()).sum();
        self.pool.count(|c| {
            if r.session.epoch == 0 {
                c.full_requests += 1;
            } else {
                c.incremental_requests += 1;
            }
            c.partitions_listed += listed as u64;
            c.partitions_wanted += want as u64;
        });
        r
    }

    /// [`IncrementalSession::complete`], counted.
    pub(crate) fn complete(&mut self, view: &mut FetchView) -> Completed {
        let before = view.partitions.len();
        let was = self.session.id;
        let incremental = self.session.pending.as_ref().is_some_and(|p| !p.full);
        let done = self.session.complete(view);
        let now = self.session.id;
        let left_out = view.partitions.len().saturating_sub(before);
        self.pool.count(|c| {
            if matches!(done, Completed::Resend(_)) {
                c.lost += 1;
            }
            if now != 0 && now != was && !incremental {
                c.opened += 1;
            }
            c.partitions_left_out += left_out as u64;
        });
        done
    }

    /// The session's id with its broker (0: none open).
    #[cfg(test)]
    pub(crate) fn id(&self) -> i32 {
        self.session.id
    }
}

impl Drop for Lent {
    fn drop(&mut self) {
        let mut s = std::mem::take(&mut self.session);
        if s.pending.is_some() {
            s.reset();
        }
        self.pool.give_back(self.node, s);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn part(partition: i32, fetch_offset: i64) -> PartitionFetch {
        PartitionFetch {
            partition,
            fetch_offset,
            partition_max_bytes: 1 << 20,
            current_leader_epoch: 3,
            last_fetched_epoch: -1,
        }
    }

    fn topic(parts: Vec<PartitionFetch>) -> TopicFetch {
        TopicFetch {
            name: "t".into(),
            id: [7; 16],
            partitions: parts,
        }
    }

    fn answered(p: i32, hw: i64, records: &'static [u8]) -> FetchedPartition {
        crate::fetch::tests::part(p, hw, records.to_vec())
    }

    fn view(session_id: i32, error: ErrorCode, parts: Vec<FetchedPartition>) -> FetchView {
        FetchView {
            error,
            throttle_time_ms: 0,
            session_id,
            partitions: parts,
        }
    }

    fn listed(req: &SessionRequest) -> Vec<(i32, i64)> {
        req.topics
            .iter()
            .flat_map(|t| t.partitions.iter().map(|p| (p.partition, p.fetch_offset)))
            .collect()
    }

    #[test]
    fn an_open_session_lists_only_what_changed_and_fills_in_what_the_broker_left_out() {
        let mut s = IncrementalSession::default();
        let first = s.prepare(&[topic(vec![part(0, 10), part(1, 20), part(2, 30)])]);
        assert_eq!(first.session, SessionFields { id: 0, epoch: 0 });
        assert_eq!(listed(&first).len(), 3);
        let mut v = view(
            42,
            ErrorCode::NONE,
            vec![
                answered(0, 15, b"x"),
                answered(1, 20, b""),
                answered(2, 30, b""),
            ],
        );
        assert_eq!(s.complete(&mut v), Completed::Answer);
        assert_eq!(s.id(), 42);

        // Partition 0 moved on, 1 and 2 did not; 3 is new.
        let next = s.prepare(&[topic(vec![
            part(0, 15),
            part(1, 20),
            part(2, 30),
            part(3, 0),
        ])]);
        assert_eq!(next.session, SessionFields { id: 42, epoch: 1 });
        assert_eq!(listed(&next), vec![(0, 15), (3, 0)]);
        assert!(next.forgotten.is_empty());
        // The broker lists only partition 3; 0, 1 and 2 come back with their last ends.
        let mut v = view(42, ErrorCode::NONE, vec![answered(3, 5, b"y")]);
        assert_eq!(s.complete(&mut v), Completed::Answer);
        let mut got: Vec<(i32, i64, usize)> = v
            .partitions
            .iter()
            .map(|p| (p.partition, p.high_watermark, p.records.len()))
            .collect();
        got.sort_unstable();
        assert_eq!(got, vec![(0, 15, 0), (1, 20, 0), (2, 30, 0), (3, 5, 1)]);

        // Partitions no longer wanted are forgotten, by topic, and never filled in again.
        let last = s.prepare(&[topic(vec![part(3, 5)])]);
        assert_eq!(last.session, SessionFields { id: 42, epoch: 2 });
        assert_eq!(listed(&last), vec![(3, 5)]);
        assert_eq!(last.forgotten.len(), 1);
        assert_eq!(last.forgotten[0].partitions, vec![0, 1, 2]);
        assert_eq!(last.forgotten[0].id, [7; 16]);
        let mut v = view(42, ErrorCode::NONE, vec![]);
        s.complete(&mut v);
        assert_eq!(v.partitions.len(), 1);
        assert_eq!(v.partitions[0].partition, 3);
    }

    #[test]
    fn a_lost_session_is_resent_in_full_and_a_declined_one_stays_full() {
        let mut s = IncrementalSession::default();
        let want = [topic(vec![part(0, 10)])];
        s.prepare(&want);
        s.complete(&mut view(9, ErrorCode::NONE, vec![answered(0, 10, b"")]));
        assert_eq!(s.prepare(&want).session, SessionFields { id: 9, epoch: 1 });
        let mut v = view(0, ErrorCode::FETCH_SESSION_ID_NOT_FOUND, vec![]);
        assert_eq!(
            s.complete(&mut v),
            Completed::Resend(ErrorCode::FETCH_SESSION_ID_NOT_FOUND)
        );
        // A new session, listing everything.
        let again = s.prepare(&want);
        assert_eq!(again.session, SessionFields { id: 0, epoch: 0 });
        assert_eq!(listed(&again), vec![(0, 10)]);
        s.complete(&mut view(11, ErrorCode::NONE, vec![answered(0, 10, b"")]));
        // A wrong epoch closes the old session with the next full request.
        s.prepare(&want);
        let mut v = view(11, ErrorCode::INVALID_FETCH_SESSION_EPOCH, vec![]);
        assert!(matches!(s.complete(&mut v), Completed::Resend(_)));
        assert_eq!(s.prepare(&want).session, SessionFields { id: 11, epoch: 0 });
        // The broker declines (no cache slot): full requests, nothing filled in.
        s.complete(&mut view(0, ErrorCode::NONE, vec![]));
        let full = s.prepare(&want);
        assert_eq!(full.session, SessionFields { id: 0, epoch: 0 });
        let mut v = view(0, ErrorCode::NONE, vec![]);
        s.complete(&mut v);
        assert!(v.partitions.is_empty());
    }

    #[test]
    fn a_failed_request_or_a_changed_topic_id_starts_a_full_request() {
        let mut s = IncrementalSession::default();
        let want = [topic(vec![part(0, 10)])];
        s.prepare(&want);
        s.complete(&mut view(5, ErrorCode::NONE, vec![answered(0, 10, b"")]));
        s.prepare(&want);
        s.reset();
        let r = s.prepare(&want);
        assert_eq!(r.session, SessionFields { id: 5, epoch: 0 });
        s.complete(&mut view(6, ErrorCode::NONE, vec![answered(0, 10, b"")]));
        let mut recreated = topic(vec![part(0, 0)]);
        recreated.id = [8; 16];
        let r = s.prepare(&[recreated]);
        assert_eq!(r.session, SessionFields { id: 6, epoch: 0 });
        assert!(r.forgotten.is_empty());
    }

    #[test]
    fn the_pool_lends_each_session_to_one_request_and_bounds_them_per_broker() {
        let pool = Arc::new(SessionPool::default());
        let lent: Vec<Lent> = (0..MAX_SESSIONS_PER_BROKER)
            .filter_map(|_| pool.checkout(1))
            .collect();
        assert_eq!(lent.len(), MAX_SESSIONS_PER_BROKER);
        assert!(
            pool.checkout(1).is_none(),
            "every session of broker 1 is lent"
        );
        assert!(pool.checkout(2).is_some());
        let mut one = lent.into_iter().next().unwrap_or_else(|| unreachable!());
        one.prepare(&[topic(vec![part(0, 1)])]);
        one.complete(&mut view(3, ErrorCode::NONE, vec![answered(0, 1, b"")]));
        drop(one);
        let back = pool.checkout(1).unwrap_or_else(|| unreachable!());
        assert_eq!(back.id(), 3, "the session given back is lent again");
        assert_eq!(pool.open(1), MAX_SESSIONS_PER_BROKER);
    }
}
