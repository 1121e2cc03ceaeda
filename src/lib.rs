//! weir: a distributed task scheduler whose scaling policies and environment conditions are
//! sandboxed WebAssembly components. See DESIGN.md for the architecture.
//!
//! - [`core`]: pure state machines and rules (no I/O, no clock).
//! - [`plugin`]: the wasmtime host for the components defined in `wit/weir.wit`.
//! - [`config`]: policy selection from flags and the reference TOML form.
//! - [`cluster`]: a scheduler, workers and worker managers as child processes on loopback.

pub mod client;
pub mod cluster;
pub mod config;
pub mod core;
pub mod manager;
pub mod net;
pub mod plugin;
pub mod proto;
pub mod scheduler;
pub mod telemetry;
pub mod worker;
