//! The WorkerManagerController: which managers exist, whether they are online, what each one's
//! workers look like, and the snapshot the scaling policy decides on. Pure: `now` is passed in.
//!
//! The snapshot is the truth reconciled with what each manager reports alive: a registered
//! worker that its manager listed in one heartbeat and no longer lists in the next is gone
//! ([`Managers::heartbeat`] returns it, and the core takes it for lost: at once when the report
//! names its process, fenced when it names none), so a dead worker is never counted beside its
//! replacement.

mod explain;
mod gone;
mod liveness;
mod units;
mod views;

pub use gone::Gone;

use crate::hash::HashMap;
use std::collections::{BTreeMap, BTreeSet};

use super::scaling::{Decision, Tier, Verdict};
use super::tasks::WorkerView;
use weir_proto::{EnvVerdict, ManagerState, WorkerId};

struct Entry {
    state: ManagerState,
    last_seen: u64,
    /// What its workers answered on each environment, kept after they are gone: a manager
    /// whose workers do not match is not sent another worker to ask again. Forgotten when the
    /// definition changes (the manager's own, or a run-time registration).
    learned: BTreeMap<String, Verdict>,
    /// When it was last told a pace.
    told_at: u64,
    /// The last two paces it was told to report at, in ms, latest first (0: none yet). It is
    /// judged by the longer (it may have set its next report by the earlier) until a report
    /// shows it follows the latest.
    paces: [u64; 2],
}

impl Entry {
    fn declares(&self, environment: &str) -> bool {
        self.state
            .environments
            .iter()
            .any(|def| def.name == environment)
    }
}

/// What the scheduler knows besides the managers: the live workers, the policy's tiers, and
/// which environment names are registered at run time (evaluated by every worker).
pub struct Context<'a> {
    pub now: u64,
    pub(crate) workers: Vec<WorkerView<'a>>,
    pub tiers: &'a [Tier],
    pub registered: BTreeSet<String>,
    /// The last decision applied for each manager (the scaling loop keeps them).
    pub decisions: &'a HashMap<String, Decision>,
    /// The positions in `workers` of each manager's workers: grouped once, as a scan of every
    /// worker for each manager is managers × workers (10 million string comparisons for each
    /// snapshot and `weir status` with 1,000 managers and 10,000 workers).
    by_manager: HashMap<&'a str, Vec<usize>>,
}

impl<'a> Context<'a> {
    pub fn new(
        now: u64,
        workers: Vec<WorkerView<'a>>,
        tiers: &'a [Tier],
        registered: BTreeSet<String>,
        decisions: &'a HashMap<String, Decision>,
    ) -> Context<'a> {
        let mut by_manager: HashMap<&'a str, Vec<usize>> = HashMap::default();
        for (i, w) in workers.iter().enumerate() {
            if let Some(manager) = w.manager {
                by_manager.entry(manager).or_default().push(i);
            }
        }
        Context {
            now,
            workers,
            tiers,
            registered,
            decisions,
            by_manager,
        }
    }
}

impl<'a> Context<'a> {
    fn is_registered(&self, environment: &str) -> bool {
        self.registered.contains(environment)
    }

    fn workers_of<'w>(&'w self, manager: &str) -> impl Iterator<Item = &'w WorkerView<'a>> + 'w {
        (self.by_manager.get(manager).into_iter().flatten()).filter_map(|&i| self.workers.get(i))
    }

    fn listed(&self, state: &ManagerState) -> bool {
        self.tiers.iter().any(|t| {
            t.members
                .iter()
                .any(|m| *m == state.id || *m == state.worker_type)
        })
    }
}

/// Every fact about managers: what each reported and when ([`Entry`]), which have an open
/// connection (decisions go only to them), and the last decision applied for each. Online
/// (for the policy and the status) means heard from within `timeout_ms`: a connection that
/// breaks and comes back within it is ridden out; a decision meanwhile is not sent.
#[derive(Default)]
pub struct Managers {
    entries: BTreeMap<String, Entry>,
    /// Managers with an open connection, and where each connects from: one live connection
    /// per manager id (a second is refused naming the first). Kept apart from `entries`: a
    /// manager forgotten after being offline may still hold a connection that sends nothing.
    connections: BTreeMap<String, String>,
    /// Managers forgotten after being offline whose workers may still be here (units of a
    /// cluster engine they started): those are told to leave once idle. One that reports
    /// again is no orphan.
    orphaned: BTreeSet<String>,
    /// Connections closed because their manager fell silent past its allowance, not yet
    /// reported gone by the shell (closed once, not at every tick until then).
    closing: BTreeSet<String>,
    /// A manager silent this long is offline (and not scaled).
    timeout_ms: u64,
}

impl Managers {
    pub fn new(timeout_ms: u64) -> Managers {
        Managers {
            timeout_ms,
            ..Managers::default()
        }
    }

    /// A manager's heartbeat. Returns its registered workers that are gone, each with how far
    /// the report proves it ([`gone::gone`]: a report is believed at once only of the process
    /// it names).
    pub fn heartbeat(
        &mut self,
        now: u64,
        state: ManagerState,
        workers: &[WorkerView],
    ) -> Vec<(WorkerId, Gone)> {
        // Back after being forgotten: its workers are its own again.
        self.orphaned.remove(&state.id);
        let mine: Vec<&WorkerView> = workers
            .iter()
            .filter(|w| w.manager == Some(state.id.as_str()))
            .collect();
        // Known: updated in place (a report comes every few seconds from every manager, and
        // rarely says anything new).
        if let Some(entry) = self.entries.get_mut(&state.id) {
            let gone = gone::gone(Some(&entry.state), &state, workers);
            if entry.state.environments != state.environments {
                // A definition that changed is asked again.
                let (before, now) = (&entry.state.environments, &state.environments);
                entry.learned.retain(|name, _| {
                    before.iter().find(|d| d.name == *name) == now.iter().find(|d| d.name == *name)
                });
            }
            learn_from(&mut entry.learned, &mine);
            entry.state = state;
            entry.heard(now);
            return gone;
        }
        let gone = gone::gone(None, &state, workers);
        let mut learned = BTreeMap::new();
        learn_from(&mut learned, &mine);
        self.entries.insert(
            state.id.clone(),
            Entry {
                state,
                last_seen: now,
                learned,
                told_at: now,
                paces: [0; 2],
            },
        );
        gone
    }

