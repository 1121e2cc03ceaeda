//! Connecting through an access file, for every client (`weir`, the Python package): at once
//! when the scheduler is there, an error at once when it is known to be gone, and a wait of up
//! to a timeout only while it may be starting or restarting — or, for the callers that say so
//! ([`Patience`]), for one to start or come back.

use std::path::Path;
use std::time::{Duration, Instant};

use super::Client;
use weir_net::access::{Holder, holder};
use weir_net::{AccessFile, NetError};

/// What [`reach_with`] waits for, within its timeout, besides a scheduler that may be starting.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Patience {
    /// Nothing more: a scheduler known to be gone, or never started here, fails at once.
    Running,
    /// A scheduler to start where the access file's is gone or not written yet: `weir workers
    /// wait`, which scripts run beside a scheduler they start.
    Start,
    /// A scheduler that was there a moment ago to come back, whatever its lock says and whatever
    /// fails meanwhile (a restart may follow a crash): a session that lost its connection.
    Restart,
}

/// Connect to the scheduler of the access file at `path`, with [`Patience::Running`].
pub async fn reach(
    path: &Path,
    timeout: Duration,
    waiting: impl FnMut(&NetError),
) -> Result<Client, NetError> {
    reach_with(path, timeout, Patience::Running, waiting).await
}

/// Connect to the scheduler of the access file at `path`.
///
/// - Its lock free and its process gone ([`Holder::Gone`]): [`NetError::NotRunning`] at
///   once, saying why; no access file and no lock either: the access file's error at once.
/// - Otherwise an access file not there yet, or a scheduler that does not answer, is tried
///   again (backoff 50 ms to 2 s, the file re-read: a restarted scheduler may listen
///   elsewhere) until `timeout` has passed; `waiting` hears the first such error, once.
///   Anything else (refused, a damaged file) fails at once.
/// - [`Patience::Start`] waits for a gone scheduler's successor too, [`Patience::Restart`]
///   through every error; both within `timeout`.
pub async fn reach_with(
    path: &Path,
    timeout: Duration,
    patience: Patience,
    mut waiting: impl FnMut(&NetError),
) -> Result<Client, NetError> {
    let started = Instant::now();
    let mut backoff = Duration::from_millis(50);
    let mut told = false;
    loop {
        // Whether the file is there is looked at before it is read: a scheduler that writes it
        // between a failed read and a later look must not turn "not there yet" into an error
        // (CI met that race: `weir workers wait` failed beside a scheduler that had started).
        let present = path.exists();
        let error = match look(AccessFile::read(path), present, holder(path), patience) {
            Look::Fail(error) => return Err(error),
            Look::Wait(error) => error,
            // An attempt after the first takes at most what is left of `timeout` (quinn's own
            // handshake timeout is 5 s: a wait of 12 s must not end at 15). The first is
            // made whole (`timeout` 0 means "do not wait", not "do not try") unless the caller
            // waits for a start: then `timeout` bounds it all.
            Look::Connect(access) => {
                let left = match told || patience == Patience::Start {
                    false => Duration::MAX,
                    true => timeout
                        .saturating_sub(started.elapsed())
                        .max(Duration::from_millis(100)),
                };
                match tokio::time::timeout(left, Client::connect(&access)).await {
                    Ok(Ok(client)) => return Ok(client),
                    Ok(Err(error @ NetError::Connect { .. })) => error,
                    Ok(Err(error)) if patience == Patience::Restart => error,
                    Ok(Err(error)) => return Err(error),
                    Err(_) => NetError::GaveUp {
                        after: started.elapsed(),
                        error: format!("{} did not answer", access.address),
                    },
                }
            }
        };
        if started.elapsed() >= timeout {
            return Err(match started.elapsed().is_zero() || timeout.is_zero() {
                true => error,
                false => NetError::GaveUp {
                    after: started.elapsed(),
                    error: error.to_string(),
                },
            });
        }
        if !told {
            waiting(&error);
            told = true;
        }
        // The last attempt is made at the deadline, not a backoff before it.
        tokio::time::sleep(backoff.min(timeout.saturating_sub(started.elapsed()))).await;
        // A scheduler starting is looked for often (a script waits on it); one restarting
        // after a crash less.
        let most = match patience {
            Patience::Start => Duration::from_millis(250),
            _ => Duration::from_secs(2),
        };
        backoff = (backoff * 2).min(most);
    }
}

