//! The journal: every accepted submission and every final result, appended to one file, so a
//! scheduler restarted after a crash (`kill -9`) has every task it ever accepted.
//!
//! Format (version 2): a 12-byte header, `WEIRJRNL` and the format version (u32, little
//! endian), then records. A record is its payload's length (u32 LE), the CRC-32C of those four
//! bytes, the CRC-32C of the payload, then the payload (postcard). Records have no size limit
//! but the u32 (a cancel of millions of tasks is one record).
//!
//! Writes are buffered and synced once per actor round, before the round's submissions are
//! acknowledged, so an acknowledged task is on disk. On start the file is checked whole: a torn
//! tail (a record cut short by a crash mid-write, or zeros where its unsynced blocks were) is
//! cut off; any other damage (a checksum that does not match, a record that does not decode) is
//! refused with its offset, and the scheduler does not start on it. A file that is not a weir
//! journal is never modified. One scheduler per journal: [`Journal::open`] takes an exclusive
//! lock (`FILE.lock`, holding the owner's pid) for as long as the journal is open.

use std::fs::{File, OpenOptions};
use std::io::{BufWriter, Read, Write};
use std::path::{Path, PathBuf};

pub use super::record::{FORMAT, Record};
use super::record::{HEADER, encode, header, parse};

pub struct Journal {
    path: PathBuf,
    writer: BufWriter<File>,
    dirty: bool,
    /// Its size in bytes.
    size: u64,
    /// The sequence number of the next record.
    next: u64,
    /// Held while the journal is open: the exclusive lock on `FILE.lock`.
    _lock: crate::scheduler::lock::Lock,
}

#[derive(Debug, thiserror::Error)]
#[error("journal {}: {error}", path.display())]
pub struct JournalError {
    path: PathBuf,
    error: String,
}

impl Journal {
    /// Lock, check and read the journal (creating it if needed): every record, with a torn tail
    /// cut off. Damage, a file that is not a journal, or a journal another scheduler holds is
    /// an error, and the file is left as it was.
    pub fn open(path: &Path) -> Result<(Journal, Vec<Record>), JournalError> {
        let fail = |error: String| JournalError {
            path: path.to_path_buf(),
            error,
        };
        if let Some(dir) = path.parent().filter(|d| !d.as_os_str().is_empty()) {
            std::fs::create_dir_all(dir).map_err(|e| fail(e.to_string()))?;
        }
        // The lock is named after the real file (links resolved), so two paths to one journal
        // meet at one lock.
        let lock = crate::scheduler::lock::Lock::take(&lock_path(path), "journal").map_err(fail)?;
        let mut bytes = Vec::new();
        if let Ok(mut file) = File::open(path) {
            file.read_to_end(&mut bytes)
                .map_err(|e| fail(e.to_string()))?;
        }
        let (records, good) = parse(&bytes).map_err(&fail)?;
        if bytes.is_empty() {
            // New: its header is written beside it and renamed into place, so a journal is
            // never seen without a whole header (and a short file is never taken for one).
            let fresh = path.with_extension("creating");
            let created = (|| -> std::io::Result<()> {
                let mut file = File::create(&fresh)?;
                file.write_all(&header())?;
                file.sync_all()?;
                std::fs::rename(&fresh, path)
            })();
            created.map_err(|e| fail(format!("cannot create it: {e}")))?;
        }
        let file = OpenOptions::new()
            .append(true)
            .open(path)
            .map_err(|e| fail(e.to_string()))?;
        crate::scheduler::lock::lock_file(&file, "journal").map_err(fail)?;
        if good < bytes.len() {
            tracing::warn!(path = %path.display(), kept = good, dropped = bytes.len() - good, "cutting a torn record off the journal's end");
            file.set_len(good as u64).map_err(|e| fail(e.to_string()))?;
        }
        let size = (good.max(HEADER)) as u64;
        let next = records.len() as u64;
        Ok((
            Journal {
                path: path.to_path_buf(),
                writer: BufWriter::with_capacity(1 << 20, file),
                dirty: false,
                size,
                next,
                _lock: lock,
            },
            records,
        ))
    }

