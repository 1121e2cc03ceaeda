//! The simulator's own record of what happened, in simulated time: every run's start and end
//! (the oracle for the invariants: not the scheduler's records), the faults, and what clients
//! were told. Hashed for the replay check; its tail is printed when a seed fails.

use std::collections::BTreeMap;
use std::fmt;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use weir::proto::TaskId;

#[derive(Clone, Debug, Hash, PartialEq, Eq)]
pub(crate) enum Event {
    /// A run began on a worker (`run`: the worker core's hand-over number).
    Started {
        task: TaskId,
        worker: String,
        run: u64,
    },
    /// It finished by itself with `output`.
    Finished {
        task: TaskId,
        worker: String,
        run: u64,
    },
    /// It was stopped at once (cancel, lease lost, given up, its worker crashed).
    Killed {
        task: TaskId,
        worker: String,
        run: u64,
    },
    /// A fault or a repair, as said.
    Fault(String),
    /// A manager started or stopped a worker.
    Manager(String),
    /// An invariant broke where only the simulator sees it (a manager above its cap, a busy
    /// worker stopped): the run fails with this.
    Broken(String),
    /// A client was told something (acknowledged, finished, ...).
    Client(String),
    /// A scheduler replica began to serve `term` (its actor took over).
    Lead { replica: u64, term: u64 },
}

/// Where an event goes on the timeline: by time; at one time, every other event (in the order
/// noted) before the runs killed, those in (worker, task, run) order.
fn order((at, event): &(Duration, Event)) -> (Duration, Option<(&str, TaskId, u64)>) {
    let killed = match event {
        Event::Killed { task, worker, run } => Some((worker.as_str(), *task, *run)),
        _ => None,
    };
    (*at, killed)
}

#[derive(Clone, Debug, Default)]
pub(crate) struct Timeline(Arc<Mutex<Vec<(Duration, Event)>>>);

impl Timeline {
    /// Note `event` now (simulated time; outside a host, the world's time is passed by the
    /// caller through [`Timeline::at`]).
    pub(crate) fn note(&self, event: Event) {
        let now = turmoil::sim_elapsed().unwrap_or_default();
        self.at(now, event);
    }

    /// Note `event` at `at`, in the timeline's order: by time, and at one time the runs killed
    /// last, in (worker, task, run) order. Runs killed together (a worker crashed: its runtime
    /// dropped them) are noted in the order tokio drops its tasks, which follows process-wide
    /// task ids, and a frozen worker's are noted ahead of their time: without this order two
    /// runs of a seed in one process (or on two threads) would differ.
    pub(crate) fn at(&self, at: Duration, event: Event) {
        if let Ok(mut events) = self.0.lock() {
            let new = (at, event);
            let mut place = events.len();
            while place > 0 && order(&events[place - 1]) > order(&new) {
                place -= 1;
            }
            events.insert(place, new);
        }
    }

    /// `worker`'s process, frozen, is killed at `now` (to start it again): its runs that the
    /// guard would have killed later, at their lease's end, are killed now (the guard sees its
    /// pipe close and kills at once).
    pub(crate) fn cut_short(&self, worker: &str, now: Duration) {
        if let Ok(mut events) = self.0.lock() {
            for (at, event) in events.iter_mut() {
                if *at > now && matches!(event, Event::Killed { worker: w, .. } if w == worker) {
                    *at = now;
                }
            }
            // Stable: only the events moved change places.
            events.sort_by(|a, b| order(a).cmp(&order(b)));
        }
    }

    pub(crate) fn len(&self) -> usize {
        self.0.lock().map(|e| e.len()).unwrap_or_default()
    }

    pub(crate) fn events(&self) -> Vec<(Duration, Event)> {
        self.0.lock().map(|e| e.clone()).unwrap_or_default()
    }

