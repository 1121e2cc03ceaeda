//! The scheduler's async shell around [`crate::core::tasks::Core`].
//!
//! One actor task owns the core. Connection tasks turn frames into [`Event`]s for it; it drains
//! every pending event, runs the core once (`schedule`), and turns the core's actions into frames
//! for workers and responses for clients. Batching happens naturally: the busier it is, the more
//! events one round handles and the larger the dispatch frames.

mod connection;
pub mod journal;
pub mod lock;
mod metrics;
pub mod record;
mod replay;

use std::collections::{BTreeMap, HashMap, HashSet};
use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::{Duration, Instant};

use tokio::sync::{mpsc, oneshot};

use crate::core::managers::{Context, Managers};
use crate::core::scaling::{Decision, Snapshot, Tier};
use crate::core::tasks::{Action, Config as CoreConfig, Tasks as Core};
use crate::core::tasks::{EnvSource, Loss};
use crate::net::{self, AccessFile, NetError};
use crate::plugin::{PluginHost, PolicyPlugin};
use crate::proto::{
    Assignment, ComponentHash, ComponentLoad, EnvVerdict, EnvironmentDef, GroupId, JobId,
    ManagerState, Request, Response, TaskKind, ToManager, ToWorker, WorkerId, WorkerInfo,
};

/// A journal smaller than this is never compacted while running (at start it is).
const JOURNAL_MIN_SIZE: u64 = 1 << 20;

/// Most run-time environments at once (each is evaluated by every worker).
pub const MAX_ENVIRONMENTS: usize = 256;

/// Scheduler settings (the executable's flags).
#[derive(Clone, Debug)]
pub struct Settings {
    /// Address to listen on; port 0 picks a free port (written to the access file).
    pub listen: SocketAddr,
    pub access_file: PathBuf,
    /// A worker silent for this long is lost and its tasks requeued.
    pub heartbeat_timeout: Duration,
    /// Certificate and key (PEM files); generated and kept beside the access file when absent.
    pub cert: Option<(PathBuf, PathBuf)>,
    /// How often the scaling policy decides.
    pub scaling_interval: Duration,
    /// A worker idle for less than this is not stopped.
    pub scale_down_delay: Duration,
    /// Append every snapshot given to the policy to this file (JSON lines) for `weir policy simulate`.
    pub record_snapshots: Option<PathBuf>,
    /// Keep every accepted task and final result here, and reload them at start.
    pub journal: Option<PathBuf>,
    /// Serve Prometheus metrics at http://ADDR/metrics.
    pub metrics: Option<SocketAddr>,
    /// Most open connections per token (clients; workers and managers).
    pub max_connections: usize,
    /// Forget a job (its results and inputs) this long after it finished; `None`: keep it until
    /// `weir forget`.
    pub forget_after: Option<Duration>,
    /// Fail queued tasks that no live worker or worker manager could run for this long; `None`:
    /// they wait (and `weir explain` says why).
    pub unschedulable_timeout: Option<Duration>,
    /// The lease on a worker's tasks: a worker that loses the scheduler stops its tasks once
    /// this has passed without a connection, and the scheduler runs them elsewhere only after
    /// that (see [`fence`]).
    pub worker_lease: Duration,
}

/// How long the tasks of a worker lost without a word (or found unfinished in the journal)
/// wait before running elsewhere: the lease, plus the time a worker may take to notice it lost
/// the scheduler (its connection's idle timeout), plus a margin. By then its runs are stopped.
pub fn fence(lease: Duration) -> Duration {
    lease + net::IDLE_TIMEOUT + Duration::from_secs(2)
}

/// The scaling policy and its tiers (for `weir status`).
pub struct Scaling {
    pub policy: PolicyPlugin,
    pub tiers: Vec<Tier>,
}

/// Messages from connection tasks to the actor.
pub(crate) enum Event {
    WorkerJoined {
        info: WorkerInfo,
        frames: mpsc::UnboundedSender<ToWorker>,
        reply: oneshot::Sender<WorkerId>,
    },
    Heartbeat {
        worker: WorkerId,
    },
    Finished {
        worker: WorkerId,
        results: Vec<(crate::proto::TaskId, crate::proto::Outcome)>,
    },
    Verdicts {
        worker: WorkerId,
        verdicts: Vec<(String, EnvVerdict)>,
    },
    Loads {
        worker: WorkerId,
        loads: Vec<(String, ComponentLoad)>,
    },
    WorkerGone {
        worker: WorkerId,
        reason: String,
        /// It closed its connection on purpose (stopped by its manager or a signal).
        planned: bool,
    },
    Request {
        request: Request,
        components: Vec<(ComponentHash, Arc<Vec<u8>>)>,
        reply: mpsc::UnboundedSender<Response>,
    },
    ManagerHeartbeat {
        state: ManagerState,
        link: mpsc::UnboundedSender<ToManager>,
    },
    ManagerGone {
        id: String,
    },
    /// The manager is stopping on purpose: forget it.
    ManagerGoodbye {
        id: String,
    },
    Decided {
        result: Result<Vec<Decision>, String>,
        elapsed: Duration,
    },
    Metrics {
        reply: oneshot::Sender<String>,
    },
}

