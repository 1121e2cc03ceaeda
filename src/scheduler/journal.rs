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

use std::io::Write;
use std::path::{Path, PathBuf};

pub use super::journal_store::{FileStore, JournalStore, MemoryStore, ReplaceError};
pub use super::record::{FORMAT, Framed, Record};
use super::record::{HEADER, encode, header_of, parse_as};

/// The scheduler's journal: a [`Log`] of [`Record`]s.
pub type Journal = Log<Record>;

/// A file of checksummed records of one type (see the format above): the journal, and a
/// replica's Raft log (`replica/log_store.rs`).
pub struct Log<R> {
    /// Its name in errors (the file's path).
    path: PathBuf,
    /// Where its bytes are kept ([`FileStore`], or [`MemoryStore`] in tests).
    store: Box<dyn JournalStore>,
    dirty: bool,
    /// Its size in bytes.
    size: u64,
    /// The sequence number of the next record.
    next: u64,
    /// Held while the journal is open: the exclusive lock on `FILE.lock` (none in memory).
    _lock: Option<crate::scheduler::lock::Lock>,
    _records: std::marker::PhantomData<fn(R)>,
}

#[derive(Debug, thiserror::Error)]
#[error("journal {}: {error}", path.display())]
pub struct JournalError {
    path: PathBuf,
    error: String,
}

impl<R: Framed> Log<R> {
    /// Whether its store's calls may block the thread ([`JournalStore::blocks`]).
    pub fn blocks(&self) -> bool {
        self.store.blocks()
    }

    /// What its store's calls took on a simulated disk ([`JournalStore::took`]).
    pub fn took(&mut self) -> std::time::Duration {
        self.store.took()
    }

    /// The wait for [`Journal::took`] is over ([`JournalStore::settled`]).
    pub fn settled(&mut self) {
        self.store.settled();
    }

    /// Lock, check and read the journal (creating it if needed): every record, with a torn tail
    /// cut off. Damage, a file that is not a journal, or a journal another scheduler holds is
    /// an error, and the file is left as it was.
    pub fn open(path: &Path) -> Result<(Log<R>, Vec<R>), JournalError> {
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
        let store = FileStore::open(path).map_err(fail)?;
        Log::open_in(path, Box::new(store), Some(lock))
    }

    /// [`Journal::open`] on bytes kept in `store` (`name` names it in errors), holding `lock`.
    pub fn open_in(
        name: &Path,
        mut store: Box<dyn JournalStore>,
        lock: Option<crate::scheduler::lock::Lock>,
    ) -> Result<(Log<R>, Vec<R>), JournalError> {
        let fail = |error: String| JournalError {
            path: name.to_path_buf(),
            error,
        };
        let bytes = store.read_all().map_err(|e| fail(e.to_string()))?;
        let (records, good) = parse_as::<R>(&bytes).map_err(&fail)?;
        if bytes.is_empty() {
            // New: its header is written beside it and put in place at once, so a journal is
            // never seen without a whole header (and a short file is never taken for one).
            store
                .replace(&mut |w| w.write_all(&header_of::<R>()))
                .map_err(|e| fail(format!("cannot create it: {e}")))?;
        }
        if good < bytes.len() {
            tracing::warn!(path = %name.display(), kept = good, dropped = bytes.len() - good, "cutting a torn record off the journal's end");
            store
                .truncate(good as u64)
                .map_err(|e| fail(e.to_string()))?;
        }
        let size = (good.max(HEADER)) as u64;
        let next = records.len() as u64;
        Ok((
            Log {
                path: name.to_path_buf(),
                store,
                dirty: false,
                size,
                next,
                _lock: lock,
                _records: std::marker::PhantomData,
            },
            records,
        ))
    }

    /// Replace the journal with `records` (the state it replays to, without what was forgotten):
    /// written beside it and synced, then put in its place, so a crash at any point leaves
    /// either the old journal or the new one. On an error the old journal stays in use (or the
    /// new one, when only its directory could not be synced). Returns the old and new sizes in
    /// bytes.
    pub fn rewrite(&mut self, records: &[R]) -> Result<(u64, u64), JournalError> {
        self.sync()?;
        let old_size = self.size;
        let mut write = |writer: &mut dyn Write| -> std::io::Result<()> {
            writer.write_all(&header_of::<R>())?;
            for (seq, record) in records.iter().enumerate() {
                let bytes = encode(record, seq as u64)
                    .map_err(|e| std::io::Error::new(std::io::ErrorKind::InvalidData, e))?;
                writer.write_all(&bytes)?;
            }
            Ok(())
        };
        let replaced = self.store.replace(&mut write);
        let new_size = match replaced {
            Ok(size) => size,
            Err(ReplaceError::Kept(error)) => {
                return Err(self.fail(format!("cannot compact (the old journal stays): {error}")));
            }
            Err(ReplaceError::Replaced { size, error }) => {
                self.size = size;
                self.next = records.len() as u64;
                return Err(self.fail(format!("compacted, but cannot sync its directory: {error}")));
            }
        };
        self.size = new_size;
        self.next = records.len() as u64;
        Ok((old_size, new_size))
    }

    pub fn append(&mut self, record: &R) -> Result<(), JournalError> {
        let bytes = encode(record, self.next).map_err(|e| self.fail(e))?;
        self.dirty = true;
        self.size += bytes.len() as u64;
        self.next += 1;
        self.store
            .append(&bytes)
            .map_err(|e| self.fail(e.to_string()))?;
        Ok(())
    }

    /// Its size in bytes.
    pub fn size(&self) -> u64 {
        self.size
    }

    /// Append a record that needs no sync of its own: it is written with the next one that does.
    pub fn append_lazily(&mut self, record: &R) -> Result<(), JournalError> {
        let dirty = self.dirty;
        self.append(record)?;
        self.dirty = dirty;
        Ok(())
    }

    /// Hand what was appended to the operating system, without waiting for the disk: it
    /// survives this process being killed, not the machine losing power.
    pub fn write_through(&mut self) -> Result<(), JournalError> {
        self.store.flush().map_err(|e| self.fail(e.to_string()))
    }

    /// Whether something was appended that the next [`Journal::sync`] must put on disk.
    pub fn dirty(&self) -> bool {
        self.dirty
    }

    /// Flush and fsync what was appended since the last sync.
    pub fn sync(&mut self) -> Result<(), JournalError> {
        if !self.dirty {
            return Ok(());
        }
        #[cfg(debug_assertions)]
        stall_for_tests();
        self.store.sync().map_err(|e| self.fail(e.to_string()))?;
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

/// A disk that stalls, for the tests (debug builds only): while the file named by
/// `WEIR_TEST_STALL_JOURNAL` exists, a sync waits (and says so by creating that path with
/// `.held` added).
#[cfg(debug_assertions)]
fn stall_for_tests() {
    let Some(path) = std::env::var_os("WEIR_TEST_STALL_JOURNAL") else {
        return;
    };
    let path = PathBuf::from(path);
    if path.exists() {
        let mut held = path.clone().into_os_string();
        held.push(".held");
        let _ = std::fs::File::create(held);
    }
    while path.exists() {
        std::thread::sleep(std::time::Duration::from_millis(20));
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
#[path = "journal_tests.rs"]
mod tests;
