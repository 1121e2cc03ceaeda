//! The scheduler's task core: jobs, groups, tasks, workers and the matching of the two.
//!
//! Pure and synchronous: every method takes `now` (milliseconds) where time matters and records
//! what the shell must do as [`Action`]s, drained with [`Core::take_actions`]. The shell turns
//! frames into method calls and actions into frames.
//!
//! Rules:
//! - Queued tasks wait in one FIFO queue per (priority, requirement class); scheduling walks the
//!   queues by priority and skips a class no worker can take, so a task that cannot be placed
//!   never delays one that can (no head-of-line blocking).
//! - A running task holds one slot and its capability amounts on its worker until the worker
//!   reports it finished, or is lost; capacity is never exceeded.
//! - A lost worker's running tasks are requeued at the front of their queue while attempts
//!   remain (`retries + 1` runs in all), otherwise they fail.
//! - A report for a task that is not running on the reporting worker (late, duplicate, or from a
//!   worker already declared lost) is ignored: every task is finished exactly once.

use std::collections::{BTreeMap, HashMap, HashSet, VecDeque};
use std::sync::Arc;

use super::dense::Dense;

use crate::proto::{
    ComponentHash, ComponentLoad, EnvVerdict, EnvironmentStatus, GroupId, JobCounts, JobId,
    JobSummary, NewGroup, Outcome, StatusReport, TaskId, TaskKind, TaskResult, TaskSpec, TaskState,
    WorkerId, WorkerInfo, WorkerStatus,
};

/// Most tasks one submission may create.
pub const MAX_TASKS_PER_SUBMIT: u64 = 10_000_000;

#[derive(Clone, Debug)]
pub struct CoreConfig {
    /// A worker silent for longer than this is lost.
    pub heartbeat_timeout_ms: u64,
    /// Forget a job this long after its last task finished (`None`: keep it until
    /// [`Core::forget`]).
    pub forget_after_ms: Option<u64>,
    /// The tasks of a worker lost without a word (silent, or its connection broken), and the
    /// tasks found unfinished in the journal at start, wait this long before they run again:
    /// until the worker's lease has surely run out and its runs are stopped. A worker that
    /// comes back meanwhile claims them (see [`Core::worker_joined`]).
    pub fence_ms: u64,
}

impl Default for CoreConfig {
    fn default() -> CoreConfig {
        CoreConfig {
            heartbeat_timeout_ms: 10_000,
            forget_after_ms: None,
            fence_ms: 0,
        }
    }
}

/// What the shell must do.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Action {
    /// Send these tasks to the worker (its group specs and components first, if it lacks them).
    Dispatch {
        worker: WorkerId,
        tasks: Vec<TaskId>,
    },
    /// Tell the worker to stop these tasks.
    Cancel {
        worker: WorkerId,
        tasks: Vec<TaskId>,
    },
    /// Close the worker's connection: it is considered lost.
    Disconnect { worker: WorkerId, reason: String },
    /// The task reached a final state (for waiting clients).
    Finished { job: JobId, task: TaskId },
    /// A finished job was forgotten after `forget_after_ms` (the shell journals it).
    Forgot { job: JobId },
    /// A forgotten job was dropped: its groups are gone, and so are the wasm components no held
    /// task uses any more (the shell frees their bytes and tells the workers that have them).
    Dropped {
        groups: Vec<GroupId>,
        components: Vec<ComponentHash>,
    },
}

/// How a worker was lost, which decides when its running tasks may run again.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Loss {
    /// It stopped on purpose and stopped its tasks first: they run again at once, and the run
    /// is not counted against their retries.
    Stopped,
    /// Its process is known to be dead (its manager saw it exit; its guard killed its tasks):
    /// they run again at once.
    Exited,
    /// It went silent or its connection broke: its tasks may still be running there until its
    /// lease runs out, so they wait `fence_ms` (unless it comes back and claims them).
    Silent,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum EnvSource {
    /// `weir env register`: sent to every worker.
    Registered,
    /// A worker's own `--env-plugin`.
    Worker,
    /// A worker manager's `--env-plugin`, declared when it registers and passed on to the
    /// workers it starts (which evaluate it as their own).
    Manager,
}

impl EnvSource {
    fn label(self) -> &'static str {
        match self {
            EnvSource::Registered => "registered",
            EnvSource::Worker => "worker",
            EnvSource::Manager => "manager",
        }
    }
}

#[derive(Debug, PartialEq, Eq, thiserror::Error)]
pub enum SubmitError {
    #[error("empty submission: no tasks")]
    Empty,
    #[error("a submission may create at most {MAX_TASKS_PER_SUBMIT} tasks, not {0}")]
    TooMany(u64),
    #[error("group {group}: `count` is {count} but {inputs} inputs were given")]
    CountMismatch {
        group: usize,
        count: u32,
        inputs: usize,
    },
    #[error("group {group}: a command task needs a program (argv is empty)")]
    EmptyArgv { group: usize },
    #[error("group {group}: unknown wasm component {hash}; send it with the submission")]
    UnknownComponent { group: usize, hash: String },
    #[error("group {group}: unknown environment `{name}`; register it first (`weir env register`)")]
    UnknownEnvironment { group: usize, name: String },
}

pub struct Group {
    pub id: GroupId,
    pub job: JobId,
    pub spec: TaskSpec,
    pub inputs: Inputs,
    first_task: TaskId,
    class: usize,
}

/// A group's per-task inputs in one buffer: a task's input costs its bytes and 8 more (its end
/// offset), not a vector of its own (24 bytes and an allocation each: 10M one-byte inputs once
/// took 1.77 GB).
#[derive(Debug, Default)]
pub struct Inputs {
    bytes: Vec<u8>,
    ends: Vec<u64>,
}

impl Inputs {
    pub fn new(inputs: Vec<Vec<u8>>) -> Inputs {
        let mut bytes = Vec::with_capacity(inputs.iter().map(Vec::len).sum());
        let mut ends = Vec::with_capacity(inputs.len());
        for input in inputs {
            bytes.extend_from_slice(&input);
            ends.push(bytes.len() as u64);
        }
        Inputs { bytes, ends }
    }

    pub fn get(&self, index: usize) -> Option<&[u8]> {
        let end = *self.ends.get(index)? as usize;
        let start = match index {
            0 => 0,
            _ => self.ends[index - 1] as usize,
        };
        self.bytes.get(start..end)
    }

    pub fn len(&self) -> usize {
        self.ends.len()
    }

    pub fn is_empty(&self) -> bool {
        self.ends.is_empty()
    }

    /// As the wire and the journal carry them.
    pub fn to_vecs(&self) -> Vec<Vec<u8>> {
        (0..self.len())
            .filter_map(|i| self.get(i).map(<[u8]>::to_vec))
            .collect()
    }
}

impl Group {
    /// The input of the group's task `index`.
    pub fn input(&self, index: u32) -> Option<&[u8]> {
        self.inputs.get(index as usize)
    }
}

struct Task {
    group: GroupId,
    state: TaskState,
    /// Runs started.
    attempts: u32,
    /// The worker holding its resources (running, or canceled but not yet confirmed).
    worker: Option<WorkerId>,
    /// Boxed: a queued task pays 8 bytes for it, not the size of an outcome.
    outcome: Option<Box<Outcome>>,
}

