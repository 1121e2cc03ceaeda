//! Workers in the simulation: the real worker shell (`weir::worker::Worker`, its sessions,
//! lease and reports) with a simulated executor in place of processes: a task is a duration
//! and an output (both from its input), on simulated time, each run's start and end noted on
//! the simulator's timeline, and stopped at once on a kill (cancel, lease lost, give-up, crash).

use std::future::Future;
use std::pin::Pin;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use weir::clock::Millis;
use weir::net::{AccessFile, SessionEnd};
use weir::proto::{Outcome, WorkerRegistration};
use weir::scheduler::KILL_MARGIN;
use weir::worker::execute::{Execute, Execution, Stop};
use weir::worker::{Seams, Settings, Worker};

use crate::clock::Drift;
use crate::cluster::{Cluster, Error, access};
use crate::net::{SimUdp, mix};
use crate::timeline::{Event, Timeline};

/// A task's input: how long it runs (ms, little-endian u64) and a tag its output is made from.
pub(crate) fn input(duration_ms: u64, tag: u64) -> Vec<u8> {
    let mut input = duration_ms.to_le_bytes().to_vec();
    input.extend_from_slice(&tag.to_le_bytes());
    input
}

/// The output a run of `input` produces (the same for every run of it).
pub(crate) fn output(input: &[u8]) -> Vec<u8> {
    mix(&input).to_le_bytes().to_vec()
}

pub(crate) fn duration(input: &[u8]) -> Duration {
    let ms = input
        .get(..8)
        .and_then(|b| <[u8; 8]>::try_from(b).ok())
        .map_or(0, u64::from_le_bytes);
    Duration::from_millis(ms)
}

#[derive(Debug)]
pub(crate) struct SimExecute {
    timeline: Timeline,
    /// Set when the worker's process is frozen (SIGSTOP) and then lost: its runs go on until
    /// the lease they run under ends, when its guard process kills them.
    frozen: Frozen,
    /// What the timeline calls the worker: its name, and `@host` on a twin manager's host (its
    /// workers have the names of the other's).
    label: String,
    /// Its machine's clock rate: the guard measures the lease's time left on it.
    rate: f64,
}

/// Whether a worker froze (see [`SimExecute`]); the fault plan sets it, a restart clears it.
pub(crate) type Frozen = Arc<AtomicBool>;

/// Notes the end of a run when dropped: killed unless it finished. Dropped mid-run (its worker
/// crashed), it is killed now, or if the worker froze when its guard kills it: at the lease's
/// end.
struct Running {
    timeline: Timeline,
    event: Option<Event>,
    stop: Arc<Stop>,
    frozen: Frozen,
    rate: f64,
}

impl Drop for Running {
    fn drop(&mut self) {
        if let Some(Event::Started { task, worker, run }) = self.event.take() {
            let now = turmoil::sim_elapsed().unwrap_or_default();
            match self.stop.lease_left() {
                Some(left) if self.frozen.load(Ordering::SeqCst) => {
                    // The guard counts the time left on its machine's clock (`rate` seconds a
                    // second), and its kill lands within `KILL_MARGIN` of the lease's end.
                    let late = mix(&(&worker, task, run)) % KILL_MARGIN.as_millis() as u64;
                    let at = now + left.div_f64(self.rate) + Duration::from_millis(late);
                    self.timeline.at(at, Event::Killed { task, worker, run });
                }
                _ => self.timeline.note(Event::Killed { task, worker, run }),
            }
        }
    }
}

