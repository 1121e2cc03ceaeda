//! `worker`: runs tasks for the scheduler and evaluates environment conditions on its machine.

use std::process::ExitCode;
use std::sync::Arc;
use std::time::Duration;

use anyhow::{Context, Result, bail};
use clap::Parser;
use weir::config::{EnvPluginSpec, parse_amount, parse_capabilities, positive_seconds, seconds};
use weir::plugin::{Limits, PluginHost, World};
use weir::proto::WorkerRegistration;
use weir::worker::Settings;
use weir::worker::env::{FactsSource, LocalEnv};

#[derive(Parser)]
#[command(
    name = "worker",
    version,
    about = "A weir worker: runs tasks, evaluates environment conditions"
)]
struct Args {
    #[command(flatten)]
    common: weir::telemetry::CommonArgs,
    /// Tasks run at once, at least 1 (default: the number of CPUs).
    #[arg(long, value_parser = clap::value_parser!(u32).range(1..))]
    slots: Option<u32>,
    /// Amounts this worker has, consumed while tasks run: `cpu=4,memory=16GB,gpu=1`.
    #[arg(long, default_value = "", value_name = "NAME=AMOUNT,...")]
    capabilities: String,
    /// Name shown in `weir status` (default: HOSTNAME-PID).
    #[arg(long, value_parser = clap::builder::NonEmptyStringValueParser::new())]
    name: Option<String>,
    /// Worker type (set by its worker manager).
    #[arg(long, default_value = "")]
    worker_type: String,
    /// The id of the worker manager that started it.
    #[arg(long, value_name = "ID")]
    manager: Option<String>,
    /// This process's instance id, chosen by the worker manager that starts it (so its reports
    /// of the worker gone name this process, not another of its name); default: random.
    #[arg(long, hide = true, value_parser = clap::value_parser!(u64).range(1..))]
    instance: Option<u64>,
    /// Seconds between heartbeats while the worker holds a task (each renews its lease, at least
    /// four times a lease). Holding none, it beats as often as the scheduler asks (once a lease:
    /// --worker-lease less 1 s), never more often than this.
    #[arg(long, default_value = "1", value_parser = positive_seconds, value_name = "SECONDS")]
    heartbeat_interval: Duration,
    /// Bytes of stdout and of stderr kept per command task.
    #[arg(long, default_value_t = 1 << 20, value_name = "BYTES")]
    output_limit: usize,
    /// Function tasks (`weir` from Python) run in a long-lived runner process per slot; replace
    /// a runner after this many tasks (0: never), as a guard against leaks in what they run.
    #[arg(long, default_value_t = 0, value_name = "TASKS")]
    max_tasks_per_runner: u32,
    /// An environment condition: [NAME=]FILE.wasm[,key=value...] (NAME defaults to the file
    /// stem; `mem_gt` is bundled). Repeatable.
    #[arg(long = "env-plugin", value_name = "[NAME=]FILE.wasm[,k=v...]", value_parser = EnvPluginSpec::parse)]
    env_plugins: Vec<EnvPluginSpec>,
    /// Environment variables conditions may read through `env-var` (all others are hidden).
    #[arg(long = "env-allow", value_name = "NAME")]
    env_allow: Vec<String>,
    /// Memory this worker offers (what conditions see as total memory), when less than the
    /// machine's: e.g. 8GB on a shared machine.
    #[arg(long, value_name = "AMOUNT")]
    total_memory: Option<String>,
    /// CPUs this worker offers (what conditions see as `cpu-count`), in place of the CPUs it
    /// may use: e.g. its share of a machine shared with other workers.
    #[arg(long, value_name = "N", value_parser = clap::value_parser!(u32).range(1..))]
    cpus: Option<u32>,
    /// Seconds between evaluations of every condition (changed verdicts are reported).
    #[arg(long, default_value = "60", value_parser = positive_seconds, value_name = "SECONDS")]
    env_recheck: Duration,
    /// Keep trying to reach the scheduler this many seconds after losing it (it may be
    /// restarting) before giving up.
    #[arg(long, default_value = "120", value_parser = seconds, value_name = "SECONDS")]
    reconnect_timeout: Duration,
    /// Benchmarking only: report every task as succeeded without running it.
    #[arg(long)]
    no_execute: bool,
    /// When a task dies of a signal this worker did not send, wait this long for the worker's
    /// own stop signal before reporting it failed: a cluster engine that stops the worker
    /// (Slurm's scancel, Kubernetes, `kill` of the whole job) signals its tasks too, and then
    /// they are requeued without spending a retry.
    #[arg(long, default_value = "1", value_parser = weir::config::seconds, value_name = "SECONDS")]
    signal_grace: Duration,
    /// This worker's allocation ends in this many seconds (its manager sets it inside a Slurm
    /// job with a time limit): it is given no task whose --timeout would outlive that, and then
    /// it leaves like on SIGTERM (what still runs is requeued, spending no retry).
    #[arg(long, value_parser = weir::config::seconds, value_name = "SECONDS")]
    ends_in: Option<Duration>,
    /// Evaluate the conditions on this machine, print the verdicts, and exit: 0 when every
    /// condition answers match or no-match, 1 when one answers error (e.g. a wrong config).
    #[arg(long)]
    check: bool,
}

