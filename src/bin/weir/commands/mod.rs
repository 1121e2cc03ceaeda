//! The `weir` commands, one file per family. Each produces typed values and hands them to the
//! chosen [`Output`](crate::output::Output).

pub mod bench;
pub mod demo;
pub mod env;
pub mod explain;
pub mod files;
pub mod jobs;
pub mod local;
pub mod managers;
pub mod plot;
pub mod plugin;
pub mod policy;
pub mod results;
pub mod status;
pub mod submit;
pub mod top;
pub mod wait;
pub mod workers;
