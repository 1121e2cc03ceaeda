//! The simulated cluster of `core_pair.rs`: the two cores, the shells' duties done by hand
//! (frames to inputs, actions to frames, runs and the guard's kill), and the network.

use std::collections::{BTreeMap, HashMap, VecDeque};

use weir::core::scheduler::{self, Action as SAction, Input as SInput, PolicyInfo, Scheduler};
use weir::core::tasks;
use weir::core::worker::{self, Action as WAction, End, Input as WInput};
use weir::proto::{
    FromWorker, NewGroup, Outcome, Request, TaskId, TaskKind, TaskSpec, ToWorker, WorkerId,
    WorkerInfo,
};

const LEASE_MS: u64 = 2_000;
const HEARTBEAT_MS: u64 = 500;
/// A connection nothing arrives on for this long is closed (quinn's idle timeout).
const IDLE_MS: u64 = 3_000;
const MAX_DELAY_MS: u64 = 40;

/// Which faults the random steps inject.
#[derive(Clone, Copy)]
pub struct Faults {
    enabled: bool,
}

impl Faults {
    pub fn all() -> Faults {
        Faults { enabled: true }
    }
    pub fn none() -> Faults {
        Faults { enabled: false }
    }
}

/// xorshift64*: reproducible from the seed, no dependency.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_f491_4f6c_dd1d)
    }
    fn below(&mut self, n: u64) -> u64 {
        self.next() % n.max(1)
    }
    fn chance(&mut self, percent: u64) -> bool {
        self.below(100) < percent
    }
}

struct Conn {
    worker: usize,
    /// The id the scheduler registered it as.
    id: Option<WorkerId>,
    broken: bool,
    to_sched: VecDeque<(u64, FromWorker)>,
    to_worker: VecDeque<(u64, ToWorker)>,
    /// When each side learns it broke.
    worker_notice: Option<u64>,
    sched_notice: Option<u64>,
}

struct SimWorker {
    name: String,
    core: Option<worker::Worker>,
    session: Option<usize>,
    next_connect: u64,
    /// Runs going on: (task, run) -> when it ends by itself.
    runs: HashMap<(TaskId, u64), u64>,
    /// Canceled runs end soon: task -> (run, when).
    cancels: Vec<(TaskId, u64, u64)>,
    /// The guard's deadline (`u64::MAX`: none).
    guard_until: u64,
    partitioned_until: u64,
    restart_at: u64,
    instance: u64,
}

pub struct Sim {
    rng: Rng,
    faults: Faults,
    pub now: u64,
    sched: Scheduler,
    workers: Vec<SimWorker>,
    conns: Vec<Conn>,
    sched_conn: HashMap<WorkerId, usize>,
    next_client: u64,
    pub submitted: u64,
    pub runs_started: u64,
    pub steps_after_heal: usize,
    /// Runs ended by a lease's end (the guard's kill, or given up by the worker's core), and
    /// sessions a worker's core ended because its lease ran out.
    pub killed: u64,
    pub lease_ends: u64,
    /// Every run takes 10 to 20 s (so a test can cut a worker off while it runs).
    pub long_tasks: bool,
    checks: std::cell::Cell<u64>,
    trace: VecDeque<String>,
}

impl Sim {
    pub fn new(seed: u64, workers: usize, faults: Faults) -> Sim {
        let config = scheduler::Config {
            tasks: tasks::Config {
                heartbeat_timeout_ms: 5_000,
                fence_ms: u64::try_from(
                    weir::core::lease::fence(std::time::Duration::from_millis(LEASE_MS))
                        .as_millis(),
                )
                .unwrap_or(u64::MAX),
                prefetch: (seed % 3) as u32,
                ..tasks::Config::default()
            },
            manager_timeout_ms: 10_000,
            manager_forget_ms: 60_000,
            lease_ms: LEASE_MS,
            tick_ms: 100,
            scaling_ms: None,
            scale_down_delay_ms: 0,
            unschedulable_timeout_ms: None,
            policy: PolicyInfo::default(),
            tiers: vec![],
            journal: false,
            compact_min_bytes: 1 << 20,
        };
        let workers = (0..workers)
            .map(|i| SimWorker {
                name: format!("w-{i}"),
                core: None,
                session: None,
                next_connect: 0,
                runs: HashMap::new(),
                cancels: Vec::new(),
                guard_until: u64::MAX,
                partitioned_until: 0,
                restart_at: 0,
                instance: 0,
            })
            .collect();
        let mut sim = Sim {
            rng: Rng(seed.wrapping_mul(0x9e37_79b9_7f4a_7c15) | 1),
            faults,
            now: 0,
            sched: Scheduler::new(config),
            workers,
            conns: Vec::new(),
            sched_conn: HashMap::new(),
            next_client: 1,
            submitted: 0,
            runs_started: 0,
            steps_after_heal: 0,
            killed: 0,
            lease_ends: 0,
            long_tasks: false,
            checks: std::cell::Cell::new(0),
            trace: VecDeque::new(),
        };
        for w in 0..sim.workers.len() {
            sim.start_worker(w);
        }
        sim
    }

