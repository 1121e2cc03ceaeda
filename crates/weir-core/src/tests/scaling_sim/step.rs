//! One random operation of the simulation.

use super::*;

impl Sim {
    pub(super) fn step(&mut self, op: &Op) -> Result<(), TestCaseError> {
        self.now += 100;
        match *op {
            Op::Tick => {
                // Rounds of one timeout each, until the policy is handed a snapshot and the
                // managers report (there may be no manager).
                for _ in 0..8 {
                    self.now = self.now.max(self.core.poll_timeout());
                    self.feed(Input::Timeout)?;
                    let decided = !self.reported.is_empty();
                    self.end_round(op)?;
                    if decided {
                        break;
                    }
                }
            }
            Op::Register(m, w) => {
                let pool = &self.pools[m];
                let unregistered: Vec<String> = pool
                    .alive()
                    .iter()
                    .filter(|n| !pool.registered.contains_key(*n))
                    .cloned()
                    .collect();
                let slots = pool.slots;
                let manager = pool.id.clone();
                if let Some(name) = unregistered.get(w % unregistered.len().max(1)) {
                    let connection = self.next_id();
                    let claims = self.holding.remove(name).unwrap_or_default();
                    let info = WorkerRegistration {
                        name: name.clone(),
                        slots,
                        capabilities: vec![],
                        worker_type: "t".into(),
                        manager: Some(manager),
                        local_environments: vec![],
                        running: claims.clone(),
                        // One per process: its claims are its own only if it is the same one.
                        instance: super::instance_of(name),
                        ends_in_ms: None,
                        finished: vec![],
                    };
                    self.joining.insert(connection, (m, name.clone(), claims));
                    self.feed(Input::WorkerJoined { connection, info })?;
                }
            }
            Op::Kill(m, w) => {
                let pool = &mut self.pools[m];
                if !pool.book.units.is_empty() {
                    let i = w % pool.book.units.len();
                    let name = pool.book.units.remove(i).id;
                    self.holding.remove(&name);
                    pool.exited.push(name.clone());
                    if let Some(id) = pool.registered.get(&name) {
                        pool.dead.push(*id);
                        let id = *id;
                        self.running.retain(|(w, _)| *w != id);
                    }
                }
            }
            Op::LateDisconnect(w) => {
                let dead: Vec<WorkerId> = self.pools.iter().flat_map(|p| p.dead.clone()).collect();
                if let Some(&worker) = dead.get(w % dead.len().max(1)) {
                    self.forget_worker(worker);
                    self.feed(Input::WorkerGone {
                        worker,
                        reason: "timed out".into(),
                        planned: false,
                    })?;
                }
            }
            Op::Heartbeat(m) => {
                if self.pools[m].connected {
                    let state = self.pools[m].state();
                    self.feed(Input::ManagerHeartbeat { state })?;
                }
            }
            Op::ManagerTick(m) => {
                let pool = &mut self.pools[m];
                let registered: Vec<String> = pool.registered.keys().cloned().collect();
                let desired = pool.desired;
                pool.converge(desired, &[], &registered);
                prop_assert!(pool.book.units.len() <= pool.max_workers());
            }
            Op::Submit(count, wasm, env) => {
                let (kind, components) = match wasm {
                    Some(c) => {
                        let (hash, bytes) = component(c);
                        (TaskKind::Wasm { component: hash }, vec![(hash, bytes)])
                    }
                    None => (
                        TaskKind::Command {
                            argv: vec!["true".into()],
                            env: vec![],
                        },
                        vec![],
                    ),
                };
                let spec = TaskSpec {
                    kind,
                    capabilities: vec![],
                    environments: env
                        .map(|e| ENVIRONMENTS[e].to_string())
                        .into_iter()
                        .collect(),
                    priority: 0,
                    timeout_ms: 0,
                    retries: 1_000,
                    input: vec![],
                };
                let groups = vec![NewGroup {
                    spec,
                    count,
                    inputs: vec![],
                }];
                let request = Request::Submit {
                    components: vec![],
                    groups,
                    request: None,
                };
                self.request(request, components)?;
            }
            Op::Finish(i, ok) => {
                let alive: Vec<(WorkerId, TaskId)> = self
                    .running
                    .iter()
                    .copied()
                    .filter(|(w, _)| !self.pools.iter().any(|p| p.dead.contains(w)))
                    .collect();
                if !alive.is_empty() {
                    let (worker, task) = alive[i % alive.len()];
                    self.running.retain(|r| *r != (worker, task));
                    let outcome = Outcome::Exited {
                        code: Some(if ok { 0 } else { 1 }),
                        stdout: vec![],
                        stderr: vec![],
                    };
                    self.feed(Input::Finished {
                        worker,
                        results: vec![(task, outcome)],
                    })?;
                }
            }
            Op::WorkerHeartbeats => {
                let live: Vec<WorkerId> = self
                    .pools
                    .iter()
                    .flat_map(|p| {
                        p.registered
                            .values()
                            .copied()
                            .filter(|w| !p.dead.contains(w))
                    })
                    .collect();
                for worker in live {
                    self.feed(Input::Heartbeat {
                        worker,
                        renew: Some(self.now),
                    })?;
                }
            }
            Op::Wait(job, watch) => {
                let request = match watch {
                    true => Request::Watch { job },
                    false => Request::Wait { job },
                };
                self.request(request, vec![])?;
            }
            Op::ClientGone(back) => {
                let client = self.next_id.saturating_sub(back as u64);
                self.feed(Input::ClientGone { client })?;
            }
            Op::Cancel(job) => self.request(Request::Cancel { job }, vec![])?,
            Op::Forget(job) => self.request(Request::Forget { job }, vec![])?,
            Op::EnvRegister(name, c, wait) => {
                let request = Request::EnvRegister {
                    name: ENVIRONMENTS[name].into(),
                    component: vec![],
                    config: vec![],
                    wait,
                };
                self.request(request, vec![component(c)])?;
            }
            Op::EnvRemove(name) => {
                let name = ENVIRONMENTS[name].into();
                self.request(Request::EnvRemove { name }, vec![])?;
            }
            Op::Verdict(w, name, matches) => {
                let live = self.core.tasks().worker_ids();
                if let Some(&worker) = live.get(w % live.len().max(1)) {
                    let verdict = match matches {
                        true => EnvVerdict::Match,
                        false => EnvVerdict::NoMatch,
                    };
                    self.feed(Input::Verdicts {
                        worker,
                        verdicts: vec![(ENVIRONMENTS[name].into(), verdict)],
                    })?;
                }
            }
            Op::ManagerGone(m) => {
                if self.pools[m].connected {
                    let id = self.pools[m].id.clone();
                    self.feed(Input::ManagerGone { id })?;
                }
            }
            Op::ManagerJoin(m) => self.manager_join(m)?,
            Op::ManagerGoodbye(m) => {
                if self.pools[m].connected {
                    let id = self.pools[m].id.clone();
                    self.feed(Input::ManagerGoodbye { id })?;
                }
            }
            Op::PolicyFails => self.fail_next = true,
            Op::PolicySet => {
                let (hash, bytes) = component(7);
                let request = Request::PolicySet {
                    name: "waterfall".into(),
                    component: vec![],
                    content: POLICY.into(),
                };
                self.request(request, vec![(hash, bytes)])?;
            }
            Op::Later(ms) => self.now += ms,
            Op::WaitWorkers(count, env) => {
                let environment = env.map(|e| ENVIRONMENTS[e].to_string());
                self.request(Request::WaitWorkers { count, environment }, vec![])?;
            }
            Op::Started(i) => {
                if !self.running.is_empty() {
                    let (worker, task) = self.running[i % self.running.len()];
                    self.feed(Input::Started {
                        worker,
                        tasks: vec![task],
                    })?;
                }
            }
            Op::StreamEnds(w, stops) => {
                let live = self.core.tasks().worker_ids();
                if let Some(&worker) = live.get(w % live.len().max(1)) {
                    let reason = "the stream ended".to_string();
                    self.feed(Input::WorkerEnding { worker, reason })?;
                    if stops {
                        for pool in &mut self.pools {
                            let name = pool.registered.iter().find(|(_, id)| **id == worker);
                            if let Some(name) = name.map(|(n, _)| n.clone()) {
                                pool.book.units.retain(|u| u.id != name);
                                pool.exited.push(name);
                            }
                        }
                        self.forget_worker(worker);
                        self.feed(Input::WorkerGone {
                            worker,
                            reason: "it stopped".into(),
                            planned: true,
                        })?;
                    }
                }
            }
        }
        self.end_round(op)
    }
}
