//! The plugins compiled into the executables, so a local cluster needs no files and no flags.
//! They are the committed `plugins/*.wasm`, which CI checks against their source.

pub const WATERFALL_V1: &[u8] = include_bytes!("../../plugins/waterfall_v1.wasm");
pub const WATERFALL_V2: &[u8] = include_bytes!("../../plugins/waterfall_v2.wasm");
pub const MEM_GT: &[u8] = include_bytes!("../../plugins/mem_gt.wasm");
/// Example sandboxed task (`task` world): squares a decimal number.
pub const SQUARE: &[u8] = include_bytes!("../../plugins/square.wasm");

/// Bundled plugins by name (`policy_engine_type` values, condition and task names).
pub const ALL: [(&str, &[u8]); 4] = [
    ("waterfall_v1", WATERFALL_V1),
    ("waterfall_v2", WATERFALL_V2),
    ("mem_gt", MEM_GT),
    ("square", SQUARE),
];

pub fn by_name(name: &str) -> Option<&'static [u8]> {
    ALL.iter()
        .find(|(n, _)| *n == name)
        .map(|(_, bytes)| *bytes)
}
