//! The command backend: a worker manager that scales through the operator's commands (here a
//! fake backend script that starts real `worker-manager --fixed` units locally); and the
//! allocation view (`weir managers`) of the process and command backends.

mod common;

use std::path::Path;

use common::Cluster;

/// start.sh UNIT COUNT MANAGER ACCESS TYPE / stop.sh UNIT, logging to DIR/log.
fn write_backend(dir: &Path) -> (String, String) {
    let manager = env!("CARGO_BIN_EXE_worker-manager");
    let d = dir.display();
    std::fs::write(
        dir.join("start.sh"),
        format!(
            "#!/bin/sh\n\"{manager}\" --fixed \"$2\" --id \"$3\" --unit \"$1\" --access-file \"$4\" --worker-type \"$5\" \
             >/dev/null 2>&1 &\necho $! > \"{d}/$1.pid\"\necho \"start $1\" >> \"{d}/log\"\n"
        ),
    )
    .unwrap();
    std::fs::write(
        dir.join("stop.sh"),
        format!("#!/bin/sh\nkill -TERM \"$(cat \"{d}/$1.pid\")\"\nrm -f \"{d}/$1.pid\"\necho \"stop $1\" >> \"{d}/log\"\n"),
    )
    .unwrap();
    (
        format!(
            "sh {d}/start.sh {{unit}} {{count}} {{manager_id}} {{access_file}} {{worker_type}}"
        ),
        format!("sh {d}/stop.sh {{unit}}"),
    )
}

fn log(dir: &Path) -> String {
    std::fs::read_to_string(dir.join("log")).unwrap_or_default()
}

fn stop_leftovers(dir: &Path) {
    for entry in std::fs::read_dir(dir).unwrap().flatten() {
        if entry.path().extension().is_some_and(|e| e == "pid") {
            let pid = std::fs::read_to_string(entry.path()).unwrap_or_default();
            let _ = std::process::Command::new("kill")
                .args(["-TERM", pid.trim()])
                .status();
        }
    }
}

#[test]
fn a_command_backend_manager_scales_units_up_and_down_through_its_scripts() {
    let backend = tempfile::tempdir().unwrap();
    let (start, stop) = write_backend(backend.path());
    let mut cluster =
        Cluster::with_policy("waterfall_v2", "1, pool", &["--scale-down-delay", "0.5"]);
    cluster.manager(&[
        "--backend",
        "command",
        "--id",
        "cloud",
        "--worker-type",
        "pool",
        "--max-task-concurrency",
        "2",
        "--start-cmd",
        &start,
        "--stop-cmd",
        &stop,
    ]);
    let done = cluster.json(&[
        "submit",
        "--count",
        "4",
        "--wait",
        "--",
        "sh",
        "-c",
        "sleep 0.3; echo $WEIR_WORKER_NAME",
    ]);
    assert_eq!(done["counts"]["succeeded"], 4, "{done}");
    let results = cluster.json(&["results", &done["job"].to_string()]);
    for result in results.as_array().unwrap() {
        let worker = result["stdout"].as_str().unwrap().trim();
        assert!(worker.starts_with("cloud-u"), "ran on {worker}");
    }
    // Idle after the delay: the units are stopped through the stop script.
    let status = cluster.await_status(|s| {
        let m = &s["managers"][0];
        m["live"] == 0 && m["starting"] == 0 && log(backend.path()).matches("stop ").count() == 2
    });
    assert_eq!(
        log(backend.path()).matches("start ").count(),
        2,
        "{}",
        log(backend.path())
    );
    assert_eq!(status["workers"].as_array().unwrap().len(), 0, "{status}");
    // `weir managers` shows both units ended, drained, with their workers gone.
    let view = cluster.json(&["managers"]);
    let cloud = &view[0];
    assert_eq!(cloud["backend"], "command", "{view}");
    let ended: Vec<&serde_json::Value> = cloud["units"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|u| u["state"] == "ended" && u["reason"] == "drained")
        .collect();
    assert_eq!(ended.len(), 2, "{view}");
    stop_leftovers(backend.path());
}

