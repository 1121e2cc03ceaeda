//! Replicas added and removed while the cluster runs (`weir replicas add/remove`): Raft's
//! membership changes, with the replicas' token, a learner made a voter only once caught up.

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::sync::Arc;

use openraft::BasicNode;

use super::{NodeId, Replica};
use crate::net::AccessFile;

impl Replica {
    /// Carry out a membership change (`ReplicaAdd`, `ReplicaRemove`) if it carries the replicas'
    /// token; the replicas after it, or why not.
    pub(crate) async fn change(&self, request: crate::proto::Request) -> crate::proto::Response {
        use crate::proto::{ErrorCode, Request, Response};
        let changed = match request {
            Request::ReplicaAdd { token, .. } | Request::ReplicaRemove { token, .. }
                if !crate::net::same_token(token.as_bytes(), self.token.as_bytes()) =>
            {
                Err(
                    "a membership change needs the replicas' token, made from the scheduler's \
                     key (`weir replicas` reads scheduler-key.pem beside the access file, or --key)"
                        .to_string(),
                )
            }
            Request::ReplicaAdd { id, address, .. } => self.add(id, address).await,
            Request::ReplicaRemove { id, .. } => self.remove(id).await,
            other => Err(format!("not a membership change: {other:?}")),
        };
        match changed {
            Ok(()) => Response::Replicas(self.status()),
            Err(message) => Response::Error {
                code: ErrorCode::Invalid,
                message,
            },
        }
    }

    /// Add replica `id` at `address`: it learns the log first (until it has caught up), then
    /// votes (a joint consensus, committed by both the old and the new majority).
    pub(crate) async fn add(&self, id: NodeId, address: String) -> Result<(), String> {
        crate::net::parse_address(&address).map_err(|e| e.to_string())?;
        if self.members().contains_key(&id) {
            return Err(format!("replica {id} is one already (remove it first)"));
        }
        // A learner first, then a voter only once it has the log up to its own addition: a
        // voter that never answers (a wrong address, a process not started) would make every
        // commit wait for it, and could take the majority away.
        let learner = self
            .raft
            .add_learner(id, BasicNode::new(&address), false)
            .await
            .map_err(|e| format!("cannot add replica {id}: {e}"))?;
        let caught_up = async {
            let mut metrics = self.raft.metrics();
            loop {
                let matched = metrics
                    .borrow_and_update()
                    .replication
                    .as_ref()
                    .and_then(|r| r.get(&id).cloned().flatten());
                if matched.is_some_and(|m| m.index >= learner.log_id.index) {
                    return true;
                }
                if metrics.changed().await.is_err() {
                    return false;
                }
            }
        };
        let wait = 10 * self.patience;
        if !tokio::time::timeout(wait, caught_up).await.unwrap_or(false) {
            let _ = self
                .raft
                .change_membership(openraft::ChangeMembers::RemoveNodes([id].into()), false)
                .await;
            return Err(format!(
                "replica {id} at {address} did not catch up within {wait:?}: is it running \
                 there, started with `scheduler --replica {id} --join`? It was not added"
            ));
        }
        self.raft
            .change_membership(openraft::ChangeMembers::AddVoterIds([id].into()), false)
            .await
            .map_err(|e| format!("replica {id} learnt the log but cannot vote: {e}"))?;
        tracing::info!(replica = id, %address, "replica added");
        Ok(())
    }

    /// Remove replica `id` (a voter or a learner still being added).
    pub(crate) async fn remove(&self, id: NodeId) -> Result<(), String> {
        let voter = self
            .raft
            .metrics()
            .borrow()
            .membership_config
            .membership()
            .voter_ids()
            .any(|v| v == id);
        let change = match (self.members().contains_key(&id), voter) {
            (false, _) => return Err(format!("replica {id} is not one of the replicas")),
            (true, true) => openraft::ChangeMembers::RemoveVoters([id].into()),
            (true, false) => openraft::ChangeMembers::RemoveNodes([id].into()),
        };
        self.raft
            .change_membership(change, false)
            .await
            .map_err(|e| format!("cannot remove replica {id}: {e}"))?;
        tracing::info!(replica = id, "replica removed");
        Ok(())
    }

    /// Keep this replica's access file listing the voters as they are now (each replica writes
    /// its own, as its effective membership changes: during a joint change, both sets): a
    /// worker, manager or client that reads it later (at start, or as it reconnects) tries the
    /// replicas of now, not those of the start. A write that fails is tried again at the next
    /// change of Raft's server metrics (a vote, a role, a membership).
    pub(crate) async fn keep_access_file(self: Arc<Self>, mut access: AccessFile, path: PathBuf) {
        // The server metrics change with the vote, the role and the membership only (not with
        // every commit, as the whole metrics do).
        let mut metrics = self.raft.server_metrics();
        loop {
            let voters: Vec<String> = {
                let m = metrics.borrow_and_update();
                let membership = m.membership_config.membership();
                (membership.voter_ids())
                    .filter_map(|id| membership.get_node(&id).map(|n| n.addr.clone()))
                    .collect()
            };
            // Empty until the cluster is formed (or this replica joined one).
            if !voters.is_empty() && voters != access.replicas {
                let mut now = access.clone();
                now.replicas = voters;
                match now.write(&path) {
                    Ok(()) => {
                        tracing::info!(replicas = ?now.replicas, access_file = %path.display(), "the access file lists the replicas of now");
                        access = now;
                    }
                    Err(error) => {
                        tracing::warn!(%error, access_file = %path.display(), "cannot rewrite the access file with the replicas of now")
                    }
                }
            }
            if metrics.changed().await.is_err() {
                return;
            }
        }
    }

    /// Every replica (voters and learners) and its address.
    fn members(&self) -> BTreeMap<NodeId, String> {
        let metrics = self.raft.metrics();
        let m = metrics.borrow();
        m.membership_config
            .membership()
            .nodes()
            .map(|(id, node)| (*id, node.addr.clone()))
            .collect()
    }
}
