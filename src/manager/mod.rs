//! The worker manager: starts and stops the worker processes of one pool.
//!
//! Dynamic mode heartbeats its state to the scheduler and converges to the desired count the
//! scaling policy sends: it stops the (idle, already drained) workers named, and starts new
//! ones to fill up (a worker process it started is stopped only once named: it may be taking
//! tasks while a decision made before it registered is on its way); a worker that dies is
//! replaced (with a backoff when workers keep dying young). It never runs more workers than its
//! own cap allows, whatever it is asked. Fixed mode (`--fixed N`) keeps N workers alive the same
//! way and registers with the scheduler as a fixed pool (not scaled), except inside a unit of
//! the command backend (`--unit`), where the manager that started the unit reports its workers.
//! Either mode, stopped by SIGTERM or SIGINT, says goodbye to the scheduler and stops its
//! workers, except a Slurm manager that leaves its jobs running (`--on-stop leave`, its
//! default): it closes without a goodbye, and the next manager with its id adopts them.
//!
//! The convergence step every backend takes is pure, in [`crate::core::units`] (a worker
//! process is a unit of one); here are the shells that run it: `pool.rs` the process backend,
//! `command.rs` the command backend, `slurm/` the Slurm backend (its `commands.rs`: what it runs
//! of Slurm), `unit_log.rs` what they report of their units, `backend.rs` the choice between
//! them, `session.rs` the sessions with the scheduler.

mod backend;
pub mod command;
pub mod pace;
mod pool;
mod session;
pub mod slurm;
pub mod spawn;
mod unit_log;

use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use crate::clock::Millis;
use crate::net::NetError;
use crate::net::udp::{HostUdp, Udp};
use crate::proto::{EnvironmentDef, ManagerState};

pub use backend::Backend;
pub use pool::Pool;
pub use session::{run, run_dynamic, run_unit};

#[derive(Clone, Debug)]
pub struct Settings {
    pub id: String,
    pub worker_type: String,
    pub max_task_concurrency: u32,
    pub slots: u32,
    pub capabilities: Vec<(String, u64)>,
    /// The `--capabilities` text and `--env-plugin` values, passed on to every worker.
    pub worker_capabilities_flag: String,
    pub env_plugin_flags: Vec<String>,
    /// The conditions of `--env-plugin`, declared to the scheduler when registering.
    pub environments: Vec<EnvironmentDef>,
    /// `--fixed N`: keep N workers, not scaled.
    pub fixed: Option<u32>,
    pub worker_command: PathBuf,
    pub access_file: PathBuf,
    pub heartbeat_interval: Duration,
    /// Fixed mode inside a unit of the command backend: workers are named `ID-UNIT-N`.
    pub unit: Option<String>,
    /// Inside a unit with a walltime: when its workers leave (the allocation's end less
    /// `--leave-before`). Each worker is told (`--ends-in`), and the unit stops then.
    pub ends_at: Option<tokio::time::Instant>,
    /// Slurm backend: seconds before the walltime its units' workers leave (`--leave-before`).
    pub leave_before: Duration,
    /// How long each worker it starts may run tasks (Slurm: `--time-limit` less
    /// `--leave-before`), reported to the scheduler; `None`: no limit.
    pub usable: Option<Duration>,
    /// `--label KEY=VALUE,...`: reported to the scheduler (status, and the policy's snapshot).
    pub labels: Vec<(String, String)>,
    /// What it takes from the outside world.
    pub seams: Seams,
}

/// The manager's seams (see `docs/architecture.md`, "Seams"); [`Seams::real`] is the host's.
#[derive(Clone, Debug)]
pub struct Seams {
    /// The manager's clock: its backends' convergence step runs on its milliseconds
    /// ([`crate::core::units`]), its timers on its instants.
    pub clock: Millis,
    /// How it starts its worker processes (the process backend).
    pub spawner: Arc<dyn spawn::Spawner>,
    /// The sockets it connects to the scheduler from.
    pub udp: Arc<dyn Udp>,
    /// Where its workers' instance ids come from.
    pub instances: Instances,
}

/// Where a manager draws the instance id of each worker it starts (what tells its processes
/// apart from a twin's of the same names).
#[derive(Clone, Copy, Debug)]
pub enum Instances {
    /// From the system's random source: the host's.
    Random,
    /// A stream from this seed: a simulation, whose seed must replay.
    Seeded(u64),
}

impl Instances {
    /// The `n`th instance id (never 0: 0 says "not given").
    pub(crate) fn draw(self, n: u64) -> Result<u64, getrandom::Error> {
        let id = match self {
            Instances::Random => getrandom::u64()?,
            Instances::Seeded(seed) => {
                // SplitMix64's output step over seed + n.
                let mut z = seed.wrapping_add(n.wrapping_mul(0x9e37_79b9_7f4a_7c15));
                z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
                z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
                z ^ (z >> 31)
            }
        };
        Ok(id.max(1))
    }
}

impl Seams {
    /// The host's: tokio's clock (starting now), real processes, the host's sockets.
    pub fn real() -> Seams {
        Seams {
            clock: Millis::real(),
            spawner: Arc::new(spawn::ProcessSpawner),
            udp: Arc::new(HostUdp),
            instances: Instances::Random,
        }
    }
}

impl Settings {
    /// The heartbeat of a manager with these settings: its `workers` alive, those it saw
    /// `exited`, and no capacity while `backing_off` after a failure of its engine (so the
    /// waterfall spills past it).
    pub(super) fn report(
        &self,
        backing_off: bool,
        workers: Vec<String>,
        exited: Vec<String>,
    ) -> ManagerState {
        ManagerState {
            labels: self.labels.clone(),
            id: self.id.clone(),
            worker_type: self.worker_type.clone(),
            max_task_concurrency: if backing_off {
                0
            } else {
                self.max_task_concurrency
            },
            worker_slots: self.slots,
            capabilities: self.capabilities.clone(),
            workers,
            environments: self.environments.clone(),
            fixed: self.fixed,
            exited,
            backend: String::new(),
            units: Vec::new(),
            usable_ms: self
                .usable
                .map(|d| u64::try_from(d.as_millis()).unwrap_or(u64::MAX)),
            instances: Vec::new(),
            launch: Default::default(),
        }
    }

    /// Most workers its task cap allows: `cap / slots`, at least one when the cap allows any
    /// task (the policy's rule, `Manager::max_workers_for`).
    pub fn max_workers(&self) -> u32 {
        match self.max_task_concurrency {
            0 => 0,
            cap => (cap / self.slots.max(1)).max(1),
        }
    }
}

/// What stops a manager.
#[derive(Debug, thiserror::Error)]
pub enum ManagerError {
    #[error(transparent)]
    Net(#[from] NetError),
    /// A worker process that cannot be started (in a session, the session ends and is tried again).
    #[error("cannot start a worker ({}): {error}", command.display())]
    StartWorker {
        command: PathBuf,
        error: std::io::Error,
    },
}
