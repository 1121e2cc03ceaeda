//! The worker: connects, registers, runs what the scheduler assigns, reports in batches.
//!
//! Up to `slots` tasks run at once; the scheduler may hand over a few more ahead of a free slot
//! (its `--prefetch`), which wait here for one and may be taken back until they start. Command
//! tasks are processes (killed on timeout or cancel); wasm tasks run in the sandbox on blocking
//! threads. Finished runs are sent in batches: at once when nothing waits here to start next,
//! otherwise once as many have finished as still wait (so the scheduler refills in one frame),
//! and never later than [`session::HOLD_REPORTS`] after the first of them.
//!
//! Here: what a worker keeps across sessions. `session.rs`: one session with the scheduler;
//! `run.rs`: running one task; `env.rs`: its environment conditions; `guard.rs`: the process
//! that stops its tasks when it dies or its lease runs out; `lease.rs`: the lease rule.

mod cancel;
pub mod env;
mod functions;
pub mod guard;
mod lease;
mod run;
mod session;

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use tokio::sync::mpsc;
use tokio::task::AbortHandle;

use crate::net::{NetError, Outbox};
use crate::plugin::{PluginError, PluginHost};
use crate::proto::{FromWorker, GroupId, JobId, Outcome, TaskId, TaskSpec, WorkerInfo};

