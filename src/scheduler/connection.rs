//! One task per connection: the hello check, then a worker session or client requests.

use std::sync::Arc;
use std::time::Duration;

use quinn::{Connection, RecvStream, SendStream};
use tokio::sync::{mpsc, oneshot};

use super::replica::Replica;
use super::{Event, Front};
use crate::core::scheduler::Input;
use crate::net::{AccessFile, Link, LinkEnd, NetError};
use crate::plugin::PluginHost;
use crate::proto::{
    FromManager, FromWorker, Hello, HelloReply, PROTOCOL_VERSION, Role, ToManager, ToWorker, frame,
};

/// A peer must say hello (and a worker register) within this time.
const HELLO_TIMEOUT: Duration = Duration::from_secs(10);

/// Open connections per token, capped (`scheduler --max-connections`).
pub(super) struct ConnectionLimits {
    pub max: usize,
    clients: std::sync::atomic::AtomicUsize,
    readers: std::sync::atomic::AtomicUsize,
    workers: std::sync::atomic::AtomicUsize,
}

/// A taken connection slot, given back on drop.
pub(super) struct Slot {
    limits: Arc<ConnectionLimits>,
    role: Role,
    read_only: bool,
}

impl Drop for Slot {
    fn drop(&mut self) {
        self.limits
            .counter(self.role, self.read_only)
            .fetch_sub(1, std::sync::atomic::Ordering::SeqCst);
    }
}

impl ConnectionLimits {
    pub(super) fn new(max: usize) -> ConnectionLimits {
        ConnectionLimits {
            max,
            clients: 0.into(),
            readers: 0.into(),
            workers: 0.into(),
        }
    }

    /// Clients with the read-only token count apart: a token shared widely cannot take the
    /// submitters' connections.
    fn counter(&self, role: Role, read_only: bool) -> &std::sync::atomic::AtomicUsize {
        match role {
            Role::Client if read_only => &self.readers,
            Role::Client => &self.clients,
            Role::Worker | Role::Manager | Role::Replica => &self.workers,
        }
    }

    fn take(self: &Arc<Self>, role: Role, read_only: bool) -> Option<Slot> {
        use std::sync::atomic::Ordering::SeqCst;
        self.counter(role, read_only)
            .fetch_update(SeqCst, SeqCst, |n| (n < self.max).then_some(n + 1))
            .ok()
            .map(|_| Slot {
                limits: self.clone(),
                role,
                read_only,
            })
    }
}

/// A worker's or manager's connection, past its hello: what its session needs.
pub(super) struct Admitted {
    connection: Connection,
    send: SendStream,
    recv: RecvStream,
    events: mpsc::UnboundedSender<Event>,
    role: Role,
    /// Held until the session ends.
    _slot: Slot,
}

/// Serve one connection. The hello (and a client's or replica's whole session) runs boxed, so
/// this task, which lives as long as its worker or manager, is no larger than their session:
/// a task is as large as its largest state, and the scheduler holds one per worker (#35).
pub(super) async fn serve(
    incoming: Box<quinn::Incoming>,
    limits: Arc<ConnectionLimits>,
    access: Arc<AccessFile>,
    front: Front,
    replica: Option<Arc<Replica>>,
    host: Arc<PluginHost>,
) -> Result<(), NetError> {
    let admitted = Box::pin(admit(*incoming, limits, access, front, replica, host)).await?;
    let Some(Admitted {
        connection,
        send,
        recv,
        events,
        role,
        _slot,
    }) = admitted
    else {
        return Ok(());
    };
    if role == Role::Manager {
        let peer = connection.remote_address();
        manager_session(connection, peer, send, recv, events).await
    } else {
        worker_session(connection, send, recv, events).await
    }
}

