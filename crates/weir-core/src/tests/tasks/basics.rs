//! Placement, capabilities, priorities, lost workers, explain, cancels, unschedulable timeouts,
//! components released, forgotten jobs replayed, bad submissions.

use super::*;

#[test]
fn a_task_that_cannot_be_placed_does_not_block_the_others() {
    let mut core = Tasks::new(Config::default());
    core.submit(vec![NewGroup {
        spec: spec(&[("gpu", 1)], 10, 3),
        count: 1,
        inputs: vec![],
    }])
    .unwrap();
    core.submit(vec![group(5, &[])]).unwrap();
    let w = core
        .worker_joined(0, worker(2, &[("cpu", 4)]))
        .expect("joins")
        .0;
    core.schedule(0);
    assert_eq!(dispatched(&core.take_effects())[&w], vec![2, 3]);
    // Each finish frees a slot for the next CPU task; the gpu task (1) keeps waiting.
    for task in 2..=6 {
        assert!(core.finished(1, w, task, ok()));
        core.schedule(0);
        core.sanity_check().unwrap();
    }
    assert_eq!(core.job_counts(1).unwrap().queued, 1);
    assert_eq!(core.job_counts(2).unwrap().succeeded, 5);
    // A gpu worker arrives: the gpu task runs there.
    let g = core
        .worker_joined(2, worker(1, &[("gpu", 1)]))
        .expect("joins")
        .0;
    core.schedule(0);
    assert_eq!(dispatched(&core.take_effects())[&g], vec![1]);
}

#[test]
fn capability_amounts_are_consumed_while_running() {
    let mut core = Tasks::new(Config::default());
    core.submit(vec![group(4, &[("memory", 6)])]).unwrap();
    let w = core
        .worker_joined(0, worker(8, &[("memory", 16)]))
        .expect("joins")
        .0;
    core.schedule(0);
    assert_eq!(dispatched(&core.take_effects())[&w], vec![1, 2]); // 2 x 6 <= 16 < 3 x 6
    core.finished(1, w, 1, ok());
    core.schedule(0);
    assert_eq!(dispatched(&core.take_effects())[&w], vec![3]);
    core.sanity_check().unwrap();
}

#[test]
fn higher_priority_runs_first() {
    let mut core = Tasks::new(Config::default());
    core.submit(vec![group(2, &[])]).unwrap();
    core.submit(vec![NewGroup {
        spec: spec(&[], 5, 3),
        count: 2,
        inputs: vec![],
    }])
    .unwrap();
    let w = core.worker_joined(0, worker(3, &[])).expect("joins").0;
    core.schedule(0);
    assert_eq!(dispatched(&core.take_effects())[&w], vec![3, 4, 1]);
}

#[test]
fn a_lost_worker_requeues_its_tasks_until_retries_run_out() {
    let mut core = Tasks::new(Config {
        heartbeat_timeout_ms: 100,
        idle_silence_ms: 100,
        ..Config::default()
    });
    core.submit(vec![NewGroup {
        spec: spec(&[], 0, 1),
        count: 1,
        inputs: vec![],
    }])
    .unwrap();
    let a = core.worker_joined(0, worker(1, &[])).expect("joins").0;
    core.schedule(0);
    core.worker_lost(0, a, "connection closed", Loss::Silent);
    core.sanity_check().unwrap();
    assert_eq!(core.job_counts(1).unwrap().queued, 1);
    let b = core.worker_joined(10, worker(1, &[])).expect("joins").0;
    core.schedule(0);
    core.take_effects();
    // b goes silent: the tick declares it lost, and with retries = 1 the task fails.
    core.tick(500);
    let actions = core.take_effects();
    assert!(actions.contains(&Effect::Disconnect {
        worker: b,
        reason: "no heartbeat for 100 ms".into()
    }));
    let results = core.results(1).unwrap();
    assert_eq!(results[0].state, TaskState::Failed);
    assert_eq!(results[0].attempts, 2);
    // A late report from a lost worker changes nothing.
    assert!(!core.finished(600, a, 1, ok()));
    core.sanity_check().unwrap();
}

