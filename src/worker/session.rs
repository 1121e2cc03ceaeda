//! One session of a worker with the scheduler: register (claiming what runs here), then run what
//! it assigns, report outcomes in batches and verdicts as they change, until it goes away or a
//! signal stops the worker.

use std::sync::{Arc, Mutex};
use std::time::Duration;

use tokio::sync::mpsc;

use super::lease::Lease;
use super::{Done, Group, Worker, WorkerError, env, run};
use crate::net::{self, AccessFile, Link, NetError, Outbox, SessionEnd, Signals};
use crate::proto::{FromWorker, Outcome, Role, TaskId, ToWorker};

/// The longest a finished task's outcome is held back to go in one frame with others (only
/// while tasks handed over ahead wait here, so the worker is not idle for it, and the last
/// outcome of a backlog goes at once). Each frame costs the scheduler tens of µs of wake-up,
/// UDP and the acknowledgement that answers it on a busy machine; 200 ms lets a 1-slot worker
/// running ~35 ms tasks send six outcomes a frame instead of one (BENCHMARKS.md, "Fewer
/// wake-ups per task" and "Bigger batches").
pub(super) const HOLD_REPORTS: Duration = Duration::from_millis(200);

impl Worker {
    /// One session: register (claiming the tasks still running here and the outcomes not yet
    /// sent), then run what the scheduler assigns until it goes away or a signal stops the
    /// worker. Returns why it ended. Tasks go on across sessions; a signal stops them.
    pub async fn session(&mut self, access: &AccessFile) -> Result<SessionEnd, WorkerError> {
        let (endpoint, connection, send, recv) =
            net::connect(access, Role::Worker, self.settings.idle_timeout).await?;
        if super::guard::gone() {
            // Found between sessions (the SIGTERM raised then had no listener): stop now, and
            // report none of the runs that could not start.
            tracing::error!("the worker's guard process is gone: stopping this worker");
            self.shutdown().await;
            net::close_stopping(&endpoint, &connection, "worker stopping").await;
            return Ok(SessionEnd::Stopped(net::Signal::Term));
        }
        self.give_up_if_expired();
        // Reported before and never acknowledged (the scheduler may have died before it kept
        // them): reported again, after the ones not sent at all.
        let mut unsent: Vec<(TaskId, Outcome)> = self.unacknowledged.drain(..).collect();
        self.reported = 0;
        self.acknowledged = 0;
        // Finished is finished: what ended under the lease is claimed and reported (the
        // scheduler takes it unless it handed the task to another worker since).
        while let Ok(done) = self.finished.try_recv() {
            if self.ended(&done) && done.in_lease {
                unsent.push((done.task, done.outcome));
            }
        }
        let mut info = self.settings.info.clone();
        info.local_environments = self
            .settings
            .local_environments
            .iter()
            .map(|e| e.name.clone())
            .collect();
        info.running = self.running.keys().copied().collect();
        info.finished = unsent.iter().map(|(task, _)| *task).collect();
        info.ends_in_ms = self.settings.ends_at.map(|end| {
            let left = end.saturating_duration_since(std::time::Instant::now());
            u64::try_from(left.as_millis()).unwrap_or(u64::MAX)
        });
        let (mut link, outgoing) = Link::<ToWorker>::open(send, recv);
        // The registration is the first request the lease is granted for: it runs from here.
        let asked = std::time::Instant::now();
        let _ = outgoing.send(FromWorker::Register(info));
        let (id, lease_ms) = match link.next().await {
            Ok(ToWorker::Registered { id, lease_ms }) => (id, lease_ms),
            Err(end) => {
                // Refused (its name is taken by a live worker), not lost: tried again like an
                // unreachable scheduler (the other may be a dead connection not timed out yet).
                // The stream may end before the close that says why arrives: wait for it.
                let _ = tokio::time::timeout(Duration::from_secs(2), connection.closed()).await;
                if let Some(quinn::ConnectionError::ApplicationClosed(close)) =
                    connection.close_reason()
                    && close.error_code == net::CLOSE_REFUSED
                {
                    let reason = String::from_utf8_lossy(&close.reason).into_owned();
                    return Err(NetError::Refused(reason).into());
                }
                return Err(NetError::from(end).into());
            }
            Ok(other) => {
                let refused = format!("expected Registered, got {other:?}");
                return Err(NetError::Refused(refused).into());
            }
        };
        // The previous lease ran out while registering: the guard killed the tasks claimed as
        // running, which the scheduler has just adopted. Give them up, and register again at
        // once (the same process replacing this connection), claiming only what finished.
        let lapsed = self.lease_expired() && !self.running.is_empty();
        self.give_up_if_expired();
        self.lease = (lease_ms > 0).then(|| Lease::granted(Duration::from_millis(lease_ms), asked));
        if let Some(lease) = &self.lease {
            super::guard::renew_until(lease.until());
        }
        tracing::info!(worker = id, address = %access.address, claimed = self.running.len() + unsent.len(), "registered");

        // What this worker already knows, for the scheduler that just registered it.
        let verdicts = self
            .environments
            .lock()
            .map(|e| e.current())
            .unwrap_or_default();
        if !verdicts.is_empty() {
            let _ = outgoing.send(FromWorker::Verdicts(verdicts));
        }
        if !unsent.is_empty() {
            self.report(&outgoing, unsent);
        }
        let (env_updates, env_inbox) = mpsc::unbounded_channel();
        let env_task = tokio::spawn(evaluate_environments(
            self.environments.clone(),
            env_inbox,
            outgoing.clone(),
            self.settings.env_recheck,
        ));
        // Each heartbeat asks for the lease to be renewed, at least four times within its
        // length whatever the heartbeat interval: a few answers may be late or lost before it
        // runs out.
        let every = match &self.lease {
            Some(lease) => self.settings.heartbeat_interval.min(lease.length() / 4),
            None => self.settings.heartbeat_interval,
        };
        let mut heartbeat = tokio::time::interval(every.max(Duration::from_millis(10)));
        let mut signals = Signals::term().map_err(NetError::from)?;
        // Outcomes of tasks a signal ended that this worker did not send, held for a moment: a
        // cluster engine that stops the worker (Slurm's scancel, Kubernetes, a user's `kill` of
        // the whole job) signals its tasks too, and then they are not at fault. If the worker's
        // own signal follows within the grace, they are not reported, and the scheduler
        // requeues them without spending a retry; otherwise they are reported as they ended.
        let mut held: Vec<(TaskId, Outcome)> = Vec::new();
        let grace = tokio::time::sleep(Duration::ZERO);
        tokio::pin!(grace);
        // Outcomes held back for a moment to go in one frame (see HOLD_REPORTS).
        let mut batched: Vec<(TaskId, Outcome)> = Vec::new();
        let flush = tokio::time::sleep(Duration::ZERO);
        tokio::pin!(flush);
        let leave = self.settings.ends_at.map(tokio::time::Instant::from_std);
        let end = loop {
            if lapsed {
                break SessionEnd::LeaseExpired;
            }
            // Renewed (or not) by the scheduler's answers only; checked again when it is due.
            let lease_due = self
                .lease
                .as_ref()
                .map(|l| tokio::time::Instant::from_std(l.until()));
            tokio::select! {
                () = async { match lease_due {
                    Some(at) => tokio::time::sleep_until(at).await,
                    None => std::future::pending().await,
                } } => {
                    if self.lease_expired() {
                        // The scheduler runs these tasks elsewhere once its fence is over:
                        // stop them now, and register again with what finished in time.
                        self.give_up_if_expired();
                        break SessionEnd::LeaseExpired;
                    }
                }
                signal = signals.recv() => break SessionEnd::Stopped(signal),
                () = async { match leave {
                    Some(at) => tokio::time::sleep_until(at).await,
                    None => std::future::pending().await,
                } } => {
                    tracing::info!(running = self.running.len(), "the allocation ends: leaving (what still runs is requeued)");
                    break SessionEnd::Stopped(net::Signal::EndOfAllocation);
                }
                () = &mut grace, if !held.is_empty() => {
                    let batch = std::mem::take(&mut held);
                    self.report(&outgoing, batch);
                }
                // A writer that ended refuses this; `link.next()` says why it ended.
                _ = heartbeat.tick() => {
                    // Starts not reported with outcomes yet (a task that got a slot just after
                    // the last report) go now.
                    self.report(&outgoing, Vec::new());
                    let beat = match &mut self.lease {
                        Some(lease) => FromWorker::Renew { seq: lease.ask(std::time::Instant::now()) },
                        None => FromWorker::Heartbeat,
                    };
                    let _ = outgoing.send(beat);
                }
                Some(first) = self.finished.recv() => {
                    let mut batch = Vec::new();
                    let mut next = Some(first);
                    let mut outside_lease = false;
                    while let Some(done) = next {
                        let current = self.ended(&done);
                        let Done { task, outcome, in_lease, .. } = done;
                        if !current {
                            // An earlier run of a task handed over again since: not its outcome.
                        } else if !in_lease {
                            // Ended after the lease ran out: given up, it runs elsewhere.
                            outside_lease = true;
                        } else if matches!(outcome, Outcome::Exited { code: None, .. }) {
                            if held.is_empty() {
                                let until = tokio::time::Instant::now() + self.settings.signal_grace;
                                grace.as_mut().reset(until);
                            }
                            held.push((task, outcome));
                        } else {
                            batch.push((task, outcome));
                        }
                        next = if batch.len() < 4096 { self.finished.try_recv().ok() } else { None };
                    }
                    if !batch.is_empty() {
                        if batched.is_empty() {
                            flush.as_mut().reset(tokio::time::Instant::now() + HOLD_REPORTS);
                        }
                        batched.append(&mut batch);
                        // At once when nothing waits here to start next; otherwise once as
                        // many have finished as still wait, so the scheduler refills in one
                        // frame (or when HOLD_REPORTS is up).
                        let waiting = self.waiting();
                        if waiting == 0 || batched.len() >= waiting {
                            self.report(&outgoing, std::mem::take(&mut batched));
                        }
                    }
                    if outside_lease {
                        // The lease lapsed during a run: the scheduler counts tasks here that
                        // the guard killed. Give up the rest and register again, which says so.
                        self.give_up();
                        break SessionEnd::LeaseExpired;
                    }
                }
                () = &mut flush, if !batched.is_empty() => {
                    self.report(&outgoing, std::mem::take(&mut batched));
                }
                message = link.next() => match message {
                    Ok(message) => {
                        if let Some(end) = self.handle(message, &outgoing, &env_updates).await {
                            break end;
                        }
                    }
                    Err(end) => break SessionEnd::Link(end),
                },
            }
        };
        if !batched.is_empty() {
            // Sent if the link still can; kept to be reported again next session either way.
            self.report(&outgoing, batched);
        }
        env_task.abort();
        // Stop reporting (the link's reader and writer end with it).
        drop(link);
        match &end {
            SessionEnd::Stopped(_) if !held.is_empty() => {
                tracing::info!(
                    tasks = held.len(),
                    "tasks ended by the signal that stops this worker: requeued, not failed"
                );
            }
            SessionEnd::Stopped(_) => {}
            // Lost the scheduler meanwhile: reported in the next session.
            _ => self.unacknowledged.extend(held),
        }
        if let SessionEnd::Stopped(_) = end {
            // Stop every task (a command's group is killed and reaped, a wasm instance
            // interrupted), then close with the stopping code: the scheduler requeues them,
            // spending no retry, once they are dead.
            self.shutdown().await;
            net::close_stopping(&endpoint, &connection, "worker stopping").await;
        } else {
            // Lost the scheduler: the tasks go on, to be claimed when this worker registers
            // again, within the lease (the guard process stops them if it runs out).
            connection.close(0u32.into(), b"worker reconnecting");
        }
        Ok(end)
    }

