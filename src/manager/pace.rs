//! When a manager reports its state to the scheduler: at once when what it reports changes,
//! and otherwise at least every `beat`, the pace the scheduler asks for when it lets the manager
//! in and again when the cluster's size moves it ([`ToManager::Pace`](crate::proto::ToManager::Pace):
//! half its heartbeat timeout, 2.5 s by default, while the cluster is small; 22 s with 10,000
//! workers under 1,000 managers; `weir_core::lease::manager_pace`). Until then, at every tick
//! of the manager's `--heartbeat-interval`, as before. The pace also says how long the
//! scheduler may be silent before the manager takes it for gone ([`Reports::silence_limit`]).
//!
//! Before, a manager reported every 0.5 s and after every decision (one a second), each
//! report acknowledged: about six datagrams a second per idle manager, a third of an idle
//! 10,000-worker cluster's traffic with 1,000 managers (BENCHMARKS.md, "What an idle peer
//! costs"). Ages (a unit's age, time left, time since it ended) change at every tick and are
//! not a change: the scheduler ages what it last heard by the time since.

use std::time::Duration;

use tokio::time::Instant;

use crate::proto::ManagerState;

/// What was last reported, and when.
#[derive(Debug)]
pub struct Reports {
    last: Option<ManagerState>,
    sent_at: Option<Instant>,
    /// When the last failure reported happened (the report's time less its age).
    failed_at: Option<Instant>,
    every: Duration,
    floor: Duration,
}

impl Reports {
    /// Reporting at every `tick` (the manager's `--heartbeat-interval`) until told a pace.
    pub fn new(tick: Duration) -> Reports {
        Reports {
            last: None,
            sent_at: None,
            failed_at: None,
            every: tick,
            floor: tick,
        }
    }

    /// The scheduler's pace: report at least this often (never more often than the tick).
    pub fn pace(&mut self, beat: Duration) {
        self.every = beat.max(self.floor);
    }

    /// How often an unchanged state is reported.
    pub fn every(&self) -> Duration {
        self.every
    }

    /// How long the scheduler may be silent before this manager takes it for gone and connects
    /// again: its pace and half of [`net::IDLE_TIMEOUT`](crate::net::IDLE_TIMEOUT) of slack,
    /// never under it (`weir_core::lease::manager_silence`, the rule the scheduler judges the
    /// manager by). Each report is acknowledged at once, so a live scheduler is heard at least
    /// every pace; before a pace is told, the timeout itself.
    pub fn silence_limit(&self) -> Duration {
        crate::core::lease::manager_silence(crate::net::IDLE_TIMEOUT, self.every)
    }

    /// `state` if it is to be sent at `now`: it changed since the last report (ages aside; a
    /// start that failed since is a change, even one the backoff counts with the last), or the
    /// last report is a pace old.
    pub fn due(&mut self, now: Instant, state: ManagerState) -> Option<ManagerState> {
        let key = unaged(&state);
        let failed_at = (state.launch.last_failure_ms)
            .and_then(|ms| now.checked_sub(Duration::from_millis(ms)));
        // Ages are in whole ms and read a little before `now`: a failure is new when it is
        // later than the last one reported by more than half a tick (failures are found at
        // the manager's polls, a tick apart; two found in one poll are one event).
        let failed_again = match (failed_at, self.failed_at) {
            (Some(at), Some(before)) => at > before + self.floor / 2,
            (Some(_), None) => true,
            (None, _) => false,
        };
        let changed = self.last.as_ref() != Some(&key) || failed_again;
        // Due once the next tick would come later than the pace (ticks are `floor` apart, and
        // a tick may come a little late): the gap between reports never exceeds the pace.
        let due_after = self.every.saturating_sub(self.floor);
        let old = self
            .sent_at
            .is_none_or(|at| now.saturating_duration_since(at) >= due_after);
        if !changed && !old {
            return None;
        }
        self.last = Some(key);
        self.sent_at = Some(now);
        self.failed_at = failed_at;
        Some(state)
    }
}

