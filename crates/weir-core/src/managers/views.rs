//! What the managers look like from outside: the snapshot the scaling policy decides on, and
//! each manager's status (`weir managers`, the dashboard).

use std::collections::BTreeSet;

use super::{Context, Entry, Managers, units};
use crate::scaling::{Demand, Manager, Snapshot, Verdict, Worker, walltime_of, walltime_verdict};
use crate::tasks::WorkerView;
use weir_proto::{EnvVerdict, ManagerStatus};

impl Managers {
    /// The snapshot the policy decides on. Fixed pools are left out: nothing scales them.
    pub fn snapshot(
        &self,
        context: &Context<'_>,
        scale_down_delay_ms: u64,
        demand: Vec<Demand>,
    ) -> Snapshot {
        let wanted: BTreeSet<&str> = demand
            .iter()
            .flat_map(|d| d.environments.iter().map(String::as_str))
            .collect();
        let managers = self
            .entries
            .values()
            .filter(|entry| entry.state.fixed.is_none())
            .map(|entry| {
                let state = &entry.state;
                let mine: Vec<&WorkerView> = context.workers_of(&state.id).collect();
                // Not usable yet, or no longer: started but not registered, and being stopped
                // but not gone. Both still count as the manager's workers.
                // Sorted, not hashed: hashing every worker's name once a second was a few
                // per cent of an idle scheduler at 10,000 workers.
                let mut registered: Vec<&str> = mine.iter().map(|w| w.name).collect();
                registered.sort_unstable();
                let unregistered = (state.workers.iter())
                    .filter(|n| registered.binary_search(&n.as_str()).is_err())
                    .count();
                let stopping = mine.iter().filter(|w| w.draining).count();
                // Registered but still evaluating a wanted environment: still starting as far as
                // the demand goes, so not stopped as idle before it could answer (and another
                // started to ask again).
                let answering = |w: &WorkerView| {
                    wanted.iter().any(|name| {
                        (entry.declares(name) || context.is_registered(name))
                            && !w.verdicts.contains_key(*name)
                    })
                };
                let evaluating = mine.iter().filter(|w| !w.draining && answering(w)).count();
                let since = context.now.saturating_sub(entry.last_seen);
                let time_left = units::workers_time_left(&state.units, since);
                Manager {
                    id: state.id.clone(),
                    worker_type: state.worker_type.clone(),
                    max_task_concurrency: state.max_task_concurrency,
                    worker_slots: state.worker_slots.max(1),
                    online: self.online(entry, context.now),
                    workers: mine
                        .iter()
                        .filter(|w| !w.draining && !answering(w))
                        .map(|w| Worker {
                            id: w.id,
                            slots: w.slots,
                            busy: w.busy,
                            idle_ms: w.idle_ms,
                            time_left_ms: time_left.get(w.name).copied(),
                        })
                        .collect(),
                    starting: (unregistered + stopping + evaluating) as u32,
                    capabilities: state.capabilities.clone(),
                    environments: wanted
                        .iter()
                        .map(|name| (name.to_string(), verdict(entry, &mine, name, context)))
                        .collect(),
                    labels: state.labels.clone(),
                    walltime_ms: state.usable_ms,
                    counted: None,
                    // The drained among those listed, in id order (a stopping one is no
                    // longer the policy's to drain or take back).
                    drained: {
                        let mut drained: Vec<u64> = (mine.iter())
                            .filter(|w| w.cordoned && !w.draining && !answering(w))
                            .map(|w| w.id)
                            .collect();
                        drained.sort_unstable();
                        drained
                    },
                    // Set by the scheduler ([`crate::scaling::drain_budget`]).
                    drain_budget: 0,
                    launch: units::launch(&state.launch, since),
                    starting_ages_ms: units::starting_ages(
                        &state.units,
                        &registered,
                        since,
                        unregistered,
                    ),
                }
            })
            .collect();
        Snapshot {
            now_ms: context.now,
            scale_down_delay_ms,
            managers,
            demand,
            fetch: Default::default(),
        }
    }

    pub fn status(&self, context: &Context<'_>) -> Vec<ManagerStatus> {
        self.entries
            .values()
            .map(|entry| {
                let state = &entry.state;
                let live = context.workers_of(&state.id).count() as u32;
                let online = self.online(entry, context.now);
                let tier = context
                    .tiers
                    .iter()
                    .find(|t| {
                        t.members
                            .iter()
                            .any(|m| *m == state.id || *m == state.worker_type)
                    })
                    .map(|t| t.priority);
                let last = context.decisions.get(&state.id);
                ManagerStatus {
                    id: state.id.clone(),
                    worker_type: state.worker_type.clone(),
                    online,
                    fixed: state.fixed,
                    tier,
                    max_task_concurrency: state.max_task_concurrency,
                    desired: state.fixed.or(last.map(|d| d.desired_workers)),
                    live,
                    // An offline manager's list is stale: it starts nothing we know of.
                    starting: match online {
                        true => (state.workers.len() as u32).saturating_sub(live),
                        false => 0,
                    },
                    reason: match (state.fixed, last, tier) {
                        (Some(n), _, _) => format!("fixed pool of {n}: not scaled"),
                        (None, Some(d), _) => d.reason.clone(),
                        (None, None, None) => "not listed in the policy: not scaled".into(),
                        (None, None, Some(_)) => "no decision yet".into(),
                    },
                    usable_ms: state.usable_ms,
                    labels: state.labels.clone(),
                }
            })
            .collect()
    }
}

/// What `workers` answered on `environment`: `match` if any matches, else `no-match` if any
/// answered.
fn answered(workers: &[&WorkerView], environment: &str) -> Option<Verdict> {
    let mut verdicts = workers.iter().filter_map(|w| w.verdicts.get(environment));
    let first = verdicts.next()?;
    let matches = *first == EnvVerdict::Match || verdicts.any(|v| *v == EnvVerdict::Match);
    Some(if matches {
        Verdict::Match
    } else {
        Verdict::NoMatch
    })
}

/// A manager's verdict on `environment`: for a walltime name (`walltime_environment`), whether
/// its usable time per worker covers it; else what its workers answer now, else what its
/// workers answered before (kept after they are gone). Never asked: `unknown` when its workers will
/// evaluate the name (the manager declared it, or it is registered at run time; the policy
/// starts one worker to learn), `no-match` when they never will.
pub(super) fn verdict(
    entry: &Entry,
    workers: &[&WorkerView],
    environment: &str,
    context: &Context<'_>,
) -> Verdict {
    if let Some(walltime_ms) = walltime_of(environment) {
        return walltime_verdict(entry.state.usable_ms, walltime_ms);
    }
    if let Some(verdict) = answered(workers, environment) {
        return verdict;
    }
    if let Some(verdict) = entry.learned.get(environment) {
        return *verdict;
    }
    if entry.declares(environment) || context.is_registered(environment) {
        Verdict::Unknown
    } else {
        Verdict::NoMatch
    }
}
