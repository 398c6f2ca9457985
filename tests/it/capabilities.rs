//! The stream judges a store by what it declares (`OffsetStore::capabilities`), never by its
//! type: a store that logs plans (one writer only) is refused with a group whatever it is
//! (the checkpoint, ZooKeeper, the Parquet sink's log, a user's wrapper around any of them),
//! the others are accepted. (That a wrapper around the Kafka store keeps its fencing is the
//! store crate's `a_wrapper_around_the_kafka_store_keeps_fencing`: a member cannot join a
//! group on the fake broker or on librdkafka's mock.)
use std::sync::Arc;

use kdirect::commit::kafka::KafkaGroupStore;
use kdirect::engine::cluster::Cluster;
use kdirect::engine::conn::ConnConfig;
use kdirect::sink::parquet::{ParquetOptions, ParquetSink};
use kdirect::{
    Capabilities, CheckpointStore, CommitContext, CommitOutcome, Committed, DirectStream,
    OffsetStore, PlannedBatch, Positions, SqlStore, StoreError,
};
use kdirect_fake_broker::FakeCluster;

use crate::support::{rt, service, tempdir};

/// A store of the user's own that forwards everything to `S`.
struct Wrapper<S> {
    inner: S,
}

impl<S> Wrapper<S> {
    fn new(inner: S) -> Self {
        Wrapper { inner }
    }
}

impl<S: OffsetStore> OffsetStore for Wrapper<S> {
    fn describe(&self) -> String {
        format!("wrapped {}", self.inner.describe())
    }

    fn capabilities(&self) -> Capabilities {
        self.inner.capabilities()
    }

    async fn load(&self, topics: &[String]) -> Result<Committed, StoreError> {
        self.inner.load(topics).await
    }

    async fn log_plan(&self, batch: &PlannedBatch) -> Result<(), StoreError> {
        self.inner.log_plan(batch).await
    }

    async fn commit(
        &self,
        batch: &PlannedBatch,
        ctx: &CommitContext<'_>,
    ) -> Result<CommitOutcome, StoreError> {
        self.inner.commit(batch, ctx).await
    }

    async fn set_positions(&self, batch_id: u64, positions: &Positions) -> Result<(), StoreError> {
        self.inner.set_positions(batch_id, positions).await
    }
}

/// `build` with `store` and a group: `Err` with the message when refused.
async fn in_a_group<S: OffsetStore + 'static>(fake: &FakeCluster, store: S) -> Result<(), String> {
    DirectStream::builder()
        .bootstrap(&fake.bootstrap())
        .subscribe(&["caps"])
        .group("caps")
        .store(store)
        .build()
        .await
        .map(drop)
        .map_err(|e| e.to_string())
}

fn refused(what: &str, r: Result<(), String>) {
    let e = r.expect_err(what);
    assert!(
        e.contains("cannot be shared by the members of a group"),
        "{what}: {e}"
    );
}

/// Each store that can be made without a service, handed straight to the builder with a
/// group: refused when it declares a plan log, accepted otherwise. Was: only a
/// `CheckpointStore` or an `AnyStore` was recognised (by downcast), so the Parquet sink's log
/// and a wrapper around a checkpoint passed, and then shared one plan log between members.
#[test]
fn a_store_is_refused_or_accepted_in_a_group_by_what_it_declares() {
    rt().block_on(async {
        let fake = FakeCluster::builder()
            .brokers(1)
            .topic("caps", 2)
            .build()
            .await
            .unwrap();
        let dir = tempdir("caps");
        let checkpoint = || CheckpointStore::open(dir.join("ckpt"), 10).unwrap();
        refused("checkpoint", in_a_group(&fake, checkpoint()).await);
        refused(
            "a wrapper around a checkpoint",
            in_a_group(&fake, Wrapper::new(checkpoint())).await,
        );
        let parquet = ParquetSink::open(dir.join("parquet"), ParquetOptions::default()).unwrap();
        refused(
            "the Parquet sink's log",
            in_a_group(&fake, parquet.log()).await,
        );

        let sqlite = format!("sqlite:{}", dir.join("o.db").display());
        let sql = SqlStore::connect(&sqlite, "caps").await.unwrap();
        assert!(!sql.capabilities().logs_plans());
        in_a_group(&fake, sql).await.expect("sqlite in a group");
        let cluster = Cluster::connect(&[fake.bootstrap()], ConnConfig::default())
            .await
            .unwrap();
        let kafka = KafkaGroupStore::new(Arc::new(cluster), "caps");
        assert!(!kafka.capabilities().logs_plans());
        in_a_group(&fake, Wrapper::new(kafka))
            .await
            .expect("a wrapper around the kafka store in a group");
    });
}

/// The case the issue found by reading: a `ZooKeeperStore` logs plans like a checkpoint, but
/// was not recognised by the downcast, so two members could share its plan log. Needs
/// `KDIRECT_TEST_ZOOKEEPER`.
#[test]
fn a_zookeeper_store_is_refused_in_a_group() {
    let Some(url) = service(
        "KDIRECT_TEST_ZOOKEEPER",
        "a_zookeeper_store_is_refused_in_a_group",
    ) else {
        return;
    };
    rt().block_on(async {
        let fake = FakeCluster::builder()
            .brokers(1)
            .topic("caps", 2)
            .build()
            .await
            .unwrap();
        let zk = kdirect::commit::zookeeper::ZooKeeperStore::connect(&url, "caps")
            .await
            .unwrap();
        assert!(zk.capabilities().logs_plans());
        refused("zookeeper", in_a_group(&fake, zk).await);
    });
}
