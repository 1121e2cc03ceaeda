//! Scenarios for policy authors (`weir policy test`): snapshots, each with what the decisions
//! for it must be, checked together with the rules every decision obeys whatever the policy
//! (`validate_decisions`: caps, no busy worker stopped, offline and unknown managers untouched).
//! Pure: text in, verdicts out; the command line reads the files and loads the policy.
//!
//! ```toml
//! [[scenario]]
//! name = "tier 1 fills first"
//! snapshot = { now_ms = 0, managers = [...], demand = [{ queued = 6 }] }
//!
//! [[scenario.expect]]
//! manager = "a"
//! desired = 3                 # or desired_min / desired_max
//! stop_contains = [7]         # worker ids; stop_excludes too
//! drain_contains = [8]        # worker ids drained (0.2.0); drain_excludes too
//! reason_contains = "priority 1"
//! ```
//! `no_decision = true` expects no decision for the manager at all.

use serde::{Deserialize, Serialize};

use super::scaling::{Decision, ScalingPolicy, Snapshot, validate_decisions};

/// A file of scenarios (`[[scenario]]` in TOML; `{"scenario": [...]}` in JSON).
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct ScenarioFile {
    #[serde(rename = "scenario")]
    pub scenarios: Vec<Scenario>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Scenario {
    pub name: String,
    pub snapshot: Snapshot,
    #[serde(default)]
    pub expect: Vec<Expectation>,
}

/// What one manager's decision must be. Unset fields are not checked.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Expectation {
    pub manager: String,
    pub desired: Option<u32>,
    pub desired_min: Option<u32>,
    pub desired_max: Option<u32>,
    #[serde(default)]
    pub stop_contains: Vec<u64>,
    #[serde(default)]
    pub stop_excludes: Vec<u64>,
    #[serde(default)]
    pub drain_contains: Vec<u64>,
    #[serde(default)]
    pub drain_excludes: Vec<u64>,
    pub reason_contains: Option<String>,
    /// The manager must get no decision.
    #[serde(default)]
    pub no_decision: bool,
}

/// How one scenario of `weir policy test` went: every way it failed (none: it passed), and what
/// the policy decided. Not a verdict on an environment (`scaling::Verdict`, `proto::EnvVerdict`).
#[derive(Debug, Serialize)]
pub struct ScenarioResult {
    pub name: String,
    pub failures: Vec<String>,
    pub decisions: Vec<Decision>,
}

impl ScenarioResult {
    pub fn passed(&self) -> bool {
        self.failures.is_empty()
    }
}

