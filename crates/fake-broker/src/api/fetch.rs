//! Fetch v4–v16, hand-encoded so that stored batches go to the socket without being copied.
//!
//! Per partition, whole batches are returned from the batch holding the fetch offset, while
//! they fit in `partition_max_bytes` and the response's `max_bytes`; the first batch of the
//! response is returned even when it is larger than either limit (KIP-74). Under
//! read_committed (isolation level 1) data stops at the last stable offset and the aborted
//! transactions overlapping the returned range are listed (KIP-98). Responses wait for
//! `min_bytes` up to `max_wait_ms`.
//!
//! Fetch sessions (KIP-227) as Kafka's `FetchManager` keeps them: epoch 0 opens one (closing
//! the one named, if any) and answers in full with its id; epoch -1 is sessionless (closing
//! the one named); an incremental request (epoch 1 on) must name a session the broker holds
//! (else FETCH_SESSION_ID_NOT_FOUND) at the epoch it expects (else
//! INVALID_FETCH_SESSION_EPOCH), updates and forgets partitions, and is answered with only the
//! partitions that have records, an error, or ends changed since the session last listed
//! them. A partition that returned records moves to the back of the session.
//! [`crate::FakeCluster::set_fetch_sessions`] turns sessions off per broker (every session id
//! answered is 0) and [`crate::FakeCluster::evict_fetch_sessions`] drops them.
//!
//! Response layout (protocol guide, FetchResponse): flexible from v12 (compact arrays and
//! strings, tagged fields), topic ids instead of names from v13.

use std::collections::HashMap;
use std::sync::Arc;

use bytes::{Buf, BufMut, Bytes, BytesMut};
use kafka_protocol::messages::fetch_request::FetchTopic;
use kafka_protocol::messages::{ApiKey, FetchRequest, TopicName};
use tokio::sync::watch;
use tokio::time::{Duration, Instant};
use uuid::Uuid;

use super::list_offsets::check_leader;
use super::Ctx;
use crate::codes;
use crate::log::AbortedTransaction;
use crate::state::{FetchSessionState, SessionPartition, State};
use crate::wire::{Chunks, PutKafka, WireError};
use crate::FetchFault;

/// One partition's part of the answer.
struct PartPlan {
    index: i32,
    error: i16,
    high_watermark: i64,
    last_stable_offset: i64,
    log_start: i64,
    /// `None` for read_uncommitted (null on the wire).
    aborted: Option<Vec<AbortedTransaction>>,
    /// (base offset, body) of each batch.
    batches: Vec<(i64, Bytes)>,
    /// Fault: cut the records field to this many bytes (inside the last batch).
    truncate_to: Option<usize>,
    /// KIP-320 (v12+): the log does not hold the fetch offset at the request's last fetched
    /// epoch: the largest epoch at or below it and its end offset.
    diverging: Option<(i32, i64)>,
}

impl PartPlan {
    fn records_len(&self) -> usize {
        let full: usize = self.batches.iter().map(|(_, b)| 8 + b.len()).sum();
        self.truncate_to.map_or(full, |t| t.min(full))
    }
}

struct TopicPlan {
    name: String,
    id: Uuid,
    parts: Vec<PartPlan>,
}

struct Plan {
    top_error: i16,
    /// The session the answer belongs to (0: none).
    session_id: i32,
    topics: Vec<TopicPlan>,
    bytes: usize,
    any_error: bool,
}

