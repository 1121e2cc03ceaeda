//! Environments end to end: conditions evaluated by real workers, registered at run time,
//! resolved when a worker is chosen, explained when nothing qualifies.

mod common;

use common::{Cluster, text};
use serde_json::Value;

fn environment<'a>(list: &'a Value, name: &str) -> &'a Value {
    list.as_array()
        .unwrap()
        .iter()
        .find(|e| e["name"] == name)
        .unwrap_or(&Value::Null)
}

#[test]
fn tasks_run_only_where_their_environment_matches_and_wait_for_one_that_does() {
    let mut cluster = Cluster::start("10");
    let local = ["--slots", "2", "--total-memory", "1GB", "--env-plugin"];
    cluster.worker(
        "big-worker",
        &[&local[..], &["big=plugins/mem_gt.wasm,threshold=1"]].concat(),
    );
    cluster.worker(
        "small-worker",
        &[&local[..], &["big=plugins/mem_gt.wasm,threshold=1PB"]].concat(),
    );
    let deadline = common::Deadline::start("`big` to match one worker and not the other");
    let envs = loop {
        let list = cluster.json(&["env", "list"]);
        let big = environment(&list, "big");
        if big["matching"].as_array().is_some_and(|m| m.len() == 1)
            && big["not_matching"].as_array().is_some_and(|m| m.len() == 1)
        {
            break list;
        }
        deadline.pause(list);
    };
    assert_eq!(environment(&envs, "big")["matching"][0], "big-worker");
    assert_eq!(environment(&envs, "big")["source"], "worker");

    // 100 tasks needing `big` all run on big-worker, with the condition's setup values.
    let done = cluster.json(&[
        "submit",
        "--count",
        "100",
        "--env",
        "big",
        "--wait",
        "--",
        "sh",
        "-c",
        "echo $WEIR_WORKER_NAME $WEIR_ENV_BIG_THRESHOLD",
    ]);
    assert_eq!(done["counts"]["succeeded"], 100, "{done}");
    let results = cluster.json(&["results", &done["job"].to_string()]);
    for result in results.as_array().unwrap() {
        assert_eq!(
            result["stdout"].as_str().unwrap().trim(),
            "big-worker 1",
            "{result}"
        );
    }
    // Tasks with no environment run on both.
    let done = cluster.json(&[
        "submit",
        "--count",
        "40",
        "--wait",
        "--",
        "sh",
        "-c",
        "sleep 0.05; echo $WEIR_WORKER_NAME",
    ]);
    let results = cluster.json(&["results", &done["job"].to_string()]);
    let mut ran_on: Vec<&str> = results
        .as_array()
        .unwrap()
        .iter()
        .map(|r| r["stdout"].as_str().unwrap().trim())
        .collect();
    ran_on.sort();
    ran_on.dedup();
    assert_eq!(ran_on, vec!["big-worker", "small-worker"]);

    // Registered at run time with --wait: both workers' verdicts come back (each offers 1 GB).
    let registered = cluster.env_register("huge", "plugins/mem_gt.wasm", "threshold=2GB");
    assert_eq!(
        common::sorted_names(&registered[0]["not_matching"]),
        vec!["big-worker", "small-worker"],
        "{registered}"
    );
    assert_eq!(registered[0]["pending"].as_array().unwrap().len(), 0);

    // A task for it stays queued, and explain says why.
    let job = cluster.json(&[
        "submit",
        "--env",
        "huge",
        "--",
        "sh",
        "-c",
        "echo $WEIR_WORKER_NAME $WEIR_ENV_HUGE_THRESHOLD",
    ]);
    let task = job["first_task"].to_string();
    let lines = cluster.explain(&task);
    assert!(lines[0].contains("is Queued"), "{lines:?}");
    assert!(
        lines
            .iter()
            .any(|l| l.contains("(big-worker): environment `huge`: no-match")),
        "{lines:?}"
    );
    assert!(
        lines
            .iter()
            .any(|l| l.contains("no live worker can ever run it")),
        "{lines:?}"
    );

    // A worker that joins afterwards gets the registered set, matches, and takes the task.
    cluster.worker("huge-worker", &["--slots", "1", "--total-memory", "4GB"]);
    let done = cluster.json(&["wait", &job["job"].to_string()]);
    assert_eq!(done["counts"]["succeeded"], 1, "{done}");
    let results = cluster.json(&["results", &job["job"].to_string()]);
    assert_eq!(
        results[0]["stdout"].as_str().unwrap().trim(),
        "huge-worker 2000000000"
    );

    // Removing it: the workers tear it down and it is no longer listed.
    cluster.json(&["env", "remove", "huge"]);
    let list = cluster.json(&["env", "list"]);
    assert!(environment(&list, "huge").is_null(), "{list}");
}

