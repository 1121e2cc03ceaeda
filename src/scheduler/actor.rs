//! The actor: the one task that owns the core ([`Scheduler`]). It turns connection events and
//! timers into [`Input`]s and the core's [`Action`]s into frames, journal writes and replies.
//! It holds no rule of its own: only channels, the journal file and the policy thread.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::{Duration, Instant};

use tokio::sync::{mpsc, oneshot};

use super::policy::PolicyJob;
use super::{journal, metrics};
use crate::core::scaling::{ScalingPolicy, Snapshot};
use crate::core::scheduler::{Action, ClientId, ConnectionId, Input, PolicyInfo, Scheduler};
use crate::proto::{
    ComponentHash, ErrorCode, ManagerState, Request, Response, ToManager, ToWorker, WorkerId,
    WorkerInfo,
};

/// The answer to a joining worker's connection: its id, or why it is refused.
pub(crate) type JoinReply = oneshot::Sender<Result<WorkerId, String>>;

/// The answer to a joining manager's connection: its id, or why it is refused.
pub(crate) type ManagerReply = oneshot::Sender<Result<String, String>>;

/// Messages from connection tasks (and the policy thread, and `/metrics`) to the actor: the
/// core's own inputs, and those that bring a channel the actor keeps.
pub(crate) enum Event {
    /// Fed to the core as it is (heartbeats, reports, a worker or manager gone).
    Core(Input),
    WorkerJoined {
        info: WorkerInfo,
        frames: mpsc::UnboundedSender<ToWorker>,
        reply: JoinReply,
    },
    Request {
        request: Request,
        components: Vec<(ComponentHash, Arc<[u8]>)>,
        reply: mpsc::UnboundedSender<Response>,
    },
    /// A manager connection's first heartbeat: registered, or refused (its id is taken).
    ManagerJoined {
        state: ManagerState,
        peer: String,
        link: mpsc::UnboundedSender<ToManager>,
        reply: ManagerReply,
    },
    Decided {
        result: Result<Vec<crate::core::scaling::Decision>, String>,
        elapsed: Duration,
    },
    /// A new policy's trial ended: it is ready to take over (with its tiers), or why not.
    PolicyTried {
        client: Option<ClientId>,
        policy: PolicyInfo,
        result: super::policy::Tried,
    },
    Metrics {
        reply: oneshot::Sender<String>,
    },
    /// The dashboard's snapshot or a task's explanation.
    Dashboard(super::dashboard::View),
}

pub(super) struct Actor {
    pub core: Scheduler,
    pub started: Instant,
    /// Worker connections waiting for their id.
    joining: HashMap<ConnectionId, (mpsc::UnboundedSender<ToWorker>, JoinReply)>,
    workers: HashMap<WorkerId, mpsc::UnboundedSender<ToWorker>>,
    clients: HashMap<ClientId, mpsc::UnboundedSender<Response>>,
    managers: HashMap<String, mpsc::UnboundedSender<ToManager>>,
    /// Manager connections waiting to be registered or refused.
    joining_managers: HashMap<ConnectionId, (mpsc::UnboundedSender<ToManager>, ManagerReply)>,
    next_id: u64,
    /// Work for the policy thread; `None` without a policy.
    pub policy: Option<std::sync::mpsc::Sender<PolicyJob>>,
    /// Where `weir policy set` tries a new policy.
    pub trials: Option<super::policy::Trials>,
    /// Tried policies ready to take over, by who asked, until the core adopts one
    /// ([`Action::AdoptPolicy`]).
    adopting: HashMap<Option<ClientId>, Box<dyn ScalingPolicy>>,
    record: Option<std::fs::File>,
    pub journal: Option<journal::Journal>,
    /// Replies held until this round's journal records are on disk.
    deferred: Vec<(ClientId, Response)>,
    /// The first journal write error of this round: its replies become errors.
    journal_error: Option<String>,
    pub policy_latency: metrics::Histogram,
}

impl Actor {
    pub fn new(
        core: Scheduler,
        policy: Option<std::sync::mpsc::Sender<PolicyJob>>,
        record: Option<std::fs::File>,
        journal: Option<journal::Journal>,
    ) -> Actor {
        Actor {
            core,
            started: Instant::now(),
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
            journal,
            deferred: Vec::new(),
            journal_error: None,
            policy_latency: metrics::policy_histogram(),
        }
    }

    pub fn now(&self) -> u64 {
        self.started.elapsed().as_millis() as u64
    }

