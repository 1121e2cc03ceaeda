//! The scheduler's async shell around the core ([`crate::core::scheduler::Scheduler`]).
//!
//! `run` binds the endpoint, writes the access file, opens the journal and starts the actor
//! (`actor.rs`), which owns the core. Connection tasks (`connection.rs`) turn frames into
//! events for it; it drains every pending event, feeds them to the core, and turns the core's
//! actions into frames, journal writes and replies. Batching happens naturally: the busier it
//! is, the more events one round handles and the larger the dispatch frames.

mod actor;
mod connection;
mod event;
pub mod journal;
mod journal_store;
mod leading;
pub mod lock;
mod metrics;
mod policy;
pub mod record;
mod replica;
mod requests;
mod seams;
#[cfg(feature = "http")]
mod web;

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use crate::core::scaling::{ScalingPolicy, Tier};
use crate::net::{self, AccessFile, NetError};
use crate::plugin::PluginHost;

pub use crate::core::scheduler::MAX_ENVIRONMENTS;
pub(crate) use event::{Event, Front};
use leading::{Leading, core_config};
use replica::Replica;
pub use replica::{
    LeadHook, ReplicaSeams, ReplicaSettings, ReplicaStores, parse_peers, seed_elections,
};
pub use seams::Seams;

/// Scheduler settings (the executable's flags).
#[derive(Clone, Debug)]
pub struct Settings {
    /// Address to listen on; port 0 picks a free port (written to the access file).
    pub listen: SocketAddr,
    pub access_file: PathBuf,
    /// Where to write the read-only access file too (`AccessFile::read_only`).
    pub read_access_file: Option<PathBuf>,
    /// A worker silent for this long is lost and its tasks requeued.
    pub heartbeat_timeout: Duration,
    /// Certificate and key (PEM files); generated and kept beside the access file when absent.
    pub cert: Option<(PathBuf, PathBuf)>,
    /// How often the scaling policy decides.
    pub scaling_interval: Duration,
    /// A worker idle for less than this is not stopped.
    pub scale_down_delay: Duration,
    /// Most of a manager's live workers a policy may drain, in per cent (rounded up).
    pub max_drain_percent: u32,
    /// A manager offline this long is forgotten; its remote units' idle workers are told to leave.
    pub manager_forget_after: Duration,
    /// Append every snapshot given to the policy to this file (JSON lines) for `weir policy simulate`.
    pub record_snapshots: Option<PathBuf>,
    /// Keep every accepted task and final result here, and reload them at start.
    pub journal: Option<PathBuf>,
    /// Serve Prometheus metrics at http://ADDR/metrics.
    pub metrics: Option<SocketAddr>,
    /// Serve the live web dashboard at http://ADDR/ (and `/metrics` there too).
    pub dashboard: Option<SocketAddr>,
    /// One of three or five scheduler replicas (`--replica`, `--peers`); `None`: a single
    /// scheduler (with `journal` for its durability).
    pub replica: Option<ReplicaSettings>,
    /// Most open connections per token (clients; workers and managers).
    pub max_connections: usize,
    /// Forget a job (its results and inputs) this long after it finished; `None`: keep it until
    /// `weir forget`.
    pub forget_after: Option<Duration>,
    /// Fail queued tasks that no live worker or worker manager could run for this long; `None`:
    /// they wait (and `weir explain` says why).
    pub unschedulable_timeout: Option<Duration>,
    /// The lease on a worker's tasks, counted from when the worker sent the request the
    /// scheduler answered: a worker whose renewals go unanswered this long stops its tasks, and
    /// the scheduler runs them elsewhere only after that (see [`fence`]).
    pub worker_lease: Duration,
    /// What each live worker adds to the pace asked of idle workers (1 s over
    /// `--idle-beats`; zero: once a lease, whatever the cluster's size), up to a minute
    /// ([`crate::core::lease::idle_pace`]).
    pub idle_pace_per_worker: Duration,
    /// Tasks a worker may hold beyond its slots, waiting there for a free one (0: none).
    pub prefetch: u32,
    /// Times a task cut short by its worker's allocation end is requeued before it fails.
    pub max_walltime_requeues: u32,
}

pub use crate::core::lease::{KILL_MARGIN, fence};