#[test]
fn explain_of_a_finished_task_says_where_it_ran_how_often_and_how_it_ended() {
    let mut core = Tasks::new(Config::default());
    core.submit(vec![NewGroup {
        spec: spec(&[], 0, 1),
        count: 2,
        inputs: vec![],
    }])
    .unwrap();
    // Task 1 exits 3 on worker a (of manager hpc); task 2 then loses a, and b after it, and
    // runs out of retries.
    let mut a = worker(1, &[]);
    a.manager = Some("hpc".into());
    let a_name = a.name.clone();
    let a = core.worker_joined(0, a).expect("joins").0;
    core.schedule(0);
    let failed = Outcome::Exited {
        code: Some(3),
        stdout: vec![],
        stderr: vec![],
    };
    assert!(core.finished(1, a, 1, failed));
    core.schedule(1);
    core.worker_lost(2, a, "connection closed", Loss::Exited);
    let b = worker(1, &[]);
    let b_name = b.name.clone();
    let b = core.worker_joined(3, b).expect("joins").0;
    core.schedule(3);
    core.worker_lost(4, b, "connection closed", Loss::Exited);
    let text = |task| core.explain(5, task).unwrap().join("\n");
    let exited = text(1);
    assert!(
        exited.contains(&format!("ran last on worker {a_name} (manager hpc); 1 run")),
        "{exited}"
    );
    assert!(exited.contains("outcome: exited with code 3"), "{exited}");
    let lost = text(2);
    assert!(
        lost.contains(&format!("ran last on worker {b_name}; 2 runs")),
        "{lost}"
    );
    assert!(lost.contains("outcome: worker"), "{lost}");
    core.sanity_check().unwrap();
}

#[test]
fn cancel_stops_queued_and_running_tasks_and_keeps_resources_until_confirmed() {
    let mut core = Tasks::new(Config::default());
    core.submit(vec![group(3, &[])]).unwrap();
    let w = core.worker_joined(0, worker(1, &[])).expect("joins").0;
    core.schedule(0);
    core.take_effects();
    assert_eq!(core.cancel_job(1), 3);
    let actions = core.take_effects();
    assert!(actions.contains(&Effect::Cancel {
        worker: w,
        tasks: vec![1]
    }));
    // The slot is still held until the worker confirms.
    core.submit(vec![group(1, &[])]).unwrap();
    core.schedule(0);
    assert!(dispatched(&core.take_effects()).is_empty());
    assert!(core.finished(
        1,
        w,
        1,
        Outcome::Error {
            message: "killed".into()
        }
    ));
    core.schedule(0);
    assert_eq!(dispatched(&core.take_effects())[&w], vec![4]);
    assert_eq!(core.job_counts(1).unwrap().canceled, 3);
    core.sanity_check().unwrap();
}

#[test]
fn tasks_nothing_can_run_fail_after_the_unschedulable_timeout() {
    let mut core = Tasks::new(Config::default());
    core.submit(vec![group(2, &[("gpu", 1)])]).unwrap(); // tasks 1, 2: need a gpu
    core.submit(vec![group(1, &[])]).unwrap(); // task 3: runs anywhere
    let mut envs = group(1, &[]);
    envs.spec.environments = vec!["big".into()];
    core.register_environment(
        weir_proto::EnvironmentDef {
            name: "big".into(),
            component: [1; 32],
            config: vec![],
        },
        std::sync::Arc::from(vec![0u8; 4]),
    );
    core.submit(vec![envs]).unwrap(); // task 4: needs `big`, not evaluated yet
    let w = core
        .worker_joined(0, worker(1, &[("gpu", 0)]))
        .expect("joins")
        .0;
    // A manager could start a worker with a gpu: nothing fails, however long it waits.
    assert_eq!(core.fail_unschedulable(0, 1000, |_, _, _| true), 0);
    assert_eq!(core.fail_unschedulable(5000, 1000, |_, _, _| true), 0);
    // None could: the clock starts now, and the gpu tasks fail once it has run out.
    let never = |_: &[(String, u64)], _: &[String], _: u64| false;
    assert_eq!(core.fail_unschedulable(6000, 1000, never), 0);
    assert_eq!(core.fail_unschedulable(6999, 1000, never), 0);
    assert_eq!(core.fail_unschedulable(7000, 1000, never), 2);
    for result in core.results(1).unwrap() {
        assert_eq!(result.state, TaskState::Failed);
        let Outcome::Error { message } = &result.outcome else {
            panic!("{result:?}")
        };
        assert!(message.starts_with("unschedulable:"), "{message}");
        assert!(message.contains("capabilities [gpu=1]"), "{message}");
    }
    // The task that fits runs; the one whose environment is still pending keeps waiting.
    core.schedule(0);
    assert_eq!(dispatched(&core.take_effects())[&w], vec![3]);
    assert_eq!(core.fail_unschedulable(9000, 1000, never), 0);
    assert_eq!(core.job_counts(3).unwrap().queued, 1);
    // Once the worker answers no-match, that task has nothing either, and fails in its turn.
    core.set_verdicts(9000, w, vec![("big".into(), EnvVerdict::NoMatch)]);
    assert_eq!(core.fail_unschedulable(9000, 1000, never), 0);
    assert_eq!(core.fail_unschedulable(10_000, 1000, never), 1);
    assert_eq!(core.job_counts(3).unwrap().failed, 1);
    core.sanity_check().unwrap();
}

