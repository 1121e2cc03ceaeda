//! The `weir` executable's plugin and policy commands, run as a user would.

mod common;

use std::path::Path;
use std::process::{Command, Output};

use common::Cluster;

fn weir(args: &[&str]) -> (Output, tempfile::TempDir) {
    let cache = tempfile::tempdir().unwrap();
    let output = Command::new(env!("CARGO_BIN_EXE_weir"))
        .args(args)
        .current_dir(env!("CARGO_MANIFEST_DIR"))
        .env("WEIR_CACHE_DIR", cache.path())
        .env_remove("RUST_LOG")
        .output()
        .expect("weir runs");
    (output, cache)
}

fn stdout(output: &Output) -> String {
    String::from_utf8_lossy(&output.stdout).into_owned()
}

fn stderr(output: &Output) -> String {
    String::from_utf8_lossy(&output.stderr).into_owned()
}

#[test]
fn inspect_names_the_world_of_each_bundled_plugin() {
    for (file, world) in [
        (
            "plugins/waterfall_v2.wasm",
            "world:   policy, weir:plugin@0.2.0",
        ),
        (
            "plugins/waterfall_v1.wasm",
            "world:   policy, weir:plugin@0.2.0",
        ),
        (
            "plugins/fixtures/frozen/waterfall_v2-0.1.0.wasm",
            "world:   policy, weir:plugin@0.1.0",
        ),
        (
            "plugins/mem_gt.wasm",
            "world:   environment, weir:plugin@0.1.0",
        ),
    ] {
        let (out, _cache) = weir(&["plugin", "inspect", file]);
        assert!(out.status.success(), "{file}: {}", stderr(&out));
        assert!(stdout(&out).contains(world), "{file}: {}", stdout(&out));
    }
    let (out, _cache) = weir(&[
        "--output",
        "json",
        "plugin",
        "inspect",
        "plugins/mem_gt.wasm",
    ]);
    let value: serde_json::Value = serde_json::from_slice(&out.stdout).expect("one JSON value");
    assert_eq!(value["world"], "environment");
    assert_eq!(value["version"], "0.1.0");
    assert_eq!(value["load"], "compiled");
}

#[test]
fn inspect_of_a_text_file_fails_with_one_clear_line() {
    let (out, _cache) = weir(&["plugin", "inspect", "Cargo.toml"]);
    assert_eq!(out.status.code(), Some(1));
    assert!(stdout(&out).is_empty());
    assert_eq!(
        stderr(&out),
        "error: Cargo.toml: not a WebAssembly component (no WebAssembly header)\n"
    );
    let (out, _cache) = weir(&["--output", "json", "plugin", "inspect", "no/such/file.wasm"]);
    assert_eq!(out.status.code(), Some(1));
    let value: serde_json::Value = serde_json::from_slice(&out.stdout).expect("one JSON value");
    assert!(
        value["error"]
            .as_str()
            .unwrap()
            .starts_with("no/such/file.wasm: cannot read: No such file"),
        "{value}"
    );
}

#[test]
fn policy_check_accepts_the_reference_configs_and_prints_tiers() {
    let (out, _cache) = weir(&[
        "policy",
        "check",
        "--config",
        "examples/configs/waterfall_v1.toml",
    ]);
    assert!(out.status.success(), "{}", stderr(&out));
    assert_eq!(
        stdout(&out),
        "waterfall_v1: content is valid; 1 tier\n  priority   1: wm1, wm2, wm3, wm4, wm5\n"
    );
    let (out, _cache) = weir(&[
        "policy",
        "check",
        "--config",
        "examples/configs/waterfall_v2.toml",
    ]);
    assert!(out.status.success(), "{}", stderr(&out));
    assert!(
        stdout(&out).contains("priority   1: native, native1, sym, aws, batch"),
        "{}",
        stdout(&out)
    );
    // The same engine given as a component file, content inline.
    let (out, _cache) = weir(&[
        "policy",
        "check",
        "--policy",
        "plugins/waterfall_v2.wasm",
        "--content",
        "2, burst, min=1, cooldown=5m\n1, native",
    ]);
    assert!(out.status.success(), "{}", stderr(&out));
    assert!(
        stdout(&out)
            .ends_with("  priority   1: native\n  priority   2: burst (min=1, cooldown=300s)\n"),
        "{}",
        stdout(&out)
    );
}

