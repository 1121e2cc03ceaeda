//! Managers and the scaling policy: heartbeats, the snapshot handed to the policy, the checks
//! its decisions pass (whatever the policy, WASM or native), and the orders sent to managers.

use super::{Action, Scheduler};
use crate::core::scaling::{Decision, validate_decisions};
use crate::core::tasks::Loss;
use crate::proto::{ManagerState, ToManager};

impl Scheduler {
    pub(super) fn manager_heartbeat(&mut self, now: u64, state: ManagerState) {
        if self.connected.insert(state.id.clone()) {
            tracing::info!(manager = %state.id, worker_type = %state.worker_type, fixed = ?state.fixed, "worker manager joined");
        }
        self.tasks
            .declare_environments(state.environments.iter().map(|d| d.name.as_str()));
        let id = state.id.clone();
        let views = self.tasks.worker_views(now);
        let gone = self.managers.heartbeat(now, state, &views);
        for (worker, stopped) in gone {
            let (reason, loss) = match stopped {
                true => (format!("its manager {id} stopped it"), Loss::Stopped),
                false => (format!("its manager {id} saw it exit"), Loss::Exited),
            };
            self.worker_gone(now, worker, &reason, loss, !stopped);
        }
    }

    /// Hand the policy a snapshot, unless it is still deciding on the last one.
    pub(super) fn scale(&mut self, now: u64) {
        if self.policy.busy || !self.managers.any_scalable() {
            return;
        }
        let snapshot = self.managers.snapshot(
            &self.context(now),
            self.config.scale_down_delay_ms,
            self.tasks.demand(),
        );
        self.policy.busy = true;
        self.policy.deciding = Some(snapshot.clone());
        self.actions.push_back(Action::Decide(snapshot));
    }

    /// The policy's answer: checked against the snapshot it was given, then applied; a failure
    /// or a nonsense decision keeps the last good one in force.
    pub(super) fn decided(&mut self, now: u64, result: Result<Vec<Decision>, String>) {
        self.policy.busy = false;
        let snapshot = self.policy.deciding.take();
        let checked = result.and_then(|decisions| match &snapshot {
            Some(snapshot) => validate_decisions(snapshot, &decisions)
                .map(|()| decisions)
                .map_err(|detail| format!("{}: nonsense decision: {detail}", self.config.policy)),
            None => Err("a decision nobody asked for".into()),
        });
        match checked {
            Ok(decisions) => {
                self.policy.error = None;
                self.apply_decisions(now, &decisions);
            }
            Err(error) => {
                tracing::error!(%error, "scaling policy failed; holding its last good decision");
                self.policy.errors += 1;
                self.policy.error = Some(error);
            }
        }
    }

    fn apply_decisions(&mut self, now: u64, decisions: &[Decision]) {
        let views = self.tasks.worker_views(now);
        for decision in decisions {
            if !self.connected.contains(&decision.manager_id) {
                continue;
            }
            let stop = self.tasks.drain(&decision.stop);
            let registered: Vec<String> = views
                .iter()
                .filter(|w| w.manager.as_deref() == Some(decision.manager_id.as_str()))
                .map(|w| w.name.clone())
                .collect();
            tracing::debug!(manager = %decision.manager_id, desired = decision.desired_workers, reason = %decision.reason, "scaling");
            self.actions.push_back(Action::ToManager {
                manager: decision.manager_id.clone(),
                message: ToManager::Desired {
                    desired: decision.desired_workers,
                    stop,
                    registered,
                    reason: decision.reason.clone(),
                },
            });
        }
        self.managers.record(decisions);
    }

    /// `--unschedulable-timeout`: the task core decides, asking the managers whether one of
    /// them could start a worker for the tasks.
    pub(super) fn fail_unschedulable(&mut self, now: u64) {
        let Some(timeout) = self.config.unschedulable_timeout_ms else {
            return;
        };
        let context = crate::core::managers::Context {
            now,
            workers: self.tasks.worker_views(now),
            tiers: &self.config.tiers,
            registered: self.tasks.registered_environments(),
        };
        let managers = &self.managers;
        let failed = self
            .tasks
            .fail_unschedulable(now, timeout, |capabilities, environments| {
                managers.could_serve(&context, capabilities, environments)
            });
        if failed > 0 {
            tracing::warn!(
                failed,
                "failed tasks nothing can run (--unschedulable-timeout)"
            );
        }
    }
}
