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
pub mod lock;
mod metrics;
mod policy;
pub mod record;
mod requests;
mod seams;
#[cfg(feature = "http")]
mod web;

use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use tokio::sync::mpsc;

use crate::core::scaling::{ScalingPolicy, Tier};
use crate::core::scheduler::{Action, Config, Input, Scheduler};
use crate::core::tasks;
use crate::net::{self, AccessFile, NetError};
use crate::plugin::PluginHost;

pub use crate::core::scheduler::MAX_ENVIRONMENTS;
pub(crate) use event::Event;
pub use seams::Seams;

/// Scheduler settings (the executable's flags).
#[derive(Clone, Debug)]
pub struct Settings {
    /// Address to listen on; port 0 picks a free port (written to the access file).
    pub listen: SocketAddr,
    pub access_file: PathBuf,
    /// A worker silent for this long is lost and its tasks requeued.
    pub heartbeat_timeout: Duration,
    /// Certificate and key (PEM files); generated and kept beside the access file when absent.
    pub cert: Option<(PathBuf, PathBuf)>,
    /// How often the scaling policy decides.
    pub scaling_interval: Duration,
    /// A worker idle for less than this is not stopped.
    pub scale_down_delay: Duration,
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
    server.transport_config(net::transport(settings.heartbeat_timeout));
    let endpoint = (seams.udp.listen(settings.listen))
        .and_then(|socket| net::udp::endpoint(&*seams.udp, socket, Some(server)))
        .map_err(|e| NetError::Listen {
            address: settings.listen.to_string(),
            error: e.to_string(),
        })?;
    let local = endpoint.local_addr()?;
    let previous = AccessFile::read(&settings.access_file)
        .ok()
        .filter(|a| a.certificate == cert_pem);
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
    };
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
    // Beyond loopback the dashboard asks for the client token; its URL carries it.
    let dashboard_token = settings
        .dashboard
        .filter(|a| !a.ip().is_loopback())
        .map(|_| access.client_token.clone());
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
    let (events, inbox) = mpsc::unbounded_channel();
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
    #[cfg(feature = "http")]
    {
        if let Some(listener) = metrics_listener {
            tokio::spawn(web::serve_metrics(listener, events.clone()));
        }
        if let Some(listener) = dashboard_listener {
            tokio::spawn(web::serve_dashboard(
                listener,
                events.clone(),
                dashboard_token,
            ));
        }
    }
    #[cfg(not(feature = "http"))]
    let _ = (metrics_listener, dashboard_listener, dashboard_token);
    let tiers = scaling
        .as_ref()
        .map(|s| s.tiers.clone())
        .unwrap_or_default();
    let policy_info = scaling.as_ref().map(|s| s.info.clone()).unwrap_or_default();
    let mut scaling = scaling;
    let millis = |d: Duration| u64::try_from(d.as_millis()).unwrap_or(u64::MAX);
    let core = Scheduler::new(Config {
        tasks: tasks::Config {
            heartbeat_timeout_ms: millis(settings.heartbeat_timeout),
            forget_after_ms: settings.forget_after.map(millis),
            fence_ms: millis(fence(settings.worker_lease)),
            prefetch: settings.prefetch,
            max_walltime_requeues: settings.max_walltime_requeues,
            ..tasks::Config::default()
        },
        manager_timeout_ms: millis(settings.heartbeat_timeout),
        manager_forget_ms: millis(settings.manager_forget_after),
        lease_ms: millis(settings.worker_lease),
        // At least twice a second, whatever the heartbeat timeout: fenced tasks are released,
        // forgotten jobs dropped and unschedulable ones failed on this tick.
        tick_ms: millis(settings.heartbeat_timeout / 4).clamp(50, 500),
        scaling_ms: scaling
            .as_ref()
            .map(|_| millis(settings.scaling_interval).max(1)),
        scale_down_delay_ms: millis(settings.scale_down_delay),
        unschedulable_timeout_ms: settings.unschedulable_timeout.map(millis),
        policy: policy_info,
        tiers,
        journal: journal.is_some(),
        // Smaller journals are not worth rewriting while running (at start they are).
        compact_min_bytes: 1 << 20,
    });
    let mut actor = actor::Actor::new(core, seams.clock.clone(), None, record, None);
    if let Some((journal, records)) = journal {
        actor.journal = Some(journal);
        actor.replay(records);
    }
    // A policy set while running before the restart runs again, from the first tick on.
    if let (Some(scaling), Some(Action::SwapPolicy { client, policy, .. })) =
        (&mut scaling, actor.core.restored_policy())
    {
        let result = policy::try_policy(&host, &policy, None, scaling.limits.clone()).map(
            |(restored, tiers)| {
                scaling.policy = restored;
                tiers
            },
        );
        let now = actor.now();
        let swapped = Input::PolicySwapped {
            client,
            policy,
            result,
        };
        actor.core.handle(now, swapped);
    }
    if let Some(scaling) = scaling {
        actor.trials = Some(policy::Trials {
            host: host.clone(),
            limits: scaling.limits,
            events: events.clone(),
        });
        actor.policy = Some(policy::PolicyRunner::new(
            scaling.policy,
            events.clone(),
            seams.policy_inline,
        ));
    }
    let mut actor = tokio::spawn(actor.run(inbox));
    let access = Arc::new(access);
    let limits = Arc::new(connection::ConnectionLimits::new(settings.max_connections));
    loop {
        let incoming = tokio::select! {
            incoming = endpoint.accept() => match incoming {
                Some(incoming) => incoming,
                None => return Ok(()),
            },
            ended = &mut actor => {
                // The actor stops only when the journal cannot be written: its last answers
                // (errors) go out, then the scheduler stops rather than run on with state the
                // journal does not have.
                tokio::time::sleep(Duration::from_millis(300)).await;
                endpoint.close(0u32.into(), b"scheduler stopping");
                return match ended {
                    Ok(Some(error)) => Err(SchedulerError::Stopped(error)),
                    _ => Ok(()),
                };
            }
        };
        let events = events.clone();
        let access = access.clone();
        let host = host.clone();
        let limits = limits.clone();
        tokio::spawn(async move {
            if let Err(error) = connection::serve(incoming, limits, access, events, host).await {
                tracing::debug!(%error, "connection ended");
            }
        });
    }
}

/// The certificate and key: from `--cert/--key`, else kept in `scheduler-key.pem` /
/// `scheduler-cert.pem` beside the access file (created on first start), so restarts keep
/// the identity peers pinned.
fn certificate(settings: &Settings) -> Result<(String, String), SchedulerError> {
    let read = |p: &PathBuf| {
        std::fs::read_to_string(p)
            .map_err(|e| SchedulerError::Certificate(format!("cannot read {}: {e}", p.display())))
    };
    if let Some((cert, key)) = &settings.cert {
        return Ok((read(cert)?, read(key)?));
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