#[test]
fn a_failing_start_command_makes_the_waterfall_spill_to_the_next_tier() {
    let mut cluster = Cluster::with_policy("waterfall_v2", "1, cloud\n2, local", &[]);
    cluster.manager(&[
        "--backend",
        "command",
        "--id",
        "cloud_1",
        "--worker-type",
        "cloud",
        "--max-task-concurrency",
        "4",
        "--start-cmd",
        "echo no quota >&2; false",
        "--stop-cmd",
        "true",
    ]);
    cluster.dynamic_manager("local_1", "local", 2);
    let done = cluster.json(&[
        "submit",
        "--count",
        "3",
        "--wait",
        "--",
        "sh",
        "-c",
        "echo $WEIR_WORKER_NAME",
    ]);
    assert_eq!(done["counts"]["succeeded"], 3, "{done}");
    let results = cluster.json(&["results", &done["job"].to_string()]);
    for result in results.as_array().unwrap() {
        assert!(
            result["stdout"].as_str().unwrap().starts_with("local_1-"),
            "{result}"
        );
    }
}

#[test]
fn a_unit_ends_when_the_scheduler_dismisses_its_worker() {
    // The scheduler tells the idle workers of a manager gone for a minute to leave; they exit
    // with code 3, and the unit they run in (a batch job) ends instead of starting another.
    let dir = tempfile::tempdir().unwrap();
    let worker = dir.path().join("dismissed-worker.sh");
    std::fs::write(&worker, "#!/bin/sh\nexit 3\n").unwrap();
    std::process::Command::new("chmod")
        .arg("+x")
        .arg(&worker)
        .status()
        .unwrap();
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_worker-manager"))
        .args(["--fixed", "1", "--id", "gone", "--unit", "u1"])
        .args(["--heartbeat-interval", "0.05", "--worker-command"])
        .arg(&worker)
        .arg("--access-file")
        .arg(dir.path().join("access.json"))
        .output()
        .unwrap();
    assert!(out.status.success(), "{out:?}");
}

#[test]
fn weir_managers_shows_each_worker_of_a_local_manager_running_then_ended_and_why() {
    let dir = tempfile::tempdir().unwrap();
    let gate = dir.path().join("gate");
    let mut cluster =
        Cluster::with_policy("waterfall_v2", "1, local", &["--scale-down-delay", "0.5"]);
    cluster.dynamic_manager("local", "local", 1);
    let wait_for_gate = format!("while [ ! -e '{}' ]; do sleep 0.05; done", gate.display());
    let job = cluster.json(&["submit", "--", "sh", "-c", &wait_for_gate])["job"].to_string();

    // Its worker process is a unit of one: running once registered, its worker joined.
    let running = cluster.await_unit("local", |u| u["state"] == "running");
    let name = running["id"].as_str().unwrap().to_string();
    assert_eq!(running["workers"], serde_json::json!([name]), "{running}");
    let view = cluster.json(&["managers", "units", "local"]);
    assert_eq!(view["backend"], "process", "{view}");
    assert_eq!(view["registered"], serde_json::json!([name]), "{view}");
    let all = cluster.weir(&["managers"]);
    let line = common::text(&all.stdout);
    let line = line
        .lines()
        .find(|l| l.starts_with("local "))
        .unwrap_or_default();
    assert!(
        line.contains("process") && line.contains("1 live") && line.contains("1 running"),
        "{line}"
    );
    let units = common::text(&cluster.weir(&["managers", "units", "local"]).stdout);
    let row = units
        .lines()
        .find(|l| l.starts_with(&name))
        .unwrap_or_default();
    assert!(row.contains("running") && row.contains("1/1"), "{units}");

    // Done and idle past the scale-down delay: drained and stopped, it is listed as ended.
    std::fs::write(&gate, "").unwrap();
    assert_eq!(cluster.json(&["wait", &job])["counts"]["succeeded"], 1);
    let ended = cluster.await_unit("local", |u| {
        u["id"] == name.as_str() && u["state"] == "ended"
    });
    assert_eq!(ended["reason"], "drained", "{ended}");
    assert!(ended["ended_ms"].is_u64(), "{ended}");
    let units = common::text(&cluster.weir(&["managers", "units", "local"]).stdout);
    assert!(units.contains("ended (drained)"), "{units}");

    // An unknown manager is an error, with its code in JSON.
    let unknown = cluster.weir(&["--output", "json", "managers", "units", "nobody"]);
    assert!(!unknown.status.success());
    let error: serde_json::Value = serde_json::from_slice(&unknown.stdout).unwrap();
    assert_eq!(error["code"], "not-found", "{error}");
}
