//! The worker: connects, registers, runs what the scheduler assigns, reports in batches.
//!
//! Up to `slots` tasks run at once; the scheduler may hand over a few more ahead of a free slot
//! (its `--prefetch`), which wait here for one and may be taken back until they start. Command
//! tasks are processes (killed on timeout or cancel); wasm tasks run in the sandbox on blocking
//! threads. Finished runs are sent in batches: at once when nothing waits here to start next,
//! otherwise once as many have finished as still wait (so the scheduler refills in one frame),
//! and never later than [`crate::core::worker::HOLD_REPORTS_MS`] after the first of them.
//!
//! What it decides (the lease, the held tasks and their slots, claims, outcome batches and
//! acknowledgements) is the pure core's, [`crate::core::worker`]; this is its shell. Here: what a
//! worker keeps across sessions, and the actions of the core it performs. `session.rs`: one
//! session with the scheduler; `run.rs`: running one task; `env.rs`: its environment
//! conditions; `guard.rs`: the process that stops its tasks when it dies or its lease runs out.

mod cancel;
pub mod env;
pub mod execute;
mod functions;
pub mod guard;
mod run;
mod session;
mod spawn;
pub use spawn::check_support as check_command_support;

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use tokio::sync::mpsc;
use tokio::task::AbortHandle;

use crate::clock::Millis;
use crate::core::worker as core;
use crate::net::NetError;
use crate::net::udp::{HostUdp, Udp};
use crate::plugin::{PluginError, PluginHost};
use crate::proto::{Assignment, GroupId, JobId, Outcome, TaskId, TaskSpec, WorkerRegistration};

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
    pub info: WorkerRegistration,
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
    pub ends_at: Option<tokio::time::Instant>,
}

/// The worker's seams (see `docs/architecture.md`, "Seams"); [`Seams::real`] is the host's.
#[derive(Clone, Debug)]
pub struct Seams {
    /// The worker's clock: the core's `now`, the lease's times and the guard's deadline.
    pub clock: Millis,
    /// The sockets it connects to the scheduler from.
    pub udp: Arc<dyn Udp>,
    /// Who runs its tasks (`None`: the worker, as processes, components and function runners).
    pub execute: Option<Arc<dyn execute::Execute>>,
}

impl Seams {
    /// The host's: tokio's clock (starting now), the host's sockets.
    pub fn real() -> Seams {
        Seams {
            clock: Millis::real(),
            udp: Arc::new(HostUdp),
            execute: None,
        }
    }
}

/// A task's run ended here: which hand-over of it (the core's run number), its outcome, and
/// when it ended on the worker's clock (`Worker::clock`; the core judges from that whether it
/// ended under the lease).
pub(crate) struct Done {
    task: TaskId,
    run: u64,
    outcome: Outcome,
    at: u64,
}

impl Done {
    fn now(clock: &Millis, task: TaskId, run: u64, outcome: Outcome) -> Done {
        Done {
            task,
            run,
            outcome,
            at: clock.now(),
        }
    }
}

pub(crate) struct Group {
    pub job: JobId,
    pub spec: TaskSpec,
}

/// What a worker keeps across its sessions with the scheduler: its core (what it holds and
/// decides), the runs going on (which go on while it reconnects, and are claimed when it
/// registers again), the group specs and components it was given, and its conditions.
pub struct Worker {
    settings: Settings,
    /// The worker's clock (`Seams::clock`).
    clock: Millis,
    udp: Arc<dyn Udp>,
    /// `Seams::execute`.
    execute: Option<Arc<dyn execute::Execute>>,
    /// The scheduler's lease as this worker holds it (the guard process is told of each
    /// renewal).
    lease: Arc<guard::Lease>,
    core: core::WorkerCore,
    runner: Arc<run::Runner>,
    environments: Arc<Mutex<env::Environments>>,
    groups: HashMap<GroupId, Arc<Group>>,
    /// Runs going on, by task and run (the core's hand-over number): each one's tokio task and
    /// controls.
    running: HashMap<(TaskId, u64), (AbortHandle, Arc<run::Cancel>)>,
    done: mpsc::UnboundedSender<Done>,
    finished: mpsc::UnboundedReceiver<Done>,
}

