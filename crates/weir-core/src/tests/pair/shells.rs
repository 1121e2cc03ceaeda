//! The network and the shells' duties in the simulation: connections (ordered while they live,
//! broken with what is in flight), frames to the scheduler's inputs and its actions to frames,
//! and a worker core's actions to runs, kills and the guard's deadline.

use std::collections::VecDeque;

use super::{Conn, MAX_DELAY_MS, Sim};
use crate::scheduler::{Action as SAction, Input as SInput};
use crate::worker::{Action as WAction, End, Input as WInput};
use weir_proto::{FromWorker, ToWorker};

impl Sim {
    // ----- the network -----

    pub(super) fn connect(&mut self, w: usize) {
        if self.now < self.workers[w].partitioned_until {
            // The handshake does not get through: tried again after a back-off.
            self.workers[w].next_connect = self.now + 200 + self.rng.below(800);
            return;
        }
        let c = self.conns.len();
        self.conns.push(Conn {
            worker: w,
            id: None,
            broken: false,
            to_sched: VecDeque::new(),
            to_worker: VecDeque::new(),
            worker_notice: None,
            sched_notice: None,
            planned: false,
        });
        self.workers[w].session = Some(c);
        self.note(format!("w{w} connects on c{c}"));
        self.worker_input(w, WInput::Connected);
    }

    pub(super) fn break_conn(
        &mut self,
        c: usize,
        worker_notice: Option<u64>,
        sched_notice: Option<u64>,
    ) {
        let conn = &mut self.conns[c];
        if conn.broken {
            return;
        }
        self.note(format!("c{c} breaks"));
        let conn = &mut self.conns[c];
        conn.broken = true;
        conn.to_sched.clear();
        conn.to_worker.clear();
        conn.worker_notice = worker_notice;
        conn.sched_notice = sched_notice;
    }

    /// When a frame sent now arrives: mostly within [`MAX_DELAY_MS`]; with faults, now and then
    /// seconds later (a congested or lossy path QUIC retransmits over), which holds back the
    /// frames behind it on that stream too.
    pub(super) fn delay(&mut self) -> u64 {
        if self.faults.enabled && self.rng.chance(1) {
            return self.now + 500 + self.rng.below(2_500);
        }
        self.now + 1 + self.rng.below(MAX_DELAY_MS)
    }

    pub(super) fn send_to_sched(&mut self, c: usize, frame: FromWorker) {
        self.fold(&(c, &frame));
        if self.conns[c].broken {
            return;
        }
        let duplicate = self.faults.enabled
            && matches!(
                frame,
                FromWorker::Heartbeat
                    | FromWorker::Renew { .. }
                    | FromWorker::Finished(_)
                    | FromWorker::Started(_)
            )
            && self.rng.chance(3);
        let at = self.delay();
        let queue = &mut self.conns[c].to_sched;
        // One stream: in order.
        let at = queue.back().map_or(at, |(last, _)| at.max(*last));
        if duplicate {
            queue.push_back((at, frame.clone()));
        }
        queue.push_back((at, frame));
    }

    pub(super) fn send_to_worker(&mut self, c: usize, frame: ToWorker) {
        self.fold(&(c, &frame));
        if self.conns[c].broken {
            return;
        }
        let duplicate = self.faults.enabled
            && matches!(frame, ToWorker::Lease { .. } | ToWorker::Received { .. })
            && self.rng.chance(3);
        let at = self.delay();
        let queue = &mut self.conns[c].to_worker;
        let at = queue.back().map_or(at, |(last, _)| at.max(*last));
        if duplicate {
            queue.push_back((at, frame.clone()));
        }
        queue.push_back((at, frame));
    }

    pub(super) fn deliver_to_sched(&mut self, c: usize, frame: FromWorker) {
        let input = match (frame, self.conns[c].id) {
            (FromWorker::Register(info), None) => SInput::WorkerJoined {
                connection: c as u64,
                info: *info,
            },
            (FromWorker::Register(_), Some(_)) | (_, None) => return,
            (FromWorker::Heartbeat, Some(worker)) => SInput::Heartbeat {
                worker,
                renew: None,
            },
            (FromWorker::Renew { seq }, Some(worker)) => SInput::Heartbeat {
                worker,
                renew: Some(seq),
            },
            (FromWorker::Finished(results), Some(worker)) => SInput::Finished { worker, results },
            (FromWorker::Started(tasks), Some(worker)) => SInput::Started { worker, tasks },
            (FromWorker::Revoked(tasks), Some(worker)) => SInput::Revoked { worker, tasks },
            (FromWorker::Verdicts(_) | FromWorker::Loads(_), Some(_)) => return,
        };
        self.sched_input(input);
        self.sched_round();
    }

