//! The "consumer" embedded protocol: the bytes a consumer-group member puts in its JoinGroup
//! protocol metadata (its [`Subscription`]) and the leader hands each member in SyncGroup (its
//! [`Assignment`]). Not an API of its own: the broker carries these bytes without reading
//! them (protocol guide, "The Consumer Embedded Protocol"; Kafka's
//! `ConsumerProtocolSubscription.json` and `ConsumerProtocolAssignment.json`).
//!
//! Each message is a big-endian `i16` version, then the fields of that version, never flexible
//! (what Java's `ConsumerProtocol.serializeSubscription` / `serializeAssignment` write through
//! `MessageUtil.toVersionPrefixedByteBuffer`). Subscription versions: v0 topics and user
//! data; v1 adds the owned partitions (KIP-429, cooperative rebalancing); v2 the generation
//! (KIP-792); v3 the rack id (KIP-881). The assignment's fields are the same at every version
//! (its version moves with the subscription's).
//!
//! Decoding is hand-written and bounded like kdirect's response readers: every count is checked
//! against the bytes that remain, topic names are refused beyond Kafka's 249-byte limit, and a
//! malformed message is a [`ProtoError::ConsumerProtocolDecode`] naming the field and its byte
//! position. As Java does for forward compatibility, a version above the highest known one is
//! read as the highest known one, and bytes after its last field (newer fields) are ignored.
//! An empty assignment is "no partitions": the coordinator sends one to members the leader
//! assigned nothing and with SyncGroup errors.

use std::fmt;

use bytes::{BufMut, Bytes, BytesMut};

use crate::error::ProtoError;
use crate::read::{Reader, Res, MAX_TOPIC_NAME_LEN};

/// Which consumer-protocol message (for errors).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum ConsumerMessage {
    /// A member's subscription (JoinGroup protocol metadata).
    Subscription,
    /// A member's assignment (SyncGroup).
    Assignment,
}

impl fmt::Display for ConsumerMessage {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            ConsumerMessage::Subscription => "subscription",
            ConsumerMessage::Assignment => "assignment",
        })
    }
}

/// A consumer-group member's subscription, as sent in JoinGroup protocol metadata.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Subscription {
    /// The topics the member subscribes to.
    pub topics: Vec<String>,
    /// Assignor-specific data, `None` for null.
    pub user_data: Option<Bytes>,
    /// The partitions the member owns, by topic (v1+; cooperative rebalancing, KIP-429).
    pub owned_partitions: Vec<(String, Vec<i32>)>,
    /// The generation the owned partitions were assigned in, -1 if none (v2+, KIP-792).
    pub generation_id: i32,
    /// The member's rack, for rack-aware assignors (v3+, KIP-881).
    pub rack_id: Option<String>,
}

impl Default for Subscription {
    fn default() -> Self {
        Self {
            topics: Vec::new(),
            user_data: None,
            owned_partitions: Vec::new(),
            generation_id: -1,
            rack_id: None,
        }
    }
}

/// The partitions the group leader assigned one member, as sent in SyncGroup.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Assignment {
    /// Assigned partitions, by topic.
    pub partitions: Vec<(String, Vec<i32>)>,
    /// Assignor-specific data, `None` for null.
    pub user_data: Option<Bytes>,
}

impl Subscription {
    /// The highest version kdirect knows (Java's `ConsumerProtocolSubscription.HIGHEST_SUPPORTED_VERSION`).
    pub const HIGHEST_VERSION: i16 = 3;

    /// The version-prefixed bytes at `version`, leaving out the fields it cannot carry: owned
    /// partitions below v1, the generation below v2, the rack below v3. A version above
    /// [`Self::HIGHEST_VERSION`] is written as that one (as Java's `serializeSubscription`
    /// does); a negative version, a topic name longer than Kafka allows, or a field too long
    /// for its length prefix is an error.
    pub fn encode(&self, version: i16) -> Result<Bytes, ProtoError> {
        let version = known_version(
            ConsumerMessage::Subscription,
            version,
            Self::HIGHEST_VERSION,
        )?;
        let mut w = Writer::new(ConsumerMessage::Subscription, version);
        w.count(self.topics.len(), "topics count")?;
        for t in &self.topics {
            w.topic(t, "topic")?;
        }
        w.nullable_bytes(self.user_data.as_deref(), "user_data")?;
        if version >= 1 {
            w.topic_partitions(&self.owned_partitions, "owned_partitions")?;
        }
        if version >= 2 {
            w.out.put_i32(self.generation_id);
        }
        if version >= 3 {
            w.nullable_str(self.rack_id.as_deref(), "rack_id")?;
        }
        Ok(w.out.freeze())
    }

