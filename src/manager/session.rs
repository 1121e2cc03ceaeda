//! A manager's sessions with the scheduler (heartbeats out, desired counts in), the loop that
//! reconnects between them, and fixed mode inside a unit of the command backend (no scheduler).

use std::path::Path;
use std::time::Duration;

use super::{Backend, ManagerError, Pool};
use crate::net::{self, AccessFile, Link, NetError, SessionEnd, Signal, Signals};
use crate::proto::{FromManager, Role, ToManager};

/// Run a manager until a signal stops it (which is returned), or the scheduler stays away for
/// longer than `reconnect`: sessions with the scheduler, reconnecting between them. A fixed pool
/// starts its workers at once, before the scheduler answers. Its workers are stopped when it
/// ends, unless a signal stopped a manager that leaves them running (`--on-stop leave`).
pub async fn run(
    access_file: &Path,
    reconnect: Duration,
    mut backend: Backend,
) -> Result<Signal, ManagerError> {
    if let Some(n) = backend.settings().fixed {
        backend.apply(n, &[], &[]).await?;
    }
    // A restarted manager adopts the batch jobs it left running, so its first heartbeat lists
    // their workers.
    if let Backend::Slurm(jobs) = &mut backend {
        jobs.poll().await;
    }
    let pool = std::sync::Arc::new(tokio::sync::Mutex::new(backend));
    let ended = net::reconnecting(access_file, reconnect, "worker manager", |access| {
        let pool = pool.clone();
        async move { run_dynamic(&access, &mut *pool.lock().await).await }
    })
    .await;
    let mut backend = pool.lock().await;
    if ended.is_ok() && backend.leaves_on_stop() {
        backend.leave().await;
    } else {
        backend.stop_all().await;
    }
    ended
}