    /// Feed the journal's records to the core, and compact it if the core says so.
    pub fn replay(&mut self, records: Vec<journal::Record>) {
        let now = self.now();
        for record in records {
            self.core.handle(now, Input::Replay(record));
        }
        self.core.handle(now, Input::Replayed);
        while let Some(records) = self.perform() {
            self.compact_journal(records);
        }
    }

    /// At start, before any connection: on this thread.
    fn compact_journal(&mut self, records: Vec<journal::Record>) {
        let Some(journal) = &mut self.journal else {
            return;
        };
        let result = journal.rewrite(&records);
        self.compacted(result);
    }

    fn compacted(&mut self, result: Result<(u64, u64), journal::JournalError>) {
        match result {
            Ok((before, after)) => {
                self.core.handle(self.now(), Input::Compacted);
                tracing::info!(before, after, "journal compacted (forgotten jobs dropped)")
            }
            // The rewrite starts with a sync of what was appended: if that failed, a later
            // sync may report success for pages the kernel dropped, so this is the journal
            // failing, not only the compaction.
            Err(error) if self.journal.as_ref().is_some_and(journal::Journal::dirty) => {
                self.journal_error.get_or_insert(error.to_string());
            }
            Err(error) => tracing::error!(%error, "journal not compacted (the old one stays)"),
        }
    }

