//! `weir`: the client CLI. This file holds the command line and sends each command to its
//! module in `commands/`; `output/` prints what they produce, `connect.rs` reaches the scheduler.

mod commands;
mod connect;
mod output;

use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Duration;

use anyhow::{Context, Result};
use clap::{Parser, Subcommand};
use weir::client::Client;
use weir::config::{positive_seconds, seconds};
use weir::plugin::PluginHost;

use commands::{bench, demo, env, explain, jobs, local, plugin, policy, results, status, submit};
use commands::{managers, wait, workers};
use connect::Reach;
use output::{Mode, Output};

#[derive(Parser)]
#[command(
    name = "weir",
    version,
    about = "weir: a task scheduler with WebAssembly scaling policies and environment conditions"
)]
struct Cli {
    /// How results are printed: `cli` for people, `json` for programs (exactly one JSON value;
    /// errors as {"error": ...}), `quiet` for scripts (nothing but errors and, from `submit`, the job
    /// id; the exit code says the rest).
    #[arg(long, global = true, value_enum, default_value_t = Mode::Cli)]
    output: Mode,
    /// The access file the scheduler wrote.
    #[arg(
        long,
        global = true,
        env = "WEIR_ACCESS_FILE",
        default_value = ".weir/access.json",
        value_name = "FILE"
    )]
    access_file: PathBuf,
    /// When the scheduler does not answer but its access file is there (it may be restarting),
    /// keep trying this many seconds before giving up (0: try once). The first attempt is
    /// always whole, up to 5 s (a dead scheduler answers nothing), so a timeout under that
    /// ends with it.
    #[arg(
        long,
        global = true,
        default_value = "60",
        value_parser = seconds,
        value_name = "SECONDS"
    )]
    reconnect_timeout: Duration,
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Submit tasks: a command (after --) or a wasm component, N times or once per input line.
    Submit(submit::SubmitArgs),
    /// Wait for a job to finish, showing progress. Exit 0 when every task succeeded, 1 when
    /// some failed or were canceled, 3 when a queued task can run nowhere: no live worker could ever run it and
    /// no worker manager could start one that would, for 2 s (the reason is printed, as `weir
    /// explain` gives it; the tasks stay queued, so `weir wait` again waits on).
    Wait { job: u64 },
    /// Print the results of a job's finished tasks.
    Results { job: u64 },
    /// Cancel a job's unfinished tasks.
    Cancel { job: u64 },
    /// Free finished jobs' results and inputs on the scheduler (`scheduler --forget-after` does it
    /// by age). Results of a forgotten job are gone; its id is never reused.
    Forget {
        #[arg(required_unless_present = "finished", conflicts_with = "finished")]
        jobs: Vec<u64>,
        /// Forget every finished job.
        #[arg(long)]
        finished: bool,
    },
    /// The jobs the scheduler holds, newest first, with their task counts.
    Jobs {
        /// How many to show.
        #[arg(long, default_value_t = 50, value_name = "N")]
        last: u32,
    },
    /// Workers and task counts.
    Status,
    /// Worker managers and their units (Slurm jobs, command-backend units, or each worker
    /// process of a local manager): one line per manager; `units ID` for one manager's units.
    ///
    /// Columns: manager id, worker type, backend (`process`, `command`, `slurm`, or `fixed N`
    /// for a fixed pool), online, workers (registered live, and started but not registered
    /// yet), units by state (pending, running, completing, ended: the last 16 that ended).
    Managers {
        #[command(subcommand)]
        command: Option<ManagersCommand>,
    },
    /// Scheduler replicas (`scheduler --replica`), as the leader sees them: which one leads, its
    /// term, and how far each replica's log is (lag: entries behind the leader's); `add` and
    /// `remove` change the set while the cluster runs.
    Replicas {
        #[command(subcommand)]
        command: Option<ReplicasCommand>,
    },
    /// Workers: `wait N` until N are registered (scripts never sleep).
    #[command(subcommand)]
    Workers(WorkersCommand),
    /// Environments: conditions workers evaluate; tasks ask for them with `submit --env NAME`.
    #[command(subcommand)]
    Env(env::EnvCommand),
    /// Why a task is queued, running or finished: what each worker lacks for it.
    Explain { task: u64 },
    /// A live view of managers, workers, tasks and environments (`q` quits).
    Top {
        /// Seconds between refreshes (at least 0.05).
        #[arg(long, default_value = "1", value_parser = positive_seconds, value_name = "SECONDS")]
        refresh: Duration,
    },
    /// Start a scheduler and workers on this machine, run a batch of command tasks and a batch of
    /// wasm tasks, check every result, and shut down. Needs no flags and no files.
    Local(local::LocalArgs),
    /// Measure throughput, per-task cost, plugin cost and reaction time on this machine
    /// (build with --release); `--markdown FILE` writes the tables.
    Bench(bench::BenchArgs),
    /// Inspect plugin components.
    #[command(subcommand)]
    Plugin(PluginCommand),
    /// Scaling policies: check, test and simulate one; set and show the running one.
    #[command(subcommand)]
    Policy(PolicyCommand),
    /// Run the bundled waterfall_v2 engine over a simulated burst of tasks and evaluate the
    /// bundled mem_gt condition on this machine. Needs no flags and no files.
    Demo,
}

