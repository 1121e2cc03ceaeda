//! How answers are printed: one trait, [`Output`], with one implementation per `--output` mode
//! (cli for people, json for programs, quiet for scripts). Commands produce the typed values
//! below and hand them to the chosen output; no command looks at the mode.

mod cli;
mod json;
mod managers;
mod progress;
mod quiet;

pub(crate) use json::print_error as print_json_error;

use std::fmt;
use std::path::PathBuf;

use clap::ValueEnum;
use serde::Serialize;
use weir::core::scaling::{Decision, Tier};
use weir::plugin::Inspection;
use weir::proto::{
    EnvironmentStatus, JobCounts, JobId, JobSummary, ManagerUnits, StatusReport, TaskId, TaskResult,
};

/// The `--output` modes.
#[derive(Clone, Copy, PartialEq, Eq, ValueEnum)]
pub(crate) enum Mode {
    Cli,
    Json,
    Quiet,
}

impl Mode {
    pub(crate) fn output(self) -> Box<dyn Output> {
        match self {
            Mode::Cli => Box::new(cli::Cli),
            Mode::Json => Box::new(json::Json),
            Mode::Quiet => Box::new(quiet::Quiet),
        }
    }
}

/// Prints what commands produce. JSON prints exactly one value per command (errors included);
/// quiet prints nothing but errors and the id `submit` gives.
pub(crate) trait Output {
    /// A remark while a command works (retrying, reconnecting, waiting): for people only.
    fn note(&self, line: &str);
    /// Shows a job's counts while waiting for it.
    fn job_progress(&self, job: JobId) -> Box<dyn Progress>;
    /// The command failed. Exit 1 follows.
    fn error(&self, error: &anyhow::Error);

    fn submitted(&self, submitted: &Submitted);
    fn job_done(&self, done: &JobDone);
    fn results(&self, results: &[TaskResult]);
    fn canceled(&self, canceled: &Canceled);
    /// One job forgotten, as it happens (`weir forget JOB...`).
    fn forgotten(&self, forgotten: &Forgotten);
    /// Every job `weir forget JOB...` forgot, once all are.
    fn all_forgotten(&self, forgotten: &[Forgotten]);
    fn forgotten_finished(&self, forgotten: &ForgottenFinished);
    fn jobs(&self, jobs: &[JobSummary]);
    fn explanation(&self, explanation: &Explanation);

    fn status(&self, report: &StatusReport);
    /// `weir managers`: every manager, its workers and its units by state.
    fn managers(&self, managers: &[ManagerUnits]);
    /// `weir replicas`: the scheduler replicas, which leads, and how far behind each is.
    fn replicas(&self, replicas: &[weir::proto::ReplicaStatus]);
    /// `weir managers units ID`: one manager's units.
    fn manager_units(&self, manager: &ManagerUnits);
    /// How many workers are there while `weir workers wait` waits: live on a terminal only (in
    /// a log it would be a stale count beside the answer).
    fn workers_progress(&self, ready: u32, wanted: u32, environment: Option<&str>);
    fn workers_ready(&self, ready: &WorkersReady);
    fn environments(&self, list: &[EnvironmentStatus]);
    fn environment_removed(&self, name: &str);

    fn plugin(&self, plugin: &PluginInfo);
    fn policy_tiers(&self, policy: &PolicyTiers);
    /// One snapshot replayed, as it is (`weir policy simulate`).
    fn simulated_step(&self, step: &SimulatedStep);
    /// Every snapshot replayed, once all are.
    fn simulation(&self, steps: &[SimulatedStep]);
    /// A closed-loop run with its worker-seconds (`weir policy simulate --workload`), once done.
    fn workload(&self, run: &WorkloadRun);
    /// Every scenario `weir policy test` ran.
    fn policy_tested(&self, tested: &PolicyTested);
    /// The scheduler's running policy (`weir policy show`, `weir policy set`).
    fn policy(&self, report: &weir::proto::PolicyReport);
    fn demo(&self, demo: &Demo);
    /// A step of `weir local`, as it happens.
    fn local_step(&self, step: &LocalStep);
    fn local_done(&self, run: &LocalRun);
}

