//! FindCoordinator (key 10), versions 0–6: which broker coordinates a consumer group.
//!
//! v1 added the key type (0 group, 1 transaction); v3 is the first flexible version; v4
//! batches keys into `coordinator_keys` and answers in `coordinators` (KIP-699). kdirect asks
//! for one group at a time and reads either shape.

use kafka_protocol::protocol::StrBytes;

pub use kafka_protocol::messages::{FindCoordinatorRequest, FindCoordinatorResponse};

use super::api;
use crate::code::ErrorCode;
use crate::read::{Reader, Res};

api!(
    /// FindCoordinator: the coordinator of a group.
    FindCoordinator, FindCoordinator, FindCoordinatorRequest, FindCoordinatorResponse, 0, 6
);

/// The request for consumer group `group` at `version`.
pub fn request(group: &str, version: i16) -> FindCoordinatorRequest {
    let key = StrBytes::from_string(group.to_owned());
    if version >= 4 {
        FindCoordinatorRequest::default().with_coordinator_keys(vec![key])
    } else {
        FindCoordinatorRequest::default().with_key(key)
    }
}

/// The coordinator found, or the error.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CoordinatorView {
    /// Error code.
    pub error: ErrorCode,
    /// Error message, if sent.
    pub message: Option<String>,
    /// Coordinator node id.
    pub node_id: i32,
    /// Host.
    pub host: String,
    /// Port.
    pub port: i32,
}

/// Reads the answer for `group` from either response shape; `None` if a v4+ answer does not
/// mention the group.
pub fn view(resp: &FindCoordinatorResponse, group: &str, version: i16) -> Option<CoordinatorView> {
    if version >= 4 {
        resp.coordinators
            .iter()
            .find(|c| c.key.as_str() == group)
            .map(|c| CoordinatorView {
                error: ErrorCode(c.error_code),
                message: c.error_message.as_ref().map(|m| m.to_string()),
                node_id: c.node_id.0,
                host: c.host.to_string(),
                port: c.port,
            })
    } else {
        Some(CoordinatorView {
            error: ErrorCode(resp.error_code),
            message: resp.error_message.as_ref().map(|m| m.to_string()),
            node_id: resp.node_id.0,
            host: resp.host.to_string(),
            port: resp.port,
        })
    }
}

/// The first flexible version (KIP-482).
pub const FIRST_FLEXIBLE_VERSION: i16 = 3;

/// Checks a FindCoordinator response body against its schema with every count and length
/// bounded by the bytes that remain, so that kafka-protocol's decoder, run after it, allocates
/// in proportion to the frame.
pub(crate) fn check(r: &mut Reader<'_>, version: i16) -> Res<()> {
    if version >= 1 {
        r.i32("throttle_time_ms")?;
    }
    if version <= 3 {
        r.i16("error_code")?;
        if version >= 1 {
            r.nullable_str("error_message")?;
        }
        r.i32("node_id")?;
        r.str("host")?;
        r.i32("port")?;
    } else {
        let n = r.count(1 + 4 + 1 + 4 + 2 + 1 + 1, "coordinators count")?;
        for _ in 0..n {
            r.str("coordinator key")?;
            r.i32("coordinator node_id")?;
            r.str("coordinator host")?;
            r.i32("coordinator port")?;
            r.i16("coordinator error_code")?;
            r.nullable_str("coordinator error_message")?;
            r.skip_tags("coordinator tagged fields")?;
        }
    }
    r.skip_tags("response tagged fields")
}