    /// Reads a version-prefixed subscription; see the module docs for what is accepted.
    pub fn decode(bytes: &[u8]) -> Result<Subscription, ProtoError> {
        let mut r = Reader::embedded(bytes, ConsumerMessage::Subscription);
        let version = r.version_prefix()?.min(Self::HIGHEST_VERSION);
        // Each topic is at least its i16 length.
        let n = r.count(2, "topics count")?;
        let mut topics = Vec::with_capacity(n);
        for _ in 0..n {
            topics.push(topic(&mut r, "topic")?);
        }
        let user_data = r.nullable_slice("user_data")?.map(Bytes::copy_from_slice);
        let mut s = Subscription {
            topics,
            user_data,
            ..Subscription::default()
        };
        if version >= 1 {
            s.owned_partitions = topic_partitions(&mut r, "owned_partitions")?;
        }
        if version >= 2 {
            s.generation_id = r.i32("generation_id")?;
        }
        if version >= 3 {
            s.rack_id = r.nullable_str("rack_id")?.map(str::to_owned);
        }
        Ok(s)
    }
}

impl Assignment {
    /// The highest version kdirect knows (Java's `ConsumerProtocolAssignment.HIGHEST_SUPPORTED_VERSION`).
    pub const HIGHEST_VERSION: i16 = 3;

    /// The version-prefixed bytes at `version` (the fields are the same at every version). A
    /// version above [`Self::HIGHEST_VERSION`] is written as that one (as Java's
    /// `serializeAssignment` does); a negative version, a topic name longer than Kafka allows,
    /// or a field too long for its length prefix is an error.
    pub fn encode(&self, version: i16) -> Result<Bytes, ProtoError> {
        let version = known_version(ConsumerMessage::Assignment, version, Self::HIGHEST_VERSION)?;
        let mut w = Writer::new(ConsumerMessage::Assignment, version);
        w.topic_partitions(&self.partitions, "assigned_partitions")?;
        w.nullable_bytes(self.user_data.as_deref(), "user_data")?;
        Ok(w.out.freeze())
    }

    /// Reads a version-prefixed assignment; an empty byte string is no partitions. See the
    /// module docs for what is accepted.
    pub fn decode(bytes: &[u8]) -> Result<Assignment, ProtoError> {
        if bytes.is_empty() {
            return Ok(Assignment::default());
        }
        let mut r = Reader::embedded(bytes, ConsumerMessage::Assignment);
        r.version_prefix()?;
        let partitions = topic_partitions(&mut r, "assigned_partitions")?;
        let user_data = r.nullable_slice("user_data")?.map(Bytes::copy_from_slice);
        Ok(Assignment {
            partitions,
            user_data,
        })
    }
}

fn topic(r: &mut Reader<'_>, what: &str) -> Res<String> {
    // Not nullable, so never `None`.
    Ok(r.topic_name(false, what)?.unwrap_or_default().to_owned())
}

/// `[topic string, partitions [i32]]`, each entry at least 6 bytes.
fn topic_partitions(r: &mut Reader<'_>, what: &str) -> Res<Vec<(String, Vec<i32>)>> {
    let n = r.count(2 + 4, &format!("{what} count"))?;
    let mut out = Vec::with_capacity(n);
    for _ in 0..n {
        let t = topic(r, &format!("{what} topic"))?;
        let np = r.count(4, &format!("{what} partitions count"))?;
        let mut ps = Vec::with_capacity(np);
        for _ in 0..np {
            ps.push(r.i32(&format!("{what} partition"))?);
        }
        out.push((t, ps));
    }
    Ok(out)
}

fn known_version(message: ConsumerMessage, version: i16, highest: i16) -> Result<i16, ProtoError> {
    if version < 0 {
        return Err(ProtoError::ConsumerProtocolEncode {
            message,
            version,
            reason: "no such version".into(),
        });
    }
    Ok(version.min(highest))
}

