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

/// Run until the scheduler closes the connection. Returns why it ended.
pub async fn run(access: &AccessFile, settings: Settings) -> Result<String, NetError> {
    let (endpoint, connection, mut send, mut recv) =
        net::connect(access, Role::Worker, settings.idle_timeout).await?;
    let mut info = settings.info.clone();
    info.local_environments = settings
        .local_environments
        .iter()
        .map(|e| e.name.clone())
        .collect();
    frame::write(&mut send, &FromWorker::Register(info)).await?;
    let id = match frame::read::<_, ToWorker>(&mut recv).await? {
        ToWorker::Registered { id } => id,
        other => {
            return Err(NetError::Refused(format!(
                "expected Registered, got {other:?}"
            )));
        }
    };
    tracing::info!(worker = id, address = %access.address, "registered");

    let (outgoing, mut outbox) = mpsc::unbounded_channel::<FromWorker>();
    let (done, mut finished) = mpsc::unbounded_channel::<(TaskId, Outcome)>();
    let writer = tokio::spawn(async move {
        while let Some(message) = outbox.recv().await {
            frame::write(&mut send, &message).await?;
        }
        Ok::<_, NetError>(())
    });
    // Batch finished runs.
    let batcher = {
        let outgoing = outgoing.clone();
        tokio::spawn(async move {
            while let Some(first) = finished.recv().await {
                let mut batch = vec![first];
                while batch.len() < 4096 {
                    match finished.try_recv() {
                        Ok(result) => batch.push(result),
                        Err(_) => break,
                    }
                }
                if outgoing.send(FromWorker::Finished(batch)).is_err() {
                    return;
                }
            }
        })
    };
    let heartbeat = {
        let outgoing = outgoing.clone();
        let interval = settings.heartbeat_interval;
        tokio::spawn(async move {
            let mut ticker = tokio::time::interval(interval);
            loop {
                ticker.tick().await;
                if outgoing.send(FromWorker::Heartbeat).is_err() {
                    return;
                }
            }
        })
    };

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
    let (env_updates, env_inbox) = mpsc::unbounded_channel();
    let env_task = tokio::spawn(evaluate_environments(
        environments.clone(),
        env_inbox,
        outgoing.clone(),
        settings.env_recheck,
    ));
    let runner = Arc::new(run::Runner::new(
        host,
        settings.output_limit,
        settings.info.clone(),
        values,
    ));
    let mut groups: HashMap<GroupId, Arc<Group>> = HashMap::new();
    let mut running: HashMap<TaskId, (AbortHandle, Arc<run::Cancel>)> = HashMap::new();
    let (ended, mut reaped) = mpsc::unbounded_channel::<TaskId>();
    let mut sigterm = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate())?;
    let mut frames = net::frames::<ToWorker>(recv);
    let reason = loop {
        tokio::select! {
            _ = sigterm.recv() => break "stopped by SIGTERM".to_string(),
            message = frames.recv() => match message.unwrap_or(Err(crate::proto::FrameError::Closed)) {
                Ok(ToWorker::Group { id, job, spec }) => { groups.insert(id, Arc::new(Group { job, spec })); }
                Ok(ToWorker::Component { hash, bytes }) => runner.add_component(hash, bytes).await,
                Ok(ToWorker::Forget { groups: gone, components }) => {
                    for id in gone { groups.remove(&id); }
                    runner.forget_components(&components).await;
                }
                Ok(ToWorker::Run(assignments)) if settings.no_execute => {
                    for assignment in assignments {
                        let _ = done.send((assignment.task, Outcome::Returned { output: Vec::new() }));
                    }
                }
                Ok(ToWorker::Run(assignments)) => {
                    for assignment in assignments {
                        let Some(group) = groups.get(&assignment.group).cloned() else {
                            let message = format!("unknown group {}", assignment.group);
                            let _ = done.send((assignment.task, Outcome::Error { message }));
                            continue;
                        };
                        let task = assignment.task;
                        let runner = runner.clone();
                        let done = done.clone();
                        let ended = ended.clone();
                        let cancel = Arc::new(run::Cancel::default());
                        let stop = cancel.clone();
                        let span = tracing::debug_span!("task", task, group = assignment.group);
                        let handle = tokio::spawn(tracing::Instrument::instrument(async move {
                            let outcome = runner.run(&group, assignment, &stop).await;
                            let _ = ended.send(task);
                            let _ = done.send((task, outcome));
                        }, span));
                        running.insert(task, (handle.abort_handle(), cancel));
                    }
                }
                Ok(ToWorker::Cancel(tasks)) => {
                    // The task reports `canceled` once it has really stopped.
                    for task in tasks {
                        if let Some((_, cancel)) = running.get(&task) {
                            cancel.cancel();
                        }
                    }
                }
                Ok(ToWorker::Environments { defs, components }) => { let _ = env_updates.send((defs, components)); }
                Ok(ToWorker::Registered { .. }) => break "registered twice".to_string(),
                Err(error) => break error.to_string(),
            },
            Some(task) = reaped.recv() => { running.remove(&task); }
        }
    };
    // Close first, so nothing more is reported from here on: a task killed below must not be
    // reported failed (the scheduler requeues what ran here; a planned stop spends no retry).
    let planned = reason.starts_with("stopped by");
    if planned {
        connection.close(net::CLOSE_STOPPING, b"worker stopping");
    } else {
        connection.close(0u32.into(), b"worker stopping");
    }
    heartbeat.abort();
    batcher.abort();
    writer.abort();
    // Interrupt wasm tasks (their threads would hold the runtime's shutdown up), and abort the
    // rest: dropping a command task kills its process group.
    for (handle, cancel) in running.values() {
        cancel.cancel();
        handle.abort();
    }
    env_task.abort();
    if planned {
        // The scheduler hears of the stop within a round trip, not by timeout.
        net::close_stopping(&endpoint, &connection, "worker stopping").await;
    }
    let _ = tokio::task::spawn_blocking(move || {
        if let Ok(mut environments) = environments.lock() {
            environments.teardown_all();
        }
    })
    .await;
    Ok(reason)
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
