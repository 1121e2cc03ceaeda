//! The scaling loop: policies set while running, one change at a time, early and repeated calls,
//! drained workers named until gone, idle workers of a gone manager told to leave.

use super::*;

#[test]
fn a_policy_set_while_running_is_journaled_and_restored() {
    let mut core = Scheduler::new(config(true));
    let bytes: std::sync::Arc<[u8]> = std::sync::Arc::from(&b"policy component"[..]);
    let set = |client| Input::Request {
        client,
        request: Request::PolicySet {
            name: "mine".into(),
            component: vec![],
            content: "1, b\n".into(),
        },
        components: vec![([5; 32], bytes.clone())],
    };
    let actions = round(&mut core, 0, vec![set(1)]);
    let Some(Action::SwapPolicy {
        client: Some(1),
        policy,
        ..
    }) = actions
        .into_iter()
        .find(|a| matches!(a, Action::SwapPolicy { .. }))
    else {
        panic!("the shell is asked to try the new policy");
    };
    // It failed: refused, nothing journaled, the old one stays.
    let actions = round(
        &mut core,
        1,
        vec![Input::PolicySwapped {
            client: Some(1),
            policy: policy.clone(),
            result: Err(PolicyFailure::Refused {
                policy: "mine".into(),
                call: "create",
                message: "bad row".into(),
            }),
        }],
    );
    assert!(journaled(&actions).is_empty());
    let [(Response::Error { message, .. }, true)] = &replies(&actions, 1)[..] else {
        panic!("one final error reply: {actions:?}");
    };
    // The policy's own words, as the plugin host words them.
    assert_eq!(
        message,
        "the policy was not changed: mine: create failed: bad row"
    );
    assert_eq!(core.status(1).policy_error, None);
    // It works: journaled, answered once durable, and shown.
    let tiers = vec![Tier {
        priority: 1,
        members: vec!["b".into()],
        ..Default::default()
    }];
    let actions = round(
        &mut core,
        2,
        vec![Input::PolicySwapped {
            client: Some(2),
            policy,
            result: Ok(tiers),
        }],
    );
    let records = journaled(&actions);
    assert!(matches!(&records[..], [Record::PolicySet { name, .. }] if name == "mine"));
    let answered = replies(&actions, 2);
    let [(Response::Policy(report), true)] = answered[..] else {
        panic!("{answered:#?}");
    };
    assert_eq!(report.content, "1, b\n");
    assert_eq!(report.tiers, vec![(1, vec!["b".to_string()])]);

    // A restart reads it back and asks the shell to create it again.
    let mut restarted = Scheduler::new(config(true));
    for record in records {
        restarted.handle(10, Input::Replay(record));
    }
    restarted.handle(10, Input::Replayed);
    let Some(Action::SwapPolicy {
        client: None,
        policy,
        snapshot: None,
    }) = restarted.restored_policy()
    else {
        panic!("the journal's policy is restored");
    };
    assert_eq!(policy.content, "1, b\n");
    assert!(
        restarted
            .journal_image()
            .iter()
            .any(|r| matches!(r, Record::PolicySet { .. })),
        "compaction keeps it"
    );
    // While it is tried, a user sets another: that one is adopted, and the journal's, ready
    // after it, is not (nor kept by a compaction).
    let adopted = |actions: &[Action]| {
        actions
            .iter()
            .filter_map(|a| match a {
                Action::AdoptPolicy { client } => Some(*client),
                _ => None,
            })
            .collect::<Vec<_>>()
    };
    let mut newer = policy.clone();
    newer.content = "1, c\n".into();
    let tiers = |member: &str| {
        vec![Tier {
            priority: 1,
            members: vec![member.into()],
            ..Default::default()
        }]
    };
    let actions = round(
        &mut restarted,
        20,
        vec![Input::PolicySwapped {
            client: Some(7),
            policy: newer,
            result: Ok(tiers("c")),
        }],
    );
    assert_eq!(adopted(&actions), vec![Some(7)]);
    let actions = round(
        &mut restarted,
        21,
        vec![Input::PolicySwapped {
            client: None,
            policy,
            result: Ok(tiers("b")),
        }],
    );
    assert_eq!(adopted(&actions), vec![], "superseded: not adopted");
    assert_eq!(restarted.policy_report().content, "1, c\n");
    let image = restarted.journal_image();
    assert!(
        image
            .iter()
            .any(|r| matches!(r, Record::PolicySet { content, .. } if content == "1, c\n"))
            && !image
                .iter()
                .any(|r| matches!(r, Record::PolicySet { content, .. } if content == "1, b\n")),
        "compaction keeps the user's"
    );
}

