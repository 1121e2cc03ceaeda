//! `weir bench`: the numbers in BENCHMARKS.md, measured on this machine in one run.
//!
//! 1. Plugin cost: `decide` of the bundled waterfall engines against the native reference on
//!    snapshots of 10/100/1000 managers and 10,000 workers; `evaluate` of mem_gt cold (compile),
//!    cached (deserialize) and warm.
//! 2. Throughput: N tasks through a local cluster (real processes on loopback): workers that
//!    report without running (`--no-execute`), sandboxed wasm tasks, and `true` commands; wall
//!    time, the scheduler's CPU time per task (/proc) and its peak memory.
//! 3. Memory per queued task: the scheduler's resident memory growth with 1M tasks queued.
//! 4. Reaction: from a burst of queued tasks to the first worker a manager started registering.
//! 5. Journal: its size and the scheduler's restart time (kill -9, start, first answer) after
//!    N finished no-op tasks, then again once they are forgotten (compacted while running).

mod cluster;
mod dashboard;
mod fleet;
mod journal;
mod plugins;
mod quic_floor;
mod replicas;
mod simulated;

use std::time::{Duration, Instant};

use anyhow::{Context, Result};
use clap::Args;
use weir::client::Client;
use weir::plugin::HostFacts;
use weir::proto::{JobId, NewGroup, TaskKind, TaskSpec};

#[derive(Args)]
pub(crate) struct BenchArgs {
    /// Task counts for the no-execute throughput runs (0 skips a run).
    #[arg(long, value_delimiter = ',', default_value = "100000,1000000")]
    tasks: Vec<u32>,
    /// Sandboxed wasm tasks to run (0: skip).
    #[arg(long, default_value_t = 100_000)]
    wasm_tasks: u32,
    /// `true` command tasks to run (0: skip).
    #[arg(long, default_value_t = 10_000)]
    command_tasks: u32,
    /// Tasks of each kind (wasm `square`, `true`) in the small-slot rows: 2 workers x 2 slots
    /// and 50 workers x 1 slot, where each task is about as short as its dispatch (0: skip).
    #[arg(long, default_value_t = 10_000)]
    small_slot_tasks: u32,
    /// Workers in the throughput runs.
    #[arg(long, default_value_t = 2)]
    workers: u32,
    /// Slots per worker.
    #[arg(long, default_value_t = 64)]
    slots: u32,
    /// Only scheduler replicas against one scheduler with a journal: acknowledged submission
    /// latency and rate, task throughput and CPU per task, and failover time (three replicas
    /// on loopback, started here).
    #[arg(long)]
    replicas: bool,
    /// No-op tasks of the replica runs' job.
    #[arg(long, default_value_t = 20_000, value_name = "N")]
    replica_tasks: u32,
    /// Times one scheduler and three replicas are measured, alternated.
    #[arg(long, default_value_t = 2, value_name = "N")]
    replica_rounds: u32,
    /// The schedulers' `--prefetch` in the throughput runs (default: the scheduler's own).
    #[arg(long, value_name = "TASKS")]
    prefetch: Option<u32>,
    /// Queued tasks for the memory measurement.
    #[arg(long, default_value_t = 1_000_000)]
    queued: u32,
    /// Finished tasks for the journal measurement (0: skip it).
    #[arg(long, default_value_t = 10_000_000)]
    journal_tasks: u64,
    /// Also write the results as markdown to FILE.
    #[arg(long, value_name = "FILE")]
    markdown: Option<std::path::PathBuf>,
    /// Also time `decide` of these policy components (any language) on the same snapshots:
    /// 100 and 1,000 managers of worker types t0..t3, 10,000 workers.
    #[arg(long = "policy", value_name = "FILE.wasm")]
    policies: Vec<std::path::PathBuf>,
    /// The content those policies are created with (the text, or @FILE).
    #[arg(long, value_name = "TEXT|@FILE", requires = "policies")]
    policy_content: Option<String>,
    /// Only the plugin costs: no cluster, throughput, memory, reaction or journal runs.
    #[arg(long)]
    plugins_only: bool,
    /// Only `true` commands (`--command-tasks` of them) on 2 workers x 2 slots, against this
    /// machine's own spawn limit measured in the same run with 4 spawners, and their ratio.
    #[arg(long)]
    commands_only: bool,
    /// Only the scheduler's cost as the cluster grows: for each N, this process opens N worker
    /// connections (1 slot each; hello, registration, heartbeats, a verdict, outcomes answered
    /// at once) under `--simulated-managers` manager connections, and measures connect time,
    /// the scheduler's memory per worker, its idle CPU, its CPU per task and `weir status`.
    #[arg(long, value_delimiter = ',', value_name = "N,...")]
    simulated_workers: Vec<u32>,
    /// Manager connections the simulated workers are spread over (at most one per worker).
    #[arg(long, default_value_t = 1000, value_name = "M")]
    simulated_managers: u32,
    /// How long the simulated-worker run measures the idle scheduler. Idle workers and
    /// managers beat at a pace the cluster's size sets (9 s and 2.5 s in a small one, 22 s with
    /// 10,000 workers under 1,000 managers), so windows of a few paces (40 s) average out their
    /// beats; the scheduler's pid is printed on stderr when the window opens, for a profiler.
    #[arg(long, default_value_t = 5, value_name = "SECONDS", value_parser = clap::value_parser!(u64).range(1..=3600))]
    idle_secs: u64,
    /// The scheduler's `--heartbeat-timeout` in the simulated-worker run. Unset, the
    /// scheduler's own default, as in a real cluster on defaults: its managers then report at
    /// least every half of it (slower at the pace a large cluster sets) and an idle worker is
    /// taken for lost after its pace plus it.
    #[arg(long, value_name = "SECONDS", value_parser = clap::value_parser!(u64).range(1..=3600))]
    simulated_heartbeat_timeout: Option<u64>,
    /// The scheduler's `--idle-beats` in the simulated-worker run (unset: its default, 500; 0:
    /// idle workers beat once a lease and managers report every half heartbeat timeout,
    /// whatever the cluster's size, as before it had the flag).
    #[arg(long, value_name = "N", value_parser = idle_beats_text)]
    simulated_idle_beats: Option<String>,
    /// With `--simulated-workers`: the scheduler also serves `--dashboard`; its URL is printed
    /// on stderr when the idle window opens (`dashboard on URL`, for a browser to measure), and
    /// its answers (`/api/snapshot`, one event, a page of workers, the task stream) are timed.
    #[arg(long)]
    simulated_dashboard: bool,
    /// The scheduler's `--threads` in the throughput and simulated-worker runs.
    #[arg(long, default_value_t = 1, value_name = "N")]
    scheduler_threads: u16,
    /// Internal: the bare QUIC server the simulated-worker run measures its floor against
    /// (bench/quic_floor.rs); its access file goes into DIR.
    #[arg(long, hide = true, value_name = "DIR")]
    bare_quic_server: Option<std::path::PathBuf>,
}