    fn note(&mut self, what: String) {
        if self.trace.len() == 200 {
            self.trace.pop_front();
        }
        self.trace.push_back(format!("{:>8} {what}", self.now));
    }

    pub fn trace_tail(&self) -> String {
        self.trace.iter().cloned().collect::<Vec<_>>().join("\n")
    }

    fn start_worker(&mut self, w: usize) {
        let slots = 1 + (w as u32 % 3);
        let sw = &mut self.workers[w];
        sw.instance += 1;
        let info = WorkerInfo {
            name: sw.name.clone(),
            slots,
            capabilities: vec![],
            worker_type: String::new(),
            manager: None,
            local_environments: vec![],
            running: vec![],
            instance: (w as u64) << 32 | sw.instance,
            ends_in_ms: None,
            finished: vec![],
        };
        sw.core = Some(worker::Worker::new(worker::Config {
            info,
            heartbeat_ms: HEARTBEAT_MS,
            signal_grace_ms: 1_000,
            ends_at: None,
        }));
        sw.session = None;
        sw.next_connect = self.now;
        sw.runs.clear();
        sw.cancels.clear();
        sw.guard_until = u64::MAX;
    }

    // ----- random steps -----

    pub fn random_step(&mut self) {
        let roll = self.rng.below(100);
        match roll {
            0..=7 => {
                let count = 1 + self.rng.below(6);
                self.submit(count);
            }
            8..=9 if self.faults.enabled => {
                // A connection breaks with what is in flight.
                let live: Vec<usize> = (0..self.conns.len())
                    .filter(|c| !self.conns[*c].broken)
                    .collect();
                if !live.is_empty() {
                    let c = live[self.rng.below(live.len() as u64) as usize];
                    let notice_w = self.now + self.rng.below(IDLE_MS);
                    let notice_s = self.now + self.rng.below(IDLE_MS);
                    self.break_conn(c, Some(notice_w), Some(notice_s));
                }
            }
            10 if self.faults.enabled => {
                let w = self.rng.below(self.workers.len() as u64) as usize;
                let length = match self.rng.chance(50) {
                    true => 100 + self.rng.below(IDLE_MS),
                    false => IDLE_MS + self.rng.below(10_000),
                };
                self.partition(w, length);
            }
            11 if self.faults.enabled && self.rng.chance(30) => {
                let w = self.rng.below(self.workers.len() as u64) as usize;
                self.crash(w);
            }
            _ => {
                let dt = match self.rng.chance(90) {
                    true => 1 + self.rng.below(100),
                    false => 100 + self.rng.below(3_000),
                };
                self.advance(dt);
            }
        }
    }

    pub fn submit(&mut self, count: u64) {
        let client = self.next_client;
        self.next_client += 1;
        let request = Request::Submit {
            groups: vec![NewGroup {
                spec: TaskSpec {
                    kind: TaskKind::Command {
                        argv: vec!["true".into()],
                        env: vec![],
                    },
                    capabilities: vec![],
                    environments: vec![],
                    priority: 0,
                    timeout_ms: 0,
                    retries: 10_000,
                    input: vec![],
                },
                count: count as u32,
                inputs: vec![],
            }],
            components: vec![],
        };
        self.submitted += count;
        self.note(format!("submit {count}"));
        self.sched_input(SInput::Request {
            client,
            request,
            components: vec![],
        });
        self.sched_round();
    }

