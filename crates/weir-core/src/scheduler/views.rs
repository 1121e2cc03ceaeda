//! What the scheduler shows without changing anything: `weir status`, the task stream,
//! `weir explain`, `weir managers`, the environments, the task core for the metrics page.

use super::*;

impl Scheduler {
    /// The task core, to read (the metrics page, tests).
    pub fn tasks(&self) -> &Tasks {
        &self.tasks
    }

    /// `weir status`: tasks, workers, managers and the policy's last error.
    pub fn status(&self, now: u64) -> StatusReport {
        self.status_of(now, self.tasks.status())
    }

    /// [`Scheduler::status`] without the worker list: the task counts and each manager's.
    pub fn status_without_workers(&self, now: u64) -> StatusReport {
        self.status_of(now, self.tasks.counts_only())
    }

    fn status_of(&self, now: u64, mut report: StatusReport) -> StatusReport {
        report.now_ms = now;
        report.managers = self.managers.status(&self.context(now));
        report.policy_error = self.scaling.error.as_ref().map(ToString::to_string);
        report
    }

    /// The task stream since `since` (ms): runs that ended since, then those running now.
    pub fn task_stream(&self, since: u64) -> Vec<crate::tasks::Run> {
        self.tasks.stream(since)
    }

    /// `weir explain`: why a task is where it is, and what each manager could do for it.
    pub fn explain(&self, now: u64, task: TaskId) -> Option<Vec<String>> {
        let mut lines = self.tasks.explain(now, task)?;
        if let Some((group, _)) = self.tasks.task_group(task) {
            let spec = &group.spec;
            let context = self.context(now);
            let (caps, envs) = (&spec.capabilities, &spec.environments);
            lines.extend(self.managers.explain(&context, caps, envs, spec.timeout_ms));
        }
        Some(lines)
    }

    /// `weir managers`: every manager (or the one named; `None` if unknown) with its units.
    pub fn managers_view(&self, now: u64, only: Option<&str>) -> Option<Vec<ManagerUnits>> {
        self.managers.units(&self.context(now), only)
    }

    /// Policy calls that failed (or decided nonsense) so far.
    pub fn policy_errors(&self) -> u64 {
        self.scaling.errors
    }

    /// The environments (one or all), with the managers that declared each name.
    pub fn environment_report(&self, only: Option<&str>) -> Vec<EnvironmentStatus> {
        let mut report = self.tasks.environment_report(only);
        for status in &mut report {
            status.managers = self.managers.declaring(&status.name);
        }
        report
    }
}
