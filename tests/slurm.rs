//! `worker-manager --backend slurm` against a real Slurm: `.ci/run` installs the Debian packages
//! and starts a single-node cluster with `examples/backends/slurm/start-slurm.sh`; these tests
//! are ignored by a plain `cargo test` and fail under `--include-ignored` when no Slurm answers.
//!
//! Every test uses a manager id of its own, so its jobs (named `weir-ID`) and processes are told
//! apart from the other tests' running at the same time.

mod common;

use std::path::Path;
use std::process::Command;

use common::{Cluster, Deadline, processes_with};

/// Fails the test, saying how to get a Slurm, when `sinfo` does not answer.
fn require_slurm() {
    let answered = Command::new("sinfo")
        .args(["-h", "-o", "%t"])
        .output()
        .is_ok_and(|o| o.status.success() && !o.stdout.is_empty());
    assert!(
        answered,
        "NOT RUN: no Slurm answers `sinfo` here; start one with \
         examples/backends/slurm/start-slurm.sh (as root) and export SLURM_CONF"
    );
}

/// A manager id no other test (or earlier run) uses.
fn unique_id(test: &str) -> String {
    format!("{test}{}", std::process::id())
}

/// Cancels the manager's jobs when the test ends, passed or not: the cluster's processes are
/// killed without a word, and the jobs would otherwise wait out the workers' reconnect timeout.
struct CancelJobs(String);

impl Drop for CancelJobs {
    fn drop(&mut self) {
        let _ = Command::new("scancel")
            .arg(format!("--name=weir-{}", self.0))
            .status();
    }
}

/// `squeue` for this manager's jobs: (id, state).
fn jobs(id: &str) -> Vec<(String, String)> {
    let out = Command::new("squeue")
        .args(["-h", "-o", "%i %T", &format!("--name=weir-{id}")])
        .output()
        .expect("squeue runs");
    assert!(out.status.success(), "squeue: {out:?}");
    String::from_utf8_lossy(&out.stdout)
        .lines()
        .filter_map(|l| {
            let (job, state) = l.trim().split_once(' ')?;
            Some((job.to_string(), state.to_string()))
        })
        .collect()
}

/// The Slurm manager of these tests: `--unit-size 1`, job logs in `dir`. Returns its index in
/// `cluster.workers`.
fn slurm_manager(
    cluster: &mut Cluster,
    id: &str,
    worker_type: &str,
    cap: u32,
    more: &[&str],
) -> usize {
    let output = cluster.dir.path().join("job-%j.out");
    let cap = cap.to_string();
    let args = [
        &[
            "--backend",
            "slurm",
            "--id",
            id,
            "--worker-type",
            worker_type,
            "--max-task-concurrency",
            &cap,
            "--job-output",
            output.to_str().unwrap(),
        ][..],
        more,
    ]
    .concat();
    cluster.manager(&args)
}

/// A Slurm manager's command (heartbeat 0.2 s, worker type `hpc`, at most `cap` tasks, job logs
/// in the cluster's directory), for a test that sets more (a `PATH` with a fake command first,
/// its log level) before it spawns it with [`keep_manager`].
fn slurm_manager_command(cluster: &Cluster, id: &str, cap: u32) -> Command {
    let output = cluster.dir.path().join("job-%j.out");
    let mut manager = cluster.launcher().command("worker-manager").unwrap();
    manager
        .args([
            "--heartbeat-interval",
            "0.2",
            "--backend",
            "slurm",
            "--id",
            id,
        ])
        .args([
            "--worker-type",
            "hpc",
            "--max-task-concurrency",
            &cap.to_string(),
        ])
        .args(["--job-output", output.to_str().unwrap()]);
    manager
}

/// Spawn `manager` as one of the cluster's processes.
fn keep_manager(cluster: &mut Cluster, mut manager: Command) {
    let child = manager.spawn().unwrap();
    cluster.keep(child);
}

/// Each job's own log, to see why a test failed.
fn job_logs(dir: &Path) -> String {
    let mut logs = String::new();
    for entry in std::fs::read_dir(dir).unwrap().flatten() {
        let name = entry.file_name().to_string_lossy().into_owned();
        if name.starts_with("job-") {
            let text = std::fs::read_to_string(entry.path()).unwrap_or_default();
            logs.push_str(&format!("--- {name}\n{text}\n"));
        }
    }
    logs
}

/// Wait for `job`, check all of its `count` tasks succeeded (saying why not: the results and the
/// jobs' own logs), and return where each ran: the tasks print `$WEIR_WORKER_NAME` last.
fn ran_on(cluster: &Cluster, job: &str, count: u64) -> Vec<String> {
    let done = cluster.json(&["wait", job]);
    let results = cluster.json(&["results", job]);
    assert_eq!(
        done["counts"]["succeeded"],
        count,
        "{done}\n{results}\n{}",
        job_logs(cluster.dir.path())
    );
    results
        .as_array()
        .unwrap()
        .iter()
        .map(|r| {
            let out = r["stdout"].as_str().unwrap_or_default();
            out.lines().last().unwrap_or_default().trim().to_string()
        })
        .collect()
}

