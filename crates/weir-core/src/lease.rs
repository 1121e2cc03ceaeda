//! The lease rule behind "never twice at once", as arithmetic: how long the scheduler waits,
//! after it last heard from a worker lost without a word, before that worker's tasks may run
//! elsewhere. Pure (no clock): the worker keeps its side in `core/worker/lease.rs`, the scheduler's
//! task core applies the fence (`tasks::Config::fence_ms`); RELIABILITY.md, "Leases", says the
//! same in prose.

use std::time::Duration;

/// Clocks may run this much apart in rate (1/32 ≈ 3 %): far more than the drift of any
/// machine's monotonic clock (crystal oscillators drift by tens of ppm; NTP slews at most
/// 500 ppm), so a clock that misbehaves within reason still holds the rule.
pub(crate) const CLOCK_RATE_SLACK_DIVISOR: u32 = 32;

/// What the guard process may take to kill a worker's tasks once the lease runs out (it learns
/// the deadline over a pipe, and SIGKILL of a process group takes effect in microseconds; a
/// task stuck in the kernel may take longer, which no timeout can bound).
pub const KILL_MARGIN: Duration = Duration::from_secs(1);

/// How long after the last thing it heard from a worker lost without a word the scheduler
/// waits before running that worker's tasks elsewhere (and how long tasks found unfinished in
/// the journal wait at start): longer than any lease the worker could still hold.
///
/// The arithmetic (RELIABILITY.md, "Leases", says the same):
/// - A lease is granted only in answer to a request ([`weir_proto::FromWorker::Renew`], or
///   the registration), and runs `lease` from when the worker *sent* that request, on the
///   worker's clock. In real time it ends by `sent + lease × (1 + ρ)`, ρ the clocks' rate
///   difference.
/// - The scheduler hears that request at `heard ≥ sent`, and hears nothing after `last_heard`,
///   so `sent ≤ last_heard` for every grant: every lease ends by
///   `last_heard + lease × (1 + ρ)`, and the guard has killed its tasks `KILL_MARGIN` later.
/// - The scheduler reruns them at `last_heard + fence(lease)` on its own clock, which with
///   ρ ≤ 1/32 is after that: `fence = lease + lease/32 + KILL_MARGIN` (10 s → 11.3 s).
///
/// How long the link took to bring the grant does not enter: a slow link shortens the lease
/// the worker holds, it never stretches it; and when the connection times out does not enter
/// either (quinn's idle timer is `max(idle_timeout, 3 × PTO)`, ~30 s on a slow link).
pub fn fence(lease: Duration) -> Duration {
    lease + lease / CLOCK_RATE_SLACK_DIVISOR + KILL_MARGIN
}

/// How often a worker that holds no task beats (each beat a renewal), as the scheduler asks in
/// [`weir_proto::ToWorker::Registered`]: `min(lease / 4, heartbeat_timeout / 2)` (10 s and 5 s
/// → 2.5 s), against every second for a worker with tasks.
///
/// The arithmetic:
/// - The lease is asked for at least four times within its length, as a busy worker does, so
///   an answer or two may be late or lost before it runs out (an idle worker whose lease runs
///   out registers again; it has nothing at stake, but the churn is not free).
/// - The scheduler takes a worker silent for `heartbeat_timeout` for lost, so an idle worker
///   beats at least twice within it: one beat may come up to half the timeout late. QUIC
///   retransmits a lost beat within a few round trips, so only a link that is down for that
///   long (or a delay that grows by that much) loses an idle worker; it reconnects and
///   registers again.
/// - Each beat is a renewal, its answer and an acknowledgement: three packets. At 2.5 s an idle
///   worker costs the scheduler 1.2 packets a second instead of the ~5 of a beat a second
///   with keep-alives every 0.5 s on both sides (BENCHMARKS.md, "What an idle peer costs").
///
/// With no lease (`lease = 0`), `heartbeat_timeout / 2`. Never below 10 ms.
pub fn idle_beat(lease: Duration, heartbeat_timeout: Duration) -> Duration {
    let half = heartbeat_timeout / 2;
    let beat = if lease.is_zero() {
        half
    } else {
        (lease / 4).min(half)
    };
    beat.max(Duration::from_millis(10))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_idle_worker_asks_four_times_a_lease_and_beats_twice_a_heartbeat_timeout() {
        let s = Duration::from_secs;
        assert_eq!(idle_beat(s(10), s(5)), Duration::from_millis(2_500));
        for (lease, timeout) in [(s(10), s(5)), (s(60), s(5)), (s(2), s(30)), (s(10), s(1))] {
            let beat = idle_beat(lease, timeout);
            assert!(beat * 4 <= lease, "{lease:?}/{timeout:?}: {beat:?}");
            assert!(beat * 2 <= timeout, "{lease:?}/{timeout:?}: {beat:?}");
        }
        assert_eq!(
            idle_beat(Duration::ZERO, s(5)),
            Duration::from_millis(2_500)
        );
    }

    #[test]
    fn the_fence_outlasts_any_lease_granted_before_the_last_word_and_its_kill() {
        let lease = Duration::from_secs(10);
        assert_eq!(fence(lease), Duration::from_micros(11_312_500));
        // A lease granted for a request sent at last_heard, on a clock up to 1/32 slower,
        // ends (and its tasks are killed) before the fence: for any lease length.
        for ms in [1u64, 100, 1_000, 10_000, 3_600_000] {
            let lease = Duration::from_millis(ms);
            let worst =
                lease.mul_f64(1.0 + 1.0 / f64::from(CLOCK_RATE_SLACK_DIVISOR)) + KILL_MARGIN;
            assert!(
                fence(lease) >= worst,
                "{ms} ms: fence {:?} < {worst:?}",
                fence(lease)
            );
        }
    }
}
