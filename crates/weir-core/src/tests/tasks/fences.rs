//! Fences of silent workers, claims of workers back, finished is finished, condition bytes.

use super::*;

/// One task, fenced for 1,000 ms, with a 100 ms heartbeat timeout.
fn fenced_core() -> Tasks {
    let mut core = Tasks::new(Config {
        heartbeat_timeout_ms: 100,
        idle_silence_ms: 100,
        fence_ms: 1_000,
        ..Config::default()
    });
    core.submit(vec![group(1, &[])]).unwrap();
    core
}

/// A worker (its registration, and its id) that joined at 0 and was handed task 1.
fn joined_with_task_1(core: &mut Tasks) -> (WorkerRegistration, u64) {
    let info = worker(1, &[]);
    let id = core.worker_joined(0, info.clone()).expect("joins").0;
    core.schedule(0);
    core.take_effects();
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
    assert_eq!(dispatched(&core.take_effects())[&b], vec![1]);
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
        assert!(dispatched(&core.take_effects()).is_empty(), "at {now}");
    }
    core.heartbeat(1_200, b);
    core.tick(1_200);
    core.schedule(1_200);
    assert_eq!(dispatched(&core.take_effects())[&b], vec![1]);
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
    assert_eq!(dispatched(&core.take_effects())[&b], vec![1]);
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
    assert!(dispatched(&core.take_effects()).is_empty());
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
    assert_eq!(dispatched(&core.take_effects())[&b], vec![1]);
    // a is back with the outcome: b gives the task up (it is told to stop it) and a's outcome
    // is the result; b's report of its stopped run changes nothing.
    let mut back = info;
    back.finished = vec![1];
    let (a2, refused) = core.worker_joined(2_100, back).expect("joins");
    assert!(refused.is_empty());
    assert!(core.take_effects().contains(&Effect::TakeBack {
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
    assert_eq!(dispatched(&core.take_effects())[&b], vec![2]);
}

/// A condition's bytes live in the one component store while a definition uses them: replaced
/// or removed, they go (unless a held group uses them); a task component that a condition also
/// uses keeps its bytes when its last group is dropped, though the workers forget it as a task
/// component.
#[test]
fn condition_bytes_go_with_their_last_definition() {
    let mut core = Tasks::new(Config::default());
    let def = |component| weir_proto::EnvironmentDef {
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
    core.take_effects();
    core.forget(1).unwrap();
    assert_eq!(
        core.take_effects(),
        [Effect::Dropped {
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

/// Idle workers beat once a lease (`lease::idle_beat`): one that holds nothing is lost only
/// past `idle_silence_ms`; one handed tasks is judged by the heartbeat timeout again, counted
/// from the hand-over (it beat at the idle pace before), and its fence still counts from when
/// it was last heard.
#[test]
fn an_idle_worker_may_be_silent_longer_and_a_busy_one_is_judged_from_its_hand_over() {
    let config = Config {
        heartbeat_timeout_ms: 100,
        idle_silence_ms: 1_000,
        fence_ms: 300,
        ..Config::default()
    };
    let mut core = Tasks::new(config.clone());
    let a = core.worker_joined(0, worker(1, &[])).expect("joins").0;
    let lost = |effects: &[Effect], w: u64| {
        effects
            .iter()
            .any(|e| matches!(e, Effect::Disconnect { worker, .. } if *worker == w))
    };
    // Idle and silent past the heartbeat timeout, within its allowance: kept.
    for now in [101, 500, 1_000] {
        core.tick(now);
        assert!(!lost(&core.take_effects(), a), "at {now}");
    }
    // Handed a task at 900 (silent since 0): judged from 900, not from 0.
    let mut core = Tasks::new(config.clone());
    let a = core.worker_joined(0, worker(1, &[])).expect("joins").0;
    core.submit(vec![group(1, &[])]).unwrap();
    core.schedule(900);
    assert_eq!(dispatched(&core.take_effects())[&a], vec![1]);
    core.tick(1_000);
    assert!(!lost(&core.take_effects(), a));
    // Silent 100 ms past the hand-over: lost, with the busy timeout as the reason.
    core.tick(1_001);
    let effects = core.take_effects();
    assert!(effects.contains(&Effect::Disconnect {
        worker: a,
        reason: "no heartbeat for 100 ms".into()
    }));
    // Its fence counts from 0, when it was last heard: the task is free at once.
    let b = core.worker_joined(1_001, worker(1, &[])).expect("joins").0;
    core.schedule(1_001);
    assert_eq!(dispatched(&core.take_effects())[&b], vec![1]);
    core.sanity_check().unwrap();
    // Past the idle allowance, an idle worker is lost.
    core.finished(1_002, b, 1, ok());
    core.take_effects();
    core.tick(2_002);
    assert!(!lost(&core.take_effects(), b));
    core.tick(2_003);
    assert!(lost(&core.take_effects(), b));
    core.sanity_check().unwrap();
}

/// An idle worker told a slower pace (`lease::idle_pace`, as the cluster grows) is judged by
/// the longer of the last two paces it was told plus the heartbeat timeout (it may have set
/// its next beat before the later answer came), never sooner than `idle_silence_ms`.
#[test]
fn an_idle_worker_told_a_slower_pace_is_judged_by_the_longer_of_its_last_two() {
    let mut core = Tasks::new(Config {
        heartbeat_timeout_ms: 100,
        idle_silence_ms: 1_000,
        fence_ms: 300,
        ..Config::default()
    });
    let a = core.worker_joined(0, worker(1, &[])).expect("joins").0;
    let lost = |core: &mut Tasks, now: u64| {
        core.tick(now);
        core.take_effects()
            .iter()
            .any(|e| matches!(e, Effect::Disconnect { worker, .. } if *worker == a))
    };
    // Told 3 s at registration: silent 3.1 s is allowed, not more.
    core.told_idle_pace(a, 3_000);
    assert!(!lost(&mut core, 3_100));
    core.heartbeat(3_100, a);
    // Told 500 ms in the answer: the 3 s told before still counts (the next beat may have
    // been set by it).
    core.told_idle_pace(a, 500);
    assert!(!lost(&mut core, 6_200));
    core.heartbeat(6_200, a);
    // Told 500 ms twice: the floor, idle_silence_ms (1 s), counts.
    core.told_idle_pace(a, 500);
    assert!(!lost(&mut core, 7_200));
    assert!(lost(&mut core, 7_201));
    core.sanity_check().unwrap();
}
