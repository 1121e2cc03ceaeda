//! The `weir` commands, one file per family. Each produces typed values and hands them to the
//! chosen [`Output`](crate::output::Output).

pub(crate) mod bench;
pub(crate) mod demo;
pub(crate) mod env;
pub(crate) mod explain;
pub(crate) mod files;
pub(crate) mod jobs;
pub(crate) mod local;
pub(crate) mod managers;
#[cfg(feature = "plot")]
pub(crate) mod plot;
pub(crate) mod plugin;
pub(crate) mod policy;
pub(crate) mod results;
pub(crate) mod status;
pub(crate) mod submit;
#[cfg(feature = "tui")]
pub(crate) mod top;
pub(crate) mod wait;
pub(crate) mod workers;
pub(crate) mod workload;
