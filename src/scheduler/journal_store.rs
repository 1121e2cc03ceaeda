//! Where the journal's bytes are kept: one seam ([`JournalStore`]) between the journal's format
//! and rules (`journal.rs`) and the disk. [`FileStore`] is the file (locked, fsynced, replaced by
//! a rename); [`MemoryStore`] keeps them in memory for tests and simulations, and can fail its
//! syncs and lose or tear what was not synced, as a disk and a power loss do.

use std::fs::{File, OpenOptions};
use std::io::{self, BufWriter, Read, Write};
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};

/// Seam: the journal's bytes (read whole at start, appended, flushed, synced, cut, replaced).
pub trait JournalStore: Send + std::fmt::Debug {
    /// Everything it holds (empty when there is nothing yet).
    fn read_all(&mut self) -> io::Result<Vec<u8>>;
    /// Add `bytes` at the end (buffered: see [`JournalStore::flush`] and [`JournalStore::sync`]).
    fn append(&mut self, bytes: &[u8]) -> io::Result<()>;
    /// Hand what was appended to the operating system: it survives this process, not a power loss.
    fn flush(&mut self) -> io::Result<()>;
    /// Put what was appended on disk (flush, then fsync).
    fn sync(&mut self) -> io::Result<()>;
    /// Cut it to its first `len` bytes (a torn tail).
    fn truncate(&mut self, len: u64) -> io::Result<()>;
    /// Replace it whole with what `write` writes, atomically and synced: a crash leaves the old
    /// or the new, never a mix. Appends go to the new one after. Returns its size.
    fn replace(
        &mut self,
        write: &mut dyn FnMut(&mut dyn Write) -> io::Result<()>,
    ) -> Result<u64, ReplaceError>;
    /// Whether its calls may block the thread (a disk's do): the scheduler then makes them on a
    /// blocking thread. A store in memory answers at once, and its calls run in place, so a
    /// simulated cluster stays on its one thread (a blocking thread's timing is not simulated).
    fn blocks(&self) -> bool {
        true
    }
    /// For a store that does not block: how long the calls since the last time it was asked
    /// take on the disk it simulates (a slow sync). The scheduler waits that long on its timer,
    /// as it waits for a blocking thread (what arrives meanwhile waits), then calls
    /// [`JournalStore::settled`]. Zero for a real disk, whose calls take their time.
    fn took(&mut self) -> std::time::Duration {
        std::time::Duration::ZERO
    }
    /// The wait [`JournalStore::took`] asked for is over: a sync it covered is on disk now (a
    /// power loss during the wait keeps only a torn piece of what it was writing).
    fn settled(&mut self) {}
}

/// Why [`JournalStore::replace`] failed, and which one is in use now.
#[derive(Debug, thiserror::Error)]
pub enum ReplaceError {
    /// Nothing changed: the old one stays in use.
    #[error("the old journal stays: {0}")]
    Kept(io::Error),
    /// The new one (of `size` bytes) is in use, but its directory entry may not be on disk.
    #[error("replaced, but cannot sync its directory: {error}")]
    Replaced { size: u64, error: io::Error },
}

/// The journal's file, locked for this process while it is open.
#[derive(Debug)]
pub struct FileStore {
    path: PathBuf,
    /// Where appends go; `None` until the file exists.
    writer: Option<BufWriter<File>>,
}

impl FileStore {
    /// Open `path` (it need not exist yet) and lock the file itself (every path to it, hard
    /// links too) if it exists; `FILE.lock` is the caller's.
    pub fn open(path: &Path) -> Result<FileStore, String> {
        let writer = match OpenOptions::new().append(true).open(path) {
            Ok(file) => {
                super::lock::lock_file(&file, "journal")?;
                Some(BufWriter::with_capacity(1 << 20, file))
            }
            Err(error) if error.kind() == io::ErrorKind::NotFound => None,
            Err(error) => return Err(error.to_string()),
        };
        Ok(FileStore {
            path: path.to_path_buf(),
            writer,
        })
    }

