//! Managers and the scaling policy: heartbeats, the snapshot handed to the policy, the checks
//! its decisions pass (whatever the policy, WASM or native), and the orders sent to managers.

use super::{Action, ClientId, ConnectionId, PolicyInfo, Record, Scheduler};
use crate::managers::Gone;
use crate::scaling::{
    Decision, PolicyFailure, Snapshot, Tier, is_reserved_environment, validate_decisions,
};
use crate::tasks::Loss;
use weir_proto::{ErrorCode, ManagerState, PolicyReport, Response, ToManager, ToWorker};

/// Most bytes of policy content `weir policy set` takes (the waterfall's rows are a few dozen).
pub(super) const MAX_POLICY_CONTENT: usize = 1 << 20;

impl Scheduler {
    /// A manager's connection sent its first heartbeat. One process per manager id: while
    /// another connection of that id is live, this one is refused (two processes of one id
    /// would each start workers against the one cap, and each one's heartbeat would omit the
    /// other's workers). A restarted manager is let in once its previous connection is gone
    /// (closed, or timed out); what that one listed proves nothing about the new process.
    pub(super) fn manager_joined(
        &mut self,
        now: u64,
        connection: ConnectionId,
        state: ManagerState,
        peer: String,
    ) {
        if let Err(first) = self.managers.connect(&state.id, peer.clone()) {
            let reason = format!(
                "a worker manager with id `{}` is already connected (from {first}): manager ids \
                 must be unique; stop that one, or give this one another --id",
                state.id
            );
            tracing::warn!(manager = %state.id, %peer, %first, "second manager of one id refused");
            self.actions
                .push_back(Action::ManagerRefused { connection, reason });
            return;
        }
        tracing::info!(manager = %state.id, worker_type = %state.worker_type, fixed = ?state.fixed, %peer, "worker manager joined");
        self.actions.push_back(Action::ManagerRegistered {
            connection,
            id: state.id.clone(),
        });
        self.scaling.sent.remove(&state.id);
        // Told its pace (as the heartbeat below registers it).
        self.manager_heartbeat(now, state);
    }

    pub(super) fn manager_heartbeat(&mut self, now: u64, mut state: ManagerState) {
        // The scheduler's own environment names (walltimes) are not taken from a manager: users
        // cannot give them (`--env-plugin` and `env register` take letters, digits, `_`, `-`).
        state.environments.retain(|def| {
            let reserved = is_reserved_environment(&def.name);
            if reserved {
                tracing::warn!(manager = %state.id, name = %def.name, "ignored an environment of a reserved name");
            }
            !reserved
        });
        // Labels as `worker-manager --label` takes them, at most MAX_LABELS: whatever else a
        // manager sends (another build, a bug) never reaches a status or a policy.
        let before = state.labels.len();
        state.labels.retain(|(k, v)| weir_proto::label_ok(k, v));
        state.labels.truncate(weir_proto::MAX_LABELS);
        if state.labels.len() != before {
            tracing::warn!(manager = %state.id, dropped = before - state.labels.len(), "ignored labels that are not key=value labels, or past the limit");
        }
        self.tasks
            .declare_environments(state.environments.iter().map(|d| d.name.as_str()));
        let id = state.id.clone();
        let views = self.tasks.views_of_manager(now, &id);
        let gone = self.managers.heartbeat(now, state, &views);
        for (worker, gone) in gone {
            let (reason, loss) = match gone {
                Gone::Stopped => (format!("its manager {id} stopped it"), Loss::Stopped),
                Gone::Exited => (format!("its manager {id} saw it exit"), Loss::Exited),
                Gone::Unproven => (
                    format!("its manager {id} reports a process of its name gone"),
                    Loss::Silent,
                ),
            };
            self.worker_gone(now, worker, &reason, loss, gone != Gone::Stopped);
        }
        // Reports on change, and otherwise at a pace the cluster's size sets
        // ([`crate::lease::manager_pace`]): told when it joins and when the pace moves.
        let pace = self.config.manager_pace_ms(self.idle_peers());
        if self.managers.tell_pace(&id, pace, now) {
            let message = ToManager::Pace { beat_ms: pace };
            self.actions.push_back(Action::ToManager {
                manager: id,
                message,
            });
        }
    }

