//! The worker's core, in the sans-IO style of the scheduler's ([`crate::scheduler`]): one
//! entry point, [`WorkerCore::handle`]`(now, Input)`, what the shell must do next as [`Action`]s
//! ([`WorkerCore::poll_action`]), and when it wants to be woken ([`WorkerCore::poll_timeout`]).
//!
//! It owns what a worker decides across and within its sessions with the scheduler:
//! - the lease (`lease.rs`): renewals asked with sequence numbers, granted from when they were
//!   sent; past it, every held task is given up and the worker registers again;
//! - the tasks held here: which run, which wait ahead of a free slot (started in the order they
//!   were handed over, given back on a revoke until they start), and which hand-over each run is;
//! - the claims a registration makes (what runs here, outcomes not acknowledged as durable);
//! - the outcomes (`report.rs`): batched for a moment while held tasks wait ([`HOLD_REPORTS_MS`]),
//!   those of tasks a signal ended held for the worker's own stop signal, and kept until the
//!   scheduler acknowledges them, to be reported again in the next session otherwise.
//!
//! The shell (`weir::worker`) owns the connection, the processes and sandboxes that run tasks,
//! the guard process, the environment conditions and the signals: it turns frames, task ends and
//! timers into inputs, and actions into frames, runs, kills and the guard's deadline. Times are
//! milliseconds on the worker's own clock.

mod held;
mod lease;
mod report;
#[cfg(test)]
mod tests;

use crate::hash::HashMap;
use std::collections::VecDeque;

use held::Held;
pub use lease::Lease;
use weir_proto::{Assignment, FromWorker, Outcome, TaskId, ToWorker, WorkerId, WorkerRegistration};

/// The longest a finished task's outcome is held back to go in one frame with others (only
/// while tasks handed over ahead wait here, so the worker is not idle for it, and the last
/// outcome of a backlog goes at once). Each frame costs the scheduler tens of µs of wake-up,
/// UDP and the acknowledgement that answers it on a busy machine; 200 ms lets a 1-slot worker
/// running ~35 ms tasks send six outcomes a frame instead of one (BENCHMARKS.md, "Fewer
/// wake-ups per task" and "Bigger batches").
pub const HOLD_REPORTS_MS: u64 = 200;

/// The worker's settings (from its flags).
#[derive(Clone, Debug)]
pub struct Config {
    /// What it registers as; `running`, `finished` and `ends_in_ms` are filled in by the core.
    pub info: WorkerRegistration,
    pub heartbeat_ms: u64,
    /// How long the outcome of a task a signal ended waits for the worker's own stop signal.
    pub signal_grace_ms: u64,
    /// When it leaves by itself (its allocation ends), on its clock.
    pub ends_at: Option<u64>,
}

/// Something that happened, for the core to take in.
#[derive(Debug)]
pub enum Input {
    /// A session's connection is up: the core registers ([`Action::Send`] of `Register`).
    Connected,
    /// A frame from the scheduler. The core acts on the ones about tasks, outcomes, the lease
    /// and the session; the shell keeps specs, components and environments itself.
    Frame(ToWorker),
    /// Run `run` of `task` ended at `at` (its outcome may be read later).
    TaskEnded {
        task: TaskId,
        run: u64,
        outcome: Outcome,
        at: u64,
    },
    /// The time [`WorkerCore::poll_timeout`] named has come.
    Timeout,
    /// The session is over (its link broke, or [`Action::End`] ended it); `stopping`: the worker
    /// stops (a signal), and every task with it.
    SessionEnded { stopping: bool },
    /// The guard's count of lapses, when it is ahead of [`WorkerCore::lapses`]: a renewal reached
    /// it after the lease had run out there (the lease ended between the core's `handle` and the
    /// shell's performing [`Action::LeaseUntil`]), so it may have killed the runs. The guard is
    /// what kills: its count is the one that holds, and runs handed over before count as ended
    /// out of the lease.
    Lapsed { lapses: u64 },
}

/// Why the core ends a session.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum End {
    /// The lease ran out: what was held is given up; register again with what finished.
    LeaseExpired,
    /// The scheduler told it to leave.
    Dismissed,
    /// Its allocation ends: it leaves, like on a stop signal.
    EndOfAllocation,
    /// The scheduler broke the protocol.
    Protocol(&'static str),
}

