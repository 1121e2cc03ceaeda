//! The Slurm backend: one batch job per unit of workers, submitted with `sbatch --parsable`,
//! tracked by job id with `squeue` and cancelled by id with `scancel`.
//!
//! Each job runs `worker-manager --fixed N --unit $SLURM_JOB_ID ...` on the node Slurm gives it,
//! so its workers register as `{manager_id}-{job_id}-{n}`: unique for as long as Slurm's job ids
//! are, across restarts of this manager. Every job carries the name `weir-{manager_id}`; a job of
//! that name this manager does not know (it restarted, or lost track) is adopted, not submitted
//! again. Each job asks for what its unit runs: one task of `--unit-size` x (the `cpu`
//! capability, else `--slots`) CPUs, and `--unit-size` x the `memory` capability when one is
//! given; an `--sbatch-arg` of the same kind wins over each.
//!
//! Each poll (every heartbeat interval) asks `squeue` for the jobs of this manager:
//! - a job no longer listed ended (scancel from outside, preemption, walltime, a node failure;
//!   one COMPLETING is still there, its workers stopping, and only those still registered are
//!   reported): it is forgotten and, if still wanted, replaced. One that ended before any of
//!   its workers registered is a failure;
//! - a job none of whose workers registered within `--unit-timeout` (a long queue wait, a held
//!   job) is cancelled and is a failure;
//! - a job whose workers the scheduler has all drained ends from inside: its batch step (the
//!   unit's manager) gets SIGTERM (`scancel --batch --signal=TERM`), stops its workers and exits
//!   0, so Slurm records it COMPLETED, not CANCELLED; one still running 20 s later is cancelled.
//!
//! The failures found in one poll count as one: the manager backs off (1 s, doubling to 60 s)
//! and reports no capacity, so the waterfall spills to the next tier until Slurm recovers; until
//! a unit comes up again it submits one job at a time. At most `--max-pending` jobs wait in
//! Slurm's queue at once. A job with a registered worker is cancelled only when the scheduler
//! has drained all of its workers.
//!
//! Stopped by a signal, the manager leaves its running jobs by default (`--on-stop leave`): their
//! workers keep their tasks, and the next manager with this id adopts them, as after a crash
//! (jobs still waiting in the queue hold no work, and are cancelled). It
//! does not say goodbye, so the scheduler keeps its workers, and dismisses the idle ones (their
//! units then end) only if no manager with this id is back within `--manager-forget-after`.
//! `--on-stop cancel` cancels every job instead (their running tasks are requeued).

mod commands;
mod parse;
mod report;
pub mod walltime;

use std::path::PathBuf;
use std::time::Duration;

use super::Settings;
use super::command::{self, CommandError};
use super::unit_log::{self, UnitLog};
use crate::core::units::{self, Backoff, Book, Unit, Why};
use crate::proto::ManagerState;

pub use parse::{Listed, parse_sbatch, parse_squeue, parse_time_left};

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
    /// Most jobs waiting in Slurm's queue at once (`--max-pending`).
    pub max_pending: usize,
    /// Stopped by a signal, leave the jobs running for the next manager (else cancel them).
    pub leave_on_stop: bool,
}

/// How long a unit told to end (SIGTERM to its batch step) may take before it is cancelled:
/// its manager waits up to 10 s for its workers.
const END_GRACE: Duration = Duration::from_secs(20);
/// How often `scancel` is run again for a job that is still listed as running.
const CANCEL_AGAIN: Duration = Duration::from_secs(10);

/// A job this manager stopped that Slurm still lists.
#[derive(Debug)]
struct Stopping {
    job: String,
    /// When it was last told to end (or cancelled), on the backend's clock.
    last: u64,
    /// Told to end from inside (SIGTERM to its batch step), not cancelled (yet).
    from_inside: bool,
}

/// The batch jobs of a Slurm-backed manager.
pub struct Jobs {
    pub(super) settings: Settings,
    slurm: SlurmBackend,
    /// Units by job id.
    book: Book,
    /// Jobs this manager stopped that Slurm still lists (`scancel` is run again while one is
    /// listed and not completing: a failed `scancel` must not leave a job running). Their
    /// workers still registered are reported alive (they are stopping, and say so themselves),
    /// and they are not adopted again.
    stopping: Vec<Stopping>,
    /// The workers the scheduler said last that it has registered.
    registered: Vec<String>,
    backoff: Backoff,
    clock: crate::clock::Millis,
    /// What the last successful `squeue` listed, and when (for the report).
    listed: (Vec<Listed>, u64),
    /// The jobs it cancelled or saw end, for the report.
    log: UnitLog,
}