impl Execute for SimExecute {
    fn execute(&self, execution: Execution) -> Pin<Box<dyn Future<Output = Outcome> + Send>> {
        let (timeline, frozen, rate) = (self.timeline.clone(), self.frozen.clone(), self.rate);
        let worker = self.label.clone();
        Box::pin(async move {
            let Execution {
                task,
                run,
                input,
                stop,
                ..
            } = execution;
            if stop.is_set() {
                return weir::core::worker::canceled();
            }
            let started = Event::Started { task, worker, run };
            timeline.note(started.clone());
            let stop = Arc::new(stop);
            let mut running = Running {
                timeline,
                event: Some(started),
                stop: stop.clone(),
                frozen,
                rate,
            };
            tokio::select! {
                () = tokio::time::sleep(duration(&input)) => {
                    if let Some(Event::Started { task, worker, run }) = running.event.take() {
                        running.timeline.note(Event::Finished { task, worker, run });
                    }
                    Outcome::Exited { code: Some(0), stdout: output(&input), stderr: Vec::new() }
                }
                () = stop.stopped() => {
                    if let Some(Event::Started { task, worker, run }) = running.event.take() {
                        running.timeline.note(Event::Killed { task, worker, run });
                    }
                    weir::core::worker::canceled()
                }
            }
        })
    }
}

impl Cluster {
    /// Add worker host `name` with `slots`, its clock at `rate`, connecting to the scheduler
    /// once it published its access, and reconnecting while it is away (as `net::reconnecting`
    /// does, without the access file and signals).
    pub(crate) fn add_worker(&mut self, name: &str, slots: u32, frozen: Frozen, rate: f64) {
        let name = name.to_string();
        let (net, published, timeline) = (
            self.net.clone(),
            self.scheduler.access.clone(),
            self.timeline.clone(),
        );
        self.sim.host(name.clone(), move || {
            let (published, timeline) = (published.clone(), timeline.clone());
            let life = net.start(&name);
            let settings = settings(&name, slots, net.draw(&name, life));
            let udp = net.udp(&name, life);
            let frozen = frozen.clone();
            let label = name.clone();
            async move { run(settings, udp, published, timeline, frozen, rate, label).await }
        });
    }
}

/// Run the worker of `settings` on `udp`, its clock at `rate` (see `clock::Drift`), until it
/// is stopped (reconnecting while the scheduler is away); `label` names it on the timeline.
pub(crate) async fn run(
    settings: Settings,
    udp: SimUdp,
    published: Arc<Mutex<Option<AccessFile>>>,
    timeline: Timeline,
    frozen: Frozen,
    rate: f64,
    label: String,
) -> Result<(), Error> {
    let name = settings.info.name.clone();
    let seams = Seams {
        clock: Millis::new(Arc::new(Drift::new(rate))),
        udp: Arc::new(udp),
        execute: Some(Arc::new(SimExecute {
            timeline,
            frozen,
            label,
            rate,
        })),
    };
    let mut worker = Worker::new(settings, seams)?;
    loop {
        let access = access(&published).await;
        match worker.session(&access).await {
            Ok(SessionEnd::Stopped(signal)) => {
                tracing::info!(%signal, "{name}: stopped");
                worker.shutdown().await;
                return Ok(());
            }
            Ok(end) => tracing::debug!(%end, "{name}: lost the scheduler"),
            Err(error) => tracing::debug!(%error, "{name}: no session"),
        }
        tokio::time::sleep(Duration::from_millis(300)).await;
    }
}

/// A worker's settings: `slots`, type `sim`, no conditions, heartbeats every second.
pub(crate) fn settings(name: &str, slots: u32, instance: u64) -> Settings {
    Settings {
        info: WorkerRegistration {
            name: name.to_string(),
            slots,
            capabilities: vec![],
            worker_type: "sim".into(),
            manager: None,
            local_environments: Vec::new(),
            running: Vec::new(),
            instance,
            ends_in_ms: None,
            finished: vec![],
        },
        heartbeat_interval: Duration::from_secs(1),
        output_limit: 1 << 20,
        max_tasks_per_runner: 0,
        idle_timeout: weir::net::PEER_IDLE_TIMEOUT,
        local_environments: Vec::new(),
        env_allow: Vec::new(),
        env_recheck: Duration::from_secs(3600),
        total_memory: None,
        cpus: Some(slots),
        no_execute: false,
        signal_grace: Duration::from_secs(1),
        ends_at: None,
    }
}
