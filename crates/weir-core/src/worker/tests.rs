//! The worker's core by its entry point alone: what it sends, starts and gives up, on a clock
//! the test moves.

use super::*;
use weir_proto::{Assignment, FromWorker, Outcome, ToWorker, WorkerRegistration};

const LEASE: u64 = 10_000;
/// What the scheduler asks of an idle worker with that lease (`lease::idle_beat`).
const IDLE_BEAT: u64 = 9_000;

fn worker(slots: u32) -> WorkerCore {
    WorkerCore::new(Config {
        info: WorkerRegistration {
            name: "w".into(),
            slots,
            capabilities: vec![],
            worker_type: String::new(),
            manager: None,
            local_environments: vec![],
            running: vec![],
            instance: 1,
            ends_in_ms: None,
            finished: vec![],
        },
        heartbeat_ms: 1_000,
        signal_grace_ms: 500,
        ends_at: None,
    })
}

fn actions(w: &mut WorkerCore) -> Vec<Action> {
    std::iter::from_fn(|| w.poll_action()).collect()
}

/// Connected at `now` and registered at once.
fn registered(w: &mut WorkerCore, now: u64) -> Vec<Action> {
    w.handle(now, Input::Connected);
    let mut out = actions(w);
    let registered = ToWorker::Registered {
        id: 1,
        lease_ms: LEASE,
        idle_beat_ms: IDLE_BEAT,
    };
    w.handle(now, Input::Frame(registered));
    out.extend(actions(w));
    out
}

fn run(tasks: &[u64]) -> Input {
    let assignments = tasks
        .iter()
        .map(|task| Assignment {
            task: *task,
            group: 1,
            index: 0,
            input: None,
        })
        .collect();
    Input::Frame(ToWorker::Run(assignments))
}

fn ok() -> Outcome {
    Outcome::Exited {
        code: Some(0),
        stdout: vec![],
        stderr: vec![],
    }
}

fn started(actions: &[Action]) -> Vec<(u64, u64)> {
    actions
        .iter()
        .filter_map(|a| match a {
            Action::Start { run, assignment } => Some((assignment.task, *run)),
            _ => None,
        })
        .collect()
}

fn finished(actions: &[Action]) -> Vec<u64> {
    actions
        .iter()
        .filter_map(|a| match a {
            Action::Send(FromWorker::Finished(results)) => Some(results.iter().map(|(t, _)| *t)),
            _ => None,
        })
        .flatten()
        .collect()
}

fn ended(task: u64, run: u64, at: u64) -> Input {
    Input::TaskEnded {
        task,
        run,
        outcome: ok(),
        at,
    }
}

#[test]
fn tasks_wait_for_a_slot_in_turn_and_outcomes_wait_for_as_many_as_still_wait() {
    let mut w = worker(1);
    registered(&mut w, 0);
    w.handle(10, run(&[1, 2, 3, 4]));
    let out = actions(&mut w);
    assert_eq!(
        started(&out),
        [(1, 1)],
        "one slot: the first handed over starts"
    );
    w.handle(20, ended(1, 1, 20));
    let out = actions(&mut w);
    assert_eq!(started(&out), [(2, 2)]);
    // Two still wait, one has finished: held back.
    assert!(finished(&out).is_empty(), "{out:?}");
    w.handle(30, ended(2, 2, 30));
    let out = actions(&mut w);
    assert_eq!(started(&out), [(3, 3)]);
    assert_eq!(finished(&out), [1, 2], "as many finished as still wait");
    w.handle(40, ended(3, 3, 40));
    let out = actions(&mut w);
    assert_eq!(started(&out), [(4, 4)]);
    assert_eq!(finished(&out), [3], "nothing waits: at once");
    w.sanity_check(40);
}

#[test]
fn a_held_back_outcome_goes_when_hold_reports_is_up() {
    let mut w = worker(1);
    registered(&mut w, 0);
    w.handle(0, Input::Timeout); // the first heartbeat
    w.handle(0, run(&[1, 2, 3, 4]));
    actions(&mut w);
    w.handle(5, ended(1, 1, 5));
    assert!(finished(&actions(&mut w)).is_empty());
    assert_eq!(w.poll_timeout(), Some(5 + HOLD_REPORTS_MS));
    w.handle(5 + HOLD_REPORTS_MS, Input::Timeout);
    assert_eq!(finished(&actions(&mut w)), [1]);
}

