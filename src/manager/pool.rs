//! The process backend: the manager's own worker processes, started, stopped, reaped and
//! replaced (with a backoff when they keep dying young). Each process is a unit of one worker
//! in the pure convergence step ([`crate::core::units::Book::processes`]).

use std::time::Duration;

use super::spawn::Process;
use super::unit_log::{self, UnitLog};
use super::{ManagerError, Settings};
use crate::core::units::{Book, Restarts, Unit, Why};
use crate::proto::ManagerState;

/// The manager's worker processes; kept across reconnections to the scheduler.
pub struct Pool {
    pub(super) settings: Settings,
    /// Alive worker processes, by name, each with the instance id it was given (their units,
    /// oldest first, are in `book`).
    children: Vec<(String, u64, Box<dyn Process>)>,
    /// Workers sent SIGTERM, until they exit. Still reported alive: the scheduler hears from
    /// each itself that it stops (its tasks killed first), and takes a report of it exited as
    /// proof that the process is gone, so that report waits for the exit (`reap`).
    stopping: Vec<(String, u64, Box<dyn Process>)>,
    /// Each alive worker as a unit of one, running from its start: when it started, and
    /// whether the scheduler has ever said it registered (in any session). It is stopped only
    /// when named (drained), never as "not registered yet": it may be registering and taking
    /// tasks right now, and after a scheduler restart it is busy with tasks it has not claimed
    /// yet.
    book: Book,
    clock: crate::clock::Millis,
    next: u64,
    /// Workers started, ever (the instance ids' stream position).
    started: u64,
    /// The last workers that exited or were stopped, and their instances, newest last
    /// (reported to the scheduler).
    exited: std::collections::VecDeque<(String, u64)>,
    /// A worker exited because the scheduler dismissed it (its dynamic manager is gone): inside
    /// a unit, the unit ends too.
    pub(super) dismissed: bool,
    /// Workers that died young in a row, and when (on `clock`) starting is allowed again.
    restarts: Restarts,
    /// Its workers that exited or were stopped, and why: each worker is a unit of its own in
    /// the report.
    log: UnitLog,
}

impl Pool {
    pub fn new(settings: Settings) -> Pool {
        let max_workers = settings.fixed.unwrap_or_else(|| settings.max_workers());
        Pool {
            book: Book::processes(&settings.id, max_workers),
            clock: settings.seams.clock.clone(),
            settings,
            children: Vec::new(),
            stopping: Vec::new(),
            next: 0,
            started: 0,
            exited: std::collections::VecDeque::new(),
            dismissed: false,
            restarts: Restarts::default(),
            log: UnitLog::default(),
        }
    }

