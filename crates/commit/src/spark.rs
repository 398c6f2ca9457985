//! Reading an Apache Spark Structured Streaming checkpoint, to start kdirect where Spark stopped
//! (`kdirect offsets import-spark`). Read only: nothing in Spark's directory is written.
//!
//! ```text
//! DIR/metadata        {"id":"<query id>"}
//! DIR/offsets/<N>     written before batch N runs (OffsetSeqLog)
//! DIR/commits/<N>     written after batch N's sink succeeded (CommitLog)
//! DIR/sources/<i>/0   source i's initial offsets (the Kafka source's KafkaSourceInitialOffsetWriter)
//! ```
//!
//! `offsets/N` (Spark 2.1+, format `v1`):
//!
//! ```text
//! v1
//! {"batchWatermarkMs":0,"batchTimestampMs":1700000000000,"conf":{…}}
//! {"events":{"0":1200,"1":900}}
//! -
//! ```
//!
//! Line 1 is the version, line 2 the batch's metadata (may be empty), then one line per source
//! in the query's source order (`sources/<i>`): the Kafka source writes its end offsets — the
//! next offset to read per partition — and a source without offsets yet writes `-` (or its
//! line is absent). `commits/N` is `v1` and a JSON line (`{"nextBatchWatermarkMs":0}`).
//! `sources/<i>/0` is a NUL byte (SPARK-19517), `v1`, and the offsets JSON, without a newline.
//!
//! Where kdirect's own checkpoint ([`crate::checkpoint`]) differs: its line 2 carries the
//! batch id and each range's `from` (Spark's has the watermark and the SQL conf: a batch's
//! start is the previous batch's end, or `sources/<i>/0` for batch 0), it has exactly one
//! offsets line (Spark: one per source, `-` for none), its `commits/N` holds every position
//! (Spark's only the watermark), and a version other than `v1` is refused by both. The offsets
//! JSON is the same and is read by the same code (`checkpoint::parse_offsets`), and
//! every file is read bounded (`checkpoint::read_bounded`): regular files, 64 MiB at
//! most.
//!
//! Spark re-runs an `offsets/N` without `commits/N` with exactly that file's ends and
//! `offsets/N-1`'s starts. Importing one is refused ([`StoreErrorKind::SparkUncommitted`])
//! unless the caller says which side to take ([`Take`]).

use std::collections::{BTreeMap, BTreeSet};
use std::fs;
use std::path::{Path, PathBuf};

use serde_json::Value;

use crate::checkpoint::{parse_offsets, read_bounded, TopicOffsets};
use crate::error::io;
use crate::{Positions, StoreError, StoreErrorKind, TopicPartition};

/// The offset-log format version this module reads (Spark 2.1 to 3.5 and 4.0 write `v1`).
pub const SPARK_LOG_VERSION: u32 = 1;

/// One source's line in an `offsets/N` file.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum SourceOffset {
    /// `-`, or the line is absent: the source had no offsets yet.
    None,
    /// A Kafka source's offsets: the next offset to read per partition.
    Kafka(TopicOffsets),
    /// Another kind of source (file, rate, Delta, …): its JSON, shortened for messages.
    Other(String),
}

/// One `offsets/N` file.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SparkBatch {
    /// N.
    pub id: u64,
    /// The file.
    pub path: PathBuf,
    /// `batchTimestampMs` from the metadata line, if there is one.
    pub timestamp_ms: Option<i64>,
    /// One entry per source line, in source order (index i is `sources/<i>`).
    pub sources: Vec<SourceOffset>,
}

/// Which positions to take when Spark's last batch was planned but not committed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum Take {
    /// The last committed batch's ends (`offsets/N-1`, or `sources/<i>/0` before batch 0):
    /// where Spark stopped; kdirect reads batch N's records again.
    Committed,
    /// The uncommitted batch's ends (`offsets/N`): batch N's records are skipped.
    Planned,
}

