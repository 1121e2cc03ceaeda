//! A run's controls ([`Cancel`]) and the outcome of a canceled run: shared by the runs of
//! commands and components (`run`) and the function runners (`functions`), below both.

use std::sync::Arc;

pub(super) use crate::core::worker::canceled;

/// A run's controls. Its stop request (`weir cancel`, the worker stopping, the lease given
/// up): a command's process group is killed and reaped, a wasm instance is interrupted at its
/// next epoch tick. Either way the task reports `canceled` only once it has really stopped.
/// Whether a held task starts or is given back is decided in the worker's core
/// (`core::worker`), not here.
#[derive(Default)]
pub(super) struct Cancel {
    flag: Arc<std::sync::atomic::AtomicBool>,
    notify: tokio::sync::Notify,
    /// [`super::guard::lapses`] when it started: a run the lease lapsed during is stopped.
    pub lapses: u64,
}

impl Cancel {
    /// The controls of a run started when the lease had lapsed `lapses` times.
    pub(super) fn started(lapses: u64) -> Cancel {
        Cancel {
            lapses,
            ..Cancel::default()
        }
    }

    pub(super) fn cancel(&self) {
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
    pub(super) async fn stopped(&self) {
        if !self.is_set() {
            self.notify.notified().await;
        }
    }
}
