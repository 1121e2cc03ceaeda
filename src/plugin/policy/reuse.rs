//! The snapshot written into the last call's WIT values instead of new ones, for each version
//! (the decisions come back owned, so the `convert` modules serve for those).

use super::{cluster, wit};
use crate::core::scaling::{Snapshot, Summary};

pub(super) fn blank_v0_1() -> wit::Snapshot {
    wit::Snapshot {
        now_ms: 0,
        scale_down_delay_ms: 0,
        managers: Vec::new(),
        demand: Vec::new(),
    }
}

pub(super) fn blank_v0_2() -> cluster::Snapshot {
    cluster::Snapshot {
        now_ms: 0,
        scale_down_delay_ms: 0,
        managers: Vec::new(),
        demand: Vec::new(),
    }
}

/// `weir:plugin@0.1.0`: every manager with its worker list.
pub(super) fn snapshot_into_v0_1(s: &Snapshot, out: &mut wit::Snapshot) {
    out.now_ms = s.now_ms;
    out.scale_down_delay_ms = s.scale_down_delay_ms;
    let blank_manager = |_: &_| wit::Manager {
        id: String::new(),
        worker_type: String::new(),
        max_task_concurrency: 0,
        worker_slots: 0,
        online: false,
        workers: Vec::new(),
        starting: 0,
        capabilities: Vec::new(),
        environments: Vec::new(),
    };
    overwrite(&mut out.managers, &s.managers, blank_manager, |w, m| {
        w.id.clone_from(&m.id);
        w.worker_type.clone_from(&m.worker_type);
        w.max_task_concurrency = m.max_task_concurrency;
        w.worker_slots = m.worker_slots;
        w.online = m.online;
        w.starting = m.starting;
        w.workers.clear();
        w.workers.extend(m.workers.iter().map(|k| wit::Worker {
            id: k.id,
            slots: k.slots,
            busy: k.busy,
            idle_ms: k.idle_ms,
        }));
        named(&mut w.capabilities, &m.capabilities, |amount| *amount);
        named(&mut w.environments, &m.environments, |v| {
            super::convert::verdict_to_wit(*v)
        });
    });
    let blank_demand = |_: &_| wit::Demand {
        capabilities: Vec::new(),
        environments: Vec::new(),
        queued: 0,
        running: 0,
    };
    overwrite(&mut out.demand, &s.demand, blank_demand, |w, d| {
        named(&mut w.capabilities, &d.capabilities, |amount| *amount);
        w.environments.clone_from(&d.environments);
        w.queued = d.queued;
        w.running = d.running;
    });
}

/// `weir:plugin@0.2.0`: every manager with its workers counted (the lists stay on the host).
pub(super) fn snapshot_into_v0_2(s: &Snapshot, out: &mut cluster::Snapshot) {
    out.now_ms = s.now_ms;
    out.scale_down_delay_ms = s.scale_down_delay_ms;
    let blank_manager = |_: &_| cluster::Manager {
        id: String::new(),
        worker_type: String::new(),
        labels: Vec::new(),
        max_task_concurrency: 0,
        worker_slots: 0,
        online: false,
        summary: cluster::Summary {
            busy: 0,
            idle: 0,
            idle_past_delay: 0,
            busy_groups: Vec::new(),
        },
        starting: 0,
        starting_ages_ms: Vec::new(),
        launch: cluster::Launch {
            failures: 0,
            last_failure_ms: None,
            backoff_ms: 0,
        },
        walltime_ms: None,
        capabilities: Vec::new(),
        environments: Vec::new(),
        drained: Vec::new(),
        drain_budget: 0,
    };
    overwrite(&mut out.managers, &s.managers, blank_manager, |w, m| {
        w.id.clone_from(&m.id);
        w.worker_type.clone_from(&m.worker_type);
        w.max_task_concurrency = m.max_task_concurrency;
        w.worker_slots = m.worker_slots;
        w.online = m.online;
        w.starting = m.starting;
        w.walltime_ms = m.walltime_ms;
        w.drained.clone_from(&m.drained);
        w.drain_budget = m.drain_budget;
        w.starting_ages_ms.clone_from(&m.starting_ages_ms);
        w.launch = super::convert_v0_2::launch_to_wit(&m.launch);
        overwrite(
            &mut w.labels,
            &m.labels,
            |_| (String::new(), String::new()),
            |slot, (k, v)| {
                slot.0.clone_from(k);
                slot.1.clone_from(v);
            },
        );
        let (busy, idle, past) = Summary::counts(&m.workers, s.scale_down_delay_ms);
        w.summary.busy = busy;
        w.summary.idle = idle;
        w.summary.idle_past_delay = past;
        w.summary.busy_groups.clear();
        w.summary
            .busy_groups
            .extend(Summary::busy_runs(&m.workers).map(|g| cluster::BusyGroup {
                slots: g.slots,
                busy: g.busy,
                count: g.count,
            }));
        named(&mut w.capabilities, &m.capabilities, |amount| *amount);
        named(&mut w.environments, &m.environments, |v| {
            super::convert_v0_2::verdict_to_wit(*v)
        });
    });
    let blank_demand = |_: &_| cluster::Demand {
        capabilities: Vec::new(),
        environments: Vec::new(),
        queued: 0,
        running: 0,
        oldest_queued_ms: 0,
        runtimes: None,
    };
    overwrite(&mut out.demand, &s.demand, blank_demand, |w, d| {
        named(&mut w.capabilities, &d.capabilities, |amount| *amount);
        w.environments.clone_from(&d.environments);
        w.queued = d.queued;
        w.running = d.running;
        w.oldest_queued_ms = d.oldest_queued_ms;
        w.runtimes = d.runtimes.as_ref().map(|r| cluster::Runtimes {
            count: r.count,
            p50_ms: r.p50_ms,
            p90_ms: r.p90_ms,
            max_ms: r.max_ms,
        });
    });
}

