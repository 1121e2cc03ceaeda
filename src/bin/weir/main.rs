//! `weir`: the client CLI.

mod bench;
mod demo;
mod local;
mod tasks;
mod top;

use std::path::PathBuf;
use std::process::ExitCode;

use anyhow::{Context, Result};
use clap::{Args, Parser, Subcommand, ValueEnum};
use serde_json::json;
use weir::config::{PolicySpec, positive_seconds, seconds};
use weir::core::scaling::{Decision, Snapshot};
use weir::plugin::{Limits, PluginHost};

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
    #[arg(long, global = true, value_enum, default_value_t = Output::Cli)]
    output: Output,
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
    /// keep trying this many seconds before giving up (0: give up at once).
    #[arg(
        long,
        global = true,
        default_value = "60",
        value_parser = seconds,
        value_name = "SECONDS"
    )]
    reconnect_timeout: std::time::Duration,
    #[command(subcommand)]
    command: Command,
}

#[derive(Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum Output {
    Cli,
    Json,
    Quiet,
}

#[derive(Subcommand)]
enum Command {
    /// Submit tasks: a command (after --) or a wasm component, N times or once per input line.
    Submit(tasks::SubmitArgs),
    /// Wait for a job to finish, showing progress.
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
    /// Workers: `wait N` until N are registered (scripts never sleep).
    #[command(subcommand)]
    Workers(WorkersCommand),
    /// Environments: conditions workers evaluate; tasks ask for them with `submit --env NAME`.
    #[command(subcommand)]
    Env(tasks::EnvCommand),
    /// Why a task is queued, running or finished: what each worker lacks for it.
    Explain { task: u64 },
    /// A live view of managers, workers, tasks and environments (`q` quits).
    Top {
        /// Seconds between refreshes (at least 0.05).
        #[arg(long, default_value = "1", value_parser = positive_seconds, value_name = "SECONDS")]
        refresh: std::time::Duration,
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
    /// Check scaling policies and replay snapshots through them.
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
        timeout: std::time::Duration,
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
    Check(PolicyArgs),
    /// Replay a JSON array of snapshots through a policy and print each decision.
    Simulate {
        #[command(flatten)]
        policy: PolicyArgs,
        /// JSON file: an array of snapshots (the `weir:plugin/scaling` snapshot record), or JSON
        /// lines as `scheduler --record-snapshots` writes them.
        #[arg(long)]
        trace: PathBuf,
    },
}

#[derive(Args)]
struct PolicyArgs {
    /// Policy engine: `waterfall_v1`, `waterfall_v2` (bundled) or a .wasm component.
    #[arg(
        long,
        value_name = "ENGINE|FILE.wasm",
        required_unless_present = "config",
        conflicts_with = "config"
    )]
    policy: Option<String>,
    /// Policy content: the rows themselves, or @FILE to read them from a file.
    #[arg(long, value_name = "TEXT|@FILE", requires = "policy")]
    content: Option<String>,
    /// A TOML file with `policy_engine_type` and `policy_content` (the reference form).
    #[arg(long, value_name = "FILE.toml")]
    config: Option<PathBuf>,
}

impl PolicyArgs {
    fn spec(&self) -> Result<PolicySpec> {
        let spec = PolicySpec::from_flags(
            self.config.as_deref(),
            self.policy.as_deref(),
            self.content.as_deref(),
            "--content",
        )?;
        spec.context("give --policy ENGINE --content ROWS, or --config FILE.toml")
    }
}

/// An error already printed as part of the command's output (JSON mode): exit 1, print nothing more.
#[derive(Debug)]
pub struct Reported(pub String);

impl std::fmt::Display for Reported {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::error::Error for Reported {}

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
            let text = error.to_string();
            let first = text.lines().next().unwrap_or_default();
            let message = first.strip_prefix("error: ").unwrap_or(first).to_string();
            println!("{}", json!({ "error": message }));
            return ExitCode::from(2);
        }
        Err(error) => error.exit(),
    };
    match run(&cli) {
        Ok(()) => ExitCode::SUCCESS,
        Err(error) if error.is::<Reported>() => ExitCode::FAILURE,
        Err(error) => {
            match cli.output {
                Output::Json => println!("{}", json!({ "error": format!("{error:#}") })),
                Output::Cli | Output::Quiet => eprintln!("error: {error:#}"),
            }
            ExitCode::FAILURE
        }
    }
}

