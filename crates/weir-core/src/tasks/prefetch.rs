//! Tasks held ahead of a free slot (`Config::prefetch`): which workers may be handed quick tasks
//! beyond their slots, and taking held tasks back, for an idle worker or for a waiting task not
//! known to be quick.

use super::schedule::could_ever_run;
use super::*;

impl Tasks {
    /// The most tasks `worker` may hold: its slots, and the prefetch beyond them.
    pub(super) fn limit(&self, worker: &BookedWorker) -> u32 {
        worker.info.slots.saturating_add(self.config.prefetch)
    }

    /// Hand quick tasks to workers whose slots are full, one per worker per round. A worker
    /// that could run a waiting task not known to be quick takes nothing ahead: it is to run
    /// that task in its next free slot, not after what it would hold (a new submission, or one
    /// of higher priority, never waits behind a stream of quick ones). Nor does one running a
    /// task not known to be quick: what it held would wait behind that.
    pub(super) fn prefetch(&mut self, now: u64, dispatch: &mut BTreeMap<WorkerId, Vec<TaskId>>) {
        let (slow, any_quick) = self.fronts();
        self.revoke_for_slow(&slow);
        if !any_quick {
            return;
        }
        // Workers with room ahead, less those that are to keep a slot for a slow task.
        let open: Vec<WorkerId> = self
            .roomy
            .iter()
            .copied()
            .filter(|id| {
                self.workers.get(id).is_some_and(|w| {
                    // Not while it is asked to give some back (its answer would not cover
                    // what it was handed meanwhile).
                    w.slow == 0
                        && w.revoking.is_none()
                        && !slow.iter().any(|class| {
                            could_ever_run(w, &self.classes[*class], &self.environments)
                        })
                })
            })
            .collect();
        // Start at the lowest round some open worker has room in.
        let Some(first) = open
            .iter()
            .filter_map(|id| self.workers.get(id))
            .map(|w| w.held().saturating_sub(w.info.slots) + 1)
            .min()
        else {
            return;
        };
        for level in first..=self.config.prefetch {
            if self.queues.is_empty() {
                break;
            }
            self.place(now, level, &open, dispatch);
        }
    }

    /// The classes whose next queued task is not known to be quick, and whether any queue's
    /// next task is.
    pub(super) fn fronts(&self) -> (Vec<usize>, bool) {
        let mut slow = Vec::new();
        let mut any_quick = false;
        for (key, queue) in &self.queues {
            let front = queue
                .iter()
                .find_map(|id| self.tasks.get(*id).filter(|t| t.state == TaskState::Queued));
            match front {
                Some(task) if self.quick.contains(&task.group) => any_quick = true,
                Some(_) => slow.push(key.1),
                None => {}
            }
        }
        (slow, any_quick)
    }

    /// A waiting task not known to be quick (a new submission, or one of higher priority) is
    /// to have the next free slot of a worker that could run it: such workers holding tasks
    /// ahead are asked to give all of those back, so it waits only for what runs there now.
    fn revoke_for_slow(&mut self, slow: &[usize]) {
        if slow.is_empty() || self.holders.is_empty() {
            return;
        }
        let asked: Vec<(WorkerId, Vec<TaskId>, u32)> = self
            .holders
            .iter()
            .filter_map(|id| self.workers.get(id).map(|w| (*id, w)))
            .filter(|(_, w)| w.revoking.is_none() && !w.revoke_spent)
            .filter(|(_, w)| {
                slow.iter()
                    .any(|class| could_ever_run(w, &self.classes[*class], &self.environments))
            })
            .map(|(id, w)| (id, self.held_running(w), w.held() - w.info.slots))
            .collect();
        for (worker, tasks, count) in asked {
            self.ask_back(worker, tasks, count);
        }
    }

    /// A worker the policy drained gives back what it holds ahead of its slots (a drained worker
    /// takes no new task, and a held one it has not started is one): asked now, or, while a
    /// take-back is outstanding, once that one is answered ([`Tasks::revoked`]).
    pub(super) fn ask_back_held(&mut self, worker: WorkerId) {
        let Some(w) = self.workers.get(&worker) else {
            return;
        };
        if w.revoking.is_some() || w.held() <= w.info.slots {
            return;
        }
        let count = w.held() - w.info.slots;
        let tasks = self.held_running(w);
        self.ask_back(worker, tasks, count);
    }

    /// The tasks `w` holds that are still to run (not canceled meanwhile), in id order: what
    /// a take-back may name.
    fn held_running(&self, w: &BookedWorker) -> Vec<TaskId> {
        let mut tasks: Vec<TaskId> = (w.running.iter().copied())
            .filter(|t| (self.tasks.get(*t)).is_some_and(|t| t.state == TaskState::Running))
            .collect();
        tasks.sort_unstable();
        tasks
    }

