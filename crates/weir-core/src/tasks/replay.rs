//! What the journal needs: held jobs as records, restoring them, and compaction counters.

use super::*;

impl Tasks {
    /// Replaying a compacted journal: the first job and task ids it holds (every lower id was
    /// forgotten). Only before anything else was restored.
    pub(crate) fn start_ids_at(&mut self, first_job: JobId, first_task: TaskId) -> bool {
        self.jobs.is_empty()
            && self.tasks.is_empty()
            && self.jobs.start_at(first_job)
            && self.tasks.start_at(first_task)
    }

    /// The first job and task ids held (see [`Tasks::start_ids_at`]).
    pub(crate) fn first_ids(&self) -> (JobId, TaskId) {
        (self.jobs.first_id(), self.tasks.first_id())
    }

    /// Every held job as the journal would record it, oldest first: for rewriting the journal
    /// without what was forgotten. A forgotten job keeps its place (its ids) with no inputs or
    /// outcomes.
    pub(crate) fn held_jobs(&self) -> Vec<HeldJob> {
        let mut held = Vec::with_capacity(self.jobs.len());
        for (id, job) in self.jobs.iter() {
            let mut groups = Vec::new();
            let mut finals = Vec::new();
            let mut started = Vec::new();
            let mut cuts = Vec::new();
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
                    if let Some(t) = self.task(task).filter(|t| t.cuts > 0) {
                        cuts.push((task, u32::from(t.cuts)));
                    }
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
                cuts,
                forgotten: job.forgotten,
                request: job.request,
            });
        }
        held
    }

    /// A task's final state, outcome and attempts (for the journal). A forgotten task's outcome
    /// is gone; it is recorded as final all the same (with a placeholder), so a replay never
    /// runs it again.
    pub(crate) fn final_record(&self, id: TaskId) -> Option<(TaskState, Outcome, u32)> {
        let task = self.task(id)?;
        if !task.state.is_final() {
            return None;
        }
        let outcome = task
            .outcome
            .as_ref()
            .map(|ended| ended.outcome.clone())
            .unwrap_or_else(forgotten_outcome);
        Some((task.state, outcome, task.attempts))
    }

    /// Replaying the journal: a queued task had already finished before the restart.
    pub(crate) fn restore_final(
        &mut self,
        id: TaskId,
        state: TaskState,
        outcome: Outcome,
        attempts: u32,
    ) {
        let Some(task) = self.task(id) else { return };
        if task.state != TaskState::Queued || !state.is_final() {
            return;
        }
        self.set_state(id, state);
        if let Some(task) = self.task_mut(id) {
            task.outcome = Some(Box::new(Ended {
                outcome,
                ran_on: None,
            }));
            task.attempts = attempts;
        }
    }

    /// After replaying a journal: jobs that finished before the restart start their
    /// `forget_after_ms` now (finish times are not journaled).
    /// The attempts a task has had so far (for the journal's `Started` records).
    pub fn attempts(&self, id: TaskId) -> u32 {
        self.task(id).map_or(0, |t| t.attempts)
    }

    /// Replaying the journal: a task was handed to a worker with `attempts` runs so far.
    pub(crate) fn restore_started(&mut self, id: TaskId, attempts: u32) {
        if let Some(task) = self.task_mut(id)
            && task.state == TaskState::Queued
        {
            task.attempts = task.attempts.max(attempts);
        }
    }

    /// Replaying the journal: a task's runs were cut short `cuts` times by allocation ends.
    pub(crate) fn restore_cuts(&mut self, id: TaskId, cuts: u32) {
        if let Some(task) = self.task_mut(id) {
            task.cuts = task.cuts.max(u16::try_from(cuts).unwrap_or(u16::MAX));
        }
    }

    /// How many runs of a task were cut short by the end of their worker's allocation.
    #[cfg(test)]
    pub(crate) fn cuts(&self, id: TaskId) -> u32 {
        self.task(id).map_or(0, |t| u32::from(t.cuts))
    }

    /// After the journal's replay: its unfinished tasks that were handed to a worker may still
    /// be running on one of the previous run, until its lease runs out; they wait `fence_ms`
    /// from `now` (a worker that reconnects meanwhile claims them). Tasks that never started
    /// run at once. Tasks that finished before the restart leave their queues now, as a cancel
    /// takes them out at once: a queue's front is a task that waits (what the policy is told
    /// has waited longest).
    pub(crate) fn fence_unfinished(&mut self, now: u64) {
        let fence = self.config.fence_ms > 0;
        let mut fenced = Vec::new();
        for queue in self.queues.values_mut() {
            queue.retain(|&id| match self.tasks.get(id) {
                Some(task) if task.state == TaskState::Queued => {
                    let started = fence && task.attempts > 0;
                    if started {
                        fenced.push(id);
                    }
                    !started
                }
                _ => false,
            });
        }
        self.queues.retain(|_, queue| !queue.is_empty());
        if !fenced.is_empty() {
            let until = now.saturating_add(self.config.fence_ms);
            self.fenced.entry(until).or_default().extend(fenced);
        }
    }

    pub fn replayed(&mut self) {
        if self.config.forget_after_ms.is_some() {
            let done = self.jobs.iter().filter(|(_, j)| j.done() && !j.forgotten);
            self.done = done.map(|(id, _)| id).collect();
        }
    }

    /// Tasks forgotten since the journal was last compacted.
    pub(crate) fn forgotten_tasks_since_compaction(&self) -> u64 {
        self.forgotten_since_compaction
    }

    /// The journal was compacted: what was forgotten before is out of it.
    pub fn compacted(&mut self) {
        self.forgotten_since_compaction = 0;
    }

    /// Tasks of jobs not forgotten (what a compacted journal holds).
    pub(crate) fn held_tasks(&self) -> u64 {
        self.jobs
            .iter()
            .filter(|(_, job)| !job.forgotten)
            .map(|(_, job)| job.counts.total())
            .sum()
    }
}