/// `error: ...` on stderr, for people and scripts.
fn error_line(error: &anyhow::Error) {
    eprintln!("error: {error:#}");
}

/// A job's counts as they change, until [`Progress::finish`].
pub(crate) trait Progress {
    fn update(&mut self, counts: &JobCounts);
    fn finish(self: Box<Self>);
}

/// `weir submit`: the job and its tasks' ids.
#[derive(Serialize)]
pub(crate) struct Submitted {
    pub job: JobId,
    pub first_task: TaskId,
    pub tasks: u64,
}

impl fmt::Display for Submitted {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let (job, first, tasks) = (self.job, self.first_task, self.tasks);
        let last = first + tasks - 1;
        write!(
            f,
            "job {job}: {tasks} task(s) submitted (ids {first}-{last})"
        )
    }
}

/// A job every task of which is final.
#[derive(Serialize)]
pub(crate) struct JobDone {
    pub job: JobId,
    pub counts: JobCounts,
}

impl JobDone {
    /// A job with failed or canceled tasks is an error (exit 1): exit 0 says every task
    /// succeeded, as a script that waits on a job takes it.
    pub(crate) fn failure(&self) -> Option<TasksFailed> {
        let JobCounts {
            failed, canceled, ..
        } = self.counts;
        (failed > 0 || canceled > 0).then_some(TasksFailed {
            job: self.job,
            failed,
            canceled,
        })
    }
}

/// A job ended with failed or canceled tasks. The JSON output carries it in the job's own
/// value.
#[derive(Debug, thiserror::Error)]
#[error("job {job}: {} (see `weir results {job}`)", ended(*failed, *canceled))]
pub(crate) struct TasksFailed {
    pub job: JobId,
    pub failed: u64,
    pub canceled: u64,
}

/// "N task(s) failed", "N canceled", or both.
fn ended(failed: u64, canceled: u64) -> String {
    match (failed, canceled) {
        (f, 0) => format!("{f} task(s) failed"),
        (0, c) => format!("{c} task(s) canceled"),
        (f, c) => format!("{f} task(s) failed, {c} canceled"),
    }
}

/// A wait stopped: the scheduler says `task` can run nowhere.
#[derive(Debug, thiserror::Error)]
#[error(
    "no worker or manager can run task {task}: {reason}; see `weir explain {task}` (job {job} \
     stays queued: `weir wait {job}` waits on, `weir cancel {job}` cancels it)"
)]
pub(crate) struct Unrunnable {
    pub job: JobId,
    pub task: TaskId,
    pub reason: String,
}

/// `weir policy test`: how each scenario of each file went.
#[derive(Serialize)]
pub(crate) struct PolicyTested {
    pub engine: String,
    pub passed: usize,
    pub failed: usize,
    pub scenarios: Vec<ScenarioRun>,
}

#[derive(Serialize)]
pub(crate) struct ScenarioRun {
    pub file: String,
    pub passed: bool,
    #[serde(flatten)]
    pub verdict: weir::core::scenarios::ScenarioResult,
}

/// Some scenarios failed. The JSON output carries them in its value.
#[derive(Debug, thiserror::Error)]
#[error("{failed} of {total} scenarios failed")]
pub(crate) struct ScenariosFailed {
    pub failed: usize,
    pub total: usize,
}

#[derive(Serialize)]
pub(crate) struct Canceled {
    pub job: JobId,
    pub canceled: u64,
}

#[derive(Serialize)]
pub(crate) struct Forgotten {
    pub job: JobId,
    /// Task results freed (0: forgotten already).
    pub tasks: u64,
}

