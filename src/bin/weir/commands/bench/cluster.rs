//! Throughput, memory per queued task and reaction time, on clusters of real processes.

use std::path::Path;
use std::time::{Duration, Instant};

use anyhow::{Result, bail};
use weir::cluster::Launcher;
use weir::plugin::{bundled, cache::content_hash};
use weir::proto::{TaskKind, TaskSpec};

use super::{BenchArgs, Report, journal, noop_spec, spec, submit};
use crate::commands::local::launch;

/// CPU seconds (user + system) and peak resident bytes of a process, from /proc.
pub(super) fn usage(pid: u32) -> (f64, u64) {
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
    let hz = rustix::param::clock_ticks_per_second().max(1) as f64;
    let cpu = (ticks(11) + ticks(12)) as f64 / hz;
    (cpu, memory(pid, "VmHWM:"))
}

/// Bytes of a process's memory line (`VmRSS:`, `VmHWM:`) in /proc/PID/status; 0 if none.
pub(super) fn memory(pid: u32, key: &str) -> u64 {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap_or_default();
    let kib = status
        .lines()
        .find_map(|l| l.strip_prefix(key))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse::<u64>().ok());
    kib.unwrap_or(0) * 1024
}

/// One throughput row: `tasks` tasks of `spec` on `workers` x `slots` workers started with
/// `worker_args`.
struct Run<'a> {
    label: &'a str,
    worker_args: &'a [&'a str],
    tasks: u32,
    components: Vec<Vec<u8>>,
    spec: TaskSpec,
    workers: u32,
    slots: u32,
    /// The scheduler's flags (`--threads`, `--prefetch`), the same for every run.
    scheduler: &'a [String],
}

/// Runs one row and returns its tasks per second (0 for a skipped row).
async fn throughput(dir: &Path, report: &mut Report, run: Run<'_>) -> Result<f64> {
    let Run {
        label,
        worker_args,
        tasks,
        components,
        spec,
        workers,
        slots,
        scheduler,
    } = run;
    if tasks == 0 {
        return Ok(0.0);
    }
    let sub = dir.join(format!("{label}-{tasks}-{workers}x{slots}"));
    std::fs::create_dir_all(&sub)?;
    let scheduler_args: Vec<&std::ffi::OsStr> = scheduler.iter().map(|a| a.as_ref()).collect();
    let mut cluster = launch(&sub, &scheduler_args)?;
    for i in 0..workers {
        let slots = slots.to_string();
        cluster.worker(
            &format!("bench-{i}"),
            &[&["--slots", &slots], worker_args].concat(),
        )?;
    }
    let client = cluster.client().await?;
    // Wait until the workers are in, so the run measures scheduling, not start-up.
    while client.status().await?.workers.len() < workers as usize {
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    let pid = cluster.scheduler.id();
    let (cpu_before, _) = usage(pid);
    let started = Instant::now();
    let job = submit(&client, components, spec, tasks).await?;
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
        "| {label} | {tasks} | {workers} x {slots} | {elapsed:.2} | {:.0} | {cpu_us:.2} | {:.0} |",
        f64::from(tasks) / elapsed,
        peak as f64 / (1u64 << 20) as f64
    ));
    Ok(f64::from(tasks) / elapsed)
}

/// The machine's own rate of short commands: `spawners` threads, each starting `true` and
/// waiting for it (`posix_spawn` + `waitpid`, as std does for a command without a `pre_exec`
/// hook), `count` in all; in commands per second.
fn spawn_limit(spawners: u32, count: u32) -> Result<f64> {
    let spawners = spawners.max(1);
    let started = Instant::now();
    let threads: Vec<_> = (0..spawners)
        .map(|i| {
            let share = count / spawners + u32::from(i < count % spawners);
            std::thread::spawn(move || -> std::io::Result<()> {
                for _ in 0..share {
                    let status = std::process::Command::new("true")
                        .stdin(std::process::Stdio::null())
                        .stdout(std::process::Stdio::null())
                        .stderr(std::process::Stdio::null())
                        .status()?;
                    if !status.success() {
                        return Err(std::io::Error::other(format!("`true` ended with {status}")));
                    }
                }
                Ok(())
            })
        })
        .collect();
    for thread in threads {
        thread
            .join()
            .map_err(|_| anyhow::anyhow!("a spawner thread panicked"))??;
    }
    Ok(f64::from(count) / started.elapsed().as_secs_f64())
}

