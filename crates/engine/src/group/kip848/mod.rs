//! KIP-848's consumer group protocol (`group.protocol=consumer`, Kafka 4.0+):
//! ConsumerGroupHeartbeat alone, the coordinator assigns.

pub mod driver;
pub mod state;

pub use driver::ConsumerMember;
pub use state::ConsumerMembership;
