//! Explain while verdicts are pending, per-task inputs, allocations that end (walltimes), unique
//! worker names, drained workers taken back.

use super::*;

#[test]
fn explain_never_contradicts_itself_while_verdicts_are_pending() {
    let mut core = Tasks::new(Config::default());
    core.register_environment(
        weir_proto::EnvironmentDef {
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
    let mut placed = dispatched(&core.take_effects())[&w].clone();
    placed.sort();
    assert_eq!(
        placed,
        vec![2, 3, 4],
        "the 5 s task, the one without a timeout, and the 10 s one that ends with the worker"
    );
    // A worker without an end takes the long one.
    let other = core.worker_joined(7_000, worker(8, &[])).expect("joins").0;
    core.schedule(7_000);
    assert_eq!(dispatched(&core.take_effects())[&other], vec![1]);
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
    assert_eq!(dispatched(&core.take_effects())[&w], vec![3]);
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
        .demand(0)
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
    assert_eq!(dispatched(&core.take_effects())[&a], vec![1]);
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
        dispatched(&core.take_effects()).is_empty(),
        "draining: no task"
    );
    core.heartbeat(19_000, w);
    core.tick(19_000);
    core.schedule(19_000);
    assert!(dispatched(&core.take_effects()).is_empty());
    // Still here 20 s on (a unit whose other worker is busy cannot be stopped alone).
    core.heartbeat(20_000, w);
    core.tick(20_000);
    core.schedule(20_000);
    assert_eq!(dispatched(&core.take_effects())[&w], vec![1]);
    core.sanity_check().unwrap();
}
