//! The worker manager: starts and stops the worker processes of one pool.
//!
//! Dynamic mode heartbeats its state to the scheduler and converges to the desired count the
//! scaling policy sends: it stops the (idle, already drained) workers named, then any extra
//! ones that have not registered yet, and starts new ones to fill up; a worker that dies is
//! replaced (with a backoff when workers keep dying young). It never runs more workers than its
//! own cap allows, whatever it is asked. Fixed mode (`--fixed N`) keeps N workers alive the same
//! way and registers with the scheduler as a fixed pool (not scaled), except inside a unit of
//! the command backend (`--unit`), where the manager that started the unit reports its workers.
//! Either mode, stopped by SIGTERM or SIGINT, says goodbye to the scheduler and stops its
//! workers.

pub mod command;

use std::path::PathBuf;
use std::time::{Duration, Instant};

use tokio::process::{Child, Command};
use tokio::sync::mpsc;

use crate::net::{self, AccessFile, NetError};
use crate::proto::{EnvironmentDef, FromManager, ManagerState, Role, ToManager, frame};

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
}

impl Settings {
    /// Most workers its task cap allows: `cap / slots`, at least one when the cap allows any
    /// task (the policy's rule, `Manager::max_workers_for`).
    pub fn max_workers(&self) -> u32 {
        match self.max_task_concurrency {
            0 => 0,
            cap => (cap / self.slots.max(1)).max(1),
        }
    }
}

/// What a pool does to converge: the workers to stop and how many to start.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Plan {
    pub stop: Vec<String>,
    pub start: u32,
}

/// The pure convergence step. `alive`: the pool's worker processes, oldest first; `desired`:
/// the count to reach (already within the cap); `stop`: workers the scheduler drained and names;
/// `registered`: the workers the scheduler knows; `may_start`: not backing off.
///
/// Named workers are stopped first; if still above `desired`, the newest workers that have not
/// registered (they hold no task) are stopped; below it, new ones are started.
pub fn plan(
    alive: &[String],
    desired: u32,
    stop: &[String],
    registered: &[String],
    may_start: bool,
) -> Plan {
    let mut plan = Plan::default();
    plan.stop
        .extend(alive.iter().filter(|n| stop.contains(n)).cloned());
    let left: Vec<&String> = alive.iter().filter(|n| !stop.contains(n)).collect();
    let desired = desired as usize;
    if left.len() > desired {
        let excess = left.len() - desired;
        plan.stop.extend(
            left.iter()
                .rev()
                .filter(|n| !registered.contains(n))
                .take(excess)
                .map(|n| (*n).clone()),
        );
    } else if may_start {
        plan.start = (desired - left.len()) as u32;
    }
    plan
}

/// A worker that exits sooner than this after its start counts as a failed start.
const YOUNG: Duration = Duration::from_secs(10);
/// Longest wait before starting again after failed starts.
const MAX_BACKOFF: Duration = Duration::from_secs(30);

/// The manager's worker processes; kept across reconnections to the scheduler.
pub struct Pool {
    settings: Settings,
    /// Alive worker processes, oldest first: (name, process, when it started).
    children: Vec<(String, Child, Instant)>,
    next: u64,
    /// Workers the scheduler has ever said are registered (in any session): they are stopped
    /// only when it names them (drained), never as "not registered yet" — after a scheduler
    /// restart they are busy with tasks they have not claimed yet.
    ever_registered: std::collections::HashSet<String>,
    /// The last workers that exited or were stopped, newest last (reported to the scheduler).
    exited: std::collections::VecDeque<String>,
    /// Workers that died young in a row, and when starting is allowed again.
    failures: u32,
    not_before: Instant,
}

impl Pool {
    pub fn new(settings: Settings) -> Pool {
        Pool {
            settings,
            children: Vec::new(),
            next: 0,
            ever_registered: std::collections::HashSet::new(),
            exited: std::collections::VecDeque::new(),
            failures: 0,
            not_before: Instant::now(),
        }
    }