impl Jobs {
    pub fn new(settings: Settings, slurm: SlurmBackend) -> Jobs {
        let book = Book::new(
            &settings.id,
            slurm.unit_size,
            unit_log::millis(slurm.unit_timeout),
            settings.max_workers(),
            slurm.max_pending,
        );
        Jobs {
            clock: settings.seams.clock.clone(),
            settings,
            slurm,
            book,
            stopping: Vec::new(),
            registered: Vec::new(),
            backoff: Backoff::default(),
            listed: (Vec::new(), 0),
            log: UnitLog::default(),
        }
    }

    pub fn state(&self) -> ManagerState {
        let mut workers = self.book.workers(&self.registered);
        for stopping in &self.stopping {
            workers.extend(
                self.book
                    .unit_workers(&stopping.job, true, &self.registered),
            );
        }
        let now = self.clock.now();
        let mut state = self
            .settings
            .report(self.backoff.active(now), workers, Vec::new());
        state.backend = "slurm".into();
        state.launch = self.backoff.report(now);
        state.units = self.units(now);
        state
    }

    /// Stopped by a signal: leave the jobs running (for the next manager with this id).
    pub fn leaves_on_stop(&self) -> bool {
        self.slurm.leave_on_stop
    }

    /// Stopped by a signal with `--on-stop leave`: the jobs that run are left to the next
    /// manager with this id; those still waiting in the queue hold no work and are cancelled,
    /// or one starting after the scheduler forgot this manager would have nobody to end it.
    ///
    /// Waiting is asked of Slurm now, not taken from the last poll: a unit whose job started
    /// (and whose workers took tasks) since then must not be cancelled. A job is cancelled only
    /// when `squeue` lists it `PENDING` and none of its workers is registered; when `squeue`
    /// fails, every job is left (the next manager adopts them, or the scheduler ends their
    /// workers after `--manager-forget-after`).
    pub async fn leave(&mut self) {
        let listed = match self.squeue().await {
            Ok(listed) => listed,
            Err(error) => {
                tracing::warn!(%error, "squeue failed: leaving every unit, the queued ones too");
                Vec::new()
            }
        };
        let registered = self.registered.clone();
        let queued = |unit: &Unit| {
            listed
                .iter()
                .any(|l| l.id == unit.id && l.state == "PENDING")
                && !unit.workers.iter().any(|w| registered.contains(w))
        };
        let (waiting, running): (Vec<Unit>, Vec<Unit>) =
            self.book.units.clone().into_iter().partition(queued);
        self.book.units.clear();
        for job in waiting {
            tracing::info!(job = %job.id, "cancelling a unit still waiting in the queue");
            self.scancel(&job.id).await;
        }
        let left: Vec<&str> = running.iter().map(|j| j.id.as_str()).collect();
        tracing::info!(
            jobs = ?left,
            "leaving its running units: the next manager with this id adopts them"
        );
    }

    /// Poll Slurm, then move toward `desired` workers in whole jobs. A failed command is not an
    /// error of the manager: it backs off.
    pub async fn apply(&mut self, desired: u32, stop: &[String], registered: &[String]) {
        self.registered = registered.to_vec();
        let Some(mut failures) = self.poll_round().await else {
            return;
        };
        let recovering = self.backoff.recovering();
        let now = self.clock.now();
        let step = self.book.step(now, desired, stop, registered, recovering);
        if !step.registered.is_empty() {
            // A job whose workers came up: failures in a row start again from zero.
            self.backoff.reset();
        }
        for (job, after) in &step.registered {
            let after = Duration::from_millis(*after);
            tracing::info!(job, ?after, "unit registered");
        }
        for unit in step.stop {
            let (job, why) = (unit.id, unit.why);
            let mut from_inside = why == Why::Drained;
            if from_inside {
                tracing::info!(job, "unit drained: telling it to end");
                // Not told: cancelled in the next rounds, as after a failed `scancel`.
                from_inside = self.end_from_inside(&job).await;
            } else {
                tracing::info!(job, ?why, "cancelling unit");
                self.scancel(&job).await;
            }
            self.stopping.push(Stopping {
                job: job.clone(),
                last: self.clock.now(),
                from_inside,
            });
            let said = unit_log::why(why, self.book.timeout);
            self.log.stopping(&job, unit.since, said);
            if why == Why::Late {
                let timeout = self.slurm.unit_timeout;
                failures.push(CommandError::Late { unit: job, timeout });
            }
        }
        // One failure for the round, however many jobs it found late or ended.
        command::fail(&mut self.backoff, failures, self.clock.now());
        for _ in 0..step.start {
            if self.backoff.active(self.clock.now()) {
                break;
            }
            match self.sbatch().await {
                Ok(id) => {
                    tracing::info!(job = %id, "unit submitted");
                    let unit = self.book.unit(id, self.clock.now());
                    self.book.units.push(unit);
                }
                Err(error) => {
                    command::fail(&mut self.backoff, vec![error], self.clock.now());
                    break;
                }
            }
        }
    }