struct Job {
    counts: JobCounts,
    /// (first task, count) per group, in task order.
    tasks: Vec<(TaskId, u64)>,
    /// Its results and inputs are gone; its skeleton stays until every older job is forgotten.
    forgotten: bool,
}

impl Job {
    fn done(&self) -> bool {
        self.counts.queued == 0 && self.counts.running == 0
    }

    fn task_ids(&self) -> impl Iterator<Item = TaskId> + '_ {
        self.tasks.iter().flat_map(|&(first, n)| first..first + n)
    }
}

/// A held job as the journal records it ([`Core::held_jobs`]).
#[derive(Clone, Debug, PartialEq)]
pub struct HeldJob {
    pub job: JobId,
    pub groups: Vec<NewGroup>,
    /// (task, final state, outcome, attempts) of its finished tasks.
    pub finals: Vec<(TaskId, TaskState, Outcome, u32)>,
    /// (task, attempts) of its unfinished tasks that were handed to a worker.
    pub started: Vec<(TaskId, u32)>,
    pub forgotten: bool,
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

/// Requirements shared by tasks: what a worker must have free to take one.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
struct Class {
    capabilities: Vec<(String, u64)>,
    environments: Vec<String>,
}

struct Worker {
    info: WorkerInfo,
    free_slots: u32,
    free: Vec<(String, u64)>,
    running: HashSet<TaskId>,
    /// Environments it matches (derived from `verdicts`, kept for fast matching).
    environments: HashSet<String>,
    verdicts: BTreeMap<String, EnvVerdict>,
    /// How it loaded each environment's condition component (reported, not used for matching).
    loads: BTreeMap<String, ComponentLoad>,
    last_seen: u64,
    /// Since when it has run nothing (`None` while busy).
    idle_since: Option<u64>,
    /// Being stopped by its manager: takes no new task.
    draining: bool,
}

impl Worker {
    /// Whether it evaluates `environment`: its own definition, or a run-time registration
    /// (sent to every worker). A name only other workers define is never evaluated here.
    fn evaluates(&self, environment: &str, known: &BTreeMap<String, EnvSource>) -> bool {
        self.info
            .local_environments
            .iter()
            .any(|e| e == environment)
            || known.get(environment) == Some(&EnvSource::Registered)
    }

    fn fits(&self, class: &Class) -> bool {
        !self.draining
            && self.free_slots > 0
            && class
                .capabilities
                .iter()
                .all(|(name, need)| *need == 0 || amount(&self.free, name) >= *need)
            && class
                .environments
                .iter()
                .all(|e| self.environments.contains(e))
    }

    fn take(&mut self, class: &Class) {
        self.free_slots -= 1;
        for (name, need) in &class.capabilities {
            if let Some((_, have)) = self.free.iter_mut().find(|(n, _)| n == name) {
                *have -= need;
            }
        }
    }

    fn give_back(&mut self, class: &Class) {
        self.free_slots += 1;
        for (name, need) in &class.capabilities {
            if let Some((_, have)) = self.free.iter_mut().find(|(n, _)| n == name) {
                *have += need;
            }
        }
    }
}

/// Whether `worker` could ever run tasks of `class` (once its slots and amounts are free): it has
/// the capabilities, and every environment matches there, or its verdict is still pending.
fn could_ever_run(worker: &Worker, class: &Class, known: &BTreeMap<String, EnvSource>) -> bool {
    class
        .capabilities
        .iter()
        .all(|(name, need)| amount(&worker.info.capabilities, name) >= *need)
        && class
            .environments
            .iter()
            .all(|env| match worker.verdicts.get(env) {
                Some(verdict) => *verdict == EnvVerdict::Match && known.contains_key(env),
                None => worker.evaluates(env, known),
            })
}

/// What the journal records as the outcome of a task whose job was forgotten.
fn forgotten_outcome() -> Outcome {
    Outcome::Error {
        message: "forgotten".into(),
    }
}

fn amount(list: &[(String, u64)], name: &str) -> u64 {
    list.iter().find(|(n, _)| n == name).map_or(0, |(_, v)| *v)
}

/// The scaling view of a live worker.
#[derive(Clone, Debug)]
pub struct WorkerView {
    pub id: WorkerId,
    pub name: String,
    pub manager: Option<String>,
    pub slots: u32,
    pub busy: u32,
    pub idle_ms: u64,
    pub draining: bool,
    pub verdicts: Vec<(String, EnvVerdict)>,
}

#[derive(Default)]
pub struct Core {
    config: CoreConfig,
    /// Ids are dense and never reused; forgotten jobs' tasks are dropped from the front.
    tasks: Dense<Task>,
    groups: HashMap<GroupId, Arc<Group>>,
    next_group: GroupId,
    jobs: Dense<Job>,
    /// Jobs whose last task finished since the last tick (for `forget_after_ms`).
    done: Vec<JobId>,
    /// (when it was seen done, job), oldest first: forgotten after `forget_after_ms`.
    retention: VecDeque<(u64, JobId)>,
    /// Classes with queued tasks nothing can run, and since when (`fail_unschedulable`).
    unschedulable_since: HashMap<usize, u64>,
    classes: Vec<Class>,
    /// Queued tasks per class (index as `classes`), so `demand` is O(classes).
    queued_by_class: Vec<u64>,
    /// (Reverse priority, class) -> FIFO of queued tasks. May hold canceled tasks, skipped lazily.
    queues: BTreeMap<(std::cmp::Reverse<i32>, usize), VecDeque<TaskId>>,
    /// Queued tasks that may not run before a time (`fence_ms`): by that time, oldest first.
    /// Claimed or canceled ones are skipped lazily when they are released.
    fenced: BTreeMap<u64, Vec<TaskId>>,
    workers: BTreeMap<WorkerId, Worker>,
    /// Known wasm task components, with how many held groups use each: a component no held
    /// group uses any more is forgotten too (`Action::Dropped`).
    components: HashMap<ComponentHash, usize>,
    /// Known environment names: registered at run time, or evaluated by some worker on its own.
    environments: BTreeMap<String, EnvSource>,
    counts: JobCounts,
    next_worker: WorkerId,
    actions: Vec<Action>,
    /// Tasks forgotten since the journal was last compacted ([`Core::compacted`]).
    forgotten_since_compaction: u64,
}

impl Core {
    pub fn new(config: CoreConfig) -> Core {
        Core {
            config,
            ..Core::default()
        }
    }

    pub fn take_actions(&mut self) -> Vec<Action> {
        std::mem::take(&mut self.actions)
    }

    /// A wasm task component is known (the shell keeps its bytes).
    pub fn add_component(&mut self, hash: ComponentHash) {
        self.components.entry(hash).or_insert(0);
    }

    pub fn group(&self, id: GroupId) -> Option<&Arc<Group>> {
        self.groups.get(&id)
    }