#[test]
fn policy_check_reports_bad_content_with_its_line() {
    let dir = tempfile::tempdir().unwrap();
    let content = dir.path().join("policy.csv");
    std::fs::write(
        &content,
        "# priority, worker_type\n1, native\n1, native, 3\n",
    )
    .unwrap();
    let arg = format!("@{}", content.display());
    let (out, _cache) = weir(&[
        "policy",
        "check",
        "--policy",
        "waterfall_v2",
        "--content",
        &arg,
    ]);
    assert_eq!(out.status.code(), Some(1));
    assert_eq!(
        stderr(&out),
        "error: waterfall_v2: create failed: line 3: expected `priority, worker_type`, found 3 fields in `1, native, 3`\n"
    );
    // A policy engine of the wrong world.
    let (out, _cache) = weir(&[
        "policy",
        "check",
        "--policy",
        "plugins/mem_gt.wasm",
        "--content",
        "1, a",
    ]);
    assert_eq!(out.status.code(), Some(1));
    assert!(
        stderr(&out).contains("does not implement the `policy` world"),
        "{}",
        stderr(&out)
    );
    // A TOML file with a typo in a key.
    let toml = dir.path().join("scheduler.toml");
    std::fs::write(
        &toml,
        "policy_engine = \"waterfall_v2\"\npolicy_content = \"1, a\"\n",
    )
    .unwrap();
    let (out, _cache) = weir(&["policy", "check", "--config", toml.to_str().unwrap()]);
    assert_eq!(out.status.code(), Some(1));
    assert!(
        stderr(&out).contains("unknown field `policy_engine`"),
        "{}",
        stderr(&out)
    );
}

#[test]
fn policy_simulate_replays_a_trace() {
    let dir = tempfile::tempdir().unwrap();
    let trace = dir.path().join("trace.json");
    let snapshot = |queued: u32| {
        serde_json::json!({
            "now_ms": 0,
            "managers": [
                { "id": "n", "worker_type": "native", "max_task_concurrency": 2, "worker_slots": 1, "online": true },
                { "id": "b", "worker_type": "burst", "max_task_concurrency": 4, "worker_slots": 1, "online": true }
            ],
            "demand": [ { "queued": queued } ]
        })
    };
    std::fs::write(
        &trace,
        serde_json::json!([snapshot(1), snapshot(5)]).to_string(),
    )
    .unwrap();
    let trace = trace.to_str().unwrap();
    let (out, _cache) = weir(&[
        "--output",
        "json",
        "policy",
        "simulate",
        "--policy",
        "waterfall_v2",
        "--content",
        "1,native\n2,burst",
        "--trace",
        trace,
    ]);
    assert!(out.status.success(), "{}", stderr(&out));
    let value: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    let desired = |step: usize| -> Vec<u64> {
        value[step]["decisions"]
            .as_array()
            .unwrap()
            .iter()
            .map(|d| d["desired_workers"].as_u64().unwrap())
            .collect()
    };
    assert_eq!(desired(0), vec![1, 0]);
    // Five tasks: native is asked for both its workers; the overflow waits until they are up.
    assert_eq!(desired(1), vec![2, 0]);
}