/// Whether the raw command line asks for `--output json` (for errors before it is parsed).
fn json_asked() -> bool {
    let args: Vec<String> = std::env::args().collect();
    args.windows(2)
        .any(|pair| pair[0] == "--output" && pair[1] == "json")
        || args.iter().any(|a| a == "--output=json")
}

fn run(cli: &Cli) -> Result<()> {
    let output = cli.output;
    match &cli.command {
        Command::Plugin(PluginCommand::Inspect { file }) => inspect(&host()?, file, output),
        Command::Policy(PolicyCommand::Check(args)) => check(&host()?, args, output),
        Command::Policy(PolicyCommand::Simulate { policy, trace }) => {
            simulate(&host()?, policy, trace, output)
        }
        Command::Demo => demo::run(&host()?, output),
        Command::Local(args) => block_on(local::run(args, output)),
        Command::Bench(args) => block_on(bench::run(args)),
        Command::Submit(args) => {
            block_on(async { tasks::submit(&connect(cli).await?, args, output, &reach(cli)).await })
        }
        Command::Wait { job } => {
            block_on(async { tasks::wait(&connect(cli).await?, *job, output, &reach(cli)).await })
        }
        Command::Results { job } => {
            block_on(async { tasks::results(&connect(cli).await?, *job, output).await })
        }
        Command::Cancel { job } => {
            block_on(async { tasks::cancel(&connect(cli).await?, *job, output).await })
        }
        Command::Forget { jobs, finished } => block_on(async {
            let client = connect(cli).await?;
            match finished {
                true => tasks::forget_finished(&client, output).await,
                false => tasks::forget(&client, jobs, output).await,
            }
        }),
        Command::Jobs { last } => {
            block_on(async { tasks::jobs(&connect(cli).await?, *last, output).await })
        }
        Command::Status => block_on(async { tasks::status(&connect(cli).await?, output).await }),
        Command::Workers(WorkersCommand::Wait {
            count,
            env,
            timeout,
        }) => block_on(async {
            // Started with the cluster, before the scheduler has written its access file: wait
            // for it too, within the same timeout.
            let started = std::time::Instant::now();
            while !cli.access_file.exists() && started.elapsed() < *timeout {
                tokio::time::sleep(std::time::Duration::from_millis(50)).await;
            }
            let left = timeout.saturating_sub(started.elapsed());
            let client = tokio::time::timeout(left, connect(cli))
                .await
                .map_err(|_| {
                    anyhow::anyhow!("no scheduler answered within {timeout:?} (--timeout)")
                })??;
            let left = timeout.saturating_sub(started.elapsed());
            tasks::workers_wait(&client, *count, env.as_deref(), left, output).await
        }),
        Command::Top { refresh } => block_on(async {
            let refresh = (*refresh).clamp(
                std::time::Duration::from_millis(50),
                std::time::Duration::from_secs(3600),
            );
            top::run(&connect(cli).await?, refresh).await
        }),
        Command::Env(command) => {
            block_on(async { tasks::env(&connect(cli).await?, command, output).await })
        }
        Command::Explain { task } => {
            block_on(async { tasks::explain(&connect(cli).await?, *task, output).await })
        }
    }
}

fn host() -> Result<PluginHost> {
    PluginHost::with_default_cache().context("cannot start the plugin host")
}

fn block_on(future: impl std::future::Future<Output = Result<()>>) -> Result<()> {
    tokio::runtime::Runtime::new()
        .context("cannot start the async runtime")?
        .block_on(future)
}

fn reach(cli: &Cli) -> tasks::Reach<'_> {
    tasks::Reach {
        access_file: &cli.access_file,
        timeout: cli.reconnect_timeout,
    }
}

/// Connect to the scheduler. No access file: fail at once (no scheduler was ever started here).
/// No answer: retry for `--reconnect-timeout`, saying so.
async fn connect(cli: &Cli) -> Result<weir::client::Client> {
    let reach = reach(cli);
    let access = weir::net::AccessFile::read(&cli.access_file)?;
    match weir::client::Client::connect(&access).await {
        Err(error @ weir::net::NetError::Connect { .. }) if !reach.timeout.is_zero() => {
            if cli.output == Output::Cli {
                eprintln!(
                    "{error}; retrying for up to {:.0?} (it may be restarting)",
                    reach.timeout
                );
            }
            tasks::reconnect(&reach).await
        }
        connected => Ok(connected?),
    }
}

