//! Plugin cost: `decide` of the bundled waterfall engines against the native reference and
//! against a policy that decides nothing (the interface's own cost), and `evaluate` of mem_gt
//! cold, cached and warm.

use std::sync::Arc;

use anyhow::{Context, Result, bail};
use weir::core::scaling::{Demand, Manager, Snapshot, Worker};
use weir::plugin::{HostFacts, Limits, PluginHost, World, bundled};
use weir_waterfall::{Flavor, Policy};

use super::{Report, per_call};

/// The bundled waterfalls as built against `weir:plugin@0.1.0` (every worker record copied into
/// each call), timed beside their 0.2.0 builds.
const FROZEN_0_1: [(&str, &[u8]); 2] = [
    (
        "waterfall_v1",
        include_bytes!("../../../../../plugins/fixtures/frozen/waterfall_v1-0.1.0.wasm"),
    ),
    (
        "waterfall_v2",
        include_bytes!("../../../../../plugins/fixtures/frozen/waterfall_v2-0.1.0.wasm"),
    ),
];

/// A 0.2.0 policy that takes the snapshot and decides nothing (`plugins/fixtures/empty_policy`):
/// its time is what the interface alone costs per call, the floor under any 0.2.0 policy.
const EMPTY_0_2: &[u8] = include_bytes!("../../../../../plugins/fixtures/empty_policy.wasm");

fn snapshot(managers: usize, workers: usize) -> Arc<Snapshot> {
    let per = workers / managers;
    Arc::new(Snapshot {
        now_ms: 1_000_000,
        scale_down_delay_ms: 30_000,
        managers: (0..managers)
            .map(|m| Manager {
                labels: Vec::new(),
                id: format!("m{m}"),
                worker_type: format!("t{}", m % 4),
                max_task_concurrency: (per * 2) as u32,
                worker_slots: 1,
                online: true,
                workers: (0..per)
                    .map(|w| Worker {
                        id: (m * 100_000 + w) as u64,
                        slots: 1,
                        busy: (w % 2) as u32,
                        idle_ms: (w as u64 * 997) % 60_000,
                        time_left_ms: None,
                    })
                    .collect(),
                starting: 0,
                capabilities: vec![("cpu".into(), 4)],
                environments: vec![],
                walltime_ms: None,
                counted: None,
                drained: Vec::new(),
                drain_budget: 0,
                ..Default::default()
            })
            .collect(),
        demand: vec![
            Demand {
                capabilities: vec![],
                environments: vec![],
                queued: 5000,
                running: (workers / 2) as u32,
                ..Default::default()
            },
            Demand {
                capabilities: vec![("cpu".into(), 2)],
                environments: vec![],
                queued: 500,
                running: 0,
                ..Default::default()
            },
        ],
        fetch: Default::default(),
    })
}

/// The policy components given on the command line load as policies, and are created with
/// the content: checked before anything is measured, so a wrong file fails at once.
pub(super) fn check_policies(files: &[std::path::PathBuf], content: &str) -> Result<()> {
    let host = PluginHost::new(None)?;
    for file in files {
        let loaded = host.load_file(file, Some(World::Policy))?;
        host.policy(&loaded, content, Limits::default())
            .with_context(|| format!("{}: cannot be created with the content", file.display()))?;
    }
    Ok(())
}

/// `decide` of policy components given on the command line (a policy author's own, in any
/// language), on the snapshots the bundled engines are timed on.
pub(super) fn policy_costs(
    files: &[std::path::PathBuf],
    content: &str,
    report: &mut Report,
) -> Result<()> {
    let host = PluginHost::new(None)?;
    report.row("| policy | managers | workers | wasm µs/call |".into());
    report.row("|---|---:|---:|---:|".into());
    for file in files {
        let loaded = host.load_file(file, Some(World::Policy))?;
        let mut policy = host.policy(&loaded, content, Limits::default())?;
        let name = file.file_name().map_or_else(
            || file.display().to_string(),
            |n| n.to_string_lossy().into_owned(),
        );
        for managers in [100usize, 1000] {
            let snap = snapshot(managers, 10_000);
            let mut failure = None;
            let us = per_call(20, || {
                if let Err(error) = policy.decide(&snap) {
                    failure = Some(error);
                }
            });
            if let Some(error) = failure {
                bail!("{name} failed during the benchmark: {error}");
            }
            report.row(format!("| {name} | {managers} | 10000 | {us:.1} |"));
        }
    }
    Ok(())
}

