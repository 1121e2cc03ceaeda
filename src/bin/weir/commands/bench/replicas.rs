//! `weir bench --replicas`: one scheduler with its journal and three replicas on loopback,
//! measured alike and alternated: how long a submission takes to be acknowledged (a journal's
//! fsync, or a majority's), submissions per second one after another, tasks per second and
//! scheduler CPU per task on no-op workers; and, for the replicas, how long after the leader
//! is `kill -9`ed another one answers.

use std::ffi::OsStr;
use std::path::{Path, PathBuf};
use std::process::{Child, Stdio};
use std::time::{Duration, Instant};

use anyhow::{Context, Result, anyhow};
use weir::client::Client;
use weir::cluster::Launcher;

use super::cluster::usage;
use super::{BenchArgs, Report, noop_spec, submit};
use crate::commands::local::launch;

/// Submissions timed one after another.
const SUBMISSIONS: usize = 300;

struct Measured {
    p50_ms: f64,
    p99_ms: f64,
    submits_per_s: f64,
    tasks_per_s: f64,
    /// The scheduler's (the leader's) CPU per task, and every replica's together.
    cpu_us: f64,
    all_cpu_us: f64,
}

async fn measure(access: &Path, pids: &[u32], leader: u32, tasks: u32) -> Result<Measured> {
    let client = weir::client::reach(access, Duration::from_secs(30), |_| {}).await?;
    while client.status().await?.workers.len() < 2 {
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    let mut latencies = Vec::with_capacity(SUBMISSIONS);
    let started = Instant::now();
    for _ in 0..SUBMISSIONS {
        let sent = Instant::now();
        submit(&client, vec![], noop_spec(), 1).await?;
        latencies.push(sent.elapsed().as_secs_f64() * 1e3);
    }
    let submits_per_s = SUBMISSIONS as f64 / started.elapsed().as_secs_f64();
    latencies.sort_by(f64::total_cmp);
    let at = |q: f64| latencies[((latencies.len() - 1) as f64 * q) as usize];
    let cpu = |pids: &[u32]| pids.iter().map(|p| usage(*p).0).sum::<f64>();
    let (before, all_before) = (cpu(&[leader]), cpu(pids));
    let started = Instant::now();
    let job = submit(&client, vec![], noop_spec(), tasks).await?;
    let counts = client.wait(job, |_| {}).await?;
    let elapsed = started.elapsed().as_secs_f64();
    if counts.succeeded != u64::from(tasks) {
        return Err(anyhow!(
            "only {} of {tasks} tasks succeeded",
            counts.succeeded
        ));
    }
    Ok(Measured {
        p50_ms: at(0.5),
        p99_ms: at(0.99),
        submits_per_s,
        tasks_per_s: f64::from(tasks) / elapsed,
        cpu_us: (cpu(&[leader]) - before) * 1e6 / f64::from(tasks),
        all_cpu_us: (cpu(pids) - all_before) * 1e6 / f64::from(tasks),
    })
}

fn row(report: &mut Report, label: &str, tasks: u32, m: &Measured, failover: Option<f64>) {
    report.row(format!(
        "| {label} | {:.2} | {:.2} | {:.0} | {tasks} | {:.0} | {:.1} | {:.1} | {} |",
        m.p50_ms,
        m.p99_ms,
        m.submits_per_s,
        m.tasks_per_s,
        m.cpu_us,
        m.all_cpu_us,
        failover.map_or_else(|| "-".to_string(), |s| format!("{s:.2}"))
    ));
}

/// Three replicas on free loopback ports in `dir/r1..r3`; their processes and replica 1's
/// access file (which lists all three).
fn replicas(dir: &Path) -> Result<(Vec<Child>, PathBuf)> {
    let ports: Vec<u16> = {
        let sockets: Vec<std::net::UdpSocket> = (0..3)
            .map(|_| std::net::UdpSocket::bind("127.0.0.1:0"))
            .collect::<Result<_, _>>()?;
        sockets
            .iter()
            .map(|s| s.local_addr().map(|a| a.port()))
            .collect::<Result<_, _>>()?
    };
    let peers: Vec<String> = ports
        .iter()
        .enumerate()
        .map(|(i, port)| format!("{}=quic://127.0.0.1:{port}", i + 1))
        .collect();
    let peers = peers.join(",");
    let mut children = Vec::new();
    for id in 1..=3 {
        let sub = dir.join(format!("r{id}"));
        std::fs::create_dir_all(&sub)?;
        if id > 1 {
            for file in ["access.json", "scheduler-cert.pem", "scheduler-key.pem"] {
                std::fs::copy(dir.join("r1").join(file), sub.join(file))?;
            }
        }
        let launcher = Launcher::beside_current_exe(&sub)?;
        let mut child = launcher
            .command("scheduler")?
            .args(["--replica", &id.to_string(), "--peers", &peers])
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .spawn()?;
        // Its first line says it listens (the access file is written by then).
        let stdout = child.stdout.take().context("no stdout")?;
        let mut first = String::new();
        std::io::BufRead::read_line(&mut std::io::BufReader::new(stdout), &mut first)?;
        children.push(child);
    }
    Ok((children, dir.join("r1").join("access.json")))
}

/// The id of the replica that leads, other than `not`.
async fn leader(client: &Client, not: Option<u64>) -> Result<u64> {
    let replicas = client.replicas().await?;
    replicas
        .iter()
        .find(|r| r.leader && Some(r.id) != not)
        .map(|r| r.id)
        .ok_or_else(|| anyhow!("no replica leads yet"))
}

async fn reach_leader(access: &Path, not: Option<u64>) -> Result<u64> {
    let started = Instant::now();
    loop {
        let found = match weir::client::reach(access, Duration::from_secs(10), |_| {}).await {
            Ok(client) => leader(&client, not).await,
            Err(error) => Err(error.into()),
        };
        match found {
            Ok(id) => return Ok(id),
            Err(_) if started.elapsed() < Duration::from_secs(60) => {
                tokio::time::sleep(Duration::from_millis(20)).await;
            }
            Err(error) => return Err(error),
        }
    }
}

pub(super) async fn bench(args: &BenchArgs, dir: &Path, report: &mut Report) -> Result<()> {
    let tasks = args.replica_tasks;
    report.row(format!(
        "Replicas: {SUBMISSIONS} one-task submissions one after another (acknowledged latency, \
         rate), then one job of {tasks} no-op tasks on 2 workers x 64 slots (`--no-execute`); \
         CPU of the scheduler (the leader) and of all replicas together; the leader `kill -9`ed \
         and the time until another one answers `weir replicas`. Alternated {} times.",
        args.replica_rounds
    ));
    report.row(String::new());
    report.row(
        "| schedulers | submit p50 ms | submit p99 ms | submits/s | tasks | tasks/s | scheduler CPU µs/task | all replicas CPU µs/task | failover s |"
            .into(),
    );
    report.row("|---|---:|---:|---:|---:|---:|---:|---:|---:|".into());
    for round in 0..args.replica_rounds {
        // One scheduler with its journal.
        let sub = dir.join(format!("single-{round}"));
        std::fs::create_dir_all(&sub)?;
        let journal = sub.join("journal");
        let mut single = launch(&sub, &[OsStr::new("--journal"), journal.as_os_str()])?;
        for i in 0..2 {
            single.worker(&format!("bench-{i}"), &["--slots", "64", "--no-execute"])?;
        }
        let pid = single.scheduler.id();
        let measured = measure(&single.access_file(), &[pid], pid, tasks).await?;
        row(report, "1 (journal)", tasks, &measured, None);
        drop(single);

        // Three replicas.
        let sub = dir.join(format!("replicas-{round}"));
        std::fs::create_dir_all(&sub)?;
        let (mut children, access) = replicas(&sub)?;
        let launcher = Launcher::beside_current_exe(sub.join("r1"))?;
        let mut workers = Vec::new();
        for i in 0..2 {
            workers.push(
                launcher
                    .command("worker")?
                    .args([
                        "--name",
                        &format!("bench-{i}"),
                        "--slots",
                        "64",
                        "--no-execute",
                    ])
                    .stderr(Stdio::null())
                    .spawn()?,
            );
        }
        let first = reach_leader(&access, None).await?;
        let pids: Vec<u32> = children.iter().map(Child::id).collect();
        let leader_pid = pids[usize::try_from(first)? - 1];
        let measured = measure(&access, &pids, leader_pid, tasks).await;
        let killed = Instant::now();
        let _ = children[usize::try_from(first)? - 1].kill();
        let next = reach_leader(&access, Some(first)).await;
        let failover = killed.elapsed().as_secs_f64();
        for child in children.iter_mut().chain(workers.iter_mut()) {
            let _ = child.kill();
            let _ = child.wait();
        }
        next?;
        row(report, "3 replicas", tasks, &measured?, Some(failover));
    }
    report.row(String::new());
    Ok(())
}