/// What an import writes: positions and the Spark batch they end.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SparkImport {
    /// The Spark batch whose end these positions are; `None` for the initial offsets (no batch
    /// committed yet).
    pub batch_id: Option<u64>,
    /// The file the positions were read from.
    pub from_file: PathBuf,
    /// The source indices imported.
    pub sources: Vec<usize>,
    /// The next offset to read per partition.
    pub positions: Positions,
    /// Spark's last batch, when it was planned but never committed (and which side was taken).
    pub uncommitted: Option<(u64, Take)>,
}

/// A Structured Streaming checkpoint directory, as far as an import needs it.
#[derive(Debug, Clone)]
pub struct SparkCheckpoint {
    /// The directory.
    pub dir: PathBuf,
    /// The query id from `metadata`, when the file is there.
    pub query_id: Option<String>,
    /// The newest `offsets/N`.
    pub last: SparkBatch,
    /// Whether `commits/N` exists for [`SparkCheckpoint::last`].
    pub last_committed: bool,
    /// `offsets/N-1`, read when the last batch is uncommitted (and N > 0).
    pub previous: Option<SparkBatch>,
    /// Each source's initial offsets (`sources/<i>/0`), where present and a Kafka source's.
    pub initial: BTreeMap<usize, TopicOffsets>,
}

fn format_err(path: &Path, line: Option<usize>, reason: impl Into<String>) -> StoreError {
    StoreErrorKind::SparkFormat {
        path: path.to_owned(),
        line,
        reason: reason.into(),
    }
    .into()
}

fn shown(s: &str) -> String {
    let mut out: String = s.chars().take(60).collect();
    if out.len() < s.len() {
        out.push('…');
    }
    out
}

/// Reads a file as UTF-8 text, bounded.
fn read_text(path: &Path) -> Result<String, StoreError> {
    let bytes = read_bounded(path)?;
    if bytes.is_empty() {
        return Err(format_err(
            path,
            None,
            "the file is empty (Spark never leaves an empty log file: not written by Spark?)",
        ));
    }
    String::from_utf8(bytes).map_err(|e| {
        format_err(
            path,
            None,
            format!("not UTF-8 text (byte {})", e.utf8_error().valid_up_to()),
        )
    })
}

/// Checks a version line `v<N>` (Spark's `validateVersion`).
fn check_version(path: &Path, line: &str) -> Result<(), StoreError> {
    let v = line
        .strip_prefix('v')
        .and_then(|n| n.parse::<u32>().ok())
        .filter(|n| *n > 0)
        .ok_or_else(|| {
            format_err(
                path,
                Some(1),
                format!(
                    "'{}' is not a version line (expected 'v{SPARK_LOG_VERSION}')",
                    shown(line)
                ),
            )
        })?;
    if v > SPARK_LOG_VERSION {
        return Err(format_err(
            path,
            Some(1),
            format!(
                "format v{v} was written by a newer Spark than this reads (v{SPARK_LOG_VERSION}); \
                 nothing is guessed"
            ),
        ));
    }
    Ok(())
}

/// Lines of a log file: Spark writes no trailing newline, but one is tolerated.
fn lines(text: &str) -> Vec<&str> {
    let text = text.strip_suffix('\n').unwrap_or(text);
    text.split('\n')
        .map(|l| l.strip_suffix('\r').unwrap_or(l))
        .collect()
}

/// A source line's JSON: a Kafka source's offsets, or another source's.
fn classify(v: &Value, raw: &str) -> Result<SourceOffset, String> {
    // A Kafka source's JSON is {"topic":{"partition":offset}}; anything else (a number, a
    // {"logOffset":3}, a {"0":{"value":…}}) is another source's.
    let looks_kafka = v.as_object().is_some_and(|topics| {
        !topics.is_empty()
            && topics.values().all(|parts| {
                parts.as_object().is_some_and(|ps| {
                    ps.iter()
                        .all(|(p, o)| p.parse::<i32>().is_ok() && (o.is_i64() || o.is_u64()))
                })
            })
    });
    if looks_kafka {
        parse_offsets(v).map(SourceOffset::Kafka)
    } else {
        Ok(SourceOffset::Other(shown(raw)))
    }
}