    /// Workers of a manager forgotten after being offline (a `kill -9`ed Slurm manager's batch
    /// jobs, which nobody would cancel): each is drained and told to leave once idle, and the
    /// unit it runs in ends with it.
    pub(super) fn dismiss_orphans(&mut self, now: u64) {
        if self.managers.orphaned().is_empty() {
            return;
        }
        let orphaned = self.managers.orphaned();
        let stranded: Vec<(weir_proto::WorkerId, String, String, u32)> = (self.tasks)
            .worker_views(now)
            .into_iter()
            .filter_map(|w| {
                let manager = w.manager.filter(|m| orphaned.contains(*m))?;
                Some((w.id, w.name.to_string(), manager.to_string(), w.busy))
            })
            .collect();
        let mut still = std::collections::BTreeSet::new();
        for (id, name, manager, busy) in stranded {
            let link = self.links.get_mut(&id);
            if busy == 0 && link.is_some_and(|l| !std::mem::replace(&mut l.dismissed, true)) {
                tracing::warn!(worker = %name, %manager, "its manager is gone: telling it to leave");
                self.tasks.drain(now, &[id]);
                let reason = format!("its manager {manager} has been gone for a minute");
                self.send_worker(id, ToWorker::Leave { reason });
            }
            still.insert(manager);
        }
        self.managers.keep_orphans(&still);
    }

    /// Hand the policy a snapshot, unless it is still deciding on the last one (or there is no
    /// manager to scale). Returns whether it did.
    pub(super) fn scale(&mut self, now: u64) -> bool {
        if self.scaling.busy() || !self.managers.any_scalable() {
            return false;
        }
        // One snapshot, shared by the policy that decides on it, the check of its answer and
        // the trial of a new policy (at 10,000 workers a copy is thousands of allocations).
        let snapshot = std::sync::Arc::new(self.scaling_snapshot(now));
        self.scaling.deciding = Some(snapshot.clone());
        self.scaling.last = Some(snapshot.clone());
        self.actions.push_back(Action::Decide(snapshot));
        true
    }

    /// What the policy would be handed now (the managers it scales, their workers, the demand).
    pub(crate) fn scaling_snapshot(&self, now: u64) -> Snapshot {
        let mut snapshot = self.managers.snapshot(
            &self.context(now),
            self.config.scale_down_delay_ms,
            self.tasks.demand(now),
        );
        for manager in &mut snapshot.managers {
            manager.drain_budget =
                crate::scaling::drain_budget(self.config.max_drain_percent, manager.workers.len());
        }
        snapshot
    }

    /// The policy's answer: checked against the snapshot it was given, then applied; a failure
    /// or a nonsense decision keeps the last good one in force.
    pub(super) fn decided(&mut self, now: u64, result: Result<Vec<Decision>, PolicyFailure>) {
        let snapshot = self.scaling.deciding.take();
        let checked = result.and_then(|decisions| match &snapshot {
            Some(snapshot) => validate_decisions(snapshot, &decisions)
                .map(|()| decisions)
                .map_err(|rule| PolicyFailure::Nonsense {
                    policy: self.scaling.policy.name.clone(),
                    rule,
                }),
            None => Err(PolicyFailure::Unasked),
        });
        match checked {
            Ok(decisions) => {
                self.scaling.error = None;
                self.apply_decisions(now, &decisions);
            }
            Err(error) => {
                tracing::error!(%error, "scaling policy failed; holding its last good decision");
                // Its drains fail open: a policy that cannot decide holds no worker back.
                let back = self.tasks.uncordon_except(&[]);
                if back > 0 {
                    tracing::warn!(
                        workers = back,
                        "drained workers take tasks again: the policy failed"
                    );
                }
                self.scaling.errors += 1;
                self.scaling.error = Some(error);
            }
        }
    }

