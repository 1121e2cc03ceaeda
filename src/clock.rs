//! The time the shells read: one seam ([`Clock`]) between them and the host's clock, so a
//! simulated cluster (tokio's paused time, or a clock of its own) drives the real shells.
//! The cores take `now` as an argument; the shells take it from a [`Millis`] over a [`Clock`].

use std::fmt;
use std::sync::Arc;
use std::time::Duration;

use tokio::time::Instant;

/// Seam: the one place the shells (scheduler actor, worker, manager) read the time from.
pub trait Clock: Send + Sync + fmt::Debug {
    /// The time now, as a tokio instant (the shells' timers sleep until such instants).
    fn now(&self) -> Instant;

    /// The instant on tokio's timer from which this clock reads `reading` or later: the same
    /// instant unless the clock runs at a rate of its own (a simulation's drifting clock).
    fn timer(&self, reading: Instant) -> Instant {
        reading
    }
}

/// The real clock: tokio's, so a runtime with paused time (`tokio::time::pause`) drives it.
#[derive(Clone, Copy, Debug, Default)]
pub struct TokioClock;

impl Clock for TokioClock {
    fn now(&self) -> Instant {
        Instant::now()
    }
}

/// Milliseconds since this was made, on a [`Clock`]: the `now` a shell hands its pure core,
/// and back to an instant for the shell's timers.
#[derive(Clone, Debug)]
pub struct Millis {
    clock: Arc<dyn Clock>,
    start: Instant,
}

impl Millis {
    /// Starting now on `clock`.
    pub fn new(clock: Arc<dyn Clock>) -> Millis {
        let start = clock.now();
        Millis { clock, start }
    }

    /// Starting now on the real clock ([`TokioClock`]).
    pub fn real() -> Millis {
        Millis::new(Arc::new(TokioClock))
    }

    /// Milliseconds since the start (rounded down).
    pub fn now(&self) -> u64 {
        self.since(self.clock.now())
    }

    /// The instant now on this clock.
    pub fn instant(&self) -> Instant {
        self.clock.now()
    }

    /// `ms` on this clock as an instant of tokio's timer (for timers): from then on, `now`
    /// is `ms` or later.
    pub fn at(&self, ms: u64) -> Instant {
        self.clock.timer(self.start + Duration::from_millis(ms))
    }

    /// An instant as milliseconds on this clock (0 before the start).
    pub fn since(&self, instant: Instant) -> u64 {
        let elapsed = instant.saturating_duration_since(self.start);
        u64::try_from(elapsed.as_millis()).unwrap_or(u64::MAX)
    }
}

/// A clock moved by hand (tests, simulations): it stands still until [`ManualClock::advance`].
#[derive(Debug)]
pub struct ManualClock(std::sync::Mutex<Instant>);

impl ManualClock {
    /// Standing at the real time now.
    pub fn new() -> ManualClock {
        ManualClock(std::sync::Mutex::new(Instant::now()))
    }

    /// Move it on by `by`.
    pub fn advance(&self, by: Duration) {
        let mut now = self
            .0
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner());
        *now += by;
    }
}

impl Default for ManualClock {
    fn default() -> ManualClock {
        ManualClock::new()
    }
}

impl Clock for ManualClock {
    fn now(&self) -> Instant {
        *self
            .0
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn millis_follow_the_clock_they_are_given() {
        let manual = Arc::new(ManualClock::new());
        let start = manual.now();
        let clock = Millis::new(manual.clone());
        assert_eq!(clock.now(), 0);
        manual.advance(Duration::from_millis(1500));
        assert_eq!(clock.now(), 1500);
        assert_eq!(clock.at(42), start + Duration::from_millis(42));
        assert_eq!(clock.since(clock.at(42)), 42);
        assert_eq!(clock.since(start - Duration::from_millis(1)), 0);
    }
}