fn main() -> ExitCode {
    let args = Args::parse();
    weir::telemetry::init(args.common.log_format);
    // A worker started with SIGCHLD ignored would have its task processes reaped by the
    // kernel, their ids free for others before the worker waits on them: the default again.
    // SAFETY: no thread exists yet, and SIG_DFL runs no code.
    unsafe {
        libc::signal(libc::SIGCHLD, libc::SIG_DFL);
    }
    // Before any thread exists: the guard that kills task processes if this worker is killed.
    if !args.check
        && let Err(error) = weir::worker::guard::start()
    {
        tracing::warn!(%error, "cannot start the task guard: a killed worker may leave task processes");
    }
    weir::telemetry::exit(run(args))
}

fn run(args: Args) -> Result<()> {
    if !args.check && !args.no_execute {
        weir::worker::check_command_support()?;
    }
    let capabilities = parse_capabilities(&args.capabilities)
        .map_err(|e| anyhow::anyhow!("--capabilities: {e}"))?;
    let total_memory = match &args.total_memory {
        Some(text) => Some(
            parse_amount(text)
                .with_context(|| format!("--total-memory `{text}` is not an amount (e.g. 8GB)"))?,
        ),
        None => None,
    };
    let facts = FactsSource {
        worker_type: args.worker_type.clone(),
        capabilities: capabilities.clone(),
        env_allow: args.env_allow.clone(),
        total_memory,
        cpus: args.cpus,
    };
    // Refused alike by `--check` and by a worker that starts.
    for (at, spec) in args.env_plugins.iter().enumerate() {
        if args.env_plugins[..at].iter().any(|e| e.name == spec.name) {
            bail!("--env-plugin: environment `{}` given twice", spec.name);
        }
    }
    if args.check {
        return check(&args, &facts);
    }
    // Check every condition loads before connecting: a typo is an error now, not a verdict later.
    let host = PluginHost::with_default_cache().context("cannot start the plugin host")?;
    let mut local_environments: Vec<LocalEnv> = Vec::new();
    for spec in &args.env_plugins {
        let bytes = spec.bytes()?;
        host.load(&spec.name, &bytes, Some(World::Environment))?;
        local_environments.push(LocalEnv {
            name: spec.name.clone(),
            bytes: Arc::from(bytes),
            config: spec.config.clone(),
        });
    }

    let slots = args
        .slots
        .unwrap_or_else(|| std::thread::available_parallelism().map_or(1, |n| n.get() as u32));
    if slots == 0 {
        bail!("--slots must be at least 1");
    }
    let hostname = weir::plugin::facts::hostname();
    let settings = Settings {
        info: WorkerRegistration {
            name: args
                .name
                .unwrap_or_else(|| format!("{hostname}-{}", std::process::id())),
            slots,
            capabilities,
            worker_type: args.worker_type,
            manager: args.manager,
            local_environments: Vec::new(),
            running: Vec::new(),
            instance: match args.instance {
                Some(instance) => instance,
                None => getrandom::u64().map_err(|e| {
                    anyhow::anyhow!("cannot draw this worker's random instance id: {e}")
                })?,
            },
            ends_in_ms: None,
            finished: vec![],
        },
        heartbeat_interval: args.heartbeat_interval,
        output_limit: args.output_limit,
        max_tasks_per_runner: args.max_tasks_per_runner,
        idle_timeout: weir::net::PEER_IDLE_TIMEOUT,
        local_environments,
        env_allow: args.env_allow,
        env_recheck: args.env_recheck,
        total_memory,
        cpus: args.cpus,
        no_execute: args.no_execute,
        signal_grace: args.signal_grace,
        ends_at: args.ends_in.map(|left| tokio::time::Instant::now() + left),
    };
    // One thread for all of the worker's I/O: what is heavy (wasm runs, component loading,
    // environment checks) is on tokio's blocking pool, so a multi-thread runtime only added
    // wake-ups between threads. Measured (`weir bench`, 2 cores): `true` commands on 2 x 2
    // 1,768-1,860/s -> 1,964-1,968/s, wasm on 2 x 64 17.0k -> 21.4k/s.
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .context("cannot start the async runtime")?;
    let reconnect = args.reconnect_timeout;
    let worker = std::sync::Arc::new(tokio::sync::Mutex::new(weir::worker::Worker::new(
        settings,
        weir::worker::Seams::real(),
    )?));
    let reason = runtime.block_on(weir::net::reconnecting(
        &args.common.access_file,
        reconnect,
        "worker",
        |access| {
            let worker = worker.clone();
            async move { worker.lock().await.session(&access).await }
        },
    ));
    // Stopped, or the scheduler stayed away: no task of this worker outlives it.
    runtime.block_on(async { worker.lock().await.shutdown().await });
    let signal = reason?;
    tracing::info!(reason = %format_args!("stopped by {signal}"), "worker stopped");
    if signal == weir::net::Signal::Dismissed {
        // Its unit (a batch job) ends on this code instead of starting another worker.
        std::process::exit(weir::proto::EXIT_DISMISSED);
    }
    Ok(())
}