pub(crate) async fn handle(
    ctx: &Ctx<'_>,
    correlation_id: i32,
    req: FetchRequest,
    shutdown: &mut watch::Receiver<bool>,
) -> Result<Chunks, WireError> {
    let shared: &Arc<_> = ctx.shared;
    let deadline = Instant::now() + Duration::from_millis(req.max_wait_ms.max(0) as u64);
    let session = match open_session(&mut shared.lock(), ctx, req) {
        Ok(s) => s,
        Err(code) => {
            let plan = Plan {
                top_error: code,
                session_id: 0,
                topics: Vec::new(),
                bytes: 0,
                any_error: true,
            };
            return encode(ctx.version, correlation_id, plan);
        }
    };
    let req = &session.req;
    let at_once = {
        let mut st = shared.lock();
        match st.broker_mut(ctx.broker) {
            Ok(b) if b.fetches_at_once > 0 => {
                b.fetches_at_once -= 1;
                true
            }
            _ => false,
        }
    };
    let plan = loop {
        let changed = shared.data_changed.notified();
        tokio::pin!(changed);
        changed.as_mut().enable();
        let plan = plan(&mut shared.lock(), ctx, req);
        let done = plan.any_error
            || plan.top_error != codes::NONE
            || plan.bytes >= req.min_bytes.max(0) as usize
            || at_once
            || Instant::now() >= deadline;
        if done {
            let mut st = shared.lock();
            let plan = answer_in_session(&mut st, ctx.broker, &session, plan);
            if let Ok(b) = st.broker_mut(ctx.broker) {
                b.fetched_record_bytes += plan.bytes as u64;
                b.fetch_partitions_answered += plan
                    .topics
                    .iter()
                    .map(|t| t.parts.len() as u64)
                    .sum::<u64>();
            }
            break plan;
        }
        tokio::select! {
            _ = changed => {}
            _ = tokio::time::sleep_until(deadline) => {}
            _ = shutdown.changed() => return Err(WireError::new("broker stopping")),
        }
    };
    encode(ctx.version, correlation_id, plan)
}

/// A request as its session makes it: every partition the session holds (or the request's
/// own, without one), and how to answer.
struct InSession {
    req: FetchRequest,
    /// The session's id (0: none), and whether the answer is incremental.
    id: i32,
    incremental: bool,
}

/// Applies a request to the broker's fetch sessions (see the module docs); an error code is
/// the answer's top-level error.
fn open_session(st: &mut State, ctx: &Ctx<'_>, req: FetchRequest) -> Result<InSession, i16> {
    let v = ctx.version;
    let by_id = v >= 13;
    let asked: u64 = req.topics.iter().map(|t| t.partitions.len() as u64).sum();
    let Ok(b) = st.broker_mut(ctx.broker) else {
        return Ok(InSession {
            req,
            id: 0,
            incremental: false,
        });
    };
    b.fetch_partitions_asked += asked;
    for p in req.topics.iter().flat_map(|t| &t.partitions) {
        if b.fetch_log.len() >= crate::state::FETCH_LOG_MAX {
            b.fetch_log.pop_front();
        }
        b.fetch_log.push_back((p.partition, p.fetch_offset));
    }
    if v < 7 {
        return Ok(InSession {
            req,
            id: 0,
            incremental: false,
        });
    }
    if req.session_epoch <= 0 {
        // Full: closes the session named, and opens one at epoch 0 (when sessions are on).
        b.fetch_sessions.remove(&req.session_id);
        let mut id = 0;
        if req.session_epoch == 0 && b.fetch_sessions_enabled {
            id = b.next_fetch_session;
            b.next_fetch_session = b.next_fetch_session.checked_add(1).unwrap_or(1);
            b.fetch_sessions_opened += 1;
            let parts = req
                .topics
                .iter()
                .flat_map(|t| {
                    t.partitions.iter().map(|p| SessionPartition {
                        topic: t.topic.clone(),
                        topic_id: t.topic_id,
                        fetch: p.clone(),
                        ends: None,
                    })
                })
                .collect();
            b.fetch_sessions
                .insert(id, FetchSessionState { epoch: 1, parts });
        }
        return Ok(InSession {
            req,
            id,
            incremental: false,
        });
    }
    let Some(session) = b.fetch_sessions.get_mut(&req.session_id) else {
        return Err(codes::FETCH_SESSION_ID_NOT_FOUND);
    };
    if session.epoch != req.session_epoch {
        return Err(codes::INVALID_FETCH_SESSION_EPOCH);
    }
    session.epoch = session.epoch.checked_add(1).unwrap_or(1);
    let same_topic = |sp: &SessionPartition, name: &TopicName, id: &Uuid| {
        if by_id {
            sp.topic_id == *id
        } else {
            sp.topic == *name
        }
    };
    for f in &req.forgotten_topics_data {
        session.parts.retain(|sp| {
            !(same_topic(sp, &f.topic, &f.topic_id) && f.partitions.contains(&sp.fetch.partition))
        });
    }
    for t in &req.topics {
        for p in &t.partitions {
            match session.parts.iter_mut().find(|sp| {
                same_topic(sp, &t.topic, &t.topic_id) && sp.fetch.partition == p.partition
            }) {
                Some(sp) => sp.fetch = p.clone(),
                None => session.parts.push(SessionPartition {
                    topic: t.topic.clone(),
                    topic_id: t.topic_id,
                    fetch: p.clone(),
                    ends: None,
                }),
            }
        }
    }
    // The session's partitions in its order, consecutive ones of a topic under one entry.
    let mut topics: Vec<FetchTopic> = Vec::new();
    for sp in &session.parts {
        match topics.last_mut() {
            Some(t) if same_topic(sp, &t.topic, &t.topic_id) => t.partitions.push(sp.fetch.clone()),
            _ => topics.push(
                FetchTopic::default()
                    .with_topic(sp.topic.clone())
                    .with_topic_id(sp.topic_id)
                    .with_partitions(vec![sp.fetch.clone()]),
            ),
        }
    }
    let id = req.session_id;
    Ok(InSession {
        req: req.with_topics(topics),
        id,
        incremental: true,
    })
}

