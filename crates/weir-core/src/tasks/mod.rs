//! The scheduler's task core: jobs, groups, tasks, workers and the matching of the two.
//!
//! Pure and synchronous: every method takes `now` (milliseconds) where time matters and records
//! its effects on the rest of the scheduler as [`Effect`]s, drained with [`Tasks::take_effects`]
//! by `Scheduler::flush`, which turns them into the scheduler's one action queue
//! (`scheduler::Action`). The shell never sees an `Effect`.
//!
//! Rules:
//! - Queued tasks wait in one FIFO queue per (priority, requirement class); scheduling walks the
//!   queues by priority and skips a class no worker can take, so a task that cannot be placed
//!   never delays one that can (no head-of-line blocking).
//! - A running task holds one slot and its capability amounts on its worker until the worker
//!   reports it finished, or is lost; capacity is never exceeded. A worker may also hold up to
//!   `prefetch` tasks beyond its slots, waiting there (with their amounts held); they are handed
//!   out only when every fitting worker's slots are full, and taken back for an idle worker.
//! - A lost worker's running tasks are requeued at the front of their queue while attempts
//!   remain (`retries + 1` runs in all), otherwise they fail. A run cut short by the end of its
//!   worker's allocation (walltime) spends no attempt, but a task cut short more than
//!   `max_walltime_requeues` times fails (it would never finish in such allocations).
//! - A report for a task that is not running on the reporting worker (late, duplicate, or from a
//!   worker already declared lost) is ignored: every task is finished exactly once.

mod claims;
mod components;
mod environments;
mod explain;
mod prefetch;
mod replay;
mod retention;
mod schedule;
mod status;
mod stream;
mod submit;
mod unschedulable;
mod worker;
mod workers;

use crate::hash::{HashMap, HashSet};
use std::collections::{BTreeMap, VecDeque};
use std::sync::Arc;

use super::dense::Dense;

use weir_proto::{
    ComponentHash, ComponentLoad, EnvVerdict, EnvironmentStatus, GroupId, JobCounts, JobId,
    JobSummary, NewGroup, Outcome, RequestId, StatusReport, TaskId, TaskKind, TaskResult, TaskSpec,
    TaskState, WorkerId, WorkerRegistration, WorkerStatus,
};

pub use components::Components;
pub use environments::{EnvSource, Environments};
pub use retention::{DETAIL_LIST, Failure, JobDetail};
use schedule::could_ever_run;
pub use stream::{Run, STREAM_RUNS};
pub use submit::{Group, Inputs, SubmitError};
pub use unschedulable::Unschedulable;
use worker::{BookedWorker, amount};
pub use worker::{NameTaken, WorkerView};

/// Tasks of a group are prefetched once one of them has run, from hand-over to report, within
/// this many milliseconds: prefetching saves a round trip per task, which matters only for
/// tasks about as short as one.
pub(crate) const PREFETCH_BELOW_MS: u64 = 1000;

/// How often a task held ahead by a lost worker, not reported started, is spared an attempt.
pub(crate) const MAX_SPARED: u32 = 2;

pub use weir_proto::MAX_TASKS_PER_SUBMIT;

/// A worker lost this close to the end of its allocation (or after it), whatever the way, was
/// cut off by it: its workers leave at that moment, which the scheduler knows to within the
/// registration's transit.
pub(crate) const WALLTIME_SLACK_MS: u64 = 10_000;

/// Default of [`Config::max_walltime_requeues`] (`scheduler --max-walltime-requeues`).
pub const MAX_WALLTIME_REQUEUES: u32 = 3;

