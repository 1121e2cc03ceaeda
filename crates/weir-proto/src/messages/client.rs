//! Client <-> scheduler: one request per stream, one or more responses.

use serde::{Deserialize, Serialize};

use super::*;

#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum Request {
    /// Components first (the scheduler keeps them by hash), then the groups of one job.
    /// `request`, chosen by the client (random), makes the submission safe to resend: the
    /// scheduler remembers it with the job (in its journal too) for as long as it holds the
    /// job, and answers a second submission with the same id with the first one's `Submitted`
    /// instead of making a second job (the groups of the resend are not looked at).
    Submit {
        #[serde(with = "crate::bytes::list")]
        components: Vec<Vec<u8>>,
        groups: Vec<NewGroup>,
        request: Option<RequestId>,
    },
    /// Progress until every task of the job is final, then `Done`.
    Wait {
        job: JobId,
    },
    /// Results of a job's final tasks.
    Results {
        job: JobId,
    },
    /// Each task's result as soon as it is final: `Results` with those already final, then
    /// more `Results` as tasks end, then `Done` (futures resolve per task, not per job).
    Watch {
        job: JobId,
    },
    Cancel {
        job: JobId,
    },
    /// Cancel these tasks (running ones are stopped); answered with `Canceled`.
    CancelTasks {
        tasks: Vec<TaskId>,
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
        #[serde(with = "crate::bytes::one")]
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
    /// Replace the running scaling policy: `component` (a policy-world component; the client
    /// sends the bundled one's bytes too) with `content`. The scheduler creates it and runs it
    /// once on the last snapshot before it switches; on any error the old one stays.
    PolicySet {
        name: String,
        #[serde(with = "crate::bytes::one")]
        component: Vec<u8>,
        content: String,
    },
    /// The running policy: `Response::Policy`.
    PolicyShow,
    /// Managers and their units (`Response::Managers`): all, or the one named (`NotFound` if
    /// none is).
    Managers {
        id: Option<String>,
    },
    /// The scheduler replicas as the leader sees them (`Response::Replicas`; none for a single
    /// scheduler).
    Replicas,
    /// Add replica `id` at `address` (`quic://HOST:PORT`; started with `--join`): it learns the
    /// log, then votes. Answered with `Replicas` once it votes.
    ReplicaAdd {
        id: u64,
        address: String,
        /// The replicas' token (`weir_net::access::replica_token` of the scheduler's key): a
        /// client token alone does not change who replicates.
        token: String,
    },
    /// Remove replica `id` (answered with `Replicas`).
    ReplicaRemove {
        id: u64,
        token: String,
    },
}

impl Request {
    /// Whether the read-only token may ask it: what the dashboard and `weir status`-class
    /// commands show (status, jobs and their progress, explain, managers, workers, environments,
    /// the policy, replicas). Not results (what tasks returned is data, not status), nor
    /// anything that changes the cluster.
    pub fn reads_status_only(&self) -> bool {
        match self {
            Request::Wait { .. }
            | Request::Jobs { .. }
            | Request::Status
            | Request::EnvList
            | Request::Explain { .. }
            | Request::WaitWorkers { .. }
            | Request::PolicyShow
            | Request::Managers { .. }
            | Request::Replicas => true,
            Request::Submit { .. }
            | Request::Results { .. }
            | Request::Watch { .. }
            | Request::Cancel { .. }
            | Request::CancelTasks { .. }
            | Request::Forget { .. }
            | Request::ForgetFinished
            | Request::EnvRegister { .. }
            | Request::EnvRemove { .. }
            | Request::PolicySet { .. }
            | Request::ReplicaAdd { .. }
            | Request::ReplicaRemove { .. } => false,
        }
    }
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
    /// The request was not done: why, as a code to act on and words to show.
    Error {
        code: ErrorCode,
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
    Policy(PolicyReport),
    Managers(Vec<ManagerUnits>),
    /// To a client waiting for (`Wait`) or watching (`Watch`) a job: its queued `task` (and
    /// the others that need the same) can run nowhere: no live worker could ever run it and
    /// no worker manager could start one that would (`reason`, as `weir explain` would say).
    /// Once per kind of task, after [`weir_core::scheduler::UNRUNNABLE_AFTER_MS`]; the tasks
    /// stay queued (a worker or manager may still join), and the wait goes on.
    Unrunnable {
        task: TaskId,
        reason: String,
    },
    Replicas(Vec<ReplicaStatus>),
}

/// The running scaling policy (`weir policy show`, and the answer to `weir policy set`).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct PolicyReport {
    /// The bundled engine's name, or the file it came from.
    pub name: String,
    /// SHA-256 of its component, in hex.
    pub sha256: String,
    pub content: String,
    /// (priority, members) of each tier.
    pub tiers: Vec<(u32, Vec<String>)>,
    /// Its last decision for each manager: (manager, desired workers, reason).
    pub last: Vec<(String, u32, String)>,
    pub error: Option<String>,
}

/// Why a request was not done, for a client to decide on (its exit status, a retry) without
/// reading the words.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum ErrorCode {
    /// The request itself is wrong: a bad frame, submission, component or name.
    Invalid,
    /// No such job, task or environment.
    NotFound,
    /// The job was forgotten: its results are gone.
    Forgotten,
    /// The job still has tasks queued or running.
    NotFinished,
    /// A limit was reached (environments, connections).
    Limit,
    /// The journal could not take it: not done, and the scheduler stops.
    NotDurable,
    /// The connection's token may only read (the read-only token): it cannot submit, cancel,
    /// forget, register or change anything, nor fetch results.
    Forbidden,
}

impl ErrorCode {
    /// As in JSON output: `not-found`.
    pub fn as_str(self) -> &'static str {
        match self {
            ErrorCode::Invalid => "invalid",
            ErrorCode::NotFound => "not-found",
            ErrorCode::Forgotten => "forgotten",
            ErrorCode::NotFinished => "not-finished",
            ErrorCode::Limit => "limit",
            ErrorCode::NotDurable => "not-durable",
            ErrorCode::Forbidden => "forbidden",
        }
    }
}
