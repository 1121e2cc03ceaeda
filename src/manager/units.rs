//! The pure step of a manager that gets workers in *units* (the command and Slurm backends):
//! which units registered, which to stop and why, how many to start. The backends run the
//! commands; the rules live here once.

use std::collections::HashSet;
use std::time::{Duration, Instant};

/// One unit of `size` workers, named `{manager}-{unit}-{n}`.
#[derive(Clone, Debug)]
pub struct Unit {
    pub id: String,
    /// When it was started (or adopted): the unit timeout counts from here.
    pub since: Instant,
    /// One of its workers registered (or it may be busy): stopped only once the scheduler has
    /// drained its workers, never as one too many.
    pub registered: bool,
    /// The engine says it runs (its workers may be registering right now): not cancelled as
    /// one too many either, only once drained or late. Unknown (false) for the command backend.
    pub running: bool,
    /// The engine is ending it (Slurm lists it COMPLETING: cancelled from outside, or its
    /// workers left): only its workers still registered are reported, so the ones already gone
    /// do not count as starting.
    pub ending: bool,
}

impl Unit {
    /// A unit just started (or adopted in `state`).
    pub fn new(id: String, since: Instant) -> Unit {
        Unit {
            id,
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

/// The names its workers register under.
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
    /// The scheduler drained all of its registered workers.
    Drained,
    /// More units than wanted: it had not registered nor started yet (the newest go first).
    Excess,
}

/// What to do in one poll.
#[derive(Debug, Default, PartialEq, Eq)]
pub struct Step {
    /// Units whose first worker registered since the last step, and how long after they were
    /// started (or adopted).
    pub registered: Vec<(String, Duration)>,
    pub stop: Vec<(String, Why)>,
    /// Units to start (if not backing off): never more than `max_pending` waiting at once.
    pub start: usize,
}

/// The units of one manager.
#[derive(Debug)]
pub struct Book {
    pub manager: String,
    /// Workers per unit.
    pub size: u32,
    /// How long a unit may take to register.
    pub timeout: Duration,
    /// Most units at once: whole units within the manager's cap (never one worker above it).
    pub max_units: usize,
    /// Most units waiting to start at once (`--max-pending`): a long queue holds a few jobs,
    /// not the whole demand.
    pub max_pending: usize,
    pub units: Vec<Unit>,
}

impl Book {
    pub fn new(
        manager: &str,
        size: u32,
        timeout: Duration,
        max_workers: u32,
        max_pending: usize,
    ) -> Book {
        Book {
            manager: manager.to_string(),
            size,
            timeout,
            max_units: (max_workers / size.max(1)) as usize,
            max_pending: max_pending.max(1),
            units: Vec::new(),
        }
    }

    /// The workers the manager reports alive, given those the scheduler has `registered`: every
    /// worker of a unit that runs or may start, and of an ending unit only those still
    /// registered (each tells the scheduler itself that it stops; one dropped from the report
    /// while registered would be taken for dead, one reported after it left for starting).
    pub fn workers(&self, registered: &[String]) -> Vec<String> {
        self.units
            .iter()
            .flat_map(|u| self.unit_workers(&u.id, u.ending, registered))
            .collect()
    }

    /// The workers of unit `id` to report: all of them, or if it is `ending` the registered ones.
    pub fn unit_workers(&self, id: &str, ending: bool, registered: &[String]) -> Vec<String> {
        let mut all = names(&self.manager, id, self.size);
        if ending {
            all.retain(|n| registered.contains(n));
        }
        all
    }

    /// One poll: `desired` workers (the count to reach), `stop` the workers the scheduler has
    /// drained (every decision names all of them until they are gone, so a unit goes once all
    /// of its registered workers are in one), `registered` the workers it knows. Marks the
    /// units that registered; the units to stop are taken out of the book. While `recovering`
    /// from a failure (no unit came up since), one unit at a time waits to start, not a batch.
    pub fn step(
        &mut self,
        desired: u32,
        stop: &[String],
        registered: &[String],
        now: Instant,
        recovering: bool,
    ) -> Step {
        let stop: HashSet<String> = stop.iter().cloned().collect();
        let max_pending = if recovering { 1 } else { self.max_pending };
        step(
            &mut self.units,
            (
                &self.manager,
                self.size,
                self.timeout,
                self.max_units,
                max_pending,
            ),
            desired,
            &stop,
            registered,
            now,
        )
    }
}

fn step(
    units: &mut Vec<Unit>,
    (manager, size, timeout, max_units, max_pending): (&str, u32, Duration, usize, usize),
    desired: u32,
    stop: &HashSet<String>,
    registered: &[String],
    now: Instant,
) -> Step {
    let mut step = Step::default();
    for unit in units.iter_mut() {
        let names = names(manager, &unit.id, size);
        if !unit.registered && names.iter().any(|n| registered.contains(n)) {
            unit.registered = true;
            step.registered
                .push((unit.id.clone(), now.duration_since(unit.since)));
        }
    }
    units.retain(|unit| {
        let names = names(manager, &unit.id, size);
        let mine: Vec<&String> = names.iter().filter(|n| registered.contains(n)).collect();
        let why = if !unit.registered && now.duration_since(unit.since) > timeout {
            Some(Why::Late)
        } else if !mine.is_empty() && mine.iter().all(|n| stop.contains(*n)) {
            Some(Why::Drained)
        } else {
            None
        };
        if let Some(why) = why {
            step.stop.push((unit.id.clone(), why));
        }
        why.is_none()
    });
    let wanted = (desired.div_ceil(size.max(1)) as usize).min(max_units);
    while units.len() > wanted {
        let Some(index) = units.iter().rposition(|u| !u.registered && !u.running) else {
            break;
        };
        step.stop.push((units.remove(index).id, Why::Excess));
    }
    let pending = units.iter().filter(|u| u.pending()).count();
    step.start = wanted
        .saturating_sub(units.len())
        .min(max_pending.saturating_sub(pending));
    step
}

#[cfg(test)]
mod tests {
    use super::*;

    fn unit(id: &str, since: Instant, registered: bool) -> Unit {
        Unit {
            registered,
            ..Unit::new(id.into(), since)
        }
    }

    fn ids(step: &Step) -> Vec<(&str, Why)> {
        step.stop.iter().map(|(u, w)| (u.as_str(), *w)).collect()
    }

    #[test]
    fn a_unit_with_a_registered_worker_is_stopped_only_when_drained() {
        let t0 = Instant::now();
        let later = t0 + Duration::from_secs(1000);
        let mut book = Book::new("m", 1, Duration::from_secs(10), 100, 100);
        book.units = vec![unit("1", t0, false), unit("2", t0, false)];
        // Unit 1's worker registers; the demand drops to zero long after the timeout.
        let step = book.step(0, &[], &["m-1-1".into()], later, false);
        assert_eq!(
            step.registered,
            vec![("1".to_string(), Duration::from_secs(1000))]
        );
        assert_eq!(ids(&step), vec![("2", Why::Late)]);
        assert_eq!(
            book.units.len(),
            1,
            "the busy unit stays though nobody wants it"
        );
        let drained = book.step(0, &["m-1-1".into()], &["m-1-1".into()], later, false);
        assert_eq!(ids(&drained), vec![("1", Why::Drained)]);
        assert!(book.units.is_empty());
    }

    #[test]
    fn too_many_cancels_the_newest_unregistered_and_too_few_starts_whole_units() {
        let t0 = Instant::now();
        let mut book = Book::new("m", 2, Duration::from_secs(60), 100, 100);
        book.units = vec![
            unit("1", t0, true),
            unit("2", t0, false),
            unit("3", t0, false),
        ];
        let step = book.step(3, &[], &[], t0, false);
        assert_eq!(ids(&step), vec![("3", Why::Excess)]);
        assert_eq!(step.start, 0);
        let more = book.step(7, &[], &[], t0, false);
        assert_eq!(more.start, 2, "7 workers in units of 2: 4 units");
    }

    #[test]
    fn a_unit_goes_only_once_all_its_workers_are_drained() {
        let t0 = Instant::now();
        let mut book = Book::new("m", 2, Duration::from_secs(60), 100, 100);
        book.units = vec![unit("7", t0, true)];
        let both = ["m-7-1".to_string(), "m-7-2".to_string()];
        // One drained, the other busy: the job stays (the drained one is taken back into
        // service by the scheduler after a while).
        assert!(book.step(0, &both[..1], &both, t0, false).stop.is_empty());
        // Both drained (the scheduler names every drained worker in each decision).
        let step = book.step(0, &both, &both, t0, false);
        assert_eq!(ids(&step), vec![("7", Why::Drained)]);
    }

    #[test]
    fn a_started_unit_is_not_cancelled_as_one_too_many() {
        let t0 = Instant::now();
        let mut book = Book::new("m", 1, Duration::from_secs(60), 100, 100);
        let mut started = unit("1", t0, false);
        started.running = true;
        book.units = vec![started, unit("2", t0, false)];
        let step = book.step(0, &[], &[], t0, false);
        assert_eq!(
            ids(&step),
            vec![("2", Why::Excess)],
            "its worker may be registering now"
        );
    }

    #[test]
    fn whole_units_never_take_a_manager_above_its_cap() {
        let t0 = Instant::now();
        // A cap of 5 workers in units of 2: at most 2 units (4 workers), never 3 (6).
        let mut book = Book::new("m", 2, Duration::from_secs(60), 5, 100);
        assert_eq!(book.step(5, &[], &[], t0, false).start, 2);
    }

    #[test]
    fn at_most_max_pending_units_wait_and_one_at_a_time_while_recovering() {
        let t0 = Instant::now();
        let mut book = Book::new("m", 1, Duration::from_secs(60), 100, 3);
        assert_eq!(
            book.step(10, &[], &[], t0, false).start,
            3,
            "3 may wait at once"
        );
        book.units = vec![unit("1", t0, false), unit("2", t0, false)];
        assert_eq!(
            book.step(10, &[], &[], t0, false).start,
            1,
            "2 wait already"
        );
        let mut running = unit("3", t0, false);
        running.running = true;
        book.units.push(running);
        assert_eq!(
            book.step(10, &[], &[], t0, false).start,
            1,
            "a running unit does not wait in the queue"
        );
        // After a failure, until a unit comes up: one waits at a time, not the whole batch.
        book.units.clear();
        assert_eq!(book.step(10, &[], &[], t0, true).start, 1);
        book.units = vec![unit("1", t0, false)];
        assert_eq!(book.step(10, &[], &[], t0, true).start, 0);
    }

    #[test]
    fn an_ending_unit_reports_only_its_workers_still_registered() {
        let t0 = Instant::now();
        let mut book = Book::new("m", 2, Duration::from_secs(60), 100, 4);
        let mut ending = unit("7", t0, true);
        ending.ending = true;
        book.units = vec![unit("6", t0, false), ending];
        let registered = vec!["m-7-2".to_string()];
        assert_eq!(
            book.workers(&registered),
            vec!["m-6-1", "m-6-2", "m-7-2"],
            "m-7-1 left: not starting; m-7-2 still stops"
        );
    }
}