#[derive(Debug, thiserror::Error)]
pub enum ScenarioError {
    // The parser's own words follow as the source (`{:#}`), not in this text as well.
    #[error("not a scenario file")]
    Toml(#[from] toml::de::Error),
    #[error("not a scenario file")]
    Json(#[from] serde_json::Error),
    #[error("no scenario in the file (expected [[scenario]] tables)")]
    Empty,
}

/// Scenarios from TOML, or from JSON when `json`.
pub fn parse(text: &str, json: bool) -> Result<Vec<Scenario>, ScenarioError> {
    let file: ScenarioFile = match json {
        true => serde_json::from_str(text)?,
        false => toml::from_str(text)?,
    };
    match file.scenarios.is_empty() {
        true => Err(ScenarioError::Empty),
        false => Ok(file.scenarios),
    }
}

/// Run one scenario through `policy`.
pub fn run(policy: &mut dyn ScalingPolicy, scenario: &Scenario) -> ScenarioResult {
    let mut verdict = ScenarioResult {
        name: scenario.name.clone(),
        failures: invalid(scenario),
        decisions: Vec::new(),
    };
    if !verdict.failures.is_empty() {
        return verdict;
    }
    match policy.decide(&std::sync::Arc::new(scenario.snapshot.clone())) {
        Err(error) => verdict.failures.push(format!("the policy failed: {error}")),
        Ok(decisions) => {
            if let Err(broken) = validate_decisions(&scenario.snapshot, &decisions) {
                verdict.failures.push(format!("invariant: {broken}"));
            }
            for expectation in &scenario.expect {
                check(expectation, &decisions, &mut verdict.failures);
            }
            verdict.decisions = decisions;
        }
    }
    verdict
}

/// What is wrong with the scenario itself (not the policy's doing): a snapshot no scheduler
/// would send, or expectations that contradict each other.
fn invalid(scenario: &Scenario) -> Vec<String> {
    let mut problems = Vec::new();
    let mut ids = crate::hash::HashSet::default();
    for manager in &scenario.snapshot.managers {
        let id = &manager.id;
        if !ids.insert(id.as_str()) {
            problems.push(format!("invalid scenario: two managers `{id}`"));
        }
        let mut workers = crate::hash::HashSet::default();
        for worker in &manager.workers {
            if !workers.insert(worker.id) {
                problems.push(format!(
                    "invalid scenario: `{id}` has worker {} twice",
                    worker.id
                ));
            }
            if worker.busy > worker.slots {
                problems.push(format!(
                    "invalid scenario: worker {} of `{id}` is busy on {} of its {} slots",
                    worker.id, worker.busy, worker.slots
                ));
            }
        }
        // As the scheduler gives it: the manager's own live workers, in id order, within budget.
        if !manager.drained.is_sorted_by(|a, b| a < b)
            || manager.drained.iter().any(|w| !workers.contains(w))
        {
            problems.push(format!(
                "invalid scenario: `{id}`'s drained must list its own workers once each, in id order"
            ));
        }
        if manager.drained.len() > manager.drain_budget as usize {
            problems.push(format!(
                "invalid scenario: `{id}` has {} drained, past its drain_budget {}",
                manager.drained.len(),
                manager.drain_budget
            ));
        }
    }
    for expect in &scenario.expect {
        let id = &expect.manager;
        if !ids.contains(id.as_str()) {
            problems.push(format!("invalid scenario: an expectation for `{id}`, which is not a manager of the snapshot"));
        }
        let exact = expect.desired.is_some()
            || expect.desired_min.is_some()
            || expect.desired_max.is_some();
        if expect.no_decision
            && (exact
                || !expect.stop_contains.is_empty()
                || !expect.drain_contains.is_empty()
                || expect.reason_contains.is_some())
        {
            problems.push(format!(
                "invalid scenario: `{id}` expects no decision and something of one"
            ));
        }
        if let (Some(min), Some(max)) = (expect.desired_min, expect.desired_max)
            && min > max
        {
            problems.push(format!(
                "invalid scenario: `{id}`: desired_min {min} > desired_max {max}"
            ));
        }
        if let Some(want) = expect.desired
            && (expect.desired_min.is_some_and(|min| want < min)
                || expect.desired_max.is_some_and(|max| want > max))
        {
            problems.push(format!(
                "invalid scenario: `{id}`: desired {want} is outside desired_min/max"
            ));
        }
    }
    problems
}

fn check(expect: &Expectation, decisions: &[Decision], failures: &mut Vec<String>) {
    let id = &expect.manager;
    let Some(decision) = decisions.iter().find(|d| d.manager_id == *id) else {
        if !expect.no_decision {
            failures.push(format!("{id}: no decision"));
        }
        return;
    };
    let desired = decision.desired_workers;
    let mut fail = |what: String| failures.push(format!("{id}: {what}"));
    if expect.no_decision {
        fail(format!(
            "a decision ({desired} workers) where none was expected"
        ));
    }
    if let Some(want) = expect.desired
        && desired != want
    {
        fail(format!("desired {desired}, expected {want}"));
    }
    if let Some(min) = expect.desired_min
        && desired < min
    {
        fail(format!("desired {desired}, expected at least {min}"));
    }
    if let Some(max) = expect.desired_max
        && desired > max
    {
        fail(format!("desired {desired}, expected at most {max}"));
    }
    for worker in &expect.stop_contains {
        if !decision.stop.contains(worker) {
            fail(format!(
                "does not stop worker {worker} (stops {:?})",
                decision.stop
            ));
        }
    }
    for worker in &expect.stop_excludes {
        if decision.stop.contains(worker) {
            fail(format!("stops worker {worker}, which it must not"));
        }
    }
    for worker in &expect.drain_contains {
        if !decision.drain.contains(worker) {
            let drain = &decision.drain;
            fail(format!("does not drain worker {worker} (drains {drain:?})"));
        }
    }
    for worker in &expect.drain_excludes {
        if decision.drain.contains(worker) {
            fail(format!("drains worker {worker}, which it must not"));
        }
    }
    if let Some(text) = &expect.reason_contains
        && !decision.reason.contains(text.as_str())
    {
        fail(format!(
            "reason `{}` does not say `{text}`",
            decision.reason
        ));
    }
}
