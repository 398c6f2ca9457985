//! Helpers shared by the integration tests.
#![allow(dead_code)]

use std::time::Duration;

pub use kdirect_test_support::{
    current_thread_rt, rt, service, tempdir, unique, wait_until, wait_until_async,
};

use kdirect::engine::plan::LostRange;
use kdirect::{Batch, DirectStream, Error};
use rdkafka::config::ClientConfig;
use rdkafka::mocking::MockCluster;
use rdkafka::producer::{BaseProducer, BaseRecord, DefaultProducerContext, Producer};

/// librdkafka's mock cluster with a few helpers.
pub struct Mock {
    pub cluster: MockCluster<'static, DefaultProducerContext>,
}

impl Mock {
    /// A mock cluster of `brokers` brokers.
    pub fn new(brokers: i32) -> Mock {
        Mock {
            cluster: MockCluster::new(brokers).expect("start librdkafka mock cluster"),
        }
    }

    pub fn bootstrap(&self) -> String {
        self.cluster.bootstrap_servers()
    }

    pub fn create_topic(&self, topic: &str, partitions: i32) {
        self.cluster
            .create_topic(topic, partitions, 1)
            .expect("create topic on mock");
    }

    /// A librdkafka producer for this cluster, with extra settings.
    pub fn producer(&self, extra: &[(&str, &str)]) -> BaseProducer {
        let mut cfg = ClientConfig::new();
        cfg.set("bootstrap.servers", self.bootstrap())
            .set("linger.ms", "5")
            .set("message.timeout.ms", "10000");
        for (k, v) in extra {
            cfg.set(*k, *v);
        }
        cfg.create().expect("create producer")
    }

    /// Produces `per_partition` records into each of `partitions` partitions of `topic`, the
    /// i-th record of a partition with timestamp `ts0 + i * 1000`, and waits for delivery.
    pub fn produce(&self, topic: &str, partitions: i32, per_partition: usize, ts0: i64) {
        self.produce_at(topic, partitions, per_partition, ts0, &[]);
    }

    /// Like [`Mock::produce`] with producer settings (codec, batch size…): the record at
    /// offset i of partition p has key `k{p}-{i}` and value `value {p}-{i}`.
    pub fn produce_with(
        &self,
        topic: &str,
        partitions: i32,
        per_partition: usize,
        extra: &[(&str, &str)],
    ) {
        self.produce_at(topic, partitions, per_partition, 1_700_000_000_000, extra);
    }

    fn produce_at(
        &self,
        topic: &str,
        partitions: i32,
        per_partition: usize,
        ts0: i64,
        extra: &[(&str, &str)],
    ) {
        let p = self.producer(extra);
        for part in 0..partitions {
            for i in 0..per_partition {
                let key = format!("k{part}-{i}");
                let value = format!("value {part}-{i}");
                let mut rec = BaseRecord::to(topic)
                    .partition(part)
                    .key(&key)
                    .payload(&value)
                    .timestamp(ts0 + i as i64 * 1000);
                loop {
                    match p.send(rec) {
                        Ok(()) => break,
                        Err((_, r)) => {
                            p.poll(Duration::from_millis(10));
                            rec = r;
                        }
                    }
                }
            }
        }
        p.flush(Duration::from_secs(30)).expect("flush producer");
    }
}

/// A loopback address nobody listens on: a free port below the kernel's ephemeral range
/// (32768 and up), so that no other test's listener on port 0 can be given it between this
/// call and the connect that expects a refusal (an ephemeral port freed here was once handed
/// to a fake broker started by a concurrent test, and "connection refused" became "unknown
/// topic"). The services the tests start listen at 3306, 5432, 6379 and 39000 and up.
pub fn dead_addr() -> String {
    use std::sync::atomic::{AtomicU32, Ordering};
    static NEXT: AtomicU32 = AtomicU32::new(0);
    const FIRST: u32 = 23_000;
    const SPAN: u32 = 7_000;
    let start = std::process::id().wrapping_mul(97);
    loop {
        let n = NEXT.fetch_add(1, Ordering::Relaxed);
        let port = FIRST + start.wrapping_add(n) % SPAN;
        let addr = format!("127.0.0.1:{port}");
        if std::net::TcpListener::bind(&addr).is_ok() {
            return addr;
        }
        assert!(n < SPAN, "no free port in {FIRST}..{}", FIRST + SPAN);
    }
}

/// A TCP proxy on loopback in front of a service (PostgreSQL, Redis), for cutting the
/// service away from one client without stopping it for the other tests: [`CutProxy::cut`]
/// closes every connection through it and refuses new ones until [`CutProxy::restore`].
pub struct CutProxy {
    pub port: u16,
    state: std::sync::Arc<ProxyState>,
}

struct ProxyState {
    cut: std::sync::atomic::AtomicBool,
    /// Bumped by every cut: connections of an older generation close.
    generation: std::sync::atomic::AtomicU64,
    stop: std::sync::atomic::AtomicBool,
}

