//! The core's interface with its shell: its settings, what goes in ([`Input`]) and what comes
//! out ([`Action`]).

use std::sync::Arc;

use super::{ClientId, ConnectionId, Record};
use crate::scaling::{Decision, PolicyFailure, Snapshot, Tier};
use crate::tasks;
use weir_proto::{
    ComponentHash, ComponentLoad, EnvVerdict, ManagerState, Outcome, Request, Response, TaskId,
    ToManager, ToWorker, WorkerId, WorkerRegistration,
};

/// The core's settings (from the scheduler's flags).
#[derive(Clone, Debug)]
pub struct Config {
    pub tasks: tasks::Config,
    /// A manager silent this long is offline.
    pub manager_timeout_ms: u64,
    /// A manager offline this long is forgotten, and the workers it started elsewhere are told
    /// to leave once idle.
    pub manager_forget_ms: u64,
    /// The lease granted to workers (sent when they register).
    pub lease_ms: u64,
    /// What each known peer (worker or manager) adds to the pace of idle workers and of
    /// managers with nothing new, in µs (1 s over the idle beats a second the scheduler aims
    /// for: [`crate::lease::idle_pace`], [`crate::lease::manager_pace`]; 0: idle workers beat
    /// once a lease, managers every half heartbeat timeout).
    pub idle_pace_per_worker_us: u64,
    /// Fences released, forgotten jobs dropped and unschedulable tasks failed this often.
    pub tick_ms: u64,
    /// The policy decides this often; `None`: no policy, no scaling.
    pub scaling_ms: Option<u64>,
    /// A worker idle for less than this is not stopped.
    pub scale_down_delay_ms: u64,
    /// Most of a manager's live workers a decision may drain, in per cent, rounded up
    /// ([`crate::scaling::drain_budget`]).
    pub max_drain_percent: u32,
    /// Fail queued tasks nothing could run for this long (`None`: they wait).
    pub unschedulable_timeout_ms: Option<u64>,
    /// After a journal's replay that brought jobs back, how long no queued task is judged one
    /// nothing can run (told to a waiting client, or failed by `unschedulable_timeout_ms`,
    /// whose clock starts after it): the workers of the previous run are still coming back
    /// (RELIABILITY.md, the row on a restart while a `weir wait` waits).
    pub restart_grace_ms: u64,
    /// The policy in force at start (its name is in the errors about its decisions). Read once:
    /// the scaling loop keeps the one in force from then on (`weir policy set` replaces it).
    pub policy: PolicyInfo,
    /// The start policy's tiers (for the snapshot and `weir status`), read once likewise.
    pub tiers: Vec<Tier>,
    /// Whether there is a journal: without one, no record is made (and none is cloned).
    pub journal: bool,
    /// A journal smaller than this is not compacted while running (at start it is).
    pub compact_min_bytes: u64,
}

impl Config {
    /// How often an idle worker is asked to beat with `peers` (workers and managers) known
    /// ([`crate::lease::idle_pace`]), in ms.
    pub fn idle_pace_ms(&self, peers: usize) -> u64 {
        let ms = std::time::Duration::from_millis;
        let pace = crate::lease::idle_pace(
            ms(self.lease_ms),
            ms(self.tasks.heartbeat_timeout_ms),
            u64::try_from(peers).unwrap_or(u64::MAX),
            std::time::Duration::from_micros(self.idle_pace_per_worker_us),
        );
        u64::try_from(pace.as_millis()).unwrap_or(u64::MAX)
    }

    /// How often a manager with nothing new is asked to report with `peers` (workers and
    /// managers) known ([`crate::lease::manager_pace`]), in ms.
    pub fn manager_pace_ms(&self, peers: usize) -> u64 {
        let pace = crate::lease::manager_pace(
            std::time::Duration::from_millis(self.manager_timeout_ms),
            u64::try_from(peers).unwrap_or(u64::MAX),
            std::time::Duration::from_micros(self.idle_pace_per_worker_us),
        );
        u64::try_from(pace.as_millis()).unwrap_or(u64::MAX).max(10)
    }
}

/// A scaling policy: what `weir policy show` prints of it.
#[derive(Clone, Debug, Default)]
pub struct PolicyInfo {
    pub name: String,
    pub component: ComponentHash,
    pub content: String,
    /// Its bytes, for the journal: kept for a policy set while running (the one given at start
    /// is the scheduler's flags' to choose again).
    pub bytes: Option<Arc<[u8]>>,
}