#[test]
fn one_policy_change_is_tried_at_a_time_and_content_is_bounded() {
    use weir_proto::ErrorCode;
    let mut core = Scheduler::new(config(true));
    let bytes: std::sync::Arc<[u8]> = std::sync::Arc::from(&b"policy"[..]);
    let set = |client, content: String| Input::Request {
        client,
        request: Request::PolicySet {
            name: "mine".into(),
            component: vec![],
            content,
        },
        components: vec![([5; 32], bytes.clone())],
    };
    let first = round(&mut core, 0, vec![set(1, "1, b\n".into())]);
    assert!(first.iter().any(|a| matches!(a, Action::SwapPolicy { .. })));
    // While it is tried, another is refused (a client looping `policy set` cannot queue work).
    let second = round(&mut core, 1, vec![set(2, "1, c\n".into())]);
    assert!(
        !second
            .iter()
            .any(|a| matches!(a, Action::SwapPolicy { .. }))
    );
    assert!(matches!(
        replies(&second, 2)[..],
        [(
            Response::Error {
                code: ErrorCode::Limit,
                ..
            },
            true
        )]
    ));
    let huge = "1, b\n".repeat(300_000);
    let refused = round(&mut core, 2, vec![set(3, huge)]);
    let got = replies(&refused, 3);
    let [
        (
            Response::Error {
                code: ErrorCode::Limit,
                message,
            },
            true,
        ),
    ] = got[..]
    else {
        panic!("{got:#?}");
    };
    assert!(message.contains("bytes"), "{message}");
}

fn decide(core: &mut Scheduler, now: u64, desired_workers: u32) -> Vec<Action> {
    let decision = Decision {
        manager_id: "m1".into(),
        desired_workers,
        stop: vec![],
        reason: "test".into(),
        ..Default::default()
    };
    round(
        core,
        now,
        vec![Input::Decided {
            result: Ok(vec![decision]),
        }],
    )
}

/// A core with manager m1 and its worker 1, `m1-7-1` (a unit the manager started elsewhere).
fn with_unit_worker() -> Scheduler {
    let mut core = Scheduler::new(config(false));
    let mut info = worker("m1-7-1", 1);
    info.manager = Some("m1".into());
    let mut state = manager("m1");
    state.workers = vec!["m1-7-1".into()];
    round(&mut core, 0, vec![manager_joins(state), join(1, info)]);
    core
}

fn asks_policy(actions: &[Action]) -> bool {
    actions.iter().any(|a| matches!(a, Action::Decide(_)))
}

