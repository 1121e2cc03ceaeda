//! One scheduler per file: an exclusive `flock` (std's `File::try_lock`) on a lock file that holds the owner's pid and
//! host (`PID HOST`). The kernel drops the lock when the process ends, however it ends, so a
//! `kill -9`ed scheduler never leaves a stale lock; clients read it to tell a scheduler that is
//! gone from one that does not answer (`net::access::holder`).

use std::fs::{File, OpenOptions};
use std::io::{Read, Seek, Write};
use std::path::Path;

/// Held for as long as it lives.
pub struct Lock {
    _file: File,
}

impl Lock {
    /// Lock `path` (created if needed) for this process; `what` names what it guards in the
    /// error, which gives the holder's pid.
    pub fn take(path: &Path, what: &str) -> Result<Lock, String> {
        let mut file = OpenOptions::new()
            .read(true)
            .write(true)
            .create(true)
            .truncate(false)
            .open(path)
            .map_err(|e| format!("cannot open the lock file {}: {e}", path.display()))?;
        if !take_exclusive(&file) {
            let mut holder = String::new();
            let _ = file.read_to_string(&mut holder);
            return Err(format!(
                "the {what} is in use by another scheduler (pid {}, lock {}); stop it first or use another {what}",
                holder.trim(),
                path.display()
            ));
        }
        let written = file.set_len(0).and_then(|()| file.rewind()).and_then(|()| {
            let host = crate::net::access::hostname().unwrap_or_default();
            writeln!(file, "{} {host}", std::process::id())
        });
        written.map_err(|e| format!("cannot write the lock file {}: {e}", path.display()))?;
        Ok(Lock { _file: file })
    }
}

/// Take `file`'s lock exclusively. A client probing a free lock (`net::access::holder`) holds
/// it shared for an instant: a few tries 10 ms apart ride over that.
fn take_exclusive(file: &File) -> bool {
    for attempt in 0..5 {
        if file.try_lock().is_ok() {
            return true;
        }
        if attempt < 4 {
            std::thread::sleep(std::time::Duration::from_millis(10));
        }
    }
    false
}

/// Lock an open file itself (its inode: every path to it, hard links too) for this process, as
/// long as it stays open.
pub fn lock_file(file: &File, what: &str) -> Result<(), String> {
    if file.try_lock().is_err() {
        return Err(format!(
            "the {what} is in use by another scheduler (through another path to the same file)"
        ));
    }
    Ok(())
}
