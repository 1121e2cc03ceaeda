//! One simulated cluster: a turmoil world seeded from the run's seed, the real scheduler as a
//! host (its journal a `MemoryStore` the simulator keeps across restarts), and clients.

use std::future::Future;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use weir::client::Client;
use weir::core::scheduler::PolicyInfo;
use weir::net::AccessFile;
use weir::proto::{NewGroup, TaskKind, TaskSpec};
use weir::scheduler::journal::MemoryStore;
use weir::scheduler::{Scaling, Seams, Settings};

use crate::clock::Drift;
use crate::net::{Net, SimUdp};
use crate::timeline::Timeline;

pub(crate) const SCHEDULER: &str = "scheduler";
const PORT: u16 = 4433;

pub(crate) type Error = Box<dyn std::error::Error>;

/// What a simulated client hands back when it finishes.
pub(crate) struct Slot<T>(Arc<Mutex<Option<T>>>);

impl<T> Slot<T> {
    pub(crate) fn take(&self) -> Option<T> {
        self.0.lock().ok().and_then(|mut v| v.take())
    }
}

/// What the simulator keeps of the scheduler across its crashes: its journal's disk, and the
/// access it last published (read by clients and workers as the access file would be).
#[derive(Clone, Default)]
pub(crate) struct SchedulerState {
    pub(crate) disk: Arc<Mutex<MemoryStore>>,
    pub(crate) access: Arc<Mutex<Option<AccessFile>>>,
}

/// How the scheduler runs.
#[derive(Clone, Debug)]
pub(crate) struct Setup {
    /// Scale managers with the native waterfall of this content (manager ids).
    pub(crate) policy: Option<String>,
    /// Its clock's rate (see `clock::Drift`).
    pub(crate) rate: f64,
    /// What each sync of its journal takes (a slow disk).
    pub(crate) sync_latency: Duration,
}

impl Default for Setup {
    fn default() -> Setup {
        Setup {
            policy: None,
            rate: 1.0,
            sync_latency: Duration::ZERO,
        }
    }
}

pub(crate) struct Cluster {
    pub(crate) sim: turmoil::Sim<'static>,
    pub(crate) seed: u64,
    pub(crate) net: Net,
    pub(crate) scheduler: SchedulerState,
    pub(crate) timeline: Timeline,
    /// The static workers' freeze flags, by host (see `workers::SimExecute`).
    pub(crate) frozen: std::collections::BTreeMap<String, crate::workers::Frozen>,
    _dir: tempfile::TempDir,
}

impl Cluster {
    /// A world for `seed` that runs at most `limit` of simulated time, with the scheduler up.
    pub(crate) fn new(seed: u64, limit: Duration) -> Cluster {
        let mut builder = turmoil::Builder::new();
        builder
            .rng_seed(seed)
            .simulation_duration(limit)
            .tick_duration(Duration::from_millis(1))
            .enable_tokio_io();
        Cluster::with(seed, builder, Setup::default())
    }

    /// A world from `builder` (seeded with `seed`), with the scheduler up as `setup` says.
    pub(crate) fn with(seed: u64, builder: turmoil::Builder, setup: Setup) -> Cluster {
        let mut sim = builder.build();
        let dir = tempfile::tempdir().expect("a temporary directory");
        let scheduler = SchedulerState::default();
        let state = scheduler.clone();
        let files = dir.path().to_path_buf();
        let net = Net::new(seed);
        let udp = net.clone();
        sim.host(SCHEDULER, move || {
            let (state, files, setup) = (state.clone(), files.clone(), setup.clone());
            let udp = udp.udp(SCHEDULER, udp.start(SCHEDULER));
            async move { run_scheduler(udp, files, state, setup).await }
        });
        Cluster {
            sim,
            seed,
            net,
            scheduler,
            timeline: Timeline::default(),
            frozen: Default::default(),
            _dir: dir,
        }
    }

    /// A client host `name` that connects to the scheduler (once it published its access) and
    /// runs `body`; what `body` returns lands in the slot.
    pub(crate) fn client<T, F, Fut>(&mut self, name: &str, body: F) -> Slot<T>
    where
        T: 'static,
        F: FnOnce(Client) -> Fut + 'static,
        Fut: Future<Output = Result<T, Error>> + 'static,
    {
        let slot = Arc::new(Mutex::new(None));
        let out = slot.clone();
        let access = self.scheduler.access.clone();
        let udp = self.net.udp(name, 0);
        self.sim.client(name, async move {
            let client = connect(&udp, &access).await?;
            let value = body(client).await?;
            if let Ok(mut out) = out.lock() {
                *out = Some(value);
            }
            Ok(())
        });
        Slot(slot)
    }