/// The hello: checked, answered, and a worker or manager admitted to its session (`None`: the
/// peer was refused or sent elsewhere, or it was a client or replica, served to its end here).
async fn admit(
    incoming: quinn::Incoming,
    limits: Arc<ConnectionLimits>,
    access: Arc<AccessFile>,
    front: Front,
    replica: Option<Arc<Replica>>,
    host: Arc<PluginHost>,
) -> Result<Option<Admitted>, NetError> {
    let connection = incoming.await?;
    let peer = connection.remote_address();
    let (mut send, mut recv) =
        match tokio::time::timeout(HELLO_TIMEOUT, connection.accept_bi()).await {
            Ok(streams) => streams?,
            Err(_) => {
                connection.close(1u32.into(), b"no hello");
                return Ok(None);
            }
        };
    // Before it is authenticated a peer may send a few bytes, not a 48 MiB frame.
    let hello = match tokio::time::timeout(
        HELLO_TIMEOUT,
        frame::read_limited::<_, Hello>(&mut recv, frame::MAX_HELLO),
    )
    .await
    {
        Ok(Ok(hello)) => hello,
        Ok(Err(error)) => {
            return refuse(&connection, &mut send, &format!("bad hello: {error}")).await;
        }
        Err(_) => return refuse(&connection, &mut send, "no hello in time").await,
    };
    if hello.version != PROTOCOL_VERSION {
        let reason = format!(
            "protocol version {} is not supported; this scheduler speaks {PROTOCOL_VERSION}",
            hello.version
        );
        return refuse(&connection, &mut send, &reason).await;
    }
    // Replicas present a token of their own, made from the scheduler's private key, which
    // only replicas hold (workers hold the worker token: a worker must not speak Raft).
    let expected = match hello.role {
        Role::Client => &access.client_token,
        Role::Worker | Role::Manager => &access.worker_token,
        Role::Replica => match &replica {
            Some(replica) => &replica.token,
            None => return refuse(&connection, &mut send, "this scheduler has no replicas").await,
        },
    };
    if expected.is_empty() {
        return refuse(
            &connection,
            &mut send,
            "this scheduler has no token for that role",
        )
        .await;
    }
    let given = hello.token.as_bytes();
    // A client may present the read-only token instead: it may then only ask for status.
    let read_only = hello.role == Role::Client
        && !access.read_token.is_empty()
        && !crate::net::same_token(given, expected.as_bytes())
        && crate::net::same_token(given, access.read_token.as_bytes());
    if !read_only && !crate::net::same_token(given, expected.as_bytes()) {
        tracing::warn!(%peer, role = ?hello.role, "refused a peer with a wrong token");
        return refuse(
            &connection,
            &mut send,
            &format!("wrong token for role {:?}", hello.role),
        )
        .await;
    }
    // One slot per connection and token (workers and managers share theirs), held until it ends.
    let Some(_slot) = limits.take(hello.role, read_only) else {
        let token = match read_only {
            true => "read-only".to_string(),
            false => format!("{:?}", hello.role),
        };
        let reason = format!(
            "too many connections with the {token} token (limit {})",
            limits.max
        );
        tracing::warn!(%peer, "{reason}");
        return refuse(&connection, &mut send, &reason).await;
    };
    if matches!(hello.role, Role::Client | Role::Replica) {
        crate::net::allow_requests(&connection);
    }
    if hello.role == Role::Replica {
        return match replica {
            Some(replica) => {
                frame::write(&mut send, &HelloReply::Welcome).await?;
                super::replica::serve(connection, replica.raft.clone())
                    .await
                    .map(|()| None)
            }
            None => refuse(&connection, &mut send, "this scheduler has no replicas").await,
        };
    }
    // Only the leader serves; a follower says where it is.
    let Some(events) = front.events() else {
        let leader = replica.as_ref().and_then(|r| r.leader());
        tracing::debug!(%peer, ?leader, "not the leader: the peer is sent there");
        let _ = frame::write(&mut send, &HelloReply::NotLeader { leader }).await;
        let _ = send.finish();
        let _ = tokio::time::timeout(Duration::from_secs(2), connection.closed()).await;
        connection.close(0u32.into(), b"not the leader");
        return Ok(None);
    };
    frame::write(&mut send, &HelloReply::Welcome).await?;
    match hello.role {
        Role::Replica => Ok(None),
        Role::Client => {
            let _ = send.finish();
            super::requests::client_session(connection, events, host, read_only)
                .await
                .map(|()| None)
        }
        Role::Manager | Role::Worker => Ok(Some(Admitted {
            connection,
            send,
            recv,
            events,
            role: hello.role,
            _slot,
        })),
    }
}

async fn refuse(
    connection: &Connection,
    send: &mut SendStream,
    reason: &str,
) -> Result<Option<Admitted>, NetError> {
    let _ = frame::write(
        send,
        &HelloReply::Refused {
            reason: reason.to_string(),
        },
    )
    .await;
    let _ = send.finish();
    // Give the peer a moment to read the reason before the connection goes.
    let _ = tokio::time::timeout(Duration::from_secs(2), connection.closed()).await;
    connection.close(1u32.into(), reason.as_bytes());
    Ok(None)
}

