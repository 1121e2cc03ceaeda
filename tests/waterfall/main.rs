//! The waterfall engines on table-driven snapshots: every case runs through the native reference
//! (`weir-waterfall` compiled into the host), through the bundled WASM component (built against
//! `weir:plugin@0.2.0`: workers counted, lists asked for) and through the same engine as built
//! when 0.2.0 was frozen and as built against 0.1.0 (`plugins/fixtures/frozen`, every worker
//! listed), which must all agree with
//! each other and with the expected decision. Here: tiers, spilling, caps and scale-down;
//! `environments.rs`: demand that asks for environments; `content.rs`: parsing and its errors;
//! `settings.rs`: a row's `min=`/`cooldown=`; `properties.rs`: random snapshots on which all
//! agree and every decision passes the scheduler's validation.

use std::sync::{Arc, OnceLock};

use proptest::prelude::*;
use weir::core::scaling::{
    Demand, Manager, Snapshot, UNLIMITED, Verdict, Worker, validate_decisions,
};
use weir::plugin::{Limits, PluginHost, Version, World, bundled};
use weir_waterfall::{Flavor, Policy};

mod content;
mod environments;
mod properties;
mod settings;

const V1_REFERENCE: &str = include_str!("../../examples/configs/waterfall_v1.toml");
const V2_REFERENCE: &str = include_str!("../../examples/configs/waterfall_v2.toml");

fn host() -> &'static PluginHost {
    static HOST: OnceLock<PluginHost> = OnceLock::new();
    HOST.get_or_init(|| PluginHost::new(None).expect("plugin host"))
}

/// The policy_content of a reference TOML file (a `"""` block).
fn reference_content(toml: &str) -> &str {
    let start = toml.find("\"\"\"").expect("content start") + 3;
    let end = start + toml[start..].find("\"\"\"").expect("content end");
    &toml[start..end]
}

fn manager(id: &str, worker_type: &str, cap: u32, slots: u32) -> Manager {
    Manager {
        id: id.into(),
        worker_type: worker_type.into(),
        max_task_concurrency: cap,
        worker_slots: slots,
        online: true,
        workers: Vec::new(),
        starting: 0,
        capabilities: Vec::new(),
        environments: Vec::new(),
        ..Default::default()
    }
}

fn idle(id: u64, slots: u32, idle_ms: u64) -> Worker {
    Worker {
        time_left_ms: None,
        id,
        slots,
        busy: 0,
        idle_ms,
    }
}

fn queued(n: u32) -> Demand {
    Demand {
        capabilities: Vec::new(),
        environments: Vec::new(),
        queued: n,
        running: 0,
        ..Default::default()
    }
}

fn snapshot(managers: Vec<Manager>, demand: Vec<Demand>) -> Snapshot {
    Snapshot {
        fetch: Default::default(),
        now_ms: 1_000_000,
        scale_down_delay_ms: 30_000,
        managers,
        demand,
    }
}

/// The waterfalls as built against `weir:plugin@0.1.0`, byte for byte.
const FROZEN_V1: &[u8] = include_bytes!("../../plugins/fixtures/frozen/waterfall_v1-0.1.0.wasm");
const FROZEN_V2: &[u8] = include_bytes!("../../plugins/fixtures/frozen/waterfall_v2-0.1.0.wasm");
/// And as built against `weir:plugin@0.2.0` when it was frozen.
const FROZEN_V1_0_2: &[u8] =
    include_bytes!("../../plugins/fixtures/frozen/waterfall_v1-0.2.0.wasm");
const FROZEN_V2_0_2: &[u8] =
    include_bytes!("../../plugins/fixtures/frozen/waterfall_v2-0.2.0.wasm");

/// `(manager, desired workers, stopped workers)` from the three implementations, checked equal.
fn decide(flavor: Flavor, content: &str, snapshot: &Snapshot) -> Vec<(String, u32, Vec<u64>)> {
    decide_in(flavor, content, snapshot, true)
}

