//! Where kdirect's network work runs: the connections' read loops, a stream's next batch in
//! the making, the group member's heartbeats.
//!
//! On a multi-thread tokio runtime that is the caller's runtime: its workers run those tasks
//! while the caller's task works through a batch. On a current-thread runtime (the CLI's, and
//! `#[tokio::test]`'s) nothing else runs while the caller's task is busy: a batch's prefetch
//! would stand still while the user processes the batch before it, the socket buffers would
//! fill and the broker would stop sending, and a group member would send no heartbeat during a
//! long batch. There, kdirect runs that work on a thread of its own (`kdirect-io`, one per
//! process, started on first use, like librdkafka's broker threads and the Java consumer's
//! network thread), and the caller's thread only processes batches.
//!
//! A socket belongs to the runtime that opened it (its readiness comes from that runtime's IO
//! driver), so a connection is opened on the same runtime its read loop runs on: see
//! [`run`].

use std::future::Future;
use std::sync::OnceLock;
use tokio::runtime::{Handle, Runtime, RuntimeFlavor};
use tokio::task::JoinHandle;

/// The runtime that runs kdirect's network tasks for a caller on the current runtime: the
/// current one when it is multi-thread, else kdirect's own thread.
///
/// # Panics
/// Outside a tokio runtime, or when the operating system refuses a new thread the first time
/// kdirect's own thread is needed.
pub fn handle() -> Handle {
    if elsewhere() {
        own().clone()
    } else {
        Handle::current()
    }
}

/// Whether [`handle`] is a runtime other than the current one.
fn elsewhere() -> bool {
    Handle::current().runtime_flavor() == RuntimeFlavor::CurrentThread
}

/// kdirect's own network thread: one worker, never shut down (it lives as long as the process,
/// idle when no stream is open).
fn own() -> &'static Handle {
    static OWN: OnceLock<Runtime> = OnceLock::new();
    OWN.get_or_init(|| {
        tokio::runtime::Builder::new_multi_thread()
            .worker_threads(1)
            .thread_name("kdirect-io")
            .enable_all()
            .build()
            .expect("kdirect cannot start its network thread")
    })
    .handle()
}

/// Spawns `task` on [`handle`].
pub fn spawn<F>(task: F) -> JoinHandle<F::Output>
where
    F: Future + Send + 'static,
    F::Output: Send + 'static,
{
    handle().spawn(task)
}

/// Runs `task` to completion on [`handle`] and returns its output: in place when that is the
/// current runtime, else as a task there that is aborted if this future is dropped. A panic in
/// the task is a panic here.
pub async fn run<F>(task: F) -> F::Output
where
    F: Future + Send + 'static,
    F::Output: Send + 'static,
{
    if !elsewhere() {
        return task.await;
    }
    // Aborting a task that has finished does nothing.
    let mut guard = AbortOnDrop(own().spawn(task));
    match (&mut guard.0).await {
        Ok(out) => out,
        Err(e) if e.is_panic() => std::panic::resume_unwind(e.into_panic()),
        // Only this guard aborts the task, and the runtime is never shut down.
        Err(e) => panic!("kdirect's network task ended without an answer: {e}"),
    }
}

struct AbortOnDrop<T>(JoinHandle<T>);

impl<T> Drop for AbortOnDrop<T> {
    fn drop(&mut self) {
        self.0.abort();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test(flavor = "current_thread")]
    async fn a_current_thread_caller_gets_the_network_thread() {
        let name = spawn(async { std::thread::current().name().map(str::to_owned) })
            .await
            .unwrap();
        assert_eq!(name.as_deref(), Some("kdirect-io"));
        let name = run(async { std::thread::current().name().map(str::to_owned) }).await;
        assert_eq!(name.as_deref(), Some("kdirect-io"));
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_multi_thread_caller_keeps_its_own_workers() {
        let name = spawn(async { std::thread::current().name().map(str::to_owned) })
            .await
            .unwrap();
        assert_ne!(name.as_deref(), Some("kdirect-io"));
    }

    #[tokio::test(flavor = "current_thread")]
    async fn a_task_run_elsewhere_is_aborted_when_its_caller_gives_up() {
        let (tx, rx) = tokio::sync::oneshot::channel::<()>();
        let waiting = run(async move {
            // Holds `tx` until aborted.
            let _tx = tx;
            std::future::pending::<()>().await;
        });
        let _ = tokio::time::timeout(std::time::Duration::from_millis(20), waiting).await;
        // The task was aborted: its `tx` is dropped and the receiver sees it.
        assert!(rx.await.is_err());
    }
}
