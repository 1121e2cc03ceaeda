//! One seeded run: the real scheduler, 2–3 real workers and a client; a fault plan drawn from
//! the seed (latency and jitter, flapping links, partitions of a worker from the scheduler,
//! scheduler crashes losing its journal's unsynced tail, worker crashes), everything healed at
//! [`heal_at`]; the invariants checked each time the timeline grows and at the end. A failure
//! names the seed, the step and the replay command, and prints the trace's last events.

use std::sync::Arc;
use std::sync::atomic::{AtomicU8, Ordering};
use std::time::Duration;

use crate::checks;
use crate::client::{RESTARTED, RESULTS_IN, client};
use crate::clock;
use crate::cluster::{Cluster, SCHEDULER, Setup};
use crate::draw::Draw;
use crate::faults::{self, Fault, apply, heal};
use crate::timeline::{Event, Timeline};
use crate::workers;

/// Faults stop (links repaired, crashed hosts restarted) at this simulated time, and jobs are
/// submitted until then: 30 s by default (what the fixed seeds were found with), more with
/// `WEIR_SIM_HEAL_SECS` (CI sweeps with 60, so every run lasts at least a simulated minute).
pub(crate) fn heal_at() -> Duration {
    let secs = std::env::var("WEIR_SIM_HEAL_SECS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(30);
    Duration::from_secs(secs)
}
/// turmoil's step (`WEIR_SIM_TICK_MS`, 10 ms by default: 1 ms runs ~7× slower, and found
/// nothing more in 300 seeds): timers fire and messages move on these boundaries.
fn tick_ms() -> u64 {
    std::env::var("WEIR_SIM_TICK_MS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(10)
}

/// Every acknowledged job finishes within this after [`heal_at`], plus the time the run's whole
/// work takes on its workers' slots ([`bound`]).
pub(crate) const BOUND: Duration = Duration::from_secs(60);
/// The client reads every result again within this of the deadline for the jobs.
const AGAIN: Duration = Duration::from_secs(30);
/// Turmoil's own limit, far beyond any run's deadline (the deadlines are checked here).
const SIMULATION_LIMIT: Duration = Duration::from_secs(3_600);

/// How long after the faults heal every acknowledged job must have finished: [`BOUND`], plus
/// every task's run time spread over the slots of the workers that always exist (as if none had
/// run before the heal). A fixed bound failed seed 327 of the replica sweep: its 51 tasks, a
/// handful of 10–25 s ones among them, kept both single-slot workers busy without a gap from the
/// heal on, and the last task started 54 s after it.
fn bound(inputs: &[Vec<Vec<u8>>], slots: u32) -> Duration {
    let work: Duration = inputs.iter().flatten().map(|i| workers::duration(i)).sum();
    BOUND + work / slots.max(1)
}

/// What one run ended with: its timeline's digest (equal for two runs of one seed).
pub(crate) struct Report {
    pub(crate) digest: u64,
    /// The timeline, one event a line (to show where two runs of a seed parted).
    pub(crate) trace: Vec<String>,
    pub(crate) steps: u64,
    /// Faults applied, and runs killed (stopped before they finished).
    pub(crate) faults: usize,
    pub(crate) killed: usize,
    pub(crate) elapsed: Duration,
}

/// Run `seed` (with `replicas` scheduler replicas, or 0 for one scheduler); `Err` says which
/// invariant broke, where, how to replay it, and the trace's tail.
pub(crate) fn run(seed: u64, replicas: u64) -> Result<Report, String> {
    let heal_at = heal_at();
    // The replicas' election timeouts, drawn from the seed (all hosts run on this thread).
    weir::scheduler::seed_elections(seed);
    let mut draw = Draw::new(seed);
    let mut builder = turmoil::Builder::new();
    builder
        .rng_seed(seed)
        .simulation_duration(heal_at + SIMULATION_LIMIT)
        .tick_duration(Duration::from_millis(tick_ms()))
        .enable_tokio_io();
    let latency = match draw.below(10) {
        0..=4 => 1,
        5..=8 => 100,
        _ => 1500,
    };
    builder
        .min_message_latency(Duration::from_millis(1))
        .max_message_latency(Duration::from_millis(latency));
    if draw.chance(30) {
        // Links that go down now and then (what was in flight is lost), up again soon.
        builder
            .fail_rate(0.0005 * (1 + draw.below(4)) as f64)
            .repair_rate(0.02);
    }
    // Managers (0–2, scaled by the native waterfall in the order drawn) and duplicated
    // datagrams, from streams of their own, so every other draw of a seed stays what it was.
    let mut fleet = Draw::new(seed ^ 0x6d61_6e61_6765_7273);
    let managers: Vec<(String, u32, u32)> = (0..fleet.below(3))
        .map(|i| {
            let slots = 1 + fleet.below(2) as u32;
            (
                format!("manager{i}"),
                slots,
                slots * (1 + fleet.below(3) as u32),
            )
        })
        .collect();
    let policy = (!managers.is_empty()).then(|| {
        (managers.iter().enumerate())
            .map(|(i, (id, _, _))| format!("{}, {id}\n", i + 1))
            .collect::<String>()
    });
    // Clocks that drift, on half the seeds (a stream of its own): every node's rate within
    // 1/66 of true time.
    let mut drift = Draw::new(seed ^ 0x0064_7269_6674);
    let drifts = drift.chance(50);
    let mut rate = || if drifts { clock::rate(&mut drift) } else { 1.0 };
    // A slow disk on some seeds: each journal sync takes 1–50 ms, or 0.1–2 s.
    let mut disk = Draw::new(seed ^ 0x6469_736b);
    // Replicas wait every round for a majority to sync it before anything goes out: on disks
    // of seconds a sync they stay safe but make no progress worth the name (every answer and
    // lease renewal waits seconds), so their slowest disks take 0.1–0.3 s.
    let sync_latency = match (disk.below(10), replicas) {
        (0..=6, _) => Duration::ZERO,
        (7 | 8, _) => disk.millis(1, 50),
        (_, 0) => disk.millis(100, 2_000),
        _ => disk.millis(100, 300),
    };
    let setup = Setup {
        policy,
        rate: rate(),
        sync_latency,
        replicas,
        // Replicas sit near each other (a message between two takes at most 100 ms): with
        // the world's 1.5 s, every round would wait seconds for its commit, on top of the
        // workers' own latency, and a run would not finish within `BOUND`.
        replica_latency: Some(Duration::from_millis(latency.min(100))),
        // As an operator sets it on slow links or disks (docs/replicas.md): within T/3 a Raft
        // message must cross a link, be synced (a vote, entries) and be answered.
        election: Duration::from_millis(1_000.max(4 * latency.min(100))).max(4 * sync_latency),
    };
    let said = format!(
        "the world: messages take up to {latency} ms, a sync {sync_latency:?}, {replicas} replicas (election timeout {:?}, messages between them up to {:?})",
        setup.election, setup.replica_latency
    );
    let mut cluster = Cluster::with(seed, builder, setup);
    cluster.timeline.at(Duration::ZERO, Event::Fault(said));
    // A twin on a quarter of the seeds with managers: a second host started with the first
    // manager's id (an operator's mistake), with its own workers of the same names.
    let mut twin = Draw::new(seed ^ 0x7477_696e);
    let twin = (managers.first())
        .filter(|_| twin.chance(25))
        .map(|(id, slots, cap)| (format!("{id}-twin"), id.clone(), *slots, *cap));
    let mut twice = Draw::new(seed ^ 0x6475_706c_6963_6174);
    if twice.chance(30) {
        cluster.net.set_duplicate_percent(1 + twice.below(10));
    }
    let timeline = cluster.timeline.clone();
    for (id, slots, cap) in &managers {
        let rate = rate();
        cluster.add_manager(id, id, *slots, *cap, rate);
    }
    if let Some((host, id, slots, cap)) = &twin {
        let rate = rate();
        cluster.add_manager(host, id, *slots, *cap, rate);
    }
    let names: Vec<String> = (0..2 + draw.below(2))
        .map(|i| format!("worker{i}"))
        .collect();
    let mut slots_total = 0;
    for name in &names {
        let slots = 1 + draw.below(2) as u32;
        slots_total += slots;
        let frozen = cluster.frozen.entry(name.clone()).or_default().clone();
        let rate = rate();
        cluster.add_worker(name, slots, frozen, rate);
    }
    let mut plan = faults::plan(seed, &mut draw, &mut fleet, &names, &managers, heal_at);
    plan.extend(faults::replica_plan(seed, replicas, heal_at));
    plan.sort_by_key(|(at, _)| *at);
    // Every host but the scheduler and the client: workers, then managers, then a twin.
    let hosts: Vec<String> = (names.iter().cloned())
        .chain(managers.iter().map(|(id, _, _)| id.clone()))
        .chain(twin.iter().map(|(host, ..)| host.clone()))
        .collect();
    // Jobs submitted through the fault window, every 2–6 s, each of 1–4 tasks of 0.1–2 s (one in
    // seven 2–8 s); the deadline after the heal grows with their work (`bound`).
    let mut jobs = Vec::new();
    let mut at = draw.millis(0, 2_000);
    while at < heal_at {
        let tasks = (0..1 + draw.below(4))
            .map(|i| {
                let long = draw.chance(15);
                workers::input(
                    if long {
                        2_000 + draw.below(6_000)
                    } else {
                        100 + draw.below(1_900)
                    },
                    i,
                )
            })
            .collect::<Vec<_>>();
        jobs.push((at, tasks));
        at += draw.millis(2_000, 6_000);
    }
    // One task in 25 runs 10–25 s: longer than a lease (10 s), so a worker lost while it runs
    // one still runs it when the fence ends (from a stream of its own).
    let mut longer = Draw::new(seed ^ 0x6c6f_6e67);
    for (_, tasks) in &mut jobs {
        for (i, task) in tasks.iter_mut().enumerate() {
            if longer.chance(4) {
                *task = workers::input(10_000 + longer.below(15_000), i as u64);
            }
        }
    }
    let inputs: Vec<Vec<Vec<u8>>> = jobs.iter().map(|(_, tasks)| tasks.clone()).collect();
    let deadline = heal_at + bound(&inputs, slots_total);
    let ended = Arc::new(AtomicU8::new(0));
    let results = client(&mut cluster, jobs, ended.clone());
    let mut final_crash = Draw::new(seed ^ 0x0065_6e64);

    let mut plan = plan.into_iter().peekable();
    let mut healed = false;
    let mut seen = 0;
    let mut steps = 0u64;
    let replay = match replicas {
        0 => format!("WEIR_SIM_SEED={seed}"),
        _ => format!("WEIR_SIM_REPLICA_SEED={seed}"),
    };
    let test = match replicas {
        0 => "seeds",
        _ => "replica_seeds",
    };
    let fail = |why: String, steps: u64, at: Duration, timeline: &Timeline| {
        format!(
            "seed {seed}: {why} (step {steps}, {:.3}s simulated)\n  replay: {replay} WEIR_SIM_HEAL_SECS={} cargo test --test sim {test} -- --nocapture\n  last events:\n{}",
            at.as_secs_f64(),
            heal_at.as_secs(),
            timeline.tail(if std::env::var_os("WEIR_SIM_TRACE").is_some() {
                usize::MAX
            } else {
                30
            })
        )
    };
    loop {
        let now = cluster.sim.elapsed();
        while let Some((_, fault)) = plan.next_if(|(at, _)| *at <= now) {
            apply(&mut cluster, &fault);
        }
        if !healed && now >= heal_at {
            healed = true;
            heal(&mut cluster, &hosts);
        }
        // The client has every result: the scheduler loses power (a torn piece of what it had
        // not synced kept) and starts again, and the client reads the results again.
        if ended.load(Ordering::SeqCst) == 0 && now > deadline {
            let why = format!(
                "an acknowledged job did not finish within {:?} of the faults healing",
                deadline - heal_at
            );
            return Err(fail(why, steps, now, &timeline));
        }
        if now > deadline + AGAIN {
            let why = format!(
                "the client could not read every result again after the scheduler's last restart, within {AGAIN:?} of the jobs' deadline"
            );
            return Err(fail(why, steps, now, &timeline));
        }
        if healed && ended.load(Ordering::SeqCst) == RESULTS_IN {
            let torn = final_crash.below(300) as usize;
            match replicas {
                0 => apply(&mut cluster, &Fault::CrashScheduler { torn }),
                // Every replica at once: what a majority had synced (all that was
                // acknowledged) must come back.
                _ => {
                    for replica in 1..=replicas {
                        apply(&mut cluster, &Fault::CrashReplica { replica, torn });
                    }
                }
            }
            apply(&mut cluster, &Fault::Restart(SCHEDULER.into()));
            ended.store(RESTARTED, Ordering::SeqCst);
        }
        let finished = match cluster.sim.step() {
            Ok(finished) => finished,
            Err(error) => {
                let down: Vec<&str> = (hosts.iter().chain(&cluster.schedulers))
                    .map(String::as_str)
                    .filter(|host| !cluster.sim.is_host_running(*host))
                    .collect();
                let error = format!("{error}; hosts not running: {down:?}");
                let why = format!("the simulation failed: {error}");
                return Err(fail(why, steps, cluster.sim.elapsed(), &timeline));
            }
        };
        steps += 1;
        let events = timeline.len();
        if events != seen {
            seen = events;
            if let Err(why) = checks::no_overlap(&timeline, cluster.sim.elapsed()) {
                return Err(fail(why, steps, cluster.sim.elapsed(), &timeline));
            }
        }
        // The run lasts at least until the faults heal: its jobs done early, the faults still
        // planned go on (crashes, partitions) under the no-overlap check.
        if finished && cluster.sim.elapsed() >= heal_at {
            break;
        }
    }
    let end = cluster.sim.elapsed();
    let results = results.lock().ok().and_then(|mut r| r.take());
    checks::at_end(&timeline, &inputs, results, end)
        .map_err(|why| fail(why, steps, end, &timeline))?;
    Ok(Report {
        digest: timeline.digest(),
        trace: timeline
            .tail(usize::MAX)
            .lines()
            .map(String::from)
            .collect(),
        steps,
        elapsed: end,
        faults: count(&timeline, |e| matches!(e, Event::Fault(_))),
        killed: count(&timeline, |e| matches!(e, Event::Killed { .. })),
    })
}

fn count(timeline: &Timeline, what: impl Fn(&Event) -> bool) -> usize {
    timeline.events().iter().filter(|(_, e)| what(e)).count()
}
