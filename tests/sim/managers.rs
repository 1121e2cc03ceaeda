//! Managers in the simulation: the real manager shell (`weir::manager`: its sessions, the pure
//! convergence step, the process backend's `Pool`) on a host of its own, starting its workers
//! through the `Spawner` seam as tasks of that host (a worker "process" is the real worker
//! shell on the simulated executor, `workers::run`). Its workers share its host: a partition
//! or a crash of the manager's machine takes them too (what a pool of one machine is).
//!
//! Two invariants only the simulator can judge are checked where they would break, and broken
//! ones go on the timeline ([`Event::Broken`]): a manager never has more workers alive than
//! its cap allows, and a worker told to stop (SIGTERM: here stopped at once) runs nothing —
//! the scaling decisions stop idle workers only.

use std::ffi::OsString;
use std::future::Future;
use std::io;
use std::os::unix::process::ExitStatusExt;
use std::path::{Path, PathBuf};
use std::pin::Pin;
use std::process::ExitStatus;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use tokio::time::Instant;

use weir::clock::Millis;
use weir::manager::spawn::{Process, Spawner};
use weir::manager::{Backend, Instances, Seams, Settings};
use weir::net::{AccessFile, SessionEnd};

use crate::clock::Drift;
use crate::cluster::{Cluster, Error, access};
use crate::net::{Net, mix};
use crate::timeline::{Event, Timeline};
use crate::workers;

impl Cluster {
    /// Add host `host`, running manager `id` (a twin runs one id on a second host): at most
    /// `cap` tasks (`cap / slots` workers of `slots` each), scaled by the scheduler's policy;
    /// its machine's clock (its workers' too) at `rate`.
    pub(crate) fn add_manager(&mut self, host: &str, id: &str, slots: u32, cap: u32, rate: f64) {
        let pool = Pool {
            host: host.to_string(),
            id: id.to_string(),
            slots,
            cap,
            rate,
        };
        let (net, published, timeline) = (
            self.net.clone(),
            self.scheduler.access.clone(),
            self.timeline.clone(),
        );
        self.sim.host(host, move || {
            let (pool, net, published, timeline) = (
                pool.clone(),
                net.clone(),
                published.clone(),
                timeline.clone(),
            );
            async move { run(pool, net, published, timeline).await }
        });
    }
}

/// One manager host.
#[derive(Clone, Debug)]
struct Pool {
    host: String,
    id: String,
    slots: u32,
    cap: u32,
    rate: f64,
}

async fn run(
    pool: Pool,
    net: Net,
    published: Arc<Mutex<Option<AccessFile>>>,
    timeline: Timeline,
) -> Result<(), Error> {
    let Pool {
        host,
        id,
        slots,
        cap,
        rate,
    } = pool;
    let life = net.start(&host);
    let settings = settings(&id, slots, cap);
    let spawner = SimSpawner {
        host: host.clone(),
        life,
        net: net.clone(),
        rate,
        most: settings.max_workers(),
        published: published.clone(),
        timeline,
        alive: Arc::default(),
    };
    let settings = Settings {
        seams: Seams {
            clock: Millis::new(Arc::new(Drift::new(rate))),
            spawner: Arc::new(spawner),
            udp: Arc::new(net.udp(&host, life)),
            instances: Instances::Seeded(net.draw(&format!("{host} instances"), life)),
        },
        ..settings
    };
    let mut backend = Backend::Process(weir::manager::Pool::new(settings));
    loop {
        let access = access(&published).await;
        match weir::manager::run_dynamic(&access, &mut backend).await {
            Ok(SessionEnd::Stopped(signal)) => {
                tracing::info!(%signal, "{host}: stopped");
                return Ok(());
            }
            Ok(end) => tracing::debug!(%end, "{host}: lost the scheduler"),
            Err(error) => tracing::debug!(%error, "{host}: no session"),
        }
        tokio::time::sleep(Duration::from_millis(300)).await;
    }
}

fn settings(id: &str, slots: u32, cap: u32) -> Settings {
    Settings {
        labels: Vec::new(),
        id: id.to_string(),
        worker_type: "sim".into(),
        max_task_concurrency: cap,
        slots,
        capabilities: Vec::new(),
        worker_capabilities_flag: String::new(),
        env_plugin_flags: Vec::new(),
        environments: Vec::new(),
        fixed: None,
        worker_command: PathBuf::from("sim-worker"),
        access_file: PathBuf::from("access.json"),
        heartbeat_interval: Duration::from_secs(1),
        unit: None,
        ends_at: None,
        leave_before: Duration::ZERO,
        usable: None,
        seams: Seams::real(),
    }
}

/// The workers a manager host started: label and where each is in its life.
type Alive = Arc<Mutex<Vec<(String, Arc<Mutex<Life>>)>>>;

/// Starts a manager's workers as tasks of its host.
#[derive(Debug)]
struct SimSpawner {
    host: String,
    /// Its host's life (see `Net::start`): its workers' sockets differ from one to the next.
    life: u64,
    net: Net,
    /// Its machine's clock rate, its workers' too.
    rate: f64,
    /// The manager's cap in workers.
    most: u32,
    published: Arc<Mutex<Option<AccessFile>>>,
    timeline: Timeline,
    alive: Alive,
}