    /// Each time a replica began to serve: (when, replica, term).
    pub(crate) fn leads(&self) -> Vec<(Duration, u64, u64)> {
        let events = self.0.lock().map(|e| {
            e.iter()
                .filter_map(|(at, event)| match event {
                    Event::Lead { replica, term } => Some((*at, *replica, *term)),
                    _ => None,
                })
                .collect()
        });
        events.unwrap_or_default()
    }

    /// A hash of the whole log (times and events): equal for two runs of one seed.
    pub(crate) fn digest(&self) -> u64 {
        crate::net::mix(&self.events())
    }

    /// The last `n` events, one a line.
    pub(crate) fn tail(&self, n: usize) -> String {
        let events = self.events();
        let skip = events.len().saturating_sub(n);
        let mut out = String::new();
        for (at, event) in &events[skip..] {
            out.push_str(&format!("  {:>9.3}s {event}\n", at.as_secs_f64()));
        }
        out
    }

    /// The tasks with a run open on `worker` now.
    pub(crate) fn running_on(&self, worker: &str) -> Vec<TaskId> {
        let mut open: BTreeMap<(TaskId, u64), ()> = BTreeMap::new();
        for (_, event) in self.events() {
            match event {
                Event::Started {
                    task,
                    worker: w,
                    run,
                } if w == worker => {
                    open.insert((task, run), ());
                }
                Event::Finished {
                    task,
                    worker: w,
                    run,
                }
                | Event::Killed {
                    task,
                    worker: w,
                    run,
                } if w == worker => {
                    open.remove(&(task, run));
                }
                _ => {}
            }
        }
        open.into_keys().map(|(task, _)| task).collect()
    }

    /// The first invariant broken where only the simulator sees it ([`Event::Broken`]).
    pub(crate) fn broken(&self) -> Option<String> {
        self.events()
            .into_iter()
            .find_map(|(at, event)| match event {
                Event::Broken(what) => Some(format!("{what} (at {:.3}s)", at.as_secs_f64())),
                _ => None,
            })
    }

    /// Each task's runs as (start, end) intervals, from the starts and ends on the timeline
    /// (a run never ended is open until `end`).
    pub(crate) fn runs(
        &self,
        end: Duration,
    ) -> BTreeMap<TaskId, Vec<(Duration, Duration, String)>> {
        let mut open: BTreeMap<(TaskId, String, u64), Duration> = BTreeMap::new();
        let mut runs: BTreeMap<TaskId, Vec<(Duration, Duration, String)>> = BTreeMap::new();
        for (at, event) in self.events() {
            match event {
                Event::Started { task, worker, run } => {
                    open.insert((task, worker, run), at);
                }
                Event::Finished { task, worker, run } | Event::Killed { task, worker, run } => {
                    if let Some(start) = open.remove(&(task, worker.clone(), run)) {
                        runs.entry(task).or_default().push((start, at, worker));
                    }
                }
                Event::Fault(_)
                | Event::Client(_)
                | Event::Manager(_)
                | Event::Broken(_)
                | Event::Lead { .. } => {}
            }
        }
        for ((task, worker, _), start) in open {
            runs.entry(task).or_default().push((start, end, worker));
        }
        runs
    }
}

impl fmt::Display for Event {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Event::Started { task, worker, run } => {
                write!(f, "task {task} starts on {worker} (run {run})")
            }
            Event::Finished { task, worker, run } => {
                write!(f, "task {task} finishes on {worker} (run {run})")
            }
            Event::Killed { task, worker, run } => {
                write!(f, "task {task} killed on {worker} (run {run})")
            }
            Event::Fault(what) => write!(f, "fault: {what}"),
            Event::Manager(what) => write!(f, "manager: {what}"),
            Event::Broken(what) => write!(f, "BROKEN: {what}"),
            Event::Client(what) => write!(f, "client: {what}"),
            Event::Lead { replica, term } => write!(f, "replica {replica} leads term {term}"),
        }
    }
}
