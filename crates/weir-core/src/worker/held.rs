//! The tasks a worker holds: handed over, waiting for a slot in the order they came (and given
//! back on a revoke until they start), running; their starts held for a renewal's answer when
//! the lease is too short; their ends judged against the lease; all of them given up when it
//! runs out.

use super::{Action, End, Phase, WorkerCore, canceled};
use weir_proto::{Assignment, FromWorker, Outcome, TaskId};

/// A task held here: handed over, running or waiting for a slot.
#[derive(Debug)]
pub(super) struct Held {
    pub run: u64,
    /// The lease's lapses when it was handed over: a run a lapse came during is not valid.
    pub lapses: u64,
    /// `Some` while it waits for a slot.
    pub waiting: Option<Assignment>,
}

impl WorkerCore {
    /// Tasks handed over: held, and started in turn as slots free.
    pub(super) fn hand_over(&mut self, now: u64, assignments: Vec<Assignment>) {
        // Busy from now: the next beat comes at the busy pace, not the idle one, and at once if
        // the lease (renewed once an idle beat, or run out between beats of a slower pace)
        // ends within two busy beats: what starts here then waits for the answer to that
        // renewal (or any that leaves two busy beats), and has a lease of its own (started on
        // the end of the old one, it would be killed if the answer came a moment too late, and
        // the worker would register again).
        if self.holds_nothing() {
            let short = (self.lease.as_ref()).is_some_and(|l| self.too_short(l.until(), now));
            let next = match short {
                true => {
                    self.starts_await = Some(now);
                    now
                }
                false => now.saturating_add(self.beat_every),
            };
            self.next_beat = self.next_beat.min(next);
        }
        // Handed over while an idle worker's lease has run out, they wait: the renewal that
        // ends the lapse stamps every waiting task with its count (`lease_answered`).
        for assignment in assignments {
            self.runs += 1;
            let task = assignment.task;
            let held = Held {
                run: self.runs,
                lapses: self.lapses,
                waiting: Some(assignment),
            };
            // Handed over again while an earlier run still ends: that run's end is
            // not this one's outcome, and its slot is taken until then.
            match self.held.insert(task, held) {
                Some(old) if old.waiting.is_none() => self.superseded.push((task, old.run)),
                Some(old) => self.forget(task, &old),
                None => {}
            }
            self.queue.push_back(task);
        }
        self.pump(now);
    }

    /// The scheduler answered renewal `seq`, asking for idle beats every `idle_beat_ms` from now
    /// on: the lease runs on (or, run out with tasks running, everything is given up), and
    /// starts that waited for it go.
    pub(super) fn lease_answered(&mut self, now: u64, seq: u64, idle_beat_ms: u64) {
        // The pace the cluster's size asks now (it slows as the cluster grows). A shorter one
        // counts from now for the beat already set: the scheduler's answers and this worker's
        // allowance for its silence (`quiet_allowance`) follow it.
        self.idle_beat_every = idle_beat_ms.max(self.beat_every);
        if self.holds_nothing() {
            self.next_beat = self.next_beat.min(now.saturating_add(self.idle_beat_every));
        }
        let lapsed = self.expired(now);
        if lapsed && self.busy > 0 {
            // It ran out before this answer came: the guard killed what ran, and the
            // scheduler still counts those tasks here. Give them up and register again.
            self.give_up();
            return self.end(End::LeaseExpired);
        }
        // Nothing ran when it ran out (an idle worker's renewal answered late): the lapse cost
        // nothing, and tasks handed over since start under this grant. The lapse is counted as
        // the guard counts it when told of this renewal (it ran out before), so the two counts
        // stay in step; a grant that ends before now (an answer to a renewal sent over a lease
        // ago) renews nothing and is not told.
        if let Some(lease) = &mut self.lease
            && let Some(until) = lease.answered(seq)
            && until > now
        {
            let sent = until.saturating_sub(lease.length());
            if lapsed {
                self.lapses += 1;
                // What waits has not run: it starts under this grant, and belongs to it
                // (also what waited from before the lapse).
                for held in self.held.values_mut().filter(|h| h.waiting.is_some()) {
                    held.lapses = self.lapses;
                }
            }
            self.actions.push_back(Action::LeaseUntil(until));
            // What the starts wait for: a grant for a renewal sent since the hand-over, or
            // one that is not too short (as a lease renewed in time is not).
            let fresh = self
                .starts_await
                .is_some_and(|from| sent >= from || !self.too_short(until, now));
            if fresh {
                self.starts_await = None;
            }
            if lapsed || fresh {
                self.pump(now);
            }
        }
    }

    /// Whether a lease to `until` is too short to start on at `now`: under two busy beats left,
    /// the renewal it needs may come a moment too late (see `hand_over`).
    fn too_short(&self, until: u64, now: u64) -> bool {
        until.saturating_sub(now) < self.beat_every.saturating_mul(2)
    }

