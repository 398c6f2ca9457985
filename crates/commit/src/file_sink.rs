//! The idempotent file sink: one output file per batch id, written atomically.
//!
//! Batch N's lines go to `.N.jsonl.tmp-<pid>-<random>` (a name that does not end in `.jsonl`,
//! created only if absent: [`create_temp_beside`]), which is fsynced and renamed to `N.jsonl`,
//! and the directory is fsynced. A re-run of batch N after a
//! crash writes the same name again and the rename replaces the old file, so the output holds
//! each batch once however often it ran: with a store that re-runs exactly the logged ranges
//! (the checkpoint), every offset appears exactly once; with one that re-plans (Kafka group
//! offsets) nothing is lost and a re-planned batch N replaces the earlier attempt's file.
//!
//! Finished files end in `.jsonl`; readers must ignore every other name (a file being written,
//! or the temp file a crash left behind, which [`FileSink::open`] removes).
//!
//! The sink takes already-formatted lines (the caller formats records); it is synchronous file
//! IO, to be called from a blocking context or accepted as the cost of one write per batch.

use std::fs::{self, File};
use std::io::{BufWriter, Write};
use std::path::{Path, PathBuf};

use crate::error::io;
use crate::StoreError;

/// Creates a temp file beside `path` (same directory, so it can be renamed or linked over it):
/// `.<name>.tmp-<pid>-<16 random hex digits>`, with `create_new` (O_EXCL: never an existing
/// file, and never through a symlink planted under a guessed name). The random part comes
/// from the standard library's per-process SipHash keys (seeded by the OS), so no name can be
/// guessed ahead. Names start with `.`, which every reader of these directories skips.
pub fn create_temp_beside(path: &Path) -> std::io::Result<(File, PathBuf)> {
    use std::hash::{BuildHasher, Hasher};
    use std::sync::atomic::{AtomicU64, Ordering};
    static SEQ: AtomicU64 = AtomicU64::new(0);
    let dir = path.parent().unwrap_or(Path::new("."));
    let name = path
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_default();
    let mut last = None;
    for _ in 0..8 {
        let mut h = std::collections::hash_map::RandomState::new().build_hasher();
        h.write_u64(SEQ.fetch_add(1, Ordering::Relaxed));
        let tmp = dir.join(format!(
            ".{name}.tmp-{}-{:016x}",
            std::process::id(),
            h.finish()
        ));
        match File::create_new(&tmp) {
            Ok(f) => return Ok((f, tmp)),
            Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => last = Some(e),
            Err(e) => return Err(e),
        }
    }
    Err(last.unwrap_or_else(|| std::io::Error::other("no free temp file name")))
}

/// A directory of per-batch output files.
#[derive(Debug, Clone)]
pub struct FileSink {
    dir: PathBuf,
}

impl FileSink {
    /// Opens (creating if needed) the output directory and removes temp files left by a crash.
    pub fn open(dir: impl Into<PathBuf>) -> Result<FileSink, StoreError> {
        let dir = dir.into();
        fs::create_dir_all(&dir).map_err(io(&dir, "create directory"))?;
        for entry in fs::read_dir(&dir).map_err(io(&dir, "list"))? {
            let entry = entry.map_err(io(&dir, "list"))?;
            let name = entry.file_name();
            let name = name.to_string_lossy();
            if name.starts_with('.') && name.contains(".jsonl.tmp-") {
                let p = entry.path();
                fs::remove_file(&p).map_err(io(&p, "remove stale temp file"))?;
            }
        }
        Ok(FileSink { dir })
    }

    /// The directory.
    pub fn dir(&self) -> &Path {
        &self.dir
    }

    /// The finished file of batch `batch_id`: `DIR/<batchId>.jsonl`.
    pub fn path_for(&self, batch_id: u64) -> PathBuf {
        self.dir.join(format!("{batch_id}.jsonl"))
    }

    /// Starts batch `batch_id`'s file. Write lines, then [`BatchFile::finish`]; dropping it
    /// unfinished removes the temp file and leaves any earlier finished file in place.
    pub fn begin(&self, batch_id: u64) -> Result<BatchFile, StoreError> {
        let path = self.path_for(batch_id);
        let (file, tmp) = create_temp_beside(&path).map_err(io(&path, "create a temp file for"))?;
        Ok(BatchFile {
            out: Some(BufWriter::with_capacity(256 * 1024, file)),
            tmp,
            path,
            dir: self.dir.clone(),
            lines: 0,
        })
    }

    /// Writes batch `batch_id`'s file from `lines` (each without its newline) in one go and
    /// returns the finished file's path.
    pub fn write_batch<L: AsRef<[u8]>>(
        &self,
        batch_id: u64,
        lines: impl IntoIterator<Item = L>,
    ) -> Result<PathBuf, StoreError> {
        let mut f = self.begin(batch_id)?;
        for l in lines {
            f.write_line(l.as_ref())?;
        }
        f.finish()
    }
}

