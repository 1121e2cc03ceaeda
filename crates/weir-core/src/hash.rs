//! The core's hash maps and sets: SipHash with a fixed key instead of std's per-map random one,
//! so a map built by the same inserts iterates in the same order on every run. What the core
//! does then depends only on its inputs: a seed of the pair harness or of the simulation
//! replays exactly. The keys come from authenticated peers (task, worker and group ids, names
//! they registered), so a fixed key's weaker resistance to crafted collisions is acceptable.

/// The hasher of every core map and set.
pub type Fixed = std::hash::BuildHasherDefault<std::hash::DefaultHasher>;
/// A `std::collections::HashMap` with the [`Fixed`] hasher (build with `default()`).
pub type HashMap<K, V> = std::collections::HashMap<K, V, Fixed>;
/// A `std::collections::HashSet` with the [`Fixed`] hasher (build with `default()`).
pub type HashSet<K> = std::collections::HashSet<K, Fixed>;
