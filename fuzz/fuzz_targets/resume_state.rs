//! Fuzzes the stored forms of what a resumed stream checks its positions with
//! (`kdirect_commit::resume`): ZooKeeper's `kdirect/resume` JSON (`decode_json`), the Kafka
//! group's commit metadata (`parse_commit_metadata`), and topic ids in hex (`unhex`).
//!
//! Properties: no panic; JSON that decodes re-encodes (`encode_json`, what the store writes)
//! to JSON that decodes to the same epochs and ids, every epoch and partition non-negative;
//! commit metadata that names a batch (and id) is what `commit_metadata` writes for them, up
//! to the case of the hex and what follows; an id read from hex is the id `hex` writes back,
//! up to case.
//!
//! Input: first byte even, the rest is a `resume` znode's bytes; odd, the rest (UTF-8) is
//! commit metadata and, split at its first space, a candidate hex id.
#![no_main]

use kdirect_commit::resume::{
    commit_metadata, decode_json, encode_json, hex, parse_commit_metadata, unhex,
};
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let Some((&mode, rest)) = data.split_first() else {
        return;
    };
    if mode % 2 == 0 {
        let Ok((epochs, ids)) = decode_json(rest) else {
            return;
        };
        for (tp, e) in &epochs {
            assert!(tp.partition >= 0 && *e >= 0, "{tp}: {e}");
        }
        let again =
            decode_json(&encode_json(&epochs, &ids)).expect("what encode_json writes decodes");
        assert_eq!(again, (epochs, ids));
        return;
    }
    let Ok(text) = std::str::from_utf8(rest) else {
        return;
    };
    let (batch, id) = parse_commit_metadata(text);
    if let Some(b) = batch {
        let written = commit_metadata(b, id.as_ref());
        assert_eq!(
            parse_commit_metadata(&written),
            (Some(b), id.filter(|i| *i != [0; 16]))
        );
    } else {
        assert!(id.is_none() || text.starts_with(kdirect_commit::kafka::METADATA_PREFIX));
    }
    let word = text.split(' ').next().unwrap_or_default();
    if let Some(id) = unhex(word) {
        assert_eq!(hex(&id), word.to_ascii_lowercase());
    }
});
