//! `weir bench --simulated-workers N`: the scheduler's own cost as the cluster grows.
//!
//! This process opens N worker connections and M worker-manager connections to a real scheduler
//! (real QUIC, hello, registration, heartbeats as real peers send them — a renewal of its lease
//! as often as the scheduler asks of an idle worker, a manager's state at the scheduler's pace — one
//! verdict report each, and outcomes answered at once for every task handed over), so what is
//! measured is the scheduler,
//! not the work: the time to connect and register them all, the scheduler's resident memory
//! per worker, its CPU per second with only heartbeats coming in, its CPU per dispatched task,
//! and how long `weir status` takes. The peers are [`Fleet`] (fleet.rs); beside each run, the
//! same number of bare QUIC connections measure the transport's own floor (quic_floor.rs), and
//! a run of 10,000 workers is judged against #35's goals.

use std::ffi::OsStr;
use std::time::{Duration, Instant};

use anyhow::{Context, Result, bail};
use tokio::sync::watch;
use weir::net::AccessFile;

use super::cluster::{memory, usage};
use super::fleet::Fleet;
use super::{Report, noop_spec, quic_floor, submit};
use crate::commands::local::launch;

/// How long the simulated workers may take to register before the run is given up.
pub(super) const REGISTER_LIMIT: Duration = Duration::from_secs(600);

pub(super) async fn simulated(
    workers: &[u32],
    managers: u32,
    threads: u16,
    idle: Duration,
    settings: &[(&str, String)],
    dir: &std::path::Path,
    report: &mut Report,
) -> Result<()> {
    let setting = match settings.is_empty() {
        true => "otherwise its defaults".to_string(),
        false => settings
            .iter()
            .map(|(flag, value)| format!("{flag} {value}"))
            .collect::<Vec<_>>()
            .join(", "),
    };
    report.row(format!(
        "Simulated workers (1 slot each, renewing their lease as often as the scheduler asks of idle workers) under {managers} simulated fixed pools reporting at the scheduler's pace (scheduler --threads {threads}, {setting}; idle measured over {} s):", idle.as_secs()
    ));
    report.row(String::new());
    report.row("| workers | managers | connect + register s | scheduler RSS MiB | KiB per peer | idle CPU ms/s | idle datagrams/s per peer | idle bytes/s per peer | tasks | CPU µs/task | less idle µs/task | tasks/s | `weir status` ms |".into());
    report.row("|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|".into());
    let mut measured = Vec::new();
    for &n in workers {
        let managers = managers.min(n).max(1);
        let sub = dir.join(format!("simulated-{n}"));
        std::fs::create_dir_all(&sub)?;
        let connections = (n + managers + 64).to_string();
        let threads = threads.to_string();
        let mut flags: Vec<&OsStr> = vec![
            "--threads".as_ref(),
            threads.as_ref(),
            "--max-connections".as_ref(),
            connections.as_ref(),
        ];
        for (flag, value) in settings {
            flags.extend([OsStr::new(flag), OsStr::new(value)]);
        }
        let cluster = launch(&sub, &flags)?;
        let access = AccessFile::read(&cluster.access_file())?;
        let client = cluster.client().await?;
        let pid = cluster.scheduler.id();
        let rss_before = memory(pid, "VmRSS:");
        let (stop, stopped) = watch::channel(false);
        let started = Instant::now();
        // A simulated peer the scheduler takes for lost does not come back: the whole
        // registration has a deadline, and a run past it says how far it got.
        let deadline = tokio::time::Instant::now() + REGISTER_LIMIT;
        let fleet = Fleet::start(&access, n, managers, stopped, deadline).await?;
        // Told once every one is registered (a status every few ms would measure itself).
        let mut ready = 0;
        let registered = tokio::time::timeout_at(
            deadline,
            client.wait_workers(n, None, |count| ready = count),
        )
        .await;
        match registered {
            Ok(result) => {
                result.context("waiting for the simulated workers to register")?;
            }
            Err(_) => bail!(
                "simulated {n}: every peer registered, but only {ready} of {n} workers were still ready (not lost or drained) {} s after the start (the scheduler's log above says which were lost)",
                REGISTER_LIMIT.as_secs()
            ),
        }
        let connect = started.elapsed().as_secs_f64();
        let rss = memory(pid, "VmRSS:");
        // Heartbeats only.
        tokio::time::sleep(Duration::from_secs(1)).await;
        let (cpu_before, _) = usage(pid);
        let (datagrams_before, bytes_before) = fleet.traffic();
        eprintln!(
            "idle window: scheduler pid {pid}, {} s from now",
            idle.as_secs()
        );
        if let Some(url) = &cluster.dashboard {
            eprintln!("dashboard on {url}");
        }
        tokio::time::sleep(idle).await;
        let (cpu_after, _) = usage(pid);
        let (datagrams_after, bytes_after) = fleet.traffic();
        let idle_ms = (cpu_after - cpu_before) * 1e3 / idle.as_secs_f64();
        // Per peer and second, both ways: what one idle peer costs on the wire.
        let per_peer = |n_: u64| n_ as f64 / idle.as_secs_f64() / f64::from(n + managers);
        let idle_datagrams = per_peer(datagrams_after.saturating_sub(datagrams_before));
        let idle_bytes = per_peer(bytes_after.saturating_sub(bytes_before));
        let mut latencies = Vec::new();
        for _ in 0..5 {
            let asked = Instant::now();
            client.status().await?;
            latencies.push(asked.elapsed().as_secs_f64() * 1e3);
        }
        latencies.sort_by(f64::total_cmp);
        let tasks = n.saturating_mul(2).max(20_000);
        let (cpu_before, _) = usage(pid);
        let began = Instant::now();
        let job = submit(&client, vec![], noop_spec(), tasks).await?;
        let counts = client.wait(job, |_| {}).await?;
        let elapsed = began.elapsed().as_secs_f64();
        let (cpu_after, _) = usage(pid);
        if counts.succeeded != u64::from(tasks) {
            bail!(
                "simulated {n}: only {} of {tasks} tasks succeeded",
                counts.succeeded
            );
        }
        let cpu = cpu_after - cpu_before;
        // What the heartbeats alone would have cost meanwhile, taken out.
        let net = (cpu - idle_ms / 1e3 * elapsed).max(0.0);
        let kib_per_peer = rss.saturating_sub(rss_before) as f64 / 1024.0 / f64::from(n + managers);
        let status_ms = latencies[latencies.len() / 2];
        measured.push(Measured {
            workers: n,
            peers: n + managers,
            connect,
            rss_mib: rss as f64 / f64::from(1 << 20),
            kib_per_peer,
            idle_ms,
            status_ms,
        });
        report.row(format!(
            "| {n} | {managers} | {connect:.1} | {:.0} | {kib_per_peer:.1} | {idle_ms:.0} | {idle_datagrams:.2} | {idle_bytes:.0} | {tasks} | {:.1} | {:.1} | {:.0} | {:.1} |",
            rss as f64 / f64::from(1 << 20),
            cpu * 1e6 / f64::from(tasks),
            net * 1e6 / f64::from(tasks),
            f64::from(tasks) / elapsed,
            status_ms,
        ));
        if let Some(url) = &cluster.dashboard {
            super::dashboard::rows(url, n, report).await?;
        }
        let _ = stop.send(true);
        fleet.stop().await;
        drop(cluster);
    }
    report.row(String::new());
    report.row("The transport's floor: as many idle connections to a process that only holds them (the scheduler's TLS and transport settings, one stream each, nothing of weir's), its resident memory per connection:".into());
    report.row(String::new());
    report.row("| connections | bare QUIC KiB per connection | scheduler KiB per peer | weir's own KiB per peer |".into());
    report.row("|---:|---:|---:|---:|".into());
    let mut floors = Vec::new();
    for m in &measured {
        let bare = quic_floor::floor(m.peers, dir).await;
        quic_floor::row(report, m.peers, &bare, m.kib_per_peer);
        floors.push(bare);
    }
    report.row(String::new());
    // The goals are set for the scheduler's defaults: one thread, no flags beyond them.
    let defaults = managers == 1000 && threads == 1 && settings.is_empty();
    for (m, bare) in measured.iter().zip(floors) {
        if m.workers == GOALS_AT
            && defaults
            && let Ok(bare) = bare
        {
            goals(m, bare, report);
        }
    }
    Ok(())
}