    fn apply_decisions(&mut self, now: u64, decisions: &[Decision]) {
        // Managers these decisions drain for; every other drained worker is taken back (a
        // manager left out, offline, or gone holds no drain).
        let named: Vec<&str> = (decisions.iter())
            .filter(|d| self.managers.is_connected(&d.manager_id))
            .map(|d| d.manager_id.as_str())
            .collect();
        let back = self.tasks.uncordon_except(&named);
        if back > 0 {
            tracing::info!(
                workers = back,
                "drained workers of managers no decision names take tasks again"
            );
        }
        for decision in decisions {
            if !self.managers.is_connected(&decision.manager_id) {
                continue;
            }
            // The policy's drain: the whole of it for this manager (validated: its live workers,
            // within its budget); those no longer named take tasks again.
            let mut drain = decision.drain.clone();
            drain.sort_unstable();
            let (drained, back) = self.tasks.cordon(&decision.manager_id, &drain);
            let why = |id: u64| {
                let mut reasons = decision.worker_reasons.iter();
                let found = reasons.find(|(w, _)| *w == id).map(|(_, r)| r.as_str());
                found.unwrap_or(&decision.reason)
            };
            for (id, name) in &drained {
                tracing::info!(manager = %decision.manager_id, worker = %name, reason = why(*id), "drained by the policy: no new tasks");
            }
            for (_, name) in &back {
                tracing::info!(manager = %decision.manager_id, worker = %name, "no longer drained: takes tasks again");
            }
            for &id in &decision.stop {
                tracing::debug!(manager = %decision.manager_id, worker = id, reason = why(id), "stopping");
            }
            let mut stop = self.tasks.drain(now, &decision.stop);
            // Its own workers only (after the drain, which marks them).
            let views = self.tasks.views_of_manager(now, &decision.manager_id);
            // Drained before and still here: named again in every decision, so a manager that
            // missed it (it restarted meanwhile, or its engine's stop failed) stops them now.
            for w in &views {
                if w.draining
                    && w.manager == Some(decision.manager_id.as_str())
                    && !stop.iter().any(|n| n == w.name)
                {
                    stop.push(w.name.to_string());
                }
            }
            let registered: Vec<String> = views
                .iter()
                .filter(|w| w.manager == Some(decision.manager_id.as_str()))
                .map(|w| w.name.to_string())
                .collect();
            let instances = views
                .iter()
                .filter(|w| stop.iter().any(|n| n == w.name))
                .map(|w| (w.name.to_string(), w.instance))
                .collect();
            let message = ToManager::Desired {
                desired: decision.desired_workers,
                stop,
                registered,
                reason: decision.reason.clone(),
                instances,
            };
            let same = self
                .scaling
                .sent
                .get(&decision.manager_id)
                .is_some_and(|(sent, at)| {
                    *sent == message
                        && now.saturating_sub(*at) < super::scaling_loop::RESEND_SAME_MS
                });
            let stops = matches!(&message, ToManager::Desired { stop, .. } if !stop.is_empty());
            if same && !stops {
                continue;
            }
            tracing::debug!(manager = %decision.manager_id, desired = decision.desired_workers, reason = %decision.reason, "scaling");
            self.scaling
                .sent
                .insert(decision.manager_id.clone(), (message.clone(), now));
            self.actions.push_back(Action::ToManager {
                manager: decision.manager_id.clone(),
                message,
            });
        }
        self.scaling.record(decisions);
    }

    /// `weir policy set`: the shell creates the new policy and tries it on the last snapshot.
    pub(super) fn set_policy(&mut self, client: ClientId, policy: PolicyInfo) {
        if self.scaling.interval.is_none() {
            let message = "this scheduler runs without a scaling policy".to_string();
            return self.refuse(client, ErrorCode::Invalid, message);
        }
        if policy.content.len() > MAX_POLICY_CONTENT {
            let message = format!(
                "the policy was not changed: its content is {} bytes, at most {MAX_POLICY_CONTENT}",
                policy.content.len()
            );
            return self.refuse(client, ErrorCode::Limit, message);
        }
        if self.scaling.trying {
            let message =
                "the policy was not changed: another change is being tried; try again".to_string();
            return self.refuse(client, ErrorCode::Limit, message);
        }
        self.scaling.trying = true;
        tracing::info!(policy = %policy.name, "replacing the scaling policy");
        self.actions.push_back(Action::SwapPolicy {
            client: Some(client),
            policy,
            snapshot: self.scaling.last.clone(),
        });
    }