#[test]
fn demo_runs_with_no_flags_and_drains_the_cluster() {
    let (out, _cache) = weir(&["--output", "json", "demo"]);
    assert!(out.status.success(), "{}", stderr(&out));
    let value: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    let ticks = value["ticks"].as_array().unwrap();
    let last = ticks.last().unwrap();
    assert_eq!(last["done"], 12);
    assert_eq!(last["workers"]["native_1"], 0);
    assert_eq!(last["workers"]["burst_1"], 0);
    // native (tier 1) is never below burst (tier 2) while work is queued.
    for tick in ticks {
        if tick["queued"].as_u64().unwrap() > 0 {
            assert_eq!(tick["workers"]["native_1"], 2, "{tick}");
        }
    }
    assert!(
        Path::new(env!("CARGO_MANIFEST_DIR"))
            .join("plugins/mem_gt.wasm")
            .exists()
    );
    assert_eq!(value["conditions"][1]["verdict"], "no-match");
}

#[test]
fn durations_in_seconds_are_checked_the_same_way_by_every_executable() {
    let run = |exe: &str, args: &[&str]| {
        let out = Command::new(exe).args(args).output().expect("runs");
        assert_eq!(out.status.code(), Some(2), "{exe} {args:?}");
        stderr(&out)
    };
    let scheduler = env!("CARGO_BIN_EXE_scheduler");
    let error = run(scheduler, &["--heartbeat-timeout", "0", "--check"]);
    assert!(
        error.contains("`0`: must be more than zero seconds"),
        "{error}"
    );
    let error = run(scheduler, &["--forget-after", "soon", "--check"]);
    assert!(
        error.contains("`soon` is not zero or a positive number of seconds"),
        "{error}"
    );
    let error = run(
        scheduler,
        &["--forget-after", "99999999999999999999", "--check"],
    );
    assert!(error.contains("more than this accepts"), "{error}");
    let error = run(env!("CARGO_BIN_EXE_worker"), &["--env-recheck", "inf"]);
    assert!(
        error.contains("`inf` is not zero or a positive number"),
        "{error}"
    );
    let error = run(
        env!("CARGO_BIN_EXE_weir"),
        &["submit", "--timeout", "NaN", "--", "true"],
    );
    assert!(
        error.contains("`NaN` is not zero or a positive number"),
        "{error}"
    );
    let error = run(
        env!("CARGO_BIN_EXE_worker-manager"),
        &["--heartbeat-interval", "0"],
    );
    assert!(error.contains("must be more than zero seconds"), "{error}");
    // A rate: zero or more a second, fractions allowed.
    for bad in ["-1", "inf", "fast", "1e-300", "2000000"] {
        let error = run(scheduler, &[&format!("--idle-beats={bad}"), "--check"]);
        assert!(
            error.contains(&format!(
                "`{bad}` is not zero or a positive number a second up to"
            )),
            "{error}"
        );
    }
}

/// README's first command: a whole local cluster, no flags, every result checked. (It also
/// guards the worker's frame reading: a read cut short by a finishing task once misaligned the
/// stream while the wasm component's frame was arriving, and the wasm job never ended.)
#[test]
fn weir_local_runs_a_cluster_and_checks_every_result() {
    let (output, _cache) = weir(&["local"]);
    let out = stdout(&output);
    assert!(output.status.success(), "{out}{}", stderr(&output));
    assert!(
        out.contains("command tasks: 500/500 correct results"),
        "{out}"
    );
    assert!(out.contains("wasm tasks: 500/500 correct results"), "{out}");
}

#[test]
fn worker_manager_refuses_caps_that_cannot_mean_anything() {
    for (args, expected) in [
        (
            &["--max-task-concurrency", "0"][..],
            "--max-task-concurrency 0 would never run a task",
        ),
        (
            &["--fixed", "2", "--max-task-concurrency", "4"][..],
            "cannot be used with",
        ),
    ] {
        let out = Command::new(env!("CARGO_BIN_EXE_worker-manager"))
            .args(args)
            .output()
            .unwrap();
        assert!(!out.status.success(), "{args:?}");
        assert!(
            stderr(&out).contains(expected),
            "{args:?}: {}",
            stderr(&out)
        );
    }
}

