//! The simulation's shell: inputs fed, actions answered as the shell and the peers answer them,
//! the end of every round and its checks.

use super::*;

impl Sim {
    pub(super) fn new(broad: bool, caps: (u32, u32), slots: (u32, u32)) -> Sim {
        Sim {
            core: Scheduler::new(config(broad)),
            policy: Policy::parse(Flavor::WorkerType, POLICY).expect("content"),
            pools: vec![
                Pool::new("a", caps.0, slots.0),
                Pool::new("b", caps.1, slots.1),
            ],
            now: 0,
            joining: HashMap::new(),
            running: Vec::new(),
            holding: HashMap::new(),
            inputs: VecDeque::new(),
            next_id: 0,
            fail_next: false,
            reported: Vec::new(),
            journal_bytes: 0,
        }
    }

    pub(super) fn next_id(&mut self) -> u64 {
        self.next_id += 1;
        self.next_id
    }

    /// Feed `input`, then what its actions call for, until nothing is left.
    pub(super) fn feed(&mut self, input: Input) -> Result<(), TestCaseError> {
        self.inputs.push_back(input);
        while let Some(input) = self.inputs.pop_front() {
            if let Input::ManagerHeartbeat { state } | Input::ManagerJoined { state, .. } = &input
                && let Some(index) = self.pools.iter().position(|p| p.id == state.id)
            {
                self.reported.push(index);
            }
            self.core.handle(self.now, input);
            while let Some(action) = self.core.poll_action() {
                self.perform(action)?;
            }
        }
        Ok(())
    }

    /// The shell's and the peers' answer to an action.
    pub(super) fn perform(&mut self, action: Action) -> Result<(), TestCaseError> {
        match action {
            Action::Registered { connection, worker } => {
                if let Some((pool, name, claims)) = self.joining.remove(&connection) {
                    self.pools[pool].registered.insert(name, worker);
                    // Those it may not keep, the core tells it to stop (`Cancel`).
                    self.running.extend(claims.into_iter().map(|t| (worker, t)));
                }
            }
            Action::Refused { connection, .. } => drop(self.joining.remove(&connection)),
            Action::ToWorker { worker, message } => self.worker_answers(worker, message),
            Action::CloseWorker { worker } => {
                // The connection's session ends and says so.
                self.inputs.push_back(Input::WorkerGone {
                    worker,
                    reason: "dropped by the scheduler".into(),
                    planned: false,
                });
                self.forget_worker(worker);
            }
            Action::ManagerRegistered { id, .. } => self.pool(&id).connected = true,
            Action::ManagerRefused { .. } => {}
            Action::CloseManager { manager } => {
                // The session ends, and the shell says so (`connection.rs`): a manager closed
                // for its silence is let in again when it reconnects. Said after a goodbye or a
                // break too, where the core has nothing left to close.
                self.pool(&manager).connected = false;
                self.inputs.push_back(Input::ManagerGone { id: manager });
            }
            Action::ToManager { manager, message } => {
                let ToManager::Desired {
                    desired,
                    stop,
                    registered,
                    ..
                } = message
                else {
                    return Ok(()); // the pace: this model reports after every decision
                };
                let pool = self.pool(&manager);
                prop_assert!(pool.connected, "a decision for {manager}, not connected");
                let stopped = pool.converge(desired, &stop, &registered);
                prop_assert!(
                    pool.book.units.len() <= pool.max_workers(),
                    "{} runs {} processes",
                    pool.id,
                    pool.book.units.len()
                );
                let state = pool.state();
                self.inputs.push_back(Input::ManagerHeartbeat { state });
                for worker in stopped {
                    self.inputs.push_back(Input::WorkerGone {
                        worker,
                        reason: "it stopped".into(),
                        planned: true,
                    });
                    self.forget_worker(worker);
                }
            }
            Action::Reply { .. } | Action::Journal { .. } => {}
            Action::Compact(_) => self.inputs.push_back(Input::Compacted),
            Action::SwapPolicy { client, policy, .. } => {
                let result = Ok(self.policy.tiers());
                self.inputs.push_back(Input::PolicySwapped {
                    client,
                    policy,
                    result,
                });
            }
            // The same waterfall: nothing changes here.
            Action::AdoptPolicy { .. } => {}
            Action::Decide(snapshot) => {
                let decisions = self.policy.decide(&snapshot);
                prop_assert_eq!(validate_decisions(&snapshot, &decisions), Ok(()));
                for decision in &decisions {
                    let pool = self.pool(&decision.manager_id);
                    prop_assert!(
                        decision.desired_workers as usize <= pool.max_workers(),
                        "{decision:?}"
                    );
                }
                let result = match std::mem::take(&mut self.fail_next) {
                    true => Err(PolicyFailure::Trapped {
                        policy: "waterfall".into(),
                        call: "decide",
                        detail: "unreachable".into(),
                    }),
                    false => Ok(decisions),
                };
                self.inputs.push_back(Input::Decided { result });
            }
        }
        Ok(())
    }