/// `weir submit MORE... -- sh -c SCRIPT`; returns the job id.
fn submit(cluster: &Cluster, more: &[&str], script: &str) -> String {
    let args = [&["submit"][..], more, &["--", "sh", "-c", script]].concat();
    cluster.json(&args)["job"].to_string()
}

/// The unit managers and workers of manager `id` still alive on this machine.
fn unit_processes(id: &str) -> Vec<u32> {
    // The batch script's argument order (the dynamic manager's own differs after the type).
    let mut found = processes_with(&format!(
        "--id\u{0}{id}\u{0}--worker-type\u{0}hpc\u{0}--slots\u{0}"
    ));
    found.extend(processes_with(&format!("--manager\u{0}{id}\u{0}")));
    found
}

fn await_no_jobs(id: &str) {
    let deadline = Deadline::start(format!("no Slurm job of {id}"));
    loop {
        let left = jobs(id);
        if left.is_empty() {
            break;
        }
        deadline.pause(format!("{left:?}"));
    }
}

fn await_no_unit_processes(id: &str) {
    let deadline = Deadline::start(format!("no unit process of {id}"));
    loop {
        let left = unit_processes(id);
        if left.is_empty() {
            break;
        }
        deadline.pause(format!("{left:?}"));
    }
}

/// `scontrol show job -o ID`: the job's fields (Slurm keeps a finished job for `MinJobAge`,
/// 300 s with start-slurm.sh).
fn job_fields(job: &str) -> String {
    let out = Command::new("scontrol")
        .args(["show", "job", "-o", job])
        .output()
        .expect("scontrol runs");
    assert!(out.status.success(), "scontrol show job {job}: {out:?}");
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// One `KEY=VALUE` field of [`job_fields`].
fn job_field(job: &str, key: &str) -> String {
    let fields = job_fields(job);
    fields
        .split_whitespace()
        .find_map(|f| f.strip_prefix(&format!("{key}=")))
        .unwrap_or_else(|| panic!("no {key} in {fields}"))
        .to_string()
}

/// The Slurm job of a worker named `MANAGER-JOBID-N`.
fn job_of(id: &str, worker: &str) -> String {
    worker
        .strip_prefix(&format!("{id}-"))
        .and_then(|rest| rest.split('-').next())
        .filter(|job| !job.is_empty() && job.chars().all(|c| c.is_ascii_digit()))
        .unwrap_or_else(|| panic!("ran on {worker}"))
        .to_string()
}

/// A task that waits for `gate` to exist, then prints where it ran.
fn gated(gate: &Path) -> String {
    format!(
        "while [ ! -e {} ]; do sleep 0.1; done; echo $WEIR_WORKER_NAME",
        gate.display()
    )
}

/// A `program` of the test's own first in a `PATH` (returned, for the manager): a shell script of
/// `body`, given the path of the real one.
fn fake_first_in_path(cluster: &Cluster, program: &str, body: impl Fn(&str) -> String) -> String {
    let bin = cluster.dir.path().join("bin");
    std::fs::create_dir_all(&bin).unwrap();
    let real = Command::new("sh")
        .args(["-c", &format!("command -v {program}")])
        .output()
        .unwrap();
    let real = String::from_utf8_lossy(&real.stdout).trim().to_string();
    assert!(!real.is_empty(), "no {program} in PATH");
    let fake = bin.join(program);
    std::fs::write(&fake, format!("#!/bin/sh\n{}\n", body(&real))).unwrap();
    Command::new("chmod").arg("+x").arg(&fake).status().unwrap();
    format!(
        "{}:{}",
        bin.display(),
        std::env::var("PATH").unwrap_or_default()
    )
}

#[test]
#[ignore = "needs a running Slurm; CI starts one (--include-ignored)"]
fn a_burst_goes_through_sbatch_and_idle_units_end_completed() {
    require_slurm();
    let id = unique_id("burst");
    let _cancel = CancelJobs(id.clone());
    let mut cluster =
        Cluster::with_policy("waterfall_v2", "1, hpc", &["--scale-down-delay", "0.5"]);
    // Two jobs of two one-slot workers: a job goes only once both of its workers are drained.
    // Logging at info, so each job's own log (a file, not a terminal) has lines to look at.
    let mut manager = slurm_manager_command(&cluster, &id, 4);
    manager
        .args(["--unit-size", "2"])
        .env("RUST_LOG", "info")
        .stderr(std::fs::File::create(cluster.dir.path().join("manager.log")).unwrap());
    keep_manager(&mut cluster, manager);
    let job = submit(
        &cluster,
        &["--count", "8"],
        "sleep 0.5; echo $WEIR_WORKER_NAME",
    );
    // Each ran on a worker of a batch job: named MANAGER-JOBID-N.
    let mut ran: Vec<String> = ran_on(&cluster, &job, 8)
        .iter()
        .map(|worker| job_of(&id, worker))
        .collect();
    ran.sort();
    ran.dedup();
    // Idle after the delay: every job ends, and nothing of them is left running.
    cluster.await_status(|s| {
        common::manager(s, &id).is_some_and(|m| m["live"] == 0 && m["starting"] == 0)
    });
    await_no_jobs(&id);
    await_no_unit_processes(&id);
    // Each ended from inside (its unit's manager stopped its workers and exited 0): COMPLETED in
    // Slurm's accounting, not CANCELLED.
    for job in &ran {
        assert_eq!(
            job_field(job, "JobState"),
            "COMPLETED",
            "{}\n{}",
            job_fields(job),
            job_logs(cluster.dir.path())
        );
        assert_eq!(job_field(job, "ExitCode"), "0:0", "{}", job_fields(job));
        // Its log is a file: plain text, no colour escapes.
        let log = std::fs::read_to_string(cluster.dir.path().join(format!("job-{job}.out")))
            .unwrap_or_default();
        assert!(log.contains("worker started"), "{log}");
        assert!(!log.contains('\u{1b}'), "colour escapes in a file: {log:?}");
    }
}

#[test]
#[ignore = "needs a running Slurm; CI starts one (--include-ignored)"]
fn a_manager_stopped_by_sigterm_leaves_its_busy_jobs_to_the_next_which_adopts_them() {
    require_slurm();
    let id = unique_id("leave");
    let _cancel = CancelJobs(id.clone());
    let mut cluster = Cluster::with_policy("waterfall_v2", "1, hpc", &[]);
    let first = slurm_manager(&mut cluster, &id, "hpc", 2, &[]);
    let gate = cluster.dir.path().join("gate");
    // No retries: a task counted as failed would fail its job.
    let job = submit(&cluster, &["--count", "2", "--retries", "0"], &gated(&gate));
    cluster.await_status(|s| s["tasks"]["running"] == 2);
    let mut before = jobs(&id);
    before.sort();
    assert_eq!(before.len(), 2, "{before:?}");
    // A service restart: SIGTERM, and the manager ends cleanly...
    common::signal(cluster.workers[first].id(), "-TERM");
    let status = cluster.workers[first].wait().unwrap();
    assert!(status.success(), "{status:?}");
    // ...leaving its jobs running, their workers with their tasks.
    let mut after = jobs(&id);
    after.sort();
    assert_eq!(after, before, "the jobs run on");
    let status = cluster.json(&["status"]);
    assert_eq!(status["tasks"]["running"], 2, "{status}");
    // The next manager with this id adopts them; the tasks finish where they started, once.
    slurm_manager(&mut cluster, &id, "hpc", 2, &[]);
    cluster.await_status(|s| {
        common::manager(s, &id).is_some_and(|m| m["online"] == true && m["live"] == 2)
    });
    std::fs::write(&gate, "").unwrap();
    let mut finished_in: Vec<String> = ran_on(&cluster, &job, 2)
        .iter()
        .map(|worker| job_of(&id, worker))
        .collect();
    finished_in.sort();
    let started_in: Vec<String> = before.iter().map(|(job, _)| job.clone()).collect();
    assert_eq!(finished_in, started_in, "ran on in the jobs left running");
    let results = cluster.json(&["results", &job]);
    for result in results.as_array().unwrap() {
        assert_eq!(result["attempts"], 1, "not run again: {result}");
    }
}

#[test]
#[ignore = "needs a running Slurm; CI starts one (--include-ignored)"]
fn a_manager_stopped_by_sigterm_cancels_the_jobs_still_queued() {
    require_slurm();
    let id = unique_id("leavequeued");
    let _cancel = CancelJobs(id.clone());
    let mut cluster = Cluster::with_policy("waterfall_v2", "1, hpc", &[]);
    // Held: its job waits in the queue, with no work in it.
    let manager = slurm_manager(&mut cluster, &id, "hpc", 1, &["--sbatch-arg=--hold"]);
    submit(&cluster, &[], "true");
    let deadline = Deadline::start("the held job in the queue");
    while jobs(&id).is_empty() {
        deadline.pause("none");
    }
    common::signal(cluster.workers[manager].id(), "-TERM");
    let status = cluster.workers[manager].wait().unwrap();
    assert!(status.success(), "{status:?}");
    assert!(jobs(&id).is_empty(), "{:?}", jobs(&id));
}

#[test]
#[ignore = "needs a running Slurm; CI starts one (--include-ignored)"]
fn a_manager_told_to_cancel_on_stop_cancels_its_jobs() {
    require_slurm();
    let id = unique_id("oncancel");
    let _cancel = CancelJobs(id.clone());
    let mut cluster = Cluster::with_policy("waterfall_v2", "1, hpc", &[]);
    let manager = slurm_manager(&mut cluster, &id, "hpc", 1, &["--on-stop", "cancel"]);
    let gate = cluster.dir.path().join("gate");
    submit(&cluster, &[], &gated(&gate));
    cluster.await_status(|s| s["tasks"]["running"] == 1);
    assert_eq!(jobs(&id).len(), 1);
    common::signal(cluster.workers[manager].id(), "-TERM");
    let status = cluster.workers[manager].wait().unwrap();
    assert!(status.success(), "{status:?}");
    await_no_jobs(&id);
    await_no_unit_processes(&id);
}

#[test]
#[ignore = "needs a running Slurm; CI starts one (--include-ignored)"]
fn a_job_asks_slurm_for_the_cpus_and_memory_of_its_unit_unless_told_otherwise() {
    require_slurm();
    let id = unique_id("cpus");
    let other = unique_id("cpusgiven");
    let _cancel = CancelJobs(id.clone());
    let _cancel_other = CancelJobs(other.clone());
    let mut cluster = Cluster::with_policy("waterfall_v2", "1, hpc", &[]);
    // Held: the jobs wait in the queue, where Slurm shows what they asked for. A task for each
    // manager (only its workers have the capability it asks for).
    let unit = |capabilities: &'static str| {
        [
            "--unit-size",
            "2",
            "--slots",
            "3",
            "--capabilities",
            capabilities,
            "--sbatch-arg=--hold",
        ]
    };
    slurm_manager(&mut cluster, &id, "hpc", 6, &unit("memory=100MB,a=1"));
    let given = [
        &unit("memory=100MB,b=1")[..],
        &["--sbatch-arg=--cpus-per-task=5"],
    ]
    .concat();
    slurm_manager(&mut cluster, &other, "hpc", 6, &given);
    submit(&cluster, &["--cap", "a=1"], "true");
    submit(&cluster, &["--cap", "b=1"], "true");
    let first = |id: &str| {
        let deadline = Deadline::start(format!("a Slurm job of {id}"));
        loop {
            if let Some((job, _)) = jobs(id).into_iter().next() {
                break job;
            }
            deadline.pause("none");
        }
    };
    // 2 workers x 3 slots; 2 x 100 MB is 191 MiB.
    let job = first(&id);
    assert_eq!(job_field(&job, "NumCPUs"), "6", "{}", job_fields(&job));
    assert_eq!(
        job_field(&job, "MinMemoryNode"),
        "191M",
        "{}",
        job_fields(&job)
    );
    // An explicit --sbatch-arg wins.
    let job = first(&other);
    assert_eq!(job_field(&job, "NumCPUs"), "5", "{}", job_fields(&job));
    assert_eq!(
        job_field(&job, "MinMemoryNode"),
        "191M",
        "{}",
        job_fields(&job)
    );
}