#[derive(Clone, Debug)]
pub struct Config {
    /// A worker silent for longer than this is lost (counted from when it was last handed
    /// tasks, if that is later: it was idle before, and idle workers beat less often).
    pub heartbeat_timeout_ms: u64,
    /// A worker that holds no task (handed nothing, or all it was handed finished) is lost
    /// once silent for this long: it beats less often ([`crate::lease::idle_silence`]). Longer
    /// for a worker told a slower pace ([`Tasks::told_idle_pace`]).
    pub idle_silence_ms: u64,
    /// Forget a job this long after its last task finished (`None`: keep it until
    /// [`Tasks::forget`]).
    pub forget_after_ms: Option<u64>,
    /// The tasks of a worker lost without a word (silent, or its connection broken) wait until
    /// this long after the last thing heard from it before they run again, and the tasks found
    /// unfinished in the journal at start this long from the start: by then every lease the
    /// worker could hold has run out and its runs are stopped (`core::lease::fence` has the
    /// arithmetic). A worker that comes back meanwhile claims them (see
    /// [`Tasks::worker_joined`]).
    pub fence_ms: u64,
    /// A drained worker its manager has not stopped after this long takes tasks again.
    pub undrain_ms: u64,
    /// Tasks a worker may hold beyond its slots, waiting there for one to free (so it starts
    /// its next task without a round trip, and reports and receives tasks in batches). Handed
    /// out only once every worker that can run them has its slots full; taken back (without
    /// spending an attempt) for a worker with a free slot that nothing queued fits. 0: none.
    pub prefetch: u32,
    /// A task whose run was cut short by the end of its worker's allocation (walltime) is
    /// requeued without spending an attempt, this many times; cut short once more, it fails.
    pub max_walltime_requeues: u32,
}

impl Default for Config {
    fn default() -> Config {
        Config {
            heartbeat_timeout_ms: 10_000,
            idle_silence_ms: 10_000,
            forget_after_ms: None,
            fence_ms: 0,
            undrain_ms: 20_000,
            prefetch: 0,
            max_walltime_requeues: MAX_WALLTIME_REQUEUES,
        }
    }
}

/// What the task book's last calls mean for the rest of the scheduler: tasks to hand out or
/// take back, a worker lost, a task final, records to journal.
///
/// Not a second action queue: the shell sees exactly one, `scheduler::Action`. Only
/// `Scheduler::flush` reads these (with [`Tasks::take_effects`]), and the translation is real
/// work the task book has no business doing: a batch's dispatches are journaled (`Started`,
/// written through) before any of them is sent, its finished tasks become one `Final` record,
/// watchers get their results and waiters their progress once per batch, and a lost worker
/// settles `env register --wait`s. Pushing `scheduler::Action`s from here would move all of
/// that into the task book.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Effect {
    /// Send these tasks to the worker (its group specs and components first, if it lacks them).
    Dispatch {
        worker: WorkerId,
        tasks: Vec<TaskId>,
    },
    /// Ask the worker to give back up to `count` of these tasks it holds and has not started
    /// (it answers with those it gave back: [`Tasks::revoked`]).
    Revoke {
        worker: WorkerId,
        tasks: Vec<TaskId>,
        count: u32,
    },
    /// Tell the worker to stop these tasks (they stay its until it confirms).
    Cancel {
        worker: WorkerId,
        tasks: Vec<TaskId>,
    },
    /// Tell the worker to stop these tasks, which are no longer its: their first worker came
    /// back with their outcomes (see `Tasks::claimable_elsewhere`). Its report of them is
    /// ignored.
    TakeBack {
        worker: WorkerId,
        tasks: Vec<TaskId>,
    },
    /// Close the worker's connection: it is considered lost.
    Disconnect { worker: WorkerId, reason: String },
    /// The task reached a final state (for waiting clients).
    Finished { job: JobId, task: TaskId },
    /// A finished job was forgotten after `forget_after_ms` (the shell journals it).
    Forgot { job: JobId },
    /// Runs cut short by the end of their worker's allocation: (task, times so far). The shell
    /// journals them, so the cap holds across a restart.
    Cut(Vec<(TaskId, u32)>),
    /// A forgotten job was dropped: its groups are gone, and so are the wasm components no held
    /// task uses any more (the shell frees their bytes and tells the workers that have them).
    Dropped {
        groups: Vec<GroupId>,
        components: Vec<ComponentHash>,
    },
}

