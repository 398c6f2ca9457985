//! The Kafka-group store against librdkafka's mock cluster: the common behaviour, offsets
//! visible to librdkafka's own consumer (`committed_offsets` — what standard tooling sees),
//! retried coordinator errors, and a wrapper store that keeps the group member's fencing.
use std::sync::Arc;
use std::time::Duration;

use kdirect_commit::kafka::KafkaGroupStore;
use kdirect_commit::{
    Capabilities, CommitContext, CommitOutcome, Committed, OffsetStore, PlannedBatch, Positions,
    StoreError, StoreErrorKind,
};
use kdirect_engine::cluster::Cluster;
use kdirect_engine::conn::ConnConfig;
use kdirect_engine::group::{GroupConfig, GroupMember};
use rdkafka::config::ClientConfig;
use rdkafka::consumer::{BaseConsumer, Consumer};
use rdkafka::mocking::MockCluster;
use rdkafka::producer::DefaultProducerContext;
use rdkafka::types::{RDKafkaApiKey, RDKafkaRespErr};
use rdkafka::{Offset, TopicPartitionList};

use crate::common::{batch, exercise, pos};
use crate::support::{rt, unique};

fn mock(topic: &str) -> MockCluster<'static, DefaultProducerContext> {
    let m = MockCluster::new(3).expect("start librdkafka mock cluster");
    m.create_topic(topic, 3, 1).unwrap();
    m
}

async fn store(bootstrap: &str, group: &str) -> KafkaGroupStore {
    let mut config = ConnConfig::default();
    config.request_timeout = Duration::from_secs(10);
    let cluster = Cluster::connect(&[bootstrap.to_owned()], config)
        .await
        .unwrap();
    KafkaGroupStore::new(Arc::new(cluster), group).with_backoff(Duration::from_millis(20))
}

/// What librdkafka's consumer sees for `group`: (partition, offset, metadata).
fn committed_by_librdkafka(bootstrap: &str, group: &str, topic: &str) -> Vec<(i32, i64, String)> {
    let consumer: BaseConsumer = ClientConfig::new()
        .set("bootstrap.servers", bootstrap)
        .set("group.id", group)
        .create()
        .unwrap();
    let mut tpl = TopicPartitionList::new();
    for p in 0..3 {
        tpl.add_partition(topic, p);
    }
    let got = consumer
        .committed_offsets(tpl, Duration::from_secs(10))
        .unwrap();
    got.elements()
        .iter()
        .map(|e| {
            let o = match e.offset() {
                Offset::Offset(o) => o,
                _ => -1,
            };
            (e.partition(), o, e.metadata().to_owned())
        })
        .collect()
}

#[test]
fn kafka_group_store() {
    let topic = unique("t");
    let group = unique("g");
    let m = mock(&topic);
    let bootstrap = m.bootstrap_servers();
    rt().block_on(async {
        let a = store(&bootstrap, &group).await;
        let b = store(&bootstrap, &group).await;
        exercise(&a, &b, &topic).await;
    });
    let seen = committed_by_librdkafka(&bootstrap, &group, &topic);
    assert_eq!(
        seen,
        vec![
            (0, 9, "kdirect:batch=6".to_owned()),
            (1, 3, "kdirect:batch=6".to_owned()),
            (2, 1, "kdirect:batch=6".to_owned()),
        ]
    );
}

