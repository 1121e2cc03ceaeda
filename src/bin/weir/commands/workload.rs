//! `weir policy simulate --workload FILE.toml`: a policy in a closed loop with a modelled
//! cluster, so what it decides changes what it sees next (a replayed trace cannot show that:
//! its snapshots were recorded under another policy). The model, stated so its numbers can be
//! judged:
//! - every `tick_ms` the policy decides on a snapshot of the model, and the decisions are
//!   checked as the scheduler checks them (`validate_decisions`: a refused one is an error);
//! - a manager asked for more workers starts them; each registers `start_ms` later. Asked for
//!   fewer, it cancels starting ones first; named idle workers stop at once;
//! - queued tasks (first come, first served) go to the free slots of workers that are neither
//!   drained nor stopping, lowest worker id first, as the scheduler's free set hands them out;
//!   a task runs `duration_ms`;
//! - drain budgets are `max_drain_percent` of each manager's live workers, rounded up, as
//!   `scheduler --max-drain-percent` gives them.
//!
//! Worker-seconds count every worker from the decision that started it to the one that
//! stopped it (starting, busy or idle), per manager: what an allocation is billed.

use std::collections::{BTreeMap, VecDeque};
use std::path::Path;
use std::sync::Arc;

use anyhow::{Context, Result, bail};
use serde::Deserialize;
use weir::core::scaling::{Decision, Demand, Manager, Snapshot, Worker, drain_budget};

/// A workload file.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct Workload {
    #[serde(default = "default_tick")]
    pub tick_ms: u64,
    /// Runs until then.
    pub end_ms: u64,
    /// How long a started worker takes to register.
    #[serde(default)]
    pub start_ms: u64,
    #[serde(default)]
    pub scale_down_delay_ms: u64,
    #[serde(default = "default_drain")]
    pub max_drain_percent: u32,
    #[serde(rename = "manager")]
    pub managers: Vec<ManagerSpec>,
    #[serde(rename = "arrive", default)]
    pub arrivals: Vec<Arrival>,
}

fn default_tick() -> u64 {
    1_000
}

fn default_drain() -> u32 {
    10
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct ManagerSpec {
    pub id: String,
    pub worker_type: String,
    pub max_task_concurrency: u32,
    #[serde(default = "one")]
    pub worker_slots: u32,
}

fn one() -> u32 {
    1
}

/// `count` tasks of `duration_ms` at `at_ms`, and again every `every_ms` until `until_ms`.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct Arrival {
    pub at_ms: u64,
    pub count: u32,
    pub duration_ms: u64,
    pub every_ms: Option<u64>,
    pub until_ms: Option<u64>,
}

impl Workload {
    pub(crate) fn read(path: &Path) -> Result<Workload> {
        let text = std::fs::read_to_string(path)
            .with_context(|| format!("cannot read {}", path.display()))?;
        let workload: Workload =
            toml::from_str(&text).with_context(|| format!("{}: not a workload", path.display()))?;
        if workload.tick_ms == 0 {
            bail!("{}: tick_ms must be at least 1", path.display());
        }
        if workload.managers.is_empty() {
            bail!("{}: no [[manager]]", path.display());
        }
        if let Some(a) = (workload.arrivals.iter()).find(|a| a.every_ms == Some(0)) {
            bail!(
                "{}: an arrival at {} ms repeats every 0 ms",
                path.display(),
                a.at_ms
            );
        }
        Ok(workload)
    }
}

struct SimWorker {
    id: u64,
    slots: u32,
    /// End times of the tasks it runs.
    running: Vec<u64>,
    idle_since: u64,
}

struct SimManager {
    spec: ManagerSpec,
    workers: Vec<SimWorker>,
    /// When each starting worker registers.
    starting: Vec<u64>,
    drained: Vec<u64>,
    worker_ms: u64,
}

/// What a run gives: each tick's snapshot and decisions, and each manager's worker-seconds.
pub(crate) struct Run {
    pub steps: Vec<(Arc<Snapshot>, Vec<Decision>)>,
    /// (manager, worker type, worker-seconds), in the file's order.
    pub worker_seconds: Vec<(String, String, f64)>,
    /// Tasks finished by the end.
    pub finished: u64,
}

