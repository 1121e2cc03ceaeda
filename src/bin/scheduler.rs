//! `scheduler`: serves workers and clients over QUIC and holds every task.

use std::net::SocketAddr;
use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Duration;

use anyhow::{Context, Result};
use clap::Parser;
use weir::config::{Engine, PolicySpec, idle_beats, positive_seconds, seconds};
use weir::core::scheduler::PolicyInfo;
use weir::plugin::{Limits, PluginHost};
use weir::scheduler::Settings;

#[derive(Parser)]
#[command(
    name = "scheduler",
    version,
    about = "The weir scheduler: holds tasks, matches them to workers, runs the scaling policy"
)]
struct Args {
    /// Address to listen on (`quic://HOST:PORT` or HOST:PORT; port 0 picks a free one).
    /// Default: 127.0.0.1:7788, or with `--replica`, this replica's address in `--peers`.
    #[arg(long, value_name = "ADDRESS")]
    listen: Option<String>,
    /// Run as replica ID of three or five schedulers (`--peers` names them all): they keep
    /// one replicated journal (Raft), one of them leads and serves, and when it is lost another
    /// takes over within seconds, with every acknowledged request. See docs/replicas.md.
    #[arg(long, value_name = "ID", requires = "peers")]
    replica: Option<u64>,
    /// Every replica: `ID=quic://HOST:PORT,...` (this one's included; the same list on each).
    /// Give every replica the same certificate, key and tokens: start one, then copy its
    /// access file and `scheduler-*.pem` beside the others' access files.
    #[arg(long, value_name = "ID=quic://HOST:PORT,...", requires = "replica")]
    peers: Option<String>,
    /// This replica joins a running cluster: it waits to be added (`weir replicas add ID
    /// ADDRESS` on the cluster) and never forms one. `--peers` names it and the replicas it knows.
    #[arg(long, requires = "replica")]
    join: bool,
    /// Replicas: the election timeout T. The leader sends heartbeats every T/3; a follower that
    /// heard none for 1.25T–1.5T stands for election, so a lost leader is replaced about 1.5T
    /// after it was lost. Raise it on slow links between replicas: one message (up to a 48 MiB
    /// submission) must reach a follower within T/3.
    #[arg(long, default_value = "1", value_parser = positive_seconds, value_name = "SECONDS")]
    election_timeout: Duration,
    #[command(flatten)]
    common: weir::telemetry::CommonArgs,
    /// A worker or manager silent this long (seconds) is lost and its running tasks are
    /// requeued. A worker with tasks beats every second; a manager reports on change and at
    /// least every half of this timeout in a small cluster (slower in a large one, see
    /// --idle-beats; it is offline after its pace plus half of this). A worker
    /// holding no task beats once a lease (--worker-lease less 1 s, or three quarters of a
    /// lease of 4 s or less) and is lost once silent for that plus this timeout; a stop on
    /// purpose (SIGTERM) is seen at once, as the peer closes its connection, and a worker its
    /// manager saw exit is lost at the manager's next heartbeat. Silence (kill -9 of a machine,
    /// SIGSTOP, a cut cable) is what this timeout is for.
    #[arg(long, default_value = "5", value_parser = positive_seconds, value_name = "SECONDS")]
    heartbeat_timeout: Duration,
    /// TLS certificate (PEM); default: a self-signed one created beside the access file.
    #[arg(long, requires = "key", value_name = "FILE")]
    cert: Option<PathBuf>,
    /// TLS private key (PEM) for --cert.
    #[arg(long, requires = "cert", value_name = "FILE")]
    key: Option<PathBuf>,
    /// Scaling policy engine: `waterfall_v1`, `waterfall_v2` (bundled) or a .wasm component of
    /// the `policy` world. Default: the bundled waterfall_v2 with one tier, `1, default`
    /// (every manager of worker type `default`).
    #[arg(long, value_name = "ENGINE|FILE.wasm", conflicts_with = "config")]
    policy: Option<String>,
    /// Policy content: the rows themselves, or @FILE.
    #[arg(long, value_name = "TEXT|@FILE", conflicts_with = "config")]
    policy_content: Option<String>,
    /// TOML with `policy_engine_type` and `policy_content` (the reference form).
    #[arg(long, value_name = "FILE.toml")]
    config: Option<PathBuf>,
    /// Deadline of one policy call, in milliseconds.
    #[arg(long, default_value_t = 1000, value_name = "MS")]
    policy_deadline_ms: u64,
    /// Seconds between scaling decisions; tasks that arrive and no live worker can take call the
    /// policy at once (at most once per tenth of this).
    #[arg(long, default_value = "1", value_parser = positive_seconds, value_name = "SECONDS")]
    scaling_interval: Duration,
    /// Seconds a worker must be idle before the policy may stop it (unless the policy drained
    /// it first).
    #[arg(long, default_value = "30", value_parser = seconds, value_name = "SECONDS")]
    scale_down_delay: Duration,
    /// Most of a manager's live workers a policy may drain at once, in per cent, rounded up
    /// (a disruption budget with Karpenter's 10 % default): a drained worker takes no new
    /// tasks, and the policy stops it once idle. 0: no policy may drain.
    #[arg(long, default_value_t = 10, value_parser = clap::value_parser!(u32).range(0..=100), value_name = "PERCENT")]
    max_drain_percent: u32,
    /// Seconds a worker manager may be offline before it is forgotten: the workers it started
    /// through a cluster engine (a Slurm job, a pod) are then told to leave once idle, so their
    /// allocations end instead of idling until the walltime.
    #[arg(long, default_value = "60", value_parser = positive_seconds, value_name = "SECONDS")]
    manager_forget_after: Duration,
    /// Append every snapshot the policy sees to FILE (JSON lines), for `weir policy simulate`.
    #[arg(long, value_name = "FILE")]
    record_snapshots: Option<PathBuf>,
    /// Journal every accepted task and final result to FILE and reload them on start, so a
    /// restarted scheduler loses nothing. With `--replica`: this replica's Raft log (default
    /// `replica-ID.log` beside the access file; its snapshot is `FILE.snapshot`).
    #[arg(long, value_name = "FILE")]
    journal: Option<PathBuf>,
    /// Serve Prometheus metrics at http://ADDR/metrics (e.g. 127.0.0.1:9464; port 0 picks one).
    #[arg(long, value_name = "ADDR")]
    metrics: Option<SocketAddr>,
    /// Serve a live web dashboard at http://ADDR/ (e.g. 127.0.0.1:8080): managers by tier,
    /// workers and tasks over the last 15 minutes, the policy's decisions and errors,
    /// environment verdicts, jobs, `explain`; also `/metrics` and JSON under `/api/`. Read-only.
    /// Beyond loopback it asks for the read-only token: the URL printed at start carries it.
    #[arg(long, value_name = "ADDR")]
    dashboard: Option<SocketAddr>,
    /// Also write a read-only access file to FILE: with it `weir` (and the Python client) can
    /// ask for status, jobs, explain, managers, workers, environments and the policy, but not
    /// submit, cancel, forget, fetch results or change anything ("forbidden"); the dashboard's
    /// job page, which that token also opens, shows the end of each failed task's stderr.
    /// Share it with those who watch.
    #[arg(long, value_name = "FILE")]
    read_access_file: Option<PathBuf>,
    /// Most open connections with each token (clients; read-only clients; workers and
    /// managers); more are refused.
    #[arg(long, default_value_t = 4096)]
    max_connections: usize,
    /// Forget each job (free its results and inputs; `weir results` then says so) this many
    /// seconds after its last task finished. Default: keep every job until `weir forget JOB`.
    #[arg(long, value_parser = seconds, value_name = "SECONDS")]
    forget_after: Option<Duration>,
    /// Fail queued tasks that no live worker and no worker manager could run (capabilities no
    /// one has, environments no one matches) once that has lasted this many seconds (after a
    /// restart on a journal, counted once the previous run's workers could be back: 21.3 s on
    /// the default lease). Default: they wait for a worker that qualifies, and `weir explain
    /// TASK` says why.
    #[arg(long, value_parser = seconds, value_name = "SECONDS")]
    unschedulable_timeout: Option<Duration>,
    /// The lease on a worker's running tasks. Each heartbeat of a worker asks for it, and only
    /// the scheduler's answer renews it, for this long from when the worker sent that
    /// heartbeat: a worker whose answers stop (a partition, a link too slow, the scheduler gone)
    /// keeps running its tasks this long, then kills them and starts none (a reconnecting
    /// worker, or a restarted scheduler, re-adopts them meanwhile). A worker lost without a
    /// word has its tasks run elsewhere once the lease plus 1/32 of it plus 1 s has passed
    /// since the scheduler last heard from it, so no task ever runs twice at once, whatever the
    /// network does. Unfinished tasks in the journal wait that long at start for their workers
    /// to come back.
    #[arg(long, default_value = "10", value_parser = positive_seconds, value_name = "SECONDS")]
    worker_lease: Duration,
    /// How many beats a second, in all, the scheduler asks of its idle peers: workers that hold
    /// no task and managers with nothing new to report. In a small cluster idle workers beat
    /// once a lease (9 s at the default lease) and hold it, and managers report every half
    /// --heartbeat-timeout; past N × that many peers (workers and managers) both are asked to
    /// beat less often, workers up to once a minute and managers every 30 s, so an idle
    /// cluster costs the scheduler no more as it grows (at 500: every 22 s with 10,000 workers
    /// under 1,000 managers). An idle worker whose lease ran out between beats starts a task
    /// one round trip after its hand-over (it asks for a lease first); a dead idle worker no
    /// manager reports is taken for lost after its pace plus --heartbeat-timeout, a silent
    /// manager for offline after its pace plus half of it (a manager judges the scheduler's
    /// silence alike). Fractions allowed (0.1: 10 s more a peer); 0: no budget, whatever the
    /// size.
    #[arg(long = "idle-beats", default_value = "500", value_parser = idle_beats, value_name = "N")]
    idle_pace_per_worker: Duration,
    /// Tasks each worker may hold beyond its slots, waiting there for a free slot: it starts
    /// the next at once when one ends, and reports and receives tasks in batches instead of one
    /// round trip each (the throughput of short tasks on workers of few slots). Only tasks of a
    /// submission whose last task ran (hand-over to report) within a second are held ahead, only
    /// once every worker that can run them has its slots full, and none on a worker that could
    /// run a waiting task not known to be that quick (it gets the next free slot). A worker
    /// with a free slot has held tasks taken back for it; a held task its worker never started
    /// does not count as an attempt. 0: a worker holds only what it runs.
    #[arg(long, default_value_t = 256, value_name = "TASKS", value_parser = clap::value_parser!(u32).range(0..=1024))]
    prefetch: u32,
    /// A task whose run is cut short by the end of its worker's allocation (a Slurm walltime,
    /// `worker --ends-in`) is requeued without spending a retry this many times; cut short once
    /// more, it fails saying so. (A task with a --timeout never goes to a worker whose
    /// allocation ends sooner; one without runs anywhere, and may never fit.)
    #[arg(long, default_value_t = weir::core::tasks::MAX_WALLTIME_REQUEUES, value_name = "N")]
    max_walltime_requeues: u32,
    /// Threads that serve the connections and the actor. 1, the default, costs the least per
    /// task: every message goes through the one actor anyway, and a second thread adds a
    /// cross-thread wake-up to most of them. Since idle peers cost less (BENCHMARKS.md, "What
    /// an idle peer costs"), 2 threads no longer help even at 10,000 simulated workers: they
    /// register in 6-9 s either way, and the idle CPU is higher on two. The policy, journal
    /// syncs and the epoch ticker have threads of their own either way.
    #[arg(long, default_value_t = 1, value_name = "N", value_parser = clap::value_parser!(u16).range(1..=256))]
    threads: u16,
    /// Load and check the policy, print its tiers, and exit.
    #[arg(long)]
    check: bool,
}