#[test]
fn a_command_line_that_does_not_parse_still_answers_json_when_asked() {
    let (output, _cache) = weir(&["--output", "json", "results", "abc"]);
    assert_eq!(output.status.code(), Some(2));
    let value: serde_json::Value = serde_json::from_slice(&output.stdout).unwrap();
    assert_eq!(
        value["error"],
        "invalid value 'abc' for '<JOB>': invalid digit found in string"
    );
}

const SCENARIOS: &str = "examples/policies/scenarios/waterfall.toml";

#[test]
fn policy_test_passes_the_waterfall_scenarios_with_both_engines() {
    for engine in ["waterfall_v1", "waterfall_v2"] {
        let (out, _cache) = weir(&[
            "policy",
            "test",
            "--policy",
            engine,
            "--content",
            "1, a\n2, b\n",
            SCENARIOS,
        ]);
        assert!(
            out.status.success(),
            "{engine}: {}{}",
            stdout(&out),
            stderr(&out)
        );
        let text = stdout(&out);
        assert!(
            text.contains(&format!("{engine}: 12 passed, 0 failed")),
            "{text}"
        );
        assert!(!text.contains("FAIL"), "{text}");
    }
}

#[test]
fn policy_test_fails_a_scenario_whose_expectation_is_wrong() {
    let dir = tempfile::tempdir().unwrap();
    let wrong = dir.path().join("wrong.toml");
    std::fs::write(
        &wrong,
        r#"
[[scenario]]
name = "right"
snapshot = { now_ms = 0, managers = [{ id = "a", worker_type = "a", max_task_concurrency = 4, worker_slots = 1, online = true }], demand = [{ queued = 3 }] }
expect = [{ manager = "a", desired = 3 }]

[[scenario]]
name = "wrong on every count"
snapshot = { now_ms = 0, managers = [{ id = "a", worker_type = "a", max_task_concurrency = 4, worker_slots = 1, online = true }], demand = [{ queued = 3 }] }
expect = [
  { manager = "a", desired = 4, stop_contains = [99], reason_contains = "no such words" },
  { manager = "a", desired_max = 2 },
]

[[scenario]]
name = "not a scenario a scheduler could send"
snapshot = { now_ms = 0, managers = [{ id = "a", worker_type = "a", max_task_concurrency = 4, worker_slots = 1, online = true }, { id = "a", worker_type = "a", max_task_concurrency = 4, worker_slots = 1, online = true, drained = [5] }] }
expect = [{ manager = "ghost" }, { manager = "a", desired_min = 3, desired_max = 1 }]
"#,
    )
    .unwrap();
    let path = wrong.to_str().unwrap();
    let (out, _cache) = weir(&[
        "policy",
        "test",
        "--policy",
        "waterfall_v1",
        "--content",
        "1, a",
        path,
    ]);
    assert_eq!(out.status.code(), Some(1), "{}", stdout(&out));
    let text = stdout(&out);
    for line in [
        "ok   ",
        "FAIL ",
        "a: desired 3, expected 4",
        "a: desired 3, expected at most 2",
        "a: does not stop worker 99",
        "does not say `no such words`",
        "invalid scenario: two managers `a`",
        "`ghost`, which is not a manager of the snapshot",
        "desired_min 3 > desired_max 1",
        "`a`'s drained must list its own workers once each, in id order",
        "`a` has 1 drained, past its drain_budget 0",
        "waterfall_v1: 1 passed, 2 failed",
    ] {
        assert!(text.contains(line), "missing `{line}` in:\n{text}");
    }
    assert!(
        stderr(&out).contains("2 of 3 scenarios failed"),
        "{}",
        stderr(&out)
    );
    // JSON: exactly one value, with the failures in it.
    let (out, _cache) = weir(&[
        "--output",
        "json",
        "policy",
        "test",
        "--policy",
        "waterfall_v1",
        "--content",
        "1, a",
        path,
    ]);
    assert_eq!(out.status.code(), Some(1));
    let value: serde_json::Value = serde_json::from_slice(&out.stdout).expect("one JSON value");
    assert_eq!(value["failed"], 2, "{value}");
    assert_eq!(value["scenarios"][1]["passed"], false, "{value}");
    assert_eq!(
        value["scenarios"][1]["failures"].as_array().map(Vec::len),
        Some(4),
        "{value}"
    );
}

