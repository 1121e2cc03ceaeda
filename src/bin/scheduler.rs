//! `scheduler`: holds tasks, workers, managers and environments, and runs the scaling policy.
//!
//! This build loads and checks the scaling policy (`--check`); the QUIC runtime that serves
//! workers and clients is not built yet.

use std::path::PathBuf;
use std::process::ExitCode;

use anyhow::{Context, Result, bail};
use clap::Parser;
use weir::config::{self, Engine, PolicySpec};
use weir::plugin::{Limits, PluginHost};

#[derive(Parser)]
#[command(name = "scheduler", version, about = "The weir scheduler")]
struct Args {
    /// Scaling policy engine: `waterfall_v1`, `waterfall_v2` (bundled) or a .wasm component of
    /// the `policy` world. Default: the bundled waterfall_v2 with one tier, `1, default`
    /// (every manager of worker type `default`).
    #[arg(long, value_name = "ENGINE|FILE.wasm", conflicts_with = "config")]
    policy: Option<String>,
    /// Policy content: the rows themselves, or @FILE.
    #[arg(long, value_name = "TEXT|@FILE", conflicts_with = "config")]
    policy_content: Option<String>,
    /// TOML with `policy_engine_type` and `policy_content` (the reference form).
    #[arg(long, value_name = "FILE.toml")]
    config: Option<PathBuf>,
    /// Deadline of one policy call, in milliseconds.
    #[arg(long, default_value_t = 1000, value_name = "MS")]
    policy_deadline_ms: u64,
    /// Load and check the policy, print its tiers, and exit.
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
    let spec = match &args.config {
        Some(path) => PolicySpec::from_toml_file(path)?,
        None => PolicySpec {
            engine: Engine::parse(args.policy.as_deref().unwrap_or("waterfall_v2"))?,
            content: match &args.policy_content {
                Some(arg) => config::content_arg(arg)?,
                // With no policy at all: every manager of every worker type, one tier.
                None if args.policy.is_none() => "1, default\n".to_string(),
                None => bail!("--policy-content is required with --policy (the rows, or @FILE)"),
            },
        },
    };
    let host = PluginHost::with_default_cache().context("cannot start the plugin host")?;
    let limits = Limits { deadline: std::time::Duration::from_millis(args.policy_deadline_ms), ..Limits::default() };
    let mut policy = spec.instantiate(&host, limits)?;
    let tiers = policy.tiers()?;
    println!("policy {}: {} tier(s)", spec.engine.name(), tiers.len());
    for tier in &tiers {
        println!("  priority {:>3}: {}", tier.priority, tier.members.join(", "));
    }
    if args.check {
        return Ok(());
    }
    bail!("the scheduler's network runtime is not built yet; only --check works in this version")
}
