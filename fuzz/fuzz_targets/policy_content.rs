//! Any text as policy content, for both flavors: rows or a line-numbered error, never a panic;
//! and accepted content decides on an empty snapshot.
#![no_main]

use libfuzzer_sys::fuzz_target;
use weir_waterfall::{Flavor, Policy, Snapshot};

fuzz_target!(|data: &[u8]| {
    let Ok(text) = std::str::from_utf8(data) else { return };
    for flavor in [Flavor::ManagerId, Flavor::WorkerType] {
        match Policy::parse(flavor, text) {
            Ok(policy) => {
                assert!(!policy.rules.is_empty());
                let _ = policy.decide(&Snapshot::default());
            }
            Err(error) => assert!(!error.to_string().is_empty()),
        }
    }
});
