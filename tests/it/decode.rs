//! Golden record batches from a real producer (librdkafka, through the rdkafka dev-dependency),
//! captured as librdkafka's mock broker served them in a Fetch response, decoded by kdirect and
//! compared record by record with what was produced: one per codec, with headers (a duplicate
//! key among them), null keys and null values.
//!
//! - `golden_batches_decode_exactly`: decodes the committed files in `tests/data/golden/`.
//! - `live_librdkafka_batches_decode_exactly`: produces the same records to a fresh mock cluster
//!   and decodes what it serves, so the check against a real peer runs in every CI run.
//! - `capture_golden_batches` (ignored) rewrites the files:
//!   `cargo test --test it decode::capture_golden_batches -- --ignored`.
//!
//! The fetch is a small blocking client: ApiVersions is not needed, Fetch v11 (the mock speaks
//! 0–16; v11 still names topics) over `std::net::TcpStream` with kafka-protocol's messages.
use std::io::{Read, Write};
use std::net::TcpStream;
use std::path::PathBuf;
use std::time::Duration;

use bytes::{Buf, Bytes, BytesMut};
use kafka_protocol::messages::fetch_request::{FetchPartition, FetchTopic};
use kafka_protocol::messages::{
    ApiKey, BrokerId, FetchRequest, FetchResponse, RequestHeader, ResponseHeader, TopicName,
};
use kafka_protocol::protocol::{Decodable, Encodable, HeaderVersion, StrBytes};
use kdirect_engine::record::{Batches, Compression, DecodeOptions, RecordBatchReader};
use rdkafka::config::ClientConfig;
use rdkafka::message::{Header, OwnedHeaders};
use rdkafka::mocking::MockCluster;
use rdkafka::producer::{BaseProducer, BaseRecord, Producer};

const CODECS: [&str; 5] = ["none", "gzip", "snappy", "lz4", "zstd"];

/// A record as produced and as expected back.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Rec {
    offset: i64,
    timestamp: i64,
    key: Option<Vec<u8>>,
    value: Option<Vec<u8>>,
    headers: Vec<(String, Option<Vec<u8>>)>,
}

/// The records every golden batch holds.
fn golden_records() -> Vec<Rec> {
    let big: Vec<u8> = (0..3000u32)
        .flat_map(|i| format!("line {i} of a compressible value; ").into_bytes())
        .take(3000)
        .collect();
    type Row<'a> = (
        Option<&'a [u8]>,
        Option<Vec<u8>>,
        Vec<(&'a str, Option<&'a [u8]>)>,
    );
    let rows: Vec<Row<'_>> = vec![
        (Some(b"k0"), Some(b"hello".to_vec()), vec![]),
        (
            None,
            Some(b"null key".to_vec()),
            vec![("trace", Some(b"abc"))],
        ),
        (Some(b"tombstone"), None, vec![]),
        (None, None, vec![("h", None)]),
        (
            Some(b"dup"),
            Some(b"duplicate header keys".to_vec()),
            vec![
                ("a", Some(b"1")),
                ("b", Some(b"")),
                ("a", Some(b"2")),
                ("a", None),
            ],
        ),
        (Some(b""), Some(vec![]), vec![]),
        (
            Some(&[0, 159, 146, 150]),
            Some((0..=255u8).collect()),
            vec![("bin", Some(&[0xff, 0]))],
        ),
        (Some(b"big"), Some(big), vec![]),
    ];
    rows.into_iter()
        .enumerate()
        .map(|(i, (k, v, h))| Rec {
            offset: i as i64,
            timestamp: 1_700_000_000_000 + i as i64 * 1000,
            key: k.map(<[u8]>::to_vec),
            value: v,
            headers: h
                .into_iter()
                .map(|(k, v)| (k.to_owned(), v.map(<[u8]>::to_vec)))
                .collect(),
        })
        .collect()
}

