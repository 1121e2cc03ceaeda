//! Workers: joining (with the tasks they claim), heartbeats, loss, verdicts and draining. One
//! worker's own book is `worker.rs`.

use super::*;

impl Tasks {
    /// A worker registered. It may claim tasks it runs from before (it reconnected, or this
    /// scheduler restarted): each claimed task that is waiting (queued or fenced) is adopted —
    /// running there, its slot and amounts taken, no new attempt counted. A live worker of the
    /// same name and instance is an earlier connection of the same worker: it is replaced, its
    /// claimed tasks move over and the rest are requeued. A live worker of the same name and
    /// another instance is another process: names are unique, so this one is refused.
    /// Returns the new id and the claimed tasks the worker must stop (finished, canceled, or
    /// running elsewhere by now).
    pub(crate) fn worker_joined(
        &mut self,
        now: u64,
        info: WorkerRegistration,
    ) -> Result<(WorkerId, Vec<TaskId>), NameTaken> {
        let earlier: Vec<WorkerId> = self.names.get(&info.name).copied().into_iter().collect();
        if let Some(other) = earlier
            .iter()
            .filter_map(|id| self.workers.get(id))
            .find(|w| w.info.instance != info.instance)
        {
            return Err(NameTaken {
                name: info.name,
                manager: other.info.manager.clone(),
            });
        }
        // Claimed tasks moved over from an earlier connection: queued, in no queue, until
        // adopted below (or put back in their queue if they cannot be).
        let mut moved: HashSet<TaskId> = HashSet::default();
        for old in earlier {
            // Only runs still wanted move over (a canceled one is stopped on the worker).
            let claimed: Vec<TaskId> = self.workers[&old]
                .running
                .iter()
                .filter(|t| info.running.contains(t) || info.finished.contains(t))
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
                    w.release(*task);
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
            moved.extend(claimed);
            self.resync(old);
            self.worker_lost(now, old, "replaced by its own reconnection", Loss::Exited);
            self.effects.push(Effect::Disconnect {
                worker: old,
                reason: "replaced by its own reconnection".into(),
            });
        }
        self.next_worker += 1;
        let id = self.next_worker;
        for name in &info.local_environments {
            self.declare_worker_environment(name);
        }
        // Each claim once (a task listed twice would be adopted, then refused and stopped).
        let mut claims: Vec<TaskId> = info.running.iter().chain(&info.finished).copied().collect();
        claims.sort_unstable();
        claims.dedup();
        let outcomes: HashSet<TaskId> = info.finished.iter().copied().collect();
        let ends_at = info.ends_in_ms.map(|ms| now.saturating_add(ms));
        let worker = BookedWorker {
            free: info.capabilities.clone(),
            revoking: None,
            revoke_spent: false,
            since: HashMap::default(),
            slow: 0,
            waiting: HashSet::default(),
            info,
            running: HashSet::default(),
            environments: HashSet::default(),
            verdicts: BTreeMap::new(),
            loads: BTreeMap::new(),
            last_seen: now,
            idle_since: Some(now),
            busy_since: now,
            idle_paces: [0, 0],
            draining: None,
            cordoned: false,
            ends_at,
            joined: now,
        };
        if let Some(manager) = &worker.info.manager {
            self.by_manager
                .entry(manager.clone())
                .or_default()
                .insert(id);
        }
        self.names.insert(worker.info.name.clone(), id);
        self.workers.insert(id, worker);
        let refused = self.adopt(now, id, &claims, &outcomes, &moved);
        self.resync(id);
        Ok((id, refused))
    }

    /// The worker started these tasks (those it held ahead of a free slot now count as run).
    /// A task held ahead is timed from here, not from its hand-over: whether its group is
    /// quick ([`PREFETCH_BELOW_MS`]) is a matter of how long it runs, not of how long it
    /// waited behind the others held there (64 tasks of 35 ms wait 2.2 s, and the group would
    /// flap between quick and not, every holder asked to give all back each time).
    pub fn started(&mut self, now: u64, worker: WorkerId, tasks: &[TaskId]) {
        if let Some(w) = self.workers.get_mut(&worker)
            && !w.waiting.is_empty()
        {
            for task in tasks {
                if w.waiting.remove(task)
                    && let Some((since, _)) = w.since.get_mut(task)
                {
                    *since = now;
                }
            }
        }
    }

    pub fn heartbeat(&mut self, now: u64, worker: WorkerId) {
        if let Some(w) = self.workers.get_mut(&worker) {
            w.last_seen = now;
        }
    }

    /// `worker` was told to beat every `pace_ms` while it holds nothing
    /// ([`crate::lease::idle_pace`]): while idle it is lost only once silent for the longer of
    /// this and the pace it was told before (it may have set its next beat before this came),
    /// plus the heartbeat timeout, and never sooner than [`Config::idle_silence_ms`].
    pub(crate) fn told_idle_pace(&mut self, worker: WorkerId, pace_ms: u64) {
        if let Some(w) = self.workers.get_mut(&worker) {
            w.idle_paces = [w.idle_paces[1], pace_ms];
        }
    }