#[test]
#[ignore = "needs a running Slurm; CI starts one (--include-ignored)"]
fn at_most_max_pending_jobs_wait_and_one_at_a_time_after_a_failure() {
    require_slurm();
    let id = unique_id("pending");
    let _cancel = CancelJobs(id.clone());
    let mut cluster = Cluster::with_policy("waterfall_v2", "1, hpc", &[]);
    // Every job is held: none ever starts, each is cancelled as late after 1 s.
    slurm_manager(
        &mut cluster,
        &id,
        "hpc",
        8,
        &[
            "--unit-timeout",
            "1",
            "--max-pending",
            "2",
            "--sbatch-arg=--hold",
        ],
    );
    submit(&cluster, &["--count", "8"], "true");
    let mut seen: Vec<String> = Vec::new();
    let mut first_round: Vec<String> = Vec::new();
    let deadline = Deadline::start("five pending jobs seen");
    while seen.len() < 5 {
        let now: Vec<String> = jobs(&id)
            .into_iter()
            .filter(|(_, state)| state == "PENDING")
            .map(|(job, _)| job)
            .collect();
        assert!(now.len() <= 2, "more than --max-pending wait: {now:?}");
        if first_round.is_empty() && !now.is_empty() {
            first_round = now.clone();
        }
        let failed_once = !first_round.is_empty() && first_round.iter().all(|j| !now.contains(j));
        let fresh: Vec<&String> = now.iter().filter(|j| !first_round.contains(j)).collect();
        if failed_once {
            // The first jobs were late: until one comes up, one waits at a time.
            assert!(fresh.len() <= 1, "a batch after a failure: {now:?}");
        }
        for job in now {
            if !seen.contains(&job) {
                seen.push(job);
            }
        }
        deadline.pause(format!("{seen:?}"));
    }
}