/// Writes a non-flexible embedded message, refusing what its length prefixes cannot carry.
struct Writer {
    out: BytesMut,
    message: ConsumerMessage,
    version: i16,
}

impl Writer {
    fn new(message: ConsumerMessage, version: i16) -> Self {
        let mut out = BytesMut::new();
        out.put_i16(version);
        Self {
            out,
            message,
            version,
        }
    }

    fn error(&self, reason: String) -> ProtoError {
        ProtoError::ConsumerProtocolEncode {
            message: self.message,
            version: self.version,
            reason,
        }
    }

    fn count(&mut self, n: usize, what: &str) -> Result<(), ProtoError> {
        let n = i32::try_from(n).map_err(|_| self.error(format!("{what}: {n} is too many")))?;
        self.out.put_i32(n);
        Ok(())
    }

    fn nullable_str(&mut self, s: Option<&str>, what: &str) -> Result<(), ProtoError> {
        let Some(s) = s else {
            self.out.put_i16(-1);
            return Ok(());
        };
        let n = i16::try_from(s.len())
            .map_err(|_| self.error(format!("{what}: {} bytes do not fit a string", s.len())))?;
        self.out.put_i16(n);
        self.out.put_slice(s.as_bytes());
        Ok(())
    }

    fn topic(&mut self, t: &str, what: &str) -> Result<(), ProtoError> {
        if t.len() > MAX_TOPIC_NAME_LEN {
            return Err(self.error(format!(
                "{what}: {} bytes, longer than Kafka's {MAX_TOPIC_NAME_LEN}-character limit",
                t.len()
            )));
        }
        self.nullable_str(Some(t), what)
    }

    fn nullable_bytes(&mut self, b: Option<&[u8]>, what: &str) -> Result<(), ProtoError> {
        let Some(b) = b else {
            self.out.put_i32(-1);
            return Ok(());
        };
        self.count(b.len(), what)?;
        self.out.put_slice(b);
        Ok(())
    }

    fn topic_partitions(
        &mut self,
        tps: &[(String, Vec<i32>)],
        what: &str,
    ) -> Result<(), ProtoError> {
        self.count(tps.len(), what)?;
        for (t, ps) in tps {
            self.topic(t, what)?;
            self.count(ps.len(), what)?;
            for p in ps {
                self.out.put_i32(*p);
            }
        }
        Ok(())
    }
}

#[cfg(test)]
#[allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::indexing_slicing,
    clippy::panic
)]
mod tests {
    use super::*;
    use kafka_protocol::messages::consumer_protocol_assignment::TopicPartition as AssignedTp;
    use kafka_protocol::messages::consumer_protocol_subscription::TopicPartition as OwnedTp;
    use kafka_protocol::messages::{
        ConsumerProtocolAssignment, ConsumerProtocolSubscription, TopicName,
    };
    use kafka_protocol::protocol::{Decodable, Encodable, StrBytes};
    use proptest::prelude::*;

    fn sub_v3() -> Subscription {
        Subscription {
            topics: vec!["events".into(), "logs".into()],
            user_data: Some(Bytes::from_static(&[1, 2, 3])),
            owned_partitions: vec![("events".into(), vec![0, 2])],
            generation_id: 7,
            rack_id: Some("r1".into()),
        }
    }

    /// What a `version` encoding keeps of `s`.
    fn at_version(s: &Subscription, version: i16) -> Subscription {
        let mut s = s.clone();
        if version < 1 {
            s.owned_partitions.clear();
        }
        if version < 2 {
            s.generation_id = -1;
        }
        if version < 3 {
            s.rack_id = None;
        }
        s
    }

