//! Fuzzes the consumer protocol's embedded messages (`kdirect_proto::api::consumer_protocol`):
//! the same bytes are decoded as a `Subscription` (JoinGroup member metadata) and as an
//! `Assignment` (SyncGroup). Never a panic; whatever decodes re-encodes, at the version its
//! prefix announced and at the highest version, to bytes that decode to the same value.
//!
//! Input: the message as a member receives it (big-endian `i16` version, then the fields).
#![no_main]

use kdirect_proto::api::consumer_protocol::{Assignment, Subscription};
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    // The version the prefix announced (an empty assignment has none: encoded at 0).
    let v = data
        .first_chunk::<2>()
        .map_or(0, |b| i16::from_be_bytes(*b));
    if let Ok(s) = Subscription::decode(data) {
        for at in [v, Subscription::HIGHEST_VERSION] {
            let again = s.encode(at).expect("a decoded subscription encodes");
            assert_eq!(Subscription::decode(&again).as_ref(), Ok(&s), "v{at}");
        }
    }
    if let Ok(a) = Assignment::decode(data) {
        for at in [v.max(0), Assignment::HIGHEST_VERSION] {
            let again = a.encode(at).expect("a decoded assignment encodes");
            assert_eq!(Assignment::decode(&again).as_ref(), Ok(&a), "v{at}");
        }
    }
});