    pub fn partition(&mut self, w: usize, length: u64) {
        self.note(format!("partition w{w} for {length} ms"));
        let until = self.now + length;
        self.workers[w].partitioned_until = self.workers[w].partitioned_until.max(until);
        if length >= IDLE_MS
            && let Some(c) = self.workers[w].session
        {
            // Nothing arrives for the idle timeout: both ends close it.
            let notice = self.now + IDLE_MS;
            let jitter = self.rng.below(100);
            self.break_conn(c, Some(notice), Some(notice + jitter));
        }
    }

    fn crash(&mut self, w: usize) {
        if self.workers[w].core.is_none() {
            return;
        }
        self.note(format!("crash w{w}"));
        let sw = &mut self.workers[w];
        sw.core = None;
        // The guard kills every task group when the worker dies.
        sw.runs.clear();
        sw.cancels.clear();
        sw.restart_at = self.now + 500 + self.rng.below(5_000);
        if let Some(c) = sw.session.take() {
            let notice = self.now + self.rng.below(IDLE_MS);
            self.break_conn(c, None, Some(notice));
        }
    }

    /// Every fault is over: partitions end, crashed workers restart.
    pub fn heal(&mut self) {
        self.faults = Faults::none();
        for sw in &mut self.workers {
            sw.partitioned_until = sw.partitioned_until.min(self.now);
            sw.restart_at = sw.restart_at.min(self.now);
        }
    }

    pub fn run_until_done(&mut self, limit_ms: u64) {
        let end = self.now + limit_ms;
        while self.now < end && self.finished() < self.submitted {
            self.advance(250);
            self.check();
            self.steps_after_heal += 1;
        }
    }

    pub fn finished(&self) -> u64 {
        self.sched.status(self.now).tasks.finished()
    }

    pub fn unacknowledged(&self) -> usize {
        (self.workers.iter())
            .filter_map(|w| w.core.as_ref())
            .map(|c| c.unacknowledged())
            .sum()
    }

    pub fn physically_running(&self, w: usize) -> usize {
        self.workers[w].runs.len()
    }

    // ----- invariants -----

    pub fn check(&self) {
        self.checks.set(self.checks.get() + 1);
        let mut physical: BTreeMap<TaskId, usize> = BTreeMap::new();
        let mut believed: BTreeMap<TaskId, usize> = BTreeMap::new();
        for (w, sw) in self.workers.iter().enumerate() {
            for (task, _) in sw.runs.keys() {
                if let Some(other) = physical.insert(*task, w).filter(|other| *other != w) {
                    panic!(
                        "task {task} runs on w{other} and w{w} at {}\n{}",
                        self.now,
                        self.trace_tail()
                    );
                }
            }
            let Some(core) = &sw.core else { continue };
            core.sanity_check(self.now);
            if !core.lease_valid(self.now) {
                continue;
            }
            for task in core.running() {
                if let Some(other) = believed.insert(task, w) {
                    panic!(
                        "w{other} and w{w} both hold task {task} with a valid lease at {}\n{}",
                        self.now,
                        self.trace_tail()
                    );
                }
            }
        }
        // The task core's own check walks every task: every few steps, so 100,000 steps stay
        // a few seconds (its state changes a little per step).
        if self.checks.get().is_multiple_of(8)
            && let Err(error) = self.sched.tasks().sanity_check()
        {
            panic!("scheduler: {error}\n{}", self.trace_tail());
        }
    }

    // ----- time -----

    /// Run every event due within `dt` ms, in time order.
    pub fn advance(&mut self, dt: u64) {
        let target = self.now + dt;
        loop {
            let next = self.next_event().min(target);
            self.now = self.now.max(next);
            let did = self.fire_due();
            if !did && self.now >= target {
                break;
            }
        }
    }

