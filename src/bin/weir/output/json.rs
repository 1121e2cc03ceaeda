//! `--output json`: exactly one JSON value per command on stdout, errors as `{"error": ...}`.

use serde::Serialize;
use serde_json::{Value, json};
use weir::proto::{EnvironmentStatus, JobId, JobSummary, Outcome, StatusReport, TaskResult};

use super::progress::Silent;
use super::{
    Canceled, Demo, Explanation, Forgotten, ForgottenFinished, JobDone, LocalRun, LocalStep,
    Output, PluginInfo, PolicyTested, PolicyTiers, Progress, ScenariosFailed, SimulatedStep,
    Submitted, TasksFailed, WorkersReady,
};

pub(super) struct Json;

/// Print `value` as one line.
fn print(value: &impl Serialize) {
    // Through a `Value`: its maps keep their keys sorted, as `json!` does.
    match serde_json::to_value(value) {
        Ok(value) => println!("{value}"),
        Err(error) => print_error(&format!("cannot print the answer as JSON: {error}")),
    }
}

/// `{"error": message}`, also for a command line that does not parse.
pub(crate) fn print_error(message: &str) {
    println!("{}", json!({ "error": message }));
}

impl Output for Json {
    fn note(&self, _: &str) {}

    fn job_progress(&self, _: JobId) -> Box<dyn Progress> {
        Box::new(Silent)
    }

    fn error(&self, error: &anyhow::Error) {
        // Failed tasks are already in the job's value (see `job_done`).
        if error.is::<TasksFailed>() || error.is::<ScenariosFailed>() {
            return;
        }
        let mut value = json!({ "error": format!("{error:#}") });
        // A wait stopped because a task can run nowhere (exit 3): which task, and why.
        if let Some(stuck) = error.downcast_ref::<super::Unrunnable>() {
            value["unrunnable"] =
                json!({ "job": stuck.job, "task": stuck.task, "reason": stuck.reason });
        }
        // The scheduler's refusals say why as a code, for scripts to act on.
        let refusal = error.chain().find_map(|cause| match cause.downcast_ref() {
            Some(weir::net::NetError::Request { code, .. }) => Some(*code),
            _ => None,
        });
        if let Some(code) = refusal {
            value["code"] = json!(code.as_str());
        }
        println!("{value}");
    }

    fn submitted(&self, submitted: &Submitted) {
        print(submitted);
    }

    fn job_done(&self, done: &JobDone) {
        let mut value = json!(done);
        if let Some(failure) = done.failure() {
            value["error"] = json!(failure.to_string());
        }
        print(&value);
    }

    fn results(&self, results: &[TaskResult]) {
        print(&results.iter().map(result).collect::<Vec<_>>());
    }

    fn canceled(&self, canceled: &Canceled) {
        print(canceled);
    }

    fn forgotten(&self, _: &Forgotten) {}

    fn all_forgotten(&self, forgotten: &[Forgotten]) {
        print(&forgotten);
    }

    fn forgotten_finished(&self, forgotten: &ForgottenFinished) {
        print(forgotten);
    }

    fn jobs(&self, jobs: &[JobSummary]) {
        print(&jobs);
    }

    fn explanation(&self, explanation: &Explanation) {
        print(explanation);
    }

    fn status(&self, report: &StatusReport) {
        print(report);
    }

    fn managers(&self, managers: &[weir::proto::ManagerUnits]) {
        print(&managers);
    }

    fn replicas(&self, replicas: &[weir::proto::ReplicaStatus]) {
        print(&replicas);
    }

    fn manager_units(&self, manager: &weir::proto::ManagerUnits) {
        print(manager);
    }
    fn workers_progress(&self, _: u32, _: u32, _: Option<&str>) {}

    fn workers_ready(&self, ready: &WorkersReady) {
        print(ready);
    }

    fn environments(&self, list: &[EnvironmentStatus]) {
        print(&list);
    }

    fn environment_removed(&self, name: &str) {
        print(&json!({ "removed": name }));
    }

    fn plugin(&self, plugin: &PluginInfo) {
        let info = &plugin.inspection;
        print(&json!({
            "file": plugin.file.display().to_string(),
            "world": info.world,
            "version": info.version,
            "imports": info.imports,
            "exports": info.exports,
            "size_bytes": info.size_bytes,
            "sha256": info.sha256,
            "load": info.origin.describe(),
            "load_ms": info.load_time.as_secs_f64() * 1e3,
        }));
    }

    fn policy_tiers(&self, policy: &PolicyTiers) {
        print(policy);
    }

    fn simulated_step(&self, _: &SimulatedStep) {}

    fn simulation(&self, steps: &[SimulatedStep]) {
        print(&steps);
    }

    fn workload(&self, run: &super::WorkloadRun) {
        print(run);
    }

    fn policy(&self, report: &weir::proto::PolicyReport) {
        print(report);
    }

    fn policy_tested(&self, tested: &PolicyTested) {
        print(tested);
    }

    fn demo(&self, demo: &Demo) {
        print(&json!({ "ticks": demo.ticks, "conditions": demo.conditions }));
    }

    fn local_step(&self, _: &LocalStep) {}

    fn local_done(&self, run: &LocalRun) {
        print(run);
    }
}

/// A task's result, its output as text.
fn result(result: &TaskResult) -> Value {
    let text = |bytes: &[u8]| String::from_utf8_lossy(bytes).into_owned();
    let mut value =
        json!({ "task": result.task, "state": result.state, "attempts": result.attempts });
    match &result.outcome {
        Outcome::Exited {
            code,
            stdout,
            stderr,
        } => {
            value["exit_code"] = json!(code);
            value["stdout"] = json!(text(stdout));
            value["stderr"] = json!(text(stderr));
        }
        Outcome::Returned { output } => value["output"] = json!(text(output)),
        Outcome::Function {
            ok,
            value: pickled,
            stdout,
            stderr,
        } => {
            value["raised"] = json!(!ok);
            value["pickled_bytes"] = json!(pickled.len());
            value["stdout"] = json!(text(stdout));
            value["stderr"] = json!(text(stderr));
        }
        Outcome::Error { message } => value["error"] = json!(message),
    }
    value
}
