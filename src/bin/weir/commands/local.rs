//! `weir local`: a whole cluster on this machine — a scheduler and workers as real processes on
//! loopback — running a batch of command tasks and a batch of sandboxed wasm tasks, checking
//! every result, then shutting down.

use std::ffi::OsStr;
use std::path::Path;
use std::time::Instant;

use anyhow::{Result, bail};
use clap::Args;
use weir::cluster::{Cluster, Launcher};
use weir::plugin::{bundled, cache::content_hash};
use weir::proto::{NewGroup, Outcome, TaskKind, TaskResult, TaskSpec, TaskState};

use crate::output::{LocalJob, LocalRun, LocalStep, Output};

#[derive(Args)]
pub(crate) struct LocalArgs {
    /// Workers to start.
    #[arg(long, default_value_t = 2)]
    workers: u32,
    /// Task slots per worker.
    #[arg(long, default_value_t = 4)]
    slots: u32,
    /// Tasks in each batch (command tasks, then wasm tasks).
    #[arg(long, default_value_t = 500)]
    tasks: u32,
}

fn spec(kind: TaskKind) -> TaskSpec {
    TaskSpec {
        kind,
        capabilities: vec![],
        environments: vec![],
        priority: 0,
        timeout_ms: 60_000,
        retries: 3,
        input: vec![],
    }
}

pub(crate) async fn run(args: &LocalArgs, output: &dyn Output) -> Result<()> {
    let dir = std::env::temp_dir().join(format!("weir-local-{}", std::process::id()));
    let result = cluster(args, output, &dir).await;
    let _ = std::fs::remove_dir_all(&dir);
    result
}

/// Start a scheduler (with `scheduler_args`) from the executables beside this one, its access
/// file in `dir`.
pub(crate) fn launch(dir: &Path, scheduler_args: &[&OsStr]) -> Result<Cluster> {
    // The launcher waits for the scheduler's first line: blocking, but only this task.
    let cluster =
        tokio::task::block_in_place(|| Launcher::beside_current_exe(dir)?.start(scheduler_args))?;
    Ok(cluster)
}

async fn cluster(args: &LocalArgs, output: &dyn Output, dir: &Path) -> Result<()> {
    let journal = dir.join("journal");
    let mut local = launch(dir, &[OsStr::new("--journal"), journal.as_os_str()])?;
    output.local_step(&LocalStep::Scheduler {
        address: &local.address,
    });
    for i in 0..args.workers {
        local.worker(&format!("local-{i}"), &["--slots", &args.slots.to_string()])?;
    }
    output.local_step(&LocalStep::Workers {
        workers: args.workers,
        slots: args.slots,
    });

    let client = local.client().await?;
    let started = Instant::now();
    let square = "echo $((WEIR_TASK_INDEX * WEIR_TASK_INDEX))";
    let command = spec(TaskKind::Command {
        argv: vec!["sh".into(), "-c".into(), square.into()],
        env: vec![],
    });
    let (command_job, _, _) = client
        .submit(
            vec![],
            vec![NewGroup {
                spec: command,
                count: args.tasks,
                inputs: vec![],
            }],
        )
        .await?;
    let wasm = spec(TaskKind::Wasm {
        component: content_hash(bundled::SQUARE),
    });
    let inputs = (0..args.tasks)
        .map(|i| i.to_string().into_bytes())
        .collect();
    let (wasm_job, _, _) = client
        .submit(
            vec![bundled::SQUARE.to_vec()],
            vec![NewGroup {
                spec: wasm,
                count: 0,
                inputs,
            }],
        )
        .await?;
    output.local_step(&LocalStep::Submitted {
        tasks: args.tasks,
        command_job,
        wasm_job,
    });

    let mut jobs = Vec::new();
    for (job, kind) in [(command_job, "command"), (wasm_job, "wasm")] {
        client.wait(job, |_| {}).await?;
        let results = client.results(job).await?;
        let checked = LocalJob {
            job,
            kind,
            tasks: results.len(),
            correct: results
                .iter()
                .enumerate()
                .filter(|(i, r)| correct(*i, r))
                .count(),
        };
        output.local_step(&LocalStep::Checked(&checked));
        if checked.correct != args.tasks as usize {
            bail!(
                "job {job}: only {} of {} {kind} tasks returned the right result",
                checked.correct,
                args.tasks
            );
        }
        jobs.push(checked);
    }
    output.local_done(&LocalRun {
        jobs,
        seconds: started.elapsed().as_secs_f64(),
        tasks: 2 * u64::from(args.tasks),
    });
    Ok(())
}

/// Whether task `index` succeeded with the square of its index.
fn correct(index: usize, result: &TaskResult) -> bool {
    let expected = ((index as u64) * (index as u64)).to_string();
    result.state == TaskState::Succeeded
        && match &result.outcome {
            Outcome::Exited { stdout, .. } => String::from_utf8_lossy(stdout).trim() == expected,
            Outcome::Returned { output } => String::from_utf8_lossy(output) == expected,
            Outcome::Function { .. } | Outcome::Error { .. } => false,
        }
}
