//! Connections the core judges: streams that end, worker admission, manager links, refusal codes,
//! environments registered again.

use super::*;

/// A worker whose stream ended has `STOP_GRACE_MS` to close as one stopping on purpose: then
/// its tasks run again at once without spending a retry; past it, it is lost (the shell is
/// told to close it) and its tasks wait out their fence. The core judges, on its own clock.
#[test]
fn a_worker_whose_stream_ended_is_stopped_if_it_closes_in_time_else_lost() {
    use crate::scheduler::STOP_GRACE_MS;
    let mut cfg = config(false);
    cfg.tasks.fence_ms = 60_000;
    (cfg.tick_ms, cfg.scaling_ms) = (10_000, None);
    let start = |cfg: &Config| {
        let mut core = Scheduler::new(cfg.clone());
        let actions = round(
            &mut core,
            0,
            vec![join(1, worker("w1", 1)), from_client(1, submit(1))],
        );
        assert_eq!(runs(&actions).len(), 1);
        core.handle(
            100,
            Input::WorkerEnding {
                worker: 1,
                reason: "the stream ended".into(),
            },
        );
        assert_eq!(core.poll_timeout(), 100 + STOP_GRACE_MS);
        core
    };
    // It closes in time, as stopping: its task runs again at once, on the next worker.
    let mut core = start(&cfg);
    core.handle(100 + STOP_GRACE_MS - 1, Input::Timeout);
    assert_eq!(core.tasks().worker_ids(), vec![1], "still within its grace");
    let at = 100 + STOP_GRACE_MS - 1;
    let stopped = Input::WorkerGone {
        worker: 1,
        reason: "it stopped".into(),
        planned: true,
    };
    round(&mut core, at, vec![stopped]);
    assert!(core.tasks().worker_ids().is_empty());
    let actions = round(&mut core, at, vec![join(2, worker("w2", 1))]);
    assert_eq!(runs(&actions).len(), 1, "requeued at once");
    // It does not: lost at the end of the grace (the shell closes it), its task fenced.
    let mut core = start(&cfg);
    core.handle(100 + STOP_GRACE_MS, Input::Timeout);
    let actions = round(&mut core, 100 + STOP_GRACE_MS, vec![]);
    assert!(core.tasks().worker_ids().is_empty(), "lost");
    assert!(
        actions
            .iter()
            .any(|a| matches!(a, Action::CloseWorker { worker: 1 })),
        "{actions:#?}"
    );
    // A close that comes later changes nothing.
    let late = Input::WorkerGone {
        worker: 1,
        reason: "it stopped".into(),
        planned: true,
    };
    round(&mut core, 100 + STOP_GRACE_MS + 500, vec![late]);
    let actions = round(&mut core, 3_000, vec![join(2, worker("w2", 1))]);
    assert!(runs(&actions).is_empty(), "fenced, not run again yet");
}

/// Admission is the core's: a worker with no slot, or more environments of its own than the
/// scheduler keeps, is refused with why, and nothing is kept of it.
#[test]
fn a_worker_with_no_slot_or_too_many_environments_is_refused() {
    let mut core = Scheduler::new(config(false));
    let mut too_many = worker("w2", 1);
    too_many.local_environments = (0..=crate::scheduler::MAX_ENVIRONMENTS)
        .map(|i| format!("e{i}"))
        .collect();
    let actions = round(
        &mut core,
        0,
        vec![join(1, worker("w1", 0)), join(2, too_many)],
    );
    let refused: Vec<u64> = actions
        .iter()
        .filter_map(|a| match a {
            Action::Refused { connection, reason } if reason.contains("at least one slot") => {
                Some(*connection)
            }
            _ => None,
        })
        .collect();
    assert_eq!(refused, vec![1, 2], "{actions:#?}");
    assert!(core.tasks().worker_ids().is_empty());
    assert!(
        core.environment_report(None).is_empty(),
        "nothing kept of them"
    );
}

