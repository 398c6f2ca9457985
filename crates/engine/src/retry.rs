//! Retry timing shared by every part of the engine that retries (the fetcher, ListOffsets,
//! group coordinators, the stream's reconnects): exponential backoff with jitter.

use std::time::Duration;

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
