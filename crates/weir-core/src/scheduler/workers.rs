//! Workers as the scheduler sees them: joining, reports, loss, and the frames each one is sent
//! (a group's spec and component once per worker, then assignments).

use super::{Action, ConnectionId, Link, MAX_ENVIRONMENTS, Record, Scheduler};
use crate::scaling::is_reserved_environment;
use crate::tasks::{self, Loss};
use std::collections::BTreeMap;

use weir_proto::{
    Assignment, ComponentHash, EnvironmentDef, GroupId, JobId, Outcome, Response, TaskId, TaskKind,
    TaskResult, ToWorker, WorkerId, WorkerRegistration,
};

impl Scheduler {
    pub(super) fn worker_joined(
        &mut self,
        now: u64,
        connection: ConnectionId,
        mut info: WorkerRegistration,
    ) {
        // Admission: what the core could not serve is refused before anything is kept of it.
        if info.local_environments.len() > MAX_ENVIRONMENTS || info.slots == 0 {
            let reason = format!(
                "a worker needs at least one slot and at most {MAX_ENVIRONMENTS} environments of its own"
            );
            tracing::warn!(name = %info.name, %reason, "worker refused");
            self.actions
                .push_back(Action::Refused { connection, reason });
            return;
        }
        tracing::info!(name = %info.name, slots = info.slots, "worker joined");
        // As for a manager: the scheduler's own environment names are not taken from a worker.
        info.local_environments.retain(|name| {
            let reserved = is_reserved_environment(name);
            if reserved {
                tracing::warn!(worker = %info.name, %name, "ignored an environment of a reserved name");
            }
            !reserved
        });
        let claimed = info.running.len() + info.finished.len();
        let (worker, refused) = match self.tasks.worker_joined(now, info) {
            Ok(joined) => joined,
            Err(taken) => {
                tracing::warn!(%taken, "worker refused");
                self.actions.push_back(Action::Refused {
                    connection,
                    reason: taken.to_string(),
                });
                return;
            }
        };
        if claimed > 0 {
            tracing::info!(
                worker,
                claimed,
                refused = refused.len(),
                "worker re-registered with tasks it runs"
            );
        }
        self.actions
            .push_back(Action::Registered { connection, worker });
        self.links.insert(worker, Link::default());
        let idle_beat_ms = self.tell_idle_pace(worker);
        self.send_worker(
            worker,
            ToWorker::Registered {
                id: worker,
                lease_ms: self.config.lease_ms,
                idle_beat_ms,
            },
        );
        if !refused.is_empty() {
            self.send_worker(worker, ToWorker::Cancel(refused));
        }
        self.send_environments(worker);
    }

    /// The pace `worker` is told to beat at while idle, as the cluster's size asks now
    /// ([`crate::lease::idle_pace`]), noted in the task book, which judges its silence by it.
    pub(super) fn tell_idle_pace(&mut self, worker: WorkerId) -> u64 {
        let pace = self.config.idle_pace_ms(self.idle_peers());
        self.tasks.told_idle_pace(worker, pace);
        pace
    }

    /// The peers whose idle beats share the `--idle-beats` budget: live workers and known
    /// managers.
    pub(super) fn idle_peers(&self) -> usize {
        self.tasks.worker_count() + self.managers.count()
    }

    pub(super) fn finished(&mut self, now: u64, worker: WorkerId, results: Vec<(TaskId, Outcome)>) {
        if let Some(link) = self.links.get_mut(&worker) {
            link.received += results.len() as u64;
            self.unacknowledged.insert(worker);
        }
        for (task, outcome) in results {
            if !self.tasks.finished(now, worker, task, outcome) {
                tracing::debug!(
                    worker,
                    task,
                    "ignored a report for a task not running there"
                );
            }
        }
    }

    /// A worker is gone: closed its connection, fell silent, or its manager saw it exit. Its
    /// tasks are requeued (a planned stop spends no retry).
    /// `close`: close its connection; a worker its manager is stopping keeps it, and closes it
    /// itself as it stops.
    pub(super) fn worker_gone(
        &mut self,
        now: u64,
        worker: WorkerId,
        reason: &str,
        loss: Loss,
        close: bool,
    ) {
        if close {
            self.close_worker(worker);
        }
        self.ending.remove(&worker);
        if !self.tasks.has_worker(worker) {
            return;
        }
        match loss {
            Loss::Stopped => tracing::info!(worker, %reason, "worker stopped"),
            Loss::Exited => tracing::warn!(worker, %reason, "worker lost; requeueing its tasks"),
            Loss::Silent => tracing::warn!(
                worker,
                %reason,
                "worker lost; its tasks run again once its lease has surely run out, unless it comes back first"
            ),
        }
        self.learn_verdicts(now, worker);
        self.tasks.worker_lost(now, worker, reason, loss);
        self.settle_env_waits();
    }

