//! `cpu_ge`: matches when the worker offers at least `min` CPUs; `setup` hands the tasks `cpus`
//! (the worker's CPU count, as `WEIR_ENV_<NAME>_CPUS`).
//!
//! `min` is required: decimal digits, at most 4294967295. A missing or malformed value, or any
//! other key, is an error (reported as `error(reason)`), never a silent no-match.

wit_bindgen::generate!({ world: "environment", path: "../../../wit" });

use exports::weir::plugin::condition::Guest;
use weir::plugin::host;

struct CpuGe;

impl Guest for CpuGe {
    fn evaluate(config: Vec<(String, String)>) -> Result<bool, String> {
        Ok(host::cpu_count() >= minimum(&config)?)
    }

    fn setup(_config: Vec<(String, String)>) -> Result<Vec<(String, String)>, String> {
        Ok(vec![("cpus".to_string(), host::cpu_count().to_string())])
    }

    fn teardown() {}
}

fn minimum(config: &[(String, String)]) -> Result<u32, String> {
    let mut found = None;
    for (key, value) in config {
        if key != "min" {
            return Err("cpu_ge: unknown config key; cpu_ge takes only `min`".to_string());
        }
        let digits_only = !value.is_empty() && value.bytes().all(|b| b.is_ascii_digit());
        match value.parse::<u32>() {
            Ok(min) if digits_only => found = Some(min),
            _ => return Err("cpu_ge: config `min` must be a whole number of CPUs".to_string()),
        }
    }
    found.ok_or_else(|| {
        "cpu_ge: missing config `min` (a whole number of CPUs, e.g. min=4)".to_string()
    })
}

export!(CpuGe);
