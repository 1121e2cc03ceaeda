//! Carrying out the core's actions: frames to workers and managers, replies to clients,
//! journal records, and work for the policy thread.

use std::sync::Arc;

use super::Actor;
use crate::core::scaling::{PolicyFailure, Snapshot};
use crate::core::scheduler::{Action, ClientId, Input, PolicyInfo};
use crate::proto::Response;
use crate::scheduler::journal;
use crate::scheduler::policy::PolicyJob;

impl Actor {
    /// Carry out the core's actions, in order, up to a compaction: its records are returned
    /// (see [`Actor::perform_all`]).
    pub(super) fn perform(&mut self) -> Option<Vec<journal::Record>> {
        while let Some(action) = self.core.poll_action() {
            match action {
                Action::Journal {
                    record,
                    write_through,
                } => self.append(&record, write_through),
                // A replica's log is compacted by its snapshots, not by the core.
                Action::Compact(_) if self.replica.is_some() => {}
                Action::Compact(records) => return Some(records),
                Action::Decide(snapshot) => self.decide(snapshot),
                Action::SwapPolicy {
                    client,
                    policy,
                    snapshot,
                } => self.swap_policy(client, policy, snapshot),
                // It decides from the next snapshot on.
                Action::AdoptPolicy { client } => {
                    if let (Some(new), Some(runner)) =
                        (self.adopting.remove(&client), &mut self.policy)
                        && !runner.send(PolicyJob::Replace(new))
                    {
                        tracing::error!("the policy thread is gone: the new policy cannot run");
                    }
                }
                // What goes out: a replica holds all of it until the round is committed (or its
                // lead confirmed), see `Actor::run`.
                output if self.replica.is_some() => self.held.push(output),
                output => self.deliver(output, false),
            }
        }
        None
    }

    /// Send what the core sent out: frames, registrations and replies. `confirmed`: a replica's
    /// round is committed, so replies go now (with a journal they wait for its sync).
    pub(super) fn deliver(&mut self, action: Action, confirmed: bool) {
        match action {
            Action::Registered { connection, worker } => {
                if let Some((frames, reply)) = self.joining.remove(&connection) {
                    self.workers.insert(worker, frames);
                    let _ = reply.send(Ok(worker));
                }
            }
            Action::Refused { connection, reason } => {
                if let Some((_, reply)) = self.joining.remove(&connection) {
                    let _ = reply.send(Err(reason));
                }
            }
            // With a journal, held until the round's sync (see `Actor::frames`).
            Action::ToWorker { worker, message } if self.journaled && !confirmed => {
                self.frames.push((worker, message));
            }
            Action::ToWorker { worker, message } => self.send_frame(worker, message),
            // Dropping the sender ends the connection's writer, which closes it.
            Action::CloseWorker { worker } => drop(self.workers.remove(&worker)),
            Action::ManagerRegistered { connection, id } => {
                if let Some((link, reply)) = self.joining_managers.remove(&connection) {
                    self.managers.insert(id.clone(), link);
                    let _ = reply.send(Ok(id));
                }
            }
            Action::ManagerRefused { connection, reason } => {
                if let Some((_, reply)) = self.joining_managers.remove(&connection) {
                    let _ = reply.send(Err(reason));
                }
            }
            Action::ToManager { manager, message } => {
                if let Some(link) = self.managers.get(&manager) {
                    let _ = link.send(message);
                }
            }
            Action::CloseManager { manager } => drop(self.managers.remove(&manager)),
            Action::Reply {
                client,
                response,
                last,
                durable,
            } => match confirmed || !self.journaled {
                true => self.reply(client, response, last),
                false => self.deferred.push(super::Held {
                    client,
                    response,
                    last,
                    durable,
                }),
            },
            other => tracing::error!(action = ?other, "not an action to deliver; dropped"),
        }
    }

    pub(super) fn reply(&mut self, client: ClientId, response: Response, last: bool) {
        let Some(channel) = self.clients.get(&client) else {
            return;
        };
        let sent = channel.send(response).is_ok();
        if last || !sent {
            self.clients.remove(&client);
        }
        if !sent {
            let now = self.now();
            self.core.handle(now, Input::ClientGone { client });
        }
    }

    pub(super) fn decide(&mut self, snapshot: Arc<Snapshot>) {
        if let Some(file) = &mut self.record {
            use std::io::Write;
            if let Ok(line) = serde_json::to_string(&snapshot) {
                let _ = writeln!(file, "{line}");
            }
        }
        let sent = self
            .policy
            .as_mut()
            .is_some_and(|p| p.send(PolicyJob::Decide(snapshot)));
        if !sent {
            let now = self.now();
            let result = Err(PolicyFailure::ThreadGone);
            self.core.handle(now, Input::Decided { result });
        }
    }

    /// A new policy for the policy thread to create, try and switch to.
    pub(super) fn swap_policy(
        &mut self,
        client: Option<ClientId>,
        policy: PolicyInfo,
        snapshot: Option<Arc<Snapshot>>,
    ) {
        if let Some(trials) = &self.trials {
            trials.start(client, policy, snapshot);
        } else {
            let now = self.now();
            let result = Err(PolicyFailure::ThreadGone);
            self.core.handle(
                now,
                Input::PolicySwapped {
                    client,
                    policy,
                    result,
                },
            );
        }
    }
}
