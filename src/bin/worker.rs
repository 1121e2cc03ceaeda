//! `worker`: runs tasks and evaluates environment conditions on its machine.
//!
//! This build evaluates its `--env-plugin` conditions and prints the verdicts (`--check`); the
//! connection to the scheduler is not built yet.

use std::process::ExitCode;
use std::sync::Arc;

use anyhow::{Context, Result, bail};
use clap::Parser;
use weir::config::EnvPluginSpec;
use weir::plugin::{HostFacts, Limits, PluginHost};

#[derive(Parser)]
#[command(name = "worker", version, about = "A weir worker")]
struct Args {
    /// An environment condition: [NAME=]FILE.wasm[,key=value...] (NAME defaults to the file
    /// stem; `mem_gt` is bundled). Repeatable.
    #[arg(long = "env-plugin", value_name = "[NAME=]FILE.wasm[,k=v...]", value_parser = EnvPluginSpec::parse)]
    env_plugins: Vec<EnvPluginSpec>,
    /// Environment variables conditions may read through `env-var` (all others are hidden).
    #[arg(long = "env-allow", value_name = "NAME")]
    env_allow: Vec<String>,
    /// Worker type reported to conditions.
    #[arg(long, default_value = "")]
    worker_type: String,
    /// Evaluate the conditions on this machine, print the verdicts, and exit.
    #[arg(long)]
    check: bool,
}

fn main() -> ExitCode {
    weir::telemetry::init_logging();
    match run(Args::parse()) {
        Ok(()) => ExitCode::SUCCESS,
        Err(error) => {
            eprintln!("error: {error:#}");
            ExitCode::FAILURE
        }
    }
}

fn run(args: Args) -> Result<()> {
    let host = PluginHost::with_default_cache().context("cannot start the plugin host")?;
    let facts = Arc::new(HostFacts::probe(&args.worker_type, &[], &args.env_allow));
    for spec in &args.env_plugins {
        let loaded = spec.load(&host)?;
        let mut condition = host.condition(&loaded, Limits::default())?;
        let verdict = match condition.evaluate(&facts, &spec.config) {
            Ok(true) => "match".to_string(),
            Ok(false) => "no-match".to_string(),
            Err(error) => format!("error({})", error.message()),
        };
        println!("{}: {verdict}", spec.name);
    }
    if args.check {
        return Ok(());
    }
    bail!("the worker's connection to the scheduler is not built yet; only --check works in this version")
}
