//! The messages. Append-only: add variants and fields at the end of a new protocol version.

use serde::{Deserialize, Serialize};

pub type TaskId = u64;
pub type JobId = u64;
pub type WorkerId = u64;
/// A submitted group of tasks sharing one specification (a `weir submit` call may send several).
pub type GroupId = u64;
/// SHA-256 of a wasm task component.
pub type ComponentHash = [u8; 32];

#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum Role {
    Client,
    Worker,
    Manager,
}

/// First frame of every connection, from the connecting side.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Hello {
    pub version: u32,
    pub role: Role,
    pub token: String,
}

#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum HelloReply {
    Welcome,
    Refused { reason: String },
}

/// What a task runs.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum TaskKind {
    /// A process: argv, extra environment variables; its stdin is the task's input.
    Command {
        argv: Vec<String>,
        env: Vec<(String, String)>,
    },
    /// A component of the `task` world, run on the input bytes.
    Wasm { component: ComponentHash },
}

/// The specification shared by the tasks of a group.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct TaskSpec {
    pub kind: TaskKind,
    /// Amounts consumed while a task runs, e.g. `[("gpu", 1)]`.
    pub capabilities: Vec<(String, u64)>,
    /// Environments every task of the group needs (names; resolved when a worker is chosen).
    pub environments: Vec<String>,
    /// Higher runs first.
    pub priority: i32,
    /// Wall-clock limit of one run, in milliseconds (0: none).
    pub timeout_ms: u64,
    /// How many times a task is run again after its worker was lost.
    pub retries: u32,
    /// Input of every task without its own (`inputs`).
    pub input: Vec<u8>,
}

/// A group as submitted: `count` tasks, or one per entry of `inputs` when it is not empty.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct NewGroup {
    pub spec: TaskSpec,
    pub count: u32,
    pub inputs: Vec<Vec<u8>>,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub enum TaskState {
    Queued,
    Running,
    Succeeded,
    Failed,
    Canceled,
}

impl TaskState {
    pub fn is_final(self) -> bool {
        matches!(
            self,
            TaskState::Succeeded | TaskState::Failed | TaskState::Canceled
        )
    }
}

/// How a run ended.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum Outcome {
    /// A command exited (`code` is `None` when a signal ended it).
    Exited {
        code: Option<i32>,
        stdout: Vec<u8>,
        stderr: Vec<u8>,
    },
    /// A wasm task returned.
    Returned { output: Vec<u8> },
    /// It could not run or did not finish: spawn failure, timeout, trap, lost worker, cancel.
    Error { message: String },
}

impl Outcome {
    pub fn succeeded(&self) -> bool {
        matches!(
            self,
            Outcome::Exited { code: Some(0), .. } | Outcome::Returned { .. }
        )
    }
}

#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct TaskResult {
    pub task: TaskId,
    pub state: TaskState,
    pub outcome: Outcome,
    /// Runs started (more than 1 after a lost worker).
    pub attempts: u32,
    pub worker: Option<WorkerId>,
}

// ---- worker <-> scheduler ----

#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct WorkerInfo {
    pub name: String,
    pub slots: u32,
    pub capabilities: Vec<(String, u64)>,
    pub worker_type: String,
    pub manager: Option<String>,
    /// Names of the environments it evaluates from its own --env-plugin flags.
    pub local_environments: Vec<String>,
    /// Tasks it runs (or finished and has not reported yet) from before this registration: a
    /// worker that reconnects, or a scheduler that restarted, re-adopts them instead of running
    /// them again elsewhere.
    pub running: Vec<TaskId>,
}

/// One task for a worker to run; the group's spec was sent before (`ToWorker::Group`).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Assignment {
    pub task: TaskId,
    pub group: GroupId,
    /// Index within the job (`WEIR_TASK_INDEX`).
    pub index: u32,
    /// The task's own input, when it has one (otherwise the group's).
    pub input: Option<Vec<u8>>,
}

/// A worker's answer about one environment.
#[derive(Clone, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub enum EnvVerdict {
    Match,
    NoMatch,
    /// The condition failed: its own error, a trap, a timeout, a component that does not load.
    Error(String),
}

/// An environment: a condition component (by hash) and its config.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct EnvironmentDef {
    pub name: String,
    pub component: ComponentHash,
    pub config: Vec<(String, String)>,
}