    /// The group and index of a task.
    pub fn task_group(&self, task: TaskId) -> Option<(&Arc<Group>, u32)> {
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

    /// Accept a job: all its groups or none. Returns (job, first task id, task count).
    pub fn submit(&mut self, groups: Vec<NewGroup>) -> Result<(JobId, TaskId, u64), SubmitError> {
        self.add_job(groups, true)
    }

    /// Replaying the journal: a job accepted before, taken as it was even when an environment or
    /// component it names is gone now (it waits, and `explain` says why), so ids stay the same.
    pub fn restore(&mut self, groups: Vec<NewGroup>) -> Result<(JobId, TaskId, u64), SubmitError> {
        self.add_job(groups, false)
    }

    /// Replaying a compacted journal: the first job and task ids it holds (every lower id was
    /// forgotten). Only before anything else was restored.
    pub fn start_ids_at(&mut self, first_job: JobId, first_task: TaskId) -> bool {
        self.jobs.is_empty()
            && self.tasks.is_empty()
            && self.jobs.start_at(first_job)
            && self.tasks.start_at(first_task)
    }

    /// The first job and task ids held (see [`Core::start_ids_at`]).
    pub fn first_ids(&self) -> (JobId, TaskId) {
        (self.jobs.first_id(), self.tasks.first_id())
    }

    /// Every held job as the journal would record it, oldest first: for rewriting the journal
    /// without what was forgotten. A forgotten job keeps its place (its ids) with no inputs or
    /// outcomes.
    pub fn held_jobs(&self) -> Vec<HeldJob> {
        let mut held = Vec::with_capacity(self.jobs.len());
        for (id, job) in self.jobs.iter() {
            let mut groups = Vec::new();
            let mut finals = Vec::new();
            let mut started = Vec::new();
            for &(first, n) in &job.tasks {
                let Some(group) = self
                    .tasks
                    .get(first)
                    .and_then(|t| self.groups.get(&t.group))
                else {
                    continue;
                };
                groups.push(NewGroup {
                    spec: group.spec.clone(),
                    count: u32::try_from(n).unwrap_or(u32::MAX),
                    inputs: if job.forgotten {
                        Vec::new()
                    } else {
                        group.inputs.to_vecs()
                    },
                });
                for task in first..first + n {
                    if let Some((state, outcome, attempts)) = self.final_record(task) {
                        finals.push((task, state, outcome, attempts));
                    } else if let Some(t) = self.task(task).filter(|t| t.attempts > 0) {
                        started.push((task, t.attempts));
                    }
                }
            }
            held.push(HeldJob {
                job: id,
                groups,
                finals,
                started,
                forgotten: job.forgotten,
            });
        }
        held
    }

    fn add_job(
        &mut self,
        groups: Vec<NewGroup>,
        check_references: bool,
    ) -> Result<(JobId, TaskId, u64), SubmitError> {
        let mut total = 0u64;
        for (index, group) in groups.iter().enumerate() {
            let n = if group.inputs.is_empty() {
                u64::from(group.count)
            } else {
                group.inputs.len() as u64
            };
            if !group.inputs.is_empty()
                && group.count != 0
                && group.count as usize != group.inputs.len()
            {
                return Err(SubmitError::CountMismatch {
                    group: index,
                    count: group.count,
                    inputs: group.inputs.len(),
                });
            }
            match &group.spec.kind {
                TaskKind::Command { argv, .. } if argv.is_empty() => {
                    return Err(SubmitError::EmptyArgv { group: index });
                }
                TaskKind::Wasm { component }
                    if check_references && !self.components.contains_key(component) =>
                {
                    return Err(SubmitError::UnknownComponent {
                        group: index,
                        hash: hex::encode(component),
                    });
                }
                _ => {}
            }
            if let Some(name) = group
                .spec
                .environments
                .iter()
                .find(|e| check_references && !self.environments.contains_key(*e))
            {
                return Err(SubmitError::UnknownEnvironment {
                    group: index,
                    name: name.clone(),
                });
            }
            total += n;
        }
        if total == 0 {
            return Err(SubmitError::Empty);
        }
        if total > MAX_TASKS_PER_SUBMIT {
            return Err(SubmitError::TooMany(total));
        }

        let job = self.jobs.next_id();
        let first_task = self.tasks.next_id();
        let mut ranges = Vec::new();
        for new in groups {
            let n = if new.inputs.is_empty() {
                u64::from(new.count)
            } else {
                new.inputs.len() as u64
            };
            if n == 0 {
                continue;
            }
            self.next_group += 1;
            let gid = self.next_group;
            let class = self.class_of(&new.spec);
            let first = self.tasks.next_id();
            let priority = std::cmp::Reverse(new.spec.priority);
            if let TaskKind::Wasm { component } = &new.spec.kind {
                *self.components.entry(*component).or_insert(0) += 1;
            }
            self.groups.insert(
                gid,
                Arc::new(Group {
                    id: gid,
                    job,
                    spec: new.spec,
                    inputs: Inputs::new(new.inputs),
                    first_task: first,
                    class,
                }),
            );
            self.queued_by_class[class] += n;
            let queue = self.queues.entry((priority, class)).or_default();
            for id in first..first + n {
                self.tasks.push(Task {
                    group: gid,
                    state: TaskState::Queued,
                    attempts: 0,
                    worker: None,
                    outcome: None,
                });
                queue.push_back(id);
            }
            ranges.push((first, n));
        }
        let counts = JobCounts {
            queued: total,
            ..JobCounts::default()
        };
        self.counts.queued += total;
        self.jobs.push(Job {
            counts,
            tasks: ranges,
            forgotten: false,
        });
        Ok((job, first_task, total))
    }

    fn class_of(&mut self, spec: &TaskSpec) -> usize {
        let mut capabilities: Vec<(String, u64)> = spec
            .capabilities
            .iter()
            .filter(|(_, n)| *n > 0)
            .cloned()
            .collect();
        capabilities.sort();
        let mut environments = spec.environments.clone();
        environments.sort();
        environments.dedup();
        let class = Class {
            capabilities,
            environments,
        };
        match self.classes.iter().position(|c| *c == class) {
            Some(index) => index,
            None => {
                self.classes.push(class);
                self.queued_by_class.push(0);
                self.classes.len() - 1
            }
        }
    }

    /// A worker registered. It may claim tasks it runs from before (it reconnected, or this
    /// scheduler restarted): each claimed task that is waiting (queued or fenced) is adopted —
    /// running there, its slot and amounts taken, no new attempt counted. A live worker of the
    /// same name that holds claimed tasks is an earlier connection of the same worker: it is
    /// replaced, its claimed tasks move over and the rest are requeued. Returns the new id and the claimed tasks the worker
    /// must stop (finished, canceled, or running elsewhere by now).
    pub fn worker_joined(&mut self, now: u64, info: WorkerInfo) -> (WorkerId, Vec<TaskId>) {
        let earlier: Vec<WorkerId> = self
            .workers
            .iter()
            .filter(|(_, w)| w.info.name == info.name && w.info.manager == info.manager)
            .filter(|(_, w)| info.running.iter().any(|t| w.running.contains(t)))
            .map(|(id, _)| *id)
            .collect();
        for old in earlier {
            // Only runs still wanted move over (a canceled one is stopped on the worker).
            let claimed: Vec<TaskId> = self.workers[&old]
                .running
                .iter()
                .filter(|t| info.running.contains(t))
                .filter(|t| {
                    self.task(**t)
                        .is_some_and(|t| t.state == TaskState::Running)
                })
                .copied()
                .collect();
            // Claimed ones are requeued unfenced here and adopted below at once.
            for task in &claimed {
                if let Some(w) = self.workers.get_mut(&old) {
                    w.running.remove(task);
                }
                let class = self.task(*task).map(|t| self.groups[&t.group].class);
                if let (Some(class), Some(w)) = (class, self.workers.get_mut(&old)) {
                    let class = self.classes[class].clone();
                    w.give_back(&class);
                }
                if let Some(t) = self.task_mut(*task) {
                    t.worker = None;
                }
                self.set_state(*task, TaskState::Queued);
            }
            self.worker_lost(now, old, "replaced by its own reconnection", Loss::Exited);
            self.actions.push(Action::Disconnect {
                worker: old,
                reason: "replaced by its own reconnection".into(),
            });
        }
        self.next_worker += 1;
        let id = self.next_worker;
        for name in &info.local_environments {
            self.environments
                .entry(name.clone())
                .or_insert(EnvSource::Worker);
        }
        let claims = info.running.clone();
        let worker = Worker {
            free_slots: info.slots,
            free: info.capabilities.clone(),
            info,
            running: HashSet::new(),
            environments: HashSet::new(),
            verdicts: BTreeMap::new(),
            loads: BTreeMap::new(),
            last_seen: now,
            idle_since: Some(now),
            draining: false,
        };
        self.workers.insert(id, worker);
        let mut refused = Vec::new();
        for task in claims {
            let Some(class) = self
                .task(task)
                .filter(|t| t.state == TaskState::Queued)
                .map(|t| self.classes[self.groups[&t.group].class].clone())
            else {
                refused.push(task);
                continue;
            };
            // Room for what it claims (its slots and amounts ran it; a claim beyond them is not
            // believed). Environments are not asked: its verdicts come after registering.
            let room = self.workers.get(&id).is_some_and(|w| {
                w.free_slots > 0
                    && class
                        .capabilities
                        .iter()
                        .all(|(name, need)| amount(&w.free, name) >= *need)
            });
            if !room {
                refused.push(task);
                continue;
            }
            // Out of where it waits, now: a stale entry would queue it twice should it come back.
            self.unqueue(task);
            self.set_state(task, TaskState::Running);
            if let Some(t) = self.task_mut(task) {
                t.worker = Some(id);
                t.attempts = t.attempts.max(1);
            }
            if let Some(w) = self.workers.get_mut(&id) {
                w.take(&class);
                w.running.insert(task);
                w.idle_since = None;
            }
        }
        (id, refused)
    }

    /// Names a worker manager declared (its `--env-plugin` conditions): known from now on, so
    /// tasks may ask for them before any of its workers has reported.
    pub fn declare_environments<'a>(&mut self, names: impl IntoIterator<Item = &'a str>) {
        for name in names {
            if !self.environments.contains_key(name) {
                self.environments
                    .insert(name.to_string(), EnvSource::Manager);
            }
        }
    }

