//! The Slurm backend: one batch job per unit of workers, submitted with `sbatch --parsable`,
//! tracked by job id with `squeue` and cancelled by id with `scancel`.
//!
//! Each job runs `worker-manager --fixed N --unit $SLURM_JOB_ID ...` on the node Slurm gives it,
//! so its workers register as `{manager_id}-{job_id}-{n}`: unique for as long as Slurm's job ids
//! are, across restarts of this manager. Every job carries the name `weir-{manager_id}`; a job of
//! that name this manager does not know (it restarted, or lost track) is adopted, not submitted
//! again.
//!
//! Each poll (every heartbeat interval) asks `squeue` for the jobs of this manager:
//! - a job no longer listed ended (scancel from outside, preemption, walltime, a node failure;
//!   one COMPLETING is still there, its workers stopping):
//!   it is forgotten and, if still wanted, replaced in the same poll. One that ended before any
//!   of its workers registered counts as a failure;
//! - a job none of whose workers registered within `--unit-timeout` (a long queue wait, a held
//!   job) is cancelled and counts as a failure.
//!
//! After a failure the manager backs off (1 s, doubling to 60 s) and reports no capacity, so the
//! waterfall spills to the next tier until Slurm recovers. A job with a registered worker is
//! cancelled only when the scheduler has drained all of its workers.

mod commands;
mod report;

use std::path::PathBuf;
use std::time::{Duration, Instant};

use super::Settings;
use super::command::{Backoff, CommandError};
use super::unit_log::{self, UnitLog};
use super::units::{self, Book, Unit, Why};
use crate::proto::ManagerState;

pub use commands::{Listed, parse_sbatch, parse_squeue, parse_time_left};

/// The `sbatch` knobs of `worker-manager --backend slurm`.
#[derive(Clone, Debug, Default)]
pub struct SlurmBackend {
    /// `--partition`.
    pub partition: Option<String>,
    /// `--time` in minutes: the walltime of each job.
    pub time_limit: Option<u32>,
    pub account: Option<String>,
    pub qos: Option<String>,
    /// More `sbatch` arguments, passed as given (`--constraint=...`, `--mem=...`).
    pub sbatch_args: Vec<String>,
    /// Workers per job.
    pub unit_size: u32,
    pub unit_timeout: Duration,
    /// Where each job's own log goes (`sbatch --output`; `%j` is the job id).
    pub job_output: String,
    /// The `worker-manager` the job runs (this executable, on a shared file system).
    pub manager_command: PathBuf,
}

/// The batch jobs of a Slurm-backed manager.
pub struct Jobs {
    pub(super) settings: Settings,
    slurm: SlurmBackend,
    /// Units by job id.
    book: Book,
    /// Jobs this manager cancelled that Slurm still lists, and when `scancel` was last run for
    /// each (it is run again while one is listed and not completing: a failed `scancel` must
    /// not leave a job running). Their workers are still reported
    /// alive (they are stopping, and say so themselves), and they are not adopted again.
    cancelled: Vec<(String, Instant)>,
    backoff: Backoff,
    /// What the last successful `squeue` listed, and when (for the report).
    listed: (Vec<Listed>, Instant),
    /// The jobs it cancelled or saw end, for the report.
    log: UnitLog,
}

impl Jobs {
    pub fn new(settings: Settings, slurm: SlurmBackend) -> Jobs {
        let book = Book::new(
            &settings.id,
            slurm.unit_size,
            slurm.unit_timeout,
            settings.max_workers(),
        );
        Jobs {
            settings,
            slurm,
            book,
            cancelled: Vec::new(),
            backoff: Backoff::default(),
            listed: (Vec::new(), Instant::now()),
            log: UnitLog::default(),
        }
    }

    pub fn state(&self) -> ManagerState {
        let mut workers = self.book.workers();
        for (job, _) in &self.cancelled {
            workers.extend(units::names(&self.settings.id, job, self.slurm.unit_size));
        }
        let mut state = self
            .settings
            .report(self.backoff.active(), workers, Vec::new());
        state.backend = "slurm".into();
        state.units = self.units(Instant::now());
        state
    }

