//! The process backend: the manager's own worker processes, started, stopped, reaped and
//! replaced (with a backoff when they keep dying young).

use std::time::{Duration, Instant};

use tokio::process::{Child, Command};

use super::unit_log::{self, UnitLog};
use super::{ManagerError, Settings, plan};
use crate::proto::{ManagerState, UnitReport, UnitState};

/// A worker that exits sooner than this after its start counts as a failed start.
const YOUNG: Duration = Duration::from_secs(10);
/// Longest wait before starting again after failed starts.
const MAX_BACKOFF: Duration = Duration::from_secs(30);

/// The manager's worker processes; kept across reconnections to the scheduler.
pub struct Pool {
    pub(super) settings: Settings,
    /// Alive worker processes, oldest first: (name, process, when it started).
    children: Vec<(String, Child, Instant)>,
    next: u64,
    /// Workers the scheduler has ever said are registered (in any session): they are stopped
    /// only when it names them (drained), never as "not registered yet" — after a scheduler
    /// restart they are busy with tasks they have not claimed yet.
    ever_registered: std::collections::HashSet<String>,
    /// The last workers that exited or were stopped, newest last (reported to the scheduler).
    exited: std::collections::VecDeque<String>,
    /// A worker exited because the scheduler dismissed it (its dynamic manager is gone): inside
    /// a unit, the unit ends too.
    pub(super) dismissed: bool,
    /// Workers that died young in a row, and when starting is allowed again.
    failures: u32,
    not_before: Instant,
    /// Its workers that exited or were stopped, and why: each worker is a unit of its own in
    /// the report.
    log: UnitLog,
}

