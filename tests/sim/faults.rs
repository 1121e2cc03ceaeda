//! The fault plan drawn from a seed, and how each fault is applied to the simulated world.

use std::sync::atomic::Ordering;
use std::time::Duration;

use weir::scheduler::journal::MemoryStore;

use crate::cluster::{Cluster, SCHEDULER};
use crate::draw::Draw;
use crate::timeline::Event;

#[derive(Clone, Debug)]
pub(crate) enum Fault {
    Partition(String),
    Repair(String),
    /// Messages from the worker to the scheduler (or, `to_scheduler` false, back) are dropped.
    OneWay {
        worker: String,
        to_scheduler: bool,
    },
    RepairOneWay {
        worker: String,
        to_scheduler: bool,
    },
    CrashScheduler {
        torn: usize,
    },
    /// A worker's machine, or a manager's (its workers with it), is lost.
    CrashWorker(String),
    /// A worker is frozen and then lost; its guard kills its runs when their lease ends.
    FreezeWorker(String),
    Restart(String),
}

/// The faults of a run, in time order: drawn from `draw` (the run's main stream: partitions of a
/// worker, a scheduler crash, a worker crash, in that order), `fleet` (the managers' stream, after
/// the managers themselves were drawn from it) and streams of their own (one-way partitions,
/// freezes), so adding a kind of fault leaves every other draw of a seed what it was. Faults
/// start within the window that ends 5 s before they heal (at `heal_at`).
pub(crate) fn plan(
    seed: u64,
    draw: &mut Draw,
    fleet: &mut Draw,
    names: &[String],
    managers: &[(String, u32, u32)],
    heal_at: Duration,
) -> Vec<(Duration, Fault)> {
    let mut plan = Vec::new();
    // Faults start within the window that ends 5 s before they heal (25 s by default).
    let last = u64::try_from(heal_at.as_millis())
        .unwrap_or(u64::MAX)
        .saturating_sub(5_000);
    for _ in 0..draw.below(4) {
        let worker = names[draw.below(names.len() as u64) as usize].clone();
        let (at, back) = window(draw, last, (500, 15_000), heal_at);
        plan.push((at, Fault::Partition(worker.clone())));
        plan.push((back, Fault::Repair(worker)));
    }
    if draw.chance(40) {
        let at = draw.millis(2_000, last);
        let torn = draw.below(300) as usize;
        plan.push((at, Fault::CrashScheduler { torn }));
        let back = (at + draw.millis(200, 5_000)).min(heal_at);
        plan.push((back, Fault::Restart(SCHEDULER.into())));
    }
    if draw.chance(40) {
        let worker = names[draw.below(names.len() as u64) as usize].clone();
        let (at, back) = window(draw, last, (200, 10_000), heal_at);
        plan.push((at, Fault::CrashWorker(worker.clone())));
        plan.push((back, Fault::Restart(worker)));
    }
    // One-way partitions (a worker hears the scheduler but is not heard, or the reverse), drawn
    // from a stream of their own so every other draw of a seed stays what it was.
    let mut oneway = Draw::new(seed ^ 0x6f6e_6577_6179);
    if oneway.chance(30) {
        let worker = names[oneway.below(names.len() as u64) as usize].clone();
        let (at, back) = window(&mut oneway, last, (500, 15_000), heal_at);
        let to_scheduler = oneway.chance(50);
        plan.push((
            at,
            Fault::OneWay {
                worker: worker.clone(),
                to_scheduler,
            },
        ));
        plan.push((
            back,
            Fault::RepairOneWay {
                worker,
                to_scheduler,
            },
        ));
    }
    // Half the workers' crashes are freezes (SIGSTOP, then lost): their runs go on until the
    // lease they run under ends, when the guard process kills them; the fence must outlast it.
    let mut freeze = Draw::new(seed ^ 0x6672_6565_7a65);
    for (_, fault) in &mut plan {
        if let Fault::CrashWorker(worker) = fault
            && freeze.chance(50)
        {
            *fault = Fault::FreezeWorker(worker.clone());
        }
    }
    // The managers' machines: partitioned from the scheduler, or lost (with their workers)
    // and started again.
    for (id, _, _) in managers {
        if fleet.chance(40) {
            let (at, back) = window(fleet, last, (500, 15_000), heal_at);
            plan.push((at, Fault::Partition(id.clone())));
            plan.push((back, Fault::Repair(id.clone())));
        }
        if fleet.chance(30) {
            let (at, back) = window(fleet, last, (200, 10_000), heal_at);
            plan.push((at, Fault::CrashWorker(id.clone())));
            plan.push((back, Fault::Restart(id.clone())));
        }
    }
    plan.sort_by_key(|(at, _)| *at);
    plan
}

