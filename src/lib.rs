//! weir: a distributed task scheduler whose scaling policies and environment conditions are
//! sandboxed WebAssembly components. See docs/architecture.md for the layout.
//!
//! This crate is the host: the [`scheduler`], [`worker`] and [`manager`] shells, the wasmtime
//! host for the components defined in `wit/weir.wit` ([`plugin`]), policy selection
//! ([`config`]), the clock the shells read the time through ([`clock`], a seam) and the
//! local-cluster launcher ([`cluster`]). The layers below are crates of their own, re-exported
//! here under the names the shells use:
//! - [`proto`] (`weir-proto`): the messages and their frames;
//! - [`core`] (`weir-core`): the pure state machines (no I/O, no clock);
//! - [`net`] (`weir-net`): QUIC, TLS, the access file, links and sessions;
//! - [`client`] (`weir-client`): the client library, all the Python package links.

pub use weir_client as client;
pub use weir_core as core;
pub use weir_net as net;
pub use weir_proto as proto;

pub mod clock;
pub mod cluster;
pub mod config;
pub mod manager;
pub mod plugin;
pub mod scheduler;
pub mod telemetry;
pub mod worker;
