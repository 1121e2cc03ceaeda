//! Snapshot and decision types. They hold what both versions of `weir:plugin/scaling` carry
//! (`wit/weir.wit`, 0.1.0, and `wit/0.2.0/weir.wit`); the guests and the host convert between
//! these and their generated bindings (`wit.rs`).
//!
//! A manager's workers reach a policy one of two ways: listed (the host's snapshots, 0.1.0
//! components, scenario files), or, in a 0.2.0 component, counted ([`Manager::counted`]) with
//! the list fetched from the host only when the policy asks ([`Snapshot::workers_of`]). A
//! policy that reads [`Manager::summary`] and [`Snapshot::workers_of`] works either way.

use std::borrow::Cow;

#[cfg(feature = "serde")]
use serde::{Deserialize, Serialize};

/// `max_task_concurrency` value meaning "no limit".
pub const UNLIMITED: u32 = u32::MAX;

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[cfg_attr(
    feature = "serde",
    derive(Serialize, Deserialize),
    serde(rename_all = "kebab-case")
)]
pub enum Verdict {
    Match,
    NoMatch,
    Unknown,
}

#[derive(Clone, Debug, PartialEq, Eq)]
#[cfg_attr(
    feature = "serde",
    derive(Serialize, Deserialize),
    serde(deny_unknown_fields)
)]
pub struct Worker {
    /// The scheduler's id of the worker.
    pub id: u64,
    pub slots: u32,
    pub busy: u32,
    #[cfg_attr(feature = "serde", serde(default))]
    pub idle_ms: u64,
    /// Time left before its allocation ends (0.2.0); `None`: no limit, or not known.
    #[cfg_attr(
        feature = "serde",
        serde(default, skip_serializing_if = "Option::is_none")
    )]
    pub time_left_ms: Option<u64>,
}

/// `count` busy workers alike: `slots` slots each, `busy` in use.
#[derive(Clone, Debug, PartialEq, Eq)]
#[cfg_attr(feature = "serde", derive(Serialize, Deserialize))]
pub struct BusyGroup {
    pub slots: u32,
    pub busy: u32,
    pub count: u32,
}

/// A manager's live workers, counted: what a 0.2.0 snapshot carries instead of the list.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
#[cfg_attr(feature = "serde", derive(Serialize, Deserialize))]
pub struct Summary {
    pub busy: u32,
    pub idle: u32,
    /// Idle for at least the scale-down delay.
    pub idle_past_delay: u32,
    /// The busy workers in the order of the list, each run of alike workers (same slots, same
    /// busy) one group: expanded, it is the list's busy workers in order.
    pub busy_groups: Vec<BusyGroup>,
}

impl Summary {
    /// The summary of `workers` (idle past `scale_down_delay_ms` counted as such).
    pub fn of(workers: &[Worker], scale_down_delay_ms: u64) -> Summary {
        let (busy, idle, idle_past_delay) = Summary::counts(workers, scale_down_delay_ms);
        Summary {
            busy,
            idle,
            idle_past_delay,
            busy_groups: Summary::busy_runs(workers).collect(),
        }
    }

    /// Busy, idle, and idle past `scale_down_delay_ms`, among `workers`.
    pub fn counts(workers: &[Worker], scale_down_delay_ms: u64) -> (u32, u32, u32) {
        let (mut busy, mut idle, mut past) = (0, 0, 0);
        for w in workers {
            match w.busy {
                0 => {
                    idle += 1;
                    past += u32::from(w.idle_ms >= scale_down_delay_ms);
                }
                _ => busy += 1,
            }
        }
        (busy, idle, past)
    }

    /// The busy workers of `workers` in order, each run of alike ones (same slots and busy)
    /// one group.
    pub fn busy_runs(workers: &[Worker]) -> impl Iterator<Item = BusyGroup> + '_ {
        let mut busy = workers.iter().filter(|w| w.busy > 0).peekable();
        std::iter::from_fn(move || {
            let first = busy.next()?;
            let mut group = BusyGroup {
                slots: first.slots,
                busy: first.busy,
                count: 1,
            };
            while busy
                .next_if(|w| w.slots == group.slots && w.busy == group.busy)
                .is_some()
            {
                group.count += 1;
            }
            Some(group)
        })
    }

    /// Live workers: busy and idle.
    pub fn live(&self) -> u64 {
        u64::from(self.busy) + u64::from(self.idle)
    }
}
/// How a manager's last attempts to start workers went (0.2.0).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
#[cfg_attr(
    feature = "serde",
    derive(Serialize, Deserialize),
    serde(deny_unknown_fields)
)]
pub struct Launch {
    /// Failed starts in a row since a worker it started last came up.
    #[cfg_attr(feature = "serde", serde(default))]
    pub failures: u32,
    /// How long ago it last saw a start fail (`None`: never, as far as it knows).
    #[cfg_attr(feature = "serde", serde(default))]
    pub last_failure_ms: Option<u64>,
    /// How long it still waits before starting workers again (0: it may start now).
    #[cfg_attr(feature = "serde", serde(default))]
    pub backoff_ms: u64,
}

