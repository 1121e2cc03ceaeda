//! What the scheduler's shell takes from the outside world, each through one narrow trait, so a
//! simulated cluster can run the real shell: [`Seams::real`] is the host's.

use std::sync::Arc;

use super::journal::JournalStore;
use crate::clock::{Clock, TokioClock};
use crate::net::udp::{HostUdp, Udp};

/// The scheduler's seams (see `docs/architecture.md`, "Seams").
#[derive(Debug)]
pub struct Seams {
    /// Where the actor reads the time.
    pub clock: Arc<dyn Clock>,
    /// Where the journal's bytes are kept, instead of the file `--journal` names (`None`: that
    /// file, or no journal without the flag).
    pub journal: Option<Box<dyn JournalStore>>,
    /// The socket it listens on (bound to `--listen`).
    pub udp: Arc<dyn Udp>,
    /// The running policy decides in line on the actor's task, not on a thread of its own
    /// (the host's way: a slow policy never holds up the actor). For a simulation, whose
    /// decisions must land at the step they were asked for, with a policy that is quick.
    pub policy_inline: bool,
    /// A scheduler replica's: where it keeps its Raft log and snapshot, where Raft runs, and
    /// who hears it lead (the default: the files, a thread of its own, no one).
    pub replica: super::ReplicaSeams,
}

impl Seams {
    /// The host's: tokio's clock, the journal's file, the host's sockets.
    pub fn real() -> Seams {
        Seams {
            clock: Arc::new(TokioClock),
            journal: None,
            udp: Arc::new(HostUdp),
            policy_inline: false,
            replica: super::ReplicaSeams::default(),
        }
    }
}
