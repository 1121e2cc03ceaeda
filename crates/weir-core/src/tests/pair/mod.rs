//! The scheduler's core, N worker cores ([`crate::worker`]) and M worker managers (each a
//! manager core: [`crate::units::Book`] and its backoff) over an in-memory network on
//! virtual time, in the manner of quinn-proto's `Pair`: no sockets, no threads, no clock. The
//! native waterfall decides how many workers each manager runs. Seeded random steps — submit,
//! advance time, break a connection (what was in flight is lost, each side notices within the
//! idle timeout), partition a worker or a manager (frames wait; a long partition times the
//! connection out), duplicate idempotent frames, crash and restart a worker, crash a manager
//! (its units run on; it restarts with the same id and adopts them), start a twin (a second
//! manager process with an id in use) — and after every step the invariants:
//! - no task runs on two workers at once, both as the worker cores see it (a core holds it as
//!   running and its lease is valid) and physically (a run that has not ended, been killed by
//!   the guard at the lease's end, or been given up);
//! - every core's own sanity check holds: each worker core's and the whole scheduler's
//!   (`Scheduler::sanity_check`, which about doubles the time of the 100,000 steps);
//! - at most one connection per manager id is registered, and no manager runs more units than
//!   its cap;
//!
//! and once the faults stop, every submitted task finishes and every manager runs what the
//! scheduler asked of it last (with work queued, and with none).
//!
//! A connection is a QUIC stream: ordered and reliable while it lives, so frames are never
//! reordered or dropped on a live connection. Loss is a connection that breaks with frames in
//! flight; duplication is limited to frames the protocol makes idempotent (heartbeats, lease
//! renewals and answers, reports and acknowledgements), as a retransmission after a reconnect.

mod sim;

use sim::{Faults, ManagerStats, Sim};

/// Steps over all seeds: at least 100,000 (the bar), 20 to 40 s in a debug build.
const SEEDS: u64 = 24;
const STEPS: usize = 4_500;

#[test]
fn no_task_runs_twice_at_once_and_every_task_finishes_once_faults_stop() {
    let (mut total, mut reruns, mut killed, mut lease_ends, mut lapses) = (0, 0, 0, 0, 0);
    let mut stats = ManagerStats::default();
    let mut scaled_up = 0;
    for seed in 1..=SEEDS {
        let managers = 1 + (seed % 2) as usize;
        let mut sim = Sim::with_managers(seed, 1 + (seed % 4) as usize, managers, Faults::all());
        for _ in 0..STEPS {
            sim.random_step();
            sim.check();
            total += 1;
        }
        sim.heal();
        // Work for the managers: once faults stop, each runs what the scheduler asks.
        sim.long_tasks = true;
        sim.submit(12);
        scaled_up += u64::from(sim.settle_managers(120_000) > 0);
        sim.run_until_done(600_000);
        // And once the work is done, what it asks then (nothing).
        sim.settle_managers(120_000);
        total += sim.steps_after_heal;
        let done = sim.finished();
        assert_eq!(
            done,
            sim.submitted,
            "seed {seed}: {done} of {} tasks finished 10 virtual minutes after the faults stopped\n{}",
            sim.submitted,
            sim.trace_tail()
        );
        assert!(sim.submitted > 0, "seed {seed}: nothing was submitted");
        reruns += sim.runs_started.saturating_sub(sim.submitted);
        killed += sim.killed;
        lease_ends += sim.lease_ends;
        lapses += sim.lapses;
        stats.add(&sim.manager_stats());
    }
    assert!(total >= 100_000, "only {total} steps");
    eprintln!(
        "{total} steps, {reruns} reruns, {killed} runs stopped by a lease's end, {lease_ends} sessions ended by one, {lapses} leases renewed after running out; managers: {stats:?}, {scaled_up} seeds converged on more than none"
    );
    // Not vacuous: the faults made tasks run again, and leases run out with tasks running.
    assert!(reruns > 100, "{reruns} reruns");
    assert!(killed > 10, "{killed} runs stopped by a lease's end");
    assert!(
        lease_ends > 10,
        "{lease_ends} sessions ended by a lease's end"
    );
    // Idle workers' leases ran out between beats slower than the lease (the seeds whose
    // scheduler slows idle workers as the cluster grows) and were renewed after.
    assert!(lapses > 100, "{lapses} leases renewed after running out");
    // Managers crashed and restarted, adopting units that ran on; twins were refused; the
    // managers converged on work, not only on nothing.
    assert!(stats.restarts > 10, "{stats:?}");
    assert!(stats.adopted > 10, "{stats:?}");
    assert!(stats.twin_refusals > 10, "{stats:?}");
    assert!(stats.goodbyes > 10, "{stats:?}");
    assert!(stats.long_absences > 10, "{stats:?}");
    assert!(stats.dismissed > 5, "{stats:?}");
    // Twins named their workers as the first managers did, and reported names the first's
    // live workers held (with another instance, or none).
    assert!(stats.crossed > 10, "{stats:?}");
    assert!(
        scaled_up > SEEDS / 2,
        "{scaled_up} seeds converged on more than none"
    );
}