    pub(super) fn worker_answers(&mut self, worker: WorkerId, message: ToWorker) {
        match message {
            ToWorker::Run(assignments) => self
                .running
                .extend(assignments.into_iter().map(|a| (worker, a.task))),
            // A worker gives back what it has not started: here, all it can.
            ToWorker::Revoke { tasks, count } => {
                let back: Vec<TaskId> = tasks.into_iter().take(count as usize).collect();
                self.running
                    .retain(|(w, t)| *w != worker || !back.contains(t));
                self.inputs.push_back(Input::Revoked {
                    worker,
                    tasks: back,
                });
            }
            // It stops them and reports them.
            ToWorker::Cancel(tasks) => {
                self.running
                    .retain(|(w, t)| *w != worker || !tasks.contains(t));
                let results = tasks
                    .into_iter()
                    .map(|t| {
                        (
                            t,
                            Outcome::Error {
                                message: "canceled".into(),
                            },
                        )
                    })
                    .collect();
                self.inputs.push_back(Input::Finished { worker, results });
            }
            _ => {}
        }
    }

    pub(super) fn pool(&mut self, id: &str) -> &mut Pool {
        let index = self.pools.iter().position(|p| p.id == id).unwrap_or(0);
        &mut self.pools[index]
    }

    /// The worker's connection is gone: its process, if alive, may register again, claiming
    /// the tasks it still runs.
    pub(super) fn forget_worker(&mut self, worker: WorkerId) {
        for pool in &self.pools {
            let name = pool.registered.iter().find(|(_, id)| **id == worker);
            if let Some((name, _)) = name
                && pool.alive().contains(name)
            {
                let held = self.running.iter().filter(|(w, _)| *w == worker);
                let held: Vec<TaskId> = held.map(|(_, t)| *t).collect();
                self.holding.entry(name.clone()).or_default().extend(held);
            }
        }
        for pool in &mut self.pools {
            pool.registered.retain(|_, id| *id != worker);
            pool.dead.retain(|id| *id != worker);
        }
        self.running.retain(|(w, _)| *w != worker);
    }

    /// A request from a new client.
    pub(super) fn request(
        &mut self,
        request: Request,
        components: Vec<(weir_proto::ComponentHash, Arc<[u8]>)>,
    ) -> Result<(), TestCaseError> {
        let client = self.next_id();
        self.feed(Input::Request {
            client,
            request,
            components,
        })
    }

    pub(super) fn manager_join(&mut self, m: usize) -> Result<(), TestCaseError> {
        if self.pools[m].connected {
            return Ok(());
        }
        let connection = self.next_id();
        let state = self.pools[m].state();
        self.feed(Input::ManagerJoined {
            connection,
            state,
            peer: format!("10.0.0.{m}:1"),
        })
    }

    /// The end of a round, as the shell ends every one: at most one timeout (when due), then
    /// `EndOfBatch` and the journal's sync. Then the checks.
    pub(super) fn end_round(&mut self, op: &Op) -> Result<(), TestCaseError> {
        if self.now >= self.core.poll_timeout() && !matches!(op, Op::Tick) {
            self.feed(Input::Timeout)?;
        }
        self.feed(Input::EndOfBatch)?;
        self.journal_bytes += 100;
        let journal_bytes = self.journal_bytes;
        self.feed(Input::Synced { journal_bytes })?;
        if let Err(error) = self.core.sanity_check() {
            return Err(TestCaseError::fail(format!("after {op:?}: {error}")));
        }
        // Once a manager has reported, the scheduler counts no more workers for it than its cap.
        let snapshot = self.core.scaling_snapshot(self.now);
        for &index in &self.reported {
            let pool = &self.pools[index];
            if let Some(manager) = snapshot.managers.iter().find(|m| m.id == pool.id) {
                prop_assert!(
                    manager.current_workers() <= pool.max_workers() as u64,
                    "{} counts {} workers (cap {}) after it reported: {manager:?}",
                    pool.id,
                    manager.current_workers(),
                    pool.max_workers()
                );
            }
        }
        self.reported.clear();
        Ok(())
    }
}
