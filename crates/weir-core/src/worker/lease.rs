//! The scheduler's lease on a worker's tasks, as the worker keeps it: pure (times are
//! milliseconds on the worker's clock, passed in), so its rule is tested without a network.
//!
//! The rule (RELIABILITY.md, "Leases"): a worker may start or keep running a task only while it
//! holds a lease the scheduler *granted*. A grant is the scheduler's answer to a request the
//! worker sent (its registration, or a [`weir_proto::FromWorker::Renew`]) and runs the lease's
//! length from when the worker *sent* that request: a slow link shortens the lease, it never
//! stretches it, and a connection that is merely not closed yet renews nothing. The scheduler
//! counts its fence from the last request it heard, which was sent no later than that, so the
//! worker's lease has run out (and its guard killed its tasks) before any task runs elsewhere.

use std::collections::VecDeque;

/// Renewals asked and not answered that are remembered: an answer to an older one (forgotten)
/// renews nothing, which only shortens the lease.
const ASKED_KEPT: usize = 64;

#[derive(Debug)]
pub struct Lease {
    length: u64,
    /// When it runs out unless renewed.
    until: u64,
    /// Renewals asked and not answered yet: (sequence number, when sent), oldest first.
    asked: VecDeque<(u64, u64)>,
    next: u64,
}

impl Lease {
    /// The lease granted by a registration the worker sent at `sent`.
    pub fn granted(length: u64, sent: u64) -> Lease {
        Lease {
            length,
            until: sent.saturating_add(length),
            asked: VecDeque::new(),
            next: 1,
        }
    }

    pub fn length(&self) -> u64 {
        self.length
    }

    /// When it runs out unless renewed.
    pub fn until(&self) -> u64 {
        self.until
    }

    pub fn expired(&self, now: u64) -> bool {
        now >= self.until
    }

    /// A renewal is asked at `now`: its sequence number, to send.
    pub fn ask(&mut self, now: u64) -> u64 {
        let seq = self.next;
        self.next += 1;
        if self.asked.len() == ASKED_KEPT {
            self.asked.pop_front();
        }
        self.asked.push_back((seq, now));
        seq
    }

    /// The scheduler answered renewal `seq`: the lease runs `length` from when it was asked
    /// (never shorter than it was). Returns the new end if it moved. Answers come in the order
    /// asked (one stream), so the ones asked before `seq` will not be answered any more.
    pub fn answered(&mut self, seq: u64) -> Option<u64> {
        while self.asked.front().is_some_and(|(s, _)| *s < seq) {
            self.asked.pop_front();
        }
        let (s, sent) = self.asked.front().copied()?;
        if s != seq {
            return None; // not asked in this session, or forgotten: renews nothing
        }
        self.asked.pop_front();
        let until = sent.saturating_add(self.length);
        (until > self.until).then(|| {
            self.until = until;
            until
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const L: u64 = 10_000;

    #[test]
    fn a_slow_answer_shortens_the_lease_it_never_stretches_it() {
        let t0 = 1_000;
        let mut lease = Lease::granted(L, t0);
        assert_eq!(lease.until(), t0 + L);
        let seq = lease.ask(t0 + 1000);
        // Answered 6 s after it was asked: the lease runs from the asking, not the answer.
        assert_eq!(lease.answered(seq), Some(t0 + 11000));
        assert!(!lease.expired(t0 + 7000));
        assert!(lease.expired(t0 + 11000));
    }

    #[test]
    fn only_answers_renew() {
        let t0 = 1_000;
        let mut lease = Lease::granted(L, t0);
        for s in 1..100 {
            lease.ask(t0 + s * 1000);
        }
        // Nothing answered: the lease is what the registration granted, however long the
        // connection stays open.
        assert!(lease.expired(t0 + L));
        // An answer to something never asked, or forgotten, renews nothing.
        assert_eq!(lease.answered(1000), None);
        assert_eq!(lease.answered(1), None);
        assert!(lease.expired(t0 + L));
    }

    #[test]
    fn late_answers_to_old_requests_do_not_shorten_it() {
        let t0 = 1_000;
        let mut lease = Lease::granted(L, t0);
        let first = lease.ask(t0 + 1000);
        let second = lease.ask(t0 + 2000);
        assert_eq!(lease.answered(second), Some(t0 + 12000));
        // The first's answer after the second's: skipped (asked before), the end stays.
        assert_eq!(lease.answered(first), None);
        assert_eq!(lease.until(), t0 + 12000);
    }

    proptest::proptest! {
        /// Whatever is asked and answered, in whatever order: the lease never ends later than
        /// `length` after the newest request that was answered (or the registration).
        #[test]
        fn never_past_length_after_the_newest_answered_request(
            steps in proptest::collection::vec((0u64..3000, proptest::bool::ANY, 0usize..8), 1..200)
        ) {
            let t0 = 1_000;
            let mut lease = Lease::granted(L, t0);
            let mut now = t0;
            let mut asked: Vec<(u64, u64)> = Vec::new();
            let mut newest_answered = t0;
            for (advance, ask, pick) in steps {
                now += advance;
                if ask || asked.is_empty() {
                    let seq = lease.ask(now);
                    asked.push((seq, now));
                } else {
                    let (seq, sent) = asked[asked.len().saturating_sub(1 + pick % asked.len())];
                    if lease.answered(seq).is_some() {
                        newest_answered = newest_answered.max(sent);
                    }
                }
                proptest::prop_assert!(lease.until() <= newest_answered + L);
                proptest::prop_assert!(lease.until() >= t0 + L);
            }
        }
    }
}