fn inspect(host: &PluginHost, file: &std::path::Path, output: Output) -> Result<()> {
    let loaded = host.load_file(file, None)?;
    let info = host.inspect(&loaded);
    let how = info.origin.describe();
    if output == Output::Quiet {
        return Ok(());
    }
    if output == Output::Json {
        println!(
            "{}",
            json!({
                "file": file.display().to_string(),
                "world": info.world,
                "imports": info.imports,
                "exports": info.exports,
                "size_bytes": info.size_bytes,
                "sha256": info.sha256,
                "load": how,
                "load_ms": info.load_time.as_secs_f64() * 1e3,
            })
        );
        return Ok(());
    }
    let world = match info.world {
        Some(world) => format!("{world} (exports {})", world.export_name()),
        None => "none: exports no weir:plugin@0.1.0 interface".to_string(),
    };
    println!("{}", file.display());
    println!("  world:   {world}");
    println!("  size:    {} bytes", info.size_bytes);
    println!("  sha256:  {}", info.sha256);
    println!(
        "  load:    {:.1} ms ({how})",
        info.load_time.as_secs_f64() * 1e3
    );
    println!("  imports: {}", info.imports.join(", "));
    println!("  exports: {}", info.exports.join(", "));
    Ok(())
}

fn check(host: &PluginHost, args: &PolicyArgs, output: Output) -> Result<()> {
    let spec = args.spec()?;
    let mut policy = spec.instantiate(host, Limits::default())?;
    let tiers = policy.tiers()?;
    if output == Output::Quiet {
        return Ok(());
    }
    if output == Output::Json {
        println!(
            "{}",
            json!({ "engine": spec.engine.name(), "tiers": tiers })
        );
        return Ok(());
    }
    println!(
        "{}: content is valid; {} tier{}",
        spec.engine.name(),
        tiers.len(),
        if tiers.len() == 1 { "" } else { "s" }
    );
    for tier in &tiers {
        println!(
            "  priority {:>3}: {}",
            tier.priority,
            tier.members.join(", ")
        );
    }
    Ok(())
}

fn simulate(
    host: &PluginHost,
    args: &PolicyArgs,
    trace: &std::path::Path,
    output: Output,
) -> Result<()> {
    let spec = args.spec()?;
    let mut policy = spec.instantiate(host, Limits::default())?;
    let text = std::fs::read_to_string(trace)
        .with_context(|| format!("cannot read {}", trace.display()))?;
    // A JSON array of snapshots, or JSON lines as `scheduler --record-snapshots` writes them.
    let snapshots: Vec<Snapshot> = match serde_json::from_str(&text) {
        Ok(snapshots) => snapshots,
        Err(_) => text
            .lines()
            .enumerate()
            .filter(|(_, line)| !line.trim().is_empty())
            .map(|(n, line)| {
                serde_json::from_str(line).with_context(|| {
                    format!(
                        "{} line {}: not a snapshot (nor is the file a JSON array)",
                        trace.display(),
                        n + 1
                    )
                })
            })
            .collect::<Result<_>>()?,
    };
    let mut steps = Vec::new();
    for (step, snapshot) in snapshots.iter().enumerate() {
        let decisions = policy
            .decide(snapshot)
            .with_context(|| format!("snapshot {step}"))?;
        if output == Output::Cli {
            println!("snapshot {step} (now_ms {}):", snapshot.now_ms);
            print_decisions(&decisions);
        }
        steps.push(json!({ "step": step, "now_ms": snapshot.now_ms, "decisions": decisions }));
    }
    if output == Output::Json {
        println!("{}", serde_json::Value::Array(steps));
    }
    Ok(())
}

fn print_decisions(decisions: &[Decision]) {
    for d in decisions {
        let stop = if d.stop.is_empty() {
            String::new()
        } else {
            format!(" stop {:?}", d.stop)
        };
        println!(
            "  {:<12} desired {:>4}{stop}  ({})",
            d.manager_id, d.desired_workers, d.reason
        );
    }
}
