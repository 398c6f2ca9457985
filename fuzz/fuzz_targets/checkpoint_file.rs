//! Fuzzes the checkpoint file reader (`kdirect_commit::checkpoint::CheckpointFile::decode`,
//! `offsets/N` and `commits/N` of a checkpoint directory) over arbitrary text.
//!
//! Properties: no panic; an error names the file; a file that decodes re-encodes
//! (`CheckpointFile::encode`, what the store writes) to text that decodes to the same file;
//! its offsets are non-negative partitions and offsets, its leader epochs (`commits/N`'s
//! `leaderEpochs`) are non-negative and each names a partition with an offset, the positions
//! a plan moves back from (`movedBackFrom`) are non-negative and each names a partition with
//! a range, and an `offsets/N` plan never has a range that starts after it ends.
//!
//! Input: the file's bytes (invalid UTF-8 is what `read_to_string` refuses before decode).
#![no_main]

use std::path::Path;

use kdirect_commit::checkpoint::CheckpointFile;
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let Ok(text) = std::str::from_utf8(data) else {
        return;
    };
    let path = Path::new("/ckpt/offsets/7");
    let file = match CheckpointFile::decode(text, path) {
        Ok(file) => file,
        Err(e) => {
            assert!(
                e.to_string().contains("/ckpt/offsets/7"),
                "error without the path: {e}"
            );
            return;
        }
    };
    let again = CheckpointFile::decode(&file.encode(), path)
        .unwrap_or_else(|e| panic!("an encoded file does not decode: {e}"));
    assert_eq!(again, file, "round trip changed the file");
    for (tp, off) in file.positions() {
        assert!(tp.partition >= 0 && off >= 0, "{tp} at {off}");
    }
    let positions = file.positions();
    for (tp, epoch) in file.leader_epochs() {
        assert!(epoch >= 0, "{tp} epoch {epoch}");
        assert!(positions.contains_key(&tp), "{tp} has an epoch and no offset");
    }
    for topic in file.topic_ids.keys() {
        assert!(
            positions.keys().any(|tp| tp.topic == *topic),
            "topic {topic} has an id and no offsets"
        );
    }
    let plan = file.planned();
    assert_eq!(plan.ranges, file.ranges());
    for (tp, from) in &plan.moved_back {
        assert!(*from >= 0, "{tp} moved back from {from}");
        assert!(
            plan.ranges.iter().any(|r| r.topic_partition() == *tp),
            "{tp} moves back and has no range"
        );
    }
    for r in file.ranges() {
        assert!(
            r.from <= r.until,
            "range {}-{} from {} past until {}",
            r.topic,
            r.partition,
            r.from,
            r.until
        );
    }
});