#[test]
#[ignore = "needs a running Slurm; CI starts one (--include-ignored)"]
fn a_job_cancelled_from_outside_is_replaced_and_its_tasks_requeued_not_failed() {
    require_slurm();
    let id = unique_id("scancel");
    let _cancel = CancelJobs(id.clone());
    let mut cluster = Cluster::with_policy("waterfall_v2", "1, hpc", &[]);
    slurm_manager(&mut cluster, &id, "hpc", 2, &[]);
    // No retries: a task counted as failed would fail its job.
    let job = submit(
        &cluster,
        &["--count", "2", "--retries", "0"],
        "sleep 3; echo $WEIR_WORKER_NAME",
    );
    cluster.await_status(|s| s["tasks"]["running"] == 2);
    let running = jobs(&id);
    let (victim, _) = running
        .iter()
        .find(|(_, state)| state == "RUNNING")
        .unwrap_or_else(|| panic!("no running job: {running:?}"))
        .clone();
    let out = Command::new("scancel").arg(&victim).output().unwrap();
    assert!(out.status.success(), "scancel: {out:?}");

    // The task that ran in the cancelled job ran again, to the end, in the job that replaced it.
    for worker in ran_on(&cluster, &job, 2) {
        assert!(
            worker.starts_with(&format!("{id}-")) && !worker.contains(&format!("-{victim}-")),
            "finished on {worker}"
        );
    }
    // The cancelled job was replaced by a new one (the requeued task ran there).
    let status = cluster.json(&["status"]);
    let workers: Vec<String> = status["workers"]
        .as_array()
        .unwrap()
        .iter()
        .map(|w| w["name"].as_str().unwrap_or_default().to_string())
        .collect();
    assert!(
        !workers.iter().any(|w| w.contains(&format!("-{victim}-"))),
        "the cancelled job's worker is gone: {workers:?}"
    );
    assert!(
        jobs(&id).iter().all(|(job, _)| *job != victim),
        "{:?}",
        jobs(&id)
    );
}

