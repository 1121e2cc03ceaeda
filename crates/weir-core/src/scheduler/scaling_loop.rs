//! The scaling loop's state: the one store of which policy runs (and its tiers), whether it
//! is deciding, how it last did, the last decision applied for each manager, and when it is
//! next handed a snapshot. `Config.policy` and `Config.tiers` are only where it starts.

use std::sync::Arc;

use crate::hash::HashMap;

use super::{Config, PolicyInfo};
use crate::scaling::{Decision, PolicyFailure, Snapshot, Tier};

/// A manager is sent an unchanged decision again after this long (it was sent on a reliable
/// stream; this is insurance, not the rule).
pub(super) const RESEND_SAME_MS: u64 = 30_000;

pub(super) struct ScalingLoop {
    /// How often the policy decides; `None`: no policy, no scaling.
    pub(super) interval: Option<u64>,
    /// The policy in force and its tiers (`weir policy set` replaces both).
    pub(super) policy: PolicyInfo,
    pub(super) tiers: Vec<Tier>,
    /// It is deciding on this snapshot: its decisions are checked against it.
    pub(super) deciding: Option<Arc<Snapshot>>,
    /// The last snapshot it was given (a new policy runs once on it before it takes over).
    pub(super) last: Option<Arc<Snapshot>>,
    /// A policy set while running, read back from the journal: the shell creates it at start.
    pub(super) restored: Option<PolicyInfo>,
    /// A `weir policy set` is being tried (one at a time).
    pub(super) trying: bool,
    /// Why its last answer was not applied (cleared by the next good one).
    pub(super) error: Option<PolicyFailure>,
    pub(super) errors: u64,
    /// The last decision applied for each manager, by manager id.
    pub(super) decisions: HashMap<String, Decision>,
    /// What each connected manager was last sent, and when: the same again is not sent (its
    /// stream is reliable) unless it names workers to stop (a stop that failed is tried again)
    /// or [`RESEND_SAME_MS`] have passed. Forgotten when a manager (re)joins.
    pub(super) sent: HashMap<String, (weir_proto::ToManager, u64)>,
    /// When it is next handed a snapshot (ms).
    pub(super) next: u64,
    /// When it was last handed one, and the fewest tasks queued since: new demand that nothing
    /// live can take calls it again early (see `Scheduler::scale_soon`).
    pub(super) last_call: Option<(u64, u64)>,
}

impl ScalingLoop {
    pub(super) fn new(config: &Config) -> ScalingLoop {
        ScalingLoop {
            interval: config.scaling_ms,
            policy: config.policy.clone(),
            tiers: config.tiers.clone(),
            deciding: None,
            last: None,
            restored: None,
            trying: false,
            error: None,
            errors: 0,
            decisions: HashMap::default(),
            sent: HashMap::default(),
            next: config.scaling_ms.unwrap_or(u64::MAX),
            last_call: None,
        }
    }

    /// Whether it is deciding (on the snapshot in `deciding`).
    pub(super) fn busy(&self) -> bool {
        self.deciding.is_some()
    }

    /// The last decisions applied, by manager id.
    pub(super) fn last_decisions(&self) -> impl Iterator<Item = &Decision> {
        let mut last: Vec<&Decision> = self.decisions.values().collect();
        last.sort_by(|a, b| a.manager_id.cmp(&b.manager_id));
        last.into_iter()
    }

    pub(super) fn record(&mut self, decisions: &[Decision]) {
        for decision in decisions {
            self.decisions
                .insert(decision.manager_id.clone(), decision.clone());
        }
    }
}
