//! `--metrics-addr`: the Prometheus scrape endpoint, served by a small HTTP/1 server of its own
//! on threads of its own, never on the runtime that reads the brokers.
//!
//! It answers `GET /metrics` (and `GET /`) with the recorder's text and closes the
//! connection; anything else gets 404 or 405. A scraper cannot hold the process's resources:
//! at most [`MAX_CONNECTIONS`] connections are served at once (more are answered 503 and
//! closed), a request's head must arrive within [`HEAD_TIMEOUT`] and fit in [`MAX_HEAD`]
//! bytes, writes time out as well, and `--metrics-allow` limits which addresses may scrape.
//! (The exporter's own listener had none of these, and ran on the CLI's one runtime thread:
//! slow clients could exhaust file descriptors and stall broker I/O.)
//!
//! A partition the group revoked stops being served (its `kdirect_partition_*` series), until
//! it is assigned again: the `metrics` facade cannot unregister a series, so without this a
//! member kept reporting the last position and lag of every partition it ever owned, which
//! a dashboard summing lag over members counts twice.

use std::collections::BTreeSet;
use std::io::{Read, Write};
use std::net::{IpAddr, SocketAddr, TcpListener, TcpStream};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use metrics_exporter_prometheus::{PrometheusBuilder, PrometheusHandle};

use super::CliError;

/// Connections served at once.
pub const MAX_CONNECTIONS: usize = 16;
/// How long a client may take to send its request head, and to take the answer.
pub const HEAD_TIMEOUT: Duration = Duration::from_secs(5);
/// The largest request head read.
pub const MAX_HEAD: usize = 8 << 10;

/// Partitions whose series are not served: revoked, not assigned again since.
static GONE: Mutex<BTreeSet<(String, i32)>> = Mutex::new(BTreeSet::new());

/// The group revoked `partitions`: their series are no longer served.
pub fn revoked<'a>(partitions: impl IntoIterator<Item = &'a kdirect::TopicPartition>) {
    let mut gone = GONE.lock().unwrap_or_else(PoisonError::into_inner);
    gone.extend(
        partitions
            .into_iter()
            .map(|tp| (tp.topic.to_string(), tp.partition)),
    );
}

/// The group assigned `partitions`: their series are served again.
pub fn assigned<'a>(partitions: impl IntoIterator<Item = &'a kdirect::TopicPartition>) {
    let mut gone = GONE.lock().unwrap_or_else(PoisonError::into_inner);
    for tp in partitions {
        gone.remove(&(tp.topic.to_string(), tp.partition));
    }
}

/// The exposition `text` without the per-partition samples of the partitions in `gone`.
fn without(text: &str, gone: &BTreeSet<(String, i32)>) -> String {
    if gone.is_empty() {
        return text.to_owned();
    }
    let label = |line: &str, name: &str| -> Option<String> {
        let at = line.find(&format!("{name}=\""))? + name.len() + 2;
        let rest = line.get(at..)?;
        Some(rest.get(..rest.find('"')?)?.to_owned())
    };
    let mut out = String::with_capacity(text.len());
    for line in text.split_inclusive('\n') {
        let dropped = line.starts_with("kdirect_partition_")
            && label(line, "topic")
                .zip(label(line, "partition").and_then(|p| p.parse::<i32>().ok()))
                .is_some_and(|tp| gone.contains(&tp));
        if !dropped {
            out.push_str(line);
        }
    }
    out
}

/// What `GET /metrics` answers: the recorder's text without the revoked partitions.
fn exposition(handle: &PrometheusHandle) -> String {
    let gone = GONE.lock().unwrap_or_else(PoisonError::into_inner).clone();
    without(&handle.render(), &gone)
}

/// Which peers may scrape: addresses or networks (`10.0.0.0/8`, `::1`).
#[derive(Debug, Clone, Default)]
pub struct AllowList(Vec<(IpAddr, u8)>);

impl AllowList {
    /// Parses `ADDR[/PREFIX],…`; empty allows everyone (the bind address decides).
    pub fn parse(list: &str) -> Result<AllowList, CliError> {
        let mut nets = Vec::new();
        for item in list.split(',').map(str::trim).filter(|s| !s.is_empty()) {
            let (addr, len) = match item.split_once('/') {
                Some((a, l)) => (a, Some(l)),
                None => (item, None),
            };
            let bad = |why: &str| CliError(format!("--metrics-allow '{item}': {why}"));
            let ip: IpAddr = addr
                .parse()
                .map_err(|_| bad("not an IP address (ADDR or ADDR/PREFIX)"))?;
            let max = if ip.is_ipv4() { 32 } else { 128 };
            let len = match len {
                Some(l) => l
                    .parse::<u8>()
                    .ok()
                    .filter(|l| *l <= max)
                    .ok_or_else(|| bad(&format!("the prefix length is 0 to {max}")))?,
                None => max,
            };
            nets.push((ip, len));
        }
        Ok(AllowList(nets))
    }

