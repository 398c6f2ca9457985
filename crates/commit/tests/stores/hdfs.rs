//! The checkpoint on HDFS against `KDIRECT_TEST_HDFS` (`hdfs://HOST:PORT`: Hadoop's
//! MiniDFSCluster from Maven Central jars, started by tests/hdfs/hdfs.sh through
//! tests/services.sh). The files are looked at with a second HDFS client, as another program
//! would.
use std::time::{Duration, Instant};

use kdirect_commit::checkpoint::CheckpointStore;
use kdirect_commit::{open_store, CommitContext, OffsetStore, OpenOptions, StoreErrorKind};

use crate::common::{batch, exercise, two_writers, two_writers_commit_each_batch_once};
use crate::support::{rt, service, unique};

async fn open(url: &str) -> CheckpointStore {
    CheckpointStore::open_hdfs(url, 100).await.unwrap()
}

/// A plain client on the NameNode `nn` (`hdfs://HOST:PORT`), to read what the store wrote.
fn client(nn: &str) -> hdfs_native::Client {
    hdfs_native::ClientBuilder::new()
        .with_url(nn)
        .build()
        .unwrap()
}

async fn read(c: &hdfs_native::Client, path: &str) -> String {
    let r = c.read(path).await.unwrap();
    let bytes = r.read_range(0, r.file_length()).await.unwrap();
    String::from_utf8(bytes.to_vec()).unwrap()
}

async fn names(c: &hdfs_native::Client, dir: &str) -> Vec<String> {
    let mut v: Vec<String> = c
        .list_status(dir, false)
        .await
        .unwrap()
        .into_iter()
        .map(|s| s.path.rsplit('/').next().unwrap().to_owned())
        .collect();
    v.sort();
    v
}

#[test]
fn hdfs_checkpoint_conformance() {
    let Some(nn) = service("KDIRECT_TEST_HDFS", "hdfs_checkpoint_conformance") else {
        return;
    };
    rt().block_on(async {
        // Through the store spec, as the command line opens it.
        let dir = format!("/kdirect-test/{}", unique("ckpt"));
        let spec = format!("checkpoint:{nn}{dir}");
        let (a, b) = two_writers(&spec, "g").await;
        assert_eq!(a.capabilities(), CheckpointStore::CAPABILITIES);
        exercise(&a, &b, "events").await;
        // The layout a person (or `hdfs dfs -cat`) reads: the disk's, with no temp file left.
        let c = client(&nn);
        assert_eq!(names(&c, &dir).await, ["commits", "metadata", "offsets"]);
        assert!(read(&c, &format!("{dir}/metadata"))
            .await
            .starts_with("{\"id\":"));
        let text = read(&c, &format!("{dir}/commits/3")).await;
        let lines: Vec<&str> = text.lines().collect();
        assert_eq!(lines[0], "v1");
        assert!(lines[1].starts_with("{\"batchId\":3,"), "{text}");
        assert_eq!(lines[2], r#"{"events":{"0":25,"1":110,"2":1}}"#);
        let text = read(&c, &format!("{dir}/offsets/3")).await;
        assert!(
            text.contains(r#""from":{"events":{"0":20,"1":100,"2":1}}"#),
            "{text}"
        );
        for sub in ["offsets", "commits"] {
            let left = names(&c, &format!("{dir}/{sub}")).await;
            assert!(left.iter().all(|n| !n.starts_with('.')), "{sub}: {left:?}");
        }

        // The plan log: a logged, uncommitted batch is found by a new handle.
        let t = unique("t");
        let url = format!("{nn}/kdirect-test/{}", unique("ckpt"));
        let a = open(&url).await;
        a.log_plan(&batch(0, &t, &[(0, 0, 10)])).await.unwrap();
        a.commit(&batch(0, &t, &[(0, 0, 10)]), &CommitContext::STANDALONE)
            .await
            .unwrap();
        let b1 = batch(1, &t, &[(0, 10, 20)]);
        a.log_plan(&b1).await.unwrap();
        let c = open(&url).await.load(&[]).await.unwrap();
        assert_eq!(c.pending, Some(b1));
        assert_eq!(c.batch_id, Some(0));
    });
}

/// Two writers on one checkpoint commit the same batch at once: the rename without overwrite
/// lets exactly one through, every round.
#[test]
fn hdfs_checkpoint_two_writers_one_wins() {
    let Some(nn) = service("KDIRECT_TEST_HDFS", "hdfs_checkpoint_two_writers_one_wins") else {
        return;
    };
    rt().block_on(async {
        let url = format!("{nn}/kdirect-test/{}", unique("ckpt"));
        let t = unique("t");
        let a = open(&url).await;
        let b = open(&url).await;
        two_writers_commit_each_batch_once(&a, &b, &t).await;
    });
}

/// A file another program left in the way (garbage where a commit belongs) is refused by its
/// HDFS name, and nothing is overwritten.
#[test]
fn hdfs_checkpoint_garbage_file_is_refused_by_name() {
    let Some(nn) = service(
        "KDIRECT_TEST_HDFS",
        "hdfs_checkpoint_garbage_file_is_refused_by_name",
    ) else {
        return;
    };
    rt().block_on(async {
        let dir = format!("/kdirect-test/{}", unique("ckpt"));
        let url = format!("{nn}{dir}");
        let t = unique("t");
        let s = open(&url).await;
        s.log_plan(&batch(0, &t, &[(0, 0, 10)])).await.unwrap();
        s.commit(&batch(0, &t, &[(0, 0, 10)]), &CommitContext::STANDALONE)
            .await
            .unwrap();
        let c = client(&nn);
        let mut w = c
            .create(
                &format!("{dir}/commits/1"),
                hdfs_native::WriteOptions::default(),
            )
            .await
            .unwrap();
        w.write_bytes(bytes::Bytes::from_static(b"v1\nnot json\n{}\n"))
            .await
            .unwrap();
        w.close().await.unwrap();
        let e = open(&url).await.load(&[]).await.unwrap_err();
        assert!(matches!(e.kind(), StoreErrorKind::Corrupt { .. }), "{e:?}");
        assert!(e.to_string().contains(&format!("{url}/commits/1")), "{e}");
        assert_eq!(
            read(&c, &format!("{dir}/commits/1")).await,
            "v1\nnot json\n{}\n"
        );
    });
}

/// An unreachable NameNode is one I/O error naming the checkpoint, soon (no server needed:
/// nothing listens on port 1), and a URL without a directory is refused before any call.
#[test]
fn hdfs_checkpoint_unreachable_namenode_and_bad_urls_are_clear_errors() {
    rt().block_on(async {
        let url = "hdfs://127.0.0.1:1/kdirect/ckpt";
        let t0 = Instant::now();
        let e = CheckpointStore::open_hdfs(url, 100).await.unwrap_err();
        eprintln!("unreachable NameNode after {:?}: {e}", t0.elapsed());
        assert!(matches!(e.kind(), StoreErrorKind::Io { .. }), "{e:?}");
        assert!(e.to_string().contains(url), "{e}");
        assert!(t0.elapsed() < Duration::from_secs(35), "{:?}", t0.elapsed());
        let e = open_store(
            "checkpoint:hdfs://127.0.0.1:1",
            "g",
            &OpenOptions::default(),
        )
        .await
        .err()
        .unwrap();
        assert!(matches!(e.kind(), StoreErrorKind::Spec { .. }), "{e:?}");
        assert!(e.to_string().contains("hdfs://127.0.0.1:1"), "{e}");
    });
}