/// Manager connections are the core's to end: a broken connection or a goodbye closes the
/// manager's link once (the shell keeps no judgement of its own), a second connection of the id
/// is refused while one is open and let in once it is closed.
#[test]
fn the_core_closes_a_managers_link_once_when_it_breaks_or_says_goodbye() {
    let closes = |actions: &[Action]| {
        actions
            .iter()
            .filter(|a| matches!(a, Action::CloseManager { manager } if manager == "m1"))
            .count()
    };
    let mut core = Scheduler::new(config(false));
    round(&mut core, 0, vec![manager_joins(manager("m1"))]);
    let refused = round(&mut core, 1, vec![manager_joins(manager("m1"))]);
    assert!(
        refused
            .iter()
            .any(|a| matches!(a, Action::ManagerRefused { .. }))
    );
    let gone = || Input::ManagerGone { id: "m1".into() };
    assert_eq!(closes(&round(&mut core, 2, vec![gone()])), 1);
    assert_eq!(closes(&round(&mut core, 3, vec![gone()])), 0, "once");
    let back = round(&mut core, 4, vec![manager_joins(manager("m1"))]);
    assert!(
        back.iter()
            .any(|a| matches!(a, Action::ManagerRegistered { .. }))
    );
    let goodbye = Input::ManagerGoodbye { id: "m1".into() };
    assert_eq!(closes(&round(&mut core, 5, vec![goodbye])), 1);
    assert!(core.status(5).managers.is_empty(), "gone with its goodbye");
}

#[test]
fn refusals_carry_a_code_to_act_on() {
    use weir_proto::ErrorCode;
    let mut core = Scheduler::new(config(false));
    let ask = |core: &mut Scheduler, client, request| {
        let actions = round(
            core,
            0,
            vec![Input::Request {
                client,
                request,
                components: vec![],
            }],
        );
        match replies(&actions, client)[..] {
            [(Response::Error { code, .. }, true)] => *code,
            ref other => panic!("{other:#?}"),
        }
    };
    assert_eq!(
        ask(&mut core, 1, Request::Wait { job: 9 }),
        ErrorCode::NotFound
    );
    assert_eq!(ask(&mut core, 2, submit(0)), ErrorCode::Invalid);
    assert_eq!(
        ask(&mut core, 3, Request::Explain { task: 4 }),
        ErrorCode::NotFound
    );
    assert_eq!(
        ask(&mut core, 4, Request::EnvRemove { name: "x".into() }),
        ErrorCode::NotFound
    );
    core.handle(0, from_client(5, submit(1)));
    assert_eq!(
        ask(&mut core, 6, Request::Forget { job: 1 }),
        ErrorCode::NotFinished
    );
}

#[test]
fn registering_the_same_environment_again_with_wait_is_answered() {
    let mut core = Scheduler::new(config(false));
    let register = || Request::EnvRegister {
        name: "big".into(),
        component: vec![],
        config: vec![("threshold".into(), "1GiB".into())],
        wait: true,
    };
    let component: std::sync::Arc<[u8]> = std::sync::Arc::from(&b"condition"[..]);
    let actions = round(
        &mut core,
        0,
        vec![
            join(1, worker("w1", 1)),
            Input::Request {
                client: 1,
                request: register(),
                components: vec![([3; 32], component.clone())],
            },
        ],
    );
    assert!(
        replies(&actions, 1).is_empty(),
        "waits for the worker's verdict"
    );
    let actions = round(
        &mut core,
        5,
        vec![Input::Verdicts {
            worker: 1,
            verdicts: vec![("big".into(), weir_proto::EnvVerdict::Match)],
        }],
    );
    assert!(matches!(
        replies(&actions, 1)[..],
        [(Response::Environments(_), true)]
    ));
    // The same definition again: nothing to evaluate anew, so answered at once.
    let actions = round(
        &mut core,
        10,
        vec![Input::Request {
            client: 2,
            request: register(),
            components: vec![([3; 32], component)],
        }],
    );
    let got = replies(&actions, 2);
    let [(Response::Environments(report), true)] = got[..] else {
        panic!("{got:#?}");
    };
    assert_eq!(report[0].matching, vec!["w1".to_string()]);
}