    /// A manager's connection registers as `id` from `peer`; refused (with where the live one
    /// connects from) while another connection of that id is open. Connected (again, or for the
    /// first time): what it listed before is forgotten, so a worker it does not list in its
    /// first heartbeat is not taken for gone. A restarted manager may adopt its units (batch
    /// jobs that ran on) only after that heartbeat; what it saw exit it still says.
    pub fn connect(&mut self, id: &str, peer: String) -> Result<(), String> {
        if let Some(first) = self.connections.get(id) {
            return Err(first.clone());
        }
        self.connections.insert(id.to_string(), peer);
        if let Some(entry) = self.entries.get_mut(id) {
            entry.state.workers.clear();
            entry.state.instances.clear();
            // Told its pace again on this connection; judged by the longest told until then.
            entry.paces = [0, entry.paces[0].max(entry.paces[1])];
        }
        Ok(())
    }

    /// Its connection ended; whether it had one. It stays known (offline once silent for
    /// `timeout_ms`) until it comes back or is forgotten.
    pub(crate) fn disconnect(&mut self, id: &str) -> bool {
        self.closing.remove(id);
        self.connections.remove(id).is_some()
    }

    /// Whether it has an open connection (decisions are sent only to those).
    pub(crate) fn is_connected(&self, id: &str) -> bool {
        self.connections.contains_key(id)
    }

    /// Its workers answered (or one of them is about to be gone): remember what they say now,
    /// so it is known after they are gone whether or not a heartbeat came in between.
    pub fn learn(&mut self, manager: &str, workers: &[WorkerView]) {
        let Some(entry) = self.entries.get_mut(manager) else {
            return;
        };
        let mine: Vec<&WorkerView> = workers
            .iter()
            .filter(|w| w.manager == Some(manager))
            .collect();
        learn_from(&mut entry.learned, &mine);
    }

    /// A run-time environment was registered again or removed: what managers learned of it is
    /// asked again.
    pub(crate) fn forget_verdicts(&mut self, environment: &str) {
        for entry in self.entries.values_mut() {
            entry.learned.remove(environment);
        }
    }

    /// Whether `id` has reported and is not forgotten.
    pub fn knows(&self, id: &str) -> bool {
        self.entries.contains_key(id)
    }

    /// Managers forgotten after being offline whose workers may still be here.
    pub(crate) fn orphaned(&self) -> &BTreeSet<String> {
        &self.orphaned
    }

    /// Orphans with no worker here any more are not looked for again.
    pub(crate) fn keep_orphans(&mut self, with_workers: &BTreeSet<String>) {
        self.orphaned.retain(|id| with_workers.contains(id));
    }

    /// What must hold between inputs: an orphan is a manager forgotten, not a known one.
    pub fn sanity_check(&self) -> Result<(), String> {
        match self
            .orphaned
            .iter()
            .find(|id| self.entries.contains_key(*id))
        {
            Some(id) => Err(format!("manager {id} is known and orphaned")),
            None => match (self.closing.iter()).find(|id| !self.connections.contains_key(*id)) {
                Some(id) => Err(format!("manager {id} is closing with no connection")),
                None => Ok(()),
            },
        }
    }

    /// The manager said goodbye: it is gone, with its workers (and its connection).
    pub fn remove(&mut self, id: &str) -> bool {
        self.closing.remove(id);
        self.connections.remove(id);
        self.entries.remove(id).is_some()
    }

    /// Whether any manager the policy could scale has reported.
    pub(crate) fn any_scalable(&self) -> bool {
        self.entries.values().any(|e| e.state.fixed.is_none())
    }

    /// Managers that declared `environment` (`worker-manager --env-plugin`).
    pub(crate) fn declaring(&self, environment: &str) -> Vec<String> {
        self.entries
            .values()
            .filter(|e| e.declares(environment))
            .map(|e| e.state.id.clone())
            .collect()
    }
}

/// Remember what `workers` answer now on each environment (as [`answered`]) over what was
/// learned before; a name's key is cloned only the first time it is learned.
fn learn_from(learned: &mut BTreeMap<String, Verdict>, workers: &[&WorkerView]) {
    let mut now: Vec<(&str, Verdict)> = Vec::new();
    for (name, verdict) in workers.iter().flat_map(|w| w.verdicts.iter()) {
        let verdict = match verdict {
            EnvVerdict::Match => Verdict::Match,
            _ => Verdict::NoMatch,
        };
        match now.iter_mut().find(|(n, _)| *n == name.as_str()) {
            Some((_, seen)) => {
                if verdict == Verdict::Match {
                    *seen = Verdict::Match;
                }
            }
            None => now.push((name, verdict)),
        }
    }
    for (name, verdict) in now {
        match learned.get_mut(name) {
            Some(known) => *known = verdict,
            None => {
                learned.insert(name.to_string(), verdict);
            }
        }
    }
}
