//! `weir submit | wait | results | cancel | status`.

use std::io::IsTerminal;
use std::path::PathBuf;
use std::time::{Duration, Instant};

use anyhow::{Context, Result, bail};
use clap::{Args, Subcommand};
use serde_json::{Value, json};
use weir::client::Client;
use weir::config::parse_capabilities;
use weir::plugin::bundled;
use weir::proto::{
    EnvironmentStatus, JobCounts, NewGroup, Outcome, TaskKind, TaskResult, TaskSpec,
};

use crate::Output;

#[derive(Args)]
pub struct SubmitArgs {
    /// Number of tasks (each gets WEIR_TASK_INDEX 0..N-1).
    #[arg(long, default_value_t = 1)]
    count: u32,
    /// Amounts each task consumes while it runs: `cpu=2,gpu=1`.
    #[arg(long = "cap", value_name = "NAME=AMOUNT,...")]
    capabilities: Option<String>,
    /// An environment the tasks need (repeatable).
    #[arg(long = "env", value_name = "NAME")]
    environments: Vec<String>,
    /// Higher runs first.
    #[arg(long, default_value_t = 0, allow_negative_numbers = true)]
    priority: i32,
    /// Seconds a run may take before it is killed and the task fails.
    #[arg(long, value_parser = weir::config::positive_seconds, value_name = "SECONDS")]
    timeout: Option<Duration>,
    /// Times a task is run again when its worker is lost.
    #[arg(long, default_value_t = 3)]
    retries: u32,
    /// Run a component of the `task` world (a .wasm file, or the bundled `square`) instead of a command.
    #[arg(long, value_name = "FILE.wasm")]
    wasm: Option<String>,
    /// Input of every task: a command's stdin, a wasm task's input.
    #[arg(long, conflicts_with = "inputs_file")]
    input: Option<String>,
    /// One task per line of FILE, the line being its input (overrides --count).
    #[arg(long, value_name = "FILE")]
    inputs_file: Option<PathBuf>,
    /// Wait for every task to finish, showing progress; exit 1 if any failed.
    #[arg(long)]
    wait: bool,
    /// The command and its arguments (after `--`).
    #[arg(trailing_var_arg = true, value_name = "COMMAND")]
    command: Vec<String>,
}

pub async fn submit(
    client: &Client,
    args: &SubmitArgs,
    output: Output,
    reach: &Reach<'_>,
) -> Result<()> {
    let mut components = Vec::new();
    let kind = match (&args.wasm, args.command.is_empty()) {
        (Some(_), false) => bail!("give either --wasm FILE or a command after --, not both"),
        (None, true) => bail!(
            "nothing to run: give a command after -- (e.g. `weir submit -- echo hi`) or --wasm FILE"
        ),
        (Some(wasm), true) => {
            let bytes = match bundled::by_name(wasm) {
                Some(bytes) if !std::path::Path::new(wasm).exists() => bytes.to_vec(),
                _ => read_limited(std::path::Path::new(wasm))?,
            };
            let hash = weir::plugin::cache::content_hash(&bytes);
            components.push(bytes);
            TaskKind::Wasm { component: hash }
        }
        (None, false) => TaskKind::Command {
            argv: args.command.clone(),
            env: vec![],
        },
    };
    let inputs: Vec<Vec<u8>> = match &args.inputs_file {
        Some(path) => String::from_utf8(read_limited(path)?)
            .with_context(|| format!("{}: not UTF-8 text (one input per line)", path.display()))?
            .lines()
            .map(|l| l.as_bytes().to_vec())
            .collect(),
        None => Vec::new(),
    };
    if args.inputs_file.is_some() && inputs.is_empty() {
        bail!("the inputs file has no lines: no tasks to submit");
    }
    let capabilities = match &args.capabilities {
        Some(text) => parse_capabilities(text).map_err(|e| anyhow::anyhow!("--cap: {e}"))?,
        None => Vec::new(),
    };
    // Whole milliseconds, at least 1 (0 means no timeout).
    let timeout_ms = args.timeout.map_or(0, |t| {
        u64::try_from(t.as_micros().div_ceil(1000)).unwrap_or(u64::MAX)
    });
    let spec = TaskSpec {
        kind,
        capabilities,
        environments: args.environments.clone(),
        priority: args.priority,
        timeout_ms,
        retries: args.retries,
        input: args.input.clone().unwrap_or_default().into_bytes(),
    };
    let count = if inputs.is_empty() { args.count } else { 0 };
    let (job, first, tasks) = client
        .submit(
            components,
            vec![NewGroup {
                spec,
                count,
                inputs,
            }],
        )
        .await?;
    if !args.wait {
        match output {
            Output::Json => println!(
                "{}",
                json!({ "job": job, "first_task": first, "tasks": tasks })
            ),
            Output::Cli => println!(
                "job {job}: {tasks} task(s) submitted (ids {first}-{})",
                first + tasks - 1
            ),
            // Just the id, for `JOB=$(weir --output quiet submit ...)`.
            Output::Quiet => println!("{job}"),
        }
        return Ok(());
    }
    if output == Output::Cli {
        eprintln!(
            "job {job}: {tasks} task(s) submitted (ids {first}-{})",
            first + tasks - 1
        );
    }
    let counts = wait_for(client, job, output, reach).await?;
    finish(job, &counts, output)
}