/// `weir bench --commands-only`: `true` commands on 2 workers x 2 slots against what this
/// machine spawns with 4 spawners doing nothing else, measured in the same run (before and
/// after weir's, so a change in the machine's load shows), and their ratio.
pub(super) async fn commands(args: &BenchArgs, dir: &Path, report: &mut Report) -> Result<()> {
    Launcher::beside_current_exe(dir)?.command("scheduler")?;
    let scheduler = vec!["--threads".to_string(), args.scheduler_threads.to_string()];
    let (workers, slots) = (2, 2);
    let tasks = args.command_tasks.max(1);
    let before = spawn_limit(workers * slots, tasks)?;
    report.row("| tasks | N | workers x slots | seconds | tasks/s | scheduler CPU µs/task | scheduler peak MiB |".into());
    report.row("|---|---:|---|---:|---:|---:|---:|".into());
    let run = Run {
        label: "command `true`",
        worker_args: &[],
        tasks,
        components: vec![],
        spec: noop_spec(),
        workers,
        slots,
        scheduler: &scheduler,
    };
    let weir = throughput(dir, report, run).await?;
    let after = spawn_limit(workers * slots, tasks)?;
    let limit = (before + after) / 2.0;
    report.row(String::new());
    report.row(format!(
        "spawn limit: {} spawners x `true` (spawn + wait, nothing else): {before:.0}/s before, {after:.0}/s after weir's run"
    , workers * slots));
    report.row(format!(
        "command `true` on {workers} x {slots}: {weir:.0}/s = {:.2} of the machine's spawn limit ({limit:.0}/s, the mean; goal >= 0.75)",
        weir / limit
    ));
    Ok(())
}

pub(super) async fn benches(args: &BenchArgs, dir: &Path, report: &mut Report) -> Result<()> {
    Launcher::beside_current_exe(dir)?.command("scheduler")?;
    let mut scheduler = vec!["--threads".to_string(), args.scheduler_threads.to_string()];
    if let Some(n) = args.prefetch {
        scheduler.extend(["--prefetch".to_string(), n.to_string()]);
    }
    report.row("| tasks | N | workers x slots | seconds | tasks/s | scheduler CPU µs/task | scheduler peak MiB |".into());
    report.row("|---|---:|---|---:|---:|---:|---:|".into());
    let noop = noop_spec();
    for &n in &args.tasks {
        let run = Run {
            label: "no-execute",
            worker_args: &["--no-execute"],
            tasks: n,
            components: vec![],
            spec: noop.clone(),
            workers: args.workers,
            slots: args.slots,
            scheduler: &scheduler,
        };
        throughput(dir, report, run).await?;
    }
    let square = TaskKind::Wasm {
        component: content_hash(bundled::SQUARE),
    };
    let run = Run {
        label: "wasm (square)",
        worker_args: &[],
        tasks: args.wasm_tasks,
        components: vec![bundled::SQUARE.to_vec()],
        spec: spec(square.clone(), b"7"),
        workers: args.workers,
        slots: args.slots,
        scheduler: &scheduler,
    };
    throughput(dir, report, run).await?;
    let run = Run {
        label: "command `true`",
        worker_args: &[],
        tasks: args.command_tasks,
        components: vec![],
        spec: noop.clone(),
        workers: args.workers,
        slots: args.slots,
        scheduler: &scheduler,
    };
    throughput(dir, report, run).await?;
    // Few slots per worker, tasks as short as their dispatch: where the per-task round trip
    // between worker and scheduler shows.
    if args.small_slot_tasks > 0 {
        for (workers, slots) in [(2, 2), (50, 1)] {
            let wasm = Run {
                label: "wasm (square)",
                worker_args: &[],
                tasks: args.small_slot_tasks,
                components: vec![bundled::SQUARE.to_vec()],
                spec: spec(square.clone(), b"7"),
                workers,
                slots,
                scheduler: &scheduler,
            };
            throughput(dir, report, wasm).await?;
            let command = Run {
                label: "command `true`",
                worker_args: &[],
                tasks: args.small_slot_tasks,
                components: vec![],
                spec: noop.clone(),
                workers,
                slots,
                scheduler: &scheduler,
            };
            throughput(dir, report, command).await?;
        }
    }
    report.row(String::new());

    // Memory per queued task: no workers, so everything stays queued.
    let sub = dir.join("queued");
    std::fs::create_dir_all(&sub)?;
    let cluster = launch(&sub, &[])?;
    let client = cluster.client().await?;
    let pid = cluster.scheduler.id();
    client.status().await?;
    let before = memory(pid, "VmRSS:");
    submit(&client, vec![], noop.clone(), args.queued).await?;
    client.status().await?;
    let after = memory(pid, "VmRSS:");
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
    let burst = Instant::now();
    submit(&client, vec![], noop.clone(), 100).await?;
    // The manager reports the worker it started (starting), then it registers (live).
    let mut started = None;
    let registered = loop {
        let status = client.status().await?;
        if started.is_none() && status.managers.iter().any(|m| m.starting + m.live > 0) {
            started = Some(burst.elapsed());
        }
        if !status.workers.is_empty() {
            break burst.elapsed();
        }
        tokio::time::sleep(Duration::from_millis(2)).await;
    };
    let started = started.unwrap_or(registered);
    report.row(format!(
        "reaction: burst of 100 queued tasks into an empty cluster -> first worker started: {:.0} ms, registered: {:.0} ms (scaling interval 1 s)",
        started.as_secs_f64() * 1e3,
        registered.as_secs_f64() * 1e3
    ));
    drop(cluster);
    if args.journal_tasks > 0 {
        report.row(String::new());
        journal::bench(args, dir, report, noop).await?;
    }
    Ok(())
}