    /// The new policy runs (journaled, so a restart keeps it), or the old one stays.
    pub(super) fn policy_swapped(
        &mut self,
        client: Option<ClientId>,
        policy: PolicyInfo,
        result: Result<Vec<Tier>, PolicyFailure>,
    ) {
        // The journal's policy, tried at start, superseded by a `weir policy set` meanwhile.
        let superseded = client.is_none() && self.scaling.restored.is_none();
        match client {
            None => self.scaling.restored = None,
            Some(_) => self.scaling.trying = false,
        }
        match (result, client) {
            (Ok(_), None) if superseded => {
                tracing::info!(policy = %policy.name, "the journal's scaling policy was replaced meanwhile: not restored");
            }
            (Ok(tiers), client) => {
                tracing::info!(policy = %policy.name, tiers = tiers.len(), "scaling policy replaced");
                self.actions.push_back(Action::AdoptPolicy { client });
                // The journal's choice is this one now (compaction keeps it, not the old).
                self.scaling.restored = None;
                if let (Some(_), Some(bytes)) = (client, &policy.bytes) {
                    self.journal(Record::PolicySet {
                        name: policy.name.clone(),
                        component: bytes.to_vec(),
                        content: policy.content.clone(),
                    });
                }
                self.scaling.tiers = tiers;
                self.scaling.policy = policy;
                // A new policy starts with nothing drained (the old one's drains were its own).
                self.tasks.uncordon_except(&[]);
                self.scaling.error = None;
                // The last decisions shown are the new policy's, from its first tick on.
                self.scaling.decisions.clear();
                if let Some(client) = client {
                    let report = self.policy_report();
                    self.reply_durable(client, Response::Policy(report));
                }
            }
            (Err(error), Some(client)) => {
                let message = format!("the policy was not changed: {error}");
                self.refuse(client, ErrorCode::Invalid, message);
            }
            (Err(error), None) => {
                tracing::error!(%error, policy = %policy.name, "the journal's scaling policy cannot run; keeping the one given at start");
            }
        }
    }

    /// The policy in force, its tiers and its last decisions.
    /// The running policy, its tiers, last decisions and last error (`weir policy show`).
    pub fn policy_report(&self) -> PolicyReport {
        let policy = &self.scaling.policy;
        PolicyReport {
            name: policy.name.clone(),
            sha256: policy
                .component
                .iter()
                .map(|b| format!("{b:02x}"))
                .collect(),
            content: policy.content.clone(),
            tiers: self
                .scaling
                .tiers
                .iter()
                .map(|t| (t.priority, t.members.clone()))
                .collect(),
            last: self
                .scaling
                .last_decisions()
                .map(|d| (d.manager_id.clone(), d.desired_workers, d.reason.clone()))
                .collect(),
            error: self.scaling.error.as_ref().map(ToString::to_string),
        }
    }

    /// The last decision applied for each manager (stops, drains and reasons included), in
    /// manager order: the dashboard's view of what the policy asked.
    pub fn last_decisions(&self) -> Vec<crate::scaling::Decision> {
        self.scaling.last_decisions().cloned().collect()
    }

    /// The demand of the last snapshot the policy was handed (none before the first), each
    /// group with what could serve it: the dashboard's demand table, where queued work no
    /// manager takes shows as such.
    pub fn last_demand(&self) -> Vec<DemandView> {
        let Some(snapshot) = self.scaling.last.as_ref() else {
            return Vec::new();
        };
        // Each online manager once: (it, below its cap, its idle workers).
        let managers: Vec<(&crate::scaling::Manager, bool, u64)> = (snapshot.managers.iter())
            .filter(|m| m.online)
            .map(|m| {
                let below = m.current_workers() < m.max_workers_for(m.max_task_concurrency);
                let idle = u64::from(m.summary(snapshot.scale_down_delay_ms).idle);
                (m, below, idle)
            })
            .collect();
        (snapshot.demand.iter())
            .map(|demand| {
                let mut view = DemandView {
                    demand: demand.clone(),
                    ..DemandView::default()
                };
                for (_, below, idle) in managers.iter().filter(|(m, _, _)| m.serves(demand)) {
                    view.able += 1;
                    view.below_cap += u32::from(*below);
                    view.idle_workers += idle;
                }
                view
            })
            .collect()
    }

    /// A policy set while running that the journal holds: the shell creates it at start.
    /// It stays the journal's choice (compaction keeps it) until it runs or cannot.
    pub fn restored_policy(&self) -> Option<Action> {
        let policy = self.scaling.restored.clone()?;
        Some(Action::SwapPolicy {
            client: None,
            policy,
            snapshot: None,
        })
    }
}

/// A demand group as the dashboard shows it ([`Scheduler::last_demand`]): the group, how many
/// online managers have workers that could run it (capabilities covered, no `no-match`), how
/// many of those are below their cap, and how many idle workers they have. Queued tasks with
/// no such manager, or none below its cap and no idle worker, wait for capacity nobody offers.
#[derive(Clone, Debug, Default, PartialEq, Eq, serde::Serialize)]
pub struct DemandView {
    #[serde(flatten)]
    pub demand: crate::scaling::Demand,
    pub able: u32,
    pub below_cap: u32,
    pub idle_workers: u64,
}