    /// One message from the scheduler; `Some(end)` ends the session.
    async fn handle(
        &mut self,
        message: ToWorker,
        outgoing: &Outbox<FromWorker>,
        env_updates: &mpsc::UnboundedSender<EnvUpdate>,
    ) -> Option<SessionEnd> {
        match message {
            ToWorker::Group { id, job, spec } => {
                self.groups.insert(id, Arc::new(Group { job, spec }));
            }
            ToWorker::Component { hash, bytes } => self.runner.add_component(hash, bytes).await,
            ToWorker::Forget { groups, components } => {
                for id in groups {
                    self.groups.remove(&id);
                }
                self.runner.forget_components(&components).await;
            }
            ToWorker::Run(assignments) if self.settings.no_execute => {
                for assignment in assignments {
                    let output = Outcome::Returned { output: Vec::new() };
                    let lapses = super::guard::lapses();
                    let _ = self
                        .done
                        .send(Done::now(assignment.task, output, lapses, 0));
                }
            }
            ToWorker::Run(assignments) => {
                for assignment in assignments {
                    let task = assignment.task;
                    let lapses = super::guard::lapses();
                    let Some(group) = self.groups.get(&assignment.group).cloned() else {
                        let message = format!("unknown group {}", assignment.group);
                        let _ =
                            self.done
                                .send(Done::now(task, Outcome::Error { message }, lapses, 0));
                        continue;
                    };
                    let runner = self.runner.clone();
                    let done = self.done.clone();
                    let slots = self.slots.clone();
                    let start = self.start.clone();
                    self.runs += 1;
                    let cancel = Arc::new(run::Cancel::handed_over(lapses, self.runs));
                    let stop = cancel.clone();
                    let span = tracing::debug_span!("task", task, group = assignment.group);
                    // In turn: after the task handed over before this one has its slot.
                    let (my_turn, next_turn) = tokio::sync::oneshot::channel::<()>();
                    let ahead = self.queue_tail.replace(next_turn);
                    let handle = tokio::spawn(tracing::Instrument::instrument(
                        async move {
                            // Handed over ahead of a free slot: wait for one, in turn.
                            // Canceled meanwhile, it reports so unrun; given back, it never
                            // runs. Gone without a slot, it lets the next one ask (dropping
                            // `my_turn` resolves the next one's wait).
                            let slot = tokio::select! {
                                biased;
                                () = stop.stopped() => None,
                                slot = async {
                                    if let Some(ahead) = ahead {
                                        let _ = ahead.await;
                                    }
                                    slots.acquire_owned().await
                                } => slot.ok(),
                            };
                            let _ = my_turn.send(());
                            // Past the lease (or after a lapse) the scheduler may be running it
                            // elsewhere: it never starts, and says so (an outcome outside the
                            // lease, which the session drops, giving the rest up).
                            if super::guard::lost_since(stop.lapses) {
                                let _ = done.send(Done::of(&stop, task, run::canceled()));
                                return;
                            }
                            if !stop.start() {
                                return;
                            }
                            let _ = start.send(task);
                            let outcome = match slot {
                                Some(_slot) => runner.run(&group, assignment, &stop).await,
                                None => run::canceled(),
                            };
                            let _ = done.send(Done::of(&stop, task, outcome));
                        },
                        span,
                    ));
                    self.running.insert(task, (handle.abort_handle(), cancel));
                }
            }
            ToWorker::Cancel(tasks) => {
                // The task reports `canceled` once it has really stopped.
                for task in tasks {
                    if let Some((_, cancel)) = self.running.get(&task) {
                        cancel.cancel();
                    }
                }
            }
            ToWorker::Environments { defs, components } => {
                let _ = env_updates.send((defs, components));
            }
            ToWorker::Received { count } => {
                let durable = count.min(self.reported).saturating_sub(self.acknowledged);
                for _ in 0..durable {
                    self.unacknowledged.pop_front();
                }
                self.acknowledged += durable;
            }
            ToWorker::Registered { .. } => return Some(SessionEnd::Protocol("registered twice")),
            ToWorker::Revoke { tasks, count } => {
                // Newest first: the ones furthest from starting.
                let mut given = Vec::new();
                for task in tasks.iter().rev() {
                    if given.len() >= count as usize {
                        break;
                    }
                    if let Some((handle, control)) = self.running.get(task)
                        && control.revoke()
                    {
                        handle.abort();
                        self.running.remove(task);
                        given.push(*task);
                    }
                }
                tracing::debug!(asked = count, given = given.len(), "tasks taken back");
                let _ = outgoing.send(FromWorker::Revoked(given));
            }
            ToWorker::Lease { seq } => {
                if self.lease_expired() {
                    // It ran out before this answer came (the worker was stopped, or the
                    // answers were late): the guard killed what ran, and the scheduler still
                    // counts those tasks here. Give them up and register again, which tells it.
                    self.give_up_if_expired();
                    return Some(SessionEnd::LeaseExpired);
                }
                if let Some(until) = self.lease.as_mut().and_then(|l| l.answered(seq)) {
                    super::guard::renew_until(until);
                }
            }
            ToWorker::Leave { reason } => {
                tracing::warn!(%reason, "the scheduler tells this worker to leave");
                return Some(SessionEnd::Stopped(net::Signal::Dismissed));
            }
        }
        None
    }
}

