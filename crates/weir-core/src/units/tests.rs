use proptest::prelude::*;

use super::backoff::delay;
use super::*;
use weir_proto::LaunchReport;

fn unit(book: &Book, id: &str, since: u64, registered: bool) -> Unit {
    Unit {
        registered,
        ..book.unit(id.into(), since)
    }
}

fn ids(step: &Step) -> Vec<(&str, Why)> {
    step.stop.iter().map(|s| (s.id.as_str(), s.why)).collect()
}

fn strings(list: &[&str]) -> Vec<String> {
    list.iter().map(|n| n.to_string()).collect()
}

#[test]
fn a_unit_with_a_registered_worker_is_stopped_only_when_drained() {
    let mut book = Book::new("m", 1, 10_000, 100, 100);
    book.units = vec![unit(&book, "1", 0, false), unit(&book, "2", 0, false)];
    // Unit 1's worker registers; the demand drops to zero long after the timeout.
    let step = book.step(1_000_000, 0, &[], &strings(&["m-1-1"]), false);
    assert_eq!(step.registered, vec![("1".to_string(), 1_000_000)]);
    assert_eq!(ids(&step), vec![("2", Why::Late)]);
    assert_eq!(
        book.units.len(),
        1,
        "the busy unit stays though nobody wants it"
    );
    let all = strings(&["m-1-1"]);
    let drained = book.step(1_000_000, 0, &all, &all, false);
    assert_eq!(ids(&drained), vec![("1", Why::Drained)]);
    assert_eq!(drained.stop[0].since, 0);
    assert!(book.units.is_empty());
}

#[test]
fn too_many_cancels_the_newest_unregistered_and_too_few_starts_whole_units() {
    let mut book = Book::new("m", 2, 60_000, 100, 100);
    book.units = vec![
        unit(&book, "1", 0, true),
        unit(&book, "2", 0, false),
        unit(&book, "3", 0, false),
    ];
    let step = book.step(0, 3, &[], &[], false);
    assert_eq!(ids(&step), vec![("3", Why::Excess)]);
    assert_eq!(step.start, 0);
    let more = book.step(0, 7, &[], &[], false);
    assert_eq!(more.start, 2, "7 workers in units of 2: 4 units");
}

#[test]
fn a_unit_goes_only_once_all_its_workers_are_drained() {
    let mut book = Book::new("m", 2, 60_000, 100, 100);
    book.units = vec![unit(&book, "7", 0, true)];
    let both = strings(&["m-7-1", "m-7-2"]);
    // One drained, the other busy: the job stays (the drained one is taken back into service
    // by the scheduler after a while).
    assert!(book.step(0, 0, &both[..1], &both, false).stop.is_empty());
    // Both drained (the scheduler names every drained worker in each decision).
    let step = book.step(0, 0, &both, &both, false);
    assert_eq!(ids(&step), vec![("7", Why::Drained)]);
}

/// A unit of several whose only named worker is no longer registered (it just left) while its
/// sibling is still starting is not drained: nothing of it is registered. A process of its own
/// (a unit of one) named by the scheduler goes, registered or not.
#[test]
fn a_named_worker_that_left_drains_a_unit_of_one_but_not_its_starting_sibling() {
    let mut book = Book::new("m", 2, 60_000, 100, 100);
    book.units = vec![unit(&book, "7", 0, true)];
    let named = strings(&["m-7-1"]);
    assert!(book.step(0, 1, &named, &[], false).stop.is_empty());
    let mut pool = Book::processes("p", 4);
    pool.units = vec![Unit::one("p-1".into(), 0)];
    let step = pool.step(0, 1, &strings(&["p-1"]), &[], false);
    assert_eq!(ids(&step), vec![("p-1", Why::Drained)]);
}

#[test]
fn a_started_unit_is_not_cancelled_as_one_too_many() {
    let mut book = Book::new("m", 1, 60_000, 100, 100);
    let mut started = unit(&book, "1", 0, false);
    started.running = true;
    book.units = vec![started, unit(&book, "2", 0, false)];
    let step = book.step(0, 0, &[], &[], false);
    assert_eq!(
        ids(&step),
        vec![("2", Why::Excess)],
        "its worker may be registering now"
    );
}

