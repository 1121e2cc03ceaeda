//! A held task's controls ([`Cancel`]) and the outcome of a canceled run: shared by the runs of
//! commands and components (`run`) and the function runners (`functions`), below both.

use std::sync::Arc;

use crate::proto::Outcome;

/// A held task's controls. Its stop request (`weir cancel`, the worker stopping): a command's
/// process group is killed and reaped, a wasm instance is interrupted at its next epoch tick.
/// Either way the task reports `canceled` only once it has really stopped, so its slot is never
/// given to another task while it still runs. And whether it has started: a task handed over
/// ahead of a free slot waits for one, and may be given back (revoked) until it starts, never
/// after — exactly one of the two happens.
#[derive(Default)]
pub(super) struct Cancel {
    flag: Arc<std::sync::atomic::AtomicBool>,
    notify: tokio::sync::Notify,
    /// [`WAITING`], [`STARTED`] or [`REVOKED`].
    phase: std::sync::atomic::AtomicU8,
    /// [`super::guard::lapses`] when it was handed over: a run the lease lapsed during is
    /// stopped (and its outcome not reported).
    pub lapses: u64,
    /// Which hand-over of a task to this worker it is (from 1), told apart from an earlier run
    /// of the same task still ending.
    pub run: u64,
}

const WAITING: u8 = 0;
const STARTED: u8 = 1;
const REVOKED: u8 = 2;

impl Cancel {
    /// The controls of hand-over `run`, when the lease had lapsed `lapses` times.
    pub fn handed_over(lapses: u64, run: u64) -> Cancel {
        Cancel {
            lapses,
            run,
            ..Cancel::default()
        }
    }

    pub fn cancel(&self) {
        self.flag.store(true, std::sync::atomic::Ordering::SeqCst);
        self.notify.notify_one();
    }

    pub(super) fn is_set(&self) -> bool {
        self.flag.load(std::sync::atomic::Ordering::SeqCst)
    }

    /// The stop request's flag, for a check off this thread (a wasm run's).
    pub(super) fn flag(&self) -> Arc<std::sync::atomic::AtomicBool> {
        self.flag.clone()
    }

    /// The next stop request's wake-up (or the one that came with no waiter yet).
    pub(super) fn notified(&self) -> tokio::sync::futures::Notified<'_> {
        self.notify.notified()
    }

    /// Until the stop request (at once if it came already).
    pub async fn stopped(&self) {
        if !self.is_set() {
            self.notify.notified().await;
        }
    }

    /// The task starts (or reports its cancel): false if it was given back first.
    pub fn start(&self) -> bool {
        self.leave_waiting(STARTED)
    }

    /// Give the task back: false if it started first.
    pub fn revoke(&self) -> bool {
        self.leave_waiting(REVOKED)
    }

    /// Waiting -> `phase`, once: whichever of start and revoke comes first wins.
    fn leave_waiting(&self, phase: u8) -> bool {
        use std::sync::atomic::Ordering::SeqCst;
        self.phase
            .compare_exchange(WAITING, phase, SeqCst, SeqCst)
            .is_ok()
    }
}

pub(super) fn canceled() -> Outcome {
    Outcome::Error {
        message: "canceled".into(),
    }
}
