//! The managers' side of the network and of the scheduler's shell: manager connections
//! (ordered while they live, broken with what is in flight), their frames to the scheduler's
//! inputs, its manager actions to frames, the native policy answering `Decide`, and the
//! managers' events in virtual time.

use std::collections::{HashMap, VecDeque};

use crate::scheduler::{Action as SAction, Input as SInput};
use weir_proto::{FromManager, ToManager};
use weir_waterfall::Policy;

use super::Sim;
use super::managers::SimManager;

/// Connection ids of managers, apart from the workers' (their index in `Sim::conns`).
const MANAGER_CONNECTION: u64 = 1 << 40;

/// The policy: one tier of the managers' worker type.
pub(super) const POLICY: &str = "1, t\n";

pub(super) struct MConn {
    pub manager: usize,
    /// The manager id it registered as (in the scheduler's shell).
    pub id: Option<String>,
    pub broken: bool,
    pub to_sched: VecDeque<(u64, FromManager)>,
    pub to_manager: VecDeque<(u64, ToManager)>,
    pub manager_notice: Option<u64>,
    pub sched_notice: Option<u64>,
    /// The scheduler refused it (another connection holds the id).
    pub refused: bool,
}

/// What happened to managers, so the tests are not vacuous.
#[derive(Default, Debug, Clone, Copy)]
pub(crate) struct ManagerStats {
    /// Units a restarted manager found running and adopted.
    pub adopted: u64,
    pub restarts: u64,
    pub twins: u64,
    /// Connections the core refused because another held the id.
    pub refusals: u64,
    /// Refused connections of a twin while the original held the id.
    pub twin_refusals: u64,
    pub decisions: u64,
    pub goodbyes: u64,
    /// Crashes longer than the scheduler remembers a silent manager.
    pub long_absences: u64,
    /// Workers the scheduler dismissed (their manager was forgotten).
    pub dismissed: u64,
    /// A twin's heartbeats that report exited a name a registered worker of another process
    /// holds (the hazard of two managers of one id).
    pub crossed: u64,
}

impl ManagerStats {
    pub(crate) fn add(&mut self, other: &ManagerStats) {
        self.adopted += other.adopted;
        self.restarts += other.restarts;
        self.twins += other.twins;
        self.refusals += other.refusals;
        self.twin_refusals += other.twin_refusals;
        self.decisions += other.decisions;
        self.goodbyes += other.goodbyes;
        self.long_absences += other.long_absences;
        self.dismissed += other.dismissed;
        self.crossed += other.crossed;
    }
}

/// Every manager, their connections, and the scheduler's shell's map of registered ones.
pub(super) struct Fleet {
    pub managers: Vec<SimManager>,
    pub conns: Vec<MConn>,
    /// Manager id -> its registered connection, as the scheduler's shell holds them.
    pub registered: HashMap<String, usize>,
    pub policy: Policy,
    pub stats: ManagerStats,
    /// The scheduler's last desired count for each manager id.
    pub desired: HashMap<String, u32>,
    /// The last instance a manager chose for a worker.
    pub next_instance: u64,
}

impl Fleet {
    /// `managers` managers; about one in three (by seed) names no instances, as a cluster
    /// engine's does.
    pub(super) fn new(seed: u64, managers: usize) -> Fleet {
        Fleet {
            managers: (0..managers)
                .map(|m| {
                    let mut sm = SimManager::new(format!("m{m}"), 2 + m as u32 * 2, false, 0);
                    sm.names_instances = !(seed + m as u64).is_multiple_of(3);
                    sm
                })
                .collect(),
            conns: Vec::new(),
            registered: HashMap::new(),
            policy: Policy::parse(weir_waterfall::Flavor::WorkerType, POLICY)
                .expect("the test's policy parses"),
            stats: ManagerStats::default(),
            desired: HashMap::new(),
            next_instance: 0,
        }
    }
}

impl Sim {
    // ----- the network -----

    fn connect_manager(&mut self, m: usize) {
        if self.now < self.fleet.managers[m].partitioned_until {
            self.fleet.managers[m].next_connect = self.now + 200 + self.rng.below(800);
            return;
        }
        let c = self.fleet.conns.len();
        self.fleet.conns.push(MConn {
            manager: m,
            id: None,
            broken: false,
            to_sched: VecDeque::new(),
            to_manager: VecDeque::new(),
            manager_notice: None,
            sched_notice: None,
            refused: false,
        });
        let sm = &mut self.fleet.managers[m];
        sm.session = Some(c);
        if let Some(core) = sm.core.as_mut() {
            // Nothing is started or stopped before the scheduler says what it wants.
            core.desired = None;
        }
        self.note(format!("m{m} connects on mc{c}"));
        self.manager_heartbeat(m);
    }