#[test]
#[ignore = "needs a running Slurm; CI starts one (--include-ignored)"]
fn a_held_job_times_out_and_the_waterfall_spills_to_the_next_tier() {
    require_slurm();
    let id = unique_id("held");
    let _cancel = CancelJobs(id.clone());
    let mut cluster = Cluster::with_policy("waterfall_v2", "1, hpc\n2, local", &[]);
    // Every job is submitted held: it waits in the queue, as behind a full cluster.
    slurm_manager(
        &mut cluster,
        &id,
        "hpc",
        4,
        &["--unit-timeout", "2", "--sbatch-arg=--hold"],
    );
    cluster.dynamic_manager("local_1", "local", 2);
    let job = submit(&cluster, &["--count", "3"], "echo $WEIR_WORKER_NAME");
    for worker in ran_on(&cluster, &job, 3) {
        assert!(worker.starts_with("local_1-"), "ran on {worker}");
    }
    // No held job is left behind: cancelled at its unit timeout, or once the demand was gone.
    await_no_jobs(&id);
}

#[test]
#[ignore = "needs a running Slurm; CI starts one (--include-ignored)"]
fn a_restarted_manager_adopts_its_running_job_and_never_cancels_it_while_busy() {
    require_slurm();
    let id = unique_id("adopt");
    let _cancel = CancelJobs(id.clone());
    let mut cluster = Cluster::with_policy("waterfall_v2", "1, hpc", &[]);
    let first = slurm_manager(&mut cluster, &id, "hpc", 1, &[]);
    let job = submit(
        &cluster,
        &["--retries", "0"],
        "sleep 4; echo $WEIR_WORKER_NAME",
    );
    cluster.await_status(|s| s["tasks"]["running"] == 1);
    let before = jobs(&id);
    assert_eq!(before.len(), 1, "{before:?}");
    // The manager dies without a word; its job runs on. Another takes its place.
    common::signal(cluster.workers[first].id(), "-9");
    let _ = cluster.workers[first].wait();
    slurm_manager(&mut cluster, &id, "hpc", 1, &[]);
    // It finished where it started: the job was adopted, not cancelled nor submitted again.
    let worker = ran_on(&cluster, &job, 1).remove(0);
    assert_eq!(worker, format!("{id}-{}-1", before[0].0));
    let after = jobs(&id);
    assert_eq!(after.len(), 1, "{after:?}");
    assert_eq!(after[0].0, before[0].0);
}