type EnvUpdate = (
    Vec<crate::proto::EnvironmentDef>,
    Vec<(crate::proto::ComponentHash, Arc<[u8]>)>,
);

/// Evaluate at start, on every new set from the scheduler, and every `recheck`; report changes.
async fn evaluate_environments(
    environments: Arc<Mutex<env::Environments>>,
    mut updates: mpsc::UnboundedReceiver<EnvUpdate>,
    outgoing: Outbox<FromWorker>,
    recheck: Duration,
) {
    let mut ticker = tokio::time::interval(recheck);
    ticker.tick().await; // the first tick is immediate: the evaluation below covers it
    let mut pending: Option<EnvUpdate> = None;
    let mut full = false;
    loop {
        let environments = environments.clone();
        let update = pending.take();
        let evaluated = tokio::task::spawn_blocking(move || {
            let Ok(mut environments) = environments.lock() else {
                return env::Evaluated::default();
            };
            if let Some((defs, components)) = update {
                environments.set_remote(defs, components);
            }
            environments.evaluate(full)
        })
        .await
        .unwrap_or_default();
        // Loads first: a `register --wait` is answered as soon as the verdicts are in.
        if !evaluated.loads.is_empty() && outgoing.send(FromWorker::Loads(evaluated.loads)).is_err()
        {
            return;
        }
        if !evaluated.changes.is_empty()
            && outgoing
                .send(FromWorker::Verdicts(evaluated.changes))
                .is_err()
        {
            return;
        }
        tokio::select! {
            update = updates.recv() => match update {
                Some(update) => { pending = Some(update); full = false; }
                None => return,
            },
            _ = ticker.tick() => full = true,
        }
    }
}
