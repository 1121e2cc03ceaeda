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
        // A pending job's time left is its whole limit: it runs down only once it runs.
        time_left_ms: match state {
            UnitState::Running => unit.time_left_ms.map(|ms| ms.saturating_sub(since)),
            UnitState::Ended => None,
            UnitState::Pending | UnitState::Completing => unit.time_left_ms,
        },
        ..unit.clone()
    }
}