    /// Its manager remembers what its workers answered, before the worker can be gone.
    pub(super) fn learn_verdicts(&mut self, now: u64, worker: WorkerId) {
        if let Some((manager, views)) = self.tasks.manager_worker_views(now, worker) {
            self.managers.learn(&manager, &views);
        }
    }

    /// Workers whose stream ended and that did not close as stopping in time are lost.
    pub(super) fn end_grace(&mut self, now: u64) {
        let over: Vec<WorkerId> = self
            .ending
            .iter()
            .filter(|(_, (until, _))| *until <= now)
            .map(|(worker, _)| *worker)
            .collect();
        for worker in over {
            if let Some((_, reason)) = self.ending.remove(&worker) {
                self.worker_gone(now, worker, &reason, Loss::Silent, true);
            }
        }
    }

    pub(super) fn close_worker(&mut self, worker: WorkerId) {
        self.ending.remove(&worker);
        if self.links.remove(&worker).is_some() {
            self.actions.push_back(Action::CloseWorker { worker });
        }
    }

    pub(super) fn send_worker(&mut self, worker: WorkerId, message: ToWorker) {
        if self.links.contains_key(&worker) {
            self.actions.push_back(Action::ToWorker { worker, message });
        }
    }

    /// Outcomes are durable now: workers may forget them.
    pub(super) fn acknowledge_outcomes(&mut self) {
        // Only the workers that reported since (not every link: this runs after every sync).
        for worker in std::mem::take(&mut self.unacknowledged) {
            let Some(link) = self.links.get_mut(&worker) else {
                continue;
            };
            if link.received > link.acknowledged {
                link.acknowledged = link.received;
                self.actions.push_back(Action::ToWorker {
                    worker,
                    message: ToWorker::Received {
                        count: link.received,
                    },
                });
            }
        }
    }

    /// Send `worker` its tasks, preceded by the specs and components it lacks.
    pub(super) fn dispatch(&mut self, worker: WorkerId, tasks: Vec<TaskId>) {
        let Some(link) = self.links.get_mut(&worker) else {
            return;
        };
        let mut frames = Vec::new();
        let mut assignments = Vec::with_capacity(tasks.len());
        for task in tasks {
            let Some((group, index)) = self.tasks.task_group(task) else {
                continue;
            };
            if link.groups.insert(group.id) {
                if let TaskKind::Wasm { component } = &group.spec.kind
                    && link.components.insert(*component)
                    && let Some(bytes) = self.tasks.components().get(component)
                {
                    frames.push(ToWorker::Component {
                        hash: *component,
                        bytes: bytes.clone(),
                    });
                }
                frames.push(ToWorker::Group {
                    id: group.id,
                    job: group.job,
                    spec: Box::new(group.spec.clone()),
                });
            }
            assignments.push(Assignment {
                task,
                group: group.id,
                index,
                input: group.input(index).map(<[u8]>::to_vec),
            });
        }
        frames.push(ToWorker::Run(assignments));
        for message in frames {
            self.actions.push_back(Action::ToWorker { worker, message });
        }
    }

    /// Forgotten jobs were dropped (with the task components no held group uses any more):
    /// tell the workers that have them.
    pub(super) fn dropped(&mut self, groups: &[GroupId], components: &[ComponentHash]) {
        for (&worker, link) in &mut self.links {
            let groups: Vec<GroupId> = groups
                .iter()
                .copied()
                .filter(|g| link.groups.remove(g))
                .collect();
            let components: Vec<ComponentHash> = components
                .iter()
                .copied()
                .filter(|c| link.components.remove(c))
                .collect();
            if !groups.is_empty() || !components.is_empty() {
                self.actions.push_back(Action::ToWorker {
                    worker,
                    message: ToWorker::Forget { groups, components },
                });
            }
        }
    }

    /// Send `worker` the whole environment set, with the condition components it lacks.
    pub(super) fn send_environments(&mut self, worker: WorkerId) {
        let Some(link) = self.links.get_mut(&worker) else {
            return;
        };
        let defs: Vec<EnvironmentDef> = self.tasks.environments().definitions().cloned().collect();
        let mut components = Vec::new();
        for def in &defs {
            if link.conditions.insert(def.component)
                && let Some(bytes) = self.tasks.components().get(&def.component)
            {
                components.push((def.component, bytes.clone()));
            }
        }
        self.actions.push_back(Action::ToWorker {
            worker,
            message: ToWorker::Environments { defs, components },
        });
    }

    /// Every live worker is sent the environment set anew.
    pub(super) fn send_environments_to_all(&mut self) {
        for worker in self.tasks.worker_ids() {
            self.send_environments(worker);
        }
    }

