//! Any bytes as a journal file: the decoder returns records, a torn-tail cut, or an error that
//! names the offset; never a panic. A good journal with random damage is covered by the unit
//! tests in `src/scheduler/journal.rs`.
#![no_main]

// The journal format and the messages it holds, compiled without the rest of weir.
#[allow(dead_code, unused_imports)]
#[path = "../../src/proto/messages/mod.rs"]
mod messages;
#[allow(dead_code)]
#[path = "../../src/scheduler/record.rs"]
mod record;
/// The records themselves live in the core (`record.rs` re-exports them).
#[allow(dead_code)]
#[path = "../../src/core/record.rs"]
pub mod core_record;
mod core {
    pub use super::core_record as record;
}
/// `record.rs` names the messages as `crate::proto`.
mod proto {
    pub use super::messages::*;
}

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    // As found on disk, and behind a valid header (so the record framing is reached at once).
    let _ = record::parse(data);
    let mut file = record::header().to_vec();
    file.extend_from_slice(data);
    if let Ok((records, good)) = record::parse(&file) {
        assert!(good <= file.len());
        // What decodes encodes again.
        for (seq, r) in records.iter().enumerate() {
            let _ = record::encode(r, seq as u64);
        }
    }
});
