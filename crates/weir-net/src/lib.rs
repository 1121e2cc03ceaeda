//! QUIC plumbing: TLS with a pinned self-signed certificate, the access file, endpoints, the
//! hello exchange every connection starts with ([`connect`]), typed links over a stream pair
//! ([`Link`]), and the sessions of workers and managers with the scheduler ([`reconnecting`]).

pub mod access;
mod connect;
pub mod link;
pub mod session;
pub mod tls;
pub mod udp;

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use quinn::{Connection, Endpoint};

pub use access::AccessFile;
pub use connect::{client_endpoint, client_endpoint_with, connect, connect_on, connect_with};
pub use link::{Closed, Link, LinkEnd, Outbox};
pub use session::{Heard, SessionEnd, Signal, Signals, reconnecting};
use weir_proto::FrameError;

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
    #[error("{message}")]
    Request {
        code: weir_proto::ErrorCode,
        message: String,
    },
    /// A request's stream ended without its answer, or with the wrong one.
    #[error("the scheduler ended the request: {0}")]
    Unanswered(String),
    #[error(transparent)]
    Frame(#[from] FrameError),
    // The variants below name their error in their text: built by `From` (not `#[from]`, which
    // would also make it the source, and `{:#}` would print it twice).
    #[error("connection: {0}")]
    Connection(quinn::ConnectionError),
    #[error("i/o: {0}")]
    Io(std::io::Error),
    /// The scheduler cannot listen where it was told.
    #[error("cannot listen on {address}: {error}")]
    Listen { address: String, error: String },
    #[error("write: {0}")]
    Write(quinn::WriteError),
    #[error("{0}")]
    Access(String),
    /// A link to the scheduler ended before the session began (during registration).
    #[error(transparent)]
    Link(#[from] LinkEnd),
    /// The scheduler that wrote the access file is gone (its lock free, its process gone):
    /// nothing will answer until one is started, so callers fail at once.
    #[error("{0}")]
    NotRunning(String),
    /// The scheduler stayed away longer than the reconnect timeout.
    #[error("gave up reaching the scheduler after {after:?}: {error}")]
    GaveUp { after: Duration, error: String },
    /// A request too large to send: its message would be `size` bytes, over the frame limit
    /// (`limit`, [`weir_proto::MAX_FRAME`]). Nothing was sent; the connection is fine.
    /// `input`: the submission's input that is too large with the rest of its request alone.
    #[error("{}", too_large(*size, *limit, *input))]
    RequestTooLarge {
        size: usize,
        limit: usize,
        input: Option<usize>,
    },
}

fn too_large(size: usize, limit: usize, input: Option<usize>) -> String {
    let what = match input {
        Some(index) => format!("input {index} of the submission makes a request of"),
        None => "the request is".to_string(),
    };
    format!(
        "{what} {size} bytes, over the {limit}-byte limit on one message to the scheduler \
         (proto::MAX_FRAME); nothing was sent"
    )
}

impl From<quinn::ConnectionError> for NetError {
    fn from(error: quinn::ConnectionError) -> NetError {
        NetError::Connection(error)
    }
}

impl From<std::io::Error> for NetError {
    fn from(error: std::io::Error) -> NetError {
        NetError::Io(error)
    }
}

impl From<quinn::WriteError> for NetError {
    fn from(error: quinn::WriteError) -> NetError {
        NetError::Write(error)
    }
}

impl NetError {
    /// `cannot listen on ADDRESS: ERROR`, for any listener the scheduler binds.
    pub fn listen(address: impl std::fmt::Display, error: impl std::fmt::Display) -> NetError {
        NetError::Listen {
            address: address.to_string(),
            error: error.to_string(),
        }
    }

    /// Whether the connection to the scheduler is gone (it may be restarting), as opposed to a
    /// request it refused or an answer that makes no sense: a caller may reconnect and ask again.
    pub fn is_connection_lost(&self) -> bool {
        match self {
            NetError::Connection(_) | NetError::Write(_) | NetError::Unanswered(_) => true,
            NetError::Frame(error)
            | NetError::Link(LinkEnd::Read(error) | LinkEnd::Write(error)) => {
                matches!(error, FrameError::Io(_) | FrameError::Closed)
            }
            _ => false,
        }
    }
}

/// The application close code of a peer that stops on purpose (a worker or manager told to
/// stop): the scheduler logs a planned stop, not a lost peer. Any other close, or silence for
/// the idle timeout, is a loss.
pub const CLOSE_STOPPING: quinn::VarInt = quinn::VarInt::from_u32(2);

/// The close code of a registration the scheduler refuses (a worker under the name of a live
/// worker): the reason says why, and the peer is not lost but refused.
pub const CLOSE_REFUSED: quinn::VarInt = quinn::VarInt::from_u32(3);

/// The close code of a worker manager refused because a live connection holds its id (one
/// process per manager id): the reason names the other, and the manager tries again later.
pub const CLOSE_ID_TAKEN: quinn::VarInt = quinn::VarInt::from_u32(4);

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

/// The scheduler's side of every connection: a peer silent for `idle_timeout` is gone (QUIC
/// takes the shorter of both sides': a client offers [`CLIENT_IDLE_TIMEOUT`], a worker and a
/// manager [`PEER_IDLE_TIMEOUT`]).
///
/// A connection may open [`PEER_STREAMS`] streams until its hello says what it is: a client or
/// a replica is then allowed [`CLIENT_STREAMS`] ([`allow_requests`]). quinn keeps a slot for
/// every stream a peer may open, from the start, so this limit is much of what an idle
/// worker's connection costs in memory (BENCHMARKS.md, "What an idle peer costs").
///
/// `keep_alive`: how long a peer may be silent before the scheduler pings it. A keep-alive is
/// counted from the last packet received only, so it must outlast the slowest healthy beat (an
/// idle worker's pace plus the heartbeat timeout): at 3/5 of a 70 s timeout, an idle worker told
/// to beat every 60 s drew a ping and its acknowledgement with every beat.
pub fn server_transport(
    idle_timeout: Duration,
    keep_alive: Duration,
) -> Arc<quinn::TransportConfig> {
    transport_with(idle_timeout, keep_alive.min(idle_timeout), PEER_STREAMS)
}

/// The streams a connection may open before its hello (a worker or a manager uses one for its
/// life).
pub const PEER_STREAMS: u32 = 4;

/// The streams a client (one per request) or a replica (one per Raft message) may have open at
/// once.
pub const CLIENT_STREAMS: u32 = 1024;

/// Let a connection that said hello as a client or a replica open [`CLIENT_STREAMS`] streams.
pub fn allow_requests(connection: &Connection) {
    connection.set_max_concurrent_bi_streams(CLIENT_STREAMS.into());
}

/// A peer's side (worker, manager, client, replica): the scheduler silent for `idle_timeout` is
/// gone. The scheduler opens no stream to a peer, so a peer keeps no slot for one.
pub fn transport(idle_timeout: Duration) -> Arc<quinn::TransportConfig> {
    transport_with(idle_timeout, idle_timeout * 3 / 5, 0)
}

/// Liveness on either side: a keep-alive goes only once the other side has been silent for
/// `keep_alive` (quinn counts from the last packet received): 3/5 of `idle_timeout` on a peer's
/// side, the slowest healthy beat on the scheduler's ([`server_transport`]). QUIC takes the shorter of the
/// two sides' idle timeouts, and the side with the shorter one pings first, within it. Peers
/// that beat (a busy worker every second, an idle one at the pace it was told, within the
/// scheduler's longer timeout; a manager at the pace it was told; each beat acknowledged)
/// never need one; a client waiting on a long answer does. A keep-alive every
/// 0.5 s, as before, was a packet and an acknowledgement more per peer and second on each side.
fn transport_with(
    idle_timeout: Duration,
    keep_alive: Duration,
    streams: u32,
) -> Arc<quinn::TransportConfig> {
    let mut transport = quinn::TransportConfig::default();
    transport.keep_alive_interval(Some(keep_alive));
    if let Ok(timeout) = quinn::IdleTimeout::try_from(idle_timeout) {
        transport.max_idle_timeout(Some(timeout));
    }
    transport.max_concurrent_bidi_streams(streams.into());
    transport.max_concurrent_uni_streams(0u32.into());
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

/// The scheduler silent this long is gone, as a busy worker judges it; a manager allows its
/// pace on top (`weir_core::lease::manager_silence`: half of this beyond it, never under it),
/// an idle worker its idle beat. Both judge it themselves ([`Heard`]).
pub const IDLE_TIMEOUT: Duration = Duration::from_secs(5);

/// What a client offers as its connection's idle timeout: QUIC takes the shorter of both sides',
/// and the scheduler's (the longest pace it may ask of idle workers plus two heartbeat
/// timeouts, 70 s by default) is longer. It also bounds the handshake, so it must not tie with
/// [`CONNECT_TIMEOUT`]: 8 s made a simulated replica run's trace depend on which of two timers
/// fired first (`tests/sim` replica seed 4).
pub const CLIENT_IDLE_TIMEOUT: Duration = Duration::from_secs(30);

/// What a worker or a manager offers as its connection's idle timeout: a ceiling only. QUIC
/// takes the shorter of the two sides', and the scheduler's outlasts the slowest pace it may
/// ask of idle workers (`weir_core::lease::idle_pace`, up to 60 s; a manager's is at most 30 s)
/// plus two heartbeat timeouts (70 s by default), so a peer that beats at its pace draws no
/// keep-alive. The peer judges the scheduler's silence itself ([`Heard`]).
pub const PEER_IDLE_TIMEOUT: Duration = Duration::from_secs(600);

/// How long a connection attempt waits for the scheduler's handshake.
pub const CONNECT_TIMEOUT: Duration = Duration::from_secs(5);

/// Constant-time comparison of tokens (in their content; their lengths are not secret).
pub fn same_token(a: &[u8], b: &[u8]) -> bool {
    use subtle::ConstantTimeEq;
    bool::from(a.ct_eq(b))
}
