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
/// each failed round in a row to 60 s), so the waterfall spills to the next tier meanwhile.
/// A round is one poll: several units found late or ended in it are one failure, not several
/// (one event, such as a full queue or a down controller, fails them together); so are failures
/// found while already backing off (no unit was started since: they are of the same batch,
/// found a poll later because they were submitted a little later). Until a unit
/// comes up again it is `recovering`: units are started one at a time, not the whole batch.
#[derive(Debug, Default)]
pub struct Backoff {
    failures: u32,
    until: Option<Instant>,
}

impl Backoff {
    pub fn active(&self, now: Instant) -> bool {
        self.until.is_some_and(|until| now < until)
    }

    /// Failed since a unit last came up.
    pub fn recovering(&self) -> bool {
        self.failures > 0
    }

    /// The failures of one round: one more failure in a row if there are any.
    pub fn fail(&mut self, errors: Vec<CommandError>, now: Instant) {
        let Some(first) = errors.first() else {
            return;
        };
        if self.active(now) {
            for error in &errors {
                tracing::warn!(%error, "backend failure while backing off: the same event");
            }
            return;
        }
        self.failures += 1;
        let delay = Self::delay(self.failures);
        let more = errors.len() - 1;
        tracing::warn!(error = %first, more, failures = self.failures, ?delay, "backend failure; backing off (no capacity meanwhile)");
        for error in &errors[1..] {
            tracing::warn!(%error, "backend failure in the same round");
        }
        self.until = Some(now + delay);
    }

    /// The wait after `failures` failed rounds in a row: 1 s, doubling, at most 60 s.
    fn delay(failures: u32) -> Duration {
        Duration::from_secs(1 << failures.clamp(1, 7).saturating_sub(1))
            .min(Duration::from_secs(60))
    }

    /// A unit came up: failures in a row start again from zero.
    pub fn reset(&mut self) {
        self.failures = 0;
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
            backend.max_pending,
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
        // The command backend does not know when a unit ends: all of its workers are reported.
        let workers = self.book.workers(&[]);
        let mut state =
            self.settings
                .report(self.backoff.active(Instant::now()), workers, Vec::new());
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
        let recovering = self.backoff.recovering();
        let step = self
            .book
            .step(desired, stop, registered, Instant::now(), recovering);
        if !step.registered.is_empty() {
            self.backoff.reset();
        }
        for (unit, after) in &step.registered {
            tracing::info!(%unit, ?after, "unit registered");
        }
        let mut failures = Vec::new();
        for (unit, why) in step.stop {
            self.run_stop(&unit).await;
            let said = unit_log::why(why, self.backend.unit_timeout);
            let since = unit_log::since(&started, &unit);
            self.log.ended(&unit, since, said, Instant::now());
            if why == Why::Late {
                let timeout = self.backend.unit_timeout;
                failures.push(CommandError::Late { unit, timeout });
            }
        }
        self.backoff.fail(failures, Instant::now());
        // Too few: start units, unless backing off.
        for _ in 0..step.start {
            if self.backoff.active(Instant::now()) {
                break;
            }
            self.next += 1;
            let unit = format!("u{}", self.next);
            match self.run(&self.backend.start.clone(), &unit).await {
                Ok(()) => {
                    tracing::info!(%unit, "unit started");
                    self.book.units.push(Unit::new(unit, Instant::now()));
                }
                Err(error) => {
                    self.backoff.fail(vec![error], Instant::now());
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

#[cfg(test)]
mod tests {
    use super::*;

    fn late(unit: &str) -> CommandError {
        CommandError::Late {
            unit: unit.into(),
            timeout: Duration::from_secs(1),
        }
    }

    #[test]
    fn units_failing_in_one_round_count_once_and_rounds_in_a_row_double_the_wait() {
        let t0 = Instant::now();
        let mut backoff = Backoff::default();
        backoff.fail(Vec::new(), t0);
        assert!(!backoff.active(t0) && !backoff.recovering(), "no failure");
        // Four units late in the same poll: one failure, a 1 s wait.
        backoff.fail(vec![late("1"), late("2"), late("3"), late("4")], t0);
        assert!(backoff.active(t0 + Duration::from_millis(999)));
        assert!(!backoff.active(t0 + Duration::from_secs(1)));
        // Another found late a poll later, while backing off: the same event, no longer wait.
        backoff.fail(vec![late("5")], t0 + Duration::from_millis(200));
        assert!(!backoff.active(t0 + Duration::from_secs(1)));
        // The next round fails too: 2 s.
        let t1 = t0 + Duration::from_secs(1);
        backoff.fail(vec![late("5"), late("6")], t1);
        assert!(backoff.active(t1 + Duration::from_millis(1999)));
        assert!(!backoff.active(t1 + Duration::from_secs(2)));
        assert!(backoff.recovering(), "until a unit comes up");
        backoff.reset();
        assert!(!backoff.recovering());
        let t2 = t1 + Duration::from_secs(2);
        backoff.fail(vec![late("7")], t2);
        assert!(!backoff.active(t2 + Duration::from_secs(1)), "1 s again");
    }

    #[test]
    fn the_wait_is_capped_at_a_minute() {
        assert_eq!(Backoff::delay(1), Duration::from_secs(1));
        assert_eq!(Backoff::delay(3), Duration::from_secs(4));
        assert_eq!(Backoff::delay(40), Duration::from_secs(60));
    }
}
