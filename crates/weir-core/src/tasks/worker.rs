//! One live worker as the task core keeps it: what it has free, what it runs and holds ahead,
//! its verdicts and loads, draining and the end of its allocation; and its scaling view.

use super::*;

/// A worker registered under the name of a live worker that is another process.
#[derive(Debug, thiserror::Error)]
#[error("a worker named `{name}` is already connected{}: worker names must be unique", .manager.as_ref().map(|m| format!(" (of manager `{m}`)")).unwrap_or_default())]
pub struct NameTaken {
    pub name: String,
    pub manager: Option<String>,
}

/// A live worker as the task book keeps it (`Tasks.workers`): its registration, what it has
/// free, what it runs and holds ahead, verdicts, loads, draining. Read outside the task book
/// only as a [`WorkerView`].
pub(super) struct BookedWorker {
    pub(super) info: WorkerRegistration,
    pub(super) free: Vec<(String, u64)>,
    /// The tasks it holds: running, or handed to it ahead (prefetched, up to
    /// [`Config::prefetch`] beyond its slots) and waiting there for a slot. Each holds its
    /// capability amounts from the moment it is handed over.
    pub(super) running: HashSet<TaskId>,
    /// When each task it holds was handed to it (ms), to learn which groups are quick, and
    /// whether its group was known quick then. Changed through [`BookedWorker::hold`] and
    /// [`BookedWorker::release`], which keep `slow` in step.
    pub(super) since: HashMap<TaskId, (u64, bool)>,
    /// How many of the tasks it holds were not known quick when handed over: while it holds
    /// one, it is handed nothing ahead (it would wait behind a task of unknown length).
    pub(super) slow: u32,
    /// Tasks handed to it ahead of a free slot that it has not reported started: if it is lost,
    /// they do not count as an attempt.
    pub(super) waiting: HashSet<TaskId>,
    /// A take-back asked of it and not yet answered: the tasks it may give back.
    pub(super) revoking: Option<HashSet<TaskId>>,
    /// It gave nothing back when last asked (all it holds had started): not asked again until
    /// it reports a finished task.
    pub(super) revoke_spent: bool,
    /// Environments it matches (derived from `verdicts`, kept for fast matching).
    pub(super) environments: HashSet<String>,
    pub(super) verdicts: BTreeMap<String, EnvVerdict>,
    /// How it loaded each environment's condition component (reported, not used for matching).
    pub(super) loads: BTreeMap<String, ComponentLoad>,
    pub(super) last_seen: u64,
    /// Since when it has run nothing (`None` while busy).
    pub(super) idle_since: Option<u64>,
    /// When it was last handed tasks while it held none: its silence as a busy worker is
    /// counted from here at the earliest (it beat at the idle pace before).
    pub(super) busy_since: u64,
    /// The paces it was told to beat at while idle, in ms: the one before and the last
    /// ([`Tasks::told_idle_pace`]).
    pub(super) idle_paces: [u64; 2],
    /// Being stopped by its manager, since then (ms): takes no new task. Taken back into
    /// service if its manager has not stopped it after [`Config::undrain_ms`] (it cannot: a
    /// unit of several workers whose others are busy).
    pub(super) draining: Option<u64>,
    /// Drained by the scaling policy (`decision.drain`, "cordoned"): takes no new task until a
    /// decision no longer names it. Unlike `draining`, nobody is stopping it yet.
    pub(super) cordoned: bool,
    /// When it leaves (the end of its allocation): it takes no task whose timeout ends later.
    pub(super) ends_at: Option<u64>,
    /// When it registered (ms).
    pub(super) joined: u64,
}

impl BookedWorker {
    /// Whether it evaluates `environment`: its own definition, or a run-time registration
    /// (sent to every worker). A name only other workers define is never evaluated here.
    pub(super) fn evaluates(&self, environment: &str, known: &Environments) -> bool {
        self.info
            .local_environments
            .iter()
            .any(|e| e == environment)
            || known.is_registered(environment)
    }

