//! Wire protocol: messages (serde + postcard) in length-prefixed frames.
//!
//! Every connection starts with the connecting side's [`Hello`] and the scheduler's
//! [`HelloReply`]; a wrong version, token or role is refused before anything else is read.
//! Enums are append-only: new variants go at the end, so older peers still decode the old ones.

pub mod bytes;
pub mod frame;
pub mod messages;

pub use frame::{FrameError, FrameReader, MAX_FRAME, decode, encode};
pub use messages::*;

/// Most tasks one submission may create (the scheduler refuses more; clients split).
pub const MAX_TASKS_PER_SUBMIT: u64 = 10_000_000;

/// Bumped whenever a message changes incompatibly.
pub const PROTOCOL_VERSION: u32 = 16;
