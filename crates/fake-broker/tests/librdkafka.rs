//! librdkafka's own consumer (a client kdirect's authors did not write) reads the fake broker.

mod support;

use std::time::Duration;

use kdirect_fake_broker::{Codec, FakeCluster};
use rdkafka::consumer::Consumer;
use rdkafka::Offset;
use support::*;

const TOPIC: &str = "t";

/// Every codec: several batches per partition, keys, headers, timestamps; records compared
/// exactly, CRCs checked by librdkafka.
#[test]
fn librdkafka_reads_every_record_in_every_codec() {
    for codec in Codec::ALL {
        let cluster = FakeCluster::builder()
            .brokers(3)
            .topic(TOPIC, 4)
            .start()
            .unwrap();
        let mut expected = Vec::new();
        for p in 0..4 {
            let mut i = 0;
            for batch_len in [1usize, 7, 100, 3] {
                let recs: Vec<_> = (i..i + batch_len).map(|i| record(p, i)).collect();
                let base = cluster.append_records(TOPIC, p, &recs, codec).unwrap();
                for (k, r) in recs.iter().enumerate() {
                    expected.push(Consumed::from_fake(p, base + k as i64, r));
                }
                i += batch_len;
            }
        }
        let c = consumer(&cluster.bootstrap(), &[]);
        assign(&c, TOPIC, 4, Offset::Beginning);
        let (got, errors) = poll_records(&c, expected.len(), Duration::from_secs(20));
        assert_eq!(got.len(), expected.len(), "{codec:?}: errors {errors:?}");
        assert_eq!(sorted(got), sorted(expected), "{codec:?}");
        assert!(errors.is_empty(), "{codec:?}: {errors:?}");
        let (lo, hi) = c
            .fetch_watermarks(TOPIC, 2, Duration::from_secs(5))
            .unwrap();
        assert_eq!((lo, hi), (0, 111));
    }
}
