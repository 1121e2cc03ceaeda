//! The core's own tests, inside the crate so what only they need stays `pub(crate)`: each
//! state machine driven through its one entry, property tests over random inputs, and the pair
//! harness (the scheduler's core with worker and manager cores on an in-memory network).

mod managers;
mod pair;
mod scaling_sim;
mod scheduler;
mod tasks;
