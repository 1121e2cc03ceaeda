//! Clocks that drift: each node's clock may run a little fast or slow (its rate drawn from the
//! seed), within the bound the lease arithmetic allows for (`weir_core::lease`: rates up to 1/32
//! apart). Each node's rate is within 1/66 of true time, so any two are within
//! 67/65 − 1 ≈ 3.08 % < 1/32 ≈ 3.13 % of each other.

use std::time::Duration;

use tokio::time::Instant;
use weir::clock::Clock;

use crate::draw::Draw;

/// Most a node's clock rate is off true time: 1/66.
const MOST: f64 = 1.0 / 66.0;

/// A clock that reads `rate` seconds per simulated second, from its making.
#[derive(Debug)]
pub(crate) struct Drift {
    origin: Instant,
    rate: f64,
}

impl Drift {
    /// Made now (inside a host: on simulated time).
    pub(crate) fn new(rate: f64) -> Drift {
        Drift {
            origin: Instant::now(),
            rate,
        }
    }
}

impl Clock for Drift {
    fn now(&self) -> Instant {
        self.origin + (Instant::now() - self.origin).mul_f64(self.rate)
    }

    /// A microsecond late, so the clock reads `reading` by then despite the rounding of the
    /// division (a timer that fires before its reading would fire again at once, forever).
    fn timer(&self, reading: Instant) -> Instant {
        let span = reading.saturating_duration_since(self.origin);
        self.origin + span.div_f64(self.rate) + Duration::from_micros(1)
    }
}

/// A node's rate: within [`MOST`] of true time, at either end of it one time in three each.
pub(crate) fn rate(draw: &mut Draw) -> f64 {
    match draw.below(3) {
        0 => 1.0 - MOST,
        1 => 1.0 + MOST,
        _ => 1.0 + MOST * (draw.below(2_001) as f64 - 1_000.0) / 1_000.0,
    }
}
