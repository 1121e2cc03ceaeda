//! Random snapshots: the native reference and every WASM build agree, and every decision
//! passes the scheduler's validation.

use super::*;

fn arb_manager(index: usize) -> impl Strategy<Value = Manager> {
    let types = prop::sample::select(vec!["native", "burst", "aws", "other"]);
    (
        types,
        prop_oneof![0u32..50, Just(UNLIMITED)],
        1u32..5,
        prop::bool::weighted(0.85),
        prop::collection::vec((0u32..5, 0u64..100_000), 0..6),
        0u32..3,
        prop::collection::vec(
            prop::sample::select(vec!["gpu", "cpu"]).prop_flat_map(|c| (Just(c), 0u64..4)),
            0..2,
        ),
        prop::collection::vec(
            (
                prop::sample::select(vec!["large", "fast"]),
                prop::sample::select(vec![Verdict::Match, Verdict::NoMatch, Verdict::Unknown]),
            ),
            0..2,
        ),
    )
        .prop_map(
            move |(wt, cap, slots, online, workers, starting, caps, envs)| Manager {
                labels: Vec::new(),
                counted: None,
                drained: Vec::new(),
                drain_budget: 0,
                walltime_ms: None,
                id: format!("m{index}"),
                worker_type: wt.to_string(),
                max_task_concurrency: cap,
                worker_slots: slots,
                online,
                workers: workers
                    .into_iter()
                    .enumerate()
                    .map(|(i, (busy, idle_ms))| Worker {
                        time_left_ms: None,
                        id: (index * 100 + i) as u64,
                        slots,
                        busy: busy.min(slots),
                        idle_ms: if busy == 0 { idle_ms } else { 0 },
                    })
                    .collect(),
                starting,
                capabilities: caps.into_iter().map(|(c, n)| (c.to_string(), n)).collect(),
                environments: envs.into_iter().map(|(e, v)| (e.to_string(), v)).collect(),
                ..Default::default()
            },
        )
}

fn arb_snapshot() -> impl Strategy<Value = Snapshot> {
    (1usize..7)
        .prop_flat_map(|n| (0..n).map(arb_manager).collect::<Vec<_>>())
        .prop_flat_map(|managers| {
            let demand = prop::collection::vec(
                (
                    prop::collection::vec(
                        prop::sample::select(vec!["gpu", "cpu"])
                            .prop_flat_map(|c| (Just(c), 0u64..3)),
                        0..2,
                    ),
                    prop::collection::vec(prop::sample::select(vec!["large", "fast"]), 0..2),
                    0u32..200,
                    prop_oneof![Just(0u32), 0u32..8],
                ),
                0..4,
            );
            (Just(managers), demand, 0u64..60_000)
        })
        .prop_map(|(managers, demand, delay)| Snapshot {
            fetch: Default::default(),
            now_ms: 42,
            scale_down_delay_ms: delay,
            managers,
            demand: demand
                .into_iter()
                .map(|(caps, envs, queued, running)| Demand {
                    capabilities: caps.into_iter().map(|(c, n)| (c.to_string(), n)).collect(),
                    environments: envs.into_iter().map(str::to_string).collect(),
                    queued,
                    running,
                    ..Default::default()
                })
                .collect(),
        })
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 200, ..ProptestConfig::default() })]

    #[test]
    fn wasm_engines_match_the_native_reference(snapshot in arb_snapshot()) {
        // Both flavors: v2 by worker type; v1 by the managers' ids with a few rule caps.
        decide(Flavor::WorkerType, "1, native\n2, burst\n2, aws\n", &snapshot);
        decide(Flavor::ManagerId, "1, m0, 5\n1, m1\n2, m2, -1\n3, m3\n3, m4, 20\n", &snapshot);
    }
}

/// Snapshots where the order tasks fill busy workers in can matter: runs of alike busy workers
/// with room left in two resources, and several groups of queued tasks needing different
/// amounts of them (each fills what the one before left).
fn arb_packing_snapshot() -> impl Strategy<Value = Snapshot> {
    // Busy workers by (busy, slots): mostly alike (runs), some smaller, some holding more tasks
    // than slots (tasks held ahead).
    let one = (
        prop_oneof![Just(1u32), Just(2), 1u32..4],
        prop_oneof![4 => Just(8u32), 1 => Just(2u32)],
    );
    let busy_workers = prop::collection::vec(one, 1..12);
    let group = (0u64..5, 0u64..3, 0u32..16, 0u32..3);
    (
        prop::collection::vec((busy_workers, 0u32..3), 1..3),
        prop::collection::vec(group, 2..5),
    )
        .prop_map(|(managers, groups)| {
            let managers = managers
                .into_iter()
                .enumerate()
                .map(|(m, (busy, idle))| {
                    let mut manager = manager(&format!("m{m}"), "native", 80, 8);
                    manager.capabilities = vec![("cpu".into(), 16), ("mem".into(), 12)];
                    let busy = busy.into_iter().map(|(b, slots)| (b, slots, 0));
                    let idle = (0..idle).map(|_| (0, 8, 60_000));
                    manager.workers = busy
                        .chain(idle)
                        .enumerate()
                        .map(|(i, (busy, slots, idle_ms))| Worker {
                            id: (m * 100 + i) as u64,
                            slots,
                            busy,
                            idle_ms,
                            time_left_ms: None,
                        })
                        .collect();
                    manager
                })
                .collect();
            let demand = groups
                .into_iter()
                .map(|(cpu, mem, queued, running)| Demand {
                    capabilities: vec![("cpu".into(), cpu), ("mem".into(), mem)],
                    environments: Vec::new(),
                    queued,
                    running,
                    ..Default::default()
                })
                .collect();
            snapshot(managers, demand)
        })
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 300, ..ProptestConfig::default() })]

    /// Busy workers counted as runs (0.2.0) take queued tasks as the same workers listed one by
    /// one did (the 0.1.0 build): the same decisions, whatever order groups fill them in.
    #[test]
    fn runs_of_busy_workers_fill_as_the_workers_one_by_one(snapshot in arb_packing_snapshot()) {
        decide(Flavor::WorkerType, "1, native\n", &snapshot);
    }
}
