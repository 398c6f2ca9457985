//! Describing a consumer group through its coordinator (FindCoordinator, then DescribeGroups):
//! its state, its protocol and its members with their client ids, hosts and assignments, as
//! `kafka-consumer-groups --describe` shows them. Read-only: describing never joins the
//! group or disturbs its members.
//!
//! A coordinator that is moving or loading (NOT_COORDINATOR, COORDINATOR_NOT_AVAILABLE,
//! COORDINATOR_LOAD_IN_PROGRESS) and lost connections are retried after a fresh lookup, with
//! backoff, within `default.api.timeout.ms` ([`super::coordinator`]'s policy). A group that does not exist is described as
//! `Dead` with no members at every version (v6 coordinators answer GROUP_ID_NOT_FOUND where
//! older ones answered the state `Dead`).

use std::sync::Arc;

use kdirect_proto::api::describe_groups::{self, DescribeGroups, GroupDescription};
use kdirect_proto::message::Api;
use kdirect_proto::{ErrorCode, ProtoError};

use crate::cluster::Cluster;
use crate::conn::BrokerConnection;
use crate::error::{BrokerName, Error, ErrorKind};
use crate::group::coordinator::{Attempt, Coordinator};

/// GROUP_ID_NOT_FOUND (69): DescribeGroups v6's answer for a group that does not exist.
const GROUP_ID_NOT_FOUND: ErrorCode = ErrorCode(69);

/// Describes consumer group `group` at its coordinator. Errors name the group and the
/// coordinator: [`ErrorKind::Group`] for an error code, [`ErrorKind::GroupProtocol`] for a
/// coordinator that speaks no DescribeGroups version kdirect does or an answer that does not
/// describe the group, and the connection's own errors (which name the broker) once retries
/// are exhausted.
pub async fn describe_group(
    cluster: &Arc<Cluster>,
    group: &str,
) -> Result<GroupDescription, Error> {
    Coordinator::new(cluster.clone(), group)
        .retry(
            "describing the group",
            |e| e,
            |conn| async move {
                describe_once(&conn, group).await.map_err(|e| {
                    if retriable(&e) {
                        Attempt::Retry(e)
                    } else {
                        Attempt::Fatal(e)
                    }
                })
            },
        )
        .await
}

/// A group error's code decides (COORDINATOR_LOAD_IN_PROGRESS, NOT_COORDINATOR), else the
/// error's kind.
fn retriable(e: &Error) -> bool {
    match e.kind() {
        ErrorKind::Group { code, .. } => code.is_retriable(),
        _ => e.is_retriable(),
    }
}

async fn describe_once(conn: &BrokerConnection, group: &str) -> Result<GroupDescription, Error> {
    let broker = conn.broker().clone();
    let in_group = |source: ProtoError| -> Error {
        ErrorKind::GroupProtocol {
            group: group.to_owned(),
            broker: broker.clone(),
            source,
        }
        .into()
    };
    let version = conn
        .versions()
        .negotiate::<DescribeGroups>()
        .map_err(in_group)?;
    let resp = conn
        .request_at::<DescribeGroups>(&describe_groups::request(&[group], version), version)
        .await
        .map_err(|e| match e.into_kind() {
            ErrorKind::Protocol { source, .. } => in_group(source),
            other => other.into(),
        })?;
    let found = describe_groups::view(&resp)
        .into_iter()
        .find(|g| g.group_id == group)
        .ok_or_else(|| {
            in_group(ProtoError::Inconsistent {
                api: DescribeGroups::KEY,
                reason: format!("the answer does not describe group '{group}'"),
            })
        })?;
    classify(found, group, &broker)
}

/// The description, or the error its code means; a group that does not exist is `Dead`.
fn classify(
    mut d: GroupDescription,
    group: &str,
    broker: &BrokerName,
) -> Result<GroupDescription, Error> {
    match d.error.err() {
        None => Ok(d),
        Some(GROUP_ID_NOT_FOUND) => {
            d.state = "Dead".to_owned();
            d.members.clear();
            Ok(d)
        }
        Some(code) => Err(ErrorKind::Group {
            group: group.to_owned(),
            broker: broker.clone(),
            api: DescribeGroups::KEY,
            code,
            message: d.message.take(),
        }
        .into()),
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]
mod tests {
    use super::*;

    fn described(code: i16) -> GroupDescription {
        GroupDescription {
            error: ErrorCode(code),
            message: Some("why".into()),
            group_id: "g".into(),
            state: String::new(),
            protocol_type: String::new(),
            protocol: String::new(),
            members: Vec::new(),
        }
    }

    fn broker() -> BrokerName {
        BrokerName {
            node_id: Some(1),
            addr: "127.0.0.1:9092".into(),
        }
    }

    #[test]
    fn a_missing_group_is_dead_and_other_codes_name_the_group_and_the_coordinator() {
        let d = classify(described(69), "g", &broker()).unwrap();
        assert_eq!(d.state, "Dead");
        assert!(!d.is_active());
        let e = classify(described(30), "g", &broker()).unwrap_err();
        let text = e.to_string();
        assert!(text.contains("group 'g'"), "{text}");
        assert!(text.contains("broker 1 at 127.0.0.1:9092"), "{text}");
        assert!(text.contains("DescribeGroups"), "{text}");
        assert!(text.contains("(why)"), "{text}");
        assert!(!retriable(&e));
        let e = classify(described(14), "g", &broker()).unwrap_err();
        assert!(retriable(&e), "a loading coordinator is retried");
    }
}
