//! Tasks held ahead (prefetch): what is handed ahead, taken back for idle workers, spared when lost.

use super::*;

fn with_prefetch(prefetch: u32) -> Tasks {
    Tasks::new(Config {
        prefetch,
        ..Config::default()
    })
}

fn revokes(actions: &[Effect]) -> Vec<(u64, Vec<u64>, u32)> {
    actions
        .iter()
        .filter_map(|a| match a {
            Effect::Revoke {
                worker,
                tasks,
                count,
            } => Some((*worker, tasks.clone(), *count)),
            _ => None,
        })
        .collect()
}

/// Submit `count` tasks and make their group quick: one runs on a worker of its own (joined,
/// run, reported, then lost as stopped). Returns the job and the tasks still queued, in order.
fn quick_job(
    core: &mut Tasks,
    count: u32,
    capabilities: &[(&str, u64)],
    retries: u32,
) -> (u64, Vec<u64>) {
    let (job, first, _) = core
        .submit(vec![NewGroup {
            spec: spec(capabilities, 0, retries),
            count: count + 1,
            inputs: vec![],
        }])
        .unwrap();
    let caps: Vec<(&str, u64)> = capabilities.iter().map(|(n, v)| (*n, v * 100)).collect();
    let probe = core.worker_joined(0, worker(1, &caps)).unwrap().0;
    core.schedule(0);
    assert_eq!(dispatched(&core.take_effects())[&probe], vec![first]);
    assert!(core.finished(5, probe, first, ok()));
    core.worker_lost(5, probe, "test", Loss::Stopped);
    core.take_effects();
    (job, (first + 1..=first + u64::from(count)).collect())
}

#[test]
fn prefetch_fills_every_free_slot_first_then_one_task_per_worker_per_round() {
    let mut core = with_prefetch(3);
    let (_, tasks) = quick_job(&mut core, 9, &[], 3);
    let a = core.worker_joined(10, worker(2, &[])).unwrap().0;
    let b = core.worker_joined(10, worker(2, &[])).unwrap().0;
    core.schedule(10);
    let sent = dispatched(&core.take_effects());
    // 4 slots, then rounds of one each: a 3, b 2 of the 5 left.
    assert_eq!(
        sent[&a],
        vec![tasks[0], tasks[1], tasks[4], tasks[6], tasks[8]]
    );
    assert_eq!(sent[&b], vec![tasks[2], tasks[3], tasks[5], tasks[7]]);
    assert_eq!(core.status().tasks.queued, 0);
    core.sanity_check().unwrap();
}

#[test]
fn no_more_than_slots_and_prefetch_however_much_waits() {
    let mut core = with_prefetch(3);
    quick_job(&mut core, 100, &[], 3);
    let a = core.worker_joined(10, worker(2, &[])).unwrap().0;
    core.schedule(10);
    assert_eq!(dispatched(&core.take_effects())[&a].len(), 5);
    core.schedule(10);
    assert!(dispatched(&core.take_effects()).is_empty());
    core.sanity_check().unwrap();
}

#[test]
fn only_tasks_of_a_group_that_ran_quickly_are_prefetched() {
    let mut core = with_prefetch(4);
    let a = core.worker_joined(0, worker(1, &[])).unwrap().0;
    let (_, first, _) = core.submit(vec![group(10, &[])]).unwrap();
    core.schedule(0);
    // Nothing known of the group yet: a slot's worth.
    assert_eq!(dispatched(&core.take_effects())[&a], vec![first]);
    // It ran for two seconds: still not prefetched.
    assert!(core.finished(2_000, a, first, ok()));
    core.schedule(2_000);
    assert_eq!(dispatched(&core.take_effects())[&a], vec![first + 1]);
    // The next one was quick: now the worker is given its prefetch too.
    assert!(core.finished(2_010, a, first + 1, ok()));
    core.schedule(2_010);
    assert_eq!(dispatched(&core.take_effects())[&a].len(), 5);
}

