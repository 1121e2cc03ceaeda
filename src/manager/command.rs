//! The command backend: the manager adds and removes *units* of workers by running the
//! operator's commands (`kubectl scale`, `sbatch`/`scancel`, a shell script), and tracks them by
//! what registers with the scheduler.
//!
//! A unit runs `worker-manager --fixed {count} --id {manager_id} --unit {unit}` on the machines the
//! cluster engine gives it, so its workers register as `{manager_id}-{unit}-{n}`. A unit none of
//! whose workers registered within `--unit-timeout` is stopped and counts as a failure (all
//! those found in one poll as one). After a failure the manager backs off (1 s, doubling to
//! 60 s) and reports no capacity meanwhile, so the waterfall skips its tier until it recovers;
//! until a unit registers again it starts one at a time. At most `--max-pending` units are
//! started and not registered at once. Stopped by a signal, it runs the stop command of every
//! unit (it could not adopt them after a restart).

use std::process::ExitStatus;
use std::time::Duration;

use crate::core::units::{self, Backoff, Book, Failed, Why};
use crate::proto::ManagerState;

use super::Settings;
use super::unit_log::{self, UnitLog};

/// A failure of the backend: it counts, and the manager backs off.
#[derive(Debug, thiserror::Error)]
pub enum CommandError {
    #[error("cannot run `{command}`: {error}")]
    Spawn {
        command: String,
        error: std::io::Error,
    },
    #[error("`{command}` failed ({status}): {stderr}")]
    Failed {
        command: String,
        status: ExitStatus,
        stderr: String,
    },
    #[error("`{command}` did not finish in time")]
    TimedOut { command: String },
    #[error("`{command}` printed `{output}`, not what was expected")]
    Output { command: String, output: String },
    #[error("cannot write the unit's script: {error}")]
    Script { error: String },
    #[error("unit {unit} did not register within {timeout:?}")]
    Late { unit: String, timeout: Duration },
    #[error("unit {unit} ended before any of its workers registered")]
    Ended { unit: String },
}

/// The failures of one round (see [`crate::core::units::Backoff`]): logged, and one more
/// failure in a row if there are any and the manager is not backing off already.
pub(super) fn fail(backoff: &mut Backoff, errors: Vec<CommandError>, now: u64) {
    match backoff.fail(errors.len(), now) {
        Failed::Nothing => {}
        Failed::Same => {
            for error in &errors {
                tracing::warn!(%error, "backend failure while backing off: the same event");
            }
        }
        Failed::Round { failures, delay_ms } => {
            let delay = Duration::from_millis(delay_ms);
            let more = errors.len().saturating_sub(1);
            if let Some(first) = errors.first() {
                tracing::warn!(error = %first, more, failures, ?delay, "backend failure; backing off (no capacity meanwhile)");
            }
            for error in errors.iter().skip(1) {
                tracing::warn!(%error, "backend failure in the same round");
            }
        }
    }
}

/// Units waiting to start at once, by default (`--max-pending`).
pub const DEFAULT_MAX_PENDING: usize = 4;

#[derive(Clone, Debug)]
pub struct CommandBackend {
    /// Templates with `{count}`, `{worker_type}`, `{manager_id}`, `{address}`, `{access_file}`,
    /// `{unit}`.
    pub start: String,
    pub stop: String,
    /// Workers per unit.
    pub unit_size: u32,
    pub unit_timeout: Duration,
    /// Most units started and not registered yet at once.
    pub max_pending: usize,
    /// The scheduler's address, for `{address}`.
    pub address: String,
}

pub struct Units {
    pub(super) settings: Settings,
    backend: CommandBackend,
    book: Book,
    next: u64,
    backoff: Backoff,
    clock: crate::clock::Millis,
    /// The units it stopped, for its report.
    log: UnitLog,
}

impl Units {
    pub fn new(settings: Settings, backend: CommandBackend) -> Units {
        let book = Book::new(
            &settings.id,
            backend.unit_size,
            unit_log::millis(backend.unit_timeout),
            settings.max_workers(),
            backend.max_pending,
        );
        Units {
            clock: settings.seams.clock.clone(),
            settings,
            backend,
            book,
            next: 0,
            backoff: Backoff::default(),
            log: UnitLog::default(),
        }
    }

