//! Any bytes as a frame payload: every message type decodes or errors, never panics.
#![no_main]

// The wire code itself, compiled here without the rest of weir (and its wasmtime).
#[allow(dead_code)]
#[path = "../../src/proto/frame.rs"]
mod frame;
#[allow(dead_code, unused_imports)]
#[path = "../../src/proto/messages/mod.rs"]
mod messages;

use frame::decode;
use libfuzzer_sys::fuzz_target;
use messages::{FromManager, FromWorker, Hello, Request, Response, ToManager, ToWorker};

fuzz_target!(|data: &[u8]| {
    let _ = decode::<Hello>(data);
    let _ = decode::<Request>(data);
    let _ = decode::<Response>(data);
    let _ = decode::<FromWorker>(data);
    let _ = decode::<ToWorker>(data);
    let _ = decode::<FromManager>(data);
    let _ = decode::<ToManager>(data);
});