    /// Whether `peer` may scrape.
    pub fn allows(&self, peer: IpAddr) -> bool {
        if self.0.is_empty() {
            return true;
        }
        // An IPv4 peer on a dual-stack socket shows as ::ffff:a.b.c.d.
        let peer = match peer {
            IpAddr::V6(v6) => v6.to_ipv4_mapped().map_or(peer, IpAddr::V4),
            v4 => v4,
        };
        self.0.iter().any(|&(net, len)| match (net, peer) {
            (IpAddr::V4(n), IpAddr::V4(p)) => {
                let mask = u32::MAX.checked_shl(32 - u32::from(len)).unwrap_or(0);
                u32::from(n) & mask == u32::from(p) & mask
            }
            (IpAddr::V6(n), IpAddr::V6(p)) => {
                let mask = u128::MAX.checked_shl(128 - u32::from(len)).unwrap_or(0);
                u128::from(n) & mask == u128::from(p) & mask
            }
            _ => false,
        })
    }
}

/// Installs the Prometheus recorder and serves it on `addr` until the process exits.
pub fn serve(addr: SocketAddr, allow: AllowList) -> Result<(), CliError> {
    let listener =
        TcpListener::bind(addr).map_err(|e| CliError(format!("--metrics-addr {addr}: {e}")))?;
    let handle = PrometheusBuilder::new()
        .install_recorder()
        .map_err(|e| CliError(format!("--metrics-addr {addr}: {e}")))?;
    // Histograms are drained into their summaries by upkeep; without it they grow.
    let upkeep = handle.clone();
    std::thread::Builder::new()
        .name("kdirect-metrics-upkeep".into())
        .spawn(move || loop {
            std::thread::sleep(Duration::from_secs(5));
            upkeep.run_upkeep();
        })
        .map_err(|e| CliError(format!("--metrics-addr {addr}: {e}")))?;
    std::thread::Builder::new()
        .name("kdirect-metrics".into())
        .spawn(move || accept(listener, handle, allow))
        .map_err(|e| CliError(format!("--metrics-addr {addr}: {e}")))?;
    Ok(())
}

fn accept(listener: TcpListener, handle: PrometheusHandle, allow: AllowList) {
    let handle = Arc::new(handle);
    let open = Arc::new(AtomicUsize::new(0));
    for conn in listener.incoming() {
        let Ok(mut conn) = conn else {
            // Out of file descriptors, or the like: do not spin on it.
            std::thread::sleep(Duration::from_millis(100));
            continue;
        };
        let Ok(peer) = conn.peer_addr() else { continue };
        if !allow.allows(peer.ip()) {
            // Closed unanswered: nothing is told to a peer that may not scrape.
            continue;
        }
        let _ = conn.set_read_timeout(Some(HEAD_TIMEOUT));
        let _ = conn.set_write_timeout(Some(HEAD_TIMEOUT));
        // Up to MAX_CONNECTIONS are served; as many more are told 503 (on a thread too, so
        // that a client slow to take it holds no one else up); past that, closed at once.
        let slot = open.fetch_add(1, Ordering::SeqCst);
        if slot >= 2 * MAX_CONNECTIONS {
            open.fetch_sub(1, Ordering::SeqCst);
            continue;
        }
        let (handle, done) = (handle.clone(), open.clone());
        let spawned = std::thread::Builder::new()
            .name("kdirect-metrics-conn".into())
            .spawn(move || {
                let _ = if slot < MAX_CONNECTIONS {
                    answer(&mut conn, &handle)
                } else {
                    respond(&mut conn, "503 Service Unavailable", "busy\n")
                };
                done.fetch_sub(1, Ordering::SeqCst);
            });
        if spawned.is_err() {
            open.fetch_sub(1, Ordering::SeqCst);
        }
    }
}