/// [`decide`] with or without the frozen 0.1.0 build (which refuses content with settings); the
/// bundled and frozen 0.2.0 builds always.
fn decide_in(
    flavor: Flavor,
    content: &str,
    snapshot: &Snapshot,
    with_frozen: bool,
) -> Vec<(String, u32, Vec<u64>)> {
    let snapshot = Arc::new(snapshot.clone());
    let native = Policy::parse(flavor, content)
        .expect("content parses")
        .decide(&snapshot);
    let (name, bytes, frozen_0_2, frozen) = match flavor {
        Flavor::ManagerId => (
            "waterfall_v1",
            bundled::WATERFALL_V1,
            FROZEN_V1_0_2,
            FROZEN_V1,
        ),
        Flavor::WorkerType => (
            "waterfall_v2",
            bundled::WATERFALL_V2,
            FROZEN_V2_0_2,
            FROZEN_V2,
        ),
    };
    let builds = [
        (name.to_string(), bytes, Version::V0_2),
        (format!("{name}-0.2.0"), frozen_0_2, Version::V0_2),
        (format!("{name}-0.1.0"), frozen, Version::V0_1),
    ];
    for (build, bytes, version) in builds.into_iter().take(if with_frozen { 3 } else { 2 }) {
        let loaded = host()
            .load(&build, bytes, Some(World::Policy))
            .expect("policy loads");
        assert_eq!(
            loaded.version,
            Some(version),
            "{build}: its weir:plugin version"
        );
        let mut wasm = host()
            .policy(&loaded, content, Limits::default())
            .expect("content accepted");
        let from_wasm = wasm.decide(&snapshot).expect("decide succeeds");
        assert_eq!(
            native, from_wasm,
            "native reference and {build}.wasm disagree"
        );
    }
    validate_decisions(&snapshot, &native).expect("decisions are valid");
    native
        .into_iter()
        .map(|d| (d.manager_id, d.desired_workers, d.stop))
        .collect()
}

fn desired(decisions: &[(String, u32, Vec<u64>)]) -> Vec<(&str, u32)> {
    decisions
        .iter()
        .map(|(id, n, _)| (id.as_str(), *n))
        .collect()
}

#[test]
fn v1_reference_config_shares_one_tier_in_proportion_to_capacity() {
    let content = reference_content(V1_REFERENCE);
    let managers: Vec<Manager> = ["wm1", "wm2", "wm3", "wm4", "wm5"]
        .iter()
        .map(|id| manager(id, "any", 1000, 1))
        .collect();
    // Free capacity 10/20/40/64/1000 (the rule caps bind): 100 tasks split by largest remainder.
    let got = decide(
        Flavor::ManagerId,
        content,
        &snapshot(managers.clone(), vec![queued(100)]),
    );
    assert_eq!(
        desired(&got),
        vec![("wm1", 1), ("wm2", 2), ("wm3", 3), ("wm4", 6), ("wm5", 88)]
    );
    // More demand than the tier holds: everyone at their cap, nobody above it.
    let got = decide(
        Flavor::ManagerId,
        content,
        &snapshot(managers, vec![queued(5000)]),
    );
    assert_eq!(
        desired(&got),
        vec![
            ("wm1", 10),
            ("wm2", 20),
            ("wm3", 40),
            ("wm4", 64),
            ("wm5", 1000)
        ]
    );
}

#[test]
fn v1_rule_cap_and_reported_cap_take_the_lower() {
    let content = "1, a, 10\n1, b, unlimited\n1, c\n";
    let managers = vec![
        manager("a", "t", 1000, 1),
        manager("b", "t", 4, 1),
        manager("c", "t", 6, 2),
    ];
    let got = decide(
        Flavor::ManagerId,
        content,
        &snapshot(managers, vec![queued(1000)]),
    );
    // c: 6 slots in workers of 2 slots = 3 workers.
    assert_eq!(desired(&got), vec![("a", 10), ("b", 4), ("c", 3)]);
}

#[test]
fn v2_reference_config_sums_managers_of_a_type() {
    let content = reference_content(V2_REFERENCE);
    let managers = vec![
        manager("native_1", "native", 10, 1),
        manager("native1_a", "native1", 10, 1),
        manager("native1_b", "native1", 10, 1),
        manager("sym_1", "sym", 10, 10),
        manager("aws_1", "aws", 64, 1),
        manager("batch_1", "batch", 1000, 1000),
    ];
    let got = decide(
        Flavor::WorkerType,
        content,
        &snapshot(managers.clone(), vec![queued(50)]),
    );
    // Shares of 50 over free capacity 10/10/10/10/64/1000: 1, 1, 0, 0, 3, 45 tasks;
    // batch's 45 tasks fit in its one 1000-slot worker.
    assert_eq!(
        desired(&got),
        vec![
            ("native_1", 1),
            ("native1_a", 1),
            ("native1_b", 0),
            ("sym_1", 0),
            ("aws_1", 3),
            ("batch_1", 1)
        ]
    );
    let got = decide(
        Flavor::WorkerType,
        content,
        &snapshot(managers, vec![queued(100_000)]),
    );
    assert_eq!(
        desired(&got),
        vec![
            ("native_1", 10),
            ("native1_a", 10),
            ("native1_b", 10),
            ("sym_1", 1),
            ("aws_1", 64),
            ("batch_1", 1)
        ]
    );
}