impl SparkBatch {
    /// Parses `offsets/<id>`'s text; `path` is for errors.
    pub fn decode(text: &str, id: u64, path: &Path) -> Result<SparkBatch, StoreError> {
        let lines = lines(text);
        check_version(path, lines[0])?;
        let meta = lines
            .get(1)
            .ok_or_else(|| format_err(path, Some(2), "the metadata line is missing: truncated?"))?;
        let timestamp_ms = if meta.trim().is_empty() {
            None
        } else {
            let v: Value = serde_json::from_str(meta).map_err(|e| {
                format_err(
                    path,
                    Some(2),
                    format!("the metadata line is not JSON ({e})"),
                )
            })?;
            let obj = v.as_object().ok_or_else(|| {
                format_err(path, Some(2), "the metadata line is not a JSON object")
            })?;
            match obj.get("batchTimestampMs") {
                None => None,
                Some(t) => Some(t.as_i64().ok_or_else(|| {
                    format_err(
                        path,
                        Some(2),
                        format!("batchTimestampMs {t} is not an integer"),
                    )
                })?),
            }
        };
        let mut sources = Vec::new();
        for (i, raw) in lines.iter().enumerate().skip(2) {
            let n = i + 1;
            if *raw == "-" {
                sources.push(SourceOffset::None);
                continue;
            }
            if raw.trim().is_empty() {
                return Err(format_err(
                    path,
                    Some(n),
                    "an empty source line (a source without offsets is '-')",
                ));
            }
            let v: Value = serde_json::from_str(raw).map_err(|e| {
                format_err(
                    path,
                    Some(n),
                    format!("source {} is not JSON ({e}): '{}'", i - 2, shown(raw)),
                )
            })?;
            sources.push(
                classify(&v, raw)
                    .map_err(|r| format_err(path, Some(n), format!("source {}: {r}", i - 2)))?,
            );
        }
        Ok(SparkBatch {
            id,
            path: path.to_owned(),
            timestamp_ms,
            sources,
        })
    }

    /// Source `i`'s offsets (`None` when its line is `-` or absent).
    pub fn source(&self, i: usize) -> &SourceOffset {
        self.sources.get(i).unwrap_or(&SourceOffset::None)
    }
}

/// Checks a `commits/N` file (`v1`, then an optional JSON object).
fn check_commit(path: &Path) -> Result<(), StoreError> {
    let text = read_text(path)?;
    let lines = lines(&text);
    check_version(path, lines[0])?;
    if let Some(meta) = lines.get(1).filter(|l| !l.trim().is_empty()) {
        let v: Value = serde_json::from_str(meta)
            .map_err(|e| format_err(path, Some(2), format!("not JSON ({e})")))?;
        if !v.is_object() {
            return Err(format_err(path, Some(2), "not a JSON object"));
        }
    }
    if let Some((i, extra)) = lines
        .iter()
        .enumerate()
        .skip(2)
        .find(|(_, l)| !l.is_empty())
    {
        return Err(format_err(
            path,
            Some(i + 1),
            format!("unexpected text after line 2: '{}'", shown(extra)),
        ));
    }
    Ok(())
}

/// `sources/<i>/0`: NUL, `v1`, the offsets JSON (or, from Spark 2.1.0, the JSON alone).
fn read_initial(path: &Path) -> Result<Option<TopicOffsets>, StoreError> {
    let text = read_text(path)?;
    let text = text.strip_prefix('\0').unwrap_or(&text);
    let (json, line) = if text.starts_with('v') {
        let (version, rest) = text
            .split_once('\n')
            .ok_or_else(|| format_err(path, Some(1), "a version line and nothing else"))?;
        check_version(path, version)?;
        (rest, 2)
    } else {
        (text, 1)
    };
    let v: Value = serde_json::from_str(json.trim_end())
        .map_err(|e| format_err(path, Some(line), format!("not JSON ({e})")))?;
    match classify(&v, json).map_err(|r| format_err(path, Some(line), r))? {
        SourceOffset::Kafka(o) => Ok(Some(o)),
        _ => Ok(None),
    }
}

