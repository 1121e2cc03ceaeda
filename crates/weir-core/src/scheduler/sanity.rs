//! [`Scheduler::sanity_check`]: the whole core's invariants, for tests to run after every step.

use super::Scheduler;

impl Scheduler {
    /// Check what must hold between inputs: the task core's own invariants (with its
    /// environments and components stores), and what holds across the scheduler's stores.
    pub fn sanity_check(&self) -> Result<(), String> {
        self.tasks.sanity_check()?;
        // Every live worker has its connection's link (a stopping one may keep its link a while).
        if let Some(worker) = self
            .tasks
            .worker_ids()
            .into_iter()
            .find(|w| !self.links.contains_key(w))
        {
            return Err(format!("worker {worker} is live but has no link"));
        }
        if let Some(worker) = self.ending.keys().find(|w| !self.tasks.has_worker(**w)) {
            return Err(format!("worker {worker} is gone but still ending"));
        }
        for (worker, link) in &self.links {
            if link.acknowledged > link.received {
                return Err(format!(
                    "worker {worker}: {} outcomes acknowledged, {} received",
                    link.acknowledged, link.received
                ));
            }
            // What was sent of a dropped job was forgotten there too.
            if let Some(group) = link.groups.iter().find(|g| self.tasks.group(**g).is_none()) {
                return Err(format!(
                    "worker {worker} was sent group {group}, which is gone"
                ));
            }
            if let Some(hash) = link
                .components
                .iter()
                .find(|c| self.tasks.components().users(c).unwrap_or(0) == 0)
            {
                return Err(format!(
                    "worker {worker} holds task component {} that no held group uses",
                    hex::encode(hash)
                ));
            }
        }
        self.managers.sanity_check()?;
        // A decision is kept only for a manager still known (goodbye and forgetting drop it).
        if let Some(id) = self
            .scaling
            .decisions
            .keys()
            .find(|id| !self.managers.knows(id))
        {
            return Err(format!(
                "a decision is kept for manager {id}, which is not known"
            ));
        }
        // A `weir env register --wait` waits for a registered environment's verdicts.
        if let Some(wait) = self
            .env_waits
            .iter()
            .find(|w| !self.tasks.environments().is_registered(&w.name))
        {
            return Err(format!(
                "a client waits for `{}`, which is not registered",
                wait.name
            ));
        }
        // Waits that are met were answered in the round they were met.
        for wait in &self.env_waits {
            let live = self.tasks.worker_ids();
            if !wait
                .workers
                .iter()
                .any(|w| live.contains(w) && !self.tasks.has_verdict(*w, &wait.name))
            {
                return Err(format!(
                    "a wait for `{}` is met but not answered",
                    wait.name
                ));
            }
        }
        if let Some(wait) = self
            .worker_waits
            .iter()
            .find(|w| self.tasks.ready_workers(w.environment.as_deref()) >= w.count)
        {
            return Err(format!(
                "a wait for {} workers is met but not answered",
                wait.count
            ));
        }
        if let Some(job) = self
            .progress_due
            .iter()
            .find(|j| !self.waiters.contains_key(j))
        {
            return Err(format!(
                "progress is due for job {job}, which nobody waits for"
            ));
        }
        // Clients wait only for jobs that are held and unfinished: a job's end is answered in
        // the round it comes.
        for job in self.waiters.keys().chain(self.watchers.keys()) {
            match self.tasks.job_counts(*job) {
                Err(error) => return Err(format!("a client waits for job {job}: {error}")),
                Ok(counts) if counts.finished() == counts.total() => {
                    return Err(format!("a client still waits for job {job}, which is done"));
                }
                Ok(_) => {}
            }
        }
        Ok(())
    }
}