/// Run `workload` with `decide` as the policy.
pub(crate) fn run(
    workload: Workload,
    mut decide: impl FnMut(&Arc<Snapshot>) -> Result<Vec<Decision>>,
) -> Result<Run> {
    let mut managers: Vec<SimManager> = (workload.managers.into_iter())
        .map(|spec| SimManager {
            spec,
            workers: Vec::new(),
            starting: Vec::new(),
            drained: Vec::new(),
            worker_ms: 0,
        })
        .collect();
    // Task arrivals by time: durations.
    let mut arrivals: BTreeMap<u64, Vec<u64>> = BTreeMap::new();
    for a in &workload.arrivals {
        let mut at = a.at_ms;
        loop {
            let due = arrivals.entry(at).or_default();
            due.extend(std::iter::repeat_n(a.duration_ms, a.count as usize));
            match a.every_ms {
                Some(every) if at + every <= a.until_ms.unwrap_or(at) => at += every,
                _ => break,
            }
        }
    }
    let mut queue: VecDeque<u64> = VecDeque::new();
    let (mut next_id, mut finished, mut steps) = (1u64, 0u64, Vec::new());
    let tick = workload.tick_ms;
    let mut now = 0;
    while now <= workload.end_ms {
        for m in &mut managers {
            for w in &mut m.workers {
                let before = w.running.len();
                w.running.retain(|end| *end > now);
                finished += (before - w.running.len()) as u64;
                if before > 0 && w.running.is_empty() {
                    w.idle_since = now;
                }
            }
            let slots = m.spec.worker_slots.max(1);
            let ready = m.starting.iter().filter(|at| **at <= now).count();
            m.starting.retain(|at| *at > now);
            for _ in 0..ready {
                let (id, idle_since) = (next_id, now);
                next_id += 1;
                let running = Vec::new();
                m.workers.push(SimWorker {
                    id,
                    slots,
                    running,
                    idle_since,
                });
            }
        }
        for (_, due) in arrivals.range(..=now) {
            queue.extend(due);
        }
        arrivals = arrivals.split_off(&(now + 1));
        // Lowest id first over every manager's open workers.
        let mut open: Vec<(u64, usize, usize)> = Vec::new();
        for (mi, m) in managers.iter().enumerate() {
            for (wi, w) in m.workers.iter().enumerate() {
                if m.drained.binary_search(&w.id).is_err() {
                    open.push((w.id, mi, wi));
                }
            }
        }
        open.sort_unstable();
        for (_, mi, wi) in open {
            let w = &mut managers[mi].workers[wi];
            while (w.running.len() as u32) < w.slots {
                let Some(duration) = queue.pop_front() else {
                    break;
                };
                w.running.push(now + duration);
            }
        }
        let running: u32 = (managers.iter())
            .flat_map(|m| m.workers.iter().map(|w| w.running.len() as u32))
            .sum();
        let snapshot = Arc::new(Snapshot {
            now_ms: now,
            scale_down_delay_ms: workload.scale_down_delay_ms,
            managers: managers
                .iter()
                .map(|m| snapshot_of(m, now, workload.max_drain_percent))
                .collect(),
            demand: vec![Demand {
                capabilities: Vec::new(),
                environments: Vec::new(),
                queued: u32::try_from(queue.len()).unwrap_or(u32::MAX),
                running,
                ..Default::default()
            }],
            fetch: Default::default(),
        });
        let decisions = decide(&snapshot).with_context(|| format!("at {now} ms"))?;
        weir::core::scaling::validate_decisions(&snapshot, &decisions)
            .with_context(|| format!("at {now} ms: the scheduler would refuse the decisions"))?;
        for d in &decisions {
            let Some(m) = managers.iter_mut().find(|m| m.spec.id == d.manager_id) else {
                continue;
            };
            m.workers
                .retain(|w| !(w.running.is_empty() && d.stop.contains(&w.id)));
            m.drained = d.drain.clone();
            m.drained.sort_unstable();
            let current = (m.workers.len() + m.starting.len()) as u64;
            let desired = u64::from(d.desired_workers);
            if desired > current {
                m.starting.extend(std::iter::repeat_n(
                    now + workload.start_ms,
                    (desired - current) as usize,
                ));
            } else {
                let cancel = (current - desired).min(m.starting.len() as u64) as usize;
                m.starting.truncate(m.starting.len() - cancel);
            }
        }
        for m in &mut managers {
            m.worker_ms += (m.workers.len() + m.starting.len()) as u64 * tick;
        }
        steps.push((snapshot, decisions));
        now += tick;
    }
    let worker_seconds = (managers.into_iter())
        .map(|m| (m.spec.id, m.spec.worker_type, m.worker_ms as f64 / 1000.0))
        .collect();
    Ok(Run {
        steps,
        worker_seconds,
        finished,
    })
}

fn snapshot_of(m: &SimManager, now: u64, percent: u32) -> Manager {
    let workers: Vec<Worker> = (m.workers.iter())
        .map(|w| Worker {
            id: w.id,
            slots: w.slots,
            busy: w.running.len() as u32,
            idle_ms: match w.running.is_empty() {
                true => now - w.idle_since,
                false => 0,
            },
            time_left_ms: None,
        })
        .collect();
    Manager {
        id: m.spec.id.clone(),
        worker_type: m.spec.worker_type.clone(),
        max_task_concurrency: m.spec.max_task_concurrency,
        worker_slots: m.spec.worker_slots.max(1),
        online: true,
        drain_budget: drain_budget(percent, workers.len()),
        // Only the live ones: a stopped worker is no longer drained.
        drained: (m.drained.iter().copied())
            .filter(|id| workers.iter().any(|w| w.id == *id))
            .collect(),
        workers,
        starting: m.starting.len() as u32,
        capabilities: Vec::new(),
        environments: Vec::new(),
        ..Default::default()
    }
}
