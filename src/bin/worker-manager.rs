//! `worker-manager`: starts and stops the workers of one pool of machines.

use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Duration;

use anyhow::{Context, Result, anyhow, bail};
use clap::Parser;
use weir::config::{EnvPluginSpec, parse_capabilities, positive_seconds, seconds};
use weir::manager::Settings;

#[derive(Parser)]
#[command(
    name = "worker-manager",
    version,
    about = "A weir worker manager: runs as many workers as the scheduler's scaling policy asks (or --fixed N)"
)]
struct Args {
    #[command(flatten)]
    common: weir::telemetry::CommonArgs,
    /// This manager's id (what waterfall_v1 rows name). Default: worker type and process id.
    #[arg(long, value_parser = clap::builder::NonEmptyStringValueParser::new())]
    id: Option<String>,
    /// Worker type of every worker it starts (what waterfall_v2 rows name).
    #[arg(long, default_value = "default")]
    worker_type: String,
    /// Most tasks at once over all its workers (at least 1); `-1` or `unlimited` for no limit.
    /// Not with --fixed (a fixed pool runs its N workers).
    #[arg(
        long,
        value_name = "N",
        allow_negative_numbers = true,
        conflicts_with = "fixed"
    )]
    max_task_concurrency: Option<String>,
    /// Task slots of each worker.
    #[arg(long, default_value_t = 1)]
    slots: u32,
    /// Labels of this manager, shown in `weir status` and handed to the scaling policy
    /// (weir:plugin@0.2.0), which reads them as it likes: `cost=3,zone=a` (repeatable). Keys:
    /// letters, digits, `_`, `-`, `.`; values: any text without `,`.
    #[arg(long = "label", value_name = "KEY=VALUE,...")]
    labels: Vec<String>,
    /// Amounts each worker has: `cpu=4,memory=16GB,gpu=1`.
    #[arg(long, default_value = "", value_name = "NAME=AMOUNT,...")]
    capabilities: String,
    /// Environment condition for its workers: [NAME=]FILE.wasm[,key=value...] (repeatable).
    #[arg(long = "env-plugin", value_name = "[NAME=]FILE.wasm[,k=v...]")]
    env_plugins: Vec<String>,
    /// A fixed pool: keep exactly N workers of this worker type alive (a worker that dies is
    /// replaced, with a backoff), registered with the scheduler as a fixed pool; not scaled.
    #[arg(long, value_name = "N")]
    fixed: Option<u32>,
    /// How to get workers: `process` (start them here), `slurm` (one batch job per unit of
    /// --unit-size workers, submitted with sbatch, tracked by job id, cancelled with scancel) or
    /// `command` (run --start-cmd / --stop-cmd to add and remove units through another engine,
    /// e.g. Kubernetes).
    #[arg(long, value_enum, default_value = "process")]
    backend: BackendKind,
    /// Slurm backend: the partition of each job (`sbatch --partition`).
    #[arg(long, help_heading = "Slurm backend")]
    partition: Option<String>,
    /// Slurm backend: walltime of each job in minutes (`sbatch --time`). Its workers take no
    /// task whose --timeout would outlive the job, and leave before it ends. Without it, the
    /// walltime is read from an `--sbatch-arg` time, else the partition's DefaultTime or MaxTime
    /// (`scontrol show partition`): the policy never scales this manager for tasks longer than
    /// the walltime less --leave-before.
    #[arg(long, value_name = "MINUTES", help_heading = "Slurm backend")]
    time_limit: Option<u32>,
    /// Slurm backend: `sbatch --account`.
    #[arg(long, help_heading = "Slurm backend")]
    account: Option<String>,
    /// Slurm backend: `sbatch --qos`.
    #[arg(long, help_heading = "Slurm backend")]
    qos: Option<String>,
    /// Slurm backend: one more sbatch argument, as given (repeatable): `--sbatch-arg=--mem=8G`.
    #[arg(
        long = "sbatch-arg",
        value_name = "ARG",
        allow_hyphen_values = true,
        help_heading = "Slurm backend"
    )]
    sbatch_args: Vec<String>,
    /// Slurm backend: where each job's own log goes (`sbatch --output`; `%j` is the job id).
    #[arg(
        long,
        default_value = "/dev/null",
        value_name = "PATH",
        help_heading = "Slurm backend"
    )]
    job_output: String,
    /// Slurm backend: the `worker-manager` each job runs (default: this executable, which must
    /// be at the same path on the compute nodes, as must the access file and --worker-command).
    #[arg(long, value_name = "PATH", help_heading = "Slurm backend")]
    job_manager_command: Option<PathBuf>,
    /// Command backend: adds one unit. Placeholders: {count} {worker_type} {manager_id}
    /// {address} {access_file} {unit}. The unit must run
    /// `worker-manager --fixed {count} --id {manager_id} --unit {unit}` where its workers run.
    #[arg(long, value_name = "TEMPLATE", required_if_eq("backend", "command"))]
    start_cmd: Option<String>,
    /// Command backend: removes one unit (same placeholders).
    #[arg(long, value_name = "TEMPLATE", required_if_eq("backend", "command"))]
    stop_cmd: Option<String>,
    /// Slurm and command backends: workers per unit (per batch job). A Slurm job asks for one
    /// node and one task of unit-size x (the `cpu` capability, else --slots) CPUs
    /// (`--cpus-per-task`), and unit-size x the `memory` capability (`--mem`) when given; an
    /// --sbatch-arg of the same kind (`--cpus-per-task`/`-c`, `--ntasks`/`-n`, `--mem...`,
    /// `--nodes`/`-N`) replaces each.
    #[arg(long, default_value_t = 1)]
    unit_size: u32,
    /// Slurm and command backends: most units waiting to start at once (jobs in Slurm's queue,
    /// not running yet), so a long queue holds a few jobs rather than the whole demand. After a
    /// failure, one at a time until a unit comes up.
    #[arg(long, default_value_t = weir::manager::command::DEFAULT_MAX_PENDING, value_name = "N")]
    max_pending: usize,
    /// Slurm backend: what a SIGTERM or SIGINT of this manager does to its jobs. `leave`
    /// (default): running jobs run on, their workers keep their tasks, and the next manager
    /// with this --id adopts them (a service restart loses no work; if none comes back, the
    /// scheduler dismisses their idle workers after its --manager-forget-after and the jobs
    /// end); jobs still queued hold no work and are cancelled. `cancel`:
    /// scancel every job (their running tasks are requeued). The process and command backends
    /// always stop their workers.
    #[arg(long, value_enum, value_name = "WHAT", help_heading = "Slurm backend")]
    on_stop: Option<OnStop>,
    /// Slurm and command backends: seconds a unit may take to register (its queue wait
    /// included) before it is cancelled as failed; the manager then backs off with no capacity,
    /// so the waterfall spills to the next tier.
    #[arg(long, default_value = "120", value_parser = positive_seconds, value_name = "SECONDS")]
    unit_timeout: Duration,
    /// Fixed mode inside a unit: name workers ID-UNIT-N; the manager that started the unit
    /// reports them, so this one does not register.
    #[arg(long, requires = "fixed")]
    unit: Option<String>,
    /// Fixed mode inside a unit: how long the allocation has left, in seconds or Slurm's
    /// `[D-]HH:MM:SS` (what `squeue -o %L` prints; `UNLIMITED` or empty for no end). Its
    /// workers take no task whose --timeout would outlive it, and leave before the end.
    #[arg(long, requires = "unit", value_name = "TIME")]
    time_left: Option<String>,
    /// Seconds before the end of a unit's allocation (its walltime) that its workers stop
    /// taking tasks and leave, requeueing what still runs without spending a retry.
    #[arg(long, default_value = "30", value_parser = seconds, value_name = "SECONDS")]
    leave_before: Duration,
    /// The worker executable (default: `worker` beside this one).
    #[arg(long, value_name = "PATH")]
    worker_command: Option<PathBuf>,
    /// Seconds between the manager's checks of its workers (replacing any that died). It
    /// reports to the scheduler at a check when what it reports changed, and otherwise at
    /// least as often as the scheduler asks (half its --heartbeat-timeout in a small cluster,
    /// up to 30 s in a large one), and takes the scheduler for gone once it has heard nothing
    /// for that pace plus 2.5 s (at least 5 s).
    #[arg(long, default_value = "0.5", value_parser = positive_seconds, value_name = "SECONDS")]
    heartbeat_interval: Duration,
    /// Keep trying to reach the scheduler this many seconds after losing it (it may be
    /// restarting) before giving up.
    #[arg(long, default_value = "120", value_parser = seconds, value_name = "SECONDS")]
    reconnect_timeout: Duration,
}

