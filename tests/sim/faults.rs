//! The fault plan drawn from a seed, and how each fault is applied to the simulated world.

use std::sync::atomic::Ordering;
use std::time::Duration;

use weir::scheduler::journal::MemoryStore;

use crate::cluster::{Cluster, SCHEDULER, replica_host};
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
    /// The scheduler's machine loses power (with replicas: the leader's, as last seen).
    CrashScheduler {
        torn: usize,
    },
    /// Scheduler replica `replica`'s machine loses power.
    CrashReplica {
        replica: u64,
        torn: usize,
    },
    /// A replica (`None`: the one that leads, as last seen) is cut off from the other replicas,
    /// not from workers, managers or clients: the leader in a minority.
    CutReplica(Option<u64>),
    /// Every link between replicas is up again (one repair ends every cut at once).
    JoinReplicas,
    /// A worker's machine, or a manager's (its workers with it), is lost.
    CrashWorker(String),
    /// A worker is frozen and then lost; its guard kills its runs when their lease ends.
    FreezeWorker(String),
    /// Host `host` starts again if it is down (`scheduler`: every scheduler host that is down,
    /// so one crash's restart also ends an overlapping one early).
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

/// With scheduler replicas, their own faults (from a stream of their own): 0–2 machines lost
/// (the leader's, on half), and 0–2 replicas cut off from the others (the leader, on 60%),
/// each for a while; flapping links between them come from the world's fail rate.
pub(crate) fn replica_plan(seed: u64, replicas: u64, heal_at: Duration) -> Vec<(Duration, Fault)> {
    let mut plan = Vec::new();
    if replicas == 0 {
        return plan;
    }
    let mut draw = Draw::new(seed ^ 0x7265_706c_6963_6173);
    let last = u64::try_from(heal_at.as_millis())
        .unwrap_or(u64::MAX)
        .saturating_sub(5_000);
    for _ in 0..draw.below(3) {
        let (at, back) = window(&mut draw, last, (200, 10_000), heal_at);
        let torn = draw.below(300) as usize;
        let fault = match draw.chance(50) {
            true => Fault::CrashScheduler { torn },
            false => Fault::CrashReplica {
                replica: 1 + draw.below(replicas),
                torn,
            },
        };
        plan.push((at, fault));
        plan.push((back, Fault::Restart(SCHEDULER.into())));
    }
    for _ in 0..draw.below(3) {
        let (at, back) = window(&mut draw, last, (500, 15_000), heal_at);
        let who = match draw.chance(60) {
            true => None,
            false => Some(1 + draw.below(replicas)),
        };
        plan.push((at, Fault::CutReplica(who)));
        plan.push((back, Fault::JoinReplicas));
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
    let schedulers = cluster.schedulers.clone();
    match fault {
        Fault::Partition(worker) => {
            for scheduler in &schedulers {
                cluster.sim.partition(worker.as_str(), scheduler.as_str());
            }
        }
        Fault::Repair(worker) => {
            for scheduler in &schedulers {
                cluster.sim.repair(worker.as_str(), scheduler.as_str());
            }
        }
        Fault::OneWay {
            worker,
            to_scheduler,
        } => {
            for (from, to) in one_way(worker, *to_scheduler, &schedulers) {
                cluster.sim.partition_oneway(from, to);
            }
        }
        Fault::RepairOneWay {
            worker,
            to_scheduler,
        } => {
            for (from, to) in one_way(worker, *to_scheduler, &schedulers) {
                cluster.sim.repair_oneway(from, to);
            }
        }
        Fault::CrashScheduler { torn } if cluster.replicas.is_empty() => {
            cluster.sim.crash(SCHEDULER);
            // The machine lost power: what was synced, and a torn piece of what was not.
            if let Ok(mut disk) = cluster.scheduler.disk.lock() {
                *disk = MemoryStore::with(disk.after_power_loss(*torn));
            }
        }
        // The last replica that began to serve, if its machine is up (else the first that is):
        // the leader as the simulator last heard of it.
        Fault::CrashScheduler { torn } => {
            let up: Vec<u64> = (1..=cluster.replicas.len() as u64)
                .filter(|id| cluster.sim.is_host_running(replica_host(*id).as_str()))
                .collect();
            let replica = (cluster.leaders.last().filter(|id| up.contains(id)))
                .or_else(|| up.first().copied());
            if let Some(replica) = replica {
                crash_replica(cluster, replica, *torn);
            }
        }
        Fault::CrashReplica { replica, torn } => crash_replica(cluster, *replica, *torn),
        Fault::CutReplica(who) => {
            let cut = who.or_else(|| cluster.leaders.last()).unwrap_or(1);
            for other in (1..=cluster.replicas.len() as u64).filter(|id| *id != cut) {
                cluster
                    .sim
                    .partition(replica_host(cut).as_str(), replica_host(other).as_str());
            }
        }
        Fault::JoinReplicas => join_replicas(cluster),
        Fault::Restart(host) if host == SCHEDULER => {
            for scheduler in &schedulers {
                if !cluster.sim.is_host_running(scheduler.as_str()) {
                    cluster.sim.bounce(scheduler.as_str());
                }
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

/// The one-way links between `worker` and each scheduler host, from the sender: the worker's
/// to them (`to_scheduler`), or theirs to it.
fn one_way<'a>(
    worker: &'a str,
    to_scheduler: bool,
    schedulers: &'a [String],
) -> impl Iterator<Item = (&'a str, &'a str)> {
    schedulers.iter().map(move |scheduler| match to_scheduler {
        true => (worker, scheduler.as_str()),
        false => (scheduler.as_str(), worker),
    })
}

/// Replica `replica`'s machine loses power: its log and snapshot keep what was synced, and a
/// torn piece of what was not.
fn crash_replica(cluster: &mut Cluster, replica: u64, torn: usize) {
    let Some(disks) = usize::try_from(replica - 1)
        .ok()
        .and_then(|i| cluster.replicas.get(i))
        .cloned()
    else {
        return;
    };
    cluster.sim.crash(replica_host(replica).as_str());
    for disk in [&disks.log, &disks.snapshot] {
        if let Ok(mut disk) = disk.lock() {
            *disk = MemoryStore::with(disk.after_power_loss(torn));
        }
    }
}

fn join_replicas(cluster: &mut Cluster) {
    let n = cluster.replicas.len() as u64;
    for a in 1..=n {
        for b in a + 1..=n {
            cluster
                .sim
                .repair(replica_host(a).as_str(), replica_host(b).as_str());
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
    let schedulers = cluster.schedulers.clone();
    for scheduler in schedulers.iter().map(String::as_str) {
        cluster.sim.repair("client", scheduler);
    }
    join_replicas(cluster);
    for host in hosts.iter().map(String::as_str) {
        for scheduler in schedulers.iter().map(String::as_str) {
            cluster.sim.repair(host, scheduler);
        }
        if !cluster.sim.is_host_running(host) {
            unfreeze(cluster, host);
            cluster.sim.bounce(host);
        }
    }
    for scheduler in schedulers.iter().map(String::as_str) {
        if !cluster.sim.is_host_running(scheduler) {
            cluster.sim.bounce(scheduler);
        }
    }
}