#[test]
fn policy_test_names_a_bad_scenario_file() {
    let dir = tempfile::tempdir().unwrap();
    let bad = dir.path().join("bad.toml");
    std::fs::write(
        &bad,
        "[[scenario]]\nname = \"x\"\nsnapshot = { now_ms = 0, managers = [] }\ndesird = 3\n",
    )
    .unwrap();
    let (out, _cache) = weir(&[
        "policy",
        "test",
        "--policy",
        "waterfall_v1",
        "--content",
        "1, a",
        bad.to_str().unwrap(),
    ]);
    assert_eq!(out.status.code(), Some(1));
    let error = stderr(&out);
    assert!(
        error.contains("bad.toml") && error.contains("desird"),
        "{error}"
    );
}

#[test]
fn policy_simulate_draws_the_trace_as_a_chart() {
    let dir = tempfile::tempdir().unwrap();
    let trace = dir.path().join("trace.json");
    let snapshot = |now_ms: u64, queued: u32, live: usize| {
        let workers: Vec<_> = (0..live)
            .map(|i| serde_json::json!({ "id": i, "slots": 1, "busy": 1 }))
            .collect();
        serde_json::json!({
            "now_ms": now_ms,
            "managers": [
                { "id": "n", "worker_type": "native", "max_task_concurrency": 2, "worker_slots": 1, "online": true, "workers": workers },
                { "id": "b", "worker_type": "burst", "max_task_concurrency": 4, "worker_slots": 1, "online": true }
            ],
            "demand": [ { "queued": queued, "running": live } ]
        })
    };
    let trace_json = serde_json::json!([
        snapshot(0, 6, 0),
        snapshot(1000, 4, 2),
        snapshot(2000, 0, 2)
    ]);
    std::fs::write(&trace, trace_json.to_string()).unwrap();
    let svg = dir.path().join("chart.svg");
    // The trace through waterfall_v2, drawn into the chart (`output`: cli or json).
    let simulate = |output: &str| {
        let (out, _cache) = weir(&[
            "--output",
            output,
            "policy",
            "simulate",
            "--policy",
            "waterfall_v2",
            "--content",
            "1,native\n2,burst",
            "--trace",
            trace.to_str().unwrap(),
            "--plot",
            svg.to_str().unwrap(),
        ]);
        assert!(out.status.success(), "{}", stderr(&out));
        out
    };
    simulate("cli");
    let chart = std::fs::read_to_string(&svg).expect("the chart is written");
    assert!(
        chart.starts_with("<svg"),
        "{}",
        &chart[..chart.len().min(200)]
    );
    for label in [
        "queued tasks",
        "n: desired",
        "b: live + starting",
        "seconds",
    ] {
        assert!(chart.contains(label), "no `{label}` in the chart");
    }
    // One line per series: queued, and desired + live for each of the two managers.
    assert!(chart.matches("<polyline").count() >= 5, "{chart}");
    // Times out of order and at the far end of u64 (it once overflowed in the plotting crate).
    let odd = serde_json::json!([
        snapshot(10_000, 3, 0),
        snapshot(0, 2, 1),
        snapshot(u64::MAX, 1, 2)
    ]);
    std::fs::write(&trace, odd.to_string()).unwrap();
    let out = simulate("json");
    let value: serde_json::Value = serde_json::from_slice(&out.stdout).expect("one JSON value");
    assert_eq!(value.as_array().map(Vec::len), Some(3));
}

