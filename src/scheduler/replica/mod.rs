//! Scheduler replicas (`scheduler --replica ID --peers ...`): three or five schedulers, one of
//! which leads, on openraft (the stable 0.9 line).
//!
//! - The journal is the replicated log: each actor round's records are one entry (a [`Batch`];
//!   split when large), the state machine keeps them (`state_machine.rs`), a snapshot is their
//!   compacted image, and the log is a checksummed file per replica (`log_store.rs`). Raft's
//!   messages go over QUIC on the scheduler's own endpoint (`network.rs`).
//! - Only the leader serves. Its actor is the single scheduler's, with one difference: what a
//!   round sends out (frames to workers and managers, replies) is held until the round's records
//!   are committed by a majority, or, with nothing to commit, until a majority confirmed the
//!   lead after the round's events arrived ([`Replica::commit`]). So an acknowledged request is
//!   on a majority's disk, and a deposed leader grants no lease a new leader does not know of.
//! - A replica that comes to lead builds its core from the state machine once every entry of its
//!   log is applied, exactly as a restarted scheduler replays its journal: workers claim their
//!   running tasks when they register, and unclaimed ones wait out the fence.
//!
//! See RELIABILITY.md ("Scheduler replicas") for the arithmetic that makes a failover safe.

mod batch;
mod log_store;
mod membership;
mod network;
mod runtime;
mod state_machine;

use std::collections::{BTreeMap, BTreeSet};
use std::io::Cursor;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use openraft::{BasicNode, Raft, ServerState, SnapshotPolicy};

use crate::core::scheduler::Config;
use crate::net::AccessFile;
use crate::scheduler::journal::JournalStore;
pub(crate) use batch::{Batch, Batches};
pub(crate) use network::serve;
pub use runtime::seed_elections;
pub(crate) use state_machine::decode;

pub(crate) type NodeId = u64;

openraft::declare_raft_types!(
    /// weir's Raft: batches of journal records on `u64` replica ids.
    pub(crate) TypeConfig:
        D = Batch,
        R = (),
        NodeId = NodeId,
        Node = BasicNode,
        Entry = openraft::Entry<TypeConfig>,
        SnapshotData = Cursor<Vec<u8>>,
        AsyncRuntime = runtime::Runtime,
);

/// `scheduler --replica ID --peers ...`.
#[derive(Clone, Debug)]
pub struct ReplicaSettings {
    pub id: NodeId,
    /// Every replica's id and `quic://HOST:PORT` (this one's included).
    pub peers: BTreeMap<NodeId, String>,
    /// The Raft log's file; the snapshot is kept beside it (`FILE.snapshot`).
    pub log: PathBuf,
    /// Raft's election timeout T (see [`raft_config`]).
    pub election: Duration,
    /// Added to a running cluster (`weir replicas add`): it never forms one itself.
    pub join: bool,
}

/// Form the cluster of `peers` unless a leader reaches this replica within `wait`.
async fn form(raft: Raft<TypeConfig>, peers: BTreeMap<NodeId, String>, wait: Duration) {
    let mut metrics = raft.metrics();
    let reached = tokio::time::timeout(wait, async {
        while metrics.borrow_and_update().current_leader.is_none() {
            if metrics.changed().await.is_err() {
                return;
            }
        }
    })
    .await;
    if reached.is_ok() || raft.is_initialized().await.unwrap_or(true) {
        return;
    }
    let members: BTreeMap<NodeId, BasicNode> = peers
        .iter()
        .map(|(id, address)| (*id, BasicNode::new(address)))
        .collect();
    tracing::info!(?members, "forming the replica cluster");
    if let Err(error) = raft.initialize(members).await {
        tracing::warn!(%error, "cannot form the replica cluster");
    }
}

