//! The lease: it runs from the request and past it everything is given up; the kill margin;
//! runs claimed across sessions, and lapses the guard counted.

use super::*;

#[test]
fn the_lease_runs_from_the_request_and_past_it_everything_is_given_up() {
    let mut w = worker(1);
    let out = registered(&mut w, 100);
    assert!(matches!(out[..], [_, Action::LeaseUntil(until), ..] if until == 100 + LEASE));
    w.handle(200, run(&[1, 2]));
    actions(&mut w);
    // A renewal asked at 1 100, answered 5 s later: it runs from the asking.
    w.handle(1_100, Input::Timeout);
    let seq = renewal(&actions(&mut w));
    let seq = seq.unwrap_or_default();
    w.handle(6_100, answer(seq));
    let out = actions(&mut w);
    assert!(matches!(out[..], [Action::LeaseUntil(until)] if until == 1_100 + LEASE));
    assert!(w.lease_valid(11_099));
    assert!(!w.lease_valid(11_100));
    w.handle(11_100, Input::Timeout);
    let out = actions(&mut w);
    assert!(
        matches!(
            out[..],
            [
                Action::GiveUp { task: 1, run: 1 },
                Action::End(End::LeaseExpired)
            ]
        ),
        "{out:?}"
    );
    assert_eq!(w.running().count(), 0);
    // The run's end after the lease is not its outcome: it runs elsewhere.
    w.handle(11_200, Input::SessionEnded { stopping: false });
    w.handle(11_300, ended(1, 1, 11_150));
    w.handle(11_400, Input::Connected);
    let out = actions(&mut w);
    let Some(Action::Send(FromWorker::Register(info))) = out.first() else {
        panic!("{out:?}");
    };
    assert!(
        info.running.is_empty() && info.finished.is_empty(),
        "{info:?}"
    );
}

#[test]
fn a_run_that_ends_by_itself_within_the_kill_margin_counts_a_killed_one_does_not() {
    let margin = crate::lease::KILL_MARGIN.as_millis() as u64;
    for (outcome, counts) in [
        (ok(), true),
        (
            Outcome::Exited {
                code: None,
                stdout: vec![],
                stderr: vec![],
            },
            false,
        ),
    ] {
        let mut w = worker(1);
        registered(&mut w, 0);
        w.handle(0, run(&[1]));
        actions(&mut w);
        let at = LEASE + margin / 2;
        w.handle(
            at,
            Input::TaskEnded {
                task: 1,
                run: 1,
                outcome,
                at,
            },
        );
        let out = actions(&mut w);
        let gave_up = out
            .iter()
            .any(|a| matches!(a, Action::End(End::LeaseExpired)));
        assert_eq!(gave_up, !counts, "{out:?}");
        assert_eq!(finished(&out).len(), usize::from(counts), "{out:?}");
    }
}

#[test]
fn between_sessions_a_held_task_starts_within_the_lease_and_both_are_claimed() {
    let mut w = worker(1);
    registered(&mut w, 0);
    w.handle(0, run(&[1, 2]));
    actions(&mut w);
    w.handle(100, Input::SessionEnded { stopping: false });
    actions(&mut w);
    w.handle(200, ended(1, 1, 200));
    let out = actions(&mut w);
    assert_eq!(started(&out), [(2, 2)], "{out:?}");
    assert!(out.iter().all(|a| !matches!(a, Action::Send(_))), "{out:?}");
    w.sanity_check(200);
    w.handle(300, Input::Connected);
    let out = actions(&mut w);
    let Some(Action::Send(FromWorker::Register(info))) = out.first() else {
        panic!("{out:?}");
    };
    assert_eq!(
        (info.running.as_slice(), info.finished.as_slice()),
        (&[2][..], &[1][..])
    );
    // Past the lease nothing starts, connected or not.
    let mut w = worker(1);
    registered(&mut w, 0);
    w.handle(0, run(&[1, 2]));
    w.handle(100, Input::SessionEnded { stopping: false });
    actions(&mut w);
    w.handle(LEASE + 1, ended(1, 1, LEASE - 1));
    assert!(started(&actions(&mut w)).is_empty());
}

/// A run claimed as running by a registration, killed past the lease before the answer came:
/// its outcome is not reported (it may run elsewhere), and the scheduler has adopted the claim,
/// so the worker registers again at once, claiming nothing. (Judged from the claim: with
/// nothing held any more, the task stayed adopted here with nothing left to report it.)
#[test]
fn a_claimed_run_ended_past_the_lease_while_registering_makes_the_worker_register_again() {
    let mut w = worker(1);
    registered(&mut w, 100);
    w.handle(200, run(&[1]));
    assert_eq!(started(&actions(&mut w)), [(1, 1)]);
    // The connection breaks; the next one registers while the lease (to 10 100) still holds.
    w.handle(5_000, Input::SessionEnded { stopping: false });
    w.handle(9_000, Input::Connected);
    let out = actions(&mut w);
    let info = out.iter().find_map(|a| match a {
        Action::Send(FromWorker::Register(info)) => Some(info),
        _ => None,
    });
    assert_eq!(info.map(|i| i.running.clone()), Some(vec![1]), "{out:?}");
    // The answer is late: the lease ends, the guard kills the run, its end is read.
    let killed = Outcome::Exited {
        code: None,
        stdout: vec![],
        stderr: vec![],
    };
    w.handle(
        10_300,
        Input::TaskEnded {
            task: 1,
            run: 1,
            outcome: killed,
            at: 10_250,
        },
    );
    actions(&mut w);
    w.handle(
        10_500,
        Input::Frame(ToWorker::Registered {
            id: 2,
            lease_ms: LEASE,
            idle_beat_ms: IDLE_BEAT,
        }),
    );
    let out = actions(&mut w);
    assert!(
        out.iter()
            .any(|a| matches!(a, Action::End(End::LeaseExpired))),
        "{out:?}"
    );
    assert!(finished(&out).is_empty(), "{out:?}");
}

/// The lease ran out between the core's step and the shell's renewal of the guard: the guard
/// counted a lapse (it may have killed the run) that the core had not. Told so, the core takes
/// the run handed over before as ended out of the lease: its outcome is not reported (it runs
/// elsewhere), and the worker registers again.
#[test]
fn a_lapse_the_guard_counted_at_a_late_renewal_voids_the_runs_handed_over_before() {
    let mut w = worker(1);
    registered(&mut w, 100);
    w.handle(200, run(&[1]));
    assert_eq!(started(&actions(&mut w)), [(1, 1)]);
    w.handle(1_100, Input::Timeout);
    let seq = renewal(&actions(&mut w));
    // Answered just before the end (10 100): the core renews, the guard is told just after.
    w.handle(10_099, answer(seq.unwrap_or_default()));
    actions(&mut w);
    assert_eq!(w.lapses(), 0);
    w.handle(10_101, Input::Lapsed { lapses: 1 });
    assert_eq!(w.lapses(), 1);
    let killed = Outcome::Exited {
        code: None,
        stdout: vec![],
        stderr: vec![],
    };
    w.handle(
        10_102,
        Input::TaskEnded {
            task: 1,
            run: 1,
            outcome: killed,
            at: 10_101,
        },
    );
    let out = actions(&mut w);
    assert!(finished(&out).is_empty(), "{out:?}");
    assert!(
        out.iter()
            .any(|a| matches!(a, Action::End(End::LeaseExpired))),
        "{out:?}"
    );
    // A count that is not ahead changes nothing.
    w.handle(10_200, Input::Lapsed { lapses: 0 });
    assert_eq!(w.lapses(), 1);
}