    /// The environment names registered at run time (every worker evaluates them).
    pub fn registered_environments(&self) -> std::collections::BTreeSet<String> {
        self.environments
            .iter()
            .filter(|(_, source)| **source == EnvSource::Registered)
            .map(|(name, _)| name.clone())
            .collect()
    }

    /// A run-time environment was registered or replaced: every worker's verdict on it is
    /// pending until it reports again, except on workers with their own definition of the name
    /// (theirs wins there, so their verdict stands).
    pub fn register_environment(&mut self, name: &str) {
        self.environments
            .insert(name.to_string(), EnvSource::Registered);
        for worker in self.workers.values_mut() {
            if worker.info.local_environments.iter().any(|e| e == name) {
                continue;
            }
            worker.verdicts.remove(name);
            worker.loads.remove(name);
            worker.environments.remove(name);
        }
    }

    /// Forget a run-time environment. Tasks that need it stay queued (and `explain` says why).
    /// Workers that define the name themselves keep it (and their verdicts on it).
    pub fn remove_environment(&mut self, name: &str) -> bool {
        if self.environments.get(name) != Some(&EnvSource::Registered) {
            return false;
        }
        self.environments.remove(name);
        for worker in self.workers.values_mut() {
            if worker.info.local_environments.iter().any(|e| e == name) {
                self.environments
                    .insert(name.to_string(), EnvSource::Worker);
                continue;
            }
            worker.verdicts.remove(name);
            worker.loads.remove(name);
            worker.environments.remove(name);
        }
        true
    }

    pub fn environment_source(&self, name: &str) -> Option<EnvSource> {
        self.environments.get(name).copied()
    }

    /// A worker's verdicts changed.
    pub fn set_verdicts(
        &mut self,
        now: u64,
        worker: WorkerId,
        verdicts: Vec<(String, EnvVerdict)>,
    ) {
        let Some(w) = self.workers.get_mut(&worker) else {
            return;
        };
        w.last_seen = now;
        for (name, verdict) in verdicts {
            if !self.environments.contains_key(&name) {
                if !w.info.local_environments.contains(&name) {
                    continue; // removed meanwhile
                }
                self.environments.insert(name.clone(), EnvSource::Worker);
            }
            if verdict == EnvVerdict::Match {
                w.environments.insert(name.clone());
            } else {
                w.environments.remove(&name);
            }
            w.verdicts.insert(name, verdict);
        }
    }

    /// How a worker loaded the condition components of some environments.
    pub fn set_loads(&mut self, worker: WorkerId, loads: Vec<(String, ComponentLoad)>) {
        let Some(w) = self.workers.get_mut(&worker) else {
            return;
        };
        for (name, load) in loads {
            if self.environments.contains_key(&name) || w.info.local_environments.contains(&name) {
                w.loads.insert(name, load);
            }
        }
    }

    /// Whether `worker` has answered about `name`.
    pub fn has_verdict(&self, worker: WorkerId, name: &str) -> bool {
        self.workers
            .get(&worker)
            .is_some_and(|w| w.verdicts.contains_key(name))
    }

    /// Live workers that take tasks (not being stopped), and of those, how many match
    /// `environment` when one is given (for `weir workers wait`).
    pub fn ready_workers(&self, environment: Option<&str>) -> u32 {
        self.workers
            .values()
            .filter(|w| !w.draining)
            .filter(|w| environment.is_none_or(|e| w.environments.contains(e)))
            .count() as u32
    }

    pub fn has_worker(&self, worker: WorkerId) -> bool {
        self.workers.contains_key(&worker)
    }

    pub fn worker_ids(&self) -> Vec<WorkerId> {
        self.workers.keys().copied().collect()
    }

    /// Per environment: which live workers match, do not, fail, or have not answered.
    pub fn environment_report(&self, only: Option<&str>) -> Vec<EnvironmentStatus> {
        self.environments
            .iter()
            .filter(|(name, _)| only.is_none_or(|o| o == name.as_str()))
            .map(|(name, source)| {
                let mut status = EnvironmentStatus {
                    name: name.clone(),
                    source: source.label().into(),
                    ..EnvironmentStatus::default()
                };
                for worker in self.workers.values() {
                    let who = worker.info.name.clone();
                    if *source == EnvSource::Registered
                        && worker.info.local_environments.contains(name)
                    {
                        status.own_definition.push(who.clone());
                    }
                    if let Some(load) = worker.loads.get(name) {
                        status.loads.push((who.clone(), *load));
                    }
                    match worker.verdicts.get(name) {
                        Some(EnvVerdict::Match) => status.matching.push(who),
                        Some(EnvVerdict::NoMatch) => status.not_matching.push(who),
                        Some(EnvVerdict::Error(reason)) => {
                            status.erroring.push((who, reason.clone()))
                        }
                        None if worker.evaluates(name, &self.environments) => {
                            status.pending.push(who)
                        }
                        None => {}
                    }
                }
                status
            })
            .collect()
    }