pub(crate) struct Report {
    lines: Vec<String>,
}

impl Report {
    pub(crate) fn row(&mut self, line: String) {
        println!("{line}");
        self.lines.push(line);
    }
}

pub(crate) async fn run(args: &BenchArgs) -> Result<()> {
    if let Some(dir) = &args.bare_quic_server {
        return quic_floor::serve(dir).await;
    }
    let content = weir::config::content_arg(args.policy_content.as_deref().unwrap_or(""))?;
    plugins::check_policies(&args.policies, &content)?;
    let mut report = Report { lines: Vec::new() };
    report.row(format!("machine: {}", machine()));
    report.row(format!(
        "build: {}",
        if cfg!(debug_assertions) {
            "debug (use --release for real numbers)"
        } else {
            "release"
        }
    ));
    report.row(String::new());
    if args.replicas {
        let dir = Scratch::new()?;
        replicas::bench(args, &dir.0, &mut report).await?;
        return write_markdown(args, &report);
    }
    if !args.simulated_workers.is_empty() {
        let dir = Scratch::new()?;
        simulated::simulated(
            &args.simulated_workers,
            args.simulated_managers,
            args.scheduler_threads,
            Duration::from_secs(args.idle_secs),
            &simulated_settings(args),
            &dir.0,
            &mut report,
        )
        .await?;
        return write_markdown(args, &report);
    }
    if args.commands_only {
        let dir = Scratch::new()?;
        cluster::commands(args, &dir.0, &mut report).await?;
        return write_markdown(args, &report);
    }
    plugins::costs(&mut report)?;
    report.row(String::new());
    if !args.policies.is_empty() {
        plugins::policy_costs(&args.policies, &content, &mut report)?;
        report.row(String::new());
    }
    if args.plugins_only {
        return write_markdown(args, &report);
    }
    let dir = Scratch::new()?;
    cluster::benches(args, &dir.0, &mut report).await?;
    write_markdown(args, &report)
}