    pub(super) fn break_mconn(
        &mut self,
        c: usize,
        manager_notice: Option<u64>,
        sched_notice: Option<u64>,
    ) {
        let conn = &mut self.fleet.conns[c];
        if conn.broken {
            return;
        }
        conn.broken = true;
        conn.to_sched.clear();
        conn.to_manager.clear();
        conn.manager_notice = manager_notice;
        conn.sched_notice = sched_notice;
        self.note(format!("mc{c} breaks"));
    }

    pub(super) fn manager_heartbeat(&mut self, m: usize) {
        let (Some(c), Some(state)) = (
            self.fleet.managers[m].session,
            self.fleet.managers[m].state(),
        ) else {
            return;
        };
        if self.fleet.conns[c].broken {
            return;
        }
        if self.fleet.managers[m].twin {
            let views = self.sched.tasks().views_of_manager(self.now, &state.id);
            let crossed = views.iter().any(|w| {
                let exited = state.exited.iter().any(|n| n == w.name);
                exited
                    && !state
                        .instances
                        .iter()
                        .any(|(n, i)| n == w.name && *i == w.instance)
            });
            self.fleet.stats.crossed += u64::from(crossed);
        }
        let duplicate = self.faults.enabled && self.rng.chance(3);
        let at = self.delay();
        let queue = &mut self.fleet.conns[c].to_sched;
        let at = queue.back().map_or(at, |(last, _)| at.max(*last));
        if duplicate {
            queue.push_back((at, FromManager::Heartbeat(Box::new(state.clone()))));
        }
        queue.push_back((at, FromManager::Heartbeat(Box::new(state))));
    }

    /// A manager says goodbye on connection `c`; the scheduler closes it once it has read it
    /// (or the manager's end of it closes a little later).
    pub(super) fn manager_goodbye(&mut self, c: usize) {
        if self.fleet.conns[c].broken {
            return;
        }
        let at = self.delay();
        let queue = &mut self.fleet.conns[c].to_sched;
        let at = queue.back().map_or(at, |(last, _)| at.max(*last));
        queue.push_back((at, FromManager::Goodbye));
        self.fleet.conns[c].sched_notice = Some(at + 1);
    }

    fn deliver_to_sched_from_manager(&mut self, c: usize, frame: FromManager) {
        let conn = &self.fleet.conns[c];
        let input = match (frame, &conn.id) {
            (FromManager::Heartbeat(state), None) if !conn.refused => SInput::ManagerJoined {
                connection: MANAGER_CONNECTION | c as u64,
                state: *state,
                peer: format!("10.0.1.{c}:1"),
            },
            (FromManager::Heartbeat(state), Some(id)) if state.id == *id => {
                SInput::ManagerHeartbeat { state: *state }
            }
            (FromManager::Goodbye, Some(id)) => SInput::ManagerGoodbye { id: id.clone() },
            _ => return,
        };
        self.sched_input(input);
        self.sched_round();
    }

    fn deliver_to_manager(&mut self, c: usize, frame: ToManager) {
        let m = self.fleet.conns[c].manager;
        if self.fleet.managers[m].session != Some(c) {
            return;
        }
        let ToManager::Desired {
            desired,
            stop,
            registered,
            ..
        } = frame
        else {
            return; // the pace: these managers report on their own clock
        };
        let Some(core) = self.fleet.managers[m].core.as_mut() else {
            return;
        };
        core.desired = Some(desired);
        core.registered = registered;
        self.manager_converge(m, &stop);
    }

    // ----- the scheduler's shell -----

    /// The scheduler's actions about managers and the policy.
    pub(super) fn sched_manager_action(&mut self, action: SAction) {
        match action {
            SAction::ManagerRegistered { connection, id } => {
                let c = (connection & !MANAGER_CONNECTION) as usize;
                if let Some(other) = self.fleet.registered.insert(id.clone(), c) {
                    panic!(
                        "manager {id} registered on mc{c} while mc{other} holds it at {}\n{}",
                        self.now,
                        self.trace_tail()
                    );
                }
                self.fleet.conns[c].id = Some(id);
            }
            SAction::ManagerRefused { connection, .. } => {
                let c = (connection & !MANAGER_CONNECTION) as usize;
                self.fleet.stats.refusals += 1;
                let m = self.fleet.conns[c].manager;
                if self.fleet.managers[m].twin {
                    self.fleet.stats.twin_refusals += 1;
                }
                self.fleet.conns[c].refused = true;
                let notice = self.delay();
                self.break_mconn(c, Some(notice), None);
            }
            SAction::ToManager { manager, message } => {
                if let ToManager::Desired { desired, .. } = &message {
                    self.fleet.desired.insert(manager.clone(), *desired);
                    self.fleet.stats.decisions += 1;
                }
                if let Some(&c) = self.fleet.registered.get(&manager)
                    && !self.fleet.conns[c].broken
                {
                    let at = self.delay();
                    let queue = &mut self.fleet.conns[c].to_manager;
                    let at = queue.back().map_or(at, |(last, _)| at.max(*last));
                    queue.push_back((at, message));
                }
            }
            SAction::CloseManager { manager } => {
                if let Some(c) = self.fleet.registered.remove(&manager) {
                    self.fleet.conns[c].id = None;
                    let notice = self.delay();
                    self.break_mconn(c, Some(notice), None);
                }
            }
            SAction::Decide(snapshot) => {
                let decisions = self.fleet.policy.decide(&snapshot);
                self.sched.handle(
                    self.now,
                    SInput::Decided {
                        result: Ok(decisions),
                    },
                );
            }
            _ => {}
        }
    }