/// The timings openraft gets from the election timeout `T` (`--election-timeout`, see
/// RELIABILITY.md "Scheduler replicas"): heartbeats every T/3, which is also how long one
/// AppendEntries may take (openraft's rule: an entry of a 48 MiB submission must reach a
/// follower and be synced within it); a follower that has heard no leader for its lease (3T/4)
/// plus a random T/2..3T/4 stands for election. So a lost leader is replaced 1.25T–1.5T after
/// its last heartbeat, plus one election round trip.
fn raft_config(election: Duration) -> Result<openraft::Config, String> {
    let ms = u64::try_from(election.as_millis())
        .unwrap_or(u64::MAX)
        .max(100);
    openraft::Config {
        cluster_name: "weir".into(),
        heartbeat_interval: (ms / 3).max(20),
        election_timeout_min: ms / 2,
        election_timeout_max: ms * 3 / 4,
        // Each entry is at most a few MiB of records (see `Batches`) unless one request is
        // bigger: two per message.
        max_payload_entries: 2,
        snapshot_policy: SnapshotPolicy::LogsSinceLast(2_000),
        max_in_snapshot_log_to_keep: 200,
        install_snapshot_timeout: 10_000,
        ..Default::default()
    }
    .validate()
    .map_err(|e| e.to_string())
}

/// This replica's Raft node and what the scheduler asks of it.
pub(crate) struct Replica {
    pub raft: Raft<TypeConfig>,
    pub id: NodeId,
    pub peers: BTreeMap<NodeId, String>,
    state: state_machine::StateMachine,
    /// How long a round waits for its commit (or the confirmation of the lead) before this
    /// replica stops leading.
    pub patience: Duration,
    /// What replicas present to each other ([`token`]).
    pub token: String,
    /// Raft and replays run on the scheduler's runtime ([`ReplicaSeams::inline`]).
    pub inline: bool,
    pub on_lead: Option<LeadHook>,
}

/// The token replicas present to each other (see [`crate::net::access::replica_token`]).
pub(crate) fn token(key_pem: &str) -> String {
    crate::net::access::replica_token(key_pem)
}

/// Where a replica keeps its log and snapshot instead of files (a simulation's disks).
#[derive(Debug)]
pub struct ReplicaStores {
    pub log: Box<dyn JournalStore>,
    pub snapshot: Box<dyn JournalStore>,
}

/// What a simulated cluster puts in place of a replica's outside world (see
/// [`super::Seams`]); the default is the host's.
#[derive(Debug, Default)]
pub struct ReplicaSeams {
    /// Where the log and snapshot are kept instead of files (`None`: the files).
    pub stores: Option<ReplicaStores>,
    /// A simulated replica: Raft, and a new leader's replay, run on the scheduler's own
    /// runtime (a simulated host's, on simulated time), not on a thread of their own; and its
    /// access file is not rewritten on membership changes.
    pub inline: bool,
    /// Told each time this replica starts to serve a term (a simulation judges that leaders
    /// take over in (term, replica) order with it).
    pub on_lead: Option<LeadHook>,
}

/// `(replica, term)` each time a replica's actor starts to serve a term.
#[derive(Clone)]
pub struct LeadHook(pub Arc<dyn Fn(NodeId, u64) + Send + Sync>);

impl std::fmt::Debug for LeadHook {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("LeadHook")
    }
}