#[test]
fn new_demand_nothing_live_can_take_calls_the_policy_early_at_most_ten_times_an_interval() {
    let mut core = Scheduler::new(config(false));
    let heartbeat = manager_joins(manager("m1"));
    round(&mut core, 0, vec![heartbeat]);
    assert_eq!(
        core.poll_timeout(),
        500,
        "nothing queued: the tick, then the interval"
    );
    core.handle(500, Input::Timeout);
    core.handle(1_000, Input::Timeout);
    assert!(asks_policy(&core.take_actions()));
    decide(&mut core, 1_001, 0);
    assert_eq!(core.poll_timeout(), 1_500);

    // A burst at 1,050: called a tenth of the interval after the last call, not at 2,000.
    round(&mut core, 1_050, vec![from_client(1, submit(10))]);
    assert_eq!(core.poll_timeout(), 1_100);
    core.handle(1_100, Input::Timeout);
    assert!(asks_policy(&core.take_actions()));
    decide(&mut core, 1_101, 4);
    // The same demand again is nothing new: the next call is a whole interval on.
    round(&mut core, 1_150, vec![]);
    assert_eq!(core.poll_timeout(), 1_500, "the tick; the policy at 2,100");
    core.handle(1_500, Input::Timeout);
    assert!(!asks_policy(&core.take_actions()));
    assert_eq!(core.poll_timeout(), 2_000);
    // More tasks on top of it: early again.
    round(&mut core, 1_600, vec![from_client(1, submit(5))]);
    assert_eq!(core.poll_timeout(), 1_600);
    core.handle(1_600, Input::Timeout);
    assert!(asks_policy(&core.take_actions()));
}

#[test]
fn a_policy_still_deciding_is_asked_again_soon_not_a_whole_interval_on() {
    let mut core = Scheduler::new(config(false));
    let heartbeat = manager_joins(manager("m1"));
    round(&mut core, 0, vec![heartbeat, from_client(1, submit(3))]);
    core.handle(0, Input::Timeout);
    assert!(asks_policy(&core.take_actions()));
    // Busy through its interval: asked again a tenth of one after it answers, at the latest.
    core.handle(1_000, Input::Timeout);
    assert!(!asks_policy(&core.take_actions()));
    assert_eq!(core.poll_timeout(), 1_100);
    decide(&mut core, 1_050, 3);
    core.handle(1_100, Input::Timeout);
    assert!(asks_policy(&core.take_actions()));
}

#[test]
fn a_drained_worker_is_named_in_every_decision_until_it_is_gone() {
    let mut core = with_unit_worker();
    let worker_id = 1;
    let stop_named = |actions: &[Action]| -> Vec<String> {
        actions
            .iter()
            .find_map(|a| match a {
                Action::ToManager {
                    message: ToManager::Desired { stop, .. },
                    ..
                } => Some(stop.clone()),
                _ => None,
            })
            .unwrap_or_else(|| panic!("no decision sent: {actions:#?}"))
    };
    core.handle(1_000, Input::Timeout);
    core.take_actions();
    let drain = Decision {
        manager_id: "m1".into(),
        desired_workers: 0,
        stop: vec![worker_id],
        reason: "idle".into(),
        ..Default::default()
    };
    let first = round(
        &mut core,
        1_001,
        vec![Input::Decided {
            result: Ok(vec![drain]),
        }],
    );
    assert_eq!(stop_named(&first), vec!["m1-7-1".to_string()]);
    // The manager missed it (it restarted, or its engine's cancel failed): the next decision,
    // which does not name the worker (the policy no longer sees it), names it again.
    core.handle(2_000, Input::Timeout);
    core.take_actions();
    let next = decide(&mut core, 2_001, 0);
    assert_eq!(stop_named(&next), vec!["m1-7-1".to_string()]);
}