fn main() -> ExitCode {
    let args = Args::parse();
    weir::telemetry::init(args.common.log_format);
    weir::telemetry::exit(run(args))
}

fn run(args: Args) -> Result<()> {
    if let Some(read) = &args.read_access_file {
        let access = &args.common.access_file;
        // Compared by their directories (which exist, or will) and names: `./a` is `a`, on a
        // first run too (when neither file exists yet).
        let place = |path: &std::path::Path| {
            let dir = (path.parent().filter(|d| !d.as_os_str().is_empty()))
                .unwrap_or(std::path::Path::new("."));
            let dir = std::fs::canonicalize(dir).unwrap_or_else(|_| dir.to_path_buf());
            (dir, path.file_name().map(ToOwned::to_owned))
        };
        let same = read == access || place(read) == place(access);
        if same {
            anyhow::bail!(
                "--read-access-file {} is the access file itself: give it a path of its own",
                read.display()
            );
        }
    }
    // --policy-content alone means the bundled waterfall_v2; no policy flag at all, its default
    // tier `1, default` (every manager of worker type `default`).
    let policy = match (&args.policy, &args.policy_content) {
        (None, None) => None,
        (policy, _) => Some(policy.as_deref().unwrap_or("waterfall_v2")),
    };
    let spec = PolicySpec::from_flags(
        args.config.as_deref(),
        policy,
        args.policy_content.as_deref(),
        "--policy-content",
    )?
    .unwrap_or_else(|| PolicySpec {
        engine: Engine::Bundled("waterfall_v2"),
        content: "1, default\n".into(),
    });
    let host = PluginHost::with_default_cache().context("cannot start the plugin host")?;
    let limits = Limits {
        deadline: Duration::from_millis(args.policy_deadline_ms),
        ..Limits::default()
    };
    let mut policy = spec.instantiate(&host, limits.clone())?;
    let tiers = policy.tiers()?;
    if args.check {
        check_flags(&args)?;
        println!("policy {}: {} tier(s)", spec.engine.name(), tiers.len());
        for tier in &tiers {
            println!(
                "  priority {:>3}: {}",
                tier.priority,
                tier.describe_members()
            );
        }
        return Ok(());
    }
    tracing::info!(engine = %spec.engine.name(), tiers = tiers.len(), "scaling policy loaded");
    let replica = match (args.replica, &args.peers) {
        (Some(id), Some(peers)) => {
            let peers =
                weir::scheduler::parse_peers(peers).map_err(|e| anyhow::anyhow!("--peers: {e}"))?;
            if !peers.contains_key(&id) {
                anyhow::bail!("--peers does not name replica {id} (this one)");
            }
            if peers.len() < 3 {
                tracing::warn!(
                    replicas = peers.len(),
                    "fewer than three replicas: losing one stops the cluster"
                );
            }
            let log = args.journal.clone().unwrap_or_else(|| {
                let dir = args
                    .common
                    .access_file
                    .parent()
                    .map(PathBuf::from)
                    .unwrap_or_default();
                dir.join(format!("replica-{id}.log"))
            });
            Some(weir::scheduler::ReplicaSettings {
                id,
                peers,
                log,
                election: args.election_timeout,
                join: args.join,
            })
        }
        _ => None,
    };
    let listen = match (&args.listen, &replica) {
        (Some(listen), _) => listen.clone(),
        (None, Some(replica)) => replica.peers[&replica.id].clone(),
        (None, None) => "quic://127.0.0.1:7788".to_string(),
    };
    let listen: SocketAddr = weir::net::parse_address(&listen)?;
    let settings = Settings {
        listen,
        access_file: args.common.access_file,
        read_access_file: args.read_access_file,
        heartbeat_timeout: args.heartbeat_timeout,
        cert: args.cert.zip(args.key),
        scaling_interval: args.scaling_interval,
        scale_down_delay: args.scale_down_delay,
        max_drain_percent: args.max_drain_percent,
        manager_forget_after: args.manager_forget_after,
        record_snapshots: args.record_snapshots,
        journal: args.journal.filter(|_| replica.is_none()),
        replica,
        metrics: args.metrics,
        dashboard: args.dashboard,
        max_connections: args.max_connections,
        forget_after: args.forget_after,
        unschedulable_timeout: args.unschedulable_timeout,
        worker_lease: args.worker_lease,
        idle_pace_per_worker: args.idle_pace_per_worker,
        prefetch: args.prefetch,
        max_walltime_requeues: args.max_walltime_requeues,
    };
    let component: std::sync::Arc<[u8]> = spec.component()?.into();
    let scaling = weir::scheduler::Scaling {
        policy: Box::new(policy),
        tiers,
        info: PolicyInfo {
            name: spec.engine.name(),
            component: weir::core::component_hash(&component),
            content: spec.content.clone(),
            bytes: None,
        },
        limits,
        component: Some(component),
    };
    // One thread by default, as HyperQueue's server: every message goes through the one actor
    // anyway, and a second thread only added cross-thread wake-ups (about a fifth of the
    // scheduler's CPU per task with short tasks; BENCHMARKS.md). `--threads` for large clusters.
    let mut runtime = match args.threads {
        1 => tokio::runtime::Builder::new_current_thread(),
        n => {
            let mut builder = tokio::runtime::Builder::new_multi_thread();
            builder.worker_threads(usize::from(n));
            builder
        }
    };
    let runtime = runtime
        .enable_all()
        .build()
        .context("cannot start the async runtime")?;
    runtime.block_on(weir::scheduler::run(settings, Some(scaling), |running| {
        // The first line of stdout (and the second, with --metrics), in one write: scripts and
        // tests wait for it.
        let mut lines = format!("scheduler listening on {}", running.address);
        if let Some(metrics) = running.metrics {
            lines.push_str(&format!("\nmetrics on http://{metrics}/metrics"));
        }
        if let Some(url) = &running.dashboard {
            lines.push_str(&format!("\ndashboard on {url}"));
        }
        println!("{lines}");
    }))?;
    Ok(())
}

/// What `--check` checks of the flags beyond the policy, as a start would refuse them: the
/// listen address, a journal that is a directory, a certificate and key that do not load.
fn check_flags(args: &Args) -> Result<()> {
    if let Some(listen) = &args.listen {
        weir::net::parse_address(listen).with_context(|| format!("--listen {listen}"))?;
    }
    if let Some(journal) = &args.journal
        && journal.is_dir()
    {
        anyhow::bail!(
            "--journal {}: a directory, not a journal file",
            journal.display()
        );
    }
    if let (Some(cert), Some(key)) = (&args.cert, &args.key) {
        let (cert, key) = weir::scheduler::read_certificate(cert, key)?;
        weir::net::tls::server_config(&cert, &key)
            .context("--cert and --key do not make a certificate and its key")?;
    }
    Ok(())
}