struct WorkerLink {
    frames: mpsc::UnboundedSender<ToWorker>,
    /// Outcomes it reported, and how many of them were acknowledged (once durable).
    received: u64,
    acknowledged: u64,
    groups: HashSet<GroupId>,
    components: HashSet<ComponentHash>,
    /// Condition components already sent.
    conditions: HashSet<ComponentHash>,
}

/// A `weir workers wait` waiting for enough live workers.
struct WorkerWait {
    count: u32,
    environment: Option<String>,
    /// The count last sent (progress is sent when it changes).
    last: Option<u32>,
    reply: mpsc::UnboundedSender<Response>,
}

/// A `weir env register --wait` waiting for every live worker's verdict.
struct EnvWait {
    name: String,
    workers: HashSet<WorkerId>,
    reply: mpsc::UnboundedSender<Response>,
}

struct Actor {
    core: Core,
    started: Instant,
    workers: HashMap<WorkerId, WorkerLink>,
    components: HashMap<ComponentHash, Arc<Vec<u8>>>,
    waiters: HashMap<JobId, Vec<mpsc::UnboundedSender<Response>>>,
    /// Run-time environments, sent whole to every worker.
    environments: BTreeMap<String, EnvironmentDef>,
    env_waits: Vec<EnvWait>,
    worker_waits: Vec<WorkerWait>,
    managers: Managers,
    manager_links: HashMap<String, mpsc::UnboundedSender<ToManager>>,
    /// Snapshots to the policy thread; `None` without a policy.
    policy: Option<std::sync::mpsc::Sender<Snapshot>>,
    policy_busy: bool,
    policy_error: Option<String>,
    tiers: Vec<Tier>,
    scale_down_delay_ms: u64,
    record: Option<std::fs::File>,
    journal: Option<journal::Journal>,
    /// Replies held until this round's journal records are on disk.
    deferred: Vec<(mpsc::UnboundedSender<Response>, Response)>,
    /// The first journal write error of this round: its replies become errors.
    journal_error: Option<String>,
    /// Jobs forgotten since the journal was last compacted (what compacting would drop).
    forgets_since_compaction: u64,
    policy_latency: metrics::Histogram,
    policy_errors: u64,
    unschedulable_timeout: Option<Duration>,
    /// The lease granted to workers, in milliseconds (sent when they register).
    lease_ms: u64,
}

/// A running scheduler: its address and access file.
pub struct Running {
    pub address: String,
    pub access: AccessFile,
    /// Where `/metrics` is served, with `--metrics`.
    pub metrics: Option<SocketAddr>,
}