    /// Why a task is in its state: for a queued task, what each live worker lacks.
    pub fn explain(&self, id: TaskId) -> Option<Vec<String>> {
        let task = self.task(id)?;
        let group = &self.groups[&task.group];
        let class = &self.classes[group.class];
        let mut lines = vec![format!(
            "task {id} (job {}) is {:?}, {} attempt(s)",
            group.job, task.state, task.attempts
        )];
        let needs: Vec<String> = class
            .capabilities
            .iter()
            .map(|(n, v)| format!("{n}={v}"))
            .collect();
        lines.push(format!(
            "needs: {} slot, capabilities [{}], environments [{}]",
            1,
            needs.join(", "),
            class.environments.join(", ")
        ));
        match task.state {
            TaskState::Running => {
                let worker = task
                    .worker
                    .and_then(|w| self.workers.get(&w).map(|x| (w, x.info.name.clone())));
                if let Some((w, name)) = worker {
                    lines.push(format!("running on worker {w} ({name})"));
                }
            }
            TaskState::Queued => {
                for name in &class.environments {
                    if !self.environments.contains_key(name) {
                        lines.push(format!("environment `{name}` is not registered (it was removed): no worker can qualify"));
                    }
                }
                if self.workers.is_empty() {
                    lines.push("no live worker: it runs when one that qualifies joins".into());
                }
                let mut could_run = false;
                for (wid, worker) in &self.workers {
                    let mut missing = Vec::new();
                    for (name, need) in &class.capabilities {
                        let total = amount(&worker.info.capabilities, name);
                        if total < *need {
                            missing.push(format!("has {name}={total}, needs {need}"));
                        } else if amount(&worker.free, name) < *need {
                            missing.push(format!(
                                "{name} in use ({} of {total} free, needs {need})",
                                amount(&worker.free, name)
                            ));
                        }
                    }
                    for name in &class.environments {
                        match worker.verdicts.get(name) {
                            Some(EnvVerdict::Match) => {}
                            Some(EnvVerdict::NoMatch) => {
                                missing.push(format!("environment `{name}`: no-match"))
                            }
                            Some(EnvVerdict::Error(reason)) => {
                                missing.push(format!("environment `{name}`: error({reason})"))
                            }
                            None if worker.evaluates(name, &self.environments) => {
                                missing.push(format!("environment `{name}`: not evaluated yet"))
                            }
                            None => missing.push(format!(
                                "environment `{name}`: not evaluated here (other workers' own condition)"
                            )),
                        }
                    }
                    if worker.free_slots == 0 {
                        missing.push(format!("all {} slots busy", worker.info.slots));
                    }
                    if missing.is_empty() {
                        could_run = true;
                        lines.push(format!("worker {wid} ({}): qualifies; it is placed at the next scheduling round", worker.info.name));
                    } else {
                        lines.push(format!(
                            "worker {wid} ({}): {}",
                            worker.info.name,
                            missing.join("; ")
                        ));
                    }
                }
                if !could_run && !self.workers.is_empty() {
                    let ever: Vec<&Worker> = self
                        .workers
                        .values()
                        .filter(|w| could_ever_run(w, class, &self.environments))
                        .collect();
                    let decided = ever.iter().any(|w| {
                        class
                            .environments
                            .iter()
                            .all(|e| w.verdicts.contains_key(e))
                    });
                    lines.push(if decided {
                        "waiting for a qualifying worker to free a slot".into()
                    } else if !ever.is_empty() {
                        "waiting for workers to evaluate its environments".into()
                    } else {
                        "no live worker can ever run it: it waits for one that qualifies to join"
                            .into()
                    });
                }
            }
            _ => {}
        }
        Some(lines)
    }

    pub fn heartbeat(&mut self, now: u64, worker: WorkerId) {
        if let Some(w) = self.workers.get_mut(&worker) {
            w.last_seen = now;
        }
    }

    /// The worker is gone: requeue or fail its running tasks, when they may run again as
    /// `loss` says.
    pub fn worker_lost(&mut self, now: u64, worker: WorkerId, reason: &str, loss: Loss) {
        let Some(w) = self.workers.remove(&worker) else {
            return;
        };
        let fence = (loss == Loss::Silent && self.config.fence_ms > 0)
            .then(|| now.saturating_add(self.config.fence_ms));
        let mut running: Vec<TaskId> = w.running.into_iter().collect();
        running.sort_unstable();
        // Requeue in reverse so the front of the queue keeps the original order.
        for &id in running.iter().rev() {
            let Some(task) = self.task_mut(id) else {
                continue;
            };
            task.worker = None;
            if task.state != TaskState::Running {
                continue; // canceled while running: already final
            }
            if loss == Loss::Stopped {
                task.attempts = task.attempts.saturating_sub(1);
            }
            let (gid, attempts) = (task.group, task.attempts);
            let group = self.groups[&gid].clone();
            if attempts > group.spec.retries {
                let message =
                    format!("worker {worker} lost ({reason}); gave up after {attempts} attempts");
                self.finish(id, TaskState::Failed, Outcome::Error { message });
            } else {
                self.set_state(id, TaskState::Queued);
                match fence {
                    Some(until) => self.fenced.entry(until).or_default().push(id),
                    None => {
                        let key = (std::cmp::Reverse(group.spec.priority), group.class);
                        self.queues.entry(key).or_default().push_front(id);
                    }
                }
            }
        }
        self.drop_forgotten();
    }

    /// Take a waiting task out of its queue or fence (rare: a claimed task).
    fn unqueue(&mut self, id: TaskId) {
        let Some(group) = self.task(id).and_then(|t| self.groups.get(&t.group)) else {
            return;
        };
        let key = (std::cmp::Reverse(group.spec.priority), group.class);
        if let Some(queue) = self.queues.get_mut(&key) {
            queue.retain(|t| *t != id);
        }
        self.fenced.retain(|_, tasks| {
            tasks.retain(|t| *t != id);
            !tasks.is_empty()
        });
    }

    /// Fenced tasks whose time has come go back to the front of their queues.
    fn release_fenced(&mut self, now: u64) {
        while let Some(entry) = self.fenced.first_entry() {
            if *entry.key() > now {
                break;
            }
            let tasks = entry.remove();
            for id in tasks.into_iter().rev() {
                let Some(task) = self.task(id) else { continue };
                if task.state != TaskState::Queued {
                    continue; // claimed by its worker, or canceled, meanwhile
                }
                let group = &self.groups[&task.group];
                let key = (std::cmp::Reverse(group.spec.priority), group.class);
                self.queues.entry(key).or_default().push_front(id);
            }
        }
    }

    /// A worker reports a finished run. Returns false (and changes nothing) when the task is not
    /// running on that worker: a duplicate or late report.
    pub fn finished(&mut self, now: u64, worker: WorkerId, task: TaskId, outcome: Outcome) -> bool {
        let Some(t) = self.task(task) else {
            return false;
        };
        if t.worker != Some(worker) || !self.workers.contains_key(&worker) {
            return false;
        }
        let (state, class) = (t.state, self.groups[&t.group].class);
        let class = self.classes[class].clone();
        if let Some(w) = self.workers.get_mut(&worker) {
            w.running.remove(&task);
            w.give_back(&class);
            w.last_seen = now;
            if w.running.is_empty() {
                w.idle_since = Some(now);
            }
        }
        if let Some(t) = self.task_mut(task) {
            t.worker = None;
        }
        if state == TaskState::Running {
            let final_state = if outcome.succeeded() {
                TaskState::Succeeded
            } else {
                TaskState::Failed
            };
            self.finish(task, final_state, outcome);
        } else {
            // A canceled task confirmed: its job may have been waiting for it to be dropped.
            self.drop_forgotten();
        }
        true
    }

