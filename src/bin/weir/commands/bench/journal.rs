//! The journal's size and the scheduler's restart time after N finished tasks, and again once
//! they are forgotten.

use std::ffi::OsStr;
use std::path::Path;
use std::time::{Duration, Instant};

use anyhow::Result;
use weir::cluster::Cluster;
use weir::proto::TaskSpec;

use super::{BenchArgs, Report, submit};
use crate::commands::local::launch;

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

pub(super) async fn bench(
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
        let job = submit(&client, vec![], noop.clone(), u32::try_from(n)?).await?;
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
