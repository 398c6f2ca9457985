//! The checkpoint on Azure Blob Storage against `KDIRECT_TEST_AZURE` (Azurite, Azure's blob
//! emulator from npm, started by tests/services.sh; `http://HOST:PORT/ACCOUNT/CONTAINER`, with
//! the emulator's well-known account and key).
use kdirect_commit::checkpoint::CheckpointStore;
use kdirect_commit::{CommitContext, OffsetStore, StoreErrorKind};

use crate::common::{batch, exercise, two_writers_commit_each_batch_once};
use crate::support::{rt, service, unique};

/// Azurite's documented development account key (every emulator has it; not a secret).
const EMULATOR_KEY: &str =
    "Eby8vdM02xNOcqFlqUwJPLlmEtlCDXJ1OUzFT50uSRZ6IFsuFq2UVErCz4I6tq/K1SZFPTOtr/KBHBeksoGMGw==";

/// The account's endpoint, the account and the container, from `KDIRECT_TEST_AZURE`.
fn azure(test: &str) -> Option<(String, String, String)> {
    let v = service("KDIRECT_TEST_AZURE", test)?;
    let (endpoint, container) = v.rsplit_once('/').unwrap();
    let account = endpoint.rsplit('/').next().unwrap();
    Some((
        endpoint.to_owned(),
        account.to_owned(),
        container.to_owned(),
    ))
}

async fn open(
    endpoint: &str,
    account: &str,
    url: &str,
) -> Result<CheckpointStore, kdirect_commit::StoreError> {
    CheckpointStore::open_object_with(
        url,
        100,
        &[
            ("azure_storage_endpoint", endpoint),
            ("azure_storage_account_name", account),
            ("azure_storage_access_key", EMULATOR_KEY),
            ("azure_allow_http", "true"),
        ],
    )
    .await
}

#[test]
fn azure_checkpoint_conformance() {
    let Some((endpoint, account, container)) = azure("azure_checkpoint_conformance") else {
        return;
    };
    rt().block_on(async {
        let url = format!("az://{container}/{}", unique("ckpt"));
        let a = open(&endpoint, &account, &url).await.unwrap();
        let b = open(&endpoint, &account, &url).await.unwrap();
        exercise(&a, &b, &unique("topic")).await;
        // The plan log: a logged, uncommitted batch is found by a new handle.
        let t = unique("t");
        let url = format!("az://{container}/{}", unique("ckpt"));
        let a = open(&endpoint, &account, &url).await.unwrap();
        a.log_plan(&batch(0, &t, &[(0, 0, 10)])).await.unwrap();
        a.commit(&batch(0, &t, &[(0, 0, 10)]), &CommitContext::STANDALONE)
            .await
            .unwrap();
        let b1 = batch(1, &t, &[(0, 10, 20)]);
        a.log_plan(&b1).await.unwrap();
        let c = open(&endpoint, &account, &url)
            .await
            .unwrap()
            .load(&[])
            .await
            .unwrap();
        assert_eq!(c.pending, Some(b1));
        assert_eq!(c.batch_id, Some(0));
    });
}

/// Two writers on one checkpoint commit the same batch at once: `If-None-Match: *` lets
/// exactly one through, every round.
#[test]
fn azure_checkpoint_two_writers_one_wins() {
    let Some((endpoint, account, container)) = azure("azure_checkpoint_two_writers_one_wins")
    else {
        return;
    };
    rt().block_on(async {
        let url = format!("az://{container}/{}", unique("ckpt"));
        let t = unique("t");
        let a = open(&endpoint, &account, &url).await.unwrap();
        let b = open(&endpoint, &account, &url).await.unwrap();
        two_writers_commit_each_batch_once(&a, &b, &t).await;
    });
}

/// A container that does not exist is one error naming the checkpoint.
#[test]
fn azure_checkpoint_missing_container_is_a_clear_error() {
    let Some((endpoint, account, _)) = azure("azure_checkpoint_missing_container_is_a_clear_error")
    else {
        return;
    };
    rt().block_on(async {
        let url = "az://no-such-container-kdirect/x";
        let e = open(&endpoint, &account, url).await.unwrap_err();
        assert!(matches!(e.kind(), StoreErrorKind::Io { .. }), "{e:?}");
        assert!(e.to_string().contains(url), "{e}");
    });
}
