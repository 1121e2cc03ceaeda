//! A worker manager's convergence, as one pure rule for every backend: a manager gets workers
//! in *units* (a Slurm job, a unit of the command backend, or one worker process: a unit of
//! size one) and each poll takes one [`Book::step`]: which units registered, which to stop and
//! why, how many to start. The backends (`weir::manager`) run the processes and commands; the
//! rules live here once. Times are milliseconds on the manager's own clock.

mod backoff;
mod engine;
#[cfg(test)]
mod tests;

use crate::hash::HashSet;

pub use backoff::{Backoff, Failed, Restarts};
pub use engine::{Listed, Seen};

/// One unit of workers: a unit of the command backend or a Slurm job (`size` workers, named
/// `{manager}-{unit}-{n}`), or one worker process (its own name).
#[derive(Clone, Debug)]
pub struct Unit {
    pub id: String,
    /// The names its workers register under.
    pub workers: Vec<String>,
    /// When it was started (or adopted): the unit timeout counts from here.
    pub since: u64,
    /// One of its workers registered (or it may be busy): stopped only once the scheduler has
    /// drained its workers, never as one too many.
    pub registered: bool,
    /// The engine says it runs (its workers may be registering right now): not cancelled as
    /// one too many either, only once drained or late. A started worker process runs (the
    /// process backend); unknown (false) for the command backend.
    pub running: bool,
    /// The engine is ending it (Slurm lists it COMPLETING: cancelled from outside, or its
    /// workers left): only its workers still registered are reported, so the ones already gone
    /// do not count as starting.
    pub ending: bool,
}

impl Unit {
    /// A unit of one worker process, named `name`, started at `since`.
    pub fn one(name: String, since: u64) -> Unit {
        Unit {
            id: name.clone(),
            workers: vec![name],
            since,
            registered: false,
            running: false,
            ending: false,
        }
    }

    /// Waiting in the engine's queue: neither running nor registered.
    pub fn pending(&self) -> bool {
        !self.registered && !self.running && !self.ending
    }
}

/// The names the workers of unit `unit` of `manager` register under.
pub fn names(manager: &str, unit: &str, size: u32) -> Vec<String> {
    (1..=size)
        .map(|n| format!("{manager}-{unit}-{n}"))
        .collect()
}

/// Why a unit is stopped.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Why {
    /// None of its workers registered within the unit timeout: a failure.
    Late,
    /// The scheduler named its workers: every one of them that is registered, and at least one.
    Drained,
    /// More units than wanted: it had not registered nor started yet (the newest go first).
    Excess,
}

/// What to do in one poll.
#[derive(Debug, Default, PartialEq, Eq)]
pub struct Step {
    /// Units whose first worker registered since the last step, and how long (ms) after they
    /// were started (or adopted).
    pub registered: Vec<(String, u64)>,
    /// The units to stop (already out of the book), with their start time and why.
    pub stop: Vec<Stopped>,
    /// Units to start (if not backing off): never more than `max_pending` waiting at once.
    pub start: usize,
}

/// A unit a step took out of the book.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Stopped {
    pub id: String,
    pub since: u64,
    pub why: Why,
}

/// The units of one manager.
#[derive(Debug)]
pub struct Book {
    pub manager: String,
    /// Workers per unit.
    pub size: u32,
    /// How long (ms) a unit may take to register (`u64::MAX`: no limit, the process backend).
    pub timeout: u64,
    /// Most units at once: whole units within the manager's cap (never one worker above it).
    pub max_units: usize,
    /// Most units waiting to start at once (`--max-pending`): a long queue holds a few jobs,
    /// not the whole demand.
    pub max_pending: usize,
    pub units: Vec<Unit>,
}

impl Book {
    /// The book of a unit backend: units of `size` workers, at most `max_workers` workers.
    pub fn new(
        manager: &str,
        size: u32,
        timeout: u64,
        max_workers: u32,
        max_pending: usize,
    ) -> Book {
        Book {
            manager: manager.to_string(),
            size: size.max(1),
            timeout,
            max_units: (max_workers / size.max(1)) as usize,
            max_pending: max_pending.max(1),
            units: Vec::new(),
        }
    }

