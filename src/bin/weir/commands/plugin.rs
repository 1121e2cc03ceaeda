//! `weir plugin inspect`: which world a component implements, its imports and exports, size and
//! load time.

use std::path::Path;

use anyhow::Result;
use weir::plugin::PluginHost;

use crate::output::{Output, PluginInfo};

pub(crate) fn inspect(host: &PluginHost, file: &Path, output: &dyn Output) -> Result<()> {
    let loaded = host.load_file(file, None)?;
    output.plugin(&PluginInfo {
        file: file.to_path_buf(),
        inspection: host.inspect(&loaded),
    });
    Ok(())
}
