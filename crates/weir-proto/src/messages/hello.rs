//! The first exchange of every connection: the connecting side's [`Hello`], the scheduler's
//! [`HelloReply`].

use serde::{Deserialize, Serialize};

#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum Role {
    Client,
    Worker,
    Manager,
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
    Refused { reason: String },
}
