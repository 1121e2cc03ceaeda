//! `weir policy check | simulate | test | set`: parse policy content with the real engine,
//! replay snapshots through it, run scenario files against it, and replace the running one.

use std::path::{Path, PathBuf};

use anyhow::{Context, Result};
use clap::Args;
use weir::client::Client;
use weir::config::PolicySpec;
use weir::core::scaling::Snapshot;
use weir::core::scenarios;
use weir::plugin::{Limits, PluginHost};

use crate::output::{
    ManagerSeconds, Output, PolicyTested, PolicyTiers, ScenarioRun, ScenariosFailed, SimulatedStep,
    WorkloadRun,
};

#[derive(Args)]
pub(crate) struct PolicyArgs {
    /// Policy engine: `waterfall_v1`, `waterfall_v2` (bundled) or a .wasm component.
    #[arg(
        long,
        value_name = "ENGINE|FILE.wasm",
        required_unless_present = "config",
        conflicts_with = "config"
    )]
    policy: Option<String>,
    /// Policy content: the rows themselves, or @FILE to read them from a file.
    #[arg(long, value_name = "TEXT|@FILE", requires = "policy")]
    content: Option<String>,
    /// A TOML file with `policy_engine_type` and `policy_content` (the reference form).
    #[arg(long, value_name = "FILE.toml")]
    config: Option<PathBuf>,
}

impl PolicyArgs {
    fn spec(&self) -> Result<PolicySpec> {
        let spec = PolicySpec::from_flags(
            self.config.as_deref(),
            self.policy.as_deref(),
            self.content.as_deref(),
            "--content",
        )?;
        spec.context("give --policy ENGINE --content ROWS, or --config FILE.toml")
    }
}

pub(crate) fn check(host: &PluginHost, args: &PolicyArgs, output: &dyn Output) -> Result<()> {
    let spec = args.spec()?;
    let mut policy = spec.instantiate(host, Limits::default())?;
    output.policy_tiers(&PolicyTiers {
        tiers: policy.tiers()?,
        engine: spec.engine.name().to_string(),
    });
    Ok(())
}

pub(crate) fn simulate(
    host: &PluginHost,
    args: &PolicyArgs,
    trace: &Path,
    plot: Option<&Path>,
    output: &dyn Output,
) -> Result<()> {
    check_plot(plot)?;
    let spec = args.spec()?;
    let mut policy = spec.instantiate(host, Limits::default())?;
    let mut steps = Vec::new();
    let mut drawn = Vec::new();
    for (step, snapshot) in snapshots(trace)?.into_iter().enumerate() {
        let snapshot = std::sync::Arc::new(snapshot);
        let decisions = policy
            .decide(&snapshot)
            .with_context(|| format!("snapshot {step}"))?;
        if plot.is_some() {
            drawn.push((Snapshot::clone(&snapshot), decisions.clone()));
        }
        let step = SimulatedStep {
            step,
            now_ms: snapshot.now_ms,
            decisions,
        };
        output.simulated_step(&step);
        steps.push(step);
    }
    if let Some(path) = plot {
        draw(&drawn, path)?;
    }
    output.simulation(&steps);
    Ok(())
}

/// The plot is SVG: a file named otherwise would hold what its name does not say. Checked
/// before the policy runs.
fn check_plot(plot: Option<&Path>) -> Result<()> {
    if let Some(path) = plot
        && !path
            .extension()
            .is_some_and(|e| e.eq_ignore_ascii_case("svg"))
    {
        anyhow::bail!(
            "--plot {}: the plot is SVG; name the file .svg",
            path.display()
        );
    }
    Ok(())
}

fn draw(drawn: &[(Snapshot, Vec<weir::core::scaling::Decision>)], path: &Path) -> Result<()> {
    #[cfg(feature = "plot")]
    return super::plot::draw(drawn, path);
    #[cfg(not(feature = "plot"))]
    {
        let _ = drawn;
        anyhow::bail!(
            "cannot write {}: --plot needs weir built with the `plot` feature (on by default)",
            path.display()
        );
    }
}