#[test]
fn whole_units_never_take_a_manager_above_its_cap() {
    // A cap of 5 workers in units of 2: at most 2 units (4 workers), never 3 (6).
    let mut book = Book::new("m", 2, 60_000, 5, 100);
    assert_eq!(book.step(0, 5, &[], &[], false).start, 2);
}

#[test]
fn at_most_max_pending_units_wait_and_one_at_a_time_while_recovering() {
    let mut book = Book::new("m", 1, 60_000, 100, 3);
    assert_eq!(
        book.step(0, 10, &[], &[], false).start,
        3,
        "3 may wait at once"
    );
    book.units = vec![unit(&book, "1", 0, false), unit(&book, "2", 0, false)];
    assert_eq!(book.step(0, 10, &[], &[], false).start, 1, "2 wait already");
    let mut running = unit(&book, "3", 0, false);
    running.running = true;
    book.units.push(running);
    assert_eq!(
        book.step(0, 10, &[], &[], false).start,
        1,
        "a running unit does not wait in the queue"
    );
    // After a failure, until a unit comes up: one waits at a time, not the whole batch.
    book.units.clear();
    assert_eq!(book.step(0, 10, &[], &[], true).start, 1);
    book.units = vec![unit(&book, "1", 0, false)];
    assert_eq!(book.step(0, 10, &[], &[], true).start, 0);
}

#[test]
fn an_ending_unit_reports_only_its_workers_still_registered() {
    let mut book = Book::new("m", 2, 60_000, 100, 4);
    let mut ending = unit(&book, "7", 0, true);
    ending.ending = true;
    book.units = vec![unit(&book, "6", 0, false), ending];
    assert_eq!(
        book.workers(&strings(&["m-7-2"])),
        vec!["m-6-1", "m-6-2", "m-7-2"],
        "m-7-1 left: not starting; m-7-2 still stops"
    );
}

/// The process pool: units of one worker under their own names, no timeout, no queue limit.
#[test]
fn a_pool_stops_named_workers_then_the_newest_unregistered_and_fills_up() {
    let mut book = Book::processes("m", 100);
    book.units = ["m-1", "m-2", "m-3", "m-4"]
        .iter()
        .map(|n| Unit::one(n.to_string(), 0))
        .collect();
    // m-2 and m-4 registered; m-1 is named (drained). Registered ones are never taken unnamed.
    let step = book.step(
        u64::MAX - 1,
        1,
        &strings(&["m-1"]),
        &strings(&["m-1", "m-2", "m-4"]),
        false,
    );
    let stopped: Vec<&str> = step.stop.iter().map(|s| s.id.as_str()).collect();
    assert_eq!(stopped, ["m-1", "m-3"]);
    assert_eq!(step.start, 0);
    assert_eq!(book.workers(&[]), ["m-2", "m-4"]);
    // Below the desired count: start the difference, all at once.
    assert_eq!(book.step(0, 6, &[], &[], false).start, 4);
}

#[test]
fn units_failing_in_one_round_count_once_and_rounds_in_a_row_double_the_wait() {
    let mut backoff = Backoff::default();
    assert_eq!(backoff.fail(0, 0), Failed::Nothing);
    assert!(!backoff.active(0) && !backoff.recovering(), "no failure");
    // Four units late in the same poll: one failure, a 1 s wait.
    let once = Failed::Round {
        failures: 1,
        delay_ms: 1000,
    };
    assert_eq!(backoff.fail(4, 0), once);
    assert!(backoff.active(999));
    assert!(!backoff.active(1000));
    // Another found late a poll later, while backing off: the same event, no longer wait.
    assert_eq!(backoff.fail(1, 200), Failed::Same);
    assert!(!backoff.active(1000));
    // What the policy is told (weir:plugin@0.2.0 `launch`): the last failure seen, the wait left.
    let report = |failures, last_failure_ms, backoff_ms| LaunchReport {
        failures,
        last_failure_ms,
        backoff_ms,
    };
    assert_eq!(backoff.report(700), report(1, Some(500), 300));
    // The next round fails too: 2 s.
    backoff.fail(2, 1000);
    assert!(backoff.active(2999));
    assert!(!backoff.active(3000));
    assert!(backoff.recovering(), "until a unit comes up");
    assert_eq!(backoff.report(3500), report(2, Some(2500), 0));
    backoff.reset();
    assert!(!backoff.recovering());
    assert_eq!(
        backoff.report(3500),
        report(0, Some(2500), 0),
        "a failure, none in a row"
    );
    backoff.fail(1, 3000);
    assert!(!backoff.active(4000), "1 s again");
}