async fn worker_session(
    connection: Connection,
    send: SendStream,
    recv: RecvStream,
    events: mpsc::UnboundedSender<Event>,
) -> Result<(), NetError> {
    let (mut link, outbox) = Link::<FromWorker>::open::<ToWorker>(send, recv);
    let info = match tokio::time::timeout(HELLO_TIMEOUT, link.next()).await {
        Ok(Ok(FromWorker::Register(info))) => *info,
        _ => {
            connection.close(1u32.into(), b"expected Register");
            return Ok(());
        }
    };
    let (reply, joined) = oneshot::channel();
    if events
        .send(Event::WorkerJoined {
            info,
            frames: outbox,
            reply,
        })
        .is_err()
    {
        return Ok(());
    }
    let worker = match joined.await {
        Ok(Ok(worker)) => worker,
        Ok(Err(reason)) => {
            connection.close(crate::net::CLOSE_REFUSED, reason.as_bytes());
            return Ok(());
        }
        Err(_) => return Ok(()),
    };
    let (reason, from_peer) = loop {
        match link.next().await {
            Ok(FromWorker::Heartbeat) => {
                let _ = events.send(Event::Core(Input::Heartbeat {
                    worker,
                    renew: None,
                }));
            }
            Ok(FromWorker::Renew { seq }) => {
                let _ = events.send(Event::Core(Input::Heartbeat {
                    worker,
                    renew: Some(seq),
                }));
            }
            Ok(FromWorker::Finished(results)) => {
                let _ = events.send(Event::Core(Input::Finished { worker, results }));
            }
            Ok(FromWorker::Verdicts(verdicts)) => {
                let _ = events.send(Event::Core(Input::Verdicts { worker, verdicts }));
            }
            Ok(FromWorker::Loads(loads)) => {
                let _ = events.send(Event::Core(Input::Loads { worker, loads }));
            }
            Ok(FromWorker::Revoked(tasks)) => {
                let _ = events.send(Event::Core(Input::Revoked { worker, tasks }));
            }
            Ok(FromWorker::Started(tasks)) => {
                let _ = events.send(Event::Core(Input::Started { worker, tasks }));
            }
            Ok(FromWorker::Register(_)) => break ("registered twice".to_string(), false),
            Err(LinkEnd::Finished) => break ("dropped by the scheduler".to_string(), false),
            Err(end @ LinkEnd::Writer(_)) => break (end.to_string(), false),
            Err(end) => break (end.to_string(), true),
        }
    };
    drop(link);
    tracing::debug!(?worker, stats = ?connection.stats(), "worker connection ended");
    // A worker that stops closes its connection right after its stream ends: the core gives
    // the close a moment to arrive (`STOP_GRACE_MS`), so a planned stop is not taken for a
    // loss, and judges the worker lost if it does not. Here the session only waits for the
    // close, a second longer than that (by then the core has judged), so it always ends.
    if from_peer && connection.close_reason().is_none() {
        let _ = events.send(Event::Core(Input::WorkerEnding {
            worker,
            reason: reason.clone(),
        }));
        let bound = Duration::from_millis(crate::core::scheduler::STOP_GRACE_MS + 1_000);
        let _ = tokio::time::timeout(bound, connection.closed()).await;
    }
    let planned = crate::net::peer_stopped(&connection);
    let _ = events.send(Event::Core(Input::WorkerGone {
        worker,
        reason: if planned {
            "it stopped".to_string()
        } else {
            reason.clone()
        },
        planned,
    }));
    connection.close(0u32.into(), reason.as_bytes());
    Ok(())
}

async fn manager_session(
    connection: Connection,
    peer: std::net::SocketAddr,
    send: SendStream,
    recv: RecvStream,
    events: mpsc::UnboundedSender<Event>,
) -> Result<(), NetError> {
    let (mut link, outbox) = Link::<FromManager>::open::<ToManager>(send, recv);
    // Its first heartbeat registers it, unless another live connection holds its id.
    let state = match tokio::time::timeout(HELLO_TIMEOUT, link.next()).await {
        Ok(Ok(FromManager::Heartbeat(state))) => *state,
        _ => {
            connection.close(1u32.into(), b"expected a heartbeat");
            return Ok(());
        }
    };
    let (reply, joined) = oneshot::channel();
    let joining = Event::ManagerJoined {
        state,
        peer: peer.to_string(),
        link: outbox,
        reply,
    };
    if events.send(joining).is_err() {
        return Ok(());
    }
    let mut id = match joined.await {
        Ok(Ok(id)) => Some(id),
        Ok(Err(reason)) => {
            // Its own close code: the manager says why and tries again later (the other may
            // be a dead connection not timed out yet), instead of taking it for a lost link.
            connection.close(crate::net::CLOSE_ID_TAKEN, reason.as_bytes());
            return Ok(());
        }
        Err(_) => return Ok(()),
    };
    let reason = loop {
        match link.next().await {
            Ok(FromManager::Heartbeat(state)) => {
                if id.as_ref().is_some_and(|known| *known != state.id) {
                    break "a manager changed its id".to_string();
                }
                let _ = events.send(Event::Core(Input::ManagerHeartbeat { state: *state }));
            }
            Ok(FromManager::Goodbye) => {
                if let Some(id) = id.take() {
                    let _ = events.send(Event::Core(Input::ManagerGoodbye { id }));
                }
                break "said goodbye".to_string();
            }
            Err(LinkEnd::Finished | LinkEnd::Write(_) | LinkEnd::Writer(_)) => {
                break "writer ended".to_string();
            }
            Err(end) => break end.to_string(),
        }
    };
    drop(link);
    if let Some(id) = id {
        let _ = events.send(Event::Core(Input::ManagerGone { id }));
    }
    connection.close(0u32.into(), reason.as_bytes());
    Ok(())
}