/// The answer as the session gives it: in full (recording each partition's ends), or, for
/// an incremental request, only the partitions with records, an error, or changed ends.
fn answer_in_session(st: &mut State, broker: i32, s: &InSession, mut plan: Plan) -> Plan {
    plan.session_id = s.id;
    let Some(session) = st
        .broker_mut(broker)
        .ok()
        .and_then(|b| b.fetch_sessions.get_mut(&s.id))
    else {
        return plan;
    };
    let mut moved = Vec::new();
    for t in &mut plan.topics {
        t.parts.retain(|p| {
            let Some(sp) = session.parts.iter_mut().find(|sp| {
                sp.fetch.partition == p.index
                    && if t.id.is_nil() {
                        sp.topic.0.as_str() == t.name.as_str()
                    } else {
                        sp.topic_id == t.id
                    }
            }) else {
                // Not one of the session's (a fault's answer): as it is.
                return true;
            };
            let ends = (p.high_watermark, p.last_stable_offset, p.log_start);
            let news = p.records_len() > 0
                || p.error != codes::NONE
                || p.diverging.is_some()
                || sp.ends != Some(ends);
            if news || !s.incremental {
                sp.ends = Some(ends);
            }
            if p.records_len() > 0 {
                moved.push((sp.topic_id, sp.topic.clone(), sp.fetch.partition));
            }
            news || !s.incremental
        });
    }
    plan.topics
        .retain(|t| !t.parts.is_empty() || !s.incremental);
    for (id, name, partition) in moved {
        if let Some(i) = session
            .parts
            .iter()
            .position(|sp| sp.topic_id == id && sp.topic == name && sp.fetch.partition == partition)
        {
            let sp = session.parts.remove(i);
            session.parts.push(sp);
        }
    }
    plan
}