/// What stops a worker from starting or from reaching the scheduler.
#[derive(Debug, thiserror::Error)]
pub enum WorkerError {
    #[error(transparent)]
    Net(#[from] NetError),
    #[error(transparent)]
    Plugin(#[from] PluginError),
}

#[derive(Clone, Debug)]
pub struct Settings {
    pub info: WorkerInfo,
    pub heartbeat_interval: Duration,
    /// Cap on each of stdout and stderr kept from a command task.
    pub output_limit: usize,
    /// Tasks a function runner runs before it is replaced (0: no limit).
    pub max_tasks_per_runner: u32,
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
    /// How long the outcome of a task a signal ended (one this worker did not send) waits for
    /// the worker's own stop signal before it is reported: an engine that stops the worker
    /// signals its tasks too, and then they are requeued, not failed.
    pub signal_grace: Duration,
    /// When this worker leaves by itself (`--ends-in`: its allocation ends soon after). It is
    /// given no task whose timeout would outlive this, and at this moment it stops like on
    /// SIGTERM: what still runs is requeued without spending a retry.
    pub ends_at: Option<std::time::Instant>,
}

/// A task's run ended here: its outcome, and whether it counts as ended under the lease: the
/// lease held from its hand-over to its end (checked after the outcome was produced, so a run
/// that ended just before the lease ran out may count as after it: given up, never the
/// reverse), or the run ended by itself (not killed, not canceled) within
/// [`crate::core::lease::KILL_MARGIN`] after the lease's end, before the guard's kill reached it.
/// That run is over before the scheduler's fence ends (which covers the margin), so nothing
/// else ran the task meanwhile: its outcome is as good as one from within the lease.
pub(crate) struct Done {
    task: TaskId,
    outcome: Outcome,
    in_lease: bool,
    /// Which hand-over of the task here it is ([`run::Cancel::run`]; 0: never held).
    run: u64,
}

impl Done {
    /// The end of the run `cancel` controls.
    fn of(cancel: &run::Cancel, task: TaskId, outcome: Outcome) -> Done {
        Done::now(task, outcome, cancel.lapses, cancel.run)
    }

    /// A run that ended now; `lapses`: [`guard::lapses`] when it was handed over. A run the
    /// lease lapsed during (the guard killed it, or it was given up) is not valid even if the
    /// lease was renewed since.
    fn now(task: TaskId, outcome: Outcome, lapses: u64, run: u64) -> Done {
        let by_itself = matches!(
            outcome,
            Outcome::Exited { code: Some(_), .. }
                | Outcome::Returned { .. }
                | Outcome::Function { .. }
        );
        let in_time = !guard::lease_expired()
            || (by_itself && !guard::lease_expired_by(crate::core::lease::KILL_MARGIN));
        Done {
            task,
            outcome,
            in_lease: in_time && guard::lapses() == lapses,
            run,
        }
    }
}

/// The most outcome bytes one `Finished` frame carries (a single bigger outcome goes alone: a
/// function result is capped below the frame limit, command output by `--output-limit`).
const REPORT_FRAME_BYTES: usize = 16 << 20;

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
    /// Tasks held: running, or waiting for a slot.
    running: HashMap<TaskId, (AbortHandle, Arc<run::Cancel>)>,
    /// Hand-overs so far (each run's [`run::Cancel::run`]).
    runs: u64,
    /// One permit per slot: a held task runs once it has one.
    slots: Arc<tokio::sync::Semaphore>,
    /// Resolves once the task handed over last has its slot (or is gone): the next one asks
    /// for a slot only then, so held tasks start in the order they were handed over (each is
    /// a tokio task of its own, and tokio polls new tasks in no set order).
    queue_tail: Option<tokio::sync::oneshot::Receiver<()>>,
    done: mpsc::UnboundedSender<Done>,
    finished: mpsc::UnboundedReceiver<Done>,
    /// Tasks that got a slot and started, to be reported with the next outcomes.
    start: mpsc::UnboundedSender<TaskId>,
    started: mpsc::UnboundedReceiver<TaskId>,
    /// Outcomes reported in this session and not yet acknowledged as durable, oldest first;
    /// those left when a session ends are claimed and reported again on the next one.
    unacknowledged: std::collections::VecDeque<(TaskId, Outcome)>,
    /// How many outcomes this session reported, of which the first `acknowledged` are durable.
    reported: u64,
    acknowledged: u64,
    /// The scheduler's lease on this worker's tasks (`None`: the scheduler grants none).
    lease: Option<lease::Lease>,
}

impl Worker {
    pub fn new(settings: Settings) -> Result<Worker, WorkerError> {
        // A fresh instance per wasm task: pooled memory.
        let host = Arc::new(PluginHost::pooled(crate::plugin::cache::default_dir())?);
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
            settings.max_tasks_per_runner,
            settings.info.clone(),
            values,
        ));
        let (done, finished) = mpsc::unbounded_channel();
        let (start, started) = mpsc::unbounded_channel();
        let slots = Arc::new(tokio::sync::Semaphore::new(settings.info.slots as usize));
        Ok(Worker {
            slots,
            settings,
            runner,
            environments,
            groups: HashMap::new(),
            running: HashMap::new(),
            done,
            finished,
            start,
            started,
            queue_tail: None,
            runs: 0,
            unacknowledged: std::collections::VecDeque::new(),
            reported: 0,
            acknowledged: 0,
            lease: None,
        })
    }

    /// A run ended: whether it is the one the task is held for here, forgetting it if so. A
    /// task stopped and handed over again before its first run's end was read holds its new
    /// run: the first one's `canceled` is not the task's outcome, and is dropped.
    fn ended(&mut self, done: &Done) -> bool {
        match self.running.get(&done.task) {
            Some((_, cancel)) if cancel.run != done.run => false,
            _ => {
                self.running.remove(&done.task);
                true
            }
        }
    }

    /// Whether the lease ran out (always false without one). One notion of it in the whole
    /// process: the guard module's, which the tasks check too.
    fn lease_expired(&self) -> bool {
        self.lease.is_some() && guard::lease_expired()
    }

    /// Past the lease, the scheduler runs this worker's tasks elsewhere (once its fence is
    /// over): give up every task that has not finished — kill what runs (the guard has killed
    /// the command tasks' groups already), start nothing held ahead — and never report them.
    /// What finished under the lease is kept, and reported: an outcome already produced is in
    /// `finished`, and says itself whether it was produced under the lease ([`Done`]).
    fn give_up_if_expired(&mut self) {
        if self.lease_expired() {
            self.give_up();
        }
    }

    /// Stop every task that has not finished and forget it (see [`Worker::give_up_if_expired`]).
    fn give_up(&mut self) {
        if self.running.is_empty() {
            return;
        }
        tracing::warn!(
            tasks = self.running.len(),
            "the scheduler's lease ran out: stopping this worker's tasks (they run elsewhere)"
        );
        for (_, (handle, cancel)) in self.running.drain() {
            cancel.cancel();
            handle.abort();
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

    /// How many held tasks wait for a slot (have not started).
    fn waiting(&self) -> usize {
        let busy =
            (self.settings.info.slots as usize).saturating_sub(self.slots.available_permits());
        self.running.len().saturating_sub(busy)
    }

    /// Send outcomes, keeping them until the scheduler acknowledges them; the tasks started
    /// since the last report go first.
    fn report(&mut self, outgoing: &Outbox<FromWorker>, batch: Vec<(TaskId, Outcome)>) {
        let mut started = Vec::new();
        while let Ok(task) = self.started.try_recv() {
            started.push(task);
        }
        if !started.is_empty() {
            let _ = outgoing.send(FromWorker::Started(started));
        }
        if batch.is_empty() {
            return;
        }
        self.reported += batch.len() as u64;
        self.unacknowledged.extend(batch.iter().cloned());
        // Frames well below the frame limit, however big the outputs (the scheduler counts
        // outcomes, not frames, when it acknowledges them).
        let mut frame = Vec::new();
        let mut bytes = 0;
        for (task, outcome) in batch {
            let size = outcome.size_hint();
            if !frame.is_empty() && bytes + size > REPORT_FRAME_BYTES {
                let _ = outgoing.send(FromWorker::Finished(std::mem::take(&mut frame)));
                bytes = 0;
            }
            bytes += size;
            frame.push((task, outcome));
        }
        if !frame.is_empty() {
            let _ = outgoing.send(FromWorker::Finished(frame));
        }
    }
}
