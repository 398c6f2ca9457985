//! Real-client golden bytes: librdkafka's consumer talks to librdkafka's mock cluster through
//! a recording proxy. Every request librdkafka sends for the APIs kdirect speaks is decoded
//! and re-encoded by kdirect-proto, and must come out byte for byte the same; every response
//! the mock sends is decoded by kdirect-proto and checked against what librdkafka reported.
//! The capture runs at two version sets (the mock's maximum, and lower maxima set through its
//! API), so each request is checked at two or more versions.
//!
//! With `KDIRECT_WRITE_GOLDEN=1` the captured frames are also written to
//! `crates/proto/tests/data/` (one file per API, version and direction), where the proto
//! crate's own tests read them offline.

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::io::{Read, Write};
use std::net::{TcpListener, TcpStream};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::thread;
use std::time::Duration;

use bytes::{Buf, Bytes, BytesMut};
use kafka_protocol::messages::*;
use kafka_protocol::protocol::{decode_request_header_from_buffer, Decodable, StrBytes};
use kdirect::proto::api::{
    api_versions::ApiVersions, fetch::Fetch, find_coordinator::FindCoordinator,
    list_offsets::ListOffsets, metadata::Metadata, offset_commit::OffsetCommit,
    offset_fetch::OffsetFetch,
};
use kdirect::proto::message::{decode_response, encode_request, encode_response, Api};
use rdkafka::config::ClientConfig;
use rdkafka::consumer::{BaseConsumer, CommitMode, Consumer};
use rdkafka::message::Message;
use rdkafka::types::RDKafkaApiKey;
use rdkafka::{Offset, TopicPartitionList};

use crate::support::{wait_until, Mock};

/// One request/response pair as seen on the wire (frames without the size prefix).
#[derive(Debug, Clone)]
struct Exchange {
    key: i16,
    version: i16,
    request: Bytes,
    response: Option<Bytes>,
}

type Log = Arc<Mutex<Vec<Exchange>>>;

fn read_frame(s: &mut TcpStream) -> Option<Bytes> {
    let mut len = [0u8; 4];
    s.read_exact(&mut len).ok()?;
    let n = i32::from_be_bytes(len);
    assert!((0..=64 << 20).contains(&n), "frame size {n}");
    let mut buf = vec![0u8; n as usize];
    s.read_exact(&mut buf).ok()?;
    Some(Bytes::from(buf))
}

/// A recording proxy in front of a one-broker mock cluster. Metadata and FindCoordinator
/// answers are rewritten to name the proxy, so that librdkafka keeps talking through it.
struct Proxy {
    addr: String,
    log: Log,
    /// Client connections not yet closed in both directions: 0 once a client that connected
    /// is gone, and then the log is complete.
    open: Arc<AtomicUsize>,
}

impl Proxy {
    fn start(upstream: String) -> Proxy {
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let addr = listener.local_addr().unwrap().to_string();
        let log: Log = Arc::default();
        let open = Arc::new(AtomicUsize::new(0));
        let (l2, a2, o2) = (log.clone(), addr.clone(), open.clone());
        thread::spawn(move || {
            for client in listener.incoming() {
                let Ok(client) = client else { return };
                let up = TcpStream::connect(&upstream).unwrap();
                let (log, me) = (l2.clone(), a2.clone());
                o2.fetch_add(1, Ordering::SeqCst);
                let open = Open(o2.clone());
                thread::spawn(move || {
                    pump(client, up, log, me);
                    drop(open);
                });
            }
        });
        Proxy { addr, log, open }
    }

    /// Waits until every client connection closed and its exchanges are in the log.
    fn wait_closed(&self) {
        wait_until(
            Duration::from_secs(10),
            "every client connection through the proxy closed",
            || self.open.load(Ordering::SeqCst) == 0,
        );
    }
}

/// Counts a proxied connection as open until dropped.
struct Open(Arc<AtomicUsize>);

impl Drop for Open {
    fn drop(&mut self) {
        self.0.fetch_sub(1, Ordering::SeqCst);
    }
}

