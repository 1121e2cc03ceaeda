//! Scaling truth, end to end with real processes on loopback: conditions declared by managers
//! scale from zero, a dead busy worker never pushes its manager past its cap, stops are seen at
//! once, fixed pools heal and register, managers say goodbye, and a killed worker's task
//! processes die with it (no task runs twice at once).

mod common;

use std::time::{Duration, Instant};

use common::{Cluster, children_of, current, live, manager, processes_with, text};
use serde_json::Value;

/// Poll `weir status` until `ready` holds. `bound` only turns a hang into a failure that says
/// which mechanism did not act; correctness never depends on it.
fn until(cluster: &Cluster, bound: Duration, what: &str, ready: impl Fn(&Value) -> bool) -> Value {
    let started = Instant::now();
    loop {
        let status = cluster.json(&["status"]);
        if ready(&status) {
            return status;
        }
        assert!(started.elapsed() < bound, "{what}: {status}");
        std::thread::sleep(Duration::from_millis(20));
    }
}

#[test]
fn manager_conditions_scale_from_zero_onto_the_matching_manager_only() {
    let mut cluster = Cluster::with_policy(
        "waterfall_v1",
        "1, fits\n1, too_small\n",
        &["--scale-down-delay", "0.5"],
    );
    // The literal form users type (no NAME=: the name is the file stem) on one, NAME= on the
    // other; no worker anywhere yet.
    cluster.manager(&[
        "--id",
        "fits",
        "--max-task-concurrency",
        "3",
        "--env-plugin",
        "mem_gt.wasm,threshold=1",
    ]);
    cluster.manager(&[
        "--id",
        "too_small",
        "--max-task-concurrency",
        "3",
        "--env-plugin",
        "mem_gt=mem_gt,threshold=1PB",
    ]);
    cluster.await_managers(2);
    assert_eq!(common::workers(&cluster.json(&["status"])), 0);
    // Known from the managers' registrations: the submission is accepted at once.
    let env_list = cluster.json(&["env", "list"]);
    assert_eq!(env_list[0]["source"], "manager", "{env_list}");
    assert_eq!(
        common::sorted_names(&env_list[0]["managers"]),
        ["fits", "too_small"]
    );
    let job = cluster.json(&[
        "submit",
        "--count",
        "5",
        "--env",
        "mem_gt",
        "--",
        "sh",
        "-c",
        "echo $WEIR_WORKER_NAME",
    ]);
    let job = job["job"].to_string();
    let done = cluster.json(&["wait", &job]);
    assert_eq!(done["counts"]["succeeded"], 5, "{done}");
    for result in cluster.json(&["results", &job]).as_array().unwrap() {
        let worker = result["stdout"].as_str().unwrap().trim();
        assert!(worker.starts_with("fits-"), "ran on {worker}: {result}");
    }
    // The manager whose condition does not match learned it with one worker and ends with none.
    until(
        &cluster,
        Duration::from_secs(60),
        "too_small keeps workers",
        |s| current(s, "too_small") == 0,
    );
    let env_list = cluster.json(&["env", "list"]);
    assert!(
        env_list[0]["not_matching"]
            .as_array()
            .unwrap()
            .iter()
            .all(|w| w.as_str().unwrap().starts_with("too_small-")),
        "{env_list}"
    );
}

#[test]
fn a_busy_worker_killed_never_pushes_its_manager_past_its_cap() {
    let mut cluster = Cluster::start_with(&[
        "--heartbeat-timeout",
        "30",
        "--scaling-interval",
        "0.1",
        "--scale-down-delay",
        "60",
    ]);
    let manager_index = cluster.manager(&["--id", "dyn_1", "--max-task-concurrency", "2"]);
    let manager_pid = cluster.workers[manager_index].id();
    cluster.await_status(|s| manager(s, "dyn_1").is_some());
    let job = cluster.json(&["submit", "--count", "2", "--", "sleep", "3"]);
    let job = job["job"].to_string();
    cluster.await_status(|s| s["tasks"]["running"] == 2);
    let busy = children_of(manager_pid);
    assert_eq!(busy.len(), 2, "two workers, both busy");
    common::signal(busy[0], "-9");
    // Until the job is done (the killed worker's task runs again elsewhere): the manager never
    // runs more than 2 workers, never is asked for more, and the dead one is not counted beside
    // its replacement once the manager reported it gone (not after the 30 s heartbeat timeout).
    let deadline = common::Deadline::start("the job done");
    loop {
        let status = cluster.json(&["status"]);
        let m = manager(&status, "dyn_1").unwrap();
        let desired = common::field(m, "desired");
        assert!(
            desired.is_null() || desired.as_u64().is_some_and(|d| d <= 2),
            "{status}"
        );
        assert!(current(&status, "dyn_1") <= 2, "{status}");
        assert!(children_of(manager_pid).len() <= 2, "{status}");
        if status["tasks"]["succeeded"] == 2 {
            break;
        }
        deadline.pause(status);
    }
    let results = cluster.json(&["results", &job]);
    let attempts: Vec<u64> = results
        .as_array()
        .unwrap()
        .iter()
        .map(|r| r["attempts"].as_u64().unwrap())
        .collect();
    assert!(
        attempts.contains(&2),
        "the killed worker's task ran again: {results}"
    );
}

