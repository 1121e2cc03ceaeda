//! The command backend: the manager adds and removes *units* of workers by running the
//! operator's commands (`kubectl scale`, `sbatch`/`scancel`, a shell script), and tracks them by
//! what registers with the scheduler.
//!
//! A unit runs `worker-manager --fixed {count} --id {manager_id} --unit {unit}` on the machines the
//! cluster engine gives it, so its workers register as `{manager_id}-{unit}-{n}`. A unit none of
//! whose workers registered within `--unit-timeout` is stopped and counts as a failure. After a
//! failure the manager backs off (1 s, doubling to 60 s) and reports no capacity meanwhile, so
//! the waterfall skips its tier until it recovers.

use std::process::ExitStatus;
use std::time::{Duration, Instant};

use crate::proto::ManagerState;

use super::Settings;
use super::unit_log::{self, UnitLog};
use super::units::{self, Book, Unit, Why};

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

/// After a failure of the backend: no capacity and no new unit for a while (1 s, doubling with
/// each failure in a row to 60 s), so the waterfall spills to the next tier meanwhile.
#[derive(Debug, Default)]
pub struct Backoff {
    failures: u32,
    until: Option<Instant>,
}

impl Backoff {
    pub fn active(&self) -> bool {
        self.until.is_some_and(|until| Instant::now() < until)
    }

    pub fn fail(&mut self, error: &CommandError) {
        self.failures += 1;
        let delay = Duration::from_secs(1 << self.failures.min(7).saturating_sub(1))
            .min(Duration::from_secs(60));
        tracing::warn!(%error, failures = self.failures, ?delay, "backend failure; backing off (no capacity meanwhile)");
        self.until = Some(Instant::now() + delay);
    }

    /// A unit started: failures in a row start again from zero.
    pub fn reset(&mut self) {
        self.failures = 0;
    }
}

#[derive(Clone, Debug)]
pub struct CommandBackend {
    /// Templates with `{count}`, `{worker_type}`, `{manager_id}`, `{address}`, `{access_file}`,
    /// `{unit}`.
    pub start: String,
    pub stop: String,
    /// Workers per unit.
    pub unit_size: u32,
    pub unit_timeout: Duration,
    /// The scheduler's address, for `{address}`.
    pub address: String,
}

pub struct Units {
    pub(super) settings: Settings,
    backend: CommandBackend,
    book: Book,
    next: u64,
    backoff: Backoff,
    /// The units it stopped, for its report.
    log: UnitLog,
}

impl Units {
    pub fn new(settings: Settings, backend: CommandBackend) -> Units {
        let book = Book::new(
            &settings.id,
            backend.unit_size,
            backend.unit_timeout,
            settings.max_workers(),
        );
        Units {
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
        let workers = self.book.workers();
        let mut state = self
            .settings
            .report(self.backoff.active(), workers, Vec::new());
        state.backend = "command".into();
        state.units = self.units(Instant::now());
        state
    }

    /// Its units for the report: one with a registered worker runs, the others are pending.
    fn units(&self, now: Instant) -> Vec<crate::proto::UnitReport> {
        use crate::proto::UnitState;
        let live = self
            .book
            .units
            .iter()
            .map(|unit| {
                let state = match unit.registered {
                    true => UnitState::Running,
                    false => UnitState::Pending,
                };
                unit_log::live(&self.book, unit, (state, None, None), now)
            })
            .collect();
        let (manager, size) = (&self.settings.id, self.backend.unit_size);
        self.log
            .report(live, |unit| units::names(manager, unit, size), now)
    }

    /// Move toward `desired` workers, in whole units. A failed command is not an error of the
    /// manager: it backs off (see [`CommandError`]).
    pub async fn apply(&mut self, desired: u32, stop: &[String], registered: &[String]) {
        let started = unit_log::started(&self.book);
        let step = self.book.step(desired, stop, registered, Instant::now());
        for (unit, after) in &step.registered {
            tracing::info!(%unit, ?after, "unit registered");
        }
        for (unit, why) in step.stop {
            self.run_stop(&unit).await;
            let said = unit_log::why(why, self.backend.unit_timeout);
            let since = unit_log::since(&started, &unit);
            self.log.ended(&unit, since, said, Instant::now());
            if why == Why::Late {
                let timeout = self.backend.unit_timeout;
                self.backoff.fail(&CommandError::Late { unit, timeout });
            }
        }
        // Too few: start units, unless backing off.
        for _ in 0..step.start {
            if self.backoff.active() {
                break;
            }
            self.next += 1;
            let unit = format!("u{}", self.next);
            match self.run(&self.backend.start.clone(), &unit).await {
                Ok(()) => {
                    tracing::info!(%unit, "unit started");
                    self.book.units.push(Unit {
                        id: unit,
                        since: Instant::now(),
                        registered: false,
                        running: false,
                    });
                    self.backoff.reset();
                }
                Err(error) => {
                    self.backoff.fail(&error);
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