#[test]
fn a_component_no_held_task_uses_is_released() {
    let mut core = Tasks::new(Config::default());
    let hash = [7; 32];
    core.add_component(hash, std::sync::Arc::from(vec![0u8; 4]));
    let mut wasm = group(2, &[]);
    wasm.spec.kind = TaskKind::Wasm { component: hash };
    core.submit(vec![wasm.clone()]).unwrap(); // job 1
    core.submit(vec![wasm.clone()]).unwrap(); // job 2
    let w = core.worker_joined(0, worker(4, &[])).expect("joins").0;
    core.schedule(0);
    for task in dispatched(&core.take_effects())[&w].clone() {
        core.finished(1, w, task, ok());
    }
    core.take_effects();
    // Job 2 still uses it after job 1 is forgotten; once both are, it is released.
    core.forget(1).unwrap();
    assert_eq!(
        core.take_effects(),
        [Effect::Dropped {
            groups: vec![1],
            components: vec![]
        }]
    );
    core.forget(2).unwrap();
    assert_eq!(
        core.take_effects(),
        [Effect::Dropped {
            groups: vec![2],
            components: vec![hash]
        }]
    );
    // A new job must bring it again.
    assert!(matches!(
        core.submit(vec![wasm.clone()]),
        Err(SubmitError::UnknownComponent { .. })
    ));
    core.add_component(hash, std::sync::Arc::from(vec![0u8; 4]));
    core.submit(vec![wasm]).unwrap();
    core.sanity_check().unwrap();
}

/// With `forget_after_ms` 0, a job whose last task fails with its lost worker is forgotten in the
/// next tick, not the same one: what the shell journals from each tick's actions, in order, must
/// replay to the same state (the task final, never run again; the job forgotten).
#[test]
fn a_job_finished_and_forgotten_in_one_tick_replays_as_forgotten() {
    let mut core = Tasks::new(Config {
        heartbeat_timeout_ms: 100,
        idle_silence_ms: 100,
        forget_after_ms: Some(0),
        fence_ms: 0,
        undrain_ms: 20_000,
        prefetch: 0,
        max_walltime_requeues: 3,
    });
    let new = NewGroup {
        spec: spec(&[], 0, 0),
        count: 1,
        inputs: vec![],
    };
    core.submit(vec![new.clone()]).unwrap();
    core.worker_joined(0, worker(1, &[])).expect("joins");
    core.schedule(0);
    core.take_effects();
    let mut finals = Vec::new();
    let mut forgets = Vec::new();
    // Like the shell: after each tick, journal what its actions say.
    for _ in 0..2 {
        // The first tick loses the worker and fails the task (no retries): the job is done;
        // the second forgets it.
        core.tick(1000);
        for action in core.take_effects() {
            match action {
                Effect::Finished { task, .. } => {
                    let record = core.final_record(task).expect("a final record to journal");
                    finals.push((task, record));
                }
                Effect::Forgot { job } => forgets.push(job),
                _ => {}
            }
        }
    }
    assert_eq!(forgets, [1]);
    // Replay: the submission, the finals, then the forget.
    let mut replayed = Tasks::new(Config::default());
    replayed.restore(vec![new], None).unwrap();
    for (task, (state, outcome, attempts)) in finals {
        assert_eq!(state, TaskState::Failed);
        replayed.restore_final(task, state, outcome, attempts);
    }
    for job in forgets {
        replayed.forget(job).unwrap();
    }
    assert_eq!(replayed.results(1), Err(JobError::Forgotten(1)));
    assert_eq!(replayed.status().tasks.queued, 0);
    replayed.sanity_check().unwrap();
}

#[test]
fn bad_submissions_are_refused_whole() {
    let mut core = Tasks::new(Config::default());
    assert_eq!(core.submit(vec![]), Err(SubmitError::Empty));
    let mut no_argv = group(1, &[]);
    no_argv.spec.kind = TaskKind::Command {
        argv: vec![],
        env: vec![],
    };
    assert_eq!(
        core.submit(vec![group(1, &[]), no_argv]),
        Err(SubmitError::EmptyArgv { group: 1 })
    );
    let mut wasm = group(1, &[]);
    wasm.spec.kind = TaskKind::Wasm { component: [7; 32] };
    assert!(matches!(
        core.submit(vec![wasm]),
        Err(SubmitError::UnknownComponent { group: 0, .. })
    ));
    let mut env = group(1, &[]);
    env.spec.environments = vec!["large".into()];
    assert_eq!(
        core.submit(vec![env]).unwrap_err().to_string(),
        "group 0: unknown environment `large`; register it first (`weir env register`)"
    );
    let mismatch = NewGroup {
        spec: spec(&[], 0, 0),
        count: 2,
        inputs: vec![vec![1]],
    };
    assert!(matches!(
        core.submit(vec![mismatch]),
        Err(SubmitError::CountMismatch { .. })
    ));
    assert_eq!(core.status().tasks.total(), 0);
    core.sanity_check().unwrap();
}
