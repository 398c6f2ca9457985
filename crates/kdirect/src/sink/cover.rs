//! One output file appended to by every batch, exactly-once with any store that keeps
//! positions (`kdirect consume --store … --output FILE`): the file's **cover**.
//!
//! A per-batch sink ([`Sink`](super::Sink)) names each batch's output, so a re-run replaces
//! it. A single appended file has no such name: a batch written and then not committed (a
//! crash between the write and the commit, a refused commit) would be written again after
//! it. The cover closes that gap. Before each commit it records, in `FILE.kdirect-cover`
//! (written beside the file, fsynced, renamed into place), the file's length together with
//! the positions the store will hold once that batch is committed — the last two such
//! entries. A resumed stream opens the cover with the positions its store holds
//! ([`DirectStream::stored_positions`](crate::DirectStream::stored_positions)), finds the
//! entry with those positions, and cuts the file back to its length: the records of the
//! batch that was written and not committed go, and the re-run writes them once.
//!
//! The order for one batch: write the records, flush, [`Cover::before_commit`] (fsyncs the
//! file, then records the length), `DirectStream::commit`. One stream's positions only: a
//! group member's positions change with each assignment, so a member's file is
//! at-least-once.
//!
//! ```no_run
//! # async fn f(mut stream: kdirect::DirectStream) -> Result<(), Box<dyn std::error::Error>> {
//! use std::io::Write;
//! use kdirect::sink::cover::Cover;
//! let path = std::path::PathBuf::from("/data/events.jsonl");
//! let file = std::fs::OpenOptions::new().create(true).append(true).open(&path)?;
//! let (mut cover, resumed) = Cover::open(path, &file, stream.stored_positions())?;
//! println!("{resumed:?}");
//! let mut out = std::io::BufWriter::new(&file);
//! while let Some(batch) = stream.next_batch().await? {
//!     batch.for_each_record(|_, r| {
//!         let _ = out.write_all(r.value().unwrap_or_default());
//!     })?;
//!     out.flush()?;
//!     cover.before_commit(&file, batch.ranges())?;
//!     stream.commit(batch).await?;
//! }
//! # Ok(()) }
//! ```

use std::fs::File;
use std::io::Write;
use std::path::{Path, PathBuf};

use crate::{OffsetRange, Positions, TopicPartition};

use super::SinkError;

/// The cover of one appended output file; see the [module docs](self).
#[derive(Debug)]
pub struct Cover {
    output: PathBuf,
    /// (length, positions) of the last committed-or-about-to-be state.
    last: (u64, Positions),
}

/// What [`Cover::open`] found and did.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum Resumed {
    /// No cover beside the file: a first run (or one without a store before).
    Fresh,
    /// The file ends where the store's last commit left it.
    AtCommit,
    /// The file held `bytes` written after the store's last commit (a batch written and not
    /// committed): they were cut off, and are written again by the batch's re-run.
    CutBack {
        /// Bytes cut off.
        bytes: u64,
    },
    /// The file is shorter (`len`) than what the store covers (`covered`): records the
    /// store counts as written are missing from it (the file was truncated by hand, or
    /// restored from an older copy). Nothing was changed.
    Shorter {
        /// The file's length.
        len: u64,
        /// What the store covers.
        covered: u64,
    },
    /// No entry of the cover has the store's positions (another store, or positions changed
    /// by hand): the file is appended to without being cut back.
    Unmatched,
}

impl Cover {
    /// The cover's path for `output`: `FILE.kdirect-cover`.
    pub fn path_for(output: &Path) -> PathBuf {
        let mut name = output.as_os_str().to_owned();
        name.push(".kdirect-cover");
        PathBuf::from(name)
    }

    /// Opens the cover of `output` (`file` is it, opened for appending) for a stream resumed
    /// at `stored`, and cuts the file back to what the store covers (see [`Resumed`]).
    pub fn open(
        output: PathBuf,
        file: &File,
        stored: &Positions,
    ) -> Result<(Cover, Resumed), SinkError> {
        let cover_path = Self::path_for(&output);
        let mut len = file
            .metadata()
            .map_err(SinkError::io(&output, "stat", None))?
            .len();
        let resumed = match std::fs::read_to_string(&cover_path) {
            Ok(text) => {
                let entries: Vec<(u64, Positions)> = text.lines().filter_map(parse_line).collect();
                match entries.iter().find(|(_, p)| p == stored) {
                    Some(&(covered, _)) if covered < len => {
                        file.set_len(covered)
                            .and_then(|()| file.sync_data())
                            .map_err(SinkError::io(&output, "cut back", None))?;
                        let bytes = len - covered;
                        len = covered;
                        Resumed::CutBack { bytes }
                    }
                    Some(&(covered, _)) if covered > len => Resumed::Shorter { len, covered },
                    Some(_) => Resumed::AtCommit,
                    None => Resumed::Unmatched,
                }
            }
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => Resumed::Fresh,
            Err(e) => return Err(SinkError::io(&cover_path, "read", None)(e)),
        };
        let cover = Cover {
            output,
            last: (len, stored.clone()),
        };
        cover.write(&[])?;
        Ok((cover, resumed))
    }

