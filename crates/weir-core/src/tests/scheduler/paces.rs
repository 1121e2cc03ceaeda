//! Idle peers at a pace the cluster's size sets: what idle workers and managers are told, and
//! how their silence is judged by it (`crate::lease::idle_pace`, `crate::lease::manager_pace`).

use super::*;

/// Idle workers are asked to beat less often as the cluster grows (`lease::idle_pace`): at
/// registration, and again in every answer to a renewal, so a worker that joined a small
/// cluster slows down with it; and a worker told a pace past its lease is not taken for lost
/// while it keeps to it.
#[test]
fn idle_workers_are_told_a_slower_pace_as_the_cluster_grows_and_judged_by_it() {
    let mut config = config(false);
    // 5 s a worker: 9 s (the lease's pace) for one, 10 s for two, 15 s for three.
    config.idle_pace_per_worker_us = 5_000_000;
    config.tasks.heartbeat_timeout_ms = 5_000;
    config.tasks.idle_silence_ms = 14_000;
    let mut core = Scheduler::new(config);
    let paces = |actions: &[Action]| -> Vec<(u64, u64)> {
        actions
            .iter()
            .filter_map(|a| match a {
                Action::ToWorker {
                    worker,
                    message: ToWorker::Registered { idle_beat_ms, .. },
                }
                | Action::ToWorker {
                    worker,
                    message: ToWorker::Lease { idle_beat_ms, .. },
                } => Some((*worker, *idle_beat_ms)),
                _ => None,
            })
            .collect()
    };
    let renew = |worker, seq| Input::Heartbeat {
        worker,
        renew: Some(seq),
    };
    assert_eq!(
        paces(&round(&mut core, 0, vec![join(1, worker("a", 1))])),
        [(1, 9_000)]
    );
    assert_eq!(
        paces(&round(&mut core, 10, vec![join(2, worker("b", 1))])),
        [(2, 10_000)]
    );
    assert_eq!(
        paces(&round(&mut core, 20, vec![join(3, worker("c", 1))])),
        [(3, 15_000)]
    );
    // The first worker learns the new pace with its next answer.
    assert_eq!(
        paces(&round(&mut core, 100, vec![renew(1, 1)])),
        [(1, 15_000)]
    );
    // Silent 19.9 s, within the 15 s it was told plus the 5 s heartbeat timeout: kept; the
    // others, silent since they joined, likewise within theirs.
    let gone = |actions: &[Action]| {
        actions
            .iter()
            .filter_map(|a| match a {
                Action::CloseWorker { worker } => Some(*worker),
                _ => None,
            })
            .collect::<Vec<_>>()
    };
    assert!(gone(&round(&mut core, 14_000, vec![Input::Timeout])).is_empty());
    assert_eq!(gone(&round(&mut core, 15_100, vec![Input::Timeout])), [2]);
    assert!(gone(&round(&mut core, 20_000, vec![Input::Timeout])).is_empty());
    assert_eq!(
        gone(&round(&mut core, 20_500, vec![Input::Timeout])),
        [1, 3]
    );
}

/// Managers with nothing new report at a pace the cluster's size sets, as idle workers beat:
/// told when they join and again when the pace moves by more than an eighth, and judged offline
/// (and forgotten) by the longer of the last two paces told.
#[test]
fn managers_are_told_a_slower_pace_as_the_cluster_grows_and_judged_by_it() {
    let mut config = config(false);
    // 5 s a peer: 5 s for one manager, 10 s for two; offline after the pace and 2.5 s.
    config.idle_pace_per_worker_us = 5_000_000;
    config.manager_timeout_ms = 5_000;
    config.manager_forget_ms = 60_000;
    config.tick_ms = 1;
    let mut core = Scheduler::new(config);
    let paces = |actions: &[Action]| -> Vec<(String, u64)> {
        (actions.iter())
            .filter_map(|a| match a {
                Action::ToManager {
                    manager,
                    message: ToManager::Pace { beat_ms },
                } => Some((manager.clone(), *beat_ms)),
                _ => None,
            })
            .collect()
    };
    let second = || manager_joins_on(1_001, manager("m2"));
    let report = |id: &str| Input::ManagerHeartbeat { state: manager(id) };
    let joined = round(&mut core, 0, vec![manager_joins(manager("m1"))]);
    assert_eq!(paces(&joined), [("m1".to_string(), 5_000)]);
    assert_eq!(
        paces(&round(&mut core, 10, vec![second()])),
        [("m2".to_string(), 10_000)]
    );
    // The first learns the new pace with its next report, and is not told it again.
    assert_eq!(
        paces(&round(&mut core, 100, vec![report("m1")])),
        [("m1".to_string(), 10_000)]
    );
    assert!(paces(&round(&mut core, 200, vec![report("m1")])).is_empty());
    let online = |core: &Scheduler, now: u64| -> Vec<(String, bool)> {
        let status = core.status(now);
        (status.managers.iter())
            .map(|m| (m.id.clone(), m.online))
            .collect()
    };
    let (yes, no) = (true, false);
    // 12.5 s of silence allowed (the 10 s pace and half the timeout): m2 since it joined at
    // 10, m1 since its last report at 200.
    assert_eq!(
        online(&core, 12_510),
        [("m1".into(), yes), ("m2".into(), yes)]
    );
    assert_eq!(
        online(&core, 12_511),
        [("m1".into(), yes), ("m2".into(), no)]
    );
    assert_eq!(
        online(&core, 12_701),
        [("m1".into(), no), ("m2".into(), no)]
    );
    // Forgotten once silent for a minute and what the pace adds to the timeout (7.5 s), not
    // a minute after last heard.
    round(&mut core, 67_500, vec![Input::Timeout]);
    assert_eq!(online(&core, 67_500).len(), 2);
    round(&mut core, 67_600, vec![Input::Timeout]);
    assert_eq!(online(&core, 67_600), [("m1".into(), no)]);
    round(&mut core, 67_701, vec![Input::Timeout]);
    assert!(online(&core, 67_701).is_empty());
}

