//! The status report and the invariant check the tests run after every step.

use super::*;

impl Tasks {
    /// Tasks queued now (waiting for a slot).
    pub fn queued(&self) -> u64 {
        self.counts.queued
    }

    /// [`Tasks::status`] without the worker list (what grows with the cluster): the counts.
    pub fn counts_only(&self) -> StatusReport {
        StatusReport {
            tasks: self.counts.clone(),
            jobs: self.jobs.len() as u64,
            ..StatusReport::default()
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
                    running: w.held().min(w.info.slots),
                    capabilities: w.info.capabilities.clone(),
                    prefetched: w.held().saturating_sub(w.info.slots),
                    tasks: w.started(),
                    joined_ms: w.joined,
                    ends_at_ms: w.ends_at,
                    drained: w.cordoned,
                    stopping: w.draining.is_some(),
                })
                .collect(),
            now_ms: 0,
            tasks: self.counts.clone(),
            jobs: self.jobs.len() as u64,
            managers: Vec::new(),
            policy_error: None,
        }
    }

    /// Check every invariant; the tests call this after each step. Returns the first violation.
    pub fn sanity_check(&self) -> Result<(), String> {
        self.check_stores()?;
        // Request ids: an index of the held jobs' own, no more, no less.
        let mut with_request = 0;
        for (id, job) in self.jobs.iter() {
            if let Some(request) = job.request {
                with_request += 1;
                if self.requests.get(&request) != Some(&id) {
                    return Err(format!("job {id}: its request id is not indexed to it"));
                }
            }
        }
        if with_request != self.requests.len() {
            return Err(format!(
                "{} request ids indexed, {with_request} held jobs have one",
                self.requests.len()
            ));
        }
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
        if let Some(gone) = self
            .free
            .iter()
            .chain(&self.roomy)
            .chain(&self.holders)
            .find(|id| !self.workers.contains_key(id))
        {
            return Err(format!(
                "worker {gone} is gone but still in a placement set"
            ));
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
            if let Some(stray) = worker
                .waiting
                .iter()
                .chain(worker.since.keys())
                .find(|t| !worker.running.contains(t))
            {
                return Err(format!(
                    "worker {id}: task {stray} is marked held there but is not"
                ));
            }
            let slow = worker.since.values().filter(|(_, quick)| !quick).count();
            if slow != worker.slow as usize {
                return Err(format!(
                    "worker {id}: {slow} slow tasks held, counted {}",
                    worker.slow
                ));
            }
            if let Some(manager) = &worker.info.manager
                && !self
                    .by_manager
                    .get(manager)
                    .is_some_and(|ids| ids.contains(id))
            {
                return Err(format!("worker {id} missing from its manager's index"));
            }
            if self.names.get(&worker.info.name) != Some(id) {
                return Err(format!(
                    "worker {id} ({}) missing from the name index",
                    worker.info.name
                ));
            }
            let open = worker.open();
            if self.free.contains(id) != (open && worker.held() < worker.info.slots)
                || self.roomy.contains(id) != (open && worker.held() < self.limit(worker))
                || self.holders.contains(id) != (worker.held() > worker.info.slots)
            {
                return Err(format!(
                    "worker {id}: free / roomy / holder sets out of step"
                ));
            }
            if worker.held() > self.limit(worker) {
                return Err(format!(
                    "worker {id}: holds {} tasks, beyond {} slots + {} prefetched",
                    worker.held(),
                    worker.info.slots,
                    self.config.prefetch
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