pub async fn wait(client: &Client, job: u64, output: Output, reach: &Reach<'_>) -> Result<()> {
    let counts = wait_for(client, job, output, reach).await?;
    finish(job, &counts, output)
}

/// Whether an error means the connection to the scheduler is gone (it may be restarting).
fn connection_lost(error: &weir::net::NetError) -> bool {
    use weir::net::NetError;
    use weir::proto::FrameError;
    matches!(
        error,
        NetError::Connection(_)
            | NetError::Write(_)
            | NetError::Frame(FrameError::Io(_) | FrameError::Closed)
    ) || matches!(error, NetError::Unanswered(_))
}

/// Print the final counts; a job with failed tasks is an error (exit 1), reported in the same
/// single JSON value in JSON mode.
fn finish(job: u64, counts: &JobCounts, output: Output) -> Result<()> {
    let failed = (counts.failed > 0).then(|| {
        format!(
            "job {job}: {} task(s) failed (see `weir results {job}`)",
            counts.failed
        )
    });
    match output {
        Output::Json => {
            let mut value = json!({ "job": job, "counts": counts });
            if let Some(error) = &failed {
                value["error"] = json!(error);
            }
            println!("{value}");
        }
        Output::Quiet => {}
        Output::Cli => println!(
            "job {job}: {} succeeded, {} failed, {} canceled",
            counts.succeeded, counts.failed, counts.canceled
        ),
    }
    match failed {
        Some(error) if output == Output::Json => Err(crate::Reported(error).into()),
        Some(error) => Err(anyhow::anyhow!(error)),
        None => Ok(()),
    }
}

/// Wait with a progress bar on a terminal, a line per second otherwise (nothing for JSON).
async fn wait_for(
    client: &Client,
    job: u64,
    output: Output,
    reach: &Reach<'_>,
) -> Result<JobCounts> {
    let terminal = output == Output::Cli && std::io::stderr().is_terminal();
    let bar = terminal.then(|| {
        let bar = indicatif::ProgressBar::new(0);
        bar.set_style(
            indicatif::ProgressStyle::with_template(
                "{bar:40} {pos}/{len} tasks  {per_sec}  eta {eta}  {msg}",
            )
            .unwrap_or_else(|_| indicatif::ProgressStyle::default_bar()),
        );
        bar
    });
    let mut last_line: Option<Instant> = None;
    let mut reconnected: Option<Client> = None;
    let counts = loop {
        let current = reconnected.as_ref().unwrap_or(client);
        let result = current
            .wait(job, |counts| {
                if let Some(bar) = &bar {
                    bar.set_length(counts.total());
                    bar.set_position(counts.finished());
                    bar.set_message(format!(
                        "{} running, {} failed",
                        counts.running, counts.failed
                    ));
                } else if output == Output::Cli
                    && last_line.is_none_or(|t| t.elapsed() >= Duration::from_secs(1))
                {
                    last_line = Some(Instant::now());
                    eprintln!(
                        "job {job}: {}/{} finished, {} running, {} queued, {} failed",
                        counts.finished(),
                        counts.total(),
                        counts.running,
                        counts.queued,
                        counts.failed
                    );
                }
            })
            .await;
        match result {
            Ok(counts) => break counts,
            Err(error) if connection_lost(&error) => {
                if output == Output::Cli {
                    eprintln!("lost the scheduler ({error}); reconnecting");
                }
                reconnected = Some(reconnect(reach).await?);
            }
            Err(error) => return Err(error.into()),
        }
    };
    if let Some(bar) = bar {
        bar.finish_and_clear();
    }
    Ok(counts)
}