/// The bench's scratch directory (clusters' files, journals), removed when dropped: after a
/// run, and after a failed one too.
struct Scratch(std::path::PathBuf);

impl Scratch {
    fn new() -> Result<Scratch> {
        let dir = std::env::temp_dir().join(format!("weir-bench-{}", std::process::id()));
        std::fs::create_dir_all(&dir)
            .with_context(|| format!("cannot create {}", dir.display()))?;
        Ok(Scratch(dir))
    }
}

impl Drop for Scratch {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

/// `attempt` until it succeeds, at most 11 times 100 ms apart: a connection the scheduler (or
/// the bare server) drops while swamped by the others' handshakes is tried again, as a real
/// peer would.
pub(crate) async fn tried_again<T, F, Fut>(what: &str, mut attempt: F) -> Result<T>
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = Result<T>>,
{
    let mut tries = 0;
    loop {
        match attempt().await {
            Ok(done) => return Ok(done),
            Err(error) if tries < 10 => {
                tries += 1;
                tracing::debug!(%error, tries, "{what}: trying again");
                tokio::time::sleep(Duration::from_millis(100)).await;
            }
            Err(error) => return Err(error),
        }
    }
}

/// `--simulated-idle-beats` as given, once the scheduler would take it.
fn idle_beats_text(text: &str) -> Result<String, weir::config::ValueError> {
    weir::config::idle_beats(text).map(|_| text.to_string())
}

/// The scheduler flags the simulated-worker run sets beyond its own (`--threads`, the
/// connection limit).
fn simulated_settings(args: &BenchArgs) -> Vec<(&'static str, String)> {
    let heartbeat = (args.simulated_heartbeat_timeout)
        .map(|seconds| ("--heartbeat-timeout", seconds.to_string()));
    let idle = (args.simulated_idle_beats.clone()).map(|n| ("--idle-beats", n));
    let dashboard = (args.simulated_dashboard).then(|| ("--dashboard", "127.0.0.1:0".to_string()));
    heartbeat.into_iter().chain(idle).chain(dashboard).collect()
}

fn write_markdown(args: &BenchArgs, report: &Report) -> Result<()> {
    if let Some(path) = &args.markdown {
        std::fs::write(path, report.lines.join("\n") + "\n")
            .with_context(|| format!("cannot write {}", path.display()))?;
    }
    Ok(())
}

fn machine() -> String {
    let cpuinfo = std::fs::read_to_string("/proc/cpuinfo").unwrap_or_default();
    let model = cpuinfo
        .lines()
        .find_map(|l| l.strip_prefix("model name"))
        .map(|l| l.trim_start_matches([' ', '\t', ':']).to_string());
    let cores = std::thread::available_parallelism().map_or(1, |n| n.get());
    let memory = HostFacts::probe("", &[], &[]).total_memory_bytes as f64 / (1u64 << 30) as f64;
    format!(
        "{} cores ({}), {memory:.0} GiB",
        cores,
        model.unwrap_or_else(|| "unknown CPU".into())
    )
}

/// Mean microseconds per call of `f`, over at least `min` calls and 0.5 s.
pub(crate) fn per_call(min: u32, mut f: impl FnMut()) -> f64 {
    f(); // warm-up
    let started = Instant::now();
    let mut calls = 0u32;
    while calls < min || started.elapsed() < Duration::from_millis(500) {
        f();
        calls += 1;
    }
    started.elapsed().as_secs_f64() * 1e6 / f64::from(calls)
}

/// A task of `kind` with `input`, no needs, no timeout.
pub(crate) fn spec(kind: TaskKind, input: &[u8]) -> TaskSpec {
    TaskSpec {
        kind,
        capabilities: vec![],
        environments: vec![],
        priority: 0,
        timeout_ms: 0,
        retries: 3,
        input: input.to_vec(),
    }
}

/// Tasks that run `true`.
pub(crate) fn noop_spec() -> TaskSpec {
    spec(
        TaskKind::Command {
            argv: vec!["true".into()],
            env: vec![],
        },
        b"",
    )
}

/// Submit `count` tasks of `spec` as one job.
pub(crate) async fn submit(
    client: &Client,
    components: Vec<Vec<u8>>,
    spec: TaskSpec,
    count: u32,
) -> Result<JobId> {
    let group = NewGroup {
        spec,
        count,
        inputs: vec![],
    };
    let (job, _, _) = client.submit(components, vec![group]).await?;
    Ok(job)
}
