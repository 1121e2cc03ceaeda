//! The access file: how every process finds and trusts the scheduler.
//!
//! Written by the scheduler (mode 0600) to `--access-file`, `$WEIR_ACCESS_FILE` or
//! `.weir/access.json`; read from the same default by workers, managers and clients, so a local
//! cluster needs no flags. Across machines, copy it.
//!
//! Beside it the scheduler holds `FILE.lock` ([`lock_path`]) for as long as it runs, with its
//! pid and host in it; [`holder`] tells a client whether that scheduler is gone.

use std::path::{Path, PathBuf};

use rustls_pki_types::CertificateDer;
use serde::{Deserialize, Serialize};

use super::{NetError, tls};

#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct AccessFile {
    /// `quic://HOST:PORT`
    pub address: String,
    /// The scheduler's certificate (PEM), pinned by every peer.
    pub certificate: String,
    /// Presented by workers and worker managers.
    pub worker_token: String,
    /// Presented by clients.
    pub client_token: String,
    /// Presented by clients that may only read status (the dashboard's URL carries it; a
    /// read-only access file, `scheduler --read-access-file`, has it as its client token).
    /// Empty in a file written before it existed: the scheduler makes one.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub read_token: String,
    /// With scheduler replicas (`scheduler --replica`): every replica's `quic://HOST:PORT`
    /// (`address` is the one that wrote the file). Only the leader serves; a peer that reaches
    /// another is told where the leader is, and tries the others when that one does not answer.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub replicas: Vec<String>,
}

impl AccessFile {
    /// The same scheduler with only the read-only token, as the client token (no worker token):
    /// what `scheduler --read-access-file` writes for those who may watch but not submit.
    pub fn read_only(&self) -> AccessFile {
        AccessFile {
            worker_token: String::new(),
            client_token: self.read_token.clone(),
            read_token: String::new(),
            ..self.clone()
        }
    }

    /// The schedulers to try: `address`, then the other replicas.
    pub fn candidates(&self) -> Vec<String> {
        let mut all = vec![self.address.clone()];
        for replica in &self.replicas {
            if !all.contains(replica) {
                all.push(replica.clone());
            }
        }
        all
    }
}

/// The lock a scheduler holds while it serves the access file at `access_file`: named after
/// the real file (a symbolic link resolved), so two paths to one access file meet at one lock.
pub fn lock_path(access_file: &Path) -> PathBuf {
    let real = std::fs::canonicalize(access_file).unwrap_or_else(|_| access_file.to_path_buf());
    let mut name = real.file_name().unwrap_or_default().to_os_string();
    name.push(".lock");
    real.with_file_name(name)
}

/// What the lock beside an access file says about its scheduler.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Holder {
    /// Its lock is held: a scheduler runs (or starts, or restarts) with this file.
    Held,
    /// Its lock is free and the process that last held it (on this host) is gone: nothing
    /// serves this file until a scheduler is started again. Says so, in words.
    Gone(String),
    /// Cannot tell: no lock file here (an access file copied from another machine), or the
    /// last holder was on another host, or its pid is alive (reused).
    Unknown,
}

/// Whether a scheduler holds the access file at `access_file` (see [`Holder`]). Only once the
/// last holder's pid is gone is the lock probed (taken shared for an instant; a scheduler
/// starting in that instant retries, see `scheduler::lock`).
pub fn holder(access_file: &Path) -> Holder {
    let path = lock_path(access_file);
    let Ok(file) = std::fs::File::open(&path) else {
        return match access_file.exists() {
            true => Holder::Unknown,
            false => Holder::Gone(format!(
                "no scheduler serves the access file {} (neither it nor its lock exists)",
                access_file.display()
            )),
        };
    };
    let text = std::fs::read_to_string(&path).unwrap_or_default();
    let mut words = text.split_whitespace();
    let pid = words.next().and_then(|p| p.parse::<i32>().ok());
    if words
        .next()
        .is_some_and(|host| Some(host) != hostname().as_deref())
    {
        return Holder::Unknown;
    }
    let Some(pid) = pid.filter(|pid| *pid > 0 && !alive(*pid)) else {
        // Its pid runs (the scheduler, or a process that reuses the pid), or none is written
        // yet: no probe, so a scheduler never meets it; connecting tells.
        return Holder::Unknown;
    };
    if is_locked(&file) {
        return Holder::Held;
    }
    Holder::Gone(format!(
        "the scheduler that wrote {} is not running (its process {pid} is gone and its lock {} \
         is free); start it again",
        access_file.display(),
        path.display()
    ))
}

/// Whether some process holds `file`'s `flock`; a free lock is taken shared and let go at once.
fn is_locked(file: &std::fs::File) -> bool {
    // std's `File` locks are `flock(2)` on Linux: the same lock the scheduler takes.
    let taken = file.try_lock_shared().is_ok();
    if taken {
        let _ = file.unlock();
    }
    !taken
}

