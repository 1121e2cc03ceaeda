//! Which of a manager's registered workers its heartbeat reveals gone, and how far it proves
//! it: two processes may hold one name (a twin manager, started with an id in use, names its
//! workers as the first does), so a report is believed at once only of the process it names.

use crate::hash::HashSet;

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
    let before: HashSet<&str> = previous
        .map(|p| p.workers.iter().map(String::as_str).collect())
        .unwrap_or_default();
    // What this connection said of each name's processes (forgotten on a new connection).
    let reported: Vec<&(String, u64)> = (state.instances.iter())
        .chain(previous.into_iter().flat_map(|p| p.instances.iter()))
        .collect();
    let alive: HashSet<&str> = state.workers.iter().map(String::as_str).collect();
    let exited: HashSet<&str> = state.exited.iter().map(String::as_str).collect();
    workers
        .iter()
        .filter(|w| w.manager == Some(state.id.as_str()))
        .filter(|w| !alive.contains(w.name))
        .filter(|w| w.draining || before.contains(w.name) || exited.contains(w.name))
        .filter_map(|w| {
            let of_name: Vec<u64> = (reported.iter())
                .filter(|(name, _)| *name == w.name)
                .map(|(_, instance)| *instance)
                .collect();
            let gone = match (of_name.contains(&w.instance), of_name.is_empty()) {
                (true, _) if w.draining => Gone::Stopped,
                (true, _) => Gone::Exited,
                (false, true) => Gone::Unproven,
                (false, false) => {
                    // Said once: the report keeps naming it among its last exited.
                    let new = previous.is_none_or(|p| !p.exited.iter().any(|n| n == w.name));
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
