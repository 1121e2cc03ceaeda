//! What the core journals and when it answers: records before replies, tasks before they are sent,
//! a policy's nonsense refused, a replay through `handle` that gives the same state.

use super::*;

#[test]
fn a_change_is_answered_after_its_record_and_tasks_are_journaled_before_they_are_sent() {
    let mut core = Scheduler::new(config(true));
    let actions = round(
        &mut core,
        0,
        vec![join(1, worker("w1", 2)), from_client(7, submit(3))],
    );
    let registered = position(&actions, |a| {
        matches!(a, Action::Registered { connection: 1, .. })
    });
    let first_frame = position(&actions, |a| matches!(a, Action::ToWorker { .. }));
    assert!(
        registered < first_frame,
        "the id is bound before frames go to it"
    );
    let submit_record = position(&actions, |a| {
        matches!(
            a,
            Action::Journal {
                record: Record::Submit { .. },
                ..
            }
        )
    });
    let answer = position(&actions, |a| {
        matches!(
            a,
            Action::Reply {
                client: 7,
                durable: true,
                last: true,
                response: Response::Submitted { tasks: 3, .. }
            }
        )
    });
    assert!(submit_record < answer);
    let started = position(&actions, |a| {
        matches!(
            a,
            Action::Journal {
                record: Record::Started(_),
                write_through: true
            }
        )
    });
    let run = position(&actions, |a| {
        matches!(
            a,
            Action::ToWorker {
                message: ToWorker::Run(_),
                ..
            }
        )
    });
    assert!(
        started < run,
        "a task is journaled as started before it is sent"
    );
    assert_eq!(runs(&actions).len(), 2, "two slots");
}

#[test]
fn without_a_journal_nothing_is_journaled_or_held() {
    let mut core = Scheduler::new(config(false));
    let actions = round(&mut core, 0, vec![from_client(1, submit(2))]);
    assert!(journaled(&actions).is_empty());
    assert!(
        actions
            .iter()
            .all(|a| !matches!(a, Action::Reply { durable: true, .. }))
    );
}

#[test]
fn the_core_refuses_a_policys_nonsense_whatever_the_policy() {
    let mut core = Scheduler::new(config(false));
    round(
        &mut core,
        0,
        vec![manager_joins(manager("m1")), from_client(1, submit(10))],
    );
    assert_eq!(
        core.poll_timeout(),
        0,
        "new demand nothing live can take: the policy is called at once"
    );
    core.handle(0, Input::Timeout);
    let asked = core.take_actions();
    assert!(
        asked.iter().any(|a| matches!(a, Action::Decide(_))),
        "{asked:#?}"
    );
    // Above the manager's cap (4 tasks of 1 slot): refused, counted, nothing sent.
    let too_many = Decision {
        manager_id: "m1".into(),
        desired_workers: 9,
        stop: vec![],
        reason: "greedy".into(),
        ..Default::default()
    };
    let actions = round(
        &mut core,
        1_001,
        vec![Input::Decided {
            result: Ok(vec![too_many]),
        }],
    );
    assert!(
        actions
            .iter()
            .all(|a| !matches!(a, Action::ToManager { .. }))
    );
    assert_eq!(core.policy_errors(), 1);
    let error = core.status(1_001).policy_error.expect("an error is shown");
    assert_eq!(
        error,
        "test-policy: nonsense decision: asks manager `m1` for 9 workers; its max task \
         concurrency 4 allows 4"
    );
    assert_eq!(core.policy_report().error, Some(error));
    // A decision nobody asked for is refused too.
    core.handle(1_002, Input::Decided { result: Ok(vec![]) });
    assert_eq!(core.policy_errors(), 2);
    let error = core.status(1_002).policy_error;
    assert_eq!(error.as_deref(), Some("a decision nobody asked for"));
    // The next snapshot, a sensible answer: sent, and the error cleared.
    core.handle(2_000, Input::Timeout);
    assert!(
        core.take_actions()
            .iter()
            .any(|a| matches!(a, Action::Decide(_)))
    );
    let fine = Decision {
        manager_id: "m1".into(),
        desired_workers: 4,
        stop: vec![],
        reason: "demand".into(),
        ..Default::default()
    };
    let actions = round(
        &mut core,
        2_001,
        vec![Input::Decided {
            result: Ok(vec![fine]),
        }],
    );
    assert!(actions.iter().any(|a| matches!(
        a,
        Action::ToManager {
            message: ToManager::Desired { desired: 4, .. },
            ..
        }
    )));
    assert_eq!(core.status(2_001).policy_error, None);
}