#[test]
fn a_task_held_ahead_is_timed_from_its_start_so_a_long_wait_there_keeps_its_group_quick() {
    let mut core = with_prefetch(64);
    let (_, tasks) = quick_job(&mut core, 100, &[], 3);
    let a = core.worker_joined(0, worker(1, &[])).unwrap().0;
    core.schedule(0);
    // Its slot and 64 ahead; 35 stay queued.
    let mut held: std::collections::VecDeque<u64> =
        dispatched(&core.take_effects())[&a].clone().into();
    assert_eq!(held.len(), 65);
    // Each runs 35 ms, one after the other, and the worker reports each start and end. The
    // 30th has waited there over PREFETCH_BELOW_MS when it ends, yet it ran only 35 ms: the
    // group stays quick, so nothing is asked back (timed from hand-over, the group turned
    // slow while tasks were still queued and the worker was asked to give back all it held).
    let mut now = 0;
    let mut done = 0;
    while let Some(task) = held.pop_front() {
        if done > 0 {
            core.started(now, a, &[task]);
        }
        now += 35;
        assert!(core.finished(now, a, task, ok()));
        done += 1;
        core.schedule(now);
        let actions = core.take_effects();
        assert!(
            revokes(&actions).is_empty(),
            "asked back after {done} tasks, at {now} ms"
        );
        if let Some(sent) = dispatched(&actions).get(&a) {
            held.extend(sent);
        }
    }
    assert_eq!(done, tasks.len());
    assert!(now > 2 * crate::tasks::PREFETCH_BELOW_MS);
    core.sanity_check().unwrap();
}

#[test]
fn no_prefetch_while_another_fitting_worker_has_a_free_slot() {
    let mut core = with_prefetch(4);
    quick_job(&mut core, 2, &[], 3);
    let a = core.worker_joined(10, worker(1, &[])).unwrap().0;
    let b = core.worker_joined(10, worker(1, &[])).unwrap().0;
    core.schedule(10);
    let sent = dispatched(&core.take_effects());
    assert_eq!((sent[&a].len(), sent[&b].len()), (1, 1));
}

#[test]
fn an_idle_worker_has_prefetched_tasks_taken_back_for_it_without_an_attempt_spent() {
    let mut core = with_prefetch(4);
    // Retries 0: a spent attempt would show.
    let (_, tasks) = quick_job(&mut core, 5, &[], 0);
    let busy = core.worker_joined(10, worker(1, &[])).unwrap().0;
    core.schedule(10);
    let held = dispatched(&core.take_effects())[&busy].clone();
    assert_eq!(held, tasks);
    // A second worker joins with nothing queued: the busy one is asked for what it holds ahead.
    let idle = core.worker_joined(20, worker(1, &[])).unwrap().0;
    core.schedule(20);
    let asked = revokes(&core.take_effects());
    assert_eq!(asked.len(), 1);
    let (from, candidates, count) = asked[0].clone();
    assert_eq!(from, busy);
    // At least the one free slot, up to half of the 4 held ahead.
    assert_eq!(count, 2);
    assert_eq!(
        candidates.len(),
        5,
        "any held task it could run may be one given back"
    );
    // Asked once at a time.
    core.schedule(20);
    assert!(revokes(&core.take_effects()).is_empty());
    // It gives back the two newest, which had not started.
    assert_eq!(core.revoked(busy, &[held[4], held[3]]), 2);
    core.schedule(20);
    let sent = dispatched(&core.take_effects());
    assert_eq!(
        sent[&idle],
        vec![held[3], held[4]],
        "in their order, at the front"
    );
    core.sanity_check().unwrap();
    for task in [held[3], held[4]] {
        assert!(core.finished(30, idle, task, ok()));
        let (state, _, attempts) = core.final_record(task).unwrap();
        assert_eq!((state, attempts), (TaskState::Succeeded, 1));
    }
    // A report for a task given back is not the giver's to make.
    assert!(!core.finished(30, busy, held[4], ok()));
}

#[test]
fn a_worker_that_gave_nothing_back_is_not_asked_again_until_it_finishes_one() {
    let mut core = with_prefetch(2);
    quick_job(&mut core, 3, &[], 3);
    let busy = core.worker_joined(10, worker(1, &[])).unwrap().0;
    core.schedule(10);
    let held = dispatched(&core.take_effects())[&busy].clone();
    assert_eq!(held.len(), 3);
    core.worker_joined(10, worker(1, &[])).unwrap();
    core.schedule(10);
    assert_eq!(revokes(&core.take_effects()).len(), 1);
    // Everything it held had started (it finished one and started the next meanwhile).
    assert_eq!(core.revoked(busy, &[]), 0);
    core.schedule(10);
    assert!(
        revokes(&core.take_effects()).is_empty(),
        "asked again at once"
    );
    assert!(core.finished(15, busy, held[0], ok()));
    core.schedule(15);
    assert_eq!(revokes(&core.take_effects()).len(), 1);
}