impl CutProxy {
    /// A proxy to `target` (`host:port`).
    pub fn start(target: &str) -> CutProxy {
        use std::sync::atomic::Ordering;
        let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let port = listener.local_addr().unwrap().port();
        let state = std::sync::Arc::new(ProxyState {
            cut: false.into(),
            generation: 0.into(),
            stop: false.into(),
        });
        let st = state.clone();
        let target = target.to_owned();
        std::thread::spawn(move || {
            for client in listener.incoming() {
                if st.stop.load(Ordering::Relaxed) {
                    return;
                }
                let Ok(client) = client else { continue };
                if st.cut.load(Ordering::Relaxed) {
                    drop(client);
                    continue;
                }
                let Ok(server) = std::net::TcpStream::connect(&target) else {
                    continue;
                };
                let generation = st.generation.load(Ordering::Relaxed);
                for (from, to) in [
                    (client.try_clone().unwrap(), server.try_clone().unwrap()),
                    (server, client),
                ] {
                    let st = st.clone();
                    std::thread::spawn(move || pipe(from, to, &st, generation));
                }
            }
        });
        CutProxy { port, state }
    }

    /// Closes every connection through the proxy and refuses new ones.
    pub fn cut(&self) {
        use std::sync::atomic::Ordering;
        self.state.cut.store(true, Ordering::Relaxed);
        self.state.generation.fetch_add(1, Ordering::Relaxed);
    }

    /// Lets connections through again.
    pub fn restore(&self) {
        self.state
            .cut
            .store(false, std::sync::atomic::Ordering::Relaxed);
    }
}

impl Drop for CutProxy {
    fn drop(&mut self) {
        use std::sync::atomic::Ordering;
        self.cut();
        self.state.stop.store(true, Ordering::Relaxed);
        // Wake the accept loop so it sees `stop`.
        let _ = std::net::TcpStream::connect(("127.0.0.1", self.port));
    }
}

/// Copies `from` to `to` until either closes or the proxy is cut (checked every 50 ms).
fn pipe(
    mut from: std::net::TcpStream,
    mut to: std::net::TcpStream,
    st: &ProxyState,
    generation: u64,
) {
    use std::io::{Read, Write};
    use std::sync::atomic::Ordering;
    let _ = from.set_read_timeout(Some(Duration::from_millis(50)));
    let mut buf = vec![0u8; 64 << 10];
    loop {
        if st.generation.load(Ordering::Relaxed) != generation {
            break;
        }
        match from.read(&mut buf) {
            Ok(0) => break,
            Ok(n) => {
                if to.write_all(&buf[..n]).is_err() {
                    break;
                }
            }
            Err(e)
                if matches!(
                    e.kind(),
                    std::io::ErrorKind::WouldBlock | std::io::ErrorKind::TimedOut
                ) => {}
            Err(_) => break,
        }
    }
    let _ = from.shutdown(std::net::Shutdown::Both);
    let _ = to.shutdown(std::net::Shutdown::Both);
}

/// (offset, value) of every record of a batch.
pub fn records(b: &Batch) -> Records {
    let mut got = Vec::new();
    b.for_each_record(|_, r| {
        got.push((
            r.offset(),
            String::from_utf8_lossy(r.value().unwrap_or_default()).into_owned(),
        ))
    })
    .unwrap();
    got
}

/// (offset, value) of records.
pub type Records = Vec<(i64, String)>;

/// What a read handed out, and the lost ranges its batches reported.
pub type Read = (Records, Vec<LostRange>);

/// Reads batches until `enough(records read, highest range end reached)`, committing each to
/// the stream's store (`commit`) or only releasing it: (offset, value) of every record, and
/// the lost ranges the batches reported.
async fn read_until(
    s: &mut DirectStream,
    commit: bool,
    enough: impl Fn(&Records, i64) -> bool,
) -> Result<Read, Error> {
    let mut got = Vec::new();
    let mut lost = Vec::new();
    let mut reached = 0;
    while !enough(&got, reached) {
        let b = s.next_batch().await?.expect("an unbounded stream");
        lost.extend(b.lost().iter().cloned());
        got.extend(records(&b));
        reached = b.ranges().iter().map(|r| r.until).max().unwrap_or(reached);
        if commit {
            s.commit(b).await?;
        } else {
            s.done(b);
        }
    }
    Ok((got, lost))
}

/// Reads batches of a one-partition topic until `until` is reached ([`read_until`]).
pub async fn read_batches(s: &mut DirectStream, until: i64, commit: bool) -> Result<Read, Error> {
    read_until(s, commit, |_, reached| reached >= until).await
}

/// Reads batches until `n` records were handed out ([`read_until`]).
pub async fn read_records(s: &mut DirectStream, n: usize, commit: bool) -> Result<Read, Error> {
    read_until(s, commit, |got, _| got.len() >= n).await
}

/// [`read_batches`], releasing each batch.
pub async fn read_to(s: &mut DirectStream, until: i64) -> Result<Read, Error> {
    read_batches(s, until, false).await
}

/// [`read_batches`], committing each batch.
pub async fn read_and_commit_to(s: &mut DirectStream, until: i64) -> Result<Read, Error> {
    read_batches(s, until, true).await
}