impl Worker {
    pub fn new(settings: Settings, seams: Seams) -> Result<Worker, WorkerError> {
        let Seams {
            clock,
            udp,
            execute,
        } = seams;
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
        let lease = Arc::new(guard::Lease::default());
        let runner = Arc::new(run::Runner::new(
            host,
            settings.output_limit,
            settings.max_tasks_per_runner,
            settings.info.clone(),
            values,
            clock.clone(),
            lease.clone(),
        ));
        let (done, finished) = mpsc::unbounded_channel();
        let mut info = settings.info.clone();
        info.local_environments = (settings.local_environments.iter())
            .map(|e| e.name.clone())
            .collect();
        let core = core::WorkerCore::new(core::Config {
            info,
            heartbeat_ms: millis(settings.heartbeat_interval),
            signal_grace_ms: millis(settings.signal_grace),
            ends_at: settings.ends_at.map(|end| clock.since(end)),
        });
        Ok(Worker {
            settings,
            clock,
            udp,
            execute,
            lease,
            core,
            runner,
            environments,
            groups: HashMap::new(),
            running: HashMap::new(),
            done,
            finished,
        })
    }

    /// Stop every task and tear the conditions down (the worker is leaving).
    pub async fn shutdown(&mut self) {
        for (handle, cancel) in self.running.values() {
            cancel.cancel();
            handle.abort();
        }
        self.running.clear();
        let environments = self.environments.clone();
        if env::peek(&environments, |e| !e.has_conditions()) == Some(true) {
            return;
        }
        let _ = tokio::task::spawn_blocking(move || {
            if let Ok(mut environments) = environments.lock() {
                environments.teardown_all();
            }
        })
        .await;
    }

    /// Start a run the core decided on.
    fn start(&mut self, run: u64, assignment: Assignment) {
        let task = assignment.task;
        let done = self.done.clone();
        let clock = self.clock.clone();
        if self.settings.no_execute {
            let output = Outcome::Returned { output: Vec::new() };
            let _ = done.send(Done::now(&clock, task, run, output));
            return;
        }
        // The core starts nothing past the lease; the guard's view is checked again here, at
        // the last moment (the scheduler may be running it elsewhere by now): it never starts,
        // and says so (an outcome outside the lease, which the core takes as a lapse).
        if self.lease.expired(self.clock.now()) {
            let _ = done.send(Done::now(&clock, task, run, core::canceled()));
            return;
        }
        let Some(group) = self.groups.get(&assignment.group).cloned() else {
            let message = format!("unknown group {}", assignment.group);
            let _ = done.send(Done::now(&clock, task, run, Outcome::Error { message }));
            return;
        };
        let runner = self.runner.clone();
        let cancel = Arc::new(run::Cancel::started(self.lease.lapses()));
        let stop = cancel.clone();
        let span = tracing::debug_span!("task", task, group = assignment.group);
        let handle = match &self.execute {
            None => tokio::spawn(tracing::Instrument::instrument(
                async move {
                    let outcome = runner.run(&group, assignment, &stop).await;
                    let _ = done.send(Done::now(&clock, task, run, outcome));
                },
                span,
            )),
            Some(execute) => {
                let execution = execute::Execution {
                    worker: self.settings.info.name.clone(),
                    task,
                    run,
                    input: (assignment.input.as_ref())
                        .map_or_else(|| group.spec.input.clone(), |input| input.to_vec()),
                    timeout: (group.spec.timeout_ms > 0)
                        .then(|| Duration::from_millis(group.spec.timeout_ms)),
                    stop: execute::Stop {
                        cancel: stop,
                        lease: self.lease.clone(),
                        clock: clock.clone(),
                    },
                };
                let running = execute.execute(execution);
                tokio::spawn(tracing::Instrument::instrument(
                    async move {
                        let outcome = running.await;
                        let _ = done.send(Done::now(&clock, task, run, outcome));
                    },
                    span,
                ))
            }
        };
        self.running
            .insert((task, run), (handle.abort_handle(), cancel));
    }
}

/// A duration in whole milliseconds.
fn millis(duration: Duration) -> u64 {
    u64::try_from(duration.as_millis()).unwrap_or(u64::MAX)
}