/// `worker --check`: load and evaluate each `--env-plugin` against this machine (as the flags
/// shape it), call `setup` where it matches, and print what a worker would report. An `error`
/// verdict (a wrong config, a failed `setup`) fails the check, as a worker would report it and
/// never match; `no-match` is an answer, not a failure.
fn check(args: &Args, facts: &FactsSource) -> Result<()> {
    let host = PluginHost::with_default_cache().context("cannot start the plugin host")?;
    let facts = facts.probe();
    println!(
        "this worker: {} CPUs, {} bytes of memory",
        facts.cpu_count, facts.total_memory_bytes
    );
    let mut failed = Vec::new();
    for spec in &args.env_plugins {
        let loaded = spec.load(&host)?;
        let mut condition = host.condition(&loaded, Limits::default())?;
        let (verdict, values) = match condition.evaluate(&facts, &spec.config) {
            Ok(true) => match condition.setup(&facts, &spec.config) {
                Ok(values) => ("match".to_string(), values),
                Err(error) => (format!("error(setup: {})", error.message()), Vec::new()),
            },
            Ok(false) => ("no-match".to_string(), Vec::new()),
            Err(error) => (format!("error({})", error.message()), Vec::new()),
        };
        if verdict.starts_with("error") {
            failed.push(format!("{}: {verdict}", spec.name));
        }
        if let Err(error) = condition.teardown(&facts) {
            tracing::warn!(%error, "teardown failed");
        }
        println!("{}: {verdict}", spec.name);
        for (key, value) in values {
            println!(
                "  {}={value}",
                weir::worker::env::variable(&spec.name, &key)
            );
        }
        println!(
            "  loaded in {:.1} ms ({})",
            loaded.load_time.as_secs_f64() * 1e3,
            loaded.origin.describe()
        );
    }
    match failed.len() {
        0 => Ok(()),
        n => anyhow::bail!(
            "{n} of {} conditions failed to evaluate: {}",
            args.env_plugins.len(),
            failed.join("; ")
        ),
    }
}