#[test]
fn the_wait_is_capped_at_a_minute() {
    assert_eq!(delay(1), 1000);
    assert_eq!(delay(3), 4000);
    assert_eq!(delay(40), 60_000);
}

#[test]
fn the_book_follows_the_engine_ended_requeued_and_adopted_units() {
    let mut book = Book::new("m", 2, 60_000, 100, 4);
    let mut ran = unit(&book, "2", 0, true);
    ran.running = true;
    book.units = vec![unit(&book, "1", 0, false), ran, unit(&book, "3", 0, false)];
    let listed = [
        ("2".to_string(), Listed::Pending),
        ("3".to_string(), Listed::Completing),
        ("8".to_string(), Listed::Running),
        ("9".to_string(), Listed::Pending),
        ("10".to_string(), Listed::Completing),
        ("11".to_string(), Listed::Running),
    ];
    let seen = book.listed(500, &listed, &["11".to_string()]);
    let ended: Vec<&str> = seen.ended.iter().map(|u| u.id.as_str()).collect();
    assert_eq!(ended, ["1"], "no longer listed");
    assert_eq!(
        seen.requeued,
        ["2"],
        "it ran and waits again: it starts over"
    );
    let adopted: Vec<&str> = seen.adopted.iter().map(|(id, _)| id.as_str()).collect();
    assert_eq!(
        adopted,
        ["8", "9"],
        "not a completing one, nor one it is stopping"
    );
    let state = |id: &str| {
        let u = book.units.iter().find(|u| u.id == id).expect("in the book");
        (u.registered, u.running, u.ending, u.since)
    };
    assert_eq!(state("2"), (false, false, false, 500));
    assert_eq!(state("3"), (false, false, true, 0));
    assert_eq!(
        state("8"),
        (true, true, false, 500),
        "running: may be busy, taken as registered"
    );
    assert_eq!(state("9"), (false, false, false, 500));
    assert_eq!(book.units[2].workers, ["m-8-1", "m-8-2"]);
    // An adopted running unit is never cancelled as one too many.
    let step = book.step(500, 0, &[], &[], false);
    assert!(step.stop.iter().all(|s| s.id != "8"), "{step:?}");
}

#[test]
fn processes_dying_young_in_a_row_double_the_wait_and_one_that_lived_resets_it() {
    let mut restarts = Restarts::default();
    assert!(restarts.may_start(0));
    assert_eq!(
        restarts.report(0),
        LaunchReport::default(),
        "nothing failed"
    );
    assert_eq!(restarts.exited(1000, 9_999), Some(500));
    assert!(!restarts.may_start(1499) && restarts.may_start(1500));
    let report = restarts.report(1200);
    assert_eq!(
        (report.failures, report.last_failure_ms, report.backoff_ms),
        (1, Some(200), 300)
    );
    // Its replacement, started at 1500, has lived 10 s by 11,500: it came up, and the next
    // young exit waits from the start again.
    let mut later = restarts.clone();
    later.came_up(11_500, [500]);
    assert_eq!(
        later.report(11_500).failures,
        1,
        "one from before the failure"
    );
    later.came_up(11_499, [1500]);
    assert_eq!(later.report(11_499).failures, 1);
    later.came_up(11_500, [1500]);
    assert_eq!(later.report(11_500).failures, 0);
    assert_eq!(later.exited(12_000, 0), Some(500));
    assert_eq!(restarts.exited(2000, 100), Some(1000));
    for _ in 0..10 {
        restarts.exited(3000, 0);
    }
    assert_eq!(restarts.exited(3000, 0), Some(30_000), "capped");
    assert_eq!(restarts.exited(40_000, 10_000), None, "it lived: no wait");
    assert_eq!(
        restarts.exited(50_000, 0),
        Some(500),
        "from the start again"
    );
}

/// One thing that happens to a manager's units, for the property test.
#[derive(Clone, Debug)]
enum Op {
    /// A poll: the scheduler wants `desired`, `dt` ms after the last one; each unit's workers
    /// registered with the bits of `registered`, named (drained) with those of `stop`.
    Poll {
        dt: u64,
        desired: u32,
        registered: u64,
        stop: u64,
    },
    /// The engine starts running unit `n` (modulo the units there are).
    Runs(usize),
}

