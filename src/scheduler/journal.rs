//! The journal: every accepted submission and every final result, appended to one file, so a
//! scheduler restarted after a crash (`kill -9`) has every task it ever accepted.
//!
//! Records are length-prefixed postcard frames (the wire format). Writes are buffered and
//! synced once per actor round, before the round's submissions are acknowledged, so an
//! acknowledged task is on disk. On start the file is replayed; a torn record at the end (a crash
//! mid-write) is cut off.

use std::fs::{File, OpenOptions};
use std::io::{BufWriter, Read, Write};
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

use crate::proto::{
    self, ComponentHash, EnvironmentDef, JobId, NewGroup, Outcome, TaskId, TaskState,
};

#[derive(Debug, Serialize, Deserialize)]
pub enum Record {
    /// Components first time seen, then the groups of one job.
    Submit {
        components: Vec<(ComponentHash, Vec<u8>)>,
        groups: Vec<NewGroup>,
    },
    /// Tasks that reached a final state: (task, state, outcome, attempts).
    Final(Vec<(TaskId, TaskState, Outcome, u32)>),
    EnvRegister {
        def: EnvironmentDef,
        component: Vec<u8>,
    },
    EnvRemove {
        name: String,
    },
    /// A finished job was forgotten (`weir forget`, `--forget-after`).
    Forget {
        job: JobId,
    },
    /// First in a compacted journal: the first job and task ids it holds (all lower ones were
    /// forgotten), so ids continue where they were.
    Base {
        first_job: JobId,
        first_task: TaskId,
    },
    /// Last in a compacted journal: the forgets before it are already compacted away.
    Compacted,
}

pub struct Journal {
    path: PathBuf,
    writer: BufWriter<File>,
    dirty: bool,
}

#[derive(Debug, thiserror::Error)]
#[error("journal {}: {error}", path.display())]
pub struct JournalError {
    path: PathBuf,
    error: String,
}

impl Journal {
    /// Open (creating if needed) and read every intact record.
    pub fn open(path: &Path) -> Result<(Journal, Vec<Record>), JournalError> {
        let fail = |error: String| JournalError {
            path: path.to_path_buf(),
            error,
        };
        if let Some(dir) = path.parent().filter(|d| !d.as_os_str().is_empty()) {
            std::fs::create_dir_all(dir).map_err(|e| fail(e.to_string()))?;
        }
        let mut bytes = Vec::new();
        if let Ok(mut file) = File::open(path) {
            file.read_to_end(&mut bytes)
                .map_err(|e| fail(e.to_string()))?;
        }
        let mut records = Vec::new();
        let mut good = 0usize;
        while bytes.len() - good >= 4 {
            let size = u32::from_be_bytes([
                bytes[good],
                bytes[good + 1],
                bytes[good + 2],
                bytes[good + 3],
            ]) as usize;
            let Some(payload) = bytes.get(good + 4..good + 4 + size) else {
                break;
            };
            match proto::decode::<Record>(payload) {
                Ok(record) => records.push(record),
                Err(_) => break,
            }
            good += 4 + size;
        }
        let file = OpenOptions::new()
            .create(true)
            .append(true)
            .open(path)
            .map_err(|e| fail(e.to_string()))?;
        if good < bytes.len() {
            tracing::warn!(path = %path.display(), kept = good, dropped = bytes.len() - good, "cutting a torn record off the journal's end");
            file.set_len(good as u64).map_err(|e| fail(e.to_string()))?;
        }
        Ok((
            Journal {
                path: path.to_path_buf(),
                writer: BufWriter::with_capacity(1 << 20, file),
                dirty: false,
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
            for record in records {
                let bytes = proto::encode(record)
                    .map_err(|e| std::io::Error::new(std::io::ErrorKind::InvalidData, e))?;
                writer.write_all(&bytes)?;
            }
            let file = writer.into_inner().map_err(|e| e.into_error())?;
            file.sync_all()?;
            // Opened before the rename: the same file, at the journal's path afterwards.
            let appender = OpenOptions::new().append(true).open(&fresh)?;
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
        if let Some(dir) = self.path.parent().filter(|d| !d.as_os_str().is_empty()) {
            File::open(dir)
                .and_then(|d| d.sync_all())
                .map_err(|e| self.fail(format!("compacted, but cannot sync its directory: {e}")))?;
        }
        Ok((old_size, new_size))
    }

    pub fn append(&mut self, record: &Record) -> Result<(), JournalError> {
        let bytes = proto::encode(record).map_err(|e| self.fail(e.to_string()))?;
        self.writer
            .write_all(&bytes)
            .map_err(|e| self.fail(e.to_string()))?;
        self.dirty = true;
        Ok(())
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

#[cfg(test)]
mod tests {
    use super::*;

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
}
