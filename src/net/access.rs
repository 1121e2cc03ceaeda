//! The access file: how every process finds and trusts the scheduler.
//!
//! Written by the scheduler (mode 0600) to `--access-file`, `$WEIR_ACCESS_FILE` or
//! `.weir/access.json`; read from the same default by workers, managers and clients, so a local
//! cluster needs no flags. Across machines, copy it.

use std::path::{Path, PathBuf};

use rustls_pki_types::CertificateDer;
use serde::{Deserialize, Serialize};

use super::{NetError, tls};

#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct AccessFile {
    /// `quic://HOST:PORT`
    pub address: String,
    /// The scheduler's certificate (PEM), pinned by every peer.
    pub certificate: String,
    /// Presented by workers and worker managers.
    pub worker_token: String,
    /// Presented by clients.
    pub client_token: String,
}

pub fn default_path() -> PathBuf {
    std::env::var_os("WEIR_ACCESS_FILE")
        .map_or_else(|| PathBuf::from(".weir/access.json"), PathBuf::from)
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