/// Something that happened, for the core to take in.
#[derive(Debug)]
pub enum Input {
    /// A worker connection registered. The core answers with [`Action::Registered`].
    WorkerJoined {
        connection: ConnectionId,
        info: WorkerRegistration,
    },
    /// The worker is there; `renew`: it asks for its lease to be renewed (the core answers
    /// [`ToWorker::Lease`] with that sequence number while the worker is live).
    Heartbeat {
        worker: WorkerId,
        renew: Option<u64>,
    },
    Finished {
        worker: WorkerId,
        results: Vec<(TaskId, Outcome)>,
    },
    /// The worker gave back these prefetched tasks it had not started (answering a revoke).
    Revoked {
        worker: WorkerId,
        tasks: Vec<TaskId>,
    },
    /// These tasks started on the worker.
    Started {
        worker: WorkerId,
        tasks: Vec<TaskId>,
    },
    Verdicts {
        worker: WorkerId,
        verdicts: Vec<(String, EnvVerdict)>,
    },
    Loads {
        worker: WorkerId,
        loads: Vec<(String, ComponentLoad)>,
    },
    /// Its stream ended from its side and its connection is not closed yet. A worker that
    /// stops closes it right after (and [`Input::WorkerGone`] follows, `planned`): the core
    /// waits [`STOP_GRACE_MS`] for that, then takes the worker for lost, for `reason`.
    ///
    /// [`STOP_GRACE_MS`]: super::STOP_GRACE_MS
    WorkerEnding { worker: WorkerId, reason: String },
    /// Its connection ended; `planned`: it closed it on purpose (stopped by its manager or a
    /// signal, its tasks stopped first).
    WorkerGone {
        worker: WorkerId,
        reason: String,
        planned: bool,
    },
    /// A client's request, with the components that came with it.
    Request {
        client: ClientId,
        request: Request,
        components: Vec<(ComponentHash, Arc<[u8]>)>,
    },
    /// A client's reply channel is closed: forget what it waits for.
    ClientGone { client: ClientId },
    /// The first heartbeat on a manager's connection. The core answers
    /// [`Action::ManagerRegistered`], or [`Action::ManagerRefused`] while another connection
    /// of that id is live (one process per manager id). `peer`: where it connects from, to
    /// name it to a second one.
    ManagerJoined {
        connection: ConnectionId,
        state: ManagerState,
        peer: String,
    },
    /// A later heartbeat on a registered manager's connection.
    ManagerHeartbeat { state: ManagerState },
    /// Its connection broke (it stays known, offline, until it comes back or a minute passes).
    ManagerGone { id: String },
    /// It is stopping on purpose: forget it.
    ManagerGoodbye { id: String },
    /// The policy's answer to the last [`Action::Decide`].
    Decided {
        result: Result<Vec<Decision>, PolicyFailure>,
    },
    /// The answer to [`Action::SwapPolicy`]: the new policy is ready (with these tiers), or
    /// why the old one stays. The core answers [`Action::AdoptPolicy`] if it takes over.
    PolicySwapped {
        client: Option<ClientId>,
        policy: PolicyInfo,
        result: Result<Vec<Tier>, PolicyFailure>,
    },
    /// The time [`Scheduler::poll_timeout`] named has come.
    Timeout,
    /// Every waiting input was fed: match tasks to workers and settle waits.
    EndOfBatch,
    /// Everything journaled so far is on disk (the journal now holds `journal_bytes`):
    /// outcomes may be acknowledged.
    Synced { journal_bytes: u64 },
    /// The journal was rewritten from [`Scheduler::journal_image`].
    Compacted,
    /// Starting from a journal: one of its records, in order.
    Replay(Record),
    /// The last record was replayed.
    Replayed,
}

/// What the shell must do, in this order.
#[derive(Debug)]
pub enum Action {
    /// The connection is worker `worker` from now on (frames to it follow).
    Registered {
        connection: ConnectionId,
        worker: WorkerId,
    },
    /// The connection is refused (a second worker of a live worker's name, or one with no slot
    /// or too many environments of its own): close it, saying why.
    Refused {
        connection: ConnectionId,
        reason: String,
    },
    ToWorker {
        worker: WorkerId,
        message: ToWorker,
    },
    /// Close the worker's connection (it is considered lost).
    CloseWorker {
        worker: WorkerId,
    },
    /// The connection is manager `id`'s from now on (frames to it follow).
    ManagerRegistered {
        connection: ConnectionId,
        id: String,
    },
    /// The connection is refused (another live connection holds its id): close it with
    /// `weir_net::CLOSE_ID_TAKEN`, saying why.
    ManagerRefused {
        connection: ConnectionId,
        reason: String,
    },
    ToManager {
        manager: String,
        message: ToManager,
    },
    /// Manager `manager`'s connection is no longer its (it broke, or the manager said
    /// goodbye): frames to that id stop until a connection registers it again.
    CloseManager {
        manager: String,
    },
    /// Answer a client; `last`: its final answer (the shell drops the channel); `durable`: the
    /// answer to a change, which a journal error turns into "not done". With a journal, the
    /// shell sends every reply only once the round's records are synced.
    Reply {
        client: ClientId,
        response: Response,
        last: bool,
        durable: bool,
    },
    /// Append to the journal; `write_through`: hand it to the OS now (before the frames that
    /// follow are sent), not only at the round's sync.
    Journal {
        record: Record,
        write_through: bool,
    },
    /// Enough was forgotten, and the journal is big enough, that compacting it pays: rewrite it
    /// as these records (the state at this point of the actions: what follows is appended
    /// after), then feed [`Input::Compacted`].
    Compact(Vec<Record>),
    /// Create this policy, run it once on `snapshot` (the last one), and switch to it if both
    /// work; answer with [`Input::PolicySwapped`]. `client`: who asked (`None`: the journal's
    /// policy, restored at start).
    SwapPolicy {
        client: Option<ClientId>,
        policy: PolicyInfo,
        snapshot: Option<Arc<Snapshot>>,
    },
    /// Ask the policy to decide on this snapshot (answer with [`Input::Decided`]).
    Decide(Arc<Snapshot>),
    /// The policy tried for `client` (see [`Action::SwapPolicy`]) takes over from the next
    /// snapshot on. A tried policy the core does not adopt (the journal's, superseded by a
    /// `weir policy set` meanwhile) is never named here.
    AdoptPolicy {
        client: Option<ClientId>,
    },
}