    // ----- time -----

    pub(super) fn manager_next_event(&self) -> u64 {
        let mut at = u64::MAX;
        for conn in &self.fleet.conns {
            let after = self.fleet.managers[conn.manager].partitioned_until;
            if let Some((t, _)) = conn.to_sched.front() {
                at = at.min((*t).max(after));
            }
            if let Some((t, _)) = conn.to_manager.front() {
                at = at.min((*t).max(after));
            }
            at = at.min(conn.manager_notice.unwrap_or(u64::MAX));
            at = at.min(conn.sched_notice.unwrap_or(u64::MAX));
        }
        for sm in &self.fleet.managers {
            for unit in sm.engine.iter().filter(|u| u.worker.is_none()) {
                at = at.min(unit.starts_at);
            }
            let Some(core) = &sm.core else {
                at = at.min(sm.restart_at);
                continue;
            };
            at = at.min(core.next_tick).min(sm.dies_at);
            if sm.session.is_none() {
                at = at.min(sm.next_connect);
            }
        }
        at
    }

    /// Fire one due manager event; whether anything was due.
    pub(super) fn fire_managers(&mut self) -> bool {
        let now = self.now;
        for c in 0..self.fleet.conns.len() {
            let conn = &mut self.fleet.conns[c];
            // Frames wait out a partition; noticing a broken connection does not.
            let cut = now < self.fleet.managers[conn.manager].partitioned_until;
            if !cut && conn.to_sched.front().is_some_and(|(t, _)| *t <= now) {
                if let Some((_, frame)) = conn.to_sched.pop_front() {
                    self.deliver_to_sched_from_manager(c, frame);
                }
                return true;
            }
            if !cut && conn.to_manager.front().is_some_and(|(t, _)| *t <= now) {
                if let Some((_, frame)) = conn.to_manager.pop_front() {
                    self.deliver_to_manager(c, frame);
                }
                return true;
            }
            if conn.manager_notice.is_some_and(|t| t <= now) {
                conn.manager_notice = None;
                let m = conn.manager;
                if self.fleet.managers[m].session == Some(c) {
                    self.note(format!("m{m} sees its connection mc{c} end"));
                    let sm = &mut self.fleet.managers[m];
                    sm.session = None;
                    sm.next_connect = now + 200 + self.rng.below(800);
                    // A refused one waits for the other's connection to time out.
                    if self.fleet.conns[c].refused {
                        sm.next_connect += 1_000;
                    }
                    let notice = self.delay();
                    self.break_mconn(c, None, Some(notice));
                }
                return true;
            }
            if conn.sched_notice.is_some_and(|t| t <= now) {
                conn.sched_notice = None;
                if let Some(id) = conn.id.take() {
                    self.note(format!("scheduler sees mc{c} (manager {id}) end"));
                    if self.fleet.registered.get(&id) == Some(&c) {
                        self.fleet.registered.remove(&id);
                    }
                    self.sched_input(SInput::ManagerGone { id });
                    self.sched_round();
                }
                return true;
            }
        }
        for m in 0..self.fleet.managers.len() {
            let sm = &self.fleet.managers[m];
            if let Some(u) =
                (sm.engine.iter()).position(|u| u.worker.is_none() && u.starts_at <= now)
            {
                self.start_unit(m, u);
                return true;
            }
            let Some(core) = &sm.core else {
                if sm.restart_at <= now {
                    self.fleet.stats.restarts += 1;
                    self.start_manager(m);
                    return true;
                }
                continue;
            };
            if sm.dies_at <= now {
                self.crash_manager(m);
                return true;
            }
            if core.next_tick <= now {
                self.manager_tick(m);
                return true;
            }
            if sm.session.is_none() && sm.next_connect <= now {
                self.connect_manager(m);
                return true;
            }
        }
        false
    }
}