/// The scaling policy (the WASM adapter, or a native one), its tiers (for `weir status`), what
/// `weir policy show` says of it, and the limits a policy set while running gets.
pub struct Scaling {
    pub policy: Box<dyn ScalingPolicy>,
    pub tiers: Vec<Tier>,
    pub info: crate::core::scheduler::PolicyInfo,
    pub limits: crate::plugin::Limits,
    /// The policy's component, so a scheduler replica can make the policy again each time it
    /// comes to lead (`None`: it runs without scaling from its second term on, and says so).
    pub component: Option<Arc<[u8]>>,
}

/// Why the scheduler could not start, or stopped.
#[derive(Debug, thiserror::Error)]
pub enum SchedulerError {
    #[error(transparent)]
    Net(#[from] NetError),
    #[error(transparent)]
    Journal(#[from] journal::JournalError),
    /// Its journal cannot be written any more: it stopped (nothing acknowledged is lost).
    #[error("{0}")]
    Stopped(String),
    /// Another scheduler holds the access file.
    #[error("{0}")]
    Locked(String),
    /// The replica could not start (its log or snapshot, its peers).
    #[error("replica: {0}")]
    Replica(String),
    #[error("cannot start the plugin host: {0}")]
    Plugin(#[from] crate::plugin::PluginError),
    #[error("cannot open {path}: {error}")]
    File {
        path: PathBuf,
        error: std::io::Error,
    },
    #[error("{0}")]
    Certificate(String),
    #[error("i/o: {0}")]
    Io(#[from] std::io::Error),
    /// A flag this build cannot serve (a feature left out).
    #[error("{0}")]
    Unsupported(&'static str),
}

/// A running scheduler: its address and access file.
pub struct Running {
    pub address: String,
    pub access: AccessFile,
    /// Where `/metrics` is served, with `--metrics`.
    pub metrics: Option<SocketAddr>,
    /// The dashboard's URL, with `--dashboard` (with `?token=` when bound beyond loopback).
    pub dashboard: Option<String>,
}

/// Bind, write the access file, and serve until the process ends.
pub async fn run(
    settings: Settings,
    scaling: Option<Scaling>,
    ready: impl FnOnce(&Running),
) -> Result<(), SchedulerError> {
    run_with(settings, scaling, Seams::real(), ready).await
}

/// [`run`] through the given seams (a simulated cluster's clock, journal store and socket).
pub async fn run_with(
    settings: Settings,
    scaling: Option<Scaling>,
    seams: Seams,
    ready: impl FnOnce(&Running),
) -> Result<(), SchedulerError> {
    // One scheduler per access file: a second one would overwrite the first one's address.
    let _access_lock = {
        if let Some(dir) = settings
            .access_file
            .parent()
            .filter(|d| !d.as_os_str().is_empty())
        {
            std::fs::create_dir_all(dir).map_err(|error| SchedulerError::File {
                path: dir.to_path_buf(),
                error,
            })?;
        }
        lock::Lock::take(
            &net::access::lock_path(&settings.access_file),
            "access file",
        )
        .map_err(SchedulerError::Locked)?
    };
    // The journal is checked and locked before anything is served or written.
    let journal = match (seams.journal, &settings.journal) {
        (Some(store), path) => {
            let name = path.clone().unwrap_or_else(|| PathBuf::from("journal"));
            Some(journal::Journal::open_in(&name, store, None)?)
        }
        (None, Some(path)) => Some(journal::Journal::open(path)?),
        (None, None) => None,
    };
    let (cert_pem, key_pem) = certificate(&settings)?;
    let mut server = net::tls::server_config(&cert_pem, &key_pem)?;
    // Longer than the core lets an idle worker be silent (it beats at the pace it is told, up
    // to `longest_idle_pace`, and is lost a heartbeat timeout after), so QUIC's idle timer
    // never fires first, and no keep-alive goes on a healthy idle connection (one goes only
    // once a peer has been silent past that).
    let slowest = crate::core::lease::longest_idle_pace(
        settings.worker_lease,
        settings.heartbeat_timeout,
        settings.idle_pace_per_worker,
    ) + settings.heartbeat_timeout;
    let idle = slowest + settings.heartbeat_timeout;
    server.transport_config(net::server_transport(idle, slowest));
    let endpoint = (seams.udp.listen(settings.listen))
        .and_then(|socket| net::udp::endpoint(&*seams.udp, socket, Some(server)))
        .map_err(|e| NetError::Listen {
            address: settings.listen.to_string(),
            error: e.to_string(),
        })?;
    let local = endpoint.local_addr()?;
    // Tokens are kept across restarts. A file without them (a read-only access file given as
    // --access-file by mistake) is refused: reusing it would make an empty token, which lets
    // anyone in, and overwriting it would cut off everyone who holds the real one.
    let previous = AccessFile::read(&settings.access_file)
        .ok()
        .filter(|a| a.certificate == cert_pem);
    if previous
        .as_ref()
        .is_some_and(|a| a.worker_token.is_empty() || a.client_token.is_empty())
    {
        return Err(NetError::Access(format!(
            "{} has no worker or client token (a read-only access file?): give the scheduler's own access file",
            settings.access_file.display()
        ))
        .into());
    }
    let access = AccessFile {
        address: format!("quic://{local}"),
        certificate: cert_pem,
        worker_token: match &previous {
            Some(p) => p.worker_token.clone(),
            None => net::access::new_token()?,
        },
        client_token: match &previous {
            Some(p) => p.client_token.clone(),
            None => net::access::new_token()?,
        },
        read_token: match previous.as_ref().filter(|p| !p.read_token.is_empty()) {
            Some(p) => p.read_token.clone(),
            None => net::access::new_token()?,
        },
        replicas: settings
            .replica
            .as_ref()
            .map(|r| r.peers.values().cloned().collect())
            .unwrap_or_default(),
    };
    // The read-only file is written before the access file, so that once the access file
    // exists (what `weir` and scripts wait for) the read-only one does too.
    if let Some(path) = &settings.read_access_file {
        access.read_only().write(path)?;
    }
    access.write(&settings.access_file)?;
    tracing::info!(address = %access.address, access_file = %settings.access_file.display(), "scheduler listening");
    #[cfg(not(feature = "http"))]
    if settings.metrics.is_some() || settings.dashboard.is_some() {
        return Err(SchedulerError::Unsupported(
            "--metrics and --dashboard need a scheduler built with the `http` feature (on by default)",
        ));
    }
    let bind = |address: Option<SocketAddr>| async move {
        match address {
            Some(address) => tokio::net::TcpListener::bind(address)
                .await
                .map(Some)
                .map_err(|e| NetError::listen(address, e)),
            None => Ok(None),
        }
    };
    let metrics_listener = bind(settings.metrics).await?;
    let metrics_address = match &metrics_listener {
        Some(listener) => Some(listener.local_addr()?),
        None => None,
    };
    let dashboard_listener = bind(settings.dashboard).await?;
    // Beyond loopback the dashboard asks for the read-only token; its URL carries it.
    let dashboard_token = settings
        .dashboard
        .filter(|a| !a.ip().is_loopback())
        .map(|_| access.read_token.clone());
    let dashboard_url = match &dashboard_listener {
        Some(listener) => {
            let address = listener.local_addr()?;
            Some(match &dashboard_token {
                Some(token) => format!("http://{address}/?token={token}"),
                None => format!("http://{address}/"),
            })
        }
        None => None,
    };
    ready(&Running {
        address: access.address.clone(),
        access: access.clone(),
        metrics: metrics_address,
        dashboard: dashboard_url,
    });

    let host = Arc::new(PluginHost::with_default_cache()?);
    let record = match &settings.record_snapshots {
        Some(path) => Some(
            std::fs::OpenOptions::new()
                .create(true)
                .append(true)
                .open(path)
                .map_err(|error| SchedulerError::File {
                    path: path.clone(),
                    error,
                })?,
        ),
        None => None,
    };
    let (set_front, front) = Front::new();
    #[cfg(feature = "http")]
    {
        if let Some(listener) = metrics_listener {
            tokio::spawn(web::serve_metrics(listener, front.clone()));
        }
        if let Some(listener) = dashboard_listener {
            tokio::spawn(web::serve_dashboard(
                listener,
                front.clone(),
                dashboard_token,
            ));
        }
    }
    #[cfg(not(feature = "http"))]
    let _ = (metrics_listener, dashboard_listener, dashboard_token);
    let config = core_config(
        &settings,
        scaling.as_ref(),
        journal.is_some() || settings.replica.is_some(),
    );
    let mut leading = Leading::new(
        config.clone(),
        scaling,
        host.clone(),
        record,
        seams.clock.clone(),
        seams.policy_inline,
    );
    let access = Arc::new(access);
    // Connections are accepted from now on, whoever leads: a replica's peers talk to it while it
    // starts, and a follower tells the others where the leader is.
    let replica: Arc<std::sync::OnceLock<Arc<Replica>>> = Arc::default();
    let accepting = {
        let (access, front, replica, host) = (access.clone(), front.clone(), replica.clone(), host);
        let endpoint = endpoint.clone();
        let limits = Arc::new(connection::ConnectionLimits::new(settings.max_connections));
        tokio::spawn(async move {
            while let Some(incoming) = endpoint.accept().await {
                let (limits, access, front, host) =
                    (limits.clone(), access.clone(), front.clone(), host.clone());
                let replica = replica.get().cloned();
                // Boxed before the task takes it: the task is as large as what it holds at its
                // start too, and it lives as long as its worker or manager.
                let incoming = Box::new(incoming);
                tokio::spawn(async move {
                    let served =
                        connection::serve(incoming, limits, access, front, replica, host).await;
                    if let Err(error) = served {
                        tracing::debug!(%error, "connection ended");
                    }
                });
            }
        })
    };
    let Some(replica_settings) = &settings.replica else {
        // One scheduler: it leads for its whole life.
        let (actor, inbox, events) = leading.actor(journal);
        set_front.send_replace(Some(events));
        let ended = tokio::select! {
            ended = actor.run(inbox) => ended,
            _ = accepting => return Ok(()),
        };
        // The actor stops only when the journal cannot be written: its last answers (errors) go
        // out, then the scheduler stops rather than run on with state the journal does not have.
        tokio::time::sleep(Duration::from_millis(300)).await;
        endpoint.close(0u32.into(), b"scheduler stopping");
        return match ended {
            Some(error) => Err(SchedulerError::Stopped(error)),
            None => Ok(()),
        };
    };
    let replica_endpoint = {
        let (udp, access, idle) = (
            seams.udp.clone(),
            access.clone(),
            settings.heartbeat_timeout,
        );
        Box::new(move || net::client_endpoint_with(&*udp, &access, idle))
    };
    let started = Replica::start(
        replica_settings,
        config,
        replica_endpoint,
        access.clone(),
        replica::token(&key_pem),
        seams.replica,
    )
    .await
    .map_err(SchedulerError::Replica)?;
    let started = Arc::new(started);
    let _ = replica.set(started.clone());
    tracing::info!(replica = started.id, peers = ?started.peers, "replica started");
    // Not in a simulation: its peers read the access it publishes in memory (and the task,
    // which never writes there, made seeds 4 and 486 part from their first run: something in
    // a replay depends on the tasks a simulated host runs, not found yet; RELIABILITY.md).
    if !started.inline {
        tokio::spawn(
            started
                .clone()
                .keep_access_file((*access).clone(), settings.access_file.clone()),
        );
    }
    leading::terms(&started, &mut leading, &set_front).await
}

/// The certificate and key: from `--cert/--key`, else kept in `scheduler-key.pem` /
/// `scheduler-cert.pem` beside the access file (created on first start), so restarts keep
/// the identity peers pinned.
/// `--cert` and `--key` as PEM text (read as a start reads them; `scheduler --check` too).
pub fn read_certificate(cert: &Path, key: &Path) -> Result<(String, String), SchedulerError> {
    let read = |p: &Path| {
        std::fs::read_to_string(p)
            .map_err(|e| SchedulerError::Certificate(format!("cannot read {}: {e}", p.display())))
    };
    Ok((read(cert)?, read(key)?))
}

fn certificate(settings: &Settings) -> Result<(String, String), SchedulerError> {
    if let Some((cert, key)) = &settings.cert {
        return read_certificate(cert, key);
    }
    let dir = settings
        .access_file
        .parent()
        .map_or_else(|| PathBuf::from("."), PathBuf::from);
    let (cert_path, key_path) = (
        dir.join("scheduler-cert.pem"),
        dir.join("scheduler-key.pem"),
    );
    if let (Ok(cert), Ok(key)) = (
        std::fs::read_to_string(&cert_path),
        std::fs::read_to_string(&key_path),
    ) {
        return Ok((cert, key));
    }
    let (cert, key) = net::tls::generate()?;
    let fail = |e: std::io::Error| {
        SchedulerError::Certificate(format!(
            "cannot write the certificate into {}: {e}",
            dir.display()
        ))
    };
    std::fs::create_dir_all(&dir).map_err(fail)?;
    net::access::write_private(&key_path, key.as_bytes()).map_err(fail)?;
    net::access::write_private(&cert_path, cert.as_bytes()).map_err(fail)?;
    Ok((cert, key))
}
