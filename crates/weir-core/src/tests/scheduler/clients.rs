//! Clients: progress at most every 100 ms, watches, cancels of single tasks, lease renewals.

use super::*;

#[test]
fn progress_goes_at_most_every_100_ms_and_the_end_at_once() {
    use crate::scheduler::PROGRESS_EVERY_MS;
    let mut core = Scheduler::new(config(false));
    let actions = round(
        &mut core,
        0,
        vec![
            join(1, worker("w1", 4)),
            from_client(1, submit(4)),
            from_client(2, Request::Wait { job: 1 }),
        ],
    );
    assert!(matches!(
        replies(&actions, 2)[..],
        [(Response::Progress(_), false)]
    ));
    let tasks = runs(&actions);
    assert_eq!(tasks.len(), 4);
    let succeeded = |n| {
        Response::Progress(JobCounts {
            succeeded: n,
            running: 4 - n,
            ..JobCounts::default()
        })
    };
    // The first change goes at once; the next within the quiet time waits for its end.
    let actions = finish(&mut core, 10, tasks[0]);
    assert_eq!(replies(&actions, 2), vec![(&succeeded(1), false)]);
    let actions = finish(&mut core, 20, tasks[1]);
    assert!(replies(&actions, 2).is_empty(), "{actions:#?}");
    assert_eq!(core.poll_timeout(), 10 + PROGRESS_EVERY_MS);
    core.handle(10 + PROGRESS_EVERY_MS - 1, Input::Timeout);
    assert!(replies(&core.take_actions(), 2).is_empty());
    core.handle(10 + PROGRESS_EVERY_MS, Input::Timeout);
    assert_eq!(
        replies(&core.take_actions(), 2),
        vec![(&succeeded(2), false)]
    );
    // Nothing due: the timeout is the tick's again.
    assert!(core.poll_timeout() > 10 + PROGRESS_EVERY_MS);
    let actions = finish(&mut core, 120, tasks[2]);
    assert!(replies(&actions, 2).is_empty());
    // The end is not held back.
    let actions = finish(&mut core, 130, tasks[3]);
    let done = JobCounts {
        succeeded: 4,
        ..JobCounts::default()
    };
    assert_eq!(replies(&actions, 2), vec![(&Response::Done(done), true)]);
    core.handle(1_000, Input::Timeout);
    assert!(replies(&core.take_actions(), 2).is_empty());
}

/// Progress held back for a client that is gone is dropped with it: no wake-up for nobody.
#[test]
fn progress_due_for_a_client_that_is_gone_is_dropped() {
    use crate::scheduler::PROGRESS_EVERY_MS;
    let mut core = Scheduler::new(config(false));
    let actions = round(
        &mut core,
        0,
        vec![
            join(1, worker("w1", 4)),
            from_client(1, submit(4)),
            from_client(2, Request::Wait { job: 1 }),
        ],
    );
    let tasks = runs(&actions);
    finish(&mut core, 10, tasks[0]);
    finish(&mut core, 20, tasks[1]);
    assert_eq!(
        core.poll_timeout(),
        10 + PROGRESS_EVERY_MS,
        "progress held back"
    );
    round(&mut core, 30, vec![Input::ClientGone { client: 2 }]);
    assert!(core.poll_timeout() > 10 + PROGRESS_EVERY_MS);
}

/// Worker 1 reports `task` succeeded at `now`; what the core asks for.
fn finish(core: &mut Scheduler, now: u64, task: u64) -> Vec<Action> {
    round(
        core,
        now,
        vec![Input::Finished {
            worker: 1,
            results: vec![(task, ok())],
        }],
    )
}

/// The tasks of `Results` replies to `client`, in order, and whether a `Done` ended them.
fn watched(actions: &[Action], client: u64) -> (Vec<u64>, bool) {
    let mut tasks = Vec::new();
    let mut done = false;
    for (response, last) in replies(actions, client) {
        match response {
            Response::Results(results) => tasks.extend(results.iter().map(|r| r.task)),
            Response::Done(_) => done = last,
            other => panic!("unexpected {other:?}"),
        }
    }
    (tasks, done)
}

#[test]
fn a_watch_gets_each_result_as_its_task_ends_and_a_late_one_what_ended_before() {
    let mut core = Scheduler::new(config(true));
    let actions = round(
        &mut core,
        0,
        vec![
            join(1, worker("w1", 3)),
            from_client(1, submit(3)),
            from_client(2, Request::Watch { job: 1 }),
        ],
    );
    assert_eq!(watched(&actions, 2), (vec![], false));
    let tasks = runs(&actions);
    // Each result goes at once, not throttled like progress.
    assert_eq!(
        watched(&finish(&mut core, 1, tasks[1]), 2),
        (vec![tasks[1]], false)
    );
    assert_eq!(
        watched(&finish(&mut core, 2, tasks[0]), 2),
        (vec![tasks[0]], false)
    );
    // A watcher that comes late is sent what ended so far first.
    let late = round(
        &mut core,
        3,
        vec![from_client(3, Request::Watch { job: 1 })],
    );
    assert_eq!(watched(&late, 3), (vec![tasks[0], tasks[1]], false));
    let last = finish(&mut core, 4, tasks[2]);
    assert_eq!(watched(&last, 2), (vec![tasks[2]], true));
    assert_eq!(watched(&last, 3), (vec![tasks[2]], true));
    // Once done, a watch is answered whole and ended.
    let after = round(
        &mut core,
        5,
        vec![from_client(4, Request::Watch { job: 1 })],
    );
    assert_eq!(watched(&after, 4), (tasks.clone(), true));
    let unknown = round(
        &mut core,
        6,
        vec![from_client(5, Request::Watch { job: 9 })],
    );
    assert!(matches!(
        replies(&unknown, 5)[..],
        [(Response::Error { .. }, true)]
    ));
}

