//! The messages. Append-only: add variants and fields at the end of a new protocol version.
//!
//! One file per conversation: [`hello`] (every connection's first exchange), [`worker`],
//! [`manager`] and [`client`] (each peer's messages with the scheduler), with the types they
//! share in [`tasks`] and [`status`]. Everything is re-exported here (`proto::X`).

pub mod client;
pub mod hello;
pub mod manager;
pub mod status;
pub mod tasks;
pub mod worker;

pub use client::*;
pub use hello::*;
pub use manager::*;
pub use status::*;
pub use tasks::*;
pub use worker::*;

pub type TaskId = u64;
pub type JobId = u64;
pub type WorkerId = u64;
/// A submitted group of tasks sharing one specification (a `weir submit` call may send several).
pub type GroupId = u64;
/// A mutating request's id, chosen by the client at random (128 bits: two clients never pick
/// the same one), so a resend after a lost connection is recognised ([`Request::Submit`]).
pub type RequestId = u128;
/// SHA-256 of a wasm task component.
pub type ComponentHash = [u8; 32];