    /// How many workers are live.
    pub(crate) fn worker_count(&self) -> usize {
        self.workers.len()
    }

    /// The worker is gone: requeue or fail its running tasks, when they may run again as
    /// `loss` says.
    pub(crate) fn worker_lost(&mut self, now: u64, worker: WorkerId, reason: &str, loss: Loss) {
        let Some(w) = self.workers.remove(&worker) else {
            return;
        };
        self.resync(worker);
        if self.names.get(&w.info.name) == Some(&worker) {
            self.names.remove(&w.info.name);
        }
        if let Some(manager) = &w.info.manager
            && let Some(ids) = self.by_manager.get_mut(manager)
        {
            ids.remove(&worker);
            if ids.is_empty() {
                self.by_manager.remove(manager);
            }
        }
        // Counted from the last thing heard from it, not from now: every lease it holds was
        // granted in answer to a request it sent before that (RELIABILITY.md, "Leases").
        let fence = (loss == Loss::Silent && self.config.fence_ms > 0)
            .then(|| w.last_seen.saturating_add(self.config.fence_ms))
            .filter(|until| *until > now);
        // Its allocation ended (or is about to): what ran there was cut short by it, whichever
        // way the end came (the worker left, its unit stopped it, Slurm killed it).
        let cut = w
            .ends_at
            .is_some_and(|end| now.saturating_add(WALLTIME_SLACK_MS) >= end);
        let mut cuts = Vec::new();
        let mut running: Vec<TaskId> = w.running.into_iter().collect();
        running.sort_unstable();
        // Requeue in reverse so the front of the queue keeps the original order.
        for &id in running.iter().rev() {
            // Stopped on purpose, or never started there: not an attempt. (A start is reported
            // with the next outcomes, so one that killed its worker at once may look unstarted:
            // spared at most MAX_SPARED times, a task that keeps doing that still runs out of
            // retries.)
            let never_started = w.waiting.contains(&id)
                && self.task(id).is_some_and(|t| t.state == TaskState::Running)
                && {
                    let spared = self.spared.entry(id).or_default();
                    *spared += 1;
                    *spared <= MAX_SPARED
                };
            let Some(task) = self.task_mut(id) else {
                continue;
            };
            task.worker = None;
            if task.state != TaskState::Running {
                continue; // canceled while running: already final
            }
            if loss == Loss::Stopped || never_started {
                task.attempts = task.attempts.saturating_sub(1);
            }
            if cut && !w.waiting.contains(&id) {
                task.cuts = task.cuts.saturating_add(1);
                cuts.push((id, u32::from(task.cuts)));
            }
            let (gid, attempts, times_cut) = (task.group, task.attempts, u32::from(task.cuts));
            let group = self.groups[&gid].clone();
            let max_cuts = self.config.max_walltime_requeues;
            if cut && times_cut > max_cuts {
                let message = format!(
                    "cut short by the end of its worker's allocation (walltime) {times_cut} \
                     times; gave up after {max_cuts} walltime requeues (--max-walltime-requeues): \
                     give it a --timeout, so that it goes only to workers with time for it, or \
                     run it where allocations are longer"
                );
                let place = Some(super::ran_on(&w.info));
                self.finish(id, TaskState::Failed, Outcome::Error { message }, place);
            } else if attempts > group.spec.retries {
                let message =
                    format!("worker {worker} lost ({reason}); gave up after {attempts} attempts");
                let place = Some(super::ran_on(&w.info));
                self.finish(id, TaskState::Failed, Outcome::Error { message }, place);
            } else {
                self.set_state(id, TaskState::Queued);
                if loss == Loss::Silent {
                    self.left_by.insert(id, w.info.instance);
                }
                match fence {
                    Some(until) => self.fenced.entry(until).or_default().push(id),
                    None => self.requeue_front(id),
                }
            }
        }
        if !cuts.is_empty() {
            self.effects.push(Effect::Cut(cuts));
        }
        self.drop_forgotten();
    }

