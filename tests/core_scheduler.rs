//! The scheduler core through its one entry point, `handle(now, Input)`, with no network, no
//! journal file and no policy thread: the order of what it asks the shell to do, the checks it
//! makes of a policy's decisions, and a replay of the records it journaled.

use weir::core::record::Record;
use weir::core::scaling::{Decision, Tier};
use weir::core::scheduler::{Action, Config, Input, PolicyInfo, Scheduler};
use weir::core::tasks;
use weir::proto::{
    JobCounts, ManagerState, NewGroup, Outcome, Request, Response, TaskKind, TaskSpec, TaskState,
    ToManager, ToWorker, WorkerInfo,
};

fn config(journal: bool) -> Config {
    Config {
        tasks: tasks::Config::default(),
        manager_timeout_ms: 10_000,
        manager_forget_ms: 60_000,
        lease_ms: 10_000,
        tick_ms: 500,
        scaling_ms: Some(1_000),
        scale_down_delay_ms: 0,
        unschedulable_timeout_ms: None,
        policy: PolicyInfo {
            name: "test-policy".into(),
            ..PolicyInfo::default()
        },
        tiers: vec![Tier {
            priority: 0,
            members: vec!["m1".into()],
        }],
        journal,
        compact_min_bytes: 1 << 20,
    }
}

fn submit(count: u32) -> Request {
    Request::Submit {
        groups: vec![NewGroup {
            spec: TaskSpec {
                kind: TaskKind::Command {
                    argv: vec!["true".into()],
                    env: vec![],
                },
                capabilities: vec![],
                environments: vec![],
                priority: 0,
                timeout_ms: 0,
                retries: 1,
                input: vec![],
            },
            count,
            inputs: vec![],
        }],
        components: vec![],
    }
}

fn worker(name: &str, slots: u32) -> WorkerInfo {
    WorkerInfo {
        name: name.into(),
        slots,
        capabilities: vec![],
        worker_type: String::new(),
        manager: None,
        local_environments: vec![],
        running: vec![],
        instance: name.bytes().map(u64::from).sum(),
        ends_in_ms: None,
        finished: vec![],
    }
}

/// A manager's connection registers with its first heartbeat.
fn manager_joins(state: ManagerState) -> Input {
    Input::ManagerJoined {
        connection: 1_000,
        state,
        peer: "127.0.0.1:1".into(),
    }
}

fn manager(id: &str) -> ManagerState {
    ManagerState {
        id: id.into(),
        worker_type: "t".into(),
        max_task_concurrency: 4,
        worker_slots: 1,
        capabilities: vec![],
        workers: vec![],
        environments: vec![],
        fixed: None,
        exited: vec![],
        backend: String::new(),
        units: vec![],
        usable_ms: None,
    }
}

fn ok() -> Outcome {
    Outcome::Exited {
        code: Some(0),
        stdout: b"done".to_vec(),
        stderr: vec![],
    }
}

/// A worker registering on connection `connection`.
fn join(connection: u64, info: WorkerInfo) -> Input {
    Input::WorkerJoined { connection, info }
}

/// A client's request that brings no component.
fn from_client(client: u64, request: Request) -> Input {
    Input::Request {
        client,
        request,
        components: vec![],
    }
}

/// Feed inputs, end the batch, and return what the core asks for (the whole core sane after).
fn round(core: &mut Scheduler, now: u64, inputs: Vec<Input>) -> Vec<Action> {
    for input in inputs {
        core.handle(now, input);
    }
    core.handle(now, Input::EndOfBatch);
    if let Err(error) = core.sanity_check() {
        panic!("after a round at {now}: {error}");
    }
    core.take_actions()
}

fn position(actions: &[Action], what: impl Fn(&Action) -> bool) -> usize {
    actions
        .iter()
        .position(what)
        .unwrap_or_else(|| panic!("not found in {actions:#?}"))
}

fn runs(actions: &[Action]) -> Vec<u64> {
    let mut tasks = Vec::new();
    for action in actions {
        if let Action::ToWorker {
            message: ToWorker::Run(assignments),
            ..
        } = action
        {
            tasks.extend(assignments.iter().map(|a| a.task));
        }
    }
    tasks
}

fn replies(actions: &[Action], to: u64) -> Vec<(&Response, bool)> {
    let mut found = Vec::new();
    for action in actions {
        if let Action::Reply {
            client,
            response,
            last,
            ..
        } = action
            && *client == to
        {
            found.push((response, *last));
        }
    }
    found
}

