//! The task stream: the latest finished runs and those running now, for the dashboard's
//! timeline of runs per worker (what Dask calls its task stream).

use super::*;

/// Finished runs kept, newest last (about 100 bytes each).
pub const STREAM_RUNS: usize = 20_000;

/// One run of a task on a worker.
#[derive(Clone, Debug, PartialEq, Eq, serde::Serialize)]
pub struct Run {
    pub task: TaskId,
    pub job: JobId,
    /// The worker's name (it may be gone by now).
    pub worker: String,
    /// When it started and ended on the scheduler's clock (ms); `None`: running now.
    pub started_ms: u64,
    pub ended_ms: Option<u64>,
    /// It ended with a failure (a non-zero exit, a trap, an exception).
    pub failed: bool,
}

impl Tasks {
    /// Keep a run that ended, dropping the oldest past [`STREAM_RUNS`].
    pub(super) fn record_run(&mut self, run: Run) {
        if self.runs.len() == STREAM_RUNS {
            self.runs.pop_front();
        }
        self.runs.push_back(run);
    }

    /// The runs that ended at or after `since` (ms), oldest first, then those running now
    /// (each worker's in task order).
    pub fn stream(&self, since: u64) -> Vec<Run> {
        let first = self
            .runs
            .partition_point(|r| r.ended_ms.unwrap_or(u64::MAX) < since);
        let mut runs: Vec<Run> = self.runs.range(first..).cloned().collect();
        for w in self.workers.values() {
            for task in w.started() {
                let Some((at, _)) = w.since.get(&task).copied() else {
                    continue;
                };
                let Some(job) = self.task(task).and_then(|t| self.groups.get(&t.group)) else {
                    continue;
                };
                runs.push(Run {
                    task,
                    job: job.job,
                    worker: w.info.name.clone(),
                    started_ms: at,
                    ended_ms: None,
                    failed: false,
                });
            }
        }
        runs
    }
}