#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum FromWorker {
    Register(WorkerInfo),
    Heartbeat,
    /// Finished runs: (task, outcome).
    Finished(Vec<(TaskId, Outcome)>),
    /// Verdicts that changed (and every verdict for a newly received environment set).
    Verdicts(Vec<(String, EnvVerdict)>),
    /// How the condition components of new or changed environments were loaded (sent before
    /// their verdicts), for `weir env list`: a slow registration says where its time went.
    Loads(Vec<(String, ComponentLoad)>),
}

#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum ToWorker {
    Registered {
        id: WorkerId,
        /// The lease on this worker's tasks, in milliseconds: renewed while its connection
        /// lives; once it runs out without one, the worker stops its tasks (the scheduler gives
        /// them to others only after it). 0: none.
        lease_ms: u64,
    },
    Group {
        id: GroupId,
        job: JobId,
        spec: TaskSpec,
    },
    Component {
        hash: ComponentHash,
        bytes: Vec<u8>,
    },
    Run(Vec<Assignment>),
    Cancel(Vec<TaskId>),
    /// Groups and task components of forgotten jobs: drop them (a later task brings its
    /// component again).
    Forget {
        groups: Vec<GroupId>,
        components: Vec<ComponentHash>,
    },
    /// The whole set of run-time environments (replaces the previous set), with the bytes of
    /// the condition components this worker has not been sent yet.
    Environments {
        defs: Vec<EnvironmentDef>,
        components: Vec<(ComponentHash, Vec<u8>)>,
    },
    /// The first `count` outcomes this worker reported since it registered are durable (in the
    /// journal, if there is one): it may forget them. Outcomes not acknowledged when the
    /// connection is lost are claimed and reported again on the next registration.
    Received {
        count: u64,
    },
}

// ---- worker manager <-> scheduler ----

/// What a worker manager reports on every heartbeat.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct ManagerState {
    pub id: String,
    pub worker_type: String,
    /// Most tasks at once over all its workers (u32::MAX: no limit).
    pub max_task_concurrency: u32,
    /// Slots of each worker it starts.
    pub worker_slots: u32,
    /// Amounts each of its workers has.
    pub capabilities: Vec<(String, u64)>,
    /// Names of its worker processes that are alive (registered or still starting). A
    /// registered worker its manager listed once and lists no more is gone: the scheduler
    /// requeues its tasks at once instead of waiting for its connection to time out.
    pub workers: Vec<String>,
    /// The conditions its workers evaluate (its `--env-plugin` flags): the scheduler knows these
    /// names from the manager's registration on, before it has any worker.
    pub environments: Vec<EnvironmentDef>,
    /// `Some(n)`: a fixed pool (`--fixed n`) that keeps n workers alive and is not scaled.
    pub fixed: Option<u32>,
    /// The last workers it saw exit or stopped (at most [`EXITED_KEPT`]): one that registered
    /// after the manager's last report is known gone all the same.
    pub exited: Vec<String>,
}

/// How many exited worker names a manager keeps reporting.
pub const EXITED_KEPT: usize = 64;

#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum FromManager {
    Heartbeat(ManagerState),
    /// The manager is stopping on purpose (its workers with it): forget it now.
    Goodbye,
}

#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum ToManager {
    /// Converge to `desired` workers: stop the named (idle, already drained) ones first; if
    /// still above, stop workers that have not registered yet (`registered` lists those that have).
    Desired {
        desired: u32,
        stop: Vec<String>,
        registered: Vec<String>,
        reason: String,
    },
}

// ---- client <-> scheduler: one request per stream, one or more responses ----

#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum Request {
    /// Components first (the scheduler keeps them by hash), then the groups of one job.
    Submit {
        components: Vec<Vec<u8>>,
        groups: Vec<NewGroup>,
    },
    /// Progress until every task of the job is final, then `Done`.
    Wait {
        job: JobId,
    },
    /// Results of a job's final tasks.
    Results {
        job: JobId,
    },
    Cancel {
        job: JobId,
    },
    /// Free a finished job's results and inputs (answered with `Forgotten`).
    Forget {
        job: JobId,
    },
    /// Forget every finished job (answered with `ForgottenFinished`).
    ForgetFinished,
    /// The newest `limit` held jobs (answered with `Jobs`).
    Jobs {
        limit: u32,
    },
    Status,
    /// Register (or replace) an environment; with `wait`, answer once every live worker has
    /// reported its verdict.
    EnvRegister {
        name: String,
        component: Vec<u8>,
        config: Vec<(String, String)>,
        wait: bool,
    },
    EnvList,
    EnvRemove {
        name: String,
    },
    /// Why a task is where it is.
    Explain {
        task: TaskId,
    },
    /// Answer `WorkersReady` once at least `count` live workers (matching `environment`, when
    /// given) are registered; `WorkersReady` with the current count first, and on every change.
    WaitWorkers {
        count: u32,
        environment: Option<String>,
    },
}

