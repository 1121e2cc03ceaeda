//! weir: a distributed task scheduler whose scaling policies and environment conditions are
//! sandboxed WebAssembly components. See DESIGN.md for the architecture.
//!
//! - [`core`]: pure state machines and rules (no I/O, no clock).
//! - [`clock`]: the clock the shells read the time through (a seam, see docs/architecture.md).
//! - [`plugin`]: the wasmtime host for the components defined in `wit/weir.wit`.
//! - [`config`]: policy selection from flags and the reference TOML form.
//! - [`cluster`]: a scheduler, workers and worker managers as child processes on loopback.
//!
//! Without the default `host` feature only [`client`], [`net`], [`proto`], [`core`], [`cluster`]
//! and [`telemetry`] are built (the Python package's native part links that, no wasmtime).

pub mod client;
#[cfg(feature = "host")]
pub mod clock;
pub mod cluster;
#[cfg(feature = "host")]
pub mod config;
pub mod core;
#[cfg(feature = "host")]
pub mod manager;
pub mod net;
#[cfg(feature = "host")]
pub mod plugin;
pub mod proto;
#[cfg(feature = "host")]
pub mod scheduler;
pub mod telemetry;
#[cfg(feature = "host")]
pub mod worker;
