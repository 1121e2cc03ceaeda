//! Why a task waits, from the managers' side: which could start a worker for it, and why the
//! others cannot (`weir explain`, `--unschedulable-timeout`).

use super::views::verdict;
use super::*;
use crate::scaling::{usable_covers, walltime_bucket_ms};

impl Managers {
    /// For `weir explain`: which managers could start a worker for a task needing `capabilities`
    /// and `environments` with a timeout of `timeout_ms` (0: none), and why the others cannot.
    pub fn explain(
        &self,
        context: &Context<'_>,
        capabilities: &[(String, u64)],
        environments: &[String],
        timeout_ms: u64,
    ) -> Vec<String> {
        let mut lines = Vec::new();
        for entry in self.entries.values() {
            let state = &entry.state;
            let missing =
                self.obstacles(entry, context, capabilities, environments, timeout_ms, true);
            let last = context.decisions.get(&state.id).map(|d| {
                format!(
                    "; last decision: {} worker(s), {}",
                    d.desired_workers, d.reason
                )
            });
            lines.push(match missing.is_empty() {
                true => format!(
                    "manager {} ({}): could start workers for it{}",
                    state.id,
                    state.worker_type,
                    last.unwrap_or_default()
                ),
                false => format!(
                    "manager {} ({}): cannot: {}",
                    state.id,
                    state.worker_type,
                    missing.join("; ")
                ),
            });
        }
        lines
    }

    /// Whether some manager could start a worker for a task needing `capabilities` and
    /// `environments` with a timeout of `timeout_ms` (for `--unschedulable-timeout`).
    pub(crate) fn could_serve(
        &self,
        context: &Context<'_>,
        capabilities: &[(String, u64)],
        environments: &[String],
        timeout_ms: u64,
    ) -> bool {
        self.any_could(context, capabilities, environments, timeout_ms, true)
    }

    /// [`Managers::could_serve`], counting a manager that is offline as if it were back (it
    /// may be restarting): what it would say once online is what counts. For telling a
    /// waiting client that nothing can run its task, which must be definite.
    pub(crate) fn could_serve_once_online(
        &self,
        context: &Context<'_>,
        capabilities: &[(String, u64)],
        environments: &[String],
        timeout_ms: u64,
    ) -> bool {
        self.any_could(context, capabilities, environments, timeout_ms, false)
    }

    /// Whether some manager has no obstacle (being offline one only if `offline_counts`).
    fn any_could(
        &self,
        context: &Context<'_>,
        capabilities: &[(String, u64)],
        environments: &[String],
        timeout_ms: u64,
        offline_counts: bool,
    ) -> bool {
        self.entries.values().any(|entry| {
            let why = self.obstacles(
                entry,
                context,
                capabilities,
                environments,
                timeout_ms,
                offline_counts,
            );
            why.is_empty()
        })
    }

    /// How many managers are known (online or not, until forgotten).
    pub fn known(&self) -> usize {
        self.entries.len()
    }

    /// Why `entry` cannot start a worker for such a task (empty: it can); being offline is
    /// one reason only if `offline_counts`.
    pub(super) fn obstacles(
        &self,
        entry: &Entry,
        context: &Context<'_>,
        capabilities: &[(String, u64)],
        environments: &[String],
        timeout_ms: u64,
        offline_counts: bool,
    ) -> Vec<String> {
        let state = &entry.state;
        let mine: Vec<&WorkerView> = context.workers_of(&state.id).collect();
        let mut missing = Vec::new();
        if let Some(n) = state.fixed {
            missing.push(format!("a fixed pool of {n} workers (not scaled)"));
        }
        if offline_counts && !self.online(entry, context.now) {
            missing.push("offline".to_string());
        }
        if state.fixed.is_none() && !context.listed(state) {
            missing.push("not listed in the scaling policy".to_string());
        }
        for (name, need) in capabilities {
            let have = state
                .capabilities
                .iter()
                .find(|(n, _)| n == name)
                .map_or(0, |(_, v)| *v);
            if have < *need {
                missing.push(format!(
                    "its workers have {name}={have}, the task needs {need}"
                ));
            }
        }
        if !usable_covers(state.usable_ms, timeout_ms) {
            let seconds = |ms: u64| ms as f64 / 1000.0;
            let bucket = walltime_bucket_ms(timeout_ms);
            let counted = match bucket == timeout_ms {
                true => String::new(),
                false => format!(" (counted in whole seconds: {} s)", seconds(bucket)),
            };
            missing.push(format!(
                "no worker it can start will qualify: each has {} s to run tasks (its walltime \
                 less --leave-before), less than the task's timeout of {} s{counted}",
                seconds(state.usable_ms.unwrap_or(0)),
                seconds(timeout_ms),
            ));
        }
        for env in environments {
            if verdict(entry, &mine, env, context) == Verdict::NoMatch {
                missing.push(match entry.declares(env) || context.is_registered(env) {
                    true => format!("its workers do not match `{env}`"),
                    false => format!("its workers do not evaluate `{env}`"),
                });
            }
        }
        missing
    }
}
