//! Worker managers in the simulation: each a manager core ([`crate::units::Book`] with
//! [`Backoff`]) whose shell duties are done by hand as the workers' are. A manager gets workers
//! in units of one from an engine (a cluster queue) that outlives it: a unit waits, then runs a
//! new worker core that registers by itself; a worker that dies ends its unit. A manager that
//! crashes and restarts with the same id adopts the units still listed (`Book::listed`), as the
//! Slurm backend does. A twin (a second process started with an id already in use) has an
//! engine of its own and dies with its workers.
//!
//! The manager's session follows `manager/session.rs`: its first heartbeat registers it (or is
//! refused while another connection holds the id, and it tries again later); nothing is
//! started or stopped before the scheduler's first desired count in a session; a desired count
//! is applied at once and answered with a heartbeat; every tick it converges again and reports.

use crate::units::{Backoff, Book, Listed, Unit};
use weir_proto::{EXITED_KEPT, ManagerState};

use super::Sim;

/// A manager's poll and heartbeat interval.
pub(super) const TICK_MS: u64 = 500;
/// How long a unit may take to register before it is taken for failed.
const UNIT_TIMEOUT_MS: u64 = 30_000;
/// Units waiting in the engine at once.
const MAX_PENDING: usize = 3;
/// Worker type every simulated manager starts (what the policy lists).
pub(super) const WORKER_TYPE: &str = "t";
pub(super) const SLOTS: u32 = 2;

/// A unit in the engine's queue: waiting until `starts_at`, then running worker `worker`.
pub(super) struct EngineUnit {
    pub id: String,
    pub starts_at: u64,
    pub worker: Option<usize>,
    /// The instance its manager chose for its worker (`None`: it names none, as a cluster
    /// engine's manager does).
    pub instance: Option<u64>,
}

/// What a manager process holds (lost when it crashes).
pub(super) struct ManagerCore {
    pub book: Book,
    pub backoff: Backoff,
    /// The scheduler's last desired count in this session (`None`: not said yet).
    pub desired: Option<u32>,
    /// The workers the scheduler said last it has registered.
    pub registered: Vec<String>,
    pub exited: Vec<String>,
    /// The instance it chose for each worker it started (none for units it adopted).
    pub instances: Vec<(String, u64)>,
    pub next_tick: u64,
}

/// One manager process slot: a manager id, its engine, and the process (if alive).
pub(super) struct SimManager {
    pub id: String,
    pub max_workers: u32,
    /// A second process started with an id already in use (it never restarts).
    pub twin: bool,
    /// It chooses its workers' instances and reports them (a process pool), or names none (a
    /// cluster engine's manager; a twin does as the first).
    pub names_instances: bool,
    pub core: Option<ManagerCore>,
    pub engine: Vec<EngineUnit>,
    pub next_unit: u64,
    /// Its connection to the scheduler.
    pub session: Option<usize>,
    pub next_connect: u64,
    pub restart_at: u64,
    pub partitioned_until: u64,
    /// When a twin is killed.
    pub dies_at: u64,
}

impl SimManager {
    pub(super) fn new(id: String, max_workers: u32, twin: bool, now: u64) -> SimManager {
        SimManager {
            id,
            max_workers,
            twin,
            names_instances: true,
            core: None,
            engine: Vec::new(),
            next_unit: 0,
            session: None,
            next_connect: now,
            restart_at: now,
            partitioned_until: 0,
            dies_at: u64::MAX,
        }
    }

    /// The engine's listing of its units.
    fn listing(&self, now: u64) -> Vec<(String, Listed)> {
        (self.engine.iter())
            .map(|u| match u.worker.is_some() || u.starts_at <= now {
                true => (u.id.clone(), Listed::Running),
                false => (u.id.clone(), Listed::Pending),
            })
            .collect()
    }

