//! The actor: the one task that owns the core ([`Scheduler`]). It turns connection events and
//! timers into [`Input`]s and the core's actions into frames, journal writes and replies.
//! It holds no rule of its own: only channels, the journal file and the policy thread.
//! Taking in events is `intake`, carrying out actions `perform`, the journal `journaling`.

mod intake;
mod journaling;
mod perform;

use std::collections::HashMap;
use std::sync::Arc;

use tokio::sync::mpsc;

use super::event::{Event, JoinReply, ManagerReply};
use super::replica::{Batches, Replica};
use super::{journal, metrics};
use crate::clock::{Clock, Millis};
use crate::core::scaling::ScalingPolicy;
use crate::core::scheduler::{Action, ClientId, ConnectionId, Input, Scheduler};
use crate::net::Outbox;
use crate::proto::{ErrorCode, Response, ToManager, ToWorker, WorkerId};
use journaling::stopping;

pub(super) struct Actor {
    pub core: Scheduler,
    /// The core's `now` (ms since the actor was made) and its timer's instants.
    clock: Millis,
    /// Worker connections waiting for their id.
    joining: HashMap<ConnectionId, (Outbox<ToWorker>, JoinReply)>,
    workers: HashMap<WorkerId, Outbox<ToWorker>>,
    clients: HashMap<ClientId, Outbox<Response>>,
    managers: HashMap<String, Outbox<ToManager>>,
    /// Manager connections waiting to be registered or refused.
    joining_managers: HashMap<ConnectionId, (Outbox<ToManager>, ManagerReply)>,
    next_id: u64,
    /// Work for the policy thread; `None` without a policy.
    pub policy: Option<super::policy::PolicyRunner>,
    /// Where `weir policy set` tries a new policy.
    pub trials: Option<super::policy::Trials>,
    /// Tried policies ready to take over, by who asked, until the core adopts one
    /// ([`crate::core::scheduler::Action::AdoptPolicy`]). At most two: the core tries one
    /// `weir policy set` at a time, adopts every one it tried that worked, and the journal's
    /// (`None`) only if no set superseded it (one that was is not kept).
    adopting: HashMap<Option<ClientId>, Box<dyn ScalingPolicy>>,
    record: Option<std::fs::File>,
    pub journal: Option<journal::Journal>,
    /// With a journal, every reply of a round, held until its records are on disk.
    deferred: Vec<Held>,
    /// With a journal, every frame to a worker of a round, held likewise: a task handed over
    /// is in a synced `Started` record before the worker hears of it, so a scheduler that
    /// lost power fences every task that may still run somewhere (found by tests/sim seed
    /// 905: a dispatch whose record a power loss tore away ran again on another worker).
    frames: Vec<(WorkerId, ToWorker)>,
    /// Whether this actor has a journal (fixed when it is made: the journal itself is out of
    /// `journal` while a blocking thread works on it, and gone if that thread panicked).
    journaled: bool,
    /// The first journal write error of this round: its replies become errors.
    journal_error: Option<String>,
    pub policy_latency: metrics::Histogram,
    /// With scheduler replicas: this replica's Raft node. The round's records go there instead
    /// of a journal, and what the round sends out is `held` until they are committed.
    pub replica: Option<Arc<Replica>>,
    held: Vec<Action>,
    batches: Batches,
}

/// A reply held until the round's journal sync ([`Actor::settle`]).
struct Held {
    client: ClientId,
    response: Response,
    /// The client's final answer (see [`Action::Reply`]).
    last: bool,
    /// An answer to a change: with the journal failed, it says the change was not done.
    durable: bool,
}

impl Actor {
    pub(super) fn new(
        core: Scheduler,
        clock: Arc<dyn Clock>,
        policy: Option<super::policy::PolicyRunner>,
        record: Option<std::fs::File>,
        journal: Option<journal::Journal>,
    ) -> Actor {
        Actor {
            core,
            clock: Millis::new(clock),
            joining: HashMap::new(),
            workers: HashMap::new(),
            clients: HashMap::new(),
            managers: HashMap::new(),
            joining_managers: HashMap::new(),
            next_id: 0,
            policy,
            trials: None,
            adopting: HashMap::new(),
            record,
            journaled: journal.is_some(),
            journal,
            deferred: Vec::new(),
            frames: Vec::new(),
            journal_error: None,
            policy_latency: metrics::policy_histogram(),
            replica: None,
            held: Vec::new(),
            batches: Batches::default(),
        }
    }

    pub(super) fn now(&self) -> u64 {
        self.clock.now()
    }

    /// The event loop. Returns only when the journal cannot be written (with why): fail-stop,
    /// as a database does when its log cannot be synced. What it had synced stays, a torn last
    /// record is cut at the next start, and nothing that was acknowledged is lost.
    pub(super) async fn run(mut self, mut inbox: mpsc::UnboundedReceiver<Event>) -> Option<String> {
        // One timer, moved only when the core's next timeout moves (not a new one per round).
        let mut timeout = self.core.poll_timeout();
        let timer = tokio::time::sleep_until(self.clock.at(timeout));
        tokio::pin!(timer);
        loop {
            if self.core.poll_timeout() != timeout {
                timeout = self.core.poll_timeout();
                timer.as_mut().reset(self.clock.at(timeout));
            }
            tokio::select! {
                event = inbox.recv() => {
                    self.event(event?);
                    // Take everything already waiting before scheduling once.
                    self.take_in(&mut inbox, 10_000);
                }
                _ = &mut timer => {
                    // What waits in the inbox came before this timeout (heartbeats that arrived
                    // while the actor waited on the disk, one a second from each of thousands
                    // of workers): all of it taken in first, so no worker is judged silent on
                    // news it already sent. Only what is there now: the loop ends.
                    let waiting = inbox.len();
                    self.take_in(&mut inbox, waiting);
                    let now = self.now();
                    self.core.handle(now, Input::Timeout);
                    // A timer that fired is set again, even to the same time.
                    timeout = u64::MAX;
                }
            }
            let now = self.now();
            self.core.handle(now, Input::EndOfBatch);
            self.perform_all().await;
            if let Some(replica) = self.replica.clone() {
                if let Err(error) = self.replicate(&replica).await {
                    return Some(error);
                }
                continue;
            }
            if let Some(error) = self.settle().await {
                return Some(error);
            }
        }
    }

