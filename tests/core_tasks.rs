//! The scheduler core without a network: unit cases for the rules, and property tests that
//! drive it with random event sequences (submits, joins, losses, finishes, duplicate and late
//! reports, cancels, ticks) and check the invariants after every step.

use std::collections::HashMap;

use proptest::prelude::*;
use weir::core::tasks::{Action, Config, JobError, Loss, MAX_SPARED, SubmitError, Tasks};
use weir::proto::{EnvVerdict, NewGroup, Outcome, TaskKind, TaskSpec, TaskState, WorkerInfo};

fn spec(capabilities: &[(&str, u64)], priority: i32, retries: u32) -> TaskSpec {
    TaskSpec {
        kind: TaskKind::Command {
            argv: vec!["true".into()],
            env: vec![],
        },
        capabilities: capabilities
            .iter()
            .map(|(n, v)| (n.to_string(), *v))
            .collect(),
        environments: vec![],
        priority,
        timeout_ms: 0,
        retries,
        input: vec![],
    }
}

fn group(count: u32, capabilities: &[(&str, u64)]) -> NewGroup {
    NewGroup {
        spec: spec(capabilities, 0, 3),
        count,
        inputs: vec![],
    }
}

fn worker(slots: u32, capabilities: &[(&str, u64)]) -> WorkerInfo {
    // Each a process of its own: names are unique.
    static NEXT: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(1);
    let instance = NEXT.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    WorkerInfo {
        name: format!("w{instance}"),
        instance,
        ends_in_ms: None,
        finished: vec![],
        slots,
        capabilities: capabilities
            .iter()
            .map(|(n, v)| (n.to_string(), *v))
            .collect(),
        worker_type: String::new(),
        manager: None,
        local_environments: vec![],
        running: vec![],
    }
}

fn ok() -> Outcome {
    Outcome::Exited {
        code: Some(0),
        stdout: vec![],
        stderr: vec![],
    }
}

fn dispatched(actions: &[Action]) -> HashMap<u64, Vec<u64>> {
    let mut map: HashMap<u64, Vec<u64>> = HashMap::new();
    for action in actions {
        if let Action::Dispatch { worker, tasks } = action {
            map.entry(*worker).or_default().extend(tasks);
        }
    }
    map
}

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
    assert_eq!(dispatched(&core.take_actions())[&w], vec![2, 3]);
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
    assert_eq!(dispatched(&core.take_actions())[&g], vec![1]);
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
    assert_eq!(dispatched(&core.take_actions())[&w], vec![1, 2]); // 2 x 6 <= 16 < 3 x 6
    core.finished(1, w, 1, ok());
    core.schedule(0);
    assert_eq!(dispatched(&core.take_actions())[&w], vec![3]);
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
    assert_eq!(dispatched(&core.take_actions())[&w], vec![3, 4, 1]);
}

