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
/// [`weir_proto::ToWorker::Registered`]: once a lease, leaving the answer [`ANSWER_ALLOWANCE`]
/// (1 s) before the lease runs out, or a quarter of the lease for a lease of 4 s or less:
/// `max(lease − 1 s, lease × 3/4)`, 9 s for the default 10 s. A worker with tasks beats every
/// second (or a quarter of its lease), as before.
///
/// The arithmetic:
/// - A renewal sent at `t` is answered with a lease to `t + lease`; the next goes at
///   `t + beat`, so its answer has `lease − beat` (1 s, or a quarter of a short lease) to come
///   before the first lease runs out. An answer later than that (a link down or slower than
///   that) lets the lease run out: an idle worker holds nothing, so nothing is given up, and it
///   registers again. A worker handed tasks beats at its busy pace from then on, so what it
///   runs is renewed four times a lease, as before.
/// - The scheduler takes an idle worker (one it has handed nothing) for lost only when it has
///   been silent for [`idle_silence`]: `beat + heartbeat_timeout`, so its beat may come as
///   late as a busy worker's may. A worker it hands tasks to is judged by `heartbeat_timeout`
///   again, counted from the hand-over at the earliest.
/// - The pace enters no safety bound: the fence ([`fence`]) counts from what the scheduler last
///   heard, however long ago that is.
/// - Each beat is a renewal, its answer and an acknowledgement: three packets. At 9 s an idle
///   worker costs the scheduler a third of a packet a second, against 1.2 at the 2.5 s of
///   before (BENCHMARKS.md, "What an idle peer costs").
///
/// With no lease (`lease = 0`), `heartbeat_timeout / 2`. Never below 10 ms.
pub fn idle_beat(lease: Duration, heartbeat_timeout: Duration) -> Duration {
    let beat = if lease.is_zero() {
        heartbeat_timeout / 2
    } else {
        lease
            .saturating_sub(ANSWER_ALLOWANCE)
            .max(lease.mul_f64(0.75))
    };
    beat.max(Duration::from_millis(10))
}

/// What an idle worker's lease leaves its renewal's answer to come in (see [`idle_beat`]).
pub const ANSWER_ALLOWANCE: Duration = Duration::from_secs(1);

/// How long the scheduler lets an idle worker be silent before taking it for lost:
/// `idle_beat + heartbeat_timeout` ([`idle_beat`] has the arithmetic).
pub fn idle_silence(lease: Duration, heartbeat_timeout: Duration) -> Duration {
    idle_beat(lease, heartbeat_timeout) + heartbeat_timeout
}

/// The longest pace a large cluster asks of its idle workers ([`idle_pace`]).
pub const MAX_IDLE_PACE: Duration = Duration::from_secs(60);

/// How often the scheduler asks a worker that holds no task to beat, with `peers` registered
/// (workers and managers: the budget is theirs together, [`manager_pace`]) and `per_worker` of
/// pace for each (`1 s / N` for `scheduler --idle-beats N`, a budget of N idle beats a second
/// in all): [`idle_beat`] while the cluster is small enough for that, then slower as it grows,
/// so that the idle peers' beats together stay within the budget: `peers × per_worker`, up to
/// [`MAX_IDLE_PACE`] (never below [`idle_beat`]). Told at
/// registration and again with every answer to a renewal ([`weir_proto::ToWorker::Lease`]), so
/// the pace follows the cluster.
///
/// The arithmetic, beyond [`idle_beat`]'s:
/// - A pace longer than [`idle_beat`] lets an idle worker's lease run out between its beats.
///   It runs nothing then, so nothing is at stake; a task handed to it waits, draws a renewal
///   at once and starts when that is answered: one round trip later than it would have with
///   the lease held. The fence ([`fence`]) still counts from what the scheduler last heard.
/// - The scheduler takes an idle worker for lost once it has been silent for the longer of the
///   last two paces it told it plus `heartbeat_timeout` (the worker may not have had the later
///   answer when it set its next beat), so a dead idle worker is seen within
///   `pace + heartbeat_timeout`: 65 s at most on the default 5 s timeout, and the 14 s of
///   [`idle_silence`] while the cluster is small.
/// - At the default budget of 500 a second, the pace stays 9 s up to 4,500 peers and is 22 s
///   with 10,000 workers under 1,000 managers (an idle worker's 0.33 datagrams a second fall to
///   0.14: each beat is a renewal, its answer and an acknowledgement).
///
/// `per_worker` zero: no budget, always [`idle_beat`].
pub fn idle_pace(
    lease: Duration,
    heartbeat_timeout: Duration,
    peers: u64,
    per_worker: Duration,
) -> Duration {
    let beat = idle_beat(lease, heartbeat_timeout);
    match per_worker.is_zero() {
        true => beat,
        false => spread(peers, per_worker).min(MAX_IDLE_PACE).max(beat),
    }
}

