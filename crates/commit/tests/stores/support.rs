//! Helpers shared by the store tests.
#![allow(dead_code)]

use std::path::PathBuf;
use std::sync::atomic::{AtomicU32, Ordering};
use std::time::{SystemTime, UNIX_EPOCH};

/// A name unique to this run and call, so reruns and parallel tests never share state.
pub fn unique(prefix: &str) -> String {
    static N: AtomicU32 = AtomicU32::new(0);
    let nanos = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap()
        .as_nanos();
    format!(
        "{prefix}_{}_{}_{}",
        std::process::id(),
        nanos % 1_000_000_000_000,
        N.fetch_add(1, Ordering::Relaxed)
    )
}

/// A fresh temp directory path (not created).
pub fn tmpdir(prefix: &str) -> PathBuf {
    let d = std::env::temp_dir().join(unique(&format!("kdirect-{prefix}")));
    let _ = std::fs::remove_dir_all(&d);
    d
}

/// The service URL in `var`, or `None` after printing why the test is skipped. Under
/// `KDIRECT_REQUIRE_SERVICES=1` (set by `tests/run.sh`, the README's test command) a missing
/// service fails the test instead: CI never skips silently.
pub fn service(var: &str, test: &str) -> Option<String> {
    match std::env::var(var) {
        Ok(v) if !v.is_empty() => Some(v),
        _ if std::env::var_os("KDIRECT_REQUIRE_SERVICES").is_some_and(|v| v == "1") => {
            panic!("{test}: {var} is not set, and KDIRECT_REQUIRE_SERVICES=1 forbids skipping (run tests/run.sh, which starts the services)")
        }
        _ => {
            eprintln!(
                "skipping {test}: {var} is not set; tests/run.sh starts the service and sets it"
            );
            None
        }
    }
}

/// A multi-threaded runtime for one test.
pub fn rt() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap()
}
