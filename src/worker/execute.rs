//! Seam: who runs a task the worker starts. The host's worker runs it itself (`run.rs`: a
//! process in a guarded group, a component, a function runner); a simulated cluster hands the
//! run to an [`Execute`] of its own (a task as a duration and an output, on simulated time).
//! Everything around the run (the lease, claims, batching, give-ups) stays the worker's.

use std::fmt;
use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::time::Duration;

use super::cancel::Cancel;
use super::guard::Lease;
use crate::clock::Millis;
use crate::proto::{Outcome, TaskId};

/// Runs a task in place of the worker's own runner (see `Seams::execute`).
pub trait Execute: Send + Sync + fmt::Debug {
    /// Run `execution` until its outcome, or until [`Stop::stopped`] (then at once: a kill).
    /// The future is dropped, unfinished, when the worker gives the run up or stops.
    fn execute(&self, execution: Execution) -> Pin<Box<dyn Future<Output = Outcome> + Send>>;
}

/// One run to execute.
pub struct Execution {
    /// The worker's name.
    pub worker: String,
    pub task: TaskId,
    /// The core's hand-over number of this run on this worker.
    pub run: u64,
    /// The task's input (its own, else its group's).
    pub input: Vec<u8>,
    /// Its group's timeout (`None`: none).
    pub timeout: Option<Duration>,
    pub stop: Stop,
}

/// When a run must stop: canceled, or the lease it started under ran out or lapsed (what the
/// guard process does to a command's group, for a run the worker does not own a process of).
pub struct Stop {
    pub(super) cancel: Arc<Cancel>,
    pub(super) lease: Arc<Lease>,
    pub(super) clock: Millis,
}

impl Stop {
    /// Whether it must stop now.
    pub fn is_set(&self) -> bool {
        self.cancel.is_set() || self.lease.lost_since(self.cancel.lapses, self.clock.now())
    }

    /// How long the lease it runs under has left, as the guard process knows it (which kills
    /// the run then, even if the worker is stopped): `None` before the first grant.
    pub fn lease_left(&self) -> Option<Duration> {
        let until = self.lease.until()?;
        Some(Duration::from_millis(
            until.saturating_sub(self.clock.now()).saturating_add(1),
        ))
    }

    /// Until it must stop (at once if it must already). Waits on the worker's clock: up to the
    /// lease's end, and at most a second at a time (the lease may be granted or renewed
    /// meanwhile).
    pub async fn stopped(&self) {
        while !self.is_set() {
            let now = self.clock.now();
            let wake = self.lease.until().unwrap_or(u64::MAX).min(now + 1000);
            tokio::select! {
                _ = self.cancel.stopped() => {}
                _ = tokio::time::sleep_until(self.clock.at(wake.max(now + 1))) => {}
            }
        }
    }
}
