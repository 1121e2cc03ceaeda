//! Any bytes as a journal file: the decoder returns records, a torn-tail cut, or an error that
//! names the offset; never a panic. A good journal with random damage is covered by the unit
//! tests in `src/scheduler/journal.rs`.
#![no_main]

// The journal's file format, compiled without the rest of the scheduler (and its wasmtime);
// the records and messages it holds are the core's and the protocol's crates.
#[allow(dead_code)]
#[path = "../../src/scheduler/record.rs"]
mod record;
/// `record.rs` names the core as the host crate re-exports it.
use weir_core as core;

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