    /// Ask `worker` to give back up to `count` of `tasks` it has not started; noted as its one
    /// take-back outstanding until it answers ([`Tasks::revoked`]).
    fn ask_back(&mut self, worker: WorkerId, tasks: Vec<TaskId>, count: u32) {
        if let Some(w) = self.workers.get_mut(&worker) {
            w.revoking = Some(tasks.iter().copied().collect());
        }
        self.effects.push(Effect::Revoke {
            worker,
            tasks,
            count,
        });
    }

    /// A worker with a free slot that nothing queued fits (it would be placed otherwise) asks
    /// workers holding more than their slots for tasks it could run: one take-back outstanding
    /// per holder, for at most what the holder has beyond its slots.
    pub(super) fn revoke_for_idle(&mut self, now: u64) {
        if self.free.is_empty() || self.holders.is_empty() {
            return;
        }
        let mut holders: Vec<(u32, WorkerId)> = self
            .holders
            .iter()
            .filter_map(|id| self.workers.get(id).map(|w| (id, w)))
            .filter(|(_, w)| w.revoking.is_none() && !w.revoke_spent)
            .map(|(id, w)| (w.held() - w.info.slots, *id))
            .collect();
        if holders.is_empty() {
            return;
        }
        let idle: Vec<(WorkerId, u32)> = self
            .free
            .iter()
            .filter_map(|id| self.workers.get(id).map(|w| (*id, w.info.slots - w.held())))
            .collect();
        holders.sort_unstable_by(|a, b| b.cmp(a));
        for (idle_id, mut need) in idle {
            for (excess, holder_id) in holders.iter_mut() {
                if need == 0 {
                    break;
                }
                if *excess == 0 || *holder_id == idle_id {
                    continue;
                }
                let (Some(holder), Some(taker)) =
                    (self.workers.get(holder_id), self.workers.get(&idle_id))
                else {
                    continue;
                };
                if holder.revoking.is_some() {
                    continue;
                }
                let mut tasks: Vec<TaskId> = holder
                    .running
                    .iter()
                    .copied()
                    .filter(|t| {
                        self.tasks.get(*t).is_some_and(|task| {
                            task.state == TaskState::Running
                                && taker.fits(
                                    &self.classes[self.groups[&task.group].class],
                                    now,
                                    taker.info.slots,
                                )
                        })
                    })
                    .collect();
                if tasks.is_empty() {
                    continue;
                }
                tasks.sort_unstable();
                // Half of what it holds ahead (so the two even out), at least what the idle
                // one lacks, at most what it may hold.
                let room = self.limit(taker).saturating_sub(taker.held());
                let count = need.max(*excess / 2).min(*excess).min(room);
                need = need.saturating_sub(count);
                *excess -= count;
                self.ask_back(*holder_id, tasks, count);
            }
        }
    }

    /// `worker` gave back these tasks it had not started (answering [`Effect::Revoke`]): they
    /// are queued again at the front, the hand-over not counted as an attempt. A task canceled
    /// meanwhile is confirmed stopped. Returns how many were taken back.
    pub(crate) fn revoked(&mut self, worker: WorkerId, tasks: &[TaskId]) -> usize {
        let Some(asked) = self
            .workers
            .get_mut(&worker)
            .and_then(|w| w.revoking.take())
        else {
            return 0;
        };
        let mut back = 0;
        // In reverse, so the front of the queue keeps their order.
        let mut given: Vec<TaskId> = tasks
            .iter()
            .copied()
            .filter(|t| asked.contains(t))
            .collect();
        given.sort_unstable();
        for &id in given.iter().rev() {
            let Some(task) = self.task(id) else { continue };
            if task.worker != Some(worker) {
                continue;
            }
            let (state, gid) = (task.state, task.group);
            let group = self.groups[&gid].clone();
            let class = self.classes[group.class].clone();
            let Some(w) = self.workers.get_mut(&worker) else {
                break;
            };
            if !w.running.remove(&id) {
                continue;
            }
            w.release(id);
            w.waiting.remove(&id);
            w.give_back(&class);
            if w.running.is_empty() {
                w.idle_since = Some(w.last_seen);
            }
            if let Some(t) = self.task_mut(id) {
                t.worker = None;
                t.attempts = t.attempts.saturating_sub(1);
            }
            if state == TaskState::Running {
                self.set_state(id, TaskState::Queued);
                self.requeue_front(id);
                back += 1;
            }
        }
        let mut drained = false;
        if let Some(w) = self.workers.get_mut(&worker) {
            w.revoke_spent = given.is_empty();
            drained = w.cordoned;
        }
        self.resync(worker);
        self.drop_forgotten();
        // A drained worker asked for less (an idle worker's share, or the tasks it could run)
        // gives back the rest too: asked again when it gave something or holds tasks that
        // take-back did not name (so never again for an answer of nothing to the same ask).
        let unasked = (self.workers.get(&worker))
            .is_some_and(|w| self.held_running(w).iter().any(|t| !asked.contains(t)));
        if drained && (!given.is_empty() || unasked) {
            self.ask_back_held(worker);
        }
        back
    }
}
