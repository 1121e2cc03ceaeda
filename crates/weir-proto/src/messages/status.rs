//! What the scheduler reports to clients: status, jobs, environments, component loads.

use serde::{Deserialize, Serialize};

use super::*;

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
    /// Milliseconds each worker it starts may run tasks (a Slurm manager's walltime less
    /// `--leave-before`); `None`: no limit. Tasks with a longer timeout are not scaled for here.
    pub usable_ms: Option<u64>,
    /// Its operator's labels (`worker-manager --label`).
    pub labels: Vec<(String, String)>,
}

/// A manager and its units, for `weir managers` (an allocation view).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct ManagerUnits {
    pub status: ManagerStatus,
    /// `process`, `command` or `slurm`.
    pub backend: String,
    /// As it last reported them, aged to the scheduler's now.
    pub units: Vec<UnitReport>,
    /// Its workers registered with the scheduler (a unit's workers among these have joined).
    pub registered: Vec<String>,
}

/// One worker's row in `weir status` ([`StatusReport`]), as [`ManagerStatus`] is a manager's.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct WorkerStatus {
    pub id: WorkerId,
    pub manager: Option<String>,
    pub name: String,
    pub worker_type: String,
    pub slots: u32,
    /// Tasks in its slots (at most `slots`).
    pub running: u32,
    pub capabilities: Vec<(String, u64)>,
    /// Tasks handed to it ahead of a free slot, waiting there (`scheduler --prefetch`).
    pub prefetched: u32,
    /// The tasks it runs now (started, in its slots), in id order.
    pub tasks: Vec<TaskId>,
    /// When it registered, on the scheduler's clock ([`StatusReport::now_ms`]).
    pub joined_ms: u64,
    /// When its allocation ends (walltime), on the same clock; `None`: no end known.
    pub ends_at_ms: Option<u64>,
    /// Drained by the scaling policy: takes no new task until a decision takes it back.
    pub drained: bool,
    /// Being stopped by its manager: takes no new task.
    pub stopping: bool,
}

#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct StatusReport {
    /// The scheduler's clock when the report was made (ms since it started): what the
    /// workers' `joined_ms` and `ends_at_ms` are on.
    #[serde(default)]
    pub now_ms: u64,
    pub workers: Vec<WorkerStatus>,
    pub tasks: JobCounts,
    pub jobs: u64,
    pub managers: Vec<ManagerStatus>,
    /// The scaling policy's last error (its last good decision is held meanwhile).
    pub policy_error: Option<String>,
}

/// One scheduler replica (`weir replicas`), as the leader sees it.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct ReplicaStatus {
    pub id: u64,
    /// `quic://HOST:PORT`
    pub address: String,
    pub leader: bool,
    /// Whether it votes (a replica being added learns the log first).
    pub voter: bool,
    /// The leader's term (Raft's; a new leader has a higher one).
    pub term: u64,
    /// The last log entry the leader knows it holds (`None`: not known yet).
    pub matched: Option<u64>,
    /// Entries it is behind the leader's log (`None`: not known).
    pub lag: Option<u64>,
}