/// Bind, write the access file, and serve until the process ends.
pub async fn run(
    settings: Settings,
    scaling: Option<Scaling>,
    ready: impl FnOnce(&Running),
) -> Result<(), NetError> {
    // One scheduler per access file: a second one would overwrite the first one's address.
    let _access_lock = {
        if let Some(dir) = settings
            .access_file
            .parent()
            .filter(|d| !d.as_os_str().is_empty())
        {
            std::fs::create_dir_all(dir)?;
        }
        // Named after the real file (a symbolic link resolved): two paths, one lock.
        let real = std::fs::canonicalize(&settings.access_file)
            .unwrap_or_else(|_| settings.access_file.clone());
        let mut name = real.file_name().unwrap_or_default().to_os_string();
        name.push(".lock");
        lock::Lock::take(&real.with_file_name(name), "access file").map_err(NetError::Access)?
    };
    // The journal is checked and locked before anything is served or written.
    let journal = match &settings.journal {
        Some(path) => {
            Some(journal::Journal::open(path).map_err(|e| NetError::Access(e.to_string()))?)
        }
        None => None,
    };
    let (cert_pem, key_pem) = certificate(&settings)?;
    let mut server = net::tls::server_config(&cert_pem, &key_pem)?;
    server.transport_config(net::transport(settings.heartbeat_timeout));
    let endpoint =
        quinn::Endpoint::server(server, settings.listen).map_err(|e| NetError::Listen {
            address: settings.listen.to_string(),
            error: e.to_string(),
        })?;
    let local = endpoint.local_addr()?;
    let previous = AccessFile::read(&settings.access_file)
        .ok()
        .filter(|a| a.certificate == cert_pem);
    let access = AccessFile {
        address: format!("quic://{local}"),
        certificate: cert_pem,
        worker_token: match &previous {
            Some(p) => p.worker_token.clone(),
            None => net::access::new_token()?,
        },
        client_token: match &previous {
            Some(p) => p.client_token.clone(),
            None => net::access::new_token()?,
        },
    };
    access.write(&settings.access_file)?;
    tracing::info!(address = %access.address, access_file = %settings.access_file.display(), "scheduler listening");
    let metrics_listener = match settings.metrics {
        Some(address) => Some(metrics::bind(address).await?),
        None => None,
    };
    let metrics_address = match &metrics_listener {
        Some(listener) => Some(listener.local_addr()?),
        None => None,
    };
    ready(&Running {
        address: access.address.clone(),
        access: access.clone(),
        metrics: metrics_address,
    });

    let host =
        Arc::new(PluginHost::with_default_cache().map_err(|e| NetError::Tls(e.to_string()))?);
    let (events, inbox) = mpsc::unbounded_channel();
    let record = match &settings.record_snapshots {
        Some(path) => Some(
            std::fs::OpenOptions::new()
                .create(true)
                .append(true)
                .open(path)
                .map_err(|e| NetError::Access(format!("cannot open {}: {e}", path.display())))?,
        ),
        None => None,
    };
    if let Some(listener) = metrics_listener {
        tokio::spawn(metrics::serve(listener, events.clone()));
    }
    let tiers = scaling
        .as_ref()
        .map(|s| s.tiers.clone())
        .unwrap_or_default();
    let policy = scaling.map(|scaling| policy_thread(scaling.policy, events.clone()));
    let actor = Actor {
        core: Core::new(CoreConfig {
            heartbeat_timeout_ms: settings.heartbeat_timeout.as_millis() as u64,
            forget_after_ms: settings
                .forget_after
                .map(|d| u64::try_from(d.as_millis()).unwrap_or(u64::MAX)),
            fence_ms: u64::try_from(fence(settings.worker_lease).as_millis()).unwrap_or(u64::MAX),
        }),
        lease_ms: u64::try_from(settings.worker_lease.as_millis()).unwrap_or(u64::MAX),
        started: Instant::now(),
        workers: HashMap::new(),
        components: HashMap::new(),
        waiters: HashMap::new(),
        environments: BTreeMap::new(),
        env_waits: Vec::new(),
        worker_waits: Vec::new(),
        managers: Managers::new(settings.heartbeat_timeout.as_millis() as u64),
        manager_links: HashMap::new(),
        policy,
        policy_busy: false,
        policy_error: None,
        tiers,
        scale_down_delay_ms: settings.scale_down_delay.as_millis() as u64,
        record,
        journal: None,
        deferred: Vec::new(),
        journal_error: None,
        forgets_since_compaction: 0,
        policy_latency: metrics::Histogram::default(),
        policy_errors: 0,
        unschedulable_timeout: settings.unschedulable_timeout,
    };
    let mut actor = actor;
    if let Some((journal, records)) = journal {
        let forgotten = actor.replay(records);
        actor.journal = Some(journal);
        if forgotten > 0 {
            actor.compact_journal();
        }
    }
    let mut actor =
        tokio::spawn(actor.run(inbox, settings.heartbeat_timeout, settings.scaling_interval));
    let access = Arc::new(access);
    let limits = Arc::new(connection::ConnectionLimits::new(settings.max_connections));
    loop {
        let incoming = tokio::select! {
            incoming = endpoint.accept() => match incoming {
                Some(incoming) => incoming,
                None => return Ok(()),
            },
            ended = &mut actor => {
                // The actor stops only when the journal cannot be written: its last answers
                // (errors) go out, then the scheduler stops rather than run on with state the
                // journal does not have.
                tokio::time::sleep(Duration::from_millis(300)).await;
                endpoint.close(0u32.into(), b"scheduler stopping");
                return match ended {
                    Ok(Some(error)) => Err(NetError::Access(error)),
                    _ => Ok(()),
                };
            }
        };
        let events = events.clone();
        let access = access.clone();
        let host = host.clone();
        let limits = limits.clone();
        tokio::spawn(async move {
            if let Err(error) = connection::serve(incoming, limits, access, events, host).await {
                tracing::debug!(%error, "connection ended");
            }
        });
    }
}

/// The certificate and key: from `--cert/--key`, else kept in `scheduler-key.pem` /
/// `scheduler-cert.pem` beside the access file (created on first start), so restarts keep
/// the identity peers pinned.
fn certificate(settings: &Settings) -> Result<(String, String), NetError> {
    let read = |p: &PathBuf| {
        std::fs::read_to_string(p)
            .map_err(|e| NetError::Tls(format!("cannot read {}: {e}", p.display())))
    };
    if let Some((cert, key)) = &settings.cert {
        return Ok((read(cert)?, read(key)?));
    }
    let dir = settings
        .access_file
        .parent()
        .map_or_else(|| PathBuf::from("."), PathBuf::from);
    let (cert_path, key_path) = (
        dir.join("scheduler-cert.pem"),
        dir.join("scheduler-key.pem"),
    );
    if let (Ok(cert), Ok(key)) = (
        std::fs::read_to_string(&cert_path),
        std::fs::read_to_string(&key_path),
    ) {
        return Ok((cert, key));
    }
    let (cert, key) = net::tls::generate()?;
    let fail = |e: std::io::Error| {
        NetError::Tls(format!(
            "cannot write the certificate into {}: {e}",
            dir.display()
        ))
    };
    std::fs::create_dir_all(&dir).map_err(fail)?;
    net::access::write_private(&key_path, key.as_bytes()).map_err(fail)?;
    net::access::write_private(&cert_path, cert.as_bytes()).map_err(fail)?;
    Ok((cert, key))
}

impl Actor {
    fn now(&self) -> u64 {
        self.started.elapsed().as_millis() as u64
    }

