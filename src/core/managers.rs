//! The WorkerManagerController: which managers exist, whether they are online, what each one's
//! workers look like, and the snapshot the scaling policy decides on. Pure: `now` is passed in.

use std::collections::{BTreeMap, HashMap};

use super::scaling::{Decision, Demand, Manager, Snapshot, Tier, Verdict, Worker};
use super::tasks::WorkerView;
use crate::proto::{EnvVerdict, ManagerState, ManagerStatus};

struct Entry {
    state: ManagerState,
    last_seen: u64,
}

#[derive(Default)]
pub struct Managers {
    entries: BTreeMap<String, Entry>,
    /// A manager silent this long is offline (and not scaled).
    timeout_ms: u64,
    last: HashMap<String, Decision>,
}

impl Managers {
    pub fn new(timeout_ms: u64) -> Managers {
        Managers {
            timeout_ms,
            ..Managers::default()
        }
    }

    pub fn heartbeat(&mut self, now: u64, state: ManagerState) {
        self.entries.insert(
            state.id.clone(),
            Entry {
                state,
                last_seen: now,
            },
        );
    }

    pub fn is_empty(&self) -> bool {
        self.entries.is_empty()
    }

    fn online(&self, entry: &Entry, now: u64) -> bool {
        now.saturating_sub(entry.last_seen) <= self.timeout_ms
    }

    /// The snapshot the policy decides on.
    pub fn snapshot(
        &self,
        now: u64,
        scale_down_delay_ms: u64,
        workers: &[WorkerView],
        demand: Vec<Demand>,
    ) -> Snapshot {
        let managers = self
            .entries
            .values()
            .map(|entry| {
                let state = &entry.state;
                let mine: Vec<&WorkerView> = workers
                    .iter()
                    .filter(|w| w.manager.as_deref() == Some(&state.id))
                    .collect();
                // Not usable yet, or no longer: started but not registered, and being stopped
                // but not gone. Both still count as the manager's workers.
                let unregistered = state
                    .workers
                    .iter()
                    .filter(|n| !mine.iter().any(|w| w.name == **n))
                    .count();
                let stopping = mine.iter().filter(|w| w.draining).count();
                Manager {
                    id: state.id.clone(),
                    worker_type: state.worker_type.clone(),
                    max_task_concurrency: state.max_task_concurrency,
                    worker_slots: state.worker_slots.max(1),
                    online: self.online(entry, now),
                    workers: mine
                        .iter()
                        .filter(|w| !w.draining)
                        .map(|w| Worker {
                            id: w.id,
                            slots: w.slots,
                            busy: w.busy,
                            idle_ms: w.idle_ms,
                        })
                        .collect(),
                    starting: (unregistered + stopping) as u32,
                    capabilities: state.capabilities.clone(),
                    environments: verdicts(&mine),
                }
            })
            .collect();
        Snapshot {
            now_ms: now,
            scale_down_delay_ms,
            managers,
            demand,
        }
    }

    pub fn record(&mut self, decisions: &[Decision]) {
        for decision in decisions {
            self.last
                .insert(decision.manager_id.clone(), decision.clone());
        }
    }

    pub fn status(&self, now: u64, workers: &[WorkerView], tiers: &[Tier]) -> Vec<ManagerStatus> {
        self.entries
            .values()
            .map(|entry| {
                let state = &entry.state;
                let live = workers
                    .iter()
                    .filter(|w| w.manager.as_deref() == Some(&state.id))
                    .count() as u32;
                let tier = tiers
                    .iter()
                    .find(|t| {
                        t.members
                            .iter()
                            .any(|m| *m == state.id || *m == state.worker_type)
                    })
                    .map(|t| t.priority);
                let last = self.last.get(&state.id);
                ManagerStatus {
                    id: state.id.clone(),
                    worker_type: state.worker_type.clone(),
                    online: self.online(entry, now),
                    tier,
                    max_task_concurrency: state.max_task_concurrency,
                    desired: last.map(|d| d.desired_workers),
                    live,
                    starting: (state.workers.len() as u32).saturating_sub(live),
                    reason: match (last, tier) {
                        (Some(d), _) => d.reason.clone(),
                        (None, None) => "not listed in the policy: not scaled".into(),
                        (None, Some(_)) => "no decision yet".into(),
                    },
                }
            })
            .collect()
    }
}