    fn next_event(&self) -> u64 {
        let mut at = self.sched.poll_timeout();
        for conn in &self.conns {
            let sw = &self.workers[conn.worker];
            let after = sw.partitioned_until;
            if let Some((t, _)) = conn.to_sched.front() {
                at = at.min((*t).max(after));
            }
            if let Some((t, _)) = conn.to_worker.front() {
                at = at.min((*t).max(after));
            }
            at = at.min(conn.worker_notice.unwrap_or(u64::MAX));
            at = at.min(conn.sched_notice.unwrap_or(u64::MAX));
        }
        for sw in &self.workers {
            let Some(core) = &sw.core else {
                at = at.min(sw.restart_at);
                continue;
            };
            at = at.min(core.poll_timeout().unwrap_or(u64::MAX));
            for end in sw.runs.values() {
                at = at.min(*end);
            }
            if !sw.runs.is_empty() {
                at = at.min(sw.guard_until);
            }
            for (_, _, end) in &sw.cancels {
                at = at.min(*end);
            }
            if sw.session.is_none() {
                at = at.min(sw.next_connect);
            }
        }
        at
    }

    /// Fire one kind of due event; whether anything was due.
    fn fire_due(&mut self) -> bool {
        let now = self.now;
        if self.sched.poll_timeout() <= now {
            self.sched_input(SInput::Timeout);
            self.sched_round();
            return true;
        }
        for c in 0..self.conns.len() {
            let after = self.workers[self.conns[c].worker].partitioned_until;
            if now < after {
                continue;
            }
            if self.conns[c]
                .to_sched
                .front()
                .is_some_and(|(t, _)| *t <= now)
            {
                let Some((_, frame)) = self.conns[c].to_sched.pop_front() else {
                    continue;
                };
                self.deliver_to_sched(c, frame);
                return true;
            }
            if self.conns[c]
                .to_worker
                .front()
                .is_some_and(|(t, _)| *t <= now)
            {
                let Some((_, frame)) = self.conns[c].to_worker.pop_front() else {
                    continue;
                };
                self.deliver_to_worker(c, frame);
                return true;
            }
        }
        for c in 0..self.conns.len() {
            if self.conns[c].worker_notice.is_some_and(|t| t <= now) {
                self.conns[c].worker_notice = None;
                let w = self.conns[c].worker;
                if self.workers[w].session == Some(c) {
                    self.note(format!("w{w} sees its connection c{c} end"));
                    self.end_session(w, false);
                }
                return true;
            }
            if self.conns[c].sched_notice.is_some_and(|t| t <= now) {
                self.conns[c].sched_notice = None;
                if let Some(worker) = self.conns[c].id {
                    self.note(format!("scheduler sees c{c} (worker {worker}) end"));
                    if self.sched_conn.get(&worker) == Some(&c) {
                        self.sched_conn.remove(&worker);
                    }
                    self.sched_input(SInput::WorkerGone {
                        worker,
                        reason: "connection lost".into(),
                        planned: false,
                    });
                    self.sched_round();
                }
                return true;
            }
        }
        for w in 0..self.workers.len() {
            if self.fire_worker(w) {
                return true;
            }
        }
        false
    }

    fn fire_worker(&mut self, w: usize) -> bool {
        let now = self.now;
        let sw = &mut self.workers[w];
        let Some(core) = &sw.core else {
            if sw.restart_at <= now {
                self.note(format!("w{w} restarts"));
                self.start_worker(w);
                return true;
            }
            return false;
        };
        if !sw.runs.is_empty() && sw.guard_until <= now {
            // The lease ran out: the guard kills every task group.
            let killed: Vec<(TaskId, u64)> = sw.runs.drain().map(|(run, _)| run).collect();
            let at = sw.guard_until;
            self.killed += killed.len() as u64;
            self.note(format!("w{w}'s guard kills {} runs", killed.len()));
            for (task, run) in killed {
                let outcome = Outcome::Exited {
                    code: None,
                    stdout: vec![],
                    stderr: vec![],
                };
                self.worker_input(
                    w,
                    WInput::TaskEnded {
                        task,
                        run,
                        outcome,
                        at,
                    },
                );
            }
            return true;
        }
        if let Some(i) = sw.cancels.iter().position(|(_, _, end)| *end <= now) {
            let (task, run, at) = sw.cancels.swap_remove(i);
            if sw.runs.remove(&(task, run)).is_some() {
                let outcome = worker::canceled();
                self.worker_input(
                    w,
                    WInput::TaskEnded {
                        task,
                        run,
                        outcome,
                        at,
                    },
                );
            }
            return true;
        }
        if let Some((&(task, run), &at)) = sw.runs.iter().find(|(_, end)| **end <= now) {
            sw.runs.remove(&(task, run));
            let outcome = Outcome::Exited {
                code: Some(0),
                stdout: vec![],
                stderr: vec![],
            };
            self.worker_input(
                w,
                WInput::TaskEnded {
                    task,
                    run,
                    outcome,
                    at,
                },
            );
            return true;
        }
        if core.poll_timeout().is_some_and(|t| t <= now) {
            self.worker_input(w, WInput::Timeout);
            return true;
        }
        if sw.session.is_none() && sw.next_connect <= now {
            self.connect(w);
            return true;
        }
        false
    }

