//! The scheduler core driven through its one entry point, `Scheduler::handle`, as a pure
//! simulation, no processes: the shell's part is played by this file (actions answered the way
//! the shell and the peers answer them), the policy is the native waterfall, and worker
//! managers are modelled with the same convergence step the real one runs
//! (`crate::units::Book::processes`). After every round (inputs, `EndOfBatch`, `Synced`) the whole
//! scheduler passes `Scheduler::sanity_check`.
//!
//! Random worker deaths, restarts, registrations, late disconnects, submissions and finishes
//! never take a manager past its cap: every decision is within it, the manager never runs more
//! processes, and once the manager has reported the scheduler's view of it is within it too.
//! A broader run adds clients, cancels, forgets, environments, verdicts, manager connections
//! that break and come back, goodbyes, failing decisions and policy changes.

use std::collections::{HashMap, VecDeque};
use std::sync::Arc;

use crate::scaling::{PolicyFailure, validate_decisions};
use crate::scheduler::{Action, Config, Input, PolicyInfo, Scheduler};
use crate::units::{Book, Unit};
use crate::{component_hash, tasks};
use proptest::prelude::*;
use weir_proto::{
    EnvVerdict, ManagerState, NewGroup, Outcome, Request, TaskId, TaskKind, TaskSpec, ToManager,
    ToWorker, WorkerId, WorkerRegistration,
};
use weir_waterfall::{Flavor, Policy};

mod sim;
mod step;

/// One simulated manager: its processes (oldest first) and which scheduler id each registered as.
struct Pool {
    id: String,
    cap_tasks: u32,
    slots: u32,
    /// Its processes, oldest first, as the real manager keeps them: units of one.
    book: Book,
    registered: HashMap<String, WorkerId>,
    /// Registered workers whose process died (the scheduler may not know yet).
    dead: Vec<WorkerId>,
    next: u32,
    /// The last desired count it was sent.
    desired: u32,
    /// Workers it saw exit or stopped, newest last.
    exited: Vec<String>,
    /// Whether its connection is registered.
    connected: bool,
}

impl Pool {
    fn max_workers(&self) -> usize {
        (self.cap_tasks / self.slots).max(1) as usize
    }

    fn new(id: &str, cap_tasks: u32, slots: u32) -> Pool {
        Pool {
            id: id.into(),
            cap_tasks,
            slots,
            book: Book::processes(id, (cap_tasks / slots).max(1)),
            registered: HashMap::new(),
            dead: vec![],
            next: 0,
            desired: 0,
            exited: vec![],
            connected: false,
        }
    }

    /// Its alive processes, oldest first.
    fn alive(&self) -> Vec<String> {
        self.book.workers(&[])
    }

    /// The manager's convergence step (`Book::step` of a process pool): its processes only.
    /// Returns the registered workers it stopped (each closes its connection as it stops).
    fn converge(&mut self, desired: u32, stop: &[String], registered: &[String]) -> Vec<WorkerId> {
        let desired = desired.min(self.max_workers() as u32);
        self.desired = desired;
        let step = self.book.step(0, desired, stop, registered, false);
        let stopped_names: Vec<String> = step.stop.into_iter().map(|s| s.id).collect();
        let stopped = stopped_names
            .iter()
            .filter_map(|n| self.registered.get(n).copied())
            .collect();
        self.exited.extend(stopped_names);
        for _ in 0..step.start {
            self.next += 1;
            let name = format!("{}-{}", self.id, self.next);
            self.book.units.push(Unit::one(name, 0));
        }
        stopped
    }

    fn state(&self) -> ManagerState {
        let mut state = ManagerState {
            labels: Vec::new(),
            id: self.id.clone(),
            worker_type: "t".into(),
            max_task_concurrency: self.cap_tasks,
            worker_slots: self.slots,
            capabilities: vec![],
            workers: self.alive(),
            environments: vec![],
            fixed: None,
            exited: self
                .exited
                .iter()
                .rev()
                .take(weir_proto::EXITED_KEPT)
                .cloned()
                .collect(),
            backend: String::new(),
            units: vec![],
            usable_ms: None,
            // Its own processes: it names their instances (as a process pool does).
            instances: vec![],
            launch: Default::default(),
        };
        state.instances = (state.workers.iter().chain(&state.exited))
            .map(|name| (name.clone(), instance_of(name)))
            .collect();
        state
    }
}