fn plan(st: &mut State, ctx: &Ctx<'_>, req: &FetchRequest) -> Plan {
    let v = ctx.version;
    let read_committed = req.isolation_level == 1;
    let mut out = Plan {
        top_error: codes::NONE,
        session_id: 0,
        topics: Vec::with_capacity(req.topics.len()),
        bytes: 0,
        any_error: false,
    };
    let ids: HashMap<Uuid, String> = if v >= 13 {
        st.topics.iter().map(|(n, t)| (t.id, n.clone())).collect()
    } else {
        HashMap::new()
    };
    let mut remaining = if req.max_bytes > 0 {
        req.max_bytes as usize
    } else {
        usize::MAX
    };
    let mut first_batch_taken = false;
    for t in &req.topics {
        let (name, unknown_code) = if v >= 13 {
            match ids.get(&t.topic_id) {
                Some(n) => (n.clone(), codes::NONE),
                None => (String::new(), codes::UNKNOWN_TOPIC_ID),
            }
        } else {
            (t.topic.0.to_string(), codes::NONE)
        };
        let mut tp = TopicPlan {
            name: name.clone(),
            id: t.topic_id,
            parts: Vec::with_capacity(t.partitions.len()),
        };
        for p in &t.partitions {
            let mut pp = PartPlan {
                index: p.partition,
                error: codes::NONE,
                high_watermark: -1,
                last_stable_offset: -1,
                log_start: -1,
                aborted: None,
                batches: Vec::new(),
                truncate_to: None,
                diverging: None,
            };
            let part = if unknown_code != codes::NONE {
                Err(unknown_code)
            } else {
                st.partition_mut(&name, p.partition)
                    .map_err(|_| codes::UNKNOWN_TOPIC_OR_PARTITION)
            };
            let part = match part {
                Ok(part) => part,
                Err(code) => {
                    pp.error = code;
                    out.any_error = true;
                    tp.parts.push(pp);
                    continue;
                }
            };
            let log = &part.log;
            pp.high_watermark = log.high_watermark();
            pp.last_stable_offset = log.last_stable_offset();
            pp.log_start = log.log_start;
            let err = check_leader(part, ctx.broker, p.current_leader_epoch, v >= 9)
                .or_else(|| part.take_error(ApiKey::Fetch));
            // KIP-320, as Kafka's Partition.fetchRecords validates before reading: the end of
            // the last fetched epoch in this log below the fetch offset (or an older epoch)
            // is a diverging epoch, answered with no records; an epoch the log cannot place
            // is OFFSET_OUT_OF_RANGE.
            if err.is_none() && v >= 12 && p.last_fetched_epoch >= 0 {
                let (epoch, end) = part.log.end_offset_for(p.last_fetched_epoch);
                if epoch < 0 || end < 0 {
                    pp.error = codes::OFFSET_OUT_OF_RANGE;
                    out.any_error = true;
                    tp.parts.push(pp);
                    continue;
                }
                if epoch < p.last_fetched_epoch || end < p.fetch_offset {
                    pp.diverging = Some((epoch, end));
                    out.any_error = true;
                    tp.parts.push(pp);
                    continue;
                }
            }
            let err = err.or_else(|| {
                (p.fetch_offset < part.log.log_start || p.fetch_offset > part.log.high_watermark())
                    .then_some(codes::OFFSET_OUT_OF_RANGE)
            });
            if let Some(code) = err {
                pp.error = code;
                out.any_error = true;
                tp.parts.push(pp);
                continue;
            }
            let log = &part.log;
            let limit = if read_committed {
                pp.last_stable_offset
            } else {
                pp.high_watermark
            };
            let mut part_left = p.partition_max_bytes.max(0) as usize;
            let mut last_offset = None;
            // `skip` on a slice iterator is O(1): the binary search stays the only walk.
            for b in log.batches.iter().skip(log.first_batch_at(p.fetch_offset)) {
                if b.base_offset >= limit {
                    break;
                }
                let size = b.wire_len();
                if (size > part_left || size > remaining) && first_batch_taken {
                    break;
                }
                first_batch_taken = true;
                part_left = part_left.saturating_sub(size);
                remaining = remaining.saturating_sub(size);
                pp.batches.push((b.base_offset, b.body.clone()));
                last_offset = Some(b.last_offset);
            }
            if read_committed {
                pp.aborted = Some(match last_offset {
                    Some(last) => log.aborted_in(p.fetch_offset, last),
                    None => Vec::new(),
                });
            }
            match part.fetch_fault {
                None => {}
                Some(FetchFault::Omit) => continue,
                Some(FetchFault::Empty) => pp.batches.clear(),
                Some(FetchFault::WrongPartition) => pp.index = pp.index.saturating_add(1000),
                Some(FetchFault::StaleBatch) => {
                    pp.batches = log
                        .batches
                        .first()
                        .map(|b| (b.base_offset, b.body.clone()))
                        .into_iter()
                        .collect();
                }
                Some(FetchFault::Overlong) => {
                    if let Some((_, b)) = pp.batches.first() {
                        pp.truncate_to = Some((8 + b.len()) / 2);
                    }
                }
            }
            if part.truncate_fetches > 0 && !pp.batches.is_empty() {
                part.truncate_fetches -= 1;
                let full: usize = pp.batches.iter().map(|(_, b)| 8 + b.len()).sum();
                let last = pp.batches.last().map_or(0, |(_, b)| 8 + b.len());
                pp.truncate_to = Some(full - last + last / 2);
            }
            out.bytes += pp.records_len();
            tp.parts.push(pp);
        }
        out.topics.push(tp);
    }
    out
}

