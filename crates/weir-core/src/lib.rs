//! The pure core: state machines and rules with no tokio, quinn, wasmtime, clock or I/O.
//! Everything here takes `now` as an argument and is tested without a network.

pub(crate) mod dense;
pub mod hash;
pub mod lease;
pub mod managers;
pub mod record;
pub mod scaling;
pub mod scenarios;
pub mod scheduler;
pub mod tasks;
pub mod units;
pub mod worker;

/// A component's identity: the SHA-256 of its bytes.
pub fn component_hash(bytes: &[u8]) -> weir_proto::ComponentHash {
    use sha2::Digest;
    sha2::Sha256::digest(bytes).into()
}

#[cfg(test)]
mod tests;
