//! The conversions between these types and the bindings generated from `weir:plugin/scaling`,
//! written once for both sides: the host (wasmtime's `bindgen!`) and the guests
//! (`wit_bindgen::generate!`) generate different Rust types with the same shape, so each expands
//! [`wit_conversions!`] over its own bindings module.

/// Expands to `snapshot_to_wit`, `snapshot_from_wit`, `decision_to_wit`,
/// `decision_from_wit`, `tier_to_wit` and `tier_from_wit` for the bindings module named by the
/// identifier given (in scope where it is expanded): `wit_conversions!(wit);`.
#[macro_export]
macro_rules! wit_conversions {
    ($wit:ident) => {
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
                            .map(|w| $wit::Worker { id: w.id, slots: w.slots, busy: w.busy, idle_ms: w.idle_ms })
                            .collect(),
                        starting: m.starting,
                        capabilities: m.capabilities.clone(),
                        environments: m
                            .environments
                            .iter()
                            .map(|(name, v)| {
                                let v = match v {
                                    $crate::Verdict::Match => $wit::Verdict::Match,
                                    $crate::Verdict::NoMatch => $wit::Verdict::NoMatch,
                                    $crate::Verdict::Unknown => $wit::Verdict::Unknown,
                                };
                                (name.clone(), v)
                            })
                            .collect(),
                    })
                    .collect(),
                demand: s
                    .demand
                    .iter()
                    .map(|d| $wit::Demand {
                        capabilities: d.capabilities.clone(),
                        environments: d.environments.clone(),
                        queued: d.queued,
                        running: d.running,
                    })
                    .collect(),
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
                            .map(|w| $crate::Worker { id: w.id, slots: w.slots, busy: w.busy, idle_ms: w.idle_ms })
                            .collect(),
                        starting: m.starting,
                        capabilities: m.capabilities,
                        environments: m
                            .environments
                            .into_iter()
                            .map(|(name, v)| {
                                let v = match v {
                                    $wit::Verdict::Match => $crate::Verdict::Match,
                                    $wit::Verdict::NoMatch => $crate::Verdict::NoMatch,
                                    $wit::Verdict::Unknown => $crate::Verdict::Unknown,
                                };
                                (name, v)
                            })
                            .collect(),
                    })
                    .collect(),
                demand: s
                    .demand
                    .into_iter()
                    .map(|d| $crate::Demand {
                        capabilities: d.capabilities,
                        environments: d.environments,
                        queued: d.queued,
                        running: d.running,
                    })
                    .collect(),
            }
        }

        #[allow(dead_code)]
        pub fn decision_to_wit(d: $crate::Decision) -> $wit::Decision {
            $wit::Decision { manager_id: d.manager_id, desired_workers: d.desired_workers, stop: d.stop, reason: d.reason }
        }

        #[allow(dead_code)]
        pub fn decision_from_wit(d: $wit::Decision) -> $crate::Decision {
            $crate::Decision { manager_id: d.manager_id, desired_workers: d.desired_workers, stop: d.stop, reason: d.reason }
        }

        #[allow(dead_code)]
        pub fn tier_to_wit(t: $crate::Tier) -> $wit::Tier {
            $wit::Tier { priority: t.priority, members: t.members }
        }

        #[allow(dead_code)]
        pub fn tier_from_wit(t: $wit::Tier) -> $crate::Tier {
            $crate::Tier { priority: t.priority, members: t.members }
        }
    };
}