/// `state` without what changes by itself with time.
fn unaged(state: &ManagerState) -> ManagerState {
    let mut key = state.clone();
    for unit in &mut key.units {
        unit.age_ms = 0;
        unit.time_left_ms = unit.time_left_ms.map(|_| 0);
        unit.ended_ms = unit.ended_ms.map(|_| 0);
    }
    // A failure, and whether it backs off, change the report; the time since and left do not
    // (a failure since the last report is found by its time: `Reports::due`).
    key.launch.last_failure_ms = key.launch.last_failure_ms.map(|_| 0);
    key.launch.backoff_ms = key.launch.backoff_ms.min(1);
    key
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::proto::{UnitReport, UnitState};

    fn state(workers: &[&str], age_ms: u64) -> ManagerState {
        ManagerState {
            labels: Vec::new(),
            id: "m".into(),
            worker_type: "default".into(),
            max_task_concurrency: 4,
            worker_slots: 1,
            capabilities: vec![],
            workers: workers.iter().map(|w| w.to_string()).collect(),
            environments: vec![],
            fixed: None,
            exited: vec![],
            backend: "process".into(),
            units: vec![UnitReport {
                id: "u1".into(),
                state: UnitState::Running,
                reason: None,
                age_ms,
                workers: vec![],
                time_left_ms: Some(60_000 - age_ms),
                ended_ms: None,
            }],
            usable_ms: None,
            instances: vec![],
            launch: crate::proto::LaunchReport {
                failures: 1,
                last_failure_ms: Some(age_ms),
                backoff_ms: 10_000u64.saturating_sub(age_ms),
            },
        }
    }

    #[tokio::test(start_paused = true)]
    async fn a_manager_reports_changes_at_once_and_otherwise_at_its_pace() {
        let tick = Duration::from_millis(500);
        let mut reports = Reports::new(tick);
        let t0 = Instant::now();
        let at = |ms: u64| t0 + Duration::from_millis(ms);
        assert!(reports.due(at(0), state(&["a"], 0)).is_some(), "the first");
        // No pace yet: every tick, as before.
        assert!(reports.due(at(500), state(&["a"], 500)).is_some());
        reports.pace(Duration::from_millis(2_500));
        // Only ages moved: not sent until the next tick would be past the pace (2 000 ms after
        // the last report, with ticks 500 ms apart: never more than 2 500 ms between reports).
        for ms in [1_000, 2_000, 2_499] {
            assert!(reports.due(at(ms), state(&["a"], ms)).is_none(), "at {ms}");
        }
        assert!(reports.due(at(2_500), state(&["a"], 2_500)).is_some());
        // A change goes at once.
        assert!(reports.due(at(2_600), state(&["a", "b"], 2_600)).is_some());
        assert!(reports.due(at(2_700), state(&["a", "b"], 2_700)).is_none());
        let mut failed = state(&["a", "b"], 2_750);
        failed.launch.failures = 2;
        assert!(
            reports.due(at(2_750), failed).is_some(),
            "a failure goes at once"
        );
        // A failure counted with the last (found while the manager backs off) goes at once too:
        // the policy's cool-downs run from the latest failure. Its age growing does not.
        let mut again = state(&["a", "b"], 2_750);
        again.launch.failures = 2;
        again.launch.last_failure_ms = Some(3_050); // at 0, as reported at 2 750
        assert!(
            reports.due(at(3_050), again.clone()).is_none(),
            "the same failure, older"
        );
        again.launch.last_failure_ms = Some(0);
        assert!(
            reports.due(at(3_100), again.clone()).is_some(),
            "a later failure, same count"
        );
        again.launch.last_failure_ms = Some(400);
        assert!(reports.due(at(3_500), again).is_none(), "it, older");
        // The scheduler's silence is judged by the pace: the timeout while it is short, the
        // pace and half the timeout once it is long.
        assert_eq!(reports.silence_limit(), Duration::from_secs(5));
        reports.pace(Duration::from_secs(22));
        assert_eq!(reports.silence_limit(), Duration::from_millis(24_500));
        reports.pace(Duration::from_millis(2_500));
        // A pace below the tick is the tick: every tick reports.
        reports.pace(Duration::from_millis(10));
        assert!(reports.due(at(2_800), state(&["a", "b"], 2_800)).is_some());
        assert!(reports.due(at(3_300), state(&["a", "b"], 3_300)).is_some());
    }
}
