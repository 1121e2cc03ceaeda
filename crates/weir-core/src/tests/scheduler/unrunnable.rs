//! Queued tasks nothing can run: told to a waiting client once, never while verdicts are
//! pending, nor in an empty cluster, nor just after a restart.

use super::*;

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

/// Just after a restart, the workers of the previous run (and the tasks they run under their
/// leases) are still coming back: a waiting client is not told its tasks can run nowhere until
/// the restart's grace (`Config::restart_grace_ms`, 20 s here) has passed, even with a manager
/// back that could not serve them. Then it is, as on any other start.
#[test]
fn after_a_restart_no_task_is_unrunnable_until_the_previous_workers_could_be_back() {
    let mut before = Scheduler::new(config(true));
    let actions = round(&mut before, 0, vec![from_client(1, submit(3))]);
    let records = journaled(&actions);
    assert!(!records.is_empty());
    let mut core = Scheduler::new(config(true));
    for record in records {
        core.handle(10, Input::Replay(record));
    }
    core.handle(10, Input::Replayed);
    core.take_actions();
    // A manager the policy does not list (it would start nothing for them) is back first.
    round(
        &mut core,
        10,
        vec![
            manager_joins(manager("m2")),
            from_client(2, Request::Wait { job: 1 }),
        ],
    );
    let told = |core: &mut Scheduler, at: u64| {
        core.handle(at, Input::Timeout);
        let actions = core.take_actions();
        replies(&actions, 2)
            .iter()
            .any(|(r, _)| matches!(r, Response::Unrunnable { .. }))
    };
    for at in (500..20_010).step_by(500) {
        assert!(!told(&mut core, at), "told at {at}, within the grace");
    }
    // Past the grace, and the 2 s it must hold: told.
    let mut at = 20_010;
    while !told(&mut core, at) {
        at += 500;
        assert!(
            at <= 20_010 + crate::scheduler::UNRUNNABLE_AFTER_MS + 1_000,
            "never told"
        );
    }
    // A new journal (no job came back: a first start, a replica cluster's first term) has no
    // previous run to wait for: told after the 2 s, as without a journal.
    let mut fresh = Scheduler::new(config(true));
    fresh.handle(10, Input::Replayed);
    fresh.take_actions();
    round(
        &mut fresh,
        10,
        vec![
            manager_joins(manager("m2")),
            from_client(1, submit(3)),
            from_client(2, Request::Wait { job: 1 }),
        ],
    );
    let mut at = 10;
    while !told(&mut fresh, at) {
        at += 500;
        assert!(
            at <= 10 + crate::scheduler::UNRUNNABLE_AFTER_MS + 1_000,
            "not told within the 2 s rule on a new journal"
        );
    }
}
