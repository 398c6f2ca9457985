//! Retry timing shared by every part of the engine that retries (the fetcher, ListOffsets,
//! group coordinators, the stream's reconnects): exponential backoff with jitter, and one
//! retry budget however many layers retry.

use std::time::Duration;

use tokio::time::Instant;

use crate::error::{Error, ErrorKind};

/// A retry budget (`default.api.timeout.ms`, `reconnect.timeout.ms`) counted from the first
/// failure, **across layers**: an error that already spent an inner layer's budget
/// ([`ErrorKind::GaveUp`], e.g. a fetch that retried for `default.api.timeout.ms`) counts as
/// having failed since its own first failure, with its attempts. So a layer that retries
/// what an inner layer gave up on does not start a second budget: a bounded stream against
/// brokers that never answer usefully gives up after `default.api.timeout.ms` plus at most one
/// attempt, not twice that (it took 122 s with the 60 s default).
///
/// Reads tokio's clock, so tests run it in paused (virtual) time.
#[derive(Debug, Default)]
pub struct Budget {
    /// The first failure, as far back as an inner layer's.
    since: Option<Instant>,
    /// Attempts that failed, the inner layers' included.
    attempts: u32,
    /// Failures seen by this layer: the backoff's exponent.
    retries: u32,
}

impl Budget {
    /// A budget with nothing spent.
    pub fn new() -> Budget {
        Budget::default()
    }

    /// Records failure `e`. Gives `e` back as given up, with the attempts and time of every
    /// layer, once `limit` (`None`: unbounded) has passed since the first failure; otherwise
    /// this layer's retry number (from 1), for [`backoff`].
    pub fn fail(&mut self, e: Error, limit: Option<Duration>) -> Result<(u32, Error), Error> {
        let (inner_attempts, inner_elapsed) = match e.kind() {
            ErrorKind::GaveUp {
                attempts, elapsed, ..
            } => (*attempts, *elapsed),
            _ => (1, Duration::ZERO),
        };
        let now = Instant::now();
        let began = now.checked_sub(inner_elapsed).unwrap_or(now);
        // An inner layer's first failure may be earlier than this layer's.
        let since = self.since.map_or(began, |s| s.min(began));
        self.since = Some(since);
        self.attempts = self.attempts.saturating_add(inner_attempts);
        self.retries += 1;
        let elapsed = now.saturating_duration_since(since);
        if limit.is_some_and(|l| elapsed >= l) {
            return Err(e.gave_up(self.attempts, elapsed));
        }
        Ok((self.retries, e))
    }

    /// Time since the first failure (zero before any).
    pub fn elapsed(&self) -> Duration {
        self.since.map_or(Duration::ZERO, |s| s.elapsed())
    }

    /// Attempts that failed so far, the inner layers' included.
    pub fn attempts(&self) -> u32 {
        self.attempts
    }
}

/// The wait before retry number `attempt` (from 1): `base` doubled per attempt up to `cap`,
/// spread by ±20 % (jitter). The one backoff of the fetcher, ListOffsets and the stream's
/// reconnects.
pub fn backoff(base: Duration, attempt: u32, cap: Duration) -> Duration {
    jittered(base.saturating_mul(1 << attempt.min(10)).min(cap))
}

/// `d` spread by ±20%, so that clients that failed together do not retry together (as the
/// Java client's `retry.backoff` jitter does).
fn jittered(d: Duration) -> Duration {
    use std::hash::{BuildHasher, Hasher};
    // A fresh random key per call: RandomState is seeded from the OS once per thread and
    // then varied, which is random enough to spread retries.
    let r = std::collections::hash_map::RandomState::new()
        .build_hasher()
        .finish();
    let factor = 0.8 + 0.4 * (r % 1_000) as f64 / 1_000.0;
    d.mul_f64(factor)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::error::BrokerName;

    fn refused() -> Error {
        ErrorKind::Connect {
            broker: BrokerName {
                addr: "127.0.0.1:1".to_owned(),
                node_id: Some(1),
            },
            source: std::io::Error::from(std::io::ErrorKind::ConnectionRefused),
        }
        .into()
    }

    #[tokio::test(start_paused = true)]
    async fn a_budget_counts_from_the_first_failure() {
        let mut b = Budget::new();
        let limit = Some(Duration::from_secs(10));
        let (n, _) = b.fail(refused(), limit).unwrap();
        assert_eq!(n, 1);
        tokio::time::advance(Duration::from_secs(6)).await;
        let (n, _) = b.fail(refused(), limit).unwrap();
        assert_eq!(n, 2);
        tokio::time::advance(Duration::from_secs(4)).await;
        let e = b.fail(refused(), limit).unwrap_err();
        let ErrorKind::GaveUp {
            attempts, elapsed, ..
        } = e.kind()
        else {
            panic!("{e}")
        };
        assert_eq!((*attempts, *elapsed), (3, Duration::from_secs(10)));
        // Unbounded: never given up.
        let mut b = Budget::new();
        for _ in 0..5 {
            tokio::time::advance(Duration::from_secs(3600)).await;
            b.fail(refused(), None).unwrap();
        }
        assert_eq!(b.attempts(), 5);
    }

    /// Issue 36 item 6: an error an inner layer already gave up on (after the whole
    /// budget) is not retried for another budget by the layer above.
    #[tokio::test(start_paused = true)]
    async fn an_inner_layers_spent_budget_is_not_spent_again() {
        let limit = Some(Duration::from_secs(60));
        // The fetch retried 40 times over 60 s, then gave up.
        tokio::time::advance(Duration::from_secs(100)).await;
        let inner = refused().gave_up(40, Duration::from_secs(60));
        let mut outer = Budget::new();
        let e = outer.fail(inner, limit).unwrap_err();
        let ErrorKind::GaveUp {
            attempts,
            elapsed,
            last,
        } = e.kind()
        else {
            panic!("{e}")
        };
        assert_eq!((*attempts, *elapsed), (40, Duration::from_secs(60)));
        assert!(
            matches!(last.kind(), ErrorKind::Connect { .. }),
            "one summary: {e}"
        );
        // An inner layer that spent part of the budget leaves the rest to the layer above.
        let mut outer = Budget::new();
        let (n, _) = outer
            .fail(refused().gave_up(5, Duration::from_secs(45)), limit)
            .unwrap();
        assert_eq!(n, 1);
        tokio::time::advance(Duration::from_secs(15)).await;
        let e = outer.fail(refused(), limit).unwrap_err();
        assert!(
            matches!(e.kind(), ErrorKind::GaveUp { attempts: 6, elapsed, .. } if *elapsed == Duration::from_secs(60)),
            "{e:?}"
        );
    }
}