    /// Replace the journal with `records` (the state it replays to, without what was forgotten):
    /// written beside it and synced, then renamed over it, so a crash at any point leaves either
    /// the old journal or the new one. On an error the old journal stays in use. Returns the old
    /// and new sizes in bytes.
    pub fn rewrite(&mut self, records: &[Record]) -> Result<(u64, u64), JournalError> {
        self.sync()?;
        let old_size = std::fs::metadata(&self.path).map_or(0, |m| m.len());
        let fresh = self.path.with_extension("compacting");
        let written = (|| -> std::io::Result<(u64, File)> {
            let mut writer = BufWriter::with_capacity(1 << 20, File::create(&fresh)?);
            writer.write_all(&header())?;
            for (seq, record) in records.iter().enumerate() {
                let bytes = encode(record, seq as u64)
                    .map_err(|e| std::io::Error::new(std::io::ErrorKind::InvalidData, e))?;
                writer.write_all(&bytes)?;
            }
            let file = writer.into_inner().map_err(|e| e.into_error())?;
            file.sync_all()?;
            // Opened and locked before the rename: the same file, at the journal's path after.
            let appender = OpenOptions::new().append(true).open(&fresh)?;
            crate::scheduler::lock::lock_file(&appender, "journal")
                .map_err(std::io::Error::other)?;
            std::fs::rename(&fresh, &self.path)?;
            Ok((file.metadata()?.len(), appender))
        })();
        let (new_size, appender) = match written {
            Ok(done) => done,
            Err(error) => {
                let _ = std::fs::remove_file(&fresh);
                return Err(self.fail(format!("cannot compact (the old journal stays): {error}")));
            }
        };
        self.writer = BufWriter::with_capacity(1 << 20, appender);
        self.size = new_size;
        self.next = records.len() as u64;
        if let Some(dir) = self.path.parent().filter(|d| !d.as_os_str().is_empty()) {
            File::open(dir)
                .and_then(|d| d.sync_all())
                .map_err(|e| self.fail(format!("compacted, but cannot sync its directory: {e}")))?;
        }
        Ok((old_size, new_size))
    }

    pub fn append(&mut self, record: &Record) -> Result<(), JournalError> {
        let bytes = encode(record, self.next).map_err(|e| self.fail(e))?;
        self.dirty = true;
        self.size += bytes.len() as u64;
        self.next += 1;
        self.writer
            .write_all(&bytes)
            .map_err(|e| self.fail(e.to_string()))?;
        Ok(())
    }

    /// Its size in bytes.
    pub fn size(&self) -> u64 {
        self.size
    }

    /// Append a record that needs no sync of its own: it is written with the next one that does.
    pub fn append_lazily(&mut self, record: &Record) -> Result<(), JournalError> {
        let dirty = self.dirty;
        self.append(record)?;
        self.dirty = dirty;
        Ok(())
    }

    /// Hand what was appended to the operating system, without waiting for the disk: it
    /// survives this process being killed, not the machine losing power.
    pub fn write_through(&mut self) -> Result<(), JournalError> {
        self.writer.flush().map_err(|e| self.fail(e.to_string()))
    }

    /// Flush and fsync what was appended since the last sync.
    pub fn sync(&mut self) -> Result<(), JournalError> {
        if !self.dirty {
            return Ok(());
        }
        self.writer.flush().map_err(|e| self.fail(e.to_string()))?;
        self.writer
            .get_ref()
            .sync_data()
            .map_err(|e| self.fail(e.to_string()))?;
        self.dirty = false;
        Ok(())
    }

    fn fail(&self, error: String) -> JournalError {
        JournalError {
            path: self.path.clone(),
            error,
        }
    }
}

