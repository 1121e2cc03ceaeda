//! The scaling side of the core: the policy trait the scheduler's scaling loop calls, and the
//! checks every decision passes before it is applied, whoever produced it.
//!
//! The snapshot and decision types are those of `weir-waterfall` (they mirror
//! `weir:plugin/scaling` in `wit/weir.wit`), so the native reference implementation and the WASM
//! engines speak the same types.

use std::sync::Arc;

use crate::hash::{HashMap, HashSet};

mod failure;
pub use failure::{Nonsense, PolicyFailure};

pub use weir_waterfall::model::{RECENT_RUNTIMES, UNLIMITED};
pub use weir_waterfall::{
    BusyGroup, Decision, Demand, Launch, Manager, Runtimes, Snapshot, Summary, Tier, Verdict,
    Worker,
};

/// The start of the environment names the scheduler gives demand with a timeout (see
/// [`walltime_environment`]). User environment names are letters, digits, `_` and `-` only
/// (`check_env_name`), so they never start with it.
pub(crate) const WALLTIME_PREFIX: &str = "walltime>=";

/// Whether `environment` is a name the scheduler keeps for itself ([`walltime_environment`]):
/// not taken from a manager's or worker's own conditions, so no task can name one.
pub(crate) fn is_reserved_environment(environment: &str) -> bool {
    environment.starts_with(WALLTIME_PREFIX)
}

/// Timeouts are rounded up to whole seconds for the policy (the names carry seconds). Not
/// coarser: a bucket of a minute turned a task of 85 s away from workers with 90 s to run it.
pub(crate) const WALLTIME_BUCKET_MS: u64 = 1_000;

/// The timeout a manager's workers must have room for to run a task of `timeout_ms` (0: none),
/// as the policy and `weir explain` count it: rounded up to whole seconds.
pub(crate) fn walltime_bucket_ms(timeout_ms: u64) -> u64 {
    timeout_ms.div_ceil(WALLTIME_BUCKET_MS) * WALLTIME_BUCKET_MS
}

/// The environment name under which demand with a timeout reaches the policy: the WIT
/// (`weir:plugin@0.1.0`) has no walltimes, so the constraint travels in its own terms: a
/// demand group names `walltime>=SECONDS` and each manager has a verdict on it
/// ([`walltime_verdict`]). `None` for a task without a timeout (it runs anywhere).
pub fn walltime_environment(timeout_ms: u64) -> Option<String> {
    (timeout_ms > 0).then(|| {
        format!(
            "{WALLTIME_PREFIX}{}s",
            walltime_bucket_ms(timeout_ms) / 1000
        )
    })
}

/// The milliseconds a [`walltime_environment`] name stands for (`None`: not such a name).
pub fn walltime_of(environment: &str) -> Option<u64> {
    let seconds = environment
        .strip_prefix(WALLTIME_PREFIX)?
        .strip_suffix('s')?;
    seconds.parse::<u64>().ok()?.checked_mul(1000)
}

/// Whether a worker with `usable_ms` to run tasks (`None`: no limit) has room for a task of
/// `timeout_ms` (0: none), counted as the policy counts it.
pub(crate) fn usable_covers(usable_ms: Option<u64>, timeout_ms: u64) -> bool {
    timeout_ms == 0 || usable_ms.is_none_or(|usable| usable >= walltime_bucket_ms(timeout_ms))
}

/// A manager's verdict on a [`walltime_environment`] of `walltime_ms`: `match` when each worker
/// it starts has at least that long to run tasks (or no limit), `no-match` otherwise.
pub(crate) fn walltime_verdict(usable_ms: Option<u64>, walltime_ms: u64) -> Verdict {
    match usable_ms.is_none_or(|usable| usable >= walltime_ms) {
        true => Verdict::Match,
        false => Verdict::NoMatch,
    }
}

/// The drain budget of a manager with `live` live workers: `percent` of them, rounded up
/// (Karpenter's budgets round so; 10 % of 5 workers is 1, so a small pool can still move its
/// work down a tier one worker at a time). 0 when `percent` is 0 or nothing is live.
pub fn drain_budget(percent: u32, live: usize) -> u32 {
    let live = u64::try_from(live).unwrap_or(u64::MAX);
    let budget = live
        .saturating_mul(u64::from(percent.min(100)))
        .div_ceil(100);
    u32::try_from(budget).unwrap_or(u32::MAX)
}

/// Something that decides how many workers each manager should run: the WASM adapter
/// (`plugin::PolicyPlugin`) or a native one. The scheduler holds it as
/// `Box<dyn ScalingPolicy>` and checks every decision with [`validate_decisions`] whatever it is.
pub trait ScalingPolicy: Send {
    /// Its name, in errors about its decisions.
    fn name(&self) -> &str;
    /// Shared, not borrowed: a 0.2.0 component reads the worker lists it asks for from the
    /// snapshot while it decides, and the scheduler keeps the same snapshot to check the answer.
    fn decide(&mut self, snapshot: &Arc<Snapshot>) -> Result<Vec<Decision>, PolicyFailure>;
}

