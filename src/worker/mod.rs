//! The worker: connects, registers, runs what the scheduler assigns, reports in batches.
//!
//! Tasks run concurrently (the scheduler never assigns more than `slots`). Command tasks are
//! processes (killed on timeout or cancel); wasm tasks run in the sandbox on blocking threads,
//! one fresh instance per task. Finished runs are sent in batches: whatever finished while the
//! previous batch was being written goes in the next frame.

pub mod env;
pub mod guard;
mod run;

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use tokio::sync::mpsc;
use tokio::task::AbortHandle;

use crate::net::{self, AccessFile, NetError};
use crate::plugin::PluginHost;
use crate::proto::{
    FromWorker, GroupId, JobId, Outcome, Role, TaskId, TaskSpec, ToWorker, WorkerInfo, frame,
};

#[derive(Clone, Debug)]
pub struct Settings {
    pub info: WorkerInfo,
    pub heartbeat_interval: Duration,
    /// Cap on each of stdout and stderr kept from a command task.
    pub output_limit: usize,
    /// The scheduler is gone when silent this long.
    pub idle_timeout: Duration,
    /// Conditions from the worker's own `--env-plugin` flags.
    pub local_environments: Vec<env::LocalEnv>,
    /// Environment variables conditions may read.
    pub env_allow: Vec<String>,
    /// How often every condition is evaluated again (changes are reported).
    pub env_recheck: Duration,
    /// Memory this worker offers conditions, when less than the machine's.
    pub total_memory: Option<u64>,
    /// What conditions see as the CPU count, when set (`--cpus`).
    pub cpus: Option<u32>,
    /// Benchmarking: report every task succeeded at once without running it.
    pub no_execute: bool,
}

pub(crate) struct Group {
    pub job: JobId,
    pub spec: TaskSpec,
}

/// What a worker keeps across its sessions with the scheduler: its running tasks (which go on
/// while it reconnects, and are claimed when it registers again), their outcomes not yet sent,
/// the group specs and components it was given, and its conditions.
pub struct Worker {
    settings: Settings,
    runner: Arc<run::Runner>,
    environments: Arc<Mutex<env::Environments>>,
    groups: HashMap<GroupId, Arc<Group>>,
    running: HashMap<TaskId, (AbortHandle, Arc<run::Cancel>)>,
    done: mpsc::UnboundedSender<(TaskId, Outcome)>,
    finished: mpsc::UnboundedReceiver<(TaskId, Outcome)>,
    /// Tasks given up when the lease ran out: their outcomes are dropped, not reported.
    abandoned: std::collections::HashSet<TaskId>,
    /// Outcomes reported in this session and not yet acknowledged as durable, oldest first;
    /// those left when a session ends are claimed and reported again on the next one.
    unacknowledged: std::collections::VecDeque<(TaskId, Outcome)>,
    /// How many outcomes this session reported, of which the first `acknowledged` are durable.
    reported: u64,
    acknowledged: u64,
    /// The scheduler's lease on this worker's tasks, and when it runs out unless renewed.
    lease: Option<(Duration, std::time::Instant)>,
}

impl Worker {
    pub fn new(settings: Settings) -> Result<Worker, NetError> {
        let host =
            Arc::new(PluginHost::with_default_cache().map_err(|e| NetError::Tls(e.to_string()))?);
        let facts = env::FactsSource {
            worker_type: settings.info.worker_type.clone(),
            capabilities: settings.info.capabilities.clone(),
            env_allow: settings.env_allow.clone(),
            total_memory: settings.total_memory,
            cpus: settings.cpus,
        };
        let environments = Arc::new(Mutex::new(env::Environments::new(
            host.clone(),
            facts,
            settings.local_environments.clone(),
        )));
        let values = environments
            .lock()
            .map(|e| e.values.clone())
            .unwrap_or_default();
        let runner = Arc::new(run::Runner::new(
            host,
            settings.output_limit,
            settings.info.clone(),
            values,
        ));
        let (done, finished) = mpsc::unbounded_channel();
        Ok(Worker {
            settings,
            runner,
            environments,
            groups: HashMap::new(),
            running: HashMap::new(),
            done,
            finished,
            abandoned: std::collections::HashSet::new(),
            unacknowledged: std::collections::VecDeque::new(),
            reported: 0,
            acknowledged: 0,
            lease: None,
        })
    }

    /// Renew the lease (the scheduler is there): here and in the guard process.
    fn renew(&mut self) {
        if let Some((length, deadline)) = &mut self.lease {
            *deadline = std::time::Instant::now() + *length;
            guard::renew(*length);
        }
    }

    /// Past the lease, the scheduler has given this worker's tasks to others (or will once it
    /// restarts): stop them and never report them.
    fn abandon_if_expired(&mut self) {
        let Some((_, deadline)) = self.lease else {
            return;
        };
        if std::time::Instant::now() < deadline || self.running.is_empty() {
            return;
        }
        tracing::warn!(
            tasks = self.running.len(),
            "the scheduler's lease ran out while away: stopping this worker's tasks"
        );
        for (task, (handle, cancel)) in self.running.drain() {
            cancel.cancel();
            handle.abort();
            self.abandoned.insert(task);
        }
    }

