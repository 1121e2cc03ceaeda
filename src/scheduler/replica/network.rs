//! Raft's messages between replicas, over QUIC: a replica connects to a peer as
//! [`Role::Replica`] (with the replicas' token, made from the private key), then sends each message on a stream of its own and
//! reads the answer there. The same endpoint serves workers, managers, clients and replicas.

use std::sync::Arc;
use std::time::Duration;

use openraft::error::{InstallSnapshotError, NetworkError, RPCError, RaftError, Unreachable};
use openraft::network::{RPCOption, RaftNetwork, RaftNetworkFactory};
use openraft::raft::{
    AppendEntriesRequest, AppendEntriesResponse, InstallSnapshotRequest, InstallSnapshotResponse,
    VoteRequest, VoteResponse,
};
use openraft::{AnyError, BasicNode, Raft};
use quinn::{Connection, Endpoint, RecvStream, SendStream};
use serde::{Deserialize, Serialize};

use super::{NodeId, TypeConfig};
use crate::net::{AccessFile, NetError};
use crate::proto::{Role, frame};

/// Most bytes of one Raft message: up to `max_payload_entries` entries, each at most a few
/// requests' worth of records (the actor splits its rounds).
pub(crate) const MAX_MESSAGE: usize = 1 << 30;

#[derive(Debug, Serialize, Deserialize)]
pub(crate) enum ToReplica {
    Append(AppendEntriesRequest<TypeConfig>),
    Vote(VoteRequest<NodeId>),
    Snapshot(InstallSnapshotRequest<TypeConfig>),
}

#[derive(Debug, Serialize, Deserialize)]
pub(crate) enum FromReplica {
    Append(Result<AppendEntriesResponse<NodeId>, RaftError<NodeId>>),
    Vote(Result<VoteResponse<NodeId>, RaftError<NodeId>>),
    Snapshot(Result<InstallSnapshotResponse<NodeId>, RaftError<NodeId, InstallSnapshotError>>),
    /// The message could not be handled (the replica is stopping).
    Failed(String),
}

/// Makes a [`Peer`] per replica openraft talks to; they share one client endpoint, and one
/// connection per replica (openraft makes a new `Peer` for each confirmation of the lead: a
/// handshake each time would make every confirmation slow).
pub(crate) struct Network {
    pub endpoint: Endpoint,
    pub access: Arc<AccessFile>,
    /// The replicas' token ([`super::token`]), sent in the hello's worker-token place.
    pub token: String,
    pub connections: Connections,
}

/// The open connection to each replica.
pub(crate) type Connections = Arc<std::sync::Mutex<std::collections::HashMap<NodeId, Connection>>>;

impl RaftNetworkFactory<TypeConfig> for Network {
    type Network = Peer;

    async fn new_client(&mut self, target: NodeId, node: &BasicNode) -> Peer {
        let mut access = (*self.access).clone();
        access.address = node.addr.clone();
        access.replicas = Vec::new();
        access.worker_token = self.token.clone();
        Peer {
            target,
            endpoint: self.endpoint.clone(),
            access,
            connections: self.connections.clone(),
        }
    }
}

/// The link to one replica: one connection, made again when it is lost.
pub(crate) struct Peer {
    target: NodeId,
    endpoint: Endpoint,
    /// The peer's address in `address`, the cluster's certificate and tokens.
    access: AccessFile,
    connections: Connections,
}

type Failure<E> = RPCError<NodeId, BasicNode, E>;

