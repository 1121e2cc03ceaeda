//! Snapshot and decision types. They mirror the records of `weir:plugin/scaling` one to one; the
//! guests and the host convert between these and their generated bindings.

#[cfg(feature = "serde")]
use serde::{Deserialize, Serialize};

/// `max_task_concurrency` value meaning "no limit".
pub const UNLIMITED: u32 = u32::MAX;

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[cfg_attr(feature = "serde", derive(Serialize, Deserialize), serde(rename_all = "kebab-case"))]
pub enum Verdict {
    Match,
    NoMatch,
    Unknown,
}

#[derive(Clone, Debug, PartialEq, Eq)]
#[cfg_attr(feature = "serde", derive(Serialize, Deserialize))]
pub struct Worker {
    /// The scheduler's id of the worker.
    pub id: u64,
    pub slots: u32,
    pub busy: u32,
    #[cfg_attr(feature = "serde", serde(default))]
    pub idle_ms: u64,
}

#[derive(Clone, Debug, PartialEq, Eq)]
#[cfg_attr(feature = "serde", derive(Serialize, Deserialize))]
pub struct Manager {
    pub id: String,
    pub worker_type: String,
    pub max_task_concurrency: u32,
    pub worker_slots: u32,
    pub online: bool,
    #[cfg_attr(feature = "serde", serde(default))]
    pub workers: Vec<Worker>,
    #[cfg_attr(feature = "serde", serde(default))]
    pub starting: u32,
    #[cfg_attr(feature = "serde", serde(default))]
    pub capabilities: Vec<(String, u64)>,
    #[cfg_attr(feature = "serde", serde(default))]
    pub environments: Vec<(String, Verdict)>,
}

impl Manager {
    /// The verdict of this manager's workers on `environment` (`Unknown` when never reported).
    pub fn verdict(&self, environment: &str) -> Verdict {
        self.environments
            .iter()
            .find(|(name, _)| name == environment)
            .map_or(Verdict::Unknown, |(_, v)| *v)
    }

    /// Workers it has or is starting.
    pub fn current_workers(&self) -> u64 {
        self.workers.len() as u64 + u64::from(self.starting)
    }

    /// Most workers it may run under a task cap: `cap / worker_slots`, at least one when the
    /// cap allows any task at all.
    pub fn max_workers_for(&self, task_cap: u32) -> u64 {
        let slots = u64::from(self.worker_slots.max(1));
        match u64::from(task_cap) {
            0 => 0,
            cap => (cap / slots).max(1),
        }
    }
}

#[derive(Clone, Debug, PartialEq, Eq)]
#[cfg_attr(feature = "serde", derive(Serialize, Deserialize))]
pub struct Demand {
    #[cfg_attr(feature = "serde", serde(default))]
    pub capabilities: Vec<(String, u64)>,
    #[cfg_attr(feature = "serde", serde(default))]
    pub environments: Vec<String>,
    pub queued: u32,
    #[cfg_attr(feature = "serde", serde(default))]
    pub running: u32,
}

#[derive(Clone, Debug, PartialEq, Eq, Default)]
#[cfg_attr(feature = "serde", derive(Serialize, Deserialize))]
pub struct Snapshot {
    pub now_ms: u64,
    #[cfg_attr(feature = "serde", serde(default))]
    pub scale_down_delay_ms: u64,
    pub managers: Vec<Manager>,
    #[cfg_attr(feature = "serde", serde(default))]
    pub demand: Vec<Demand>,
}

#[derive(Clone, Debug, PartialEq, Eq)]
#[cfg_attr(feature = "serde", derive(Serialize, Deserialize))]
pub struct Decision {
    pub manager_id: String,
    pub desired_workers: u32,
    pub stop: Vec<u64>,
    pub reason: String,
}

#[derive(Clone, Debug, PartialEq, Eq)]
#[cfg_attr(feature = "serde", derive(Serialize, Deserialize))]
pub struct Tier {
    pub priority: u32,
    pub members: Vec<String>,
}