impl Replica {
    /// Open the log and snapshot, start the Raft node, and form the cluster if this replica has
    /// never been part of one (every replica may do so with the same peers).
    pub(crate) async fn start(
        settings: &ReplicaSettings,
        config: Config,
        endpoint: Box<dyn FnOnce() -> Result<quinn::Endpoint, crate::net::NetError> + Send>,
        access: Arc<AccessFile>,
        token: String,
        seams: ReplicaSeams,
    ) -> Result<Replica, String> {
        let mut snapshot_path = settings.log.clone().into_os_string();
        snapshot_path.push(".snapshot");
        let snapshot_path = PathBuf::from(snapshot_path);
        let (log, state) = match seams.stores {
            Some(stores) => (
                log_store::LogStore::open_in(&settings.log, stores.log),
                state_machine::StateMachine::open_in(&snapshot_path, stores.snapshot, config),
            ),
            None => (
                log_store::LogStore::open(&settings.log),
                state_machine::StateMachine::open(&snapshot_path, config),
            ),
        };
        let (log, state) = (
            log.map_err(|e| e.to_string())?,
            state.map_err(|e| e.to_string())?,
        );
        let (id, election, sm) = (settings.id, settings.election, state.clone());
        let join = settings.join;
        let peers = settings.peers.clone();
        let sent = token.clone();
        let starting = async move {
            let endpoint = endpoint().map_err(|e| e.to_string())?;
            let network = network::Network {
                endpoint,
                access,
                token: sent,
                connections: Default::default(),
            };
            let raft = Raft::new(id, Arc::new(raft_config(election)?), network, log, sm)
                .await
                .map_err(|e| format!("cannot start the replica: {e}"))?;
            let initialized = raft
                .is_initialized()
                .await
                .map_err(|e| format!("cannot start the replica: {e}"))?;
            // The replica with the lowest id forms the cluster, once: if no leader has
            // reached it within a few election timeouts (a cluster that runs would have:
            // it is a member), it starts one. The others wait to be reached. (Every replica
            // forming it at once is allowed by Raft, but their elections then unseat each
            // other for a while.)
            if !initialized && !join && peers.keys().next() == Some(&id) {
                tokio::spawn(form(raft.clone(), peers, 3 * election));
            }
            Ok::<_, String>(raft)
        };
        let raft = match seams.inline {
            true => starting.await?,
            // Raft runs on a thread of its own, with the endpoint it sends from: a leader's
            // heartbeats go out on time however long the actor's rounds take on the
            // scheduler's thread (late ones would make the followers elect another leader).
            false => {
                let runtime = tokio::runtime::Builder::new_multi_thread()
                    .worker_threads(1)
                    .thread_name("weir-raft")
                    .enable_all()
                    .build()
                    .map_err(|e| format!("cannot start the replica's thread: {e}"))?;
                // It lives as long as the process (a runtime may not be dropped on another's
                // thread).
                let runtime: &'static tokio::runtime::Runtime = Box::leak(Box::new(runtime));
                runtime
                    .spawn(starting)
                    .await
                    .map_err(|e| format!("cannot start the replica: {e}"))??
            }
        };
        Ok(Replica {
            raft,
            id: settings.id,
            peers: settings.peers.clone(),
            state,
            patience: (4 * settings.election).max(Duration::from_secs(2)),
            token,
            inline: seams.inline,
            on_lead: seams.on_lead,
        })
    }

    /// Whether this replica's Raft has stopped for good (it panicked or was shut down): the
    /// scheduler then exits rather than wait to lead.
    pub(crate) fn stopped(&self) -> bool {
        self.raft.metrics().borrow().running_state.is_err()
    }

    /// The leader's address as this replica knows it (`None`: no leader known, or this one).
    pub(crate) fn leader(&self) -> Option<String> {
        let metrics = self.raft.metrics();
        let metrics = metrics.borrow();
        let leader = metrics.current_leader?;
        if leader == self.id {
            return None;
        }
        metrics
            .membership_config
            .membership()
            .get_node(&leader)
            .map(|node| node.addr.clone())
            .or_else(|| self.peers.get(&leader).cloned())
    }

    /// Wait until this replica leads with every entry of its log applied, and return its term
    /// and the records to replay: the state of every committed request. Nothing the last term
    /// (of any leader) proposed can commit after this without being in them: a leader's log
    /// grows only by what it proposes, and this one proposed nothing yet.
    /// An error once this replica's Raft has stopped for good.
    pub(crate) async fn lead(&self) -> Result<(u64, Vec<Batch>), String> {
        let mut metrics = self.raft.metrics();
        loop {
            let ready = {
                let m = metrics.borrow_and_update();
                let applied = m.last_applied.map(|id| id.index);
                (m.state == ServerState::Leader
                    && m.last_log_index.is_some()
                    && applied >= m.last_log_index
                    && self.state.applied() >= m.last_log_index)
                    .then_some(m.current_term)
            };
            if let Some(term) = ready {
                return self.state.records().map(|records| (term, records));
            }
            if metrics.changed().await.is_err() || self.stopped() {
                return Err("this replica's Raft stopped (see the error above)".into());
            }
        }
    }

    /// Resolves once this replica no longer leads in `term`.
    pub(crate) async fn deposed(&self, term: u64) {
        let mut metrics = self.raft.metrics();
        loop {
            {
                let m = metrics.borrow_and_update();
                if m.state != ServerState::Leader || m.current_term != term {
                    return;
                }
            }
            if metrics.changed().await.is_err() {
                return;
            }
        }
    }

