//! Worker manager <-> scheduler: the manager's state on every heartbeat, the desired count.

use serde::{Deserialize, Serialize};

use super::*;

/// What a worker manager reports on every heartbeat.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct ManagerState {
    pub id: String,
    pub worker_type: String,
    /// Most tasks at once over all its workers (u32::MAX: no limit).
    pub max_task_concurrency: u32,
    /// Slots of each worker it starts.
    pub worker_slots: u32,
    /// Amounts each of its workers has.
    pub capabilities: Vec<(String, u64)>,
    /// Names of its worker processes that are alive (registered or still starting). A
    /// registered worker its manager listed once and lists no more is gone: the scheduler
    /// requeues its tasks at once instead of waiting for its connection to time out.
    pub workers: Vec<String>,
    /// The conditions its workers evaluate (its `--env-plugin` flags): the scheduler knows these
    /// names from the manager's registration on, before it has any worker.
    pub environments: Vec<EnvironmentDef>,
    /// `Some(n)`: a fixed pool (`--fixed n`) that keeps n workers alive and is not scaled.
    pub fixed: Option<u32>,
    /// The last workers it saw exit or stopped (at most [`EXITED_KEPT`]): one that registered
    /// after the manager's last report is known gone all the same.
    pub exited: Vec<String>,
    /// How it gets workers: `process` (its own), `command` or `slurm` (units).
    pub backend: String,
    /// Its units (a Slurm job, a command-backend unit; a worker process of its own), live ones
    /// first, then the last that ended (at most [`UNITS_ENDED_KEPT`]), for `weir managers`.
    pub units: Vec<UnitReport>,
    /// Milliseconds each worker it starts may run tasks (a Slurm manager's `--time-limit` less
    /// `--leave-before`); `None`: no limit. A task whose timeout is longer never runs on its
    /// workers: the policy is not asked to start them for it, and `weir explain` says so.
    pub usable_ms: Option<u64>,
    /// The instance ([`WorkerRegistration::instance`]) of each worker process named in `workers` or
    /// `exited` that it chose itself (a process pool passes each worker its instance); a name
    /// may appear twice (one that exited and one started since under its name). A registered
    /// worker is taken for gone at once only when its manager reports its own instance gone:
    /// another instance is another process of the name (a twin's, started with one id); none
    /// (a cluster engine's unit, an adopted one) is fenced like a lost connection.
    pub instances: Vec<(String, u64)>,
    /// Its operator's labels (`worker-manager --label cost=3,zone=a`): shown in the status and
    /// handed to the scaling policy (weir:plugin@0.2.0), which may read them as it likes.
    pub labels: Vec<(String, String)>,
    /// How its last attempts to start workers went: handed to the scaling policy
    /// (weir:plugin@0.2.0 `launch`), so a policy can spill away from a pool that fails to
    /// deliver before its backoff says so.
    pub launch: LaunchReport,
}

/// A manager's failed starts ([`ManagerState::launch`]). Durations are on the manager's clock
/// when it reported (the scheduler ages them by the time since it heard).
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct LaunchReport {
    /// Failed starts in a row since a worker it started last came up: rounds of a cluster
    /// engine's units (one event that fails several units is one), or worker processes of a
    /// process pool that died young.
    pub failures: u32,
    /// How long ago it last saw a start fail, in ms (`None`: this process never did).
    pub last_failure_ms: Option<u64>,
    /// How long it still waits before starting workers again, in ms (0: it may start now).
    /// While a unit backend backs off it also reports a task cap of 0.
    pub backoff_ms: u64,
}

/// Most labels a manager carries ([`ManagerState::labels`]): more are refused by
/// `worker-manager` and dropped by the scheduler.
pub const MAX_LABELS: usize = 32;

/// Whether `key=value` is a label a manager may carry: a key of 1 to 64 letters, digits, `_`,
/// `-` or `.`; a value of at most 256 characters, none of them a control character or an
/// invisible formatting one (zero-width, bidirectional overrides), so a label prints as it reads.
pub fn label_ok(key: &str, value: &str) -> bool {
    let invisible = |c: char| {
        c.is_control()
            || matches!(c, '\u{ad}' | '\u{200b}'..='\u{200f}' | '\u{202a}'..='\u{202e}'
                | '\u{2060}'..='\u{2064}' | '\u{2066}'..='\u{2069}' | '\u{feff}')
    };
    (1..=64).contains(&key.len())
        && key
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, '_' | '-' | '.'))
        && value.chars().count() <= 256
        && !value.chars().any(invisible)
}

/// How many ended units a manager keeps reporting.
pub const UNITS_ENDED_KEPT: usize = 16;

/// How many exited worker names a manager keeps reporting.
pub const EXITED_KEPT: usize = 64;

/// One unit as its manager sees it. Times are durations on the manager's clock when it reported
/// (the scheduler ages them by the time since it heard; never an instant).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct UnitReport {
    /// The Slurm job id, the command backend's unit id, or the worker's name.
    pub id: String,
    pub state: UnitState,
    /// Why it is in that state: Slurm's pending reason (`Resources`, `JobHeldUser`), or why
    /// it ended (`drained`, `late`, `exited ...`).
    pub reason: Option<String>,
    /// Since it was started (or adopted), in milliseconds; for one that ended, how long it
    /// lived.
    pub age_ms: u64,
    /// Its workers' names (none once it ended).
    pub workers: Vec<String>,
    /// Time left in its allocation (Slurm's walltime), in milliseconds.
    pub time_left_ms: Option<u64>,
    /// How long ago it ended, in milliseconds.
    pub ended_ms: Option<u64>,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum UnitState {
    /// Submitted or started, none of its workers registered yet (Slurm: queued).
    Pending,
    Running,
    /// Stopping: cancelled and not gone yet (Slurm: COMPLETING).
    Completing,
    Ended,
}

impl UnitState {
    pub fn as_str(self) -> &'static str {
        match self {
            UnitState::Pending => "pending",
            UnitState::Running => "running",
            UnitState::Completing => "completing",
            UnitState::Ended => "ended",
        }
    }
}

/// The state is boxed: a link's channel allocates 32 slots of the largest message up front
/// (the same bytes on the wire: serde writes a `Box<T>` as the `T`).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum FromManager {
    Heartbeat(Box<ManagerState>),
    /// The manager is stopping on purpose (its workers with it): forget it now.
    Goodbye,
}

#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum ToManager {
    /// Converge to `desired` workers: stop the named (idle, already drained) ones first; if
    /// still above, cancel units that have not registered yet and do not run (`registered`
    /// lists the workers that have; a started worker process runs).
    Desired {
        desired: u32,
        stop: Vec<String>,
        registered: Vec<String>,
        reason: String,
        /// The process (`worker --instance`) of each worker in `stop` that registered: a
        /// manager stops its process of that name only if it is that one. Another process of
        /// the name (a twin manager started with this id names its workers as the first does)
        /// may be busy, and the stop was not meant for it.
        instances: Vec<(String, u64)>,
    },
    /// Sent when a manager is let in, and again when the cluster's size moves it by more than
    /// an eighth: it reports at least every `beat_ms` (half the scheduler's heartbeat timeout
    /// in a small cluster, slower as it grows: `weir_core::lease::manager_pace`), and at once
    /// whenever what it reports changes; it takes the scheduler for gone once silent for that
    /// pace and half its own timeout. Before this comes, it reports at every tick of its
    /// `--heartbeat-interval`.
    Pace { beat_ms: u64 },
}