fn main() -> ExitCode {
    let args = Args::parse();
    weir::telemetry::init(args.common.log_format);
    weir::telemetry::exit(run(args))
}

#[derive(Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
enum OnStop {
    Leave,
    Cancel,
}

#[derive(Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
enum BackendKind {
    Process,
    Slurm,
    Command,
}

fn parse_cap(text: &str) -> Result<u32> {
    if text == "-1" || text.eq_ignore_ascii_case("unlimited") {
        return Ok(u32::MAX);
    }
    match text.parse::<u32>() {
        Ok(0) => bail!("--max-task-concurrency 0 would never run a task: give at least 1, or -1"),
        Ok(cap) => Ok(cap),
        Err(_) => bail!("--max-task-concurrency `{text}`: a whole number, -1 or unlimited"),
    }
}

/// `--time-left`: seconds, or Slurm's `[D-]HH:MM:SS`; `UNLIMITED`, `NOT_SET` or empty: no end.
/// How long each worker of this Slurm manager's jobs may run tasks: the jobs' walltime (from
/// `--time-limit`, an `--sbatch-arg` time or the partition, see `slurm::walltime`) less
/// `--leave-before`; `None` when unlimited or not known (said in the log: the policy then
/// scales this manager for tasks of any timeout, and its workers turn away those that do not
/// fit).
fn usable_per_worker(args: &Args) -> Result<Option<Duration>> {
    use weir::manager::slurm::walltime::{self, Walltime};
    let query = weir::manager::slurm::SlurmBackend {
        partition: args.partition.clone(),
        time_limit: args.time_limit,
        sbatch_args: args.sbatch_args.clone(),
        ..Default::default()
    };
    match walltime::of_jobs(&query).map_err(|error| anyhow!(error))? {
        Walltime::Limit(limit, from) => {
            if args.leave_before >= limit {
                bail!(
                    "--leave-before {:?} leaves no time in a walltime of {limit:?} ({from})",
                    args.leave_before
                );
            }
            tracing::info!(walltime = ?limit, from, "each job's walltime");
            Ok(Some(limit - args.leave_before))
        }
        Walltime::Unlimited => Ok(None),
        Walltime::Unknown(why) => {
            tracing::warn!(
                %why,
                "the jobs' walltime is not known: tasks of any timeout are scaled here (give \
                 --time-limit)"
            );
            Ok(None)
        }
    }
}

