//! The same condition (`cpu_ge`) written in Rust, C, Python, JavaScript and WAT
//! (examples/conditions/*): each is built from source by its `build.sh` and registered with
//! `weir env register` against live workers that offer 2 and 8 CPUs (`worker --cpus`).
//!
//! Each needs its language's toolchain, which a plain Rust set-up does not have, so each is
//! `#[ignore]`d with what it needs: `cargo test` counts them as ignored (not passed) and says
//! why. `cargo test -- --include-ignored` runs them, and there a missing toolchain fails the
//! test with what to install; `.ci/run` installs every toolchain
//! (examples/conditions/install-toolchains.sh) and runs them so.

mod common;

use std::path::{Path, PathBuf};
use std::process::Command;

use common::{Cluster, text};
use serde_json::Value;

/// Build examples/conditions/<language> into `dir`. A missing toolchain fails the test: an
/// ignored test runs only when asked for (`--include-ignored`), and then it must really run.
fn build(language: &str, dir: &Path) -> PathBuf {
    let script = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("examples/conditions")
        .join(language)
        .join("build.sh");
    let out = dir.join(format!("cpu_ge_{language}.wasm"));
    let built = Command::new("bash")
        .arg(&script)
        .arg(&out)
        .output()
        .expect("bash runs");
    if built.status.code() == Some(3) {
        panic!(
            "{}(examples/conditions/install-toolchains.sh installs it)",
            text(&built.stderr)
        );
    }
    assert!(
        built.status.success(),
        "{} failed: {}{}",
        script.display(),
        text(&built.stdout),
        text(&built.stderr)
    );
    out
}

/// A cluster with one worker offering 2 CPUs and one offering 8.
fn two_workers() -> Cluster {
    let mut cluster = Cluster::start("10");
    cluster.worker("two-cpus", &["--slots", "2", "--cpus", "2"]);
    cluster.worker("eight-cpus", &["--slots", "2", "--cpus", "8"]);
    cluster.await_status(|s| common::workers(s) == 2);
    cluster
}

fn register(cluster: &Cluster, name: &str, component: &Path, config: &[&str]) -> Value {
    let component = component.to_str().unwrap();
    let mut args = vec!["env", "register", name, component, "--wait"];
    for item in config {
        args.extend(["--config", item]);
    }
    let registered = cluster.json(&args);
    let list = registered
        .as_array()
        .unwrap_or_else(|| panic!("a list of environments: {registered}"));
    assert_eq!(list.len(), 1, "{registered}");
    assert_eq!(list[0]["pending"], serde_json::json!([]), "{registered}");
    list[0].clone()
}

/// The verdicts, the setup value handed to tasks, and the condition's own errors.
fn condition_works_through_real_workers(language: &str) {
    let dir = tempfile::tempdir().unwrap();
    let component = build(language, dir.path());
    let cluster = two_workers();

    let env = register(&cluster, "cpu_ge", &component, &["min=4"]);
    assert_eq!(
        common::sorted_names(&env["matching"]),
        ["eight-cpus"],
        "{language}: {env}"
    );
    assert_eq!(
        common::sorted_names(&env["not_matching"]),
        ["two-cpus"],
        "{language}: {env}"
    );
    assert_eq!(env["erroring"], serde_json::json!([]), "{language}: {env}");

    // Tasks needing it run only on the 8-CPU worker and see its `setup` value.
    let done = cluster.json(&[
        "submit",
        "--count",
        "6",
        "--env",
        "cpu_ge",
        "--wait",
        "--",
        "sh",
        "-c",
        "echo $WEIR_WORKER_NAME $WEIR_ENV_CPU_GE_CPUS",
    ]);
    assert_eq!(done["counts"]["succeeded"], 6, "{language}: {done}");
    for result in cluster
        .json(&["results", &done["job"].to_string()])
        .as_array()
        .unwrap()
    {
        assert_eq!(
            result["stdout"].as_str().unwrap().trim(),
            "eight-cpus 8",
            "{language}: {result}"
        );
    }

    // Bad config is the condition's error on every worker, never a silent no-match.
    for (name, config, reason) in [
        (
            "cpu_ge_word",
            &["min=four"][..],
            "cpu_ge: config `min` must be a whole number of CPUs",
        ),
        (
            "cpu_ge_sign",
            &["min=+4"][..],
            "cpu_ge: config `min` must be a whole number of CPUs",
        ),
        (
            "cpu_ge_none",
            &[][..],
            "cpu_ge: missing config `min` (a whole number of CPUs, e.g. min=4)",
        ),
        (
            "cpu_ge_typo",
            &["mni=4"][..],
            "cpu_ge: unknown config key; cpu_ge takes only `min`",
        ),
    ] {
        let env = register(&cluster, name, &component, config);
        let erroring = env["erroring"].as_array().unwrap();
        assert_eq!(erroring.len(), 2, "{language} {config:?}: {env}");
        for entry in erroring {
            assert!(
                entry[1].as_str().unwrap().contains(reason),
                "{language} {config:?}: {entry}"
            );
        }
    }
}