#[test]
#[ignore = "needs a running Slurm; CI starts one (--include-ignored)"]
fn a_unit_leaves_before_its_walltime_and_its_task_runs_again_in_the_job_that_replaces_it() {
    require_slurm();
    let id = unique_id("walltime");
    let _cancel = CancelJobs(id.clone());
    let mut cluster = Cluster::with_policy("waterfall_v2", "1, hpc", &[]);
    // One minute of walltime, leaving 50 s before the end: each job's worker may run tasks for
    // about 10 s (it asks Slurm what its job has left).
    slurm_manager(
        &mut cluster,
        &id,
        "hpc",
        1,
        &["--time-limit", "1", "--leave-before", "50"],
    );
    let mark = cluster.dir.path().join("first-run");
    let script = format!(
        "if [ -e {m} ]; then echo $WEIR_WORKER_NAME; else echo $WEIR_WORKER_NAME > {m}; sleep 600; fi",
        m = mark.display()
    );
    // No timeout (it may run anywhere), no retries: were it counted as failed, its job would fail.
    let job = submit(&cluster, &["--retries", "0"], &script);
    let second = ran_on(&cluster, &job, 1).remove(0);
    let first = std::fs::read_to_string(&mark).unwrap().trim().to_string();
    let job_of = |worker: &str| worker.split('-').nth(1).unwrap_or_default().to_string();
    assert!(first.starts_with(&format!("{id}-")), "{first}");
    assert!(second.starts_with(&format!("{id}-")), "{second}");
    assert_ne!(
        job_of(&first),
        job_of(&second),
        "ran again in the job that replaced the first"
    );
    // A task whose timeout outlives every job's worker is never given to one, nor are jobs
    // started for it: explain names the manager's usable time (60 s less 50 s).
    let why_long = cluster.json(&["submit", "--timeout", "120", "--", "true"]);
    let task = why_long["first_task"].to_string();
    let explained = cluster.explain(&task).join("\n");
    assert!(
        explained.contains(&format!(
            "manager {id} (hpc): cannot: no worker it can start will qualify: each has 10 s to \
             run tasks"
        )),
        "{explained}"
    );
}

/// #31.3a: a task longer than what a Slurm job's workers may run (--time-limit less
/// --leave-before) goes to the next tier, which can run it; tier 1 is told nothing for it (it
/// was asked for jobs it could never use, and the task waited behind them), and explain says so.
#[test]
#[ignore = "needs a running Slurm; CI starts one (--include-ignored)"]
fn a_task_longer_than_the_slurm_walltime_runs_on_the_next_tier_and_starts_no_job() {
    longer_than_the_walltime("longer", &["--time-limit", "1"]);
}

/// The same with the walltime given only as an sbatch argument: it counts the same.
#[test]
#[ignore = "needs a running Slurm; CI starts one (--include-ignored)"]
fn a_walltime_given_as_an_sbatch_argument_counts_as_the_time_limit() {
    longer_than_the_walltime("sbtime", &["--sbatch-arg=--time=1"]);
}

/// The same with no walltime on the command line: the partition's DefaultTime is the jobs'.
#[test]
#[ignore = "needs a running Slurm; CI starts one (--include-ignored)"]
fn a_partitions_default_time_counts_as_the_time_limit() {
    require_slurm();
    let partition = unique_id("p");
    let create = Command::new("scontrol")
        .args(["create", &format!("PartitionName={partition}")])
        .args(["Nodes=ALL", "DefaultTime=1", "MaxTime=5", "State=UP"])
        .output()
        .unwrap();
    assert!(create.status.success(), "scontrol create: {create:?}");
    struct Delete(String);
    impl Drop for Delete {
        fn drop(&mut self) {
            let _ = Command::new("scontrol")
                .args(["delete", &format!("PartitionName={}", self.0)])
                .output();
        }
    }
    let _delete = Delete(partition.clone());
    longer_than_the_walltime("pdefault", &["--partition", &partition]);
}

/// A Slurm manager whose jobs' walltime (set by `walltime`) leaves 30 s for tasks beside a local
/// tier 2: tasks of 60 s run on tier 2, and no job is started for them.
fn longer_than_the_walltime(name: &str, walltime: &[&str]) {
    require_slurm();
    let id = unique_id(name);
    let _cancel = CancelJobs(id.clone());
    let mut cluster = Cluster::with_policy("waterfall_v2", "1, hpc\n2, local", &[]);
    // Each job's workers may run tasks for 30 s.
    slurm_manager(
        &mut cluster,
        &id,
        "hpc",
        4,
        &[walltime, &["--leave-before", "30"]].concat(),
    );
    cluster.dynamic_manager("local_1", "local", 2);
    cluster.await_managers(2);
    let submitted = cluster.json(&[
        "submit",
        "--timeout",
        "60",
        "--count",
        "2",
        "--",
        "sh",
        "-c",
        "echo $WEIR_WORKER_NAME",
    ]);
    let job = submitted["job"].to_string();
    let task = submitted["first_task"].to_string();
    let explained = cluster.explain(&task).join("\n");
    assert!(
        explained.contains(&format!(
            "manager {id} (hpc): cannot: no worker it can start will qualify: each has 30 s to \
             run tasks (its walltime less --leave-before), less than the task's timeout of 60 s"
        )),
        "{explained}"
    );
    for worker in ran_on(&cluster, &job, 2) {
        assert!(worker.starts_with("local_1-"), "ran on {worker}");
    }
    let status = cluster.json(&["status"]);
    let hpc = common::manager(&status, &id).expect("the Slurm manager is registered");
    assert_eq!(hpc["desired"], 0, "{hpc}");
    assert_eq!(hpc["usable_ms"], 30_000, "{hpc}");
    let text = common::text(&cluster.weir(&["status"]).stdout);
    assert!(text.contains("tasks up to 30 s"), "{text}");
    assert!(jobs(&id).is_empty(), "{:?}", jobs(&id));
}

