//! The first exchange of every connection: the connecting side's [`Hello`], the scheduler's
//! [`HelloReply`].

use serde::{Deserialize, Serialize};

#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum Role {
    Client,
    Worker,
    Manager,
    /// Another scheduler replica (`scheduler --replica`): Raft's messages, with a token made from
    /// the scheduler's private key (which workers, managers and clients do not have).
    Replica,
}

/// First frame of every connection, from the connecting side.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Hello {
    pub version: u32,
    pub role: Role,
    pub token: String,
}

#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum HelloReply {
    Welcome,
    Refused {
        reason: String,
    },
    /// A scheduler replica that does not lead: only the leader serves workers, managers and
    /// clients. `leader` is the one it knows (`quic://HOST:PORT`), if any: connect there, or try
    /// the access file's other replicas.
    NotLeader {
        leader: Option<String>,
    },
}