pub fn result_json(result: &TaskResult) -> Value {
    let text = |bytes: &[u8]| String::from_utf8_lossy(bytes).into_owned();
    let mut value =
        json!({ "task": result.task, "state": result.state, "attempts": result.attempts });
    match &result.outcome {
        Outcome::Exited {
            code,
            stdout,
            stderr,
        } => {
            value["exit_code"] = json!(code);
            value["stdout"] = json!(text(stdout));
            value["stderr"] = json!(text(stderr));
        }
        Outcome::Returned { output } => value["output"] = json!(text(output)),
        Outcome::Error { message } => value["error"] = json!(message),
    }
    value
}

pub async fn results(client: &Client, job: u64, output: Output) -> Result<()> {
    let results = client.results(job).await?;
    if output == Output::Quiet {
        return Ok(());
    }
    if output == Output::Json {
        println!(
            "{}",
            Value::Array(results.iter().map(result_json).collect())
        );
        return Ok(());
    }
    for result in &results {
        let first_line = |bytes: &[u8]| {
            String::from_utf8_lossy(bytes)
                .lines()
                .next()
                .unwrap_or("")
                .to_string()
        };
        let detail = match &result.outcome {
            Outcome::Exited {
                code: Some(code),
                stdout,
                ..
            } => format!("exit {code}: {}", first_line(stdout)),
            Outcome::Exited { code: None, .. } => "killed by a signal".to_string(),
            Outcome::Returned { output } => format!("returned: {}", first_line(output)),
            Outcome::Error { message } => format!("error: {message}"),
        };
        println!(
            "task {:>8} {:<9} {detail}",
            result.task,
            format!("{:?}", result.state).to_lowercase()
        );
    }
    Ok(())
}

pub async fn cancel(client: &Client, job: u64, output: Output) -> Result<()> {
    let tasks = client.cancel(job).await?;
    match output {
        Output::Json => println!("{}", json!({ "job": job, "canceled": tasks })),
        Output::Cli => println!("job {job}: {tasks} task(s) canceled"),
        Output::Quiet => {}
    }
    Ok(())
}

pub async fn forget(client: &Client, jobs: &[u64], output: Output) -> Result<()> {
    let mut forgotten = Vec::new();
    for &job in jobs {
        let tasks = client.forget(job).await?;
        if output == Output::Cli {
            println!("job {job}: forgotten ({tasks} task results freed)");
        }
        forgotten.push(json!({ "job": job, "tasks": tasks }));
    }
    if output == Output::Json {
        println!("{}", json!(forgotten));
    }
    Ok(())
}

pub async fn forget_finished(client: &Client, output: Output) -> Result<()> {
    let (jobs, tasks) = client.forget_finished().await?;
    match output {
        Output::Json => println!("{}", json!({ "jobs": jobs, "tasks": tasks })),
        Output::Cli => println!(
            "{} finished job(s) forgotten ({tasks} task results freed)",
            jobs.len()
        ),
        Output::Quiet => {}
    }
    Ok(())
}

pub async fn jobs(client: &Client, last: u32, output: Output) -> Result<()> {
    let jobs = client.jobs(last).await?;
    match output {
        Output::Quiet => {}
        Output::Json => println!("{}", serde_json::to_value(&jobs)?),
        Output::Cli if jobs.is_empty() => println!("no jobs"),
        Output::Cli => {
            println!(
                "{:>6}  {:<9} {:>8} {:>8} {:>9} {:>7} {:>8}",
                "job", "state", "queued", "running", "succeeded", "failed", "canceled"
            );
            for j in &jobs {
                let c = &j.counts;
                let state = if j.forgotten {
                    "forgotten"
                } else if c.queued + c.running > 0 {
                    "active"
                } else {
                    "finished"
                };
                println!(
                    "{:>6}  {:<9} {:>8} {:>8} {:>9} {:>7} {:>8}",
                    j.job, state, c.queued, c.running, c.succeeded, c.failed, c.canceled
                );
            }
        }
    }
    Ok(())
}

