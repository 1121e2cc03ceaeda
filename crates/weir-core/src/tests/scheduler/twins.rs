//! A manager's report of a worker gone, and which process it means: two processes may hold one
//! name (a twin manager, started with an id in use, names its workers as the first does). Only
//! a report of the registered process's own instance requeues its tasks at once.

use super::*;

const FENCE_MS: u64 = 30_000;

/// Manager `m1`'s worker `m1-1` (instance 7) runs the one task submitted. Returns the core.
fn one_task_on_a_managed_worker() -> Scheduler {
    let mut cfg = config(false);
    cfg.tasks.fence_ms = FENCE_MS;
    (cfg.tick_ms, cfg.scaling_ms) = (10_000, None);
    let mut core = Scheduler::new(cfg);
    let mut info = worker("m1-1", 1);
    (info.manager, info.instance) = (Some("m1".into()), 7);
    let mut listed = manager("m1");
    listed.workers = vec!["m1-1".into()];
    listed.instances = vec![("m1-1".into(), 7)];
    round(&mut core, 0, vec![manager_joins(listed)]);
    let actions = round(&mut core, 0, vec![join(1, info), from_client(1, submit(1))]);
    assert_eq!(runs(&actions).len(), 1);
    core
}

/// Manager `m1` reports `m1-1` exited, naming `instances` of it, at 1 s: the first process
/// (`twin`: false), or a second one of the id, let in once the first's connection is gone (as
/// when it timed out in a partition). Then another worker joins. Returns what the report and
/// the join asked for.
fn reported_exited(
    core: &mut Scheduler,
    twin: bool,
    instances: &[u64],
) -> (Vec<Action>, Vec<Action>) {
    let mut report = manager("m1");
    report.exited = vec!["m1-1".into()];
    report.instances = instances.iter().map(|i| ("m1-1".into(), *i)).collect();
    let inputs = match twin {
        true => vec![
            Input::ManagerGone { id: "m1".into() },
            manager_joins(report),
        ],
        false => vec![Input::ManagerHeartbeat { state: report }],
    };
    let reported = round(core, 1_000, inputs);
    let joined = round(core, 1_000, vec![join(2, worker("other", 1))]);
    (reported, joined)
}

fn closes_the_worker(actions: &[Action]) -> bool {
    actions
        .iter()
        .any(|a| matches!(a, Action::CloseWorker { worker: 1 }))
}

#[test]
fn a_report_of_the_registered_process_gone_requeues_its_task_at_once() {
    let mut core = one_task_on_a_managed_worker();
    let (reported, joined) = reported_exited(&mut core, false, &[7]);
    assert!(closes_the_worker(&reported));
    assert_eq!(runs(&joined).len(), 1, "requeued at once");
}

/// The hazard: a twin's report of its own process of the name. Before the instances, the
/// scheduler took the first's worker for gone and ran its task on `other` while it still ran.
#[test]
fn a_report_of_another_process_of_the_name_leaves_the_registered_one_be() {
    let mut core = one_task_on_a_managed_worker();
    let (reported, joined) = reported_exited(&mut core, true, &[8]);
    assert!(!closes_the_worker(&reported), "{reported:#?}");
    assert!(runs(&joined).is_empty(), "the task ran a second time");
    assert_eq!(core.tasks().worker_ids().len(), 2, "m1-1 is still there");
    // Reported again, as a live twin does every heartbeat: still not this one.
    let mut again = manager("m1");
    again.exited = vec!["m1-1".into()];
    again.instances = vec![("m1-1".into(), 8), ("m1-1".into(), 9)];
    let heartbeat = Input::ManagerHeartbeat { state: again };
    let actions = round(&mut core, 2_000, vec![heartbeat, Input::Timeout]);
    assert!(!closes_the_worker(&actions));
    assert!(runs(&actions).is_empty());
}

/// A report that names no process (a cluster engine's unit, one adopted after a restart) may
/// be about another process of the name: the worker is taken for lost as if its connection
/// broke — closed, its task fenced from when it was last heard, then run elsewhere.
#[test]
fn a_report_naming_no_process_fences_the_registered_one_like_a_broken_connection() {
    let mut core = one_task_on_a_managed_worker();
    let (reported, joined) = reported_exited(&mut core, true, &[]);
    assert!(closes_the_worker(&reported), "{reported:#?}");
    assert!(runs(&joined).is_empty(), "run again before the fence");
    // Last heard when it joined, at 0. (A worker that joins just before the fence: `other`
    // has been silent too long by then.)
    let before = round(&mut core, FENCE_MS - 1, vec![join(3, worker("late", 1))]);
    assert!(runs(&before).is_empty(), "run again before the fence");
    let after = round(&mut core, FENCE_MS, vec![Input::Timeout]);
    assert_eq!(runs(&after).len(), 1, "run again once fenced");
}