#[test]
fn unacknowledged_outcomes_are_claimed_and_sent_again_in_the_next_session() {
    let mut w = worker(2);
    registered(&mut w, 0);
    w.handle(0, run(&[1, 2]));
    actions(&mut w);
    w.handle(5, ended(1, 1, 5));
    w.handle(6, ended(2, 2, 6));
    assert_eq!(finished(&actions(&mut w)), [1, 2]);
    // The first is durable; the link breaks before the second is.
    w.handle(7, Input::Frame(ToWorker::Received { count: 1 }));
    w.handle(8, Input::SessionEnded { stopping: false });
    w.handle(9, Input::Connected);
    let out = actions(&mut w);
    let Some(Action::Send(FromWorker::Register(info))) = out.first() else {
        panic!("{out:?}");
    };
    assert_eq!(info.finished, [2]);
    assert!(info.running.is_empty());
    let frame = ToWorker::Registered {
        id: 2,
        lease_ms: 0,
        idle_beat_ms: 0,
    };
    w.handle(10, Input::Frame(frame));
    assert_eq!(finished(&actions(&mut w)), [2]);
    w.handle(11, Input::Frame(ToWorker::Received { count: 1 }));
    assert_eq!(w.unacknowledged(), 0);
}

#[test]
fn the_lease_runs_from_the_request_and_past_it_everything_is_given_up() {
    let mut w = worker(1);
    let out = registered(&mut w, 100);
    assert!(matches!(out[..], [_, Action::LeaseUntil(until), ..] if until == 100 + LEASE));
    w.handle(200, run(&[1, 2]));
    actions(&mut w);
    // A renewal asked at 1 100, answered 5 s later: it runs from the asking.
    w.handle(1_100, Input::Timeout);
    let seq = actions(&mut w).iter().find_map(|a| match a {
        Action::Send(FromWorker::Renew { seq }) => Some(*seq),
        _ => None,
    });
    let seq = seq.unwrap_or_default();
    w.handle(6_100, Input::Frame(ToWorker::Lease { seq }));
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
fn a_revoke_gives_back_only_tasks_that_wait_newest_first() {
    let mut w = worker(1);
    registered(&mut w, 0);
    w.handle(0, run(&[1, 2, 3]));
    actions(&mut w);
    let revoke = ToWorker::Revoke {
        tasks: vec![1, 2, 3],
        count: 3,
    };
    w.handle(1, Input::Frame(revoke));
    let out = actions(&mut w);
    assert!(
        matches!(&out[..], [Action::Send(FromWorker::Revoked(given))] if given == &[3, 2]),
        "{out:?}"
    );
    assert_eq!(w.holds(1), Some(true));
    assert_eq!(w.holds(2), None);
    w.sanity_check(1);
}

#[test]
fn a_task_handed_over_again_while_its_canceled_run_ends_waits_for_that_slot() {
    let mut w = worker(1);
    registered(&mut w, 0);
    w.handle(0, run(&[1]));
    actions(&mut w);
    w.handle(1, Input::Frame(ToWorker::Cancel(vec![1])));
    assert!(matches!(
        actions(&mut w)[..],
        [Action::Cancel { task: 1, run: 1 }]
    ));
    w.handle(2, run(&[1]));
    assert!(
        started(&actions(&mut w)).is_empty(),
        "the old run holds the slot"
    );
    w.sanity_check(2);
    w.handle(3, ended(1, 1, 3));
    let out = actions(&mut w);
    assert_eq!(started(&out), [(1, 2)]);
    assert!(
        finished(&out).is_empty(),
        "the old run's end is not the task's"
    );
    w.sanity_check(3);
}

#[test]
fn outcomes_of_tasks_a_signal_ended_are_dropped_if_the_worker_stops_within_the_grace() {
    let signaled = Outcome::Exited {
        code: None,
        stdout: vec![],
        stderr: vec![],
    };
    let mut w = worker(1);
    registered(&mut w, 0);
    w.handle(0, run(&[1]));
    actions(&mut w);
    w.handle(
        10,
        Input::TaskEnded {
            task: 1,
            run: 1,
            outcome: signaled,
            at: 10,
        },
    );
    assert!(finished(&actions(&mut w)).is_empty());
    w.handle(20, Input::SessionEnded { stopping: true });
    assert!(finished(&actions(&mut w)).is_empty());
    assert_eq!(w.unacknowledged(), 0);
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
    let seq = actions(&mut w).iter().find_map(|a| match a {
        Action::Send(FromWorker::Renew { seq }) => Some(*seq),
        _ => None,
    });
    // Answered just before the end (10 100): the core renews, the guard is told just after.
    w.handle(
        10_099,
        Input::Frame(ToWorker::Lease {
            seq: seq.unwrap_or_default(),
        }),
    );
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

/// When each renewal went, driving the core by its own timeouts from `from` to `to`.
fn renewals_between(w: &mut WorkerCore, from: u64, to: u64) -> Vec<u64> {
    let mut sent = Vec::new();
    let mut now = from;
    while let Some(at) = w.poll_timeout().filter(|at| *at < to) {
        now = at.max(now);
        w.handle(now, Input::Timeout);
        for action in actions(w) {
            if let Action::Send(FromWorker::Renew { seq }) = action {
                sent.push(now);
                // Answered at once: the lease stays valid throughout.
                w.handle(now, Input::Frame(ToWorker::Lease { seq }));
                actions(w);
            }
        }
    }
    sent
}

/// An idle worker beats (and renews) as often as the scheduler asked at registration; once a
/// task is handed over it beats at its own pace from then on, at most one of its beats later,
/// and at the idle pace again once it holds nothing.
#[test]
fn an_idle_worker_beats_at_the_pace_the_scheduler_asked_and_a_busy_one_at_its_own() {
    let mut w = worker(1);
    registered(&mut w, 0);
    assert_eq!(renewals_between(&mut w, 0, 10_001), [0, 9_000]);
    w.handle(10_100, run(&[1]));
    let out = actions(&mut w);
    assert_eq!(started(&out), [(1, 1)]);
    // Busy: the next beat within a second of the hand-over, then every second.
    assert_eq!(
        renewals_between(&mut w, 10_100, 13_500),
        [11_100, 12_100, 13_100]
    );
    w.handle(13_500, ended(1, 1, 13_500));
    actions(&mut w);
    // Idle again: the beat already due goes, then the idle pace.
    assert_eq!(renewals_between(&mut w, 13_500, 25_000), [14_100, 23_100]);
}

/// An idle worker's renewal answered after its lease ran out (the scheduler stalled, or the
/// link was slow): nothing ran, so nothing is given up and it stays registered; a task handed
/// over meanwhile starts once a renewal is answered, its outcome counts, and the lapse is
/// counted once, as the guard counts it. A task handed over while the lease has little left
/// draws a renewal at once.
#[test]
fn an_idle_worker_whose_lease_ran_out_stays_registered_and_starts_its_tasks_once_renewed() {
    let mut w = worker(1);
    registered(&mut w, 0);
    // The registration's lease runs to 10 000; the renewal asked at 9 000 is not answered yet.
    assert_eq!(renewals_between(&mut w, 0, 8_999), [0]);
    w.handle(9_000, Input::Timeout);
    let asked = actions(&mut w).iter().find_map(|a| match a {
        Action::Send(FromWorker::Renew { seq }) => Some(*seq),
        _ => None,
    });
    let seq = asked.unwrap_or_else(|| panic!("a renewal at 9 000"));
    // Past the lease: idle, so no timer for it, and no end.
    assert_eq!(w.poll_timeout(), Some(18_000), "the next idle beat");
    w.handle(10_500, Input::Timeout);
    let out = actions(&mut w);
    assert!(
        !out.iter()
            .any(|a| matches!(a, Action::End(_) | Action::GiveUp { .. })),
        "{out:?}"
    );
    assert!(!w.lease_valid(10_500));
    // A task handed over now waits, and asks for a renewal at once.
    w.handle(10_600, run(&[7]));
    let out = actions(&mut w);
    assert!(started(&out).is_empty(), "{out:?}");
    assert_eq!(w.poll_timeout(), Some(10_600));
    w.handle(10_600, Input::Timeout);
    let again = actions(&mut w).iter().find_map(|a| match a {
        Action::Send(FromWorker::Renew { seq }) => Some(*seq),
        _ => None,
    });
    let again = again.unwrap_or_else(|| panic!("a renewal at once"));
    // The late answer to the first renews nothing that is not over already (9 000 + 10 000
    // is still ahead: it renews), counted as one lapse, and the task starts.
    w.handle(10_700, Input::Frame(ToWorker::Lease { seq }));
    let out = actions(&mut w);
    assert!(
        matches!(out[..], [Action::LeaseUntil(19_000), ..]),
        "{out:?}"
    );
    assert_eq!(started(&out), [(7, 1)]);
    assert_eq!(w.lapses(), 1);
    // The guard counted the same lapse: nothing changes.
    w.handle(10_701, Input::Lapsed { lapses: 1 });
    w.handle(10_702, Input::Frame(ToWorker::Lease { seq: again }));
    actions(&mut w);
    w.handle(11_000, ended(7, 1, 11_000));
    let mut out = actions(&mut w);
    w.handle(11_300, Input::Timeout);
    out.extend(actions(&mut w));
    assert!(!out.iter().any(|a| matches!(a, Action::End(_))), "{out:?}");
    assert_eq!(finished(&out), [7], "its outcome counts: {out:?}");
    w.sanity_check(11_300);

    // Handed over with under two busy beats of lease left: a renewal goes at once.
    let mut w = worker(1);
    registered(&mut w, 0);
    renewals_between(&mut w, 0, 8_999);
    w.handle(8_500, run(&[1]));
    let out = actions(&mut w);
    assert_eq!(started(&out), [(1, 1)]);
    assert_eq!(w.poll_timeout(), Some(8_500));
}

/// A task that waited from before a lapse (its slot's run ended as the lease ran out, and
/// the end was taken in late) starts under the renewal after the lapse and its outcome counts;
/// a task canceled while it waits in a lapse reports `canceled` and ends nothing.
#[test]
fn what_waits_across_an_idle_lapse_runs_under_the_next_grant_and_can_be_canceled() {
    let mut w = worker(1);
    registered(&mut w, 0);
    w.handle(0, Input::Timeout);
    actions(&mut w);
    w.handle(100, run(&[1, 2]));
    assert_eq!(started(&actions(&mut w)), [(1, 1)]);
    // Task 1 ended at 9 999, under the lease (to 10 000), taken in at 10 500.
    w.handle(10_500, ended(1, 1, 9_999));
    let mut all = actions(&mut w);
    assert!(
        started(&all).is_empty(),
        "nothing starts past the lease: {all:?}"
    );
    // The next beat renews; the answer counts the lapse and task 2 starts under it.
    w.handle(10_500, Input::Timeout);
    let out = actions(&mut w);
    let seq = out.iter().find_map(|a| match a {
        Action::Send(FromWorker::Renew { seq }) => Some(*seq),
        _ => None,
    });
    all.extend(out);
    let answer = ToWorker::Lease {
        seq: seq.unwrap_or_default(),
    };
    w.handle(10_600, Input::Frame(answer));
    let out = actions(&mut w);
    assert_eq!(started(&out), [(2, 2)]);
    all.extend(out);
    w.handle(11_000, ended(2, 2, 11_000));
    all.extend(actions(&mut w));
    w.handle(11_500, Input::Timeout);
    all.extend(actions(&mut w));
    assert!(!all.iter().any(|a| matches!(a, Action::End(_))), "{all:?}");
    assert_eq!(finished(&all), [1, 2], "both outcomes count");
    w.sanity_check(11_500);

    // Canceled while it waits in a lapse: reported canceled, the session goes on.
    let mut w = worker(1);
    registered(&mut w, 0);
    w.handle(10_100, run(&[5]));
    actions(&mut w);
    w.handle(10_200, Input::Frame(ToWorker::Cancel(vec![5])));
    let mut out = actions(&mut w);
    w.handle(10_500, Input::Timeout);
    out.extend(actions(&mut w));
    assert!(!out.iter().any(|a| matches!(a, Action::End(_))), "{out:?}");
    assert_eq!(finished(&out), [5]);
    w.sanity_check(10_500);
}