    /// Canceled by the scheduler (or a client).
    pub(super) fn cancel(&mut self, now: u64, tasks: Vec<TaskId>) {
        for task in tasks {
            match self.held.get(&task) {
                // Not started: it ends now, unrun, and says so.
                Some(Held {
                    run,
                    waiting: Some(_),
                    ..
                }) => {
                    let run = *run;
                    self.task_ended(now, task, run, canceled(), now);
                }
                // It reports `canceled` once it has really stopped.
                Some(Held { run, .. }) => {
                    let run = *run;
                    self.actions.push_back(Action::Cancel { task, run });
                }
                None => {}
            }
        }
    }

    /// Taken back: up to `count` of `tasks` that have not started.
    pub(super) fn revoke(&mut self, tasks: &[TaskId], count: u32) {
        // Newest first: the ones furthest from starting; only ones that wait.
        let mut given = Vec::new();
        for task in tasks.iter().rev() {
            if given.len() >= count as usize {
                break;
            }
            if self.held.get(task).is_some_and(|h| h.waiting.is_some()) {
                self.held.remove(task);
                self.queue.retain(|t| t != task);
                given.push(*task);
            }
        }
        self.send(FromWorker::Revoked(given));
    }

    /// Start waiting tasks, in turn, while slots are free and the lease holds (their starts are
    /// reported with the next outcomes, or claimed by the next registration).
    pub(super) fn pump(&mut self, now: u64) {
        // Between sessions too: the lease is what allows a start, not the connection.
        if self.expired(now) || self.starts_await.is_some() {
            return;
        }
        while self.busy < self.config.info.slots {
            let Some(task) = self.queue.pop_front() else {
                return;
            };
            let Some(held) = self.held.get_mut(&task) else {
                continue;
            };
            let Some(assignment) = held.waiting.take() else {
                continue;
            };
            self.busy += 1;
            self.reports.started(task);
            let run = held.run;
            self.actions.push_back(Action::Start { run, assignment });
        }
    }

    pub(super) fn task_ended(
        &mut self,
        now: u64,
        task: TaskId,
        run: u64,
        outcome: Outcome,
        at: u64,
    ) {
        let Some(held) = self.held.get(&task).filter(|h| h.run == run) else {
            // An earlier run of a task handed over again since, or one given up: not its
            // outcome (a given-up task runs elsewhere). A superseded run frees its slot.
            if let Some(i) = self.superseded.iter().position(|s| *s == (task, run)) {
                self.superseded.swap_remove(i);
                self.busy = self.busy.saturating_sub(1);
                self.pump(now);
            }
            return;
        };
        // A task canceled before it started never ran: its outcome holds whatever the lease.
        let valid = held.waiting.is_some() || self.in_lease(held.lapses, &outcome, at);
        if let Some(held) = self.held.remove(&task) {
            self.forget(task, &held);
        }
        if !matches!(self.phase, Phase::On { .. }) {
            // Claimed and reported by the next registration; the next held task starts.
            if valid {
                self.reports.keep(task, outcome);
            }
            return self.pump(now);
        }
        if !valid {
            // The lease lapsed during the run: the scheduler counts tasks here that the guard
            // killed. Give up the rest and register again, which says so.
            self.give_up();
            return self.end(End::LeaseExpired);
        }
        self.pump(now);
        let waiting = self.queue.len();
        let now_due = self
            .reports
            .finished(now, task, outcome, waiting, &self.config);
        self.report(now_due);
    }

    /// Whether a run handed over at lapse count `lapses` that ended at `at` with `outcome`
    /// counts as ended under the lease: the lease held from its hand-over to its end, or the run
    /// ended by itself within [`crate::lease::KILL_MARGIN`] after the lease's end, before
    /// the guard's kill reached it (it is over before the scheduler's fence ends).
    pub(super) fn in_lease(&self, lapses: u64, outcome: &Outcome, at: u64) -> bool {
        let Some(lease) = &self.lease else {
            return true;
        };
        let by_itself = matches!(
            outcome,
            Outcome::Exited { code: Some(_), .. }
                | Outcome::Returned { .. }
                | Outcome::Function { .. }
        );
        let margin = crate::lease::KILL_MARGIN.as_millis() as u64;
        let in_time = at < lease.until() || (by_itself && at < lease.until() + margin);
        in_time && lapses == self.lapses
    }

    pub(super) fn give_up_if_expired(&mut self, now: u64) {
        if self.expired(now) {
            self.give_up();
        }
    }

    /// Past the lease, the scheduler runs this worker's tasks elsewhere: give up every held
    /// task — stop what runs, start nothing that waits — and never report them.
    pub(super) fn give_up(&mut self) {
        let mut held: Vec<(TaskId, Held)> = self.held.drain().collect();
        held.sort_by_key(|(task, _)| *task);
        for (task, run) in std::mem::take(&mut self.superseded) {
            self.busy = self.busy.saturating_sub(1);
            self.actions.push_back(Action::GiveUp { task, run });
        }
        for (task, held) in held {
            self.forget(task, &held);
            if held.waiting.is_none() {
                let run = held.run;
                self.actions.push_back(Action::GiveUp { task, run });
            }
        }
        self.queue.clear();
    }

    /// A held task is no longer held (its slot is free if it ran).
    pub(super) fn forget(&mut self, task: TaskId, held: &Held) {
        match held.waiting {
            Some(_) => self.queue.retain(|t| *t != task),
            None => self.busy = self.busy.saturating_sub(1),
        }
    }
}