    /// Run `work` on the journal on a blocking thread and wait for it. The actor waits as if
    /// it ran here, but the runtime's one thread goes on serving QUIC (acknowledgements,
    /// keep-alives, new connections), so a slow disk does not drop every connection at the
    /// idle timeout; what arrives meanwhile waits in the inbox. `None` without a journal, or
    /// if the thread panicked (the journal is then gone: the caller stops).
    async fn off_thread<R: Send + 'static>(
        &mut self,
        work: impl FnOnce(&mut journal::Journal) -> R + Send + 'static,
    ) -> Option<R> {
        let mut journal = self.journal.take()?;
        let done = tokio::task::spawn_blocking(move || {
            let result = work(&mut journal);
            (journal, result)
        })
        .await;
        match done {
            Ok((journal, result)) => {
                self.journal = Some(journal);
                Some(result)
            }
            Err(error) => {
                self.journal_error
                    .get_or_insert(format!("the journal's thread failed: {error}"));
                None
            }
        }
    }

    /// Carry out the core's actions; a compaction runs off this thread, before the actions
    /// after it (records journaled after the image belong in the rewritten file).
    async fn perform_all(&mut self) {
        while let Some(records) = self.perform() {
            if let Some(result) = self.off_thread(move |j| j.rewrite(&records)).await {
                self.compacted(result);
            }
        }
    }

    /// The event loop. Returns only when the journal cannot be written (with why): fail-stop,
    /// as a database does when its log cannot be synced. What it had synced stays, a torn last
    /// record is cut at the next start, and nothing that was acknowledged is lost.
    pub async fn run(mut self, mut inbox: mpsc::UnboundedReceiver<Event>) -> Option<String> {
        // One timer, moved only when the core's next timeout moves (not a new one per round).
        let mut timeout = self.core.poll_timeout();
        let timer =
            tokio::time::sleep_until((self.started + Duration::from_millis(timeout)).into());
        tokio::pin!(timer);
        loop {
            if self.core.poll_timeout() != timeout {
                timeout = self.core.poll_timeout();
                let wake = self.started + Duration::from_millis(timeout);
                timer.as_mut().reset(wake.into());
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
            if self.journal.as_ref().is_some_and(journal::Journal::dirty)
                && let Some(Err(error)) = self.off_thread(journal::Journal::sync).await
            {
                self.journal_error.get_or_insert(error.to_string());
            }
            // Nothing is acknowledged that is not on disk: with a journal error this round,
            // the answers say so instead.
            let failed = self.journal_error.take();
            for (client, response) in std::mem::take(&mut self.deferred) {
                let response = match &failed {
                    None => response,
                    Some(error) => Response::Error {
                        code: ErrorCode::NotDurable,
                        message: format!(
                            "not done: it could not be written to the journal, so it would not survive a restart, and the scheduler stops ({error})"
                        ),
                    },
                };
                self.reply(client, response, true);
            }
            if let Some(error) = failed {
                return Some(stopping(&error));
            }
            let journal_bytes = self.journal.as_ref().map_or(0, journal::Journal::size);
            self.core.handle(now, Input::Synced { journal_bytes });
            self.perform_all().await;
            // A compaction just now may have failed the journal: stop before another round
            // appends to a journal that is gone or broken.
            if let Some(error) = self.journal_error.take() {
                return Some(stopping(&error));
            }
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

    fn event(&mut self, event: Event) {
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
                        self.adopting.insert(client, new);
                        Ok(tiers)
                    }
                    Ok(_) => Err("the policy thread is gone".to_string()),
                    Err(error) => Err(error),
                };
                Input::PolicySwapped {
                    client,
                    policy,
                    result,
                }
            }
            Event::Metrics { reply } => {
                let _ = reply.send(self.render_metrics());
                return;
            }
            Event::Dashboard(super::dashboard::View::Snapshot(reply)) => {
                let _ = reply.send(super::dashboard::Snapshot {
                    status: self.core.status(now),
                    environments: self.core.environment_report(None),
                    jobs: self.core.tasks().jobs(20),
                    policy: self.core.policy_report(),
                    managers: self.core.managers_view(now, None).unwrap_or_default(),
                });
                return;
            }
            Event::Dashboard(super::dashboard::View::Explain(task, reply)) => {
                let _ = reply.send(self.core.explain(now, task));
                return;
            }
        };
        self.core.handle(now, input);
    }

    fn next_id(&mut self) -> u64 {
        self.next_id += 1;
        self.next_id
    }

    /// Carry out the core's actions, in order, up to a compaction: its records are returned
    /// (see [`Actor::perform_all`]).
    fn perform(&mut self) -> Option<Vec<journal::Record>> {
        while let Some(action) = self.core.poll_action() {
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
                Action::ToWorker { worker, message } => {
                    // Nothing is sent that the journal could not take (the scheduler stops).
                    if self.journal_error.is_none()
                        && let Some(frames) = self.workers.get(&worker)
                    {
                        let _ = frames.send(message);
                    }
                }
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
                } => match durable {
                    true => self.deferred.push((client, response)),
                    false => self.reply(client, response, last),
                },
                Action::Journal {
                    record,
                    write_through,
                } => self.append(&record, write_through),
                Action::Compact(records) => return Some(records),
                Action::Decide(snapshot) => self.decide(snapshot),
                Action::SwapPolicy {
                    client,
                    policy,
                    snapshot,
                } => self.swap_policy(client, policy, snapshot),
                // It decides from the next snapshot on.
                Action::AdoptPolicy { client } => {
                    if let (Some(new), Some(thread)) = (self.adopting.remove(&client), &self.policy)
                        && thread.send(PolicyJob::Replace(new)).is_err()
                    {
                        tracing::error!("the policy thread is gone: the new policy cannot run");
                    }
                }
            }
        }
        None
    }

    fn append(&mut self, record: &journal::Record, write_through: bool) {
        let Some(journal) = &mut self.journal else {
            return;
        };
        let written = match write_through {
            true => journal
                .append_lazily(record)
                .and_then(|()| journal.write_through()),
            false => journal.append(record),
        };
        if let Err(error) = written {
            self.journal_error.get_or_insert(error.to_string());
        }
    }

    fn reply(&mut self, client: ClientId, response: Response, last: bool) {
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

    fn decide(&mut self, snapshot: Snapshot) {
        if let Some(file) = &mut self.record {
            use std::io::Write;
            if let Ok(line) = serde_json::to_string(&snapshot) {
                let _ = writeln!(file, "{line}");
            }
        }
        let sent = self
            .policy
            .as_ref()
            .is_some_and(|p| p.send(PolicyJob::Decide(snapshot)).is_ok());
        if !sent {
            let now = self.now();
            let result = Err("the policy thread is gone".into());
            self.core.handle(now, Input::Decided { result });
        }
    }

    /// A new policy for the policy thread to create, try and switch to.
    fn swap_policy(
        &mut self,
        client: Option<ClientId>,
        policy: PolicyInfo,
        snapshot: Option<Snapshot>,
    ) {
        if let Some(trials) = &self.trials {
            trials.start(client, policy, snapshot);
        } else {
            let now = self.now();
            let result = Err("the policy thread is gone".into());
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

/// Why the event loop ends when the journal failed, logged once and returned.
fn stopping(error: &str) -> String {
    tracing::error!(%error, "the journal cannot be written: stopping; start the scheduler again once the disk is fixed (nothing acknowledged is lost)");
    format!("the journal cannot be written: {error}")
}