/// Forwards one client connection until both directions are closed.
fn pump(mut client: TcpStream, mut up: TcpStream, log: Log, me: String) {
    let inflight: Arc<Mutex<HashMap<i32, usize>>> = Arc::default();
    let (mut c2, mut u2) = (client.try_clone().unwrap(), up.try_clone().unwrap());
    let (log2, inflight2) = (log.clone(), inflight.clone());
    let responses = thread::spawn(move || {
        while let Some(resp) = read_frame(&mut u2) {
            let cid = i32::from_be_bytes(resp[..4].try_into().unwrap());
            let idx = inflight2.lock().unwrap().remove(&cid);
            let mut out = resp.clone();
            if let Some(i) = idx {
                let mut log = log2.lock().unwrap();
                let ex = &mut log[i];
                ex.response = Some(resp.clone());
                out = rewrite(ex.key, ex.version, resp, &me);
            }
            let mut framed = (out.len() as i32).to_be_bytes().to_vec();
            framed.extend_from_slice(&out);
            if c2.write_all(&framed).is_err() {
                return;
            }
        }
        let _ = c2.shutdown(std::net::Shutdown::Both);
    });
    while let Some(req) = read_frame(&mut client) {
        let mut b = req.clone();
        let key = b.get_i16();
        let version = b.get_i16();
        let cid = b.get_i32();
        {
            let mut log = log.lock().unwrap();
            log.push(Exchange {
                key,
                version,
                request: req.clone(),
                response: None,
            });
            inflight.lock().unwrap().insert(cid, log.len() - 1);
        }
        let mut framed = (req.len() as i32).to_be_bytes().to_vec();
        framed.extend_from_slice(&req);
        if up.write_all(&framed).is_err() {
            break;
        }
    }
    let _ = up.shutdown(std::net::Shutdown::Both);
    responses.join().unwrap();
}

/// Points broker addresses in Metadata / FindCoordinator answers at the proxy.
fn rewrite(key: i16, version: i16, resp: Bytes, me: &str) -> Bytes {
    let (host, port) = me.rsplit_once(':').unwrap();
    let port: i32 = port.parse().unwrap();
    let host = StrBytes::from_string(host.to_owned());
    if key == Metadata::KEY as i16 {
        let (cid, mut m) = decode_response::<Metadata>(resp, version).unwrap();
        for b in &mut m.brokers {
            b.host = host.clone();
            b.port = port;
        }
        return strip(encode_response::<Metadata>(&m, version, cid).unwrap());
    }
    if key == FindCoordinator::KEY as i16 {
        let (cid, mut f) = decode_response::<FindCoordinator>(resp, version).unwrap();
        f.host = host.clone();
        f.port = port;
        for c in &mut f.coordinators {
            c.host = host.clone();
            c.port = port;
        }
        return strip(encode_response::<FindCoordinator>(&f, version, cid).unwrap());
    }
    resp
}

fn strip(mut framed: Bytes) -> Bytes {
    framed.advance(4);
    framed
}

/// Re-encodes a captured request with kdirect-proto and compares it with the original.
fn reencode<A: Api>(frame: &Bytes) -> A::Request {
    let mut b = frame.clone();
    let header = decode_request_header_from_buffer(&mut b).unwrap();
    let body = A::Request::decode(&mut b, header.request_api_version).unwrap();
    assert!(
        !b.has_remaining(),
        "{:?}: {} bytes left",
        A::KEY,
        b.remaining()
    );
    let client_id = header.client_id.as_ref().map(|c| c.to_string());
    let ours = encode_request::<A>(
        &body,
        header.request_api_version,
        header.correlation_id,
        client_id.as_deref(),
    )
    .unwrap();
    assert_eq!(
        &ours[4..],
        &frame[..],
        "{:?} v{}: kdirect's encoding differs from librdkafka's bytes",
        A::KEY,
        header.request_api_version
    );
    body
}