    fn writer(&mut self) -> io::Result<&mut BufWriter<File>> {
        self.writer
            .as_mut()
            .ok_or_else(|| io::Error::new(io::ErrorKind::NotFound, "the journal has no file yet"))
    }
}

impl JournalStore for FileStore {
    fn read_all(&mut self) -> io::Result<Vec<u8>> {
        let mut bytes = Vec::new();
        match File::open(&self.path) {
            Ok(mut file) => file.read_to_end(&mut bytes).map(|_| bytes),
            Err(error) if error.kind() == io::ErrorKind::NotFound => Ok(bytes),
            Err(error) => Err(error),
        }
    }

    fn append(&mut self, bytes: &[u8]) -> io::Result<()> {
        self.writer()?.write_all(bytes)
    }

    fn flush(&mut self) -> io::Result<()> {
        self.writer()?.flush()
    }

    fn sync(&mut self) -> io::Result<()> {
        let writer = self.writer()?;
        writer.flush()?;
        writer.get_ref().sync_data()
    }

    fn truncate(&mut self, len: u64) -> io::Result<()> {
        let writer = self.writer()?;
        writer.flush()?;
        writer.get_ref().set_len(len)
    }

    /// Written beside it (`.compacting`), synced, locked, renamed over it, then its directory
    /// synced.
    fn replace(
        &mut self,
        write: &mut dyn FnMut(&mut dyn Write) -> io::Result<()>,
    ) -> Result<u64, ReplaceError> {
        let fresh = self.path.with_extension("compacting");
        let written = (|| -> io::Result<(u64, File)> {
            let mut writer = BufWriter::with_capacity(1 << 20, File::create(&fresh)?);
            write(&mut writer)?;
            let file = writer.into_inner().map_err(|e| e.into_error())?;
            file.sync_all()?;
            let size = file.metadata()?.len();
            // Opened and locked before the rename: the same file, at the journal's path after.
            let appender = OpenOptions::new().append(true).open(&fresh)?;
            super::lock::lock_file(&appender, "journal").map_err(io::Error::other)?;
            // The last step that can fail: after it, the new file is the journal and the
            // appender must be used (an error past this point would leave appends going to
            // the old, unlinked file).
            std::fs::rename(&fresh, &self.path)?;
            Ok((size, appender))
        })();
        let (size, appender) = written.map_err(|error| {
            let _ = std::fs::remove_file(&fresh);
            ReplaceError::Kept(error)
        })?;
        self.writer = Some(BufWriter::with_capacity(1 << 20, appender));
        if let Some(dir) = self.path.parent().filter(|d| !d.as_os_str().is_empty()) {
            File::open(dir)
                .and_then(|d| d.sync_all())
                .map_err(|error| ReplaceError::Replaced { size, error })?;
        }
        Ok(size)
    }
}

/// A journal kept in memory; clones share it (the test keeps one to look and inject faults).
#[derive(Clone, Debug, Default)]
pub struct MemoryStore(Arc<Mutex<Disk>>);

#[derive(Debug, Default)]
struct Disk {
    /// What a power loss keeps.
    durable: Vec<u8>,
    /// What the operating system has (a killed process keeps it).
    written: Vec<u8>,
    /// Appended, not flushed yet (in the process).
    buffered: Vec<u8>,
    /// Every sync and replace fails from now on (a full or broken disk).
    failing: bool,
    /// What each sync and replace takes (a slow disk), and what the calls took since
    /// `JournalStore::took` was last asked.
    sync_latency: std::time::Duration,
    owed: std::time::Duration,
    /// A slow sync under way: how much of `written` is on disk once it settles.
    syncing: Option<usize>,
}

impl MemoryStore {
    /// Holding `bytes`, all of them on disk.
    pub fn with(bytes: Vec<u8>) -> MemoryStore {
        let disk = Disk {
            durable: bytes.clone(),
            written: bytes,
            ..Disk::default()
        };
        MemoryStore(Arc::new(Mutex::new(disk)))
    }

