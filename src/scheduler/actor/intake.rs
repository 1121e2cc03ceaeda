//! Taking in events: what comes with a channel is kept (a joining worker's frames, a client's
//! replies), and the core gets its input; `/metrics` and the dashboard are answered at once.

use super::Actor;
use crate::core::scaling::PolicyFailure;
use crate::core::scheduler::Input;
use crate::scheduler::event::{Event, Snapshot, View};
use crate::scheduler::metrics;

impl Actor {
    /// The replicas as this one sees them (none for a single scheduler).
    fn replicas(&self) -> Vec<crate::proto::ReplicaStatus> {
        self.replica
            .as_ref()
            .map(|r| r.status())
            .unwrap_or_default()
    }

    pub(super) fn event(&mut self, event: Event) {
        let now = self.now();
        let input = match event {
            Event::WorkerJoined {
                info,
                frames,
                reply,
            } => {
                let connection = self.next_id();
                self.joining.insert(connection, (frames, reply));
                Input::WorkerJoined { connection, info }
            }
            Event::Core(input) => input,
            Event::Request {
                request: crate::proto::Request::Replicas,
                reply,
                ..
            } => {
                let _ = reply.send(crate::proto::Response::Replicas(self.replicas()));
                return;
            }
            // A membership change: Raft commits it in its own log (not the core's records), on
            // a task of its own, so the actor goes on meanwhile.
            Event::Request {
                request:
                    request @ (crate::proto::Request::ReplicaAdd { .. }
                    | crate::proto::Request::ReplicaRemove { .. }),
                reply,
                ..
            } if self.replica.is_some() => {
                if let Some(replica) = self.replica.clone() {
                    tokio::spawn(async move {
                        let _ = reply.send(replica.change(request).await);
                    });
                }
                return;
            }
            Event::Request {
                request,
                components,
                reply,
            } => {
                let client = self.next_id();
                self.clients.insert(client, reply);
                Input::Request {
                    client,
                    request,
                    components,
                }
            }
            Event::ManagerJoined {
                state,
                peer,
                link,
                reply,
            } => {
                let connection = self.next_id();
                self.joining_managers.insert(connection, (link, reply));
                Input::ManagerJoined {
                    connection,
                    state,
                    peer,
                }
            }
            Event::Decided { result, elapsed } => {
                self.policy_latency.observe(elapsed.as_secs_f64());
                Input::Decided { result }
            }
            Event::PolicyTried {
                client,
                policy,
                result,
            } => {
                // The core learns its tiers and decides whether it takes over; it waits here.
                let result = match result {
                    Ok((new, tiers)) if self.policy.is_some() => {
                        // The journal's policy, superseded by a `weir policy set` while it was
                        // tried, will not be adopted: it is not kept.
                        if client.is_some() || self.core.restored_policy().is_some() {
                            self.adopting.insert(client, new);
                        }
                        Ok(tiers)
                    }
                    Ok(_) => Err(PolicyFailure::ThreadGone),
                    Err(error) => Err(error),
                };
                Input::PolicySwapped {
                    client,
                    policy,
                    result,
                }
            }
            Event::Metrics { reply } => {
                let text = metrics::render(&self.core, now, &self.policy_latency, &self.replicas());
                let _ = reply.send(text);
                return;
            }
            Event::Dashboard(View::Snapshot(reply)) => {
                let _ = reply.send(Snapshot {
                    status: self.core.status(now),
                    environments: self.core.environment_report(None),
                    jobs: self.core.tasks().jobs(20),
                    policy: self.core.policy_report(),
                    managers: self.core.managers_view(now, None).unwrap_or_default(),
                    replicas: self.replicas(),
                    decisions: self.core.last_decisions(),
                    demand: self.core.last_demand(),
                });
                return;
            }
            Event::Dashboard(View::Sample(reply)) => {
                let _ = reply.send(Snapshot {
                    status: self.core.status_without_workers(now),
                    environments: Vec::new(),
                    jobs: Vec::new(),
                    policy: self.core.policy_report(),
                    managers: Vec::new(),
                    replicas: Vec::new(),
                    decisions: self.core.last_decisions(),
                    demand: Vec::new(),
                });
                return;
            }
            Event::Dashboard(View::Explain(task, reply)) => {
                let _ = reply.send(self.core.explain(now, task));
                return;
            }
            Event::Dashboard(View::Job(job, reply)) => {
                let _ = reply.send(self.core.tasks().job_detail(job).ok());
                return;
            }
            Event::Dashboard(View::Stream(last, reply)) => {
                let _ = reply.send((now, self.core.task_stream(now.saturating_sub(last))));
                return;
            }
        };
        self.core.handle(now, input);
    }
}