fn journaled(actions: &[Action]) -> Vec<Record> {
    let mut records = Vec::new();
    for action in actions {
        if let Action::Journal { record, .. } = action {
            // Records are not Clone: round-trip them as the journal does.
            let bytes = postcard::to_stdvec(record).expect("encodes");
            records.push(postcard::from_bytes(&bytes).expect("decodes"));
        }
    }
    records
}

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
    assert!(error.contains("test-policy: nonsense decision"), "{error}");
    // A decision nobody asked for is refused too.
    core.handle(1_002, Input::Decided { result: Ok(vec![]) });
    assert_eq!(core.policy_errors(), 2);
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
    declaring.environments = vec![weir::proto::EnvironmentDef {
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
                verdicts: vec![("big".into(), weir::proto::EnvVerdict::NoMatch)],
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
        vec![("big".to_string(), weir::core::scaling::Verdict::NoMatch)],
        "not `unknown`: no worker is started to ask again"
    );
}

/// A worker whose stream ended has `STOP_GRACE_MS` to close as one stopping on purpose: then
/// its tasks run again at once without spending a retry; past it, it is lost (the shell is
/// told to close it) and its tasks wait out their fence. The core judges, on its own clock.
#[test]
fn a_worker_whose_stream_ended_is_stopped_if_it_closes_in_time_else_lost() {
    use weir::core::scheduler::STOP_GRACE_MS;
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
    too_many.local_environments = (0..=weir::core::scheduler::MAX_ENVIRONMENTS)
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
    use weir::proto::ErrorCode;
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
            verdicts: vec![("big".into(), weir::proto::EnvVerdict::Match)],
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

#[test]
fn the_journal_is_compacted_only_once_big_enough_and_as_it_was_at_that_point() {
    let mut core = Scheduler::new(config(true));
    let actions = round(
        &mut core,
        0,
        vec![join(1, worker("w1", 2)), from_client(1, submit(2))],
    );
    let results = runs(&actions).into_iter().map(|t| (t, ok())).collect();
    round(
        &mut core,
        1,
        vec![
            Input::Finished { worker: 1, results },
            from_client(2, Request::Forget { job: 1 }),
        ],
    );
    // Everything was forgotten, but the journal is small: not worth rewriting.
    core.handle(
        2,
        Input::Synced {
            journal_bytes: 4096,
        },
    );
    core.handle(500, Input::Timeout);
    let actions = core.take_actions();
    assert!(
        !actions.iter().any(|a| matches!(a, Action::Compact(_))),
        "{actions:#?}"
    );
    core.handle(
        501,
        Input::Synced {
            journal_bytes: 2 << 20,
        },
    );
    core.handle(1_000, Input::Timeout);
    let image = core
        .take_actions()
        .into_iter()
        .find_map(|a| match a {
            Action::Compact(records) => Some(records),
            _ => None,
        })
        .expect("compacted once big enough");
    assert!(matches!(
        image.first(),
        Some(Record::Base { first_job: 2, .. })
    ));
    assert!(matches!(image.last(), Some(Record::Compacted)));
}

/// At start the core decides: a journal holding forgotten jobs is compacted whatever its size
/// (into the state replayed), one without them is left as it is.
#[test]
fn a_journal_with_forgotten_jobs_is_compacted_at_start_whatever_its_size() {
    let mut core = Scheduler::new(config(true));
    let mut rounds = Vec::new();
    let actions = round(
        &mut core,
        0,
        vec![join(1, worker("w1", 2)), from_client(1, submit(2))],
    );
    let results = runs(&actions).into_iter().map(|t| (t, ok())).collect();
    rounds.push(actions);
    rounds.push(round(
        &mut core,
        1,
        vec![Input::Finished { worker: 1, results }],
    ));
    // A scheduler started from what the rounds so far journaled.
    let start = |rounds: &[Vec<Action>]| {
        let mut restarted = Scheduler::new(config(true));
        for record in rounds.iter().flat_map(|actions| journaled(actions)) {
            restarted.handle(10, Input::Replay(record));
        }
        restarted.handle(10, Input::Replayed);
        restarted.take_actions()
    };
    let kept = start(&rounds);
    assert!(kept.is_empty(), "nothing forgotten: {kept:#?}");
    rounds.push(round(
        &mut core,
        2,
        vec![from_client(2, Request::Forget { job: 1 })],
    ));
    match &start(&rounds)[..] {
        [Action::Compact(image)] => {
            assert!(matches!(
                image.first(),
                Some(Record::Base { first_job: 2, .. })
            ));
            assert!(matches!(image.last(), Some(Record::Compacted)));
        }
        other => panic!("compacted at start: {other:#?}"),
    }
}

/// An `env register --wait` whose environment is removed meanwhile is answered at once (no
/// worker would ever give a verdict on it), not left waiting.
#[test]
fn an_environment_wait_ends_when_its_environment_is_removed() {
    let mut core = Scheduler::new(config(false));
    let register = Input::Request {
        client: 1,
        request: Request::EnvRegister {
            name: "big".into(),
            component: vec![],
            config: vec![],
            wait: true,
        },
        components: vec![([3; 32], std::sync::Arc::from(&b"c"[..]))],
    };
    let actions = round(&mut core, 0, vec![join(1, worker("w1", 1)), register]);
    assert!(replies(&actions, 1).is_empty(), "waits for w1's verdict");
    let remove = from_client(2, Request::EnvRemove { name: "big".into() });
    let actions = round(&mut core, 1, vec![remove]);
    assert!(matches!(
        replies(&actions, 1)[..],
        [(
            Response::Error {
                code: weir::proto::ErrorCode::NotFound,
                ..
            },
            true
        )]
    ));
}

#[test]
fn an_environment_wait_ends_when_the_worker_it_waits_for_falls_silent() {
    let mut core = Scheduler::new(config(false));
    let actions = round(
        &mut core,
        0,
        vec![
            join(1, worker("w1", 1)),
            Input::Request {
                client: 1,
                request: Request::EnvRegister {
                    name: "big".into(),
                    component: vec![],
                    config: vec![],
                    wait: true,
                },
                components: vec![([3; 32], std::sync::Arc::from(&b"c"[..]))],
            },
        ],
    );
    assert!(replies(&actions, 1).is_empty());
    // No heartbeat past the timeout: lost, and the wait answers without it.
    core.handle(20_000, Input::Timeout);
    core.handle(20_000, Input::EndOfBatch);
    let actions = core.take_actions();
    assert!(matches!(
        replies(&actions, 1)[..],
        [(Response::Environments(_), true)]
    ));
}

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
            result: Err("bad row".into()),
        }],
    );
    assert!(journaled(&actions).is_empty());
    assert!(matches!(
        replies(&actions, 1)[..],
        [(Response::Error { .. }, true)]
    ));
    assert_eq!(core.status(1).policy_error, None);
    // It works: journaled, answered once durable, and shown.
    let tiers = vec![Tier {
        priority: 1,
        members: vec!["b".into()],
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
    use weir::proto::ErrorCode;
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
fn progress_goes_at_most_every_100_ms_and_the_end_at_once() {
    use weir::core::scheduler::PROGRESS_EVERY_MS;
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
    use weir::core::scheduler::PROGRESS_EVERY_MS;
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
                    message: ToWorker::Lease { seq },
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

#[test]
fn one_process_per_manager_id_a_second_is_refused_naming_the_first() {
    let mut core = Scheduler::new(config(false));
    let joined = |connection, peer: &str| Input::ManagerJoined {
        connection,
        state: manager("m1"),
        peer: peer.into(),
    };
    let actions = round(&mut core, 0, vec![joined(7, "10.0.0.1:4000")]);
    assert!(matches!(
        actions[0],
        Action::ManagerRegistered { connection: 7, .. }
    ));
    let actions = round(&mut core, 10, vec![joined(8, "10.0.0.2:4000")]);
    match &actions[..] {
        [
            Action::ManagerRefused {
                connection: 8,
                reason,
            },
            ..,
        ] => {
            assert!(
                reason.contains("`m1`") && reason.contains("10.0.0.1:4000"),
                "{reason}"
            );
        }
        other => panic!("expected a refusal first, got {other:?}"),
    }
    assert!(
        !actions
            .iter()
            .any(|a| matches!(a, Action::ManagerRegistered { .. })),
        "{actions:?}"
    );
    // The first's connection is gone (closed, or timed out): a restarted manager takes over.
    round(&mut core, 20, vec![Input::ManagerGone { id: "m1".into() }]);
    let actions = round(&mut core, 30, vec![joined(9, "10.0.0.2:4000")]);
    assert!(matches!(
        actions[0],
        Action::ManagerRegistered { connection: 9, .. }
    ));
}

/// The worker the actions hand tasks to.
fn ran_on(actions: &[Action]) -> u64 {
    actions
        .iter()
        .find_map(|a| match a {
            Action::ToWorker {
                worker,
                message: ToWorker::Run(_),
            } => Some(*worker),
            _ => None,
        })
        .expect("a task is handed to a worker")
}

/// A submission of one task with a timeout of `timeout_ms` (0: none) and no retry to spare.
fn submit_timed(timeout_ms: u64) -> Request {
    let Request::Submit {
        mut groups,
        components,
    } = submit(1)
    else {
        unreachable!("submit builds a submission")
    };
    groups[0].spec.timeout_ms = timeout_ms;
    groups[0].spec.retries = 0;
    Request::Submit { groups, components }
}

/// Item #31.3a: a Slurm manager whose workers have 30 min to run tasks (`usable_ms`) is no use
/// to a task of 1 h. The snapshot says so in the policy's own terms (a `walltime>=3600s`
/// environment on the demand, `no-match` from that manager, `match` from one without a
/// limit), so the waterfall asks tier 1 for nothing and spills the task to tier 2; `weir
/// explain` names the manager's usable time and the task's timeout.
#[test]
fn a_task_longer_than_a_managers_walltime_is_not_counted_for_it_and_spills_to_the_next_tier() {
    let mut config = config(false);
    config.tiers = vec![
        Tier {
            priority: 1,
            members: vec!["hpc".into()],
        },
        Tier {
            priority: 2,
            members: vec!["local".into()],
        },
    ];
    let mut core = Scheduler::new(config);
    let mut hpc = manager("hpc");
    hpc.usable_ms = Some(30 * 60_000);
    let local = manager("local");
    let mut joined = manager_joins(hpc);
    if let Input::ManagerJoined { connection, .. } = &mut joined {
        *connection = 2_000;
    }
    let mut actions = round(
        &mut core,
        0,
        vec![
            joined,
            manager_joins(local),
            from_client(1, submit_timed(3_600_000)),
            from_client(2, submit_timed(0)),
        ],
    );
    core.handle(1_000, Input::Timeout);
    actions.extend(core.take_actions());
    let snapshot = actions
        .into_iter()
        .find_map(|a| match a {
            Action::Decide(snapshot) => Some(snapshot),
            _ => None,
        })
        .expect("the policy is asked");
    let name = "walltime>=3600s";
    let timed: Vec<_> = snapshot
        .demand
        .iter()
        .filter(|d| d.environments.iter().any(|e| e == name))
        .collect();
    assert_eq!(timed.len(), 1, "{:#?}", snapshot.demand);
    assert_eq!(timed[0].queued, 1);
    let verdict = |id: &str| {
        let manager = snapshot.managers.iter().find(|m| m.id == id).expect(id);
        manager.verdict(name)
    };
    assert_eq!(verdict("hpc"), weir::core::scaling::Verdict::NoMatch);
    assert_eq!(verdict("local"), weir::core::scaling::Verdict::Match);

    // The waterfall: the task without a timeout fills tier 1; the hour-long one goes to tier 2.
    let policy =
        weir_waterfall::Policy::parse(weir_waterfall::Flavor::ManagerId, "1, hpc\n2, local\n")
            .expect("content parses");
    let decided: Vec<(String, u32)> = policy
        .decide(&snapshot)
        .into_iter()
        .map(|d| (d.manager_id, d.desired_workers))
        .collect();
    assert_eq!(decided, vec![("hpc".into(), 1), ("local".into(), 1)]);

    let explained = core.explain(1_000, 1).expect("task 1").join("\n");
    assert!(
        explained.contains(
            "manager hpc (t): cannot: no worker it can start will qualify: each has 1800 s to run \
             tasks (its walltime less --leave-before), less than the task's timeout of 3600 s"
        ),
        "{explained}"
    );
    assert!(
        explained.contains("manager local (t): could start workers for it"),
        "{explained}"
    );
    assert!(!explained.contains("manager hpc (t): could"), "{explained}");
    // The task without a timeout: hpc could start workers for it.
    let explained = core.explain(1_000, 2).expect("task 2").join("\n");
    assert!(
        explained.contains("manager hpc (t): could start workers for it"),
        "{explained}"
    );
}

/// Neither a manager nor a worker can bring in an environment name users cannot give (such as
/// the walltime names the scheduler makes): it is ignored, and no task may name it.
#[test]
fn a_reserved_environment_name_from_a_manager_or_worker_is_not_believed() {
    let mut core = Scheduler::new(config(false));
    let mut state = manager("m1");
    state.environments = vec![weir::proto::EnvironmentDef {
        name: "walltime>=60s".into(),
        component: [0; 32],
        config: vec![],
    }];
    let mut info = worker("w1", 1);
    info.local_environments = vec!["walltime>=60s".into()];
    round(&mut core, 0, vec![manager_joins(state), join(1, info)]);
    let verdict = Input::Verdicts {
        worker: 1,
        verdicts: vec![("walltime>=60s".into(), weir::proto::EnvVerdict::Match)],
    };
    round(&mut core, 1, vec![verdict]);
    assert!(
        core.environment_report(None).is_empty(),
        "{:?}",
        core.environment_report(None)
    );
    // So no task can name it.
    let mut request = submit_timed(0);
    if let Request::Submit { groups, .. } = &mut request {
        groups[0].spec.environments = vec!["walltime>=60s".into()];
    }
    let answer = round(&mut core, 2, vec![from_client(7, request)]);
    assert!(
        format!("{answer:?}").contains("unknown environment `walltime>=60s`"),
        "{answer:?}"
    );
}

/// Item #31.3b: a task without a timeout whose runs keep being cut short by the end of their
/// worker's allocation is requeued without an attempt spent `max_walltime_requeues` times,
/// then fails saying why; `weir explain` shows the count, and a restart (the journal replayed)
/// keeps it.
#[test]
fn a_task_cut_short_by_allocation_ends_fails_after_the_cap_and_the_count_survives_a_restart() {
    let mut config = config(true);
    config.tasks.max_walltime_requeues = 2;
    let mut core = Scheduler::new(config.clone());
    let mut records = journaled(&round(&mut core, 0, vec![from_client(1, submit_timed(0))]));
    // A worker whose allocation ends 10 s after it joins runs the task, then leaves then (a
    // planned stop, as at a walltime).
    let cut = |core: &mut Scheduler, at: u64, connection: u64| {
        let mut info = worker(&format!("w{connection}"), 1);
        info.ends_in_ms = Some(10_000);
        let actions = round(core, at, vec![join(connection, info)]);
        assert_eq!(runs(&actions), vec![1], "run {connection}");
        let mut records = journaled(&actions);
        let gone = Input::WorkerGone {
            worker: ran_on(&actions),
            reason: "it stopped".into(),
            planned: true,
        };
        records.extend(journaled(&round(core, at + 10_000, vec![gone])));
        records
    };
    records.extend(cut(&mut core, 1_000, 1));
    records.extend(cut(&mut core, 20_000, 2));
    assert_eq!(core.tasks().cuts(1), 2);
    let explained = core.explain(30_000, 1).expect("task 1").join("\n");
    assert!(explained.contains("is Queued, 0 attempt(s)"), "{explained}");
    assert!(
        explained.contains(
            "cut short 2 time(s) by the end of its worker's allocation (walltime; no attempt \
             spent); requeued at most 2 times (--max-walltime-requeues)"
        ),
        "{explained}"
    );
    // A worker stopped on purpose well before its allocation ends (a scale-down) cuts nothing.
    let mut info = worker("early", 1);
    info.ends_in_ms = Some(600_000);
    let actions = round(&mut core, 40_000, vec![join(9, info)]);
    assert_eq!(runs(&actions), vec![1]);
    records.extend(journaled(&actions));
    let gone = Input::WorkerGone {
        worker: ran_on(&actions),
        reason: "it stopped".into(),
        planned: true,
    };
    records.extend(journaled(&round(&mut core, 41_000, vec![gone])));
    assert_eq!(core.tasks().cuts(1), 2);
    // The compacted journal keeps the count too.
    assert!(
        core.journal_image()
            .iter()
            .any(|r| matches!(r, Record::Cut(cuts) if cuts == &[(1, 2)])),
        "{:?}",
        core.journal_image()
    );

    // Restarted from the journal: same count, and the third cut fails the task.
    let mut restarted = Scheduler::new(config);
    for record in records {
        restarted.handle(50_000, Input::Replay(record));
    }
    restarted.handle(50_000, Input::Replayed);
    assert_eq!(restarted.tasks().cuts(1), 2);
    cut(&mut restarted, 60_000, 3);
    let counts = restarted.tasks().status().tasks;
    assert_eq!((counts.queued, counts.failed), (0, 1));
    let explained = restarted.explain(80_000, 1).expect("task 1").join("\n");
    assert!(explained.contains("is Failed"), "{explained}");
    let answer = round(
        &mut restarted,
        80_000,
        vec![from_client(9, Request::Results { job: 1 })],
    );
    let text = format!("{answer:?}");
    assert!(
        text.contains("cut short by the end of its worker's allocation (walltime) 3 times; gave up after 2 walltime requeues"),
        "{text}"
    );
}

#[test]
fn a_waiting_client_is_told_once_when_nothing_can_run_its_task_and_never_while_verdicts_are_pending()
 {
    let mut core = Scheduler::new(config(false));
    let with = |capabilities: Vec<(String, u64)>, environments: Vec<String>| {
        let mut request = submit(1);
        if let Request::Submit { groups, .. } = &mut request {
            groups[0].spec.capabilities = capabilities;
            groups[0].spec.environments = environments;
        }
        request
    };
    // A worker without a gpu that evaluates `big` itself (no verdict yet), and a manager the
    // policy does not list (the tiers list m1 only).
    let mut evaluating = worker("w1", 1);
    evaluating.local_environments = vec!["big".into()];
    round(
        &mut core,
        0,
        vec![
            join(1, evaluating),
            manager_joins(manager("m2")),
            from_client(1, with(vec![("gpu".into(), 1)], vec![])),
            from_client(2, Request::Wait { job: 1 }),
            from_client(1, with(vec![], vec!["big".into()])),
            from_client(3, Request::Wait { job: 2 }),
        ],
    );
    let unrunnable = |actions: &[Action], client| -> Vec<(u64, String)> {
        replies(actions, client)
            .into_iter()
            .filter_map(|(response, last)| match response {
                Response::Unrunnable { task, reason } => {
                    assert!(!last, "the wait goes on");
                    Some((*task, reason.clone()))
                }
                _ => None,
            })
            .collect()
    };
    let mut told = Vec::new();
    let mut first_told_at = None;
    for now in (500..=10_000).step_by(500) {
        core.handle(now, Input::Timeout);
        let actions = core.take_actions();
        let to_2 = unrunnable(&actions, 2);
        if !to_2.is_empty() && first_told_at.is_none() {
            first_told_at = Some(now);
        }
        told.extend(to_2);
        // Task 2 waits for w1's verdict on `big`: not definite, never told.
        assert_eq!(unrunnable(&actions, 3), vec![], "at {now}");
    }
    // Found at the first tick (500 ms), told after the 2 s grace, once.
    assert_eq!(first_told_at, Some(2_500));
    assert_eq!(told.len(), 1, "{told:?}");
    let (task, reason) = &told[0];
    assert_eq!(*task, 1);
    assert!(
        reason.contains("1 live worker with gpu=0 (needs 1)"),
        "{reason}"
    );
    assert!(
        reason.contains("manager m2 (t): cannot: not listed in the scaling policy"),
        "{reason}"
    );
}

#[test]
fn an_empty_cluster_or_an_offline_manager_that_could_serve_is_not_nothing_can_run_it() {
    // No worker and no manager heard from: a cluster that is starting, not a verdict.
    let mut empty = Scheduler::new(config(false));
    round(
        &mut empty,
        0,
        vec![
            from_client(1, submit(1)),
            from_client(2, Request::Wait { job: 1 }),
        ],
    );
    // m1 (listed, its workers have gpu=9) joins and goes silent: offline, but what it would
    // say once back counts.
    let mut offline = Scheduler::new(config(false));
    let mut gpus = manager("m1");
    gpus.capabilities = vec![("gpu".into(), 9)];
    round(&mut offline, 0, vec![manager_joins(gpus)]);
    let mut needs_gpu = submit(1);
    if let Request::Submit { groups, .. } = &mut needs_gpu {
        groups[0].spec.capabilities = vec![("gpu".into(), 9)];
    }
    round(
        &mut offline,
        20_000,
        vec![
            from_client(1, needs_gpu),
            from_client(2, Request::Wait { job: 1 }),
        ],
    );
    for now in (500..=10_000).step_by(500) {
        for (core, at) in [(&mut empty, now), (&mut offline, 20_000 + now)] {
            core.handle(at, Input::Timeout);
            let actions = core.take_actions();
            assert!(
                !replies(&actions, 2)
                    .iter()
                    .any(|(r, _)| matches!(r, Response::Unrunnable { .. })),
                "at {at}: {actions:#?}"
            );
        }
    }
}
