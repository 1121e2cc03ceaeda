//! The waterfall scaling algorithm (DESIGN §4), as plain Rust.
//!
//! This crate is compiled twice: into the `waterfall_v1` / `waterfall_v2` WASM components, and
//! natively into the host, where it is the reference the components are checked against and the
//! baseline of the plugin benchmarks. It has no dependencies and does no I/O.
//!
//! - [`model`]: the snapshot and decision types, mirroring `weir:plugin/scaling` in `wit/weir.wit`.
//! - [`content`]: the policy content parser (`priority, worker_manager_id[, cap]` or
//!   `priority, worker_type` rows) with line-numbered errors.
//! - [`decide`]: the fill, share and scale-down rules (each manager's bookkeeping in `plan.rs`).
//! - [`wit_conversions!`]: to and from the `weir:plugin/scaling` bindings, for host and guests.

pub mod content;
pub mod decide;
pub mod model;
mod plan;
mod wit;

pub use content::{ContentError, Flavor, Policy, Rule};
pub use model::{
    BusyGroup, Decision, Demand, Fetch, Launch, Manager, Runtimes, Snapshot, Summary, Tier,
    Verdict, Worker, RECENT_RUNTIMES,
};