    pub(super) fn deliver_to_worker(&mut self, c: usize, frame: ToWorker) {
        let w = self.conns[c].worker;
        if self.workers[w].session != Some(c) {
            return;
        }
        self.worker_input(w, WInput::Frame(frame));
    }

    // ----- the scheduler's shell -----

    pub(super) fn sched_input(&mut self, input: SInput) {
        self.sched.handle(self.now, input);
        self.sched_actions();
    }

    /// The end of a round: schedule, and (no journal) acknowledge at once.
    pub(super) fn sched_round(&mut self) {
        self.sched_input(SInput::EndOfBatch);
        self.sched_input(SInput::Synced { journal_bytes: 0 });
    }

    pub(super) fn sched_actions(&mut self) {
        while let Some(action) = self.sched.poll_action() {
            match action {
                SAction::Registered { connection, worker } => {
                    let c = connection as usize;
                    self.conns[c].id = Some(worker);
                    self.sched_conn.insert(worker, c);
                }
                SAction::Refused { connection, .. } => {
                    let c = connection as usize;
                    let notice = self.delay();
                    self.break_conn(c, Some(notice), None);
                }
                SAction::ToWorker { worker, message } => {
                    if let Some(&c) = self.sched_conn.get(&worker) {
                        self.send_to_worker(c, message);
                    }
                }
                SAction::CloseWorker { worker } => {
                    if let Some(c) = self.sched_conn.remove(&worker) {
                        let notice = self.delay();
                        self.break_conn(c, Some(notice), None);
                    }
                }
                SAction::Compact(_) => self.sched.handle(self.now, SInput::Compacted),
                other => self.sched_manager_action(other),
            }
        }
    }

    // ----- the workers' shells -----

    pub(super) fn worker_input(&mut self, w: usize, input: WInput) {
        let now = self.now;
        let Some(core) = self.workers[w].core.as_mut() else {
            return;
        };
        let lapses = core.lapses();
        core.handle(now, input);
        // A lease that ran out and was renewed after (an idle worker's, between beats slower
        // than its lease, or a renewal answered late).
        self.lapses += core.lapses().saturating_sub(lapses);
        while let Some(action) = self.workers[w].core.as_mut().and_then(|c| c.poll_action()) {
            self.worker_action(w, action);
        }
    }

    pub(super) fn worker_action(&mut self, w: usize, action: WAction) {
        match action {
            WAction::Send(frame) => {
                if let Some(c) = self.workers[w].session {
                    self.send_to_sched(c, frame);
                }
            }
            WAction::Start { run, assignment } => {
                // Only under a valid lease, and only what the core holds as running.
                let core = self.workers[w].core.as_ref();
                assert!(
                    core.is_some_and(
                        |c| c.lease_valid(self.now) && c.holds(assignment.task) == Some(true)
                    ),
                    "w{w} started task {} at {} without a valid lease\n{}",
                    assignment.task,
                    self.now,
                    self.trace_tail()
                );
                self.runs_started += 1;
                let length = match self.rng.chance(80) {
                    _ if self.long_tasks => 10_000 + self.rng.below(10_000),
                    true => 5 + self.rng.below(300),
                    false => 300 + self.rng.below(4_000),
                };
                let end = self.now + length;
                let task = assignment.task;
                self.note(format!("w{w} starts task {task} run {run}"));
                self.workers[w].runs.insert((task, run), end);
            }
            WAction::Cancel { task, run } => {
                let end = self.now + 1 + self.rng.below(20);
                self.workers[w].cancels.push((task, run, end));
            }
            WAction::GiveUp { task, run } => {
                let sw = &mut self.workers[w];
                if sw.runs.remove(&(task, run)).is_some() {
                    self.killed += 1;
                }
            }
            WAction::LeaseUntil(until) => self.workers[w].guard_until = until,
            WAction::End(end) => {
                self.note(format!("w{w} ends its session: {end:?}"));
                let stopping = matches!(end, End::Dismissed | End::EndOfAllocation);
                self.lease_ends += u64::from(end == End::LeaseExpired);
                self.fleet.stats.dismissed += u64::from(end == End::Dismissed);
                self.end_session(w, stopping);
            }
        }
    }

    /// The worker's side of a session ends (it closed it, or saw it break).
    pub(super) fn end_session(&mut self, w: usize, stopping: bool) {
        let Some(c) = self.workers[w].session else {
            return;
        };
        // What it sends while ending still goes out on the closing connection.
        self.worker_input(w, WInput::SessionEnded { stopping });
        self.workers[w].session = None;
        let notice = self.delay();
        self.break_conn(c, None, Some(notice));
        self.conns[c].planned = stopping;
        self.workers[w].next_connect = self.now + 200 + self.rng.below(300);
        if stopping {
            self.workers[w].runs.clear();
            self.workers[w].core = None;
            self.workers[w].restart_at = self.now + 1_000;
            self.process_exited(w);
        }
    }
}