    /// The event loop. Returns only when the journal cannot be written (with why): fail-stop,
    /// as a database does when its log cannot be synced. What it had synced stays, a torn last
    /// record is cut at the next start, and nothing that was acknowledged is lost.
    async fn run(
        mut self,
        mut inbox: mpsc::UnboundedReceiver<Event>,
        heartbeat_timeout: Duration,
        scaling: Duration,
    ) -> Option<String> {
        // At least twice a second, whatever the heartbeat timeout: fenced tasks are released,
        // forgotten jobs dropped and unschedulable ones failed on this tick.
        let mut ticker = tokio::time::interval(
            (heartbeat_timeout / 4).clamp(Duration::from_millis(50), Duration::from_millis(500)),
        );
        let mut scaling = tokio::time::interval(scaling);
        loop {
            tokio::select! {
                event = inbox.recv() => {
                    let event = event?;
                    self.handle(event);
                    // Take everything already waiting before scheduling once.
                    for _ in 0..10_000 {
                        match inbox.try_recv() {
                            Ok(event) => self.handle(event),
                            Err(_) => break,
                        }
                    }
                }
                _ = ticker.tick() => {
                    let now = self.now();
                    self.core.tick(now);
                    // A manager gone without a goodbye leaves the status after a minute.
                    self.managers.drop_offline(now, 60_000);
                    // The journal stays bounded by what is held, like memory: compacted while
                    // running once at least as many tasks were forgotten since the last
                    // compaction as are still held (half of it, or more, is gone).
                    if self.forgets_since_compaction > 0
                        && self.core.forgotten_tasks_since_compaction() >= self.core.held_tasks()
                        && self.journal.as_ref().is_some_and(|j| j.size() >= JOURNAL_MIN_SIZE)
                    {
                        self.apply();
                        self.compact_journal();
                    }
                    self.fail_unschedulable(now);
                }
                _ = scaling.tick() => self.scale(),
            }
            self.core.schedule();
            self.apply();
            self.settle_worker_waits();
            if let Some(journal) = &mut self.journal
                && let Err(error) = journal.sync()
            {
                self.journal_error.get_or_insert(error.to_string());
            }
            // Nothing is acknowledged that is not on disk: with a journal error this round,
            // the answers say so instead.
            let failed = self.journal_error.take();
            if let Some(error) = &failed {
                tracing::error!(%error, "cannot write the journal; this round's changes are not durable");
            }
            for (reply, response) in self.deferred.drain(..) {
                let response = match (&failed, response) {
                    (None, response) => response,
                    (Some(error), _) => Response::Error {
                        message: format!(
                            "not done: it could not be written to the journal, so it would not survive a restart, and the scheduler stops ({error})"
                        ),
                    },
                };
                let _ = reply.send(response);
            }
            if let Some(error) = failed {
                tracing::error!(%error, "the journal cannot be written: stopping; start the scheduler again once the disk is fixed (nothing acknowledged is lost)");
                return Some(format!("the journal cannot be written: {error}"));
            }
            // Outcomes are durable now: workers may forget them.
            for link in self.workers.values_mut() {
                if link.received > link.acknowledged {
                    link.acknowledged = link.received;
                    let _ = link.frames.send(ToWorker::Received {
                        count: link.received,
                    });
                }
            }
        }
    }

    fn journal(&mut self, record: journal::Record) {
        if matches!(record, journal::Record::Forget { .. }) {
            self.forgets_since_compaction += 1;
        }
        if let Some(journal) = &mut self.journal
            && let Err(error) = journal.append(&record)
        {
            self.journal_error.get_or_insert(error.to_string());
        }
    }

    /// `--unschedulable-timeout`: the core decides, asking the manager controller whether some
    /// manager could start a worker for the tasks.
    fn fail_unschedulable(&mut self, now: u64) {
        let Some(timeout) = self.unschedulable_timeout else {
            return;
        };
        let context = Context {
            now,
            workers: self.core.worker_views(now),
            tiers: &self.tiers,
            registered: self.core.registered_environments(),
        };
        let managers = &self.managers;
        let failed = self.core.fail_unschedulable(
            now,
            u64::try_from(timeout.as_millis()).unwrap_or(u64::MAX),
            |capabilities, environments| managers.could_serve(&context, capabilities, environments),
        );
        if failed > 0 {
            tracing::warn!(
                failed,
                "failed tasks nothing can run (--unschedulable-timeout)"
            );
        }
    }

