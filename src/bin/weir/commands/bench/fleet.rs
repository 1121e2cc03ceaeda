//! The simulated peers of `weir bench --simulated-workers`: workers and managers as tasks of
//! this process, one real QUIC connection each, saying what real ones say (hello,
//! registration, a verdict, beats at the scheduler's pace, outcomes answered at once).

use std::sync::Arc;
use std::time::Duration;

use anyhow::{Context, Result, bail};
use tokio::sync::{Semaphore, watch};
use tokio::task::JoinSet;
use weir::net::{self, AccessFile, Link};
use weir::proto::{
    EnvVerdict, FromManager, FromWorker, ManagerState, Outcome, Role, ToManager, ToWorker,
    WorkerRegistration,
};

use super::simulated::REGISTER_LIMIT;

/// Connections opened at once while the simulated cluster comes up.
const CONNECTING: usize = 128;

/// Connections per client endpoint (UDP socket) of this process: few enough that a socket's
/// default receive queue (~200 KiB) holds what its peers are sent in a burst.
const PER_ENDPOINT: usize = 100;

/// How often each simulated manager heartbeats: a real one's default (`worker-manager
/// --heartbeat-interval`). A simulated worker beats as the scheduler asks of an idle one.
const HEARTBEAT: Duration = Duration::from_millis(500);

/// The simulated workers and managers: tasks of this process, one per connection.
pub(super) struct Fleet {
    tasks: JoinSet<Result<()>>,
    /// Every peer's connection, for what crossed the wire (quinn counts it per connection).
    connections: Connections,
}

impl Fleet {
    /// Connect `workers` workers spread over `managers` managers; returns once every connection
    /// said hello and registered, or fails at `deadline`.
    pub(super) async fn start(
        access: &AccessFile,
        workers: u32,
        managers: u32,
        stop: watch::Receiver<bool>,
        deadline: tokio::time::Instant,
    ) -> Result<Fleet> {
        let endpoints = ((workers + managers) as usize)
            .div_ceil(PER_ENDPOINT)
            .max(1);
        let endpoints: Vec<quinn::Endpoint> = (0..endpoints)
            .map(|_| net::client_endpoint(access, net::PEER_IDLE_TIMEOUT))
            .collect::<Result<_, _>>()?;
        let gate = Arc::new(Semaphore::new(CONNECTING));
        let access = Arc::new(access.clone());
        let mut tasks = JoinSet::new();
        let (ready, mut readied) = tokio::sync::mpsc::unbounded_channel();
        let per_manager = workers.div_ceil(managers);
        let connections = Connections::default();
        let peer = |n: u32| Peer {
            connections: connections.clone(),
            endpoint: endpoints[n as usize % endpoints.len()].clone(),
            access: access.clone(),
            gate: gate.clone(),
            ready: ready.clone(),
            stop: stop.clone(),
        };
        for m in 0..managers {
            let names: Vec<String> = (0..per_manager)
                .map(|i| m * per_manager + i)
                .filter(|i| *i < workers)
                .map(|i| format!("sim-{i}"))
                .collect();
            tasks.spawn(manager(peer(m), format!("sim-manager-{m}"), names));
        }
        for i in 0..workers {
            let manager = format!("sim-manager-{}", i / per_manager);
            tasks.spawn(worker(peer(managers + i), format!("sim-{i}"), manager));
        }
        drop(ready);
        let mut up = 0;
        while up < workers + managers {
            tokio::select! {
                Some(()) = readied.recv() => up += 1,
                Some(ended) = tasks.join_next() => {
                    ended
                        .context("a simulated peer panicked")?
                        .with_context(|| format!("a simulated peer, with {up} of {} up", workers + managers))?;
                    bail!("a simulated peer ended before the cluster was up");
                }
                () = tokio::time::sleep_until(deadline) => bail!(
                    "only {up} of {} simulated peers had registered {} s after the start",
                    workers + managers,
                    REGISTER_LIMIT.as_secs()
                ),
            }
        }
        Ok(Fleet { tasks, connections })
    }

    pub(super) async fn stop(mut self) {
        while let Some(ended) = self.tasks.join_next().await {
            if let Ok(Err(error)) = ended {
                tracing::debug!(%error, "simulated peer");
            }
        }
    }
}

/// The simulated peers' connections.
type Connections = Arc<std::sync::Mutex<Vec<quinn::Connection>>>;

impl Fleet {
    /// UDP datagrams and bytes the peers sent and received so far, all together (QUIC's own
    /// packets included: handshakes, acknowledgements, keep-alives).
    pub(super) fn traffic(&self) -> (u64, u64) {
        let Ok(all) = self.connections.lock() else {
            return (0, 0);
        };
        all.iter().fold((0, 0), |(datagrams, bytes), c| {
            let stats = c.stats();
            (
                datagrams + stats.udp_tx.datagrams + stats.udp_rx.datagrams,
                bytes + stats.udp_tx.bytes + stats.udp_rx.bytes,
            )
        })
    }
}

/// What each simulated peer shares: its endpoint, the access file, the gate that limits
/// connections opened at once, where it says it is up, and the stop.
struct Peer {
    connections: Connections,
    endpoint: quinn::Endpoint,
    access: Arc<AccessFile>,
    gate: Arc<Semaphore>,
    ready: tokio::sync::mpsc::UnboundedSender<()>,
    stop: watch::Receiver<bool>,
}