impl Pool {
    pub fn new(settings: Settings) -> Pool {
        Pool {
            settings,
            children: Vec::new(),
            next: 0,
            ever_registered: std::collections::HashSet::new(),
            exited: std::collections::VecDeque::new(),
            dismissed: false,
            failures: 0,
            not_before: Instant::now(),
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
        let mut command = Command::new(&s.worker_command);
        command
            .arg("--access-file")
            .arg(&s.access_file)
            .args([
                "--slots",
                &s.slots.to_string(),
                "--worker-type",
                &s.worker_type,
                "--manager",
                &s.id,
                "--name",
                &name,
            ])
            .kill_on_drop(true);
        if !s.worker_capabilities_flag.is_empty() {
            command.args(["--capabilities", &s.worker_capabilities_flag]);
        }
        for env in &s.env_plugin_flags {
            command.args(["--env-plugin", env]);
        }
        if let Some(end) = s.ends_at {
            let left = end.saturating_duration_since(Instant::now());
            command.args(["--ends-in", &format!("{:.3}", left.as_secs_f64())]);
        }
        #[cfg(target_os = "linux")]
        // SAFETY: prctl is async-signal-safe; it only asks the kernel to SIGTERM the worker when
        // this manager dies, so no worker outlives its manager.
        unsafe {
            command.pre_exec(|| {
                use rustix::process::{Signal, set_parent_process_death_signal};
                Ok(set_parent_process_death_signal(Some(Signal::TERM))?)
            });
        }
        let child = command.spawn().map_err(|error| ManagerError::StartWorker {
            command: s.worker_command.clone(),
            error,
        })?;
        tracing::info!(worker = %name, "worker started");
        self.children.push((name.clone(), child, Instant::now()));
        Ok(name)
    }

    /// SIGTERM: the worker closes its connection (so the scheduler knows at once) and exits;
    /// it is reaped in the background.
    fn stop(&mut self, name: &str) {
        if let Some(mut child) = self.signal_stop(name) {
            tokio::spawn(async move {
                let _ = child.wait().await;
            });
        }
    }

    /// Send a worker SIGTERM and hand back its process.
    fn signal_stop(&mut self, name: &str) -> Option<Child> {
        let index = self.children.iter().position(|(n, _, _)| n == name)?;
        let (_, mut child, _) = self.children.remove(index);
        self.remember_exited(name);
        tracing::info!(worker = %name, "stopping worker");
        let pid = child.id().and_then(|pid| i32::try_from(pid).ok());
        match pid.and_then(rustix::process::Pid::from_raw) {
            Some(pid) => {
                let _ = rustix::process::kill_process(pid, rustix::process::Signal::TERM);
            }
            None => {
                let _ = child.start_kill();
            }
        }
        Some(child)
    }

    /// Forget workers that exited; back off when they die young.
    fn reap(&mut self) {
        let now = Instant::now();
        let mut exited = Vec::new();
        self.children
            .retain_mut(|(name, child, started)| match child.try_wait() {
                Ok(Some(status)) => {
                    exited.push((name.clone(), status, now.duration_since(*started)));
                    false
                }
                _ => true,
            });
        for (name, status, lived) in exited {
            self.remember_exited(&name);
            self.log.ended(
                &name,
                now.checked_sub(lived).unwrap_or(now),
                format!("exited ({status})"),
                now,
            );
            if status.code() == Some(crate::proto::EXIT_DISMISSED) {
                tracing::warn!(worker = %name, "dismissed by the scheduler: its manager is gone");
                self.dismissed = true;
                continue;
            }
            if lived < YOUNG {
                self.failures += 1;
                let backoff = (Duration::from_millis(250) * 2u32.saturating_pow(self.failures))
                    .min(MAX_BACKOFF);
                self.not_before = now + backoff;
                tracing::warn!(worker = %name, %status, ?lived, ?backoff, "worker exited young; replacing it after a backoff");
            } else {
                self.failures = 0;
                tracing::warn!(worker = %name, %status, "worker exited; replacing it");
            }
        }
    }

    fn remember_exited(&mut self, name: &str) {
        if self.exited.len() == crate::proto::EXITED_KEPT {
            self.exited.pop_front();
        }
        self.exited.push_back(name.to_string());
    }

    pub(super) fn state(&self) -> ManagerState {
        let exited = self.exited.iter().cloned().collect();
        let mut state = self.settings.report(false, self.names(), exited);
        state.backend = "process".into();
        state.units = self.units(Instant::now());
        state
    }

    /// Each worker process as a unit of one: running once the scheduler has said it registered.
    fn units(&self, now: Instant) -> Vec<UnitReport> {
        let live = self
            .children
            .iter()
            .map(|(name, _, started)| UnitReport {
                id: name.clone(),
                state: match self.ever_registered.contains(name) {
                    true => UnitState::Running,
                    false => UnitState::Pending,
                },
                reason: None,
                age_ms: unit_log::millis(now.saturating_duration_since(*started)),
                workers: vec![name.clone()],
                time_left_ms: self
                    .settings
                    .ends_at
                    .map(|end| unit_log::millis(end.saturating_duration_since(now))),
                ended_ms: None,
            })
            .collect();
        self.log.report(live, |name| vec![name.to_string()], now)
    }

    fn names(&self) -> Vec<String> {
        self.children.iter().map(|(n, _, _)| n.clone()).collect()
    }

    /// Move toward `desired` workers (a fixed pool: toward its N), never above the cap.
    pub(super) fn converge(
        &mut self,
        desired: u32,
        stop: &[String],
        registered: &[String],
    ) -> Result<(), ManagerError> {
        self.reap();
        let desired = match self.settings.fixed {
            Some(n) => n,
            None => desired.min(self.settings.max_workers()),
        };
        self.ever_registered.extend(registered.iter().cloned());
        let alive = self.names();
        self.ever_registered.retain(|name| alive.contains(name));
        let known: Vec<String> = self.ever_registered.iter().cloned().collect();
        // Past the end of the allocation nothing new starts (the unit is leaving).
        let ending = self
            .settings
            .ends_at
            .is_some_and(|end| Instant::now() >= end);
        let plan = plan(
            &alive,
            desired,
            stop,
            &known,
            Instant::now() >= self.not_before && !ending && !self.dismissed,
        );
        for name in &plan.stop {
            let started = self.children.iter().find(|(n, _, _)| n == name);
            let since = started.map_or(Instant::now(), |(_, _, at)| *at);
            let why = match stop.contains(name) {
                true => "drained",
                false => "not needed",
            };
            self.log.ended(name, since, why.into(), Instant::now());
            self.stop(name);
        }
        for _ in 0..plan.start {
            self.start()?;
        }
        Ok(())
    }

    /// Stop every worker and wait (up to 10 s) for them to exit, so each closes its connection
    /// before this process ends (which would kill the rest).
    pub(super) async fn stop_all(&mut self) {
        let mut stopping = Vec::new();
        for name in self.names() {
            stopping.extend(self.signal_stop(&name));
        }
        let all = async {
            for child in &mut stopping {
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
