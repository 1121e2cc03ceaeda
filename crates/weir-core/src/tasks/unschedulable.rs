//! Queued tasks nothing can ever run: failed after `--unschedulable-timeout`, and told to the
//! clients waiting for their jobs (`weir submit --wait`, Python futures) after a short grace.
//!
//! A class of queued tasks is unschedulable while no live worker could ever run it
//! ([`could_ever_run`]: the capabilities, and a `match`, or a verdict still pending, on every
//! environment it names, and time left in its allocation for the task's timeout) and the caller's `managers_could_serve` says no worker manager could
//! start one either. Pending verdicts and managers not yet heard from count as "could": only
//! definite answers make a class unschedulable.

use super::*;

/// A class of queued tasks nothing can run, and since when (`now` of the first call that found
/// it so; reset when something could run it again, and when the scheduler stops looking:
/// nothing queued, or nobody waiting and no `--unschedulable-timeout`).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Unschedulable {
    pub class: usize,
    pub since: u64,
    pub capabilities: Vec<(String, u64)>,
    pub environments: Vec<String>,
    /// The tasks' timeout (0: none): a manager whose workers have less time cannot serve them.
    pub timeout_ms: u64,
}

impl Tasks {
    /// The classes of queued tasks nothing can run at `now` (see the module's rule), each
    /// with since when: [`Tasks::unservable`] then [`Tasks::mark_unschedulable`].
    pub fn unschedulable(
        &mut self,
        now: u64,
        managers_could_serve: impl Fn(&[(String, u64)], &[String], u64) -> bool,
    ) -> Vec<Unschedulable> {
        let stuck = self.unservable(now, managers_could_serve);
        self.mark_unschedulable(now, &stuck)
    }

    /// The classes with queued tasks that no live worker could ever run and no manager could
    /// serve (`managers_could_serve`), in class order. Only reads: the caller may ask the
    /// managers about views borrowed from this book.
    pub fn unservable(
        &self,
        now: u64,
        managers_could_serve: impl Fn(&[(String, u64)], &[String], u64) -> bool,
    ) -> Vec<usize> {
        (self.queued_by_class.iter().enumerate())
            .filter(|(_, queued)| **queued > 0)
            .map(|(class, _)| class)
            .filter(|&class_id| {
                let class = &self.classes[class_id];
                let workers_could = (self.workers.values()).any(|w| {
                    could_ever_run(w, class, &self.environments) && w.outlives(class, now)
                });
                !workers_could
                    && !managers_could_serve(
                        &class.capabilities,
                        &class.environments,
                        class.timeout_ms,
                    )
            })
            .collect()
    }

    /// Record `stuck` (from [`Tasks::unservable`]) as the unschedulable classes at `now`: each
    /// keeps the time it was first found so, every other class forgets it (it could run, or has
    /// nothing queued).
    pub fn mark_unschedulable(&mut self, now: u64, stuck: &[usize]) -> Vec<Unschedulable> {
        self.unschedulable_since
            .retain(|class, _| stuck.contains(class));
        stuck
            .iter()
            .map(|&class_id| {
                let class = &self.classes[class_id];
                Unschedulable {
                    class: class_id,
                    since: *self.unschedulable_since.entry(class_id).or_insert(now),
                    capabilities: class.capabilities.clone(),
                    environments: class.environments.clone(),
                    timeout_ms: class.timeout_ms,
                }
            })
            .collect()
    }

    /// `--unschedulable-timeout`: fail the queued tasks nothing has been able to run for
    /// `timeout_ms`, saying why. Returns how many failed.
    #[cfg(test)]
    pub(crate) fn fail_unschedulable(
        &mut self,
        now: u64,
        timeout_ms: u64,
        managers_could_serve: impl Fn(&[(String, u64)], &[String], u64) -> bool,
    ) -> u64 {
        let found = self.unschedulable(now, managers_could_serve);
        self.fail_classes(now, timeout_ms, &found)
    }

