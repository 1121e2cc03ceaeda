//! The invariants, judged from the simulator's timeline (not the scheduler's records) and what
//! the client was told.

use std::collections::BTreeSet;
use std::time::Duration;

use weir::proto::{TaskResult, TaskState};

use crate::client::produced;
use crate::timeline::{Event, Timeline};

/// How many times a task's run may go uncounted in a life of the scheduler
/// (`weir_core::tasks::MAX_SPARED`, private to the core).
const MAX_SPARED: usize = 2;

/// No two runs of one task overlap in simulated time (a run still going is open until `now`),
/// and no invariant the simulator judges where it happens broke (`Event::Broken`).
pub(crate) fn no_overlap(timeline: &Timeline, now: Duration) -> Result<(), String> {
    if let Some(broken) = timeline.broken() {
        return Err(broken);
    }
    leaders_in_order(timeline)?;
    for (task, mut runs) in timeline.runs(now) {
        runs.sort();
        for pair in runs.windows(2) {
            let ((_, end, first), (start, _, second)) = (&pair[0], &pair[1]);
            if start < end {
                return Err(format!(
                    "task {task} ran twice at once: on {first} until {:.3}s and on {second} from {:.3}s",
                    end.as_secs_f64(),
                    start.as_secs_f64()
                ));
            }
        }
    }
    Ok(())
}

/// Scheduler replicas: each actor that takes over (noted [`Event::Lead`]) serves a leader id
/// (term, replica) no smaller than every one served before it. openraft orders leader ids so
/// (it may elect two replicas in one term, one after the other: the later one, with the higher
/// id, is the valid one; see Cargo.toml), and a majority that voted for an id never confirms a
/// smaller one: so two replicas never serve one term out of that order, and a deposed leader
/// never serves again in its old term. The same id may serve again: a leader that restarted
/// (openraft resumes its lead) or whose term's actor stopped for want of a commit, confirmed
/// again by a majority either way.
pub(crate) fn leaders_in_order(timeline: &Timeline) -> Result<(), String> {
    let mut last: Option<(u64, u64)> = None;
    for (at, replica, term) in timeline.leads() {
        if let Some((last_term, last_replica)) = last
            && (term, replica) < (last_term, last_replica)
        {
            return Err(format!(
                "replica {replica} began to serve term {term} at {:.3}s, after replica {last_replica} served term {last_term}",
                at.as_secs_f64()
            ));
        }
        last = Some((term, replica));
    }
    Ok(())
}

/// At the end: the client was answered for every task it submitted, once each, every task in
/// a final state, each success with the output its run produced; and no runs overlapped.
pub(crate) fn at_end(
    timeline: &Timeline,
    jobs: &[Vec<Vec<u8>>],
    results: Option<Vec<Vec<TaskResult>>>,
    end: Duration,
) -> Result<(), String> {
    no_overlap(timeline, end)?;
    let Some(results) = results else {
        return Err("the client never got the results of its acknowledged jobs".into());
    };
    if results.len() != jobs.len() {
        return Err(format!(
            "results of {} jobs of {} acknowledged",
            results.len(),
            jobs.len()
        ));
    }
    let runs = timeline.runs(end);
    // The scheduler's lives: it counts its spared starts (below) in memory, anew in each
    // (a replica's, anew in each term it leads).
    let lives = 1
        + timeline.leads().len()
        + (timeline.events().iter())
            .filter(|(_, e)| matches!(e, Event::Fault(f) if f.starts_with("CrashScheduler")))
            .count();
    for (inputs, results) in jobs.iter().zip(results) {
        for result in &results {
            // Every run that started is counted (so `retries` bounds the runs), but for those
            // a worker lost before it reported their start: spared, at most `MAX_SPARED` (2)
            // times a task in a life of the scheduler (RELIABILITY.md), and only runs whose
            // result was not the one kept (all but one). The count may be higher than the
            // runs: a hand-over lost with its worker before it said a word is counted, as the
            // scheduler cannot know that it never began.
            let started = runs.get(&result.task).map_or(0, Vec::len);
            let spared = started.saturating_sub(1).min(MAX_SPARED * lives);
            if started > result.attempts as usize + spared {
                return Err(format!(
                    "task {}: {started} runs started (the timeline), the scheduler counts {} attempts",
                    result.task, result.attempts
                ));
            }
        }
        job_results(inputs, results)?;
    }
    Ok(())
}

/// One job's results: one per task, final, each success what its run produced.
fn job_results(inputs: &[Vec<u8>], mut results: Vec<TaskResult>) -> Result<(), String> {
    results.sort_by_key(|r| r.task);
    let distinct: BTreeSet<_> = results.iter().map(|r| r.task).collect();
    if distinct.len() != results.len() || results.len() != inputs.len() {
        return Err(format!(
            "{} results for {} tasks ({} distinct)",
            results.len(),
            inputs.len(),
            distinct.len()
        ));
    }
    for (result, input) in results.iter().zip(inputs) {
        match result.state {
            TaskState::Succeeded if !produced(&result.outcome, input) => {
                return Err(format!(
                    "task {} succeeded with an outcome no run of it produced: {:?}",
                    result.task, result.outcome
                ));
            }
            TaskState::Queued | TaskState::Running => {
                return Err(format!("task {} not final in the results", result.task));
            }
            _ => {}
        }
    }
    Ok(())
}