/// #31.3b: a task without a timeout that never fits in a job's walltime is requeued at each
/// walltime leave without a retry spent, `--max-walltime-requeues` times, then fails saying so
/// (it used to be requeued forever, jobs churning).
#[test]
#[ignore = "needs a running Slurm; CI starts one (--include-ignored)"]
fn a_task_that_never_fits_a_walltime_fails_after_its_walltime_requeues() {
    require_slurm();
    let id = unique_id("nofit");
    let _cancel = CancelJobs(id.clone());
    let mut cluster =
        Cluster::with_policy("waterfall_v2", "1, hpc", &["--max-walltime-requeues", "1"]);
    // About 10 s for tasks in each job.
    slurm_manager(
        &mut cluster,
        &id,
        "hpc",
        1,
        &["--time-limit", "1", "--leave-before", "50"],
    );
    let job = submit(&cluster, &["--retries", "0"], "sleep 600");
    let done = cluster.json(&["wait", &job]);
    let results = cluster.json(&["results", &job]);
    assert_eq!(
        done["counts"]["failed"],
        1,
        "{done}\n{results}\n{}",
        job_logs(cluster.dir.path())
    );
    let text = results.to_string();
    assert!(
        text.contains(
            "cut short by the end of its worker's allocation (walltime) 2 times; gave up after 1 \
             walltime requeues (--max-walltime-requeues)"
        ),
        "{text}"
    );
    await_no_jobs(&id);
}

#[test]
#[ignore = "needs a running Slurm; CI starts one (--include-ignored)"]
fn a_scancel_that_fails_is_run_again_and_no_job_outlives_the_demand() {
    require_slurm();
    let id = unique_id("failcancel");
    let _cancel = CancelJobs(id.clone());
    let mut cluster =
        Cluster::with_policy("waterfall_v2", "1, hpc", &["--scale-down-delay", "0.5"]);
    // A `scancel` first in the manager's PATH that fails while the flag file exists (slurmctld
    // away, say), and otherwise runs the real one.
    let flag = cluster.dir.path().join("scancel-fails");
    let failed = cluster.dir.path().join("scancel-failed");
    let path = fake_first_in_path(&cluster, "scancel", |real| {
        format!(
            "if [ -e {} ]; then echo \"$@\" >> {}; echo 'connection refused' >&2; exit 1; fi\nexec {real} \"$@\"",
            flag.display(),
            failed.display()
        )
    });
    std::fs::write(&flag, "").unwrap();
    let mut manager = slurm_manager_command(&cluster, &id, 2);
    manager.env("PATH", path);
    keep_manager(&mut cluster, manager);

    let job = submit(&cluster, &["--count", "2"], "echo $WEIR_WORKER_NAME");
    ran_on(&cluster, &job, 2);
    // Idle: the jobs are drained and cancelled, but every scancel fails...
    let deadline = Deadline::start("a failed scancel");
    while !failed.exists() {
        deadline.pause("none yet");
    }
    assert!(!jobs(&id).is_empty(), "the first scancel failed");
    // ...until Slurm answers again: then they are run again, and the jobs go.
    std::fs::remove_file(&flag).unwrap();
    await_no_jobs(&id);
    await_no_unit_processes(&id);
}

#[test]
#[ignore = "needs a running Slurm; CI starts one (--include-ignored)"]
fn the_jobs_of_a_manager_that_never_comes_back_end() {
    require_slurm();
    let id = unique_id("orphan");
    let _cancel = CancelJobs(id.clone());
    // Managers offline for 2 s are forgotten (60 s by default).
    let mut cluster = Cluster::with_policy(
        "waterfall_v2",
        "1, hpc",
        &["--manager-forget-after", "2", "--heartbeat-timeout", "2"],
    );
    let manager = slurm_manager(&mut cluster, &id, "hpc", 2, &[]);
    let job = submit(&cluster, &["--count", "2"], "echo $WEIR_WORKER_NAME");
    ran_on(&cluster, &job, 2);
    assert!(!jobs(&id).is_empty());
    // The manager dies and never comes back: nobody would scancel its jobs.
    common::signal(cluster.workers[manager].id(), "-9");
    let _ = cluster.workers[manager].wait();
    // Its idle workers are told to leave, their units end, and so do the jobs.
    await_no_jobs(&id);
    await_no_unit_processes(&id);
}

