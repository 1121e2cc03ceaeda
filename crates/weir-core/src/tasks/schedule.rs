//! Matching queued tasks to free workers, finishing them, fences, and what the policy is told.

use super::*;
use crate::scaling::walltime_environment;

/// Whether `worker` could ever run tasks of `class` (once its slots and amounts are free): it has
/// the capabilities, and every environment matches there, or its verdict is still pending.
pub(super) fn could_ever_run(worker: &BookedWorker, class: &Class, known: &Environments) -> bool {
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

/// What makes a demand group: capabilities, and environments (walltime names included).
type GroupKey<'a> = (&'a [(String, u64)], Vec<String>);

/// How many canceled tasks at the front of a queue [`Tasks::demand`] looks past for the oldest
/// queued one. Canceled tasks leave their queue lazily, but never stay at its front: a cancel
/// and every placement round drop those there ([`drop_unqueued_front`]), and a journal's
/// replay drops every task that finished (`Tasks::fence_unfinished`), so the first task
/// looked at is queued; the bound only keeps a broken rule from costing a whole queue.
const OLDEST_SCAN: usize = 1024;

/// Drop the tasks at the front of `queue` that no longer wait (canceled, or forgotten since),
/// so its front is a queued task and an all-canceled queue is empty.
pub(super) fn drop_unqueued_front(queue: &mut VecDeque<TaskId>, tasks: &Dense<Task>) {
    while queue
        .front()
        .is_some_and(|&id| tasks.get(id).is_none_or(|t| t.state != TaskState::Queued))
    {
        queue.pop_front();
    }
}

impl Tasks {
    /// Place queued tasks on workers with room (and time left for them): first every free
    /// slot, then the prefetch one task per worker per round (so a short burst spreads over
    /// the workers instead of piling on the first). Then take prefetched tasks back for workers
    /// with a free slot that nothing queued fits.
    pub(crate) fn schedule(&mut self, now: u64) {
        let mut dispatch: BTreeMap<WorkerId, Vec<TaskId>> = BTreeMap::new();
        if !self.queues.is_empty() && !self.free.is_empty() {
            let free: Vec<WorkerId> = self.free.iter().copied().collect();
            self.place(now, 0, &free, &mut dispatch);
        }
        if self.config.prefetch > 0 && !self.queues.is_empty() {
            // (The sets may still list a worker the first round just filled: `fits` turns it
            // away, and its held count, not the sets, decides the rounds.)
            self.prefetch(now, &mut dispatch);
        }
        for worker in dispatch.keys() {
            self.resync(*worker);
        }
        for (worker, tasks) in dispatch {
            self.effects.push(Effect::Dispatch { worker, tasks });
        }
        if self.config.prefetch > 0 {
            self.revoke_for_idle(now);
        }
    }