#[test]
fn a_second_manager_with_an_id_in_use_is_refused_and_no_task_runs_twice() {
    let mut sim = Sim::with_managers(11, 1, 1, Faults::none());
    sim.long_tasks = true;
    sim.submit(8);
    for _ in 0..40 {
        sim.advance(250);
        sim.check();
    }
    assert!(sim.manager_registered(0), "the manager registered");
    sim.start_twin(0);
    for _ in 0..40 {
        sim.advance(250);
        sim.check();
    }
    // The twin tried and was refused (again and again); the first keeps its connection.
    assert!(
        sim.manager_stats().twin_refusals > 1,
        "{:?}",
        sim.manager_stats()
    );
    assert!(!sim.manager_registered(1), "the twin registered");
    assert!(
        sim.manager_registered(0),
        "the first manager lost its connection"
    );
    sim.heal();
    sim.run_until_done(600_000);
    assert_eq!(sim.finished(), sim.submitted);
    sim.settle_managers(120_000);
}

#[test]
fn without_faults_every_task_finishes_and_outcomes_are_acknowledged() {
    for seed in 100..106 {
        let mut sim = Sim::new(seed, 3, Faults::none());
        for _ in 0..2_000 {
            sim.random_step();
            sim.check();
        }
        sim.heal();
        sim.run_until_done(600_000);
        assert_eq!(sim.finished(), sim.submitted, "seed {seed}");
        // Nothing lost, nothing crashed: no task ran twice, and no outcome waits for an
        // acknowledgement at the end.
        assert_eq!(
            sim.runs_started,
            sim.submitted,
            "seed {seed}: a task ran twice\n{}",
            sim.trace_tail()
        );
        // The last acknowledgement may still be on the wire when the scheduler counts its
        // task finished: a second later (many round trips) none waits.
        sim.advance(1_000);
        assert_eq!(sim.unacknowledged(), 0, "seed {seed}");
    }
}

#[test]
fn a_partition_longer_than_the_lease_stops_the_tasks_before_they_run_elsewhere() {
    let mut sim = Sim::new(7, 2, Faults::none());
    sim.long_tasks = true;
    sim.submit(6);
    sim.advance(1_000);
    sim.check();
    let holder = (0..2)
        .find(|w| sim.physically_running(*w) > 0)
        .expect("a worker runs a task");
    sim.partition(holder, 20_000);
    for _ in 0..200 {
        sim.advance(100);
        sim.check();
    }
    // The lease ran out during the partition: the worker gave its tasks up.
    assert_eq!(sim.physically_running(holder), 0);
    assert!(sim.killed > 0);
    sim.heal();
    sim.run_until_done(600_000);
    assert_eq!(sim.finished(), sim.submitted);
}

/// A twin let in once the first manager's connection timed out (partitioned) names its units as
/// the first does (two process pools of one id both name theirs `{id}-n`), stops its workers of
/// names the first's workers hold and reports those names exited. Before the reports named
/// each process's instance, the scheduler took the first's worker of that name, registered
/// (again) and still running, for gone and requeued its tasks at once: seed 52 ran task 362 on
/// w0 and w45. Now a report of another instance is left out, and one naming none is fenced.
/// (The main test's twins collide too; this is the seed that first showed it.)
#[test]
fn a_twin_naming_its_workers_as_the_first_does_makes_no_task_run_twice() {
    // Near step 1,900: the twin stops its workers of names the first's worker w45 also holds;
    // w45 registers, starts a task, and must not be taken for gone.
    let seed = 52;
    let managers = 1 + (seed % 2) as usize;
    let mut sim = Sim::with_managers(seed, 1 + (seed % 4) as usize, managers, Faults::all());
    for _ in 0..STEPS {
        sim.random_step();
        sim.check();
    }
    sim.heal();
    sim.run_until_done(600_000);
    assert_eq!(sim.finished(), sim.submitted);
}

/// A seed replays exactly: the cores iterate their maps in a fixed order (`crate::hash`) and take
/// time and randomness only as inputs, so two runs of a seed note the same events in the same
/// order and send the same frames (checked: with std's randomly keyed maps in the core, one of
/// seeds 1 to 6 runs differently within a second).
#[test]
fn a_seed_replays_exactly() {
    for seed in 1..=6 {
        let run = || {
            let mut sim = Sim::new(seed, 3, Faults::all());
            for _ in 0..4_500 {
                sim.random_step();
            }
            sim.heal();
            sim.run_until_done(600_000);
            (sim.digest, sim.runs_started, sim.finished())
        };
        assert_eq!(run(), run(), "seed {seed} ran differently twice");
    }
}