impl Managers {
    /// For `weir explain`: which managers could start a worker for a task needing `capabilities`
    /// and `environments`, and why the others cannot.
    pub fn explain(
        &self,
        now: u64,
        capabilities: &[(String, u64)],
        environments: &[String],
        workers: &[WorkerView],
        tiers: &[Tier],
    ) -> Vec<String> {
        let mut lines = Vec::new();
        for entry in self.entries.values() {
            let state = &entry.state;
            let missing = self.obstacles(entry, now, capabilities, environments, workers, tiers);
            let last = self.last.get(&state.id).map(|d| {
                format!(
                    "; last decision: {} worker(s), {}",
                    d.desired_workers, d.reason
                )
            });
            lines.push(match missing.is_empty() {
                true => format!(
                    "manager {} ({}): could start workers for it{}",
                    state.id,
                    state.worker_type,
                    last.unwrap_or_default()
                ),
                false => format!(
                    "manager {} ({}): cannot: {}",
                    state.id,
                    state.worker_type,
                    missing.join("; ")
                ),
            });
        }
        lines
    }

    /// Whether some manager could start a worker for a task needing `capabilities` and
    /// `environments` (for `--unschedulable-timeout`).
    pub fn could_serve(
        &self,
        now: u64,
        capabilities: &[(String, u64)],
        environments: &[String],
        workers: &[WorkerView],
        tiers: &[Tier],
    ) -> bool {
        self.entries.values().any(|entry| {
            self.obstacles(entry, now, capabilities, environments, workers, tiers)
                .is_empty()
        })
    }

    /// Why `entry` cannot start a worker for such a task (empty: it can).
    fn obstacles(
        &self,
        entry: &Entry,
        now: u64,
        capabilities: &[(String, u64)],
        environments: &[String],
        workers: &[WorkerView],
        tiers: &[Tier],
    ) -> Vec<String> {
        let state = &entry.state;
        let mine: Vec<&WorkerView> = workers
            .iter()
            .filter(|w| w.manager.as_deref() == Some(&state.id))
            .collect();
        let verdicts = verdicts(&mine);
        let mut missing = Vec::new();
        if !self.online(entry, now) {
            missing.push("offline".to_string());
        }
        if !tiers.iter().any(|t| {
            t.members
                .iter()
                .any(|m| *m == state.id || *m == state.worker_type)
        }) {
            missing.push("not listed in the scaling policy".to_string());
        }
        for (name, need) in capabilities {
            let have = state
                .capabilities
                .iter()
                .find(|(n, _)| n == name)
                .map_or(0, |(_, v)| *v);
            if have < *need {
                missing.push(format!(
                    "its workers have {name}={have}, the task needs {need}"
                ));
            }
        }
        for env in environments {
            match verdicts.iter().find(|(n, _)| n == env).map(|(_, v)| *v) {
                Some(Verdict::NoMatch) => missing.push(format!("its workers do not match `{env}`")),
                Some(_) => {}
                None => {} // unknown: one worker would be started to learn
            }
        }
        missing
    }
}

/// A manager's verdict on each environment its workers evaluated: `match` if any worker matches,
/// `no-match` if they answered and none does; names nobody answered are left out (`unknown`).
fn verdicts(workers: &[&WorkerView]) -> Vec<(String, Verdict)> {
    let mut out: BTreeMap<String, Verdict> = BTreeMap::new();
    for worker in workers {
        for (name, verdict) in &worker.verdicts {
            let entry = out.entry(name.clone()).or_insert(Verdict::NoMatch);
            if *verdict == EnvVerdict::Match {
                *entry = Verdict::Match;
            }
        }
    }
    out.into_iter().collect()
}