#[test]
fn a_lost_worker_requeues_its_tasks_until_retries_run_out() {
    let mut core = Tasks::new(Config {
        heartbeat_timeout_ms: 100,
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
    core.take_actions();
    // b goes silent: the tick declares it lost, and with retries = 1 the task fails.
    core.tick(500);
    let actions = core.take_actions();
    assert!(actions.contains(&Action::Disconnect {
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
    core.take_actions();
    assert_eq!(core.cancel_job(1), 3);
    let actions = core.take_actions();
    assert!(actions.contains(&Action::Cancel {
        worker: w,
        tasks: vec![1]
    }));
    // The slot is still held until the worker confirms.
    core.submit(vec![group(1, &[])]).unwrap();
    core.schedule(0);
    assert!(dispatched(&core.take_actions()).is_empty());
    assert!(core.finished(
        1,
        w,
        1,
        Outcome::Error {
            message: "killed".into()
        }
    ));
    core.schedule(0);
    assert_eq!(dispatched(&core.take_actions())[&w], vec![4]);
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
        weir::proto::EnvironmentDef {
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
    assert_eq!(dispatched(&core.take_actions())[&w], vec![3]);
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
    for task in dispatched(&core.take_actions())[&w].clone() {
        core.finished(1, w, task, ok());
    }
    core.take_actions();
    // Job 2 still uses it after job 1 is forgotten; once both are, it is released.
    core.forget(1).unwrap();
    assert_eq!(
        core.take_actions(),
        [Action::Dropped {
            groups: vec![1],
            components: vec![]
        }]
    );
    core.forget(2).unwrap();
    assert_eq!(
        core.take_actions(),
        [Action::Dropped {
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
    core.take_actions();
    let mut finals = Vec::new();
    let mut forgets = Vec::new();
    // Like the shell: after each tick, journal what its actions say.
    for _ in 0..2 {
        // The first tick loses the worker and fails the task (no retries): the job is done;
        // the second forgets it.
        core.tick(1000);
        for action in core.take_actions() {
            match action {
                Action::Finished { task, .. } => {
                    let record = core.final_record(task).expect("a final record to journal");
                    finals.push((task, record));
                }
                Action::Forgot { job } => forgets.push(job),
                _ => {}
            }
        }
    }
    assert_eq!(forgets, [1]);
    // Replay: the submission, the finals, then the forget.
    let mut replayed = Tasks::new(Config::default());
    replayed.restore(vec![new]).unwrap();
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

// ---- prefetch: tasks held ahead of a free slot, and taken back ----

fn with_prefetch(prefetch: u32) -> Tasks {
    Tasks::new(Config {
        prefetch,
        ..Config::default()
    })
}

fn revokes(actions: &[Action]) -> Vec<(u64, Vec<u64>, u32)> {
    actions
        .iter()
        .filter_map(|a| match a {
            Action::Revoke {
                worker,
                tasks,
                count,
            } => Some((*worker, tasks.clone(), *count)),
            _ => None,
        })
        .collect()
}

/// Submit `count` tasks and make their group quick: one runs on a worker of its own (joined,
/// run, reported, then lost as stopped). Returns the job and the tasks still queued, in order.
fn quick_job(
    core: &mut Tasks,
    count: u32,
    capabilities: &[(&str, u64)],
    retries: u32,
) -> (u64, Vec<u64>) {
    let (job, first, _) = core
        .submit(vec![NewGroup {
            spec: spec(capabilities, 0, retries),
            count: count + 1,
            inputs: vec![],
        }])
        .unwrap();
    let caps: Vec<(&str, u64)> = capabilities.iter().map(|(n, v)| (*n, v * 100)).collect();
    let probe = core.worker_joined(0, worker(1, &caps)).unwrap().0;
    core.schedule(0);
    assert_eq!(dispatched(&core.take_actions())[&probe], vec![first]);
    assert!(core.finished(5, probe, first, ok()));
    core.worker_lost(5, probe, "test", Loss::Stopped);
    core.take_actions();
    (job, (first + 1..=first + u64::from(count)).collect())
}

#[test]
fn prefetch_fills_every_free_slot_first_then_one_task_per_worker_per_round() {
    let mut core = with_prefetch(3);
    let (_, tasks) = quick_job(&mut core, 9, &[], 3);
    let a = core.worker_joined(10, worker(2, &[])).unwrap().0;
    let b = core.worker_joined(10, worker(2, &[])).unwrap().0;
    core.schedule(10);
    let sent = dispatched(&core.take_actions());
    // 4 slots, then rounds of one each: a 3, b 2 of the 5 left.
    assert_eq!(
        sent[&a],
        vec![tasks[0], tasks[1], tasks[4], tasks[6], tasks[8]]
    );
    assert_eq!(sent[&b], vec![tasks[2], tasks[3], tasks[5], tasks[7]]);
    assert_eq!(core.status().tasks.queued, 0);
    core.sanity_check().unwrap();
}

#[test]
fn no_more_than_slots_and_prefetch_however_much_waits() {
    let mut core = with_prefetch(3);
    quick_job(&mut core, 100, &[], 3);
    let a = core.worker_joined(10, worker(2, &[])).unwrap().0;
    core.schedule(10);
    assert_eq!(dispatched(&core.take_actions())[&a].len(), 5);
    core.schedule(10);
    assert!(dispatched(&core.take_actions()).is_empty());
    core.sanity_check().unwrap();
}

#[test]
fn only_tasks_of_a_group_that_ran_quickly_are_prefetched() {
    let mut core = with_prefetch(4);
    let a = core.worker_joined(0, worker(1, &[])).unwrap().0;
    let (_, first, _) = core.submit(vec![group(10, &[])]).unwrap();
    core.schedule(0);
    // Nothing known of the group yet: a slot's worth.
    assert_eq!(dispatched(&core.take_actions())[&a], vec![first]);
    // It ran for two seconds: still not prefetched.
    assert!(core.finished(2_000, a, first, ok()));
    core.schedule(2_000);
    assert_eq!(dispatched(&core.take_actions())[&a], vec![first + 1]);
    // The next one was quick: now the worker is given its prefetch too.
    assert!(core.finished(2_010, a, first + 1, ok()));
    core.schedule(2_010);
    assert_eq!(dispatched(&core.take_actions())[&a].len(), 5);
}

#[test]
fn a_task_held_ahead_is_timed_from_its_start_so_a_long_wait_there_keeps_its_group_quick() {
    let mut core = with_prefetch(64);
    let (_, tasks) = quick_job(&mut core, 100, &[], 3);
    let a = core.worker_joined(0, worker(1, &[])).unwrap().0;
    core.schedule(0);
    // Its slot and 64 ahead; 35 stay queued.
    let mut held: std::collections::VecDeque<u64> =
        dispatched(&core.take_actions())[&a].clone().into();
    assert_eq!(held.len(), 65);
    // Each runs 35 ms, one after the other, and the worker reports each start and end. The
    // 30th has waited there over PREFETCH_BELOW_MS when it ends, yet it ran only 35 ms: the
    // group stays quick, so nothing is asked back (timed from hand-over, the group turned
    // slow while tasks were still queued and the worker was asked to give back all it held).
    let mut now = 0;
    let mut done = 0;
    while let Some(task) = held.pop_front() {
        if done > 0 {
            core.started(now, a, &[task]);
        }
        now += 35;
        assert!(core.finished(now, a, task, ok()));
        done += 1;
        core.schedule(now);
        let actions = core.take_actions();
        assert!(
            revokes(&actions).is_empty(),
            "asked back after {done} tasks, at {now} ms"
        );
        if let Some(sent) = dispatched(&actions).get(&a) {
            held.extend(sent);
        }
    }
    assert_eq!(done, tasks.len());
    assert!(now > 2 * weir::core::tasks::PREFETCH_BELOW_MS);
    core.sanity_check().unwrap();
}

#[test]
fn no_prefetch_while_another_fitting_worker_has_a_free_slot() {
    let mut core = with_prefetch(4);
    quick_job(&mut core, 2, &[], 3);
    let a = core.worker_joined(10, worker(1, &[])).unwrap().0;
    let b = core.worker_joined(10, worker(1, &[])).unwrap().0;
    core.schedule(10);
    let sent = dispatched(&core.take_actions());
    assert_eq!((sent[&a].len(), sent[&b].len()), (1, 1));
}

#[test]
fn an_idle_worker_has_prefetched_tasks_taken_back_for_it_without_an_attempt_spent() {
    let mut core = with_prefetch(4);
    // Retries 0: a spent attempt would show.
    let (_, tasks) = quick_job(&mut core, 5, &[], 0);
    let busy = core.worker_joined(10, worker(1, &[])).unwrap().0;
    core.schedule(10);
    let held = dispatched(&core.take_actions())[&busy].clone();
    assert_eq!(held, tasks);
    // A second worker joins with nothing queued: the busy one is asked for what it holds ahead.
    let idle = core.worker_joined(20, worker(1, &[])).unwrap().0;
    core.schedule(20);
    let asked = revokes(&core.take_actions());
    assert_eq!(asked.len(), 1);
    let (from, candidates, count) = asked[0].clone();
    assert_eq!(from, busy);
    // At least the one free slot, up to half of the 4 held ahead.
    assert_eq!(count, 2);
    assert_eq!(
        candidates.len(),
        5,
        "any held task it could run may be one given back"
    );
    // Asked once at a time.
    core.schedule(20);
    assert!(revokes(&core.take_actions()).is_empty());
    // It gives back the two newest, which had not started.
    assert_eq!(core.revoked(busy, &[held[4], held[3]]), 2);
    core.schedule(20);
    let sent = dispatched(&core.take_actions());
    assert_eq!(
        sent[&idle],
        vec![held[3], held[4]],
        "in their order, at the front"
    );
    core.sanity_check().unwrap();
    for task in [held[3], held[4]] {
        assert!(core.finished(30, idle, task, ok()));
        let (state, _, attempts) = core.final_record(task).unwrap();
        assert_eq!((state, attempts), (TaskState::Succeeded, 1));
    }
    // A report for a task given back is not the giver's to make.
    assert!(!core.finished(30, busy, held[4], ok()));
}

#[test]
fn a_worker_that_gave_nothing_back_is_not_asked_again_until_it_finishes_one() {
    let mut core = with_prefetch(2);
    quick_job(&mut core, 3, &[], 3);
    let busy = core.worker_joined(10, worker(1, &[])).unwrap().0;
    core.schedule(10);
    let held = dispatched(&core.take_actions())[&busy].clone();
    assert_eq!(held.len(), 3);
    core.worker_joined(10, worker(1, &[])).unwrap();
    core.schedule(10);
    assert_eq!(revokes(&core.take_actions()).len(), 1);
    // Everything it held had started (it finished one and started the next meanwhile).
    assert_eq!(core.revoked(busy, &[]), 0);
    core.schedule(10);
    assert!(
        revokes(&core.take_actions()).is_empty(),
        "asked again at once"
    );
    assert!(core.finished(15, busy, held[0], ok()));
    core.schedule(15);
    assert_eq!(revokes(&core.take_actions()).len(), 1);
}

#[test]
fn a_prefetched_task_canceled_and_then_given_back_is_confirmed_stopped() {
    let mut core = with_prefetch(2);
    let (job, _) = quick_job(&mut core, 3, &[], 3);
    let busy = core.worker_joined(10, worker(1, &[])).unwrap().0;
    core.schedule(10);
    let held = dispatched(&core.take_actions())[&busy].clone();
    core.worker_joined(10, worker(1, &[])).unwrap();
    core.schedule(10);
    assert_eq!(revokes(&core.take_actions()).len(), 1);
    core.cancel_job(job);
    // The worker gave it back before the cancel reached it: that is its confirmation.
    core.revoked(busy, &[held[2]]);
    assert!(!core.finished(15, busy, held[2], ok()));
    assert!(core.finished(15, busy, held[0], ok()));
    assert!(core.finished(15, busy, held[1], ok()));
    assert_eq!(core.status().tasks.canceled, 3);
    assert_eq!(core.status().tasks.running, 0);
    core.sanity_check().unwrap();
}

#[test]
fn a_worker_killed_before_it_started_its_prefetched_tasks_spends_no_attempt_on_them() {
    let mut core = with_prefetch(2);
    // Retries 0: a task that may have run there fails; one that surely did not is requeued.
    let (_, tasks) = quick_job(&mut core, 3, &[], 0);
    let w = core.worker_joined(10, worker(1, &[])).unwrap().0;
    core.schedule(10);
    assert_eq!(dispatched(&core.take_actions())[&w], tasks);
    // The first went into its free slot; of the two held ahead, it reported the first started.
    core.started(15, w, &[tasks[1]]);
    core.worker_lost(20, w, "killed", Loss::Exited);
    let counts = core.status().tasks;
    assert_eq!((counts.failed, counts.queued), (2, 1), "{counts:?}");
    let other = core.worker_joined(30, worker(1, &[])).unwrap().0;
    core.schedule(30);
    assert_eq!(dispatched(&core.take_actions())[&other], vec![tasks[2]]);
    assert!(core.finished(40, other, tasks[2], ok()));
    assert_eq!(core.final_record(tasks[2]).unwrap().2, 1);
}

#[test]
fn a_task_held_ahead_by_workers_lost_before_reporting_its_start_is_spared_at_most_twice() {
    // A start is reported with the next outcomes, so a task that kills its worker at once looks
    // unstarted. Sparing it every time would let it kill workers forever: MAX_SPARED bounds it.
    let mut core = with_prefetch(1);
    let (_, tasks) = quick_job(&mut core, 2, &[], 5);
    let (first, held) = (tasks[0], tasks[1]);
    for round in 0..=u64::from(MAX_SPARED) {
        let now = 10 + round * 10;
        let w = core.worker_joined(now, worker(1, &[])).unwrap().0;
        core.schedule(now);
        let handed = dispatched(&core.take_actions());
        assert_eq!(handed[&w], vec![first, held], "round {round}");
        core.worker_lost(now + 5, w, "killed", Loss::Exited);
    }
    let w = core.worker_joined(100, worker(1, &[])).unwrap().0;
    core.schedule(100);
    assert_eq!(dispatched(&core.take_actions())[&w], vec![first, held]);
    assert!(core.finished(110, w, first, ok()));
    assert!(core.finished(120, w, held, ok()));
    // `first` ran in the slot every time: each loss an attempt, then its run.
    let rounds = MAX_SPARED + 1;
    assert_eq!(core.final_record(first).unwrap().2, rounds + 1);
    // `held` was spared MAX_SPARED times; the loss after that counted, then its run.
    assert_eq!(core.final_record(held).unwrap().2, 2);
}

#[test]
fn a_new_submission_is_not_starved_by_a_stream_of_quick_tasks_held_ahead() {
    let mut core = with_prefetch(2);
    let (_, a) = quick_job(&mut core, 50, &[], 3);
    let w = core.worker_joined(10, worker(1, &[])).unwrap().0;
    core.schedule(10);
    assert_eq!(dispatched(&core.take_actions())[&w], a[..3]);
    // A higher-priority submission, nothing known of its speed: it is to have the next free
    // slot, so the worker is asked for what it holds ahead, and handed no more meanwhile.
    let (_, b, _) = core
        .submit(vec![NewGroup {
            spec: spec(&[], 5, 3),
            count: 1,
            inputs: vec![],
        }])
        .unwrap();
    core.schedule(10);
    let actions = core.take_actions();
    assert!(dispatched(&actions).is_empty());
    assert_eq!(revokes(&actions), vec![(w, a[..3].to_vec(), 2)]);
    // It gives back the one it had not started; the other had started meanwhile.
    assert_eq!(core.revoked(w, &[a[2]]), 1);
    core.schedule(10);
    assert!(
        dispatched(&core.take_actions()).is_empty(),
        "refilled with quick tasks"
    );
    assert!(core.finished(20, w, a[0], ok()));
    core.schedule(20);
    assert!(
        dispatched(&core.take_actions()).is_empty(),
        "refilled with quick tasks"
    );
    let why = core.explain(20, a[3]).unwrap().join("\n");
    assert!(why.contains("all 1 slots busy"), "{why}");
    // What ran there ends: the slot is the new submission's.
    assert!(core.finished(30, w, a[1], ok()));
    core.schedule(30);
    assert_eq!(dispatched(&core.take_actions())[&w], vec![b]);
}

#[test]
fn a_revoke_is_only_for_tasks_the_idle_worker_can_run() {
    let mut core = with_prefetch(2);
    quick_job(&mut core, 3, &[("gpu", 1)], 3);
    let busy = core.worker_joined(10, worker(1, &[("gpu", 4)])).unwrap().0;
    core.schedule(10);
    assert_eq!(dispatched(&core.take_actions())[&busy].len(), 3);
    core.worker_joined(10, worker(1, &[])).unwrap();
    core.schedule(10);
    assert!(revokes(&core.take_actions()).is_empty());
}

// ---- random event sequences ----

#[derive(Clone, Debug)]
enum Event {
    Submit {
        count: u32,
        gpu: bool,
        priority: i32,
        retries: u32,
    },
    Join {
        slots: u32,
        gpu: u64,
    },
    Lose(usize),
    Finish {
        pick: usize,
        success: bool,
    },
    Duplicate(usize),
    Cancel(u64),
    Forget(u64),
    /// `fail_unschedulable` with a zero timeout; whether a manager could serve.
    Unschedulable(bool),
    Tick(u64),
    Rejoin(usize),
    /// A live worker registers again (its connection broke and it came back before the old one
    /// was declared lost): the earlier connection is replaced.
    Reconnect(usize),
    /// A worker answers a revoke: it gives back some of the asked tasks that wait there (those
    /// beyond its first `slots`, which run), as the bits of the mask pick.
    Answer {
        pick: usize,
        mask: u64,
    },
}

fn event() -> impl Strategy<Value = Event> {
    prop_oneof![
        2 => (1u32..20, prop::bool::weighted(0.3), -2i32..3, 0u32..3)
            .prop_map(|(count, gpu, priority, retries)| Event::Submit { count, gpu, priority, retries }),
        1 => (1u32..4, 0u64..3).prop_map(|(slots, gpu)| Event::Join { slots, gpu }),
        1 => any::<usize>().prop_map(Event::Lose),
        5 => (any::<usize>(), prop::bool::weighted(0.8)).prop_map(|(pick, success)| Event::Finish { pick, success }),
        1 => any::<usize>().prop_map(Event::Duplicate),
        1 => (1u64..6).prop_map(Event::Cancel),
        1 => (1u64..6).prop_map(Event::Forget),
        1 => any::<bool>().prop_map(Event::Unschedulable),
        1 => (0u64..3000).prop_map(Event::Tick),
        1 => any::<usize>().prop_map(Event::Rejoin),
        1 => any::<usize>().prop_map(Event::Reconnect),
        2 => (any::<usize>(), any::<u64>()).prop_map(|(pick, mask)| Event::Answer { pick, mask }),
    ]
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 2000, ..ProptestConfig::default() })]

    #[test]
    fn no_task_lost_none_finished_twice_capacity_never_exceeded(events in prop::collection::vec(event(), 1..120), prefetch in 0u32..4) {
        // Finished jobs are also forgotten by age, so forgetting races everything else.
        // Lost workers' tasks are fenced, and lost workers come back claiming what they ran.
        // Workers may hold tasks ahead of a free slot, and give some back when asked.
        // A lost worker goes on running what it held until its lease runs out, LEASE after the
        // last thing the core heard from it; the fence is longer (as `core::lease::fence` is).
        const LEASE: u64 = 150;
        let mut core = Tasks::new(Config { heartbeat_timeout_ms: 1000, forget_after_ms: Some(1500), fence_ms: LEASE + 50, undrain_ms: 20_000, prefetch, max_walltime_requeues: 3 });
        // When the core last heard from each worker.
        let mut heard: HashMap<u64, u64> = HashMap::new();
        // Revokes asked and not answered: worker -> (tasks, count).
        let mut asked: HashMap<u64, (Vec<u64>, u32)> = HashMap::new();
        let mut stale: Vec<(u64, Vec<u64>)> = Vec::new();
        // Each worker's registration, to come back as the same process.
        let mut infos: HashMap<u64, WorkerInfo> = HashMap::new();
        let mut jobs: Vec<u64> = Vec::new(); // task count per job
        let mut now = 0u64;
        let mut live: Vec<u64> = Vec::new();
        // What each worker was told to run and has not reported (as a real worker would know).
        let mut running: HashMap<u64, Vec<u64>> = HashMap::new();
        let mut finished_events: HashMap<u64, u32> = HashMap::new();
        let mut submitted = 0u64;
        let mut lost: Vec<u64> = Vec::new();

        let mut apply = |core: &mut Tasks, running: &mut HashMap<u64, Vec<u64>>, live: &mut Vec<u64>, asked: &mut HashMap<u64, (Vec<u64>, u32)>| {
            core.schedule(0);
            for action in core.take_actions() {
                match action {
                    Action::Revoke { worker, tasks, count } => {
                        assert!(asked.insert(worker, (tasks, count)).is_none(), "two revokes outstanding for worker {worker}");
                    }
                    Action::Dispatch { worker, tasks } => running.entry(worker).or_default().extend(tasks),
                    Action::Finished { task, .. } => {
                        // The shell journals this record now: it must exist, forgotten or not.
                        assert!(core.final_record(task).is_some(), "task {task}: nothing to journal");
                        *finished_events.entry(task).or_default() += 1;
                    }
                    Action::Disconnect { worker, .. } => { live.retain(|w| *w != worker); running.remove(&worker); asked.remove(&worker); }
                    // Its first worker came back with the outcome: no longer this one's.
                    Action::TakeBack { worker, tasks } => {
                        if let Some(held) = running.get_mut(&worker) { held.retain(|t| !tasks.contains(t)) }
                    }
                    Action::Cancel { .. } | Action::Forgot { .. } | Action::Dropped { .. } | Action::Cut(_) => {}
                }
            }
        };

        for event in events {
            now += 10;
            match event {
                Event::Submit { count, gpu, priority, retries } => {
                    let caps: &[(&str, u64)] = if gpu { &[("gpu", 1)] } else { &[] };
                    let new = NewGroup { spec: spec(caps, priority, retries), count, inputs: vec![] };
                    let (_, _, n) = core.submit(vec![new]).unwrap();
                    submitted += n;
                    jobs.push(n);
                }
                Event::Join { slots, gpu } => {
                    let info = worker(slots, &[("gpu", gpu)]);
                    let id = core.worker_joined(now, info.clone()).expect("joins").0;
                    infos.insert(id, info);
                    heard.insert(id, now);
                    live.push(id);
                }
                Event::Lose(pick) if !live.is_empty() => {
                    let w = live.remove(pick % live.len());
                    core.worker_lost(now, w, "test", Loss::Silent);
                    asked.remove(&w);
                    if let Some(tasks) = running.remove(&w) {
                        lost.extend(tasks.iter().map(|t| (w << 32) | *t));
                        stale.push((w, tasks));
                    }
                }
                Event::Rejoin(pick) if !stale.is_empty() => {
                    // A lost worker reconnects claiming the tasks it still runs: those still
                    // waiting are adopted, the others (run elsewhere by now, or final) refused.
                    let (old, tasks) = stale.remove(pick % stale.len());
                    let mut info = infos[&old].clone();
                    info.running = tasks.clone();
                    let (id, refused) = core.worker_joined(now, info.clone()).expect("the same process joins again");
                    infos.insert(id, info);
                    heard.insert(id, now);
                    live.push(id);
                    let adopted: Vec<u64> = tasks.iter().copied().filter(|t| !refused.contains(t)).collect();
                    running.entry(id).or_default().extend(adopted);
                }
                Event::Reconnect(pick) if !live.is_empty() => {
                    let old = live[pick % live.len()];
                    let tasks = running.get(&old).cloned().unwrap_or_default();
                    // Another process under its name is refused; the same one replaces it.
                    let mut impostor = infos[&old].clone();
                    impostor.instance ^= 1 << 40;
                    prop_assert!(core.worker_joined(now, impostor).is_err());
                    let mut info = infos[&old].clone();
                    info.running = tasks.clone();
                    let (id, refused) = core.worker_joined(now, info.clone()).expect("the same process joins again");
                    // Its running tasks move over; those canceled meanwhile are stopped there.
                    infos.insert(id, info);
                    heard.insert(id, now);
                    live.push(id);
                    let adopted: Vec<u64> = tasks.iter().copied().filter(|t| !refused.contains(t)).collect();
                    running.insert(id, adopted);
                }
                Event::Finish { pick, success } => {
                    let all: Vec<(u64, u64)> = running.iter().flat_map(|(w, ts)| ts.iter().map(move |t| (*w, *t))).collect();
                    if !all.is_empty() {
                        let (w, t) = all[pick % all.len()];
                        running.get_mut(&w).unwrap().retain(|x| *x != t);
                        let outcome = if success { ok() } else { Outcome::Exited { code: Some(1), stdout: vec![], stderr: vec![] } };
                        prop_assert!(core.finished(now, w, t, outcome), "report of a dispatched task refused");
                        for other in &live { core.heartbeat(now, *other); heard.insert(*other, now); }
                    }
                }
                Event::Duplicate(pick) => {
                    // A report the core must ignore: a task already reported, or from a lost worker.
                    if !lost.is_empty() {
                        let entry = lost[pick % lost.len()];
                        prop_assert!(!core.finished(now, entry >> 32, entry & 0xffff_ffff, ok()));
                    }
                }
                Event::Cancel(job) => { core.cancel_job(job); }
                Event::Forget(job) => match core.forget(job) {
                    Ok(_) => prop_assert_eq!(core.results(job), Err(JobError::Forgotten(job))),
                    Err(JobError::NotFinished { unfinished, .. }) => prop_assert!(unfinished > 0),
                    Err(JobError::Unknown(j)) => prop_assert!(j as usize > jobs.len()),
                    Err(JobError::Forgotten(j)) => prop_assert!(false, "forgetting {} twice is not an error", j),
                },
                Event::Unschedulable(managers_could) => {
                    core.fail_unschedulable(now, 0, |_, _, _| managers_could);
                }
                Event::Tick(dt) => { now += dt; core.tick(now); }
                Event::Answer { pick, mask } if !asked.is_empty() => {
                    let mut workers: Vec<u64> = asked.keys().copied().collect();
                    workers.sort_unstable();
                    let w = workers[pick % workers.len()];
                    let (tasks, count) = asked.remove(&w).unwrap();
                    let held = running.get(&w).cloned().unwrap_or_default();
                    // The first `slots` it holds run; the rest wait and may be given back.
                    let slots = infos[&w].slots as usize;
                    let waiting: Vec<u64> = held.iter().skip(slots).copied().collect();
                    let given: Vec<u64> = tasks.iter().copied()
                        .filter(|t| waiting.contains(t))
                        .enumerate().filter(|(i, _)| mask & (1 << (i % 64)) != 0).map(|(_, t)| t)
                        .take(count as usize)
                        .collect();
                    if let Some(ts) = running.get_mut(&w) { ts.retain(|t| !given.contains(t)) }
                    let back = core.revoked(w, &given);
                    prop_assert!(back <= given.len());
                }
                Event::Lose(_) | Event::Rejoin(_) | Event::Reconnect(_) | Event::Answer { .. } => {}
            }
            apply(&mut core, &mut running, &mut live, &mut asked);
            if let Err(violation) = core.sanity_check() { prop_assert!(false, "{}", violation); }
            // No task is held by two live workers (given back means gone from the giver).
            let mut holders: HashMap<u64, u64> = HashMap::new();
            for (w, tasks) in &running {
                for t in tasks {
                    if let Some(other) = holders.insert(*t, *w) {
                        prop_assert!(false, "task {} held by workers {} and {}", t, other, w);
                    }
                }
            }
            // Never twice at once: a lost worker whose lease may still hold runs what it held,
            // and none of that is held by a live worker meanwhile.
            for (w, tasks) in &stale {
                if now < heard[w] + LEASE {
                    for t in tasks {
                        if let Some(other) = holders.get(t) {
                            prop_assert!(false, "task {} runs on worker {} while lost worker {} may still run it (heard at {}, now {})", t, other, w, heard[w], now);
                        }
                    }
                }
            }
            // What the scaling policy is told is queued is what is queued.
            let demanded: u64 = core.demand().iter().map(|d| u64::from(d.queued)).sum();
            prop_assert_eq!(demanded, core.status().tasks.queued);
        }

        // Drain: a big worker with every capability, and every run reported.
        let big = core.worker_joined(now, worker(64, &[("gpu", 64)])).expect("joins").0;
        live.push(big);
        for _ in 0..10_000 {
            // Time passes (fenced tasks are released), and every live worker keeps in touch.
            now += 300;
            for w in &live { core.heartbeat(now, *w); }
            core.tick(now);
            // Revokes still asked are answered: nothing given back.
            for w in asked.keys().copied().collect::<Vec<_>>() { asked.remove(&w); core.revoked(w, &[]); }
            apply(&mut core, &mut running, &mut live, &mut asked);
            let all: Vec<(u64, u64)> = running.iter().flat_map(|(w, ts)| ts.iter().map(move |t| (*w, *t))).collect();
            if all.is_empty() { break; }
            for (w, t) in all {
                running.get_mut(&w).unwrap().retain(|x| *x != t);
                core.finished(now, w, t, ok());
            }
        }
        apply(&mut core, &mut running, &mut live, &mut asked);
        if let Err(violation) = core.sanity_check() { prop_assert!(false, "{}", violation); }
        let counts = core.status().tasks;
        prop_assert_eq!(counts.finished(), counts.total(), "unfinished tasks: {:?}", counts);
        prop_assert_eq!(finished_events.len() as u64, submitted);
        prop_assert!(finished_events.values().all(|n| *n == 1), "a task finished twice");
        // Every job has all its results, or was forgotten whole.
        for (index, n) in jobs.iter().enumerate() {
            let job = index as u64 + 1;
            match core.results(job) {
                Ok(results) => prop_assert_eq!(results.len() as u64, *n),
                Err(error) => prop_assert_eq!(error, JobError::Forgotten(job)),
            }
        }
        // What a compacted journal holds rebuilds the same state: ids, results, forgotten jobs.
        let mut rebuilt = Tasks::new(Config::default());
        let (first_job, first_task) = core.first_ids();
        prop_assert!(rebuilt.start_ids_at(first_job, first_task));
        for held in core.held_jobs() {
            let (job, _, _) = rebuilt.restore(held.groups).unwrap();
            prop_assert_eq!(job, held.job);
            for (task, state, outcome, attempts) in held.finals {
                rebuilt.restore_final(task, state, outcome, attempts);
            }
            if held.forgotten {
                rebuilt.forget(job).unwrap();
            }
        }
        if let Err(violation) = rebuilt.sanity_check() { prop_assert!(false, "rebuilt: {}", violation); }
        prop_assert_eq!(rebuilt.status().tasks, core.status().tasks);
        for job in 1..=jobs.len() as u64 + 1 {
            prop_assert_eq!(rebuilt.results(job), core.results(job));
        }
        prop_assert_eq!(rebuilt.first_ids(), core.first_ids());

        // Forget everything: nothing is held any more, and no id is reused.
        for job in 1..=jobs.len() as u64 {
            core.forget(job).unwrap();
        }
        core.tick(now);
        if let Err(violation) = core.sanity_check() { prop_assert!(false, "{}", violation); }
        prop_assert_eq!(core.status().tasks.total(), 0);
        let (job, first_task, _) = core.submit(vec![group(1, &[])]).unwrap();
        prop_assert_eq!(job, jobs.len() as u64 + 1);
        prop_assert_eq!(first_task, submitted + 1);
    }
}

#[test]
fn explain_never_contradicts_itself_while_verdicts_are_pending() {
    let mut core = Tasks::new(Config::default());
    core.register_environment(
        weir::proto::EnvironmentDef {
            name: "big".into(),
            component: [1; 32],
            config: vec![],
        },
        std::sync::Arc::from(vec![0u8; 4]),
    );
    let plain = core.worker_joined(0, worker(1, &[])).expect("joins").0;
    let mut own = worker(1, &[]);
    own.name = "own".into();
    own.local_environments = vec!["gpu".into()];
    core.worker_joined(0, own).expect("joins");
    let mut big = group(1, &[]);
    big.spec.environments = vec!["big".into()];
    let (_, task, _) = core.submit(vec![big]).unwrap();
    let lines = core.explain(0, task).unwrap();
    assert!(
        lines.iter().any(|l| l.contains("`big`: not evaluated yet")),
        "{lines:?}"
    );
    assert!(
        lines.contains(&"waiting for workers to evaluate its environments".to_string()),
        "{lines:?}"
    );
    assert!(
        !lines.iter().any(|l| l.contains("can ever run it")),
        "{lines:?}"
    );
    // Once every worker has answered no: nothing live can run it, and it says so.
    for w in core.worker_ids() {
        core.set_verdicts(1, w, vec![("big".into(), EnvVerdict::NoMatch)]);
    }
    let lines = core.explain(0, task).unwrap();
    assert!(
        lines
            .iter()
            .any(|l| l.contains("no live worker can ever run it")),
        "{lines:?}"
    );
    // A name only another worker defines is not evaluated on this one: said as such.
    let mut gpu = group(1, &[]);
    gpu.spec.environments = vec!["gpu".into()];
    let (_, task, _) = core.submit(vec![gpu]).unwrap();
    let lines = core.explain(0, task).unwrap();
    let on_plain = lines
        .iter()
        .find(|l| l.starts_with(&format!("worker {plain} ")))
        .unwrap();
    assert!(on_plain.contains("not evaluated here"), "{lines:?}");
}

#[test]
fn per_task_inputs_come_back_as_given_from_one_buffer() {
    let mut core = Tasks::new(Config::default());
    let given: Vec<Vec<u8>> = vec![b"a".to_vec(), Vec::new(), b"ccc".to_vec()];
    let (_, first, n) = core
        .submit(vec![NewGroup {
            spec: spec(&[], 0, 0),
            count: 0,
            inputs: given.clone(),
        }])
        .unwrap();
    assert_eq!(n, 3);
    for (i, input) in given.iter().enumerate() {
        let (group, index) = core.task_group(first + i as u64).unwrap();
        assert_eq!(group.input(index), Some(input.as_slice()));
    }
    // As the journal records them.
    assert_eq!(core.held_jobs()[0].groups[0].inputs, given);
}

#[test]
fn a_worker_whose_allocation_ends_soon_takes_only_tasks_that_end_before() {
    let mut core = Tasks::new(Config::default());
    let timed = |timeout_ms| NewGroup {
        spec: TaskSpec {
            timeout_ms,
            ..spec(&[], 0, 3)
        },
        count: 1,
        inputs: vec![],
    };
    // Submitted in this order: 20 s (too long), 5 s, none (may run anywhere), exactly 10 s.
    for timeout in [20_000, 5_000, 0, 10_000] {
        core.submit(vec![timed(timeout)]).unwrap();
    }
    let mut ending = worker(8, &[]);
    ending.ends_in_ms = Some(10_000);
    let w = core.worker_joined(1_000, ending).expect("joins").0;
    core.schedule(1_000);
    let mut placed = dispatched(&core.take_actions())[&w].clone();
    placed.sort();
    assert_eq!(
        placed,
        vec![2, 3, 4],
        "the 5 s task, the one without a timeout, and the 10 s one that ends with the worker"
    );
    // A worker without an end takes the long one.
    let other = core.worker_joined(7_000, worker(8, &[])).expect("joins").0;
    core.schedule(7_000);
    assert_eq!(dispatched(&core.take_actions())[&other], vec![1]);
    core.sanity_check().unwrap();
}

/// Item #31.3a: a task whose timeout outlives every live worker's allocation is not "waiting for
/// a qualifying worker to free a slot": explain says no live worker can ever run it, and why.
/// The policy sees its demand under a walltime environment (the timeout in whole seconds), one
/// group per timeout, none for tasks without a timeout.
#[test]
fn a_task_longer_than_every_live_allocation_is_explained_and_named_for_the_policy() {
    let mut core = Tasks::new(Config::default());
    let timed = |timeout_ms| NewGroup {
        spec: TaskSpec {
            timeout_ms,
            ..spec(&[], 0, 3)
        },
        count: 1,
        inputs: vec![],
    };
    core.submit(vec![timed(3_600_000)]).unwrap();
    core.submit(vec![timed(3_590_000)]).unwrap();
    core.submit(vec![timed(0)]).unwrap();
    let mut ending = worker(1, &[]);
    ending.ends_in_ms = Some(1_800_000);
    let w = core.worker_joined(0, ending).expect("joins").0;
    core.schedule(0);
    assert_eq!(dispatched(&core.take_actions())[&w], vec![3]);
    let why = core.explain(0, 1).expect("task 1").join("\n");
    assert!(
        why.contains("its allocation ends before the task's timeout (3600 s) would"),
        "{why}"
    );
    assert!(
        why.contains(
            "no live worker can ever run it: 1 would qualify, but their allocations end before \
             its timeout (3600 s) would"
        ),
        "{why}"
    );
    assert!(!why.contains("free a slot"), "{why}");
    let mut demand: Vec<(Vec<String>, u32, u32)> = core
        .demand()
        .into_iter()
        .map(|d| (d.environments, d.queued, d.running))
        .collect();
    demand.sort();
    assert_eq!(
        demand,
        vec![
            (vec![], 0, 1),
            (vec!["walltime>=3590s".to_string()], 1, 0),
            (vec!["walltime>=3600s".to_string()], 1, 0)
        ]
    );
    // Nothing live or startable could run it: `--unschedulable-timeout` fails it in time.
    assert_eq!(core.fail_unschedulable(0, 1_000, |_, _, _| false), 0);
    assert_eq!(core.fail_unschedulable(1_000, 1_000, |_, _, _| false), 2);
    core.sanity_check().unwrap();
}

#[test]
fn worker_names_are_unique_and_a_reconnection_replaces_the_earlier_connection() {
    let mut core = Tasks::new(Config::default());
    core.submit(vec![group(1, &[])]).unwrap();
    let first = worker(1, &[]);
    let a = core.worker_joined(0, first.clone()).expect("joins").0;
    core.schedule(0);
    assert_eq!(dispatched(&core.take_actions())[&a], vec![1]);
    // Another process under the same name is refused, and changes nothing.
    let mut impostor = first.clone();
    impostor.instance += 1_000_000;
    let refused = core.worker_joined(1, impostor).unwrap_err();
    assert!(refused.to_string().contains(&first.name), "{refused}");
    assert_eq!(core.job_counts(1).unwrap().running, 1);
    // The same process reconnecting (claiming its task) replaces its earlier connection.
    let mut again = first.clone();
    again.running = vec![1];
    let (b, stop) = core.worker_joined(2, again).expect("joins");
    assert_ne!(a, b);
    assert!(stop.is_empty(), "{stop:?}");
    assert!(core.finished(3, b, 1, ok()));
    assert_eq!(core.job_counts(1).unwrap().succeeded, 1);
    core.sanity_check().unwrap();
}

#[test]
fn a_drained_worker_its_manager_does_not_stop_takes_tasks_again() {
    let mut core = Tasks::new(Config::default());
    let w = core.worker_joined(0, worker(1, &[])).expect("joins").0;
    assert_eq!(core.drain(0, &[w]).len(), 1);
    core.submit(vec![group(1, &[])]).unwrap();
    core.schedule(0);
    assert!(
        dispatched(&core.take_actions()).is_empty(),
        "draining: no task"
    );
    core.heartbeat(19_000, w);
    core.tick(19_000);
    core.schedule(19_000);
    assert!(dispatched(&core.take_actions()).is_empty());
    // Still here 20 s on (a unit whose other worker is busy cannot be stopped alone).
    core.heartbeat(20_000, w);
    core.tick(20_000);
    core.schedule(20_000);
    assert_eq!(dispatched(&core.take_actions())[&w], vec![1]);
    core.sanity_check().unwrap();
}

/// One task, fenced for 1,000 ms, with a 100 ms heartbeat timeout.
fn fenced_core() -> Tasks {
    let mut core = Tasks::new(Config {
        heartbeat_timeout_ms: 100,
        fence_ms: 1_000,
        ..Config::default()
    });
    core.submit(vec![group(1, &[])]).unwrap();
    core
}

/// A worker (its registration, and its id) that joined at 0 and was handed task 1.
fn joined_with_task_1(core: &mut Tasks) -> (WorkerInfo, u64) {
    let info = worker(1, &[]);
    let id = core.worker_joined(0, info.clone()).expect("joins").0;
    core.schedule(0);
    core.take_actions();
    (info, id)
}

#[test]
fn a_silent_workers_tasks_are_fenced_from_when_it_was_last_heard_not_when_it_was_declared_lost() {
    let mut core = fenced_core();
    let (_, a) = joined_with_task_1(&mut core);
    core.heartbeat(200, a);
    // Its lease was last renewed for a request sent before 200: it has run out by 1,200.
    // Declared lost much later (a slow link keeps a connection open for ~30 s): the task may
    // run elsewhere at once, not 1,000 ms after that.
    core.worker_lost(5_000, a, "connection timed out", Loss::Silent);
    let b = core.worker_joined(5_000, worker(1, &[])).expect("joins").0;
    core.schedule(5_000);
    assert_eq!(dispatched(&core.take_actions())[&b], vec![1]);
    core.sanity_check().unwrap();

    // Declared lost soon after it was last heard: the fence holds until heard + fence_ms.
    let mut core = fenced_core();
    let (_, a) = joined_with_task_1(&mut core);
    core.heartbeat(200, a);
    core.worker_lost(300, a, "connection closed", Loss::Silent);
    let b = core.worker_joined(300, worker(1, &[])).expect("joins").0;
    for now in [300, 700, 1_199] {
        core.heartbeat(now, b);
        core.tick(now);
        core.schedule(now);
        assert!(dispatched(&core.take_actions()).is_empty(), "at {now}");
    }
    core.heartbeat(1_200, b);
    core.tick(1_200);
    core.schedule(1_200);
    assert_eq!(dispatched(&core.take_actions())[&b], vec![1]);
    core.sanity_check().unwrap();
}

#[test]
fn a_worker_back_claims_a_task_only_if_it_was_handed_to_no_one_else_since() {
    let mut core = fenced_core();
    let (a_info, a) = joined_with_task_1(&mut core);
    core.worker_lost(0, a, "partition", Loss::Silent);
    // After the fence the task runs on b, which is then lost in turn (it may still run it).
    let b_info = worker(1, &[]);
    let b = core.worker_joined(1_000, b_info.clone()).expect("joins").0;
    core.tick(1_000);
    core.schedule(1_000);
    assert_eq!(dispatched(&core.take_actions())[&b], vec![1]);
    core.worker_lost(1_100, b, "partition", Loss::Silent);
    // a comes back claiming it (finished, or still running): refused, b (lost, its lease not
    // over) may be running it.
    let mut back = a_info;
    back.running = vec![1];
    let (a2, refused) = core.worker_joined(1_200, back).expect("joins");
    assert_eq!(refused, vec![1]);
    assert!(
        !core.finished(1_200, a2, 1, ok()),
        "its outcome is not taken"
    );
    // b comes back claiming it: its own run, taken.
    let mut back = b_info;
    back.running = vec![1];
    let (b2, refused) = core.worker_joined(1_300, back).expect("joins");
    assert!(refused.is_empty());
    assert!(core.finished(1_300, b2, 1, ok()));
    let results = core.results(1).unwrap();
    assert_eq!(results[0].state, TaskState::Succeeded);
    assert_eq!(results[0].attempts, 2, "two runs started: on a, then on b");
    core.sanity_check().unwrap();
}

#[test]
fn finished_is_finished_an_outcome_brought_back_after_the_fence_is_taken_if_nothing_ran_it_since() {
    let mut core = fenced_core();
    let (info, a) = joined_with_task_1(&mut core);
    // Partitioned longer than the fence; nothing else could take the task meanwhile.
    core.worker_lost(100, a, "partition", Loss::Silent);
    core.tick(5_000);
    core.schedule(5_000);
    assert!(dispatched(&core.take_actions()).is_empty());
    // Back with the outcome it produced under its lease: taken, run once.
    let mut back = info;
    back.finished = vec![1];
    let (a2, refused) = core.worker_joined(5_000, back).expect("joins");
    assert!(refused.is_empty());
    assert!(core.finished(5_000, a2, 1, ok()));
    let results = core.results(1).unwrap();
    assert_eq!(results[0].state, TaskState::Succeeded);
    assert_eq!(results[0].attempts, 1);
    core.sanity_check().unwrap();
}

#[test]
fn finished_is_finished_a_worker_back_with_an_outcome_takes_its_task_back_from_the_one_handed_it_since()
 {
    let mut core = fenced_core();
    let (info, a) = joined_with_task_1(&mut core);
    // a is cut off and finishes the task there, under its lease; after the fence the task is
    // handed to b, which registered first after the cut.
    core.worker_lost(100, a, "partition", Loss::Silent);
    let b = core.worker_joined(2_000, worker(1, &[])).expect("joins").0;
    core.tick(2_000);
    core.schedule(2_000);
    assert_eq!(dispatched(&core.take_actions())[&b], vec![1]);
    // a is back with the outcome: b gives the task up (it is told to stop it) and a's outcome
    // is the result; b's report of its stopped run changes nothing.
    let mut back = info;
    back.finished = vec![1];
    let (a2, refused) = core.worker_joined(2_100, back).expect("joins");
    assert!(refused.is_empty());
    assert!(core.take_actions().contains(&Action::TakeBack {
        worker: b,
        tasks: vec![1]
    }));
    assert!(core.finished(2_100, a2, 1, ok()));
    assert!(!core.finished(2_200, b, 1, ok()));
    let results = core.results(1).unwrap();
    assert_eq!(results[0].state, TaskState::Succeeded);
    assert_eq!(
        results[0].attempts, 2,
        "b had reported no start; still two hand-overs ran"
    );
    core.sanity_check().unwrap();
    // b is free again.
    core.submit(vec![group(1, &[])]).unwrap();
    core.schedule(2_300);
    assert_eq!(dispatched(&core.take_actions())[&b], vec![2]);
}

/// A condition's bytes live in the one component store while a definition uses them: replaced
/// or removed, they go (unless a held group uses them); a task component that a condition also
/// uses keeps its bytes when its last group is dropped, though the workers forget it as a task
/// component.
#[test]
fn condition_bytes_go_with_their_last_definition() {
    let mut core = Tasks::new(Config::default());
    let def = |component| weir::proto::EnvironmentDef {
        name: "big".into(),
        component,
        config: vec![],
    };
    let bytes = || std::sync::Arc::from(vec![0u8; 4]);
    core.register_environment(def([1; 32]), bytes());
    assert!(core.components().get(&[1; 32]).is_some());
    let replaced = core.register_environment(def([2; 32]), bytes());
    assert_eq!(replaced.map(|d| d.component), Some([1; 32]));
    assert!(core.components().get(&[1; 32]).is_none(), "replaced: gone");
    assert!(core.components().get(&[2; 32]).is_some());
    core.sanity_check().unwrap();
    // A job uses the condition's component as a task component too.
    let mut wasm = group(1, &[]);
    wasm.spec.kind = TaskKind::Wasm { component: [2; 32] };
    core.submit(vec![wasm]).unwrap();
    assert_eq!(core.cancel_job(1), 1);
    core.take_actions();
    core.forget(1).unwrap();
    assert_eq!(
        core.take_actions(),
        [Action::Dropped {
            groups: vec![1],
            components: vec![[2; 32]]
        }]
    );
    assert!(
        core.components().get(&[2; 32]).is_some(),
        "still a condition"
    );
    assert_eq!(
        core.remove_environment("big").map(|d| d.component),
        Some([2; 32])
    );
    assert!(core.components().get(&[2; 32]).is_none(), "removed: gone");
    core.sanity_check().unwrap();
}