/// What the shell must do, in this order.
#[derive(Debug)]
pub enum Action {
    Send(FromWorker),
    /// Start run `run` of a task (a slot is free, the lease holds): report its end with
    /// [`Input::TaskEnded`] and that `run`.
    Start {
        run: u64,
        assignment: Assignment,
    },
    /// Stop this run (canceled): it reports `canceled` once it has really stopped.
    Cancel {
        task: TaskId,
        run: u64,
    },
    /// Stop this run and forget it (the lease ran out: it runs elsewhere); its end is ignored.
    GiveUp {
        task: TaskId,
        run: u64,
    },
    /// The lease now runs until then: tell the guard process.
    LeaseUntil(u64),
    /// End the session.
    End(End),
}

#[derive(Debug, PartialEq, Eq)]
enum Phase {
    /// No session.
    Off,
    /// Registered at `asked`, not answered yet; `claimed_running`: the registration claimed
    /// tasks as running (which the scheduler adopts), whatever has ended since.
    Registering {
        asked: u64,
        claimed_running: bool,
    },
    On {
        id: WorkerId,
    },
}

/// A worker's sans-IO core (as quinn-proto's `Connection` is quinn's): its lease, claims,
/// held-ahead tasks, unacknowledged outcomes and report batching. The host's `worker::Worker`
/// (the shell) owns one and performs its [`Action`]s.
pub struct WorkerCore {
    config: Config,
    phase: Phase,
    lease: Option<Lease>,
    /// How many times the lease ran out and was renewed after.
    lapses: u64,
    held: HashMap<TaskId, Held>,
    /// Held tasks waiting for a slot, in the order they were handed over.
    queue: VecDeque<TaskId>,
    /// Hand-overs so far (each run's number).
    runs: u64,
    /// Runs that have a slot: of held tasks, and `superseded` ones.
    busy: u32,
    /// Runs of tasks handed over again while they still ran (after a cancel): not the tasks'
    /// runs any more, but their slots are taken until they end.
    superseded: Vec<(TaskId, u64)>,
    reports: report::Reports,
    next_beat: u64,
    /// How often it beats while it holds a task, and while it holds none (as the scheduler
    /// asked at registration and in its last answer: [`crate::lease::idle_pace`]).
    beat_every: u64,
    idle_beat_every: u64,
    /// Starts wait for the answer to a renewal sent at or after this (ms): tasks were handed
    /// over while the lease was about to run out (see `hand_over`).
    starts_await: Option<u64>,
    actions: VecDeque<Action>,
}

impl WorkerCore {
    pub fn new(config: Config) -> WorkerCore {
        WorkerCore {
            config,
            phase: Phase::Off,
            lease: None,
            lapses: 0,
            held: HashMap::default(),
            queue: VecDeque::new(),
            runs: 0,
            busy: 0,
            superseded: Vec::new(),
            reports: report::Reports::default(),
            next_beat: u64::MAX,
            beat_every: u64::MAX,
            idle_beat_every: u64::MAX,
            starts_await: None,
            actions: VecDeque::new(),
        }
    }

    /// Take in one input.
    pub fn handle(&mut self, now: u64, input: Input) {
        match input {
            Input::Connected => self.connected(now),
            Input::Frame(frame) => self.frame(now, frame),
            Input::TaskEnded {
                task,
                run,
                outcome,
                at,
            } => self.task_ended(now, task, run, outcome, at),
            Input::Timeout => self.timeout(now),
            Input::SessionEnded { stopping } => self.session_ended(stopping),
            Input::Lapsed { lapses } => self.lapses = self.lapses.max(lapses),
        }
    }

    /// How many times the lease ran out and was renewed after (see [`Input::Lapsed`]).
    pub fn lapses(&self) -> u64 {
        self.lapses
    }

    /// The next thing to do, in order.
    pub fn poll_action(&mut self) -> Option<Action> {
        self.actions.pop_front()
    }

    /// When the shell must feed [`Input::Timeout`] next (`None`: nothing is due).
    pub fn poll_timeout(&self) -> Option<u64> {
        if !matches!(self.phase, Phase::On { .. }) {
            return None;
        }
        // Its end matters only to runs: an idle worker's lapse costs nothing (see `timeout`).
        let lease = match self.busy > 0 {
            true => self.lease.as_ref().map_or(u64::MAX, Lease::until),
            false => u64::MAX,
        };
        let at = [
            lease,
            self.next_beat,
            self.config.ends_at.unwrap_or(u64::MAX),
            self.reports.due(),
        ]
        .into_iter()
        .min()
        .unwrap_or(u64::MAX);
        (at != u64::MAX).then_some(at)
    }