/// The longest pace a large cluster asks of its managers ([`manager_pace`]): a manager silent
/// for its pace and a little more is offline, and one offline for `--manager-forget-after`
/// (60 s by default) beyond that is forgotten, its workers told to leave.
pub const MAX_MANAGER_PACE: Duration = Duration::from_secs(30);

/// How often the scheduler asks a manager with nothing new to say to report, with `peers`
/// (workers and managers) registered and `per_peer` of pace for each, as [`idle_pace`] does for
/// idle workers: half `heartbeat_timeout` while the cluster is small enough for that (2.5 s on
/// the default 5 s), then `peers × per_peer`, up to [`MAX_MANAGER_PACE`]. A manager reports at
/// once whenever what it reports changes, whatever its pace.
///
/// The arithmetic: a manager is offline once silent for [`manager_silence`] of the longer of the
/// last two paces it was told (half the timeout of slack for the network beyond a pace; at the
/// small cluster's pace that is the timeout itself, as before paces grew), and the manager
/// judges the scheduler's silence by the same rule (a report is acknowledged at once, so it
/// hears something at least every pace). At the default budget of 500 a second, with 10,000
/// workers under 1,000 managers, the pace is 22 s: 1,000 managers' reports and their
/// acknowledgements fall from 800 datagrams a second to 91, and a dead manager (or scheduler)
/// is seen within 24.5 s instead of 5 s.
///
/// `per_peer` zero: no budget, always half the timeout.
pub fn manager_pace(heartbeat_timeout: Duration, peers: u64, per_peer: Duration) -> Duration {
    let floor = heartbeat_timeout / 2;
    match per_peer.is_zero() {
        true => floor,
        false => spread(peers, per_peer).min(MAX_MANAGER_PACE).max(floor),
    }
}

/// How long a manager told `pace` ([`manager_pace`]) may be silent before the scheduler takes
/// it for offline (and it, with its own `heartbeat_timeout`, the scheduler for gone):
/// `pace + heartbeat_timeout / 2`, never under `heartbeat_timeout`.
pub fn manager_silence(heartbeat_timeout: Duration, pace: Duration) -> Duration {
    (pace + heartbeat_timeout / 2).max(heartbeat_timeout)
}

/// `peers × per_peer`, saturating.
fn spread(peers: u64, per_peer: Duration) -> Duration {
    u32::try_from(peers)
        .ok()
        .and_then(|peers| per_peer.checked_mul(peers))
        .unwrap_or(Duration::MAX)
}