#[derive(Clone, Debug)]
enum Op {
    /// Time passes to the next scaling interval: the policy decides, the managers converge and
    /// report.
    Tick,
    /// A started worker registers with the scheduler.
    Register(usize, usize),
    /// `kill -9` of a worker process.
    Kill(usize, usize),
    /// The scheduler notices a dead worker's silence (before or after its manager said so).
    LateDisconnect(usize),
    /// A manager reports without having decided anything.
    Heartbeat(usize),
    /// A manager's own tick: it replaces dead workers at once; its report may arrive later.
    ManagerTick(usize),
    /// A job of this many tasks; a wasm one (of one of three components); needing an
    /// environment.
    Submit(u32, Option<usize>, Option<usize>),
    /// A running task's report: succeeded, or failed.
    Finish(usize, bool),
    /// Every live worker process heartbeats and asks for its lease.
    WorkerHeartbeats,
    /// A client waits for (or watches) a job.
    Wait(u64, bool),
    ClientGone(usize),
    Cancel(u64),
    Forget(u64),
    /// `weir env register` of one of two names, with one of three components.
    EnvRegister(usize, usize, bool),
    EnvRemove(usize),
    /// A live worker's verdict on an environment.
    Verdict(usize, usize, bool),
    /// A manager's connection breaks (its processes run on).
    ManagerGone(usize),
    /// A manager connects again.
    ManagerJoin(usize),
    ManagerGoodbye(usize),
    /// The policy's next answer is an error.
    PolicyFails,
    /// `weir policy set` (the same waterfall).
    PolicySet,
    /// This many milliseconds pass.
    Later(u64),
    /// A live worker's stream ends; it then closes as stopping on purpose, or says nothing.
    StreamEnds(usize, bool),
    /// A worker reports a task it holds started (one held ahead of a free slot, or not).
    Started(usize),
    /// `weir workers wait N [--env NAME]`.
    WaitWorkers(u32, Option<usize>),
}

fn scaling_op() -> impl Strategy<Value = Op> {
    prop_oneof![
        3 => Just(Op::Tick),
        3 => (0..2usize, 0..8usize).prop_map(|(m, w)| Op::Register(m, w)),
        2 => (0..2usize, 0..8usize).prop_map(|(m, w)| Op::Kill(m, w)),
        1 => (0..8usize).prop_map(Op::LateDisconnect),
        1 => (0..2usize).prop_map(Op::Heartbeat),
        2 => (0..2usize).prop_map(Op::ManagerTick),
        1 => (1..12u32).prop_map(|n| Op::Submit(n, None, None)),
        2 => (0..16usize).prop_map(|i| Op::Finish(i, true)),
    ]
}

fn any_op() -> impl Strategy<Value = Op> {
    prop_oneof![
        // Workers and managers about half the time, the rest everything else.
        16 => scaling_op(),
        1 => (
            1..6u32,
            proptest::option::of(0..3usize),
            proptest::option::of(0..2usize)
        )
            .prop_map(|(n, wasm, env)| Op::Submit(n, wasm, env)),
        1 => (0..16usize, any::<bool>()).prop_map(|(i, ok)| Op::Finish(i, ok)),
        1 => Just(Op::WorkerHeartbeats),
        1 => (1..8u64, any::<bool>()).prop_map(|(j, watch)| Op::Wait(j, watch)),
        1 => (0..4usize).prop_map(Op::ClientGone),
        1 => (1..8u64).prop_map(Op::Cancel),
        1 => (1..8u64).prop_map(Op::Forget),
        1 => (0..2usize, 0..3usize, any::<bool>()).prop_map(|(n, c, w)| Op::EnvRegister(n, c, w)),
        1 => (0..2usize).prop_map(Op::EnvRemove),
        1 => (0..8usize, 0..2usize, any::<bool>()).prop_map(|(w, n, m)| Op::Verdict(w, n, m)),
        1 => (0..2usize).prop_map(Op::ManagerGone),
        1 => (0..2usize).prop_map(Op::ManagerJoin),
        1 => (0..2usize).prop_map(Op::ManagerGoodbye),
        1 => Just(Op::PolicyFails),
        1 => Just(Op::PolicySet),
        1 => (1..4_000u64).prop_map(Op::Later),
        1 => (0..8usize, any::<bool>()).prop_map(|(w, stops)| Op::StreamEnds(w, stops)),
        2 => (0..16usize).prop_map(Op::Started),
        1 => (0..4u32, proptest::option::of(0..2usize)).prop_map(|(n, e)| Op::WaitWorkers(n, e)),
    ]
}

const ENVIRONMENTS: [&str; 2] = ["big", "fast"];
const POLICY: &str = "1, t\n";

/// Component bytes: task and condition components may be the same.
fn component(index: usize) -> (weir_proto::ComponentHash, Arc<[u8]>) {
    let bytes = vec![index as u8 + 1; 8];
    (component_hash(&bytes), Arc::from(bytes))
}

