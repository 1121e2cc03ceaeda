//! What a unit's engine lists (Slurm's queue): the book follows it. A unit no longer listed
//! ended; one listed waiting again after it ran was requeued and starts over; one of this
//! manager the book does not know (it restarted, or lost track) is adopted, not started again.

use super::{Book, Unit};

/// A unit as its engine lists it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Listed {
    /// Waiting in the engine's queue.
    Pending,
    Running,
    /// Ending (cancelled from outside, or its workers left).
    Completing,
    /// Any other state (Slurm: CONFIGURING, SUSPENDED, ...).
    Other,
}

/// What [`Book::listed`] found.
#[derive(Debug, Default)]
pub struct Seen {
    /// Units no longer listed: out of the book. One that never registered is a failure.
    pub ended: Vec<Unit>,
    /// Units listed waiting again after they ran or registered: they start over.
    pub requeued: Vec<String>,
    /// Units of this manager it did not know, now in the book.
    pub adopted: Vec<(String, Listed)>,
}

impl Book {
    /// At `now` the engine lists `listed` of this manager's units; `stopping` are the ones the
    /// manager stopped that the engine still lists (not adopted again).
    pub fn listed(&mut self, now: u64, listed: &[(String, Listed)], stopping: &[String]) -> Seen {
        let mut seen = Seen::default();
        let mut kept = Vec::with_capacity(self.units.len());
        for mut unit in std::mem::take(&mut self.units) {
            let Some((_, state)) = listed.iter().find(|(id, _)| *id == unit.id) else {
                seen.ended.push(unit);
                continue;
            };
            if *state == Listed::Pending && (unit.registered || unit.running) {
                // Requeued (a failed node, a preemption with requeue): it starts over.
                seen.requeued.push(unit.id.clone());
                unit.registered = false;
                unit.since = now;
            }
            unit.running = *state == Listed::Running;
            unit.ending = *state == Listed::Completing;
            kept.push(unit);
        }
        self.units = kept;
        for (id, state) in listed {
            let known = self.units.iter().any(|u| u.id == *id) || stopping.contains(id);
            if *state != Listed::Completing && !known {
                // A running unit may have busy workers (not registered again yet, after a
                // restart of the scheduler too): taken as registered, it is stopped only once
                // the scheduler has drained its workers, never as "not started".
                let running = *state == Listed::Running;
                let unit = Unit {
                    registered: running,
                    running,
                    ..self.unit(id.clone(), now)
                };
                self.units.push(unit);
                seen.adopted.push((id.clone(), *state));
            }
        }
        seen
    }
}