    /// Run until every client finished (an error names the seed).
    pub(crate) fn run(&mut self) {
        if let Err(error) = self.sim.run() {
            panic!(
                "seed {}: the simulation failed at {:?}: {error}",
                self.seed,
                self.sim.elapsed()
            );
        }
    }
}

/// The access the scheduler published, once it did (waiting in simulated time).
pub(crate) async fn access(published: &Mutex<Option<AccessFile>>) -> AccessFile {
    loop {
        if let Some(access) = published.lock().ok().and_then(|a| a.clone()) {
            return access;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
}

/// A client connection, retried while the scheduler is unreachable.
pub(crate) async fn connect(
    udp: &SimUdp,
    published: &Mutex<Option<AccessFile>>,
) -> Result<Client, Error> {
    loop {
        match connect_once(udp, published).await {
            Ok(client) => return Ok(client),
            Err(error) => tracing::debug!(%error, "client: scheduler unreachable"),
        }
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
}

/// One attempt to connect, once the scheduler published its access.
pub(crate) async fn connect_once(
    udp: &SimUdp,
    published: &Mutex<Option<AccessFile>>,
) -> Result<Client, weir::net::NetError> {
    let access = access(published).await;
    Client::connect_with(udp, &access).await
}

async fn run_scheduler(
    udp: SimUdp,
    files: PathBuf,
    state: SchedulerState,
    setup: Setup,
) -> Result<(), Error> {
    let listen = SocketAddr::new(turmoil::lookup(SCHEDULER), PORT);
    let store = state.disk.lock().map_err(|_| "disk poisoned")?.clone();
    store.slow_syncs(setup.sync_latency);
    let seams = Seams {
        clock: Arc::new(Drift::new(setup.rate)),
        journal: Some(Box::new(store)),
        udp: Arc::new(udp),
        policy_inline: true,
        replica: None,
    };
    let scaling = (setup.policy.as_deref()).map(scaling).transpose()?;
    let published = state.access.clone();
    weir::scheduler::run_with(settings(listen, files), scaling, seams, move |running| {
        if let Ok(mut access) = published.lock() {
            *access = Some(running.access.clone());
        }
    })
    .await?;
    Ok(())
}

/// The native waterfall (manager ids) with `content`, as the scheduler's policy.
fn scaling(content: &str) -> Result<Scaling, Error> {
    let policy = weir_waterfall::Policy::parse(weir_waterfall::Flavor::ManagerId, content)?;
    Ok(Scaling {
        tiers: policy.tiers(),
        policy: Box::new(policy),
        info: PolicyInfo {
            name: "native waterfall".into(),
            content: content.into(),
            ..PolicyInfo::default()
        },
        limits: weir::plugin::Limits::default(),
        component: None,
    })
}

fn settings(listen: SocketAddr, files: PathBuf) -> Settings {
    Settings {
        listen,
        access_file: files.join("access.json"),
        heartbeat_timeout: Duration::from_secs(5),
        cert: None,
        scaling_interval: Duration::from_secs(1),
        // Short, so a run of a minute or two scales managers down as well as up.
        scale_down_delay: Duration::from_secs(5),
        manager_forget_after: Duration::from_secs(60),
        record_snapshots: None,
        journal: Some(files.join("journal")),
        metrics: None,
        dashboard: None,
        replica: None,
        max_connections: 100,
        forget_after: None,
        unschedulable_timeout: None,
        // The default: longer than the heartbeat timeout, so a lost worker's tasks wait for
        // the fence (a partition of more than 5 s makes the scheduler judge it lost first).
        worker_lease: Duration::from_secs(10),
        prefetch: 0,
        max_walltime_requeues: 3,
    }
}

/// Simulated tasks, one per input (a command no real process runs: the simulation's executor
/// does, see `workers::input`).
pub(crate) fn groups(inputs: Vec<Vec<u8>>) -> Vec<NewGroup> {
    let spec = TaskSpec {
        kind: TaskKind::Command {
            argv: vec!["sim-task".into()],
            env: vec![],
        },
        capabilities: vec![],
        environments: vec![],
        priority: 0,
        timeout_ms: 0,
        retries: 3,
        input: vec![],
    };
    vec![NewGroup {
        spec,
        count: u32::try_from(inputs.len()).unwrap_or(u32::MAX),
        inputs,
    }]
}
