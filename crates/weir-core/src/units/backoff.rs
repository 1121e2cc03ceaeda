//! After a failure of a unit backend: no capacity and no new unit for a while (1 s, doubling
//! with each failed round in a row to 60 s), so the waterfall spills to the next tier meanwhile.
//! A round is one poll: several units found late or ended in it are one failure, not several
//! (one event, such as a full queue or a down controller, fails them together); so are failures
//! found while already backing off (no unit was started since: they are of the same batch,
//! found a poll later because they were submitted a little later). Until a unit comes up again
//! it is `recovering`: units are started one at a time, not the whole batch.

use weir_proto::LaunchReport;

/// The longest wait, in ms.
const MAX_DELAY_MS: u64 = 60_000;

/// Failed rounds in a row, and until when (ms) the manager backs off.
#[derive(Debug, Default)]
pub struct Backoff {
    failures: u32,
    until: Option<u64>,
    /// When a failure was last seen (ms).
    last: Option<u64>,
}

/// What [`Backoff::fail`] made of a round's failures.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Failed {
    /// The round had none.
    Nothing,
    /// Found while backing off: the same event, no longer wait.
    Same,
    /// One more failed round in a row (the count): backing off for `delay_ms`.
    Round { failures: u32, delay_ms: u64 },
}

impl Backoff {
    pub fn active(&self, now: u64) -> bool {
        self.until.is_some_and(|until| now < until)
    }

    /// Failed rounds in a row.
    pub fn failures(&self) -> u32 {
        self.failures
    }

    /// Failed since a unit last came up.
    pub fn recovering(&self) -> bool {
        self.failures > 0
    }

    /// The `count` failures of one round at `now`: one more failure in a row if there are any.
    pub fn fail(&mut self, count: usize, now: u64) -> Failed {
        if count == 0 {
            return Failed::Nothing;
        }
        self.last = Some(now);
        if self.active(now) {
            return Failed::Same;
        }
        self.failures += 1;
        let delay_ms = delay(self.failures);
        self.until = Some(now.saturating_add(delay_ms));
        Failed::Round {
            failures: self.failures,
            delay_ms,
        }
    }

    /// A unit came up: failures in a row start again from zero.
    pub fn reset(&mut self) {
        self.failures = 0;
    }

    /// What the manager reports of it at `now`.
    pub fn report(&self, now: u64) -> LaunchReport {
        LaunchReport {
            failures: self.failures,
            last_failure_ms: self.last.map(|at| now.saturating_sub(at)),
            backoff_ms: self.until.map_or(0, |until| until.saturating_sub(now)),
        }
    }
}

/// The wait (ms) after `failures` failed rounds in a row: 1 s, doubling, at most 60 s.
pub(super) fn delay(failures: u32) -> u64 {
    (1000u64 << failures.clamp(1, 7).saturating_sub(1)).min(MAX_DELAY_MS)
}

/// A worker process that exits sooner than this (ms) after its start counts as a failed start.
pub(super) const YOUNG_MS: u64 = 10_000;
/// Longest wait (ms) before starting processes again after failed starts.
const MAX_RESTART_MS: u64 = 30_000;

/// The process backend's backoff: worker processes that died young in a row, and when (ms)
/// starting is allowed again (0.5 s, doubling, at most 30 s); one that lived resets it.
#[derive(Clone, Debug, Default)]
pub struct Restarts {
    failures: u32,
    not_before: u64,
    /// When a process last died young (ms).
    last: Option<u64>,
}

impl Restarts {
    /// A worker process that lived `lived` ms exited at `now`: the wait (ms) before starting
    /// again if it died young.
    pub fn exited(&mut self, now: u64, lived: u64) -> Option<u64> {
        if lived >= YOUNG_MS {
            self.failures = 0;
            return None;
        }
        self.failures = self.failures.saturating_add(1);
        self.last = Some(now);
        let wait = 250u64
            .saturating_mul(2u64.saturating_pow(self.failures))
            .min(MAX_RESTART_MS);
        self.not_before = now.saturating_add(wait);
        Some(wait)
    }

    pub fn may_start(&self, now: u64) -> bool {
        now >= self.not_before
    }

    /// `alive`: when each of the live worker processes started. One started after the last
    /// failure that has lived [`YOUNG_MS`] came up: the failures in a row are over (the next
    /// young exit waits from the start again), though none exited since.
    pub fn came_up(&mut self, now: u64, alive: impl IntoIterator<Item = u64>) {
        let up = self.last.is_some_and(|last| {
            (alive.into_iter()).any(|since| since >= last && now.saturating_sub(since) >= YOUNG_MS)
        });
        if up {
            self.failures = 0;
        }
    }

    /// What the manager reports of it at `now`.
    pub fn report(&self, now: u64) -> LaunchReport {
        LaunchReport {
            failures: self.failures,
            last_failure_ms: self.last.map(|at| now.saturating_sub(at)),
            backoff_ms: self.not_before.saturating_sub(now),
        }
    }
}