/// `weir bench --simulated-workers`: the simulated peers register, heartbeat, take every task
/// and the row is printed (the figures themselves are for BENCHMARKS.md, not asserted).
#[test]
fn bench_with_simulated_workers_prints_its_row() {
    let (output, _dir) = weir(&[
        "bench",
        "--simulated-workers",
        "20",
        "--simulated-managers",
        "4",
    ]);
    assert!(output.status.success(), "{}", stderr(&output));
    let out = stdout(&output);
    assert!(
        out.lines().any(|l| l.starts_with("| 20 | 4 | ")),
        "no row for 20 workers under 4 managers: {out}"
    );
}

#[test]
fn worker_check_fails_when_a_condition_answers_error() {
    let check = |plugin: &str| {
        let cache = tempfile::tempdir().unwrap();
        Command::new(env!("CARGO_BIN_EXE_worker"))
            .args(["--check", "--env-plugin", plugin])
            .env("WEIR_CACHE_DIR", cache.path())
            .env_remove("RUST_LOG")
            .output()
            .expect("worker runs")
    };
    let wrong = check("big=mem_gt,threshold=lots");
    assert!(!wrong.status.success(), "{}", stdout(&wrong));
    assert!(stdout(&wrong).contains("big: error("), "{}", stdout(&wrong));
    let err = stderr(&wrong);
    assert!(
        err.contains("1 of 1 conditions failed to evaluate: big: error("),
        "{err}"
    );
    let missing = check("big=mem_gt");
    assert!(!missing.status.success(), "{}", stdout(&missing));
    // A verdict, even no-match, is an answer: exit 0.
    let fine = check("big=mem_gt,threshold=1");
    assert!(fine.status.success(), "{}{}", stdout(&fine), stderr(&fine));
    let no = check("huge=mem_gt,threshold=1000000TB");
    assert!(no.status.success(), "{}{}", stdout(&no), stderr(&no));
    assert!(stdout(&no).contains("huge: no-match"), "{}", stdout(&no));
}

#[test]
fn workers_wait_not_on_a_terminal_prints_only_the_answer() {
    let mut cluster = Cluster::start("5");
    cluster.worker("first", &[]);
    // Waiting for two while one (or none yet) is there: the counts on the way are for a
    // terminal, not for a log or a script.
    let wait = cluster
        .weir_command(&cluster.access_file(), &["workers", "wait", "2"])
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .expect("weir runs");
    cluster.worker("second", &[]);
    let output = wait.wait_with_output().expect("weir ends");
    assert!(output.status.success(), "{}", stderr(&output));
    assert_eq!(stdout(&output), "2 workers ready\n");
    assert_eq!(stderr(&output), "");
}

#[test]
fn submit_wait_says_within_seconds_that_nothing_can_run_a_task_and_exits_3() {
    let mut cluster = Cluster::start("5");
    // A worker whose condition answers no-match (more memory than any machine has).
    cluster.worker(
        "small",
        &["--env-plugin", "huge=mem_gt,threshold=1000000TB"],
    );
    cluster.await_status(|s| common::workers(s) == 1);
    let out = cluster.weir(&["submit", "--cap", "gpu=1", "--wait", "--", "true"]);
    assert_eq!(out.status.code(), Some(3), "{}", stderr(&out));
    let err = stderr(&out);
    assert!(
        err.contains(
            "no worker or manager can run task 1: 1 live worker with gpu=0 (needs 1); \
             no worker manager; see `weir explain 1`"
        ),
        "{err}"
    );
    assert!(err.contains("`weir wait 1` waits on"), "{err}");
    // The task stays queued; `weir wait` says the same, in JSON too.
    let out = cluster.weir(&["--output", "json", "wait", "1"]);
    assert_eq!(out.status.code(), Some(3), "{}", stderr(&out));
    let value: serde_json::Value = serde_json::from_slice(&out.stdout).expect("one JSON value");
    assert_eq!(value["unrunnable"]["task"], 1, "{value}");
    // An environment that no worker matches, definitely.
    let out = cluster.weir(&["submit", "--env", "huge", "--wait", "--", "true"]);
    assert_eq!(out.status.code(), Some(3), "{}", stderr(&out));
    let err = stderr(&out);
    assert!(
        err.contains("run task 2: 1 live worker with `huge`: no-match"),
        "{err}"
    );
}