    /// Turn the task book's effects ([`tasks::Effect`]) into the one action queue the shell
    /// sees: frames, journal records (dispatches journaled before they are sent, finals
    /// batched into one record) and progress answers.
    pub(super) fn flush(&mut self, now: u64) {
        let mut touched = std::collections::BTreeSet::new();
        let mut watched: BTreeMap<JobId, Vec<TaskResult>> = BTreeMap::new();
        let mut finals = Vec::new();
        let mut dispatches = Vec::new();
        for effect in self.tasks.take_effects() {
            match effect {
                // Sent below, once the journal has them.
                tasks::Effect::Dispatch { worker, tasks } => dispatches.push((worker, tasks)),
                tasks::Effect::Cancel { worker, tasks }
                | tasks::Effect::TakeBack { worker, tasks } => {
                    self.send_worker(worker, ToWorker::Cancel(tasks))
                }
                tasks::Effect::Revoke {
                    worker,
                    tasks,
                    count,
                } => self.send_worker(worker, ToWorker::Revoke { tasks, count }),
                tasks::Effect::Disconnect { worker, reason } => {
                    tracing::warn!(worker, %reason, "worker lost");
                    self.close_worker(worker);
                    // An `env register --wait` no longer waits for it.
                    self.settle_env_waits();
                }
                tasks::Effect::Dropped { groups, components } => self.dropped(&groups, &components),
                tasks::Effect::Forgot { job } => {
                    tracing::info!(job, "job forgotten (--forget-after)");
                    self.journal(Record::Forget { job });
                }
                tasks::Effect::Cut(cuts) => self.journal(Record::Cut(cuts)),
                tasks::Effect::Finished { job, task } => {
                    touched.insert(job);
                    if self.watchers.contains_key(&job)
                        && let Some(result) = self.tasks.result(task)
                    {
                        watched.entry(job).or_default().push(result);
                    }
                    if self.config.journal
                        && let Some((state, outcome, attempts)) = self.tasks.final_record(task)
                    {
                        finals.push((task, state, outcome, attempts));
                    }
                }
            }
        }
        // What is handed to workers is written before it is sent (handed to the OS at once: a
        // process killed at any point keeps it), and the shell sends it only once the round
        // is synced (a machine that loses power keeps it too), so a restarted scheduler fences
        // exactly the tasks that may still run somewhere.
        if self.config.journal && !dispatches.is_empty() {
            let started = dispatches
                .iter()
                .flat_map(|(_, tasks): &(WorkerId, Vec<TaskId>)| tasks.iter())
                .map(|&t| (t, self.tasks.attempts(t)))
                .collect();
            self.actions.push_back(Action::Journal {
                record: Record::Started(started),
                write_through: true,
            });
        }
        for (worker, tasks) in dispatches {
            self.dispatch(worker, tasks);
        }
        if !finals.is_empty() {
            self.journal(Record::Final(finals));
        }
        // Watchers get each result now (not after the journal's sync: a scheduler killed
        // before it may run a task again, and a watcher then sees its result twice).
        for (job, results) in watched {
            let watchers = self.watchers.get(&job).cloned().unwrap_or_default();
            for client in watchers {
                self.send_chunks(client, results.clone());
            }
        }
        for job in touched {
            if let Ok(counts) = self.tasks.job_counts(job)
                && counts.finished() == counts.total()
                && let Some(watchers) = self.watchers.remove(&job)
            {
                let counts = counts.clone();
                for client in watchers {
                    self.reply(client, Response::Done(counts.clone()), true);
                }
            }
            if self.waiters.contains_key(&job) {
                self.progress_due.insert(job);
            }
        }
        self.send_progress(now);
    }

    /// Tell the clients waiting for the jobs in `progress_due` how far they are: a job that is
    /// done at once, the others at most once per [`PROGRESS_EVERY_MS`] (a frame per finished
    /// batch would cost the scheduler as much as the batch).
    pub(super) fn send_progress(&mut self, now: u64) {
        let quiet = now < self.progress_quiet_until;
        let mut sent = false;
        for job in std::mem::take(&mut self.progress_due) {
            let Ok(counts) = self.tasks.job_counts(job).cloned() else {
                continue;
            };
            let done = counts.finished() == counts.total();
            if quiet && !done {
                self.progress_due.insert(job);
                continue;
            }
            let waiters = match done {
                true => self.waiters.remove(&job).unwrap_or_default(),
                false => self.waiters.get(&job).cloned().unwrap_or_default(),
            };
            sent |= !done && !waiters.is_empty();
            for client in waiters {
                let response = match done {
                    true => Response::Done(counts.clone()),
                    false => Response::Progress(counts.clone()),
                };
                self.reply(client, response, done);
            }
        }
        if sent {
            self.progress_quiet_until = now + super::PROGRESS_EVERY_MS;
        }
    }
}
