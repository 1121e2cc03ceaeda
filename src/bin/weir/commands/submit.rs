//! `weir submit`: a command or a wasm component, N times or once per input line; with
//! `--wait`, wait for the job as `weir wait` does.

use std::path::PathBuf;
use std::time::Duration;

use anyhow::{Context, Result, bail};
use clap::Args;
use weir::client::Client;
use weir::config::parse_capabilities;
use weir::proto::{NewGroup, TaskKind, TaskSpec};

use super::files::{component, read_limited};
use super::wait;
use crate::connect::Reach;
use crate::output::{Output, Submitted};

#[derive(Args)]
pub(crate) struct SubmitArgs {
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
    /// Wait for every task to finish, showing progress; exit 1 if any failed or was canceled,
    /// 3 if a task can run nowhere (no live worker or worker manager could run it, for 2 s:
    /// the reason is printed; the tasks stay queued, `weir wait JOB` waits on).
    #[arg(long)]
    wait: bool,
    /// The command and its arguments (after `--`).
    #[arg(trailing_var_arg = true, value_name = "COMMAND")]
    command: Vec<String>,
}

pub(crate) async fn run(
    client: &Client,
    args: &SubmitArgs,
    output: &dyn Output,
    reach: &Reach,
) -> Result<()> {
    let (components, group) = group(args)?;
    // Sent again (after reconnecting) if the connection is lost before the answer: the
    // request id makes the resend safe (the scheduler answers it with the first one's job).
    let submission = weir::client::submission(components, vec![group])?;
    let mut reconnected: Option<Client> = None;
    let (job, first_task, tasks) = loop {
        let current = reconnected.as_ref().unwrap_or(client);
        match current.submit_request(&submission).await {
            Ok(done) => break done,
            Err(error) if error.is_connection_lost() => {
                output.note(&format!(
                    "lost the scheduler before it answered ({error}); reconnecting to send it again"
                ));
                reconnected = Some(reach.reconnect().await?);
            }
            Err(error) => return Err(error.into()),
        }
    };
    let client = reconnected.as_ref().unwrap_or(client);
    let submitted = Submitted {
        job,
        first_task,
        tasks,
    };
    if !args.wait {
        output.submitted(&submitted);
        return Ok(());
    }
    output.note(&submitted.to_string());
    wait::run(client, job, output, reach).await
}

/// The tasks the flags ask for, and the component they run (if wasm).
fn group(args: &SubmitArgs) -> Result<(Vec<Vec<u8>>, NewGroup)> {
    let mut components = Vec::new();
    let kind = match (&args.wasm, args.command.is_empty()) {
        (Some(_), false) => bail!("give either --wasm FILE or a command after --, not both"),
        (None, true) => bail!(
            "nothing to run: give a command after -- (e.g. `weir submit -- echo hi`) or --wasm FILE"
        ),
        (Some(wasm), true) => {
            let bytes = component(wasm)?;
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
    let group = NewGroup {
        spec,
        count,
        inputs,
    };
    Ok((components, group))
}
