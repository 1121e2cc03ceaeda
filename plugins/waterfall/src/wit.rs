//! The conversions between these types and the bindings generated from `weir:plugin/scaling`,
//! written once for both sides: the host (wasmtime's `bindgen!`) and the guests
//! (`wit_bindgen::generate!`) generate different Rust types with the same shape, so each expands
//! [`wit_conversions!`] (0.1.0) or [`wit_conversions_v2!`] (0.2.0) over its own bindings. What
//! both versions share (verdicts) is [`__wit_common!`].

/// The conversions both versions share, over the module holding the snapshot's records and the
/// one holding decisions and tiers (the same module in 0.1.0). Expanded by the two below.
#[doc(hidden)]
#[macro_export]
macro_rules! __wit_common {
    ($records:ident, $decisions:ident) => {
        #[allow(dead_code)]
        pub fn verdict_to_wit(v: $crate::Verdict) -> $records::Verdict {
            match v {
                $crate::Verdict::Match => $records::Verdict::Match,
                $crate::Verdict::NoMatch => $records::Verdict::NoMatch,
                $crate::Verdict::Unknown => $records::Verdict::Unknown,
            }
        }

        #[allow(dead_code)]
        pub fn verdict_from_wit(v: $records::Verdict) -> $crate::Verdict {
            match v {
                $records::Verdict::Match => $crate::Verdict::Match,
                $records::Verdict::NoMatch => $crate::Verdict::NoMatch,
                $records::Verdict::Unknown => $crate::Verdict::Unknown,
            }
        }

        #[allow(dead_code)]
        pub fn environments_to_wit(
            e: &[(String, $crate::Verdict)],
        ) -> Vec<(String, $records::Verdict)> {
            e.iter()
                .map(|(name, v)| (name.clone(), verdict_to_wit(*v)))
                .collect()
        }

        #[allow(dead_code)]
        pub fn environments_from_wit(
            e: Vec<(String, $records::Verdict)>,
        ) -> Vec<(String, $crate::Verdict)> {
            e.into_iter()
                .map(|(name, v)| (name, verdict_from_wit(v)))
                .collect()
        }
    };
}

/// For `weir:plugin@0.1.0`. Expands to `snapshot_to_wit`, `snapshot_from_wit`, `decision_to_wit`,
/// `decision_from_wit`, `tier_to_wit` and `tier_from_wit` (and the shared helpers) for the
/// bindings module named by the identifier given (in scope where it is expanded):
/// `wit_conversions!(wit);`.
#[macro_export]
macro_rules! wit_conversions {
    ($wit:ident) => {
        $crate::__wit_common!($wit, $wit);

        #[allow(dead_code)]
        pub fn tier_to_wit(t: $crate::Tier) -> $wit::Tier {
            $wit::Tier {
                priority: t.priority,
                members: t.members,
            }
        }

        #[allow(dead_code)]
        pub fn tier_from_wit(t: $wit::Tier) -> $crate::Tier {
            $crate::Tier {
                priority: t.priority,
                members: t.members,
                ..Default::default()
            }
        }

        #[allow(dead_code)]
        pub fn demand_to_wit(d: &$crate::Demand) -> $wit::Demand {
            $wit::Demand {
                capabilities: d.capabilities.clone(),
                environments: d.environments.clone(),
                queued: d.queued,
                running: d.running,
            }
        }

        /// What 0.1.0 does not carry (queue ages, run times) is left out.
        #[allow(dead_code)]
        pub fn demand_from_wit(d: $wit::Demand) -> $crate::Demand {
            $crate::Demand {
                capabilities: d.capabilities,
                environments: d.environments,
                queued: d.queued,
                running: d.running,
                ..Default::default()
            }
        }

        /// 0.1.0 decisions drain nothing (a 0.1.0 policy's decision takes drained workers
        /// back); what 0.1.0 cannot say is dropped.
        #[allow(dead_code)]
        pub fn decision_to_wit(d: $crate::Decision) -> $wit::Decision {
            $wit::Decision {
                manager_id: d.manager_id,
                desired_workers: d.desired_workers,
                stop: d.stop,
                reason: d.reason,
            }
        }

        #[allow(dead_code)]
        pub fn decision_from_wit(d: $wit::Decision) -> $crate::Decision {
            $crate::Decision {
                manager_id: d.manager_id,
                desired_workers: d.desired_workers,
                stop: d.stop,
                reason: d.reason,
                ..Default::default()
            }
        }

        #[allow(dead_code)]
        pub fn snapshot_to_wit(s: &$crate::Snapshot) -> $wit::Snapshot {
            $wit::Snapshot {
                now_ms: s.now_ms,
                scale_down_delay_ms: s.scale_down_delay_ms,
                managers: s
                    .managers
                    .iter()
                    .map(|m| $wit::Manager {
                        id: m.id.clone(),
                        worker_type: m.worker_type.clone(),
                        max_task_concurrency: m.max_task_concurrency,
                        worker_slots: m.worker_slots,
                        online: m.online,
                        workers: m
                            .workers
                            .iter()
                            .map(|w| $wit::Worker {
                                id: w.id,
                                slots: w.slots,
                                busy: w.busy,
                                idle_ms: w.idle_ms,
                            })
                            .collect(),
                        starting: m.starting,
                        capabilities: m.capabilities.clone(),
                        environments: environments_to_wit(&m.environments),
                    })
                    .collect(),
                demand: s.demand.iter().map(demand_to_wit).collect(),
            }
        }

        #[allow(dead_code)]
        pub fn snapshot_from_wit(s: $wit::Snapshot) -> $crate::Snapshot {
            $crate::Snapshot {
                now_ms: s.now_ms,
                scale_down_delay_ms: s.scale_down_delay_ms,
                managers: s
                    .managers
                    .into_iter()
                    .map(|m| $crate::Manager {
                        id: m.id,
                        worker_type: m.worker_type,
                        max_task_concurrency: m.max_task_concurrency,
                        worker_slots: m.worker_slots,
                        online: m.online,
                        workers: m
                            .workers
                            .into_iter()
                            .map(|w| $crate::Worker {
                                id: w.id,
                                slots: w.slots,
                                busy: w.busy,
                                idle_ms: w.idle_ms,
                                time_left_ms: None,
                            })
                            .collect(),
                        starting: m.starting,
                        capabilities: m.capabilities,
                        environments: environments_from_wit(m.environments),
                        ..Default::default()
                    })
                    .collect(),
                demand: s.demand.into_iter().map(demand_from_wit).collect(),
                fetch: $crate::Fetch(None),
            }
        }
    };
}