/// `weir workers wait N [--env NAME]`: until N live workers (matching NAME) are registered.
pub async fn workers_wait(
    client: &Client,
    count: u32,
    env: Option<&str>,
    timeout: std::time::Duration,
    output: Output,
) -> Result<()> {
    let what = match env {
        Some(name) => format!("workers matching environment `{name}`"),
        None => "workers".to_string(),
    };
    let seen = std::cell::Cell::new(0u32);
    let waiting = client.wait_workers(count, env.map(str::to_string), |ready| {
        seen.set(ready);
        if output == Output::Cli {
            eprintln!("{ready} of {count} {what}");
        }
    });
    let ready = match tokio::time::timeout(timeout, waiting).await {
        Ok(ready) => ready?,
        Err(_) => anyhow::bail!(
            "only {} of {count} {what} after {:?} (--timeout); `weir status` and `weir env list` show who is there",
            seen.get(),
            timeout
        ),
    };
    match output {
        Output::Json => println!(
            "{}",
            json!({ "workers": ready, "wanted": count, "environment": env })
        ),
        Output::Quiet => {}
        Output::Cli => println!("{ready} {what} ready"),
    }
    Ok(())
}

pub async fn status(client: &Client, output: Output) -> Result<()> {
    let report = client.status().await?;
    if output == Output::Quiet {
        return Ok(());
    }
    if output == Output::Json {
        println!("{}", serde_json::to_value(&report)?);
        return Ok(());
    }
    let t = &report.tasks;
    println!(
        "tasks: {} queued, {} running, {} succeeded, {} failed, {} canceled ({} jobs)",
        t.queued, t.running, t.succeeded, t.failed, t.canceled, report.jobs
    );
    if !report.managers.is_empty() {
        println!("managers: {}", report.managers.len());
        for m in &report.managers {
            let tier = match (m.fixed, m.tier) {
                (Some(n), _) => format!("fixed {n}"),
                (None, Some(p)) => format!("priority {p}"),
                (None, None) => "unlisted".to_string(),
            };
            let desired = m.desired.map_or("-".to_string(), |d| d.to_string());
            println!(
                "  {:<16} {:<10} {:<11} {} desired {desired}, live {}, starting {}  ({})",
                m.id,
                m.worker_type,
                tier,
                if m.online { "online " } else { "OFFLINE" },
                m.live,
                m.starting,
                m.reason
            );
        }
    }
    if let Some(error) = &report.policy_error {
        println!("scaling policy error (last good decision held): {error}");
    }
    println!("workers: {}", report.workers.len());
    for w in &report.workers {
        let caps: Vec<String> = w
            .capabilities
            .iter()
            .map(|(n, v)| format!("{n}={v}"))
            .collect();
        println!(
            "  {:>4} {:<24} {}/{} slots busy  {}",
            w.id,
            w.name,
            w.running,
            w.slots,
            caps.join(",")
        );
    }
    Ok(())
}

#[derive(Subcommand)]
pub enum EnvCommand {
    /// Register (or replace) an environment: every worker evaluates the condition and reports.
    Register {
        name: String,
        /// A component of the `environment` world (or the bundled `mem_gt`).
        file: String,
        /// A config value handed to the condition (repeatable).
        #[arg(long = "config", value_name = "KEY=VALUE")]
        config: Vec<String>,
        /// Return once every live worker has answered, with the counts.
        #[arg(long)]
        wait: bool,
    },
    /// Every environment with its matching, not matching and erroring workers.
    List,
    /// Remove a run-time environment (workers tear it down; tasks needing it stay queued).
    Remove { name: String },
}

pub async fn env(client: &Client, command: &EnvCommand, output: Output) -> Result<()> {
    match command {
        EnvCommand::Register {
            name,
            file,
            config,
            wait,
        } => {
            let bytes = condition_bytes(file)?;
            let list = client
                .env_register(name, bytes, parse_config(config)?, *wait)
                .await?;
            print_environments(&list, output);
        }
        EnvCommand::List => print_environments(&client.env_list().await?, output),
        EnvCommand::Remove { name } => {
            client.env_remove(name).await?;
            match output {
                Output::Json => println!("{}", json!({ "removed": name })),
                Output::Cli => println!("environment `{name}` removed"),
                Output::Quiet => {}
            }
        }
    }
    Ok(())
}