    fn handle(&mut self, event: Event) {
        let now = self.now();
        match event {
            Event::WorkerJoined {
                info,
                frames,
                reply,
            } => {
                tracing::info!(name = %info.name, slots = info.slots, "worker joined");
                let claimed = info.running.len();
                let (id, refused) = self.core.worker_joined(now, info);
                if claimed > 0 {
                    tracing::info!(
                        worker = id,
                        claimed,
                        refused = refused.len(),
                        "worker re-registered with tasks it runs"
                    );
                }
                let _ = frames.send(ToWorker::Registered {
                    id,
                    lease_ms: self.lease_ms,
                });
                if !refused.is_empty() {
                    let _ = frames.send(ToWorker::Cancel(refused));
                }
                let link = WorkerLink {
                    frames,
                    received: 0,
                    acknowledged: 0,
                    groups: HashSet::new(),
                    components: HashSet::new(),
                    conditions: HashSet::new(),
                };
                self.workers.insert(id, link);
                self.send_environments(id);
                let _ = reply.send(id);
            }
            Event::Heartbeat { worker } => self.core.heartbeat(now, worker),
            Event::Finished { worker, results } => {
                if let Some(link) = self.workers.get_mut(&worker) {
                    link.received += results.len() as u64;
                }
                for (task, outcome) in results {
                    if !self.core.finished(now, worker, task, outcome) {
                        tracing::debug!(
                            worker,
                            task,
                            "ignored a report for a task not running there"
                        );
                    }
                }
            }
            Event::Loads { worker, loads } => self.core.set_loads(worker, loads),
            Event::Verdicts { worker, verdicts } => {
                self.core.set_verdicts(now, worker, verdicts);
                self.settle_env_waits();
            }
            Event::WorkerGone {
                worker,
                reason,
                planned,
            } => {
                let loss = if planned { Loss::Stopped } else { Loss::Silent };
                self.worker_gone(worker, &reason, loss, true)
            }
            Event::Request {
                request,
                components,
                reply,
            } => self.request(request, components, reply),
            Event::ManagerHeartbeat { state, link } => {
                if !self.manager_links.contains_key(&state.id) {
                    tracing::info!(manager = %state.id, worker_type = %state.worker_type, fixed = ?state.fixed, "worker manager joined");
                }
                self.manager_links.insert(state.id.clone(), link);
                self.core
                    .declare_environments(state.environments.iter().map(|d| d.name.as_str()));
                let id = state.id.clone();
                let gone = self
                    .managers
                    .heartbeat(now, state, &self.core.worker_views(now));
                for (worker, stopped) in gone {
                    let (reason, loss) = match stopped {
                        true => (format!("its manager {id} stopped it"), Loss::Stopped),
                        false => (format!("its manager {id} saw it exit"), Loss::Exited),
                    };
                    self.worker_gone(worker, &reason, loss, !stopped);
                }
            }
            Event::ManagerGone { id } => {
                tracing::warn!(manager = %id, "worker manager disconnected");
                self.manager_links.remove(&id);
            }
            Event::ManagerGoodbye { id } => {
                tracing::info!(manager = %id, "worker manager stopped");
                self.manager_links.remove(&id);
                self.managers.remove(&id);
            }
            Event::Metrics { reply } => {
                let _ = reply.send(self.render_metrics());
            }
            Event::Decided { result, elapsed } => {
                self.policy_busy = false;
                self.policy_latency.observe(elapsed);
                match result {
                    Ok(decisions) => {
                        self.policy_error = None;
                        self.apply_decisions(&decisions);
                    }
                    Err(error) => {
                        tracing::error!(%error, "scaling policy failed; holding its last good decision");
                        self.policy_errors += 1;
                        self.policy_error = Some(error);
                    }
                }
            }
        }
    }

    /// A worker is gone: closed its connection, fell silent, or its manager saw it exit. Its
    /// tasks are requeued (a planned stop spends no retry) and its link dropped, which closes
    /// the connection if it is still open.
    /// `close`: drop its link, which closes the connection; a worker its manager is stopping
    /// keeps it, and closes it itself as it stops.
    fn worker_gone(&mut self, worker: WorkerId, reason: &str, loss: Loss, close: bool) {
        if close {
            self.workers.remove(&worker);
        }
        if !self.core.has_worker(worker) {
            return;
        }
        match loss {
            Loss::Stopped => tracing::info!(worker, %reason, "worker stopped"),
            Loss::Exited => tracing::warn!(worker, %reason, "worker lost; requeueing its tasks"),
            Loss::Silent => tracing::warn!(
                worker,
                %reason,
                "worker lost; its tasks run again once its lease has surely run out, unless it comes back first"
            ),
        }
        self.core.worker_lost(self.now(), worker, reason, loss);
        self.settle_env_waits();
    }