/// Decodes a records stream with kdirect.
fn decode(records: Bytes) -> Vec<Rec> {
    let mut reader = RecordBatchReader::new(records, DecodeOptions::new());
    let mut out = Vec::new();
    while let Some(batch) = reader.next_batch().expect("batch") {
        for r in reader.records(&batch).expect("records") {
            let r = r.expect("record");
            out.push(Rec {
                offset: r.offset(),
                timestamp: r.timestamp(),
                key: r.key().map(<[u8]>::to_vec),
                value: r.value().map(<[u8]>::to_vec),
                headers: r
                    .headers()
                    .map(|h| {
                        (
                            String::from_utf8(h.key().to_vec()).expect("utf-8 header key"),
                            h.value().map(<[u8]>::to_vec),
                        )
                    })
                    .collect(),
            });
        }
    }
    out
}

fn golden_dir() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/data/golden")
}

fn codec_of(records: &Bytes) -> Compression {
    Batches::new(records.clone(), true)
        .next()
        .expect("a batch")
        .expect("valid batch")
        .header()
        .compression
}

/// Produces the golden records with librdkafka to `topic` (one partition) in one batch.
fn produce(bootstrap: &str, topic: &str, codec: &str) {
    let producer: BaseProducer = ClientConfig::new()
        .set("bootstrap.servers", bootstrap)
        .set("compression.codec", codec)
        .set("linger.ms", "5000")
        .create()
        .expect("producer");
    for r in golden_records() {
        let mut headers = OwnedHeaders::new();
        for (k, v) in &r.headers {
            headers = headers.insert(Header {
                key: k,
                value: v.as_deref(),
            });
        }
        let mut rec: BaseRecord<'_, [u8], [u8]> = BaseRecord::to(topic)
            .partition(0)
            .timestamp(r.timestamp)
            .headers(headers);
        if let Some(k) = &r.key {
            rec = rec.key(k);
        }
        if let Some(v) = &r.value {
            rec = rec.payload(v);
        }
        producer.send(rec).map_err(|(e, _)| e).expect("send");
    }
    producer.flush(Duration::from_secs(10)).expect("flush");
}

/// One blocking Fetch v11 of `topic`/0 from `offset`; returns the partition's `records`.
fn fetch(bootstrap: &str, topic: &str, offset: i64) -> Bytes {
    const VERSION: i16 = 11;
    let mut stream = TcpStream::connect(bootstrap).expect("connect to the mock broker");
    stream
        .set_read_timeout(Some(Duration::from_secs(10)))
        .unwrap();
    let header = RequestHeader::default()
        .with_request_api_key(ApiKey::Fetch as i16)
        .with_request_api_version(VERSION)
        .with_correlation_id(7)
        .with_client_id(Some(StrBytes::from_static_str("kdirect-golden")));
    let request = FetchRequest::default()
        .with_replica_id(BrokerId(-1))
        .with_max_wait_ms(100)
        .with_min_bytes(1)
        .with_max_bytes(16 << 20)
        .with_session_epoch(-1)
        .with_topics(vec![FetchTopic::default()
            .with_topic(TopicName(StrBytes::from_string(topic.to_owned())))
            .with_partitions(vec![FetchPartition::default()
                .with_partition(0)
                .with_fetch_offset(offset)
                .with_log_start_offset(-1)
                .with_current_leader_epoch(-1)
                .with_partition_max_bytes(16 << 20)])]);
    let mut body = BytesMut::new();
    header
        .encode(&mut body, FetchRequest::header_version(VERSION))
        .unwrap();
    request.encode(&mut body, VERSION).unwrap();
    let mut frame = (body.len() as u32).to_be_bytes().to_vec();
    frame.extend_from_slice(&body);
    stream.write_all(&frame).unwrap();
    let mut len = [0u8; 4];
    stream.read_exact(&mut len).expect("response length");
    let mut resp = vec![0u8; u32::from_be_bytes(len) as usize];
    stream.read_exact(&mut resp).expect("response body");
    let mut resp = Bytes::from(resp);
    let rh = ResponseHeader::decode(&mut resp, FetchResponse::header_version(VERSION)).unwrap();
    assert_eq!(rh.correlation_id, 7);
    let response = FetchResponse::decode(&mut resp, VERSION).unwrap();
    assert_eq!(resp.remaining(), 0);
    assert_eq!(response.error_code, 0);
    let partition = &response.responses[0].partitions[0];
    assert_eq!(partition.error_code, 0, "fetch error");
    partition.records.clone().unwrap_or_default()
}

