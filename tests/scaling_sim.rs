//! The scaling loop as a pure simulation, no processes: the task core, the manager controller,
//! the native waterfall, the validation every decision passes, and worker managers modelled
//! with the same convergence step the real one runs (`weir::core::units::Book::processes`). Random worker
//! deaths, restarts, registrations, late disconnects, submissions and finishes never take a
//! manager past its cap: every decision is within it, the manager never runs more processes,
//! and once the manager has reported (one tick) the scheduler's view of it is within it too.

use std::collections::HashMap;

use proptest::prelude::*;
use weir::core::managers::{Context, Managers};
use weir::core::scaling::validate_decisions;
use weir::core::tasks::{Action, Config, Loss, Tasks};
use weir::core::units::{Book, Unit};
use weir::proto::{ManagerState, NewGroup, Outcome, TaskKind, TaskSpec, WorkerId, WorkerInfo};
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
}

impl Pool {
    fn new(id: &str, cap_tasks: u32, slots: u32) -> Pool {
        let max_workers = (cap_tasks / slots).max(1);
        Pool {
            id: id.into(),
            cap_tasks,
            slots,
            book: Book::processes(id, max_workers),
            registered: HashMap::new(),
            dead: vec![],
            next: 0,
            desired: 0,
            exited: vec![],
        }
    }

    fn max_workers(&self) -> usize {
        (self.cap_tasks / self.slots).max(1) as usize
    }

    /// Its alive processes, oldest first.
    fn alive(&self) -> Vec<String> {
        self.book.workers(&[])
    }