    fn expand(&self, template: &str, unit: &str) -> String {
        template
            .replace("{count}", &self.backend.unit_size.to_string())
            .replace("{worker_type}", &self.settings.worker_type)
            .replace("{manager_id}", &self.settings.id)
            .replace("{address}", &self.backend.address)
            .replace(
                "{access_file}",
                &self.settings.access_file.display().to_string(),
            )
            .replace("{unit}", unit)
    }

    async fn run(&self, template: &str, unit: &str) -> Result<(), CommandError> {
        let command = self.expand(template, unit);
        tracing::info!(%command, "running the backend command");
        let output = match tokio::process::Command::new("sh")
            .args(["-c", &command])
            .output()
            .await
        {
            Ok(output) => output,
            Err(error) => return Err(CommandError::Spawn { command, error }),
        };
        if output.status.success() {
            Ok(())
        } else {
            Err(CommandError::Failed {
                command,
                status: output.status,
                stderr: String::from_utf8_lossy(&output.stderr).trim().to_string(),
            })
        }
    }

    pub fn state(&self) -> ManagerState {
        // The command backend does not know when a unit ends: all of its workers are reported.
        let workers = self.book.workers(&[]);
        let now = self.clock.now();
        let mut state = self
            .settings
            .report(self.backoff.active(now), workers, Vec::new());
        state.backend = "command".into();
        state.launch = self.backoff.report(now);
        state.units = self.units(now);
        state
    }

    /// Its units for the report: one with a registered worker runs, the others are pending.
    fn units(&self, now: u64) -> Vec<crate::proto::UnitReport> {
        let live = unit_log::by_registration(&self.book.units, None, now);
        let (manager, size) = (&self.settings.id, self.backend.unit_size);
        self.log
            .report(live, |unit| units::names(manager, unit, size), now)
    }

    /// Move toward `desired` workers, in whole units. A failed command is not an error of the
    /// manager: it backs off (see [`CommandError`]).
    pub async fn apply(&mut self, desired: u32, stop: &[String], registered: &[String]) {
        let recovering = self.backoff.recovering();
        let now = self.clock.now();
        let step = self.book.step(now, desired, stop, registered, recovering);
        if !step.registered.is_empty() {
            self.backoff.reset();
        }
        for (unit, after) in &step.registered {
            let after = Duration::from_millis(*after);
            tracing::info!(%unit, ?after, "unit registered");
        }
        let mut failures = Vec::new();
        for unit in step.stop {
            self.run_stop(&unit.id).await;
            let said = unit_log::why(unit.why, self.book.timeout);
            self.log.ended(&unit.id, unit.since, said, self.clock.now());
            if unit.why == Why::Late {
                let timeout = self.backend.unit_timeout;
                failures.push(CommandError::Late {
                    unit: unit.id,
                    timeout,
                });
            }
        }
        fail(&mut self.backoff, failures, self.clock.now());
        // Too few: start units, unless backing off.
        for _ in 0..step.start {
            if self.backoff.active(self.clock.now()) {
                break;
            }
            self.next += 1;
            let unit = format!("u{}", self.next);
            match self.run(&self.backend.start.clone(), &unit).await {
                Ok(()) => {
                    tracing::info!(%unit, "unit started");
                    let unit = self.book.unit(unit, self.clock.now());
                    self.book.units.push(unit);
                }
                Err(error) => {
                    fail(&mut self.backoff, vec![error], self.clock.now());
                    break;
                }
            }
        }
    }

    /// Run the stop command of a unit already out of the book.
    async fn run_stop(&self, unit: &str) {
        if let Err(error) = self.run(&self.backend.stop.clone(), unit).await {
            tracing::warn!(%unit, %error, "stop command failed");
        }
    }

    pub async fn stop_all(&mut self) {
        for unit in std::mem::take(&mut self.book.units) {
            self.run_stop(&unit.id).await;
        }
    }
}
