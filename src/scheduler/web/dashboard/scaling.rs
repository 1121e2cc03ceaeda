//! Scaling over time for the dashboard's scaling view: each manager's desired, live and starting
//! workers every 10 s for an hour, and the log of what changed (a manager's desired count, the
//! policy, its errors), as the sampler sees the scheduler once a second.

use std::collections::{BTreeMap, VecDeque};

use serde::Serialize;

use crate::scheduler::event::Snapshot;

/// Per manager: a point every 10 s for an hour.
const MANAGER_POINT_EVERY: u64 = 10;
const MANAGER_POINTS: usize = 360;
/// Entries of the decision log kept (newest last).
const LOG: usize = 1000;

/// Scaling over time, as the sampler saw it: per manager `[t, desired, live, starting]` every
/// [`MANAGER_POINT_EVERY`] s, and the log of what changed.
#[derive(Default, Serialize)]
pub(super) struct Scaling {
    managers: BTreeMap<String, ManagerSeries>,
    log: VecDeque<LogEntry>,
    /// What the log compares the next second with (not served).
    #[serde(skip)]
    seen: Seen,
}

#[derive(Default, Serialize)]
struct ManagerSeries {
    tier: Option<u32>,
    points: VecDeque<[u64; 4]>,
}

#[derive(Default)]
struct Seen {
    started: bool,
    desired: BTreeMap<String, u32>,
    policy: Option<(String, String, String)>,
    error: Option<String>,
    /// When the managers' last points were taken (s).
    point: Option<u64>,
}

/// One line of the decision log: a manager's desired count changed (with the decision's
/// stops, drains and reason), or the policy changed or failed.
#[derive(Clone, Serialize)]
struct LogEntry {
    t: u64,
    manager: Option<String>,
    from: Option<u32>,
    desired: Option<u32>,
    stop: usize,
    drain: usize,
    what: String,
}

impl Scaling {
    /// Log what changed since the last second's snapshot; every 10 s, a point per manager.
    pub(super) fn observe(&mut self, t: u64, snapshot: &Snapshot) {
        let policy = &snapshot.policy;
        let identity = (
            policy.name.clone(),
            policy.sha256.clone(),
            policy.content.clone(),
        );
        let mut entries = Vec::new();
        let event = |what: String| LogEntry {
            t,
            manager: None,
            from: None,
            desired: None,
            stop: 0,
            drain: 0,
            what,
        };
        if self.seen.started && self.seen.policy.as_ref() != Some(&identity) {
            entries.push(event(format!("policy changed to {}", policy.name)));
        }
        if policy.error.is_some() && policy.error != self.seen.error {
            entries.push(event(format!(
                "policy error: {}",
                policy.error.as_deref().unwrap_or_default()
            )));
        }
        for decision in &snapshot.decisions {
            let before = self.seen.desired.get(&decision.manager_id).copied();
            if before != Some(decision.desired_workers) {
                entries.push(LogEntry {
                    t,
                    manager: Some(decision.manager_id.clone()),
                    from: before,
                    desired: Some(decision.desired_workers),
                    stop: decision.stop.len(),
                    drain: decision.drain.len(),
                    what: decision.reason.clone(),
                });
            }
        }
        self.seen.desired = (snapshot.decisions.iter())
            .map(|d| (d.manager_id.clone(), d.desired_workers))
            .collect();
        self.seen.policy = Some(identity);
        self.seen.error = policy.error.clone();
        self.seen.started = true;
        for entry in entries {
            if self.log.len() == LOG {
                self.log.pop_front();
            }
            self.log.push_back(entry);
        }
        if self
            .seen
            .point
            .is_none_or(|at| t >= at + MANAGER_POINT_EVERY)
        {
            self.seen.point = Some(t);
            let live: std::collections::HashSet<&str> = snapshot
                .status
                .managers
                .iter()
                .map(|m| m.id.as_str())
                .collect();
            self.managers.retain(|id, _| live.contains(id.as_str()));
            for m in &snapshot.status.managers {
                let series = self.managers.entry(m.id.clone()).or_default();
                series.tier = m.tier;
                if series.points.len() == MANAGER_POINTS {
                    series.points.pop_front();
                }
                let desired = u64::from(m.desired.unwrap_or(0));
                (series.points).push_back([t, desired, u64::from(m.live), u64::from(m.starting)]);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::core::scaling::Decision;
    use crate::proto::{PolicyReport, StatusReport};

    fn snapshot(policy: &str, error: Option<&str>, desired: &[(&str, u32)]) -> Snapshot {
        Snapshot {
            status: StatusReport::default(),
            environments: Vec::new(),
            jobs: Vec::new(),
            policy: PolicyReport {
                name: policy.into(),
                sha256: String::new(),
                content: String::new(),
                tiers: Vec::new(),
                last: Vec::new(),
                error: error.map(Into::into),
            },
            managers: Vec::new(),
            replicas: Vec::new(),
            decisions: (desired.iter())
                .map(|(id, n)| Decision {
                    manager_id: (*id).into(),
                    desired_workers: *n,
                    stop: vec![7],
                    reason: format!("{id} wants {n}"),
                    ..Decision::default()
                })
                .collect(),
            demand: Vec::new(),
        }
    }

    #[test]
    fn the_log_has_each_change_of_a_managers_count_the_policy_and_its_errors_once() {
        let mut scaling = Scaling::default();
        scaling.observe(100, &snapshot("a", None, &[("m1", 1)]));
        scaling.observe(101, &snapshot("a", None, &[("m1", 1)]));
        scaling.observe(102, &snapshot("a", None, &[("m1", 3), ("m2", 0)]));
        scaling.observe(103, &snapshot("b", Some("trap"), &[("m1", 3), ("m2", 0)]));
        scaling.observe(104, &snapshot("b", Some("trap"), &[("m1", 3), ("m2", 0)]));
        type Line<'a> = (u64, Option<&'a str>, Option<u32>, Option<u32>, &'a str);
        let log: Vec<Line<'_>> = (scaling.log.iter())
            .map(|e| {
                (
                    e.t,
                    e.manager.as_deref(),
                    e.from,
                    e.desired,
                    e.what.as_str(),
                )
            })
            .collect();
        assert_eq!(
            log,
            vec![
                (100, Some("m1"), None, Some(1), "m1 wants 1"),
                (102, Some("m1"), Some(1), Some(3), "m1 wants 3"),
                (102, Some("m2"), None, Some(0), "m2 wants 0"),
                (103, None, None, None, "policy changed to b"),
                (103, None, None, None, "policy error: trap"),
            ]
        );
        assert_eq!(scaling.log[0].stop, 1);
    }
}
