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
    build_example("cost_budget", language, dir)
}

/// `examples/policies/NAME/LANGUAGE/build.sh OUT`.
fn build_example(name: &str, language: &str, dir: &Path) -> PathBuf {
    let wasm = dir.join(format!("{name}_{language}.wasm"));
    let script = root().join(format!("examples/policies/{name}/{language}/build.sh"));
    let built = Command::new(script)
        .arg(&wasm)
        .env("WEIR_EXAMPLES_TARGET_DIR", root().join("target/examples"))
        .env_remove("CARGO_TARGET_DIR")
        .output()
        .expect("build.sh runs");
    assert!(
        built.status.success(),
        "building {name} in {language} failed (examples/conditions/install-toolchains.sh installs the toolchains): {}",
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
    // Beyond the scenarios: many varied snapshots, the three compared decision by decision (and
    // every decision checked by the host as the scheduler would).
    let trace = dir.path().join("trace.json");
    std::fs::write(&trace, varied_snapshots(40).to_string()).unwrap();
    let simulated: Vec<(&str, serde_json::Value)> = ["rust", "python", "js"]
        .into_iter()
        .map(|language| {
            let wasm = dir.path().join(format!("cost_budget_{language}.wasm"));
            (language, simulate(&wasm, &trace, &dir.path().join("cache")))
        })
        .collect();
    let steps = |value: &serde_json::Value| {
        let steps = value.as_array().cloned();
        steps.unwrap_or_else(|| panic!("the simulation is not a list of steps: {value}"))
    };
    let rust = steps(&simulated[0].1);
    assert_eq!(rust.len(), 40);
    for (language, made) in &simulated[1..] {
        for (step, (theirs, ours)) in steps(made).iter().zip(&rust).enumerate() {
            assert_eq!(
                theirs, ours,
                "{language} decides otherwise than rust at step {step}"
            );
        }
    }
}

/// `weir --output json policy simulate` of a trace.
fn simulate(wasm: &Path, trace: &Path, cache: &Path) -> serde_json::Value {
    let out = Command::new(env!("CARGO_BIN_EXE_weir"))
        .current_dir(root())
        .args(["--output", "json", "policy", "simulate", "--policy"])
        .arg(wasm)
        .args([
            "--content",
            "@examples/policies/cost_budget/content.csv",
            "--trace",
        ])
        .arg(trace)
        .env("WEIR_CACHE_DIR", cache)
        .output()
        .expect("weir runs");
    assert!(
        out.status.success(),
        "{}: {}",
        wasm.display(),
        String::from_utf8_lossy(&out.stderr)
    );
    serde_json::from_slice(&out.stdout).expect("one JSON value")
}

/// Snapshots of every shape cost_budget meets: priced and unpriced types, offline managers,
/// busy, idle and starting workers, capability amounts, verdicts, several demand groups.
/// Deterministic (a fixed linear congruential sequence).
fn varied_snapshots(count: usize) -> serde_json::Value {
    let mut seed: u64 = 0x2545_f491_4f6c_dd1d;
    let mut next = move |below: u64| {
        seed = seed
            .wrapping_mul(6_364_136_223_846_793_005)
            .wrapping_add(1_442_695_040_888_963_407);
        (seed >> 33) % below.max(1)
    };
    let types = ["cheap", "mid", "pricey", "unpriced"];
    let verdicts = ["match", "no-match", "unknown"];
    let snapshots: Vec<serde_json::Value> = (0..count)
        .map(|step| {
            let managers: Vec<serde_json::Value> = (0..1 + next(8))
                .map(|m| {
                    let workers: Vec<serde_json::Value> = (0..next(6))
                        .map(|w| {
                            serde_json::json!({
                                "id": m * 100 + w,
                                "slots": 1 + next(2),
                                "busy": next(3).min(1),
                                "idle_ms": next(90_000),
                            })
                        })
                        .collect();
                    serde_json::json!({
                        "id": format!("m{m}"),
                        "worker_type": types[next(4) as usize],
                        "max_task_concurrency": next(12),
                        "worker_slots": 1 + next(3),
                        "online": next(6) > 0,
                        "workers": workers,
                        "starting": next(3),
                        "capabilities": [["gpu", next(3)]],
                        "environments": [["big", verdicts[next(3) as usize]]],
                    })
                })
                .collect();
            let demand: Vec<serde_json::Value> = (0..next(4))
                .map(|_| {
                    let environments: Vec<&str> = if next(2) == 0 { vec![] } else { vec!["big"] };
                    serde_json::json!({
                        "capabilities": [["gpu", next(3)]],
                        "environments": environments,
                        "queued": next(40),
                        "running": next(5),
                    })
                })
                .collect();
            serde_json::json!({
                "now_ms": step as u64 * 1000,
                "scale_down_delay_ms": 30_000,
                "managers": managers,
                "demand": demand,
            })
        })
        .collect();
    serde_json::Value::Array(snapshots)
}

/// `weir --output json ARGS...` from the repository root, its JSON output.
fn weir_json(args: &[&str], cache: &Path) -> serde_json::Value {
    let out = Command::new(env!("CARGO_BIN_EXE_weir"))
        .current_dir(root())
        .args(["--output", "json"])
        .args(args)
        .env("WEIR_CACHE_DIR", cache)
        .output()
        .expect("weir runs");
    serde_json::from_slice(&out.stdout).unwrap_or_else(|e| {
        panic!(
            "weir {args:?}: {e}: {}",
            String::from_utf8_lossy(&out.stderr)
        )
    })
}

/// The worker-seconds of worker type `kind` in a `simulate --workload` report.
fn seconds_of(report: &serde_json::Value, kind: &str) -> f64 {
    let types = report["by_worker_type"].as_array().expect("by_worker_type");
    let found = types
        .iter()
        .find(|t| t[0] == kind)
        .expect("the worker type");
    found[1].as_f64().expect("seconds")
}

#[test]
#[ignore = "needs the wasm32-wasip2 target (rustup target add wasm32-wasip2); CI runs it (--include-ignored)"]
fn consolidate_passes_its_scenarios_and_empties_the_expensive_tier_sooner_than_the_waterfall() {
    let dir = tempfile::tempdir().unwrap();
    let cache = dir.path().join("cache");
    let wasm = build_example("consolidate", "rust", dir.path());
    let wasm = wasm.to_str().expect("utf-8 path");
    let content = "@examples/policies/consolidate/content.csv";
    let tested = weir_json(
        &[
            "policy",
            "test",
            "--policy",
            wasm,
            "--content",
            content,
            "examples/policies/scenarios/consolidate.toml",
        ],
        &cache,
    );
    assert_eq!(tested["failed"], 0, "{tested:#}");
    assert_eq!(tested["passed"], 7, "{tested:#}");
    // The plain waterfall fails them: they test the drain, not the waterfall underneath.
    let plain = weir_json(
        &[
            "policy",
            "test",
            "--policy",
            "waterfall_v2",
            "--content",
            content,
            "examples/policies/scenarios/consolidate.toml",
        ],
        &cache,
    );
    assert!(plain["failed"].as_u64().expect("failed") >= 3, "{plain:#}");
    // The burst, tail and second burst, in a closed loop: the same tasks done, fewer pricey
    // worker-seconds, and no more cheap ones than the pricey ones saved.
    let workload = "examples/policies/consolidate/workload.toml";
    let run = |policy: &str| {
        let plot = dir.path().join(format!("{}.svg", policy.len()));
        let plot = plot.to_str().expect("utf-8 path").to_string();
        weir_json(
            &[
                "policy",
                "simulate",
                "--policy",
                policy,
                "--content",
                content,
                "--workload",
                workload,
                "--plot",
                &plot,
            ],
            &cache,
        )
    };
    let (waterfall, consolidate) = (run("waterfall_v2"), run(wasm));
    assert!(waterfall["finished"].as_u64().expect("finished") > 100);
    assert_eq!(waterfall["finished"], consolidate["finished"]);
    let pricey = (
        seconds_of(&waterfall, "pricey"),
        seconds_of(&consolidate, "pricey"),
    );
    let cheap = (
        seconds_of(&waterfall, "cheap"),
        seconds_of(&consolidate, "cheap"),
    );
    println!(
        "pricey worker-seconds: waterfall {}, consolidate {}",
        pricey.0, pricey.1
    );
    println!(
        "cheap worker-seconds: waterfall {}, consolidate {}",
        cheap.0, cheap.1
    );
    assert!(pricey.1 < pricey.0, "pricey {pricey:?}");
    assert!(
        cheap.1 - cheap.0 < pricey.0 - pricey.1,
        "cheap {cheap:?}, pricey {pricey:?}"
    );
    // Some decision drained, and every one of them within the budget the run was given
    // (the scheduler's check ran on each: a refused one fails the run).
    let steps = consolidate["steps"].as_array().expect("steps");
    let drained = steps
        .iter()
        .flat_map(|s| s["decisions"].as_array().into_iter().flatten())
        .filter(|d| d["drain"].as_array().is_some_and(|d| !d.is_empty()))
        .count();
    assert!(drained > 0, "consolidate never drained");
}
