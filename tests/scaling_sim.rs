//! The scheduler core driven through its one entry point, `Scheduler::handle`, as a pure
//! simulation, no processes: the shell's part is played by this file (actions answered the way
//! the shell and the peers answer them), the policy is the native waterfall, and worker
//! managers are modelled with the same convergence step the real one runs
//! (`weir::core::units::Book::processes`). After every round (inputs, `EndOfBatch`, `Synced`) the whole
//! scheduler passes `Scheduler::sanity_check`.
//!
//! Random worker deaths, restarts, registrations, late disconnects, submissions and finishes
//! never take a manager past its cap: every decision is within it, the manager never runs more
//! processes, and once the manager has reported the scheduler's view of it is within it too.
//! A broader run adds clients, cancels, forgets, environments, verdicts, manager connections
//! that break and come back, goodbyes, failing decisions and policy changes.

use std::collections::{HashMap, VecDeque};
use std::sync::Arc;

use proptest::prelude::*;
use weir::core::scaling::validate_decisions;
use weir::core::scheduler::{Action, Config, Input, PolicyInfo, Scheduler};
use weir::core::units::{Book, Unit};
use weir::core::{component_hash, tasks};
use weir::proto::{
    EnvVerdict, ManagerState, NewGroup, Outcome, Request, TaskId, TaskKind, TaskSpec, ToManager,
    ToWorker, WorkerId, WorkerInfo,
};
use weir_waterfall::{Flavor, Policy};

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
        ManagerState {
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
                .take(weir::proto::EXITED_KEPT)
                .cloned()
                .collect(),
            backend: String::new(),
            units: vec![],
            usable_ms: None,
        }
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
fn component(index: usize) -> (weir::proto::ComponentHash, Arc<[u8]>) {
    let bytes = vec![index as u8 + 1; 8];
    (component_hash(&bytes), Arc::from(bytes))
}

