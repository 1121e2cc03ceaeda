//! The example policies (examples/policies/*), built from source with their own toolchains and
//! run against their scenario files with `weir policy test`, as a policy author would.

use std::path::Path;
use std::process::Command;

#[test]
#[ignore = "needs the wasm32-wasip2 target (rustup target add wasm32-wasip2); CI runs it (--include-ignored)"]
fn cost_budget_in_rust_passes_its_scenarios() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let dir = tempfile::tempdir().unwrap();
    let wasm = dir.path().join("cost_budget.wasm");
    let built = Command::new(root.join("examples/policies/cost_budget/rust/build.sh"))
        .arg(&wasm)
        .env("WEIR_EXAMPLES_TARGET_DIR", root.join("target/examples"))
        .env_remove("CARGO_TARGET_DIR")
        .output()
        .expect("build.sh runs");
    assert!(
        built.status.success(),
        "building the Rust cost_budget failed (does `rustup target list --installed` show wasm32-wasip2?): {}",
        String::from_utf8_lossy(&built.stderr)
    );
    let tested = Command::new(env!("CARGO_BIN_EXE_weir"))
        .current_dir(root)
        .args(["policy", "test", "--policy"])
        .arg(&wasm)
        .args([
            "--content",
            "@examples/policies/cost_budget/content.csv",
            "examples/policies/scenarios/cost_budget.toml",
        ])
        .env("WEIR_CACHE_DIR", dir.path().join("cache"))
        .output()
        .expect("weir runs");
    let report = String::from_utf8_lossy(&tested.stdout);
    assert!(
        tested.status.success(),
        "{report}{}",
        String::from_utf8_lossy(&tested.stderr)
    );
    assert!(report.contains("5 passed, 0 failed"), "{report}");
}
