//! One process per manager id, and walltimes (usable time, cut-short runs).

use super::*;

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
    let first = assigned(actions).first().map(|(worker, _)| *worker);
    first.expect("a task is handed to a worker")
}

/// A submission of one task with a timeout of `timeout_ms` (0: none) and no retry to spare.
fn submit_timed(timeout_ms: u64) -> Request {
    let Request::Submit {
        mut groups,
        components,
        request,
    } = submit(1)
    else {
        unreachable!("submit builds a submission")
    };
    groups[0].spec.timeout_ms = timeout_ms;
    groups[0].spec.retries = 0;
    Request::Submit {
        groups,
        components,
        request,
    }
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
            ..Default::default()
        },
        Tier {
            priority: 2,
            members: vec!["local".into()],
            ..Default::default()
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
    assert_eq!(verdict("hpc"), crate::scaling::Verdict::NoMatch);
    assert_eq!(verdict("local"), crate::scaling::Verdict::Match);

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
    state.environments = vec![weir_proto::EnvironmentDef {
        name: "walltime>=60s".into(),
        component: [0; 32],
        config: vec![],
    }];
    let mut info = worker("w1", 1);
    info.local_environments = vec!["walltime>=60s".into()];
    round(&mut core, 0, vec![manager_joins(state), join(1, info)]);
    let verdict = Input::Verdicts {
        worker: 1,
        verdicts: vec![("walltime>=60s".into(), weir_proto::EnvVerdict::Match)],
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