    /// A task's final state, outcome and attempts (for the journal). A forgotten task's outcome
    /// is gone; it is recorded as final all the same (with a placeholder), so a replay never
    /// runs it again.
    pub fn final_record(&self, id: TaskId) -> Option<(TaskState, Outcome, u32)> {
        let task = self.task(id)?;
        if !task.state.is_final() {
            return None;
        }
        let outcome = task
            .outcome
            .as_deref()
            .cloned()
            .unwrap_or_else(forgotten_outcome);
        Some((task.state, outcome, task.attempts))
    }

    /// Replaying the journal: a queued task had already finished before the restart.
    pub fn restore_final(&mut self, id: TaskId, state: TaskState, outcome: Outcome, attempts: u32) {
        let Some(task) = self.task(id) else { return };
        if task.state != TaskState::Queued || !state.is_final() {
            return;
        }
        self.set_state(id, state);
        if let Some(task) = self.task_mut(id) {
            task.outcome = Some(Box::new(outcome));
            task.attempts = attempts;
        }
    }

    /// Cancel every unfinished task of a job. Returns how many were canceled.
    pub fn cancel_job(&mut self, job: JobId) -> u64 {
        let Some(j) = self.jobs.get(job) else {
            return 0;
        };
        let ids: Vec<TaskId> = j.task_ids().collect();
        let mut canceled = 0;
        let mut per_worker: BTreeMap<WorkerId, Vec<TaskId>> = BTreeMap::new();
        for id in ids {
            let Some(task) = self.task(id) else { continue };
            if task.state.is_final() {
                continue;
            }
            if let (TaskState::Running, Some(w)) = (task.state, task.worker) {
                per_worker.entry(w).or_default().push(id);
            }
            self.finish(
                id,
                TaskState::Canceled,
                Outcome::Error {
                    message: "canceled".into(),
                },
            );
            canceled += 1;
        }
        for (worker, tasks) in per_worker {
            self.actions.push(Action::Cancel { worker, tasks });
        }
        canceled
    }

    /// Every live worker as the scaling loop sees it.
    pub fn worker_views(&self, now: u64) -> Vec<WorkerView> {
        self.workers
            .iter()
            .map(|(id, w)| WorkerView {
                id: *id,
                name: w.info.name.clone(),
                manager: w.info.manager.clone(),
                slots: w.info.slots,
                busy: w.running.len() as u32,
                idle_ms: w.idle_since.map_or(0, |since| now.saturating_sub(since)),
                draining: w.draining,
                verdicts: w
                    .verdicts
                    .iter()
                    .map(|(n, v)| (n.clone(), v.clone()))
                    .collect(),
            })
            .collect()
    }

    /// Queued and running tasks grouped by what they need, for the scaling policy.
    pub fn demand(&self) -> Vec<crate::core::scaling::Demand> {
        let queued: BTreeMap<usize, u64> = self
            .queued_by_class
            .iter()
            .enumerate()
            .filter(|(_, n)| **n > 0)
            .map(|(class, n)| (class, *n))
            .collect();
        let mut running: BTreeMap<usize, u64> = BTreeMap::new();
        for worker in self.workers.values() {
            for task in &worker.running {
                let class = self.groups[&self.tasks[*task].group].class;
                *running.entry(class).or_default() += 1;
            }
        }
        let classes: HashSet<usize> = queued.keys().chain(running.keys()).copied().collect();
        let mut classes: Vec<usize> = classes.into_iter().collect();
        classes.sort_unstable();
        classes
            .into_iter()
            .map(|c| crate::core::scaling::Demand {
                capabilities: self.classes[c].capabilities.clone(),
                environments: self.classes[c].environments.clone(),
                queued: u32::try_from(queued.get(&c).copied().unwrap_or(0)).unwrap_or(u32::MAX),
                running: u32::try_from(running.get(&c).copied().unwrap_or(0)).unwrap_or(u32::MAX),
            })
            .collect()
    }

    /// Stop giving these workers tasks (their manager is about to stop them). Only idle
    /// workers are drained; returns the names of those that were.
    pub fn drain(&mut self, ids: &[WorkerId]) -> Vec<String> {
        let mut drained = Vec::new();
        for id in ids {
            if let Some(worker) = self.workers.get_mut(id)
                && worker.running.is_empty()
            {
                worker.draining = true;
                drained.push(worker.info.name.clone());
            }
        }
        drained
    }

    /// Forget jobs whose `forget_after_ms` ran out, then declare silent workers lost. (In that
    /// order: a job that finishes in this tick is forgotten in a later one, after the shell has
    /// journaled its tasks' final records.)
    pub fn tick(&mut self, now: u64) {
        if let Some(after) = self.config.forget_after_ms {
            for job in self.done.drain(..) {
                self.retention.push_back((now, job));
            }
            while let Some(&(since, job)) = self.retention.front() {
                if now.saturating_sub(since) < after {
                    break;
                }
                self.retention.pop_front();
                if let Ok(tasks) = self.forget(job)
                    && tasks > 0
                {
                    self.actions.push(Action::Forgot { job });
                }
            }
        }
        let timeout = self.config.heartbeat_timeout_ms;
        let silent: Vec<WorkerId> = self
            .workers
            .iter()
            .filter(|(_, w)| now.saturating_sub(w.last_seen) > timeout)
            .map(|(id, _)| *id)
            .collect();
        self.release_fenced(now);
        for worker in silent {
            let reason = format!("no heartbeat for {timeout} ms");
            self.worker_lost(now, worker, &reason, Loss::Silent);
            self.actions.push(Action::Disconnect { worker, reason });
        }
        // A forgotten job waits for confirmations of its canceled tasks before it is dropped.
        self.drop_forgotten();
    }