/// What one simulated-worker run measured, for the goals and the floor beside it.
struct Measured {
    workers: u32,
    peers: u32,
    connect: f64,
    rss_mib: f64,
    kib_per_peer: f64,
    idle_ms: f64,
    status_ms: f64,
}

/// #35's goals hold at this many workers under 1,000 managers, on the scheduler's defaults.
const GOALS_AT: u32 = 10_000;

/// #35's goals against a run of [`GOALS_AT`] workers, each met or not; the memory goal beside
/// what the transport alone holds for as many connections.
fn goals(m: &Measured, bare_kib: f64, report: &mut Report) {
    let verdict = |met: bool| if met { "met" } else { "NOT MET" };
    let floor_mib = bare_kib * f64::from(m.peers) / 1024.0;
    report.row(format!(
        "Goals at {} workers under 1,000 managers (#35):",
        m.workers
    ));
    report.row(String::new());
    report.row("| goal | measured | |".into());
    report.row("|---|---:|---|".into());
    for (goal, value, met) in [
        (
            "connect + register <= 10 s",
            format!("{:.1} s", m.connect),
            m.connect <= 10.0,
        ),
        (
            "idle scheduler CPU <= 100 ms/s",
            format!("{:.0} ms/s", m.idle_ms),
            m.idle_ms <= 100.0,
        ),
        (
            "`weir status` <= 50 ms",
            format!("{:.1} ms", m.status_ms),
            m.status_ms <= 50.0,
        ),
        (
            "scheduler RSS <= 300 MiB",
            format!("{:.0} MiB (bare QUIC alone: {floor_mib:.0})", m.rss_mib),
            m.rss_mib <= 300.0,
        ),
        (
            "<= 30 KiB per idle peer",
            format!("{:.1} KiB (bare QUIC alone: {bare_kib:.1})", m.kib_per_peer),
            m.kib_per_peer <= 30.0,
        ),
    ] {
        report.row(format!("| {goal} | {value} | {} |", verdict(met)));
    }
    report.row(String::new());
}