    /// Before the commit of the batch whose `ranges` were just written to `file` (flushed):
    /// fsyncs the file and records its length as what the store covers once `ranges` are
    /// committed.
    pub fn before_commit(&mut self, file: &File, ranges: &[OffsetRange]) -> Result<(), SinkError> {
        file.sync_data()
            .map_err(SinkError::io(&self.output, "fsync", None))?;
        let len = file
            .metadata()
            .map_err(SinkError::io(&self.output, "stat", None))?
            .len();
        let mut next = self.last.1.clone();
        for r in ranges {
            next.insert(r.topic_partition(), r.until);
        }
        self.write(&[(len, next.clone())])?;
        self.last = (len, next);
        Ok(())
    }

    /// Writes the last entry and `more` to the cover: temp file, fsync, rename, fsync the
    /// directory.
    fn write(&self, more: &[(u64, Positions)]) -> Result<(), SinkError> {
        let path = Self::path_for(&self.output);
        let err = |op| SinkError::io(&path, op, None);
        let mut text = String::new();
        for (len, pos) in std::iter::once(&self.last).chain(more) {
            let pos: Vec<serde_json::Value> = pos
                .iter()
                .map(|(tp, o)| serde_json::json!([tp.topic.as_str(), tp.partition, o]))
                .collect();
            text.push_str(&serde_json::json!({ "len": len, "positions": pos }).to_string());
            text.push('\n');
        }
        // A temp name nobody can guess, created only if absent (a symlink planted at a
        // predictable name would be followed and its target overwritten).
        let (mut f, tmp) =
            kdirect_commit::file_sink::create_temp_beside(&path).map_err(err("create"))?;
        let placed = f
            .write_all(text.as_bytes())
            .and_then(|()| f.sync_data())
            .and_then(|()| std::fs::rename(&tmp, &path));
        if placed.is_err() {
            let _ = std::fs::remove_file(&tmp);
        }
        placed.map_err(err("write"))?;
        let dir = path
            .parent()
            .filter(|d| !d.as_os_str().is_empty())
            .unwrap_or(Path::new("."));
        File::open(dir)
            .and_then(|d| d.sync_all())
            .map_err(SinkError::io(dir, "fsync", None))?;
        Ok(())
    }
}

/// One entry: `{"len":N,"positions":[[topic,partition,offset],…]}`; `None` for a line that
/// does not parse (a torn write is never seen: the cover is renamed into place).
fn parse_line(line: &str) -> Option<(u64, Positions)> {
    let v: serde_json::Value = serde_json::from_str(line).ok()?;
    let len = v.get("len")?.as_u64()?;
    let mut pos = Positions::new();
    for e in v.get("positions")?.as_array()? {
        let e = e.as_array()?;
        let (t, p, o) = (
            e.first()?.as_str()?,
            e.get(1)?.as_i64()?,
            e.get(2)?.as_i64()?,
        );
        pos.insert(TopicPartition::new(t.to_owned(), i32::try_from(p).ok()?), o);
    }
    Some((len, pos))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn range(p: i32, from: i64, until: i64) -> OffsetRange {
        OffsetRange::new("t", p, from, until)
    }

    fn append(file: &mut File, bytes: &[u8]) {
        file.write_all(bytes).unwrap();
        file.flush().unwrap();
    }

    fn open_append(path: &Path) -> File {
        std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(path)
            .unwrap()
    }

    #[test]
    fn a_batch_written_and_not_committed_is_cut_back_on_resume() {
        let dir = kdirect_test_support::tempdir("cover");
        let path = dir.join("out.jsonl");
        let mut file = open_append(&path);
        let (mut cover, resumed) = Cover::open(path.clone(), &file, &Positions::new()).unwrap();
        assert_eq!(resumed, Resumed::Fresh);
        // Batch 0 written and committed: the store then holds t-0 at 2.
        append(&mut file, b"a\nb\n");
        cover.before_commit(&file, &[range(0, 0, 2)]).unwrap();
        let committed = Positions::from([(TopicPartition::new("t", 0), 2)]);
        // Batch 1 written, recorded, then the process dies before the store's commit.
        append(&mut file, b"c\n");
        cover.before_commit(&file, &[range(0, 2, 3)]).unwrap();
        drop(file);
        let file = open_append(&path);
        let (_, resumed) = Cover::open(path.clone(), &file, &committed).unwrap();
        assert_eq!(resumed, Resumed::CutBack { bytes: 2 });
        assert_eq!(std::fs::read(&path).unwrap(), b"a\nb\n");
    }

    #[test]
    fn at_the_commit_nothing_changes_and_other_positions_are_said() {
        let dir = kdirect_test_support::tempdir("cover");
        let path = dir.join("out.jsonl");
        let mut file = open_append(&path);
        let (mut cover, _) = Cover::open(path.clone(), &file, &Positions::new()).unwrap();
        append(&mut file, b"a\n");
        cover.before_commit(&file, &[range(0, 0, 1)]).unwrap();
        let at = Positions::from([(TopicPartition::new("t", 0), 1)]);
        let (_, resumed) = Cover::open(path.clone(), &file, &at).unwrap();
        assert_eq!(resumed, Resumed::AtCommit);
        assert_eq!(std::fs::read(&path).unwrap(), b"a\n");
        // Truncated by hand below what the store covers: said, not changed.
        file.set_len(0).unwrap();
        let (_, resumed) = Cover::open(path.clone(), &file, &at).unwrap();
        assert_eq!(resumed, Resumed::Shorter { len: 0, covered: 2 });
        let moved = Positions::from([(TopicPartition::new("t", 0), 50)]);
        let (_, resumed) = Cover::open(path.clone(), &file, &moved).unwrap();
        assert_eq!(resumed, Resumed::Unmatched);
    }
}
