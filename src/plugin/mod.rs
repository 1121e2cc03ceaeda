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

    /// The interface a component of this world exports.
    pub fn export_name(self) -> &'static str {
        match self {
            World::Environment => "weir:plugin/condition@0.1.0",
            World::Policy => "weir:plugin/scaling@0.1.0",
            World::Task => "weir:plugin/runner@0.1.0",
        }
    }

    fn of_exports<'a>(mut exports: impl Iterator<Item = &'a str>) -> Option<World> {
        exports.find_map(|name| World::ALL.into_iter().find(|w| w.export_name() == name))
    }
}

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
