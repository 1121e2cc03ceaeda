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

use std::ffi::OsStr;
use std::path::Path;
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::{Context, Result, bail};
use clap::Args;
use weir::core::scaling::{Demand, Manager, Snapshot, Worker};
use weir::plugin::{HostFacts, Limits, PluginHost, World, bundled, cache::content_hash};
use weir::proto::{NewGroup, TaskKind, TaskSpec};
use weir_waterfall::{Flavor, Policy};

use crate::local::launch;
use weir::cluster::{Cluster, Launcher};

#[derive(Args)]
pub struct BenchArgs {
    /// Task counts for the no-execute throughput runs.
    #[arg(long, value_delimiter = ',', default_value = "100000,1000000")]
    tasks: Vec<u32>,
    /// Sandboxed wasm tasks to run.
    #[arg(long, default_value_t = 100_000)]
    wasm_tasks: u32,
    /// `true` command tasks to run.
    #[arg(long, default_value_t = 10_000)]
    command_tasks: u32,
    /// Workers in the throughput runs.
    #[arg(long, default_value_t = 2)]
    workers: u32,
    /// Slots per worker.
    #[arg(long, default_value_t = 64)]
    slots: u32,
    /// Queued tasks for the memory measurement.
    #[arg(long, default_value_t = 1_000_000)]
    queued: u32,
    /// Finished tasks for the journal measurement (0: skip it).
    #[arg(long, default_value_t = 10_000_000)]
    journal_tasks: u64,
    /// Also write the results as markdown to FILE.
    #[arg(long, value_name = "FILE")]
    markdown: Option<std::path::PathBuf>,
}

struct Report {
    lines: Vec<String>,
}

impl Report {
    fn row(&mut self, line: String) {
        println!("{line}");
        self.lines.push(line);
    }
}