/// The longest an idle worker may be told to go between beats with `per_worker`
/// ([`idle_pace`]): what the scheduler's QUIC idle timeout must outlast.
pub fn longest_idle_pace(
    lease: Duration,
    heartbeat_timeout: Duration,
    per_worker: Duration,
) -> Duration {
    idle_pace(lease, heartbeat_timeout, u64::MAX, per_worker)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_idle_worker_asks_once_a_lease_leaving_its_answer_a_second() {
        let s = Duration::from_secs;
        let ms = Duration::from_millis;
        assert_eq!(idle_beat(s(10), s(5)), s(9));
        assert_eq!(idle_silence(s(10), s(5)), s(14));
        // A short lease is asked for four times a lease, as by a busy worker.
        assert_eq!(idle_beat(s(1), s(5)), ms(750));
        assert_eq!(idle_beat(s(4), s(5)), s(3));
        for (lease, timeout) in [(s(10), s(5)), (s(60), s(5)), (s(2), s(30)), (s(10), s(1))] {
            let beat = idle_beat(lease, timeout);
            // Renewed before it runs out, with at least a second or a quarter of the lease
            // for the answer.
            assert!(beat < lease, "{lease:?}/{timeout:?}: {beat:?}");
            assert!(
                lease - beat >= ANSWER_ALLOWANCE.min(lease / 4),
                "{lease:?}/{timeout:?}: {beat:?}"
            );
            // Its silence may run a whole heartbeat timeout past a beat.
            assert_eq!(idle_silence(lease, timeout), beat + timeout);
        }
        assert_eq!(idle_beat(Duration::ZERO, s(5)), ms(2_500));
    }

    #[test]
    fn managers_report_within_the_budget_and_are_judged_by_their_pace() {
        let s = Duration::from_secs;
        let ms = Duration::from_millis;
        let per_second = |n: u32| s(1) / n;
        let pace = |peers| manager_pace(s(5), peers, per_second(500));
        // Small: half the heartbeat timeout, offline after the timeout itself (as before paces).
        assert_eq!(pace(1), ms(2_500));
        assert_eq!(pace(1_250), ms(2_500));
        assert_eq!(manager_silence(s(5), pace(1_250)), s(5));
        // 10,000 workers under 1,000 managers: 22 s, offline after 24.5 s.
        assert_eq!(pace(11_000), s(22));
        assert_eq!(manager_silence(s(5), pace(11_000)), ms(24_500));
        // Capped at 30 s; no budget: half the timeout whatever the size.
        assert_eq!(pace(u64::MAX), MAX_MANAGER_PACE);
        assert_eq!(manager_pace(s(5), 50_000, Duration::ZERO), ms(2_500));
        // A timeout longer than twice the cap: its own half is never shortened.
        assert_eq!(manager_pace(s(120), 50_000, per_second(500)), s(60));
        for timeout in [s(1), s(5), s(60)] {
            for peers in [0, 1, 1_251, 11_000, 1 << 40] {
                for per_second in [1, 500, 100_000] {
                    let pace = manager_pace(timeout, peers, s(1) / per_second);
                    assert!(pace >= timeout / 2 && pace <= MAX_MANAGER_PACE.max(timeout / 2));
                    // A manager reporting at its pace is never taken for offline: a pace and
                    // half a timeout of slack at least, and never less than the timeout.
                    let silence = manager_silence(timeout, pace);
                    assert!(silence >= pace + timeout / 2 && silence >= timeout);
                    // Within budget unless capped or at the floor.
                    if pace < MAX_MANAGER_PACE && pace > timeout / 2 {
                        assert!(
                            u128::from(peers) * 1_000 <= pace.as_millis() * u128::from(per_second)
                        );
                    }
                }
            }
        }
    }

    #[test]
    fn idle_workers_beat_within_the_budget_as_the_cluster_grows() {
        let s = Duration::from_secs;
        let per_second = |n: u32| s(1) / n;
        let pace = |workers| idle_pace(s(10), s(5), workers, per_second(500));
        // Small: the lease's pace, the lease held between beats.
        assert_eq!(pace(1), s(9));
        assert_eq!(pace(4_500), s(9));
        // Large: all idle beats together stay within 500 a second.
        assert_eq!(pace(10_000), s(20));
        assert_eq!(pace(25_000), s(50));
        // Very large: at most a minute (then over budget).
        assert_eq!(pace(50_000), s(60));
        assert_eq!(pace(u64::MAX), s(60));
        assert_eq!(longest_idle_pace(s(10), s(5), per_second(500)), s(60));
        // No budget: the lease's pace whatever the size.
        assert_eq!(idle_pace(s(10), s(5), 50_000, Duration::ZERO), s(9));
        assert_eq!(longest_idle_pace(s(10), s(5), Duration::ZERO), s(9));
        // A lease longer than the cap: its own pace is never shortened.
        assert_eq!(idle_pace(s(120), s(5), 50_000, per_second(500)), s(119));
        for workers in [0, 1, 100, 4_501, 9_999, 30_000, 1 << 40] {
            for per_second in [1, 10, 500, 100_000] {
                let pace = idle_pace(s(10), s(5), workers, s(1) / per_second);
                assert!(pace >= idle_beat(s(10), s(5)) && pace <= MAX_IDLE_PACE);
                // Within budget unless capped: workers / pace <= per_second.
                if pace < MAX_IDLE_PACE {
                    assert!(
                        u128::from(workers) * 1_000 <= pace.as_millis() * u128::from(per_second),
                        "{workers} workers at {pace:?} over {per_second}/s"
                    );
                }
            }
        }
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