/// A manager is told its pace when it joins (half the timeout that takes it offline), and
/// a decision is sent only when it differs from the last one sent on its connection (or names
/// workers to stop, or is 30 s old); one that rejoins is sent the decision again.
#[test]
fn a_manager_is_told_its_pace_and_sent_a_decision_only_when_it_changes() {
    let mut core = Scheduler::new(config(false));
    let joined = round(&mut core, 0, vec![manager_joins(manager("m1"))]);
    assert!(
        joined.iter().any(|a| matches!(
            a,
            Action::ToManager { manager, message: ToManager::Pace { beat_ms: 5_000 } } if manager == "m1"
        )),
        "{joined:#?}"
    );
    let sent = |actions: &[Action]| {
        actions
            .iter()
            .filter(|a| {
                matches!(
                    a,
                    Action::ToManager {
                        message: ToManager::Desired { .. },
                        ..
                    }
                )
            })
            .count()
    };
    // The policy's next call (whenever the core asks for it), answered with `desired`; the
    // manager reports meanwhile, so it stays online.
    let step = |core: &mut Scheduler, now: &mut u64, desired: u32| {
        let state = manager("m1");
        round(core, *now, vec![Input::ManagerHeartbeat { state }]);
        loop {
            *now = core.poll_timeout().max(*now);
            core.handle(*now, Input::Timeout);
            if asks_policy(&core.take_actions()) {
                break;
            }
        }
        *now += 1;
        sent(&decide(core, *now, desired))
    };
    let mut now = 1_000;
    assert_eq!(step(&mut core, &mut now, 2), 1, "the first");
    assert_eq!(step(&mut core, &mut now, 2), 0, "the same again");
    assert_eq!(step(&mut core, &mut now, 3), 1, "a change");
    let changed = now;
    while now < changed + 29_000 {
        assert_eq!(step(&mut core, &mut now, 3), 0, "at {now}");
    }
    let resent = loop {
        if step(&mut core, &mut now, 3) == 1 {
            break now;
        }
        assert!(now < changed + 32_000, "never sent again");
    };
    assert!(
        (changed + 30_000..changed + 31_500).contains(&resent),
        "sent again 30 s after it was sent: {resent} after {changed}"
    );
    // Reconnected: sent again, whatever was sent before.
    round(&mut core, now, vec![Input::ManagerGone { id: "m1".into() }]);
    round(&mut core, now, vec![manager_joins(manager("m1"))]);
    assert_eq!(step(&mut core, &mut now, 3), 1, "after a rejoin");
}

#[test]
fn the_idle_workers_of_a_manager_gone_for_a_minute_are_told_to_leave() {
    let mut core = with_unit_worker();
    core.take_actions();
    let leave = |actions: &[Action]| {
        actions.iter().any(|a| {
            matches!(
                a,
                Action::ToWorker {
                    worker: 1,
                    message: ToWorker::Leave { .. }
                }
            )
        })
    };
    // The manager falls silent (kill -9); its worker, a unit elsewhere, stays in touch.
    let mut told = Vec::new();
    for now in (5_000..=70_000).step_by(5_000) {
        core.handle(
            now,
            Input::Heartbeat {
                worker: 1,
                renew: None,
            },
        );
        core.handle(now, Input::Timeout);
        if leave(&core.take_actions()) {
            told.push(now);
        }
    }
    assert_eq!(
        told,
        vec![65_000],
        "once, after a minute without its manager"
    );
}

#[test]
fn a_managers_labels_reach_the_snapshot_and_bad_ones_are_dropped() {
    let mut core = Scheduler::new(config(false));
    let mut state = manager("m1");
    state.labels = vec![
        ("cost".into(), "3".into()),
        ("bad key".into(), "x".into()),
        ("zone".into(), "a\u{202e}b".into()),
    ];
    state
        .labels
        .extend((0..40).map(|i| (format!("k{i}"), "v".to_string())));
    let joined = Input::ManagerJoined {
        connection: 7,
        state,
        peer: "10.0.0.1:1".into(),
    };
    round(&mut core, 0, vec![joined]);
    let snapshot = core.scaling_snapshot(10);
    let labels = &snapshot.managers[0].labels;
    assert_eq!(labels.len(), weir_proto::MAX_LABELS, "{labels:?}");
    assert_eq!(labels[0], ("cost".to_string(), "3".to_string()));
    assert_eq!(labels[1], ("k0".to_string(), "v".to_string()));
    assert!(
        labels.iter().all(|(k, _)| k != "bad key" && k != "zone"),
        "{labels:?}"
    );
}
