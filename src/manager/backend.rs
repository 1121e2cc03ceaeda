//! How a manager gets workers: processes of its own ([`Pool`]), units through the operator's
//! commands ([`command::Units`]), or Slurm batch jobs ([`slurm::Jobs`]).

use super::{ManagerError, Pool, Settings, command, slurm};
use crate::proto::ManagerState;

/// How a dynamic manager gets workers: processes of its own, or units through commands.
pub enum Backend {
    Process(Pool),
    Command(command::Units),
    Slurm(slurm::Jobs),
}

impl Backend {
    pub(super) fn settings(&self) -> &Settings {
        match self {
            Backend::Process(pool) => &pool.settings,
            Backend::Command(units) => &units.settings,
            Backend::Slurm(jobs) => &jobs.settings,
        }
    }

    pub(super) fn state(&self) -> ManagerState {
        match self {
            Backend::Process(pool) => pool.state(),
            Backend::Command(units) => units.state(),
            Backend::Slurm(jobs) => jobs.state(),
        }
    }

    /// The workers in a stop that are this manager's processes: a process pool leaves out a
    /// name whose process here is not the one the scheduler named (a twin's worker of the
    /// name registered, this one may be busy). Units (command, Slurm) are stopped by name.
    pub(super) fn stops_of_mine(
        &self,
        stop: Vec<String>,
        instances: &[(String, u64)],
    ) -> Vec<String> {
        match self {
            Backend::Process(pool) => stop
                .into_iter()
                .filter(|name| {
                    let named = instances.iter().find(|(n, _)| n == name).map(|(_, i)| *i);
                    let kept = named.is_none_or(|instance| pool.runs_instance(name, instance));
                    if !kept {
                        tracing::warn!(worker = %name, "not stopped: the scheduler named another process of this name (two managers of one id?)");
                    }
                    kept
                })
                .collect(),
            Backend::Command(_) | Backend::Slurm(_) => stop,
        }
    }

    pub(super) async fn apply(
        &mut self,
        desired: u32,
        stop: &[String],
        registered: &[String],
    ) -> Result<(), ManagerError> {
        match self {
            Backend::Process(pool) => pool.converge(desired, stop, registered),
            Backend::Command(units) => {
                units.apply(desired, stop, registered).await;
                Ok(())
            }
            Backend::Slurm(jobs) => {
                jobs.apply(desired, stop, registered).await;
                Ok(())
            }
        }
    }

    /// Stopped by a signal, it leaves its workers running (`--on-stop leave`, Slurm only: the
    /// next manager with its id adopts its jobs). The process and command backends cannot
    /// adopt what they leave, so they always stop their workers.
    pub(super) fn leaves_on_stop(&self) -> bool {
        match self {
            Backend::Slurm(jobs) => jobs.leaves_on_stop(),
            Backend::Process(_) | Backend::Command(_) => false,
        }
    }

    /// Stopped by a signal, leaving its workers running ([`Backend::leaves_on_stop`]).
    pub(super) async fn leave(&mut self) {
        if let Backend::Slurm(jobs) = self {
            jobs.leave().await;
        }
    }

    pub(super) async fn stop_all(&mut self) {
        match self {
            Backend::Process(pool) => pool.stop_all().await,
            Backend::Command(units) => units.stop_all().await,
            Backend::Slurm(jobs) => jobs.stop_all().await,
        }
    }
}