    /// What the manager controller needs to know of the rest of the scheduler.
    fn context(&self) -> Context<'_> {
        let now = self.now();
        Context {
            now,
            workers: self.core.worker_views(now),
            tiers: &self.tiers,
            registered: self.core.registered_environments(),
        }
    }

    /// Hand the policy thread a snapshot, unless it is still deciding on the last one.
    fn scale(&mut self) {
        let Some(policy) = &self.policy else { return };
        if self.policy_busy || !self.managers.any_scalable() {
            return;
        }
        let snapshot = self.managers.snapshot(
            &self.context(),
            self.scale_down_delay_ms,
            self.core.demand(),
        );
        if let Some(file) = &mut self.record {
            use std::io::Write;
            if let Ok(line) = serde_json::to_string(&snapshot) {
                let _ = writeln!(file, "{line}");
            }
        }
        self.policy_busy = policy.send(snapshot).is_ok();
    }

    fn apply_decisions(&mut self, decisions: &[Decision]) {
        let now = self.now();
        let views = self.core.worker_views(now);
        for decision in decisions {
            let Some(link) = self.manager_links.get(&decision.manager_id) else {
                continue;
            };
            let stop = self.core.drain(&decision.stop);
            let registered: Vec<String> = views
                .iter()
                .filter(|w| w.manager.as_deref() == Some(decision.manager_id.as_str()))
                .map(|w| w.name.clone())
                .collect();
            tracing::debug!(manager = %decision.manager_id, desired = decision.desired_workers, reason = %decision.reason, "scaling");
            let _ = link.send(ToManager::Desired {
                desired: decision.desired_workers,
                stop,
                registered,
                reason: decision.reason.clone(),
            });
        }
        self.managers.record(decisions);
    }

    fn request(
        &mut self,
        request: Request,
        components: Vec<(ComponentHash, Arc<Vec<u8>>)>,
        reply: mpsc::UnboundedSender<Response>,
    ) {
        // Answers to what changes the journal wait for this round's sync.
        let durable = self.journal.is_some()
            && matches!(
                request,
                Request::Cancel { .. }
                    | Request::Forget { .. }
                    | Request::ForgetFinished
                    | Request::EnvRegister { .. }
                    | Request::EnvRemove { .. }
            );
        let response = match request {
            Request::Submit { groups, .. } => {
                let mut new_components = Vec::new();
                for (hash, bytes) in components {
                    self.core.add_component(hash);
                    if self.journal.is_some() && !self.components.contains_key(&hash) {
                        new_components.push((hash, bytes.to_vec()));
                    }
                    self.components.insert(hash, bytes);
                }
                let journaled = self.journal.is_some().then(|| groups.clone());
                match self.core.submit(groups) {
                    Ok((job, first_task, tasks)) => {
                        tracing::info!(job, tasks, "job submitted");
                        if let Some(groups) = journaled {
                            self.journal(journal::Record::Submit {
                                components: new_components,
                                groups,
                            });
                        }
                        // Acknowledged once the journal has it on disk (end of this round).
                        self.deferred.push((
                            reply,
                            Response::Submitted {
                                job,
                                first_task,
                                tasks,
                            },
                        ));
                        return;
                    }
                    Err(error) => Response::Error {
                        message: error.to_string(),
                    },
                }
            }
            Request::Wait { job } => match self.core.job_counts(job) {
                Err(error) => Response::Error {
                    message: error.to_string(),
                },
                Ok(counts) if counts.finished() == counts.total() => Response::Done(counts.clone()),
                Ok(counts) => {
                    let _ = reply.send(Response::Progress(counts.clone()));
                    self.waiters.entry(job).or_default().push(reply);
                    return;
                }
            },
            Request::Results { job } => match self.core.results(job) {
                Err(error) => Response::Error {
                    message: error.to_string(),
                },
                Ok(results) => {
                    send_results(&reply, results);
                    return;
                }
            },
            Request::Cancel { job } => match self.core.job_counts(job) {
                Err(error) => Response::Error {
                    message: error.to_string(),
                },
                Ok(_) => Response::Canceled {
                    tasks: self.core.cancel_job(job),
                },
            },
            Request::ForgetFinished => {
                // Journal this round's finished tasks first: a replay must see them final
                // before it sees their jobs forgotten.
                self.apply();
                let (jobs, tasks) = self.core.forget_finished();
                for &job in &jobs {
                    self.journal(journal::Record::Forget { job });
                }
                if !jobs.is_empty() {
                    tracing::info!(jobs = jobs.len(), tasks, "finished jobs forgotten");
                }
                Response::ForgottenFinished { jobs, tasks }
            }
            Request::Jobs { limit } => {
                Response::Jobs(self.core.jobs(usize::try_from(limit).unwrap_or(usize::MAX)))
            }
            Request::Forget { job } => {
                self.apply(); // as for ForgetFinished
                match self.core.forget(job) {
                    Err(error) => Response::Error {
                        message: error.to_string(),
                    },
                    Ok(tasks) => {
                        if tasks > 0 {
                            self.journal(journal::Record::Forget { job });
                            tracing::info!(job, tasks, "job forgotten");
                        }
                        Response::Forgotten { job, tasks }
                    }
                }
            }
            Request::Status => {
                let mut report = self.core.status();
                report.managers = self.managers.status(&self.context());
                report.policy_error = self.policy_error.clone();
                Response::Status(report)
            }
            Request::EnvRegister {
                name, config, wait, ..
            } => {
                let Some((hash, bytes)) = components.into_iter().next() else {
                    let _ = reply.send(Response::Error {
                        message: "no condition component".into(),
                    });
                    return;
                };
                if let Err(message) = check_env_name(&name) {
                    let _ = reply.send(Response::Error { message });
                    return;
                }
                if !self.environments.contains_key(&name)
                    && self.environments.len() >= MAX_ENVIRONMENTS
                {
                    let message = format!(
                        "at most {MAX_ENVIRONMENTS} run-time environments; remove one first"
                    );
                    let _ = reply.send(Response::Error { message });
                    return;
                }
                if matches!(
                    self.core.environment_source(&name),
                    Some(EnvSource::Worker | EnvSource::Manager)
                ) {
                    tracing::info!(environment = %name, "registering a name some workers define with --env-plugin: their own definition wins on them (weir env list shows which)");
                }
                let def = EnvironmentDef {
                    name: name.clone(),
                    component: hash,
                    config,
                };
                self.journal(journal::Record::EnvRegister {
                    def: def.clone(),
                    component: bytes.to_vec(),
                });
                self.components.insert(hash, bytes);
                self.core.register_environment(&name);
                self.managers.forget_verdicts(&name);
                self.environments.insert(name.clone(), def);
                tracing::info!(environment = %name, "environment registered");
                for worker in self.core.worker_ids() {
                    self.send_environments(worker);
                }
                if wait {
                    let workers = self.core.worker_ids().into_iter().collect();
                    self.env_waits.push(EnvWait {
                        name,
                        workers,
                        reply,
                    });
                    self.settle_env_waits();
                    return;
                }
                Response::Environments(self.environment_report(Some(&name)))
            }
            Request::EnvList => Response::Environments(self.environment_report(None)),
            Request::EnvRemove { name } => {
                if self.core.remove_environment(&name) {
                    self.environments.remove(&name);
                    self.managers.forget_verdicts(&name);
                    // Managers that define the name themselves still do.
                    if !self.managers.declaring(&name).is_empty() {
                        self.core.declare_environments([name.as_str()]);
                    }
                    self.journal(journal::Record::EnvRemove { name: name.clone() });
                    for worker in self.core.worker_ids() {
                        self.send_environments(worker);
                    }
                    Response::EnvRemoved { name }
                } else {
                    Response::Error {
                        message: format!(
                            "no run-time environment `{name}` (a worker's own --env-plugin cannot be removed here)"
                        ),
                    }
                }
            }
            Request::WaitWorkers { count, environment } => {
                self.worker_waits.push(WorkerWait {
                    count,
                    environment,
                    last: None,
                    reply,
                });
                self.settle_worker_waits();
                return;
            }
            Request::Explain { task } => match self.core.explain(task) {
                Some(mut lines) => {
                    if let Some((group, _)) = self.core.task_group(task) {
                        let (caps, envs) = (&group.spec.capabilities, &group.spec.environments);
                        lines.extend(self.managers.explain(&self.context(), caps, envs));
                    }
                    Response::Explanation { lines }
                }
                None => Response::Error {
                    message: format!("no task {task}"),
                },
            },
        };
        if durable {
            self.deferred.push((reply, response));
        } else {
            let _ = reply.send(response);
        }
    }

    /// The core's environment report, with the managers that declared each name.
    fn environment_report(&self, only: Option<&str>) -> Vec<crate::proto::EnvironmentStatus> {
        environment_report(&self.core, &self.managers, only)
    }

    /// Answer the `weir workers wait` requests: progress when the count changed, and the last
    /// answer once there are enough.
    fn settle_worker_waits(&mut self) {
        if self.worker_waits.is_empty() {
            return;
        }
        let core = &self.core;
        self.worker_waits.retain_mut(|wait| {
            let ready = core.ready_workers(wait.environment.as_deref());
            if wait.last == Some(ready) {
                return true;
            }
            wait.last = Some(ready);
            let sent = wait.reply.send(Response::WorkersReady {
                ready,
                wanted: wait.count,
            });
            sent.is_ok() && ready < wait.count
        });
    }

    /// Send `worker` the whole environment set, with the condition components it lacks.
    fn send_environments(&mut self, worker: WorkerId) {
        let Some(link) = self.workers.get_mut(&worker) else {
            return;
        };
        let defs: Vec<EnvironmentDef> = self.environments.values().cloned().collect();
        let mut components = Vec::new();
        for def in &defs {
            if link.conditions.insert(def.component)
                && let Some(bytes) = self.components.get(&def.component)
            {
                components.push((def.component, bytes.to_vec()));
            }
        }
        let _ = link
            .frames
            .send(ToWorker::Environments { defs, components });
    }

    /// Answer the `env register --wait` requests every live worker has now answered.
    fn settle_env_waits(&mut self) {
        let live: HashSet<WorkerId> = self.core.worker_ids().into_iter().collect();
        let (core, managers) = (&self.core, &self.managers);
        self.env_waits.retain_mut(|wait| {
            wait.workers
                .retain(|w| live.contains(w) && !core.has_verdict(*w, &wait.name));
            if wait.workers.is_empty() {
                let report = environment_report(core, managers, Some(&wait.name));
                let _ = wait.reply.send(Response::Environments(report));
                return false;
            }
            true
        });
    }

    /// Turn the core's actions into frames and responses.
    fn apply(&mut self) {
        let mut touched: HashSet<JobId> = HashSet::new();
        let mut finals = Vec::new();
        let mut dispatches = Vec::new();
        for action in self.core.take_actions() {
            match action {
                // Sent below, once the journal has them.
                Action::Dispatch { worker, tasks } => dispatches.push((worker, tasks)),
                Action::Cancel { worker, tasks } => {
                    if let Some(link) = self.workers.get(&worker) {
                        let _ = link.frames.send(ToWorker::Cancel(tasks));
                    }
                }
                Action::Disconnect { worker, reason } => {
                    tracing::warn!(worker, %reason, "worker lost");
                    // Dropping the sender ends the connection task, which closes the connection.
                    self.workers.remove(&worker);
                }
                Action::Dropped { groups, components } => {
                    for hash in &components {
                        // Environments share the map: keep what a registered condition uses.
                        if !self.environments.values().any(|d| d.component == *hash) {
                            self.components.remove(hash);
                        }
                    }
                    for link in self.workers.values_mut() {
                        let groups: Vec<GroupId> = groups
                            .iter()
                            .copied()
                            .filter(|g| link.groups.remove(g))
                            .collect();
                        let components: Vec<ComponentHash> = components
                            .iter()
                            .copied()
                            .filter(|c| link.components.remove(c))
                            .collect();
                        if !groups.is_empty() || !components.is_empty() {
                            let _ = link.frames.send(ToWorker::Forget { groups, components });
                        }
                    }
                }
                Action::Forgot { job } => {
                    tracing::info!(job, "job forgotten (--forget-after)");
                    self.journal(journal::Record::Forget { job });
                }
                Action::Finished { job, task } => {
                    touched.insert(job);
                    if self.journal.is_some()
                        && let Some((state, outcome, attempts)) = self.core.final_record(task)
                    {
                        finals.push((task, state, outcome, attempts));
                    }
                }
            }
        }
        // What is handed to workers is written (not synced: a process killed at any point
        // keeps it; a machine that loses power may lose the last ones) before it is sent, so a
        // restarted scheduler fences exactly the tasks that may still run somewhere.
        if !dispatches.is_empty()
            && let Some(journal) = &mut self.journal
        {
            let started: Vec<(crate::proto::TaskId, u32)> = dispatches
                .iter()
                .flat_map(|(_, tasks)| tasks.iter().map(|t| (*t, self.core.attempts(*t))))
                .collect();
            let written = journal
                .append_lazily(&journal::Record::Started(started))
                .and_then(|()| journal.write_through());
            if let Err(error) = written {
                self.journal_error.get_or_insert(error.to_string());
            }
        }
        // Nothing is sent that the journal could not take (the scheduler stops this round).
        if self.journal_error.is_none() {
            for (worker, tasks) in dispatches {
                self.dispatch(worker, tasks);
            }
        }
        if !finals.is_empty() {
            self.journal(journal::Record::Final(finals));
        }
        for job in touched {
            let Ok(counts) = self.core.job_counts(job).cloned() else {
                continue;
            };
            let done = counts.finished() == counts.total();
            if let Some(waiters) = self.waiters.get_mut(&job) {
                let message = if done {
                    Response::Done(counts)
                } else {
                    Response::Progress(counts)
                };
                waiters.retain(|w| w.send(message.clone()).is_ok());
                if done {
                    self.waiters.remove(&job);
                }
            }
        }
    }

    fn dispatch(&mut self, worker: WorkerId, tasks: Vec<crate::proto::TaskId>) {
        let Some(link) = self.workers.get_mut(&worker) else {
            return;
        };
        let mut assignments = Vec::with_capacity(tasks.len());
        for task in tasks {
            let Some((group, index)) = self.core.task_group(task) else {
                continue;
            };
            if link.groups.insert(group.id) {
                if let TaskKind::Wasm { component } = &group.spec.kind
                    && link.components.insert(*component)
                    && let Some(bytes) = self.components.get(component)
                {
                    let _ = link.frames.send(ToWorker::Component {
                        hash: *component,
                        bytes: bytes.to_vec(),
                    });
                }
                let _ = link.frames.send(ToWorker::Group {
                    id: group.id,
                    job: group.job,
                    spec: group.spec.clone(),
                });
            }
            assignments.push(Assignment {
                task,
                group: group.id,
                index,
                input: group.input(index).map(<[u8]>::to_vec),
            });
        }
        let _ = link.frames.send(ToWorker::Run(assignments));
    }
}

