//! A client connection: one stream per request, its components validated before the actor
//! sees it, and its answers written as the actor sends them.

use std::sync::Arc;
use std::time::Duration;

use quinn::{Connection, RecvStream, SendStream};
use tokio::sync::mpsc;

use super::Event;
use crate::net::{Link, LinkEnd, NetError, Outbox};
use crate::plugin::{PluginHost, World};
use crate::proto::{ComponentHash, ErrorCode, FrameError, Request, Response};

/// A client's request must arrive within this time.
const REQUEST_TIMEOUT: Duration = Duration::from_secs(60);

/// `Results` answers held in memory at once (each a copy of a job's results, sent as the client
/// reads): per connection, and over all connections. A request beyond waits for one to end, so
/// clients that never read cannot make the scheduler hold more than this many copies.
const RESULTS_PER_CONNECTION: usize = 2;
const RESULTS_IN_TOTAL: usize = 16;

fn results_in_total() -> &'static Arc<tokio::sync::Semaphore> {
    static TOTAL: std::sync::OnceLock<Arc<tokio::sync::Semaphore>> = std::sync::OnceLock::new();
    TOTAL.get_or_init(|| Arc::new(tokio::sync::Semaphore::new(RESULTS_IN_TOTAL)))
}

pub(super) async fn client_session(
    connection: Connection,
    events: mpsc::UnboundedSender<Event>,
    host: Arc<PluginHost>,
    read_only: bool,
) -> Result<(), NetError> {
    let results = Arc::new(tokio::sync::Semaphore::new(RESULTS_PER_CONNECTION));
    loop {
        let accepted = tokio::select! {
            accepted = connection.accept_bi() => accepted,
            // Its actor is gone (a replica stopped leading): the client connects again and
            // finds the leader, rather than have its requests dropped on this connection. The
            // actor's last answers (a failed journal's errors) go out first.
            () = events.closed() => {
                tokio::time::sleep(Duration::from_secs(1)).await;
                connection.close(0u32.into(), b"not the leader any more");
                return Ok(());
            }
        };
        let (send, recv) = match accepted {
            Ok(streams) => streams,
            Err(_) => return Ok(()), // the client went away
        };
        let events = events.clone();
        let host = host.clone();
        let results = results.clone();
        let peer = connection.remote_address();
        tokio::spawn(async move {
            if let Err(error) = request(send, recv, events, host, results, peer, read_only).await {
                tracing::debug!(%error, "client request failed");
            }
        });
    }
}

async fn request(
    send: SendStream,
    recv: RecvStream,
    events: mpsc::UnboundedSender<Event>,
    host: Arc<PluginHost>,
    results: Arc<tokio::sync::Semaphore>,
    peer: std::net::SocketAddr,
    read_only: bool,
) -> Result<(), NetError> {
    let (mut link, answers) = Link::<Request>::open::<Response>(send, recv);
    // A request arrives within a minute (a 48 MiB one takes well under a second on a LAN), so a
    // client that opens streams and sends nothing holds nothing for long.
    let read = tokio::time::timeout(REQUEST_TIMEOUT, link.next()).await;
    let mut request = match read.unwrap_or(Err(LinkEnd::Read(FrameError::Closed))) {
        Ok(request) => request,
        Err(error) => return refuse(link, answers, format!("bad request: {error}")).await,
    };
    if read_only && !request.reads_status_only() {
        tracing::info!(%peer, "refused a change asked with the read-only token");
        let message = "this token is read-only: it may ask for status, jobs, explain, managers, \
                       workers, environments and the policy, not change anything or fetch results \
                       (use the access file with the client token)";
        return refuse_with(link, answers, ErrorCode::Forbidden, message.to_string()).await;
    }
    let mut components = Vec::new();
    let submitted = match &mut request {
        Request::Submit {
            components: bytes, ..
        } => Some((std::mem::take(bytes), World::Task)),
        Request::EnvRegister { component, .. } => {
            Some((vec![std::mem::take(component)], World::Environment))
        }
        Request::PolicySet {
            name, component, ..
        } => {
            tracing::info!(%peer, policy = %name, "a client asks to replace the scaling policy");
            Some((vec![std::mem::take(component)], World::Policy))
        }
        _ => None,
    };
    if let Some((submitted, world)) = submitted {
        for bytes in submitted {
            match check_component(&host, bytes, world).await {
                Ok(component) => components.push(component),
                Err(message) => return refuse(link, answers, message).await,
            }
        }
    }
    // Held until the answer is sent (see RESULTS_PER_CONNECTION).
    let _permits = match request {
        Request::Results { .. } => Some((
            results.acquire_owned().await.ok(),
            results_in_total().clone().acquire_owned().await.ok(),
        )),
        _ => None,
    };
    if events
        .send(Event::Request {
            request,
            components,
            reply: answers,
        })
        .is_err()
    {
        return Ok(());
    }
    let send = link.finished().await?;
    let _ = send.stopped().await;
    Ok(())
}

/// Answer a request with an error and end its stream.
async fn refuse(
    link: Link<Request>,
    answers: Outbox<Response>,
    message: String,
) -> Result<(), NetError> {
    refuse_with(link, answers, ErrorCode::Invalid, message).await
}

async fn refuse_with(
    mut link: Link<Request>,
    answers: Outbox<Response>,
    code: ErrorCode,
    message: String,
) -> Result<(), NetError> {
    let _ = answers.send(Response::Error { code, message });
    drop(answers);
    link.finished().await?;
    Ok(())
}

/// A submitted component must be a valid component of the expected world. The scheduler only
/// validates it (no compiling: workers compile it, each machine once, from its cache after that).
async fn check_component(
    host: &Arc<PluginHost>,
    bytes: Vec<u8>,
    world: World,
) -> Result<(ComponentHash, Arc<[u8]>), String> {
    let host = host.clone();
    tokio::task::spawn_blocking(move || {
        let sha256 = host
            .validate("submitted component", &bytes, world)
            .map_err(|e| e.to_string())?;
        Ok((sha256, Arc::from(bytes)))
    })
    .await
    .map_err(|e| e.to_string())?
}