fn time_left(text: &str) -> Result<Option<Duration>> {
    let text = text.trim();
    if text.is_empty() || text == "UNLIMITED" || text == "NOT_SET" {
        return Ok(None);
    }
    if let Ok(seconds) = text.parse::<f64>()
        && let Ok(left) = Duration::try_from_secs_f64(seconds)
    {
        return Ok(Some(left));
    }
    match weir::manager::slurm::parse_time_left(text) {
        Some(left) => Ok(Some(left)),
        None => bail!("--time-left `{text}`: seconds, or [DAYS-]HOURS:MINUTES:SECONDS"),
    }
}

fn run(args: Args) -> Result<()> {
    let capabilities = parse_capabilities(&args.capabilities)
        .map_err(|e| anyhow::anyhow!("--capabilities: {e}"))?;
    // Declared to the scheduler when registering (name, component hash, config), so tasks may
    // ask for them before this manager has any worker; each is checked to be a condition now.
    let host =
        weir::plugin::PluginHost::with_default_cache().context("cannot start the plugin host")?;
    let mut environments: Vec<weir::proto::EnvironmentDef> = Vec::new();
    for env in &args.env_plugins {
        let spec = EnvPluginSpec::parse(env).map_err(|e| anyhow::anyhow!("--env-plugin {e}"))?;
        if environments.iter().any(|d| d.name == spec.name) {
            bail!("--env-plugin: environment `{}` given twice", spec.name);
        }
        let bytes = spec.bytes()?;
        let component = host
            .validate(&spec.name, &bytes, weir::plugin::World::Environment)
            .with_context(|| format!("--env-plugin {env}"))?;
        environments.push(weir::proto::EnvironmentDef {
            name: spec.name,
            component,
            config: spec.config,
        });
    }
    if args.slots == 0 {
        bail!("--slots must be at least 1");
    }
    let usable = match (args.backend, args.unit.is_none()) {
        (BackendKind::Slurm, true) => usable_per_worker(&args)?,
        _ => None,
    };
    let worker_command = match args.worker_command {
        Some(path) => path,
        None => std::env::current_exe()
            .context("cannot find this executable")?
            .with_file_name("worker"),
    };
    let max_task_concurrency = match (&args.max_task_concurrency, args.fixed) {
        (Some(text), _) => parse_cap(text)?,
        (None, Some(_)) => u32::MAX,
        (None, None) => bail!(
            "--max-task-concurrency is required (or --fixed N): how many tasks this pool may run"
        ),
    };
    if args.on_stop == Some(OnStop::Leave) && args.backend != BackendKind::Slurm {
        bail!(
            "--on-stop leave is for --backend slurm: only its jobs can be adopted by the next manager"
        );
    }
    if args.max_pending == 0 {
        bail!("--max-pending must be at least 1");
    }
    if args.backend == BackendKind::Slurm {
        // The id names its jobs (`weir-ID`): a restarted manager finds them by it.
        match &args.id {
            None => bail!(
                "--backend slurm needs --id: its batch jobs are named after it, and a restarted manager adopts them by that name"
            ),
            Some(id)
                if id.is_empty()
                    || !id
                        .chars()
                        .all(|c| c.is_ascii_alphanumeric() || matches!(c, '.' | '_' | '-')) =>
            {
                bail!("--id `{id}`: letters, digits, `.`, `_` and `-` only (it names Slurm jobs)")
            }
            Some(_) => {}
        }
    }
    let settings = Settings {
        labels: weir::config::parse_labels(&args.labels).context("--label")?,
        id: args
            .id
            .unwrap_or_else(|| format!("{}-{}", args.worker_type, std::process::id())),
        worker_type: args.worker_type,
        max_task_concurrency,
        slots: args.slots,
        capabilities,
        worker_capabilities_flag: args.capabilities,
        env_plugin_flags: args.env_plugins,
        environments,
        fixed: args.fixed,
        worker_command,
        // A batch job starts elsewhere: give it paths that do not depend on a directory.
        access_file: if args.backend == BackendKind::Slurm {
            std::path::absolute(&args.common.access_file).context("--access-file")?
        } else {
            args.common.access_file.clone()
        },
        heartbeat_interval: args.heartbeat_interval,
        unit: args.unit.clone(),
        ends_at: match &args.time_left {
            Some(text) => time_left(text)?
                .map(|left| tokio::time::Instant::now() + left.saturating_sub(args.leave_before)),
            None => None,
        },
        leave_before: args.leave_before,
        // A Slurm job's workers run tasks for its walltime less --leave-before.
        usable,
        seams: weir::manager::Seams::real(),
    };
    if matches!(args.backend, BackendKind::Slurm | BackendKind::Command)
        && args.fixed.is_none()
        && settings.max_workers() < args.unit_size
    {
        bail!(
            "--max-task-concurrency {} with --slots {} allows {} worker(s): less than one unit of --unit-size {}",
            settings.max_task_concurrency,
            settings.slots,
            settings.max_workers(),
            args.unit_size
        );
    }
    let runtime = tokio::runtime::Runtime::new().context("cannot start the async runtime")?;
    if args.fixed.is_some() && args.unit.is_some() {
        // Inside a command-backend unit: the manager that started the unit reports its workers.
        let signal =
            runtime.block_on(weir::manager::run_unit(weir::manager::Pool::new(settings)))?;
        tracing::info!(reason = %format_args!("stopped by {signal}"), "worker manager stopped");
        return Ok(());
    }
    let reconnect = args.reconnect_timeout;
    let signal = runtime.block_on(async {
        let backend = match args.backend {
            BackendKind::Process => {
                weir::manager::Backend::Process(weir::manager::Pool::new(settings))
            }
            BackendKind::Slurm => {
                if args.unit_size == 0 {
                    bail!("--unit-size must be at least 1");
                }
                let manager_command = match args.job_manager_command.clone() {
                    Some(path) => path,
                    None => std::env::current_exe().context("cannot find this executable")?,
                };
                let slurm = weir::manager::slurm::SlurmBackend {
                    partition: args.partition.clone(),
                    time_limit: args.time_limit,
                    account: args.account.clone(),
                    qos: args.qos.clone(),
                    sbatch_args: args.sbatch_args.clone(),
                    unit_size: args.unit_size,
                    unit_timeout: args.unit_timeout,
                    job_output: args.job_output.clone(),
                    manager_command,
                    max_pending: args.max_pending,
                    leave_on_stop: args.on_stop != Some(OnStop::Cancel),
                };
                weir::manager::Backend::Slurm(weir::manager::slurm::Jobs::new(settings, slurm))
            }
            BackendKind::Command => {
                if args.unit_size == 0 {
                    bail!("--unit-size must be at least 1");
                }
                let address = weir::net::AccessFile::read(&args.common.access_file)
                    .map(|a| a.address)
                    .unwrap_or_default();
                let command = weir::manager::command::CommandBackend {
                    start: args.start_cmd.clone().unwrap_or_default(),
                    stop: args.stop_cmd.clone().unwrap_or_default(),
                    unit_size: args.unit_size,
                    unit_timeout: args.unit_timeout,
                    max_pending: args.max_pending,
                    address,
                };
                weir::manager::Backend::Command(weir::manager::command::Units::new(
                    settings, command,
                ))
            }
        };
        weir::manager::run(&args.common.access_file, reconnect, backend)
            .await
            .map_err(anyhow::Error::from)
    })?;
    tracing::info!(reason = %format_args!("stopped by {signal}"), "worker manager stopped");
    Ok(())
}
