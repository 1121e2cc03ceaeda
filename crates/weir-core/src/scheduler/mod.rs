//! The scheduler's core, in the sans-IO style of quinn-proto: one entry point,
//! [`Scheduler::handle`]`(now, Input)`, and what the shell must do next as [`Action`]s
//! ([`Scheduler::poll_action`]), with the next time it wants to be woken
//! ([`Scheduler::poll_timeout`]).
//!
//! It owns every fact the scheduler holds, each in one store: tasks and workers ([`Tasks`]),
//! with the environments (names, sources and run-time definitions: [`tasks::Environments`])
//! and the components (bytes and their users: [`tasks::Components`]) the matching needs;
//! managers, what they report and which are connected ([`Managers`]); the scaling loop (the
//! policy in force, its tiers, its state, its last decisions and timing: `ScalingLoop`); what
//! each worker was sent (its link); and the clients waiting for answers.
//! [`Scheduler::sanity_check`] checks them against each other.
//! The shell (`weir::scheduler`) owns only sockets, the journal file and the policy thread:
//! it turns frames and timers into inputs, and actions into frames, journal writes and replies.
//!
//! A round: the shell feeds every waiting input, then [`Input::EndOfBatch`] (which schedules),
//! performs the actions in order — journal records are appended before the frames that depend
//! on them — syncs the journal and feeds [`Input::Synced`] (which acknowledges outcomes to the
//! workers). The shell holds every reply of the round until that sync, so nothing a client
//! hears is undone by a crash; replies marked `durable` answer changes, and say the change was
//! not done if the sync fails.

mod environments;
mod interface;
mod policy;
mod replay;
mod requests;
mod sanity;
mod scaling_loop;
mod unrunnable;
mod views;
mod workers;

use crate::hash::HashMap;
use std::collections::VecDeque;

use super::managers::{Context, Managers};
use super::record::Record;
use super::tasks::{self, Tasks};
use weir_proto::{
    ComponentHash, EnvironmentStatus, ErrorCode, JobId, ManagerUnits, Response, StatusReport,
    TaskId, ToWorker, WorkerId,
};

pub use environments::{MAX_ENVIRONMENTS, check_env_name};
pub use interface::{Action, Config, Input, PolicyInfo};
pub use policy::DemandView;
use scaling_loop::ScalingLoop;

/// Names a client's request stream: the shell keeps the reply channel, the core the waits.
pub type ClientId = u64;
/// Names a worker connection before it has a worker id ([`Action::Registered`] binds the two).
pub type ConnectionId = u64;

/// What the core keeps of a worker's connection: what it was sent, and its outcome count.
#[derive(Default)]
struct Link {
    /// Outcomes it reported, and how many of them were acknowledged (once durable).
    received: u64,
    acknowledged: u64,
    groups: crate::hash::HashSet<weir_proto::GroupId>,
    components: crate::hash::HashSet<ComponentHash>,
    /// Condition components already sent.
    conditions: crate::hash::HashSet<ComponentHash>,
    /// It was told to leave, its manager being an orphan (see [`Managers::orphaned`]).
    dismissed: bool,
}

/// A `weir workers wait` waiting for enough live workers.
struct WorkerWait {
    client: ClientId,
    count: u32,
    environment: Option<String>,
    /// The count last sent (progress is sent when it changes).
    last: Option<u32>,
}

/// A `weir env register --wait` waiting for every live worker's verdict.
struct EnvWait {
    client: ClientId,
    name: String,
    workers: crate::hash::HashSet<WorkerId>,
}

/// A worker whose stream ended is given this long to close its connection as one stopping on
/// purpose ([`Input::WorkerEnding`]) before it is taken for lost.
pub const STOP_GRACE_MS: u64 = 2_000;

/// The least time between two progress answers to `weir wait` (a job's end is answered at once).
pub(crate) const PROGRESS_EVERY_MS: u64 = 100;