/// How a worker was lost, which decides when its running tasks may run again.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Loss {
    /// It stopped on purpose and stopped its tasks first: they run again at once, and the run
    /// is not counted against their retries.
    Stopped,
    /// Its process is known to be dead (its manager saw it exit; its guard killed its tasks):
    /// they run again at once.
    Exited,
    /// It went silent or its connection broke: its tasks may still be running there until its
    /// lease runs out, so they wait until `fence_ms` after it was last heard from (unless it
    /// comes back and claims them).
    Silent,
}

struct Task {
    group: GroupId,
    state: TaskState,
    /// Runs started.
    attempts: u32,
    /// Runs cut short by the end of their worker's allocation (walltime), which spend no
    /// attempt; capped by [`Config::max_walltime_requeues`]. (u16: it fits in the padding.)
    cuts: u16,
    /// The worker holding its resources (running, or canceled but not yet confirmed).
    worker: Option<WorkerId>,
    /// The worker process it was last handed to ([`WorkerRegistration::instance`]; 0: none, or not
    /// known since a restart). A worker that comes back claims a task only when it is this
    /// one: a task handed to another since may be running there (see [`Tasks::worker_joined`]).
    holder: u64,
    /// Boxed: a queued task pays 8 bytes for it, not the size of an outcome.
    outcome: Option<Box<Ended>>,
}

/// How a final task ended, and where it last ran (for `weir explain`).
#[derive(Debug)]
struct Ended {
    outcome: Outcome,
    /// `worker NAME` (and its manager) it last ran on; `None`: it never ran, or it ended
    /// before a scheduler restart (places are not journaled).
    ran_on: Option<String>,
}

/// A worker as `weir explain` names where a task ran.
fn ran_on(info: &WorkerRegistration) -> String {
    match &info.manager {
        Some(manager) => format!("worker {} (manager {manager})", info.name),
        None => format!("worker {}", info.name),
    }
}

struct Job {
    counts: JobCounts,
    /// (first task, count) per group, in task order.
    tasks: Vec<(TaskId, u64)>,
    /// Its results and inputs are gone; its skeleton stays until every older job is forgotten.
    forgotten: bool,
    /// The client's id for the submission that made it (indexed by `Tasks::requests`).
    request: Option<RequestId>,
}

impl Job {
    fn done(&self) -> bool {
        self.counts.queued == 0 && self.counts.running == 0
    }

    fn task_ids(&self) -> impl Iterator<Item = TaskId> + '_ {
        self.tasks.iter().flat_map(|&(first, n)| first..first + n)
    }
}

/// A held job as the journal records it ([`Tasks::held_jobs`]).
#[derive(Clone, Debug, PartialEq)]
pub(crate) struct HeldJob {
    pub job: JobId,
    pub groups: Vec<NewGroup>,
    /// (task, final state, outcome, attempts) of its finished tasks.
    pub finals: Vec<(TaskId, TaskState, Outcome, u32)>,
    /// (task, attempts) of its unfinished tasks that were handed to a worker.
    pub started: Vec<(TaskId, u32)>,
    /// (task, runs cut short by an allocation's end) of its tasks that have any.
    pub cuts: Vec<(TaskId, u32)>,
    pub forgotten: bool,
    pub request: Option<RequestId>,
}

/// Why a job cannot be looked up or forgotten.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum JobError {
    #[error("no job {0}")]
    Unknown(JobId),
    #[error("job {0} was forgotten: its results are gone")]
    Forgotten(JobId),
    #[error("job {job} is not finished ({unfinished} tasks queued or running); cancel it first")]
    NotFinished { job: JobId, unfinished: u64 },
}

impl JobError {
    pub fn code(&self) -> weir_proto::ErrorCode {
        match self {
            JobError::Unknown(_) => weir_proto::ErrorCode::NotFound,
            JobError::Forgotten(_) => weir_proto::ErrorCode::Forgotten,
            JobError::NotFinished { .. } => weir_proto::ErrorCode::NotFinished,
        }
    }
}