/// `weir workers wait` is how a script waits for a cluster it starts (`scheduler & ... weir
/// workers wait N`): where the access file is left by a scheduler that is gone (or not written
/// yet), it waits for one to start, saying so once, where other commands fail at once.
#[test]
fn workers_wait_waits_for_a_scheduler_to_start_where_others_fail_at_once() {
    use std::io::{BufRead, BufReader};
    let mut cluster = Cluster::start("5");
    cluster.kill_scheduler();
    let status = cluster.weir(&["status"]);
    assert!(!status.status.success());
    assert!(
        stderr(&status).contains("is not running"),
        "{}",
        stderr(&status)
    );

    let mut wait = cluster
        .weir_command(
            &cluster.access_file(),
            &["workers", "wait", "1", "--timeout", "600"],
        )
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .expect("weir runs");
    let mut err = BufReader::new(wait.stderr.take().expect("piped"));
    let mut line = String::new();
    err.read_line(&mut line).expect("weir says why it waits");
    assert!(
        line.starts_with("waiting for a scheduler to start (the scheduler that wrote"),
        "{line}"
    );
    // Only now is a scheduler started, and a worker: the wait ends with the answer.
    cluster.start_scheduler(&["--heartbeat-timeout", "5"]);
    cluster.worker("late", &[]);
    let output = wait.wait_with_output().expect("weir ends");
    assert!(output.status.success(), "{line}");
    assert_eq!(stdout(&output), "1 worker ready\n");
}

/// An argument that is not UTF-8 (a task's own, after `--`) is an error, not a panic.
#[test]
fn an_argument_that_is_not_utf8_is_refused_not_a_panic() {
    use std::os::unix::ffi::OsStrExt;
    let bad = std::ffi::OsStr::from_bytes(b"\xff");
    for args in [
        vec!["submit".as_ref(), "--".as_ref(), bad],
        vec!["--output".as_ref(), "json".as_ref(), "status".as_ref(), bad],
    ] {
        let cache = tempfile::tempdir().unwrap();
        let output = Command::new(env!("CARGO_BIN_EXE_weir"))
            .args(&args)
            .env("WEIR_CACHE_DIR", cache.path())
            .env("WEIR_ACCESS_FILE", cache.path().join("none.json"))
            .env_remove("RUST_LOG")
            .output()
            .expect("weir runs");
        assert_ne!(output.status.code(), Some(101), "{}", stderr(&output));
        assert!(!output.status.success(), "{args:?}");
        assert!(!stderr(&output).contains("panicked"), "{}", stderr(&output));
    }
}