    /// Stop every task and tear the conditions down (the worker is leaving).
    pub async fn shutdown(&mut self) {
        for (handle, cancel) in self.running.values() {
            cancel.cancel();
            handle.abort();
        }
        self.running.clear();
        let environments = self.environments.clone();
        let _ = tokio::task::spawn_blocking(move || {
            if let Ok(mut environments) = environments.lock() {
                environments.teardown_all();
            }
        })
        .await;
    }

    /// One session: register (claiming the tasks still running here and the outcomes not yet
    /// sent), then run what the scheduler assigns until it goes away or a signal stops the
    /// worker. Returns why it ended. Tasks go on across sessions; a signal stops them.
    pub async fn session(&mut self, access: &AccessFile) -> Result<String, NetError> {
        let (endpoint, connection, mut send, mut recv) =
            net::connect(access, Role::Worker, self.settings.idle_timeout).await?;
        self.abandon_if_expired();
        // Reported before and never acknowledged (the scheduler may have died before it kept
        // them): reported again, after the ones not sent at all.
        let mut unsent: Vec<(TaskId, Outcome)> = self.unacknowledged.drain(..).collect();
        self.reported = 0;
        self.acknowledged = 0;
        while let Ok((task, outcome)) = self.finished.try_recv() {
            self.running.remove(&task);
            if !self.abandoned.remove(&task) {
                unsent.push((task, outcome));
            }
        }
        let mut info = self.settings.info.clone();
        info.local_environments = self
            .settings
            .local_environments
            .iter()
            .map(|e| e.name.clone())
            .collect();
        info.running = self
            .running
            .keys()
            .copied()
            .chain(unsent.iter().map(|(task, _)| *task))
            .collect();
        frame::write(&mut send, &FromWorker::Register(info)).await?;
        let (id, lease_ms) = match frame::read::<_, ToWorker>(&mut recv).await? {
            ToWorker::Registered { id, lease_ms } => (id, lease_ms),
            other => {
                return Err(NetError::Refused(format!(
                    "expected Registered, got {other:?}"
                )));
            }
        };
        self.lease =
            (lease_ms > 0).then(|| (Duration::from_millis(lease_ms), std::time::Instant::now()));
        self.renew();
        tracing::info!(worker = id, address = %access.address, claimed = self.running.len() + unsent.len(), "registered");

        let (outgoing, mut outbox) = mpsc::unbounded_channel::<FromWorker>();
        let mut writer = tokio::spawn(async move {
            while let Some(message) = outbox.recv().await {
                frame::write(&mut send, &message).await?;
            }
            Ok::<_, NetError>(())
        });
        // What this worker already knows, for the scheduler that just registered it.
        let verdicts = self
            .environments
            .lock()
            .map(|e| e.current())
            .unwrap_or_default();
        if !verdicts.is_empty() {
            let _ = outgoing.send(FromWorker::Verdicts(verdicts));
        }
        if !unsent.is_empty() {
            self.report(&outgoing, unsent);
        }
        let (env_updates, env_inbox) = mpsc::unbounded_channel();
        let env_task = tokio::spawn(evaluate_environments(
            self.environments.clone(),
            env_inbox,
            outgoing.clone(),
            self.settings.env_recheck,
        ));
        let mut heartbeat = tokio::time::interval(self.settings.heartbeat_interval);
        // The lease is renewed four times within its length, whatever the heartbeat interval.
        let lease_length = self
            .lease
            .map_or(Duration::from_secs(3600), |(length, _)| length);
        let mut renewal = tokio::time::interval((lease_length / 4).max(Duration::from_millis(10)));
        let mut sigterm =
            tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate())?;
        let mut frames = net::frames::<ToWorker>(recv);
        let reason = loop {
            tokio::select! {
                _ = sigterm.recv() => break "stopped by SIGTERM".to_string(),
                _ = renewal.tick() => {
                    if connection.close_reason().is_none() {
                        self.renew();
                    }
                }
                _ = heartbeat.tick() => {
                    if outgoing.send(FromWorker::Heartbeat).is_err() {
                        break "connection writer ended".to_string();
                    }
                }
                Some(first) = self.finished.recv() => {
                    let mut batch = Vec::new();
                    let mut next = Some(first);
                    while let Some((task, outcome)) = next {
                        self.running.remove(&task);
                        if !self.abandoned.remove(&task) {
                            batch.push((task, outcome));
                        }
                        next = if batch.len() < 4096 { self.finished.try_recv().ok() } else { None };
                    }
                    if !batch.is_empty() {
                        self.report(&outgoing, batch);
                    }
                }
                message = frames.recv() => match message.unwrap_or(Err(crate::proto::FrameError::Closed)) {
                    Ok(message) => {
                        if let Some(reason) = self.handle(message, &env_updates).await {
                            break reason;
                        }
                    }
                    Err(error) => break error.to_string(),
                },
                ended = &mut writer => break match ended {
                    Ok(Ok(())) => "connection writer ended".to_string(),
                    Ok(Err(error)) => error.to_string(),
                    Err(error) => error.to_string(),
                },
            }
        };
        env_task.abort();
        if reason.starts_with("stopped by") {
            // Stop reporting, stop every task (a command's group is killed and reaped, a wasm
            // instance interrupted), then close with the stopping code: the scheduler requeues
            // them, spending no retry, once they are dead.
            writer.abort();
            self.shutdown().await;
            net::close_stopping(&endpoint, &connection, "worker stopping").await;
        } else {
            // Lost the scheduler: the tasks go on, to be claimed when this worker registers
            // again, within the lease (the guard process stops them if it runs out).
            writer.abort();
            connection.close(0u32.into(), b"worker reconnecting");
        }
        Ok(reason)
    }

    /// Send outcomes, keeping them until the scheduler acknowledges them.
    fn report(
        &mut self,
        outgoing: &mpsc::UnboundedSender<FromWorker>,
        batch: Vec<(TaskId, Outcome)>,
    ) {
        self.reported += batch.len() as u64;
        self.unacknowledged.extend(batch.iter().cloned());
        let _ = outgoing.send(FromWorker::Finished(batch));
    }

    /// One message from the scheduler; `Some(reason)` ends the session.
    async fn handle(
        &mut self,
        message: ToWorker,
        env_updates: &mpsc::UnboundedSender<EnvUpdate>,
    ) -> Option<String> {
        match message {
            ToWorker::Group { id, job, spec } => {
                self.groups.insert(id, Arc::new(Group { job, spec }));
            }
            ToWorker::Component { hash, bytes } => self.runner.add_component(hash, bytes).await,
            ToWorker::Forget { groups, components } => {
                for id in groups {
                    self.groups.remove(&id);
                }
                self.runner.forget_components(&components).await;
            }
            ToWorker::Run(assignments) if self.settings.no_execute => {
                for assignment in assignments {
                    let _ = self
                        .done
                        .send((assignment.task, Outcome::Returned { output: Vec::new() }));
                }
            }
            ToWorker::Run(assignments) => {
                for assignment in assignments {
                    let task = assignment.task;
                    let Some(group) = self.groups.get(&assignment.group).cloned() else {
                        let message = format!("unknown group {}", assignment.group);
                        let _ = self.done.send((task, Outcome::Error { message }));
                        continue;
                    };
                    let runner = self.runner.clone();
                    let done = self.done.clone();
                    let cancel = Arc::new(run::Cancel::default());
                    let stop = cancel.clone();
                    let span = tracing::debug_span!("task", task, group = assignment.group);
                    let handle = tokio::spawn(tracing::Instrument::instrument(
                        async move {
                            let outcome = runner.run(&group, assignment, &stop).await;
                            let _ = done.send((task, outcome));
                        },
                        span,
                    ));
                    self.running.insert(task, (handle.abort_handle(), cancel));
                }
            }
            ToWorker::Cancel(tasks) => {
                // The task reports `canceled` once it has really stopped.
                for task in tasks {
                    if let Some((_, cancel)) = self.running.get(&task) {
                        cancel.cancel();
                    }
                }
            }
            ToWorker::Environments { defs, components } => {
                let _ = env_updates.send((defs, components));
            }
            ToWorker::Received { count } => {
                let durable = count.min(self.reported).saturating_sub(self.acknowledged);
                for _ in 0..durable {
                    self.unacknowledged.pop_front();
                }
                self.acknowledged += durable;
            }
            ToWorker::Registered { .. } => return Some("registered twice".to_string()),
        }
        None
    }
}