fn config(broad: bool) -> Config {
    let never = u64::MAX / 4;
    Config {
        tasks: tasks::Config {
            heartbeat_timeout_ms: if broad { 3_000 } else { never },
            forget_after_ms: broad.then_some(1_000),
            fence_ms: if broad { 2_000 } else { 0 },
            prefetch: u32::from(broad),
            ..tasks::Config::default()
        },
        manager_timeout_ms: if broad { 3_000 } else { never },
        manager_forget_ms: if broad { 8_000 } else { never },
        lease_ms: 3_000,
        tick_ms: 500,
        scaling_ms: Some(1_000),
        scale_down_delay_ms: 0,
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

impl Sim {
    fn new(broad: bool, caps: (u32, u32), slots: (u32, u32)) -> Sim {
        Sim {
            core: Scheduler::new(config(broad)),
            policy: Policy::parse(Flavor::WorkerType, POLICY).expect("content"),
            pools: vec![
                Pool::new("a", caps.0, slots.0),
                Pool::new("b", caps.1, slots.1),
            ],
            now: 0,
            joining: HashMap::new(),
            running: Vec::new(),
            holding: HashMap::new(),
            inputs: VecDeque::new(),
            next_id: 0,
            fail_next: false,
            reported: Vec::new(),
            journal_bytes: 0,
        }
    }

    fn next_id(&mut self) -> u64 {
        self.next_id += 1;
        self.next_id
    }

    /// Feed `input`, then what its actions call for, until nothing is left.
    fn feed(&mut self, input: Input) -> Result<(), TestCaseError> {
        self.inputs.push_back(input);
        while let Some(input) = self.inputs.pop_front() {
            if let Input::ManagerHeartbeat { state } | Input::ManagerJoined { state, .. } = &input
                && let Some(index) = self.pools.iter().position(|p| p.id == state.id)
            {
                self.reported.push(index);
            }
            self.core.handle(self.now, input);
            while let Some(action) = self.core.poll_action() {
                self.perform(action)?;
            }
        }
        Ok(())
    }

    /// The shell's and the peers' answer to an action.
    fn perform(&mut self, action: Action) -> Result<(), TestCaseError> {
        match action {
            Action::Registered { connection, worker } => {
                if let Some((pool, name, claims)) = self.joining.remove(&connection) {
                    self.pools[pool].registered.insert(name, worker);
                    // Those it may not keep, the core tells it to stop (`Cancel`).
                    self.running.extend(claims.into_iter().map(|t| (worker, t)));
                }
            }
            Action::Refused { connection, .. } => drop(self.joining.remove(&connection)),
            Action::ToWorker { worker, message } => self.worker_answers(worker, message),
            Action::CloseWorker { worker } => {
                // The connection's session ends and says so.
                self.inputs.push_back(Input::WorkerGone {
                    worker,
                    reason: "dropped by the scheduler".into(),
                    planned: false,
                });
                self.forget_worker(worker);
            }
            Action::ManagerRegistered { id, .. } => self.pool(&id).connected = true,
            Action::ManagerRefused { .. } => {}
            Action::CloseManager { manager } => self.pool(&manager).connected = false,
            Action::ToManager { manager, message } => {
                let ToManager::Desired {
                    desired,
                    stop,
                    registered,
                    ..
                } = message;
                let pool = self.pool(&manager);
                prop_assert!(pool.connected, "a decision for {manager}, not connected");
                let stopped = pool.converge(desired, &stop, &registered);
                prop_assert!(
                    pool.book.units.len() <= pool.max_workers(),
                    "{} runs {} processes",
                    pool.id,
                    pool.book.units.len()
                );
                let state = pool.state();
                self.inputs.push_back(Input::ManagerHeartbeat { state });
                for worker in stopped {
                    self.inputs.push_back(Input::WorkerGone {
                        worker,
                        reason: "it stopped".into(),
                        planned: true,
                    });
                    self.forget_worker(worker);
                }
            }
            Action::Reply { .. } | Action::Journal { .. } => {}
            Action::Compact(_) => self.inputs.push_back(Input::Compacted),
            Action::SwapPolicy { client, policy, .. } => {
                let result = Ok(self.policy.tiers());
                self.inputs.push_back(Input::PolicySwapped {
                    client,
                    policy,
                    result,
                });
            }
            // The same waterfall: nothing changes here.
            Action::AdoptPolicy { .. } => {}
            Action::Decide(snapshot) => {
                let decisions = self.policy.decide(&snapshot);
                prop_assert_eq!(validate_decisions(&snapshot, &decisions), Ok(()));
                for decision in &decisions {
                    let pool = self.pool(&decision.manager_id);
                    prop_assert!(
                        decision.desired_workers as usize <= pool.max_workers(),
                        "{decision:?}"
                    );
                }
                let result = match std::mem::take(&mut self.fail_next) {
                    true => Err("the policy trapped".to_string()),
                    false => Ok(decisions),
                };
                self.inputs.push_back(Input::Decided { result });
            }
        }
        Ok(())
    }

    fn worker_answers(&mut self, worker: WorkerId, message: ToWorker) {
        match message {
            ToWorker::Run(assignments) => self
                .running
                .extend(assignments.into_iter().map(|a| (worker, a.task))),
            // A worker gives back what it has not started: here, all it can.
            ToWorker::Revoke { tasks, count } => {
                let back: Vec<TaskId> = tasks.into_iter().take(count as usize).collect();
                self.running
                    .retain(|(w, t)| *w != worker || !back.contains(t));
                self.inputs.push_back(Input::Revoked {
                    worker,
                    tasks: back,
                });
            }
            // It stops them and reports them.
            ToWorker::Cancel(tasks) => {
                self.running
                    .retain(|(w, t)| *w != worker || !tasks.contains(t));
                let results = tasks
                    .into_iter()
                    .map(|t| {
                        (
                            t,
                            Outcome::Error {
                                message: "canceled".into(),
                            },
                        )
                    })
                    .collect();
                self.inputs.push_back(Input::Finished { worker, results });
            }
            _ => {}
        }
    }

    fn pool(&mut self, id: &str) -> &mut Pool {
        let index = self.pools.iter().position(|p| p.id == id).unwrap_or(0);
        &mut self.pools[index]
    }

    /// The worker's connection is gone: its process, if alive, may register again, claiming
    /// the tasks it still runs.
    fn forget_worker(&mut self, worker: WorkerId) {
        for pool in &self.pools {
            let name = pool.registered.iter().find(|(_, id)| **id == worker);
            if let Some((name, _)) = name
                && pool.alive().contains(name)
            {
                let held = self.running.iter().filter(|(w, _)| *w == worker);
                let held: Vec<TaskId> = held.map(|(_, t)| *t).collect();
                self.holding.entry(name.clone()).or_default().extend(held);
            }
        }
        for pool in &mut self.pools {
            pool.registered.retain(|_, id| *id != worker);
            pool.dead.retain(|id| *id != worker);
        }
        self.running.retain(|(w, _)| *w != worker);
    }

    /// A request from a new client.
    fn request(
        &mut self,
        request: Request,
        components: Vec<(weir::proto::ComponentHash, Arc<[u8]>)>,
    ) -> Result<(), TestCaseError> {
        let client = self.next_id();
        self.feed(Input::Request {
            client,
            request,
            components,
        })
    }

    fn manager_join(&mut self, m: usize) -> Result<(), TestCaseError> {
        if self.pools[m].connected {
            return Ok(());
        }
        let connection = self.next_id();
        let state = self.pools[m].state();
        self.feed(Input::ManagerJoined {
            connection,
            state,
            peer: format!("10.0.0.{m}:1"),
        })
    }

    fn step(&mut self, op: &Op) -> Result<(), TestCaseError> {
        self.now += 100;
        match *op {
            Op::Tick => {
                // Rounds of one timeout each, until the policy is handed a snapshot and the
                // managers report (there may be no manager).
                for _ in 0..8 {
                    self.now = self.now.max(self.core.poll_timeout());
                    self.feed(Input::Timeout)?;
                    let decided = !self.reported.is_empty();
                    self.end_round(op)?;
                    if decided {
                        break;
                    }
                }
            }
            Op::Register(m, w) => {
                let pool = &self.pools[m];
                let unregistered: Vec<String> = pool
                    .alive()
                    .iter()
                    .filter(|n| !pool.registered.contains_key(*n))
                    .cloned()
                    .collect();
                let slots = pool.slots;
                let manager = pool.id.clone();
                if let Some(name) = unregistered.get(w % unregistered.len().max(1)) {
                    let connection = self.next_id();
                    let claims = self.holding.remove(name).unwrap_or_default();
                    let info = WorkerInfo {
                        name: name.clone(),
                        slots,
                        capabilities: vec![],
                        worker_type: "t".into(),
                        manager: Some(manager),
                        local_environments: vec![],
                        running: claims.clone(),
                        // One per process: its claims are its own only if it is the same one.
                        instance: name
                            .bytes()
                            .fold(7u64, |h, b| h.wrapping_mul(31).wrapping_add(u64::from(b))),
                        ends_in_ms: None,
                        finished: vec![],
                    };
                    self.joining.insert(connection, (m, name.clone(), claims));
                    self.feed(Input::WorkerJoined { connection, info })?;
                }
            }
            Op::Kill(m, w) => {
                let pool = &mut self.pools[m];
                if !pool.book.units.is_empty() {
                    let i = w % pool.book.units.len();
                    let name = pool.book.units.remove(i).id;
                    self.holding.remove(&name);
                    pool.exited.push(name.clone());
                    if let Some(id) = pool.registered.get(&name) {
                        pool.dead.push(*id);
                        let id = *id;
                        self.running.retain(|(w, _)| *w != id);
                    }
                }
            }
            Op::LateDisconnect(w) => {
                let dead: Vec<WorkerId> = self.pools.iter().flat_map(|p| p.dead.clone()).collect();
                if let Some(&worker) = dead.get(w % dead.len().max(1)) {
                    self.forget_worker(worker);
                    self.feed(Input::WorkerGone {
                        worker,
                        reason: "timed out".into(),
                        planned: false,
                    })?;
                }
            }
            Op::Heartbeat(m) => {
                if self.pools[m].connected {
                    let state = self.pools[m].state();
                    self.feed(Input::ManagerHeartbeat { state })?;
                }
            }
            Op::ManagerTick(m) => {
                let pool = &mut self.pools[m];
                let registered: Vec<String> = pool.registered.keys().cloned().collect();
                let desired = pool.desired;
                pool.converge(desired, &[], &registered);
                prop_assert!(pool.book.units.len() <= pool.max_workers());
            }
            Op::Submit(count, wasm, env) => {
                let (kind, components) = match wasm {
                    Some(c) => {
                        let (hash, bytes) = component(c);
                        (TaskKind::Wasm { component: hash }, vec![(hash, bytes)])
                    }
                    None => (
                        TaskKind::Command {
                            argv: vec!["true".into()],
                            env: vec![],
                        },
                        vec![],
                    ),
                };
                let spec = TaskSpec {
                    kind,
                    capabilities: vec![],
                    environments: env
                        .map(|e| ENVIRONMENTS[e].to_string())
                        .into_iter()
                        .collect(),
                    priority: 0,
                    timeout_ms: 0,
                    retries: 1_000,
                    input: vec![],
                };
                let groups = vec![NewGroup {
                    spec,
                    count,
                    inputs: vec![],
                }];
                let request = Request::Submit {
                    components: vec![],
                    groups,
                };
                self.request(request, components)?;
            }
            Op::Finish(i, ok) => {
                let alive: Vec<(WorkerId, TaskId)> = self
                    .running
                    .iter()
                    .copied()
                    .filter(|(w, _)| !self.pools.iter().any(|p| p.dead.contains(w)))
                    .collect();
                if !alive.is_empty() {
                    let (worker, task) = alive[i % alive.len()];
                    self.running.retain(|r| *r != (worker, task));
                    let outcome = Outcome::Exited {
                        code: Some(if ok { 0 } else { 1 }),
                        stdout: vec![],
                        stderr: vec![],
                    };
                    self.feed(Input::Finished {
                        worker,
                        results: vec![(task, outcome)],
                    })?;
                }
            }
            Op::WorkerHeartbeats => {
                let live: Vec<WorkerId> = self
                    .pools
                    .iter()
                    .flat_map(|p| {
                        p.registered
                            .values()
                            .copied()
                            .filter(|w| !p.dead.contains(w))
                    })
                    .collect();
                for worker in live {
                    self.feed(Input::Heartbeat {
                        worker,
                        renew: Some(self.now),
                    })?;
                }
            }
            Op::Wait(job, watch) => {
                let request = match watch {
                    true => Request::Watch { job },
                    false => Request::Wait { job },
                };
                self.request(request, vec![])?;
            }
            Op::ClientGone(back) => {
                let client = self.next_id.saturating_sub(back as u64);
                self.feed(Input::ClientGone { client })?;
            }
            Op::Cancel(job) => self.request(Request::Cancel { job }, vec![])?,
            Op::Forget(job) => self.request(Request::Forget { job }, vec![])?,
            Op::EnvRegister(name, c, wait) => {
                let request = Request::EnvRegister {
                    name: ENVIRONMENTS[name].into(),
                    component: vec![],
                    config: vec![],
                    wait,
                };
                self.request(request, vec![component(c)])?;
            }
            Op::EnvRemove(name) => {
                let name = ENVIRONMENTS[name].into();
                self.request(Request::EnvRemove { name }, vec![])?;
            }
            Op::Verdict(w, name, matches) => {
                let live = self.core.tasks().worker_ids();
                if let Some(&worker) = live.get(w % live.len().max(1)) {
                    let verdict = match matches {
                        true => EnvVerdict::Match,
                        false => EnvVerdict::NoMatch,
                    };
                    self.feed(Input::Verdicts {
                        worker,
                        verdicts: vec![(ENVIRONMENTS[name].into(), verdict)],
                    })?;
                }
            }
            Op::ManagerGone(m) => {
                if self.pools[m].connected {
                    let id = self.pools[m].id.clone();
                    self.feed(Input::ManagerGone { id })?;
                }
            }
            Op::ManagerJoin(m) => self.manager_join(m)?,
            Op::ManagerGoodbye(m) => {
                if self.pools[m].connected {
                    let id = self.pools[m].id.clone();
                    self.feed(Input::ManagerGoodbye { id })?;
                }
            }
            Op::PolicyFails => self.fail_next = true,
            Op::PolicySet => {
                let (hash, bytes) = component(7);
                let request = Request::PolicySet {
                    name: "waterfall".into(),
                    component: vec![],
                    content: POLICY.into(),
                };
                self.request(request, vec![(hash, bytes)])?;
            }
            Op::Later(ms) => self.now += ms,
            Op::WaitWorkers(count, env) => {
                let environment = env.map(|e| ENVIRONMENTS[e].to_string());
                self.request(Request::WaitWorkers { count, environment }, vec![])?;
            }
            Op::Started(i) => {
                if !self.running.is_empty() {
                    let (worker, task) = self.running[i % self.running.len()];
                    self.feed(Input::Started {
                        worker,
                        tasks: vec![task],
                    })?;
                }
            }
            Op::StreamEnds(w, stops) => {
                let live = self.core.tasks().worker_ids();
                if let Some(&worker) = live.get(w % live.len().max(1)) {
                    let reason = "the stream ended".to_string();
                    self.feed(Input::WorkerEnding { worker, reason })?;
                    if stops {
                        for pool in &mut self.pools {
                            let name = pool.registered.iter().find(|(_, id)| **id == worker);
                            if let Some(name) = name.map(|(n, _)| n.clone()) {
                                pool.book.units.retain(|u| u.id != name);
                                pool.exited.push(name);
                            }
                        }
                        self.forget_worker(worker);
                        self.feed(Input::WorkerGone {
                            worker,
                            reason: "it stopped".into(),
                            planned: true,
                        })?;
                    }
                }
            }
        }
        self.end_round(op)
    }

    /// The end of a round, as the shell ends every one: at most one timeout (when due), then
    /// `EndOfBatch` and the journal's sync. Then the checks.
    fn end_round(&mut self, op: &Op) -> Result<(), TestCaseError> {
        if self.now >= self.core.poll_timeout() && !matches!(op, Op::Tick) {
            self.feed(Input::Timeout)?;
        }
        self.feed(Input::EndOfBatch)?;
        self.journal_bytes += 100;
        let journal_bytes = self.journal_bytes;
        self.feed(Input::Synced { journal_bytes })?;
        if let Err(error) = self.core.sanity_check() {
            return Err(TestCaseError::fail(format!("after {op:?}: {error}")));
        }
        // Once a manager has reported, the scheduler counts no more workers for it than its cap.
        let snapshot = self.core.scaling_snapshot(self.now);
        for &index in &self.reported {
            let pool = &self.pools[index];
            if let Some(manager) = snapshot.managers.iter().find(|m| m.id == pool.id) {
                prop_assert!(
                    manager.current_workers() <= pool.max_workers() as u64,
                    "{} counts {} workers (cap {}) after it reported: {manager:?}",
                    pool.id,
                    manager.current_workers(),
                    pool.max_workers()
                );
            }
        }
        self.reported.clear();
        Ok(())
    }
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