#[test]
fn demand_fills_tier_one_then_spills_to_the_next() {
    let content = "1, native\n2, burst\n";
    let mut native = manager("n", "native", 2, 1);
    native.workers = vec![idle(11, 1, 0), idle(12, 1, 0)];
    let managers = vec![native, manager("b", "burst", 4, 1)];
    let spill = |n| {
        desired(&decide(
            Flavor::WorkerType,
            content,
            &snapshot(managers.clone(), vec![queued(n)]),
        ))
        .into_iter()
        .map(|(_, d)| d)
        .collect::<Vec<_>>()
    };
    // One task: tier 1 needs one worker, but the idle one is within the scale-down delay.
    assert_eq!(spill(1), vec![2, 0]);
    assert_eq!(spill(2), vec![2, 0]);
    assert_eq!(spill(3), vec![2, 1]);
    assert_eq!(spill(6), vec![2, 4]);
    assert_eq!(spill(60), vec![2, 4]);
}

#[test]
fn demand_spills_only_once_the_tier_above_is_up() {
    let content = "1, native\n2, burst\n";
    let managers = vec![manager("n", "native", 2, 1), manager("b", "burst", 4, 1)];
    // Nothing live yet: tier 1 is asked for its 2 workers; the overflow waits for them.
    let got = decide(
        Flavor::WorkerType,
        content,
        &snapshot(managers.clone(), vec![queued(6)]),
    );
    assert_eq!(desired(&got), vec![("n", 2), ("b", 0)]);
    // Its workers are starting: still waiting.
    let mut starting = managers.clone();
    starting[0].starting = 2;
    let got = decide(
        Flavor::WorkerType,
        content,
        &snapshot(starting, vec![queued(6)]),
    );
    assert_eq!(desired(&got), vec![("n", 2), ("b", 0)]);
    // Registered and busy: the overflow spills.
    let mut up = managers;
    up[0].workers = vec![
        Worker {
            time_left_ms: None,
            id: 11,
            slots: 1,
            busy: 1,
            idle_ms: 0,
        },
        Worker {
            time_left_ms: None,
            id: 12,
            slots: 1,
            busy: 1,
            idle_ms: 0,
        },
    ];
    let got = decide(Flavor::WorkerType, content, &snapshot(up, vec![queued(4)]));
    assert_eq!(desired(&got), vec![("n", 2), ("b", 4)]);
}

#[test]
fn offline_and_unlisted_managers_get_no_decision() {
    let content = "1, native\n2, burst\n";
    let mut native = manager("n", "native", 2, 1);
    native.online = false;
    let managers = vec![
        native,
        manager("b", "burst", 4, 1),
        manager("x", "unlisted", 100, 1),
    ];
    let got = decide(
        Flavor::WorkerType,
        content,
        &snapshot(managers, vec![queued(3)]),
    );
    assert_eq!(desired(&got), vec![("b", 3)]);
}

#[test]
fn running_tasks_stay_and_their_free_slots_are_used_first() {
    let content = "1, native\n2, burst\n";
    let mut burst = manager("b", "burst", 8, 4);
    burst.workers = vec![Worker {
        time_left_ms: None,
        id: 21,
        slots: 4,
        busy: 1,
        idle_ms: 0,
    }];
    let managers = vec![manager("n", "native", 4, 4), burst];
    // Tier 1 takes the 3 queued tasks; the busy burst worker is kept, not stopped.
    let got = decide(
        Flavor::WorkerType,
        content,
        &snapshot(managers.clone(), vec![queued(3)]),
    );
    assert_eq!(got, vec![("n".into(), 1, vec![]), ("b".into(), 1, vec![])]);
    // Tier 1 takes 4 of 11 but has no live worker yet: the overflow waits for it.
    let got = decide(
        Flavor::WorkerType,
        content,
        &snapshot(managers.clone(), vec![queued(11)]),
    );
    assert_eq!(desired(&got), vec![("n", 1), ("b", 1)]);
    // Once tier 1 is up, burst's 3 free slots absorb 3 of the 7 overflow tasks before a new worker.
    let mut up = managers;
    up[0].workers = vec![Worker {
        time_left_ms: None,
        id: 11,
        slots: 4,
        busy: 4,
        idle_ms: 0,
    }];
    let got = decide(Flavor::WorkerType, content, &snapshot(up, vec![queued(7)]));
    assert_eq!(desired(&got), vec![("n", 1), ("b", 2)]);
}