#[derive(Subcommand)]
enum WorkersCommand {
    /// Wait until at least N live workers are registered (that match an environment, with
    /// --env), then print how many there are; fails after --timeout saying how many came.
    Wait {
        /// How many workers to wait for.
        count: u32,
        /// Count only workers whose verdict on this environment is `match`.
        #[arg(long, value_name = "NAME")]
        env: Option<String>,
        /// Give up after this many seconds.
        #[arg(long, default_value = "60", value_parser = positive_seconds, value_name = "SECONDS")]
        timeout: Duration,
    },
}

#[derive(Subcommand)]
enum ReplicasCommand {
    /// Add replica ID at ADDRESS (`quic://HOST:PORT`), started with `scheduler --replica ID
    /// --join`: it learns the log, then votes; returns once it votes (or fails, not added, if
    /// it does not catch up within a minute). Needs the scheduler's key (run it where a
    /// replica runs).
    Add {
        id: u64,
        address: String,
        /// The scheduler's private key; default: `scheduler-key.pem` beside the access file.
        #[arg(long, value_name = "FILE")]
        key: Option<PathBuf>,
    },
    /// Remove replica ID (stop its process after). Needs the scheduler's key, as `add`.
    Remove {
        id: u64,
        #[arg(long, value_name = "FILE")]
        key: Option<PathBuf>,
    },
}

/// The replicas' token from the scheduler's key (`--key`, or beside the access file).
fn replica_token(access_file: &std::path::Path, key: Option<&PathBuf>) -> Result<String> {
    let path = key
        .cloned()
        .unwrap_or_else(|| weir::net::access::key_beside(access_file));
    let pem = std::fs::read_to_string(&path).map_err(|e| {
        anyhow::anyhow!(
            "cannot read the scheduler's key {} ({e}): a membership change needs it (run it \
             where a replica runs, or give --key)",
            path.display()
        )
    })?;
    Ok(weir::net::access::replica_token(&pem))
}

#[derive(Subcommand)]
enum ManagersCommand {
    /// One manager's units, one line each.
    ///
    /// Columns: unit (Slurm job id, command-backend unit id,
    /// or worker name), state (pending with Slurm's reason, e.g. `JobHeldUser`; running;
    /// completing: being stopped, with why; ended, with why), age (since it was started or
    /// adopted; for an ended unit, how long it lived), workers (registered of its workers),
    /// time left (of its Slurm walltime), ended (how long ago).
    Units {
        /// The manager's id.
        id: String,
    },
}

#[derive(Subcommand)]
enum PluginCommand {
    /// Which world a component implements, its imports and exports, size and load time.
    Inspect {
        /// A .wasm component file.
        file: PathBuf,
    },
}