#[test]
#[ignore = "needs a running Slurm; CI starts one (--include-ignored)"]
fn weir_managers_shows_a_held_job_pending_with_slurms_reason_then_running_by_job_id() {
    require_slurm();
    let id = unique_id("alloc");
    let _cancel = CancelJobs(id.clone());
    let mut cluster =
        Cluster::with_policy("waterfall_v2", "1, hpc", &["--scale-down-delay", "0.5"]);
    // Submitted held (as `scontrol hold` would), with a walltime to show the time left.
    slurm_manager(
        &mut cluster,
        &id,
        "hpc",
        1,
        &[
            "--time-limit",
            "5",
            "--unit-timeout",
            "600",
            "--sbatch-arg=--hold",
        ],
    );
    let job = submit(&cluster, &[], "echo $WEIR_WORKER_NAME");

    // Pending under its Slurm job id, with Slurm's reason.
    let pending = cluster.await_unit(&id, |u| {
        u["state"] == "pending"
            && u["reason"]
                .as_str()
                .is_some_and(|r| r.starts_with("JobHeld"))
    });
    let slurm_job = pending["id"].as_str().unwrap().to_string();
    assert_eq!(jobs(&id), [(slurm_job.clone(), "PENDING".to_string())]);
    assert_eq!(
        pending["workers"],
        serde_json::json!([format!("{id}-{slurm_job}-1")])
    );
    let units = common::text(&cluster.weir(&["managers", "units", &id]).stdout);
    let row = units
        .lines()
        .find(|l| l.starts_with(&slurm_job))
        .unwrap_or_default();
    assert!(row.contains("pending (JobHeld"), "{units}");

    // Released: running, with the time left of its 5 minutes.
    let out = Command::new("scontrol")
        .args(["release", &slurm_job])
        .output()
        .unwrap();
    assert!(out.status.success(), "scontrol release: {out:?}");
    let running = cluster.await_unit(&id, |u| {
        u["id"] == slurm_job.as_str() && u["state"] == "running"
    });
    let left = running["time_left_ms"].as_u64().unwrap_or_default();
    assert!(left > 0 && left <= 300_000, "{running}");
    assert_eq!(ran_on(&cluster, &job, 1), [format!("{id}-{slurm_job}-1")]);

    // Idle past the scale-down delay: cancelled once drained, then listed as ended.
    let ended = cluster.await_unit(&id, |u| {
        u["id"] == slurm_job.as_str() && u["state"] == "ended"
    });
    assert_eq!(ended["reason"], "drained", "{ended}");
    await_no_jobs(&id);
}

#[test]
#[ignore = "needs a running Slurm; CI starts one (--include-ignored)"]
fn the_workers_gone_from_a_completing_job_do_not_count_as_starting() {
    require_slurm();
    let id = unique_id("completing");
    let _cancel = CancelJobs(id.clone());
    let mut cluster = Cluster::with_policy("waterfall_v2", "1, hpc", &[]);
    // A `squeue` that lists the job named in the flag file as COMPLETING (Slurm ending it, as
    // after a scancel from outside, for as long as the test needs).
    let flag = cluster.dir.path().join("completing");
    let path = fake_first_in_path(&cluster, "squeue", |real| {
        format!(
            "job=$(cat {} 2>/dev/null)\n{real} \"$@\" | sed \"s/^$job RUNNING /$job COMPLETING /\"",
            flag.display()
        )
    });
    let mut manager = slurm_manager_command(&cluster, &id, 1);
    manager.env("PATH", path);
    keep_manager(&mut cluster, manager);
    // One task runs, one waits: the manager wants its one job throughout.
    let gate = cluster.dir.path().join("gate");
    submit(&cluster, &["--count", "2"], &gated(&gate));
    cluster.await_status(|s| s["tasks"]["running"] == 1);
    let listed = jobs(&id);
    assert_eq!(listed.len(), 1, "{listed:?}");
    // The job is ending: its unit's manager is frozen (it would start the worker again) and
    // its worker stops, requeueing its task.
    std::fs::write(&flag, &listed[0].0).unwrap();
    let unit_manager = processes_with(&format!(
        "--id\u{0}{id}\u{0}--worker-type\u{0}hpc\u{0}--slots\u{0}"
    ));
    assert_eq!(unit_manager.len(), 1, "{unit_manager:?}");
    // Its worker is its child (the worker's own guard process is the worker's).
    let workers = common::children_of(unit_manager[0]);
    assert_eq!(workers.len(), 1, "{workers:?}");
    common::signal(unit_manager[0], "-STOP");
    common::signal(workers[0], "-TERM");
    // Gone, and not taken for one starting while Slurm finishes the job (which stays listed).
    cluster.await_status(|s| {
        s["tasks"]["queued"] == 2
            && common::manager(s, &id).is_some_and(|m| m["live"] == 0 && m["starting"] == 0)
    });
    assert_eq!(jobs(&id), listed, "still the one job, still listed");
    common::signal(unit_manager[0], "-CONT");
}