/// The batch ids of a log directory (`offsets/` or `commits/`): names that are numbers, as
/// Spark's HDFSMetadataLog lists them (its `.N.crc` and temp files are skipped).
fn batch_ids(dir: &Path) -> Result<BTreeSet<u64>, StoreError> {
    let mut out = BTreeSet::new();
    let entries = match fs::read_dir(dir) {
        Ok(e) => e,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(out),
        Err(e) => return Err(io(dir, "list")(e)),
    };
    for e in entries {
        let e = e.map_err(io(dir, "list"))?;
        if let Some(id) = e.file_name().to_str().and_then(|n| n.parse::<u64>().ok()) {
            out.insert(id);
        }
    }
    Ok(out)
}

fn topics_of(o: &TopicOffsets) -> String {
    o.keys().cloned().collect::<Vec<_>>().join(", ")
}

impl SparkCheckpoint {
    /// Reads the checkpoint at `dir`: `metadata`, the newest `offsets/N` with its
    /// `commits/N` if any, `offsets/N-1` and `commits/N-1` when batch N is uncommitted, and
    /// `sources/<i>/0`. Every file read is checked; nothing is written.
    pub fn read(dir: impl Into<PathBuf>) -> Result<SparkCheckpoint, StoreError> {
        let dir = dir.into();
        let offsets_dir = dir.join("offsets");
        if !offsets_dir.is_dir() {
            return Err(StoreErrorKind::SparkSource {
                dir: dir.clone(),
                reason: "no offsets/ directory: not a Structured Streaming checkpoint".to_owned(),
            }
            .into());
        }
        let query_id = match dir.join("metadata") {
            p if p.exists() => {
                let text = read_text(&p)?;
                let first = lines(&text)[0];
                let v: Value = serde_json::from_str(first)
                    .map_err(|e| format_err(&p, Some(1), format!("not JSON ({e})")))?;
                Some(
                    v.get("id")
                        .and_then(Value::as_str)
                        .ok_or_else(|| format_err(&p, Some(1), "no \"id\" string (the query id)"))?
                        .to_owned(),
                )
            }
            _ => None,
        };
        let offsets = batch_ids(&offsets_dir)?;
        let commits = batch_ids(&dir.join("commits"))?;
        let Some(&last_id) = offsets.last() else {
            return Err(StoreErrorKind::SparkSource {
                dir: dir.clone(),
                reason: "offsets/ holds no batch: Spark never planned one (nothing to import)"
                    .to_owned(),
            }
            .into());
        };
        if let Some(&c) = commits.iter().find(|c| **c > last_id) {
            return Err(StoreErrorKind::Inconsistent {
                path: dir.join("commits").join(c.to_string()),
                reason: format!("batch {c} is committed but offsets/ ends at batch {last_id}"),
            }
            .into());
        }
        let read_batch = |id: u64| -> Result<SparkBatch, StoreError> {
            let p = offsets_dir.join(id.to_string());
            SparkBatch::decode(&read_text(&p)?, id, &p)
        };
        let last = read_batch(last_id)?;
        let last_committed = commits.contains(&last_id);
        let commit_path = |id: u64| dir.join("commits").join(id.to_string());
        if last_committed {
            check_commit(&commit_path(last_id))?;
        }
        let previous = match (last_committed, last_id.checked_sub(1)) {
            (false, Some(prev)) => {
                if !offsets.contains(&prev) {
                    return Err(StoreErrorKind::Inconsistent {
                        path: offsets_dir.join(prev.to_string()),
                        reason: format!(
                            "batch {last_id} is uncommitted and the batch before it is missing \
                             (its start is unknown)"
                        ),
                    }
                    .into());
                }
                if !commits.contains(&prev) {
                    return Err(StoreErrorKind::Inconsistent {
                        path: commit_path(prev),
                        reason: format!(
                            "neither batch {prev} nor batch {last_id} is committed (Spark plans a \
                             batch only after the one before it committed)"
                        ),
                    }
                    .into());
                }
                check_commit(&commit_path(prev))?;
                Some(read_batch(prev)?)
            }
            _ => None,
        };
        let mut initial = BTreeMap::new();
        for i in 0..last.sources.len() {
            let p = dir.join("sources").join(i.to_string()).join("0");
            if p.exists() {
                if let Some(o) = read_initial(&p)? {
                    initial.insert(i, o);
                }
            }
        }
        Ok(SparkCheckpoint {
            dir,
            query_id,
            last,
            last_committed,
            previous,
            initial,
        })
    }