#[test]
fn a_prefetched_task_canceled_and_then_given_back_is_confirmed_stopped() {
    let mut core = with_prefetch(2);
    let (job, _) = quick_job(&mut core, 3, &[], 3);
    let busy = core.worker_joined(10, worker(1, &[])).unwrap().0;
    core.schedule(10);
    let held = dispatched(&core.take_effects())[&busy].clone();
    core.worker_joined(10, worker(1, &[])).unwrap();
    core.schedule(10);
    assert_eq!(revokes(&core.take_effects()).len(), 1);
    core.cancel_job(job);
    // The worker gave it back before the cancel reached it: that is its confirmation.
    core.revoked(busy, &[held[2]]);
    assert!(!core.finished(15, busy, held[2], ok()));
    assert!(core.finished(15, busy, held[0], ok()));
    assert!(core.finished(15, busy, held[1], ok()));
    assert_eq!(core.status().tasks.canceled, 3);
    assert_eq!(core.status().tasks.running, 0);
    core.sanity_check().unwrap();
}

#[test]
fn a_worker_killed_before_it_started_its_prefetched_tasks_spends_no_attempt_on_them() {
    let mut core = with_prefetch(2);
    // Retries 0: a task that may have run there fails; one that surely did not is requeued.
    let (_, tasks) = quick_job(&mut core, 3, &[], 0);
    let w = core.worker_joined(10, worker(1, &[])).unwrap().0;
    core.schedule(10);
    assert_eq!(dispatched(&core.take_effects())[&w], tasks);
    // The first went into its free slot; of the two held ahead, it reported the first started.
    core.started(15, w, &[tasks[1]]);
    core.worker_lost(20, w, "killed", Loss::Exited);
    let counts = core.status().tasks;
    assert_eq!((counts.failed, counts.queued), (2, 1), "{counts:?}");
    let other = core.worker_joined(30, worker(1, &[])).unwrap().0;
    core.schedule(30);
    assert_eq!(dispatched(&core.take_effects())[&other], vec![tasks[2]]);
    assert!(core.finished(40, other, tasks[2], ok()));
    assert_eq!(core.final_record(tasks[2]).unwrap().2, 1);
}

#[test]
fn a_task_held_ahead_by_workers_lost_before_reporting_its_start_is_spared_at_most_twice() {
    // A start is reported with the next outcomes, so a task that kills its worker at once looks
    // unstarted. Sparing it every time would let it kill workers forever: MAX_SPARED bounds it.
    let mut core = with_prefetch(1);
    let (_, tasks) = quick_job(&mut core, 2, &[], 5);
    let (first, held) = (tasks[0], tasks[1]);
    for round in 0..=u64::from(MAX_SPARED) {
        let now = 10 + round * 10;
        let w = core.worker_joined(now, worker(1, &[])).unwrap().0;
        core.schedule(now);
        let handed = dispatched(&core.take_effects());
        assert_eq!(handed[&w], vec![first, held], "round {round}");
        core.worker_lost(now + 5, w, "killed", Loss::Exited);
    }
    let w = core.worker_joined(100, worker(1, &[])).unwrap().0;
    core.schedule(100);
    assert_eq!(dispatched(&core.take_effects())[&w], vec![first, held]);
    assert!(core.finished(110, w, first, ok()));
    assert!(core.finished(120, w, held, ok()));
    // `first` ran in the slot every time: each loss an attempt, then its run.
    let rounds = MAX_SPARED + 1;
    assert_eq!(core.final_record(first).unwrap().2, rounds + 1);
    // `held` was spared MAX_SPARED times; the loss after that counted, then its run.
    assert_eq!(core.final_record(held).unwrap().2, 2);
}