impl Peer {
    async fn call<E: std::error::Error>(
        &mut self,
        message: &ToReplica,
        timeout: Duration,
    ) -> Result<FromReplica, Failure<E>> {
        let failed =
            |error: String| Failure::<E>::Network(NetworkError::new(&AnyError::error(error)));
        let cached = self
            .connections
            .lock()
            .ok()
            .and_then(|c| c.get(&self.target).cloned())
            .filter(|c| c.close_reason().is_none());
        let connection = match cached {
            Some(connection) => connection,
            None => {
                let unreachable = |error: String| {
                    Failure::<E>::Unreachable(Unreachable::new(&AnyError::error(error)))
                };
                let connecting =
                    crate::net::connect_on(&self.endpoint, &self.access, Role::Replica);
                match tokio::time::timeout(timeout.max(Duration::from_secs(1)), connecting).await {
                    Ok(Ok((connection, _send, _recv))) => {
                        if let Ok(mut cache) = self.connections.lock() {
                            cache.insert(self.target, connection.clone());
                        }
                        connection
                    }
                    Ok(Err(error)) => return Err(unreachable(error.to_string())),
                    Err(_) => {
                        let target = self.target;
                        return Err(unreachable(format!("replica {target} did not answer")));
                    }
                }
            }
        };
        let exchange = async {
            let (mut send, mut recv): (SendStream, RecvStream) = connection.open_bi().await?;
            let bytes = frame::encode_limited(message, MAX_MESSAGE)?;
            send.write_all(&bytes).await?;
            let _ = send.finish();
            let answer: FromReplica = frame::read_limited(&mut recv, MAX_MESSAGE).await?;
            Ok::<_, NetError>(answer)
        };
        match tokio::time::timeout(timeout, exchange).await {
            Ok(Ok(answer)) => Ok(answer),
            Ok(Err(error)) => {
                // Connected again next time.
                if let Ok(mut cache) = self.connections.lock() {
                    cache.remove(&self.target);
                }
                Err(failed(error.to_string()))
            }
            // A slow peer: the connection is kept (its streams are independent).
            Err(_) => Err(failed(format!(
                "replica {} did not answer within {timeout:?}",
                self.target
            ))),
        }
    }
}

fn unexpected<E: std::error::Error>(answer: FromReplica) -> Failure<E> {
    let error = match answer {
        FromReplica::Failed(error) => error,
        other => format!("unexpected answer {other:?}"),
    };
    Failure::<E>::Network(NetworkError::new(&AnyError::error(error)))
}

impl RaftNetwork<TypeConfig> for Peer {
    async fn append_entries(
        &mut self,
        rpc: AppendEntriesRequest<TypeConfig>,
        option: RPCOption,
    ) -> Result<AppendEntriesResponse<NodeId>, Failure<RaftError<NodeId>>> {
        match self
            .call(&ToReplica::Append(rpc), option.hard_ttl())
            .await?
        {
            FromReplica::Append(Ok(answer)) => Ok(answer),
            FromReplica::Append(Err(error)) => Err(RPCError::RemoteError(
                openraft::error::RemoteError::new(self.target, error),
            )),
            other => Err(unexpected(other)),
        }
    }

    async fn install_snapshot(
        &mut self,
        rpc: InstallSnapshotRequest<TypeConfig>,
        option: RPCOption,
    ) -> Result<InstallSnapshotResponse<NodeId>, Failure<RaftError<NodeId, InstallSnapshotError>>>
    {
        match self
            .call(&ToReplica::Snapshot(rpc), option.hard_ttl())
            .await?
        {
            FromReplica::Snapshot(Ok(answer)) => Ok(answer),
            FromReplica::Snapshot(Err(error)) => Err(RPCError::RemoteError(
                openraft::error::RemoteError::new(self.target, error),
            )),
            other => Err(unexpected(other)),
        }
    }

    async fn vote(
        &mut self,
        rpc: VoteRequest<NodeId>,
        option: RPCOption,
    ) -> Result<VoteResponse<NodeId>, Failure<RaftError<NodeId>>> {
        match self.call(&ToReplica::Vote(rpc), option.hard_ttl()).await? {
            FromReplica::Vote(Ok(answer)) => Ok(answer),
            FromReplica::Vote(Err(error)) => Err(RPCError::RemoteError(
                openraft::error::RemoteError::new(self.target, error),
            )),
            other => Err(unexpected(other)),
        }
    }
}

/// Serve a replica's connection (its hello answered): each stream one Raft message and its answer.
pub(crate) async fn serve(connection: Connection, raft: Raft<TypeConfig>) -> Result<(), NetError> {
    loop {
        let (mut send, mut recv) = connection.accept_bi().await?;
        let raft = raft.clone();
        tokio::spawn(async move {
            let answer = match frame::read_limited::<_, ToReplica>(&mut recv, MAX_MESSAGE).await {
                Ok(ToReplica::Append(rpc)) => FromReplica::Append(raft.append_entries(rpc).await),
                Ok(ToReplica::Vote(rpc)) => FromReplica::Vote(raft.vote(rpc).await),
                Ok(ToReplica::Snapshot(rpc)) => {
                    FromReplica::Snapshot(raft.install_snapshot(rpc).await)
                }
                Err(error) => FromReplica::Failed(format!("bad message: {error}")),
            };
            if let Ok(bytes) = frame::encode_limited(&answer, MAX_MESSAGE) {
                let _ = send.write_all(&bytes).await;
                let _ = send.finish();
            }
        });
    }
}