    /// Whether a task of `class` started `now` ends (by its timeout) before this worker leaves.
    /// A task without a timeout may run anywhere.
    pub(super) fn outlives(&self, class: &Class, now: u64) -> bool {
        match self.ends_at {
            Some(end) if class.timeout_ms > 0 => now.saturating_add(class.timeout_ms) <= end,
            _ => true,
        }
    }

    /// Note when `task` was handed to it, and whether its group was known quick then.
    pub(super) fn hold(&mut self, task: TaskId, now: u64, quick: bool) {
        if let Some((_, before)) = self.since.insert(task, (now, quick))
            && !before
        {
            self.slow -= 1;
        }
        if !quick {
            self.slow += 1;
        }
    }

    /// `task` no longer held: when it was handed over, if it was noted.
    pub(super) fn release(&mut self, task: TaskId) -> Option<u64> {
        let (at, quick) = self.since.remove(&task)?;
        if !quick {
            self.slow -= 1;
        }
        Some(at)
    }

    /// Whether it takes new tasks: neither being stopped nor drained by the policy.
    pub(super) fn open(&self) -> bool {
        self.draining.is_none() && !self.cordoned
    }

    /// How many tasks it holds (running, prefetched, or canceled and not yet confirmed).
    pub(super) fn held(&self) -> u32 {
        u32::try_from(self.running.len()).unwrap_or(u32::MAX)
    }

    /// The tasks it runs now (held and started: not waiting ahead of a slot), in id order.
    pub(super) fn started(&self) -> Vec<TaskId> {
        let mut started: Vec<TaskId> = self.running.difference(&self.waiting).copied().collect();
        started.sort_unstable();
        started
    }

    /// Whether it may be handed a task of `class` now while it holds fewer than `limit`.
    pub(super) fn fits(&self, class: &Class, now: u64, limit: u32) -> bool {
        self.open()
            && self.held() < limit
            && self.outlives(class, now)
            && class
                .capabilities
                .iter()
                .all(|(name, need)| *need == 0 || amount(&self.free, name) >= *need)
            && class
                .environments
                .iter()
                .all(|e| self.environments.contains(e))
    }

    pub(super) fn take(&mut self, class: &Class) {
        for (name, need) in &class.capabilities {
            if let Some((_, have)) = self.free.iter_mut().find(|(n, _)| n == name) {
                *have -= need;
            }
        }
    }

    pub(super) fn view(&self, id: WorkerId, now: u64) -> WorkerView<'_> {
        WorkerView {
            id,
            name: &self.info.name,
            instance: self.info.instance,
            manager: self.info.manager.as_deref(),
            slots: self.info.slots,
            busy: self.held().min(self.info.slots),
            idle_ms: self.idle_since.map_or(0, |since| now.saturating_sub(since)),
            draining: self.draining.is_some(),
            cordoned: self.cordoned,
            verdicts: &self.verdicts,
        }
    }

    pub(super) fn give_back(&mut self, class: &Class) {
        for (name, need) in &class.capabilities {
            if let Some((_, have)) = self.free.iter_mut().find(|(n, _)| n == name) {
                *have += need;
            }
        }
    }
}

pub(super) fn amount(list: &[(String, u64)], name: &str) -> u64 {
    list.iter().find(|(n, _)| n == name).map_or(0, |(_, v)| *v)
}

/// A read-only look at a live [`BookedWorker`], for the managers' store and the scaling
/// snapshot (what the policy sees of it is `scaling::Worker`, made from this). It borrows: the
/// scaling loop looks at every worker once a second, and copying 10,000 names and verdict maps
/// each time was a tenth of an idle scheduler's CPU (BENCHMARKS.md, #35).
#[derive(Clone, Copy, Debug)]
pub struct WorkerView<'a> {
    pub id: WorkerId,
    pub name: &'a str,
    /// Its process ([`weir_proto::WorkerRegistration::instance`]).
    pub instance: u64,
    pub manager: Option<&'a str>,
    pub slots: u32,
    pub busy: u32,
    pub idle_ms: u64,
    pub draining: bool,
    /// Drained by the policy: takes no new task ([`Tasks::cordon`]).
    pub cordoned: bool,
    pub verdicts: &'a BTreeMap<String, EnvVerdict>,
}