#[test]
fn scale_down_empties_the_lowest_tier_first_and_only_stops_idle_workers_after_the_delay() {
    let content = "1, native\n2, burst\n";
    let mut native = manager("n", "native", 2, 1);
    native.workers = vec![idle(11, 1, 60_000), idle(12, 1, 60_000)];
    let mut burst = manager("b", "burst", 4, 1);
    burst.workers = vec![
        idle(21, 1, 60_000),
        idle(22, 1, 90_000),
        Worker {
            time_left_ms: None,
            id: 23,
            slots: 1,
            busy: 1,
            idle_ms: 0,
        },
        idle(24, 1, 5_000),
    ];
    burst.starting = 1;
    // Two tasks left: tier 1 keeps both its workers; burst cancels the starting one, stops the idle
    // ones past the 30 s delay (longest idle first), keeps the busy one and the recently idle one.
    let got = decide(
        Flavor::WorkerType,
        content,
        &snapshot(vec![native.clone(), burst.clone()], vec![queued(2)]),
    );
    assert_eq!(
        got,
        vec![("n".into(), 2, vec![]), ("b".into(), 2, vec![22, 21])]
    );
    // No demand at all: tier 2 still has workers, and the demand that may return is not known,
    // so tier 1 keeps its idle ones until tier 2 is empty (strictly reverse, DESIGN §4).
    let got = decide(
        Flavor::WorkerType,
        content,
        &snapshot(vec![native.clone(), burst.clone()], vec![]),
    );
    assert_eq!(
        got,
        vec![("n".into(), 2, vec![]), ("b".into(), 2, vec![22, 21])]
    );
    // Tier 2 runs a gpu task tier 1 could never run: it holds nothing on tier 1 either.
    let gpu_running = Demand {
        capabilities: vec![("gpu".into(), 1)],
        queued: 0,
        running: 1,
        environments: vec![],
        ..Default::default()
    };
    let mut gpu_burst = burst;
    gpu_burst.capabilities = vec![("gpu".into(), 1)];
    let got = decide(
        Flavor::WorkerType,
        content,
        &snapshot(
            vec![native.clone(), gpu_burst.clone()],
            vec![gpu_running.clone()],
        ),
    );
    assert_eq!(got[0], ("n".into(), 0, vec![11, 12]));
    // But work tier 1 could take holds it while tier 2 has workers.
    let got = decide(
        Flavor::WorkerType,
        content,
        &snapshot(
            vec![native.clone(), gpu_burst],
            vec![
                gpu_running,
                Demand {
                    running: 1,
                    ..queued(0)
                },
            ],
        ),
    );
    assert_eq!(got[0], ("n".into(), 2, vec![]));
    // Tier 2 empty: now tier 1 drains, but never a worker within the delay.
    native.workers[1].idle_ms = 1_000;
    let got = decide(
        Flavor::WorkerType,
        content,
        &snapshot(vec![native, manager("b", "burst", 4, 1)], vec![]),
    );
    assert_eq!(
        got,
        vec![("n".into(), 1, vec![11]), ("b".into(), 0, vec![])]
    );
}

/// Item #31.3a: demand with a timeout names a walltime environment; a manager whose workers
/// have too little time says `no-match`. Tier 1 is told nothing for it (even while it starts
/// workers for other demand, which holds back only what it can serve) and it spills to tier 2.
#[test]
fn demand_longer_than_tier_ones_walltime_spills_to_tier_two_even_while_tier_one_fills() {
    let hour = weir::core::scaling::walltime_environment(3_600_000).expect("a name");
    assert_eq!(hour, "walltime>=3600s");
    assert_eq!(weir::core::scaling::walltime_of(&hour), Some(3_600_000));
    let mut hpc = manager("hpc", "slurm", 8, 1);
    hpc.starting = 2;
    hpc.environments = vec![(hour.clone(), Verdict::NoMatch)];
    let mut local = manager("local", "proc", 8, 1);
    local.environments = vec![(hour.clone(), Verdict::Match)];
    let long = Demand {
        environments: vec![hour],
        ..queued(3)
    };
    let got = decide(
        Flavor::ManagerId,
        "1, hpc\n2, local\n",
        &snapshot(
            vec![hpc.clone(), local.clone()],
            vec![queued(2), long.clone()],
        ),
    );
    assert_eq!(desired(&got), vec![("hpc", 2), ("local", 3)]);
    // Only the long demand: tier 1 is told 0 (its starting workers cancelled), tier 2 runs it.
    let got = decide(
        Flavor::ManagerId,
        "1, hpc\n2, local\n",
        &snapshot(vec![hpc, local], vec![long]),
    );
    assert_eq!(desired(&got), vec![("hpc", 0), ("local", 3)]);
}