/// The value of `flag` in `args`.
fn arg<'a>(args: &'a [OsString], flag: &str) -> Option<&'a str> {
    let at = args.iter().position(|a| a == flag)?;
    args.get(at + 1)?.to_str()
}

impl Spawner for SimSpawner {
    fn spawn(
        &self,
        _: &Path,
        args: &[OsString],
        _: &[(String, String)],
    ) -> io::Result<Box<dyn Process>> {
        let missing = |flag: &str| io::Error::other(format!("no {flag} in {args:?}"));
        let name = arg(args, "--name").ok_or_else(|| missing("--name"))?;
        let slots = arg(args, "--slots")
            .and_then(|s| s.parse().ok())
            .ok_or_else(|| missing("--slots"))?;
        let instance = arg(args, "--instance")
            .and_then(|s| s.parse().ok())
            .ok_or_else(|| missing("--instance"))?;
        let mut settings = workers::settings(name, slots, instance);
        let manager = arg(args, "--manager").unwrap_or_default();
        // A twin's workers have the names of the other's: told apart by their host.
        let label = match manager == self.host {
            true => name.to_string(),
            false => format!("{name}@{}", self.host),
        };
        settings.info.manager = Some(manager.to_string());
        let life = Arc::new(Mutex::new(Life::default()));
        {
            let mut alive = self
                .alive
                .lock()
                .map_err(|_| io::Error::other("poisoned"))?;
            alive.retain(|(_, life)| life.lock().is_ok_and(|l| l.alive()));
            if alive.len() >= self.most as usize {
                self.timeline.note(Event::Broken(format!(
                    "manager {} starts {name} with {} workers alive ({:?}): above its cap of {}",
                    self.host,
                    alive.len(),
                    alive.iter().map(|(n, _)| n).collect::<Vec<_>>(),
                    self.most
                )));
            }
            alive.push((label.clone(), life.clone()));
        }
        self.timeline
            .note(Event::Manager(format!("{} starts {name}", self.host)));
        let udp = self.net.udp_for(&self.host, &label, self.life);
        let (published, timeline) = (self.published.clone(), self.timeline.clone());
        let ended = life.clone();
        let rate = self.rate;
        let process = label.clone();
        // How long it takes to exit once told to stop (closing its connection, flushing).
        let exiting = Duration::from_millis(mix(&(&label, instance)) % 3_000);
        let task = tokio::spawn(async move {
            // A manager's machine is lost whole (power): its workers' runs die with it.
            let frozen = workers::Frozen::default();
            let _ = workers::run(settings, udp, published, timeline, frozen, rate, label).await;
            if let Ok(mut life) = ended.lock() {
                life.ended = true;
            }
        });
        Ok(Box::new(SimProcess {
            name: process,
            host: self.host.clone(),
            task,
            life,
            exiting,
            timeline: self.timeline.clone(),
        }))
    }
}

/// Where a worker "process" is in its life.
#[derive(Debug, Default)]
struct Life {
    /// Its task ended (by itself, or killed with its handle).
    ended: bool,
    /// Told to stop: it has exited from then on.
    exits_at: Option<Instant>,
}

impl Life {
    fn alive(&self) -> bool {
        !self.ended && self.exits_at.is_none_or(|at| Instant::now() < at)
    }
}

struct SimProcess {
    /// Its label on the timeline (its name, `@host` on a twin's host).
    name: String,
    host: String,
    task: tokio::task::JoinHandle<()>,
    life: Arc<Mutex<Life>>,
    /// How long it takes to exit once told to stop.
    exiting: Duration,
    timeline: Timeline,
}

impl Process for SimProcess {
    fn try_wait(&mut self) -> io::Result<Option<ExitStatus>> {
        let alive = self.life.lock().is_ok_and(|life| life.alive());
        Ok((!alive).then(|| ExitStatus::from_raw(0)))
    }

    fn wait(&mut self) -> Pin<Box<dyn Future<Output = io::Result<ExitStatus>> + Send + '_>> {
        Box::pin(async move {
            let exits_at = self.life.lock().ok().and_then(|life| life.exits_at);
            match exits_at {
                Some(at) => tokio::time::sleep_until(at).await,
                None => {
                    let _ = (&mut self.task).await;
                }
            }
            Ok(ExitStatus::from_raw(0))
        })
    }

    /// SIGTERM: the worker's runs are killed at once (a real worker kills its tasks first), and
    /// the process exits a while later (up to 3 s). Telling a worker with a run to stop breaks
    /// the scaling invariant.
    fn terminate(&mut self) {
        let busy = self.timeline.running_on(&self.name);
        if !busy.is_empty() {
            self.timeline.note(Event::Broken(format!(
                "manager {} stops {} while it runs tasks {busy:?}",
                self.host, self.name
            )));
        }
        self.timeline
            .note(Event::Manager(format!("{} stops {}", self.host, self.name)));
        self.task.abort();
        if let Ok(mut life) = self.life.lock() {
            life.exits_at.get_or_insert(Instant::now() + self.exiting);
        }
    }
}

impl Drop for SimProcess {
    /// Killed with its handle, as `kill_on_drop` does.
    fn drop(&mut self) {
        self.task.abort();
        if let Ok(mut life) = self.life.lock() {
            life.ended = true;
        }
    }
}
