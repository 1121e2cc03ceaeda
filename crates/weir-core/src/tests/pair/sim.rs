//! The simulated cluster of `mod.rs`: the two cores, the shells' duties done by hand
//! (frames to inputs, actions to frames, runs and the guard's kill), and the network.

#[path = "checks.rs"]
mod checks;
#[path = "fleet.rs"]
mod fleet;
#[path = "managers.rs"]
mod managers;
#[path = "shells.rs"]
mod shells;
#[path = "time.rs"]
mod time;

use std::collections::{BTreeMap, HashMap, VecDeque};

use crate::scheduler::{self, Input as SInput, PolicyInfo, Scheduler};
use crate::tasks;
use crate::worker;
use fleet::Fleet;
pub(super) use fleet::ManagerStats;
use weir_proto::{
    FromWorker, NewGroup, Request, TaskId, TaskKind, TaskSpec, ToWorker, WorkerId,
    WorkerRegistration,
};

const LEASE_MS: u64 = 2_000;
const HEARTBEAT_MS: u64 = 500;
/// A connection nothing arrives on for this long is closed (quinn's idle timeout).
const IDLE_MS: u64 = 3_000;
const MAX_DELAY_MS: u64 = 40;

/// Which faults the random steps inject.
#[derive(Clone, Copy)]
pub(super) struct Faults {
    enabled: bool,
}

impl Faults {
    pub(super) fn all() -> Faults {
        Faults { enabled: true }
    }
    pub(super) fn none() -> Faults {
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
    /// The worker closed it on purpose (it stops).
    planned: bool,
}

struct SimWorker {
    name: String,
    core: Option<worker::WorkerCore>,
    session: Option<usize>,
    next_connect: u64,
    /// Runs going on: (task, run) -> when it ends by itself.
    runs: BTreeMap<(TaskId, u64), u64>,
    /// Canceled runs end soon: task -> (run, when).
    cancels: Vec<(TaskId, u64, u64)>,
    /// The guard's deadline (`u64::MAX`: none).
    guard_until: u64,
    partitioned_until: u64,
    restart_at: u64,
    instance: u64,
    /// The instance its manager chose for it (else its own, per start).
    given_instance: Option<u64>,
    slots: u32,
    /// The manager id it registers with, and the slot of the manager whose unit runs it.
    manager: Option<String>,
    manager_slot: Option<usize>,
}

impl SimWorker {
    fn new(name: String, slots: u32) -> SimWorker {
        SimWorker {
            name,
            core: None,
            session: None,
            next_connect: 0,
            runs: BTreeMap::new(),
            cancels: Vec::new(),
            guard_until: u64::MAX,
            partitioned_until: 0,
            restart_at: 0,
            instance: 0,
            given_instance: None,
            slots,
            manager: None,
            manager_slot: None,
        }
    }

    /// The worker of a manager's unit (it never restarts: its unit ends with it).
    fn managed(name: String, manager: String, slot: usize, instance: Option<u64>) -> SimWorker {
        SimWorker {
            manager: Some(manager),
            manager_slot: Some(slot),
            given_instance: instance,
            ..SimWorker::new(name, managers::SLOTS)
        }
    }
}

pub(super) struct Sim {
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
    /// Leases that ran out and were renewed after, the worker registered throughout.
    pub lapses: u64,
    /// Every run takes 10 to 20 s (so a test can cut a worker off while it runs).
    pub long_tasks: bool,
    trace: VecDeque<String>,
    /// A hash of every line ever noted: two runs of one seed must end with the same.
    pub digest: u64,
    fleet: Fleet,
}

impl Sim {
    pub(super) fn new(seed: u64, workers: usize, faults: Faults) -> Sim {
        Sim::with_managers(seed, workers, 0, faults)
    }