#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum Response {
    Submitted {
        job: JobId,
        first_task: TaskId,
        tasks: u64,
    },
    Progress(JobCounts),
    Done(JobCounts),
    Results(Vec<TaskResult>),
    Canceled {
        tasks: u64,
    },
    /// `tasks` is 0 when the job was forgotten already.
    Forgotten {
        job: JobId,
        tasks: u64,
    },
    ForgottenFinished {
        jobs: Vec<JobId>,
        tasks: u64,
    },
    /// Newest first.
    Jobs(Vec<JobSummary>),
    Status(StatusReport),
    Error {
        message: String,
    },
    Environments(Vec<EnvironmentStatus>),
    EnvRemoved {
        name: String,
    },
    Explanation {
        lines: Vec<String>,
    },
    /// Live workers (matching the environment asked for): `ready` of the `wanted`.
    WorkersReady {
        ready: u32,
        wanted: u32,
    },
    /// The last answer to `Results`: `count` results were sent. A stream that ends without it
    /// was cut short.
    ResultsEnd {
        count: u64,
    },
}

/// How a worker obtained a condition component.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct ComponentLoad {
    /// `compiled`, `disk cache` (compiled earlier on this machine) or `memory` (already loaded).
    pub origin: LoadOrigin,
    /// Time spent compiling or loading it, in microseconds.
    pub micros: u64,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum LoadOrigin {
    Compiled,
    DiskCache,
    Memory,
}

impl std::fmt::Display for ComponentLoad {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let how = match self.origin {
            LoadOrigin::Compiled => "compiled",
            LoadOrigin::DiskCache => "from the disk cache",
            LoadOrigin::Memory => "already in memory",
        };
        write!(f, "{:.1} ms {how}", self.micros as f64 / 1e3)
    }
}

/// Who matches an environment.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct EnvironmentStatus {
    pub name: String,
    /// `registered` (weir env register), `worker` (a worker's --env-plugin) or `manager` (a
    /// worker manager's --env-plugin, passed on to its workers).
    pub source: String,
    pub matching: Vec<String>,
    pub not_matching: Vec<String>,
    /// (worker, reason)
    pub erroring: Vec<(String, String)>,
    /// Live workers that have not answered yet.
    pub pending: Vec<String>,
    /// (worker, how it loaded the condition component), for the workers that reported it.
    pub loads: Vec<(String, ComponentLoad)>,
    /// Live workers that evaluate their own definition of this name (`--env-plugin`), which
    /// wins over a run-time registration on them; their verdicts above are on that definition.
    pub own_definition: Vec<String>,
    /// Worker managers that declared the name (their workers evaluate their definition).
    pub managers: Vec<String>,
}

/// One job for `weir jobs`.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct JobSummary {
    pub job: JobId,
    pub counts: JobCounts,
    /// Its results are gone (`weir forget`, `--forget-after`).
    pub forgotten: bool,
}

#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct JobCounts {
    pub queued: u64,
    pub running: u64,
    pub succeeded: u64,
    pub failed: u64,
    pub canceled: u64,
}

impl JobCounts {
    pub fn total(&self) -> u64 {
        self.queued + self.running + self.succeeded + self.failed + self.canceled
    }
    pub fn finished(&self) -> u64 {
        self.succeeded + self.failed + self.canceled
    }
}

#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct ManagerStatus {
    pub id: String,
    pub worker_type: String,
    pub online: bool,
    /// `Some(n)`: a fixed pool of n workers (not scaled by the policy).
    pub fixed: Option<u32>,
    /// Priority of its tier in the policy; `None`: the policy does not list it (not scaled).
    pub tier: Option<u32>,
    pub max_task_concurrency: u32,
    pub desired: Option<u32>,
    pub live: u32,
    pub starting: u32,
    pub reason: String,
}

#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct WorkerStatus {
    pub id: WorkerId,
    pub manager: Option<String>,
    pub name: String,
    pub worker_type: String,
    pub slots: u32,
    pub running: u32,
    pub capabilities: Vec<(String, u64)>,
}

#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct StatusReport {
    pub workers: Vec<WorkerStatus>,
    pub tasks: JobCounts,
    pub jobs: u64,
    pub managers: Vec<ManagerStatus>,
    /// The scaling policy's last error (its last good decision is held meanwhile).
    pub policy_error: Option<String>,
}
