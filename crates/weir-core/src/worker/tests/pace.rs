//! The pace of beats and renewals, idle and busy, and what waits across an idle lapse.

use super::*;

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
                w.handle(now, answer(seq));
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
    let asked = renewal(&actions(&mut w));
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
    let again = renewal(&actions(&mut w));
    let again = again.unwrap_or_else(|| panic!("a renewal at once"));
    // The late answer to the first renews nothing that is not over already (9 000 + 10 000
    // is still ahead: it renews), counted as one lapse, and the task starts.
    w.handle(10_700, answer(seq));
    let out = actions(&mut w);
    assert!(
        matches!(out[..], [Action::LeaseUntil(19_000), ..]),
        "{out:?}"
    );
    assert_eq!(started(&out), [(7, 1)]);
    assert_eq!(w.lapses(), 1);
    // The guard counted the same lapse: nothing changes.
    w.handle(10_701, Input::Lapsed { lapses: 1 });
    w.handle(10_702, answer(again));
    actions(&mut w);
    w.handle(11_000, ended(7, 1, 11_000));
    let mut out = actions(&mut w);
    w.handle(11_300, Input::Timeout);
    out.extend(actions(&mut w));
    assert!(!out.iter().any(|a| matches!(a, Action::End(_))), "{out:?}");
    assert_eq!(finished(&out), [7], "its outcome counts: {out:?}");
    w.sanity_check(11_300);

    // Handed over with under two busy beats of lease left: a renewal goes at once, and the
    // task waits for its answer (started on the old lease's last moments, it would be killed
    // if the answer came a moment too late).
    let mut w = worker(1);
    registered(&mut w, 0);
    renewals_between(&mut w, 0, 8_999);
    w.handle(8_500, run(&[1]));
    let out = actions(&mut w);
    assert!(started(&out).is_empty(), "{out:?}");
    w.sanity_check(8_500);
    assert_eq!(w.poll_timeout(), Some(8_500));
    w.handle(8_500, Input::Timeout);
    let seq = renewal(&actions(&mut w));
    let seq = seq.unwrap_or_else(|| panic!("a renewal at once"));
    w.handle(8_540, answer(seq));
    let out = actions(&mut w);
    assert!(
        matches!(out[..], [Action::LeaseUntil(18_500), ..]),
        "{out:?}"
    );
    assert_eq!(started(&out), [(1, 1)]);
}

/// The scheduler slows idle workers as the cluster grows (`lease::idle_pace`): each answer
/// sets the pace of the idle beats that follow (a shorter one from the answer on, for the beat
/// already set); one longer than the lease lets it run out between beats, which costs nothing,
/// and a task handed over then starts once the renewal it draws is answered.
#[test]
fn an_idle_worker_beats_at_the_pace_of_the_last_answer_past_its_lease() {
    let mut w = worker(1);
    registered(&mut w, 0);
    let renew = |w: &mut WorkerCore, now: u64| {
        w.handle(now, Input::Timeout);
        renewal(&actions(w))
    };
    let seq = renew(&mut w, 0).unwrap_or_else(|| panic!("a renewal at registration"));
    // The answer asks for a beat every 30 s: from the beat already set (9 000) on.
    w.handle(5, answer_with(seq, 30_000));
    actions(&mut w);
    assert_eq!(w.quiet_allowance(), 30_000);
    assert_eq!(w.poll_timeout(), Some(9_000));
    let seq = renew(&mut w, 9_000).unwrap_or_else(|| panic!("a renewal at 9 000"));
    w.handle(9_010, answer_with(seq, 30_000));
    actions(&mut w);
    assert_eq!(w.poll_timeout(), Some(39_000));
    // The lease ran out at 19 000 with nothing running: no end, no give-up.
    w.handle(25_000, Input::Timeout);
    let out = actions(&mut w);
    assert!(out.is_empty(), "{out:?}");
    assert!(!w.lease_valid(25_000));
    // A task handed over waits for the renewal it draws at once.
    w.handle(25_000, run(&[3]));
    assert!(started(&actions(&mut w)).is_empty());
    let seq = renew(&mut w, 25_000).unwrap_or_else(|| panic!("a renewal at once"));
    w.handle(25_010, answer_with(seq, 30_000));
    assert_eq!(started(&actions(&mut w)), [(3, 1)]);
    assert!(w.lease_valid(25_010));
    // Busy: renewals every busy beat; idle again once it ended, at the pace last told (now 9 s).
    w.handle(25_500, ended(3, 1, 25_500));
    actions(&mut w);
    let seq = renew(&mut w, 26_000).unwrap_or_else(|| panic!("a busy renewal"));
    w.handle(26_010, answer(seq));
    actions(&mut w);
    assert_eq!(w.quiet_allowance(), IDLE_BEAT);
    // The beat set at 26 000 with the 30 s pace comes at the shorter one from the answer on:
    // the worker's own allowance for the scheduler's silence is the shorter one already.
    assert_eq!(w.poll_timeout(), Some(35_010));
    w.sanity_check(26_010);
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
    let seq = renewal(&out);
    all.extend(out);
    w.handle(10_600, answer(seq.unwrap_or_default()));
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
