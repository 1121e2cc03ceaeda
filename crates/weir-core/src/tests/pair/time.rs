//! Virtual time in the simulation: every event (a frame arriving, a side noticing a broken
//! connection, a core's timer, a run's end, the guard's kill, a reconnect or restart) fires in
//! time order.

use super::Sim;
use crate::scheduler::Input as SInput;
use crate::worker::{self, Input as WInput};
use weir_proto::{Outcome, TaskId};

impl Sim {
    // ----- time -----

    /// Run every event due within `dt` ms, in time order.
    pub(crate) fn advance(&mut self, dt: u64) {
        let target = self.now + dt;
        loop {
            let next = self.next_event().min(target);
            self.now = self.now.max(next);
            let did = self.fire_due();
            if !did && self.now >= target {
                break;
            }
        }
    }

    fn next_event(&self) -> u64 {
        let mut at = self.sched.poll_timeout().min(self.manager_next_event());
        for conn in &self.conns {
            let sw = &self.workers[conn.worker];
            let after = sw.partitioned_until;
            if let Some((t, _)) = conn.to_sched.front() {
                at = at.min((*t).max(after));
            }
            if let Some((t, _)) = conn.to_worker.front() {
                at = at.min((*t).max(after));
            }
            at = at.min(conn.worker_notice.unwrap_or(u64::MAX));
            at = at.min(conn.sched_notice.unwrap_or(u64::MAX));
        }
        for sw in &self.workers {
            let Some(core) = &sw.core else {
                at = at.min(sw.restart_at);
                continue;
            };
            at = at.min(core.poll_timeout().unwrap_or(u64::MAX));
            for end in sw.runs.values() {
                at = at.min(*end);
            }
            if !sw.runs.is_empty() {
                at = at.min(sw.guard_until);
            }
            for (_, _, end) in &sw.cancels {
                at = at.min(*end);
            }
            if sw.session.is_none() {
                at = at.min(sw.next_connect);
            }
        }
        at
    }

    /// Fire one kind of due event; whether anything was due.
    fn fire_due(&mut self) -> bool {
        let now = self.now;
        if self.sched.poll_timeout() <= now {
            self.sched_input(SInput::Timeout);
            self.sched_round();
            return true;
        }
        for c in 0..self.conns.len() {
            let after = self.workers[self.conns[c].worker].partitioned_until;
            if now < after {
                continue;
            }
            if self.conns[c]
                .to_sched
                .front()
                .is_some_and(|(t, _)| *t <= now)
            {
                let Some((_, frame)) = self.conns[c].to_sched.pop_front() else {
                    continue;
                };
                self.deliver_to_sched(c, frame);
                return true;
            }
            if self.conns[c]
                .to_worker
                .front()
                .is_some_and(|(t, _)| *t <= now)
            {
                let Some((_, frame)) = self.conns[c].to_worker.pop_front() else {
                    continue;
                };
                self.deliver_to_worker(c, frame);
                return true;
            }
        }
        for c in 0..self.conns.len() {
            if self.conns[c].worker_notice.is_some_and(|t| t <= now) {
                self.conns[c].worker_notice = None;
                let w = self.conns[c].worker;
                if self.workers[w].session == Some(c) {
                    self.note(format!("w{w} sees its connection c{c} end"));
                    self.end_session(w, false);
                }
                return true;
            }
            if self.conns[c].sched_notice.is_some_and(|t| t <= now) {
                self.conns[c].sched_notice = None;
                if let Some(worker) = self.conns[c].id {
                    self.note(format!("scheduler sees c{c} (worker {worker}) end"));
                    if self.sched_conn.get(&worker) == Some(&c) {
                        self.sched_conn.remove(&worker);
                    }
                    let planned = self.conns[c].planned;
                    self.sched_input(SInput::WorkerGone {
                        worker,
                        reason: "connection lost".into(),
                        planned,
                    });
                    self.sched_round();
                }
                return true;
            }
        }
        for w in 0..self.workers.len() {
            if self.fire_worker(w) {
                return true;
            }
        }
        self.fire_managers()
    }

    fn fire_worker(&mut self, w: usize) -> bool {
        let now = self.now;
        let sw = &mut self.workers[w];
        let Some(core) = &sw.core else {
            if sw.restart_at <= now {
                self.note(format!("w{w} restarts"));
                self.start_worker(w);
                return true;
            }
            return false;
        };
        if !sw.runs.is_empty() && sw.guard_until <= now {
            // The lease ran out: the guard kills every task group.
            let killed: Vec<(TaskId, u64)> = std::mem::take(&mut sw.runs).into_keys().collect();
            let at = sw.guard_until;
            self.killed += killed.len() as u64;
            self.note(format!("w{w}'s guard kills {} runs", killed.len()));
            for (task, run) in killed {
                let outcome = Outcome::Exited {
                    code: None,
                    stdout: vec![],
                    stderr: vec![],
                };
                self.worker_input(
                    w,
                    WInput::TaskEnded {
                        task,
                        run,
                        outcome,
                        at,
                    },
                );
            }
            return true;
        }
        if let Some(i) = sw.cancels.iter().position(|(_, _, end)| *end <= now) {
            let (task, run, at) = sw.cancels.swap_remove(i);
            if sw.runs.remove(&(task, run)).is_some() {
                let outcome = worker::canceled();
                self.worker_input(
                    w,
                    WInput::TaskEnded {
                        task,
                        run,
                        outcome,
                        at,
                    },
                );
            }
            return true;
        }
        if let Some((&(task, run), &at)) = sw.runs.iter().find(|(_, end)| **end <= now) {
            sw.runs.remove(&(task, run));
            let outcome = Outcome::Exited {
                code: Some(0),
                stdout: vec![],
                stderr: vec![],
            };
            self.worker_input(
                w,
                WInput::TaskEnded {
                    task,
                    run,
                    outcome,
                    at,
                },
            );
            return true;
        }
        if core.poll_timeout().is_some_and(|t| t <= now) {
            self.worker_input(w, WInput::Timeout);
            return true;
        }
        if sw.session.is_none() && sw.next_connect <= now {
            self.connect(w);
            return true;
        }
        false
    }
}
