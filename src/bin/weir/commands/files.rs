//! Files the client sends to the scheduler: components and inputs.

use std::io::Read;
use std::path::Path;

use anyhow::{Context, Result, bail};
use weir::plugin::bundled;

/// A component from a file, or a bundled one by name (`square`, `mem_gt`) when no such file
/// exists.
pub(crate) fn component(file: &str) -> Result<Vec<u8>> {
    match bundled::by_name(file) {
        Some(bytes) if !Path::new(file).exists() => Ok(bytes.to_vec()),
        _ => read_limited(Path::new(file)),
    }
}

/// Read up to what one request can carry (a frame), and no further, so `/dev/zero` or a huge
/// file is an error at once rather than gigabytes in memory.
pub(crate) fn read_limited(path: &Path) -> Result<Vec<u8>> {
    let limit = weir::proto::MAX_FRAME as u64;
    let file =
        std::fs::File::open(path).with_context(|| format!("cannot read {}", path.display()))?;
    let mut bytes = Vec::new();
    file.take(limit + 1)
        .read_to_end(&mut bytes)
        .with_context(|| format!("cannot read {}", path.display()))?;
    if bytes.len() as u64 > limit {
        bail!(
            "{} is larger than the {} MiB one request can carry",
            path.display(),
            limit >> 20
        );
    }
    Ok(bytes)
}