/// Whether process `pid` exists (on this host) and is not a zombie: a scheduler killed under a
/// parent that does not reap it (a supervisor, a container's init) still answers kill(2).
fn alive(pid: i32) -> bool {
    let Some(found) = rustix::process::Pid::from_raw(pid) else {
        return false;
    };
    // kill(2) with signal 0 sends nothing; it checks that the process exists (EPERM: it does,
    // owned by another user).
    let exists = rustix::process::test_kill_process(found) != Err(rustix::io::Errno::SRCH);
    exists && !zombie(pid)
}

/// Whether `/proc/PID/stat` says the process has exited and waits to be reaped (state `Z`).
/// False where there is no /proc: then a zombie counts as alive, and clients wait for it.
fn zombie(pid: i32) -> bool {
    let Ok(stat) = std::fs::read_to_string(format!("/proc/{pid}/stat")) else {
        return false;
    };
    // `PID (COMM) STATE ...`: COMM may hold spaces and parentheses, so read after the last ')'.
    stat.rsplit_once(')')
        .and_then(|(_, rest)| rest.split_whitespace().next())
        .is_some_and(|state| state == "Z")
}

/// This host's name, as the scheduler writes it into its lock.
pub fn hostname() -> Option<String> {
    // What gethostname(2) returns on Linux: uname's node name.
    let name = rustix::system::uname()
        .nodename()
        .to_str()
        .ok()?
        .to_string();
    Some(name).filter(|name| !name.is_empty() && !name.contains(char::is_whitespace))
}

pub fn default_path() -> PathBuf {
    std::env::var_os("WEIR_ACCESS_FILE")
        .map_or_else(|| PathBuf::from(".weir/access.json"), PathBuf::from)
}

/// The token scheduler replicas present to each other, and that a membership change
/// (`weir replicas add/remove`) must carry: made from the scheduler's private key (PEM), which
/// every replica holds and no worker, manager or client does. (The same key re-encoded makes
/// another token: copy the key file as it is.)
pub fn replica_token(key_pem: &str) -> String {
    use sha2::{Digest, Sha256};
    let mut hash = Sha256::new();
    hash.update(b"weir replica token\n");
    hash.update(key_pem.as_bytes());
    hex::encode(hash.finalize())
}

/// The scheduler's private key beside an access file (`scheduler-key.pem`), where a scheduler
/// keeps it unless it was given `--key`.
pub fn key_beside(access_file: &Path) -> PathBuf {
    access_file
        .parent()
        .map_or_else(|| PathBuf::from("."), Path::to_path_buf)
        .join("scheduler-key.pem")
}

/// A fresh random token (128 bits, hex).
pub fn new_token() -> Result<String, NetError> {
    let mut bytes = [0u8; 16];
    getrandom::fill(&mut bytes)
        .map_err(|e| NetError::Access(format!("no randomness for a token: {e}")))?;
    Ok(hex::encode(bytes))
}

impl AccessFile {
    pub fn read(path: &Path) -> Result<AccessFile, NetError> {
        let text = std::fs::read_to_string(path).map_err(|e| {
            NetError::Access(format!(
                "cannot read the access file {}: {e} (is the scheduler running? it writes this file; \
                 pass --access-file or set WEIR_ACCESS_FILE)",
                path.display()
            ))
        })?;
        serde_json::from_str(&text).map_err(|e| {
            NetError::Access(format!("{}: not a weir access file: {e}", path.display()))
        })
    }

    /// Write atomically, readable by this user only.
    pub fn write(&self, path: &Path) -> Result<(), NetError> {
        let fail =
            |e: std::io::Error| NetError::Access(format!("cannot write {}: {e}", path.display()));
        if let Some(dir) = path.parent().filter(|d| !d.as_os_str().is_empty()) {
            std::fs::create_dir_all(dir).map_err(fail)?;
        }
        let text =
            serde_json::to_string_pretty(self).map_err(|e| NetError::Access(e.to_string()))?;
        write_private(path, text.as_bytes()).map_err(fail)
    }

    pub fn certificate_der(&self) -> Result<CertificateDer<'static>, NetError> {
        tls::certificate_der(&self.certificate)
    }
}

/// Write `bytes` to `path` through a temporary file with mode 0600, then rename.
pub fn write_private(path: &Path, bytes: &[u8]) -> std::io::Result<()> {
    use std::io::Write;
    let tmp = path.with_extension(format!("tmp{}", std::process::id()));
    let mut options = std::fs::OpenOptions::new();
    options.write(true).create(true).truncate(true);
    #[cfg(unix)]
    {
        use std::os::unix::fs::OpenOptionsExt;
        options.mode(0o600);
    }
    let mut file = options.open(&tmp)?;
    file.write_all(bytes)?;
    file.sync_all()?;
    std::fs::rename(&tmp, path)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_exited_child_not_yet_reaped_is_not_alive() {
        let mut child = std::process::Command::new("true")
            .spawn()
            .expect("true runs");
        let pid = i32::try_from(child.id()).expect("a pid fits");
        // Not reaped: it stays a zombie until `wait`. Poll /proc until it has exited.
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(60);
        while !zombie(pid) {
            assert!(std::time::Instant::now() < deadline, "`true` never exited");
            std::thread::yield_now();
        }
        assert!(!alive(pid));
        child.wait().expect("reaped");
        assert!(!alive(pid));
        assert!(alive(
            i32::try_from(std::process::id()).expect("a pid fits")
        ));
    }
}