/// A condition component from a file, or a bundled one by name (`mem_gt`) when no such file exists.
fn condition_bytes(file: &str) -> Result<Vec<u8>> {
    match bundled::by_name(file) {
        Some(bytes) if !std::path::Path::new(file).exists() => Ok(bytes.to_vec()),
        _ => read_limited(std::path::Path::new(file)),
    }
}

/// A file the client sends: read up to what one request can carry (a frame), and no further,
/// so `/dev/zero` or a huge file is an error at once rather than gigabytes in memory.
fn read_limited(path: &std::path::Path) -> Result<Vec<u8>> {
    use std::io::Read;
    let limit = weir::proto::MAX_FRAME as u64;
    let file =
        std::fs::File::open(path).with_context(|| format!("cannot read {}", path.display()))?;
    let mut bytes = Vec::new();
    file.take(limit + 1)
        .read_to_end(&mut bytes)
        .with_context(|| format!("cannot read {}", path.display()))?;
    if bytes.len() as u64 > limit {
        bail!(
            "{} is larger than the {} MiB one request can carry",
            path.display(),
            limit >> 20
        );
    }
    Ok(bytes)
}

fn parse_config(items: &[String]) -> Result<Vec<(String, String)>> {
    items
        .iter()
        .map(|item| match item.split_once('=') {
            Some((key, value)) => Ok((key.trim().to_string(), value.trim().to_string())),
            None => bail!("--config `{item}` is not KEY=VALUE"),
        })
        .collect()
}

fn print_environments(list: &[EnvironmentStatus], output: Output) {
    if output == Output::Quiet {
        return;
    }
    if output == Output::Json {
        println!("{}", serde_json::to_value(list).unwrap_or_default());
        return;
    }
    if list.is_empty() {
        println!("no environments");
    }
    for env in list {
        println!(
            "{} ({}): {} matching, {} not matching, {} erroring, {} pending",
            env.name,
            env.source,
            env.matching.len(),
            env.not_matching.len(),
            env.erroring.len(),
            env.pending.len()
        );
        for (label, names) in [
            ("matching", &env.matching),
            ("not matching", &env.not_matching),
            ("pending", &env.pending),
        ] {
            if !names.is_empty() {
                println!("  {label}: {}", names.join(", "));
            }
        }
        for (worker, reason) in &env.erroring {
            println!("  error on {worker}: {reason}");
        }
        if !env.managers.is_empty() {
            println!("  declared by managers: {}", env.managers.join(", "));
        }
        if !env.own_definition.is_empty() {
            println!(
                "  their own --env-plugin definition (wins over the registered one there): {}",
                env.own_definition.join(", ")
            );
        }
        if !env.loads.is_empty() {
            let loads: Vec<String> = env
                .loads
                .iter()
                .map(|(worker, load)| format!("{worker} {load}"))
                .collect();
            println!("  condition loaded: {}", loads.join(", "));
        }
    }
}

pub async fn explain(client: &Client, task: u64, output: Output) -> Result<()> {
    let lines = client.explain(task).await?;
    match output {
        Output::Json => println!("{}", json!({ "task": task, "explanation": lines })),
        Output::Cli => lines.iter().for_each(|line| println!("{line}")),
        Output::Quiet => {}
    }
    Ok(())
}

/// Connect again after losing the scheduler: back off up to 5 s, for up to 2 minutes, re-reading
/// the access file (a restarted scheduler may listen elsewhere).
/// Where the scheduler is, and how long to keep trying to reach it when it does not answer.
pub struct Reach<'a> {
    pub access_file: &'a std::path::Path,
    pub timeout: Duration,
}

/// Connect, retrying with backoff (re-reading the access file: a restarted scheduler may listen
/// elsewhere) for up to `reach.timeout` while the scheduler does not answer.
pub async fn reconnect(reach: &Reach<'_>) -> Result<Client> {
    let started = Instant::now();
    let mut backoff = Duration::from_millis(200);
    loop {
        let attempt =
            async { Client::connect(&weir::net::AccessFile::read(reach.access_file)?).await };
        match attempt.await {
            Ok(client) => return Ok(client),
            Err(error) if started.elapsed() + backoff > reach.timeout => {
                return Err(anyhow::anyhow!(
                    "gave up reaching the scheduler after {:.0?}: {error}",
                    started.elapsed()
                ));
            }
            Err(_) => tokio::time::sleep(backoff).await,
        }
        backoff = (backoff * 2).min(Duration::from_secs(5));
    }
}