    /// The book of a process pool: units of one worker, no timeout, no limit on those starting.
    pub fn processes(manager: &str, max_workers: u32) -> Book {
        Book::new(manager, 1, u64::MAX, max_workers, usize::MAX)
    }

    /// A unit `id` of this book's size, started (or adopted) at `since`.
    pub fn unit(&self, id: String, since: u64) -> Unit {
        Unit {
            workers: names(&self.manager, &id, self.size),
            ..Unit::one(id, since)
        }
    }

    /// The workers the manager reports alive, given those the scheduler has `registered`: every
    /// worker of a unit that runs or may start, and of an ending unit only those still
    /// registered (each tells the scheduler itself that it stops; one dropped from the report
    /// while registered would be taken for dead, one reported after it left for starting).
    pub fn workers(&self, registered: &[String]) -> Vec<String> {
        self.units
            .iter()
            .flat_map(|u| {
                u.workers
                    .iter()
                    .filter(|n| !u.ending || registered.contains(n))
                    .cloned()
            })
            .collect()
    }

    /// The workers of unit `id` (of this book's size, in the book or not) to report: all of
    /// them, or if it is `ending` the registered ones.
    pub fn unit_workers(&self, id: &str, ending: bool, registered: &[String]) -> Vec<String> {
        let mut all = names(&self.manager, id, self.size);
        if ending {
            all.retain(|n| registered.contains(n));
        }
        all
    }

    /// One poll at `now`: `desired` workers (the count to reach), `stop` the workers the
    /// scheduler has drained (every decision names all of them until they are gone, so a unit
    /// goes once all of its registered workers are in one), `registered` the workers it knows.
    /// Marks the units that registered; the units to stop are taken out of the book. While
    /// `recovering` from a failure (no unit came up since), one unit at a time waits to start,
    /// not a batch.
    pub fn step(
        &mut self,
        now: u64,
        desired: u32,
        stop: &[String],
        registered: &[String],
        recovering: bool,
    ) -> Step {
        let stop: HashSet<&str> = stop.iter().map(String::as_str).collect();
        let registered: HashSet<&str> = registered.iter().map(String::as_str).collect();
        let mut step = Step::default();
        for unit in &mut self.units {
            if !unit.registered && unit.workers.iter().any(|n| registered.contains(n.as_str())) {
                unit.registered = true;
                step.registered
                    .push((unit.id.clone(), now.saturating_sub(unit.since)));
            }
        }
        let timeout = self.timeout;
        self.units.retain(|unit| {
            let why = if !unit.registered && now.saturating_sub(unit.since) > timeout {
                Some(Why::Late)
            } else if drained(unit, &stop, &registered) {
                Some(Why::Drained)
            } else {
                None
            };
            if let Some(why) = why {
                step.stop.push(stopped(unit, why));
            }
            why.is_none()
        });
        let wanted = (desired.div_ceil(self.size) as usize).min(self.max_units);
        while self.units.len() > wanted {
            let Some(index) = self.units.iter().rposition(|u| !u.registered && !u.running) else {
                break;
            };
            step.stop
                .push(stopped(&self.units.remove(index), Why::Excess));
        }
        let max_pending = if recovering { 1 } else { self.max_pending };
        let pending = self.units.iter().filter(|u| u.pending()).count();
        step.start = wanted
            .saturating_sub(self.units.len())
            .min(max_pending.saturating_sub(pending));
        step
    }
}

/// Every worker of it the scheduler has registered is named, and: for a unit of several, one of
/// them at least is registered (a named worker that just left, beside a sibling still starting,
/// does not drain the unit); for a process of its own (a unit of one), it is named.
fn drained(unit: &Unit, stop: &HashSet<&str>, registered: &HashSet<&str>) -> bool {
    let named = |n: &&String| stop.contains(n.as_str());
    let mut listed = unit
        .workers
        .iter()
        .filter(|n| registered.contains(n.as_str()))
        .peekable();
    let some = match unit.workers.len() {
        1 => unit.workers.iter().any(|n| named(&n)),
        _ => listed.peek().is_some(),
    };
    some && listed.all(|n| named(&n))
}

fn stopped(unit: &Unit, why: Why) -> Stopped {
    Stopped {
        id: unit.id.clone(),
        since: unit.since,
        why,
    }
}
