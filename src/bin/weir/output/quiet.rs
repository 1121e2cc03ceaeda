//! `--output quiet`: nothing but errors (on stderr) and the id `submit` gives; the exit code says
//! the rest.

use weir::proto::{EnvironmentStatus, JobId, JobSummary, StatusReport, TaskResult};

use super::progress::Silent;
use super::{
    Canceled, Demo, Explanation, Forgotten, ForgottenFinished, JobDone, LocalRun, LocalStep,
    Output, PluginInfo, PolicyTested, PolicyTiers, Progress, SimulatedStep, Submitted,
    WorkersReady,
};

pub(super) struct Quiet;

impl Output for Quiet {
    fn note(&self, _: &str) {}

    fn job_progress(&self, _: JobId) -> Box<dyn Progress> {
        Box::new(Silent)
    }

    fn error(&self, error: &anyhow::Error) {
        super::error_line(error);
    }

    fn submitted(&self, submitted: &Submitted) {
        // Just the id, for `JOB=$(weir --output quiet submit ...)`.
        println!("{}", submitted.job);
    }

    fn job_done(&self, _: &JobDone) {}
    fn results(&self, _: &[TaskResult]) {}
    fn canceled(&self, _: &Canceled) {}
    fn forgotten(&self, _: &Forgotten) {}
    fn all_forgotten(&self, _: &[Forgotten]) {}
    fn forgotten_finished(&self, _: &ForgottenFinished) {}
    fn jobs(&self, _: &[JobSummary]) {}
    fn explanation(&self, _: &Explanation) {}
    fn status(&self, _: &StatusReport) {}
    fn managers(&self, _: &[weir::proto::ManagerUnits]) {}
    fn replicas(&self, _: &[weir::proto::ReplicaStatus]) {}
    fn manager_units(&self, _: &weir::proto::ManagerUnits) {}
    fn workers_progress(&self, _: u32, _: u32, _: Option<&str>) {}

    fn workers_ready(&self, _: &WorkersReady) {}
    fn environments(&self, _: &[EnvironmentStatus]) {}
    fn environment_removed(&self, _: &str) {}
    fn plugin(&self, _: &PluginInfo) {}
    fn policy_tiers(&self, _: &PolicyTiers) {}
    fn simulated_step(&self, _: &SimulatedStep) {}
    fn simulation(&self, _: &[SimulatedStep]) {}
    fn workload(&self, _: &super::WorkloadRun) {}
    fn policy_tested(&self, _: &PolicyTested) {}
    fn policy(&self, _: &weir::proto::PolicyReport) {}
    fn demo(&self, _: &Demo) {}
    fn local_step(&self, _: &LocalStep) {}
    fn local_done(&self, _: &LocalRun) {}
}
