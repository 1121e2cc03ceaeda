//! What a manager reports of its units (`ManagerState::units`, for `weir managers`): the live
//! ones as its backend sees them, those it is stopping, and the last that ended with why
//! (at most [`UNITS_ENDED_KEPT`]). Times are ms on this manager's clock (`Seams::clock`).

use std::collections::VecDeque;
use std::time::Duration;

use crate::core::units::{Unit, Why};
use crate::proto::{UNITS_ENDED_KEPT, UnitReport, UnitState};

/// A unit being stopped or gone: its id, when it started, and why it was stopped.
#[derive(Debug)]
struct Stopped {
    id: String,
    since: u64,
    why: String,
    /// When it ended; `None` while it is stopping (still listed by its engine).
    at: Option<u64>,
}

/// The units a manager stopped or saw end.
#[derive(Debug, Default)]
pub(super) struct UnitLog {
    stopping: Vec<Stopped>,
    ended: VecDeque<Stopped>,
}

impl UnitLog {
    /// It was told to stop and may take a while (a cancelled Slurm job still listed).
    pub(super) fn stopping(&mut self, id: &str, since: u64, why: String) {
        self.stopping.push(Stopped {
            id: id.to_string(),
            since,
            why,
            at: None,
        });
    }

    /// A stopping unit is gone (ended at `now`).
    pub(super) fn gone(&mut self, id: &str, now: u64) {
        if let Some(index) = self.stopping.iter().position(|s| s.id == id) {
            let mut unit = self.stopping.remove(index);
            unit.at = Some(now);
            self.push(unit);
        }
    }

    /// It ended at `now` (stopped at once, or ended by itself).
    pub(super) fn ended(&mut self, id: &str, since: u64, why: String, now: u64) {
        self.stopping.retain(|s| s.id != id);
        self.push(Stopped {
            id: id.to_string(),
            since,
            why,
            at: Some(now),
        });
    }

    fn push(&mut self, unit: Stopped) {
        if self.ended.len() == UNITS_ENDED_KEPT {
            self.ended.pop_front();
        }
        self.ended.push_back(unit);
    }

    /// `live` (the units the backend runs), then those stopping (with their `workers`'
    /// names), then the ended ones, newest first.
    pub(super) fn report(
        &self,
        mut live: Vec<UnitReport>,
        workers: impl Fn(&str) -> Vec<String>,
        now: u64,
    ) -> Vec<UnitReport> {
        for unit in &self.stopping {
            live.push(UnitReport {
                id: unit.id.clone(),
                state: UnitState::Completing,
                reason: Some(unit.why.clone()),
                age_ms: now.saturating_sub(unit.since),
                workers: workers(&unit.id),
                time_left_ms: None,
                ended_ms: None,
            });
        }
        for unit in self.ended.iter().rev() {
            let at = unit.at.unwrap_or(now);
            live.push(UnitReport {
                id: unit.id.clone(),
                state: UnitState::Ended,
                reason: Some(unit.why.clone()),
                age_ms: at.saturating_sub(unit.since),
                workers: Vec::new(),
                time_left_ms: None,
                ended_ms: Some(now.saturating_sub(at)),
            });
        }
        live
    }
}

/// Why a unit was stopped, in a few words (`timeout`: the unit timeout, ms).
pub(super) fn why(why: Why, timeout: u64) -> String {
    match why {
        Why::Late => format!("late: no worker registered within {}s", timeout / 1000),
        Why::Drained => "drained".into(),
        Why::Excess => "not needed".into(),
    }
}

/// One live unit: `state`, `reason` and `time_left` as its engine says.
pub(super) fn live(
    unit: &Unit,
    (state, reason, time_left): (UnitState, Option<String>, Option<Duration>),
    now: u64,
) -> UnitReport {
    UnitReport {
        id: unit.id.clone(),
        state,
        reason,
        age_ms: now.saturating_sub(unit.since),
        workers: unit.workers.clone(),
        time_left_ms: time_left.map(millis),
        ended_ms: None,
    }
}

/// Live units of a backend whose engine says nothing of them (the process pool, the command
/// backend): running once one of its workers registered, pending before; `time_left` for all.
pub(super) fn by_registration(
    units: &[Unit],
    time_left: Option<Duration>,
    now: u64,
) -> Vec<UnitReport> {
    units
        .iter()
        .map(|unit| {
            let state = match unit.registered {
                true => UnitState::Running,
                false => UnitState::Pending,
            };
            live(unit, (state, None, time_left), now)
        })
        .collect()
}

pub(super) fn millis(duration: Duration) -> u64 {
    u64::try_from(duration.as_millis()).unwrap_or(u64::MAX)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn stopping_then_gone_then_only_the_last_ended_are_kept() {
        let t0 = 0;
        let mut log = UnitLog::default();
        log.stopping("7", t0, "drained".into());
        let later = t0 + 5000;
        let report = log.report(Vec::new(), |id| vec![format!("m-{id}-1")], later);
        assert_eq!(report.len(), 1);
        assert_eq!(report[0].state, UnitState::Completing);
        assert_eq!(report[0].workers, ["m-7-1"]);
        log.gone("7", later);
        for n in 0..UNITS_ENDED_KEPT {
            log.ended(&format!("u{n}"), t0, "not needed".into(), later);
        }
        let report = log.report(Vec::new(), |_| Vec::new(), later + 1000);
        assert_eq!(report.len(), UNITS_ENDED_KEPT, "bounded");
        assert!(report.iter().all(|u| u.id != "7"), "the oldest went first");
        assert_eq!(
            report[0].id,
            format!("u{}", UNITS_ENDED_KEPT - 1),
            "newest first"
        );
        assert_eq!((report[0].age_ms, report[0].ended_ms), (5000, Some(1000)));
    }
}
