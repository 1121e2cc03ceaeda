//! Why a scaling policy gave no decision the scheduler applies: its call failed in the plugin
//! host (the shell maps the host's errors into [`PolicyFailure`]), or its decision broke one of
//! the rules every decision passes ([`Nonsense`], found by `validate_decisions`). The `Display`
//! texts are what `weir policy show`, `weir policy set` and the logs print.

use std::time::Duration;

/// A policy's call that did not give a usable answer.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum PolicyFailure {
    /// The call did not return by its deadline (it was interrupted).
    #[error("{policy}: {call} timed out after {deadline:?}")]
    TimedOut {
        policy: String,
        call: &'static str,
        deadline: Duration,
    },
    /// The call was stopped on request.
    #[error("{policy}: {call} was canceled")]
    Canceled { policy: String, call: &'static str },
    /// The call grew its memories past the limit.
    #[error("{policy}: {call} ran out of memory: the limit is {limit} bytes over all its memories")]
    OutOfMemory {
        policy: String,
        call: &'static str,
        limit: u64,
    },
    #[error("{policy}: {call} panicked: {message}")]
    Panicked {
        policy: String,
        call: &'static str,
        message: String,
    },
    #[error("{policy}: {call} trapped: {detail}")]
    Trapped {
        policy: String,
        call: &'static str,
        detail: String,
    },
    /// The policy returned an error of its own (e.g. content it cannot read).
    #[error("{policy}: {call} failed: {message}")]
    Refused {
        policy: String,
        call: &'static str,
        message: String,
    },
    /// It decided something that cannot be applied: the core's own check refused it.
    #[error("{policy}: nonsense decision: {rule}")]
    Nonsense { policy: String, rule: Nonsense },
    /// Its component cannot be read, validated, compiled or linked (the plugin host's words,
    /// which name the policy).
    #[error("{0}")]
    Unloadable(String),
    /// A policy set while running came with no component bytes.
    #[error("no component")]
    NoComponent,
    /// A new policy's trial run on the last snapshot failed: it does not take over.
    #[error("on the last snapshot: {0}")]
    OnLastSnapshot(Box<PolicyFailure>),
    /// The shell's policy thread has stopped: no policy runs any more.
    #[error("the policy thread is gone")]
    ThreadGone,
    /// A decision came while the core had asked for none (a shell bug, refused).
    #[error("a decision nobody asked for")]
    Unasked,
}

/// The rule of `validate_decisions` a policy's decision breaks.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum Nonsense {
    #[error("unknown manager `{manager}`")]
    UnknownManager { manager: String },
    #[error("manager `{manager}` is offline")]
    Offline { manager: String },
    #[error("two decisions for manager `{manager}`")]
    TwoDecisions { manager: String },
    #[error(
        "asks manager `{manager}` for {desired} workers; its max task concurrency {concurrency} \
         allows {allowed}"
    )]
    OverCap {
        manager: String,
        desired: u32,
        concurrency: u32,
        allowed: u64,
    },
    #[error("stops `{worker}`, which is not a worker of manager `{manager}`")]
    NotItsWorker { manager: String, worker: u64 },
    #[error("stops worker `{worker}` of manager `{manager}` while it runs tasks")]
    StopsBusy { manager: String, worker: u64 },
    #[error("stops worker `{worker}` of manager `{manager}` twice")]
    StopsTwice { manager: String, worker: u64 },
    #[error("drains `{worker}`, which is not a live worker of manager `{manager}`")]
    DrainsNotItsWorker { manager: String, worker: u64 },
    #[error("drains worker `{worker}` of manager `{manager}` twice, or drains and stops it")]
    DrainsTwice { manager: String, worker: u64 },
    #[error(
        "drains {drained} workers of manager `{manager}`; its drain budget \
         (scheduler --max-drain-percent) allows {budget}"
    )]
    OverDrainBudget {
        manager: String,
        drained: usize,
        budget: u32,
    },
}