    /// Java's `ConsumerProtocol.serializeSubscription(subscription, (short) 3)` for
    /// `Subscription(["events", "logs"], ByteBuffer.wrap({1, 2, 3}), [events-0, events-2],
    /// 7, Optional.of("r1"))`, written by hand from Kafka's
    /// `clients/src/main/resources/common/message/ConsumerProtocolSubscription.json` (the same
    /// schema kafka-protocol 0.18 generates `ConsumerProtocolSubscription` from): the i16
    /// version `MessageUtil.toVersionPrefixedByteBuffer` writes, then Topics ([]string:
    /// i32 count, i16-length strings), UserData (nullable bytes: i32 length), OwnedPartitions
    /// ([]TopicPartition{Topic, Partitions []int32}, v1+), GenerationId (int32, v2+), RackId
    /// (nullable string, v3+). Non-flexible ("flexibleVersions": "none").
    const GOLDEN_SUBSCRIPTION_V3: &[u8] = &[
        0, 3, // version
        0, 0, 0, 2, // topics count
        0, 6, b'e', b'v', b'e', b'n', b't', b's', // "events"
        0, 4, b'l', b'o', b'g', b's', // "logs"
        0, 0, 0, 3, 1, 2, 3, // user_data
        0, 0, 0, 1, // owned_partitions count
        0, 6, b'e', b'v', b'e', b'n', b't', b's', // topic
        0, 0, 0, 2, 0, 0, 0, 0, 0, 0, 0, 2, // partitions [0, 2]
        0, 0, 0, 7, // generation_id
        0, 2, b'r', b'1', // rack_id
    ];

    /// The same subscription at v0 without user data (`serializeSubscription(s, (short) 0)`
    /// with `userData == null`): version, topics, null bytes (-1).
    const GOLDEN_SUBSCRIPTION_V0: &[u8] = &[
        0, 0, // version
        0, 0, 0, 2, // topics count
        0, 6, b'e', b'v', b'e', b'n', b't', b's', // "events"
        0, 4, b'l', b'o', b'g', b's', // "logs"
        0xff, 0xff, 0xff, 0xff, // user_data null
    ];

    /// Java's `ConsumerProtocol.serializeAssignment(new Assignment([events-0, events-1,
    /// logs-5]))` (version 3, the highest, and null user data), written by hand from Kafka's
    /// `ConsumerProtocolAssignment.json`: version, AssignedPartitions
    /// ([]TopicPartition{Topic, Partitions []int32}), UserData (nullable bytes).
    const GOLDEN_ASSIGNMENT_V3: &[u8] = &[
        0, 3, // version
        0, 0, 0, 2, // assigned_partitions count
        0, 6, b'e', b'v', b'e', b'n', b't', b's', // topic
        0, 0, 0, 2, 0, 0, 0, 0, 0, 0, 0, 1, // partitions [0, 1]
        0, 4, b'l', b'o', b'g', b's', // topic
        0, 0, 0, 1, 0, 0, 0, 5, // partitions [5]
        0xff, 0xff, 0xff, 0xff, // user_data null
    ];

    fn assignment() -> Assignment {
        Assignment {
            partitions: vec![("events".into(), vec![0, 1]), ("logs".into(), vec![5])],
            user_data: None,
        }
    }

    #[test]
    fn golden_subscriptions() {
        assert_eq!(&sub_v3().encode(3).unwrap()[..], GOLDEN_SUBSCRIPTION_V3);
        assert_eq!(
            Subscription::decode(GOLDEN_SUBSCRIPTION_V3).unwrap(),
            sub_v3()
        );
        let v0 = Subscription {
            user_data: None,
            ..at_version(&sub_v3(), 0)
        };
        assert_eq!(&v0.encode(0).unwrap()[..], GOLDEN_SUBSCRIPTION_V0);
        assert_eq!(Subscription::decode(GOLDEN_SUBSCRIPTION_V0).unwrap(), v0);
    }

    #[test]
    fn golden_assignment() {
        assert_eq!(&assignment().encode(3).unwrap()[..], GOLDEN_ASSIGNMENT_V3);
        assert_eq!(
            Assignment::decode(GOLDEN_ASSIGNMENT_V3).unwrap(),
            assignment()
        );
    }

