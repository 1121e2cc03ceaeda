//! The worker manager: starts and stops the worker processes of one pool.
//!
//! Dynamic mode heartbeats its state to the scheduler and converges to the desired count the
//! scaling policy sends: it stops the (idle, already drained) workers named, then any extra
//! ones that have not registered yet, and starts new ones to fill up; a worker that dies is
//! replaced. Fixed mode (`--fixed N`) starts N workers and waits for them, with no scheduler
//! connection of its own.

pub mod command;

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::time::Duration;

use tokio::process::{Child, Command};
use tokio::sync::mpsc;

use crate::net::{self, AccessFile, NetError};
use crate::proto::{FromManager, ManagerState, Role, ToManager, frame};

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
    pub worker_command: PathBuf,
    pub access_file: PathBuf,
    pub heartbeat_interval: Duration,
    /// Fixed mode inside a unit of the command backend: workers are named `{id}-{unit}-{n}`.
    pub unit: Option<String>,
}

/// The manager's worker processes; kept across reconnections to the scheduler.
pub struct Pool {
    settings: Settings,
    children: BTreeMap<String, Child>,
    next: u64,
}

impl Pool {
    pub fn new(settings: Settings) -> Pool {
        Pool {
            settings,
            children: BTreeMap::new(),
            next: 0,
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
        self.children.insert(name.clone(), child);
        Ok(name)
    }

    /// SIGTERM: the worker closes its connection (so the scheduler knows at once) and exits.
    fn stop(&mut self, name: &str) {
        if let Some(mut child) = self.children.remove(name) {
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
            // Reap it in the background.
            tokio::spawn(async move {
                let _ = child.wait().await;
            });
        }
    }

    /// Forget workers that exited.
    fn reap(&mut self) {
        self.children.retain(|name, child| match child.try_wait() {
            Ok(Some(status)) => {
                tracing::warn!(worker = %name, %status, "worker exited");
                false
            }
            _ => true,
        });
    }

    fn state(&self) -> ManagerState {
        let s = &self.settings;
        ManagerState {
            id: s.id.clone(),
            worker_type: s.worker_type.clone(),
            max_task_concurrency: s.max_task_concurrency,
            worker_slots: s.slots,
            capabilities: s.capabilities.clone(),
            workers: self.children.keys().cloned().collect(),
        }
    }

    /// Move toward `desired` workers.
    fn converge(&mut self, desired: u32, registered: &[String]) -> Result<(), std::io::Error> {
        self.reap();
        let desired = desired as usize;
        // Too many: drop the newest that have not registered (they have no task yet).
        let unregistered: Vec<String> = self
            .children
            .keys()
            .rev()
            .filter(|n| !registered.contains(n))
            .cloned()
            .collect();
        for name in unregistered
            .into_iter()
            .take(self.children.len().saturating_sub(desired))
        {
            self.stop(&name);
        }
        while self.children.len() < desired {
            self.start()?;
        }
        Ok(())
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
            Backend::Process(pool) => {
                for name in stop {
                    pool.stop(name);
                }
                pool.converge(desired, registered).map_err(|e| {
                    format!(
                        "cannot start a worker ({}): {e}",
                        pool.settings.worker_command.display()
                    )
                })
            }
            Backend::Command(units) => units.apply(desired, stop, registered).await,
        }
    }

    async fn stop_all(&mut self) {
        match self {
            Backend::Process(pool) => {
                let names: Vec<String> = pool.children.keys().cloned().collect();
                for name in names {
                    pool.stop(&name);
                }
            }
            Backend::Command(units) => units.stop_all().await,
        }
    }
}

/// Dynamic mode: one connection, until the scheduler goes away or a signal stops it. Returns
/// why it ended; on a signal the workers are stopped, otherwise they keep running (and
/// reconnect by themselves) while the caller reconnects.
pub async fn run_dynamic(access: &AccessFile, pool: &mut Backend) -> Result<String, NetError> {
    let (_endpoint, connection, mut send, mut recv) =
        net::connect(access, Role::Manager, Duration::from_secs(5)).await?;
    let interval = pool.settings().heartbeat_interval;
    let (outgoing, mut outbox) = mpsc::unbounded_channel::<FromManager>();
    let writer = tokio::spawn(async move {
        while let Some(message) = outbox.recv().await {
            frame::write(&mut send, &message).await?;
        }
        Ok::<_, NetError>(())
    });
    let _ = outgoing.send(FromManager::Heartbeat(pool.state()));
    let mut ticker = tokio::time::interval(interval);
    let mut sigterm = signal(tokio::signal::unix::SignalKind::terminate())?;
    let mut sigint = signal(tokio::signal::unix::SignalKind::interrupt())?;
    let mut desired = 0u32;
    let mut registered: Vec<String> = Vec::new();
    let reason = loop {
        tokio::select! {
            message = frame::read::<_, ToManager>(&mut recv) => match message {
                Ok(ToManager::Desired { desired: wanted, stop, registered: known, reason }) => {
                    if wanted != desired || !stop.is_empty() {
                        tracing::info!(desired = wanted, stop = stop.len(), %reason, "scaling");
                    }
                    desired = wanted;
                    registered = known;
                    if let Err(error) = pool.apply(desired, &stop, &registered).await {
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
                if let Err(error) = pool.apply(desired, &[], &registered).await {
                    break error;
                }
                if outgoing.send(FromManager::Heartbeat(pool.state())).is_err() {
                    break "connection writer ended".to_string();
                }
            }
        }
    };
    writer.abort();
    connection.close(0u32.into(), b"manager stopping");
    if reason.starts_with("stopped by") {
        pool.stop_all().await;
    }
    Ok(reason)
}

fn signal(kind: tokio::signal::unix::SignalKind) -> Result<tokio::signal::unix::Signal, NetError> {
    Ok(tokio::signal::unix::signal(kind)?)
}

/// Fixed mode: start `count` workers and wait for them. Errors if one cannot start or any
/// exits with a failure.
pub async fn run_fixed(count: u32, settings: Settings) -> Result<(), String> {
    let mut pool = Pool::new(settings);
    for _ in 0..count {
        pool.start().map_err(|e| {
            format!(
                "cannot start a worker ({}): {e}",
                pool.settings.worker_command.display()
            )
        })?;
    }
    let mut sigterm =
        signal(tokio::signal::unix::SignalKind::terminate()).map_err(|e| e.to_string())?;
    let children = std::mem::take(&mut pool.children);
    let pids: Vec<u32> = children.values().filter_map(Child::id).collect();
    let waiting = async move {
        let mut failed = Vec::new();
        for (name, mut child) in children {
            match child.wait().await {
                Ok(status) if status.success() => {}
                Ok(status) => failed.push(format!("worker {name} exited with {status}")),
                Err(error) => failed.push(format!("worker {name}: {error}")),
            }
        }
        failed
    };
    tokio::pin!(waiting);
    let failed = tokio::select! {
        failed = &mut waiting => failed,
        _ = sigterm.recv() => {
            // Pass it on so the workers close their connections cleanly, then wait a little.
            for pid in pids {
                // SAFETY: plain kill(2) on our own children.
                unsafe {
                    libc::kill(pid as libc::pid_t, libc::SIGTERM);
                }
            }
            let _ = tokio::time::timeout(Duration::from_secs(10), &mut waiting).await;
            return Ok(());
        }
    };
    if failed.is_empty() {
        Ok(())
    } else {
        Err(failed.join("; "))
    }
}