#[derive(Subcommand)]
enum PolicyCommand {
    /// Parse policy content with the real engine and print its tiers, or the line-numbered error.
    Check(policy::PolicyArgs),
    /// Replay a JSON array of snapshots through a policy and print each decision; or, with
    /// --workload, run the policy in a closed loop with a modelled cluster and print the
    /// worker-seconds each manager and worker type cost.
    Simulate {
        #[command(flatten)]
        policy: policy::PolicyArgs,
        /// JSON file: an array of snapshots (the `weir:plugin/scaling` snapshot record), or JSON
        /// lines as `scheduler --record-snapshots` writes them.
        #[arg(
            long,
            required_unless_present = "workload",
            conflicts_with = "workload"
        )]
        trace: Option<PathBuf>,
        /// TOML file: managers, task arrivals, start time and scale-down delay for a modelled
        /// cluster the policy scales (its decisions change what it sees next). The model is
        /// described in docs/policies.md; examples/policies/consolidate/workload.toml is one.
        #[arg(long, value_name = "FILE.toml")]
        workload: Option<PathBuf>,
        /// With --workload: write the snapshots the run made (JSON lines, a trace --trace
        /// replays).
        #[arg(long, value_name = "FILE", requires = "workload")]
        record: Option<PathBuf>,
        /// Also draw each manager's desired and live workers and the queued tasks over the
        /// trace's snapshots into this SVG file.
        #[arg(long, value_name = "FILE.svg")]
        plot: Option<PathBuf>,
    },
    /// Replace the scheduler's running policy without a restart: it is created and run once on
    /// the last snapshot first; on any error the old one stays and this says why. The change is
    /// journaled (a restart keeps it).
    Set(policy::PolicyArgs),
    /// The scheduler's running policy: engine, component hash, content, tiers, last decisions
    /// and last error.
    Show,
    /// Run scenario files through a policy: each scenario is a snapshot with what the decisions
    /// must be (desired exactly or in a range, workers stopped or not, words in the reason), and
    /// every decision must also keep the rules the scheduler enforces (caps, no busy worker
    /// stopped, offline managers untouched). One line per scenario; exit 1 if any fails.
    Test {
        #[command(flatten)]
        policy: policy::PolicyArgs,
        /// Scenario files: TOML (`[[scenario]]` tables) or JSON (`{"scenario": [...]}`);
        /// `examples/policies/scenarios/` has the waterfall's.
        #[arg(required = true, value_name = "FILE")]
        scenarios: Vec<PathBuf>,
    },
}

fn main() -> ExitCode {
    // Like other command-line tools: `weir results 1 | head` ends quietly when the pipe closes.
    // SAFETY: restoring the default disposition of SIGPIPE before any thread starts.
    unsafe {
        libc::signal(libc::SIGPIPE, libc::SIG_DFL);
    }
    weir::telemetry::init_logging();
    let cli = match Cli::try_parse() {
        Ok(cli) => cli,
        // Asked for JSON: even a command line that does not parse answers with one JSON value.
        Err(error) if json_asked() && error.use_stderr() => {
            // The whole message but the usage lines: a first line alone may end in a colon
            // ("the following required arguments were not provided:") before what it names.
            let text = error.to_string();
            let message: Vec<&str> = (text.lines())
                .map(str::trim)
                .take_while(|line| !line.starts_with("Usage:") && !line.starts_with("For more"))
                .filter(|line| !line.is_empty())
                .collect();
            let message = message.join(" ");
            let message = message.strip_prefix("error: ").unwrap_or(&message);
            output::print_json_error(message);
            return ExitCode::from(2);
        }
        Err(error) => error.exit(),
    };
    let output = cli.output.output();
    match run(&cli, output.as_ref()) {
        Ok(()) => ExitCode::SUCCESS,
        Err(error) => {
            output.error(&error);
            match error.downcast_ref::<output::Unrunnable>() {
                Some(_) => ExitCode::from(commands::wait::EXIT_UNRUNNABLE),
                None => ExitCode::FAILURE,
            }
        }
    }
}

/// Whether the raw command line asks for `--output json` (for errors before it is parsed).
/// Read as the OS gives it (`args()` panics on an argument that is not UTF-8, such as a task's
/// own argument after `--`).
fn json_asked() -> bool {
    let args: Vec<std::ffi::OsString> = std::env::args_os().collect();
    args.windows(2)
        .any(|pair| pair[0] == "--output" && pair[1] == "json")
        || args.iter().any(|a| a == "--output=json")
}