fn encode(v: i16, correlation_id: i32, plan: Plan) -> Result<Chunks, WireError> {
    let flexible = v >= 12;
    let mut parts: Vec<Bytes> = Vec::with_capacity(8);
    let mut buf = BytesMut::with_capacity(256);
    // Body first; the size prefix and header go in front once the length is known.
    buf.put_i32(0); // throttle_time_ms
    if v >= 7 {
        buf.put_i16(plan.top_error);
        buf.put_i32(plan.session_id);
    }
    buf.put_array_len(flexible, plan.topics.len());
    for t in &plan.topics {
        if v >= 13 {
            buf.put_slice(t.id.as_bytes());
        } else {
            buf.put_string(flexible, &t.name);
        }
        buf.put_array_len(flexible, t.parts.len());
        for p in &t.parts {
            buf.put_i32(p.index);
            buf.put_i16(p.error);
            buf.put_i64(p.high_watermark);
            buf.put_i64(p.last_stable_offset);
            if v >= 5 {
                buf.put_i64(p.log_start);
            }
            buf.put_nullable_array_len(flexible, p.aborted.as_ref().map(Vec::len));
            for a in p.aborted.iter().flatten() {
                buf.put_i64(a.producer_id);
                buf.put_i64(a.first_offset);
                if flexible {
                    buf.put_no_tags();
                }
            }
            if v >= 11 {
                buf.put_i32(-1); // preferred_read_replica
            }
            let mut left = p.records_len();
            buf.put_bytes_len(flexible, left);
            for (base, body) in &p.batches {
                if left == 0 {
                    break;
                }
                // The 8-byte base offset, or as much of it as the cut leaves.
                let base = base.to_be_bytes();
                let n = left.min(base.len());
                buf.put(Buf::take(base.as_slice(), n));
                left -= n;
                let n = left.min(body.len());
                if n > 0 {
                    parts.push(buf.split().freeze());
                    parts.push(body.slice(..n));
                    left -= n;
                }
            }
            match (flexible, p.diverging) {
                (true, Some((epoch, end_offset))) => {
                    // One tagged field: tag 0, diverging_epoch {epoch, end_offset, no tags}.
                    buf.put_u8(1);
                    buf.put_u8(0);
                    buf.put_u8(4 + 8 + 1);
                    buf.put_i32(epoch);
                    buf.put_i64(end_offset);
                    buf.put_no_tags();
                }
                (true, None) => buf.put_no_tags(),
                (false, _) => {}
            }
        }
        if flexible {
            buf.put_no_tags();
        }
    }
    if flexible {
        buf.put_no_tags();
    }
    parts.push(buf.freeze());
    let body_len: usize = parts.iter().map(Bytes::len).sum();
    let header_len = if flexible { 5 } else { 4 };
    let size = i32::try_from(body_len + header_len)
        .map_err(|_| WireError::new("fetch response exceeds 2 GiB"))?;
    let mut head = BytesMut::with_capacity(9);
    head.put_i32(size);
    head.put_i32(correlation_id);
    if flexible {
        head.put_no_tags();
    }
    parts.insert(0, head.freeze());
    Ok(Chunks { parts })
}