/// Most bytes of results in one `Results` frame (well under `MAX_FRAME`: a task's output is
/// capped by the worker's `--output-limit`, 1 MiB per stream by default).
const RESULTS_CHUNK_BYTES: usize = 8 << 20;

/// A job's results in frames bounded by bytes, then `ResultsEnd` with the count.
fn send_results(reply: &mpsc::UnboundedSender<Response>, results: Vec<crate::proto::TaskResult>) {
    let count = results.len() as u64;
    let mut chunk = Vec::new();
    let mut bytes = 0;
    for result in results {
        let size = 64
            + match &result.outcome {
                crate::proto::Outcome::Exited { stdout, stderr, .. } => stdout.len() + stderr.len(),
                crate::proto::Outcome::Returned { output } => output.len(),
                crate::proto::Outcome::Error { message } => message.len(),
            };
        if !chunk.is_empty() && bytes + size > RESULTS_CHUNK_BYTES {
            let _ = reply.send(Response::Results(std::mem::take(&mut chunk)));
            bytes = 0;
        }
        bytes += size;
        chunk.push(result);
    }
    if !chunk.is_empty() {
        let _ = reply.send(Response::Results(chunk));
    }
    let _ = reply.send(Response::ResultsEnd { count });
}

/// The core's environment report, with the managers that declared each name.
fn environment_report(
    core: &Core,
    managers: &Managers,
    only: Option<&str>,
) -> Vec<crate::proto::EnvironmentStatus> {
    let mut report = core.environment_report(only);
    for status in &mut report {
        status.managers = managers.declaring(&status.name);
    }
    report
}