    /// Poll Slurm, then move toward `desired` workers in whole jobs. A failed command is not an
    /// error of the manager: it backs off.
    pub async fn apply(&mut self, desired: u32, stop: &[String], registered: &[String]) {
        if !self.poll().await {
            return;
        }
        let started = unit_log::started(&self.book);
        let step = self.book.step(desired, stop, registered, Instant::now());
        if !step.registered.is_empty() {
            // A job whose workers came up: failures in a row start again from zero.
            self.backoff.reset();
        }
        for (job, after) in &step.registered {
            tracing::info!(job, ?after, "unit registered");
        }
        for (job, why) in step.stop {
            tracing::info!(job, ?why, "cancelling unit");
            self.scancel(&job).await;
            self.cancelled.push((job.clone(), Instant::now()));
            let said = unit_log::why(why, self.slurm.unit_timeout);
            let since = unit_log::since(&started, &job);
            self.log.stopping(&job, since, said);
            if why == Why::Late {
                let timeout = self.slurm.unit_timeout;
                self.backoff
                    .fail(&CommandError::Late { unit: job, timeout });
            }
        }
        for _ in 0..step.start {
            if self.backoff.active() {
                break;
            }
            match self.sbatch().await {
                Ok(id) => {
                    tracing::info!(job = %id, "unit submitted");
                    self.book.units.push(Unit {
                        id,
                        since: Instant::now(),
                        registered: false,
                        running: false,
                    });
                }
                Err(error) => {
                    self.backoff.fail(&error);
                    break;
                }
            }
        }
    }

    /// Ask Slurm which jobs of this manager it still has: forget the ones that ended, adopt the
    /// ones this manager does not know (it restarted). False when `squeue` failed: then nothing
    /// is taken for ended, and the manager backs off.
    pub async fn poll(&mut self) -> bool {
        match self.squeue().await {
            Ok(listed) => {
                self.track(&listed);
                self.cancel_again(&listed).await;
                self.listed = (listed, Instant::now());
                true
            }
            Err(error) => {
                self.backoff.fail(&error);
                false
            }
        }
    }

    /// Run `scancel` again for cancelled jobs Slurm still lists as not completing, at most every
    /// 10 s each (the first one failed, or Slurm lost it).
    async fn cancel_again(&mut self, listed: &[Listed]) {
        let now = Instant::now();
        let mut again = Vec::new();
        for (job, last) in &mut self.cancelled {
            let running = listed
                .iter()
                .any(|l| l.id == *job && l.state != "COMPLETING");
            if running && now.duration_since(*last) >= Duration::from_secs(10) {
                *last = now;
                again.push(job.clone());
            }
        }
        for job in again {
            tracing::warn!(job, "a cancelled unit still runs: cancelling it again");
            self.scancel(&job).await;
        }
    }

    /// Forget jobs Slurm no longer lists; adopt jobs of this manager it does not know. A job
    /// that is COMPLETING is still listed, and so are its workers: they are stopping, and each
    /// tells the scheduler so itself (its tasks are requeued without spending a retry); were
    /// they dropped from the heartbeat first, the scheduler would take them for dead.
    fn track(&mut self, listed: &[Listed]) {
        let now = Instant::now();
        for (job, _) in &self.cancelled {
            if !listed.iter().any(|l| l.id == *job) {
                self.log.gone(job, now);
            }
        }
        self.cancelled
            .retain(|(job, _)| listed.iter().any(|l| l.id == *job));
        let mut ended_early = Vec::new();
        self.book.units.retain_mut(|job| {
            let Some(l) = listed.iter().find(|l| l.id == job.id) else {
                tracing::warn!(job = %job.id, registered = job.registered, "unit ended; replacing it if still wanted");
                if !job.registered {
                    ended_early.push(job.id.clone());
                }
                let last = self.listed.0.iter().find(|l| l.id == job.id);
                self.log
                    .ended(&job.id, job.since, report::ended_why(last), now);
                return false;
            };
            if l.state == "PENDING" && (job.registered || job.running) {
                // Requeued by Slurm (a failed node, a preemption with requeue): it starts over.
                tracing::warn!(job = %job.id, "unit requeued by Slurm; waiting for it again");
                job.registered = false;
                job.since = Instant::now();
            }
            job.running = l.state == "RUNNING";
            true
        });
        for job in ended_early {
            self.backoff.fail(&CommandError::Ended { unit: job });
        }
        for l in listed {
            let known = self.book.units.iter().any(|j| j.id == l.id)
                || self.cancelled.iter().any(|(job, _)| *job == l.id);
            if l.state != "COMPLETING" && !known {
                tracing::info!(job = %l.id, state = %l.state, "adopted a unit of this manager");
                // A running job may have busy workers (not registered again yet, after a
                // restart of the scheduler too): taken as registered, it is cancelled only
                // once the scheduler has drained its workers, never as "not started".
                self.book.units.push(Unit {
                    id: l.id.clone(),
                    since: Instant::now(),
                    registered: l.state == "RUNNING",
                    running: l.state == "RUNNING",
                });
            }
        }
    }

    pub async fn stop_all(&mut self) {
        for job in std::mem::take(&mut self.book.units) {
            tracing::info!(job = %job.id, "cancelling unit");
            self.scancel(&job.id).await;
        }
        // Again for those cancelled before: one whose `scancel` failed would outlive us.
        for (job, _) in std::mem::take(&mut self.cancelled) {
            self.scancel(&job).await;
        }
    }
}