/// Queued tasks nothing can run are told to the clients waiting for them after this long (a
/// worker that joins or a manager that reports meanwhile makes it moot): `weir submit --wait`
/// says so within a few seconds instead of waiting in silence.
pub(crate) const UNRUNNABLE_AFTER_MS: u64 = 2_000;

pub struct Scheduler {
    config: Config,
    tasks: Tasks,
    /// Managers: what they report, and which are connected.
    managers: Managers,
    links: HashMap<WorkerId, Link>,
    /// Workers whose stream ended, until when they may still close as stopping, and the
    /// reason they are lost for if they do not ([`Input::WorkerEnding`]).
    ending: std::collections::BTreeMap<WorkerId, (u64, String)>,
    /// Workers that reported outcomes not acknowledged yet.
    unacknowledged: std::collections::BTreeSet<WorkerId>,
    waiters: HashMap<JobId, Vec<ClientId>>,
    /// Clients watching a job's tasks end one by one (`Watch`).
    watchers: HashMap<JobId, Vec<ClientId>>,
    /// (client, task class) pairs told `Unrunnable`: each once.
    told_unrunnable: crate::hash::HashSet<(ClientId, usize)>,
    /// Jobs whose waiters have progress not sent yet, and until when sending more waits (see
    /// [`PROGRESS_EVERY_MS`]).
    progress_due: std::collections::BTreeSet<JobId>,
    progress_quiet_until: u64,
    env_waits: Vec<EnvWait>,
    worker_waits: Vec<WorkerWait>,
    /// The scaling loop: the policy, its state, its last decisions and its timing.
    scaling: ScalingLoop,
    /// No queued task is told a client as one nothing can run before this (ms): after a
    /// journal's replay, the previous run's workers are still coming back.
    unrunnable_from: u64,
    /// The journal's size at the last sync.
    journal_bytes: u64,
    next_tick: u64,
    actions: VecDeque<Action>,
}

impl Scheduler {
    pub fn new(config: Config) -> Scheduler {
        Scheduler {
            tasks: Tasks::new(config.tasks.clone()),
            managers: Managers::new(config.manager_timeout_ms),
            links: HashMap::default(),
            ending: Default::default(),
            unacknowledged: Default::default(),
            waiters: HashMap::default(),
            watchers: HashMap::default(),
            told_unrunnable: Default::default(),
            progress_due: Default::default(),
            progress_quiet_until: 0,
            env_waits: Vec::new(),
            worker_waits: Vec::new(),
            scaling: ScalingLoop::new(&config),
            unrunnable_from: 0,
            journal_bytes: 0,
            next_tick: config.tick_ms,
            actions: VecDeque::new(),
            config,
        }
    }

