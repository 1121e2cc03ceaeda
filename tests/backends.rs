//! The command backend: a worker manager that scales through the operator's commands (here a
//! fake backend script that starts real `worker-manager --fixed` units locally).

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
