//! A policy's drain (`decision.drain`, weir:plugin@0.2.0): drained workers take no new task,
//! are taken back when a decision no longer names them, and no decision drains more than the
//! manager's budget (`scheduler --max-drain-percent`) or anything but its live workers.

use super::*;
use crate::scaling::Snapshot;
use proptest::prelude::*;
use std::sync::Arc;

/// Manager `m1` with `count` one-slot workers registered; their ids in order.
pub(super) fn with_workers(count: usize, percent: u32) -> (Scheduler, Vec<u64>) {
    let mut config = config(false);
    config.max_drain_percent = percent;
    let mut core = Scheduler::new(config);
    let names: Vec<String> = (1..=count).map(|i| format!("m1-7-{i}")).collect();
    let mut state = manager("m1");
    state.max_task_concurrency = 100;
    state.workers = names.clone();
    let mut inputs = vec![manager_joins(state)];
    for (i, name) in names.iter().enumerate() {
        let mut info = worker(name, 1);
        info.manager = Some("m1".into());
        inputs.push(join(i as u64 + 1, info));
    }
    let actions = round(&mut core, 0, inputs);
    let ids = actions
        .iter()
        .filter_map(|a| match a {
            Action::Registered { worker, .. } => Some(*worker),
            _ => None,
        })
        .collect();
    (core, ids)
}

/// The snapshot the core hands the policy at `now` (it must be asking).
fn snapshot_at(core: &mut Scheduler, now: u64) -> Arc<Snapshot> {
    core.handle(now, Input::Timeout);
    core.take_actions()
        .into_iter()
        .find_map(|a| match a {
            Action::Decide(snapshot) => Some(snapshot),
            _ => None,
        })
        .unwrap_or_else(|| panic!("no snapshot asked for at {now}"))
}

fn decided(core: &mut Scheduler, now: u64, drain: Vec<u64>) -> Vec<Action> {
    let decision = Decision {
        manager_id: "m1".into(),
        desired_workers: 10,
        drain,
        reason: "test".into(),
        ..Default::default()
    };
    let result = Ok(vec![decision]);
    round(core, now, vec![Input::Decided { result }])
}

/// The workers sent tasks among `actions`, each once, in id order.
fn sent_tasks(actions: &[Action]) -> Vec<u64> {
    let mut workers: Vec<u64> = assigned(actions).into_iter().map(|(w, _)| w).collect();
    workers.sort_unstable();
    workers.dedup();
    workers
}

#[test]
fn a_drained_worker_takes_no_new_task_until_a_decision_no_longer_names_it() {
    let (mut core, ids) = with_workers(2, 10);
    let snapshot = snapshot_at(&mut core, 1_000);
    // 10 % of 2 live workers, rounded up.
    assert_eq!(snapshot.managers[0].drain_budget, 1);
    assert!(snapshot.managers[0].drained.is_empty());
    decided(&mut core, 1_001, vec![ids[0]]);
    let actions = round(&mut core, 1_002, vec![from_client(1, submit(3))]);
    assert_eq!(sent_tasks(&actions), vec![ids[1]], "only the open worker");
    // The policy is shown what it drained.
    let snapshot = snapshot_at(&mut core, 2_000);
    assert_eq!(snapshot.managers[0].drained, vec![ids[0]]);
    // Named again: still drained, still nothing for it.
    let actions = decided(&mut core, 2_001, vec![ids[0]]);
    assert_eq!(sent_tasks(&actions), Vec::<u64>::new());
    // Not named: taken back, and the queued tasks reach it at once.
    snapshot_at(&mut core, 3_000);
    let actions = decided(&mut core, 3_001, vec![]);
    assert_eq!(sent_tasks(&actions), vec![ids[0]]);
    assert!(snapshot_at(&mut core, 4_000).managers[0].drained.is_empty());
}