fn config(broad: bool) -> Config {
    let never = u64::MAX / 4;
    Config {
        tasks: tasks::Config {
            heartbeat_timeout_ms: if broad { 3_000 } else { never },
            idle_silence_ms: if broad { 3_000 } else { never },
            forget_after_ms: broad.then_some(1_000),
            fence_ms: if broad { 2_000 } else { 0 },
            prefetch: u32::from(broad),
            ..tasks::Config::default()
        },
        manager_timeout_ms: if broad { 3_000 } else { never },
        manager_forget_ms: if broad { 8_000 } else { never },
        lease_ms: 3_000,
        idle_pace_per_worker_us: 2_000,
        tick_ms: 500,
        scaling_ms: Some(1_000),
        scale_down_delay_ms: 0,
        max_drain_percent: 10,
        unschedulable_timeout_ms: broad.then_some(6_000),
        policy: PolicyInfo {
            name: "waterfall".into(),
            content: POLICY.into(),
            ..PolicyInfo::default()
        },
        tiers: Policy::parse(Flavor::WorkerType, POLICY)
            .expect("content")
            .tiers(),
        journal: broad,
        compact_min_bytes: 0,
        restart_grace_ms: 0,
    }
}

/// The scheduler core and everything around it: the shell's part, workers, managers, clients.
struct Sim {
    core: Scheduler,
    policy: Policy,
    pools: Vec<Pool>,
    now: u64,
    /// Worker connections waiting for their id: (pool, name, the tasks it claims).
    joining: HashMap<u64, (usize, String, Vec<TaskId>)>,
    /// Tasks handed to workers and not reported.
    running: Vec<(WorkerId, TaskId)>,
    /// Tasks a live process still runs while it has no connection (it claims them when it
    /// registers again), by process name.
    holding: HashMap<String, Vec<TaskId>>,
    /// What the actions call for next (the shell feeds it in the same round).
    inputs: VecDeque<Input>,
    next_id: u64,
    fail_next: bool,
    /// Managers that reported in this round.
    reported: Vec<usize>,
    journal_bytes: u64,
}

fn run(broad: bool, ops: &[Op], caps: (u32, u32), slots: (u32, u32)) -> Result<(), TestCaseError> {
    let mut sim = Sim::new(broad, caps, slots);
    for m in 0..sim.pools.len() {
        sim.manager_join(m)?;
    }
    for op in ops {
        sim.step(op)?;
    }
    Ok(())
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(200))]

    #[test]
    fn deaths_restarts_and_late_disconnects_never_take_a_manager_past_its_cap(
        ops in proptest::collection::vec(scaling_op(), 1..160),
        caps in (1..5u32, 1..9u32),
        slots in (1..3u32, 1..3u32),
    ) {
        run(false, &ops, caps, slots)?;
    }

    /// Every kind of input, in any order: the whole scheduler stays sane after every round.
    #[test]
    fn every_round_of_any_inputs_keeps_the_whole_scheduler_sane(
        ops in proptest::collection::vec(any_op(), 1..200),
        caps in (1..5u32, 1..9u32),
        slots in (1..3u32, 1..3u32),
    ) {
        run(true, &ops, caps, slots)?;
    }
}

#[test]
fn the_manager_plan_stops_named_then_unregistered_and_fills_up() {
    let names = |list: &[&str]| list.iter().map(|s| s.to_string()).collect::<Vec<_>>();
    let pool = |alive: &[&str]| {
        let mut book = Book::processes("m", 100);
        book.units = alive.iter().map(|n| Unit::one(n.to_string(), 0)).collect();
        book
    };
    let alive = ["m-1", "m-2", "m-3", "m-4"];
    // Named first; then the newest unregistered ones; registered ones are never taken unnamed.
    let mut book = pool(&alive);
    let step = book.step(
        0,
        1,
        &names(&["m-1"]),
        &names(&["m-1", "m-2", "m-4"]),
        false,
    );
    let stopped: Vec<String> = step.stop.into_iter().map(|s| s.id).collect();
    assert_eq!(stopped, names(&["m-1", "m-3"]));
    assert_eq!(step.start, 0);
    // Below the desired count: start the difference (the pool starts none while backing off).
    assert_eq!(pool(&alive).step(0, 6, &[], &[], false).start, 2);
}

/// A worker process's instance: one per name (the pools never reuse a name).
fn instance_of(name: &str) -> u64 {
    (name.bytes()).fold(7u64, |h, b| h.wrapping_mul(31).wrapping_add(u64::from(b)))
}
