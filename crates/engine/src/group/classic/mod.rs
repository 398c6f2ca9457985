//! The classic group protocol (JoinGroup, SyncGroup, Heartbeat, LeaveGroup), with protocol type
//! `consumer` and the Java client's subscription and assignment encoding, so that Kafka's tools
//! list kdirect's members and a kdirect member and a Java `KafkaConsumer` can share one group.
//! Kafka protocol guide, "The Consumer Group Protocol"; KIP-345 (static membership), KIP-394
//! (MEMBER_ID_REQUIRED), KIP-429 (cooperative rebalancing).

pub mod assignor;
pub mod driver;
pub mod state;

pub use driver::ClassicMember;
pub use state::Membership;