#[test]
fn kafka_retries_coordinator_errors() {
    let topic = unique("t");
    let group = unique("g");
    let m = mock(&topic);
    let bootstrap = m.bootstrap_servers();
    rt().block_on(async {
        let s = store(&bootstrap, &group).await;
        let coordinator_errors = [
            RDKafkaRespErr::RD_KAFKA_RESP_ERR_NOT_COORDINATOR,
            RDKafkaRespErr::RD_KAFKA_RESP_ERR_COORDINATOR_LOAD_IN_PROGRESS,
            RDKafkaRespErr::RD_KAFKA_RESP_ERR_COORDINATOR_NOT_AVAILABLE,
        ];
        // (Not FindCoordinator: librdkafka's mock answers an injected FindCoordinator error
        // with a null host, which kafka-protocol refuses to decode.)
        m.request_errors(RDKafkaApiKey::OffsetFetch, &coordinator_errors);
        assert!(s
            .load(std::slice::from_ref(&topic))
            .await
            .unwrap()
            .positions
            .is_empty());
        m.request_errors(RDKafkaApiKey::OffsetCommit, &coordinator_errors);
        let b0 = batch(0, &topic, &[(0, 0, 5), (1, 0, 6), (2, 0, 7)]);
        assert_eq!(
            s.commit(&b0, &CommitContext::STANDALONE).await.unwrap(),
            CommitOutcome::Committed
        );
        let c = s.load(std::slice::from_ref(&topic)).await.unwrap();
        assert_eq!(c.positions, pos(&topic, &[(0, 5), (1, 6), (2, 7)]));
        assert_eq!(c.batch_id, Some(0));

        // A non-retriable error is returned at once, naming the group and the partition.
        m.request_errors(
            RDKafkaApiKey::OffsetCommit,
            &[RDKafkaRespErr::RD_KAFKA_RESP_ERR_GROUP_AUTHORIZATION_FAILED],
        );
        let b1 = batch(1, &topic, &[(0, 5, 6)]);
        let e = s.commit(&b1, &CommitContext::STANDALONE).await.unwrap_err();
        assert!(matches!(e.kind(), StoreErrorKind::KafkaCode { .. }), "{e}");
        assert!(e.to_string().contains(&group), "{e}");
        assert!(e.to_string().contains("GROUP_AUTHORIZATION_FAILED"), "{e}");
    });
    let seen = committed_by_librdkafka(&bootstrap, &group, &topic);
    assert_eq!(seen.iter().map(|s| s.1).collect::<Vec<_>>(), vec![5, 6, 7]);
}

/// KIP-516: a batch's topic id goes into each of its partitions' commit metadata after the
/// batch id (`kdirect:batch=N topicId=<hex>`, as librdkafka's consumer reads it back) and
/// `load` gives it back, so a stream resumed from the group tells a topic re-created while it
/// was down from a truncated log; metadata without it (older commits) reads as before, and a
/// position set by hand drops it. Was: the group kept no topic ids.
#[test]
fn kafka_group_store_keeps_topic_ids() {
    let topic = unique("t");
    let group = unique("g");
    let m = mock(&topic);
    let bootstrap = m.bootstrap_servers();
    let id = [0x5c; 16];
    rt().block_on(async {
        let s = store(&bootstrap, &group).await;
        let b0 = batch(0, &topic, &[(0, 0, 5), (1, 0, 6), (2, 0, 7)]);
        s.commit(&b0, &CommitContext::STANDALONE).await.unwrap();
        let c = s.load(std::slice::from_ref(&topic)).await.unwrap();
        assert!(c.topic_ids.is_empty(), "{c:?}");
        let b1 = batch(1, &topic, &[(0, 5, 8), (1, 6, 6), (2, 7, 7)])
            .with_topic_ids([(topic.clone(), id)].into());
        assert_eq!(
            s.commit(&b1, &CommitContext::STANDALONE).await.unwrap(),
            CommitOutcome::Committed
        );
        let c = s.load(std::slice::from_ref(&topic)).await.unwrap();
        assert_eq!(c.topic_ids, [(topic.clone(), id)].into());
        assert_eq!(c.batch_id, Some(1));
        assert_eq!(c.positions, pos(&topic, &[(0, 8), (1, 6), (2, 7)]));
    });
    let hex = "5c".repeat(16);
    let seen = committed_by_librdkafka(&bootstrap, &group, &topic);
    assert_eq!(
        seen.iter().map(|s| s.2.clone()).collect::<Vec<_>>(),
        vec![format!("kdirect:batch=1 topicId={hex}"); 3]
    );
    rt().block_on(async {
        let s = store(&bootstrap, &group).await;
        s.set_positions(2, &pos(&topic, &[(0, 0), (1, 0), (2, 0)]))
            .await
            .unwrap();
        let c = s.load(std::slice::from_ref(&topic)).await.unwrap();
        assert!(c.topic_ids.is_empty(), "{c:?}");
        assert_eq!(c.batch_id, Some(2));
    });
}

