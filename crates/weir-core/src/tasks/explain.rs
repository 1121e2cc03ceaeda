//! Why a task waits, in words (`weir explain`).

use super::*;

impl Tasks {
    /// Why a task is in its state (`now`): for a queued task, what each live worker lacks.
    pub fn explain(&self, now: u64, id: TaskId) -> Option<Vec<String>> {
        let task = self.task(id)?;
        let group = &self.groups[&task.group];
        let class = &self.classes[group.class];
        let mut lines = vec![format!(
            "task {id} (job {}) is {:?}, {} attempt(s)",
            group.job, task.state, task.attempts
        )];
        if task.cuts > 0 {
            lines.push(format!(
                "cut short {} time(s) by the end of its worker's allocation (walltime; no \
                 attempt spent); requeued at most {} times (--max-walltime-requeues)",
                task.cuts, self.config.max_walltime_requeues
            ));
        }
        let needs: Vec<String> = class
            .capabilities
            .iter()
            .map(|(n, v)| format!("{n}={v}"))
            .collect();
        lines.push(format!(
            "needs: {} slot, capabilities [{}], environments [{}]",
            1,
            needs.join(", "),
            class.environments.join(", ")
        ));
        match task.state {
            TaskState::Running => {
                let worker = task
                    .worker
                    .and_then(|w| self.workers.get(&w).map(|x| (w, x.info.name.clone())));
                if let Some((w, name)) = worker {
                    lines.push(format!("running on worker {w} ({name})"));
                }
            }
            TaskState::Queued => {
                for name in &class.environments {
                    if !self.environments.contains_key(name) {
                        lines.push(format!("environment `{name}` is not registered (it was removed): no worker can qualify"));
                    }
                }
                if self.workers.is_empty() {
                    lines.push("no live worker: it runs when one that qualifies joins".into());
                }
                let mut could_run = false;
                let (slow, _) = self.fronts();
                for (wid, worker) in &self.workers {
                    let mut missing = Vec::new();
                    for (name, need) in &class.capabilities {
                        let total = amount(&worker.info.capabilities, name);
                        if total < *need {
                            missing.push(format!("has {name}={total}, needs {need}"));
                        } else if amount(&worker.free, name) < *need {
                            missing.push(format!(
                                "{name} in use ({} of {total} free, needs {need})",
                                amount(&worker.free, name)
                            ));
                        }
                    }
                    for name in &class.environments {
                        match worker.verdicts.get(name) {
                            Some(EnvVerdict::Match) => {}
                            Some(EnvVerdict::NoMatch) => {
                                missing.push(format!("environment `{name}`: no-match"))
                            }
                            Some(EnvVerdict::Error(reason)) => {
                                missing.push(format!("environment `{name}`: error({reason})"))
                            }
                            None if worker.evaluates(name, &self.environments) => {
                                missing.push(format!("environment `{name}`: not evaluated yet"))
                            }
                            None => missing.push(format!(
                                "environment `{name}`: not evaluated here (other workers' own condition)"
                            )),
                        }
                    }
                    if worker.draining.is_some() {
                        missing.push("draining: its manager is stopping it".into());
                    }
                    if worker.cordoned {
                        missing.push("drained by the scaling policy: takes no new task".into());
                    }
                    // A quick task may also be held there ahead of a free slot.
                    // (Not while it runs, or could run, a task not known to be quick.)
                    let keeps_slot = worker.slow > 0
                        || slow
                            .iter()
                            .any(|c| could_ever_run(worker, &self.classes[*c], &self.environments));
                    let room = match self.quick.contains(&group.id) && !keeps_slot {
                        true => self.limit(worker),
                        false => worker.info.slots,
                    };
                    if worker.held() >= room {
                        let ahead = worker.held().saturating_sub(worker.info.slots);
                        missing.push(match ahead {
                            0 => format!("all {} slots busy", worker.info.slots),
                            n => format!(
                                "all {} slots busy, and {n} more tasks wait there for one",
                                worker.info.slots
                            ),
                        });
                    }
                    if !worker.outlives(class, now) {
                        missing.push(format!(
                            "its allocation ends before the task's timeout ({} s) would",
                            class.timeout_ms as f64 / 1000.0
                        ));
                    }
                    if missing.is_empty() {
                        could_run = true;
                        lines.push(format!("worker {wid} ({}): qualifies; it is placed at the next scheduling round", worker.info.name));
                    } else {
                        lines.push(format!(
                            "worker {wid} ({}): {}",
                            worker.info.name,
                            missing.join("; ")
                        ));
                    }
                }
                if !could_run && !self.workers.is_empty() {
                    let (ever, short): (Vec<&BookedWorker>, Vec<&BookedWorker>) = self
                        .workers
                        .values()
                        .filter(|w| could_ever_run(w, class, &self.environments))
                        .partition(|w| w.outlives(class, now));
                    let decided = ever.iter().any(|w| {
                        class
                            .environments
                            .iter()
                            .all(|e| w.verdicts.contains_key(e))
                    });
                    lines.push(if decided {
                        "waiting for a qualifying worker to free a slot".into()
                    } else if !ever.is_empty() {
                        "waiting for workers to evaluate its environments".into()
                    } else if !short.is_empty() {
                        format!(
                            "no live worker can ever run it: {} would qualify, but their \
                             allocations end before its timeout ({} s) would; it waits for a \
                             worker with time for it to join",
                            short.len(),
                            class.timeout_ms as f64 / 1000.0
                        )
                    } else {
                        "no live worker can ever run it: it waits for one that qualifies to join"
                            .into()
                    });
                }
            }
            TaskState::Succeeded | TaskState::Failed | TaskState::Canceled => {
                lines.extend(ended(task));
            }
        }
        Some(lines)
    }
}

/// Where a final task ran, how often, and how it ended.
fn ended(task: &Task) -> Vec<String> {
    let runs = match (task.attempts, task.state) {
        // Canceled while held ahead: its start was not reported (it may have just begun).
        (0, TaskState::Canceled) => "no start of it was reported before it was canceled".into(),
        (0, _) => "it never started".to_string(),
        (1, _) => "1 run".to_string(),
        (n, _) => format!("{n} runs (retried after lost workers)"),
    };
    let Some(ended) = &task.outcome else {
        return vec![runs, "its result was forgotten".into()];
    };
    let place = match (&ended.ran_on, task.attempts) {
        (_, 0) => runs,
        (Some(place), _) => format!("ran last on {place}; {runs}"),
        (None, _) => format!(
            "{runs}; where is not known (it ended before a scheduler restart, or was canceled \
             while held ahead)"
        ),
    };
    let outcome = match &ended.outcome {
        Outcome::Exited {
            code: Some(code), ..
        } => format!("exited with code {code}"),
        Outcome::Exited { code: None, .. } => "killed by a signal".to_string(),
        Outcome::Returned { output } => format!("returned {} bytes", output.len()),
        Outcome::Function { ok: true, .. } => "the function returned".to_string(),
        Outcome::Function { ok: false, .. } => "the function raised an exception".to_string(),
        Outcome::Error { message } => message.clone(),
    };
    vec![place, format!("outcome: {outcome}")]
}