#[test]
#[ignore = "needs the wasm32-wasip2 target; CI runs it (--include-ignored)"]
fn condition_in_rust() {
    condition_works_through_real_workers("rust");
}

#[test]
#[ignore = "needs clang, lld, wasi-libc, wit-bindgen and wasm-tools; CI runs it (--include-ignored)"]
fn condition_in_c() {
    condition_works_through_real_workers("c");
}

#[test]
#[ignore = "needs componentize-py; CI runs it (--include-ignored)"]
fn condition_in_python() {
    condition_works_through_real_workers("python");
}

#[test]
#[ignore = "needs node and npm; CI runs it (--include-ignored)"]
fn condition_in_javascript() {
    condition_works_through_real_workers("js");
}

#[test]
#[ignore = "needs wasm-tools; CI runs it (--include-ignored)"]
fn condition_in_wat() {
    condition_works_through_real_workers("wat");
}

/// How each worker loaded an environment's condition: worker name -> origin.
fn origins(env: &Value) -> Vec<(String, String)> {
    let mut origins: Vec<(String, String)> = env["loads"]
        .as_array()
        .unwrap()
        .iter()
        .map(|load| {
            let micros = load[1]["micros"].as_u64().unwrap();
            eprintln!(
                "{}: {} in {:.1} ms",
                load[0],
                load[1]["origin"],
                micros as f64 / 1e3
            );
            (
                load[0].as_str().unwrap().to_string(),
                load[1]["origin"].as_str().unwrap().to_string(),
            )
        })
        .collect();
    origins.sort();
    origins
}

fn pair(worker: &str, origin: &str) -> (String, String) {
    (worker.to_string(), origin.to_string())
}

/// The 18 MB Python component is compiled once per machine: a worker started later on the same
/// machine takes it from the disk cache, and registering it again (another name, another config)
/// finds it already loaded.
#[test]
#[ignore = "needs componentize-py; CI runs it (--include-ignored)"]
fn the_python_condition_compiles_once_per_machine() {
    let dir = tempfile::tempdir().unwrap();
    let component = build("python", dir.path());
    let mut cluster = Cluster::start("10");
    // The workers' machine has its own cache, apart from the scheduler's.
    let machine_cache = cluster.dir.path().join("machine-cache");
    cluster.worker_with_cache("first", &["--slots", "1", "--cpus", "8"], &machine_cache);
    cluster.await_status(|s| common::workers(s) == 1);

    let env = register(&cluster, "python", &component, &["min=4"]);
    assert_eq!(common::sorted_names(&env["matching"]), ["first"], "{env}");
    assert_eq!(origins(&env), [pair("first", "compiled")], "{env}");

    // A second worker on the same machine: the registered set reaches it on joining.
    cluster.worker_with_cache("second", &["--slots", "1", "--cpus", "2"], &machine_cache);
    let deadline = common::Deadline::start("the second worker's load of the environment");
    let env = loop {
        let list = cluster.json(&["env", "list"]);
        let env = list[0].clone();
        if env["loads"].as_array().is_some_and(|l| l.len() == 2)
            && env["not_matching"].as_array().is_some_and(|m| m.len() == 1)
        {
            break env;
        }
        deadline.pause(list);
    };
    assert_eq!(
        origins(&env),
        [pair("first", "compiled"), pair("second", "disk-cache")],
        "{env}"
    );
    assert_eq!(
        common::sorted_names(&env["not_matching"]),
        ["second"],
        "{env}"
    );

    // Registered again: both workers have it loaded already.
    let env = register(&cluster, "python_again", &component, &["min=2"]);
    assert_eq!(
        common::sorted_names(&env["matching"]),
        ["first", "second"],
        "{env}"
    );
    assert_eq!(
        origins(&env),
        [pair("first", "memory"), pair("second", "memory")],
        "{env}"
    );
}