#[test]
fn capability_amounts_decide_who_can_serve_and_how_densely() {
    let content = "1, cpu\n1, gpu\n";
    let mut cpu = manager("cpu", "cpu", 100, 8);
    cpu.capabilities = vec![("cpu".into(), 4)];
    let mut gpu = manager("gpu", "gpu", 100, 8);
    gpu.capabilities = vec![("cpu".into(), 4), ("gpu".into(), 1)];
    let gpu_tasks = Demand {
        capabilities: vec![("gpu".into(), 1)],
        ..queued(3)
    };
    let two_cpu = Demand {
        capabilities: vec![("cpu".into(), 2)],
        ..queued(4)
    };
    // gpu tasks: only `gpu` serves them, one per worker (gpu=1 each). cpu=2 tasks: two per
    // worker; the 4 are shared 2/2 between the managers by free capacity, and `gpu`'s two fit
    // beside the gpu tasks (each of its workers still has 7 slots and cpu=4 free).
    let got = decide(
        Flavor::WorkerType,
        content,
        &snapshot(vec![cpu, gpu], vec![two_cpu, gpu_tasks]),
    );
    assert_eq!(desired(&got), vec![("cpu", 1), ("gpu", 3)]);
}

#[test]
fn spare_room_is_counted_in_the_resource_that_binds() {
    // A busy 4-slot worker with gpu=1 runs one gpu task: its three free slots are no room for
    // more gpu tasks (issue: it asked for 1 worker, the three queued ones waited in turn).
    let mut gpu = manager("g", "gpu", 64, 4);
    gpu.capabilities = vec![("gpu".into(), 1)];
    gpu.workers = vec![Worker {
        time_left_ms: None,
        id: 1,
        slots: 4,
        busy: 1,
        idle_ms: 0,
    }];
    let demand = Demand {
        capabilities: vec![("gpu".into(), 1)],
        environments: vec![],
        queued: 3,
        running: 1,
        ..Default::default()
    };
    let got = decide(
        Flavor::WorkerType,
        "1, gpu\n",
        &snapshot(vec![gpu.clone()], vec![demand.clone()]),
    );
    assert_eq!(desired(&got), vec![("g", 4)]);
    // Tasks that need no gpu do fit beside it.
    let plain = Demand {
        capabilities: vec![],
        ..queued(3)
    };
    let got = decide(
        Flavor::WorkerType,
        "1, gpu\n",
        &snapshot(
            vec![gpu],
            vec![
                plain,
                Demand {
                    queued: 0,
                    ..demand
                },
            ],
        ),
    );
    assert_eq!(desired(&got), vec![("g", 1)]);
}

#[test]
fn no_decision_goes_above_the_cap_whatever_the_manager_runs() {
    // Cap 2 workers; dead workers were replaced before the scheduler knew: 3 registered (one
    // busy, two idle within the delay) and 1 starting. Down to the cap: the starting one
    // first, then the longest idle, whatever the delay.
    let mut m = manager("m", "t", 2, 1);
    m.workers = vec![
        Worker {
            time_left_ms: None,
            id: 1,
            slots: 1,
            busy: 1,
            idle_ms: 0,
        },
        idle(2, 1, 10),
        idle(3, 1, 20),
    ];
    m.starting = 1;
    let snap = snapshot(
        vec![m],
        vec![Demand {
            running: 1,
            ..queued(0)
        }],
    );
    let got = decide(Flavor::WorkerType, "1, t\n", &snap);
    assert_eq!(got, vec![("m".into(), 2, vec![3])]);
}

#[test]
fn unlimited_managers_absorb_everything_below_them() {
    let content = "1, a\n2, b\n";
    let got = decide(
        Flavor::WorkerType,
        content,
        &snapshot(
            vec![manager("a", "a", UNLIMITED, 1), manager("b", "b", 10, 1)],
            vec![queued(1_000_000)],
        ),
    );
    assert_eq!(desired(&got), vec![("a", 1_000_000), ("b", 0)]);
}