/// Requirements shared by tasks: what a worker must have free to take one.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
struct Class {
    capabilities: Vec<(String, u64)>,
    environments: Vec<String>,
    /// The tasks' timeout (0: none): a worker that leaves sooner is not given them.
    timeout_ms: u64,
}

/// What the journal records as the outcome of a task whose job was forgotten.
fn forgotten_outcome() -> Outcome {
    Outcome::Error {
        message: "forgotten".into(),
    }
}

/// (Reverse priority, class): queues in the order they are served ([`Group::queue`]).
type QueueKey = (std::cmp::Reverse<i32>, usize);

#[derive(Default)]
pub struct Tasks {
    config: Config,
    /// Workers handed tasks while they held none, in this round: the frames go once the round's
    /// journal sync is done, so their silence as busy workers counts from then
    /// ([`Tasks::synced`]); an idle worker may have been silent for a while already.
    becoming_busy: HashSet<WorkerId>,
    /// Ids are dense and never reused; forgotten jobs' tasks are dropped from the front.
    tasks: Dense<Task>,
    groups: HashMap<GroupId, Arc<Group>>,
    /// Groups whose last task ran (from hand-over to report) within [`PREFETCH_BELOW_MS`]: only
    /// their tasks are prefetched, so a worker never holds more than about that much work
    /// ahead (a task of higher priority waits no longer behind it).
    quick: HashSet<GroupId>,
    /// Open workers (not draining) with a free slot, with room to hold one more task, and the
    /// workers holding tasks beyond their slots: kept in step by [`Tasks::resync`] after every
    /// change, so placement and take-backs look only at workers that matter, not at all.
    free: std::collections::BTreeSet<WorkerId>,
    roomy: std::collections::BTreeSet<WorkerId>,
    holders: std::collections::BTreeSet<WorkerId>,
    /// Live workers by name (names are unique among live workers).
    names: HashMap<String, WorkerId>,
    /// Live workers by the manager that started them (a manager's heartbeat looks at its own
    /// workers only, not at every worker).
    by_manager: HashMap<String, std::collections::BTreeSet<WorkerId>>,
    /// How often each task was held ahead by a worker lost before it reported the task started
    /// (not counted as an attempt, up to [`MAX_SPARED`] times).
    spared: HashMap<TaskId, u32>,
    /// Tasks requeued when their worker was lost without a word, and that worker's process
    /// ([`WorkerRegistration::instance`]): it may come back with their outcomes (see
    /// `Tasks::claimable_elsewhere`). Dropped when the task ends.
    left_by: HashMap<TaskId, u64>,
    next_group: GroupId,
    jobs: Dense<Job>,
    /// Held jobs by the request id of the submission that made them (see [`Job::request`]).
    requests: HashMap<RequestId, JobId>,
    /// Jobs whose last task finished since the last tick (for `forget_after_ms`).
    done: Vec<JobId>,
    /// (when it was seen done, job), oldest first: forgotten after `forget_after_ms`.
    retention: VecDeque<(u64, JobId)>,
    /// Classes with queued tasks nothing can run, and since when (`fail_unschedulable`).
    unschedulable_since: HashMap<usize, u64>,
    classes: Vec<Class>,
    /// Queued tasks per class (index as `classes`), so `demand` is O(classes).
    queued_by_class: Vec<u64>,
    /// The latest run times (ms) of each class's finished tasks (index as `classes`), at most
    /// [`crate::scaling::RECENT_RUNTIMES`], oldest first: the policy's `runtimes`.
    runtimes: Vec<VecDeque<u64>>,
    /// The latest finished runs, in the order they ended (`stream.rs`).
    runs: VecDeque<Run>,
    /// A queue ([`QueueKey`]) -> FIFO of queued tasks. May hold canceled tasks, skipped lazily
    /// (never at its front).
    queues: BTreeMap<QueueKey, VecDeque<TaskId>>,
    /// Queued tasks that may not run before a time (`fence_ms`): by that time, oldest first.
    /// Claimed or canceled ones are skipped lazily when they are released.
    fenced: BTreeMap<u64, Vec<TaskId>>,
    workers: BTreeMap<WorkerId, BookedWorker>,
    /// Component bytes, with how many held groups use each: a task component no held group
    /// uses any more is forgotten too (`Effect::Dropped`).
    components: Components,
    /// Known environment names: registered at run time, or evaluated by some worker on its own.
    environments: Environments,
    counts: JobCounts,
    next_worker: WorkerId,
    effects: Vec<Effect>,
    /// Tasks forgotten since the journal was last compacted ([`Tasks::compacted`]).
    forgotten_since_compaction: u64,
}

