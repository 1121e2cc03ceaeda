//! weir: a distributed task scheduler whose scaling policies and environment conditions are
//! sandboxed WebAssembly components. See DESIGN.md for the architecture.
//!
//! - [`core`]: pure state machines and rules (no I/O, no clock).
//! - [`plugin`]: the wasmtime host for the components defined in `wit/weir.wit`.
//! - [`cli`]: what the executables in `src/bin/` share.

pub mod cli;
pub mod core;
pub mod plugin;