/// What one look at the access file (`read`; `present`: whether it existed just before it was
/// read) and its lock says to do, before any connection is tried.
#[derive(Debug)]
enum Look {
    Connect(AccessFile),
    /// Try again after a backoff (within the timeout), with this error if time runs out.
    Wait(NetError),
    Fail(NetError),
}

fn look(
    read: Result<AccessFile, NetError>,
    present: bool,
    holder: Holder,
    patience: Patience,
) -> Look {
    let wait_for_start = patience != Patience::Running;
    // With scheduler replicas, the one that wrote the file being gone says nothing of the
    // others: one of them leads now, perhaps.
    let holder = match (&read, holder) {
        (Ok(access), Holder::Gone(_)) if !access.replicas.is_empty() => Holder::Unknown,
        (_, holder) => holder,
    };
    match (read, holder) {
        (_, Holder::Gone(reason)) if wait_for_start => Look::Wait(NetError::NotRunning(reason)),
        // No file and no scheduler holding its lock: the file's error says where it looked.
        (Err(error), Holder::Gone(_)) => Look::Fail(error),
        (Ok(_), Holder::Gone(reason)) => Look::Fail(NetError::NotRunning(reason)),
        (Ok(access), _) => Look::Connect(access),
        // Not there yet: a scheduler that holds its lock is about to write it.
        (Err(error), _) if !present || patience == Patience::Restart => Look::Wait(error),
        // There, and unreadable or damaged.
        (Err(error), _) => Look::Fail(error),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn missing() -> Result<AccessFile, NetError> {
        Err(NetError::Access(
            "cannot read the access file: No such file".into(),
        ))
    }

    /// The race CI met: the file was missing when read and written before the lock was looked
    /// at (the lock now names a live scheduler). Every patience waits and reads it again.
    /// The replica that wrote the file is gone: the others are tried.
    #[test]
    fn a_file_of_replicas_is_tried_whoever_wrote_it() {
        let access = AccessFile {
            address: "quic://127.0.0.1:1".into(),
            certificate: String::new(),
            worker_token: String::new(),
            client_token: String::new(),
            replicas: vec!["quic://127.0.0.1:1".into(), "quic://127.0.0.1:2".into()],
            ..Default::default()
        };
        let gone = Holder::Gone("gone".into());
        let look = look(Ok(access.clone()), true, gone.clone(), Patience::Running);
        assert!(matches!(look, Look::Connect(_)), "{look:?}");
        let single = AccessFile {
            replicas: Vec::new(),
            ..access
        };
        let look = super::look(Ok(single), true, gone, Patience::Running);
        assert!(
            matches!(look, Look::Fail(NetError::NotRunning(_))),
            "{look:?}"
        );
    }

    #[test]
    fn a_file_written_between_the_read_and_the_lock_is_waited_for() {
        for patience in [Patience::Running, Patience::Start, Patience::Restart] {
            let look = look(missing(), false, Holder::Unknown, patience);
            assert!(matches!(look, Look::Wait(_)), "{patience:?}: {look:?}");
        }
    }

    #[test]
    fn a_file_there_but_unreadable_fails_at_once_unless_restarting() {
        for (patience, waits) in [
            (Patience::Running, false),
            (Patience::Start, false),
            (Patience::Restart, true),
        ] {
            let look = look(missing(), true, Holder::Held, patience);
            assert_eq!(
                matches!(look, Look::Wait(_)),
                waits,
                "{patience:?}: {look:?}"
            );
        }
    }

    #[test]
    fn a_gone_scheduler_fails_at_once_unless_its_successor_is_awaited() {
        let gone = || Holder::Gone("gone".into());
        assert!(matches!(
            look(missing(), false, gone(), Patience::Running),
            Look::Fail(NetError::Access(_))
        ));
        for patience in [Patience::Start, Patience::Restart] {
            assert!(matches!(
                look(missing(), false, gone(), patience),
                Look::Wait(NetError::NotRunning(_))
            ));
        }
    }
}