    /// Take in one input.
    pub fn handle(&mut self, now: u64, input: Input) {
        match input {
            Input::WorkerJoined { connection, info } => self.worker_joined(now, connection, info),
            Input::Heartbeat { worker, renew } => {
                self.tasks.heartbeat(now, worker);
                // Only a live worker's lease is renewed: once it is declared lost its link is
                // gone, and with it every grant (see RELIABILITY.md, "Leases").
                if let Some(seq) = renew
                    && self.tasks.has_worker(worker)
                {
                    let idle_beat_ms = self.tell_idle_pace(worker);
                    self.send_worker(worker, ToWorker::Lease { seq, idle_beat_ms });
                }
            }
            Input::Finished { worker, results } => self.finished(now, worker, results),
            Input::Started { worker, tasks } => self.tasks.started(now, worker, &tasks),
            Input::Revoked { worker, tasks } => {
                let back = self.tasks.revoked(worker, &tasks);
                tracing::debug!(worker, back, "prefetched tasks taken back");
            }
            Input::Loads { worker, loads } => self.tasks.set_loads(worker, loads),
            Input::Verdicts { worker, verdicts } => {
                self.tasks.set_verdicts(now, worker, verdicts);
                self.learn_verdicts(now, worker);
                self.settle_env_waits();
            }
            Input::WorkerEnding { worker, reason } => {
                if self.tasks.has_worker(worker) {
                    self.ending.insert(worker, (now + STOP_GRACE_MS, reason));
                }
            }
            Input::WorkerGone {
                worker,
                reason,
                planned,
            } => {
                let loss = match planned {
                    true => tasks::Loss::Stopped,
                    false => tasks::Loss::Silent,
                };
                self.worker_gone(now, worker, &reason, loss, true);
            }
            Input::Request {
                client,
                request,
                components,
            } => self.request(now, client, request, components),
            Input::ClientGone { client } => self.client_gone(client),
            Input::ManagerJoined {
                connection,
                state,
                peer,
            } => self.manager_joined(now, connection, state, peer),
            Input::ManagerHeartbeat { state } => {
                // Only from the connection that registered it (the shell feeds nothing else).
                if self.managers.is_connected(&state.id) {
                    self.manager_heartbeat(now, state)
                }
            }
            Input::ManagerGone { id } => {
                tracing::warn!(manager = %id, "worker manager disconnected");
                self.scaling.sent.remove(&id);
                if self.managers.disconnect(&id) {
                    self.actions.push_back(Action::CloseManager { manager: id });
                }
            }
            Input::ManagerGoodbye { id } => {
                tracing::info!(manager = %id, "worker manager stopped");
                if self.managers.is_connected(&id) {
                    self.actions.push_back(Action::CloseManager {
                        manager: id.clone(),
                    });
                }
                self.managers.remove(&id);
                self.scaling.decisions.remove(&id);
                self.scaling.sent.remove(&id);
            }
            Input::Decided { result } => self.decided(now, result),
            Input::PolicySwapped {
                client,
                policy,
                result,
            } => self.policy_swapped(client, policy, result),
            Input::Timeout => self.timeout(now),
            Input::EndOfBatch => {
                self.tasks.schedule(now);
                self.flush(now);
                self.settle_worker_waits();
                self.scale_soon(now);
            }
            Input::Synced { journal_bytes } => {
                self.journal_bytes = journal_bytes;
                self.tasks.synced(now);
                self.acknowledge_outcomes();
            }
            Input::Compacted => {
                self.tasks.compacted();
            }
            Input::Replay(record) => self.replay(record),
            Input::Replayed => self.replayed(now),
        }
    }

    /// The next thing to do, in order.
    pub fn poll_action(&mut self) -> Option<Action> {
        self.actions.pop_front()
    }

    /// Everything to do now, in order (the tests' view; the shell polls one at a time).
    #[cfg(test)]
    pub(crate) fn take_actions(&mut self) -> Vec<Action> {
        self.actions.drain(..).collect()
    }

    /// When the shell must feed [`Input::Timeout`] next (milliseconds on the `now` clock).
    pub fn poll_timeout(&self) -> u64 {
        let progress = match self.progress_due.is_empty() {
            true => u64::MAX,
            false => self.progress_quiet_until,
        };
        let ending = self.ending.values().map(|(until, _)| *until).min();
        self.next_tick
            .min(self.scaling.next)
            .min(progress)
            .min(ending.unwrap_or(u64::MAX))
    }