fn op() -> impl Strategy<Value = Op> {
    prop_oneof![
        4 => (0u64..40_000, 0u32..20, any::<u64>(), any::<u64>()).prop_map(
            |(dt, desired, registered, stop)| Op::Poll { dt, desired, registered, stop }
        ),
        1 => any::<usize>().prop_map(Op::Runs),
    ]
}

proptest! {
    /// Random demand, registrations, drains and time: never above the cap in whole units, never
    /// a unit with a registered worker stopped unless all of those are drained, at most
    /// `max_pending` waiting (one while recovering), and the late units of a poll count one
    /// failure.
    #[test]
    fn the_step_keeps_the_cap_the_busy_units_and_one_failure_per_round(
        size in 1u32..4,
        max_workers in 0u32..12,
        max_pending in 1usize..5,
        ops in proptest::collection::vec(op(), 1..60),
    ) {
        let mut book = Book::new("m", size, 30_000, max_workers, max_pending);
        let mut backoff = Backoff::default();
        let (mut now, mut next) = (0u64, 0u64);
        // Workers register once and stay registered (the scheduler's list) until their unit goes.
        let mut registered: Vec<String> = Vec::new();
        for op in ops {
            let (dt, desired, bits, stop_bits) = match op {
                Op::Runs(n) => {
                    let len = book.units.len();
                    if len > 0 {
                        book.units[n % len].running = true;
                    }
                    continue;
                }
                Op::Poll { dt, desired, registered, stop } => (dt, desired, registered, stop),
            };
            now += dt;
            let all: Vec<String> = book.units.iter().flat_map(|u| u.workers.clone()).collect();
            for (i, worker) in all.iter().enumerate() {
                if bits >> (i % 64) & 1 == 1 && !registered.contains(worker) {
                    registered.push(worker.clone());
                }
            }
            let stop: Vec<String> = all
                .iter()
                .enumerate()
                .filter(|(i, _)| stop_bits >> (i % 64) & 1 == 1)
                .map(|(_, w)| w.clone())
                .collect();
            let before: Vec<Unit> = book.units.clone();
            let step = book.step(now, desired, &stop, &registered, backoff.recovering());
            if !step.registered.is_empty() {
                backoff.reset();
            }
            let failures = backoff.failures();
            for gone in &step.stop {
                let unit = before.iter().find(|u| u.id == gone.id);
                prop_assert!(unit.is_some(), "stopped {} it did not have", gone.id);
                let Some(unit) = unit else { continue };
                let mine: Vec<&String> =
                    unit.workers.iter().filter(|w| registered.contains(w)).collect();
                match gone.why {
                    Why::Drained => prop_assert!(
                        mine.iter().all(|w| stop.contains(w)),
                        "{} stopped as drained with a busy worker", unit.id
                    ),
                    Why::Late | Why::Excess => prop_assert!(
                        mine.is_empty() && !unit.registered,
                        "{} has a registered worker: stopped {:?}", unit.id, gone.why
                    ),
                }
                if gone.why == Why::Late {
                    prop_assert!(now - unit.since > book.timeout);
                }
                registered.retain(|w| !unit.workers.contains(w));
            }
            let late = step.stop.iter().filter(|s| s.why == Why::Late).count();
            let recovering = backoff.recovering();
            let failed = backoff.fail(late, now);
            prop_assert!(backoff.failures() <= failures + 1, "{late} late: one failure a round");
            prop_assert_eq!(late == 0, failed == Failed::Nothing);
            let pending = book.units.iter().filter(|u| u.pending()).count();
            prop_assert!(step.start <= max_pending.saturating_sub(pending));
            if recovering {
                prop_assert!(step.start <= 1);
            }
            if !backoff.active(now) {
                for _ in 0..step.start {
                    next += 1;
                    let unit = book.unit(format!("u{next}"), now);
                    book.units.push(unit);
                }
            }
            let workers = book.units.len() as u64 * u64::from(size);
            prop_assert!(
                workers <= u64::from(max_workers),
                "{} units of {size}: above the cap of {max_workers}", book.units.len()
            );
            prop_assert_eq!(book.units.len(), book.units.iter().map(|u| &u.id).collect::<HashSet<_>>().len());
        }
    }
}