fn run(cli: &Cli, output: &dyn Output) -> Result<()> {
    let reach = Reach {
        access_file: cli.access_file.clone(),
        timeout: cli.reconnect_timeout,
    };
    match &cli.command {
        Command::Plugin(PluginCommand::Inspect { file }) => plugin::inspect(&host()?, file, output),
        Command::Policy(PolicyCommand::Check(args)) => policy::check(&host()?, args, output),
        Command::Policy(PolicyCommand::Simulate {
            policy,
            trace: Some(trace),
            plot,
            ..
        }) => policy::simulate(&host()?, policy, trace, plot.as_deref(), output),
        Command::Policy(PolicyCommand::Simulate {
            policy,
            workload,
            record,
            plot,
            ..
        }) => {
            let workload = workload
                .as_deref()
                .context("give --trace FILE or --workload FILE.toml")?;
            policy::simulate_workload(
                &host()?,
                policy,
                workload,
                record.as_deref(),
                plot.as_deref(),
                output,
            )
        }
        Command::Policy(PolicyCommand::Set(args)) => connected(&reach, output, async |client| {
            policy::set(client, args, output).await
        }),
        Command::Policy(PolicyCommand::Show) => connected(&reach, output, async |client| {
            output.policy(&client.show_policy().await?);
            Ok(())
        }),
        Command::Policy(PolicyCommand::Test { policy, scenarios }) => {
            policy::test(&host()?, policy, scenarios, output)
        }
        Command::Demo => demo::run(&host()?, output),
        Command::Local(args) => block_on(local::run(args, output)),
        Command::Bench(_) if cli.output == output::Mode::Json => anyhow::bail!(
            "weir bench prints markdown tables, not JSON (--markdown FILE writes them to a file)"
        ),
        Command::Bench(args) => block_on(bench::run(args)),
        Command::Submit(args) => connected(&reach, output, async |client| {
            submit::run(client, args, output, &reach).await
        }),
        Command::Wait { job } => connected(&reach, output, async |client| {
            wait::run(client, *job, output, &reach).await
        }),
        Command::Results { job } => connected(&reach, output, async |client| {
            results::run(client, *job, output).await
        }),
        Command::Cancel { job } => connected(&reach, output, async |client| {
            jobs::cancel(client, *job, output).await
        }),
        Command::Forget {
            jobs: ids,
            finished,
        } => match finished {
            true => connected(&reach, output, async |client| {
                jobs::forget_finished(client, output).await
            }),
            false => connected(&reach, output, async |client| {
                jobs::forget(client, ids, output).await
            }),
        },
        Command::Jobs { last } => connected(&reach, output, async |client| {
            jobs::list(client, *last, output).await
        }),
        Command::Status => connected(&reach, output, async |client| {
            status::run(client, output).await
        }),
        Command::Managers { command } => connected(&reach, output, async |client| {
            let units_of = command
                .as_ref()
                .map(|ManagersCommand::Units { id }| id.as_str());
            managers::run(client, units_of, output).await
        }),
        Command::Replicas { command } => connected(&reach, output, async |client| {
            let replicas = match command {
                None => client.replicas().await?,
                Some(ReplicasCommand::Add { id, address, key }) => {
                    let token = replica_token(&reach.access_file, key.as_ref())?;
                    client.add_replica(*id, address.clone(), token).await?
                }
                Some(ReplicasCommand::Remove { id, key }) => {
                    let token = replica_token(&reach.access_file, key.as_ref())?;
                    client.remove_replica(*id, token).await?
                }
            };
            output.replicas(&replicas);
            Ok(())
        }),
        Command::Workers(WorkersCommand::Wait {
            count,
            env,
            timeout,
        }) => block_on(workers::wait(
            &reach,
            *count,
            env.as_deref(),
            *timeout,
            output,
        )),
        Command::Top { refresh } => top(&reach, output, *refresh),
        Command::Env(command) => connected(&reach, output, async |client| {
            env::run(client, command, output).await
        }),
        Command::Explain { task } => connected(&reach, output, async |client| {
            explain::run(client, *task, output).await
        }),
    }
}

/// Connect to the scheduler, then run `command` with the client.
/// `weir top`: the terminal view (feature `tui`, on by default).
fn top(reach: &Reach, output: &dyn Output, refresh: Duration) -> Result<()> {
    let refresh = refresh.clamp(Duration::from_millis(50), Duration::from_secs(3600));
    #[cfg(feature = "tui")]
    return connected(reach, output, async |client| {
        commands::top::run(client, refresh).await
    });
    #[cfg(not(feature = "tui"))]
    {
        let _ = (reach, output, refresh);
        anyhow::bail!("`weir top` needs weir built with the `tui` feature (on by default)")
    }
}

fn connected(
    reach: &Reach,
    output: &dyn Output,
    command: impl AsyncFnOnce(&Client) -> Result<()>,
) -> Result<()> {
    block_on(async {
        let client = reach.connect(output).await?;
        command(&client).await
    })
}

fn host() -> Result<PluginHost> {
    PluginHost::with_default_cache().context("cannot start the plugin host")
}

fn block_on(future: impl std::future::Future<Output = Result<()>>) -> Result<()> {
    tokio::runtime::Runtime::new()
        .context("cannot start the async runtime")?
        .block_on(future)
}
