//! Which of a manager's registered workers its heartbeat reveals gone, and how far it proves
//! it: two processes may hold one name (a twin manager, started with an id in use, names its
//! workers as the first does), so a report is believed at once only of the process it names.

use crate::tasks::WorkerView;
use weir_proto::{ManagerState, WorkerId};

/// How far a manager's report proves one of its registered workers gone.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub enum Gone {
    /// Its manager stopped that very process (its instance), drained for it: its tasks were
    /// stopped first.
    Stopped,
    /// Its manager saw that very process exit: its tasks run again at once.
    Exited,
    /// Gone by name only (the manager chose no instance for it: a cluster engine's unit, one
    /// adopted after a restart): it may be another process of the name, still running its
    /// tasks. Taken for lost like a broken connection: closed, its tasks fenced from when it
    /// was last heard.
    Unproven,
}

/// `state`'s registered workers (of `workers`) that are gone: not listed alive in it, and
/// listed in `previous` (the same connection's last report), or reported exited, or drained
/// for it to stop. (A worker never listed is never taken for gone on absence alone: a report
/// sent before it started may arrive after it registered.) One whose name the reports pair only
/// with other instances is left out: they are about another process of its name.
pub(super) fn gone(
    previous: Option<&ManagerState>,
    state: &ManagerState,
    workers: &[WorkerView],
) -> Vec<(WorkerId, Gone)> {
    // A report comes every few seconds from every manager, and almost always lists every worker
    // of its manager alive: that case costs one sorted list of the names (a manager may list
    // thousands: bisection, not a scan per worker), no hashing and nothing else allocated.
    let mut alive: Vec<&str> = state.workers.iter().map(String::as_str).collect();
    alive.sort_unstable();
    let mut missing = (workers.iter())
        .filter(|w| w.manager == Some(state.id.as_str()))
        .filter(|w| alive.binary_search(&w.name).is_err())
        .peekable();
    if missing.peek().is_none() {
        return Vec::new();
    }
    let listed = |names: &[String], name: &str| names.iter().any(|n| n == name);
    let before: &[String] = previous.map_or(&[], |p| &p.workers);
    missing
        .filter(|w| w.draining || listed(before, w.name) || listed(&state.exited, w.name))
        .filter_map(|w| {
            // What this connection said of the name's processes (forgotten on a new one).
            let mut of_name = (state.instances.iter())
                .chain(previous.into_iter().flat_map(|p| p.instances.iter()))
                .filter(|(name, _)| name == w.name)
                .map(|(_, instance)| *instance)
                .peekable();
            let named = of_name.peek().is_some();
            let gone = match (of_name.any(|i| i == w.instance), named) {
                (true, _) if w.draining => Gone::Stopped,
                (true, _) => Gone::Exited,
                (false, false) => Gone::Unproven,
                (false, true) => {
                    // Said once: the report keeps naming it among its last exited.
                    let new = previous.is_none_or(|p| !listed(&p.exited, w.name));
                    if new {
                        tracing::warn!(manager = %state.id, worker = %w.name, instance = w.instance, "its manager reports another process of this name gone (two managers of one id?): not this one");
                    }
                    return None;
                }
            };
            Some((w.id, gone))
        })
        .collect()
}