    // ----- the network -----

    fn connect(&mut self, w: usize) {
        if self.now < self.workers[w].partitioned_until {
            // The handshake does not get through: tried again after a back-off.
            self.workers[w].next_connect = self.now + 200 + self.rng.below(800);
            return;
        }
        let c = self.conns.len();
        self.conns.push(Conn {
            worker: w,
            id: None,
            broken: false,
            to_sched: VecDeque::new(),
            to_worker: VecDeque::new(),
            worker_notice: None,
            sched_notice: None,
        });
        self.workers[w].session = Some(c);
        self.note(format!("w{w} connects on c{c}"));
        self.worker_input(w, WInput::Connected);
    }

    fn break_conn(&mut self, c: usize, worker_notice: Option<u64>, sched_notice: Option<u64>) {
        let conn = &mut self.conns[c];
        if conn.broken {
            return;
        }
        self.note(format!("c{c} breaks"));
        let conn = &mut self.conns[c];
        conn.broken = true;
        conn.to_sched.clear();
        conn.to_worker.clear();
        conn.worker_notice = worker_notice;
        conn.sched_notice = sched_notice;
    }

    /// When a frame sent now arrives: mostly within [`MAX_DELAY_MS`]; with faults, now and then
    /// seconds later (a congested or lossy path QUIC retransmits over), which holds back the
    /// frames behind it on that stream too.
    fn delay(&mut self) -> u64 {
        if self.faults.enabled && self.rng.chance(1) {
            return self.now + 500 + self.rng.below(2_500);
        }
        self.now + 1 + self.rng.below(MAX_DELAY_MS)
    }

    fn send_to_sched(&mut self, c: usize, frame: FromWorker) {
        if self.conns[c].broken {
            return;
        }
        let duplicate = self.faults.enabled
            && matches!(
                frame,
                FromWorker::Heartbeat
                    | FromWorker::Renew { .. }
                    | FromWorker::Finished(_)
                    | FromWorker::Started(_)
            )
            && self.rng.chance(3);
        let at = self.delay();
        let queue = &mut self.conns[c].to_sched;
        // One stream: in order.
        let at = queue.back().map_or(at, |(last, _)| at.max(*last));
        if duplicate {
            queue.push_back((at, frame.clone()));
        }
        queue.push_back((at, frame));
    }

    fn send_to_worker(&mut self, c: usize, frame: ToWorker) {
        if self.conns[c].broken {
            return;
        }
        let duplicate = self.faults.enabled
            && matches!(frame, ToWorker::Lease { .. } | ToWorker::Received { .. })
            && self.rng.chance(3);
        let at = self.delay();
        let queue = &mut self.conns[c].to_worker;
        let at = queue.back().map_or(at, |(last, _)| at.max(*last));
        if duplicate {
            queue.push_back((at, frame.clone()));
        }
        queue.push_back((at, frame));
    }

    fn deliver_to_sched(&mut self, c: usize, frame: FromWorker) {
        let input = match (frame, self.conns[c].id) {
            (FromWorker::Register(info), None) => SInput::WorkerJoined {
                connection: c as u64,
                info,
            },
            (FromWorker::Register(_), Some(_)) | (_, None) => return,
            (FromWorker::Heartbeat, Some(worker)) => SInput::Heartbeat {
                worker,
                renew: None,
            },
            (FromWorker::Renew { seq }, Some(worker)) => SInput::Heartbeat {
                worker,
                renew: Some(seq),
            },
            (FromWorker::Finished(results), Some(worker)) => SInput::Finished { worker, results },
            (FromWorker::Started(tasks), Some(worker)) => SInput::Started { worker, tasks },
            (FromWorker::Revoked(tasks), Some(worker)) => SInput::Revoked { worker, tasks },
            (FromWorker::Verdicts(_) | FromWorker::Loads(_), Some(_)) => return,
        };
        self.sched_input(input);
        self.sched_round();
    }