    pub(super) fn state(&self) -> Option<ManagerState> {
        let core = self.core.as_ref()?;
        let mut state = ManagerState {
            labels: Vec::new(),
            id: self.id.clone(),
            worker_type: WORKER_TYPE.into(),
            max_task_concurrency: self.max_workers * SLOTS,
            worker_slots: SLOTS,
            capabilities: vec![],
            workers: core.book.workers(&core.registered),
            environments: vec![],
            fixed: None,
            exited: core
                .exited
                .iter()
                .rev()
                .take(EXITED_KEPT)
                .cloned()
                .collect(),
            backend: "slurm".into(),
            units: vec![],
            usable_ms: None,
            instances: vec![],
            launch: Default::default(),
        };
        state.instances = (core.instances.iter())
            .filter(|(name, _)| state.workers.contains(name) || state.exited.contains(name))
            .cloned()
            .collect();
        Some(state)
    }
}

impl Sim {
    /// Manager `m`'s process starts (again): a new core that first adopts what its engine
    /// still lists, then connects.
    pub(super) fn start_manager(&mut self, m: usize) {
        let now = self.now;
        let sm = &mut self.fleet.managers[m];
        let mut book = Book::new(&sm.id, 1, UNIT_TIMEOUT_MS, sm.max_workers, MAX_PENDING);
        let seen = book.listed(now, &sm.listing(now), &[]);
        self.fleet.stats.adopted += seen.adopted.len() as u64;
        sm.core = Some(ManagerCore {
            book,
            backoff: Backoff::default(),
            desired: None,
            registered: Vec::new(),
            exited: Vec::new(),
            instances: Vec::new(),
            next_tick: now + TICK_MS,
        });
        sm.session = None;
        sm.next_connect = now;
        sm.restart_at = u64::MAX;
        let (id, adopted) = (sm.id.clone(), seen.adopted.len());
        self.note(format!("m{m} ({id}) starts, adopting {adopted} units"));
    }

    /// Manager `m`'s process dies: its connection breaks with what is in flight; its units run
    /// on (a twin's die with it). It restarts later, unless it is a twin.
    pub(super) fn crash_manager(&mut self, m: usize) {
        if self.fleet.managers[m].core.is_none() {
            return;
        }
        self.note(format!("crash m{m}"));
        let sm = &mut self.fleet.managers[m];
        sm.core = None;
        sm.restart_at = match sm.twin {
            true => u64::MAX,
            false => self.now + 500 + self.rng.below(5_000),
        };
        if let Some(c) = sm.session.take() {
            let notice = self.now + self.rng.below(super::IDLE_MS);
            self.break_mconn(c, None, Some(notice));
        }
        if self.fleet.managers[m].twin {
            let workers: Vec<usize> = (self.fleet.managers[m].engine.iter())
                .filter_map(|u| u.worker)
                .collect();
            self.fleet.managers[m].engine.clear();
            for w in workers {
                self.crash(w);
            }
        }
    }

    /// Manager `m` stops on purpose (a signal): goodbye first, then it stops its workers and
    /// exits; it is started again a few seconds later.
    pub(super) fn stop_manager(&mut self, m: usize) {
        if self.fleet.managers[m].core.is_none() {
            return;
        }
        self.note(format!("m{m} stops on purpose"));
        self.fleet.stats.goodbyes += 1;
        if let Some(c) = self.fleet.managers[m].session.take() {
            self.manager_goodbye(c);
        }
        let sm = &mut self.fleet.managers[m];
        sm.core = None;
        sm.restart_at = self.now + 1_000 + self.rng.below(4_000);
        let workers: Vec<usize> = sm.engine.drain(..).filter_map(|u| u.worker).collect();
        for w in workers {
            self.stop_worker(w);
        }
    }