    /// The manager's convergence step (`Book::step` of a process pool): its processes only.
    fn converge(&mut self, desired: u32, stop: &[String], registered: &[String]) {
        let desired = desired.min(self.max_workers() as u32);
        self.desired = desired;
        let step = self.book.step(0, desired, stop, registered, false);
        self.exited.extend(step.stop.into_iter().map(|s| s.id));
        for _ in 0..step.start {
            self.next += 1;
            let name = format!("{}-{}", self.id, self.next);
            self.book.units.push(Unit::one(name, 0));
        }
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
    /// Policy decides, managers converge and report (one scaling tick).
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
    Submit(u32),
    Schedule,
    Finish(usize),
}

fn op() -> impl Strategy<Value = Op> {
    prop_oneof![
        3 => Just(Op::Tick),
        3 => (0..2usize, 0..8usize).prop_map(|(m, w)| Op::Register(m, w)),
        2 => (0..2usize, 0..8usize).prop_map(|(m, w)| Op::Kill(m, w)),
        1 => (0..8usize).prop_map(Op::LateDisconnect),
        1 => (0..2usize).prop_map(Op::Heartbeat),
        2 => (0..2usize).prop_map(Op::ManagerTick),
        1 => (1..12u32).prop_map(Op::Submit),
        2 => Just(Op::Schedule),
        2 => (0..16usize).prop_map(Op::Finish),
    ]
}

fn submit(core: &mut Tasks, count: u32) {
    let spec = TaskSpec {
        kind: TaskKind::Command {
            argv: vec!["true".into()],
            env: vec![],
        },
        capabilities: vec![],
        environments: vec![],
        priority: 0,
        timeout_ms: 0,
        retries: 1_000,
        input: vec![],
    };
    core.submit(vec![NewGroup {
        spec,
        count,
        inputs: vec![],
    }])
    .expect("submission accepted");
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(200))]

    #[test]
    fn deaths_restarts_and_late_disconnects_never_take_a_manager_past_its_cap(
        ops in proptest::collection::vec(op(), 1..160),
        caps in (1..5u32, 1..9u32),
        slots in (1..3u32, 1..3u32),
    ) {
        let mut core = Tasks::new(Config::default());
        let mut managers = Managers::new(u64::MAX);
        let policy = Policy::parse(Flavor::WorkerType, "1, t\n").expect("content");
        let mut pools = [
            Pool::new("a", caps.0, slots.0),
            Pool::new("b", caps.1, slots.1),
        ];
        let mut running: Vec<(WorkerId, u64)> = Vec::new();
        let mut now = 0u64;
        let tiers = policy.tiers();
        let context = |core: &Tasks, now: u64| Context {
            now,
            workers: core.worker_views(now),
            tiers: &tiers,
            registered: core.registered_environments(),
        };
        // The manager reports; the scheduler drops the workers it no longer lists.
        fn heartbeat(core: &mut Tasks, managers: &mut Managers, pool: &mut Pool, now: u64) {
            let gone = managers.heartbeat(now, pool.state(), &core.worker_views(now));
            for (worker, planned) in gone {
                core.worker_lost(now, worker, "its manager no longer lists it", if planned { Loss::Stopped } else { Loss::Exited });
                pool.dead.retain(|w| *w != worker);
            }
        }
        for pool in &mut pools {
            heartbeat(&mut core, &mut managers, pool, now);
        }
        for op in ops {
            now += 100;
            match op {
                Op::Tick => {
                    let snapshot = managers.snapshot(&context(&core, now), 0, core.demand());
                    let decisions = policy.decide(&snapshot);
                    prop_assert_eq!(validate_decisions(&snapshot, &decisions), Ok(()));
                    let views = core.worker_views(now);
                    for decision in decisions {
                        let pool = pools.iter_mut().find(|p| p.id == decision.manager_id).expect("known");
                        prop_assert!(decision.desired_workers as usize <= pool.max_workers(), "{decision:?}");
                        let stop = core.drain(now, &decision.stop);
                        let registered: Vec<String> = views
                            .iter()
                            .filter(|w| w.manager.as_deref() == Some(pool.id.as_str()))
                            .map(|w| w.name.clone())
                            .collect();
                        pool.converge(decision.desired_workers, &stop, &registered);
                        prop_assert!(pool.alive().len() <= pool.max_workers(), "{} runs {} processes", pool.id, pool.alive().len());
                        heartbeat(&mut core, &mut managers, pool, now);
                    }
                }
                Op::Register(m, w) => {
                    let pool = &mut pools[m];
                    let unregistered: Vec<String> = pool.alive().into_iter().filter(|n| !pool.registered.contains_key(n)).collect();
                    if let Some(name) = unregistered.get(w % unregistered.len().max(1)) {
                        let (id, _) = core.worker_joined(now, WorkerInfo {
                            name: name.clone(),
                            slots: pool.slots,
                            capabilities: vec![],
                            worker_type: "t".into(),
                            manager: Some(pool.id.clone()),
                            local_environments: vec![],
                            running: vec![],
                            instance: 0,
                            ends_in_ms: None,
                            finished: vec![],
                        }).expect("names are unique");
                        pool.registered.insert(name.clone(), id);
                    }
                }
                Op::Kill(m, w) => {
                    let pool = &mut pools[m];
                    if !pool.book.units.is_empty() {
                        let name = pool.book.units.remove(w % pool.book.units.len()).id;
                        pool.exited.push(name.clone());
                        if let Some(id) = pool.registered.get(&name) {
                            pool.dead.push(*id);
                        }
                    }
                }
                Op::LateDisconnect(w) => {
                    let dead: Vec<WorkerId> = pools.iter().flat_map(|p| p.dead.clone()).collect();
                    if let Some(worker) = dead.get(w % dead.len().max(1)) {
                        core.worker_lost(now, *worker, "no heartbeat", Loss::Silent);
                        for pool in &mut pools {
                            pool.dead.retain(|d| d != worker);
                        }
                    }
                }
                Op::Heartbeat(m) => heartbeat(&mut core, &mut managers, &mut pools[m], now),
                Op::ManagerTick(m) => {
                    let pool = &mut pools[m];
                    let registered: Vec<String> = pool.registered.keys().cloned().collect();
                    pool.converge(pool.desired, &[], &registered);
                    prop_assert!(pool.alive().len() <= pool.max_workers());
                }
                Op::Submit(count) => submit(&mut core, count),
                Op::Schedule => core.schedule(0),
                Op::Finish(i) => {
                    if !running.is_empty() {
                        let (worker, task) = running.remove(i % running.len());
                        core.finished(now, worker, task, Outcome::Exited { code: Some(0), stdout: vec![], stderr: vec![] });
                    }
                }
            }
            for action in core.take_actions() {
                if let Action::Dispatch { worker, tasks } = action {
                    running.extend(tasks.into_iter().map(|t| (worker, t)));
                }
            }
            running.retain(|(worker, _)| core.worker_ids().contains(worker));
            prop_assert_eq!(core.sanity_check(), Ok(()));
            // Within one tick of any death or restart: once a manager has reported, the
            // scheduler counts no more workers for it than its cap.
            let reported: Vec<usize> = match op {
                Op::Tick => vec![0, 1],
                Op::Heartbeat(m) => vec![m],
                _ => vec![],
            };
            let snapshot = managers.snapshot(&context(&core, now), 0, core.demand());
            for index in reported {
                let (manager, pool) = (&snapshot.managers[index], &pools[index]);
                {
                    prop_assert!(
                        manager.current_workers() <= pool.max_workers() as u64,
                        "{} counts {} workers (cap {}) after it reported: {manager:?}",
                        pool.id, manager.current_workers(), pool.max_workers()
                    );
                }
            }
        }
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
