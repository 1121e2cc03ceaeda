//! Slots and outcomes: tasks wait for a slot in turn, outcomes wait and are claimed again in
//! the next session, take-backs and cancels.

use super::*;

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