    /// A second process is started with manager `m`'s id, and killed a while later.
    pub(crate) fn start_twin(&mut self, m: usize) {
        if self
            .fleet
            .managers
            .iter()
            .any(|s| s.twin && s.core.is_some())
        {
            return;
        }
        let original = &self.fleet.managers[m];
        let mut twin = SimManager::new(original.id.clone(), original.max_workers, true, self.now);
        twin.names_instances = original.names_instances;
        // Numbered from where the other's were a while ago: named as the other's were (two
        // process pools of one id both name theirs `{id}-n`), so its reports name the other's
        // workers.
        twin.next_unit = original.next_unit.saturating_sub(3);
        twin.dies_at = self.now + 2_000 + self.rng.below(20_000);
        self.fleet.managers.push(twin);
        let t = self.fleet.managers.len() - 1;
        self.fleet.stats.twins += 1;
        self.note(format!("m{t} starts as a twin of m{m}"));
        self.start_manager(t);
    }

    /// Worker process `w` exited: if a manager's engine runs it, its unit ends.
    pub(super) fn process_exited(&mut self, w: usize) {
        let Some(m) = self.workers[w].manager_slot else {
            return;
        };
        self.workers[w].restart_at = u64::MAX;
        let sm = &mut self.fleet.managers[m];
        sm.engine.retain(|u| u.worker != Some(w));
        if let Some(core) = sm.core.as_mut() {
            let name = self.workers[w].name.clone();
            core.exited.push(name);
        }
    }

    /// Manager `m` converges toward `desired` (the scheduler's, or its last), stopping the
    /// units named in `stop` once drained, and reports.
    pub(super) fn manager_converge(&mut self, m: usize, stop: &[String]) {
        let now = self.now;
        let sm = &mut self.fleet.managers[m];
        let listing = sm.listing(now);
        let Some(core) = sm.core.as_mut() else { return };
        let Some(desired) = core.desired else { return };
        let seen = core.book.listed(now, &listing, &[]);
        let early = seen.ended.iter().filter(|u| !u.registered).count();
        core.backoff.fail(early, now);
        self.fleet.stats.adopted += seen.adopted.len() as u64;
        let (registered, recovering) = (core.registered.clone(), core.backoff.recovering());
        let step = core.book.step(now, desired, stop, &registered, recovering);
        if !step.registered.is_empty() {
            core.backoff.reset();
        }
        let start = match core.backoff.active(now) {
            true => 0,
            false => step.start,
        };
        let mut stopped = Vec::new();
        for unit in step.stop {
            core.exited
                .push(crate::units::names(&sm.id, &unit.id, 1).remove(0));
            if let Some(i) = sm.engine.iter().position(|u| u.id == unit.id) {
                stopped.extend(sm.engine.remove(i).worker.map(|w| (w, unit.why)));
            }
        }
        // What it reports no more it forgets.
        let recent: Vec<&String> = core.exited.iter().rev().take(EXITED_KEPT).collect();
        let live = core.book.workers(&[]);
        (core.instances).retain(|(n, _)| live.contains(n) || recent.contains(&n));
        for _ in 0..start {
            sm.next_unit += 1;
            let id = sm.next_unit.to_string();
            let unit: Unit = core.book.unit(id.clone(), now);
            core.book.units.push(unit);
            let starts_at = now + 100 + self.rng.below(3_000);
            let instance = sm.names_instances.then(|| {
                self.fleet.next_instance += 1;
                1 << 62 | self.fleet.next_instance
            });
            if let Some(instance) = instance {
                let name = crate::units::names(&sm.id, &id, 1).remove(0);
                core.instances.push((name, instance));
            }
            sm.engine.push(EngineUnit {
                id,
                starts_at,
                worker: None,
                instance,
            });
        }
        let (units, cap) = (sm.engine.len(), sm.max_workers as usize);
        assert!(
            units <= cap,
            "m{m} runs {units} units, above its cap {cap}\n{}",
            self.trace_tail()
        );
        for (w, why) in stopped {
            self.note(format!("m{m} stops w{w} ({why:?})"));
            self.stop_worker(w);
        }
        self.manager_heartbeat(m);
    }