fn run_librdkafka_session(mock: &Mock, proxy: &Proxy, topic: &str) -> (i64, i64, Vec<Vec<u8>>) {
    let consumer: BaseConsumer = ClientConfig::new()
        .set("bootstrap.servers", &proxy.addr)
        .set("group.id", "golden")
        .set("enable.auto.commit", "false")
        .set("fetch.wait.max.ms", "50")
        .create()
        .unwrap();
    let t = Duration::from_secs(10);
    let _ = mock;
    let (lo, hi) = consumer.fetch_watermarks(topic, 0, t).unwrap();
    let mut tpl = TopicPartitionList::new();
    tpl.add_partition_offset(topic, 0, Offset::Offset(1_700_000_000_000))
        .unwrap();
    let _ = consumer.offsets_for_times(tpl, t).unwrap();
    let mut assign = TopicPartitionList::new();
    assign
        .add_partition_offset(topic, 0, Offset::Beginning)
        .unwrap();
    consumer.assign(&assign).unwrap();
    let mut values = Vec::new();
    let deadline = std::time::Instant::now() + t;
    while values.len() < (hi - lo) as usize && std::time::Instant::now() < deadline {
        if let Some(m) = consumer.poll(Duration::from_millis(100)) {
            values.push(m.unwrap().payload().unwrap().to_vec());
        }
    }
    let mut commit = TopicPartitionList::new();
    commit
        .add_partition_offset(topic, 0, Offset::Offset(hi))
        .unwrap();
    consumer.commit(&commit, CommitMode::Sync).unwrap();
    let committed = consumer.committed(t).unwrap();
    assert_eq!(
        committed.find_partition(topic, 0).unwrap().offset(),
        Offset::Offset(hi)
    );
    (lo, hi, values)
}

#[test]
fn librdkafka_requests_reencode_byte_for_byte_and_responses_decode() {
    let limits: [&[(RDKafkaApiKey, i16)]; 2] = [
        &[],
        &[
            (RDKafkaApiKey::Fetch, 11),
            (RDKafkaApiKey::ListOffsets, 5),
            (RDKafkaApiKey::Metadata, 9),
            (RDKafkaApiKey::OffsetCommit, 7),
            (RDKafkaApiKey::OffsetFetch, 5),
            (RDKafkaApiKey::FindCoordinator, 1),
        ],
    ];
    let mut seen: BTreeMap<i16, BTreeSet<i16>> = BTreeMap::new();
    let mut captured: Vec<Exchange> = Vec::new();
    for (round, lim) in limits.iter().enumerate() {
        let mock = Mock::new(1);
        for (k, max) in lim.iter() {
            let min = if *k == RDKafkaApiKey::Fetch { 4 } else { 1 };
            mock.cluster.apiversion(*k, Some(min), Some(*max)).unwrap();
        }
        let topic = format!("golden{round}");
        mock.create_topic(&topic, 1);
        mock.produce(&topic, 1, 5, 1_700_000_000_000);
        let proxy = Proxy::start(mock.bootstrap());
        let (lo, hi, values) = run_librdkafka_session(&mock, &proxy, &topic);
        assert_eq!(values.len(), 5);
        // The session's consumer is gone: once the proxy saw its connections close, the log
        // holds every exchange.
        proxy.wait_closed();
        let log = proxy.log.lock().unwrap().clone();
        for ex in &log {
            seen.entry(ex.key).or_default().insert(ex.version);
            check_exchange(ex, &topic, lo, hi);
        }
        captured.extend(log);
    }
    println!("versions captured from librdkafka: {seen:?}");
    for (api, key) in [
        ("ApiVersions", ApiVersions::KEY),
        ("Metadata", Metadata::KEY),
        ("ListOffsets", ListOffsets::KEY),
        ("Fetch", Fetch::KEY),
        ("FindCoordinator", FindCoordinator::KEY),
        ("OffsetCommit", OffsetCommit::KEY),
        ("OffsetFetch", OffsetFetch::KEY),
    ] {
        let vs = seen.get(&(key as i16)).cloned().unwrap_or_default();
        let min_versions = if key == ApiVersions::KEY { 1 } else { 2 };
        assert!(vs.len() >= min_versions, "{api}: captured versions {vs:?}");
    }
    if std::env::var_os("KDIRECT_WRITE_GOLDEN").is_some() {
        write_golden(&captured);
    }
}