    /// `--unschedulable-timeout`: fail the queued tasks nothing can ever run. Queued tasks of a
    /// class are unschedulable while no live worker has the capabilities and a `match` (or a
    /// verdict still pending) on every environment they name, and `managers_could_serve` says
    /// no worker manager could start one either. Once that has held for `timeout_ms` they fail,
    /// saying why. Returns how many failed.
    pub fn fail_unschedulable(
        &mut self,
        now: u64,
        timeout_ms: u64,
        managers_could_serve: impl Fn(&[(String, u64)], &[String]) -> bool,
    ) -> u64 {
        let waiting: HashSet<usize> = self
            .queued_by_class
            .iter()
            .enumerate()
            .filter(|(_, queued)| **queued > 0)
            .map(|(class, _)| class)
            .collect();
        self.unschedulable_since
            .retain(|class, _| waiting.contains(class));
        let mut failed = 0;
        for class_id in waiting {
            let class = &self.classes[class_id];
            let workers_could = self
                .workers
                .values()
                .any(|w| could_ever_run(w, class, &self.environments));
            if workers_could || managers_could_serve(&class.capabilities, &class.environments) {
                self.unschedulable_since.remove(&class_id);
                continue;
            }
            let since = *self.unschedulable_since.entry(class_id).or_insert(now);
            if now.saturating_sub(since) < timeout_ms {
                continue;
            }
            let needs: Vec<String> = class
                .capabilities
                .iter()
                .map(|(n, v)| format!("{n}={v}"))
                .collect();
            let message = format!(
                "unschedulable: for {:.1} s no live worker or worker manager could run it \
                 (it needs capabilities [{}], environments [{}])",
                timeout_ms as f64 / 1000.0,
                needs.join(", "),
                class.environments.join(", ")
            );
            let ids: Vec<TaskId> = self
                .queues
                .iter()
                .filter(|((_, c), _)| *c == class_id)
                .flat_map(|(_, queue)| queue.iter().copied())
                .filter(|id| {
                    self.tasks
                        .get(*id)
                        .is_some_and(|t| t.state == TaskState::Queued)
                })
                .collect();
            for id in ids {
                let outcome = Outcome::Error {
                    message: message.clone(),
                };
                self.finish(id, TaskState::Failed, outcome);
                failed += 1;
            }
            self.queues.retain(|(_, c), _| *c != class_id);
            self.unschedulable_since.remove(&class_id);
        }
        failed
    }

