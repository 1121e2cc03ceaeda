//! Demand that asks for environments: placed first where it can run, never scaled for where
//! it cannot, and one worker started to learn an unknown verdict (kept until it answers).

use super::*;

#[test]
fn constrained_demand_is_placed_first_and_no_match_is_never_scaled_for_it() {
    let content = "1, big\n1, small\n";
    let mut big = manager("big", "big", 3, 1);
    big.environments = vec![("large".into(), Verdict::Match)];
    let mut small = manager("small", "small", 3, 1);
    small.environments = vec![("large".into(), Verdict::NoMatch)];
    let constrained = Demand {
        environments: vec!["large".into()],
        ..queued(3)
    };
    // Listed after the unconstrained group, still placed first: it can only go to `big`.
    let got = decide(
        Flavor::WorkerType,
        content,
        &snapshot(
            vec![big.clone(), small.clone()],
            vec![queued(3), constrained.clone()],
        ),
    );
    assert_eq!(desired(&got), vec![("big", 3), ("small", 3)]);
    // Only constrained demand: `small` (no-match) gets nothing even with room.
    let got = decide(
        Flavor::WorkerType,
        content,
        &snapshot(
            vec![big, small],
            vec![Demand {
                queued: 5,
                ..constrained
            }],
        ),
    );
    assert_eq!(desired(&got), vec![("big", 3), ("small", 0)]);
}

#[test]
fn unknown_verdict_gets_one_worker_to_learn() {
    let content = "1, fresh\n2, known\n";
    let mut fresh = manager("fresh", "fresh", 10, 2);
    let mut known = manager("known", "known", 10, 1);
    known.environments = vec![("gpu-driver".into(), Verdict::Match)];
    let demand = Demand {
        environments: vec!["gpu-driver".into()],
        ..queued(6)
    };
    // `fresh` has never evaluated gpu-driver: one 2-slot worker to find out; the rest waits for it.
    let got = decide(
        Flavor::WorkerType,
        content,
        &snapshot(vec![fresh.clone(), known.clone()], vec![demand.clone()]),
    );
    assert_eq!(desired(&got), vec![("fresh", 1), ("known", 0)]);
    // Its worker is up and still has not answered: the rest spills to the tier that matches.
    fresh.workers = vec![Worker {
        time_left_ms: None,
        id: 31,
        slots: 2,
        busy: 2,
        idle_ms: 0,
    }];
    let got = decide(
        Flavor::WorkerType,
        content,
        &snapshot(vec![fresh, known], vec![demand]),
    );
    assert_eq!(desired(&got), vec![("fresh", 1), ("known", 6)]);
}

#[test]
fn the_worker_learning_a_verdict_is_kept_until_it_answers() {
    let content = "1, fresh\n";
    let demand = Demand {
        environments: vec!["big".into()],
        ..queued(3)
    };
    // Still starting (or registered and still evaluating, which the scheduler reports as
    // starting): not cancelled, or the next decision would start another to ask again.
    let mut fresh = manager("fresh", "fresh", 2, 1);
    fresh.starting = 1;
    let got = decide(
        Flavor::WorkerType,
        content,
        &snapshot(vec![fresh.clone()], vec![demand.clone()]),
    );
    assert_eq!(desired(&got), vec![("fresh", 1)]);
    // It answered `no-match`: nothing holds it, and once idle past the delay it is stopped.
    fresh.starting = 0;
    fresh.workers = vec![idle(7, 1, 60_000)];
    fresh.environments = vec![("big".into(), Verdict::NoMatch)];
    let got = decide(
        Flavor::WorkerType,
        content,
        &snapshot(vec![fresh], vec![demand]),
    );
    assert_eq!(got, vec![("fresh".to_string(), 0, vec![7])]);
}