#[test]
fn a_new_submission_is_not_starved_by_a_stream_of_quick_tasks_held_ahead() {
    let mut core = with_prefetch(2);
    let (_, a) = quick_job(&mut core, 50, &[], 3);
    let w = core.worker_joined(10, worker(1, &[])).unwrap().0;
    core.schedule(10);
    assert_eq!(dispatched(&core.take_effects())[&w], a[..3]);
    // A higher-priority submission, nothing known of its speed: it is to have the next free
    // slot, so the worker is asked for what it holds ahead, and handed no more meanwhile.
    let (_, b, _) = core
        .submit(vec![NewGroup {
            spec: spec(&[], 5, 3),
            count: 1,
            inputs: vec![],
        }])
        .unwrap();
    core.schedule(10);
    let actions = core.take_effects();
    assert!(dispatched(&actions).is_empty());
    assert_eq!(revokes(&actions), vec![(w, a[..3].to_vec(), 2)]);
    // It gives back the one it had not started; the other had started meanwhile.
    assert_eq!(core.revoked(w, &[a[2]]), 1);
    core.schedule(10);
    assert!(
        dispatched(&core.take_effects()).is_empty(),
        "refilled with quick tasks"
    );
    assert!(core.finished(20, w, a[0], ok()));
    core.schedule(20);
    assert!(
        dispatched(&core.take_effects()).is_empty(),
        "refilled with quick tasks"
    );
    let why = core.explain(20, a[3]).unwrap().join("\n");
    assert!(why.contains("all 1 slots busy"), "{why}");
    // What ran there ends: the slot is the new submission's.
    assert!(core.finished(30, w, a[1], ok()));
    core.schedule(30);
    assert_eq!(dispatched(&core.take_effects())[&w], vec![b]);
}

#[test]
fn a_revoke_is_only_for_tasks_the_idle_worker_can_run() {
    let mut core = with_prefetch(2);
    quick_job(&mut core, 3, &[("gpu", 1)], 3);
    let busy = core.worker_joined(10, worker(1, &[("gpu", 4)])).unwrap().0;
    core.schedule(10);
    assert_eq!(dispatched(&core.take_effects())[&busy].len(), 3);
    core.worker_joined(10, worker(1, &[])).unwrap();
    core.schedule(10);
    assert!(revokes(&core.take_effects()).is_empty());
}

// ---- drained workers ----

/// Canceled while held ahead, never reported started: no run is counted, and `weir explain`
/// says no start was reported (found by an attack run: 258 such tasks said "1 run"). The one
/// in the slot ran.
#[test]
fn a_task_canceled_while_held_ahead_and_not_reported_started_counts_no_run() {
    let mut core = with_prefetch(4);
    let (job, tasks) = quick_job(&mut core, 5, &[], 0);
    let w = core.worker_joined(10, worker(1, &[])).unwrap().0;
    core.schedule(10);
    assert_eq!(dispatched(&core.take_effects())[&w], tasks);
    assert_eq!(core.cancel_job(job), 5);
    let results = core.results(job).unwrap();
    let attempts: Vec<(u64, u32)> = (results.iter())
        .filter(|r| tasks.contains(&r.task))
        .map(|r| (r.task, r.attempts))
        .collect();
    let want: Vec<(u64, u32)> = (tasks.iter())
        .map(|&t| (t, u32::from(t == tasks[0])))
        .collect();
    assert_eq!(attempts, want);
    let said = core.explain(20, tasks[1]).unwrap().join("\n");
    assert!(said.contains("no start of it was reported"), "{said}");
    let said = core.explain(20, tasks[0]).unwrap().join("\n");
    assert!(said.contains("1 run"), "{said}");
    core.sanity_check().unwrap();
}

#[test]
fn a_drained_worker_is_asked_for_what_it_holds_ahead_and_never_gets_it_again() {
    let mut core = with_prefetch(4);
    let (_, tasks) = quick_job(&mut core, 5, &[], 0);
    let mut info = worker(1, &[]);
    info.manager = Some("m1".into());
    let drained = core.worker_joined(10, info).unwrap().0;
    core.schedule(10);
    let held = dispatched(&core.take_effects())[&drained].clone();
    assert_eq!(held, tasks, "one in its slot, four ahead");
    // The policy drains it: it is asked for the four ahead (it may not have started them).
    let (newly, back) = core.cordon("m1", &[drained]);
    assert_eq!((newly.len(), back.len()), (1, 0));
    let asked = revokes(&core.take_effects());
    assert_eq!(asked.len(), 1, "asked once: {asked:?}");
    let (from, candidates, count) = asked[0].clone();
    assert_eq!((from, count, candidates), (drained, 4, held.clone()));
    // Restating the same drain asks nothing more.
    core.cordon("m1", &[drained]);
    assert!(revokes(&core.take_effects()).is_empty());
    // It gives back the four it had not started; they go to an open worker, not back to it.
    assert_eq!(core.revoked(drained, &held[1..]), 4);
    let open = core.worker_joined(20, worker(1, &[])).unwrap().0;
    core.schedule(20);
    let sent = dispatched(&core.take_effects());
    assert!(!sent.contains_key(&drained), "{sent:?}");
    assert_eq!(sent[&open], held[1..].to_vec());
    core.sanity_check().unwrap();
}