/// When a fault starts (1 s to `last` ms) and when it is repaired (`lasting` ms later, at most
/// at `heal_at`), drawn in that order.
fn window(
    draw: &mut Draw,
    last: u64,
    lasting: (u64, u64),
    heal_at: Duration,
) -> (Duration, Duration) {
    let at = draw.millis(1_000, last);
    let back = (at + draw.millis(lasting.0, lasting.1)).min(heal_at);
    (at, back)
}

pub(crate) fn apply(cluster: &mut Cluster, fault: &Fault) {
    cluster
        .timeline
        .at(cluster.sim.elapsed(), Event::Fault(format!("{fault:?}")));
    match fault {
        Fault::Partition(worker) => cluster.sim.partition(worker.as_str(), SCHEDULER),
        Fault::Repair(worker) => cluster.sim.repair(worker.as_str(), SCHEDULER),
        Fault::OneWay {
            worker,
            to_scheduler: true,
        } => cluster.sim.partition_oneway(worker.as_str(), SCHEDULER),
        Fault::OneWay { worker, .. } => cluster.sim.partition_oneway(SCHEDULER, worker.as_str()),
        Fault::RepairOneWay {
            worker,
            to_scheduler: true,
        } => cluster.sim.repair_oneway(worker.as_str(), SCHEDULER),
        Fault::RepairOneWay { worker, .. } => cluster.sim.repair_oneway(SCHEDULER, worker.as_str()),
        Fault::CrashScheduler { torn } => {
            cluster.sim.crash(SCHEDULER);
            // The machine lost power: what was synced, and a torn piece of what was not.
            if let Ok(mut disk) = cluster.scheduler.disk.lock() {
                *disk = MemoryStore::with(disk.after_power_loss(*torn));
            }
        }
        Fault::CrashWorker(worker) => cluster.sim.crash(worker.as_str()),
        Fault::FreezeWorker(worker) => {
            if let Some(frozen) = cluster.frozen.get(worker) {
                frozen.store(true, Ordering::SeqCst);
            }
            cluster.sim.crash(worker.as_str());
        }
        Fault::Restart(host) => {
            unfreeze(cluster, host);
            if !cluster.sim.is_host_running(host.as_str()) {
                cluster.sim.bounce(host.as_str());
            }
        }
    }
}

/// Before `host` starts again: if it was frozen, its process is killed first (so its guard
/// kills its runs now, not at their lease's end).
fn unfreeze(cluster: &Cluster, host: &str) {
    if let Some(frozen) = cluster.frozen.get(host)
        && frozen.swap(false, Ordering::SeqCst)
    {
        cluster.timeline.cut_short(host, cluster.sim.elapsed());
    }
}

pub(crate) fn heal(cluster: &mut Cluster, hosts: &[String]) {
    cluster
        .timeline
        .at(cluster.sim.elapsed(), Event::Fault("heal".into()));
    cluster.sim.set_fail_rate(0.0);
    cluster
        .sim
        .set_max_message_latency(Duration::from_millis(10));
    // Every link, the client's too: a link the flapping took down stays down until repaired
    // (turmoil repairs those only on traffic, at `repair_rate` a message).
    cluster.sim.repair("client", SCHEDULER);
    for host in hosts.iter().map(String::as_str) {
        cluster.sim.repair(host, SCHEDULER);
        if !cluster.sim.is_host_running(host) {
            unfreeze(cluster, host);
            cluster.sim.bounce(host);
        }
    }
    if !cluster.sim.is_host_running(SCHEDULER) {
        cluster.sim.bounce(SCHEDULER);
    }
}