/// One batch's file being written.
#[derive(Debug)]
pub struct BatchFile {
    out: Option<BufWriter<File>>,
    tmp: PathBuf,
    path: PathBuf,
    dir: PathBuf,
    lines: u64,
}

impl BatchFile {
    /// Appends one line (a newline is added).
    pub fn write_line(&mut self, line: &[u8]) -> Result<(), StoreError> {
        let out = self
            .out
            .as_mut()
            .expect("a BatchFile is written until finished");
        out.write_all(line)
            .and_then(|()| out.write_all(b"\n"))
            .map_err(io(&self.tmp, "write"))?;
        self.lines += 1;
        Ok(())
    }

    /// Lines written so far.
    pub fn lines(&self) -> u64 {
        self.lines
    }

    /// Flushes, fsyncs, renames to `<batchId>.jsonl` (replacing an earlier attempt) and fsyncs
    /// the directory. Returns the finished file's path. On an error before the rename the temp
    /// file is removed.
    pub fn finish(mut self) -> Result<PathBuf, StoreError> {
        let out = self.out.take().expect("finish is called once");
        let placed = out
            .into_inner()
            .map_err(|e| io(&self.tmp, "write")(e.into_error()))
            .and_then(|file| file.sync_all().map_err(io(&self.tmp, "fsync")))
            .and_then(|()| {
                fs::rename(&self.tmp, &self.path).map_err(io(&self.path, "rename into place"))
            });
        if placed.is_err() {
            let _ = fs::remove_file(&self.tmp);
        }
        placed?;
        File::open(&self.dir)
            .and_then(|d| d.sync_all())
            .map_err(io(&self.dir, "fsync directory"))?;
        Ok(self.path.clone())
    }
}

impl Drop for BatchFile {
    fn drop(&mut self) {
        if self.out.take().is_some() {
            let _ = fs::remove_file(&self.tmp);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rerun_replaces_and_unfinished_leaves_nothing() {
        let d = std::env::temp_dir().join(format!("kdirect-sink-{}", std::process::id()));
        let _ = fs::remove_dir_all(&d);
        let sink = FileSink::open(&d).unwrap();
        let p = sink.write_batch(3, ["{\"a\":1}", "{\"a\":2}"]).unwrap();
        assert_eq!(p, d.join("3.jsonl"));
        assert_eq!(fs::read_to_string(&p).unwrap(), "{\"a\":1}\n{\"a\":2}\n");
        // The re-run replaces the file instead of adding to it.
        sink.write_batch(3, ["{\"a\":1}", "{\"a\":2}"]).unwrap();
        assert_eq!(fs::read_to_string(&p).unwrap(), "{\"a\":1}\n{\"a\":2}\n");
        // An attempt that dies before finish leaves the earlier file and no temp file.
        {
            let mut f = sink.begin(3).unwrap();
            f.write_line(b"{\"partial\":true}").unwrap();
        }
        assert_eq!(fs::read_to_string(&p).unwrap(), "{\"a\":1}\n{\"a\":2}\n");
        let names: Vec<String> = fs::read_dir(&d)
            .unwrap()
            .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
            .collect();
        assert_eq!(names, vec!["3.jsonl".to_owned()]);
        let _ = fs::remove_dir_all(&d);
    }

    /// Issue 36: the temp file had a predictable name and was opened with `File::create`,
    /// which follows a symlink planted there (the victim was truncated and overwritten); and a
    /// `finish` that failed left its temp file behind.
    #[cfg(unix)]
    #[test]
    fn temp_files_are_unguessable_and_never_left_behind() {
        let d = std::env::temp_dir().join(format!("kdirect-sink-tmp-{}", std::process::id()));
        let _ = fs::remove_dir_all(&d);
        let sink = FileSink::open(&d).unwrap();
        let victim = d.join("victim");
        fs::write(&victim, "keep").unwrap();
        let planted = d.join(format!(".4.jsonl.tmp-{}", std::process::id()));
        std::os::unix::fs::symlink(&victim, &planted).unwrap();
        sink.write_batch(4, ["{\"a\":1}"]).unwrap();
        assert_eq!(fs::read_to_string(&victim).unwrap(), "keep");
        assert_eq!(
            fs::read_to_string(d.join("4.jsonl")).unwrap(),
            "{\"a\":1}\n"
        );
        fs::remove_file(&planted).unwrap();
        // A directory in the way of the rename: finish fails and removes its temp file.
        fs::create_dir_all(d.join("5.jsonl").join("x")).unwrap();
        let e = sink.write_batch(5, ["{\"a\":1}"]).unwrap_err();
        assert!(e.to_string().contains("5.jsonl"), "{e}");
        let mut names: Vec<String> = fs::read_dir(&d)
            .unwrap()
            .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
            .collect();
        names.sort();
        assert_eq!(names, ["4.jsonl", "5.jsonl", "victim"]);
        let _ = fs::remove_dir_all(&d);
    }
}