/// `out` made as long as `from`, each element written over from its counterpart by `write`
/// (one made by `blank` first where `out` was shorter), so strings and lists inside keep
/// their capacity from call to call.
fn overwrite<S, T>(
    out: &mut Vec<T>,
    from: &[S],
    blank: impl Fn(&S) -> T,
    mut write: impl FnMut(&mut T, &S),
) {
    out.truncate(from.len());
    for (i, source) in from.iter().enumerate() {
        if i == out.len() {
            out.push(blank(source));
        }
        write(&mut out[i], source);
    }
}

/// `out` made equal to `from` (names with a value each), reusing its strings.
fn named<A, B>(out: &mut Vec<(String, B)>, from: &[(String, A)], value: impl Fn(&A) -> B) {
    let blank = |(_, a): &(String, A)| (String::new(), value(a));
    overwrite(out, from, blank, |slot, (name, a)| {
        slot.0.clone_from(name);
        slot.1 = value(a);
    });
}

#[cfg(test)]
mod tests {
    use super::super::{convert, convert_v0_2};
    use super::*;
    use crate::core::scaling::{Demand, Launch, Manager, Runtimes, Snapshot, Verdict, Worker};
    use proptest::prelude::*;

    fn names(max: usize) -> impl Strategy<Value = Vec<String>> {
        prop::collection::vec("[a-z]{0,12}", 0..max)
    }

    fn manager() -> impl Strategy<Value = Manager> {
        let workers = prop::collection::vec((any::<u64>(), 0u32..4, 0u32..4, any::<u64>()), 0..6);
        let verdicts = prop::collection::vec(0u8..3, 0..4);
        (
            names(3),
            workers,
            names(4),
            verdicts,
            any::<(u32, u32, bool, u32)>(),
        )
            .prop_map(
                |(ids, workers, capabilities, verdicts, (cap, slots, online, starting))| Manager {
                    labels: verdicts
                        .iter()
                        .map(|v| (format!("k{v}"), ids.join(",")))
                        .collect(),
                    id: ids.first().cloned().unwrap_or_default(),
                    worker_type: ids.last().cloned().unwrap_or_default(),
                    max_task_concurrency: cap,
                    worker_slots: slots,
                    online,
                    workers: workers
                        .into_iter()
                        .map(|(id, slots, busy, idle_ms)| Worker {
                            id,
                            slots,
                            busy,
                            idle_ms,
                            time_left_ms: (id % 3 == 0).then_some(idle_ms / 2),
                        })
                        .collect(),
                    starting,
                    capabilities: capabilities
                        .iter()
                        .map(|n| (n.clone(), n.len() as u64))
                        .collect(),
                    environments: capabilities
                        .into_iter()
                        .zip(verdicts)
                        .map(|(n, v)| {
                            (
                                n,
                                [Verdict::Match, Verdict::NoMatch, Verdict::Unknown][v as usize],
                            )
                        })
                        .collect(),
                    walltime_ms: (cap % 2 == 0).then_some(u64::from(cap) * 1000),
                    counted: None,
                    drained: (1..u64::from(starting % 4)).collect(),
                    drain_budget: starting % 5,
                    launch: Launch {
                        failures: cap % 3,
                        last_failure_ms: (cap % 3 > 0).then_some(u64::from(slots)),
                        backoff_ms: u64::from(starting),
                    },
                    starting_ages_ms: (0..u64::from(starting % 3)).rev().collect(),
                },
            )
    }

    fn snapshot() -> impl Strategy<Value = Snapshot> {
        let demand = (names(3), names(3), any::<(u32, u32)>()).prop_map(
            |(caps, environments, (queued, running))| Demand {
                capabilities: caps.into_iter().map(|n| (n, 2)).collect(),
                environments,
                queued,
                running,
                oldest_queued_ms: u64::from(queued / 2),
                runtimes: (running % 2 == 1).then(|| {
                    Runtimes::of(&mut [u64::from(queued), u64::from(running), 7])
                        .unwrap_or_default()
                }),
            },
        );
        (
            prop::collection::vec(manager(), 0..6),
            prop::collection::vec(demand, 0..4),
            any::<(u64, u64)>(),
        )
            .prop_map(
                |(managers, demand, (now_ms, scale_down_delay_ms))| Snapshot {
                    now_ms,
                    scale_down_delay_ms,
                    managers,
                    demand,
                    fetch: Default::default(),
                },
            )
    }

    proptest! {
        /// Written over whatever the last call left (more managers, fewer, longer names), the
        /// reused snapshot is exactly the one a fresh conversion makes.
        #[test]
        fn a_snapshot_written_over_the_last_equals_a_fresh_conversion(
            snapshots in prop::collection::vec(snapshot(), 1..6)
        ) {
            let mut reused = blank_v0_1();
            let mut reused_v0_2 = blank_v0_2();
            for snapshot in &snapshots {
                snapshot_into_v0_1(snapshot, &mut reused);
                let fresh = convert::snapshot_to_wit(snapshot);
                prop_assert_eq!(format!("{reused:?}"), format!("{fresh:?}"));
                snapshot_into_v0_2(snapshot, &mut reused_v0_2);
                let fresh = convert_v0_2::snapshot_to_wit(snapshot);
                prop_assert_eq!(format!("{reused_v0_2:?}"), format!("{fresh:?}"));
            }
        }
    }
}
