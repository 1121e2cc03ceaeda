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