/// Produces the golden records with `codec` and fetches them back as the mock serves them
/// (the mock returns one batch per response: fetch until every record is there).
fn produce_and_fetch(cluster_bootstrap: &str, codec: &str) -> Bytes {
    let topic = format!("golden-{codec}");
    produce(cluster_bootstrap, &topic, codec);
    let want = golden_records().len() as i64;
    let mut all = BytesMut::new();
    let mut offset = 0;
    for _ in 0..20 {
        if offset >= want {
            break;
        }
        let records = fetch(cluster_bootstrap, &topic, offset);
        let mut reader = RecordBatchReader::new(records.clone(), DecodeOptions::new());
        while reader.next_batch().unwrap().is_some() {}
        all.extend_from_slice(&records);
        offset = reader.next_offset();
    }
    all.freeze()
}

fn mock_cluster() -> MockCluster<'static, rdkafka::producer::DefaultProducerContext> {
    let cluster = MockCluster::new(1).expect("mock cluster");
    for codec in CODECS {
        cluster
            .create_topic(&format!("golden-{codec}"), 1, 1)
            .expect("topic");
    }
    cluster
}

fn check(codec: &str, records: Bytes) {
    let expected_codec = match codec {
        "none" => Compression::None,
        "gzip" => Compression::Gzip,
        "snappy" => Compression::Snappy,
        "lz4" => Compression::Lz4,
        _ => Compression::Zstd,
    };
    assert_eq!(codec_of(&records), expected_codec, "{codec}");
    let got = decode(records);
    let want = golden_records();
    assert_eq!(got.len(), want.len(), "{codec}");
    for (g, w) in got.iter().zip(&want) {
        assert_eq!(g, w, "{codec}");
    }
}

