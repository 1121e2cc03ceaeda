//! Queued tasks nothing can run: failed after `--unschedulable-timeout`, and told to the clients
//! waiting for their jobs.

use super::{ClientId, Scheduler, UNRUNNABLE_AFTER_MS};
use weir_proto::{JobId, Response};

impl Scheduler {
    /// Queued tasks nothing can run (the task core decides, asking the managers whether one of
    /// them could start a worker for them): failed after `--unschedulable-timeout`, and told
    /// to the clients waiting for their jobs once it has held for [`UNRUNNABLE_AFTER_MS`].
    pub(super) fn unschedulable(&mut self, now: u64) {
        let asked = !self.waiters.is_empty() || !self.watchers.is_empty();
        // Just after a restart nothing is judged: the workers of the previous run, and the
        // tasks they ran, are still coming back (`Config::restart_grace_ms`).
        let restarting = now < self.unrunnable_from;
        if self.tasks.queued() == 0
            || restarting
            || !asked && self.config.unschedulable_timeout_ms.is_none()
        {
            // Not looked at: what was kept of stuck classes is forgotten, so a class found
            // stuck again later counts from then (classes are reused by later jobs).
            self.tasks.mark_unschedulable(now, &[]);
            return;
        }
        let stuck = {
            let context = self.context(now);
            let managers = &self.managers;
            self.tasks
                .unservable(now, |capabilities, environments, timeout_ms| {
                    managers.could_serve(&context, capabilities, environments, timeout_ms)
                })
        };
        let found = self.tasks.mark_unschedulable(now, &stuck);
        if found.is_empty() {
            return;
        }
        let context = self.context(now);
        let managers = &self.managers;
        // Only definite answers are told: someone has been heard from (an empty cluster is
        // one that is starting), and no manager would serve them once back online.
        let anyone = !context.workers.is_empty() || managers.known() > 0;
        let told: Vec<_> = found
            .iter()
            .filter(|u| anyone && now.saturating_sub(u.since) >= UNRUNNABLE_AFTER_MS)
            .filter(|u| {
                !managers.could_serve_once_online(
                    &context,
                    &u.capabilities,
                    &u.environments,
                    u.timeout_ms,
                )
            })
            .map(|u| {
                let managers = match managers.explain(
                    &context,
                    &u.capabilities,
                    &u.environments,
                    u.timeout_ms,
                ) {
                    lines if lines.is_empty() => "no worker manager".to_string(),
                    lines => lines.join("; "),
                };
                (
                    u.class,
                    format!("{}; {managers}", self.tasks.why_no_worker(u.class, now)),
                )
            })
            .collect();
        if !told.is_empty() {
            self.tell_unrunnable(&told);
        }
        let Some(timeout) = self.config.unschedulable_timeout_ms else {
            return;
        };
        let failed = self.tasks.fail_classes(now, timeout, &found);
        if failed > 0 {
            tracing::warn!(
                failed,
                "failed tasks nothing can run (--unschedulable-timeout)"
            );
        }
    }

    /// Tell each client waiting for (or watching) a job with queued tasks of these classes,
    /// once per class: `Unrunnable` naming its first such task and why.
    fn tell_unrunnable(&mut self, classes: &[(usize, String)]) {
        let ids: Vec<usize> = classes.iter().map(|(class, _)| *class).collect();
        let jobs: std::collections::BTreeSet<JobId> = self
            .waiters
            .keys()
            .chain(self.watchers.keys())
            .copied()
            .collect();
        for job in jobs {
            let clients: Vec<ClientId> = [self.waiters.get(&job), self.watchers.get(&job)]
                .into_iter()
                .flatten()
                .flatten()
                .copied()
                .collect();
            for (class, task) in self.tasks.queued_in(job, &ids) {
                let Some((_, reason)) = classes.iter().find(|(c, _)| *c == class) else {
                    continue;
                };
                for &client in &clients {
                    if self.told_unrunnable.insert((client, class)) {
                        let reason = reason.clone();
                        self.reply(client, Response::Unrunnable { task, reason }, false);
                    }
                }
            }
        }
    }
}
