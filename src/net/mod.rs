//! QUIC plumbing: TLS with a pinned self-signed certificate, the access file, endpoints, and the
//! hello exchange every connection starts with.

pub mod access;
pub mod tls;

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use quinn::{Connection, Endpoint, RecvStream, SendStream};

use crate::proto::{self, FrameError, Hello, HelloReply, PROTOCOL_VERSION, Role};
pub use access::AccessFile;

#[derive(Debug, thiserror::Error)]
pub enum NetError {
    #[error("{0}")]
    Tls(String),
    #[error("bad address `{0}`: expected quic://HOST:PORT")]
    Address(String),
    #[error("cannot reach the scheduler at {address}: {error}")]
    Connect { address: String, error: String },
    #[error("the scheduler refused the connection: {0}")]
    Refused(String),
    /// The scheduler answered a request with an error (`no job 2`): the request was refused,
    /// the connection is fine.
    #[error("{0}")]
    Request(String),
    /// A request's stream ended without its answer, or with the wrong one.
    #[error("the scheduler ended the request: {0}")]
    Unanswered(String),
    #[error(transparent)]
    Frame(#[from] FrameError),
    #[error("connection: {0}")]
    Connection(#[from] quinn::ConnectionError),
    #[error("i/o: {0}")]
    Io(#[from] std::io::Error),
    /// The scheduler cannot listen where it was told.
    #[error("cannot listen on {address}: {error}")]
    Listen { address: String, error: String },
    #[error("write: {0}")]
    Write(#[from] quinn::WriteError),
    #[error("{0}")]
    Access(String),
}

/// The application close code of a peer that stops on purpose (a worker or manager told to
/// stop): the scheduler logs a planned stop, not a lost peer. Any other close, or silence for
/// the idle timeout, is a loss.
pub const CLOSE_STOPPING: quinn::VarInt = quinn::VarInt::from_u32(2);

/// Whether `connection` was closed by its peer with [`CLOSE_STOPPING`].
pub fn peer_stopped(connection: &Connection) -> bool {
    matches!(
        connection.close_reason(),
        Some(quinn::ConnectionError::ApplicationClosed(close)) if close.error_code == CLOSE_STOPPING
    )
}

/// Close `connection` as a peer stopping on purpose, and wait (briefly) until the close has
/// been sent and acknowledged, so the scheduler learns of the stop within one round trip
/// instead of by idle timeout.
pub async fn close_stopping(endpoint: &Endpoint, connection: &Connection, reason: &str) {
    connection.close(CLOSE_STOPPING, reason.as_bytes());
    let _ = tokio::time::timeout(Duration::from_secs(2), endpoint.wait_idle()).await;
}

/// The frames of `recv`, read by a task of their own. A `select!` over the receiver is
/// cancel-safe; one over `frame::read` is not: a read dropped mid-frame (another branch fired)
/// loses the bytes it had read and misaligns the stream. The channel is bounded, so a slow
/// consumer still holds back the peer. The stream's error (or its end) comes last.
pub fn frames<T>(mut recv: RecvStream) -> tokio::sync::mpsc::Receiver<Result<T, FrameError>>
where
    T: serde::de::DeserializeOwned + Send + 'static,
{
    let (sender, receiver) = tokio::sync::mpsc::channel(16);
    tokio::spawn(async move {
        loop {
            let frame = proto::frame::read::<_, T>(&mut recv).await;
            let end = frame.is_err();
            if sender.send(frame).await.is_err() || end {
                return;
            }
        }
    });
    receiver
}

/// Liveness: keep-alives every second; a peer silent for `idle_timeout` is gone.
pub fn transport(idle_timeout: Duration) -> Arc<quinn::TransportConfig> {
    let mut transport = quinn::TransportConfig::default();
    transport.keep_alive_interval(Some(Duration::from_millis(500).min(idle_timeout / 3)));
    if let Ok(timeout) = quinn::IdleTimeout::try_from(idle_timeout) {
        transport.max_idle_timeout(Some(timeout));
    }
    // Many concurrent client requests (one stream each).
    transport.max_concurrent_bidi_streams(1024u32.into());
    Arc::new(transport)
}

/// `quic://HOST:PORT` (or `HOST:PORT`) to a socket address.
pub fn parse_address(address: &str) -> Result<SocketAddr, NetError> {
    use std::net::ToSocketAddrs;
    let rest = address.strip_prefix("quic://").unwrap_or(address);
    rest.to_socket_addrs()
        .ok()
        .and_then(|mut addrs| addrs.next())
        .ok_or_else(|| NetError::Address(address.to_string()))
}

/// A worker's or manager's connection is gone when the scheduler has been silent this long
/// (QUIC keep-alives every 0.5 s keep a live one busy).
pub const IDLE_TIMEOUT: Duration = Duration::from_secs(5);

/// How long a connection attempt waits for the scheduler's handshake.
pub const CONNECT_TIMEOUT: Duration = Duration::from_secs(5);

/// Connect to the scheduler in `access` as `role`, and say hello on the first stream.
pub async fn connect(
    access: &AccessFile,
    role: Role,
    idle_timeout: Duration,
) -> Result<(Endpoint, Connection, SendStream, RecvStream), NetError> {
    let address = parse_address(&access.address)?;
    let bind: SocketAddr = if address.is_ipv6() {
        "[::]:0"
    } else {
        "0.0.0.0:0"
    }
    .parse()
    .map_err(|_| NetError::Address(access.address.clone()))?;
    let mut endpoint = Endpoint::client(bind)?;
    let mut config = tls::client_config(&access.certificate_der()?)?;
    config.transport_config(transport(idle_timeout));
    endpoint.set_default_client_config(config);
    let connecting =
        endpoint
            .connect(address, tls::SERVER_NAME)
            .map_err(|e| NetError::Connect {
                address: access.address.clone(),
                error: e.to_string(),
            })?;
    // A scheduler that is down answers nothing (QUIC ignores ICMP): give up on the handshake
    // well before the idle timeout, so callers can retry or say so.
    let connection = match tokio::time::timeout(CONNECT_TIMEOUT, connecting).await {
        Ok(connected) => connected.map_err(|e| NetError::Connect {
            address: access.address.clone(),
            error: e.to_string(),
        })?,
        Err(_) => {
            return Err(NetError::Connect {
                address: access.address.clone(),
                error: format!("no answer within {CONNECT_TIMEOUT:?}"),
            });
        }
    };
    let (mut send, mut recv) = connection.open_bi().await?;
    let token = match role {
        Role::Client => access.client_token.clone(),
        Role::Worker | Role::Manager => access.worker_token.clone(),
    };
    proto::frame::write(
        &mut send,
        &Hello {
            version: PROTOCOL_VERSION,
            role,
            token,
        },
    )
    .await?;
    match proto::frame::read::<_, HelloReply>(&mut recv).await {
        Ok(HelloReply::Welcome) => Ok((endpoint, connection, send, recv)),
        Ok(HelloReply::Refused { reason }) => Err(NetError::Refused(reason)),
        Err(FrameError::Closed) => Err(NetError::Refused("connection closed during hello".into())),
        Err(e) => Err(e.into()),
    }
}

/// Run sessions with the scheduler, reconnecting after it goes away: back off from 0.2 s to 5 s,
/// re-read the access file each time (a restarted scheduler may have a new address), and give up
/// `timeout` after the last working session. A session that ends with a reason starting with
/// "stopped by" (a signal) ends the loop.
pub async fn reconnecting<F, Fut>(
    access_file: &std::path::Path,
    timeout: Duration,
    who: &str,
    mut session: F,
) -> Result<String, NetError>
where
    F: FnMut(AccessFile) -> Fut,
    Fut: std::future::Future<Output = Result<String, NetError>>,
{
    use tokio::signal::unix::{SignalKind, signal};
    // Once a process listens for SIGTERM the default action is gone for good: keep listening
    // between sessions too, or a stop request while reconnecting would be lost.
    let mut sigterm = signal(SignalKind::terminate())?;
    let mut last_ok = std::time::Instant::now();
    let mut backoff = Duration::from_millis(200);
    let mut connected_once = false;
    // Waiting is said once, then every 30 s: never silently.
    let mut said: Option<std::time::Instant> = None;
    loop {
        let outcome = match AccessFile::read(access_file) {
            // The session handles SIGTERM itself (closing its connection cleanly); one that
            // arrives while connecting is kept by `sigterm` and seen below.
            Ok(access) => session(access).await,
            Err(error) => Err(error),
        };
        match outcome {
            Ok(reason) if reason.starts_with("stopped by") => return Ok(reason),
            Ok(reason) => {
                tracing::warn!(%reason, "{who}: lost the scheduler; reconnecting");
                connected_once = true;
                said = Some(std::time::Instant::now());
                last_ok = std::time::Instant::now();
                backoff = Duration::from_millis(200);
            }
            Err(error) if !connected_once && timeout.is_zero() => return Err(error),
            Err(error) => {
                if last_ok.elapsed() > timeout {
                    return Err(NetError::Refused(format!(
                        "gave up reaching the scheduler after {timeout:?}: {error}"
                    )));
                }
                if said.is_none_or(|at| at.elapsed() > Duration::from_secs(30)) {
                    tracing::warn!(%error, "{who}: waiting for the scheduler (up to {timeout:?})");
                    said = Some(std::time::Instant::now());
                }
            }
        }
        tokio::select! {
            () = tokio::time::sleep(backoff) => {}
            _ = sigterm.recv() => return Ok("stopped by SIGTERM".to_string()),
        }
        backoff = (backoff * 2).min(Duration::from_secs(5));
    }
}
