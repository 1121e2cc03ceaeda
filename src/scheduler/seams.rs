//! What the scheduler's shell takes from the outside world, each through one narrow trait, so a
//! simulated cluster can run the real shell: [`Seams::real`] is the host's.

use std::sync::Arc;

use crate::clock::{Clock, TokioClock};

/// The scheduler's seams (see `docs/architecture.md`, "Seams").
#[derive(Clone, Debug)]
pub struct Seams {
    /// Where the actor reads the time.
    pub clock: Arc<dyn Clock>,
}

impl Seams {
    /// The host's: tokio's clock.
    pub fn real() -> Seams {
        Seams {
            clock: Arc::new(TokioClock),
        }
    }
}