    /// What the manager controller needs to know of the rest of the scheduler.
    fn context(&self, now: u64) -> Context<'_> {
        Context::new(
            now,
            self.tasks.worker_views(now),
            &self.scaling.tiers,
            self.tasks.registered_environments(),
            &self.scaling.decisions,
        )
    }

    fn timeout(&mut self, now: u64) {
        self.end_grace(now);
        if now >= self.progress_quiet_until && !self.progress_due.is_empty() {
            self.send_progress(now);
        }
        if now >= self.next_tick {
            self.next_tick = now + self.config.tick_ms;
            self.tick(now);
        }
        if now >= self.scaling.next
            && let Some(interval) = self.scaling.interval
        {
            self.scaling.next = now + interval;
            if self.scale(now) {
                self.scaling.last_call = Some((now, self.tasks.queued()));
            } else if self.scaling.busy() {
                // Still deciding on the last snapshot: try again soon, not a whole interval on.
                self.scaling.next = now + (interval / 10).max(1);
            }
        }
    }

    /// Event-driven scale-up: tasks were queued that no live worker could take (scheduling has
    /// just placed what it could) and more are queued than the policy last saw, so it is called
    /// now instead of at the next interval, at most once per tenth of the interval. A burst
    /// into an empty cluster reaches the managers within milliseconds, not up to an interval.
    fn scale_soon(&mut self, now: u64) {
        let Some(interval) = self.scaling.interval else {
            return;
        };
        let queued = self.tasks.queued();
        let (earliest, seen) = match &mut self.scaling.last_call {
            Some((at, seen)) => {
                // Queued tasks placed since are no longer demand: count new ones from the low.
                *seen = (*seen).min(queued);
                (*at + interval / 10, *seen)
            }
            None => (now, 0),
        };
        if queued > seen && self.managers.any_scalable() {
            self.scaling.next = self.scaling.next.min(earliest.max(now));
        }
    }

    fn tick(&mut self, now: u64) {
        self.tasks.tick(now);
        // A manager silent past its allowance has its connection closed, so that its restart
        // (or a twin) is let in: QUIC's idle timeout is far longer (its pace may be slow).
        for id in self.managers.silent_connections(now) {
            tracing::warn!(manager = %id, "worker manager silent past its pace: closing its connection");
            self.scaling.sent.remove(&id);
            self.actions.push_back(Action::CloseManager { manager: id });
        }
        // A manager gone without a goodbye leaves the status after a while; the workers it
        // started elsewhere are told to leave once idle.
        for id in self
            .managers
            .drop_offline(now, self.config.manager_forget_ms)
        {
            self.scaling.decisions.remove(&id);
        }
        self.dismiss_orphans(now);
        // The journal stays bounded by what is held, like memory: compacted while running once
        // at least as many tasks were forgotten since the last compaction as are still held
        // (half of it, or more, is gone), and it is big enough for that to pay.
        if self.config.journal
            && self.tasks.forgotten_tasks_since_compaction() > 0
            && self.journal_bytes >= self.config.compact_min_bytes
            && self.tasks.forgotten_tasks_since_compaction() >= self.tasks.held_tasks()
        {
            self.flush(now);
            self.actions
                .push_back(Action::Compact(self.journal_image()));
        }
        self.unschedulable(now);
    }

    fn reply(&mut self, client: ClientId, response: Response, last: bool) {
        self.actions.push_back(Action::Reply {
            client,
            response,
            last,
            durable: false,
        });
    }

    /// A final answer that the request could not be done.
    fn refuse(&mut self, client: ClientId, code: ErrorCode, message: String) {
        self.reply(client, Response::Error { code, message }, true);
    }

    /// A final answer to a change: held until the journal has it on disk, when there is one.
    fn reply_durable(&mut self, client: ClientId, response: Response) {
        self.actions.push_back(Action::Reply {
            client,
            response,
            last: true,
            durable: self.config.journal,
        });
    }

    fn journal(&mut self, record: Record) {
        if !self.config.journal {
            return;
        }
        self.actions.push_back(Action::Journal {
            record,
            write_through: false,
        });
    }

    fn client_gone(&mut self, client: ClientId) {
        for waiters in self.waiters.values_mut() {
            waiters.retain(|c| *c != client);
        }
        self.waiters.retain(|_, waiters| !waiters.is_empty());
        let waiters = &self.waiters;
        self.progress_due.retain(|job| waiters.contains_key(job));
        for watchers in self.watchers.values_mut() {
            watchers.retain(|c| *c != client);
        }
        self.watchers.retain(|_, watchers| !watchers.is_empty());
        self.told_unrunnable.retain(|(c, _)| *c != client);
        self.env_waits.retain(|w| w.client != client);
        self.worker_waits.retain(|w| w.client != client);
    }
}