/// A manager silent past its allowance has its connection closed by the core (once), so its
/// restart is let in at once: QUIC's idle timeout, which a manager no longer shortens, would
/// have kept its id taken for 70 s, past `--manager-forget-after`.
#[test]
fn a_manager_silent_past_its_pace_has_its_connection_closed_and_its_restart_let_in() {
    let mut config = config(false);
    config.manager_timeout_ms = 5_000;
    config.tick_ms = 1;
    let mut core = Scheduler::new(config);
    let closed = |actions: &[Action]| -> Vec<String> {
        (actions.iter())
            .filter_map(|a| match a {
                Action::CloseManager { manager } => Some(manager.clone()),
                _ => None,
            })
            .collect()
    };
    let restart = || manager_joins_on(1_001, manager("m"));
    let registered = |actions: &[Action]| {
        (actions.iter()).any(|a| {
            matches!(
                a,
                Action::ManagerRegistered {
                    connection: 1_001,
                    ..
                }
            )
        })
    };
    round(&mut core, 0, vec![manager_joins(manager("m"))]);
    // Within the 5 s allowance of a small cluster: kept; its restart is refused (a twin).
    assert!(closed(&round(&mut core, 5_000, vec![Input::Timeout])).is_empty());
    assert!(!registered(&round(&mut core, 5_000, vec![restart()])));
    // Past it: closed once, not at every tick until the shell says the connection is gone.
    assert_eq!(
        closed(&round(&mut core, 5_001, vec![Input::Timeout])),
        ["m"]
    );
    assert!(closed(&round(&mut core, 5_002, vec![Input::Timeout])).is_empty());
    round(
        &mut core,
        5_010,
        vec![Input::ManagerGone { id: "m".into() }],
    );
    assert!(registered(&round(&mut core, 5_020, vec![restart()])));
    // Its new connection is judged afresh.
    assert!(closed(&round(&mut core, 9_000, vec![Input::Timeout])).is_empty());
    assert_eq!(
        closed(&round(&mut core, 10_021, vec![Input::Timeout])),
        ["m"]
    );
}

/// A cluster that shrinks asks its managers for a faster pace, and once a manager's report
/// shows it follows it (heard later than the earlier pace allowed), it is judged by it alone:
/// a dead manager is seen at the new pace, not the old.
#[test]
fn a_manager_told_a_faster_pace_is_judged_by_it_once_it_follows_it() {
    let mut config = config(false);
    // 5 s a peer: 10 s with two managers, 5 s with one; offline after the pace and 2.5 s.
    config.idle_pace_per_worker_us = 5_000_000;
    config.manager_timeout_ms = 5_000;
    let mut core = Scheduler::new(config);
    let report = |id: &str| Input::ManagerHeartbeat { state: manager(id) };
    let second = manager_joins_on(1_001, manager("m2"));
    round(&mut core, 0, vec![manager_joins(manager("m1")), second]);
    round(&mut core, 100, vec![report("m1")]);
    // m2 leaves: m1's next report is told 5 s, and it is judged by the longer 10 s meanwhile.
    round(
        &mut core,
        200,
        vec![Input::ManagerGoodbye { id: "m2".into() }],
    );
    round(&mut core, 1_000, vec![report("m1")]);
    let online = |core: &Scheduler, now: u64| core.status(now).managers[0].online;
    assert!(online(&core, 1_000 + 12_500));
    // A report 10 s after it was told follows the new pace: 7.5 s allowed from then on.
    round(&mut core, 11_001, vec![report("m1")]);
    assert!(online(&core, 11_001 + 7_500));
    assert!(!online(&core, 11_001 + 7_501));
}