#[test]
fn hostile_conditions_are_reported_as_errors_and_the_workers_keep_working() {
    let mut cluster = Cluster::start("10");
    cluster.worker("a", &["--slots", "2"]);
    cluster.worker("b", &["--slots", "2"]);
    cluster.await_status(|s| common::workers(s) == 2);
    for (mode, reason) in [
        ("loop", "evaluate timed out after 1s"),
        ("oom", "ran out of memory"),
        ("panic", "panicked: hostile condition panicked on purpose"),
        ("error", "hostile condition says no"),
    ] {
        let name = format!("hostile-{mode}");
        let config = format!("mode={mode}");
        let registered =
            cluster.env_register(&name, "plugins/fixtures/hostile_condition.wasm", &config);
        let erroring = registered[0]["erroring"].as_array().unwrap();
        assert_eq!(erroring.len(), 2, "{registered}");
        for entry in erroring {
            assert!(
                entry[1].as_str().unwrap().contains(reason),
                "{mode}: {entry}"
            );
        }
    }
    let done = cluster.json(&["submit", "--count", "10", "--wait", "--", "true"]);
    assert_eq!(done["counts"]["succeeded"], 10, "{done}");
    // A component of the wrong world is refused at registration.
    let out = cluster.weir(&["env", "register", "x", "plugins/waterfall_v2.wasm"]);
    assert_eq!(out.status.code(), Some(1));
    assert!(
        text(&out.stderr).contains("does not implement the `environment` world"),
        "{}",
        text(&out.stderr)
    );
}

#[test]
fn looping_conditions_cost_their_deadline_once_and_do_not_hold_the_others_up() {
    let mut cluster = Cluster::start("10");
    // Rechecks every 0.5 s: looping conditions re-run on each would keep the worker busy.
    cluster.worker("a", &["--slots", "1", "--env-recheck", "0.5"]);
    cluster.await_status(|s| common::workers(s) == 1);
    for i in 0..4 {
        cluster.json(&[
            "env",
            "register",
            &format!("spin-{i}"),
            "plugins/fixtures/hostile_condition.wasm",
            "--config",
            "mode=loop",
        ]);
    }
    let good = cluster.env_register("good", "plugins/mem_gt.wasm", "threshold=1");
    assert_eq!(common::sorted_names(&good[0]["matching"]), ["a"], "{good}");
    // Each looping one is answered, once, with an error that says it is not run again.
    let spins = |list: &serde_json::Value| -> Vec<String> {
        list.as_array()
            .unwrap()
            .iter()
            .filter(|e| e["name"].as_str().unwrap().starts_with("spin-"))
            .map(|e| e["erroring"][0][1].as_str().unwrap_or_default().to_string())
            .collect()
    };
    let deadline = common::Deadline::start("every spinning condition to error");
    let reasons = loop {
        let reasons = spins(&cluster.json(&["env", "list"]));
        if reasons.iter().all(|r| !r.is_empty()) {
            break reasons;
        }
        deadline.pause(format!("{reasons:?}"));
    };
    for reason in reasons {
        assert!(reason.contains("timed out"), "{reason}");
        assert!(reason.contains("not evaluated again"), "{reason}");
    }
    // The worker still runs tasks that need the good one.
    let done = cluster.json(&[
        "submit", "--env", "good", "--count", "3", "--wait", "--", "true",
    ]);
    assert_eq!(done["counts"]["succeeded"], 3, "{done}");
}