/// The native reference: the waterfall algorithm compiled into the host.
impl ScalingPolicy for weir_waterfall::Policy {
    fn name(&self) -> &str {
        "native waterfall"
    }

    fn decide(&mut self, snapshot: &Arc<Snapshot>) -> Result<Vec<Decision>, PolicyFailure> {
        Ok(weir_waterfall::Policy::decide(self, snapshot))
    }
}

/// Checks that `decisions` can be applied to `snapshot`: each names an online manager of the
/// snapshot once, asks for no more workers than the manager's cap allows (whatever it runs now:
/// a manager above its cap is brought down to it, never kept there), and stops only idle
/// workers of that manager, and drains only that manager's live workers, each once, none it
/// also stops, at most its drain budget. The scheduler applies this to every policy's decisions. The
/// snapshot's manager ids are unique (the scheduler keys managers by id; `weir policy test`
/// refuses a scenario that repeats one).
pub fn validate_decisions(snapshot: &Snapshot, decisions: &[Decision]) -> Result<(), Nonsense> {
    // Policies mostly answer in the snapshot's order: the decision at position i is then found
    // at position i without hashing; the map by id is built only for one that is not.
    let mut by_id: Option<HashMap<&str, usize>> = None;
    let mut decided = vec![false; snapshot.managers.len()];
    for (position, decision) in decisions.iter().enumerate() {
        let id = decision.manager_id.as_str();
        let index = match snapshot.managers.get(position) {
            Some(m) if m.id == id => Some(position),
            _ => by_id
                .get_or_insert_with(|| {
                    let managers = snapshot.managers.iter().enumerate();
                    managers.map(|(i, m)| (m.id.as_str(), i)).collect()
                })
                .get(id)
                .copied(),
        };
        let manager_id = || id.to_string();
        let Some(index) = index else {
            let manager = manager_id();
            return Err(Nonsense::UnknownManager { manager });
        };
        let manager = &snapshot.managers[index];
        if !manager.online {
            let manager = manager_id();
            return Err(Nonsense::Offline { manager });
        }
        if std::mem::replace(&mut decided[index], true) {
            let manager = manager_id();
            return Err(Nonsense::TwoDecisions { manager });
        }
        let allowed = manager.max_workers_for(manager.max_task_concurrency);
        if u64::from(decision.desired_workers) > allowed {
            return Err(Nonsense::OverCap {
                manager: manager_id(),
                desired: decision.desired_workers,
                concurrency: manager.max_task_concurrency,
                allowed,
            });
        }
        if decision.drain.len() > manager.drain_budget as usize {
            return Err(Nonsense::OverDrainBudget {
                manager: manager_id(),
                drained: decision.drain.len(),
                budget: manager.drain_budget,
            });
        }
        if decision.stop.is_empty() && decision.drain.is_empty() {
            continue;
        }
        let workers: HashMap<u64, &Worker> = manager.workers.iter().map(|w| (w.id, w)).collect();
        let mut drained: HashSet<u64> =
            HashSet::with_capacity_and_hasher(decision.drain.len(), Default::default());
        for &worker in &decision.drain {
            if !workers.contains_key(&worker) {
                let manager = manager_id();
                return Err(Nonsense::DrainsNotItsWorker { manager, worker });
            }
            if !drained.insert(worker) {
                let manager = manager_id();
                return Err(Nonsense::DrainsTwice { manager, worker });
            }
        }
        let mut stopped: HashSet<u64> =
            HashSet::with_capacity_and_hasher(decision.stop.len(), Default::default());
        for &worker in &decision.stop {
            let Some(found) = workers.get(&worker) else {
                let manager = manager_id();
                return Err(Nonsense::NotItsWorker { manager, worker });
            };
            if found.busy > 0 {
                let manager = manager_id();
                return Err(Nonsense::StopsBusy { manager, worker });
            }
            if !stopped.insert(worker) {
                let manager = manager_id();
                return Err(Nonsense::StopsTwice { manager, worker });
            }
        }
        if let Some(&worker) = decision.drain.iter().find(|w| stopped.contains(*w)) {
            let manager = manager_id();
            return Err(Nonsense::DrainsTwice { manager, worker });
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn snapshot() -> Snapshot {
        let worker = |id: u64, busy| Worker {
            time_left_ms: None,
            id,
            slots: 1,
            busy,
            idle_ms: 0,
        };
        // Manager `a` has idle worker 1 and busy worker 2; `off` has 3 and 4.
        let manager = |id: &str, first: u64, online| Manager {
            labels: Vec::new(),
            counted: None,
            drained: Vec::new(),
            drain_budget: 0,
            walltime_ms: None,
            id: id.into(),
            worker_type: "t".into(),
            max_task_concurrency: 4,
            worker_slots: 2,
            online,
            workers: vec![worker(first, 0), worker(first + 1, 1)],
            starting: 0,
            capabilities: vec![],
            environments: vec![],
            ..Default::default()
        };
        Snapshot {
            fetch: Default::default(),
            now_ms: 0,
            scale_down_delay_ms: 0,
            managers: vec![manager("a", 1, true), manager("off", 3, false)],
            demand: vec![],
        }
    }

    fn decision(id: &str, desired: u32, stop: &[u64]) -> Decision {
        Decision {
            manager_id: id.into(),
            desired_workers: desired,
            stop: stop.to_vec(),
            reason: String::new(),
            ..Default::default()
        }
    }

    #[test]
    fn walltime_names_round_timeouts_up_to_whole_seconds_and_read_back() {
        assert_eq!(walltime_environment(0), None);
        assert_eq!(walltime_environment(1).as_deref(), Some("walltime>=1s"));
        assert_eq!(
            walltime_environment(85_000).as_deref(),
            Some("walltime>=85s")
        );
        // A task of 85 s fits workers with 90 s to run tasks (a 2-minute walltime less 30 s).
        assert!(usable_covers(Some(90_000), 85_000));
        assert!(!usable_covers(Some(90_000), 90_001));
        assert_eq!(
            walltime_environment(60_000).as_deref(),
            Some("walltime>=60s")
        );
        assert_eq!(
            walltime_environment(60_001).as_deref(),
            Some("walltime>=61s")
        );
        assert_eq!(walltime_of("walltime>=120s"), Some(120_000));
        assert_eq!(walltime_of("walltime>=12x"), None);
        assert_eq!(walltime_of("gpu"), None);
        assert!(is_reserved_environment("walltime>=60s") && !is_reserved_environment("walltime"));
        // Counted as the policy counts it: 59 min 10.5 s needs 59 min 11 s.
        assert!(usable_covers(None, 3_550_500));
        assert!(usable_covers(Some(1_000), 0));
        assert!(usable_covers(Some(3_551_000), 3_550_500));
        assert!(!usable_covers(Some(3_550_999), 3_550_500));
        assert_eq!(
            walltime_verdict(Some(3_570_000), 3_600_000),
            Verdict::NoMatch
        );
        assert_eq!(walltime_verdict(None, 3_600_000), Verdict::Match);
    }

    #[test]
    fn sensible_decisions_pass() {
        assert_eq!(
            validate_decisions(&snapshot(), &[decision("a", 2, &[])]),
            Ok(())
        );
        assert_eq!(
            validate_decisions(&snapshot(), &[decision("a", 1, &[1])]),
            Ok(())
        );
        assert_eq!(validate_decisions(&snapshot(), &[]), Ok(()));
    }

    #[test]
    fn decisions_are_found_in_any_order_and_a_second_one_anywhere_is_refused() {
        let mut snapshot = snapshot();
        let mut b = snapshot.managers[0].clone();
        b.id = "b".into();
        b.workers.iter_mut().for_each(|w| w.id += 10);
        snapshot.managers.push(b);
        let two = |id: &str| Err(format!("two decisions for manager `{id}`"));
        let check = |decisions: &[Decision]| {
            validate_decisions(&snapshot, decisions).map_err(|rule| rule.to_string())
        };
        assert_eq!(
            check(&[decision("b", 1, &[11]), decision("a", 1, &[1])]),
            Ok(())
        );
        let again_out_of_order = [
            decision("a", 1, &[]),
            decision("b", 1, &[]),
            decision("a", 1, &[]),
        ];
        assert_eq!(check(&again_out_of_order), two("a"));
        let again_in_order = [
            decision("b", 1, &[]),
            decision("a", 1, &[]),
            decision("b", 1, &[]),
        ];
        assert_eq!(check(&again_in_order), two("b"));
        assert_eq!(
            check(&[decision("b", 1, &[]), decision("b", 1, &[])]),
            two("b")
        );
        assert_eq!(
            check(&[decision("a", 1, &[]), decision("b", 1, &[1])]),
            Err("stops `1`, which is not a worker of manager `b`".into())
        );
    }

    #[test]
    fn nonsense_is_named() {
        let cases = [
            (vec![decision("ghost", 1, &[])], "unknown manager `ghost`"),
            (vec![decision("off", 1, &[])], "manager `off` is offline"),
            (
                vec![decision("a", 1, &[]), decision("a", 2, &[])],
                "two decisions for manager `a`",
            ),
            (
                vec![decision("a", 3, &[])],
                "asks manager `a` for 3 workers; its max task concurrency 4 allows 2",
            ),
            (
                vec![decision("a", 1, &[2])],
                "stops worker `2` of manager `a` while it runs tasks",
            ),
            (
                vec![decision("a", 1, &[3])],
                "stops `3`, which is not a worker of manager `a`",
            ),
            (
                vec![decision("a", 0, &[1, 1])],
                "stops worker `1` of manager `a` twice",
            ),
        ];
        for (decisions, expected) in cases {
            assert_eq!(
                validate_decisions(&snapshot(), &decisions).map_err(|rule| rule.to_string()),
                Err(expected.to_string())
            );
        }
    }
}
