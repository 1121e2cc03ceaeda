//! Any bytes as a frame payload: every message type decodes or errors, never panics.
#![no_main]

use libfuzzer_sys::fuzz_target;
use weir_proto::{
    FromManager, FromWorker, Hello, Request, Response, ToManager, ToWorker, decode,
};

fuzz_target!(|data: &[u8]| {
    let _ = decode::<Hello>(data);
    let _ = decode::<Request>(data);
    let _ = decode::<Response>(data);
    let _ = decode::<FromWorker>(data);
    let _ = decode::<ToWorker>(data);
    let _ = decode::<FromManager>(data);
    let _ = decode::<ToManager>(data);
});
