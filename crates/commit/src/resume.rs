//! How the stores keep what a resumed stream checks its positions with: the leader epoch of
//! the last record batch read before each position (KIP-320) and the id of each topic
//! (KIP-516). The forms that are not a store's own columns or cells: topic ids as hex, the
//! Kafka group's commit metadata, ZooKeeper's `kdirect/resume` JSON. Public so that their
//! parsers can be fuzzed (`fuzz/fuzz_targets/resume_state.rs`).

use crate::kafka::METADATA_PREFIX;
use crate::{Epochs, TopicIds, TopicPartition};

/// A topic id as 32 lowercase hex digits (how the checkpoint and the Kafka group's commit
/// metadata keep it).
pub fn hex(id: &[u8; 16]) -> String {
    id.iter().map(|b| format!("{b:02x}")).collect()
}

/// The inverse of [`hex`]: exactly 32 hex digits (either case; no sign, no spaces).
pub fn unhex(s: &str) -> Option<[u8; 16]> {
    if s.len() != 32 || !s.bytes().all(|b| b.is_ascii_hexdigit()) {
        return None;
    }
    let mut out = [0u8; 16];
    for (i, b) in out.iter_mut().enumerate() {
        *b = u8::from_str_radix(&s[2 * i..2 * i + 2], 16).ok()?;
    }
    Some(out)
}

/// kdirect's commit metadata: the batch id and the topic id, where known.
pub fn commit_metadata(batch_id: u64, topic_id: Option<&[u8; 16]>) -> String {
    match topic_id.filter(|id| **id != [0; 16]) {
        Some(id) => format!("{METADATA_PREFIX}{batch_id} topicId={}", hex(id)),
        None => format!("{METADATA_PREFIX}{batch_id}"),
    }
}

/// The batch id and topic id of kdirect's commit metadata (none from metadata another client
/// wrote).
pub fn parse_commit_metadata(m: &str) -> (Option<u64>, Option<[u8; 16]>) {
    let Some(rest) = m.strip_prefix(METADATA_PREFIX) else {
        return (None, None);
    };
    let mut words = rest.split(' ');
    let batch = words.next().and_then(|b| b.parse::<u64>().ok());
    let id = words.find_map(|w| unhex(w.strip_prefix("topicId=")?));
    (batch, id)
}

/// ZooKeeper's `kdirect/resume` znode: the JSON `{"leaderEpochs":{"<topic>":{"<partition>":
/// <epoch>}},"topicIds":{"<topic>":"<32 hex digits>"}}`.
pub fn encode_json(epochs: &Epochs, topic_ids: &TopicIds) -> Vec<u8> {
    let mut by_topic = serde_json::Map::new();
    for (tp, e) in epochs {
        let entry = by_topic
            .entry(tp.topic.clone())
            .or_insert_with(|| serde_json::Value::Object(Default::default()));
        if let Some(parts) = entry.as_object_mut() {
            parts.insert(tp.partition.to_string(), (*e).into());
        }
    }
    let ids: serde_json::Map<String, serde_json::Value> = topic_ids
        .iter()
        .map(|(t, id)| (t.clone(), hex(id).into()))
        .collect();
    serde_json::json!({ "leaderEpochs": by_topic, "topicIds": ids })
        .to_string()
        .into_bytes()
}

/// The inverse of [`encode_json`], or why not: leader epochs are non-negative partitions'
/// and epochs, topic ids exactly 32 hex digits.
pub fn decode_json(data: &[u8]) -> Result<(Epochs, TopicIds), String> {
    let v: serde_json::Value = serde_json::from_slice(data).map_err(|e| e.to_string())?;
    let mut epochs = Epochs::new();
    if let Some(topics) = v.get("leaderEpochs") {
        let topics = topics
            .as_object()
            .ok_or("'leaderEpochs' is not an object")?;
        for (t, parts) in topics {
            let parts = parts
                .as_object()
                .ok_or_else(|| format!("'leaderEpochs' of {t} is not an object"))?;
            for (p, e) in parts {
                let p: i32 = p
                    .parse()
                    .ok()
                    .filter(|p| *p >= 0)
                    .ok_or_else(|| format!("'{p}' of {t} is not a partition"))?;
                let e = e
                    .as_i64()
                    .and_then(|e| i32::try_from(e).ok())
                    .filter(|e| *e >= 0)
                    .ok_or_else(|| format!("{t}-{p}: {e} is not a leader epoch"))?;
                epochs.insert(TopicPartition::new(t.clone(), p), e);
            }
        }
    }
    let mut topic_ids = TopicIds::new();
    if let Some(ids) = v.get("topicIds") {
        let ids = ids.as_object().ok_or("'topicIds' is not an object")?;
        for (t, id) in ids {
            let id = id
                .as_str()
                .and_then(crate::unhex)
                .ok_or_else(|| format!("the id of {t}, {id}, is not 32 hex digits"))?;
            topic_ids.insert(t.clone(), id);
        }
    }
    Ok((epochs, topic_ids))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn resume_state_round_trips_and_bad_content_is_named() {
        let tp = |p| TopicPartition::new("events", p);
        let epochs: Epochs = [(tp(0), 5), (tp(3), 0)].into();
        let ids: TopicIds = [("events".to_owned(), [0xab; 16])].into();
        let data = encode_json(&epochs, &ids);
        assert_eq!(decode_json(&data).unwrap(), (epochs, ids));
        assert_eq!(decode_json(b"{}").unwrap(), Default::default());
        for (bad, says) in [
            (
                &br#"{"leaderEpochs":{"events":{"x":1}}}"#[..],
                "'x' of events",
            ),
            (br#"{"leaderEpochs":{"events":{"0":-2}}}"#, "events-0"),
            (br#"{"topicIds":{"events":"abc"}}"#, "the id of events"),
            (br#"{"topicIds":[]}"#, "'topicIds'"),
            (b"not json", "expected"),
        ] {
            let why = decode_json(bad).unwrap_err();
            assert!(why.contains(says), "{why}");
        }
    }

    #[test]
    fn topic_ids_are_exactly_32_hex_digits() {
        let id = [0x0f, 0xa0, 0, 0xff, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12];
        assert_eq!(unhex(&hex(&id)), Some(id));
        assert_eq!(unhex(&hex(&id).to_uppercase()), Some(id));
        // from_str_radix alone takes a sign: "+f" would read as 15.
        for bad in [
            "+f".repeat(16),
            "0".repeat(31),
            "0".repeat(33),
            format!("{}g", "0".repeat(31)),
            " ".repeat(32),
        ] {
            assert_eq!(unhex(&bad), None, "{bad:?}");
        }
    }

    #[test]
    fn commit_metadata_round_trips() {
        let id = [0x5c; 16];
        assert_eq!(
            parse_commit_metadata(&commit_metadata(7, Some(&id))),
            (Some(7), Some(id))
        );
        assert_eq!(
            parse_commit_metadata(&commit_metadata(7, None)),
            (Some(7), None)
        );
        assert_eq!(
            parse_commit_metadata(&commit_metadata(7, Some(&[0; 16]))),
            (Some(7), None)
        );
        assert_eq!(
            parse_commit_metadata("written by another client"),
            (None, None)
        );
    }
}
