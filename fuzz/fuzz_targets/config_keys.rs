//! Fuzzes the facade's settings by name (`kdirect::DirectStream::builder().set(key, value)`)
//! and Spark's offsets JSON (`kdirect::parse_offsets_json`, `starting_offsets_json`), as an
//! embedder's configuration map or the CLI's `--set key=value` reach them.
//!
//! Input: one byte choosing a known key (or, past the list, a key read from the input up to
//! its first 0 byte), then the value. Properties: no panic; a refusal is a typed error whose
//! message names the key (or says it is unknown); setting several keys in a row never panics;
//! offsets JSON that parses holds only partitions ≥ 0 and offsets ≥ -2, and reads back the
//! same from its own JSON.
#![no_main]

use std::collections::BTreeMap;

use kdirect::{parse_offsets_json, starting_offsets_json, DirectStream};
use libfuzzer_sys::fuzz_target;

/// Every name the builder knows (each setting's key and aliases, the security ones too).
fn key(i: usize) -> Option<&'static str> {
    kdirect::stream::SETTINGS
        .iter()
        .flat_map(kdirect::stream::Setting::names)
        .nth(i)
}

fuzz_target!(|data: &[u8]| {
    let Some((&sel, rest)) = data.split_first() else {
        return;
    };
    let Ok(rest) = std::str::from_utf8(rest) else {
        return;
    };
    let (key, value) = match key(usize::from(sel)) {
        Some(k) => (k, rest),
        None => rest.split_once('\0').unwrap_or((rest, "")),
    };
    match DirectStream::builder().set(key, value) {
        Ok(b) => {
            // A second setting on top of the first (a map is applied key by key).
            let _ = b
                .set(key, value)
                .and_then(|b| b.set("maxTriggerDelay", value));
        }
        Err(e) => {
            let msg = e.to_string();
            assert!(msg.contains(key), "the error does not name '{key}': {msg}");
        }
    }
    let _ = starting_offsets_json(value);
    if let Ok(offsets) = parse_offsets_json(value) {
        let mut json: BTreeMap<&str, BTreeMap<String, i64>> = BTreeMap::new();
        for (tp, &o) in &offsets {
            assert!(
                tp.partition >= 0,
                "{tp}: a negative partition was accepted from {value:?}"
            );
            assert!(o >= -2, "{tp}: offset {o} was accepted");
            json.entry(tp.topic.as_str())
                .or_default()
                .insert(tp.partition.to_string(), o);
        }
        let text = serde_json::to_string(&json).expect("a map serializes");
        assert_eq!(
            parse_offsets_json(&text).as_ref(),
            Ok(&offsets),
            "offsets JSON does not read back"
        );
    }
});