#[cfg(feature = "serde")]
impl Launch {
    fn is_default(&self) -> bool {
        *self == Launch::default()
    }
}

#[derive(Clone, Debug, Default, PartialEq, Eq)]
#[cfg_attr(
    feature = "serde",
    derive(Serialize, Deserialize),
    serde(deny_unknown_fields)
)]
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
    /// Its operator's labels (`worker-manager --label cost=3,zone=a`; 0.2.0).
    #[cfg_attr(
        feature = "serde",
        serde(default, skip_serializing_if = "Vec::is_empty")
    )]
    pub labels: Vec<(String, String)>,
    /// How long each worker it starts may run tasks (0.2.0); `None`: no limit.
    #[cfg_attr(
        feature = "serde",
        serde(default, skip_serializing_if = "Option::is_none")
    )]
    pub walltime_ms: Option<u64>,
    /// In a 0.2.0 component: its workers counted, `workers` left empty (the list:
    /// [`Snapshot::workers_of`]). `None` where the list is given.
    #[cfg_attr(feature = "serde", serde(skip))]
    pub counted: Option<Summary>,
    /// Its live workers the last decision drained, in id order (0.2.0): no new tasks.
    #[cfg_attr(
        feature = "serde",
        serde(default, skip_serializing_if = "Vec::is_empty")
    )]
    pub drained: Vec<u64>,
    /// Most of its workers a decision may drain (0.2.0; `scheduler --max-drain-percent`).
    #[cfg_attr(feature = "serde", serde(default, skip_serializing_if = "is_zero"))]
    pub drain_budget: u32,
    /// Its failed starts and backoff (0.2.0).
    #[cfg_attr(
        feature = "serde",
        serde(default, skip_serializing_if = "Launch::is_default")
    )]
    pub launch: Launch,
    /// How long ago each worker it started and that has not registered yet was started,
    /// oldest first (0.2.0; at most one per worker counted in `starting`).
    #[cfg_attr(
        feature = "serde",
        serde(default, skip_serializing_if = "Vec::is_empty")
    )]
    pub starting_ages_ms: Vec<u64>,
}

#[cfg(feature = "serde")]
fn is_zero(n: &u32) -> bool {
    *n == 0
}

#[cfg(feature = "serde")]
fn is_zero64(n: &u64) -> bool {
    *n == 0
}

impl Manager {
    /// The verdict of this manager's workers on `environment` (`Unknown` when never reported).
    pub fn verdict(&self, environment: &str) -> Verdict {
        self.environments
            .iter()
            .find(|(name, _)| name == environment)
            .map_or(Verdict::Unknown, |(_, v)| *v)
    }

    /// Its live workers counted: as given ([`Manager::counted`]), or from the list.
    pub fn summary(&self, scale_down_delay_ms: u64) -> Cow<'_, Summary> {
        match &self.counted {
            Some(summary) => Cow::Borrowed(summary),
            None => Cow::Owned(Summary::of(&self.workers, scale_down_delay_ms)),
        }
    }

    /// Whether the last decision drained worker `id` (it takes no new tasks).
    pub fn is_drained(&self, id: u64) -> bool {
        self.drained.binary_search(&id).is_ok()
    }

    /// Live workers (registered).
    pub fn live_workers(&self) -> u64 {
        self.counted
            .as_ref()
            .map_or(self.workers.len() as u64, Summary::live)
    }

    /// Workers it has or is starting.
    pub fn current_workers(&self) -> u64 {
        self.live_workers() + u64::from(self.starting)
    }

    /// Whether a worker of it could ever run `demand`: its capability amounts cover each the
    /// demand needs, and no environment the demand needs is `no-match` here.
    pub fn serves(&self, demand: &Demand) -> bool {
        let has = |name: &str| {
            (self.capabilities.iter())
                .find(|(n, _)| n == name)
                .map_or(0, |(_, amount)| *amount)
        };
        (demand.capabilities.iter()).all(|(name, need)| *need == 0 || has(name) >= *need)
            && (demand.environments.iter()).all(|env| self.verdict(env) != Verdict::NoMatch)
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

#[derive(Clone, Debug, Default, PartialEq, Eq)]
#[cfg_attr(
    feature = "serde",
    derive(Serialize, Deserialize),
    serde(deny_unknown_fields)
)]
pub struct Demand {
    #[cfg_attr(feature = "serde", serde(default))]
    pub capabilities: Vec<(String, u64)>,
    #[cfg_attr(feature = "serde", serde(default))]
    pub environments: Vec<String>,
    pub queued: u32,
    #[cfg_attr(feature = "serde", serde(default))]
    pub running: u32,
    /// How long its oldest queued task has waited since it was submitted (0.2.0; 0: none
    /// queued).
    #[cfg_attr(feature = "serde", serde(default, skip_serializing_if = "is_zero64"))]
    pub oldest_queued_ms: u64,
    /// Run times of its tasks that finished recently (0.2.0; `None`: none finished yet).
    #[cfg_attr(
        feature = "serde",
        serde(default, skip_serializing_if = "Option::is_none")
    )]
    pub runtimes: Option<Runtimes>,
}

