//! `weir local`: a whole cluster on this machine — a scheduler and workers as real processes on
//! loopback — running a batch of command tasks and a batch of sandboxed wasm tasks, checking
//! every result, then shutting down.

use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::time::Instant;

use anyhow::{Context, Result, bail};
use clap::Args;
use serde_json::json;
use tokio::io::{AsyncBufReadExt, BufReader};
use tokio::process::{Child, Command};
use weir::client::Client;
use weir::net::AccessFile;
use weir::plugin::{bundled, cache::content_hash};
use weir::proto::{NewGroup, Outcome, TaskKind, TaskSpec, TaskState};

use crate::Output;

#[derive(Args)]
pub struct LocalArgs {
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

pub fn sibling(name: &str) -> Result<PathBuf> {
    let exe = std::env::current_exe().context("cannot find this executable")?;
    let path = exe.with_file_name(name);
    if !path.exists() {
        bail!(
            "{} not found: build every executable first (`cargo build --bins`)",
            path.display()
        );
    }
    Ok(path)
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

pub async fn run(args: &LocalArgs, output: Output) -> Result<()> {
    let dir = std::env::temp_dir().join(format!("weir-local-{}", std::process::id()));
    let result = cluster(args, output, &dir).await;
    let _ = std::fs::remove_dir_all(&dir);
    result
}

/// A scheduler and workers started as processes of this machine; killed when dropped.
pub struct LocalCluster {
    pub scheduler: Child,
    pub workers: Vec<Child>,
    pub access_file: PathBuf,
    pub address: String,
}

impl LocalCluster {
    pub async fn start(dir: &Path, scheduler_args: &[String]) -> Result<LocalCluster> {
        let access_file = dir.join("access.json");
        let mut scheduler = Command::new(sibling("scheduler")?)
            .args(["--listen", "quic://127.0.0.1:0", "--access-file"])
            .arg(&access_file)
            .args(scheduler_args)
            .stdout(Stdio::piped())
            .kill_on_drop(true)
            .spawn()
            .context("cannot start the scheduler")?;
        let stdout = scheduler.stdout.take().context("no scheduler stdout")?;
        let first = BufReader::new(stdout)
            .lines()
            .next_line()
            .await?
            .unwrap_or_default();
        let Some(address) = first.strip_prefix("scheduler listening on ") else {
            bail!("the scheduler did not start (it said {first:?})");
        };
        Ok(LocalCluster {
            scheduler,
            workers: Vec::new(),
            access_file,
            address: address.to_string(),
        })
    }

    pub fn worker(&mut self, name: &str, args: &[String]) -> Result<()> {
        let child = Command::new(sibling("worker")?)
            .arg("--access-file")
            .arg(&self.access_file)
            .args(["--name", name])
            .args(args)
            .kill_on_drop(true)
            .spawn()
            .context("cannot start a worker")?;
        self.workers.push(child);
        Ok(())
    }

    pub async fn client(&self) -> Result<Client> {
        Ok(Client::connect(&AccessFile::read(&self.access_file)?).await?)
    }

    pub async fn stop(mut self) {
        for worker in &mut self.workers {
            let _ = worker.kill().await;
        }
        let _ = self.scheduler.kill().await;
    }
}

async fn cluster(args: &LocalArgs, output: Output, dir: &Path) -> Result<()> {
    let say = |line: String| {
        if output == Output::Cli {
            println!("{line}");
        }
    };
    let journal = dir.join("journal").display().to_string();
    let mut local = LocalCluster::start(dir, &["--journal".into(), journal]).await?;
    say(format!("scheduler on {}", local.address));
    for i in 0..args.workers {
        local.worker(
            &format!("local-{i}"),
            &["--slots".into(), args.slots.to_string()],
        )?;
    }
    say(format!("{} workers x {} slots", args.workers, args.slots));

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
    say(format!(
        "submitted {} command tasks (job {command_job}) and {} wasm tasks (job {wasm_job})",
        args.tasks, args.tasks
    ));

    let mut summary = Vec::new();
    for (job, kind) in [(command_job, "command"), (wasm_job, "wasm")] {
        client.wait(job, |_| {}).await?;
        let results = client.results(job).await?;
        let correct = results
            .iter()
            .enumerate()
            .filter(|(i, r)| {
                let expected = ((*i as u64) * (*i as u64)).to_string();
                r.state == TaskState::Succeeded
                    && match &r.outcome {
                        Outcome::Exited { stdout, .. } => {
                            String::from_utf8_lossy(stdout).trim() == expected
                        }
                        Outcome::Returned { output } => String::from_utf8_lossy(output) == expected,
                        Outcome::Error { .. } => false,
                    }
            })
            .count();
        say(format!(
            "{kind:>7} tasks: {correct}/{} correct results",
            results.len()
        ));
        summary
            .push(json!({ "job": job, "kind": kind, "tasks": results.len(), "correct": correct }));
        if correct != args.tasks as usize {
            bail!(
                "job {job}: only {correct} of {} {kind} tasks returned the right result",
                args.tasks
            );
        }
    }
    let elapsed = started.elapsed().as_secs_f64();
    let total = 2 * u64::from(args.tasks);
    say(format!(
        "all {total} tasks done in {elapsed:.2} s ({:.0} tasks/s)",
        total as f64 / elapsed
    ));
    if output == Output::Json {
        println!("{}", json!({ "jobs": summary, "seconds": elapsed }));
    }
    local.stop().await;
    Ok(())
}