    /// Fail the queued tasks of the classes in `found` unschedulable for `timeout_ms` or more.
    pub(crate) fn fail_classes(
        &mut self,
        now: u64,
        timeout_ms: u64,
        found: &[Unschedulable],
    ) -> u64 {
        let mut failed = 0;
        for u in found {
            if now.saturating_sub(u.since) < timeout_ms {
                continue;
            }
            let class_id = u.class;
            let message = format!(
                "unschedulable: for {:.1} s no live worker or worker manager could run it \
                 (it needs {})",
                timeout_ms as f64 / 1000.0,
                needs(&u.capabilities, &u.environments, u.timeout_ms)
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
                self.finish(id, TaskState::Failed, outcome, None);
                failed += 1;
            }
            self.queues.retain(|(_, c), _| *c != class_id);
            self.unschedulable_since.remove(&class_id);
        }
        failed
    }

    /// The first queued task of `job` in each of `classes` (for telling its waiters).
    pub(crate) fn queued_in(&self, job: JobId, classes: &[usize]) -> Vec<(usize, TaskId)> {
        let Some(j) = self.jobs.get(job) else {
            return Vec::new();
        };
        let mut found = Vec::new();
        for &(first, count) in &j.tasks {
            let Some(class) = self.task(first).map(|t| self.groups[&t.group].class) else {
                continue;
            };
            if !classes.contains(&class) || found.iter().any(|(c, _)| *c == class) {
                continue;
            }
            let queued = (first..first + count)
                .find(|id| self.task(*id).is_some_and(|t| t.state == TaskState::Queued));
            if let Some(task) = queued {
                found.push((class, task));
            }
        }
        found
    }

    /// Why no live worker can ever run tasks of `class`, in words: each distinct reason with
    /// how many workers it holds for (`no live worker` when there is none).
    pub(crate) fn why_no_worker(&self, class: usize, now: u64) -> String {
        let Some(class) = self.classes.get(class) else {
            return "no such class".into();
        };
        if self.workers.is_empty() {
            return "no live worker".into();
        }
        let mut reasons: BTreeMap<String, usize> = BTreeMap::new();
        for worker in self.workers.values() {
            *reasons
                .entry(lacks(worker, class, &self.environments, now).join(", "))
                .or_default() += 1;
        }
        let parts: Vec<String> = reasons
            .into_iter()
            .map(|(reason, n)| match n {
                1 => format!("1 live worker with {reason}"),
                n => format!("{n} live workers with {reason}"),
            })
            .collect();
        parts.join("; ")
    }
}

/// What a worker lacks to ever run tasks of `class` started `now`: the words for
/// [`could_ever_run`] being false, or for its allocation ending too soon (empty when it can).
fn lacks(worker: &BookedWorker, class: &Class, known: &Environments, now: u64) -> Vec<String> {
    let mut missing = Vec::new();
    for (name, need) in &class.capabilities {
        let total = amount(&worker.info.capabilities, name);
        if total < *need {
            missing.push(format!("{name}={total} (needs {need})"));
        }
    }
    for env in &class.environments {
        match worker.verdicts.get(env) {
            Some(_) if !known.contains_key(env) => missing.push(format!("`{env}` not registered")),
            Some(EnvVerdict::Match) => {}
            Some(EnvVerdict::NoMatch) => missing.push(format!("`{env}`: no-match")),
            Some(EnvVerdict::Error(reason)) => missing.push(format!("`{env}`: error({reason})")),
            None if worker.evaluates(env, known) => {}
            None => missing.push(format!("`{env}` not evaluated there")),
        }
    }
    if !worker.outlives(class, now) {
        missing.push(format!(
            "an allocation that ends before a timeout of {} s",
            class.timeout_ms as f64 / 1000.0
        ));
    }
    missing
}

/// `capabilities [cpu=4], environments [fast], time for its timeout of 3600 s`.
fn needs(capabilities: &[(String, u64)], environments: &[String], timeout_ms: u64) -> String {
    let caps: Vec<String> = capabilities
        .iter()
        .map(|(n, v)| format!("{n}={v}"))
        .collect();
    let walltime = match timeout_ms {
        0 => String::new(),
        ms => format!(", time for its timeout of {} s", ms as f64 / 1000.0),
    };
    format!(
        "capabilities [{}], environments [{}]{walltime}",
        caps.join(", "),
        environments.join(", ")
    )
}