#[test]
fn a_stopped_worker_is_seen_at_once_and_a_planned_stop_spends_no_retry() {
    // A heartbeat timeout far longer than the test: only the close can tell the scheduler.
    let mut cluster = Cluster::start("3600");
    let index = cluster.worker("w", &["--slots", "1"]);
    cluster.weir(&["workers", "wait", "1"]);
    let job = cluster.json(&["submit", "--retries", "0", "--", "sleep", "600"]);
    cluster.await_status(|s| s["tasks"]["running"] == 1);
    common::signal(cluster.workers[index].id(), "-TERM");
    cluster.workers[index].wait().unwrap();
    let status = until(
        &cluster,
        Duration::from_secs(60),
        "the stopped worker was not seen through its close",
        |s| common::workers(s) == 0,
    );
    // Its task waits for another worker, with its retry budget intact (--retries 0).
    assert_eq!(status["tasks"]["queued"], 1, "{status}");
    cluster.worker("w2", &["--slots", "1"]);
    cluster.await_status(|s| s["tasks"]["running"] == 1);
    cluster.json(&["cancel", &job["job"].to_string()]);
}

#[test]
fn fixed_pools_heal_register_and_say_goodbye() {
    let mut cluster = Cluster::start("30");
    let index = cluster.manager(&["--fixed", "2", "--id", "orb"]);
    let pid = cluster.workers[index].id();
    let status = cluster.await_status(|s| live(s, "orb") == 2);
    let orb = manager(&status, "orb").unwrap();
    assert_eq!(orb["fixed"], 2, "{status}");
    assert_eq!(orb["desired"], 2, "{status}");
    let text = text(&cluster.weir(&["status"]).stdout);
    assert!(text.contains("fixed 2"), "{text}");
    // kill -9 a worker: replaced, and the dead one is not counted beside its replacement.
    let before = children_of(pid);
    assert_eq!(before.len(), 2);
    common::signal(before[0], "-9");
    until(
        &cluster,
        Duration::from_secs(60),
        "the fixed pool did not heal",
        |s| {
            let names: Vec<&str> = s["workers"]
                .as_array()
                .unwrap()
                .iter()
                .map(|w| w["name"].as_str().unwrap())
                .collect();
            names.len() == 2 && names.contains(&"orb-3")
        },
    );
    assert!(current(&cluster.json(&["status"]), "orb") <= 2);
    // SIGTERM: goodbye; it and its workers leave the status at once.
    common::signal(pid, "-TERM");
    cluster.workers[index].wait().unwrap();
    let status = cluster.json(&["status"]);
    assert!(manager(&status, "orb").is_none(), "{status}");
    until(&cluster, Duration::from_secs(60), "workers linger", |s| {
        common::workers(s) == 0
    });
}

#[test]
fn a_dynamic_manager_stopped_by_sigterm_leaves_the_status() {
    let mut cluster = Cluster::start("30");
    let index = cluster.manager(&["--id", "dyn", "--max-task-concurrency", "2"]);
    cluster.await_status(|s| manager(s, "dyn").is_some());
    common::signal(cluster.workers[index].id(), "-TERM");
    cluster.workers[index].wait().unwrap();
    let status = cluster.json(&["status"]);
    assert!(manager(&status, "dyn").is_none(), "{status}");
}