    /// Place queued tasks on workers with room.
    pub fn schedule(&mut self) {
        if !self.workers.values().any(|w| w.free_slots > 0) {
            return;
        }
        let mut dispatch: BTreeMap<WorkerId, Vec<TaskId>> = BTreeMap::new();
        let mut emptied = Vec::new();
        for (key, queue) in self.queues.iter_mut() {
            let class = &self.classes[key.1];
            for (worker_id, worker) in self.workers.iter_mut() {
                while worker.fits(class) {
                    let Some(id) = queue.pop_front() else { break };
                    let Some(task) = self.tasks.get_mut(id) else {
                        continue; // canceled while queued, and its job forgotten since
                    };
                    if task.state != TaskState::Queued {
                        continue; // canceled while queued
                    }
                    task.state = TaskState::Running;
                    task.attempts += 1;
                    task.worker = Some(*worker_id);
                    worker.take(class);
                    worker.running.insert(id);
                    worker.idle_since = None;
                    self.queued_by_class[key.1] -= 1;
                    let job = &mut self.jobs[self.groups[&task.group].job].counts;
                    job.queued -= 1;
                    job.running += 1;
                    self.counts.queued -= 1;
                    self.counts.running += 1;
                    dispatch.entry(*worker_id).or_default().push(id);
                }
                if queue.is_empty() {
                    break;
                }
            }
            // Drop canceled tasks at the front so an all-canceled queue goes away.
            while queue.front().is_some_and(|&id| {
                self.tasks
                    .get(id)
                    .is_none_or(|t| t.state != TaskState::Queued)
            }) {
                queue.pop_front();
            }
            if queue.is_empty() {
                emptied.push(*key);
            }
        }
        for key in emptied {
            self.queues.remove(&key);
        }
        for (worker, tasks) in dispatch {
            self.actions.push(Action::Dispatch { worker, tasks });
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

    fn finish(&mut self, id: TaskId, state: TaskState, outcome: Outcome) {
        self.set_state(id, state);
        let Some(task) = self.tasks.get_mut(id) else {
            return;
        };
        task.outcome = Some(Box::new(outcome));
        let job = self.groups[&task.group].job;
        self.actions.push(Action::Finished { job, task: id });
        if self.config.forget_after_ms.is_some() && self.jobs[job].done() {
            self.done.push(job);
        }
    }

    /// A job's counts (a forgotten job's too, until it is dropped).
    pub fn job_counts(&self, job: JobId) -> Result<&JobCounts, JobError> {
        self.job(job).map(|j| &j.counts)
    }

    /// Results of a job's final tasks, in task order.
    pub fn results(&self, job: JobId) -> Result<Vec<TaskResult>, JobError> {
        let j = self.job(job)?;
        if j.forgotten {
            return Err(JobError::Forgotten(job));
        }
        let mut results = Vec::new();
        for id in j.task_ids() {
            let Some(task) = self.task(id) else { continue };
            if let (true, Some(outcome)) = (task.state.is_final(), &task.outcome) {
                results.push(TaskResult {
                    task: id,
                    state: task.state,
                    outcome: (**outcome).clone(),
                    attempts: task.attempts,
                    worker: None,
                });
            }
        }
        Ok(results)
    }

    /// Forget a finished job: its results and inputs are freed now, and it is dropped
    /// altogether (ids and all) once every older job is forgotten too. Returns its task count;
    /// forgetting a forgotten job does nothing.
    pub fn forget(&mut self, job: JobId) -> Result<u64, JobError> {
        let j = match self.job(job) {
            Ok(j) if !j.forgotten => j,
            Ok(_) | Err(JobError::Forgotten(_)) => return Ok(0),
            Err(error) => return Err(error),
        };
        if !j.done() {
            return Err(JobError::NotFinished {
                job,
                unfinished: j.counts.queued + j.counts.running,
            });
        }
        let ids: Vec<TaskId> = j.task_ids().collect();
        self.forgotten_since_compaction += ids.len() as u64;
        let mut groups = Vec::new();
        for &id in &ids {
            if let Some(task) = self.tasks.get_mut(id) {
                task.outcome = None;
                if groups.last() != Some(&task.group) {
                    groups.push(task.group);
                }
            }
        }
        // Keep what matching and the counts need (spec, class); drop the inputs.
        for gid in groups {
            if let Some(group) = self.groups.get_mut(&gid) {
                *group = Arc::new(Group {
                    id: group.id,
                    job: group.job,
                    spec: group.spec.clone(),
                    inputs: Inputs::default(),
                    first_task: group.first_task,
                    class: group.class,
                });
            }
        }
        self.jobs[job].forgotten = true;
        self.drop_forgotten();
        Ok(ids.len() as u64)
    }

    /// The newest `limit` held jobs, newest first.
    pub fn jobs(&self, limit: usize) -> Vec<JobSummary> {
        self.jobs
            .iter()
            .rev()
            .take(limit)
            .map(|(job, j)| JobSummary {
                job,
                counts: j.counts.clone(),
                forgotten: j.forgotten,
            })
            .collect()
    }

    /// Forget every finished job not forgotten yet. Returns them and their task count.
    pub fn forget_finished(&mut self) -> (Vec<JobId>, u64) {
        let finished: Vec<JobId> = self
            .jobs
            .iter()
            .filter(|(_, j)| j.done() && !j.forgotten)
            .map(|(id, _)| id)
            .collect();
        let mut tasks = 0;
        for &job in &finished {
            tasks += self.forget(job).unwrap_or(0);
        }
        (finished, tasks)
    }

    /// After replaying a journal: jobs that finished before the restart start their
    /// `forget_after_ms` now (finish times are not journaled).
    /// The attempts a task has had so far (for the journal's `Started` records).
    pub fn attempts(&self, id: TaskId) -> u32 {
        self.task(id).map_or(0, |t| t.attempts)
    }

    /// Replaying the journal: a task was handed to a worker with `attempts` runs so far.
    pub fn restore_started(&mut self, id: TaskId, attempts: u32) {
        if let Some(task) = self.task_mut(id)
            && task.state == TaskState::Queued
        {
            task.attempts = task.attempts.max(attempts);
        }
    }

    /// After the journal's replay: its unfinished tasks that were handed to a worker may still
    /// be running on one of the previous run, until its lease runs out; they wait `fence_ms`
    /// from `now` (a worker that reconnects meanwhile claims them). Tasks that never started
    /// run at once.
    pub fn fence_unfinished(&mut self, now: u64) {
        if self.config.fence_ms == 0 {
            return;
        }
        let mut fenced = Vec::new();
        for queue in self.queues.values_mut() {
            let mut waiting = VecDeque::with_capacity(queue.len());
            for id in queue.drain(..) {
                match self.tasks.get(id) {
                    Some(task) if task.state == TaskState::Queued && task.attempts > 0 => {
                        fenced.push(id)
                    }
                    _ => waiting.push_back(id),
                }
            }
            *queue = waiting;
        }
        self.queues.retain(|_, queue| !queue.is_empty());
        if !fenced.is_empty() {
            let until = now.saturating_add(self.config.fence_ms);
            self.fenced.entry(until).or_default().extend(fenced);
        }
    }

    /// Tasks forgotten since the journal was last compacted.
    pub fn forgotten_tasks_since_compaction(&self) -> u64 {
        self.forgotten_since_compaction
    }

    /// The journal was compacted: what was forgotten before is out of it.
    pub fn compacted(&mut self) {
        self.forgotten_since_compaction = 0;
    }

    /// Tasks of jobs not forgotten (what a compacted journal holds).
    pub fn held_tasks(&self) -> u64 {
        self.jobs
            .iter()
            .filter(|(_, job)| !job.forgotten)
            .map(|(_, job)| job.counts.total())
            .sum()
    }

    pub fn replayed(&mut self) {
        if self.config.forget_after_ms.is_some() {
            let done = self.jobs.iter().filter(|(_, j)| j.done() && !j.forgotten);
            self.done = done.map(|(id, _)| id).collect();
        }
    }

    /// Drop forgotten jobs from the front, with their tasks and groups, while none of their
    /// tasks is still held by a worker (canceled, not yet confirmed).
    fn drop_forgotten(&mut self) {
        while let Some(job) = self.jobs.front() {
            let held = job
                .task_ids()
                .any(|id| self.tasks.get(id).is_some_and(|t| t.worker.is_some()));
            if !job.forgotten || held {
                return;
            }
            let Some(job) = self.jobs.pop_front() else {
                return;
            };
            let end = job.tasks.last().map_or(0, |&(first, n)| first + n);
            let (mut groups, mut components) = (Vec::new(), Vec::new());
            while self.tasks.first_id() < end {
                let Some(task) = self.tasks.pop_front() else {
                    break;
                };
                *slot(&mut self.counts, task.state) -= 1;
                let Some(group) = self.groups.remove(&task.group) else {
                    continue;
                };
                groups.push(group.id);
                if let TaskKind::Wasm { component } = &group.spec.kind
                    && let Some(users) = self.components.get_mut(component)
                {
                    *users = users.saturating_sub(1);
                    if *users == 0 {
                        self.components.remove(component);
                        components.push(*component);
                    }
                }
            }
            self.actions.push(Action::Dropped { groups, components });
        }
    }

    pub fn status(&self) -> StatusReport {
        StatusReport {
            workers: self
                .workers
                .iter()
                .map(|(id, w)| WorkerStatus {
                    id: *id,
                    manager: w.info.manager.clone(),
                    name: w.info.name.clone(),
                    worker_type: w.info.worker_type.clone(),
                    slots: w.info.slots,
                    running: w.running.len() as u32,
                    capabilities: w.info.capabilities.clone(),
                })
                .collect(),
            tasks: self.counts.clone(),
            jobs: self.jobs.len() as u64,
            managers: Vec::new(),
            policy_error: None,
        }
    }

    /// Check every invariant; the tests call this after each step. Returns the first violation.
    pub fn sanity_check(&self) -> Result<(), String> {
        let mut counted = JobCounts::default();
        for (id, task) in self.tasks.iter() {
            *slot(&mut counted, task.state) += 1;
            match (task.state, task.worker) {
                (TaskState::Running, None) => {
                    return Err(format!("task {id} running on no worker"));
                }
                (TaskState::Queued | TaskState::Succeeded | TaskState::Failed, Some(w)) => {
                    return Err(format!(
                        "task {id} is {:?} but held by worker {w}",
                        task.state
                    ));
                }
                (_, Some(w)) => match self.workers.get(&w) {
                    Some(worker) if worker.running.contains(&id) => {}
                    _ => {
                        return Err(format!(
                            "task {id} held by worker {w}, which does not list it"
                        ));
                    }
                },
                _ => {}
            }
            let forgotten = self
                .groups
                .get(&task.group)
                .and_then(|g| self.jobs.get(g.job))
                .ok_or_else(|| format!("task {id}: its group or job is gone"))?
                .forgotten;
            if (task.state.is_final() && !forgotten) != task.outcome.is_some() {
                return Err(format!(
                    "task {id}: state {:?} but outcome {:?} (job forgotten: {forgotten})",
                    task.state, task.outcome
                ));
            }
        }
        for (id, worker) in &self.workers {
            for task in &worker.running {
                if self.task(*task).and_then(|t| t.worker) != Some(*id) {
                    return Err(format!(
                        "worker {id} lists task {task}, which it does not hold"
                    ));
                }
            }
        }
        // No task lost: every queued task waits in a queue or behind a fence.
        let waiting: HashSet<TaskId> = self
            .queues
            .values()
            .flatten()
            .chain(self.fenced.values().flatten())
            .copied()
            .collect();
        for (id, task) in self.tasks.iter() {
            if task.state == TaskState::Queued && !waiting.contains(&id) {
                return Err(format!("task {id} is queued but waits nowhere"));
            }
        }
        if counted != self.counts {
            return Err(format!(
                "counts {:?} but tasks say {counted:?}",
                self.counts
            ));
        }
        let mut by_class = vec![0u64; self.classes.len()];
        for (_, task) in self.tasks.iter() {
            if task.state == TaskState::Queued {
                by_class[self.groups[&task.group].class] += 1;
            }
        }
        if by_class != self.queued_by_class {
            return Err(format!(
                "queued per class {:?} but tasks say {by_class:?}",
                self.queued_by_class
            ));
        }
        for (id, worker) in &self.workers {
            if worker.free_slots as usize + worker.running.len() != worker.info.slots as usize {
                return Err(format!(
                    "worker {id}: {} free + {} running != {} slots",
                    worker.free_slots,
                    worker.running.len(),
                    worker.info.slots
                ));
            }
            for (name, total) in &worker.info.capabilities {
                let used: u64 = worker
                    .running
                    .iter()
                    .map(|t| {
                        amount(
                            &self.classes[self.groups[&self.tasks[*t].group].class].capabilities,
                            name,
                        )
                    })
                    .sum();
                if used + amount(&worker.free, name) != *total || used > *total {
                    return Err(format!(
                        "worker {id}: capability {name}: {used} used + {} free != {total}",
                        amount(&worker.free, name)
                    ));
                }
            }
            for task in &worker.running {
                if self.tasks[*task].worker != Some(*id) {
                    return Err(format!(
                        "worker {id} lists task {task}, which is not held by it"
                    ));
                }
            }
        }
        Ok(())
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
