//! The checkpoint on object storage against `KDIRECT_TEST_S3` (an S3-compatible server: moto,
//! from PyPI, started by tests/services.sh; `http://HOST:PORT/BUCKET`).
use kdirect_commit::checkpoint::CheckpointStore;
use kdirect_commit::{CommitContext, OffsetStore, StoreErrorKind};

use crate::common::{batch, exercise, two_writers_commit_each_batch_once};
use crate::support::{rt, service, unique};

/// The server's endpoint and bucket, from `KDIRECT_TEST_S3`.
fn s3(test: &str) -> Option<(String, String)> {
    let v = service("KDIRECT_TEST_S3", test)?;
    let (endpoint, bucket) = v.rsplit_once('/').unwrap();
    Some((endpoint.to_owned(), bucket.to_owned()))
}

async fn open(endpoint: &str, url: &str) -> CheckpointStore {
    CheckpointStore::open_object_with(
        url,
        100,
        &[
            ("aws_endpoint", endpoint),
            ("aws_allow_http", "true"),
            ("aws_access_key_id", "test"),
            ("aws_secret_access_key", "test"),
            ("aws_region", "us-east-1"),
        ],
    )
    .await
    .unwrap()
}

#[test]
fn object_checkpoint_conformance() {
    let Some((endpoint, bucket)) = s3("object_checkpoint_conformance") else {
        return;
    };
    rt().block_on(async {
        let url = format!("s3://{bucket}/{}", unique("ckpt"));
        let a = open(&endpoint, &url).await;
        let b = open(&endpoint, &url).await;
        exercise(&a, &b, &unique("topic")).await;
        // The plan log: a logged, uncommitted batch is found by a new handle.
        let t = unique("t");
        let url = format!("s3://{bucket}/{}", unique("ckpt"));
        let a = open(&endpoint, &url).await;
        a.log_plan(&batch(0, &t, &[(0, 0, 10)])).await.unwrap();
        a.commit(&batch(0, &t, &[(0, 0, 10)]), &CommitContext::STANDALONE)
            .await
            .unwrap();
        let b1 = batch(1, &t, &[(0, 10, 20)]);
        a.log_plan(&b1).await.unwrap();
        let c = open(&endpoint, &url).await.load(&[]).await.unwrap();
        assert_eq!(c.pending, Some(b1));
        assert_eq!(c.batch_id, Some(0));
    });
}

/// Two writers on one checkpoint commit the same batch at once: the conditional create lets
/// exactly one through, every round.
#[test]
fn object_checkpoint_two_writers_one_wins() {
    let Some((endpoint, bucket)) = s3("object_checkpoint_two_writers_one_wins") else {
        return;
    };
    rt().block_on(async {
        let url = format!("s3://{bucket}/{}", unique("ckpt"));
        let t = unique("t");
        let a = open(&endpoint, &url).await;
        let b = open(&endpoint, &url).await;
        two_writers_commit_each_batch_once(&a, &b, &t).await;
    });
}

/// A bucket that does not exist is one error naming the checkpoint.
#[test]
fn object_checkpoint_missing_bucket_is_a_clear_error() {
    let Some((endpoint, _)) = s3("object_checkpoint_missing_bucket_is_a_clear_error") else {
        return;
    };
    rt().block_on(async {
        let url = "s3://no-such-bucket-kdirect/x";
        let e = CheckpointStore::open_object_with(
            url,
            100,
            &[
                ("aws_endpoint", endpoint.as_str()),
                ("aws_allow_http", "true"),
                ("aws_access_key_id", "test"),
                ("aws_secret_access_key", "test"),
                ("aws_region", "us-east-1"),
            ],
        )
        .await
        .unwrap_err();
        assert!(matches!(e.kind(), StoreErrorKind::Io { .. }), "{e:?}");
        assert!(
            e.to_string().contains("s3://no-such-bucket-kdirect/x"),
            "{e}"
        );
    });
}
