//! Workers inside an allocation that ends (a Slurm job's walltime, `worker --ends-in`), and
//! worker names that must be unique (also when two managers of one id name theirs alike), with
//! real processes on loopback.

mod common;

use std::process::Stdio;

use common::{Cluster, text, workers};

#[test]
fn a_worker_takes_no_task_whose_timeout_outlives_its_allocation() {
    let mut cluster = Cluster::start("10");
    cluster.worker("ending", &["--slots", "2", "--ends-in", "600"]);
    cluster.await_status(|s| workers(s) == 1);
    // Submitted first: with a free slot it would run at once, were its timeout not too long.
    let long = cluster.json(&[
        "submit",
        "--timeout",
        "900",
        "--",
        "sh",
        "-c",
        "echo $WEIR_WORKER_NAME",
    ]);
    let short = cluster.json(&[
        "submit",
        "--timeout",
        "60",
        "--wait",
        "--",
        "sh",
        "-c",
        "echo $WEIR_WORKER_NAME",
    ]);
    assert_eq!(short["counts"]["succeeded"], 1, "{short}");
    let results = cluster.json(&["results", &short["job"].to_string()]);
    assert_eq!(results[0]["stdout"].as_str().unwrap().trim(), "ending");
    let long_task = long["first_task"].to_string();
    let long = long["job"].to_string();
    let waiting = cluster.json(&["status"]);
    assert_eq!(waiting["tasks"]["queued"], 1, "{waiting}");
    let why = cluster.explain(&long_task);
    assert!(
        why.iter()
            .any(|l| l.contains("ending") && l.contains("its allocation ends before")),
        "{why:?}"
    );
    // A worker without an end takes it.
    cluster.worker("lasting", &[]);
    let done = cluster.json(&["wait", &long]);
    assert_eq!(done["counts"]["succeeded"], 1, "{done}");
    let results = cluster.json(&["results", &long]);
    assert_eq!(results[0]["stdout"].as_str().unwrap().trim(), "lasting");
}

#[test]
fn at_the_end_of_its_allocation_a_worker_leaves_and_its_task_runs_again_without_a_retry() {
    let mut cluster = Cluster::start("10");
    let mark = cluster.dir.path().join("started-on-ending");
    // Submitted before any worker: it starts on `ending` as soon as that one registers. No
    // retries: were the task counted as failed, its job would fail.
    let script = format!(
        "if [ \"$WEIR_WORKER_NAME\" = ending ]; then touch {}; sleep 60; fi; echo $WEIR_WORKER_NAME",
        mark.display()
    );
    let job = cluster.json(&["submit", "--retries", "0", "--", "sh", "-c", &script]);
    let job = job["job"].to_string();
    let ending = cluster.worker("ending", &["--ends-in", "3"]);
    // It leaves by itself, cleanly, with the task still running there.
    let status = cluster.workers[ending].wait().expect("the worker exits");
    assert!(status.success(), "{status}");
    assert!(mark.exists(), "the task had started on the ending worker");
    cluster.worker("next", &[]);
    let done = cluster.json(&["wait", &job]);
    assert_eq!(done["counts"]["succeeded"], 1, "{done}");
    let results = cluster.json(&["results", &job]);
    assert_eq!(results[0]["stdout"].as_str().unwrap().trim(), "next");
}

#[test]
fn a_second_worker_under_a_live_workers_name_is_refused() {
    let mut cluster = Cluster::start("10");
    cluster.worker("twin", &[]);
    cluster.await_status(|s| workers(s) == 1);
    let out = {
        let mut command = cluster.launcher().command("worker").unwrap();
        command
            // It would try again for as long as this (the other might be a dead connection).
            .args(["--name", "twin", "--reconnect-timeout", "0"])
            .stdout(Stdio::null())
            .stderr(Stdio::piped());
        command.output().expect("worker runs")
    };
    assert!(!out.status.success(), "{out:?}");
    let stderr = text(&out.stderr);
    assert!(
        stderr.contains("a worker named `twin` is already connected"),
        "{stderr}"
    );
    // The first one still runs tasks.
    let done = cluster.json(&[
        "submit",
        "--wait",
        "--",
        "sh",
        "-c",
        "echo $WEIR_WORKER_NAME",
    ]);
    assert_eq!(done["counts"]["succeeded"], 1, "{done}");
    let status = cluster.json(&["status"]);
    assert_eq!(workers(&status), 1, "{status}");
}

/// Two worker managers started with one `--id`: the second is let in once the first's
/// connection timed out (SIGSTOP: its workers run on), and names its worker as the first named
/// its own (`m-1`). That one is refused (the name is taken) and, killed, is reported exited.
/// The report names the second's process, not the first's `m-1`, which keeps its task: before,
/// the scheduler requeued it at once onto the spare worker while `m-1` still ran it.
#[test]
fn a_twin_manager_reporting_its_worker_of_a_name_in_use_exited_takes_no_task_from_the_first() {
    use common::{children_of, count, field, signal};
    let mut cluster = Cluster::start("10");
    let first = cluster.manager(&["--id", "m", "--fixed", "1"]);
    cluster.await_status(|s| workers(s) == 1);
    let starts = cluster.dir.path().join("starts");
    let script = format!("echo $WEIR_WORKER_NAME >> {}; sleep 60", starts.display());
    cluster.json(&["submit", "--", "sh", "-c", &script]);
    cluster.await_status(|s| count(field(s, "tasks"), "running") == 1);
    // Idle, it would take the task at once were the task requeued.
    cluster.worker("spare", &[]);
    cluster.await_status(|s| workers(s) == 2);
    // The first manager falls silent; its connection times out, and the twin gets in.
    signal(cluster.workers[first].id(), "-STOP");
    let twin = cluster.manager(&["--id", "m", "--fixed", "1"]);
    let twin_pid = cluster.workers[twin].id();
    let deadline = common::Deadline::start("the twin's worker process");
    let child = loop {
        if let Some(child) = children_of(twin_pid).first() {
            break *child;
        }
        deadline.pause("no child yet");
    };
    signal(child, "-9");
    // The twin's report of it exited has been taken.
    cluster.await_unit("m", |u| u["state"] == "ended");
    let status = cluster.json(&["status"]);
    let spare = field(&status, "workers")
        .as_array()
        .and_then(|w| w.iter().find(|w| w["name"] == "spare").cloned());
    let spare = spare.unwrap_or_else(|| panic!("no spare worker in {status}"));
    assert_eq!(
        count(&spare, "running"),
        0,
        "the task was run again: {status}"
    );
    let tasks = field(&status, "tasks");
    assert_eq!(count(tasks, "running"), 1, "{status}");
    assert_eq!(count(tasks, "queued"), 0, "{status}");
    let started = std::fs::read_to_string(&starts).unwrap_or_default();
    assert_eq!(started.lines().collect::<Vec<_>>(), ["m-1"], "{started}");
    signal(cluster.workers[first].id(), "-CONT");
}