/// `--check` refuses what a start would refuse (found by an attack run: it passed them).
#[test]
fn check_modes_refuse_the_flags_a_start_refuses() {
    let dir = tempfile::tempdir().unwrap();
    let junk = dir.path().join("junk.pem");
    std::fs::write(&junk, "junk").unwrap();
    let junk = junk.to_str().unwrap();
    let journal_dir = dir.path().to_str().unwrap();
    for (args, says) in [
        (
            vec!["--check", "--listen", "127.0.0.1:99999"],
            "--listen 127.0.0.1:99999",
        ),
        (
            vec!["--check", "--journal", journal_dir],
            "a directory, not a journal file",
        ),
        (
            vec!["--check", "--cert", junk, "--key", junk],
            "do not make a certificate and its key",
        ),
    ] {
        let out = Command::new(env!("CARGO_BIN_EXE_scheduler"))
            .args(&args)
            .env("WEIR_CACHE_DIR", dir.path())
            .output()
            .unwrap();
        assert_eq!(out.status.code(), Some(1), "{args:?}: {}", stdout(&out));
        assert!(stderr(&out).contains(says), "{args:?}: {}", stderr(&out));
    }
    let mem_gt = "big=plugins/mem_gt.wasm,threshold=1GiB";
    for (args, says) in [
        (vec!["--check", "--slots", "0"], "0 is not in 1.."),
        (
            vec!["--check", "--env-plugin", mem_gt, "--env-plugin", mem_gt],
            "environment `big` given twice",
        ),
        (vec!["--check", "--name", ""], "--name"),
    ] {
        let out = Command::new(env!("CARGO_BIN_EXE_worker"))
            .args(&args)
            .current_dir(env!("CARGO_MANIFEST_DIR"))
            .env("WEIR_CACHE_DIR", dir.path())
            .output()
            .unwrap();
        assert!(!out.status.success(), "{args:?}: {}", stdout(&out));
        assert!(stderr(&out).contains(says), "{args:?}: {}", stderr(&out));
    }
}

/// `weir bench` checks its `--policy` files before it measures anything, and says it does not
/// print JSON rather than print tables under `--output json`.
#[test]
fn bench_refuses_a_wrong_policy_file_and_json_at_once() {
    let (out, _cache) = weir(&[
        "bench",
        "--plugins-only",
        "--policy",
        "plugins/fixtures/hostile_task.wasm",
    ]);
    assert_eq!(out.status.code(), Some(1));
    assert!(
        stderr(&out).contains("does not implement the `policy` world"),
        "{}",
        stderr(&out)
    );
    assert!(stdout(&out).is_empty(), "measured first: {}", stdout(&out));
    let (out, _cache) = weir(&["--output", "json", "bench", "--plugins-only"]);
    assert_eq!(out.status.code(), Some(1));
    let error: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert!(
        error["error"].as_str().unwrap().contains("not JSON"),
        "{error}"
    );
}

/// `policy simulate` says what is wrong with its files before it runs the policy: a trace with
/// no snapshot, a plot not named `.svg` (it writes SVG).
#[test]
fn simulate_refuses_an_empty_trace_and_a_plot_it_would_misname() {
    let dir = tempfile::tempdir().unwrap();
    let empty = dir.path().join("empty.jsonl");
    std::fs::write(&empty, "\n").unwrap();
    let empty = empty.to_str().unwrap();
    let png = dir.path().join("plot.png");
    let png = png.to_str().unwrap();
    for (args, says) in [
        (vec!["--trace", empty], "no snapshot in it"),
        (vec!["--trace", empty, "--plot", png], "name the file .svg"),
    ] {
        let mut all = vec![
            "policy",
            "simulate",
            "--policy",
            "waterfall_v2",
            "--content",
            "1, a",
        ];
        all.extend(args);
        let (out, _cache) = weir(&all);
        assert_eq!(out.status.code(), Some(1), "{all:?}");
        assert!(stderr(&out).contains(says), "{all:?}: {}", stderr(&out));
    }
    assert!(!Path::new(png).exists());
}

/// Under `--output json` a command line that does not parse is one JSON value with the whole
/// message (its first line alone ended in a colon, naming nothing).
#[test]
fn a_command_line_that_does_not_parse_is_one_json_error_that_says_what_is_missing() {
    let (out, _cache) = weir(&["--output", "json", "cancel"]);
    assert_eq!(out.status.code(), Some(2));
    let value: serde_json::Value = serde_json::from_slice(&out.stdout).expect("one JSON value");
    let error = value["error"].as_str().unwrap();
    assert!(
        error.contains("not provided") && error.contains("<JOB>"),
        "{error}"
    );
}