    /// Commit a round's entries (a majority has them on disk), or with none, confirm this
    /// replica still leads: a majority answered heartbeats sent after this call. Within
    /// [`Replica::patience`], else an error (the round's outputs are then never sent).
    pub(crate) async fn commit(&self, batches: Vec<Batch>) -> Result<(), String> {
        let work = async {
            if batches.is_empty() {
                // A confirmation that fails (a follower slow to answer one heartbeat) is tried
                // again until the patience runs out, unless another replica leads.
                loop {
                    match self.raft.ensure_linearizable().await {
                        Ok(_) => return Ok(()),
                        Err(openraft::error::RaftError::APIError(
                            openraft::error::CheckIsLeaderError::QuorumNotEnough(_),
                        )) => tokio::time::sleep(Duration::from_millis(20)).await,
                        Err(error) => return Err(error.to_string()),
                    }
                }
            }
            let mut waiting = Vec::new();
            for batch in batches {
                let answer = self
                    .raft
                    .client_write_ff(batch)
                    .await
                    .map_err(|e| e.to_string())?;
                waiting.push(answer);
            }
            for answer in waiting {
                answer
                    .await
                    .map_err(|_| "the replica stopped".to_string())?
                    .map_err(|e| e.to_string())?;
            }
            Ok(())
        };
        match tokio::time::timeout(self.patience, work).await {
            Ok(result) => result,
            Err(_) => Err(format!(
                "no majority of replicas answered within {:?}",
                self.patience
            )),
        }
    }

    /// The replicas as this one sees them (`weir replicas`): on the leader, how far each is.
    pub(crate) fn status(&self) -> Vec<crate::proto::ReplicaStatus> {
        let metrics = self.raft.metrics();
        let m = metrics.borrow();
        let membership = m.membership_config.membership();
        let voters: BTreeSet<NodeId> = membership.voter_ids().collect();
        let matched = m.replication.clone().unwrap_or_default();
        let last = m.last_log_index;
        membership
            .nodes()
            .map(|(id, node)| {
                let matched = match *id == self.id {
                    true => last,
                    false => matched.get(id).and_then(|m| m.map(|id| id.index)),
                };
                crate::proto::ReplicaStatus {
                    id: *id,
                    address: node.addr.clone(),
                    leader: m.current_leader == Some(*id),
                    voter: voters.contains(id),
                    term: m.current_term,
                    matched,
                    lag: last
                        .zip(matched)
                        .map(|(last, matched)| last.saturating_sub(matched)),
                }
            })
            .collect()
    }
}

/// Parse `--peers 1=quic://10.0.0.1:7400,2=quic://...`.
pub fn parse_peers(text: &str) -> Result<BTreeMap<NodeId, String>, String> {
    let mut peers = BTreeMap::new();
    for part in text.split(',').map(str::trim).filter(|p| !p.is_empty()) {
        let (id, address) = part
            .split_once('=')
            .ok_or_else(|| format!("{part:?}: not ID=quic://HOST:PORT"))?;
        let id: NodeId = id
            .trim()
            .parse()
            .map_err(|_| format!("{part:?}: the replica id {id:?} is not a number"))?;
        let address = address.trim().to_string();
        crate::net::parse_address(&address).map_err(|e| format!("{part:?}: {e}"))?;
        if peers.insert(id, address).is_some() {
            return Err(format!("replica {id} is named twice"));
        }
    }
    Ok(peers)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn peers_are_parsed_and_bad_ones_named() {
        let peers = parse_peers("1=quic://127.0.0.1:7001, 2=quic://127.0.0.1:7002").unwrap();
        assert_eq!(peers.len(), 2);
        assert!(parse_peers("1=quic://127.0.0.1:7001,1=quic://127.0.0.1:7002").is_err());
        assert!(parse_peers("x=quic://127.0.0.1:7001").is_err());
        assert!(parse_peers("1quic://127.0.0.1:7001").is_err());
    }
}

#[cfg(test)]
#[path = "storage_tests.rs"]
mod storage_tests;
