//! `weir demo`: the bundled plugins doing real work with no flags and no files.
//!
//! A small simulated cluster (two worker managers, tiers `1, native` and `2, burst`) receives a
//! burst of tasks; every simulated second the bundled waterfall_v2 component decides how many
//! workers each manager runs, and the simulation applies the decision. Then the bundled mem_gt
//! condition is evaluated against this machine.

use std::sync::Arc;

use anyhow::Result;
use weir::config::{Engine, PolicySpec};
use weir::core::scaling::{Demand, Manager, Snapshot, Worker};
use weir::plugin::{HostFacts, Limits, PluginHost, World, bundled};

use crate::output::{Demo, DemoCondition, DemoTick, DemoWorkers, Output};

const CONTENT: &str = "# priority, worker_type\n1, native\n2, burst\n";
const TASKS: u32 = 12;
const TASK_SECONDS: u64 = 3;
const SCALE_DOWN_DELAY_MS: u64 = 2_000;

struct SimManager {
    id: &'static str,
    worker_type: &'static str,
    max_tasks: u32,
    workers: Vec<SimWorker>,
    next_worker: u32,
}

struct SimWorker {
    /// Unique across the simulation, like the scheduler's worker ids.
    id: u64,
    /// When its task finishes, while it runs one.
    busy_until: Option<u64>,
    idle_since: u64,
}

pub(crate) fn run(host: &PluginHost, output: &dyn Output) -> Result<()> {
    let ticks = simulate(host)?;
    let (conditions, total_memory_bytes) = conditions(host)?;
    output.demo(&Demo {
        tasks: TASKS,
        task_seconds: TASK_SECONDS,
        ticks,
        conditions,
        total_memory_bytes,
    });
    Ok(())
}

/// Every simulated second until the tasks are done and both managers drained (at most 40).
fn simulate(host: &PluginHost) -> Result<Vec<DemoTick>> {
    let spec = PolicySpec {
        engine: Engine::Bundled("waterfall_v2"),
        content: CONTENT.to_string(),
    };
    let mut policy = spec.instantiate(host, Limits::default())?;
    let mut managers = [
        SimManager {
            id: "native_1",
            worker_type: "native",
            max_tasks: 2,
            workers: vec![],
            next_worker: 0,
        },
        SimManager {
            id: "burst_1",
            worker_type: "burst",
            max_tasks: 4,
            workers: vec![],
            next_worker: 0,
        },
    ];
    let mut queued = TASKS;
    let mut done = 0;
    let mut next_id = 0u64;
    let mut ticks = Vec::new();
    for second in 0..40u64 {
        let now = second * 1000;
        // Finish tasks, then hand queued tasks to idle workers, highest tier first.
        for worker in managers.iter_mut().flat_map(|m| m.workers.iter_mut()) {
            if worker.busy_until.is_some_and(|t| t <= now) {
                worker.busy_until = None;
                worker.idle_since = now;
                done += 1;
            }
        }
        for worker in managers.iter_mut().flat_map(|m| m.workers.iter_mut()) {
            if queued > 0 && worker.busy_until.is_none() {
                worker.busy_until = Some(now + TASK_SECONDS * 1000);
                queued -= 1;
            }
        }
        let running = managers
            .iter()
            .flat_map(|m| &m.workers)
            .filter(|w| w.busy_until.is_some())
            .count() as u32;
        let snapshot = std::sync::Arc::new(Snapshot {
            now_ms: now,
            scale_down_delay_ms: SCALE_DOWN_DELAY_MS,
            managers: managers.iter().map(|m| snapshot_of(m, now)).collect(),
            demand: vec![Demand {
                capabilities: vec![],
                environments: vec![],
                queued,
                running,
                ..Default::default()
            }],
            fetch: Default::default(),
        });
        let decisions = policy.decide(&snapshot)?;
        // Apply: stop what the policy names, start up to the desired count (they register at once).
        for decision in &decisions {
            let Some(manager) = managers.iter_mut().find(|m| m.id == decision.manager_id) else {
                continue;
            };
            manager.workers.retain(|w| !decision.stop.contains(&w.id));
            while manager.workers.len() < decision.desired_workers as usize {
                manager.next_worker += 1;
                next_id += 1;
                let id = next_id;
                manager.workers.push(SimWorker {
                    id,
                    busy_until: None,
                    idle_since: now,
                });
            }
        }
        let workers = DemoWorkers {
            native_1: managers[0].workers.len(),
            burst_1: managers[1].workers.len(),
        };
        let drained = done == TASKS && workers.native_1 + workers.burst_1 == 0;
        ticks.push(DemoTick {
            second,
            queued,
            running,
            done,
            workers,
            decisions,
        });
        if drained {
            break;
        }
    }

    Ok(ticks)
}

/// The bundled mem_gt condition on this machine, with a threshold it meets and one it cannot.
fn conditions(host: &PluginHost) -> Result<(Vec<DemoCondition>, u64)> {
    let loaded = host.load("mem_gt", bundled::MEM_GT, Some(World::Environment))?;
    let mut condition = host.condition(&loaded, Limits::default())?;
    let facts = Arc::new(HostFacts::probe("", &[], &[]));
    let mut verdicts = Vec::new();
    for threshold in ["8GiB", "1PB"] {
        let config = vec![("threshold".to_string(), threshold.to_string())];
        let verdict = match condition.evaluate(&facts, &config) {
            Ok(true) => "match".to_string(),
            Ok(false) => "no-match".to_string(),
            Err(error) => format!("error({error})"),
        };
        verdicts.push(DemoCondition {
            condition: format!("mem_gt threshold={threshold}"),
            verdict,
        });
    }
    Ok((verdicts, facts.total_memory_bytes))
}

fn snapshot_of(m: &SimManager, now: u64) -> Manager {
    Manager {
        id: m.id.to_string(),
        worker_type: m.worker_type.to_string(),
        max_task_concurrency: m.max_tasks,
        worker_slots: 1,
        online: true,
        workers: m
            .workers
            .iter()
            .map(|w| Worker {
                id: w.id,
                slots: 1,
                busy: u32::from(w.busy_until.is_some()),
                idle_ms: if w.busy_until.is_some() {
                    0
                } else {
                    now - w.idle_since
                },
                time_left_ms: None,
            })
            .collect(),
        starting: 0,
        capabilities: vec![],
        environments: vec![],
        ..Default::default()
    }
}