    fn start(&mut self) -> Result<String, std::io::Error> {
        self.next += 1;
        let s = &self.settings;
        let name = match &s.unit {
            Some(unit) => format!("{}-{unit}-{}", s.id, self.next),
            None => format!("{}-{}", s.id, self.next),
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
        #[cfg(target_os = "linux")]
        // SAFETY: prctl is async-signal-safe; it only asks the kernel to SIGTERM the worker when
        // this manager dies, so no worker outlives its manager.
        unsafe {
            command.pre_exec(|| {
                if libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGTERM) != 0 {
                    return Err(std::io::Error::last_os_error());
                }
                Ok(())
            });
        }
        let child = command.spawn()?;
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
        match child.id() {
            // SAFETY: plain kill(2) on our own child's pid.
            Some(pid) => unsafe {
                libc::kill(pid as libc::pid_t, libc::SIGTERM);
            },
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

    fn state(&self) -> ManagerState {
        let s = &self.settings;
        ManagerState {
            id: s.id.clone(),
            worker_type: s.worker_type.clone(),
            max_task_concurrency: s.max_task_concurrency,
            worker_slots: s.slots,
            capabilities: s.capabilities.clone(),
            workers: self.names(),
            environments: s.environments.clone(),
            fixed: s.fixed,
            exited: self.exited.iter().cloned().collect(),
        }
    }

    fn names(&self) -> Vec<String> {
        self.children.iter().map(|(n, _, _)| n.clone()).collect()
    }

    /// Move toward `desired` workers (a fixed pool: toward its N), never above the cap.
    fn converge(
        &mut self,
        desired: u32,
        stop: &[String],
        registered: &[String],
    ) -> Result<(), std::io::Error> {
        self.reap();
        let desired = match self.settings.fixed {
            Some(n) => n,
            None => desired.min(self.settings.max_workers()),
        };
        self.ever_registered.extend(registered.iter().cloned());
        let alive = self.names();
        self.ever_registered.retain(|name| alive.contains(name));
        let known: Vec<String> = self.ever_registered.iter().cloned().collect();
        let plan = plan(
            &alive,
            desired,
            stop,
            &known,
            Instant::now() >= self.not_before,
        );
        for name in &plan.stop {
            self.stop(name);
        }
        for _ in 0..plan.start {
            self.start()?;
        }
        Ok(())
    }

    /// Stop every worker and wait (up to 10 s) for them to exit, so each closes its connection
    /// before this process ends (which would kill the rest).
    async fn stop_all(&mut self) {
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

/// How a dynamic manager gets workers: processes of its own, or units through commands.
pub enum Backend {
    Process(Pool),
    Command(command::Units),
}

impl Backend {
    fn settings(&self) -> &Settings {
        match self {
            Backend::Process(pool) => &pool.settings,
            Backend::Command(units) => &units.settings,
        }
    }

    fn state(&self) -> ManagerState {
        match self {
            Backend::Process(pool) => pool.state(),
            Backend::Command(units) => units.state(),
        }
    }

    async fn apply(
        &mut self,
        desired: u32,
        stop: &[String],
        registered: &[String],
    ) -> Result<(), String> {
        match self {
            Backend::Process(pool) => pool.converge(desired, stop, registered).map_err(|e| {
                format!(
                    "cannot start a worker ({}): {e}",
                    pool.settings.worker_command.display()
                )
            }),
            Backend::Command(units) => units.apply(desired, stop, registered).await,
        }
    }

    async fn stop_all(&mut self) {
        match self {
            Backend::Process(pool) => pool.stop_all().await,
            Backend::Command(units) => units.stop_all().await,
        }
    }
}

/// Run a manager until a signal stops it, or the scheduler stays away for longer than
/// `reconnect`: sessions with the scheduler, reconnecting between them. A fixed pool starts its
/// workers at once, before the scheduler answers. Its workers are stopped when it ends.
pub async fn run(
    access_file: &std::path::Path,
    reconnect: Duration,
    mut backend: Backend,
) -> Result<String, NetError> {
    if let Some(n) = backend.settings().fixed {
        backend.apply(n, &[], &[]).await.map_err(NetError::Access)?;
    }
    let pool = std::sync::Arc::new(tokio::sync::Mutex::new(backend));
    let ended = net::reconnecting(access_file, reconnect, "worker manager", |access| {
        let pool = pool.clone();
        async move { run_dynamic(&access, &mut *pool.lock().await).await }
    })
    .await;
    pool.lock().await.stop_all().await;
    ended
}

/// One session with the scheduler, until it goes away or a signal stops the manager. Returns
/// why it ended; on a signal the manager says goodbye and stops its workers, otherwise they keep
/// running (and reconnect by themselves) while the caller reconnects. A fixed pool takes the
/// same path: it reports, heals, and ignores desired counts.
pub async fn run_dynamic(access: &AccessFile, pool: &mut Backend) -> Result<String, NetError> {
    let (endpoint, connection, mut send, recv) =
        net::connect(access, Role::Manager, Duration::from_secs(5)).await?;
    let interval = pool.settings().heartbeat_interval;
    let (outgoing, mut outbox) = mpsc::unbounded_channel::<FromManager>();
    let mut writer = tokio::spawn(async move {
        while let Some(message) = outbox.recv().await {
            frame::write(&mut send, &message).await?;
        }
        let _ = send.finish();
        Ok::<_, NetError>(())
    });
    let _ = outgoing.send(FromManager::Heartbeat(pool.state()));
    let mut ticker = tokio::time::interval(interval);
    let mut sigterm = signal(tokio::signal::unix::SignalKind::terminate())?;
    let mut sigint = signal(tokio::signal::unix::SignalKind::interrupt())?;
    // Nothing is started or stopped before the scheduler has said what it wants in this
    // session (a fixed pool knows already): a scheduler that just restarted has not seen the
    // workers yet, and they are busy with tasks they will claim.
    let mut desired: Option<u32> = pool.settings().fixed;
    let mut registered: Vec<String> = Vec::new();
    let mut frames = net::frames::<ToManager>(recv);
    let reason = loop {
        tokio::select! {
            message = frames.recv() => match message.unwrap_or(Err(crate::proto::FrameError::Closed)) {
                Ok(ToManager::Desired { desired: wanted, stop, registered: known, reason }) => {
                    if Some(wanted) != desired || !stop.is_empty() {
                        tracing::info!(desired = wanted, stop = stop.len(), %reason, "scaling");
                    }
                    desired = Some(wanted);
                    registered = known;
                    if let Err(error) = pool.apply(wanted, &stop, &registered).await {
                        break error;
                    }
                    let _ = outgoing.send(FromManager::Heartbeat(pool.state()));
                }
                Err(error) => break error.to_string(),
            },
            _ = sigterm.recv() => break "stopped by SIGTERM".to_string(),
            _ = sigint.recv() => break "stopped by SIGINT".to_string(),
            _ = ticker.tick() => {
                // Replace workers that died (or units that never came up); report.
                if let Some(desired) = desired
                    && let Err(error) = pool.apply(desired, &[], &registered).await
                {
                    break error;
                }
                if outgoing.send(FromManager::Heartbeat(pool.state())).is_err() {
                    break "connection writer ended".to_string();
                }
            }
        }
    };
    if reason.starts_with("stopped by") {
        // Goodbye first, so the scheduler forgets this manager at once; it closes the
        // connection when it has read it.
        let _ = outgoing.send(FromManager::Goodbye);
        drop(outgoing);
        let _ = tokio::time::timeout(Duration::from_secs(2), &mut writer).await;
        let _ = tokio::time::timeout(Duration::from_secs(2), connection.closed()).await;
        pool.stop_all().await;
        net::close_stopping(&endpoint, &connection, "manager stopping").await;
    } else {
        writer.abort();
        connection.close(0u32.into(), b"manager stopping");
    }
    Ok(reason)
}

fn signal(kind: tokio::signal::unix::SignalKind) -> Result<tokio::signal::unix::Signal, NetError> {
    Ok(tokio::signal::unix::signal(kind)?)
}

/// Fixed mode inside a unit of the command backend: keep the workers alive until a signal
/// (the dynamic manager that started the unit reports them to the scheduler).
pub async fn run_unit(mut pool: Pool) -> Result<(), String> {
    let mut sigterm =
        signal(tokio::signal::unix::SignalKind::terminate()).map_err(|e| e.to_string())?;
    let mut sigint =
        signal(tokio::signal::unix::SignalKind::interrupt()).map_err(|e| e.to_string())?;
    let mut ticker = tokio::time::interval(pool.settings.heartbeat_interval);
    let start_failed = |e: std::io::Error| format!("cannot start a worker: {e}");
    loop {
        tokio::select! {
            _ = ticker.tick() => pool.converge(0, &[], &[]).map_err(start_failed)?,
            _ = sigterm.recv() => break,
            _ = sigint.recv() => break,
        }
    }
    pool.stop_all().await;
    Ok(())
}
