//! Submissions that carry a client's request id: a resend (after a lost connection, a restart
//! or a failover) is answered with the first submission's job, never made a second one.

use super::*;

fn submit_as(count: u32, request: u128) -> Request {
    let Request::Submit {
        groups, components, ..
    } = submit(count)
    else {
        unreachable!("submit builds a submission")
    };
    Request::Submit {
        groups,
        components,
        request: Some(request),
    }
}

fn submitted(actions: &[Action], client: u64) -> (u64, u64, u64) {
    for action in actions {
        if let Action::Reply {
            client: to,
            response:
                Response::Submitted {
                    job,
                    first_task,
                    tasks,
                },
            durable: true,
            ..
        } = action
            && *to == client
        {
            return (*job, *first_task, *tasks);
        }
    }
    panic!("no durable Submitted to client {client} in {actions:#?}")
}

/// Replay `records` into a new scheduler, as a restart (or a new leader) does.
fn replayed(records: Vec<Record>) -> Scheduler {
    let mut core = Scheduler::restored(config(true), records, 10);
    core.take_actions();
    core
}

#[test]
fn a_resent_submission_gets_the_first_answer_and_makes_no_second_job() {
    let mut core = Scheduler::new(config(true));
    let first = round(&mut core, 0, vec![from_client(1, submit_as(3, 77))]);
    let answer = submitted(&first, 1);
    assert_eq!(journaled(&first).len(), 1);
    // The resend, on another connection (the first was lost before its answer came).
    let again = round(&mut core, 1, vec![from_client(2, submit_as(3, 77))]);
    assert_eq!(submitted(&again, 2), answer);
    assert!(journaled(&again).is_empty(), "nothing new to journal");
    assert_eq!(core.tasks().status().jobs, 1);
    assert_eq!(core.tasks().status().tasks.queued, 3);
    // Another id is another job, whatever it holds.
    let other = round(&mut core, 2, vec![from_client(3, submit_as(3, 78))]);
    assert_ne!(submitted(&other, 3).0, answer.0);
    assert_eq!(core.tasks().status().jobs, 2);
}

/// The resend may come in the same round as the first (the client timed out and resent on a
/// new connection while the first waited on the disk): it too is answered only once durable.
#[test]
fn a_resend_in_the_same_round_is_answered_once_durable_with_the_same_job() {
    let mut core = Scheduler::new(config(true));
    let actions = round(
        &mut core,
        0,
        vec![
            from_client(1, submit_as(2, 5)),
            from_client(2, submit_as(2, 5)),
        ],
    );
    assert_eq!(submitted(&actions, 1), submitted(&actions, 2));
    assert_eq!(journaled(&actions).len(), 1);
    assert_eq!(core.tasks().status().jobs, 1);
}

#[test]
fn the_request_id_survives_a_replay_and_a_compaction() {
    let mut core = Scheduler::new(config(true));
    let mut records = Vec::new();
    let first = round(&mut core, 0, vec![from_client(1, submit_as(2, 9))]);
    let answer = submitted(&first, 1);
    records.extend(journaled(&first));
    let plain = round(&mut core, 1, vec![from_client(2, submit(1))]);
    records.extend(journaled(&plain));
    assert!(matches!(records[0], Record::SubmitOnce { request: 9, .. }));
    assert!(matches!(records[1], Record::Submit { .. }));

    let mut restarted = replayed(records);
    let again = round(&mut restarted, 20, vec![from_client(3, submit_as(2, 9))]);
    assert_eq!(submitted(&again, 3), answer);
    assert_eq!(restarted.tasks().status().jobs, 2);

    // A compacted journal keeps it too.
    let image = core.journal_image();
    assert!(
        image
            .iter()
            .any(|r| matches!(r, Record::SubmitOnce { request: 9, .. }))
    );
    let mut compacted = replayed(image);
    let again = round(&mut compacted, 20, vec![from_client(4, submit_as(2, 9))]);
    assert_eq!(submitted(&again, 4), answer);
    assert_eq!(compacted.tasks().status().jobs, 2);
}

/// A job keeps answering resends of its submission while it is held; once it is dropped the
/// id is forgotten with it (a resend that late makes a new job: a client resends within
/// seconds, a job is dropped only after it finished and was forgotten).
#[test]
fn a_resend_after_its_job_was_forgotten_and_dropped_makes_a_new_job() {
    let mut core = Scheduler::new(config(true));
    let actions = round(
        &mut core,
        0,
        vec![join(1, worker("w1", 2)), from_client(1, submit_as(1, 42))],
    );
    let answer = submitted(&actions, 1);
    let results = runs(&actions).into_iter().map(|t| (t, ok())).collect();
    round(
        &mut core,
        1,
        vec![
            Input::Finished { worker: 1, results },
            from_client(2, Request::Forget { job: answer.0 }),
        ],
    );
    assert_eq!(core.tasks().status().jobs, 0, "dropped once forgotten");
    let late = round(&mut core, 2, vec![from_client(3, submit_as(1, 42))]);
    assert_ne!(submitted(&late, 3).0, answer.0);
}