pub async fn run(args: &BenchArgs) -> Result<()> {
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
    plugin_costs(&mut report)?;
    report.row(String::new());
    let dir = std::env::temp_dir().join(format!("weir-bench-{}", std::process::id()));
    std::fs::create_dir_all(&dir)?;
    let result = cluster_benches(args, &dir, &mut report).await;
    let _ = std::fs::remove_dir_all(&dir);
    result?;
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
fn per_call(min: u32, mut f: impl FnMut()) -> f64 {
    f(); // warm-up
    let started = Instant::now();
    let mut calls = 0u32;
    while calls < min || started.elapsed() < Duration::from_millis(500) {
        f();
        calls += 1;
    }
    started.elapsed().as_secs_f64() * 1e6 / f64::from(calls)
}

fn snapshot(managers: usize, workers: usize) -> Snapshot {
    let per = workers / managers;
    Snapshot {
        now_ms: 1_000_000,
        scale_down_delay_ms: 30_000,
        managers: (0..managers)
            .map(|m| Manager {
                id: format!("m{m}"),
                worker_type: format!("t{}", m % 4),
                max_task_concurrency: (per * 2) as u32,
                worker_slots: 1,
                online: true,
                workers: (0..per)
                    .map(|w| Worker {
                        id: (m * 100_000 + w) as u64,
                        slots: 1,
                        busy: (w % 2) as u32,
                        idle_ms: (w as u64 * 997) % 60_000,
                    })
                    .collect(),
                starting: 0,
                capabilities: vec![("cpu".into(), 4)],
                environments: vec![],
            })
            .collect(),
        demand: vec![
            Demand {
                capabilities: vec![],
                environments: vec![],
                queued: 5000,
                running: (workers / 2) as u32,
            },
            Demand {
                capabilities: vec![("cpu".into(), 2)],
                environments: vec![],
                queued: 500,
                running: 0,
            },
        ],
    }
}

fn plugin_costs(report: &mut Report) -> Result<()> {
    let host = PluginHost::new(None)?;
    report.row(
        "| decide | managers | workers | native µs/call | wasm µs/call | wasm / native |".into(),
    );
    report.row("|---|---:|---:|---:|---:|---:|".into());
    for (name, flavor) in [
        ("waterfall_v1", Flavor::ManagerId),
        ("waterfall_v2", Flavor::WorkerType),
    ] {
        for managers in [10usize, 100, 1000] {
            let snap = snapshot(managers, 10_000);
            let content = match flavor {
                Flavor::WorkerType => "1, t0\n1, t1\n2, t2\n3, t3\n".to_string(),
                Flavor::ManagerId => (0..managers)
                    .map(|m| format!("{}, m{m}\n", m % 3 + 1))
                    .collect(),
            };
            let native = Policy::parse(flavor, &content)?;
            let native_us = per_call(20, || {
                std::hint::black_box(native.decide(&snap));
            });
            let loaded = host.load(
                name,
                bundled::by_name(name).context("bundled engine")?,
                Some(World::Policy),
            )?;
            let mut wasm = host.policy(&loaded, &content, Limits::default())?;
            let mut failure = None;
            let wasm_us = per_call(20, || {
                if let Err(error) = wasm.decide(&snap) {
                    failure = Some(error);
                }
            });
            if let Some(error) = failure {
                bail!("{name} failed during the benchmark: {error}");
            }
            report.row(format!(
                "| {name} | {managers} | 10000 | {native_us:.1} | {wasm_us:.1} | {:.2} |",
                wasm_us / native_us
            ));
        }
    }
    report.row(String::new());

    let cache = std::env::temp_dir().join(format!("weir-bench-cache-{}", std::process::id()));
    let cold_host = PluginHost::new(Some(cache.clone()))?;
    let cold = cold_host.load("mem_gt", bundled::MEM_GT, Some(World::Environment))?;
    let cached_host = PluginHost::new(Some(cache.clone()))?;
    let cached = cached_host.load("mem_gt", bundled::MEM_GT, Some(World::Environment))?;
    let _ = std::fs::remove_dir_all(&cache);
    let facts = Arc::new(HostFacts::probe("", &[], &[]));
    let config = vec![("threshold".to_string(), "8GiB".to_string())];
    let mut condition = cached_host.condition(&cached, Limits::default())?;
    let warm_us = per_call(10_000, || {
        let _ = std::hint::black_box(condition.evaluate(&facts, &config));
    });
    let fresh_us = per_call(1_000, || {
        if let Ok(mut c) = cached_host.condition(&cached, Limits::default()) {
            let _ = std::hint::black_box(c.evaluate(&facts, &config));
        }
    });
    report.row("| mem_gt condition | µs |".into());
    report.row("|---|---:|".into());
    report.row(format!(
        "| cold: compile ({:?}) | {:.0} |",
        cold.origin,
        cold.load_time.as_secs_f64() * 1e6
    ));
    report.row(format!(
        "| cached: load from the disk cache ({:?}) | {:.0} |",
        cached.origin,
        cached.load_time.as_secs_f64() * 1e6
    ));
    report.row(format!(
        "| fresh instance + first evaluate | {fresh_us:.1} |"
    ));
    report.row(format!("| warm evaluate (live instance) | {warm_us:.2} |"));
    Ok(())
}

/// CPU seconds (user + system) and peak resident bytes of a process, from /proc.
fn usage(pid: u32) -> (f64, u64) {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap_or_default();
    let fields: Vec<&str> = stat
        .rsplit(')')
        .next()
        .unwrap_or("")
        .split_whitespace()
        .collect();
    let ticks = |i: usize| {
        fields
            .get(i)
            .and_then(|f| f.parse::<u64>().ok())
            .unwrap_or(0)
    };
    // SAFETY: sysconf has no preconditions.
    let hz = unsafe { libc::sysconf(libc::_SC_CLK_TCK) }.max(1) as f64;
    let cpu = (ticks(11) + ticks(12)) as f64 / hz;
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap_or_default();
    let kib = |key: &str| {
        status
            .lines()
            .find_map(|l| l.strip_prefix(key))
            .and_then(|v| v.trim().trim_end_matches("kB").trim().parse::<u64>().ok())
    };
    (cpu, kib("VmHWM:").unwrap_or(0) * 1024)
}

fn resident(pid: u32) -> u64 {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap_or_default();
    status
        .lines()
        .find_map(|l| l.strip_prefix("VmRSS:"))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse::<u64>().ok())
        .unwrap_or(0)
        * 1024
}