/// Run times of a demand group's recently finished tasks, from hand-over (or start, for a task
/// held ahead of a free slot) to report: the last [`RECENT_RUNTIMES`] of each kind of task.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
#[cfg_attr(
    feature = "serde",
    derive(Serialize, Deserialize),
    serde(deny_unknown_fields)
)]
pub struct Runtimes {
    /// How many run times these are taken from (at most [`RECENT_RUNTIMES`] per kind of task).
    pub count: u32,
    pub p50_ms: u64,
    pub p90_ms: u64,
    pub max_ms: u64,
}

/// How many of the latest run times of each kind of task [`Runtimes`] are taken from.
pub const RECENT_RUNTIMES: usize = 64;

impl Runtimes {
    /// The percentiles of `samples` (in any order; `None` if empty): the nearest-rank p50 and
    /// p90 (the smallest sample at or above that share of them) and the largest.
    pub fn of(samples: &mut [u64]) -> Option<Runtimes> {
        if samples.is_empty() {
            return None;
        }
        samples.sort_unstable();
        let n = samples.len();
        let rank = |percent: usize| samples[(n * percent).div_ceil(100).clamp(1, n) - 1];
        Some(Runtimes {
            count: u32::try_from(n).unwrap_or(u32::MAX),
            p50_ms: rank(50),
            p90_ms: rank(90),
            max_ms: samples[n - 1],
        })
    }
}

#[derive(Clone, Debug, PartialEq, Eq, Default)]
#[cfg_attr(
    feature = "serde",
    derive(Serialize, Deserialize),
    serde(deny_unknown_fields)
)]
pub struct Snapshot {
    pub now_ms: u64,
    #[cfg_attr(feature = "serde", serde(default))]
    pub scale_down_delay_ms: u64,
    pub managers: Vec<Manager>,
    #[cfg_attr(feature = "serde", serde(default))]
    pub demand: Vec<Demand>,
    /// Where a 0.2.0 component gets a counted manager's worker list from (the host).
    #[cfg_attr(feature = "serde", serde(skip))]
    pub fetch: Fetch,
}

impl Snapshot {
    /// `manager`'s live workers: the list given, or (counted) fetched from the host.
    pub fn workers_of<'a>(&self, manager: &'a Manager) -> Cow<'a, [Worker]> {
        match (&manager.counted, self.fetch.0) {
            (Some(summary), Some(fetch)) if summary.live() > 0 => Cow::Owned(fetch(&manager.id)),
            _ => Cow::Borrowed(&manager.workers),
        }
    }
}

/// The host call that lists a manager's workers (set by the 0.2.0 glue; equal whatever it is:
/// it is where the list comes from, not part of the snapshot).
#[derive(Clone, Copy, Default)]
pub struct Fetch(pub Option<fn(&str) -> Vec<Worker>>);

impl PartialEq for Fetch {
    fn eq(&self, _: &Fetch) -> bool {
        true
    }
}

impl Eq for Fetch {}

impl std::fmt::Debug for Fetch {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(if self.0.is_some() {
            "Fetch(host)"
        } else {
            "Fetch(none)"
        })
    }
}
#[derive(Clone, Debug, PartialEq, Eq, Default)]
#[cfg_attr(feature = "serde", derive(Serialize, Deserialize))]
pub struct Decision {
    pub manager_id: String,
    pub desired_workers: u32,
    pub stop: Vec<u64>,
    /// Workers to drain (0.2.0): the whole of what is drained after this decision.
    #[cfg_attr(
        feature = "serde",
        serde(default, skip_serializing_if = "Vec::is_empty")
    )]
    pub drain: Vec<u64>,
    /// Why, per worker stopped or drained (0.2.0; optional).
    #[cfg_attr(
        feature = "serde",
        serde(default, skip_serializing_if = "Vec::is_empty")
    )]
    pub worker_reasons: Vec<(u64, String)>,
    pub reason: String,
}

#[derive(Clone, Debug, Default, PartialEq, Eq)]
#[cfg_attr(feature = "serde", derive(Serialize, Deserialize))]
pub struct Tier {
    pub priority: u32,
    pub members: Vec<String>,
    /// (member, its settings as the content writes them: `min=2, cooldown=300s`) for the
    /// members that have some (0.2.0; a 0.1.0 engine has none).
    #[cfg_attr(
        feature = "serde",
        serde(default, skip_serializing_if = "Vec::is_empty")
    )]
    pub settings: Vec<(String, String)>,
}

impl Tier {
    /// Its members as `weir policy check` prints them: `a, b (min=2, cooldown=300s)`.
    pub fn describe_members(&self) -> String {
        let described: Vec<String> = (self.members.iter())
            .map(|m| match self.settings.iter().find(|(s, _)| s == m) {
                Some((_, settings)) => format!("{m} ({settings})"),
                None => m.clone(),
            })
            .collect();
        described.join(", ")
    }
}