impl Tasks {
    pub fn new(config: Config) -> Tasks {
        Tasks {
            config,
            ..Tasks::default()
        }
    }

    /// The round's journal sync is done and its frames go: the workers handed tasks while idle
    /// in it are judged as busy from now (see [`Config::heartbeat_timeout_ms`]). A sync that
    /// stalls for seconds (a slow disk) does not count against them.
    pub fn synced(&mut self, now: u64) {
        for id in std::mem::take(&mut self.becoming_busy) {
            if let Some(w) = self.workers.get_mut(&id) {
                w.busy_since = w.busy_since.max(now);
            }
        }
    }

    pub(crate) fn take_effects(&mut self) -> Vec<Effect> {
        std::mem::take(&mut self.effects)
    }

    pub fn group(&self, id: GroupId) -> Option<&Arc<Group>> {
        self.groups.get(&id)
    }

    /// The group and index of a task.
    pub(crate) fn task_group(&self, task: TaskId) -> Option<(&Arc<Group>, u32)> {
        let t = self.task(task)?;
        let group = self.groups.get(&t.group)?;
        Some((group, (task - group.first_task) as u32))
    }

    fn task(&self, id: TaskId) -> Option<&Task> {
        self.tasks.get(id)
    }

    fn task_mut(&mut self, id: TaskId) -> Option<&mut Task> {
        self.tasks.get_mut(id)
    }

    fn job(&self, job: JobId) -> Result<&Job, JobError> {
        match self.jobs.get(job) {
            Some(j) => Ok(j),
            None if job >= 1 && job < self.jobs.first_id() => Err(JobError::Forgotten(job)),
            None => Err(JobError::Unknown(job)),
        }
    }

    fn set_state(&mut self, id: TaskId, state: TaskState) {
        let Some(task) = self.tasks.get_mut(id) else {
            return;
        };
        let old = std::mem::replace(&mut task.state, state);
        let group = &self.groups[&task.group];
        for counts in [&mut self.counts, &mut self.jobs[group.job].counts] {
            *slot(counts, old) -= 1;
            *slot(counts, state) += 1;
        }
        if old == TaskState::Queued {
            self.queued_by_class[group.class] -= 1;
        }
        if state == TaskState::Queued {
            self.queued_by_class[group.class] += 1;
        }
    }

    /// `ran_on`: the worker it last ran on ([`ran_on`]), when known.
    fn finish(&mut self, id: TaskId, state: TaskState, outcome: Outcome, ran_on: Option<String>) {
        self.set_state(id, state);
        self.spared.remove(&id);
        self.left_by.remove(&id);
        let Some(task) = self.tasks.get_mut(id) else {
            return;
        };
        task.outcome = Some(Box::new(Ended { outcome, ran_on }));
        let job = self.groups[&task.group].job;
        self.effects.push(Effect::Finished { job, task: id });
        if self.config.forget_after_ms.is_some() && self.jobs[job].done() {
            self.done.push(job);
        }
    }
}

fn slot(counts: &mut JobCounts, state: TaskState) -> &mut u64 {
    match state {
        TaskState::Queued => &mut counts.queued,
        TaskState::Running => &mut counts.running,
        TaskState::Succeeded => &mut counts.succeeded,
        TaskState::Failed => &mut counts.failed,
        TaskState::Canceled => &mut counts.canceled,
    }
}
