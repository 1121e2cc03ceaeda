//! The example policies (examples/policies/*), built from source with their own toolchains and
//! run against their scenario files with `weir policy test`, as a policy author would: cost_budget
//! in Rust (on the policy SDK), Python (componentize-py) and JavaScript (componentize-qjs) must
//! each pass the scenarios and give the very same decisions.

use std::path::{Path, PathBuf};
use std::process::Command;

fn root() -> &'static Path {
    Path::new(env!("CARGO_MANIFEST_DIR"))
}

/// `examples/policies/cost_budget/LANGUAGE/build.sh OUT`; fails saying what is missing.
fn build(language: &str, dir: &Path) -> PathBuf {
    let wasm = dir.join(format!("cost_budget_{language}.wasm"));
    let script = root().join(format!("examples/policies/cost_budget/{language}/build.sh"));
    let built = Command::new(script)
        .arg(&wasm)
        .env("WEIR_EXAMPLES_TARGET_DIR", root().join("target/examples"))
        .env_remove("CARGO_TARGET_DIR")
        .output()
        .expect("build.sh runs");
    assert!(
        built.status.success(),
        "building cost_budget in {language} failed (examples/conditions/install-toolchains.sh installs the toolchains): {}",
        String::from_utf8_lossy(&built.stderr)
    );
    wasm
}

/// `weir --output json policy test` of the cost_budget scenarios: (passed, failed, decisions).
fn test(wasm: &Path, cache: &Path) -> serde_json::Value {
    let out = Command::new(env!("CARGO_BIN_EXE_weir"))
        .current_dir(root())
        .args(["--output", "json", "policy", "test", "--policy"])
        .arg(wasm)
        .args([
            "--content",
            "@examples/policies/cost_budget/content.csv",
            "examples/policies/scenarios/cost_budget.toml",
        ])
        .env("WEIR_CACHE_DIR", cache)
        .output()
        .expect("weir runs");
    serde_json::from_slice(&out.stdout).unwrap_or_else(|e| {
        panic!(
            "{}: {e}: {}",
            wasm.display(),
            String::from_utf8_lossy(&out.stderr)
        )
    })
}

#[test]
#[ignore = "needs the wasm32-wasip2 target, componentize-py and node (examples/conditions/install-toolchains.sh); CI runs it (--include-ignored)"]
fn cost_budget_in_three_languages_passes_its_scenarios_with_the_same_decisions() {
    let dir = tempfile::tempdir().unwrap();
    let mut decisions = Vec::new();
    for language in ["rust", "python", "js"] {
        let wasm = build(language, dir.path());
        let report = test(&wasm, &dir.path().join("cache"));
        assert_eq!(report["failed"], 0, "{language}: {report:#}");
        assert_eq!(report["passed"], 5, "{language}: {report:#}");
        let made: Vec<serde_json::Value> = report["scenarios"]
            .as_array()
            .expect("scenarios")
            .iter()
            .map(|s| s["decisions"].clone())
            .collect();
        decisions.push((language, made));
    }
    let (_, rust) = &decisions[0];
    for (language, made) in &decisions[1..] {
        assert_eq!(made, rust, "{language} decides otherwise than rust");
    }
}
