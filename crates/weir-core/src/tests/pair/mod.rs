//! The scheduler's core and N worker cores ([`crate::worker`]) over an in-memory network on
//! virtual time, in the manner of quinn-proto's `Pair`: no sockets, no threads, no clock. Seeded
//! random steps — submit, advance time, break a connection (what was in flight is lost, each
//! side notices within the idle timeout), partition a worker (frames wait; a long partition
//! times the connection out), duplicate idempotent frames, crash and restart a worker — and
//! after every step the invariants:
//! - no task runs on two workers at once, both as the worker cores see it (a core holds it as
//!   running and its lease is valid) and physically (a run that has not ended, been killed by
//!   the guard at the lease's end, or been given up);
//! - every core's own sanity check holds (each worker core's after every step, the scheduler's
//!   task core's after every eighth: it walks every task);
//!
//! and once the faults stop, every submitted task finishes.
//!
//! A connection is a QUIC stream: ordered and reliable while it lives, so frames are never
//! reordered or dropped on a live connection. Loss is a connection that breaks with frames in
//! flight; duplication is limited to frames the protocol makes idempotent (heartbeats, lease
//! renewals and answers, reports and acknowledgements), as a retransmission after a reconnect.

mod sim;

use sim::{Faults, Sim};

/// Steps over all seeds: at least 100,000 (the bar), a few seconds in a debug build.
const SEEDS: u64 = 24;
const STEPS: usize = 4_500;

#[test]
fn no_task_runs_twice_at_once_and_every_task_finishes_once_faults_stop() {
    let (mut total, mut reruns, mut killed, mut lease_ends) = (0, 0, 0, 0);
    for seed in 1..=SEEDS {
        let mut sim = Sim::new(seed, 1 + (seed % 4) as usize, Faults::all());
        for _ in 0..STEPS {
            sim.random_step();
            sim.check();
            total += 1;
        }
        sim.heal();
        sim.run_until_done(600_000);
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
    }
    assert!(total >= 100_000, "only {total} steps");
    eprintln!(
        "{total} steps, {reruns} reruns, {killed} runs stopped by a lease's end, {lease_ends} sessions ended by one"
    );
    // Not vacuous: the faults made tasks run again, and leases run out with tasks running.
    assert!(reruns > 100, "{reruns} reruns");
    assert!(killed > 10, "{killed} runs stopped by a lease's end");
    assert!(
        lease_ends > 10,
        "{lease_ends} sessions ended by a lease's end"
    );
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
            sim.runs_started, sim.submitted,
            "seed {seed}: a task ran twice"
        );
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