impl Peer {
    /// Connect as `role` (at most [`CONNECTING`] peers at once; the permit is held until the
    /// peer has registered).
    async fn connect(
        &self,
        role: Role,
    ) -> Result<(
        tokio::sync::OwnedSemaphorePermit,
        quinn::Connection,
        quinn::SendStream,
        quinn::RecvStream,
    )> {
        let permit = self.gate.clone().acquire_owned().await?;
        let (connection, send, recv) = connect(&self.endpoint, &self.access, role).await?;
        if let Ok(mut all) = self.connections.lock() {
            all.push(connection.clone());
        }
        Ok((permit, connection, send, recv))
    }
}

/// A worker that runs nothing: every task handed over is reported returned at once.
async fn worker(peer: Peer, name: String, manager: String) -> Result<()> {
    let (permit, connection, send, recv) = peer.connect(Role::Worker).await?;
    let Peer {
        ready, mut stop, ..
    } = peer;
    let (mut link, outgoing) = Link::<ToWorker>::open(send, recv);
    let info = WorkerRegistration {
        name,
        slots: 1,
        capabilities: vec![],
        worker_type: "default".into(),
        manager: Some(manager),
        local_environments: vec!["simulated".into()],
        running: vec![],
        instance: getrandom::u64()
            .map_err(|e| anyhow::anyhow!("no randomness for the instance: {e}"))?,
        ends_in_ms: None,
        finished: vec![],
    };
    let _ = outgoing.send(FromWorker::Register(Box::new(info)));
    let mut beat = match link.next().await? {
        ToWorker::Registered { idle_beat_ms, .. } => Duration::from_millis(idle_beat_ms.max(10)),
        other => bail!("expected Registered, got {other:?}"),
    };
    let _ = outgoing.send(FromWorker::Verdicts(vec![(
        "simulated".into(),
        EnvVerdict::Match,
    )]));
    drop(permit);
    let _ = ready.send(());
    let mut heartbeat = tokio::time::interval(beat);
    let mut last_beat = tokio::time::Instant::now();
    let mut seq = 0;
    loop {
        tokio::select! {
            _ = stop.changed() => break,
            at = heartbeat.tick() => {
                last_beat = at;
                seq += 1;
                let _ = outgoing.send(FromWorker::Renew { seq });
            }
            message = link.next() => match message? {
                ToWorker::Run(assignments) => {
                    let done = assignments
                        .into_iter()
                        .map(|a| (a.task, Outcome::Returned { output: Vec::new() }))
                        .collect();
                    let _ = outgoing.send(FromWorker::Finished(done));
                }
                ToWorker::Revoke { .. } => { let _ = outgoing.send(FromWorker::Revoked(Vec::new())); }
                // The pace follows the cluster's size (`lease::idle_pace`): the next beat goes
                // at the new one after the last (as a real worker's: a longer pace told while a
                // loaded scheduler is slow to answer must not stretch the silence further).
                ToWorker::Lease { idle_beat_ms, .. } if idle_beat_ms.max(10) != beat.as_millis() as u64 => {
                    beat = Duration::from_millis(idle_beat_ms.max(10));
                    heartbeat = tokio::time::interval_at(last_beat + beat, beat);
                }
                _ => {}
            },
        }
    }
    connection.close(0u32.into(), b"bench over");
    Ok(())
}

/// A worker manager that lists its simulated workers and ignores what it is told: a fixed pool,
/// so the policy does not ask it to stop idle workers (a dynamic manager that ignored the stops
/// would have its workers drained and taken back into service over and over, which is not what
/// an idle cluster costs).
async fn manager(peer: Peer, id: String, workers: Vec<String>) -> Result<()> {
    let (permit, connection, send, recv) = peer.connect(Role::Manager).await?;
    let Peer {
        ready, mut stop, ..
    } = peer;
    let (mut link, outgoing) = Link::<ToManager>::open(send, recv);
    let max = workers.len() as u32;
    let state = ManagerState {
        labels: Vec::new(),
        id,
        worker_type: "default".into(),
        max_task_concurrency: max,
        worker_slots: 1,
        capabilities: vec![],
        workers,
        environments: vec![],
        fixed: Some(max),
        exited: vec![],
        backend: String::new(),
        units: vec![],
        usable_ms: None,
        instances: vec![],
        launch: Default::default(),
    };
    drop(permit);
    let _ = ready.send(());
    // As a real manager reports: on change (never, here) and at the scheduler's pace.
    let mut reports = weir::manager::pace::Reports::new(HEARTBEAT);
    let mut heartbeat = tokio::time::interval(HEARTBEAT);
    loop {
        tokio::select! {
            _ = stop.changed() => break,
            _ = heartbeat.tick() => {
                if let Some(state) = reports.due(tokio::time::Instant::now(), state.clone()) {
                    let _ = outgoing.send(FromManager::Heartbeat(Box::new(state)));
                }
            }
            message = link.next() => {
                if let ToManager::Pace { beat_ms } = message? {
                    reports.pace(Duration::from_millis(beat_ms));
                }
            }
        }
    }
    connection.close(0u32.into(), b"bench over");
    Ok(())
}

/// Connect, trying again (as a real peer does) while the scheduler is swamped by the others'
/// handshakes.
async fn connect(
    endpoint: &quinn::Endpoint,
    access: &AccessFile,
    role: Role,
) -> Result<(quinn::Connection, quinn::SendStream, quinn::RecvStream)> {
    super::tried_again("simulated peer", || async {
        Ok(net::connect_on(endpoint, access, role).await?)
    })
    .await
}
