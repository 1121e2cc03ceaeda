//! Accepting a job: checking a submission, its groups and their inputs, and queueing its tasks.

use super::*;

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

impl SubmitError {
    /// Every way a submission fails is the submission's own.
    pub fn code(&self) -> weir_proto::ErrorCode {
        weir_proto::ErrorCode::Invalid
    }
}

pub struct Group {
    pub id: GroupId,
    pub job: JobId,
    pub spec: TaskSpec,
    pub inputs: Inputs,
    pub(super) first_task: TaskId,
    pub(super) class: usize,
    /// When it was submitted (ms; 0 for a job replayed from the journal: the scheduler's
    /// start): the policy is told how long the oldest queued task of each kind has waited.
    pub(super) submitted: u64,
}

/// A group's per-task inputs in one buffer: a task's input costs its bytes and 8 more (its end
/// offset), not a vector of its own (24 bytes and an allocation each: 10M one-byte inputs once
/// took 1.77 GB).
#[derive(Debug, Default)]
pub struct Inputs {
    pub(super) bytes: Vec<u8>,
    pub(super) ends: Vec<u64>,
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
    pub(crate) fn to_vecs(&self) -> Vec<Vec<u8>> {
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

    /// The queue its tasks wait in: higher priority first, then by class.
    pub(super) fn queue(&self) -> QueueKey {
        (std::cmp::Reverse(self.spec.priority), self.class)
    }
}

impl Tasks {
    /// Accept a job: all its groups or none. Returns (job, first task id, task count).
    /// (At time 0: the tests' shortcut.)
    pub fn submit(&mut self, groups: Vec<NewGroup>) -> Result<(JobId, TaskId, u64), SubmitError> {
        self.add_job(0, groups, true, None)
    }

    /// [`Tasks::submit`] of a submission that carried the client's request id (kept with the
    /// job; the caller looks at [`Tasks::submitted`] first), at `now`.
    pub fn submit_as(
        &mut self,
        now: u64,
        groups: Vec<NewGroup>,
        request: Option<RequestId>,
    ) -> Result<(JobId, TaskId, u64), SubmitError> {
        self.add_job(now, groups, true, request)
    }

    /// The job a submission with this request id made, while it is held: (job, first task id,
    /// task count), as its submission was answered.
    pub fn submitted(&self, request: RequestId) -> Option<(JobId, TaskId, u64)> {
        let job = *self.requests.get(&request)?;
        let held = self.jobs.get(job)?;
        let first = held.tasks.first().map_or(0, |&(first, _)| first);
        Some((job, first, held.tasks.iter().map(|&(_, n)| n).sum()))
    }

    /// Replaying the journal: a job accepted before, taken as it was even when an environment or
    /// component it names is gone now (it waits, and `explain` says why), so ids stay the same.
    /// With the request id its submission carried (`None`: none did).
    pub fn restore(
        &mut self,
        groups: Vec<NewGroup>,
        request: Option<RequestId>,
    ) -> Result<(JobId, TaskId, u64), SubmitError> {
        self.add_job(0, groups, false, request)
    }

    pub(super) fn add_job(
        &mut self,
        now: u64,
        groups: Vec<NewGroup>,
        check_references: bool,
        request: Option<RequestId>,
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
                TaskKind::Command { argv, .. } | TaskKind::Function { runner: argv, .. }
                    if argv.is_empty() =>
                {
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
                .find(|e| check_references && !self.environments.contains_key(e))
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
            if let TaskKind::Wasm { component } = &new.spec.kind {
                self.components.use_one(component);
            }
            let group = Arc::new(Group {
                id: gid,
                job,
                spec: new.spec,
                inputs: Inputs::new(new.inputs),
                first_task: first,
                class,
                submitted: now,
            });
            let key = group.queue();
            self.groups.insert(gid, group);
            self.queued_by_class[class] += n;
            let queue = self.queues.entry(key).or_default();
            for id in first..first + n {
                self.tasks.push(Task {
                    group: gid,
                    state: TaskState::Queued,
                    attempts: 0,
                    cuts: 0,
                    worker: None,
                    holder: 0,
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
            request,
        });
        if let Some(request) = request {
            self.requests.insert(request, job);
        }
        Ok((job, first_task, total))
    }

    pub(super) fn class_of(&mut self, spec: &TaskSpec) -> usize {
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
            timeout_ms: spec.timeout_ms,
        };
        match self.classes.iter().position(|c| *c == class) {
            Some(index) => index,
            None => {
                self.classes.push(class);
                self.queued_by_class.push(0);
                self.runtimes.push(VecDeque::new());
                self.classes.len() - 1
            }
        }
    }

    /// Cancel every unfinished task of a job. Returns how many were canceled.
    pub(crate) fn cancel_job(&mut self, job: JobId) -> u64 {
        let Some(j) = self.jobs.get(job) else {
            return 0;
        };
        let ids: Vec<TaskId> = j.task_ids().collect();
        self.cancel_tasks(&ids)
    }

    /// Cancel these tasks (final or unknown ones are skipped); running ones are stopped on
    /// their workers. Returns how many were canceled.
    pub fn cancel_tasks(&mut self, ids: &[TaskId]) -> u64 {
        let mut canceled = 0;
        let mut per_worker: BTreeMap<WorkerId, Vec<TaskId>> = BTreeMap::new();
        let mut queues = std::collections::BTreeSet::new();
        for &id in ids {
            let Some(task) = self.task(id) else { continue };
            if task.state.is_final() {
                continue;
            }
            if task.state == TaskState::Queued
                && let Some(group) = self.groups.get(&task.group)
            {
                queues.insert(group.queue());
            }
            let mut place = None;
            // Held ahead and never reported started: not an attempt (as when its worker is lost).
            let mut unstarted = false;
            if let (TaskState::Running, Some(w)) = (task.state, task.worker) {
                per_worker.entry(w).or_default().push(id);
                if let Some(worker) = self.workers.get(&w) {
                    unstarted = worker.waiting.contains(&id);
                    place = (!unstarted).then(|| super::ran_on(&worker.info));
                }
            }
            if unstarted && let Some(task) = self.task_mut(id) {
                task.attempts = task.attempts.saturating_sub(1);
            }
            let canceled_outcome = Outcome::Error {
                message: "canceled".into(),
            };
            self.finish(id, TaskState::Canceled, canceled_outcome, place);
            canceled += 1;
        }
        for (worker, tasks) in per_worker {
            self.effects.push(Effect::Cancel { worker, tasks });
        }
        // Canceled tasks at the front of their queues go now, not when scheduling reaches
        // them (it may not, with no worker for them): the front is what the policy is told
        // has waited longest.
        for key in queues {
            if let Some(queue) = self.queues.get_mut(&key) {
                super::schedule::drop_unqueued_front(queue, &self.tasks);
                if queue.is_empty() {
                    self.queues.remove(&key);
                }
            }
        }
        canceled
    }
}