    fn deliver_to_worker(&mut self, c: usize, frame: ToWorker) {
        let w = self.conns[c].worker;
        if self.workers[w].session != Some(c) {
            return;
        }
        self.worker_input(w, WInput::Frame(frame));
    }

    // ----- the scheduler's shell -----

    fn sched_input(&mut self, input: SInput) {
        self.sched.handle(self.now, input);
        self.sched_actions();
    }

    /// The end of a round: schedule, and (no journal) acknowledge at once.
    fn sched_round(&mut self) {
        self.sched_input(SInput::EndOfBatch);
        self.sched_input(SInput::Synced { journal_bytes: 0 });
    }

    fn sched_actions(&mut self) {
        while let Some(action) = self.sched.poll_action() {
            match action {
                SAction::Registered { connection, worker } => {
                    let c = connection as usize;
                    self.conns[c].id = Some(worker);
                    self.sched_conn.insert(worker, c);
                }
                SAction::Refused { connection, .. } => {
                    let c = connection as usize;
                    let notice = self.delay();
                    self.break_conn(c, Some(notice), None);
                }
                SAction::ToWorker { worker, message } => {
                    if let Some(&c) = self.sched_conn.get(&worker) {
                        self.send_to_worker(c, message);
                    }
                }
                SAction::CloseWorker { worker } => {
                    if let Some(c) = self.sched_conn.remove(&worker) {
                        let notice = self.delay();
                        self.break_conn(c, Some(notice), None);
                    }
                }
                SAction::Compact(_) => self.sched.handle(self.now, SInput::Compacted),
                _ => {}
            }
        }
    }

    // ----- the workers' shells -----

    fn worker_input(&mut self, w: usize, input: WInput) {
        let now = self.now;
        let Some(core) = self.workers[w].core.as_mut() else {
            return;
        };
        core.handle(now, input);
        while let Some(action) = self.workers[w].core.as_mut().and_then(|c| c.poll_action()) {
            self.worker_action(w, action);
        }
    }

    fn worker_action(&mut self, w: usize, action: WAction) {
        match action {
            WAction::Send(frame) => {
                if let Some(c) = self.workers[w].session {
                    self.send_to_sched(c, frame);
                }
            }
            WAction::Start { run, assignment } => {
                self.runs_started += 1;
                let length = match self.rng.chance(80) {
                    _ if self.long_tasks => 10_000 + self.rng.below(10_000),
                    true => 5 + self.rng.below(300),
                    false => 300 + self.rng.below(4_000),
                };
                let end = self.now + length;
                let task = assignment.task;
                self.workers[w].runs.insert((task, run), end);
            }
            WAction::Cancel { task, run } => {
                let end = self.now + 1 + self.rng.below(20);
                self.workers[w].cancels.push((task, run, end));
            }
            WAction::GiveUp { task, run } => {
                let sw = &mut self.workers[w];
                if sw.runs.remove(&(task, run)).is_some() {
                    self.killed += 1;
                }
            }
            WAction::LeaseUntil(until) => self.workers[w].guard_until = until,
            WAction::End(end) => {
                self.note(format!("w{w} ends its session: {end:?}"));
                let stopping = matches!(end, End::Dismissed | End::EndOfAllocation);
                self.lease_ends += u64::from(end == End::LeaseExpired);
                self.end_session(w, stopping);
            }
        }
    }

    /// The worker's side of a session ends (it closed it, or saw it break).
    fn end_session(&mut self, w: usize, stopping: bool) {
        let Some(c) = self.workers[w].session else {
            return;
        };
        // What it sends while ending still goes out on the closing connection.
        self.worker_input(w, WInput::SessionEnded { stopping });
        self.workers[w].session = None;
        let notice = self.delay();
        self.break_conn(c, None, Some(notice));
        self.workers[w].next_connect = self.now + 200 + self.rng.below(300);
        if stopping {
            self.workers[w].runs.clear();
            self.workers[w].core = None;
            self.workers[w].restart_at = self.now + 1_000;
        }
    }
}