type EnvUpdate = (
    Vec<crate::proto::EnvironmentDef>,
    Vec<(crate::proto::ComponentHash, Vec<u8>)>,
);

/// Evaluate at start, on every new set from the scheduler, and every `recheck`; report changes.
async fn evaluate_environments(
    environments: Arc<Mutex<env::Environments>>,
    mut updates: mpsc::UnboundedReceiver<EnvUpdate>,
    outgoing: mpsc::UnboundedSender<FromWorker>,
    recheck: Duration,
) {
    let mut ticker = tokio::time::interval(recheck);
    ticker.tick().await; // the first tick is immediate: the evaluation below covers it
    let mut pending: Option<EnvUpdate> = None;
    let mut full = false;
    loop {
        let environments = environments.clone();
        let update = pending.take();
        let evaluated = tokio::task::spawn_blocking(move || {
            let Ok(mut environments) = environments.lock() else {
                return env::Evaluated::default();
            };
            if let Some((defs, components)) = update {
                environments.set_remote(defs, components);
            }
            environments.evaluate(full)
        })
        .await
        .unwrap_or_default();
        // Loads first: a `register --wait` is answered as soon as the verdicts are in.
        if !evaluated.loads.is_empty() && outgoing.send(FromWorker::Loads(evaluated.loads)).is_err()
        {
            return;
        }
        if !evaluated.changes.is_empty()
            && outgoing
                .send(FromWorker::Verdicts(evaluated.changes))
                .is_err()
        {
            return;
        }
        tokio::select! {
            update = updates.recv() => match update {
                Some(update) => { pending = Some(update); full = false; }
                None => return,
            },
            _ = ticker.tick() => full = true,
        }
    }
}
