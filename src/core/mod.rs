//! The pure core: state machines and rules with no tokio, quinn, wasmtime, clock or I/O.
//! Everything here takes `now` as an argument and is tested without a network.

pub mod dense;
pub mod managers;
pub mod record;
pub mod scaling;
pub mod scenarios;
pub mod scheduler;
pub mod tasks;