fn spec(kind: TaskKind, input: &[u8]) -> TaskSpec {
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

#[allow(clippy::too_many_arguments)] // one call per row of the table; a struct would only rename them
async fn throughput(
    dir: &Path,
    report: &mut Report,
    args: &BenchArgs,
    label: &str,
    worker_args: &[&str],
    tasks: u32,
    components: Vec<Vec<u8>>,
    spec: TaskSpec,
) -> Result<()> {
    let sub = dir.join(format!("{label}-{tasks}"));
    std::fs::create_dir_all(&sub)?;
    let mut cluster = launch(&sub, &[])?;
    for i in 0..args.workers {
        let slots = args.slots.to_string();
        cluster.worker(
            &format!("bench-{i}"),
            &[&["--slots", &slots], worker_args].concat(),
        )?;
    }
    let client = cluster.client().await?;
    // Wait until the workers are in, so the run measures scheduling, not start-up.
    while client.status().await?.workers.len() < args.workers as usize {
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    let pid = cluster.scheduler.id();
    let (cpu_before, _) = usage(pid);
    let started = Instant::now();
    let (job, _, _) = client
        .submit(
            components,
            vec![NewGroup {
                spec,
                count: tasks,
                inputs: vec![],
            }],
        )
        .await?;
    let counts = client.wait(job, |_| {}).await?;
    let elapsed = started.elapsed().as_secs_f64();
    let (cpu_after, peak) = usage(pid);
    if counts.succeeded != u64::from(tasks) {
        bail!(
            "{label}: only {} of {tasks} tasks succeeded",
            counts.succeeded
        );
    }
    let cpu_us = (cpu_after - cpu_before) * 1e6 / f64::from(tasks);
    report.row(format!(
        "| {label} | {tasks} | {} x {} | {elapsed:.2} | {:.0} | {cpu_us:.2} | {:.0} |",
        args.workers,
        args.slots,
        f64::from(tasks) / elapsed,
        peak as f64 / (1u64 << 20) as f64
    ));
    Ok(())
}

async fn cluster_benches(args: &BenchArgs, dir: &Path, report: &mut Report) -> Result<()> {
    Launcher::beside_current_exe(dir)?.command("scheduler")?;
    report.row("| tasks | N | workers x slots | seconds | tasks/s | scheduler CPU µs/task | scheduler peak MiB |".into());
    report.row("|---|---:|---|---:|---:|---:|---:|".into());
    let noop = spec(
        TaskKind::Command {
            argv: vec!["true".into()],
            env: vec![],
        },
        b"",
    );
    for &n in &args.tasks {
        throughput(
            dir,
            report,
            args,
            "no-execute",
            &["--no-execute"],
            n,
            vec![],
            noop.clone(),
        )
        .await?;
    }
    let square = spec(
        TaskKind::Wasm {
            component: content_hash(bundled::SQUARE),
        },
        b"7",
    );
    throughput(
        dir,
        report,
        args,
        "wasm (square)",
        &[],
        args.wasm_tasks,
        vec![bundled::SQUARE.to_vec()],
        square,
    )
    .await?;
    throughput(
        dir,
        report,
        args,
        "command `true`",
        &[],
        args.command_tasks,
        vec![],
        noop.clone(),
    )
    .await?;
    report.row(String::new());

    // Memory per queued task: no workers, so everything stays queued.
    let sub = dir.join("queued");
    std::fs::create_dir_all(&sub)?;
    let cluster = launch(&sub, &[])?;
    let client = cluster.client().await?;
    let pid = cluster.scheduler.id();
    client.status().await?;
    let before = resident(pid);
    client
        .submit(
            vec![],
            vec![NewGroup {
                spec: noop.clone(),
                count: args.queued,
                inputs: vec![],
            }],
        )
        .await?;
    client.status().await?;
    let after = resident(pid);
    report.row(format!(
        "memory: {} queued tasks: scheduler resident memory +{:.1} MiB = {:.0} bytes per queued task",
        args.queued,
        after.saturating_sub(before) as f64 / (1u64 << 20) as f64,
        after.saturating_sub(before) as f64 / f64::from(args.queued)
    ));
    drop(cluster);

    // Reaction: a dynamic manager, default policy and scaling interval.
    let sub = dir.join("reaction");
    std::fs::create_dir_all(&sub)?;
    let mut cluster = launch(&sub, &[])?;
    cluster.manager(&[
        "--id",
        "bench",
        "--worker-type",
        "default",
        "--max-task-concurrency",
        "4",
    ])?;
    let client = cluster.client().await?;
    while client.status().await?.managers.is_empty() {
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    let started = Instant::now();
    client
        .submit(
            vec![],
            vec![NewGroup {
                spec: noop,
                count: 100,
                inputs: vec![],
            }],
        )
        .await?;
    while client.status().await?.workers.is_empty() {
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    report.row(format!(
        "reaction: burst of 100 queued tasks -> first worker registered: {:.0} ms (scaling interval 1 s)",
        started.elapsed().as_secs_f64() * 1e3
    ));
    drop(cluster);
    if args.journal_tasks > 0 {
        report.row(String::new());
        journal_bench(args, dir, report, noop_spec()).await?;
    }
    Ok(())
}

fn noop_spec() -> TaskSpec {
    spec(
        TaskKind::Command {
            argv: vec!["true".into()],
            env: vec![],
        },
        b"",
    )
}

/// A scheduler on `journal` (killed with -9 first if one runs): the time from its start to its
/// first answer, which comes once the journal is replayed.
async fn restart(dir: &Path, journal: &Path, previous: Option<Cluster>) -> Result<(Cluster, f64)> {
    if let Some(mut previous) = previous {
        previous.kill_scheduler();
        drop(previous); // and its workers
    }
    let started = Instant::now();
    let cluster = launch(dir, &[OsStr::new("--journal"), journal.as_os_str()])?;
    cluster.client().await?.status().await?;
    Ok((cluster, started.elapsed().as_secs_f64()))
}

async fn journal_bench(
    args: &BenchArgs,
    dir: &Path,
    report: &mut Report,
    noop: TaskSpec,
) -> Result<()> {
    let sub = dir.join("journal");
    std::fs::create_dir_all(&sub)?;
    let journal = sub.join("journal");
    let mib = |bytes: u64| bytes as f64 / (1u64 << 20) as f64;
    let (mut cluster, _) = restart(&sub, &journal, None).await?;
    for i in 0..args.workers {
        cluster.worker(&format!("journal-{i}"), &["--slots", "64", "--no-execute"])?;
    }
    let client = cluster.client().await?;
    let mut left = args.journal_tasks;
    while left > 0 {
        let n = left.min(1_000_000);
        let (job, _, _) = client
            .submit(
                vec![],
                vec![NewGroup {
                    spec: noop.clone(),
                    count: u32::try_from(n)?,
                    inputs: vec![],
                }],
            )
            .await?;
        client.wait(job, |_| {}).await?;
        left -= n;
    }
    let held = std::fs::metadata(&journal)?.len();
    let (cluster, held_restart) = restart(&sub, &journal, Some(cluster)).await?;
    let client = cluster.client().await?;
    client.forget_finished().await?;
    // Compaction runs on the scheduler's next tick.
    let since = Instant::now();
    while std::fs::metadata(&journal)?.len() >= held && since.elapsed() < Duration::from_secs(60) {
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let forgotten = std::fs::metadata(&journal)?.len();
    let (cluster, forgotten_restart) = restart(&sub, &journal, Some(cluster)).await?;
    report.row(format!(
        "journal: {} finished tasks: {:.1} MiB, restart (kill -9, replay, first answer) {:.2} s; \
         forgotten (compacted while running): {:.3} MiB, restart {:.2} s",
        args.journal_tasks,
        mib(held),
        held_restart,
        mib(forgotten),
        forgotten_restart
    ));
    drop(cluster);
    Ok(())
}