fn check_exchange(ex: &Exchange, topic: &str, lo: i64, hi: i64) {
    let Some(resp) = ex.response.clone() else {
        // A request still in flight when the session closed (librdkafka's long-poll Fetch):
        // its bytes are checked, there is no answer to check.
        match ApiKey::try_from(ex.key) {
            Ok(ApiKey::Fetch) => drop(reencode::<Fetch>(&ex.request)),
            Ok(ApiKey::Metadata) => drop(reencode::<Metadata>(&ex.request)),
            Ok(ApiKey::ListOffsets) => drop(reencode::<ListOffsets>(&ex.request)),
            _ => {}
        }
        return;
    };
    match ApiKey::try_from(ex.key) {
        Ok(ApiKey::ApiVersions) => {
            let _ = reencode::<ApiVersions>(&ex.request);
        }
        Ok(ApiKey::Metadata) => {
            let _ = reencode::<Metadata>(&ex.request);
            let (_, m) = decode_response::<Metadata>(resp, ex.version).unwrap();
            assert_eq!(m.brokers.len(), 1);
        }
        Ok(ApiKey::ListOffsets) => {
            let req = reencode::<ListOffsets>(&ex.request);
            let (_, r) = decode_response::<ListOffsets>(resp, ex.version).unwrap();
            let asked = req.topics[0].partitions[0].timestamp;
            let got = r.topics[0].partitions[0].offset;
            match asked {
                -2 => assert_eq!(got, lo),
                -1 => assert_eq!(got, hi),
                _ => {}
            }
        }
        Ok(ApiKey::Fetch) => {
            let _ = reencode::<Fetch>(&ex.request);
            let (_, f) = decode_response::<Fetch>(resp, ex.version).unwrap();
            for t in &f.responses {
                for p in &t.partitions {
                    assert_eq!(p.high_watermark, hi);
                }
            }
        }
        Ok(ApiKey::FindCoordinator) => {
            let _ = reencode::<FindCoordinator>(&ex.request);
            let (_, _f) = decode_response::<FindCoordinator>(resp, ex.version).unwrap();
        }
        Ok(ApiKey::OffsetCommit) => {
            let req = reencode::<OffsetCommit>(&ex.request);
            assert_eq!(req.topics[0].name.0.as_str(), topic);
            let (_, r) = decode_response::<OffsetCommit>(resp, ex.version).unwrap();
            assert_eq!(r.topics[0].partitions[0].error_code, 0);
        }
        Ok(ApiKey::OffsetFetch) => {
            let _ = reencode::<OffsetFetch>(&ex.request);
            let (_, r) = decode_response::<OffsetFetch>(resp, ex.version).unwrap();
            let offsets: Vec<i64> = r
                .topics
                .iter()
                .flat_map(|t| t.partitions.iter().map(|p| p.committed_offset))
                .chain(r.groups.iter().flat_map(|g| {
                    g.topics
                        .iter()
                        .flat_map(|t| t.partitions.iter().map(|p| p.committed_offset))
                }))
                .collect();
            assert_eq!(offsets, vec![hi]);
        }
        _ => {}
    }
}

fn write_golden(captured: &[Exchange]) {
    let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("crates/proto/tests/data");
    std::fs::create_dir_all(&dir).unwrap();
    let names: HashMap<i16, &str> = [
        (ApiVersions::KEY as i16, "api_versions"),
        (Metadata::KEY as i16, "metadata"),
        (ListOffsets::KEY as i16, "list_offsets"),
        (Fetch::KEY as i16, "fetch"),
        (FindCoordinator::KEY as i16, "find_coordinator"),
        (OffsetCommit::KEY as i16, "offset_commit"),
        (OffsetFetch::KEY as i16, "offset_fetch"),
    ]
    .into_iter()
    .collect();
    for ex in captured {
        let Some(name) = names.get(&ex.key) else {
            continue;
        };
        let stem = format!("{name}-v{}", ex.version);
        let req = dir.join(format!("{stem}-request.bin"));
        if !req.exists() {
            std::fs::write(&req, &ex.request).unwrap();
            if let Some(r) = &ex.response {
                std::fs::write(dir.join(format!("{stem}-response.bin")), r).unwrap();
            }
        }
    }
    let _ = BytesMut::new();
}
