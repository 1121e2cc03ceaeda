//! Jobs over their life: counts, results, listing, and forgetting them.

use super::*;

impl Tasks {
    /// A job's counts (a forgotten job's too, until it is dropped).
    pub(crate) fn job_counts(&self, job: JobId) -> Result<&JobCounts, JobError> {
        self.job(job).map(|j| &j.counts)
    }

    /// Results of a job's final tasks, in task order.
    pub fn results(&self, job: JobId) -> Result<Vec<TaskResult>, JobError> {
        let j = self.job(job)?;
        if j.forgotten {
            return Err(JobError::Forgotten(job));
        }
        Ok(j.task_ids().filter_map(|id| self.result(id)).collect())
    }

    /// The result of a final task (`None` while it is not final, or once it is forgotten).
    pub fn result(&self, id: TaskId) -> Option<TaskResult> {
        let task = self.task(id)?;
        let outcome = task.outcome.as_ref().filter(|_| task.state.is_final())?;
        Some(TaskResult {
            task: id,
            state: task.state,
            outcome: outcome.outcome.clone(),
            attempts: task.attempts,
            worker: None,
        })
    }

    /// One job for the dashboard's job page: its counts, its failed tasks with what went wrong
    /// and where (the first [`DETAIL_LIST`]), its retried tasks, and how many of its ended
    /// tasks ran on each worker.
    pub fn job_detail(&self, job: JobId) -> Result<JobDetail, JobError> {
        let j = self.job(job)?;
        let mut detail = JobDetail {
            job,
            counts: j.counts.clone(),
            forgotten: j.forgotten,
            ..JobDetail::default()
        };
        let mut places: BTreeMap<String, u64> = BTreeMap::new();
        for id in j.task_ids() {
            let Some(task) = self.task(id) else { continue };
            if task.attempts > 1 {
                detail.retried_total += 1;
                if detail.retried.len() < DETAIL_LIST {
                    detail.retried.push((id, task.attempts));
                }
            }
            let Some(ended) = task.outcome.as_ref() else {
                continue;
            };
            if let Some(place) = &ended.ran_on {
                *places.entry(place.clone()).or_default() += 1;
            }
            if task.state == TaskState::Failed && detail.failures.len() < DETAIL_LIST {
                detail.failures.push(Failure {
                    task: id,
                    attempts: task.attempts,
                    ran_on: ended.ran_on.clone(),
                    error: ended.outcome.failure_text(400),
                });
            }
        }
        detail.ran_on = places.into_iter().collect();
        Ok(detail)
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
                    submitted: group.submitted,
                });
            }
        }
        self.jobs[job].forgotten = true;
        self.drop_forgotten();
        Ok(ids.len() as u64)
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

    /// Drop forgotten jobs from the front, with their tasks and groups, while none of their
    /// tasks is still held by a worker (canceled, not yet confirmed).
    pub(super) fn drop_forgotten(&mut self) {
        while let Some(job) = self.jobs.front() {
            // Forgotten first: the scan of its tasks is for forgotten jobs only (it runs on
            // every tick and every report; the oldest job's 20,000 tasks were scanned each time).
            if !job.forgotten {
                return;
            }
            let held = job
                .task_ids()
                .any(|id| self.tasks.get(id).is_some_and(|t| t.worker.is_some()));
            if held {
                return;
            }
            let Some(job) = self.jobs.pop_front() else {
                return;
            };
            if let Some(request) = job.request {
                self.requests.remove(&request);
            }
            let end = job.tasks.last().map_or(0, |&(first, n)| first + n);
            let (mut groups, mut components) = (Vec::new(), Vec::new());
            while self.tasks.first_id() < end {
                let Some(task) = self.tasks.pop_front() else {
                    break;
                };
                *slot(&mut self.counts, task.state) -= 1;
                self.quick.remove(&task.group);
                let Some(group) = self.groups.remove(&task.group) else {
                    continue;
                };
                groups.push(group.id);
                if let TaskKind::Wasm { component } = &group.spec.kind
                    && self.release_component(component)
                {
                    components.push(*component);
                }
            }
            self.effects.push(Effect::Dropped { groups, components });
        }
    }
}

/// Most failed (and retried) tasks a [`JobDetail`] lists.
pub const DETAIL_LIST: usize = 100;

/// A job as the dashboard's job page shows it ([`Tasks::job_detail`]).
#[derive(Clone, Debug, Default, PartialEq, Eq, serde::Serialize)]
pub struct JobDetail {
    pub job: JobId,
    pub counts: JobCounts,
    pub forgotten: bool,
    /// Its failed tasks (the first [`DETAIL_LIST`]).
    pub failures: Vec<Failure>,
    /// (task, runs started) of tasks that ran more than once (the first [`DETAIL_LIST`]), and
    /// how many did in all.
    pub retried: Vec<(TaskId, u32)>,
    pub retried_total: u64,
    /// (where, how many of its ended tasks ran there last), by place.
    pub ran_on: Vec<(String, u64)>,
}

#[derive(Clone, Debug, PartialEq, Eq, serde::Serialize)]
pub struct Failure {
    pub task: TaskId,
    pub attempts: u32,
    pub ran_on: Option<String>,
    /// The exit code or error and the end of its stderr.
    pub error: String,
}
