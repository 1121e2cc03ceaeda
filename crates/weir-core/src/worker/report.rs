//! The worker's outcomes on their way to the scheduler: held back a moment to go in one frame
//! with others, held for the worker's own stop signal when a signal ended the task, and kept
//! until the scheduler acknowledges them as durable (reported again in the next session if it
//! never does). And the starts of held tasks, reported with the next outcomes.

use std::collections::VecDeque;

use super::{Config, HOLD_REPORTS_MS};
use weir_proto::{FromWorker, Outcome, TaskId};

/// The most outcome bytes one `Finished` frame carries (a single bigger outcome goes alone: a
/// function result is capped below the frame limit, command output by `--output-limit`).
pub(super) const REPORT_FRAME_BYTES: usize = 16 << 20;

#[derive(Default, Debug)]
pub(super) struct Reports {
    /// Outcomes reported in this session and not yet acknowledged as durable, oldest first.
    unacknowledged: VecDeque<(TaskId, Outcome)>,
    /// How many outcomes this session reported, of which the first `acknowledged` are durable.
    reported: u64,
    acknowledged: u64,
    /// Outcomes to report once registered: claimed by the registration.
    unsent: Vec<(TaskId, Outcome)>,
    /// Outcomes held back to go in one frame, and when they go at the latest.
    batched: Vec<(TaskId, Outcome)>,
    flush_at: u64,
    /// Outcomes of tasks a signal ended that this worker did not send, held for a moment: a
    /// cluster engine that stops the worker signals its tasks too, and then they are not at
    /// fault. If the worker's own signal follows within the grace, they are not reported (the
    /// scheduler requeues them without spending a retry); otherwise they are reported.
    signaled: Vec<(TaskId, Outcome)>,
    signaled_at: u64,
    /// Tasks that got a slot, to be reported with the next outcomes.
    started: Vec<TaskId>,
}

impl Reports {
    /// A session begins: what was reported and not acknowledged is reported again, first.
    pub(super) fn new_session(&mut self) {
        let mut unsent: Vec<_> = self.unacknowledged.drain(..).collect();
        unsent.append(&mut self.unsent);
        self.unsent = unsent;
        self.reported = 0;
        self.acknowledged = 0;
    }

    /// The outcomes a registration claims.
    pub(super) fn claimed(&self) -> Vec<TaskId> {
        self.unsent.iter().map(|(task, _)| *task).collect()
    }

    pub(super) fn take_unsent(&mut self) -> Vec<(TaskId, Outcome)> {
        std::mem::take(&mut self.unsent)
    }

    /// An outcome read between sessions: claimed by the next registration.
    pub(super) fn keep(&mut self, task: TaskId, outcome: Outcome) {
        self.unsent.push((task, outcome));
    }

    pub(super) fn started(&mut self, task: TaskId) {
        self.started.push(task);
    }

    /// The scheduler has the first `count` outcomes of this session on disk.
    pub(super) fn received(&mut self, count: u64) {
        let durable = count.min(self.reported).saturating_sub(self.acknowledged);
        for _ in 0..durable {
            self.unacknowledged.pop_front();
        }
        self.acknowledged += durable;
    }

    /// Outcomes sent and not acknowledged, and outcomes not sent yet.
    pub(super) fn unacknowledged(&self) -> usize {
        self.unacknowledged.len() + self.unsent.len() + self.batched.len() + self.signaled.len()
    }

    /// A task ended in this session, `waiting` held tasks still wait for a slot: what to report
    /// now. At once when nothing waits here to start next; otherwise once as many have finished
    /// as still wait, so the scheduler refills in one frame (or when [`HOLD_REPORTS_MS`] is up).
    pub(super) fn finished(
        &mut self,
        now: u64,
        task: TaskId,
        outcome: Outcome,
        waiting: usize,
        config: &Config,
    ) -> Vec<(TaskId, Outcome)> {
        if matches!(outcome, Outcome::Exited { code: None, .. }) {
            if self.signaled.is_empty() {
                self.signaled_at = now.saturating_add(config.signal_grace_ms);
            }
            self.signaled.push((task, outcome));
            return Vec::new();
        }
        if self.batched.is_empty() {
            self.flush_at = now.saturating_add(HOLD_REPORTS_MS);
        }
        self.batched.push((task, outcome));
        match waiting == 0 || self.batched.len() >= waiting {
            true => std::mem::take(&mut self.batched),
            false => Vec::new(),
        }
    }

    /// When held outcomes are due (`u64::MAX`: none is held).
    pub(super) fn due(&self) -> u64 {
        let flush = match self.batched.is_empty() {
            true => u64::MAX,
            false => self.flush_at,
        };
        let signaled = match self.signaled.is_empty() {
            true => u64::MAX,
            false => self.signaled_at,
        };
        flush.min(signaled)
    }

    /// The held outcomes due at `now`.
    pub(super) fn due_now(&mut self, now: u64) -> Vec<(TaskId, Outcome)> {
        let mut due = Vec::new();
        if !self.signaled.is_empty() && now >= self.signaled_at {
            due.append(&mut self.signaled);
        }
        if !self.batched.is_empty() && now >= self.flush_at {
            due.append(&mut self.batched);
        }
        due
    }

    pub(super) fn take_batched(&mut self) -> Vec<(TaskId, Outcome)> {
        std::mem::take(&mut self.batched)
    }

    /// The session ended: outcomes held for a stop signal are dropped if the worker stops
    /// (their tasks are requeued, not failed), reported in the next session otherwise.
    pub(super) fn session_ended(&mut self, stopping: bool) {
        let signaled = std::mem::take(&mut self.signaled);
        if stopping && !signaled.is_empty() {
            tracing::info!(
                tasks = signaled.len(),
                "tasks ended by the signal that stops this worker: requeued, not failed"
            );
        } else if !stopping {
            self.unacknowledged.extend(signaled);
        }
    }

    /// The frames that report `batch` (after the starts not reported yet), keeping its outcomes
    /// until acknowledged. Frames stay well below the frame limit however big the outputs (the
    /// scheduler counts outcomes, not frames, when it acknowledges them).
    pub(super) fn frames(&mut self, batch: Vec<(TaskId, Outcome)>) -> Vec<FromWorker> {
        let mut frames = Vec::new();
        if !self.started.is_empty() {
            frames.push(FromWorker::Started(std::mem::take(&mut self.started)));
        }
        if batch.is_empty() {
            return frames;
        }
        self.reported += batch.len() as u64;
        self.unacknowledged.extend(batch.iter().cloned());
        let mut frame = Vec::new();
        let mut bytes = 0;
        for (task, outcome) in batch {
            let size = outcome.size_hint();
            if !frame.is_empty() && bytes + size > REPORT_FRAME_BYTES {
                frames.push(FromWorker::Finished(std::mem::take(&mut frame)));
                bytes = 0;
            }
            bytes += size;
            frame.push((task, outcome));
        }
        if !frame.is_empty() {
            frames.push(FromWorker::Finished(frame));
        }
        frames
    }
}