/// Environment names become parts of variable names (`WEIR_ENV_<NAME>_<KEY>`).
fn check_env_name(name: &str) -> Result<(), String> {
    if name.is_empty()
        || name.len() > 64
        || !name
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || c == '_' || c == '-')
    {
        return Err(format!(
            "environment name `{name}` must be 1 to 64 letters, digits, `_` or `-`"
        ));
    }
    Ok(())
}

/// The policy runs on its own thread: a slow or looping policy (stopped by its deadline) never
/// holds up the actor. Snapshots in, `Event::Decided` out.
fn policy_thread(
    mut policy: PolicyPlugin,
    events: mpsc::UnboundedSender<Event>,
) -> std::sync::mpsc::Sender<Snapshot> {
    let (snapshots, inbox) = std::sync::mpsc::channel::<Snapshot>();
    let spawned = std::thread::Builder::new()
        .name("weir-policy".into())
        .spawn(move || {
            while let Ok(snapshot) = inbox.recv() {
                let started = std::time::Instant::now();
                let result = policy.decide(&snapshot).map_err(|e| e.to_string());
                let elapsed = started.elapsed();
                if events.send(Event::Decided { result, elapsed }).is_err() {
                    return;
                }
            }
        });
    if let Err(error) = spawned {
        tracing::error!(%error, "cannot start the policy thread: no scaling");
    }
    snapshots
}
