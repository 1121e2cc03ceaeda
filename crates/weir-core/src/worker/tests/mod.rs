//! The worker's core by its entry point alone: what it sends, starts and gives up, on a clock
//! the test moves.

use super::*;
use weir_proto::{Assignment, FromWorker, Outcome, ToWorker, WorkerRegistration};

const LEASE: u64 = 10_000;
/// What the scheduler asks of an idle worker with that lease (`lease::idle_beat`).
const IDLE_BEAT: u64 = 9_000;

fn worker(slots: u32) -> WorkerCore {
    WorkerCore::new(Config {
        info: WorkerRegistration {
            name: "w".into(),
            slots,
            capabilities: vec![],
            worker_type: String::new(),
            manager: None,
            local_environments: vec![],
            running: vec![],
            instance: 1,
            ends_in_ms: None,
            finished: vec![],
        },
        heartbeat_ms: 1_000,
        signal_grace_ms: 500,
        ends_at: None,
    })
}

fn actions(w: &mut WorkerCore) -> Vec<Action> {
    std::iter::from_fn(|| w.poll_action()).collect()
}

/// Connected at `now` and registered at once.
fn registered(w: &mut WorkerCore, now: u64) -> Vec<Action> {
    w.handle(now, Input::Connected);
    let mut out = actions(w);
    let registered = ToWorker::Registered {
        id: 1,
        lease_ms: LEASE,
        idle_beat_ms: IDLE_BEAT,
    };
    w.handle(now, Input::Frame(registered));
    out.extend(actions(w));
    out
}

/// The renewal among `actions`, if one was sent: its sequence number.
fn renewal(actions: &[Action]) -> Option<u64> {
    actions.iter().find_map(|a| match a {
        Action::Send(FromWorker::Renew { seq }) => Some(*seq),
        _ => None,
    })
}

/// The scheduler's answer to renewal `seq`, asking idle beats at the small cluster's pace.
fn answer(seq: u64) -> Input {
    answer_with(seq, IDLE_BEAT)
}

/// The scheduler's answer to renewal `seq`, asking idle beats every `idle_beat_ms`.
fn answer_with(seq: u64, idle_beat_ms: u64) -> Input {
    Input::Frame(ToWorker::Lease { seq, idle_beat_ms })
}

fn run(tasks: &[u64]) -> Input {
    let assignments = tasks
        .iter()
        .map(|task| Assignment {
            task: *task,
            group: 1,
            index: 0,
            input: None,
        })
        .collect();
    Input::Frame(ToWorker::Run(assignments))
}

fn ok() -> Outcome {
    Outcome::Exited {
        code: Some(0),
        stdout: vec![],
        stderr: vec![],
    }
}

fn started(actions: &[Action]) -> Vec<(u64, u64)> {
    actions
        .iter()
        .filter_map(|a| match a {
            Action::Start { run, assignment } => Some((assignment.task, *run)),
            _ => None,
        })
        .collect()
}

fn finished(actions: &[Action]) -> Vec<u64> {
    actions
        .iter()
        .filter_map(|a| match a {
            Action::Send(FromWorker::Finished(results)) => Some(results.iter().map(|(t, _)| *t)),
            _ => None,
        })
        .flatten()
        .collect()
}

fn ended(task: u64, run: u64, at: u64) -> Input {
    Input::TaskEnded {
        task,
        run,
        outcome: ok(),
        at,
    }
}

mod lease;
mod pace;
mod slots;