/// Goals of `decide` at 1,000 managers and 10,000 workers (#36): µs per call, and times native.
const DECIDE_GOAL_US: f64 = 200.0;
const DECIDE_GOAL_RATIO: f64 = 2.0;

pub(super) fn costs(report: &mut Report) -> Result<()> {
    let host = PluginHost::new(None)?;
    report.row(
        "| decide | managers | workers | native µs/call | wasm µs/call (0.2.0) | wasm / native | 0.1.0 build µs/call | a 0.2.0 policy deciding nothing µs/call | goal (1,000 managers: <= 200 µs, <= 2x native) |"
            .into(),
    );
    report.row("|---|---:|---:|---:|---:|---:|---:|---:|---|".into());
    for (name, flavor) in [
        ("waterfall_v1", Flavor::ManagerId),
        ("waterfall_v2", Flavor::WorkerType),
    ] {
        for managers in [10usize, 100, 1000] {
            let snap = snapshot(managers, 10_000);
            let content = match flavor {
                Flavor::WorkerType => "1, t0\n1, t1\n2, t2\n3, t3\n".to_string(),
                Flavor::ManagerId => (0..managers)
                    .map(|m| format!("{}, m{m}\n", m % 3 + 1))
                    .collect(),
            };
            let native = Policy::parse(flavor, &content)?;
            let native_us = per_call(20, || {
                std::hint::black_box(native.decide(&snap));
            });
            let bundled = bundled::by_name(name).context("bundled engine")?;
            let frozen = FROZEN_0_1
                .iter()
                .find(|(n, _)| *n == name)
                .map(|(_, bytes)| *bytes)
                .context("frozen engine")?;
            let mut timed = Vec::new();
            for (label, bytes) in [
                (name.to_string(), bundled),
                (format!("{name} (0.1.0)"), frozen),
                ("empty_policy".to_string(), EMPTY_0_2),
            ] {
                let loaded = host.load(&label, bytes, Some(World::Policy))?;
                let mut wasm = host.policy(&loaded, &content, Limits::default())?;
                let mut failure = None;
                timed.push(per_call(20, || {
                    if let Err(error) = wasm.decide(&snap) {
                        failure = Some(error);
                    }
                }));
                if let Some(error) = failure {
                    bail!("{label} failed during the benchmark: {error}");
                }
            }
            let (wasm_us, old_us, floor_us) = (timed[0], timed[1], timed[2]);
            let ratio = wasm_us / native_us;
            let goal = match managers {
                1000 if wasm_us <= DECIDE_GOAL_US && ratio <= DECIDE_GOAL_RATIO => "met",
                1000 => "NOT MET",
                _ => "",
            };
            report.row(format!(
                "| {name} | {managers} | 10000 | {native_us:.1} | {wasm_us:.1} | {ratio:.2} | {old_us:.1} | {floor_us:.1} | {goal} |"
            ));
        }
    }
    report.row(String::new());

    let cache = std::env::temp_dir().join(format!("weir-bench-cache-{}", std::process::id()));
    // Pooled, as on a worker (where conditions run).
    let cold_host = PluginHost::pooled(Some(cache.clone()))?;
    let cold = cold_host.load("mem_gt", bundled::MEM_GT, Some(World::Environment))?;
    let cached_host = PluginHost::pooled(Some(cache.clone()))?;
    let cached = cached_host.load("mem_gt", bundled::MEM_GT, Some(World::Environment))?;
    let _ = std::fs::remove_dir_all(&cache);
    let facts = Arc::new(HostFacts::probe("", &[], &[]));
    let config = vec![("threshold".to_string(), "8GiB".to_string())];
    let mut condition = cached_host.condition(&cached, Limits::default())?;
    let warm_us = per_call(10_000, || {
        let _ = std::hint::black_box(condition.evaluate(&facts, &config));
    });
    let fresh_us = per_call(1_000, || {
        if let Ok(mut c) = cached_host.condition(&cached, Limits::default()) {
            let _ = std::hint::black_box(c.evaluate(&facts, &config));
        }
    });
    report.row("| mem_gt condition | µs |".into());
    report.row("|---|---:|".into());
    report.row(format!(
        "| cold: compile ({:?}) | {:.0} |",
        cold.origin,
        cold.load_time.as_secs_f64() * 1e6
    ));
    report.row(format!(
        "| cached: load from the disk cache ({:?}) | {:.0} |",
        cached.origin,
        cached.load_time.as_secs_f64() * 1e6
    ));
    report.row(format!(
        "| fresh instance + first evaluate | {fresh_us:.1} |"
    ));
    report.row(format!("| warm evaluate (live instance) | {warm_us:.2} |"));
    Ok(())
}
