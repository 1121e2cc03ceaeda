//! On-disk cache of compiled components.
//!
//! Compiling a large component (Python, JavaScript) takes seconds; loading its precompiled form
//! takes milliseconds. Entries are keyed by the SHA-256 of the component bytes and a hash of the
//! engine's compatibility (wasmtime version, compiler settings, CPU features), written atomically
//! (temporary file + rename) into a directory only this user can read, and carry a SHA-256 of
//! their payload that is checked before `Component::deserialize` trusts them. A stale or damaged
//! entry is recompiled and replaced. Only files this host wrote are ever deserialized: the cache
//! never takes precompiled code from a peer.

use std::fs;
use std::hash::{Hash, Hasher};
use std::io::Write;
use std::path::{Path, PathBuf};

use sha2::{Digest, Sha256};
use wasmtime::Engine;
use wasmtime::component::Component;

const MAGIC: &[u8; 8] = b"WEIRCW01";

/// Where compiled components are kept: `$WEIR_CACHE_DIR`, else `$XDG_CACHE_HOME/weir/components`,
/// else `$HOME/.cache/weir/components`.
pub fn default_dir() -> Option<PathBuf> {
    if let Some(dir) = std::env::var_os("WEIR_CACHE_DIR") {
        return Some(PathBuf::from(dir));
    }
    let base = std::env::var_os("XDG_CACHE_HOME")
        .map(PathBuf::from)
        .or_else(|| std::env::var_os("HOME").map(|h| PathBuf::from(h).join(".cache")))?;
    Some(base.join("weir").join("components"))
}

/// How a component was obtained, for `weir plugin inspect` and the logs.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Origin {
    /// Already loaded in this process.
    Memory,
    /// Deserialized from the disk cache.
    Disk,
    /// Compiled now.
    Compiled,
}

impl Origin {
    /// For people: `compiled`, `loaded from the compile cache`, `already loaded`.
    pub fn describe(self) -> &'static str {
        match self {
            Origin::Compiled => "compiled",
            Origin::Disk => "loaded from the compile cache",
            Origin::Memory => "already loaded",
        }
    }
}

/// Feeds `Hash` output into SHA-256 so the engine key is stable across processes.
struct ShaHasher(Sha256);

impl Hasher for ShaHasher {
    fn finish(&self) -> u64 {
        0
    }
    fn write(&mut self, bytes: &[u8]) {
        self.0.update(bytes);
    }
}

pub fn engine_key(engine: &Engine) -> String {
    let mut hasher = ShaHasher(Sha256::new());
    engine.precompile_compatibility_hash().hash(&mut hasher);
    hasher.0.update(env!("CARGO_PKG_VERSION").as_bytes());
    hex::encode(&hasher.0.finalize()[..12])
}

pub fn content_hash(bytes: &[u8]) -> [u8; 32] {
    Sha256::digest(bytes).into()
}

pub struct DiskCache {
    dir: PathBuf,
    engine_key: String,
}

impl DiskCache {
    pub fn new(dir: PathBuf, engine: &Engine) -> DiskCache {
        DiskCache {
            dir,
            engine_key: engine_key(engine),
        }
    }

    fn path(&self, hash: &[u8; 32]) -> PathBuf {
        self.dir
            .join(format!("{}-{}.cwasm", hex::encode(hash), self.engine_key))
    }

    /// The cached compiled form, if present and intact.
    pub fn load(&self, engine: &Engine, hash: &[u8; 32]) -> Option<Component> {
        let path = self.path(hash);
        let data = fs::read(&path).ok()?;
        let payload = match verify(&data) {
            Some(payload) => payload,
            None => {
                tracing::warn!(path = %path.display(), "damaged compiled-component cache entry; recompiling");
                let _ = fs::remove_file(&path);
                return None;
            }
        };
        // SAFETY: the payload was produced by `Engine::precompile_component` of an engine with
        // the same compatibility key (it is in the file name), written by this host into its
        // private cache directory, and its checksum matches: it is exactly what we serialized.
        match unsafe { Component::deserialize(engine, payload) } {
            Ok(component) => Some(component),
            Err(error) => {
                tracing::warn!(path = %path.display(), %error, "unusable cache entry; recompiling");
                let _ = fs::remove_file(&path);
                None
            }
        }
    }

    /// Store a precompiled component. Failures only cost a recompile later, so they are logged.
    pub fn store(&self, hash: &[u8; 32], precompiled: &[u8]) {
        if let Err(error) = self.try_store(hash, precompiled) {
            tracing::warn!(dir = %self.dir.display(), %error, "cannot write the compiled-component cache");
        }
    }

    fn try_store(&self, hash: &[u8; 32], precompiled: &[u8]) -> std::io::Result<()> {
        create_private_dir(&self.dir)?;
        let path = self.path(hash);
        let tmp = path.with_extension(format!("tmp{}", std::process::id()));
        let mut file = fs::File::create(&tmp)?;
        file.write_all(MAGIC)?;
        file.write_all(&Sha256::digest(precompiled))?;
        file.write_all(precompiled)?;
        file.sync_all()?;
        fs::rename(&tmp, &path)
    }
}

fn verify(data: &[u8]) -> Option<&[u8]> {
    let rest = data.strip_prefix(MAGIC)?;
    if rest.len() < 32 {
        return None;
    }
    let (sum, payload) = rest.split_at(32);
    (Sha256::digest(payload).as_slice() == sum).then_some(payload)
}

fn create_private_dir(dir: &Path) -> std::io::Result<()> {
    #[cfg(unix)]
    {
        use std::os::unix::fs::DirBuilderExt;
        fs::DirBuilder::new()
            .recursive(true)
            .mode(0o700)
            .create(dir)
    }
    #[cfg(not(unix))]
    {
        fs::create_dir_all(dir)
    }
}
