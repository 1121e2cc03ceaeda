//! Claims: what a worker that registers says it still holds from before (runs going on, and
//! outcomes it finished under its lease and has not had acknowledged), and which of them the
//! scheduler adopts. The rule (RELIABILITY.md, "Leases", "Finished is finished"): a claim is
//! taken if the task waits and was handed to no other worker since, or if it is an outcome of a
//! task requeued when this worker was lost and handed to another since, which gives it up.

use super::*;

impl Tasks {
    /// Adopt worker `id`'s `claims` (`outcomes`: those that are finished runs; `moved`: those
    /// moved over from its earlier connection, queued in no queue) as running there: its slot
    /// and amounts taken, no new attempt counted. Returns the claims refused (finished,
    /// canceled, running elsewhere, or beyond its room), which the worker must stop or drop.
    pub(super) fn adopt(
        &mut self,
        now: u64,
        id: WorkerId,
        claims: &[TaskId],
        outcomes: &HashSet<TaskId>,
        moved: &HashSet<TaskId>,
    ) -> Vec<TaskId> {
        let mut refused = Vec::new();
        let instance = self.workers[&id].info.instance;
        for &task in claims {
            // Waiting (queued or fenced), and handed to no other worker since this one had it:
            // a task handed elsewhere since may be running there now, and a claim of it (still
            // running here, or finished here) is refused, the run here stopped or its outcome
            // dropped. Unless it is a task this worker left behind when it was lost, handed
            // to another since: see `taken_back`.
            let waiting = self.task(task).is_some_and(|t| {
                t.state == TaskState::Queued && (t.holder == 0 || t.holder == instance)
            });
            // Only an outcome is taken back (a run claimed as still going may be the one its
            // guard killed as the lease ran out while registering).
            let elsewhere = match waiting || !outcomes.contains(&task) {
                true => None,
                false => self.claimable_elsewhere(task, id, instance),
            };
            let Some(class) = (waiting || elsewhere.is_some())
                .then(|| self.task(task))
                .flatten()
                .map(|t| self.classes[self.groups[&t.group].class].clone())
            else {
                refused.push(task);
                continue;
            };
            // Room for what it claims (its slots, prefetch and amounts held it; a claim beyond
            // them is not believed). Environments are not asked: its verdicts come after
            // registering.
            let limit = self.limit(&self.workers[&id]);
            let room = self.workers.get(&id).is_some_and(|w| {
                w.held() < limit
                    && class
                        .capabilities
                        .iter()
                        .all(|(name, need)| amount(&w.free, name) >= *need)
            });
            if !room {
                if moved.contains(&task) {
                    self.requeue_front(task);
                }
                refused.push(task);
                continue;
            }
            if let Some(other) = elsewhere {
                self.taken_back(now, task, other, &class);
            }
            // Out of where it waits, now: a stale entry would queue it twice should it come back.
            self.unqueue(task);
            self.set_state(task, TaskState::Running);
            if let Some(t) = self.task_mut(task) {
                t.worker = Some(id);
                t.holder = instance;
                t.attempts = t.attempts.max(1);
            }
            if let Some(w) = self.workers.get_mut(&id) {
                w.take(&class);
                w.running.insert(task);
                w.hold(task, now, false);
                if w.idle_since.take().is_some() {
                    w.busy_since = now;
                }
            }
        }
        refused
    }

    /// Finished is finished: a worker lost without a word whose task ran again elsewhere after
    /// its fence may come back with that task's outcome, produced under its lease (a claim in
    /// [`WorkerRegistration::finished`]). The worker holding the task now (`Some(it)`) gives it up to
    /// the claim, if the claimer is the worker that left it (`left_by`). Safe for "never twice
    /// at once": the claimer's run is over (it reports its outcome), and the run elsewhere, if
    /// it started, is stopped.
    fn claimable_elsewhere(
        &self,
        task: TaskId,
        claimer: WorkerId,
        instance: u64,
    ) -> Option<WorkerId> {
        if self.left_by.get(&task) != Some(&instance) {
            return None;
        }
        let t = self.task(task)?;
        let other = t.worker?;
        (t.state == TaskState::Running && other != claimer && self.workers.contains_key(&other))
            .then_some(other)
    }

    /// Take `task` back from worker `other` for a claim (see `claimable_elsewhere`): it is told
    /// to stop it (a run held ahead never starts), and its slot and amounts are free again. The
    /// task waits, unqueued, for the claim to adopt it.
    fn taken_back(&mut self, now: u64, task: TaskId, other: WorkerId, class: &Class) {
        let mut started = true;
        if let Some(w) = self.workers.get_mut(&other) {
            w.running.remove(&task);
            // Held ahead there and not reported started: that run does not count.
            started = !w.waiting.remove(&task);
            w.release(task);
            w.give_back(class);
            if w.running.is_empty() {
                w.idle_since = Some(now);
            }
        }
        if let Some(r) = self
            .workers
            .get_mut(&other)
            .and_then(|w| w.revoking.as_mut())
        {
            r.remove(&task);
        }
        self.resync(other);
        self.effects.push(Effect::TakeBack {
            worker: other,
            tasks: vec![task],
        });
        if let Some(t) = self.task_mut(task) {
            t.worker = None;
            if !started {
                t.attempts = t.attempts.saturating_sub(1);
            }
        }
        self.set_state(task, TaskState::Queued);
    }
}