#[test]
fn replaying_what_it_journaled_through_handle_gives_the_same_state() {
    let mut core = Scheduler::new(config(true));
    let mut records = Vec::new();
    let actions = round(
        &mut core,
        0,
        vec![join(1, worker("w1", 4)), from_client(1, submit(6))],
    );
    records.extend(journaled(&actions));
    let sent = runs(&actions);
    assert_eq!(sent.len(), 4);
    let results = sent[..3].iter().map(|&t| (t, ok())).collect();
    let actions = round(&mut core, 10, vec![Input::Finished { worker: 1, results }]);
    records.extend(journaled(&actions));

    let mut replayed = Scheduler::new(config(true));
    for record in records {
        replayed.handle(20, Input::Replay(record));
    }
    replayed.handle(20, Input::Replayed);
    assert!(
        replayed.take_actions().is_empty(),
        "a replay sends and journals nothing"
    );
    let (before, after) = (core.tasks().status(), replayed.tasks().status());
    assert_eq!(after.jobs, before.jobs);
    // The task running at the crash and the queued ones are unfinished; three succeeded.
    assert_eq!(after.tasks.succeeded, 3);
    assert_eq!(after.tasks.total(), 6);
    let answer = round(
        &mut replayed,
        30,
        vec![from_client(9, Request::Results { job: 1 })],
    );
    let got = replies(&answer, 9);
    let Some((Response::Results(results), false)) = got.first() else {
        panic!("{got:#?}");
    };
    assert_eq!(results.len(), 3);
    assert!(matches!(
        got.last(),
        Some((Response::ResultsEnd { count: 3 }, true))
    ));
}

#[test]
fn a_client_gone_is_not_answered_any_more() {
    let mut core = Scheduler::new(config(false));
    let actions = round(
        &mut core,
        0,
        vec![
            join(1, worker("w1", 1)),
            from_client(1, submit(1)),
            from_client(2, Request::Wait { job: 1 }),
            from_client(3, Request::Wait { job: 1 }),
        ],
    );
    assert!(matches!(
        replies(&actions, 2)[..],
        [(Response::Progress(_), false)]
    ));
    let task = runs(&actions)[0];
    let actions = round(
        &mut core,
        5,
        vec![
            Input::ClientGone { client: 2 },
            Input::Finished {
                worker: 1,
                results: vec![(task, ok())],
            },
        ],
    );
    assert!(replies(&actions, 2).is_empty());
    let done = JobCounts {
        succeeded: 1,
        ..JobCounts::default()
    };
    assert_eq!(replies(&actions, 3), vec![(&Response::Done(done), true)]);
}

#[test]
fn what_a_managers_worker_answered_outlives_it_without_a_heartbeat_in_between() {
    let mut core = Scheduler::new(config(false));
    let mut declaring = manager("m1");
    declaring.environments = vec![weir_proto::EnvironmentDef {
        name: "big".into(),
        component: [7; 32],
        config: vec![],
    }];
    let mut info = worker("m1-1", 1);
    info.manager = Some("m1".into());
    info.local_environments = vec!["big".into()];
    let mut wanting_big = submit(2);
    if let Request::Submit { groups, .. } = &mut wanting_big {
        groups[0].spec.environments = vec!["big".into()];
    }
    round(
        &mut core,
        0,
        vec![
            manager_joins(declaring),
            Input::WorkerJoined {
                connection: 1,
                info,
            },
            from_client(1, wanting_big),
            Input::Verdicts {
                worker: 1,
                verdicts: vec![("big".into(), weir_proto::EnvVerdict::NoMatch)],
            },
            // Stopped before its manager's next heartbeat could list it with its answer.
            Input::WorkerGone {
                worker: 1,
                reason: "it stopped".into(),
                planned: true,
            },
        ],
    );
    core.handle(1_000, Input::Timeout);
    let snapshot = core
        .take_actions()
        .into_iter()
        .find_map(|a| match a {
            Action::Decide(snapshot) => Some(snapshot),
            _ => None,
        })
        .expect("a snapshot for the policy");
    assert_eq!(
        snapshot.managers[0].environments,
        vec![("big".to_string(), crate::scaling::Verdict::NoMatch)],
        "not `unknown`: no worker is started to ask again"
    );
}