#[derive(Serialize)]
pub(crate) struct ForgottenFinished {
    pub jobs: Vec<JobId>,
    pub tasks: u64,
}

#[derive(Serialize)]
pub(crate) struct Explanation {
    pub task: TaskId,
    pub explanation: Vec<String>,
}

/// `weir workers wait`: how many live workers (matching `environment`) are registered.
#[derive(Serialize)]
pub(crate) struct WorkersReady {
    pub workers: u32,
    pub wanted: u32,
    pub environment: Option<String>,
}

/// "workers", or "workers matching environment `NAME`".
/// `workers`, `1 worker`'s noun, or `workers matching environment `NAME``, for `n` of them.
pub(crate) fn workers_matching(n: u32, environment: Option<&str>) -> String {
    let noun = match n {
        1 => "worker",
        _ => "workers",
    };
    match environment {
        Some(name) => format!("{noun} matching environment `{name}`"),
        None => noun.to_string(),
    }
}

/// `weir plugin inspect`.
pub(crate) struct PluginInfo {
    pub file: PathBuf,
    pub inspection: Inspection,
}

/// `weir policy check`.
#[derive(Serialize)]
pub(crate) struct PolicyTiers {
    pub engine: String,
    pub tiers: Vec<Tier>,
}

/// A snapshot replayed through a policy by `weir policy simulate`.
#[derive(Serialize)]
pub(crate) struct SimulatedStep {
    pub step: usize,
    pub now_ms: u64,
    pub decisions: Vec<Decision>,
}

/// `weir policy simulate --workload`: the steps, and what the modelled cluster cost.
#[derive(Serialize)]
pub(crate) struct WorkloadRun {
    pub steps: Vec<SimulatedStep>,
    /// Per manager, in the file's order.
    pub worker_seconds: Vec<ManagerSeconds>,
    /// Per worker type (the waterfall_v2 tiers' members), in the file's order.
    pub by_worker_type: Vec<(String, f64)>,
    pub finished: u64,
}

#[derive(Serialize)]
pub(crate) struct ManagerSeconds {
    pub manager: String,
    pub worker_type: String,
    pub seconds: f64,
}

/// `weir demo`: the simulated seconds, then the bundled condition's verdicts on this machine.
pub(crate) struct Demo {
    pub tasks: u32,
    pub task_seconds: u64,
    pub ticks: Vec<DemoTick>,
    pub conditions: Vec<DemoCondition>,
    pub total_memory_bytes: u64,
}

#[derive(Serialize)]
pub(crate) struct DemoTick {
    pub second: u64,
    pub queued: u32,
    pub running: u32,
    pub done: u32,
    pub workers: DemoWorkers,
    pub decisions: Vec<Decision>,
}

/// Workers of the demo's two managers.
#[derive(Serialize)]
pub(crate) struct DemoWorkers {
    pub native_1: usize,
    pub burst_1: usize,
}

#[derive(Serialize)]
pub(crate) struct DemoCondition {
    /// `mem_gt threshold=8GiB`.
    pub condition: String,
    /// `match`, `no-match` or `error(...)`.
    pub verdict: String,
}

/// What `weir local` does, step by step.
pub(crate) enum LocalStep<'a> {
    Scheduler {
        address: &'a str,
    },
    Workers {
        workers: u32,
        slots: u32,
    },
    Submitted {
        tasks: u32,
        command_job: JobId,
        wasm_job: JobId,
    },
    Checked(&'a LocalJob),
}

/// One of `weir local`'s jobs, its results checked.
#[derive(Serialize)]
pub(crate) struct LocalJob {
    pub job: JobId,
    pub kind: &'static str,
    pub tasks: usize,
    pub correct: usize,
}

#[derive(Serialize)]
pub(crate) struct LocalRun {
    pub jobs: Vec<LocalJob>,
    pub seconds: f64,
    /// Tasks in all jobs.
    #[serde(skip)]
    pub tasks: u64,
}