    /// The indices of the Kafka sources (by their offsets in the newest batch, else the
    /// batch before, else their initial offsets).
    pub fn kafka_sources(&self) -> Vec<usize> {
        let n = self
            .last
            .sources
            .len()
            .max(self.previous.as_ref().map_or(0, |p| p.sources.len()));
        (0..n)
            .filter(|&i| {
                let seen = [Some(&self.last), self.previous.as_ref()]
                    .into_iter()
                    .flatten()
                    .map(|b| b.source(i))
                    .find(|s| **s != SourceOffset::None);
                match seen {
                    Some(s) => matches!(s, SourceOffset::Kafka(_)),
                    None => self.initial.contains_key(&i),
                }
            })
            .collect()
    }

    fn describe_sources(&self) -> String {
        (0..self.last.sources.len())
            .map(|i| match self.last.source(i) {
                SourceOffset::Kafka(o) => format!("source {i}: Kafka, topics {}", topics_of(o)),
                SourceOffset::None => format!("source {i}: no offsets yet"),
                SourceOffset::Other(j) => format!("source {i}: not Kafka ({j})"),
            })
            .collect::<Vec<_>>()
            .join("; ")
    }

    /// The positions to write: of the Kafka source (or the `sources` named), at the last
    /// committed batch — or, when the last batch is uncommitted, at the side `take` says;
    /// without `take` an uncommitted last batch is [`StoreErrorKind::SparkUncommitted`].
    pub fn resolve(
        &self,
        take: Option<Take>,
        sources: Option<&[usize]>,
    ) -> Result<SparkImport, StoreError> {
        let source_err = |reason: String| -> StoreError {
            StoreErrorKind::SparkSource {
                dir: self.dir.clone(),
                reason,
            }
            .into()
        };
        let kafka = self.kafka_sources();
        let chosen: Vec<usize> = match sources {
            Some(s) => {
                for &i in s {
                    if !kafka.contains(&i) {
                        return Err(source_err(format!(
                            "source {i} is not a Kafka source of this query ({})",
                            self.describe_sources()
                        )));
                    }
                }
                let mut s = s.to_vec();
                s.sort_unstable();
                s.dedup();
                s
            }
            None => match kafka.as_slice() {
                [one] => vec![*one],
                [] => {
                    return Err(source_err(format!(
                        "no Kafka source ({})",
                        self.describe_sources()
                    )))
                }
                _ => {
                    return Err(source_err(format!(
                        "{} Kafka sources, say which to import ({})",
                        kafka.len(),
                        self.describe_sources()
                    )))
                }
            },
        };
        // The side: the last batch if committed; else the one `take` names.
        let (batch, uncommitted) = match (self.last_committed, take) {
            (true, _) => (Some(&self.last), None),
            (false, None) => {
                return Err(StoreErrorKind::SparkUncommitted {
                    path: self.last.path.clone(),
                    batch_id: self.last.id,
                }
                .into())
            }
            (false, Some(Take::Planned)) => (Some(&self.last), Some((self.last.id, Take::Planned))),
            (false, Some(Take::Committed)) => (
                self.previous.as_ref(),
                Some((self.last.id, Take::Committed)),
            ),
        };
        let mut positions = Positions::new();
        let mut from_file = None;
        for &i in &chosen {
            let (offsets, file) = match batch {
                Some(b) => match b.source(i) {
                    SourceOffset::Kafka(o) => (o, b.path.clone()),
                    _ => {
                        return Err(source_err(format!(
                            "source {i} has no offsets in {} (Spark had not read it yet)",
                            b.path.display()
                        )))
                    }
                },
                // Before batch 0: the initial offsets.
                None => {
                    let p = self.dir.join("sources").join(i.to_string()).join("0");
                    match self.initial.get(&i) {
                        Some(o) => (o, p),
                        None => {
                            return Err(source_err(format!(
                                "no batch is committed and {} is missing: the start of batch \
                                 0 is unknown",
                                p.display()
                            )))
                        }
                    }
                }
            };
            for (t, parts) in offsets {
                for (&p, &o) in parts {
                    let tp = TopicPartition::new(t.clone(), p);
                    if positions.insert(tp, o).is_some() {
                        return Err(source_err(format!(
                            "{t}-{p} is read by more than one of the sources named"
                        )));
                    }
                }
            }
            from_file.get_or_insert(file);
        }
        Ok(SparkImport {
            batch_id: batch.map(|b| b.id),
            from_file: from_file.unwrap_or_else(|| self.last.path.clone()),
            sources: chosen,
            positions,
            uncommitted,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn tmpdir(name: &str) -> PathBuf {
        let d = kdirect_test_support::tempdir(&format!("spark-{name}"));
        fs::create_dir_all(d.join("offsets")).unwrap();
        fs::create_dir_all(d.join("commits")).unwrap();
        d
    }

    const META: &str = r#"{"batchWatermarkMs":0,"batchTimestampMs":1700000000000,"conf":{"spark.sql.shuffle.partitions":"200"}}"#;

    fn offsets(dir: &Path, id: u64, sources: &[&str]) {
        let mut text = format!("v1\n{META}");
        for s in sources {
            text.push('\n');
            text.push_str(s);
        }
        fs::write(dir.join("offsets").join(id.to_string()), text).unwrap();
    }

    fn commit(dir: &Path, id: u64) {
        fs::write(
            dir.join("commits").join(id.to_string()),
            "v1\n{\"nextBatchWatermarkMs\":0}",
        )
        .unwrap();
    }

    fn pos(list: &[(&str, i32, i64)]) -> Positions {
        list.iter()
            .map(|(t, p, o)| (TopicPartition::new(*t, *p), *o))
            .collect()
    }

    fn kind(e: &StoreError) -> String {
        e.to_string()
    }

    #[test]
    fn committed_last_batch_is_where_spark_stopped() {
        let d = tmpdir("committed");
        fs::write(
            d.join("metadata"),
            r#"{"id":"5a1b7c2e-0000-4000-8000-000000000001"}"#,
        )
        .unwrap();
        offsets(&d, 0, &[r#"{"events":{"0":100,"1":50}}"#]);
        commit(&d, 0);
        offsets(&d, 1, &[r#"{"events":{"1":90,"0":200}}"#]);
        commit(&d, 1);
        // Hadoop's checksum files beside them are skipped.
        fs::write(d.join("offsets").join(".1.crc"), b"\0\0").unwrap();
        let c = SparkCheckpoint::read(&d).unwrap();
        assert_eq!(
            c.query_id.as_deref(),
            Some("5a1b7c2e-0000-4000-8000-000000000001")
        );
        assert_eq!(c.last.timestamp_ms, Some(1_700_000_000_000));
        let i = c.resolve(None, None).unwrap();
        assert_eq!(i.batch_id, Some(1));
        assert_eq!(i.positions, pos(&[("events", 0, 200), ("events", 1, 90)]));
        assert_eq!(i.uncommitted, None);
        // --take changes nothing when nothing is uncommitted.
        assert_eq!(c.resolve(Some(Take::Planned), None).unwrap(), i);
    }

    #[test]
    fn an_uncommitted_last_batch_needs_a_side() {
        let d = tmpdir("uncommitted");
        offsets(&d, 3, &[r#"{"events":{"0":100}}"#]);
        commit(&d, 3);
        offsets(&d, 4, &[r#"{"events":{"0":160}}"#]);
        let c = SparkCheckpoint::read(&d).unwrap();
        let e = c.resolve(None, None).unwrap_err();
        assert!(
            matches!(
                e.kind(),
                StoreErrorKind::SparkUncommitted { batch_id: 4, .. }
            ),
            "{e}"
        );
        assert!(kind(&e).contains("offsets/4"), "{e}");
        let committed = c.resolve(Some(Take::Committed), None).unwrap();
        assert_eq!(committed.batch_id, Some(3));
        assert_eq!(committed.positions, pos(&[("events", 0, 100)]));
        assert_eq!(committed.uncommitted, Some((4, Take::Committed)));
        assert!(committed.from_file.ends_with("offsets/3"));
        let planned = c.resolve(Some(Take::Planned), None).unwrap();
        assert_eq!(planned.batch_id, Some(4));
        assert_eq!(planned.positions, pos(&[("events", 0, 160)]));
    }

    #[test]
    fn batch_zero_uncommitted_starts_at_the_initial_offsets() {
        let d = tmpdir("initial");
        offsets(&d, 0, &[r#"{"events":{"0":40}}"#]);
        let src = d.join("sources").join("0");
        fs::create_dir_all(&src).unwrap();
        fs::write(src.join("0"), b"\0v1\n{\"events\":{\"0\":7}}").unwrap();
        let c = SparkCheckpoint::read(&d).unwrap();
        let i = c.resolve(Some(Take::Committed), None).unwrap();
        assert_eq!(i.batch_id, None);
        assert_eq!(i.positions, pos(&[("events", 0, 7)]));
        fs::remove_file(src.join("0")).unwrap();
        let c = SparkCheckpoint::read(&d).unwrap();
        let e = c.resolve(Some(Take::Committed), None).unwrap_err();
        assert!(kind(&e).contains("start of batch 0 is unknown"), "{e}");
    }

    #[test]
    fn several_sources_are_told_apart() {
        let d = tmpdir("sources");
        // Source 0 Kafka, source 1 a file source, source 2 Kafka, source 3 none yet.
        let lines = [
            r#"{"a":{"0":10}}"#,
            r#"{"logOffset":3}"#,
            r#"{"b":{"0":20,"1":30}}"#,
            "-",
        ];
        offsets(&d, 0, &lines);
        commit(&d, 0);
        let c = SparkCheckpoint::read(&d).unwrap();
        assert_eq!(c.kafka_sources(), vec![0, 2]);
        let e = c.resolve(None, None).unwrap_err();
        let text = kind(&e);
        assert!(text.contains("2 Kafka sources"), "{text}");
        assert!(text.contains("source 0: Kafka, topics a"), "{text}");
        assert!(text.contains("source 1: not Kafka"), "{text}");
        assert!(text.contains("source 3: no offsets yet"), "{text}");
        let one = c.resolve(None, Some(&[2])).unwrap();
        assert_eq!(one.positions, pos(&[("b", 0, 20), ("b", 1, 30)]));
        let both = c.resolve(None, Some(&[0, 2])).unwrap();
        assert_eq!(both.positions.len(), 3);
        let e = c.resolve(None, Some(&[1])).unwrap_err();
        assert!(kind(&e).contains("source 1 is not a Kafka source"), "{e}");
        // The same partition in two sources is ambiguous.
        let d = tmpdir("overlap");
        offsets(&d, 0, &[r#"{"a":{"0":10}}"#, r#"{"a":{"0":12}}"#]);
        commit(&d, 0);
        let c = SparkCheckpoint::read(&d).unwrap();
        let e = c.resolve(None, Some(&[0, 1])).unwrap_err();
        assert!(kind(&e).contains("a-0 is read by more than one"), "{e}");
        // Only a non-Kafka source.
        let d = tmpdir("nokafka");
        offsets(&d, 0, &["5"]);
        commit(&d, 0);
        let e = SparkCheckpoint::read(&d)
            .unwrap()
            .resolve(None, None)
            .unwrap_err();
        assert!(kind(&e).contains("no Kafka source"), "{e}");
    }

    #[test]
    fn a_newer_version_and_malformed_files_name_the_file_and_line() {
        let cases: &[(&str, &[u8], Option<usize>, &str)] = &[
            ("v2", b"v2\n{}\n{\"a\":{\"0\":1}}", Some(1), "newer Spark"),
            ("garbage", b"hello\n{}\n{}", Some(1), "not a version line"),
            ("empty", b"", None, "empty"),
            (
                "meta",
                b"v1\n{not json\n{\"a\":{\"0\":1}}",
                Some(2),
                "metadata line is not JSON",
            ),
            ("nometa", b"v1", Some(2), "metadata line is missing"),
            (
                "torn",
                b"v1\n{}\n{\"a\":{\"0\":1",
                Some(3),
                "source 0 is not JSON",
            ),
            (
                "negative",
                b"v1\n{}\n{\"a\":{\"0\":-5}}",
                Some(3),
                "not a non-negative",
            ),
            (
                "blank",
                b"v1\n{}\n\n{\"a\":{\"0\":1}}",
                Some(3),
                "empty source line",
            ),
            ("binary", b"v1\n{}\n\xff\xfe", None, "not UTF-8"),
            (
                "stamp",
                b"v1\n{\"batchTimestampMs\":\"x\"}\n-",
                Some(2),
                "batchTimestampMs",
            ),
        ];
        for (name, bytes, line, want) in cases {
            let d = tmpdir(name);
            fs::write(d.join("offsets").join("0"), bytes).unwrap();
            let e = SparkCheckpoint::read(&d).unwrap_err();
            match e.kind() {
                StoreErrorKind::SparkFormat {
                    path,
                    line: l,
                    reason,
                } => {
                    assert!(path.ends_with("offsets/0"), "{name}: {e}");
                    assert_eq!(l, line, "{name}: {e}");
                    assert!(reason.contains(want), "{name}: {e}");
                }
                other => panic!("{name}: {other:?}"),
            }
        }
        // A malformed commit file and metadata are refused too.
        let d = tmpdir("badcommit");
        offsets(&d, 0, &[r#"{"a":{"0":1}}"#]);
        fs::write(d.join("commits").join("0"), "v1\nnope").unwrap();
        let e = SparkCheckpoint::read(&d).unwrap_err();
        assert!(e.to_string().contains("commits/0 line 2"), "{e}");
        let d = tmpdir("badmeta");
        offsets(&d, 0, &[r#"{"a":{"0":1}}"#]);
        commit(&d, 0);
        fs::write(d.join("metadata"), "{\"idx\":1}").unwrap();
        let e = SparkCheckpoint::read(&d).unwrap_err();
        assert!(e.to_string().contains("metadata line 1"), "{e}");
    }

    #[test]
    fn irregular_and_inconsistent_checkpoints_are_refused() {
        // A directory where a batch file should be.
        let d = tmpdir("dir");
        fs::create_dir_all(d.join("offsets").join("0")).unwrap();
        let e = SparkCheckpoint::read(&d).unwrap_err();
        assert!(e.to_string().contains("not a regular file"), "{e}");
        // A commit past the offsets.
        let d = tmpdir("pastend");
        offsets(&d, 0, &[r#"{"a":{"0":1}}"#]);
        commit(&d, 0);
        commit(&d, 1);
        let e = SparkCheckpoint::read(&d).unwrap_err();
        assert!(
            matches!(e.kind(), StoreErrorKind::Inconsistent { .. }),
            "{e}"
        );
        // Two uncommitted batches.
        let d = tmpdir("twopending");
        offsets(&d, 0, &[r#"{"a":{"0":1}}"#]);
        offsets(&d, 1, &[r#"{"a":{"0":2}}"#]);
        let e = SparkCheckpoint::read(&d).unwrap_err();
        assert!(e.to_string().contains("neither batch 0 nor batch 1"), "{e}");
        // Nothing planned; not a checkpoint.
        let d = tmpdir("nothing");
        let e = SparkCheckpoint::read(&d).unwrap_err();
        assert!(e.to_string().contains("holds no batch"), "{e}");
        let e = SparkCheckpoint::read(d.join("nope")).unwrap_err();
        assert!(e.to_string().contains("not a Structured Streaming"), "{e}");
    }
}