#[test]
fn a_killed_worker_takes_its_task_processes_with_it() {
    let mut cluster = Cluster::start("1");
    let file = cluster.dir.path().join("late.txt");
    let marker = format!("weir-leak-{}", std::process::id());
    // The write happens in a grandchild: killing the task's own process is not enough.
    let script = format!(
        "sh -c 'sleep 2; echo late $WEIR_WORKER_NAME >> {}' {marker}; true",
        file.display()
    );
    let first = cluster.worker("first", &["--slots", "1"]);
    cluster.weir(&["workers", "wait", "1"]);
    let job = cluster.json(&["submit", "--", "sh", "-c", &script]);
    cluster.await_status(|s| s["tasks"]["running"] == 1);
    assert!(!processes_with(&marker).is_empty(), "the task runs");
    common::signal(cluster.workers[first].id(), "-9");
    cluster.workers[first].wait().unwrap();
    // The retried run starts after the first worker died, and writes after its own 2 s: by the
    // time it is done, a leaked first run would have written too.
    cluster.worker("second", &["--slots", "1"]);
    let done = cluster.json(&["wait", &job["job"].to_string()]);
    assert_eq!(done["counts"]["succeeded"], 1, "{done}");
    let written = std::fs::read_to_string(&file).unwrap_or_default();
    assert_eq!(written, "late second\n", "only the retried run writes");
    assert!(
        processes_with(&marker).is_empty(),
        "task processes left behind"
    );
}

#[test]
fn workers_wait_and_request_errors_say_what_was_refused() {
    let mut cluster = Cluster::start("30");
    let out = cluster.weir(&["workers", "wait", "1", "--timeout", "0.5"]);
    assert!(!out.status.success());
    let stderr = text(&out.stderr);
    assert!(stderr.contains("only 0 of 1 worker after"), "{stderr}");
    cluster.worker("w", &["--env-plugin", "big=mem_gt,threshold=1"]);
    let ready = cluster.json(&["workers", "wait", "1", "--env", "big"]);
    assert_eq!(ready["workers"], 1, "{ready}");
    let out = cluster.weir(&["results", "999"]);
    let stderr = text(&out.stderr);
    assert_eq!(stderr.trim(), "error: no job 999");
}

#[test]
fn a_registration_that_shares_a_workers_own_name_ends_and_says_so() {
    let mut cluster = Cluster::start("30");
    // README's sequence: a worker with its own `big`, then a run-time registration of `big`.
    cluster.worker("own", &["--env-plugin", "big=mem_gt,threshold=1"]);
    cluster.worker("plain", &[]);
    cluster.weir(&["workers", "wait", "2"]);
    let mem_gt = concat!(env!("CARGO_MANIFEST_DIR"), "/plugins/mem_gt.wasm");
    let registered = cluster.env_register("big", mem_gt, "threshold=1PB");
    let big = &registered[0];
    assert_eq!(common::sorted_names(&big["own_definition"]), ["own"]);
    // The worker's own definition wins on it (it matches); the registered one on the other.
    assert_eq!(common::sorted_names(&big["matching"]), ["own"]);
    assert_eq!(common::sorted_names(&big["not_matching"]), ["plain"]);
    let text = text(&cluster.weir(&["env", "list"]).stdout);
    assert!(text.contains("their own --env-plugin definition"), "{text}");
    // Removing the registration leaves the workers' own definition: still known, still
    // matching, and registering again ends again.
    cluster.json(&["env", "remove", "big"]);
    let list = cluster.json(&["env", "list"]);
    assert_eq!(list[0]["source"], "worker", "{list}");
    assert_eq!(common::sorted_names(&list[0]["matching"]), ["own"]);
    let job = cluster.json(&["submit", "--env", "big", "--wait", "--", "true"]);
    assert_eq!(job["counts"]["succeeded"], 1, "{job}");
    let again = cluster.env_register("big", mem_gt, "threshold=1PB");
    assert_eq!(common::sorted_names(&again[0]["matching"]), ["own"]);
}

#[test]
fn a_manager_whose_workers_do_not_match_is_not_asked_again_and_again() {
    let mut cluster =
        Cluster::start_with(&["--scaling-interval", "0.1", "--scale-down-delay", "1"]);
    cluster.manager(&[
        "--id",
        "small",
        "--max-task-concurrency",
        "2",
        "--env-plugin",
        "mem_gt=mem_gt,threshold=1PB",
    ]);
    cluster.await_status(|s| manager(s, "small").is_some());
    cluster.json(&["submit", "--count", "3", "--env", "mem_gt", "--", "true"]);
    // One worker learns `no-match`, and is stopped once idle past the delay.
    cluster.await_status(|s| current(s, "small") >= 1);
    cluster.await_status(|s| current(s, "small") == 0);
    // The tasks still wait, yet no worker is started to ask again (it once churned a new
    // worker every few seconds while the demand lasted).
    for _ in 0..60 {
        let status = cluster.json(&["status"]);
        assert_eq!(current(&status, "small"), 0, "{status}");
        assert_eq!(status["tasks"]["queued"], 3, "{status}");
    }
}