    /// One round of placement over `workers`: each is filled up to its slots plus `level`
    /// (beyond its slots: only quick tasks).
    pub(super) fn place(
        &mut self,
        now: u64,
        level: u32,
        workers: &[WorkerId],
        dispatch: &mut BTreeMap<WorkerId, Vec<TaskId>>,
    ) {
        let mut emptied = Vec::new();
        for (key, queue) in self.queues.iter_mut() {
            let class = &self.classes[key.1];
            for worker_id in workers {
                let Some(worker) = self.workers.get_mut(worker_id) else {
                    continue;
                };
                let limit = worker.info.slots.saturating_add(level);
                while worker.fits(class, now, limit) {
                    // Beyond its slots, only quick tasks (in queue order: one that is not
                    // ends the prefetch from this queue).
                    if level > 0
                        && let Some(&next) = queue.front()
                        && self.tasks.get(next).is_some_and(|t| {
                            t.state == TaskState::Queued && !self.quick.contains(&t.group)
                        })
                    {
                        break;
                    }
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
                    task.holder = worker.info.instance;
                    worker.take(class);
                    worker.running.insert(id);
                    worker.hold(id, now, self.quick.contains(&task.group));
                    if level > 0 {
                        worker.waiting.insert(id);
                    }
                    if worker.idle_since.take().is_some() {
                        worker.busy_since = now;
                        self.becoming_busy.insert(*worker_id);
                    }
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
            drop_unqueued_front(queue, &self.tasks);
            if queue.is_empty() {
                emptied.push(*key);
            }
        }
        for key in emptied {
            self.queues.remove(&key);
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
        let (state, group, index) = (t.state, t.group, self.groups[&t.group].class);
        let class = self.classes[index].clone();
        let place = self.workers.get(&worker).map(|w| super::ran_on(&w.info));
        let mut started = None;
        if let Some(w) = self.workers.get_mut(&worker) {
            w.running.remove(&task);
            w.waiting.remove(&task);
            if let Some(since) = w.release(task) {
                // Only a run that ends now is kept for the task stream (not a canceled one).
                if state == TaskState::Running {
                    started = Some((since, w.info.name.clone()));
                }
                let ran = now.saturating_sub(since);
                if ran <= PREFETCH_BELOW_MS {
                    self.quick.insert(group);
                } else {
                    self.quick.remove(&group);
                }
                // A canceled run's time says nothing of how long the task takes.
                if state == TaskState::Running
                    && let Some(recent) = self.runtimes.get_mut(index)
                {
                    if recent.len() == crate::scaling::RECENT_RUNTIMES {
                        recent.pop_front();
                    }
                    recent.push_back(ran);
                }
            }
            w.give_back(&class);
            w.revoke_spent = false;
            w.last_seen = now;
            if w.running.is_empty() {
                w.idle_since = Some(now);
            }
        }
        self.resync(worker);
        if let Some(t) = self.task_mut(task) {
            t.worker = None;
        }
        if state == TaskState::Running {
            let final_state = if outcome.succeeded() {
                TaskState::Succeeded
            } else {
                TaskState::Failed
            };
            if let Some((since, name)) = started {
                self.record_run(Run {
                    task,
                    job: self.groups[&group].job,
                    worker: name,
                    started_ms: since,
                    ended_ms: Some(now),
                    failed: final_state == TaskState::Failed,
                });
            }
            self.finish(task, final_state, outcome, place);
        } else {
            // A canceled task confirmed: its job may have been waiting for it to be dropped.
            self.drop_forgotten();
        }
        true
    }

    /// Take a waiting task out of its queue or fence (rare: a claimed task).
    pub(super) fn unqueue(&mut self, id: TaskId) {
        let Some(group) = self.task(id).and_then(|t| self.groups.get(&t.group)) else {
            return;
        };
        if let Some(queue) = self.queues.get_mut(&group.queue()) {
            queue.retain(|t| *t != id);
        }
        self.fenced.retain(|_, tasks| {
            tasks.retain(|t| *t != id);
            !tasks.is_empty()
        });
    }

    /// Put a queued task that waits in no queue at the front of its own (the inverse of
    /// [`Tasks::unqueue`]).
    pub(super) fn requeue_front(&mut self, id: TaskId) {
        let Some(group) = self.task(id).and_then(|t| self.groups.get(&t.group)) else {
            return;
        };
        self.queues.entry(group.queue()).or_default().push_front(id);
    }

    /// Fenced tasks whose time has come go back to the front of their queues.
    pub(super) fn release_fenced(&mut self, now: u64) {
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
                self.requeue_front(id);
            }
        }
    }

    /// Forget jobs whose `forget_after_ms` ran out, then declare silent workers lost. (In that
    /// order: a job that finishes in this tick is forgotten in a later one, after the shell has
    /// journaled its tasks' final records.)
    pub fn tick(&mut self, now: u64) {
        self.undrain(now);
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
                    self.effects.push(Effect::Forgot { job });
                }
            }
        }
        let busy = self.config.heartbeat_timeout_ms;
        let idle = self.config.idle_silence_ms.max(busy);
        // An idle worker beats less often (at the pace it was told, `lease::idle_pace`); one
        // handed tasks since is judged as busy from the hand-over on (`lease::idle_silence`).
        // Its fence still counts from `last_seen`.
        let silent: Vec<(WorkerId, u64)> = self
            .workers
            .iter()
            .filter_map(|(id, w)| {
                let (from, limit) = match w.running.is_empty() {
                    true => {
                        let [before, last] = w.idle_paces;
                        let told = before.max(last).saturating_add(busy);
                        (w.last_seen, idle.max(told))
                    }
                    false => (w.last_seen.max(w.busy_since), busy),
                };
                (now.saturating_sub(from) > limit).then_some((*id, limit))
            })
            .collect();
        self.release_fenced(now);
        for (worker, limit) in silent {
            let reason = format!("no heartbeat for {limit} ms");
            self.worker_lost(now, worker, &reason, Loss::Silent);
            self.effects.push(Effect::Disconnect { worker, reason });
        }
        // A forgotten job waits for confirmations of its canceled tasks before it is dropped.
        self.drop_forgotten();
    }

    /// Queued and running tasks grouped by what they need, for the scaling policy, at `now`:
    /// with how long the oldest queued one waited and the latest run times of each group.
    pub fn demand(&self, now: u64) -> Vec<crate::scaling::Demand> {
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
        // The oldest queued task of each class: the first queued one in each of its queues (a
        // queue is in submission order, retried tasks at its front; canceled ones are skipped,
        // looking at a bounded number of them).
        let mut oldest: BTreeMap<usize, u64> = BTreeMap::new();
        for ((_, class), queue) in &self.queues {
            let first = (queue.iter().take(OLDEST_SCAN))
                .filter_map(|id| self.tasks.get(*id))
                .find(|t| t.state == TaskState::Queued);
            if let Some(group) = first.and_then(|t| self.groups.get(&t.group)) {
                let waited = now.saturating_sub(group.submitted);
                let at = oldest.entry(*class).or_default();
                *at = (*at).max(waited);
            }
        }
        let classes: HashSet<usize> = queued.keys().chain(running.keys()).copied().collect();
        let mut classes: Vec<usize> = classes.into_iter().collect();
        classes.sort_unstable();
        let mut groups: Vec<crate::scaling::Demand> = Vec::with_capacity(classes.len());
        let mut index: HashMap<GroupKey<'_>, usize> = HashMap::default();
        // Each group's run times, from all its classes.
        let mut samples: Vec<Vec<u64>> = Vec::with_capacity(classes.len());
        for c in classes {
            let class = &self.classes[c];
            let mut environments = class.environments.clone();
            environments.extend(walltime_environment(class.timeout_ms));
            let count = |counts: &BTreeMap<usize, u64>| {
                u32::try_from(counts.get(&c).copied().unwrap_or(0)).unwrap_or(u32::MAX)
            };
            let waited = oldest.get(&c).copied().unwrap_or(0);
            let recent = self.runtimes.get(c).into_iter().flatten().copied();
            let key = (class.capabilities.as_slice(), environments.clone());
            match index.get(&key) {
                Some(&at) => {
                    let group = &mut groups[at];
                    group.queued = group.queued.saturating_add(count(&queued));
                    group.running = group.running.saturating_add(count(&running));
                    group.oldest_queued_ms = group.oldest_queued_ms.max(waited);
                    samples[at].extend(recent);
                }
                None => {
                    index.insert(key, groups.len());
                    groups.push(crate::scaling::Demand {
                        capabilities: class.capabilities.clone(),
                        environments,
                        queued: count(&queued),
                        running: count(&running),
                        oldest_queued_ms: waited,
                        runtimes: None,
                    });
                    samples.push(recent.collect());
                }
            }
        }
        for (group, mut samples) in groups.iter_mut().zip(samples) {
            group.runtimes = crate::scaling::Runtimes::of(&mut samples);
        }
        groups
    }
}