    /// A worker's verdicts changed.
    pub(crate) fn set_verdicts(
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
                self.environments.declare(&name, EnvSource::Worker);
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
    pub(crate) fn set_loads(&mut self, worker: WorkerId, loads: Vec<(String, ComponentLoad)>) {
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
    pub(crate) fn has_verdict(&self, worker: WorkerId, name: &str) -> bool {
        self.workers
            .get(&worker)
            .is_some_and(|w| w.verdicts.contains_key(name))
    }

    /// Live workers that take tasks (not being stopped), and of those, how many match
    /// `environment` when one is given (for `weir workers wait`).
    pub(crate) fn ready_workers(&self, environment: Option<&str>) -> u32 {
        self.workers
            .values()
            .filter(|w| w.open())
            .filter(|w| environment.is_none_or(|e| w.environments.contains(e)))
            .count() as u32
    }

    pub(crate) fn has_worker(&self, worker: WorkerId) -> bool {
        self.workers.contains_key(&worker)
    }

    pub(crate) fn worker_ids(&self) -> Vec<WorkerId> {
        self.workers.keys().copied().collect()
    }

    /// Every live worker as the scaling loop sees it.
    pub(crate) fn worker_views(&self, now: u64) -> Vec<WorkerView<'_>> {
        self.workers
            .iter()
            .map(|(&id, w)| w.view(id, now))
            .collect()
    }

    /// The manager of `worker`, with the views of that manager's live workers only (a verdict
    /// or a loss concerns one manager: the others' workers are not copied for it).
    pub(crate) fn manager_worker_views(
        &self,
        now: u64,
        worker: WorkerId,
    ) -> Option<(String, Vec<WorkerView<'_>>)> {
        let manager = self.workers.get(&worker)?.info.manager.clone()?;
        let views = self.views_of_manager(now, &manager);
        Some((manager, views))
    }

    /// The views of the live workers `manager` started (its own only: O(its workers)).
    pub(crate) fn views_of_manager(&self, now: u64, manager: &str) -> Vec<WorkerView<'_>> {
        let Some(ids) = self.by_manager.get(manager) else {
            return Vec::new();
        };
        let mut views = Vec::with_capacity(ids.len());
        views.extend((ids.iter()).filter_map(|id| self.workers.get(id).map(|w| w.view(*id, now))));
        views
    }

    /// Stop giving these workers tasks (their manager is about to stop them). Only idle
    /// workers are drained; returns the names of those that were.
    pub fn drain(&mut self, now: u64, ids: &[WorkerId]) -> Vec<String> {
        let mut drained = Vec::new();
        for id in ids {
            if let Some(worker) = self.workers.get_mut(id)
                && worker.running.is_empty()
            {
                worker.draining.get_or_insert(now);
                drained.push(worker.info.name.clone());
                self.resync(*id);
            }
        }
        drained
    }

    /// The scaling policy's drain for `manager`'s workers: those in `drain` (sorted) take no
    /// new tasks (those newly drained are asked for the tasks they hold ahead and have not
    /// started), and its others drained before take tasks again. Returns the ids and names of
    /// those newly drained and of those taken back.
    pub(crate) fn cordon(&mut self, manager: &str, drain: &[WorkerId]) -> (Named, Named) {
        let (mut drained, mut back) = (Vec::new(), Vec::new());
        let ids: Vec<WorkerId> =
            (self.by_manager.get(manager).into_iter().flatten().copied()).collect();
        for id in ids {
            let Some(worker) = self.workers.get_mut(&id) else {
                continue;
            };
            let named = drain.binary_search(&id).is_ok();
            if worker.cordoned != named {
                worker.cordoned = named;
                match named {
                    true => drained.push((id, worker.info.name.clone())),
                    false => back.push((id, worker.info.name.clone())),
                }
                self.resync(id);
            }
        }
        for (id, _) in &drained {
            self.ask_back_held(*id);
        }
        (drained, back)
    }

    /// Take back every drained worker whose manager is not in `keep` (every one for an empty
    /// set): a drain holds only while accepted decisions name its manager. Returns how many.
    pub(crate) fn uncordon_except(&mut self, keep: &[&str]) -> usize {
        let back: Vec<WorkerId> = (self.workers.iter())
            .filter(|(_, w)| w.cordoned)
            .filter(|(_, w)| w.info.manager.as_deref().is_none_or(|m| !keep.contains(&m)))
            .map(|(id, _)| *id)
            .collect();
        for id in &back {
            if let Some(worker) = self.workers.get_mut(id) {
                worker.cordoned = false;
            }
            self.resync(*id);
        }
        back.len()
    }

    /// Bring `worker`'s entries in the free / roomy / holders sets in line with it (after its
    /// tasks, draining, the policy's drain or presence changed).
    pub(super) fn resync(&mut self, worker: WorkerId) {
        let (free, roomy, holder) = match self.workers.get(&worker) {
            Some(w) => {
                let open = w.open();
                (
                    open && w.held() < w.info.slots,
                    open && w.held() < self.limit(w),
                    w.held() > w.info.slots,
                )
            }
            None => (false, false, false),
        };
        for (set, member) in [
            (&mut self.free, free),
            (&mut self.roomy, roomy),
            (&mut self.holders, holder),
        ] {
            match member {
                true => set.insert(worker),
                false => set.remove(&worker),
            };
        }
    }

    /// Drained workers their manager has not stopped within [`Config::undrain_ms`] take tasks
    /// again (the policy may drain them once more): a worker in a unit whose others are busy
    /// cannot be stopped alone, and would otherwise hold its slots idle.
    pub(super) fn undrain(&mut self, now: u64) {
        let after = self.config.undrain_ms;
        let mut back = Vec::new();
        for (id, worker) in self.workers.iter_mut() {
            if worker
                .draining
                .is_some_and(|since| now.saturating_sub(since) >= after)
            {
                tracing::info!(worker = %worker.info.name, "drained but not stopped by its manager: taking tasks again");
                worker.draining = None;
                back.push(*id);
            }
        }
        for id in back {
            self.resync(id);
        }
    }
}

/// Workers by id and name.
pub(crate) type Named = Vec<(WorkerId, String)>;
