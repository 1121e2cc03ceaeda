//! The wasmtime host: loads, checks, caches and runs plugin components.
//!
//! - One [`PluginHost`] (one `Engine`) per process; an epoch thread ticks every [`EPOCH_TICK`]
//!   while calls run, so every call can be given a deadline (`epoch.rs`, `host.rs`).
//! - [`PluginHost::load`] checks the bytes are a component of the expected [`World`] and compiles
//!   it once: in memory per process, on disk across processes ([`cache`]); `load.rs`.
//! - [`sandbox`]: WASI that grants nothing, the summed memory cap, deadlines, output capture, and
//!   the mapping of traps to [`PluginError`].
//! - [`policy`], [`condition`], [`task`]: one typed wrapper per world.

mod bindings;
pub mod bundled;
pub mod cache;
pub mod condition;
mod epoch;
mod error;
pub mod facts;
mod host;
mod load;
pub mod policy;
mod sandbox;
pub mod task;

use std::fmt;
use std::time::Duration;

pub use cache::Origin;
pub use condition::ConditionPlugin;
pub use error::PluginError;
pub use facts::HostFacts;
pub use host::{Inspection, PluginHost};
pub use load::Loaded;

pub use policy::PolicyPlugin;
pub use sandbox::StopCheck;
pub use task::TaskPlugin;

/// Granularity of deadlines.
pub const EPOCH_TICK: Duration = Duration::from_millis(10);

/// The three kinds of plugin, by the WIT world they implement.
#[derive(Clone, Copy, Debug, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "lowercase")]
pub enum World {
    Environment,
    Policy,
    Task,
}

impl World {
    pub const ALL: [World; 3] = [World::Environment, World::Policy, World::Task];

    pub fn name(self) -> &'static str {
        match self {
            World::Environment => "environment",
            World::Policy => "policy",
            World::Task => "task",
        }
    }

    /// The interface a component of this world exports, in the newest version the host runs.
    pub fn export_name(self) -> &'static str {
        EXPORTS
            .iter()
            .find(|(world, _, _)| *world == self)
            .map_or("", |(_, _, name)| name)
    }

    /// The world and version of the first weir interface among a component's exports.
    fn of_exports<'a>(mut exports: impl Iterator<Item = &'a str>) -> Option<(World, Version)> {
        exports.find_map(|name| {
            EXPORTS
                .iter()
                .find(|(_, _, export)| *export == name)
                .map(|(world, version, _)| (*world, *version))
        })
    }
}

/// A version of `weir:plugin` the host has bindings for (`bindings.rs`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, serde::Serialize)]
pub enum Version {
    /// `wit/weir.wit`: every world.
    #[serde(rename = "0.1.0")]
    V0_1,
    /// `wit/0.2.0/weir.wit`: the `policy` world.
    #[serde(rename = "0.2.0")]
    V0_2,
}

impl Version {
    pub fn as_str(self) -> &'static str {
        match self {
            Version::V0_1 => "0.1.0",
            Version::V0_2 => "0.2.0",
        }
    }
}

impl fmt::Display for Version {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "weir:plugin@{}", self.as_str())
    }
}

/// What a component of each world exports in each version the host runs, newest first.
const EXPORTS: [(World, Version, &str); 4] = [
    (
        World::Environment,
        Version::V0_1,
        "weir:plugin/condition@0.1.0",
    ),
    (World::Policy, Version::V0_2, "weir:plugin/scaling@0.2.0"),
    (World::Policy, Version::V0_1, "weir:plugin/scaling@0.1.0"),
    (World::Task, Version::V0_1, "weir:plugin/runner@0.1.0"),
];

impl fmt::Display for World {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// Resource limits of every call into a plugin.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Limits {
    /// Wall-clock deadline of one call (epoch interruption).
    pub deadline: Duration,
    /// Cap on the sum of all the component's linear memories.
    pub memory_bytes: u64,
    /// Cap on what the guest may print to each of stdout and stderr over an instance's life.
    pub output_bytes: usize,
}

impl Default for Limits {
    fn default() -> Limits {
        Limits {
            deadline: Duration::from_secs(1),
            memory_bytes: 64 << 20,
            output_bytes: 1 << 20,
        }
    }
}