/// A watch that arrives in the round its job's task finishes (the finish taken in first) hears
/// that result once: the simulation's seed 77 found it sent twice, once with what had ended so
/// far and again as the round's finished tasks were flushed to the watchers.
#[test]
fn a_watch_in_the_round_a_task_finishes_hears_its_result_once() {
    let mut core = Scheduler::new(config(true));
    let actions = round(
        &mut core,
        0,
        vec![join(1, worker("w1", 2)), from_client(1, submit(2))],
    );
    let tasks = runs(&actions);
    let same_round = round(
        &mut core,
        1,
        vec![
            Input::Finished {
                worker: 1,
                results: vec![(tasks[0], ok())],
            },
            from_client(2, Request::Watch { job: 1 }),
        ],
    );
    assert_eq!(watched(&same_round, 2), (vec![tasks[0]], false));
    let last = finish(&mut core, 2, tasks[1]);
    assert_eq!(watched(&last, 2), (vec![tasks[1]], true));
}

#[test]
fn cancelling_single_tasks_stops_the_running_ones_and_journals_them_final() {
    let mut core = Scheduler::new(config(true));
    let actions = round(
        &mut core,
        0,
        vec![join(1, worker("w1", 1)), from_client(1, submit(3))],
    );
    let running = runs(&actions);
    assert_eq!(running.len(), 1, "{actions:#?}");
    let first = running[0];
    let queued: Vec<u64> = (1..=3).filter(|t| !running.contains(t)).collect();
    let actions = round(
        &mut core,
        1,
        vec![from_client(
            2,
            Request::CancelTasks {
                tasks: vec![first, queued[0], 999],
            },
        )],
    );
    // The running one is stopped on its worker; the unknown id is skipped.
    assert!(actions.iter().any(|a| matches!(
        a,
        Action::ToWorker { worker: 1, message: ToWorker::Cancel(tasks) } if *tasks == vec![first]
    )));
    let journaled = journaled(&actions);
    assert!(
        journaled.iter().any(|r| matches!(
            r,
            Record::Final(finals) if finals.len() == 2
                && finals.iter().all(|(_, state, _, _)| *state == TaskState::Canceled)
        )),
        "{journaled:#?}"
    );
    let counts = core.tasks().status().tasks;
    assert_eq!(counts.canceled, 2);
    // The reply waits for the journal (a durable answer).
    core.handle(2, Input::Synced { journal_bytes: 0 });
    let answered: Vec<_> = core.take_actions();
    assert!(
        replies(&actions, 2)
            .iter()
            .chain(replies(&answered, 2).iter())
            .any(|(r, _)| matches!(r, Response::Canceled { tasks: 2 })),
        "{actions:#?} {answered:#?}"
    );
}

#[test]
fn a_lease_is_renewed_only_in_answer_to_a_request_and_only_while_the_worker_is_live() {
    let mut core = Scheduler::new(config(false));
    let actions = round(&mut core, 0, vec![join(1, worker("w", 1))]);
    assert!(actions.iter().any(|a| matches!(
        a,
        Action::ToWorker {
            message: ToWorker::Registered {
                lease_ms: 10_000,
                idle_beat_ms: 9_000,
                ..
            },
            ..
        }
    )));
    let leases = |actions: &[Action]| -> Vec<u64> {
        actions
            .iter()
            .filter_map(|a| match a {
                Action::ToWorker {
                    message: ToWorker::Lease { seq, .. },
                    ..
                } => Some(*seq),
                _ => None,
            })
            .collect()
    };
    let renew = |seq| Input::Heartbeat {
        worker: 1,
        renew: Some(seq),
    };
    // Each request is answered with its own sequence number; a plain heartbeat grants nothing.
    let plain = Input::Heartbeat {
        worker: 1,
        renew: None,
    };
    assert_eq!(
        leases(&round(&mut core, 100, vec![renew(1), plain])),
        vec![1]
    );
    assert_eq!(leases(&round(&mut core, 200, vec![renew(2)])), vec![2]);
    // Declared lost (its connection broke): a request that arrives after that grants nothing.
    round(
        &mut core,
        300,
        vec![Input::WorkerGone {
            worker: 1,
            reason: "connection lost".into(),
            planned: false,
        }],
    );
    assert!(leases(&round(&mut core, 400, vec![renew(3)])).is_empty());
}