    /// How much longer than a busy worker this one may hear nothing from the scheduler, in ms:
    /// one that holds no task beats (and so hears back) only every idle beat.
    pub fn quiet_allowance(&self) -> u64 {
        match self.holds_nothing() {
            true if self.idle_beat_every != u64::MAX => self.idle_beat_every,
            _ => 0,
        }
    }

    /// How often it beats while it holds tasks, in ms (it hears back as often).
    pub fn busy_beat(&self) -> u64 {
        self.beat_every
    }

    /// The lease's length in ms (`None`: the scheduler grants none).
    pub fn lease_length(&self) -> Option<u64> {
        self.lease.as_ref().map(Lease::length)
    }

    /// The worker id of the current session, once registered.
    pub fn id(&self) -> Option<WorkerId> {
        match self.phase {
            Phase::On { id } => Some(id),
            _ => None,
        }
    }

    /// Whether it holds a lease that is valid at `now` (always, when the scheduler grants none).
    pub fn lease_valid(&self, now: u64) -> bool {
        self.lease.as_ref().is_none_or(|l| !l.expired(now))
    }

    /// Whether it holds the task (handed over, not finished or given up); `true` if it runs.
    pub fn holds(&self, task: TaskId) -> Option<bool> {
        self.held.get(&task).map(|h| h.waiting.is_none())
    }