#[test]
fn golden_batches_decode_exactly() {
    for codec in CODECS {
        let path = golden_dir().join(format!("{codec}.bin"));
        let bytes = std::fs::read(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
        check(codec, Bytes::from(bytes));
    }
}

#[test]
fn golden_batches_survive_every_truncation_without_error() {
    let bytes = Bytes::from(std::fs::read(golden_dir().join("zstd.bin")).unwrap());
    for cut in 0..bytes.len() {
        let mut reader = RecordBatchReader::new(bytes.slice(..cut), DecodeOptions::new());
        while let Some(batch) = reader.next_batch().unwrap() {
            for r in reader.records(&batch).unwrap() {
                r.unwrap();
            }
        }
        assert!(reader.tail().is_some());
    }
}

#[test]
fn live_librdkafka_batches_decode_exactly() {
    let cluster = mock_cluster();
    let bootstrap = cluster.bootstrap_servers();
    for codec in CODECS {
        check(codec, produce_and_fetch(&bootstrap, codec));
    }
}

#[test]
#[ignore = "rewrites tests/data/golden: cargo test --test it decode::capture_golden_batches -- --ignored"]
fn capture_golden_batches() {
    let cluster = mock_cluster();
    let bootstrap = cluster.bootstrap_servers();
    std::fs::create_dir_all(golden_dir()).unwrap();
    for codec in CODECS {
        let records = produce_and_fetch(&bootstrap, codec);
        check(codec, records.clone());
        std::fs::write(golden_dir().join(format!("{codec}.bin")), &records).unwrap();
    }
}

/// `kdirect decode FILE` with its output and exit status.
fn decode_cli(path: &std::path::Path, extra: &[&str]) -> (bool, String, String) {
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_kdirect"))
        .arg("decode")
        .arg(path)
        .args(extra)
        .output()
        .unwrap();
    (
        out.status.success(),
        String::from_utf8(out.stdout).unwrap(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

/// `decode` reads its input one batch at a time: a FIFO works (it used to be read whole
/// first), batch positions count from the start of the input, and two files' batches
/// concatenated decode as each file does.
#[test]
fn the_decode_command_streams_its_input_batch_by_batch() {
    let a = std::fs::read(golden_dir().join("none.bin")).unwrap();
    let b = std::fs::read(golden_dir().join("zstd.bin")).unwrap();
    let dir = std::env::temp_dir().join(format!("kdirect-decode-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let (fa, fb, both) = (dir.join("a"), dir.join("b"), dir.join("ab"));
    std::fs::write(&fa, &a).unwrap();
    std::fs::write(&fb, &b).unwrap();
    std::fs::write(&both, [a.as_slice(), b.as_slice()].concat()).unwrap();
    let (ok_a, out_a, _) = decode_cli(&fa, &["--bytes", "utf8"]);
    let (ok_b, out_b, _) = decode_cli(&fb, &["--bytes", "utf8"]);
    assert!(ok_a && ok_b);
    assert!(!out_a.is_empty() && !out_b.is_empty());
    let (ok, out, err) = decode_cli(&both, &["--bytes", "utf8"]);
    assert!(ok, "{err}");
    assert_eq!(out, format!("{out_a}{out_b}"));
    // Positions in --batches count from the start of the input.
    let (ok, batches, err) = decode_cli(&both, &["--batches"]);
    assert!(ok, "{err}");
    let positions: Vec<u64> = batches
        .lines()
        .map(|l| {
            serde_json::from_str::<serde_json::Value>(l).unwrap()["position"]
                .as_u64()
                .unwrap()
        })
        .collect();
    assert!(positions.contains(&(a.len() as u64)), "{positions:?}");
    // Through a FIFO, written by another thread.
    let fifo = dir.join("fifo");
    let _ = std::fs::remove_file(&fifo);
    assert!(std::process::Command::new("mkfifo")
        .arg(&fifo)
        .status()
        .unwrap()
        .success());
    let writer = {
        let (fifo, data) = (fifo.clone(), [a.as_slice(), b.as_slice()].concat());
        std::thread::spawn(move || std::fs::write(fifo, data).unwrap())
    };
    let (ok, piped, err) = decode_cli(&fifo, &["--bytes", "utf8"]);
    writer.join().unwrap();
    assert!(ok, "{err}");
    assert_eq!(piped, out);
    let _ = std::fs::remove_dir_all(&dir);
}

/// Inputs that are not record batches end in a bounded error naming the byte position:
/// /dev/zero (it used to be read until memory ran out), and a batch claiming 2 GB.
#[test]
fn the_decode_command_refuses_endless_or_huge_inputs_with_a_position() {
    let (ok, _, err) = decode_cli(std::path::Path::new("/dev/zero"), &[]);
    assert!(!ok);
    assert!(
        err.contains("/dev/zero") && err.contains("at byte 0"),
        "{err}"
    );
    let dir = std::env::temp_dir().join(format!("kdirect-decode-big-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let huge = dir.join("huge");
    let mut head = vec![0u8; 8];
    head.extend_from_slice(&i32::MAX.to_be_bytes());
    head.extend_from_slice(&[0u8; 100]);
    std::fs::write(&huge, &head).unwrap();
    let (ok, _, err) = decode_cli(&huge, &[]);
    assert!(!ok);
    assert!(
        err.contains("at byte 0") && err.contains("--max-batch-bytes"),
        "{err}"
    );
    let _ = std::fs::remove_dir_all(&dir);
}