    /// Ask Slurm which jobs of this manager it still has: forget the ones that ended, adopt the
    /// ones this manager does not know (it restarted). False when `squeue` failed: then nothing
    /// is taken for ended, and the manager backs off.
    pub async fn poll(&mut self) -> bool {
        match self.poll_round().await {
            Some(failures) => {
                command::fail(&mut self.backoff, failures, self.clock.now());
                true
            }
            None => false,
        }
    }

    /// [`Jobs::poll`], returning the jobs that ended before they registered (failures of this
    /// round); `None` when `squeue` failed (then the manager backs off).
    async fn poll_round(&mut self) -> Option<Vec<CommandError>> {
        match self.squeue().await {
            Ok(listed) => {
                let ended = self.track(&listed);
                self.cancel_again(&listed).await;
                self.listed = (listed, self.clock.now());
                Some(ended)
            }
            Err(error) => {
                command::fail(&mut self.backoff, vec![error], self.clock.now());
                None
            }
        }
    }

    /// Run `scancel` for stopped jobs Slurm still lists as not completing: one told to end from
    /// inside that still runs after [`END_GRACE`], and one cancelled again every
    /// [`CANCEL_AGAIN`] (the first `scancel` failed, or Slurm lost it).
    async fn cancel_again(&mut self, listed: &[Listed]) {
        let now = self.clock.now();
        let mut again = Vec::new();
        for stopping in &mut self.stopping {
            let running = listed
                .iter()
                .any(|l| l.id == stopping.job && l.state != "COMPLETING");
            let wait = match stopping.from_inside {
                true => END_GRACE,
                false => CANCEL_AGAIN,
            };
            if running && now.saturating_sub(stopping.last) >= unit_log::millis(wait) {
                stopping.last = now;
                stopping.from_inside = false;
                again.push(stopping.job.clone());
            }
        }
        for job in again {
            tracing::warn!(job, "a stopped unit still runs: cancelling it");
            self.scancel(&job).await;
        }
    }

    /// Forget jobs Slurm no longer lists; adopt jobs of this manager it does not know. A job
    /// that is COMPLETING is still listed, and so are its workers still registered: they are
    /// stopping, and each tells the scheduler so itself (its tasks are requeued without
    /// spending a retry); were they dropped from the heartbeat first, the scheduler would take
    /// them for dead. Returns the failures: jobs that ended before any worker registered.
    fn track(&mut self, listed: &[Listed]) -> Vec<CommandError> {
        let now = self.clock.now();
        for stopping in &self.stopping {
            if !listed.iter().any(|l| l.id == stopping.job) {
                self.log.gone(&stopping.job, now);
            }
        }
        self.stopping
            .retain(|s| listed.iter().any(|l| l.id == s.job));
        let engine: Vec<(String, units::Listed)> = listed
            .iter()
            .map(|l| (l.id.clone(), engine_state(&l.state)))
            .collect();
        let stopping: Vec<String> = self.stopping.iter().map(|s| s.job.clone()).collect();
        let seen = self.book.listed(now, &engine, &stopping);
        let mut ended_early = Vec::new();
        for job in seen.ended {
            tracing::warn!(job = %job.id, registered = job.registered, "unit ended; replacing it if still wanted");
            let last = self.listed.0.iter().find(|l| l.id == job.id);
            self.log
                .ended(&job.id, job.since, report::ended_why(last), now);
            if !job.registered {
                ended_early.push(CommandError::Ended { unit: job.id });
            }
        }
        for job in seen.requeued {
            tracing::warn!(job, "unit requeued by Slurm; waiting for it again");
        }
        for (job, state) in seen.adopted {
            tracing::info!(job, ?state, "adopted a unit of this manager");
        }
        ended_early
    }

    pub async fn stop_all(&mut self) {
        for job in std::mem::take(&mut self.book.units) {
            tracing::info!(job = %job.id, "cancelling unit");
            self.scancel(&job.id).await;
        }
        // Again for those stopped before: one whose `scancel` failed would outlive us.
        for stopping in std::mem::take(&mut self.stopping) {
            self.scancel(&stopping.job).await;
        }
    }
}

/// A job's `squeue` state as the pure step knows it.
fn engine_state(state: &str) -> units::Listed {
    match state {
        "PENDING" => units::Listed::Pending,
        "RUNNING" => units::Listed::Running,
        "COMPLETING" => units::Listed::Completing,
        _ => units::Listed::Other,
    }
}
