//! The sessions of a worker or a manager with the scheduler: why one ended ([`SessionEnd`]), the
//! signals that stop the process ([`Signals`]), and the loop that reconnects after the scheduler
//! went away ([`reconnecting`]).

use std::convert::Infallible;
use std::fmt;
use std::path::Path;
use std::time::Duration;

use tokio::signal::unix::{SignalKind, signal};
use tokio::time::Instant;

use super::{AccessFile, LinkEnd, NetError};

/// A signal that stops a worker or a manager (or the end of its allocation, which stops it
/// the same way).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Signal {
    Term,
    Int,
    /// `--ends-in` / `--time-left` ran out: the cluster engine ends the allocation soon.
    EndOfAllocation,
    /// The scheduler told it to leave: its manager is gone (the process exits with
    /// [`weir_proto::EXIT_DISMISSED`]).
    Dismissed,
}

impl fmt::Display for Signal {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Signal::Term => "SIGTERM",
            Signal::Int => "SIGINT",
            Signal::EndOfAllocation => "the end of its allocation",
            Signal::Dismissed => "the scheduler (its manager is gone)",
        })
    }
}

/// The stop signals a process listens for. Once a process listens for one, its default action
/// (ending the process) is gone for good: keep listening as long as the process runs.
pub struct Signals {
    term: tokio::signal::unix::Signal,
    int: Option<tokio::signal::unix::Signal>,
}

impl Signals {
    /// SIGTERM only (a worker: its manager, or the operator, stops it).
    pub fn term() -> std::io::Result<Signals> {
        Ok(Signals {
            term: signal(SignalKind::terminate())?,
            int: None,
        })
    }

    /// SIGTERM and SIGINT (a manager run from a terminal stops on Ctrl-C too).
    pub fn term_and_int() -> std::io::Result<Signals> {
        Ok(Signals {
            term: signal(SignalKind::terminate())?,
            int: Some(signal(SignalKind::interrupt())?),
        })
    }

    /// The next stop signal. Cancel-safe.
    pub async fn recv(&mut self) -> Signal {
        let int = async {
            match &mut self.int {
                Some(int) => int.recv().await,
                None => std::future::pending().await,
            }
        };
        tokio::select! {
            _ = self.term.recv() => Signal::Term,
            _ = int => Signal::Int,
        }
    }
}

/// Why one session with the scheduler ended. `E` is what the shell itself may fail with
/// mid-session (a manager that cannot start a worker); none for a worker.
#[derive(Debug, thiserror::Error)]
pub enum SessionEnd<E = Infallible> {
    /// A signal: the process stops, it does not reconnect.
    #[error("stopped by {0}")]
    Stopped(Signal),
    /// The link to the scheduler ended (lost, closed, an undecodable frame): reconnect.
    #[error(transparent)]
    Link(#[from] LinkEnd),
    /// The scheduler said what it must not (`Registered` twice): reconnect.
    #[error("{0}")]
    Protocol(&'static str),
    /// No grant renewed the scheduler's lease in time (the link is cut, or too slow for its
    /// answers to arrive within the lease): this worker gave its tasks up; reconnect.
    #[error("the scheduler's lease ran out (its answers stopped arriving in time)")]
    LeaseExpired,
    /// This side failed: end the session, reconnect, and try again.
    #[error(transparent)]
    Failed(E),
}

/// Run sessions with the scheduler, reconnecting after it goes away: back off from 0.2 s to 5 s,
/// re-read the access file each time (a restarted scheduler may have a new address), and give up
/// `timeout` after the last working session. A session stopped by a signal ends the loop, with
/// that signal. For workers and managers: an access file without their token fails at once.
pub async fn reconnecting<F, Fut, E, S>(
    access_file: &Path,
    timeout: Duration,
    who: &str,
    mut session: F,
) -> Result<Signal, E>
where
    F: FnMut(AccessFile) -> Fut,
    Fut: Future<Output = Result<SessionEnd<S>, E>>,
    E: From<NetError> + fmt::Display,
    S: fmt::Display,
{
    // Listening between sessions too, or a stop request while reconnecting would be lost.
    let mut signals = Signals::term().map_err(NetError::from)?;
    let mut last_ok = Instant::now();
    let mut backoff = Duration::from_millis(200);
    let mut connected_once = false;
    // Waiting is said once, then every 30 s: never silently.
    let mut said: Option<Instant> = None;
    loop {
        let outcome = match AccessFile::read(access_file) {
            // A file without the workers' token (a read-only access file) is refused at every
            // hello: said at once, not after the reconnect timeout.
            Ok(access) if access.worker_token.is_empty() => {
                return Err(NetError::Access(format!(
                    "{} has no worker token (a read-only access file?): a {who} needs the \
                     scheduler's own access file",
                    access_file.display()
                ))
                .into());
            }
            // The session handles SIGTERM itself (closing its connection cleanly); one that
            // arrives while connecting is kept by `signals` and seen below.
            Ok(access) => session(access).await,
            Err(error) => Err(error.into()),
        };
        match outcome {
            Ok(SessionEnd::Stopped(signal)) => return Ok(signal),
            Ok(reason) => {
                tracing::warn!(%reason, "{who}: lost the scheduler; reconnecting");
                connected_once = true;
                said = Some(Instant::now());
                last_ok = Instant::now();
                backoff = Duration::from_millis(200);
            }
            Err(error) if !connected_once && timeout.is_zero() => return Err(error),
            Err(error) => {
                if last_ok.elapsed() > timeout {
                    return Err(NetError::GaveUp {
                        after: timeout,
                        error: error.to_string(),
                    }
                    .into());
                }
                if said.is_none_or(|at| at.elapsed() > Duration::from_secs(30)) {
                    tracing::warn!(%error, "{who}: waiting for the scheduler (up to {timeout:?})");
                    said = Some(Instant::now());
                }
            }
        }
        tokio::select! {
            () = tokio::time::sleep(backoff) => {}
            signal = signals.recv() => return Ok(signal),
        }
        backoff = (backoff * 2).min(Duration::from_secs(5));
    }
}

/// When the scheduler was last heard on a connection: any datagram, as QUIC counts them (the
/// acknowledgement of a beat is enough). A peer that beats at a slow pace offers QUIC a long
/// idle timeout ([`crate::PEER_IDLE_TIMEOUT`], so that its silence between beats draws no
/// keep-alive) and judges the scheduler's silence with this instead, by its own rule: a worker
/// by its lease and beat, a manager by its pace (`weir_core::lease::manager_silence`).
pub struct Heard {
    datagrams: u64,
    at: Instant,
}

impl Heard {
    /// Heard now (the connection is new).
    pub fn new(connection: &quinn::Connection) -> Heard {
        Heard {
            datagrams: connection.stats().udp_rx.datagrams,
            at: Instant::now(),
        }
    }

    /// How long the scheduler has been silent (nothing received since the last call that saw
    /// something new).
    pub fn silent_for(&mut self, connection: &quinn::Connection) -> Duration {
        let now = Instant::now();
        let datagrams = connection.stats().udp_rx.datagrams;
        if datagrams != self.datagrams {
            *self = Heard { datagrams, at: now };
        }
        now.saturating_duration_since(self.at)
    }
}