/// For `weir:plugin@0.2.0`, whose snapshot records are in `cluster` and decisions in
/// `scaling`: `wit_conversions_v2!(cluster, scaling);` expands to the same functions as
/// [`wit_conversions!`] plus `summary_to_wit`, `worker_to_wit` and `worker_from_wit`. A
/// snapshot carries each manager's workers counted, not listed: `snapshot_to_wit` (the host)
/// counts them, and `snapshot_from_wit(s, fetch)` (a guest) leaves the lists empty and `fetch`
/// asks the host.
#[macro_export]
macro_rules! wit_conversions_v2 {
    ($cluster:ident, $scaling:ident) => {
        $crate::__wit_common!($cluster, $scaling);

        #[allow(dead_code)]
        pub fn tier_to_wit(t: $crate::Tier) -> $scaling::Tier {
            $scaling::Tier {
                priority: t.priority,
                members: t.members,
                settings: t.settings,
            }
        }

        #[allow(dead_code)]
        pub fn tier_from_wit(t: $scaling::Tier) -> $crate::Tier {
            $crate::Tier {
                priority: t.priority,
                members: t.members,
                settings: t.settings,
            }
        }

        #[allow(dead_code)]
        pub fn demand_to_wit(d: &$crate::Demand) -> $cluster::Demand {
            $cluster::Demand {
                capabilities: d.capabilities.clone(),
                environments: d.environments.clone(),
                queued: d.queued,
                running: d.running,
                oldest_queued_ms: d.oldest_queued_ms,
                runtimes: d.runtimes.as_ref().map(|r| $cluster::Runtimes {
                    count: r.count,
                    p50_ms: r.p50_ms,
                    p90_ms: r.p90_ms,
                    max_ms: r.max_ms,
                }),
            }
        }

        #[allow(dead_code)]
        pub fn demand_from_wit(d: $cluster::Demand) -> $crate::Demand {
            $crate::Demand {
                capabilities: d.capabilities,
                environments: d.environments,
                queued: d.queued,
                running: d.running,
                oldest_queued_ms: d.oldest_queued_ms,
                runtimes: d.runtimes.map(|r| $crate::Runtimes {
                    count: r.count,
                    p50_ms: r.p50_ms,
                    p90_ms: r.p90_ms,
                    max_ms: r.max_ms,
                }),
            }
        }

        #[allow(dead_code)]
        pub fn launch_to_wit(l: &$crate::Launch) -> $cluster::Launch {
            $cluster::Launch {
                failures: l.failures,
                last_failure_ms: l.last_failure_ms,
                backoff_ms: l.backoff_ms,
            }
        }

        #[allow(dead_code)]
        pub fn launch_from_wit(l: $cluster::Launch) -> $crate::Launch {
            $crate::Launch {
                failures: l.failures,
                last_failure_ms: l.last_failure_ms,
                backoff_ms: l.backoff_ms,
            }
        }

        #[allow(dead_code)]
        pub fn decision_to_wit(d: $crate::Decision) -> $scaling::Decision {
            $scaling::Decision {
                manager_id: d.manager_id,
                desired_workers: d.desired_workers,
                stop: d.stop,
                drain: d.drain,
                worker_reasons: d.worker_reasons,
                reason: d.reason,
            }
        }

        #[allow(dead_code)]
        pub fn decision_from_wit(d: $scaling::Decision) -> $crate::Decision {
            $crate::Decision {
                manager_id: d.manager_id,
                desired_workers: d.desired_workers,
                stop: d.stop,
                drain: d.drain,
                worker_reasons: d.worker_reasons,
                reason: d.reason,
            }
        }

        #[allow(dead_code)]
        pub fn summary_to_wit(s: &$crate::Summary) -> $cluster::Summary {
            $cluster::Summary {
                busy: s.busy,
                idle: s.idle,
                idle_past_delay: s.idle_past_delay,
                busy_groups: s
                    .busy_groups
                    .iter()
                    .map(|g| $cluster::BusyGroup {
                        slots: g.slots,
                        busy: g.busy,
                        count: g.count,
                    })
                    .collect(),
            }
        }

        #[allow(dead_code)]
        pub fn worker_to_wit(w: &$crate::Worker) -> $cluster::Worker {
            $cluster::Worker {
                id: w.id,
                slots: w.slots,
                busy: w.busy,
                idle_ms: w.idle_ms,
                time_left_ms: w.time_left_ms,
            }
        }

        #[allow(dead_code)]
        pub fn worker_from_wit(w: $cluster::Worker) -> $crate::Worker {
            $crate::Worker {
                id: w.id,
                slots: w.slots,
                busy: w.busy,
                idle_ms: w.idle_ms,
                time_left_ms: w.time_left_ms,
            }
        }

        #[allow(dead_code)]
        pub fn snapshot_to_wit(s: &$crate::Snapshot) -> $cluster::Snapshot {
            $cluster::Snapshot {
                now_ms: s.now_ms,
                scale_down_delay_ms: s.scale_down_delay_ms,
                managers: s
                    .managers
                    .iter()
                    .map(|m| $cluster::Manager {
                        id: m.id.clone(),
                        worker_type: m.worker_type.clone(),
                        labels: m.labels.clone(),
                        max_task_concurrency: m.max_task_concurrency,
                        worker_slots: m.worker_slots,
                        online: m.online,
                        summary: summary_to_wit(&m.summary(s.scale_down_delay_ms)),
                        starting: m.starting,
                        walltime_ms: m.walltime_ms,
                        capabilities: m.capabilities.clone(),
                        environments: environments_to_wit(&m.environments),
                        drained: m.drained.clone(),
                        drain_budget: m.drain_budget,
                        launch: launch_to_wit(&m.launch),
                        starting_ages_ms: m.starting_ages_ms.clone(),
                    })
                    .collect(),
                demand: s.demand.iter().map(demand_to_wit).collect(),
            }
        }

        #[allow(dead_code)]
        pub fn snapshot_from_wit(
            s: $cluster::Snapshot,
            fetch: fn(&str) -> Vec<$crate::Worker>,
        ) -> $crate::Snapshot {
            $crate::Snapshot {
                now_ms: s.now_ms,
                scale_down_delay_ms: s.scale_down_delay_ms,
                managers: s
                    .managers
                    .into_iter()
                    .map(|m| $crate::Manager {
                        id: m.id,
                        worker_type: m.worker_type,
                        max_task_concurrency: m.max_task_concurrency,
                        worker_slots: m.worker_slots,
                        online: m.online,
                        workers: Vec::new(),
                        starting: m.starting,
                        capabilities: m.capabilities,
                        environments: environments_from_wit(m.environments),
                        labels: m.labels,
                        walltime_ms: m.walltime_ms,
                        drained: m.drained,
                        drain_budget: m.drain_budget,
                        launch: launch_from_wit(m.launch),
                        starting_ages_ms: m.starting_ages_ms,
                        counted: Some($crate::Summary {
                            busy: m.summary.busy,
                            idle: m.summary.idle,
                            idle_past_delay: m.summary.idle_past_delay,
                            busy_groups: m
                                .summary
                                .busy_groups
                                .into_iter()
                                .map(|g| $crate::BusyGroup {
                                    slots: g.slots,
                                    busy: g.busy,
                                    count: g.count,
                                })
                                .collect(),
                        }),
                    })
                    .collect(),
                demand: s.demand.into_iter().map(demand_from_wit).collect(),
                fetch: $crate::Fetch(Some(fetch)),
            }
        }
    };
}