    /// kafka-protocol's generated encoders (from the same JSON schemas) agree byte for byte,
    /// once the version prefix is added, at every version.
    #[test]
    fn kafka_protocol_agrees_at_every_version() {
        let s = sub_v3();
        let a = Assignment {
            user_data: Some(Bytes::from_static(b"ud")),
            ..assignment()
        };
        for v in 0..=3i16 {
            let theirs = ConsumerProtocolSubscription::default()
                .with_topics(
                    s.topics
                        .iter()
                        .map(|t| StrBytes::from_string(t.clone()))
                        .collect(),
                )
                .with_user_data(s.user_data.clone())
                .with_owned_partitions(if v >= 1 {
                    s.owned_partitions
                        .iter()
                        .map(|(t, ps)| {
                            OwnedTp::default()
                                .with_topic(TopicName(StrBytes::from_string(t.clone())))
                                .with_partitions(ps.clone())
                        })
                        .collect()
                } else {
                    Vec::new()
                })
                .with_generation_id(s.generation_id)
                .with_rack_id(s.rack_id.clone().map(StrBytes::from_string));
            let mut want = BytesMut::new();
            want.put_i16(v);
            theirs.encode(&mut want, v).unwrap();
            assert_eq!(s.encode(v).unwrap(), want.freeze(), "subscription v{v}");
            let mut body = s.encode(v).unwrap().slice(2..);
            let back = ConsumerProtocolSubscription::decode(&mut body, v).unwrap();
            assert_eq!(back.topics.len(), 2);

            let theirs = ConsumerProtocolAssignment::default()
                .with_assigned_partitions(
                    a.partitions
                        .iter()
                        .map(|(t, ps)| {
                            AssignedTp::default()
                                .with_topic(TopicName(StrBytes::from_string(t.clone())))
                                .with_partitions(ps.clone())
                        })
                        .collect(),
                )
                .with_user_data(a.user_data.clone());
            let mut want = BytesMut::new();
            want.put_i16(v);
            theirs.encode(&mut want, v).unwrap();
            assert_eq!(a.encode(v).unwrap(), want.freeze(), "assignment v{v}");
        }
    }

    #[test]
    fn round_trips_at_every_version() {
        for v in 0..=3 {
            let want = at_version(&sub_v3(), v);
            assert_eq!(
                Subscription::decode(&sub_v3().encode(v).unwrap()).unwrap(),
                want
            );
            assert_eq!(
                Assignment::decode(&assignment().encode(v).unwrap()).unwrap(),
                assignment()
            );
        }
        // Above the highest: written as v3, as Java does.
        assert_eq!(&sub_v3().encode(9).unwrap()[..], GOLDEN_SUBSCRIPTION_V3);
        assert!(matches!(
            sub_v3().encode(-1),
            Err(ProtoError::ConsumerProtocolEncode { version: -1, .. })
        ));
    }

    /// A v4 message (one version past what kdirect knows) with a new field after v3's: read
    /// as v3, the trailing field ignored, as Java's `deserializeSubscription` does.
    #[test]
    fn a_newer_version_with_more_fields_decodes() {
        let mut b = GOLDEN_SUBSCRIPTION_V3.to_vec();
        b[1] = 4;
        b.extend([0, 0, 0, 42, 0, 3, b'n', b'e', b'w']);
        assert_eq!(Subscription::decode(&b).unwrap(), sub_v3());
        let mut b = GOLDEN_ASSIGNMENT_V3.to_vec();
        b[1] = 4;
        b.extend([0, 0, 0, 0, 0, 0, 0, 9]);
        assert_eq!(Assignment::decode(&b).unwrap(), assignment());
    }

    #[test]
    fn an_empty_assignment_is_no_partitions() {
        assert_eq!(Assignment::decode(&[]).unwrap(), Assignment::default());
        // An empty subscription is not a subscription.
        assert!(Subscription::decode(&[]).is_err());
    }

    #[test]
    fn truncations_are_errors_naming_the_field_and_position() {
        for cut in 1..GOLDEN_SUBSCRIPTION_V3.len() {
            let e = Subscription::decode(&GOLDEN_SUBSCRIPTION_V3[..cut]).unwrap_err();
            let ProtoError::ConsumerProtocolDecode {
                message, position, ..
            } = &e
            else {
                panic!("{e:?}")
            };
            assert_eq!(*message, ConsumerMessage::Subscription);
            assert!(*position <= cut, "cut {cut}: {e}");
        }
        for cut in 1..GOLDEN_ASSIGNMENT_V3.len() {
            let e = Assignment::decode(&GOLDEN_ASSIGNMENT_V3[..cut]).unwrap_err();
            assert!(
                matches!(e, ProtoError::ConsumerProtocolDecode { message: ConsumerMessage::Assignment, position, .. } if position <= cut),
                "{e:?}"
            );
        }
        // Cut inside the rack id's length: the error names it, v3, and its position (55).
        let e = Subscription::decode(&GOLDEN_SUBSCRIPTION_V3[..56]).unwrap_err();
        assert_eq!(
            e.to_string(),
            "malformed consumer-protocol subscription v3 (56 bytes, failed at byte 55): \
             rack_id: needs 2 bytes, 1 remain"
        );
        let e = Subscription::decode(&[0]).unwrap_err();
        assert!(
            matches!(e, ProtoError::ConsumerProtocolDecode { version: None, .. }),
            "{e:?}"
        );
        let e = Assignment::decode(&[0xff, 0xfe]).unwrap_err();
        assert!(e.to_string().contains("unsupported version -2"), "{e}");
    }