/// The lock file of a journal: `FILE.lock` beside the real file (a symbolic link resolved).
fn lock_path(path: &Path) -> PathBuf {
    let real = std::fs::canonicalize(path).unwrap_or_else(|_| path.to_path_buf());
    let mut name = real.file_name().unwrap_or_default().to_os_string();
    name.push(".lock");
    real.with_file_name(name)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::proto::{Outcome, TaskState};

    #[test]
    fn a_torn_record_at_the_end_is_cut_off_and_the_rest_kept() {
        let dir = std::env::temp_dir().join(format!("weir-journal-test-{}", std::process::id()));
        let path = dir.join("journal");
        let _ = std::fs::remove_dir_all(&dir);
        {
            let (mut journal, records) = Journal::open(&path).unwrap();
            assert!(records.is_empty());
            journal
                .append(&Record::EnvRemove { name: "a".into() })
                .unwrap();
            journal
                .append(&Record::EnvRemove { name: "b".into() })
                .unwrap();
            journal.sync().unwrap();
        }
        let good = std::fs::metadata(&path).unwrap().len();
        // A crash mid-write: a length prefix promising more than was written.
        let mut file = OpenOptions::new().append(true).open(&path).unwrap();
        file.write_all(&[0, 0, 0, 50, 1, 2, 3]).unwrap();
        drop(file);

        let (mut journal, records) = Journal::open(&path).unwrap();
        let names: Vec<_> = records
            .iter()
            .map(|r| match r {
                Record::EnvRemove { name } => name.clone(),
                other => panic!("unexpected {other:?}"),
            })
            .collect();
        assert_eq!(names, ["a", "b"]);
        assert_eq!(
            std::fs::metadata(&path).unwrap().len(),
            good,
            "the torn tail is cut off"
        );
        // Appending after the cut yields a readable journal again.
        journal
            .append(&Record::EnvRemove { name: "c".into() })
            .unwrap();
        journal.sync().unwrap();
        drop(journal);
        assert_eq!(Journal::open(&path).unwrap().1.len(), 3);
        let _ = std::fs::remove_dir_all(&dir);
    }

    #[test]
    fn a_rewritten_journal_holds_the_new_records_and_takes_appends() {
        let dir = std::env::temp_dir().join(format!("weir-journal-rewrite-{}", std::process::id()));
        let path = dir.join("journal");
        let _ = std::fs::remove_dir_all(&dir);
        let (mut journal, _) = Journal::open(&path).unwrap();
        for name in ["a", "b", "c"] {
            journal
                .append(&Record::EnvRemove { name: name.into() })
                .unwrap();
        }
        let (before, after) = journal
            .rewrite(&[
                Record::Base {
                    first_job: 4,
                    first_task: 9,
                },
                Record::Compacted,
            ])
            .unwrap();
        assert!(after < before, "{before} -> {after}");
        journal.append(&Record::Forget { job: 4 }).unwrap();
        journal.sync().unwrap();
        drop(journal);
        let records = Journal::open(&path).unwrap().1;
        assert!(matches!(
            records[..],
            [
                Record::Base {
                    first_job: 4,
                    first_task: 9
                },
                Record::Compacted,
                Record::Forget { job: 4 }
            ]
        ));
        assert!(!path.with_extension("compacting").exists());
        let _ = std::fs::remove_dir_all(&dir);
    }

    fn scratch(name: &str) -> (PathBuf, PathBuf) {
        let dir = std::env::temp_dir().join(format!("weir-journal-{name}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join("journal");
        (dir, path)
    }

    fn three_records(path: &Path) {
        let (mut journal, _) = Journal::open(path).unwrap();
        for name in ["a", "b", "c"] {
            journal
                .append(&Record::EnvRemove { name: name.into() })
                .unwrap();
        }
        journal.sync().unwrap();
    }

    #[test]
    fn one_flipped_byte_anywhere_is_refused_with_its_offset_and_nothing_is_cut() {
        let (dir, path) = scratch("flip");
        three_records(&path);
        let good = std::fs::read(&path).unwrap();
        for at in HEADER..good.len() {
            let mut bad = good.clone();
            bad[at] ^= 0x01;
            std::fs::write(&path, &bad).unwrap();
            let error = match Journal::open(&path) {
                Err(error) => error.to_string(),
                Ok((_, records)) => panic!("flipped byte {at} accepted: {records:?}"),
            };
            assert!(
                error.contains("is damaged") || error.contains("does not decode"),
                "{error}"
            );
            assert!(error.contains("record at offset"), "{error}");
            assert_eq!(
                std::fs::read(&path).unwrap(),
                bad,
                "the file is left as it was"
            );
        }
        let _ = std::fs::remove_dir_all(&dir);
    }

    #[test]
    fn a_file_that_is_not_a_journal_is_refused_and_never_modified() {
        let (dir, path) = scratch("foreign");
        let text = b"# weir\n\nA distributed task scheduler.\n".to_vec();
        std::fs::write(&path, &text).unwrap();
        let error = Journal::open(&path).err().expect("refused").to_string();
        assert!(error.contains("not a weir journal"), "{error}");
        assert_eq!(std::fs::read(&path).unwrap(), text);
        let _ = std::fs::remove_dir_all(&dir);
    }

    #[test]
    fn a_zero_filled_tail_is_cut_like_a_torn_one() {
        let (dir, path) = scratch("zeros");
        three_records(&path);
        let good = std::fs::metadata(&path).unwrap().len();
        let mut file = OpenOptions::new().append(true).open(&path).unwrap();
        file.write_all(&[0u8; 4096]).unwrap();
        drop(file);
        assert_eq!(Journal::open(&path).unwrap().1.len(), 3);
        assert_eq!(std::fs::metadata(&path).unwrap().len(), good);
        let _ = std::fs::remove_dir_all(&dir);
    }

    #[test]
    fn a_second_scheduler_on_one_journal_is_refused_with_the_first_ones_pid() {
        let (dir, path) = scratch("lock");
        let (first, _) = Journal::open(&path).unwrap();
        let error = Journal::open(&path).err().expect("refused").to_string();
        assert!(
            error.contains(&format!(
                "in use by another scheduler (pid {}",
                std::process::id()
            )),
            "{error}"
        );
        drop(first);
        assert!(
            Journal::open(&path).is_ok(),
            "free once the first one is gone"
        );
        let _ = std::fs::remove_dir_all(&dir);
    }

    #[test]
    fn a_record_larger_than_a_frame_is_written_and_read_back() {
        let (dir, path) = scratch("large");
        let outcome = Outcome::Error {
            message: "canceled".into(),
        };
        // ~60 MB: the cancel of a job of millions of tasks.
        let finals: Vec<_> = (0..4_000_000u64)
            .map(|task| (task, TaskState::Canceled, outcome.clone(), 0))
            .collect();
        {
            let (mut journal, _) = Journal::open(&path).unwrap();
            journal.append(&Record::Final(finals)).unwrap();
            journal.sync().unwrap();
        }
        assert!(std::fs::metadata(&path).unwrap().len() > crate::proto::MAX_FRAME as u64);
        let (_, records) = Journal::open(&path).unwrap();
        assert!(matches!(&records[..], [Record::Final(f)] if f.len() == 4_000_000));
        let _ = std::fs::remove_dir_all(&dir);
    }

    #[test]
    fn reordered_duplicated_or_dropped_records_are_refused() {
        let (dir, path) = scratch("order");
        three_records(&path);
        let good = std::fs::read(&path).unwrap();
        // The three records' spans (each the same size: EnvRemove of a one-letter name).
        let record = (good.len() - HEADER) / 3;
        let span = |i: usize| HEADER + i * record..HEADER + (i + 1) * record;
        let variants: [Vec<u8>; 3] = [
            // the second record twice
            [&good[..], &good[span(1)]].concat(),
            // the first two swapped
            [
                &good[..HEADER],
                &good[span(1)],
                &good[span(0)],
                &good[span(2)],
            ]
            .concat(),
            // the middle one dropped
            [&good[..HEADER], &good[span(0)], &good[span(2)]].concat(),
        ];
        for bad in variants {
            std::fs::write(&path, &bad).unwrap();
            let error = Journal::open(&path).err().expect("refused").to_string();
            assert!(error.contains("out of order"), "{error}");
            assert_eq!(std::fs::read(&path).unwrap(), bad);
        }
        let _ = std::fs::remove_dir_all(&dir);
    }

    #[test]
    fn a_short_file_is_not_taken_for_a_journal_being_created() {
        let (dir, path) = scratch("short");
        for text in ["W", "WEIR", "WEIRJRN"] {
            std::fs::write(&path, text).unwrap();
            let error = Journal::open(&path).err().expect("refused").to_string();
            assert!(error.contains("not a weir journal"), "{error}");
            assert_eq!(std::fs::read_to_string(&path).unwrap(), text);
        }
        let _ = std::fs::remove_dir_all(&dir);
    }

    #[test]
    fn another_path_to_the_same_journal_meets_the_same_lock() {
        let (dir, path) = scratch("links");
        let (_first, _) = Journal::open(&path).unwrap();
        let symbolic = dir.join("symbolic");
        std::os::unix::fs::symlink(&path, &symbolic).unwrap();
        let hard = dir.join("hard");
        std::fs::hard_link(&path, &hard).unwrap();
        for other in [symbolic, hard] {
            let error = Journal::open(&other).err().expect("refused").to_string();
            assert!(error.contains("in use by another scheduler"), "{error}");
        }
        let _ = std::fs::remove_dir_all(&dir);
    }
}
