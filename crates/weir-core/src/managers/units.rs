//! The allocation view (`weir managers`): each manager's units as it last reported them, aged
//! by the time since that report on the scheduler's clock. The report itself is kept once, in
//! the manager's entry.

use super::*;
use weir_proto::{ManagerUnits, UnitReport, UnitState};

impl Managers {
    /// Every manager (or the one named; `None` if there is no such manager) with its units.
    pub fn units(&self, context: &Context<'_>, only: Option<&str>) -> Option<Vec<ManagerUnits>> {
        if only.is_some_and(|id| !self.entries.contains_key(id)) {
            return None;
        }
        let statuses = self.status(context);
        let view = self
            .entries
            .values()
            .zip(statuses)
            .filter(|(entry, _)| only.is_none_or(|id| entry.state.id == id))
            .map(|(entry, status)| {
                let since = context.now.saturating_sub(entry.last_seen);
                let registered: Vec<String> = context
                    .workers_of(&entry.state.id)
                    .map(|w| w.name.to_string())
                    .collect();
                ManagerUnits {
                    status,
                    backend: entry.state.backend.clone(),
                    units: entry
                        .state
                        .units
                        .iter()
                        .map(|unit| aged(unit, since, &registered))
                        .collect(),
                    registered,
                }
            })
            .collect();
        Some(view)
    }
}

/// A unit as reported `since` milliseconds ago, as of now. One reported pending whose worker
/// has registered runs (its manager may not know yet: a fixed pool is never told).
fn aged(unit: &UnitReport, since: u64, registered: &[String]) -> UnitReport {
    let joined = unit.workers.iter().any(|w| registered.contains(w));
    let state = match unit.state {
        UnitState::Pending if joined => UnitState::Running,
        state => state,
    };
    let ended = state == UnitState::Ended;
    UnitReport {
        state,
        age_ms: match ended {
            true => unit.age_ms,
            false => unit.age_ms.saturating_add(since),
        },
        ended_ms: unit.ended_ms.map(|ms| ms.saturating_add(since)),
        time_left_ms: time_left(unit, state, since),
        ..unit.clone()
    }
}

/// The time left of `unit`, in `state` now, reported `since` milliseconds ago. A pending job's
/// is its whole limit: it runs down only once it runs.
fn time_left(unit: &UnitReport, state: UnitState, since: u64) -> Option<u64> {
    match state {
        UnitState::Running => unit.time_left_ms.map(|ms| ms.saturating_sub(since)),
        UnitState::Ended => None,
        UnitState::Pending | UnitState::Completing => unit.time_left_ms,
    }
}

/// The time left of each registered worker's unit among `units` (reported `since`
/// milliseconds ago), by worker name: a registered worker's unit runs. Empty (and nothing
/// allocated) when no unit reports a time left (process pools, managers with no walltime).
pub(super) fn workers_time_left(
    units: &[UnitReport],
    since: u64,
) -> crate::hash::HashMap<&str, u64> {
    let mut left = crate::hash::HashMap::default();
    for unit in units.iter().filter(|u| u.time_left_ms.is_some()) {
        let state = match unit.state {
            UnitState::Pending => UnitState::Running,
            state => state,
        };
        if let Some(ms) = time_left(unit, state, since) {
            left.extend(unit.workers.iter().map(|w| (w.as_str(), ms)));
        }
    }
    left
}

/// A manager's failed starts as it reported them `since` milliseconds ago, as of now.
pub(super) fn launch(report: &weir_proto::LaunchReport, since: u64) -> crate::scaling::Launch {
    crate::scaling::Launch {
        failures: report.failures,
        last_failure_ms: report.last_failure_ms.map(|ms| ms.saturating_add(since)),
        backoff_ms: report.backoff_ms.saturating_sub(since),
    }
}

/// How long ago each worker of `units` (reported `since` milliseconds ago) that is not among
/// `registered` (sorted) was started, oldest first: one age per worker of a unit that has not
/// ended nor is being stopped (a unit's age counts from when it was started or submitted); the
/// oldest `limit` of them (the workers its report lists and that have not registered).
pub(super) fn starting_ages(
    units: &[UnitReport],
    registered: &[&str],
    since: u64,
    limit: usize,
) -> Vec<u64> {
    let mut ages: Vec<u64> = units
        .iter()
        .filter(|u| matches!(u.state, UnitState::Pending | UnitState::Running))
        .flat_map(|u| {
            (u.workers.iter())
                .filter(|w| registered.binary_search(&w.as_str()).is_err())
                .map(move |_| u.age_ms.saturating_add(since))
        })
        .collect();
    ages.sort_unstable_by(|a, b| b.cmp(a));
    ages.truncate(limit);
    ages
}