/// Reads one request head (bounded in size and time) and answers it.
fn answer(conn: &mut TcpStream, handle: &PrometheusHandle) -> std::io::Result<()> {
    let mut head = Vec::with_capacity(512);
    let mut buf = [0u8; 1024];
    let deadline = std::time::Instant::now() + HEAD_TIMEOUT;
    while !head.windows(4).any(|w| w == b"\r\n\r\n") && !head.windows(2).any(|w| w == b"\n\n") {
        if head.len() >= MAX_HEAD {
            return respond(conn, "431 Request Header Fields Too Large", "too large\n");
        }
        // The read timeout bounds each read; this bounds a client that trickles bytes.
        if std::time::Instant::now() >= deadline {
            return respond(conn, "408 Request Timeout", "timeout\n");
        }
        match conn.read(&mut buf)? {
            0 => return Ok(()),
            n => head.extend_from_slice(&buf[..n.min(MAX_HEAD - head.len())]),
        }
    }
    let line = head.split(|b| *b == b'\n').next().unwrap_or_default();
    let line = String::from_utf8_lossy(line);
    let mut parts = line.split_whitespace();
    let (method, path) = (parts.next().unwrap_or(""), parts.next().unwrap_or(""));
    let path = path.split('?').next().unwrap_or("");
    match (method, path) {
        ("GET", "/metrics" | "/") => respond(conn, "200 OK", &exposition(handle)),
        ("GET", _) => respond(conn, "404 Not Found", "GET /metrics\n"),
        _ => respond(conn, "405 Method Not Allowed", "GET /metrics\n"),
    }
}

/// Answers and closes. The rest of the request (a head cut short, a body) is read and dropped
/// first, within the timeouts and 64 KiB: closing with unread bytes would reset the
/// connection, and the client could lose the answer.
fn respond(conn: &mut TcpStream, status: &str, body: &str) -> std::io::Result<()> {
    write!(
        conn,
        "HTTP/1.1 {status}\r\nContent-Type: text/plain; version=0.0.4\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
        body.len()
    )?;
    conn.flush()?;
    conn.shutdown(std::net::Shutdown::Write)?;
    let mut buf = [0u8; 4096];
    let mut drained = 0;
    while drained < 64 << 10 {
        match conn.read(&mut buf) {
            Ok(0) | Err(_) => break,
            Ok(n) => drained += n,
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_revoked_partition_is_not_served_until_assigned_again() {
        let text = "# TYPE kdirect_partition_lag gauge\n\
                    kdirect_partition_lag{topic=\"t\",partition=\"0\"} 5\n\
                    kdirect_partition_lag{topic=\"t\",partition=\"1\"} 7\n\
                    kdirect_partition_lag{topic=\"t2\",partition=\"1\"} 9\n\
                    kdirect_batches_total 3\n";
        let gone = BTreeSet::from([("t".to_owned(), 1)]);
        assert_eq!(
            without(text, &gone),
            "# TYPE kdirect_partition_lag gauge\n\
             kdirect_partition_lag{topic=\"t\",partition=\"0\"} 5\n\
             kdirect_partition_lag{topic=\"t2\",partition=\"1\"} 9\n\
             kdirect_batches_total 3\n"
        );
        assert_eq!(without(text, &BTreeSet::new()), text);
        let t1 = kdirect::TopicPartition::new("t", 1);
        revoked([&t1]);
        assert!(GONE.lock().unwrap().contains(&("t".to_owned(), 1)));
        assigned([&t1]);
        assert!(!GONE.lock().unwrap().contains(&("t".to_owned(), 1)));
    }

    #[test]
    fn the_allow_list_takes_addresses_and_networks() {
        let any = AllowList::parse("").unwrap();
        assert!(any.allows("203.0.113.9".parse().unwrap()));
        let a = AllowList::parse("127.0.0.1, 10.1.0.0/16,::1,2001:db8::/32").unwrap();
        for ok in [
            "127.0.0.1",
            "10.1.200.3",
            "::1",
            "2001:db8:1::5",
            "::ffff:10.1.0.1",
        ] {
            assert!(a.allows(ok.parse().unwrap()), "{ok}");
        }
        for no in ["127.0.0.2", "10.2.0.1", "::2", "2001:db9::1", "192.168.1.1"] {
            assert!(!a.allows(no.parse().unwrap()), "{no}");
        }
        assert!(AllowList::parse("0.0.0.0/0")
            .unwrap()
            .allows("198.51.100.1".parse().unwrap()));
        for bad in ["10.0.0.0/33", "::/129", "host.example", "10.0.0.0/x"] {
            let e = AllowList::parse(bad).unwrap_err();
            assert!(e.0.contains(bad), "{bad}: {e}");
        }
    }
}