    #[test]
    fn counts_and_names_are_bounded() {
        // A billion topics in a few bytes.
        let e = Subscription::decode(&[0, 0, 0x3b, 0x9a, 0xca, 0x00, 0, 1, b'a']).unwrap_err();
        assert!(
            e.to_string().contains("topics count: 1000000000 elements"),
            "{e}"
        );
        // A billion partitions of one topic.
        let e = Assignment::decode(&[0, 0, 0, 0, 0, 1, 0, 1, b'a', 0x3b, 0x9a, 0xca, 0x00])
            .unwrap_err();
        assert!(e.to_string().contains("partitions count"), "{e}");
        // A null topic, a negative count, an overlong topic name.
        assert!(Subscription::decode(&[0, 0, 0, 0, 0, 1, 0xff, 0xff]).is_err());
        assert!(Assignment::decode(&[0, 0, 0xff, 0xff, 0xff, 0xfe]).is_err());
        let long = "x".repeat(250);
        let mut b = vec![0, 0, 0, 0, 0, 1, 0, 250];
        b.extend(long.as_bytes());
        b.extend([0xff; 4]);
        assert!(Subscription::decode(&b)
            .unwrap_err()
            .to_string()
            .contains("249-character limit"));
        let s = Subscription {
            topics: vec![long],
            ..Subscription::default()
        };
        assert!(s.encode(3).is_err());
    }

    fn name() -> impl Strategy<Value = String> {
        "[a-zA-Z0-9._-]{1,20}"
    }

    fn tps() -> impl Strategy<Value = Vec<(String, Vec<i32>)>> {
        proptest::collection::vec(
            (name(), proptest::collection::vec(any::<i32>(), 0..5)),
            0..4,
        )
    }

    fn user_data() -> impl Strategy<Value = Option<Bytes>> {
        proptest::option::of(proptest::collection::vec(any::<u8>(), 0..16).prop_map(Bytes::from))
    }

    proptest! {
        #[test]
        fn decode_never_panics(b in proptest::collection::vec(any::<u8>(), 0..120)) {
            let _ = Subscription::decode(&b);
            let _ = Assignment::decode(&b);
        }

        #[test]
        fn encode_then_decode_is_identity(
            topics in proptest::collection::vec(name(), 0..4),
            ud in user_data(),
            owned in tps(),
            generation_id in any::<i32>(),
            rack_id in proptest::option::of("[a-z0-9-]{0,12}"),
            assigned in tps(),
            ud2 in user_data(),
            v in 0i16..=3,
        ) {
            let s = Subscription { topics, user_data: ud, owned_partitions: owned, generation_id, rack_id };
            prop_assert_eq!(Subscription::decode(&s.encode(v).unwrap()).unwrap(), at_version(&s, v));
            prop_assert_eq!(Subscription::decode(&s.encode(3).unwrap()).unwrap(), s);
            let a = Assignment { partitions: assigned, user_data: ud2 };
            prop_assert_eq!(Assignment::decode(&a.encode(v).unwrap()).unwrap(), a);
        }

        /// Whatever decodes re-encodes, at its own version, to something that decodes to it.
        #[test]
        fn decoded_values_re_encode(b in proptest::collection::vec(any::<u8>(), 2..80), v in 0i16..6) {
            let mut b = b;
            b[..2].copy_from_slice(&v.to_be_bytes());
            if let Ok(s) = Subscription::decode(&b) {
                prop_assert_eq!(Subscription::decode(&s.encode(v).unwrap()).unwrap(), s);
            }
            if let Ok(a) = Assignment::decode(&b) {
                prop_assert_eq!(Assignment::decode(&a.encode(v).unwrap()).unwrap(), a);
            }
        }
    }
}