    /// The end of a round: the journal synced, then the replies held for it sent, then the
    /// outcomes now on disk acknowledged to their workers ([`Input::Synced`]). Nothing a client
    /// hears (an acknowledgement, a result, a count) is undone by a crash after it: a result
    /// seen before its record was synced could be lost with its worker and run again.
    /// `Some`: the journal failed, the held replies said so, and the actor stops (why).
    async fn settle(&mut self) -> Option<String> {
        let dirty = |actor: &Actor| actor.journal.as_ref().is_some_and(journal::Journal::dirty);
        loop {
            if dirty(self)
                && let Some(Err(error)) = self.off_thread(journal::Journal::sync).await
            {
                self.journal_error.get_or_insert(error.to_string());
            }
            let failed = self.journal_error.take();
            let frames = std::mem::take(&mut self.frames);
            if failed.is_none() {
                self.send_frames(frames);
            }
            for held in std::mem::take(&mut self.deferred) {
                match &failed {
                    None => self.reply(held.client, held.response, held.last),
                    // Nothing is acknowledged that is not on disk: the answers say so instead.
                    Some(error) => {
                        let message = match held.durable {
                            true => format!(
                                "not done: it could not be written to the journal, so it would not survive a restart, and the scheduler stops ({error})"
                            ),
                            false => format!(
                                "the journal could not be written, and the scheduler stops ({error})"
                            ),
                        };
                        let response = Response::Error {
                            code: ErrorCode::NotDurable,
                            message,
                        };
                        self.reply(held.client, response, true);
                    }
                }
            }
            if let Some(error) = failed {
                return Some(stopping(&error));
            }
            let journal_bytes = self.journal.as_ref().map_or(0, journal::Journal::size);
            let now = self.now();
            self.core.handle(now, Input::Synced { journal_bytes });
            self.perform_all().await;
            // A compaction just now may have failed the journal: stop before another round
            // appends to a journal that is gone or broken.
            if let Some(error) = self.journal_error.take() {
                return Some(stopping(&error));
            }
            // Acknowledging outcomes writes nothing and answers no one: one pass, as a rule.
            // What it sent out is covered by the sync just made (nothing new was appended).
            if self.deferred.is_empty() && !dirty(self) {
                let frames = std::mem::take(&mut self.frames);
                self.send_frames(frames);
                return None;
            }
        }
    }

    /// A replica's end of a round: its records committed (or its lead confirmed), then what
    /// it held goes out; the outcomes the records hold are acknowledged to their workers. An
    /// error: this replica stops leading (nothing held is sent; clients resend).
    async fn replicate(&mut self, replica: &Replica) -> Result<(), String> {
        if let Some(error) = self.journal_error.take() {
            return Err(format!("stopped leading: {error}"));
        }
        let batches = self.batches.take();
        if batches.is_empty() && self.held.is_empty() {
            return Ok(());
        }
        if let Err(error) = replica.commit(batches).await {
            tracing::warn!(%error, "this replica stops leading");
            return Err(format!("stopped leading: {error}"));
        }
        for action in std::mem::take(&mut self.held) {
            self.deliver(action, true);
        }
        let now = self.now();
        self.core.handle(now, Input::Synced { journal_bytes: 0 });
        self.perform_all().await;
        // Acknowledgements of outcomes now committed: they grant nothing, so they need no
        // confirmation of their own. Anything else waits for the next round's.
        let held = std::mem::take(&mut self.held);
        for action in held {
            match action {
                Action::ToWorker {
                    message: ToWorker::Received { .. },
                    ..
                } => self.deliver(action, true),
                other => self.held.push(other),
            }
        }
        Ok(())
    }

    /// Frames to workers, in the order the core sent them.
    fn send_frames(&mut self, frames: Vec<(WorkerId, ToWorker)>) {
        for (worker, message) in frames {
            self.send_frame(worker, message);
        }
    }

    /// A frame to a worker. Nothing is sent that the journal could not take (the scheduler
    /// stops).
    pub(super) fn send_frame(&self, worker: WorkerId, message: ToWorker) {
        if self.journal_error.is_none()
            && let Some(link) = self.workers.get(&worker)
        {
            let _ = link.send(message);
        }
    }

    /// Feed the core up to `most` events already waiting in the inbox.
    fn take_in(&mut self, inbox: &mut mpsc::UnboundedReceiver<Event>, most: usize) {
        for _ in 0..most {
            match inbox.try_recv() {
                Ok(event) => self.event(event),
                Err(_) => break,
            }
        }
    }

    fn next_id(&mut self) -> u64 {
        self.next_id += 1;
        self.next_id
    }
}