    /// `workers` workers of their own, and `managers` managers the policy scales.
    pub(super) fn with_managers(seed: u64, workers: usize, managers: usize, faults: Faults) -> Sim {
        let config = scheduler::Config {
            tasks: tasks::Config {
                heartbeat_timeout_ms: 5_000,
                idle_silence_ms: u64::try_from(
                    crate::lease::idle_silence(
                        std::time::Duration::from_millis(LEASE_MS),
                        std::time::Duration::from_secs(5),
                    )
                    .as_millis(),
                )
                .unwrap_or(u64::MAX),
                fence_ms: u64::try_from(
                    crate::lease::fence(std::time::Duration::from_millis(LEASE_MS)).as_millis(),
                )
                .unwrap_or(u64::MAX),
                prefetch: (seed % 3) as u32,
                ..tasks::Config::default()
            },
            manager_timeout_ms: 10_000,
            manager_forget_ms: 60_000,
            lease_ms: LEASE_MS,
            // Some seeds slow idle workers past their lease as the cluster grows (1-4 workers
            // of their own and the managers'), so idle leases run out between beats and
            // hand-overs wait for a renewal (`lease::idle_pace`).
            idle_pace_per_worker_us: [0, 700_000, 3_000_000][(seed / 3 % 3) as usize],
            tick_ms: 100,
            scaling_ms: Some(1_000),
            scale_down_delay_ms: 0,
            max_drain_percent: 10,
            unschedulable_timeout_ms: None,
            policy: PolicyInfo {
                name: "waterfall".into(),
                content: fleet::POLICY.into(),
                ..PolicyInfo::default()
            },
            tiers: weir_waterfall::Policy::parse(weir_waterfall::Flavor::WorkerType, fleet::POLICY)
                .map(|p| p.tiers())
                .unwrap_or_default(),
            journal: false,
            compact_min_bytes: 1 << 20,
            restart_grace_ms: 0,
        };
        let workers = (0..workers)
            .map(|i| SimWorker::new(format!("w-{i}"), 1 + (i as u32 % 3)))
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
            lapses: 0,
            long_tasks: false,
            trace: VecDeque::new(),
            digest: 0,
            fleet: Fleet::new(seed, managers),
        };
        for w in 0..sim.workers.len() {
            sim.start_worker(w);
        }
        for m in 0..managers {
            sim.start_manager(m);
        }
        sim
    }

    fn note(&mut self, what: String) {
        if self.trace.len() == 300 {
            self.trace.pop_front();
        }
        let line = format!("{:>8} {what}", self.now);
        self.fold(&line);
        self.trace.push_back(line);
    }

    /// Fold `what` (a noted line, a frame sent) into [`Sim::digest`], with std's fixed-key
    /// hasher (not `crate::hash`'s, which the check is about).
    pub(super) fn fold(&mut self, what: &impl std::fmt::Debug) {
        use std::hash::{Hash, Hasher};
        let mut hasher = std::hash::DefaultHasher::new();
        (self.digest, format!("{what:?}")).hash(&mut hasher);
        self.digest = hasher.finish();
    }

    pub(super) fn trace_tail(&self) -> String {
        self.trace.iter().cloned().collect::<Vec<_>>().join("\n")
    }

    fn start_worker(&mut self, w: usize) {
        let sw = &mut self.workers[w];
        sw.instance += 1;
        let info = WorkerRegistration {
            name: sw.name.clone(),
            slots: sw.slots,
            capabilities: vec![],
            worker_type: match sw.manager {
                Some(_) => managers::WORKER_TYPE.into(),
                None => String::new(),
            },
            manager: sw.manager.clone(),
            local_environments: vec![],
            running: vec![],
            instance: sw.given_instance.unwrap_or((w as u64) << 32 | sw.instance),
            ends_in_ms: None,
            finished: vec![],
        };
        sw.core = Some(worker::WorkerCore::new(worker::Config {
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

    pub(super) fn random_step(&mut self) {
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
            12 if self.faults.enabled && !self.fleet.managers.is_empty() && self.rng.chance(40) => {
                self.manager_fault();
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

    pub(super) fn submit(&mut self, count: u64) {
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
            request: None,
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

    pub(super) fn partition(&mut self, w: usize, length: u64) {
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

    pub(super) fn crash(&mut self, w: usize) {
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
        self.process_exited(w);
    }

    /// Every fault is over: partitions end, crashed workers and managers restart, twins die.
    pub(super) fn heal(&mut self) {
        self.faults = Faults::none();
        for sw in self.workers.iter_mut().filter(|w| w.manager_slot.is_none()) {
            sw.partitioned_until = sw.partitioned_until.min(self.now);
            sw.restart_at = sw.restart_at.min(self.now);
        }
        for sw in &mut self.workers {
            sw.partitioned_until = sw.partitioned_until.min(self.now);
        }
        for sm in &mut self.fleet.managers {
            sm.partitioned_until = sm.partitioned_until.min(self.now);
            match sm.twin {
                true => sm.dies_at = sm.dies_at.min(self.now),
                false => sm.restart_at = sm.restart_at.min(self.now),
            }
        }
    }

    pub(super) fn run_until_done(&mut self, limit_ms: u64) {
        let end = self.now + limit_ms;
        while self.now < end && self.finished() < self.submitted {
            self.advance(250);
            self.check();
            self.steps_after_heal += 1;
        }
    }

    pub(super) fn finished(&self) -> u64 {
        self.sched.status(self.now).tasks.finished()
    }

    pub(super) fn unacknowledged(&self) -> usize {
        (self.workers.iter())
            .filter_map(|w| w.core.as_ref())
            .map(|c| c.unacknowledged())
            .sum()
    }

    pub(super) fn physically_running(&self, w: usize) -> usize {
        self.workers[w].runs.len()
    }
}