    fn start(&mut self) -> Result<String, ManagerError> {
        let s = &self.settings;
        let name = match &s.unit {
            // Inside a unit the names are the unit's N (what the manager that started it
            // expects): a worker that died is replaced under its name.
            Some(unit) => (1..)
                .map(|n| format!("{}-{unit}-{n}", s.id))
                .find(|name| !self.children.iter().any(|(n, _, _)| n == name))
                .unwrap_or_default(),
            None => {
                self.next += 1;
                format!("{}-{}", s.id, self.next)
            }
        };
        // Its instance is ours to say: a report of it gone then names this process, not
        // another of its name (a twin manager's, started with our id, names its workers as we do).
        self.started += 1;
        let instance =
            (s.seams.instances.draw(self.started)).map_err(|e| ManagerError::StartWorker {
                command: s.worker_command.clone(),
                error: std::io::Error::other(format!("cannot draw an instance id: {e}")),
            })?;
        let mut args: Vec<std::ffi::OsString> = vec![
            "--access-file".into(),
            s.access_file.clone().into(),
            "--slots".into(),
            s.slots.to_string().into(),
            "--worker-type".into(),
            (&s.worker_type).into(),
            "--manager".into(),
            (&s.id).into(),
            "--name".into(),
            (&name).into(),
            "--instance".into(),
            instance.to_string().into(),
        ];
        if !s.worker_capabilities_flag.is_empty() {
            args.extend([
                "--capabilities".into(),
                (&s.worker_capabilities_flag).into(),
            ]);
        }
        for env in &s.env_plugin_flags {
            args.extend(["--env-plugin".into(), env.into()]);
        }
        if let Some(end) = s.ends_at {
            let left = end.saturating_duration_since(self.clock.instant());
            args.extend([
                "--ends-in".into(),
                format!("{:.3}", left.as_secs_f64()).into(),
            ]);
        }
        let child = (s.seams.spawner.spawn(&s.worker_command, &args, &[])).map_err(|error| {
            ManagerError::StartWorker {
                command: s.worker_command.clone(),
                error,
            }
        })?;
        tracing::info!(worker = %name, "worker started");
        self.children.push((name.clone(), instance, child));
        // A started process runs: its worker may be registering right now, and taking tasks,
        // while a decision made before it registered is on its way here, so it is never
        // stopped as one too many, only once the scheduler drained and named it (the Slurm
        // backend's rule for a running job). The simulation found it (tests/sim seed 278): a
        // decision to scale to 0, sent just before the worker registered, stopped it busy.
        let unit = Unit {
            running: true,
            ..Unit::one(name.clone(), self.clock.now())
        };
        self.book.units.push(unit);
        Ok(name)
    }

    /// SIGTERM: the worker closes its connection (so the scheduler knows at once) and exits;
    /// it is reported exited once reaped (`reap`).
    fn stop(&mut self, name: &str) {
        if let Some(stopped) = self.signal_stop(name) {
            self.stopping.push(stopped);
        }
    }

    /// Send a worker SIGTERM and hand back its process (name, instance, process).
    fn signal_stop(&mut self, name: &str) -> Option<(String, u64, Box<dyn Process>)> {
        self.book.units.retain(|u| u.id != name);
        let index = self.children.iter().position(|(n, _, _)| n == name)?;
        let (name, instance, mut child) = self.children.remove(index);
        tracing::info!(worker = %name, "stopping worker");
        child.terminate();
        Some((name, instance, child))
    }

    /// Forget workers that exited; back off when they die young.
    fn reap(&mut self) {
        let now = self.clock.now();
        let mut stopped = Vec::new();
        self.stopping
            .retain_mut(|(name, instance, child)| match child.try_wait() {
                Ok(Some(_)) => {
                    stopped.push((name.clone(), *instance));
                    false
                }
                _ => true,
            });
        for (name, instance) in stopped {
            tracing::info!(worker = %name, "stopped worker exited");
            self.remember_exited(&name, instance);
        }
        let mut exited = Vec::new();
        self.children
            .retain_mut(|(name, instance, child)| match child.try_wait() {
                Ok(Some(status)) => {
                    exited.push((name.clone(), *instance, status));
                    false
                }
                _ => true,
            });
        for (name, instance, status) in exited {
            let since = self.book.units.iter().find(|u| u.id == name);
            let since = since.map_or(now, |u| u.since);
            self.book.units.retain(|u| u.id != name);
            let lived = now.saturating_sub(since);
            self.remember_exited(&name, instance);
            self.log
                .ended(&name, since, format!("exited ({status})"), now);
            if status.code() == Some(crate::proto::EXIT_DISMISSED) {
                tracing::warn!(worker = %name, "dismissed by the scheduler: its manager is gone");
                self.dismissed = true;
                continue;
            }
            match self.restarts.exited(now, lived) {
                Some(wait) => {
                    let (lived, backoff) =
                        (Duration::from_millis(lived), Duration::from_millis(wait));
                    tracing::warn!(worker = %name, %status, ?lived, ?backoff, "worker exited young; replacing it after a backoff");
                }
                None => tracing::warn!(worker = %name, %status, "worker exited; replacing it"),
            }
        }
        // A worker started since the last failure that has lived long enough ends the run.
        let alive = self.book.units.iter().map(|u| u.since);
        self.restarts.came_up(now, alive);
    }