    /// The tasks it holds that run (have a slot).
    pub fn running(&self) -> impl Iterator<Item = TaskId> + '_ {
        self.held
            .iter()
            .filter(|(_, h)| h.waiting.is_none())
            .map(|(task, _)| *task)
    }

    /// What a registration claims: the tasks it holds and the outcomes it has not had
    /// acknowledged.
    pub fn claims(&self) -> usize {
        self.held.len() + self.reports.claimed().len()
    }

    /// Outcomes it still has to have acknowledged (sent or not).
    pub fn unacknowledged(&self) -> usize {
        self.reports.unacknowledged()
    }

    /// The whole state is consistent; panics naming what is not (tests call it after each step).
    pub fn sanity_check(&self, now: u64) {
        let waiting = self.held.values().filter(|h| h.waiting.is_some()).count();
        assert_eq!(waiting, self.queue.len(), "the queue is the waiting tasks");
        let runs = self.held.len() - waiting + self.superseded.len();
        assert_eq!(runs, self.busy as usize, "busy counts runs");
        assert!(
            self.busy <= self.config.info.slots,
            "no more runs than slots"
        );
        for task in &self.queue {
            assert!(self.held.get(task).is_some_and(|h| h.waiting.is_some()));
        }
        if waiting > 0 && !self.expired(now) && self.starts_await.is_none() {
            assert_eq!(
                self.busy, self.config.info.slots,
                "a task waits while a slot is free"
            );
        }
    }

    fn send(&mut self, message: FromWorker) {
        self.actions.push_back(Action::Send(message));
    }

    fn end(&mut self, end: End) {
        self.actions.push_back(Action::End(end));
    }

    fn connected(&mut self, now: u64) {
        self.give_up_if_expired(now);
        // Reported before and never acknowledged (the scheduler may have died before it kept
        // them): claimed and reported again, after the ones not sent at all.
        self.reports.new_session();
        let mut info = self.config.info.clone();
        info.running = self.held.keys().copied().collect();
        info.finished = self.reports.claimed();
        info.ends_in_ms = self.config.ends_at.map(|end| end.saturating_sub(now));
        // The registration is the first request the lease is granted for: it runs from here.
        self.phase = Phase::Registering {
            asked: now,
            claimed_running: !info.running.is_empty(),
        };
        self.send(FromWorker::Register(Box::new(info)));
    }

    fn registered(&mut self, now: u64, id: WorkerId, lease_ms: u64, idle_beat_ms: u64) {
        let Phase::Registering {
            asked,
            claimed_running,
        } = self.phase
        else {
            return self.end(End::Protocol("registered twice"));
        };
        // The previous lease ran out while registering: the guard killed the tasks claimed as
        // running, which the scheduler has just adopted. Give them up, and register again at
        // once, claiming only what finished. Counted from the claim, not from what is held
        // now: a claimed run that ended meanwhile past the lease (its outcome dropped) would
        // otherwise stay adopted with nothing left to report it.
        let lapsed = self.expired(now) && claimed_running;
        self.give_up_if_expired(now);
        match lease_ms {
            0 => self.lease = None,
            _ => self.renew(now, Lease::granted(lease_ms, asked)),
        }
        self.phase = Phase::On { id };
        // Each heartbeat asks for the lease to be renewed, at least four times within its
        // length whatever the heartbeat interval: a few answers may be late or lost.
        let every = match &self.lease {
            Some(lease) => self.config.heartbeat_ms.min(lease.length() / 4),
            None => self.config.heartbeat_ms,
        };
        self.beat_every = every.max(10);
        // Idle, as the scheduler asks (it judges silence), but never more often than busy.
        self.idle_beat_every = idle_beat_ms.max(self.beat_every);
        // The registration's grant is a fresh one.
        self.starts_await = None;
        self.next_beat = now;
        let unsent = self.reports.take_unsent();
        self.report(unsent);
        if lapsed {
            return self.end(End::LeaseExpired);
        }
        self.pump(now);
    }

    /// The lease is now `lease` (a registration's, or renewed): a lapse if the old one ran out.
    fn renew(&mut self, now: u64, lease: Lease) {
        if self.expired(now) {
            self.lapses += 1;
        }
        self.actions.push_back(Action::LeaseUntil(lease.until()));
        self.lease = Some(lease);
    }

    fn frame(&mut self, now: u64, frame: ToWorker) {
        match frame {
            ToWorker::Registered {
                id,
                lease_ms,
                idle_beat_ms,
            } => self.registered(now, id, lease_ms, idle_beat_ms),
            _ if !matches!(self.phase, Phase::On { .. }) => {
                self.end(End::Protocol("expected Registered"));
            }
            ToWorker::Run(assignments) => self.hand_over(now, assignments),
            ToWorker::Cancel(tasks) => self.cancel(now, tasks),
            ToWorker::Revoke { tasks, count } => self.revoke(&tasks, count),
            ToWorker::Received { count } => self.reports.received(count),
            ToWorker::Lease { seq, idle_beat_ms } => self.lease_answered(now, seq, idle_beat_ms),
            ToWorker::Leave { .. } => self.end(End::Dismissed),
            ToWorker::Group { .. }
            | ToWorker::Component { .. }
            | ToWorker::Forget { .. }
            | ToWorker::Environments { .. } => {}
        }
    }

    fn timeout(&mut self, now: u64) {
        if !matches!(self.phase, Phase::On { .. }) {
            return;
        }
        if self.expired(now) && self.busy > 0 {
            // The scheduler runs these tasks elsewhere once its fence is over: stop them now,
            // and register again with what finished in time. With nothing running (an idle
            // worker whose renewal is late), nothing is at stake: what waits starts once a
            // renewal is answered (see `ToWorker::Lease`).
            self.give_up();
            return self.end(End::LeaseExpired);
        }
        if self.config.ends_at.is_some_and(|end| now >= end) {
            return self.end(End::EndOfAllocation);
        }
        let due = self.reports.due_now(now);
        self.report(due);
        if now >= self.next_beat {
            let every = if self.holds_nothing() {
                self.idle_beat_every
            } else {
                self.beat_every
            };
            self.next_beat = now.saturating_add(every);
            // Starts not reported with outcomes yet go now.
            self.report(Vec::new());
            let beat = match &mut self.lease {
                Some(lease) => FromWorker::Renew {
                    seq: lease.ask(now),
                },
                None => FromWorker::Heartbeat,
            };
            self.send(beat);
        }
    }

    fn session_ended(&mut self, stopping: bool) {
        if matches!(self.phase, Phase::On { .. }) {
            // Sent if the link still can; kept to be reported again next session either way.
            let batched = self.reports.take_batched();
            self.report(batched);
        }
        self.reports.session_ended(stopping);
        self.phase = Phase::Off;
        self.next_beat = u64::MAX;
        if stopping {
            // The shell stops every task; none is claimed again.
            self.held.clear();
            self.queue.clear();
            self.superseded.clear();
            self.busy = 0;
        }
    }

    /// No task here: none running, none waiting for a slot.
    fn holds_nothing(&self) -> bool {
        self.held.is_empty() && self.busy == 0
    }

    fn expired(&self, now: u64) -> bool {
        self.lease.as_ref().is_some_and(|l| l.expired(now))
    }

    /// Send outcomes (and the starts not reported yet first).
    fn report(&mut self, batch: Vec<(TaskId, Outcome)>) {
        for frame in self.reports.frames(batch) {
            self.send(frame);
        }
    }
}

/// The outcome of a task canceled before it started.
pub fn canceled() -> Outcome {
    Outcome::Error {
        message: "canceled".into(),
    }
}