    fn disk(&self) -> std::sync::MutexGuard<'_, Disk> {
        // A test that panicked while holding it has failed already: go on with what is there.
        self.0
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
    }

    /// Every sync and replace takes `latency` from now on (see [`JournalStore::took`]); a sync
    /// is on disk only once it settled.
    pub fn slow_syncs(&self, latency: std::time::Duration) {
        self.disk().sync_latency = latency;
    }

    /// Fail every sync and replace from now on, as a disk that is full or broken.
    pub fn fail_syncs(&self) {
        self.disk().failing = true;
    }

    /// What was synced.
    pub fn durable(&self) -> Vec<u8> {
        self.disk().durable.clone()
    }

    /// What the machine has after a power loss: what was synced and the first `torn` bytes of
    /// what was written after (a write cut short).
    pub fn after_power_loss(&self, torn: usize) -> Vec<u8> {
        let disk = self.disk();
        let mut bytes = disk.durable.clone();
        let unsynced = disk.written.get(bytes.len()..).unwrap_or_default();
        bytes.extend_from_slice(&unsynced[..torn.min(unsynced.len())]);
        bytes
    }
}

fn failed() -> io::Error {
    io::Error::other("injected fault: the disk fails (memory store)")
}

impl JournalStore for MemoryStore {
    fn blocks(&self) -> bool {
        false
    }

    fn took(&mut self) -> std::time::Duration {
        std::mem::take(&mut self.disk().owed)
    }

    fn settled(&mut self) {
        let disk = &mut *self.disk();
        if let Some(len) = disk.syncing.take() {
            let len = len.min(disk.written.len());
            disk.durable = disk.written[..len].to_vec();
        }
    }

    fn read_all(&mut self) -> io::Result<Vec<u8>> {
        Ok(self.disk().written.clone())
    }

    fn append(&mut self, bytes: &[u8]) -> io::Result<()> {
        self.disk().buffered.extend_from_slice(bytes);
        Ok(())
    }

    fn flush(&mut self) -> io::Result<()> {
        let disk = &mut *self.disk();
        disk.written.append(&mut disk.buffered);
        Ok(())
    }

    fn sync(&mut self) -> io::Result<()> {
        self.flush()?;
        let disk = &mut *self.disk();
        if disk.failing {
            return Err(failed());
        }
        match disk.sync_latency.is_zero() {
            true => disk.durable.clone_from(&disk.written),
            // On disk only once the wait is over (`settled`).
            false => {
                disk.owed += disk.sync_latency;
                disk.syncing = Some(disk.written.len());
            }
        }
        Ok(())
    }

    fn truncate(&mut self, len: u64) -> io::Result<()> {
        self.flush()?;
        let len = usize::try_from(len).unwrap_or(usize::MAX);
        let disk = &mut *self.disk();
        disk.written.truncate(len);
        disk.durable.truncate(len);
        disk.syncing = disk.syncing.map(|synced| synced.min(len));
        Ok(())
    }

    fn replace(
        &mut self,
        write: &mut dyn FnMut(&mut dyn Write) -> io::Result<()>,
    ) -> Result<u64, ReplaceError> {
        let mut bytes = Vec::new();
        write(&mut bytes).map_err(ReplaceError::Kept)?;
        let disk = &mut *self.disk();
        disk.owed += disk.sync_latency;
        if disk.failing {
            return Err(ReplaceError::Kept(failed()));
        }
        disk.buffered.clear();
        // The rename is atomic: the new file whole (its own sync is what the latency covers).
        disk.syncing = None;
        disk.durable.clone_from(&bytes);
        disk.written = bytes;
        Ok(disk.written.len() as u64)
    }
}

#[cfg(test)]
#[path = "journal_store_tests.rs"]
mod tests;