#[test]
fn a_drain_past_the_budget_or_of_another_managers_worker_is_refused_and_nothing_drained() {
    let (mut core, ids) = with_workers(3, 34);
    let snapshot = snapshot_at(&mut core, 1_000);
    // 34 % of 3 = 1.02, rounded up: 2.
    assert_eq!(snapshot.managers[0].drain_budget, 2);
    decided(&mut core, 1_001, ids.clone());
    let error = core.status(1_002).policy_error.expect("refused");
    assert!(
        error.contains("drains 3 workers of manager `m1`; its drain budget (scheduler --max-drain-percent) allows 2"),
        "{error}"
    );
    snapshot_at(&mut core, 2_000);
    decided(&mut core, 2_001, vec![99]);
    let error = core.status(2_002).policy_error.expect("refused");
    assert!(
        error.contains("drains `99`, which is not a live worker"),
        "{error}"
    );
    snapshot_at(&mut core, 3_000);
    decided(&mut core, 3_001, vec![ids[1], ids[1]]);
    assert!(core.status(3_002).policy_error.is_some());
    // None of those took effect: every worker takes tasks.
    let actions = round(&mut core, 3_002, vec![from_client(1, submit(3))]);
    assert_eq!(sent_tasks(&actions), ids);
    // With 0 %, no policy may drain at all.
    let (mut core, ids) = with_workers(3, 0);
    assert_eq!(snapshot_at(&mut core, 1_000).managers[0].drain_budget, 0);
    decided(&mut core, 1_001, vec![ids[0]]);
    assert!(core.status(1_002).policy_error.is_some());
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(64))]
    /// Whatever a policy asks to drain, tick after tick: what the core holds drained is
    /// exactly the last decision's drain if it was accepted (nothing if refused), never more
    /// than the budget, and no task is ever sent to a drained worker.
    #[test]
    fn drained_workers_are_the_last_accepted_drain_within_the_budget_and_get_no_task(
        percent in 0u32..=100,
        count in 1usize..6,
        asks in prop::collection::vec(prop::collection::vec(0usize..7, 0..5), 1..8),
    ) {
        let (mut core, ids) = with_workers(count, percent);
        let mut accepted: Vec<u64> = Vec::new();
        let mut now = 1_000;
        for (step, ask) in asks.iter().enumerate() {
            let snapshot = snapshot_at(&mut core, now);
            let budget = crate::scaling::drain_budget(percent, count);
            prop_assert_eq!(snapshot.managers[0].drain_budget, budget);
            prop_assert_eq!(&snapshot.managers[0].drained, &accepted);
            prop_assert!(accepted.len() <= budget as usize);
            // Indexes past the ids name workers that are not there (99, 100, ...).
            let drain: Vec<u64> = ask.iter().map(|&i| ids.get(i).copied().unwrap_or(99 + i as u64)).collect();
            let errors = core.policy_errors();
            let actions = decided(&mut core, now + 1, drain.clone());
            let refused = core.policy_errors() > errors;
            let mut unique = drain.clone();
            unique.sort_unstable();
            unique.dedup();
            let valid = unique.len() == drain.len()
                && drain.len() <= budget as usize
                && drain.iter().all(|w| ids.contains(w));
            prop_assert_eq!(refused, !valid, "step {}: drain {:?}", step, drain);
            // A refused decision releases every drain (they fail open).
            accepted = if valid { unique } else { Vec::new() };
            // Some work each step, and what ran finishes: never a task for a drained worker.
            let mut sent = assigned(&actions);
            sent.extend(assigned(&round(&mut core, now + 2, vec![from_client(1, submit(2))])));
            prop_assert!(sent.iter().all(|(w, _)| !accepted.contains(w)), "sent {:?}, drained {:?}", sent, accepted);
            let done = sent.into_iter().map(|(worker, task)| Input::Finished { worker, results: vec![(task, ok())] }).collect();
            round(&mut core, now + 3, done);
            now += 1_000;
        }
    }
}

#[test]
fn a_drain_fails_open_when_the_policy_fails_or_leaves_the_manager_out() {
    let (mut core, ids) = with_workers(2, 50);
    snapshot_at(&mut core, 1_000);
    decided(&mut core, 1_001, vec![ids[0]]);
    assert_eq!(
        snapshot_at(&mut core, 2_000).managers[0].drained,
        vec![ids[0]]
    );
    // The policy fails: the drain no longer holds.
    let result = Err(PolicyFailure::Unasked);
    round(&mut core, 2_001, vec![Input::Decided { result }]);
    assert!(snapshot_at(&mut core, 3_000).managers[0].drained.is_empty());
    // Drained again, then decisions that do not name the manager: taken back.
    decided(&mut core, 3_001, vec![ids[1]]);
    assert_eq!(
        snapshot_at(&mut core, 4_000).managers[0].drained,
        vec![ids[1]]
    );
    let actions = round(
        &mut core,
        4_001,
        vec![Input::Decided { result: Ok(vec![]) }],
    );
    assert!(actions.iter().all(|a| !matches!(a, Action::Decide(_))));
    let actions = round(&mut core, 4_002, vec![from_client(1, submit(2))]);
    assert_eq!(sent_tasks(&actions), ids, "both take tasks again");
}