    fn remember_exited(&mut self, name: &str, instance: u64) {
        if self.exited.len() == crate::proto::EXITED_KEPT {
            self.exited.pop_front();
        }
        self.exited.push_back((name.to_string(), instance));
    }

    /// Whether its process named `name`, if it has one, is `instance` (none of the name: as
    /// good as yes, there is nothing of it here to spare).
    pub(super) fn runs_instance(&self, name: &str, instance: u64) -> bool {
        (self.children.iter())
            .filter(|(n, _, _)| n == name)
            .all(|(_, i, _)| *i == instance)
    }

    pub(super) fn state(&self) -> ManagerState {
        let exited = self.exited.iter().map(|(name, _)| name.clone()).collect();
        let mut state = self.settings.report(false, self.names(), exited);
        state.instances = (self.children.iter().chain(&self.stopping))
            .map(|(name, i, _)| (name.clone(), *i))
            .chain(self.exited.iter().cloned())
            .collect();
        state.backend = "process".into();
        state.launch = self.restarts.report(self.clock.now());
        state.units = self.units(self.clock.now());
        state
    }

    /// Each worker process as a unit of one: running once the scheduler has said it registered.
    fn units(&self, now: u64) -> Vec<crate::proto::UnitReport> {
        let left = self
            .settings
            .ends_at
            .map(|end| end.saturating_duration_since(self.clock.at(now)));
        let live = unit_log::by_registration(&self.book.units, left, now);
        self.log.report(live, |name| vec![name.to_string()], now)
    }

    /// The workers it runs: its units, and those stopping until they exit.
    fn names(&self) -> Vec<String> {
        let mut names = self.book.workers(&[]);
        names.extend(self.stopping.iter().map(|(name, _, _)| name.clone()));
        names
    }

    /// Move toward `desired` workers (a fixed pool: toward its N), never above the cap.
    pub(super) fn converge(
        &mut self,
        desired: u32,
        stop: &[String],
        registered: &[String],
    ) -> Result<(), ManagerError> {
        self.reap();
        let desired = self.settings.fixed.unwrap_or(desired);
        let now = self.clock.now();
        // Past the end of the allocation nothing new starts (the unit is leaving).
        let ending = self
            .settings
            .ends_at
            .is_some_and(|end| self.clock.at(now) >= end);
        let step = self.book.step(now, desired, stop, registered, false);
        for unit in step.stop {
            let why = match unit.why {
                Why::Drained => "drained",
                Why::Late | Why::Excess => "not needed",
            };
            self.log.ended(&unit.id, unit.since, why.into(), now);
            self.stop(&unit.id);
        }
        // A worker told to stop runs until it exits: the cap counts it, so a replacement waits
        // for that exit (the simulation's seed 17: a manager started a fourth worker, its cap
        // three, while one it had stopped was still exiting).
        let room =
            (self.book.max_units).saturating_sub(self.book.units.len() + self.stopping.len());
        if self.restarts.may_start(now) && !ending && !self.dismissed {
            for _ in 0..step.start.min(room) {
                self.start()?;
            }
        }
        Ok(())
    }

    /// Stop every worker and wait (up to 10 s) for them to exit, so each closes its connection
    /// before this process ends (which would kill the rest).
    pub(super) async fn stop_all(&mut self) {
        let mut stopping = std::mem::take(&mut self.stopping);
        for name in self.book.workers(&[]) {
            stopping.extend(self.signal_stop(&name));
        }
        let all = async {
            for (_, _, child) in &mut stopping {
                let _ = child.wait().await;
            }
        };
        if tokio::time::timeout(Duration::from_secs(10), all)
            .await
            .is_err()
        {
            tracing::warn!("workers did not stop within 10 s; killing them");
        }
    }
}
