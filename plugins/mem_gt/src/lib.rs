//! `mem_gt`: matches when the worker's total memory is greater than `threshold` bytes.
//!
//! `threshold` is required and accepts plain bytes (`1000`), scientific notation (`32e9`),
//! decimal units (`32GB`, `1.5TB`: powers of 1000) and binary units (`32GiB`: powers of 1024),
//! case-insensitively. A missing or malformed value is an error, never a silent no-match.
//! `setup` hands tasks `threshold` and `total_memory_bytes`.

wit_bindgen::generate!({ world: "environment", path: "../../wit" });

use exports::weir::plugin::condition::Guest;
use weir::plugin::host;

struct MemGt;

impl Guest for MemGt {
    fn evaluate(config: Vec<(String, String)>) -> Result<bool, String> {
        Ok(host::total_memory_bytes() > threshold(&config)?)
    }

    fn setup(config: Vec<(String, String)>) -> Result<Vec<(String, String)>, String> {
        Ok(vec![
            ("threshold".to_string(), threshold(&config)?.to_string()),
            ("total_memory_bytes".to_string(), host::total_memory_bytes().to_string()),
        ])
    }

    fn teardown() {}
}

fn threshold(config: &[(String, String)]) -> Result<u64, String> {
    let mut found = None;
    for (key, value) in config {
        match key.as_str() {
            "threshold" => found = Some(value),
            other => return Err(format!("unknown config key `{other}`; mem_gt takes only `threshold`")),
        }
    }
    let value = found.ok_or("missing config `threshold` (bytes, e.g. threshold=32GiB)")?;
    parse_bytes(value).ok_or_else(|| {
        format!("threshold `{value}` is not a size: use bytes (34359738368), 32e9, 32GB or 32GiB")
    })
}

/// Parses `1000`, `32e9`, `1.5TB`, `32GiB` (case-insensitive) into bytes.
fn parse_bytes(text: &str) -> Option<u64> {
    let text = text.trim();
    let split = text.find(|c: char| c.is_ascii_alphabetic() && c != 'e' && c != 'E').unwrap_or(text.len());
    let (number, unit) = text.split_at(split);
    let multiplier: f64 = match unit.trim().to_ascii_lowercase().as_str() {
        "" | "b" => 1.0,
        "kb" | "k" => 1e3,
        "mb" | "m" => 1e6,
        "gb" | "g" => 1e9,
        "tb" | "t" => 1e12,
        "pb" | "p" => 1e15,
        "kib" => 1024f64,
        "mib" => 1024f64.powi(2),
        "gib" => 1024f64.powi(3),
        "tib" => 1024f64.powi(4),
        "pib" => 1024f64.powi(5),
        _ => return None,
    };
    let number = number.trim();
    if number.is_empty() || number.starts_with(['-', '+']) {
        return None;
    }
    let value = number.parse::<f64>().ok()? * multiplier;
    // 2^64 itself is not representable; anything at or above it is out of range.
    (value.is_finite() && value >= 0.0 && value < 18446744073709551616.0).then(|| value.round() as u64)
}

export!(MemGt);
