//! One seeded run: the real scheduler, 2–3 real workers and a client; a fault plan drawn from
//! the seed (latency and jitter, flapping links, partitions of a worker from the scheduler,
//! scheduler crashes losing its journal's unsynced tail, worker crashes), everything healed at
//! [`heal_at`]; the invariants checked each time the timeline grows and at the end. A failure
//! names the seed, the step and the replay command, and prints the trace's last events.

use std::sync::atomic::{AtomicU8, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use weir::client::Client;
use weir::proto::{JobId, Outcome, Response, TaskResult};
use weir::scheduler::journal::MemoryStore;

use crate::checks;
use crate::clock;
use crate::cluster::{self, Cluster, Error, SCHEDULER, Setup};
use crate::draw::Draw;
use crate::net::SimUdp;
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

/// Every acknowledged job finishes within this after [`heal_at`] (the run's time limit).
pub(crate) const BOUND: Duration = Duration::from_secs(60);
/// The client reads every result again within this of the scheduler's last restart (the run's
/// time limit is `heal_at + BOUND + AGAIN`).
const AGAIN: Duration = Duration::from_secs(30);

#[derive(Clone, Debug)]
enum Fault {
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

/// Run `seed`; `Err` says which invariant broke, where, how to replay it, and the trace's tail.
pub(crate) fn run(seed: u64) -> Result<Report, String> {
    let heal_at = heal_at();
    let mut draw = Draw::new(seed);
    let mut builder = turmoil::Builder::new();
    builder
        .rng_seed(seed)
        .simulation_duration(heal_at + BOUND + AGAIN)
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
    let sync_latency = match disk.below(10) {
        0..=6 => Duration::ZERO,
        7 | 8 => disk.millis(1, 50),
        _ => disk.millis(100, 2_000),
    };
    let setup = Setup {
        policy,
        rate: rate(),
        sync_latency,
    };
    let mut cluster = Cluster::with(seed, builder, setup);
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
    for name in &names {
        let slots = 1 + draw.below(2) as u32;
        let frozen = cluster.frozen.entry(name.clone()).or_default().clone();
        let rate = rate();
        cluster.add_worker(name, slots, frozen, rate);
    }
    let mut plan = Vec::new();
    // Faults start within the window that ends 5 s before they heal (25 s by default).
    let last = u64::try_from(heal_at.as_millis())
        .unwrap_or(u64::MAX)
        .saturating_sub(5_000);
    for _ in 0..draw.below(4) {
        let worker = names[draw.below(names.len() as u64) as usize].clone();
        let at = draw.millis(1_000, last);
        plan.push((at, Fault::Partition(worker.clone())));
        plan.push((
            (at + draw.millis(500, 15_000)).min(heal_at),
            Fault::Repair(worker),
        ));
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
        let at = draw.millis(1_000, last);
        plan.push((at, Fault::CrashWorker(worker.clone())));
        plan.push((
            (at + draw.millis(200, 10_000)).min(heal_at),
            Fault::Restart(worker),
        ));
    }
    // One-way partitions (a worker hears the scheduler but is not heard, or the reverse), drawn
    // from a stream of their own so every other draw of a seed stays what it was.
    let mut oneway = Draw::new(seed ^ 0x6f6e_6577_6179);
    if oneway.chance(30) {
        let worker = names[oneway.below(names.len() as u64) as usize].clone();
        let at = oneway.millis(1_000, last);
        let back = (at + oneway.millis(500, 15_000)).min(heal_at);
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
    for (id, _, _) in &managers {
        if fleet.chance(40) {
            let at = fleet.millis(1_000, last);
            plan.push((at, Fault::Partition(id.clone())));
            plan.push((
                (at + fleet.millis(500, 15_000)).min(heal_at),
                Fault::Repair(id.clone()),
            ));
        }
        if fleet.chance(30) {
            let at = fleet.millis(1_000, last);
            plan.push((at, Fault::CrashWorker(id.clone())));
            plan.push((
                (at + fleet.millis(200, 10_000)).min(heal_at),
                Fault::Restart(id.clone()),
            ));
        }
    }
    plan.sort_by_key(|(at, _)| *at);
    // Every host but the scheduler and the client: workers, then managers, then a twin.
    let hosts: Vec<String> = (names.iter().cloned())
        .chain(managers.iter().map(|(id, _, _)| id.clone()))
        .chain(twin.iter().map(|(host, ..)| host.clone()))
        .collect();
    // Jobs submitted through the fault window, each of 1–4 tasks of 0.1–2 s (one in seven 2–8 s): under
    // of a slot's work, so what is left at `heal_at` fits well within `BOUND` on any cluster here.
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
    let ended = Arc::new(AtomicU8::new(0));
    let results = client(&mut cluster, jobs, ended.clone());
    let mut final_crash = Draw::new(seed ^ 0x0065_6e64);

    let mut plan = plan.into_iter().peekable();
    let mut healed = false;
    let mut seen = 0;
    let mut steps = 0u64;
    let fail = |why: String, steps: u64, at: Duration, timeline: &Timeline| {
        format!(
            "seed {seed}: {why} (step {steps}, {:.3}s simulated)\n  replay: WEIR_SIM_SEED={seed} WEIR_SIM_HEAL_SECS={} cargo test --test sim seeds -- --nocapture\n  last events:\n{}",
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
        if ended.load(Ordering::SeqCst) == 0 && now > heal_at + BOUND {
            let why = format!(
                "an acknowledged job did not finish within {BOUND:?} of the faults healing"
            );
            return Err(fail(why, steps, now, &timeline));
        }
        if healed && ended.load(Ordering::SeqCst) == RESULTS_IN {
            let torn = final_crash.below(300) as usize;
            apply(&mut cluster, &Fault::CrashScheduler { torn });
            apply(&mut cluster, &Fault::Restart(SCHEDULER.into()));
            ended.store(RESTARTED, Ordering::SeqCst);
        }
        let finished = match cluster.sim.step() {
            Ok(finished) => finished,
            Err(error) => {
                let down: Vec<&str> = (hosts.iter().map(String::as_str).chain([SCHEDULER]))
                    .filter(|host| !cluster.sim.is_host_running(*host))
                    .collect();
                let error = format!("{error}; hosts not running: {down:?}");
                let why = if cluster.sim.elapsed() >= heal_at + BOUND + AGAIN {
                    format!(
                        "the client could not read every result again within {AGAIN:?} of the scheduler's last restart ({error})"
                    )
                } else {
                    format!("the simulation failed: {error}")
                };
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

fn apply(cluster: &mut Cluster, fault: &Fault) {
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

fn heal(cluster: &mut Cluster, hosts: &[String]) {
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

/// Each job's results, in the order submitted.
type Results = Arc<Mutex<Option<Vec<Vec<TaskResult>>>>>;

/// Where the client is at its end: it has every result (the scheduler is crashed and started
/// again then), and the scheduler is back.
const RESULTS_IN: u8 = 1;
const RESTARTED: u8 = 2;

/// What differs between a job's results before and after the scheduler's restart (`None`:
/// nothing): every task's final state, outcome and attempts must be what the journal had.
fn replayed(before: &[TaskResult], mut after: Vec<TaskResult>) -> Option<String> {
    let mut before = before.to_vec();
    before.sort_by_key(|r| r.task);
    after.sort_by_key(|r| r.task);
    let key = |r: &TaskResult| (r.task, r.state, r.outcome.clone(), r.attempts);
    let (was, is): (Vec<_>, Vec<_>) = (
        before.iter().map(key).collect(),
        after.iter().map(key).collect(),
    );
    (was != is).then(|| format!("results were {was:?}, are {is:?}"))
}

/// The client: submits each job at its time (retrying until acknowledged, reconnecting as
/// needed), then waits for every acknowledged one across the scheduler's restarts, and fetches
/// its results.
fn client(
    cluster: &mut Cluster,
    jobs: Vec<(Duration, Vec<Vec<u8>>)>,
    ended: Arc<AtomicU8>,
) -> Results {
    let slot = Arc::new(Mutex::new(None));
    let out = slot.clone();
    let published = cluster.scheduler.access.clone();
    let timeline = cluster.timeline.clone();
    let udp = cluster.net.udp("client", 0);
    cluster.sim.client("client", async move {
        let start = tokio::time::Instant::now();
        let mut link = Link {
            client: None,
            udp,
            published,
            timeline: timeline.clone(),
        };
        let mut acknowledged = Vec::new();
        for (at, tasks) in jobs {
            tokio::time::sleep_until(start + at).await;
            let groups = cluster::groups(tasks);
            let (job, first, n) = link
                .retry("submit", |client| {
                    let groups = groups.clone();
                    async move { Ok(client.submit(vec![], groups).await?) }
                })
                .await;
            timeline.note(Event::Client(format!(
                "job {job} acknowledged: tasks {first}..+{n}"
            )));
            acknowledged.push(job);
        }
        let mut results = Vec::new();
        for &job in &acknowledged {
            let timeline = timeline.clone();
            let got = link
                .retry("wait", |client| {
                    let timeline = timeline.clone();
                    async move { finished(&client, job, &timeline).await }
                })
                .await;
            results.push(got);
        }
        // Every result is in: the scheduler loses power now (see `run`), and once it is back,
        // what its journal replays must be what the client was told.
        ended.store(RESULTS_IN, Ordering::SeqCst);
        while ended.load(Ordering::SeqCst) != RESTARTED {
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        // Told by the harness, it connects again at once rather than find its connection dead
        // at the idle timeout (what this phase checks is the journal, not that detection).
        link.client = None;
        for (job, before) in acknowledged.iter().zip(&results) {
            let job = *job;
            let after = link
                .retry("results after the restart", |client| async move {
                    Ok(client.results(job).await?)
                })
                .await;
            if let Some(why) = replayed(before, after) {
                timeline.note(Event::Broken(format!(
                    "job {job} after the scheduler's restart: {why}"
                )));
            }
        }
        timeline.note(Event::Client("results the same after the restart".into()));
        if let Ok(mut out) = out.lock() {
            *out = Some(results);
        }
        Ok(())
    });
    slot
}

/// The client's connection, made again when a call on it fails.
struct Link {
    client: Option<Arc<Client>>,
    udp: SimUdp,
    published: Arc<Mutex<Option<weir::net::AccessFile>>>,
    timeline: Timeline,
}

impl Link {
    /// `call` until it succeeds, reconnecting after each failure (each noted on the timeline).
    async fn retry<T, F, Fut>(&mut self, what: &str, mut call: F) -> T
    where
        F: FnMut(Arc<Client>) -> Fut,
        Fut: std::future::Future<Output = Result<T, Error>>,
    {
        loop {
            let client = match self.client.take() {
                Some(client) => Ok(client),
                None => cluster::connect_once(&self.udp, &self.published)
                    .await
                    .map(Arc::new),
            };
            match client {
                Ok(client) => match call(client.clone()).await {
                    Ok(value) => {
                        self.client = Some(client);
                        return value;
                    }
                    Err(error) => self
                        .timeline
                        .note(Event::Client(format!("{what}: {error}"))),
                },
                Err(error) => self
                    .timeline
                    .note(Event::Client(format!("connect: {error}"))),
            }
            tokio::time::sleep(Duration::from_millis(500)).await;
        }
    }
}

/// Wait for `job` and fetch its results.
/// Odd jobs are watched (each result as its task ends: the Python futures' path), even ones
/// waited for; a watcher must hear of each task once, and what it heard must be the results.
async fn finished(
    client: &Client,
    job: JobId,
    timeline: &Timeline,
) -> Result<Vec<TaskResult>, Error> {
    let watched = match job % 2 {
        1 => Some(watch(client, job, timeline).await?),
        _ => {
            let mut last = None;
            client
                .wait(job, |counts| {
                    if last.as_ref() != Some(counts) {
                        last = Some(counts.clone());
                        timeline.note(Event::Client(format!("job {job}: {counts:?}")));
                    }
                })
                .await?;
            None
        }
    };
    let results = client.results(job).await?;
    if let Some(watched) = watched
        && let Some(why) = replayed(&watched, results.clone())
    {
        timeline.note(Event::Broken(format!(
            "job {job}: what its watcher heard is not its results: {why}"
        )));
    }
    timeline.note(Event::Client(format!(
        "job {job} finished: {} results",
        results.len()
    )));
    Ok(results)
}

/// Watch `job` to its end: each task's result once (a second one on the stream breaks the
/// invariant), then `Done`.
async fn watch(client: &Client, job: JobId, timeline: &Timeline) -> Result<Vec<TaskResult>, Error> {
    let mut stream = client.watch(job).await?;
    let mut heard: Vec<TaskResult> = Vec::new();
    loop {
        match stream.next().await? {
            Some(Response::Results(chunk)) => {
                for result in chunk {
                    if heard.iter().any(|r| r.task == result.task) {
                        timeline.note(Event::Broken(format!(
                            "job {job}: task {} delivered twice to one watcher",
                            result.task
                        )));
                    }
                    heard.push(result);
                }
            }
            Some(Response::Done(counts)) => {
                timeline.note(Event::Client(format!("job {job} watched: {counts:?}")));
                return Ok(heard);
            }
            Some(Response::Progress(_)) => {}
            other => return Err(format!("job {job}: the watch answered {other:?}").into()),
        }
    }
}

/// Whether `outcome` is what a run of `input` produces.
pub(crate) fn produced(outcome: &Outcome, input: &[u8]) -> bool {
    matches!(outcome, Outcome::Exited { code: Some(0), stdout, .. } if *stdout == workers::output(input))
}

fn count(timeline: &Timeline, what: impl Fn(&Event) -> bool) -> usize {
    timeline.events().iter().filter(|(_, e)| what(e)).count()
}