#[test]
fn a_worker_its_engine_stops_with_its_tasks_has_them_requeued_not_failed() {
    let mut cluster = Cluster::start("30");
    let flag = cluster.dir.path().join("ran-once");
    let marker = format!("weir-engine-stop-{}", std::process::id());
    // The first run waits to be killed; the run after the requeue finds the flag and succeeds.
    let script = format!(
        "if [ -e {flag} ]; then exit 0; fi; touch {flag}; sleep 60",
        flag = flag.display()
    );
    // A grace longer than any delay of this test: the worker's own signal surely comes within it.
    let first = cluster.worker("first", &["--slots", "1", "--signal-grace", "60"]);
    cluster.weir(&["workers", "wait", "1"]);
    // No retry to spend: a run reported failed would fail the job.
    // `$0` of the task's shell is the marker, to find it.
    let job = cluster.json(&[
        "submit",
        "--retries",
        "0",
        "--",
        "sh",
        "-c",
        &script,
        &marker,
    ]);
    cluster.await_status(|s| s["tasks"]["running"] == 1);
    let deadline = common::Deadline::start("the task's process");
    let task = loop {
        if let Some(pid) = processes_with(&marker).first() {
            break *pid;
        }
        deadline.pause("none");
    };
    // As Slurm's scancel does: the task gets SIGTERM, and so does its worker. The task dies
    // first and is reaped by the worker (so its outcome is in hand) before the worker's signal.
    common::signal(task, "-TERM");
    let deadline = common::Deadline::start("the task to end");
    while !processes_with(&marker).is_empty() {
        deadline.pause("still there");
    }
    common::signal(cluster.workers[first].id(), "-TERM");
    cluster.workers[first].wait().unwrap();
    cluster.worker("second", &["--slots", "1"]);
    let done = cluster.json(&["wait", &job["job"].to_string()]);
    assert_eq!(done["counts"]["succeeded"], 1, "{done}");
    assert_eq!(done["counts"]["failed"], 0, "{done}");
}

/// The guard process `kill -9`ed alone: a task started now could outlive the worker, so the
/// worker starts none; it stops as on SIGTERM, and the task it was given is requeued without a
/// retry spent and runs on another worker.
#[test]
fn a_worker_whose_guard_is_killed_stops_and_its_task_runs_elsewhere() {
    let mut cluster = Cluster::start("10");
    let doomed = cluster.worker("guardless", &["--slots", "1"]);
    cluster.weir(&["workers", "wait", "1"]);
    // Its only child while it runs nothing is its guard.
    let guards = common::children_of(cluster.workers[doomed].id());
    assert_eq!(guards.len(), 1, "one guard process: {guards:?}");
    common::signal(guards[0], "-9");
    // `kill` returns once the signal is sent: the guard's end of the pipe closes when it has
    // died (a zombie is dead).
    let deadline = common::Deadline::start("the guard to die");
    while !common::children_of(cluster.workers[doomed].id()).is_empty() {
        deadline.pause("still there");
    }
    let job = cluster.json(&["submit", "--retries", "0", "--", "echo", "ran"]);
    // It stops by itself (and fails nothing meanwhile).
    let deadline = common::Deadline::start("the guardless worker to stop");
    let status = loop {
        if let Some(status) = cluster.workers[doomed].try_wait().unwrap() {
            break status;
        }
        let tasks = &cluster.json(&["status"])["tasks"];
        assert_eq!(tasks["failed"], 0, "failed instead of stopping: {tasks}");
        deadline.pause(tasks);
    };
    assert!(status.success(), "{status}");
    cluster.worker("healthy", &["--slots", "1"]);
    let done = cluster.json(&["wait", &job["job"].to_string()]);
    assert_eq!(done["counts"]["succeeded"], 1, "{done}");
    let results = cluster.json(&["results", &job["job"].to_string()]);
    assert_eq!(results[0]["attempts"], 1, "{results}");
    assert_eq!(results[0]["stdout"], "ran\n", "{results}");
}