    /// Manager `m` is cut off for `length` ms (frames wait; a long partition times the
    /// connection out).
    pub(crate) fn partition_manager(&mut self, m: usize, length: u64) {
        self.note(format!("partition m{m} for {length} ms"));
        let sm = &mut self.fleet.managers[m];
        sm.partitioned_until = sm.partitioned_until.max(self.now + length);
        if length >= super::IDLE_MS
            && let Some(c) = sm.session
        {
            let notice = self.now + super::IDLE_MS;
            let jitter = self.rng.below(100);
            self.break_mconn(c, Some(notice), Some(notice + jitter));
        }
    }

    /// A random fault of a manager: its connection breaks, it is cut off, it crashes (and
    /// restarts with the same id, soon or after it was forgotten), it stops on purpose (goodbye),
    /// or a twin is started with its id.
    pub(super) fn manager_fault(&mut self) {
        let originals = self.fleet.managers.iter().filter(|s| !s.twin).count();
        let m = self.rng.below(originals as u64) as usize;
        match self.rng.below(6) {
            0 => {
                if let Some(c) = self.fleet.managers[m].session {
                    let notice_m = self.now + self.rng.below(super::IDLE_MS);
                    let notice_s = self.now + self.rng.below(super::IDLE_MS);
                    self.break_mconn(c, Some(notice_m), Some(notice_s));
                }
            }
            1 => {
                let length = 100 + self.rng.below(super::IDLE_MS * 3);
                self.partition_manager(m, length);
            }
            2 => self.crash_manager(m),
            3 => {
                // Gone for longer than the scheduler remembers a silent manager.
                self.crash_manager(m);
                self.fleet.stats.long_absences += 1;
                let sm = &mut self.fleet.managers[m];
                sm.restart_at = sm
                    .restart_at
                    .max(self.now + 60_000 + self.rng.below(30_000));
            }
            4 => self.stop_manager(m),
            _ => self.start_twin(m),
        }
    }

    /// A worker its manager stopped: it stops its tasks and closes its connection on purpose.
    fn stop_worker(&mut self, w: usize) {
        if self.workers[w].core.is_none() {
            return;
        }
        match self.workers[w].session {
            Some(_) => self.end_session(w, true),
            None => {
                self.workers[w].runs.clear();
                self.workers[w].cancels.clear();
                self.workers[w].core = None;
            }
        }
        self.workers[w].restart_at = u64::MAX;
    }

    /// The manager's tick: converge (once the scheduler has said what it wants) and report.
    pub(super) fn manager_tick(&mut self, m: usize) {
        let Some(core) = self.fleet.managers[m].core.as_mut() else {
            return;
        };
        core.next_tick = self.now + TICK_MS;
        let desired = core.desired.is_some();
        if self.fleet.managers[m].session.is_none() {
            return;
        }
        match desired {
            true => self.manager_converge(m, &[]),
            false => self.manager_heartbeat(m),
        }
    }

    /// A waiting unit of manager `m`'s engine starts its worker.
    pub(super) fn start_unit(&mut self, m: usize, unit: usize) {
        let sm = &self.fleet.managers[m];
        let name = crate::units::names(&sm.id, &sm.engine[unit].id, 1).remove(0);
        let (manager, instance) = (sm.id.clone(), sm.engine[unit].instance);
        let w = self.workers.len();
        (self.workers).push(super::SimWorker::managed(name, manager, m, instance));
        self.fleet.managers[m].engine[unit].worker = Some(w);
        self.note(format!("m{m}'s unit starts w{w}"));
        self.start_worker(w);
    }
}

impl Sim {
    pub(crate) fn manager_stats(&self) -> super::ManagerStats {
        self.fleet.stats
    }

    /// Whether manager slot `m` holds a registered connection.
    pub(crate) fn manager_registered(&self, m: usize) -> bool {
        (self.fleet.managers[m].session)
            .is_some_and(|c| self.fleet.registered.get(&self.fleet.managers[m].id) == Some(&c))
    }
}