/// One session with the scheduler, until it goes away or a signal stops the manager. Returns
/// why it ended; on a signal the manager says goodbye and stops its workers, otherwise they keep
/// running (and reconnect by themselves) while the caller reconnects. A fixed pool takes the
/// same path: it reports, heals, and ignores desired counts.
pub async fn run_dynamic(
    access: &AccessFile,
    pool: &mut Backend,
) -> Result<SessionEnd<ManagerError>, ManagerError> {
    // A long idle timeout: between reports at a slow pace nothing is said, and the scheduler's
    // silence is judged here, by the pace ([`super::pace::Reports::silence_limit`]).
    let (endpoint, connection, send, recv) = net::connect_with(
        &*pool.settings().seams.udp,
        access,
        Role::Manager,
        net::PEER_IDLE_TIMEOUT,
    )
    .await?;
    let mut heard = net::Heard::new(&connection);
    let interval = pool.settings().heartbeat_interval;
    let (mut link, outgoing) = Link::<ToManager>::open(send, recv);
    let mut reports = super::pace::Reports::new(interval);
    let report = |reports: &mut super::pace::Reports, state| {
        // A writer that ended refuses this; `link.next()` says why it ended.
        if let Some(state) = reports.due(tokio::time::Instant::now(), state) {
            let _ = outgoing.send(FromManager::Heartbeat(Box::new(state)));
        }
    };
    report(&mut reports, pool.state());
    let mut ticker = tokio::time::interval(interval);
    let mut signals = Signals::term_and_int().map_err(NetError::from)?;
    // Nothing is started or stopped before the scheduler has said what it wants in this
    // session (a fixed pool knows already): a scheduler that just restarted has not seen the
    // workers yet, and they are busy with tasks they will claim.
    let mut desired: Option<u32> = pool.settings().fixed;
    let mut registered: Vec<String> = Vec::new();
    let end = loop {
        tokio::select! {
            message = link.next() => match message {
                Ok(ToManager::Desired { desired: wanted, stop, registered: known, reason, instances }) => {
                    if Some(wanted) != desired || !stop.is_empty() {
                        tracing::info!(desired = wanted, stop = stop.len(), %reason, "scaling");
                    }
                    desired = Some(wanted);
                    registered = known;
                    let stop = pool.stops_of_mine(stop, &instances);
                    if let Err(error) = pool.apply(wanted, &stop, &registered).await {
                        break SessionEnd::Failed(error);
                    }
                    report(&mut reports, pool.state());
                }
                Ok(ToManager::Pace { beat_ms }) => {
                    reports.pace(Duration::from_millis(beat_ms));
                    tracing::info!(
                        pace = ?reports.every(),
                        silence_limit = ?reports.silence_limit(),
                        "reporting at the scheduler's pace"
                    );
                }
                Err(end) => break SessionEnd::Link(end),
            },
            signal = signals.recv() => break SessionEnd::Stopped(signal),
            _ = ticker.tick() => {
                // Replace workers that died (or units that never came up); report.
                if let Some(desired) = desired
                    && let Err(error) = pool.apply(desired, &[], &registered).await
                {
                    break SessionEnd::Failed(error);
                }
                report(&mut reports, pool.state());
                let silent = heard.silent_for(&connection);
                if silent > reports.silence_limit() {
                    tracing::warn!(?silent, "the scheduler has been silent too long: connecting again");
                    // The link ends with it, and the loop with the link.
                    connection.close(0u32.into(), b"scheduler silent");
                }
            }
        }
    };
    if let SessionEnd::Stopped(_) = end
        && pool.leaves_on_stop()
    {
        // No goodbye: a goodbye makes the scheduler forget this manager, and then nobody would
        // tell the workers of the jobs left running to leave should no manager come back. The
        // close is a disconnection: it keeps them, and the next manager with this id adopts them.
        drop(outgoing);
        drop(link);
        net::close_stopping(&endpoint, &connection, "manager stopping; its units run on").await;
    } else if let SessionEnd::Stopped(_) = end {
        // Goodbye first, so the scheduler forgets this manager at once; it closes the
        // connection when it has read it.
        let _ = outgoing.send(FromManager::Goodbye);
        drop(outgoing);
        let _ = tokio::time::timeout(Duration::from_secs(2), link.finished()).await;
        let _ = tokio::time::timeout(Duration::from_secs(2), connection.closed()).await;
        pool.stop_all().await;
        net::close_stopping(&endpoint, &connection, "manager stopping").await;
    } else {
        drop(link);
        // The stream may end before the close that says why arrives: wait for it (briefly).
        if let SessionEnd::Link(_) = end {
            let _ = tokio::time::timeout(Duration::from_secs(2), connection.closed()).await;
        }
        if let Some(quinn::ConnectionError::ApplicationClosed(close)) = connection.close_reason()
            && close.error_code == net::CLOSE_ID_TAKEN
        {
            // Another process holds this id: nothing was started in this session; tried again
            // (a restarted manager waits for its predecessor's connection to time out), and
            // the reconnecting loop says why (once, then every 30 s).
            let reason = String::from_utf8_lossy(&close.reason).into_owned();
            return Err(NetError::Refused(reason).into());
        }
        connection.close(0u32.into(), b"manager stopping");
    }
    Ok(end)
}

/// Fixed mode inside a unit: keep the workers alive until a signal, or until the allocation
/// ends (`--time-left`, less `--leave-before`): then its workers leave (they know the moment
/// too) and so does the unit, so the cluster engine's job ends and the manager that started it
/// replaces it if still wanted. (That manager reports the workers to the scheduler.)
pub async fn run_unit(mut pool: Pool) -> Result<Signal, ManagerError> {
    let mut signals = Signals::term_and_int().map_err(NetError::from)?;
    let mut ticker = tokio::time::interval(pool.settings.heartbeat_interval);
    let end = pool.settings.ends_at;
    let signal = loop {
        tokio::select! {
            _ = ticker.tick() => {
                pool.converge(0, &[], &[])?;
                if pool.dismissed {
                    // The manager that started this unit is gone: end it (its job ends).
                    break Signal::Dismissed;
                }
            }
            signal = signals.recv() => break signal,
            () = async { match end {
                Some(at) => tokio::time::sleep_until(at).await,
                None => std::future::pending().await,
            } } => break Signal::EndOfAllocation,
        }
    };
    pool.stop_all().await;
    Ok(signal)
}