/// An idle worker's share names only the tasks it could run: a drained worker that answers it
/// with nothing (it had started them) still holds tasks nobody asked for, and is asked for
/// those. (Asked only when it gave something back, it would keep them.)
#[test]
fn a_drained_worker_answering_nothing_is_asked_for_what_the_share_did_not_name() {
    let mut core = with_prefetch(4);
    let (_, gpu) = quick_job(&mut core, 2, &[("gpu", 1)], 0);
    let (_, plain) = quick_job(&mut core, 3, &[], 0);
    let mut info = worker(1, &[("gpu", 100)]);
    info.manager = Some("m1".into());
    let busy = core.worker_joined(10, info).unwrap().0;
    core.schedule(10);
    let held = dispatched(&core.take_effects())[&busy].clone();
    assert_eq!(held.len(), 5, "one in its slot, four ahead: {held:?}");
    // An idle worker without a GPU joins: the share asked names only plain tasks.
    core.worker_joined(20, worker(1, &[])).unwrap();
    core.schedule(20);
    let asked = revokes(&core.take_effects());
    assert_eq!(asked.len(), 1, "{asked:?}");
    assert!(asked[0].1.iter().all(|t| plain.contains(t)), "{asked:?}");
    // Drained meanwhile; it answers with nothing (it had started those).
    core.cordon("m1", &[busy]);
    assert!(revokes(&core.take_effects()).is_empty());
    assert_eq!(core.revoked(busy, &[]), 0);
    // It is asked again, now for what it holds ahead, the GPU tasks among them.
    let again = revokes(&core.take_effects());
    assert_eq!(again.len(), 1, "{again:?}");
    assert_eq!(again[0].0, busy);
    let held_gpu: Vec<u64> = held.iter().copied().filter(|t| gpu.contains(t)).collect();
    assert!(!held_gpu.is_empty(), "{held:?}");
    assert!(
        held_gpu.iter().all(|t| again[0].1.contains(t)),
        "{again:?} names {held_gpu:?}"
    );
    // Answered with nothing again (the same ask, all started): never asked a third time.
    assert_eq!(core.revoked(busy, &[]), 0);
    assert!(revokes(&core.take_effects()).is_empty());
    core.sanity_check().unwrap();
}

#[test]
fn a_worker_drained_while_asked_for_a_share_is_asked_for_the_rest_once_it_answers() {
    let mut core = with_prefetch(4);
    let (_, tasks) = quick_job(&mut core, 5, &[], 0);
    let mut info = worker(1, &[]);
    info.manager = Some("m1".into());
    let busy = core.worker_joined(10, info).unwrap().0;
    core.schedule(10);
    let held = dispatched(&core.take_effects())[&busy].clone();
    assert_eq!(held, tasks);
    // An idle worker joins: the busy one is asked for a share (2 of the 4 ahead).
    core.worker_joined(20, worker(1, &[])).unwrap();
    core.schedule(20);
    assert_eq!(revokes(&core.take_effects())[0].2, 2);
    // Drained meanwhile: nothing more is asked while that take-back is outstanding...
    core.cordon("m1", &[busy]);
    assert!(revokes(&core.take_effects()).is_empty());
    // ...and once it gives the two back, it is asked for the two it still holds ahead.
    assert_eq!(core.revoked(busy, &[held[4], held[3]]), 2);
    let asked = revokes(&core.take_effects());
    assert_eq!(asked.len(), 1, "{asked:?}");
    assert_eq!((asked[0].0, asked[0].2), (busy, 2));
    core.sanity_check().unwrap();
}
