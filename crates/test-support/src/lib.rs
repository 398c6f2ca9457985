//! What kdirect's tests share (issue 33 item 7: these lived in three copies): a service's
//! address that skips the test when unset and fails it under `tests/run.sh`, names and
//! directories unique to a run, runtimes, and waiting for a condition (never for a length of
//! time). A dev-dependency only.
use std::path::PathBuf;
use std::sync::atomic::{AtomicU32, Ordering};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

/// The service address in `var`, or `None` after printing why `test` is skipped. Under
/// `KDIRECT_REQUIRE_SERVICES=1` (set by `tests/run.sh`, the README's test command) a missing
/// service fails the test instead: CI never skips silently.
pub fn service(var: &str, test: &str) -> Option<String> {
    match std::env::var(var) {
        Ok(v) if !v.is_empty() => Some(v),
        _ if std::env::var_os("KDIRECT_REQUIRE_SERVICES").is_some_and(|v| v == "1") => {
            panic!(
                "{test}: {var} is not set, and KDIRECT_REQUIRE_SERVICES=1 forbids skipping (run \
                 tests/run.sh, which starts the services)"
            )
        }
        _ => {
            println!(
                "skipping {test}: {var} is not set; tests/run.sh starts the service and sets it"
            );
            None
        }
    }
}

/// A name unique to this run and call (`prefix_pid_nanos_n`), so reruns and parallel tests
/// never share state in a service.
pub fn unique(prefix: &str) -> String {
    static N: AtomicU32 = AtomicU32::new(0);
    let nanos = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_nanos());
    format!(
        "{prefix}_{}_{}_{}",
        std::process::id(),
        nanos % 1_000_000_000_000,
        N.fetch_add(1, Ordering::Relaxed)
    )
}

/// A fresh temp directory path unique to this run and call, not created.
pub fn tmpdir(prefix: &str) -> PathBuf {
    let d = std::env::temp_dir().join(unique(&format!("kdirect-{prefix}")));
    let _ = std::fs::remove_dir_all(&d);
    d
}

/// A fresh temp directory unique to this run and call, created.
pub fn tempdir(tag: &str) -> PathBuf {
    let d = tmpdir(tag);
    std::fs::create_dir_all(&d).unwrap_or_else(|e| panic!("{}: {e}", d.display()));
    d
}

/// A fresh runtime for one test (two worker threads, so a test that blocks one still runs
/// its spawned tasks).
pub fn rt() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap_or_else(|e| panic!("a runtime: {e}"))
}

/// A current-thread runtime, as the CLI's and `#[tokio::test]`'s: nothing else runs on it
/// while its one thread is busy.
pub fn current_thread_rt() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap_or_else(|e| panic!("a runtime: {e}"))
}

/// Polls `cond` until it holds, and panics naming `what` once `timeout` passed without it:
/// waiting for something to happen (a request to arrive, a task to get somewhere), never for
/// a length of time. The timeout only bounds a failing run; a passing one waits as long as
/// the condition takes.
pub fn wait_until(timeout: Duration, what: &str, mut cond: impl FnMut() -> bool) {
    let deadline = Instant::now() + timeout;
    let mut pause = Duration::from_millis(1);
    while !cond() {
        assert!(
            Instant::now() < deadline,
            "gave up after {timeout:?} waiting until {what}"
        );
        std::thread::sleep(pause);
        pause = (pause * 2).min(Duration::from_millis(50));
    }
}

/// [`wait_until`] for async tests: the runtime's other tasks run between polls.
pub async fn wait_until_async(timeout: Duration, what: &str, mut cond: impl FnMut() -> bool) {
    let deadline = Instant::now() + timeout;
    let mut pause = Duration::from_millis(1);
    while !cond() {
        assert!(
            Instant::now() < deadline,
            "gave up after {timeout:?} waiting until {what}"
        );
        tokio::time::sleep(pause).await;
        pause = (pause * 2).min(Duration::from_millis(50));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_are_unique_and_directories_fresh() {
        assert_ne!(unique("a"), unique("a"));
        let d = tempdir("support");
        assert!(d.is_dir());
        let _ = std::fs::remove_dir_all(&d);
        assert!(!tmpdir("support").exists());
    }

    #[test]
    fn waiting_ends_when_the_condition_holds() {
        let mut n = 0;
        wait_until(Duration::from_secs(5), "three polls", || {
            n += 1;
            n == 3
        });
        assert_eq!(n, 3);
    }
}
