//! The invariants of `mod.rs`, checked after every step: no task runs on two workers at
//! once (as the worker cores see it, and physically), every core's own sanity check (each
//! worker core's and the whole scheduler's, [`Scheduler::sanity_check`]); and once faults stop,
//! every manager runs what the scheduler asked.
//!
//! [`Scheduler::sanity_check`]: crate::scheduler::Scheduler::sanity_check

use std::collections::BTreeMap;

use weir_proto::TaskId;

use super::Sim;

impl Sim {
    /// The invariants that hold after every step.
    pub(crate) fn check(&self) {
        let mut physical: BTreeMap<TaskId, usize> = BTreeMap::new();
        let mut believed: BTreeMap<TaskId, usize> = BTreeMap::new();
        for (w, sw) in self.workers.iter().enumerate() {
            for (task, _) in sw.runs.keys() {
                if let Some(other) = physical.insert(*task, w).filter(|other| *other != w) {
                    panic!(
                        "task {task} runs on w{other} and w{w} at {}\n{}",
                        self.now,
                        self.trace_tail()
                    );
                }
            }
            let Some(core) = &sw.core else { continue };
            core.sanity_check(self.now);
            if !core.lease_valid(self.now) {
                continue;
            }
            for task in core.running() {
                if let Some(other) = believed.insert(task, w) {
                    panic!(
                        "w{other} and w{w} both hold task {task} with a valid lease at {}\n{}",
                        self.now,
                        self.trace_tail()
                    );
                }
            }
        }
        if let Err(error) = self.sched.sanity_check() {
            panic!("scheduler: {error}\n{}", self.trace_tail());
        }
    }

    /// Whether every manager that runs runs what the scheduler last asked of it (within its
    /// cap): as many units, each with its worker registered with the scheduler.
    pub(crate) fn managers_converged(&self) -> Result<(), String> {
        for (m, sm) in self.fleet.managers.iter().enumerate() {
            if sm.twin {
                continue;
            }
            let asked = self.fleet.desired.get(&sm.id).copied().unwrap_or(0);
            let expected = asked.min(sm.max_workers) as usize;
            let registered = self.sched.tasks().views_of_manager(self.now, &sm.id).len();
            if sm.engine.len() != expected || registered != expected {
                return Err(format!(
                    "m{m} was asked for {asked} workers (cap {}): it runs {} units, the scheduler has {registered} of its workers",
                    sm.max_workers,
                    sm.engine.len()
                ));
            }
        }
        Ok(())
    }

    /// Time passes (no faults) until the managers converge, at most `limit_ms`; the desired
    /// count they converged to, summed.
    pub(crate) fn settle_managers(&mut self, limit_ms: u64) -> u32 {
        let end = self.now + limit_ms;
        loop {
            self.advance(250);
            self.check();
            self.steps_after_heal += 1;
            if self.managers_converged().is_ok() {
                return (self.fleet.managers.iter())
                    .filter(|s| !s.twin)
                    .map(|s| self.fleet.desired.get(&s.id).copied().unwrap_or(0))
                    .sum();
            }
            if let (true, Err(error)) = (self.now >= end, self.managers_converged()) {
                panic!(
                    "managers did not converge within {limit_ms} ms: {error}\n{}",
                    self.trace_tail()
                );
            }
        }
    }
}