/// A store of the user's own that wraps the Kafka store and forwards everything, the
/// [`CommitContext`] included: what a user writes to add logging or metrics around a store.
struct Wrapper(KafkaGroupStore);

impl OffsetStore for Wrapper {
    fn describe(&self) -> String {
        format!("wrapped {}", self.0.describe())
    }

    fn capabilities(&self) -> Capabilities {
        self.0.capabilities()
    }

    async fn load(&self, topics: &[String]) -> Result<Committed, StoreError> {
        self.0.load(topics).await
    }

    async fn log_plan(&self, batch: &PlannedBatch) -> Result<(), StoreError> {
        self.0.log_plan(batch).await
    }

    async fn commit(
        &self,
        batch: &PlannedBatch,
        ctx: &CommitContext<'_>,
    ) -> Result<CommitOutcome, StoreError> {
        self.0.commit(batch, ctx).await
    }

    async fn set_positions(&self, batch_id: u64, positions: &Positions) -> Result<(), StoreError> {
        self.0.set_positions(batch_id, positions).await
    }
}

/// A wrapper around the Kafka store keeps generation fencing: the member travels with each
/// commit (the context the wrapper passes on), where it used to be attached only to a
/// `KafkaGroupStore` the stream found by downcast, so a wrapper's commits went out as a
/// standalone consumer's (generation -1, no member id) whatever the member's state. A member
/// that is not in a generation (never joined, or lost its partitions) is refused as fenced
/// before anything is sent, and nothing is written; the same commit as no member goes through.
/// (librdkafka's mock coordinator closes the connection on kdirect's JoinGroup, so the member
/// here never joins: the live generation is read through the same `CommitContext::generation`
/// either way.)
#[test]
fn a_wrapper_around_the_kafka_store_keeps_fencing() {
    let topic = unique("t");
    let group = unique("g");
    let m = mock(&topic);
    let bootstrap = m.bootstrap_servers();
    rt().block_on(async {
        let cluster = Cluster::connect(std::slice::from_ref(&bootstrap), ConnConfig::default())
            .await
            .unwrap();
        let member = GroupMember::new(Arc::new(cluster), GroupConfig::new(&group)).unwrap();
        let s = Wrapper(store(&bootstrap, &group).await);
        assert!(s.capabilities().fenced_by_generation());

        let b0 = batch(0, &topic, &[(0, 0, 5), (1, 0, 6), (2, 0, 7)]);
        let e = s
            .commit(&b0, &CommitContext::member(&member))
            .await
            .unwrap_err();
        assert!(matches!(e.kind(), StoreErrorKind::Fenced { .. }), "{e}");
        assert!(e.is_fenced(), "{e}");
        assert!(e.to_string().contains("not in a generation"), "{e}");
        let c = s.load(std::slice::from_ref(&topic)).await.unwrap();
        assert!(c.positions.is_empty(), "{c:?}");

        member.lose("a rebalance moved the partitions (test)");
        let e = s
            .commit(&b0, &CommitContext::member(&member))
            .await
            .unwrap_err();
        assert!(e.is_fenced(), "{e}");

        assert_eq!(
            s.commit(&b0, &CommitContext::STANDALONE).await.unwrap(),
            CommitOutcome::Committed
        );
        let c = s.load(std::slice::from_ref(&topic)).await.unwrap();
        assert_eq!(c.positions, pos(&topic, &[(0, 5), (1, 6), (2, 7)]));
    });
}
