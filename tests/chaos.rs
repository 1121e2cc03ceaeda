//! Seeded chaos: while a job runs, `kill -9` the scheduler (restarted on its journal), workers,
//! workers a manager started and the manager itself, and SIGSTOP/SIGCONT workers, at random.
//! Then: no task lost, no result duplicated, no output wrong, no two runs of one task
//! overlapping, and no task process left after teardown.
//!
//! The seed is printed; replay a failure with `WEIR_CHAOS_SEED=N cargo test --test chaos`.

mod common;

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use common::{Cluster, Rng, children_of, processes_with, try_signal};

const TASKS: usize = 100;

#[test]
fn chaos_loses_nothing_and_never_runs_a_task_twice_at_once() {
    let seed = common::seed("WEIR_CHAOS_SEED");
    println!("chaos seed: {seed} (replay: WEIR_CHAOS_SEED={seed} cargo test --test chaos)");
    let mut rng = Rng(seed);

    let dir = tempfile::tempdir().unwrap();
    let journal = dir.path().join("journal");
    let journal = journal.to_str().unwrap().to_string();
    let scheduler_args = [
        "--journal",
        journal.as_str(),
        "--heartbeat-timeout",
        "1",
        "--worker-lease",
        "1",
        "--scaling-interval",
        "0.2",
        "--scale-down-delay",
        "30",
    ];
    let mut cluster = Cluster::start_with(&scheduler_args);
    cluster.worker("solo-a", &["--slots", "2"]);
    cluster.worker("solo-b", &["--slots", "2"]);
    let mut manager = cluster.manager(&["--id", "dyn", "--max-task-concurrency", "2"]);
    cluster.weir(&["workers", "wait", "2"]);

    // Each run records its start, a tick every 0.1 s and its end, with its own pid.
    let log = dir.path().join("runs.log");
    let marker = format!("weir-chaos-{}", std::process::id());
    let script = format!(
        "log={log}; me=$$; echo start $WEIR_TASK_ID $me $(date +%s%N) >> $log; \
         for i in 1 2 3 4; do sleep 0.1; echo tick $WEIR_TASK_ID $me $(date +%s%N) >> $log; done; \
         echo end $WEIR_TASK_ID $me $(date +%s%N) >> $log; echo $WEIR_TASK_INDEX # {marker}",
        log = log.display()
    );
    let job = cluster.json(&[
        "submit",
        "--count",
        &TASKS.to_string(),
        "--retries",
        "1000",
        "--",
        "sh",
        "-c",
        &script,
    ]);
    let job = job["job"].to_string();

    // Faults at random moments while the job runs (bounded in number and time).
    let started = Instant::now();
    let mut faults = Vec::new();
    while faults.len() < 12 && started.elapsed() < Duration::from_secs(60) {
        std::thread::sleep(Duration::from_millis(300 + rng.below(900)));
        let fault = match rng.below(5) {
            0 => {
                cluster.restart_scheduler(&scheduler_args);
                "kill -9 scheduler, restart it".to_string()
            }
            1 => {
                let index = rng.below(2) as usize;
                cluster.workers[index].kill().unwrap();
                cluster.workers[index].wait().unwrap();
                let name = ["solo-a", "solo-b"][index];
                let child = cluster.worker_process(name, &["--slots", "2"]);
                cluster.workers[index] = child;
                format!("kill -9 worker {name}, start it again")
            }
            2 => {
                let pids = children_of(cluster.workers[manager].id());
                match pids.get(rng.below(pids.len().max(1) as u64) as usize) {
                    Some(pid) => {
                        try_signal(*pid, "-9");
                        format!("kill -9 manager-started worker {pid}")
                    }
                    None => "no manager-started worker to kill".to_string(),
                }
            }
            3 => {
                cluster.workers[manager].kill().unwrap();
                cluster.workers[manager].wait().unwrap();
                manager = cluster.manager(&["--id", "dyn", "--max-task-concurrency", "2"]);
                "kill -9 the manager, start it again".to_string()
            }
            _ => {
                let index = rng.below(2) as usize;
                let pid = cluster.workers[index].id();
                let pause = 200 + rng.below(2500);
                try_signal(pid, "-STOP");
                std::thread::sleep(Duration::from_millis(pause));
                try_signal(pid, "-CONT");
                format!("SIGSTOP worker {pid} for {pause} ms")
            }
        };
        println!("fault {}: {fault}", faults.len() + 1);
        faults.push(fault);
    }

    // Calm: everything finishes.
    let done = cluster.json(&["wait", &job]);
    let results = cluster.json(&["results", &job]);
    let results = results.as_array().unwrap();
    let failed: Vec<_> = results
        .iter()
        .filter(|r| r["state"] != "Succeeded")
        .collect();
    assert_eq!(
        done["counts"]["succeeded"], TASKS as u64,
        "seed {seed}: {done}; not succeeded: {failed:?}; faults: {faults:?}"
    );
    assert_eq!(results.len(), TASKS, "seed {seed}: one result per task");
    let mut seen = std::collections::HashSet::new();
    for (index, result) in results.iter().enumerate() {
        assert!(
            seen.insert(result["task"].as_u64().unwrap()),
            "seed {seed}: duplicated result {result}"
        );
        assert_eq!(result["state"], "Succeeded", "seed {seed}: {result}");
        assert_eq!(
            result["stdout"].as_str().unwrap().trim(),
            index.to_string(),
            "seed {seed}: wrong output {result}"
        );
    }

    // No two runs of a task overlap: each run lasts from its start to the last line it wrote.
    let text = std::fs::read_to_string(&log).unwrap();
    let mut runs: BTreeMap<(u64, u64), (u128, u128)> = BTreeMap::new();
    for line in text.lines() {
        let fields: Vec<&str> = line.split_whitespace().collect();
        let [_, task, pid, ns] = fields[..] else {
            continue;
        };
        let (task, pid, ns): (u64, u64, u128) = (
            task.parse().unwrap(),
            pid.parse().unwrap(),
            ns.parse().unwrap(),
        );
        let run = runs.entry((task, pid)).or_insert((ns, ns));
        run.0 = run.0.min(ns);
        run.1 = run.1.max(ns);
    }
    let mut by_task: BTreeMap<u64, Vec<(u128, u128)>> = BTreeMap::new();
    for ((task, _), span) in runs {
        by_task.entry(task).or_default().push(span);
    }
    for (task, mut spans) in by_task {
        spans.sort();
        for pair in spans.windows(2) {
            assert!(
                pair[0].1 < pair[1].0,
                "seed {seed}: task {task} ran twice at once: {spans:?} (faults: {faults:?})"
            );
        }
    }

    // Teardown: nothing of any task outlives the cluster.
    drop(cluster);
    let gone = Instant::now();
    while !processes_with(&marker).is_empty() && gone.elapsed() < Duration::from_secs(10) {
        std::thread::sleep(Duration::from_millis(20));
    }
    assert!(
        processes_with(&marker).is_empty(),
        "seed {seed}: task processes left after teardown"
    );
}
