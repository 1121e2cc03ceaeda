//! Worker <-> scheduler: registration, assignments, outcomes, environments and verdicts.

use serde::{Deserialize, Serialize};

use super::*;

/// What a worker says of itself when it registers ([`FromWorker::Register`]): its name, slots,
/// capabilities and the rest. A wire type (renamed from `WorkerInfo`; postcard does not encode
/// names, so the bytes are unchanged); the task book keeps it in its `BookedWorker`.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct WorkerRegistration {
    pub name: String,
    pub slots: u32,
    pub capabilities: Vec<(String, u64)>,
    pub worker_type: String,
    pub manager: Option<String>,
    /// Names of the environments it evaluates from its own --env-plugin flags.
    pub local_environments: Vec<String>,
    /// Tasks it runs from before this registration: a worker that reconnects, or a scheduler
    /// that restarted, re-adopts them instead of running them again elsewhere.
    pub running: Vec<TaskId>,
    /// Random per worker process: a registration under the name of a live worker is the same
    /// worker reconnecting when this matches, and is refused as a second worker of that name
    /// when it does not.
    pub instance: u64,
    /// Milliseconds it may still run tasks (the end of its allocation, less a margin to leave
    /// cleanly): it is given no task whose timeout would outlive that. `None`: no end.
    pub ends_in_ms: Option<u64>,
    /// Tasks it finished under its lease and has not had acknowledged (their outcomes follow
    /// the registration): adopted like `running`, and taken back from a worker they were
    /// handed to since, if they were requeued from this one when it was lost.
    pub finished: Vec<TaskId>,
}

/// One task for a worker to run; the group's spec was sent before (`ToWorker::Group`).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Assignment {
    pub task: TaskId,
    pub group: GroupId,
    /// Index within the job (`WEIR_TASK_INDEX`).
    pub index: u32,
    /// The task's own input, when it has one (otherwise the group's).
    #[serde(with = "crate::bytes::maybe")]
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
    Register(Box<WorkerRegistration>),
    Heartbeat,
    /// Finished runs: (task, outcome).
    Finished(Vec<(TaskId, Outcome)>),
    /// Verdicts that changed (and every verdict for a newly received environment set).
    Verdicts(Vec<(String, EnvVerdict)>),
    /// How the condition components of new or changed environments were loaded (sent before
    /// their verdicts), for `weir env list`: a slow registration says where its time went.
    Loads(Vec<(String, ComponentLoad)>),
    /// Answer to [`ToWorker::Revoke`]: the tasks given back, none of which has started or will.
    Revoked(Vec<TaskId>),
    /// Tasks that started since the last report (sent with the next outcomes, or within
    /// moments): a task handed over ahead of a free slot that its worker is lost before it
    /// started does not count as an attempt.
    Started(Vec<TaskId>),
    /// A heartbeat that asks for the lease to be renewed: the scheduler answers with
    /// [`ToWorker::Lease`] carrying the same `seq`, and the worker's lease then runs until the
    /// moment it *sent* this plus the lease length (a slow link shortens it, never stretches
    /// it).
    Renew {
        seq: u64,
    },
}

#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum ToWorker {
    Registered {
        id: WorkerId,
        /// The lease on this worker's tasks, in milliseconds, counted from when the worker sent
        /// its registration; renewed by each [`ToWorker::Lease`]. Once it runs out the worker
        /// stops its tasks and starts none (the scheduler gives them to others only after it).
        /// 0: none.
        lease_ms: u64,
        /// How often to beat (each beat a renewal) while it holds no task; with tasks it beats
        /// at its own `--heartbeat-interval`, or four times a lease if that is more often.
        /// Chosen by the scheduler, which judges silence (`weir_core::lease::idle_pace`), and
        /// told again with every [`ToWorker::Lease`].
        idle_beat_ms: u64,
    },
    Group {
        id: GroupId,
        job: JobId,
        spec: Box<TaskSpec>,
    },
    /// Shared with every frame that sends it (the scheduler holds one copy of its bytes).
    Component {
        hash: ComponentHash,
        #[serde(with = "crate::bytes::one")]
        bytes: std::sync::Arc<[u8]>,
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
        #[serde(with = "crate::bytes::keyed")]
        components: Vec<(ComponentHash, std::sync::Arc<[u8]>)>,
    },
    /// The first `count` outcomes this worker reported since it registered are durable (in the
    /// journal, if there is one): it may forget them. Outcomes not acknowledged when the
    /// connection is lost are claimed and reported again on the next registration.
    Received {
        count: u64,
    },
    /// Leave (it is idle): the manager that started it has been gone for a while and will not
    /// stop it. The worker exits with [`EXIT_DISMISSED`], on which the unit it runs in (a Slurm
    /// job) ends too, instead of holding its allocation to the walltime.
    Leave {
        reason: String,
    },
    /// Give back up to `count` of these tasks that have not started (they were handed over
    /// ahead of a free slot, and a worker with a free slot could run them now); answered with
    /// [`FromWorker::Revoked`], also when none could be given back.
    Revoke {
        tasks: Vec<TaskId>,
        count: u32,
    },
    /// The answer to [`FromWorker::Renew`] `seq`: the lease runs `lease_ms` from when the
    /// worker sent that request. Only the scheduler's answer renews a lease; a connection that
    /// is merely not closed yet proves nothing.
    Lease {
        seq: u64,
        /// How often to beat while it holds no task from now on (as in
        /// [`ToWorker::Registered`]): the scheduler slows idle workers down as the cluster
        /// grows (`weir_core::lease::idle_pace`).
        idle_beat_ms: u64,
    },
}

/// The exit code of a worker the scheduler told to leave ([`ToWorker::Leave`]).
pub const EXIT_DISMISSED: i32 = 3;