/// `weir policy simulate --workload`: the policy scales a modelled cluster (`workload.rs`).
pub(crate) fn simulate_workload(
    host: &PluginHost,
    args: &PolicyArgs,
    workload: &Path,
    record: Option<&Path>,
    plot: Option<&Path>,
    output: &dyn Output,
) -> Result<()> {
    check_plot(plot)?;
    let spec = args.spec()?;
    let mut policy = spec.instantiate(host, Limits::default())?;
    let workload = super::workload::Workload::read(workload)?;
    let run = super::workload::run(workload, |snapshot| Ok(policy.decide(snapshot)?))?;
    if let Some(path) = record {
        let mut lines = String::new();
        for (snapshot, _) in &run.steps {
            lines.push_str(&serde_json::to_string(&**snapshot)?);
            lines.push('\n');
        }
        std::fs::write(path, lines).with_context(|| format!("cannot write {}", path.display()))?;
    }
    if let Some(path) = plot {
        let drawn: Vec<_> = (run.steps.iter())
            .map(|(snapshot, decisions)| (Snapshot::clone(snapshot), decisions.clone()))
            .collect();
        draw(&drawn, path)?;
    }
    let steps: Vec<SimulatedStep> = (run.steps.into_iter().enumerate())
        .map(|(step, (snapshot, decisions))| SimulatedStep {
            step,
            now_ms: snapshot.now_ms,
            decisions,
        })
        .collect();
    for step in &steps {
        output.simulated_step(step);
    }
    let mut by_worker_type: Vec<(String, f64)> = Vec::new();
    for (_, worker_type, seconds) in &run.worker_seconds {
        match by_worker_type.iter_mut().find(|(t, _)| t == worker_type) {
            Some((_, total)) => *total += seconds,
            None => by_worker_type.push((worker_type.clone(), *seconds)),
        }
    }
    output.workload(&WorkloadRun {
        steps,
        worker_seconds: (run.worker_seconds.into_iter())
            .map(|(manager, worker_type, seconds)| ManagerSeconds {
                manager,
                worker_type,
                seconds,
            })
            .collect(),
        by_worker_type,
        finished: run.finished,
    });
    Ok(())
}

/// `weir policy set`: the engine's bytes and content to the scheduler, which switches only if
/// the new policy works.
pub(crate) async fn set(client: &Client, args: &PolicyArgs, output: &dyn Output) -> Result<()> {
    let spec = args.spec()?;
    let report = client
        .set_policy(spec.engine.name(), spec.component()?, spec.content.clone())
        .await?;
    output.policy(&report);
    Ok(())
}

/// `weir policy test`: every scenario of every file through one instance of the policy.
pub(crate) fn test(
    host: &PluginHost,
    args: &PolicyArgs,
    files: &[PathBuf],
    output: &dyn Output,
) -> Result<()> {
    let spec = args.spec()?;
    let mut policy = spec.instantiate(host, Limits::default())?;
    let mut runs = Vec::new();
    for file in files {
        let text = std::fs::read_to_string(file)
            .with_context(|| format!("cannot read {}", file.display()))?;
        let json = file.extension().is_some_and(|e| e == "json");
        let scenarios =
            scenarios::parse(&text, json).with_context(|| format!("{}", file.display()))?;
        for scenario in &scenarios {
            let verdict = scenarios::run(&mut policy, scenario);
            runs.push(ScenarioRun {
                file: file.display().to_string(),
                passed: verdict.passed(),
                verdict,
            });
        }
    }
    let failed = runs.iter().filter(|r| !r.passed).count();
    let tested = PolicyTested {
        engine: spec.engine.name().to_string(),
        passed: runs.len() - failed,
        failed,
        scenarios: runs,
    };
    output.policy_tested(&tested);
    match failed {
        0 => Ok(()),
        _ => Err(ScenariosFailed {
            failed,
            total: tested.scenarios.len(),
        }
        .into()),
    }
}

/// A JSON array of snapshots, or JSON lines as `scheduler --record-snapshots` writes them.
fn snapshots(trace: &Path) -> Result<Vec<Snapshot>> {
    let text = std::fs::read_to_string(trace)
        .with_context(|| format!("cannot read {}", trace.display()))?;
    let snapshots: Vec<Snapshot> = match serde_json::from_str(&text) {
        Ok(snapshots) => snapshots,
        Err(_) => lines_of(trace, &text)?,
    };
    if snapshots.is_empty() {
        anyhow::bail!(
            "{}: no snapshot in it (a trace is one JSON snapshot per line, or a JSON array of them: \
             `scheduler --record-snapshots FILE` writes one)",
            trace.display()
        );
    }
    Ok(snapshots)
}

fn lines_of(trace: &Path, text: &str) -> Result<Vec<Snapshot>> {
    text.lines()
        .enumerate()
        .filter(|(_, line)| !line.trim().is_empty())
        .map(|(n, line)| {
            serde_json::from_str(line).with_context(|| {
                format!(
                    "{} line {}: not a snapshot (nor is the file a JSON array)",
                    trace.display(),
                    n + 1
                )
            })
        })
        .collect()
}
