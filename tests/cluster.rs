//! End to end: the real `scheduler`, `worker` and `weir` executables on loopback.
//! Waiting is on conditions (a line printed, a job finished, a status reached), never on time.

mod common;

use std::path::Path;

use common::{Cluster, text, workers};
use serde_json::Value;

#[test]
fn a_thousand_command_tasks_and_ten_thousand_wasm_tasks_all_succeed_with_correct_outputs() {
    let mut cluster = Cluster::start("10");
    cluster.worker("a", &["--slots", "4"]);
    cluster.worker("b", &["--slots", "4"]);

    let done = cluster.json(&[
        "submit",
        "--count",
        "1000",
        "--wait",
        "--",
        "sh",
        "-c",
        "echo $((WEIR_TASK_INDEX * 3))",
    ]);
    assert_eq!(done["counts"]["succeeded"], 1000, "{done}");
    let results = cluster.json(&["results", &done["job"].to_string()]);
    let results = results.as_array().unwrap();
    assert_eq!(results.len(), 1000);
    for (index, result) in results.iter().enumerate() {
        assert_eq!(result["state"], "Succeeded");
        assert_eq!(
            result["stdout"].as_str().unwrap().trim(),
            (index * 3).to_string(),
            "{result}"
        );
    }

    let inputs = cluster.dir.path().join("inputs.txt");
    std::fs::write(
        &inputs,
        (0..10_000).map(|i| format!("{i}\n")).collect::<String>(),
    )
    .unwrap();
    let done = cluster.json(&[
        "submit",
        "--wasm",
        "plugins/square.wasm",
        "--inputs-file",
        inputs.to_str().unwrap(),
        "--wait",
    ]);
    assert_eq!(done["counts"]["succeeded"], 10_000, "{done}");
    let results = cluster.json(&["results", &done["job"].to_string()]);
    let results = results.as_array().unwrap();
    assert_eq!(results.len(), 10_000);
    for (index, result) in results.iter().enumerate() {
        assert_eq!(
            result["output"].as_str().unwrap(),
            (index * index).to_string(),
            "{result}"
        );
    }
}

#[test]
fn a_scheduler_on_two_threads_runs_every_task_with_its_output() {
    // `scheduler --threads 2` (for clusters of thousands of workers): the connections and the
    // actor on a multi-thread runtime, everything else alike.
    let mut cluster = Cluster::start_with(&["--threads", "2"]);
    cluster.worker("a", &["--slots", "2"]);
    cluster.worker("b", &["--slots", "2"]);
    let script = "echo $((WEIR_TASK_INDEX * 3))";
    let done = cluster.json(&[
        "submit", "--count", "300", "--wait", "--", "sh", "-c", script,
    ]);
    assert_eq!(done["counts"]["succeeded"], 300, "{done}");
    let results = cluster.json(&["results", &done["job"].to_string()]);
    let outputs: Vec<String> = results
        .as_array()
        .unwrap()
        .iter()
        .map(|r| r["stdout"].as_str().unwrap().trim().to_string())
        .collect();
    let expected: Vec<String> = (0..300).map(|i| (i * 3).to_string()).collect();
    assert_eq!(outputs, expected);
}

#[test]
fn a_task_needing_a_gpu_waits_while_the_others_run_past_it() {
    let mut cluster = Cluster::start("10");
    cluster.worker("cpu-only", &["--slots", "2", "--capabilities", "cpu=2"]);
    let gpu_job = cluster.json(&["submit", "--cap", "gpu=1", "--", "echo", "on a gpu"]);
    let others = cluster.json(&["submit", "--count", "20", "--wait", "--", "true"]);
    assert_eq!(others["counts"]["succeeded"], 20);
    let status = cluster.json(&["status"]);
    assert_eq!(status["tasks"]["queued"], 1, "{status}");

    cluster.worker("gpu", &["--slots", "1", "--capabilities", "gpu=1"]);
    let done = cluster.json(&["wait", &gpu_job["job"].to_string()]);
    assert_eq!(done["counts"]["succeeded"], 1, "{done}");
}

/// A cluster (heartbeat timeout `heartbeat_timeout`) with one 4-slot worker `name`, busy on all
/// its slots with a job of `count` tasks of 0.1 s each that echo their index. Returns the
/// cluster, the worker's index and the job.
fn one_busy_worker(heartbeat_timeout: &str, name: &str, count: u32) -> (Cluster, usize, String) {
    let mut cluster = Cluster::start(heartbeat_timeout);
    let worker = cluster.worker(name, &["--slots", "4"]);
    cluster.await_status(|s| workers(s) == 1);
    let script = "sleep 0.1; echo $WEIR_TASK_INDEX";
    let count = count.to_string();
    let job = cluster.json(&["submit", "--count", &count, "--", "sh", "-c", script]);
    cluster.await_status(|s| s["workers"][0]["running"] == 4);
    (cluster, worker, job["job"].to_string())
}

#[test]
fn kill_9_of_a_worker_mid_batch_loses_no_task_and_reports_none_twice() {
    let (mut cluster, doomed, job) = one_busy_worker("3", "doomed", 60);
    // Kill it while all its slots are busy.
    cluster.workers[doomed].kill().unwrap();
    cluster.workers[doomed].wait().unwrap();
    cluster.worker("survivor", &["--slots", "4"]);

    let done = cluster.json(&["wait", &job]);
    assert_eq!(done["counts"]["succeeded"], 60, "{done}");
    let results = cluster.assert_each_task_ran_once(&job, 60);
    // The four that were running on the killed worker ran again.
    let rerun = results
        .iter()
        .filter(|r| r["attempts"].as_u64().unwrap() == 2)
        .count();
    assert_eq!(rerun, 4, "{results:?}");
}

#[test]
fn wrong_tokens_and_garbage_are_refused_while_the_cluster_keeps_working() {
    let mut cluster = Cluster::start("10");
    cluster.worker("w", &["--slots", "2"]);

    // A client with the workers' token (or any wrong one) is refused with a clear error.
    let mut access: Value =
        serde_json::from_str(&std::fs::read_to_string(cluster.access_file()).unwrap()).unwrap();
    access["client_token"] = access["worker_token"].clone();
    let bad = cluster.dir.path().join("bad-access.json");
    std::fs::write(&bad, access.to_string()).unwrap();
    let out = cluster.weir_with(&bad, &["status"]);
    assert_eq!(out.status.code(), Some(1));
    assert!(
        text(&out.stderr)
            .contains("the scheduler refused the connection: wrong token for role Client"),
        "{}",
        text(&out.stderr)
    );

    // Raw peers: garbage, an oversized frame, another protocol version.
    let runtime = tokio::runtime::Runtime::new().unwrap();
    let access = weir::net::AccessFile::read(&cluster.access_file()).unwrap();
    runtime.block_on(async {
        for (payload, expected) in [
            (
                vec![0, 0, 0, 4, 0xde, 0xad, 0xbe, 0xef],
                "bad hello: undecodable frame",
            ),
            (
                vec![0xff, 0xff, 0xff, 0xff],
                "bad hello: frame of 4294967295 bytes exceeds",
            ),
            // Before authentication, even a frame a request could carry is too much.
            (
                vec![0x00, 0x10, 0x00, 0x00],
                "bad hello: frame of 1048576 bytes exceeds the 4096-byte limit",
            ),
            (
                hello(99, &access.client_token),
                "protocol version 99 is not supported",
            ),
        ] {
            let reason = raw_exchange(&access, &payload).await;
            assert!(reason.contains(expected), "{reason}");
        }
    });

    let done = cluster.json(&["submit", "--count", "10", "--wait", "--", "true"]);
    assert_eq!(done["counts"]["succeeded"], 10, "{done}");
}

#[test]
fn the_read_only_token_shows_status_but_cannot_change_anything_or_fetch_results() {
    let files = tempfile::tempdir().unwrap();
    let read = files.path().join("read-access.json");
    let read_flag = read.to_str().unwrap();
    let mut cluster =
        Cluster::start_with(&["--heartbeat-timeout", "10", "--read-access-file", read_flag]);
    cluster.worker("w", &["--slots", "2"]);
    let done = cluster.json(&["submit", "--count", "2", "--wait", "--", "true"]);
    assert_eq!(done["counts"]["succeeded"], 2, "{done}");
    let job = done["job"].to_string();

    // The read-only file: the same scheduler, its read token as the client token, no worker
    // token; the full file holds the read token too.
    let full = weir::net::AccessFile::read(&cluster.access_file()).unwrap();
    let watcher = weir::net::AccessFile::read(&read).unwrap();
    assert_eq!(watcher.address, full.address);
    assert_eq!(watcher.client_token, full.read_token);
    assert_ne!(watcher.client_token, full.client_token);
    assert!(watcher.worker_token.is_empty());

    // It reads what status-class commands show...
    for args in [
        &["status"][..],
        &["jobs"],
        &["wait", &job],
        &["managers"],
        &["env", "list"],
    ] {
        let out = cluster.weir_with(&read, args);
        assert!(out.status.success(), "{args:?}: {}", text(&out.stderr));
    }
    // ...and nothing else: submitting, cancelling, forgetting, results, environments.
    for args in [
        &["submit", "--", "true"][..],
        &["cancel", &job],
        &["forget", &job],
        &["results", &job],
        &["env", "remove", "nothing"],
    ] {
        let out = cluster.weir_with(&read, args);
        assert_eq!(out.status.code(), Some(1), "{args:?} was allowed");
        assert!(
            text(&out.stderr).contains("this token is read-only"),
            "{args:?}: {}",
            text(&out.stderr)
        );
    }
    // Each refusal below: the program exits 1 saying why.
    let refused = |command: &mut std::process::Command, says: &str| {
        let out = command.output().unwrap();
        assert_eq!(out.status.code(), Some(1), "{}", text(&out.stderr));
        assert!(text(&out.stderr).contains(says), "{}", text(&out.stderr));
    };
    let scheduler = || std::process::Command::new(env!("CARGO_BIN_EXE_scheduler"));
    // The read-only file cannot be the access file itself.
    refused(
        scheduler().args([
            "--listen",
            "127.0.0.1:0",
            "--access-file",
            read_flag,
            "--read-access-file",
            read_flag,
        ]),
        "is the access file itself",
    );
    // Spelt otherwise, and before either file exists (checked with the flags: `--check`).
    let fresh = files.path().join("new.json");
    std::fs::create_dir(files.path().join("sub")).unwrap();
    let spelt = files.path().join("sub").join("..").join("new.json");
    refused(
        scheduler()
            .arg("--check")
            .arg("--access-file")
            .arg(&fresh)
            .arg("--read-access-file")
            .arg(&spelt),
        "is the access file itself",
    );
    // Nor does a scheduler take it for its own (beside the certificate it was made with):
    // reusing it would make the worker token empty, overwriting it would cut everyone off.
    let mistaken = cluster.access_file().with_file_name("watch.json");
    std::fs::copy(&read, &mistaken).unwrap();
    refused(
        scheduler()
            .args(["--listen", "127.0.0.1:0", "--access-file"])
            .arg(&mistaken),
        "has no worker or client token",
    );
    assert_eq!(
        weir::net::AccessFile::read(&mistaken).unwrap(),
        watcher,
        "left as it was"
    );
    // A worker given it fails at once, saying why (it has no worker token).
    refused(
        std::process::Command::new(env!("CARGO_BIN_EXE_worker"))
            .arg("--access-file")
            .arg(&read)
            .args(["--reconnect-timeout", "600"]),
        "has no worker token",
    );
    // The client token still does all of it.
    let done = cluster.json(&["submit", "--count", "2", "--wait", "--", "true"]);
    assert_eq!(done["counts"]["succeeded"], 2, "{done}");
    let out = cluster.weir_with(&cluster.access_file(), &["results", &job]);
    assert!(out.status.success(), "{}", text(&out.stderr));
}

fn hello(version: u32, token: &str) -> Vec<u8> {
    weir::proto::encode(&weir::proto::Hello {
        version,
        role: weir::proto::Role::Client,
        token: token.into(),
    })
    .unwrap()
}

/// Connect with the right certificate, send `payload` as the first bytes, return the refusal.
async fn raw_exchange(access: &weir::net::AccessFile, payload: &[u8]) -> String {
    let mut endpoint = quinn::Endpoint::client("127.0.0.1:0".parse().unwrap()).unwrap();
    endpoint.set_default_client_config(
        weir::net::tls::client_config(&access.certificate_der().unwrap()).unwrap(),
    );
    let address = weir::net::parse_address(&access.address).unwrap();
    let connection = endpoint
        .connect(address, weir::net::tls::SERVER_NAME)
        .unwrap()
        .await
        .unwrap();
    let (mut send, mut recv) = connection.open_bi().await.unwrap();
    send.write_all(payload).await.unwrap();
    let _ = send.finish();
    match weir::proto::frame::read::<_, weir::proto::HelloReply>(&mut recv).await {
        Ok(weir::proto::HelloReply::Refused { reason }) => reason,
        other => panic!("expected a refusal, got {other:?}"),
    }
}

#[test]
fn timeouts_fail_the_task_and_cancel_frees_the_slots() {
    let mut cluster = Cluster::start("10");
    cluster.worker("w", &["--slots", "2"]);
    let out = cluster.weir(&[
        "--output",
        "json",
        "submit",
        "--timeout",
        "0.3",
        "--wait",
        "--",
        "sleep",
        "30",
    ]);
    assert_eq!(out.status.code(), Some(1), "a failed task fails --wait");
    let done: Value = serde_json::from_slice(&out.stdout).unwrap();
    let results = cluster.json(&["results", &done["job"].to_string()]);
    assert_eq!(results[0]["state"], "Failed");
    assert_eq!(results[0]["error"], "timed out after 300ms");

    let job = cluster.json(&["submit", "--count", "5", "--", "sleep", "30"])["job"].to_string();
    cluster.await_status(|s| s["tasks"]["running"] == 2);
    let canceled = cluster.json(&["cancel", &job]);
    assert_eq!(canceled["canceled"], 5);
    // A wait on it does not say it succeeded: exit 0 is every task succeeded.
    let out = cluster.weir(&["wait", &job]);
    assert_eq!(out.status.code(), Some(1), "{}", text(&out.stderr));
    assert!(
        text(&out.stderr).contains("job") && text(&out.stderr).contains(": 5 task(s) canceled"),
        "{}",
        text(&out.stderr)
    );
    // The killed tasks gave their slots back: new work runs.
    let done = cluster.json(&["submit", "--count", "4", "--wait", "--", "true"]);
    assert_eq!(done["counts"]["succeeded"], 4, "{done}");
    let status = cluster.json(&["status"]);
    assert_eq!(status["tasks"]["canceled"], 5, "{status}");
}

#[test]
fn a_task_whose_background_process_left_its_group_still_ends_with_its_output() {
    let mut cluster = Cluster::start("10");
    cluster.worker("w", &["--slots", "1"]);
    // The background process moves to a session of its own (out of the task's group, so it
    // outlives the task, as under Slurm's proctrack/pgid) and keeps the task's stdout open.
    let pidfile = cluster.dir.path().join("escaped.pid");
    // The task ends once it escaped (else its group's kill could come first).
    let script = format!(
        "setsid sh -c 'echo $$ > {0}; exec sleep 1000' & \
         until [ -s {0} ]; do sleep 0.01; done; echo main-done",
        pidfile.display()
    );
    let job = cluster.json(&["submit", "--", "sh", "-c", &script])["job"].to_string();
    // It ends (it waited for that pipe forever before), with what the task wrote.
    cluster.await_status(|s| s["tasks"]["succeeded"] == 1);
    let results = cluster.json(&["results", &job]);
    assert_eq!(results[0]["stdout"], "main-done\n", "{results}");
    // Not the task's to clean up any more: the test's.
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(30);
    let pid = loop {
        match std::fs::read_to_string(&pidfile) {
            Ok(pid) if pid.ends_with('\n') => break pid,
            _ => assert!(
                std::time::Instant::now() < deadline,
                "no pid from the escaped process"
            ),
        }
        std::thread::sleep(std::time::Duration::from_millis(10));
    };
    let _ = std::process::Command::new("kill")
        .args(["-9", pid.trim()])
        .status();
}

#[test]
fn clients_get_clear_errors_for_bad_requests() {
    let mut cluster = Cluster::start("10");
    cluster.worker("w", &["--slots", "1"]);
    let out = cluster.weir(&["submit", "--env", "large", "--", "true"]);
    assert_eq!(out.status.code(), Some(1));
    assert!(
        text(&out.stderr).contains("unknown environment `large`"),
        "{}",
        text(&out.stderr)
    );
    let out = cluster.weir(&["submit", "--wasm", "plugins/mem_gt.wasm"]);
    assert!(
        text(&out.stderr).contains("does not implement the `task` world"),
        "{}",
        text(&out.stderr)
    );
    let out = cluster.weir(&["submit"]);
    assert!(
        text(&out.stderr).contains("nothing to run"),
        "{}",
        text(&out.stderr)
    );
    let out = cluster.weir(&["wait", "99"]);
    assert!(
        text(&out.stderr).contains("no job 99"),
        "{}",
        text(&out.stderr)
    );
    let out = cluster.weir(&["--output", "json", "results", "99"]);
    let error: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert!(
        error["error"].as_str().unwrap().contains("no job 99"),
        "{error}"
    );
    // Scripts decide by the code, not the words.
    assert_eq!(error["code"], "not-found", "{error}");
    // A missing access file says what to do.
    let out = cluster.weir_with(Path::new("/nonexistent/access.json"), &["status"]);
    assert!(
        text(&out.stderr).contains("is the scheduler running?"),
        "{}",
        text(&out.stderr)
    );
}

#[test]
fn a_scheduler_killed_and_restarted_with_its_journal_loses_no_task() {
    let dir = tempfile::tempdir().unwrap();
    let journal = dir.path().join("journal");
    let journal = journal.to_str().unwrap();
    let mut cluster = Cluster::start_with(&["--journal", journal, "--heartbeat-timeout", "10"]);
    cluster.worker("a", &["--slots", "4"]);
    cluster.worker("b", &["--slots", "4"]);
    let job = cluster.json(&[
        "submit",
        "--count",
        "120",
        "--",
        "sh",
        "-c",
        "sleep 0.05; echo $WEIR_TASK_INDEX",
    ]);
    let job = job["job"].to_string();
    cluster.await_status(|s| common::count(&s["tasks"], "succeeded") >= 20);

    // A client is waiting on the job (it has printed its first progress line) when the
    // scheduler goes down.
    let mut waiting = std::process::Command::new(env!("CARGO_BIN_EXE_weir"))
        .arg("--access-file")
        .arg(cluster.access_file())
        .args(["wait", &job])
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let mut progress = std::io::BufReader::new(waiting.stderr.take().unwrap());
    let mut line = String::new();
    std::io::BufRead::read_line(&mut progress, &mut line).unwrap();
    assert!(line.starts_with(&format!("job {job}: ")), "{line}");
    // kill -9, then a new scheduler on the same journal and access file (a new port: port 0).
    cluster.restart_scheduler(&["--journal", journal, "--heartbeat-timeout", "10"]);
    // Workers and the waiting client find it by themselves; the job finishes.
    let drain =
        std::thread::spawn(move || std::io::Read::read_to_end(&mut progress, &mut Vec::new()));
    let out = waiting.wait_with_output().unwrap();
    let _ = drain.join();
    assert!(out.status.success(), "{}", text(&out.stdout));
    assert_eq!(
        text(&out.stdout),
        format!("job {job}: 120 succeeded, 0 failed, 0 canceled\n")
    );
    cluster.assert_each_task_ran_once(&job, 120);
}

/// Each token has its own budget of connections: clients, read-only clients (the dashboard's
/// watchers must not starve the submitters, nor they the watchers), workers and managers.
#[test]
fn connections_per_token_are_capped() {
    let files = tempfile::tempdir().unwrap();
    let read = files.path().join("read-access.json");
    let mut cluster = Cluster::start_with(&[
        "--max-connections",
        "1",
        "--read-access-file",
        read.to_str().unwrap(),
    ]);
    cluster.worker("only", &["--slots", "1"]);
    let runtime = tokio::runtime::Runtime::new().unwrap();
    let access = weir::net::AccessFile::read(&cluster.access_file()).unwrap();
    let watcher = weir::net::AccessFile::read(&read).unwrap();
    let first = runtime
        .block_on(weir::client::Client::connect(&access))
        .unwrap();
    let out = cluster.weir(&["status"]);
    assert_eq!(out.status.code(), Some(1));
    assert!(
        text(&out.stderr).contains("too many connections with the Client token (limit 1)"),
        "{}",
        text(&out.stderr)
    );
    // The read-only token is not counted with the client token (its one slot is free while
    // the client's is taken), and has its own limit.
    let reader = runtime
        .block_on(weir::client::Client::connect(&watcher))
        .unwrap();
    let out = cluster.weir_with(&read, &["status"]);
    assert_eq!(out.status.code(), Some(1));
    assert!(
        text(&out.stderr).contains("too many connections with the read-only token (limit 1)"),
        "{}",
        text(&out.stderr)
    );
    // An empty token is no token: neither the client's nor the read-only one.
    let reason = runtime.block_on(raw_exchange(
        &access,
        &hello(weir::proto::PROTOCOL_VERSION, ""),
    ));
    assert!(reason.contains("wrong token for role Client"), "{reason}");
    drop((first, reader));
    let deadline = common::Deadline::start("the connection slot to be free again");
    let done = loop {
        // The slot is free once the scheduler has seen the first connection end.
        let out = cluster.weir(&["--output", "json", "submit", "--wait", "--", "true"]);
        if out.status.success() {
            break serde_json::from_slice::<Value>(&out.stdout).unwrap();
        }
        deadline.pause(text(&out.stderr));
    };
    assert_eq!(done["counts"]["succeeded"], 1);
}

#[test]
fn a_worker_that_stops_responding_loses_no_task_and_none_finishes_twice() {
    let (mut cluster, frozen, job) = one_busy_worker("2", "frozen", 40);
    // SIGSTOP: it neither reads nor writes — a slow consumer, or a network that dropped it.
    let pid = cluster.workers[frozen].id();
    common::signal(pid, "-STOP");
    cluster.worker("healthy", &["--slots", "4"]);
    let done = cluster.json(&["wait", &job]);
    assert_eq!(done["counts"]["succeeded"], 40, "{done}");
    // It wakes up, finds its connection gone, reconnects as a new worker; nothing changes.
    common::signal(pid, "-CONT");
    cluster.await_status(|s| workers(s) == 2);
    cluster.assert_each_task_ran_once(&job, 40);
    assert_eq!(cluster.json(&["status"])["tasks"]["succeeded"], 40);
}

#[test]
fn forgotten_jobs_lose_their_results_and_stay_forgotten_across_a_restart() {
    let dir = tempfile::tempdir().unwrap();
    let journal = dir.path().join("journal");
    let journal = journal.to_str().unwrap();
    let mut cluster = Cluster::start_with(&["--journal", journal]);
    cluster.worker("w", &["--slots", "2"]);
    let submit = |count: &str| {
        let done = cluster.json(&[
            "submit",
            "--count",
            count,
            "--wait",
            "--",
            "sh",
            "-c",
            "echo $WEIR_TASK_INDEX",
        ]);
        done["job"].to_string()
    };
    let (first, second) = (submit("3"), submit("2"));
    // A job still running cannot be forgotten; a canceled one can.
    let running = cluster.json(&["submit", "--", "sleep", "30"])["job"].to_string();
    let out = cluster.weir(&["forget", &running]);
    assert_eq!(out.status.code(), Some(1));
    assert!(
        text(&out.stderr).contains(&format!("job {running} is not finished")),
        "{}",
        text(&out.stderr)
    );
    cluster.json(&["cancel", &running]);

    let forgotten = cluster.json(&["forget", &first, &running]);
    assert_eq!(forgotten[0]["tasks"], 3, "{forgotten}");
    assert_eq!(forgotten[1]["tasks"], 1, "{forgotten}");
    let gone = |cluster: &Cluster, job: &str| {
        let out = cluster.weir(&["results", job]);
        assert_eq!(out.status.code(), Some(1));
        assert!(
            text(&out.stderr).contains(&format!("job {job} was forgotten")),
            "{}",
            text(&out.stderr)
        );
    };
    gone(&cluster, &first);
    cluster.assert_each_task_ran_once(&second, 2);

    // The restart replays the journal and compacts it: the first job's records leave the file.
    let size = || std::fs::metadata(journal).unwrap().len();
    let before = size();
    cluster.restart_scheduler(&["--journal", journal]);
    gone(&cluster, &first);
    gone(&cluster, &running);
    cluster.assert_each_task_ran_once(&second, 2);
    assert!(
        size() < before,
        "journal not compacted: {before} -> {}",
        size()
    );
    // Ids are never reused: the next job comes after every forgotten one, also after a second
    // restart from the compacted journal.
    let next = cluster.json(&["submit", "--wait", "--", "true"])["job"].to_string();
    assert_eq!(next, (running.parse::<u64>().unwrap() + 1).to_string());
    cluster.restart_scheduler(&["--journal", journal]);
    gone(&cluster, &first);
    gone(&cluster, &running);
    cluster.assert_each_task_ran_once(&second, 2);
    assert_eq!(
        cluster.json(&["results", &next]).as_array().unwrap().len(),
        1
    );
    let after = cluster.json(&["submit", "--", "true"])["job"].to_string();
    assert_eq!(after, (next.parse::<u64>().unwrap() + 1).to_string());
}

#[test]
fn forget_after_frees_finished_jobs_by_age() {
    let mut cluster = Cluster::start_with(&["--forget-after", "0", "--heartbeat-timeout", "1"]);
    cluster.worker("w", &["--slots", "2"]);
    let done = cluster.json(&["submit", "--count", "5", "--wait", "--", "true"]);
    assert_eq!(done["counts"]["succeeded"], 5, "{done}");
    // The scheduler's next tick forgets it; nothing is held afterwards.
    let status = cluster.await_status(|s| s["tasks"]["succeeded"] == 0);
    assert_eq!(status["jobs"], 0, "{status}");
    let out = cluster.weir(&["results", &done["job"].to_string()]);
    assert!(
        text(&out.stderr).contains("was forgotten"),
        "{}",
        text(&out.stderr)
    );
}

#[test]
fn client_commands_wait_for_a_scheduler_that_holds_its_lock_and_fail_at_once_when_it_is_gone() {
    let mut cluster = Cluster::start("10");
    cluster.worker("w", &["--slots", "1"]);
    cluster.await_status(|s| common::workers(s) == 1);
    // Stopped (SIGSTOP), it holds its lock and its process is there: `weir status` says it is
    // retrying, and keeps at it until the scheduler answers again.
    let pid = cluster.scheduler.id();
    common::signal(pid, "-STOP");
    let mut status = cluster
        .weir_command(&cluster.access_file(), &["status"])
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let mut stderr = std::io::BufReader::new(status.stderr.take().unwrap());
    let mut line = String::new();
    std::io::BufRead::read_line(&mut stderr, &mut line).unwrap();
    assert!(line.contains("retrying for up to 60s"), "{line}");
    common::signal(pid, "-CONT");
    let out = status.wait_with_output().unwrap();
    assert!(out.status.success(), "{}", text(&out.stdout));
    assert!(
        text(&out.stdout).contains("tasks:"),
        "{}",
        text(&out.stdout)
    );
    // Killed, its lock is free and its pid gone: nothing will answer, and the client says so
    // at once (no retrying, although --reconnect-timeout is 60 s).
    cluster.kill_scheduler();
    let out = cluster.weir(&["status"]);
    assert_eq!(out.status.code(), Some(1));
    let err = text(&out.stderr);
    assert!(
        err.contains(&format!("is not running (its process {pid} is gone")),
        "{err}"
    );
    assert!(!err.contains("retrying"), "{err}");
    // Started again, it is reached as before.
    cluster.start_scheduler(&["--heartbeat-timeout", "10"]);
    let out = cluster.weir(&["status"]);
    assert!(out.status.success(), "{}", text(&out.stderr));
    // With --reconnect-timeout 0 a client gives up at once on one that does not answer.
    let pid = cluster.scheduler.id();
    common::signal(pid, "-STOP");
    let out = cluster.weir(&["--reconnect-timeout", "0", "status"]);
    common::signal(pid, "-CONT");
    assert_eq!(out.status.code(), Some(1));
    assert!(
        text(&out.stderr).contains("cannot reach the scheduler"),
        "{}",
        text(&out.stderr)
    );
    // No access file and no scheduler: at once, naming the file.
    let nowhere = cluster.dir.path().join("nowhere.json");
    let out = cluster.weir_with(&nowhere, &["status"]);
    assert_eq!(out.status.code(), Some(1));
    assert!(
        text(&out.stderr).contains("cannot read the access file"),
        "{}",
        text(&out.stderr)
    );
}

#[test]
fn tasks_nothing_can_run_fail_after_the_unschedulable_timeout() {
    let mut cluster =
        Cluster::start_with(&["--unschedulable-timeout", "0.5", "--heartbeat-timeout", "1"]);
    cluster.worker("w", &["--slots", "1"]);
    cluster.await_status(|s| common::workers(s) == 1);
    let out = cluster.weir(&[
        "--output", "json", "submit", "--cap", "gpu=1", "--count", "3", "--wait", "--", "true",
    ]);
    assert_eq!(out.status.code(), Some(1), "{}", text(&out.stderr));
    let done: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(done["counts"]["failed"], 3, "{done}");
    let results = cluster.json(&["results", &done["job"].to_string()]);
    for result in results.as_array().unwrap() {
        assert!(
            result
                .to_string()
                .contains("unschedulable: for 0.5 s no live worker"),
            "{result}"
        );
    }
    // What fits still runs.
    let done = cluster.json(&["submit", "--wait", "--", "true"]);
    assert_eq!(done["counts"]["succeeded"], 1, "{done}");
}

#[test]
fn wasm_tasks_are_held_to_their_own_timeouts() {
    let mut cluster = Cluster::start("10");
    // One slot: every task reuses the same pooled instances.
    cluster.worker("w", &["--slots", "1"]);
    let task = "plugins/fixtures/hostile_task.wasm";
    let submit = |input: &str, timeout: &str| {
        let out = cluster.weir(&[
            "--output",
            "json",
            "submit",
            "--wasm",
            task,
            "--input",
            input,
            "--timeout",
            timeout,
            "--wait",
        ]);
        let done: Value = serde_json::from_slice(&out.stdout).unwrap();
        let results = cluster.json(&["results", &done["job"].to_string()]);
        (done, results[0].clone())
    };
    // A task that never returns is stopped at its timeout, and the slot is free again.
    let (done, result) = submit("loop", "0.3");
    assert_eq!(done["counts"]["failed"], 1, "{done}");
    assert!(
        result.to_string().contains("timed out after 300ms"),
        "{result}"
    );
    // A quick task with a short timeout leaves an instance behind; a slow task with a long
    // timeout (about a second of work here) must not inherit that instance's deadline.
    let (done, _) = submit("quick", "0.2");
    assert_eq!(done["counts"]["succeeded"], 1, "{done}");
    let (done, result) = submit("spin:1000000000", "60");
    assert_eq!(done["counts"]["succeeded"], 1, "{done} {result}");
}

#[test]
fn jobs_lists_what_the_scheduler_holds_and_forget_finished_clears_it() {
    let mut cluster = Cluster::start("10");
    cluster.worker("w", &["--slots", "2"]);
    for _ in 0..3 {
        cluster.json(&["submit", "--count", "2", "--wait", "--", "true"]);
    }
    let active = cluster.json(&["submit", "--", "sleep", "30"])["job"].clone();
    let ids = |jobs: &Value| -> Vec<u64> {
        jobs.as_array()
            .unwrap()
            .iter()
            .map(|j| j["job"].as_u64().unwrap())
            .collect()
    };
    let jobs = cluster.json(&["jobs"]);
    assert_eq!(ids(&jobs), [4, 3, 2, 1], "{jobs}");
    assert_eq!(jobs[3]["counts"]["succeeded"], 2, "{jobs}");
    assert_eq!(jobs[3]["forgotten"], false, "{jobs}");
    assert_eq!(ids(&cluster.json(&["jobs", "--last", "2"])), [4, 3]);

    let forgotten = cluster.json(&["forget", "--finished"]);
    assert_eq!(
        forgotten["jobs"],
        serde_json::json!([1, 2, 3]),
        "{forgotten}"
    );
    assert_eq!(forgotten["tasks"], 6, "{forgotten}");
    // Jobs 1-3 are dropped altogether; the running one stays.
    assert_eq!(ids(&cluster.json(&["jobs"])), [4]);
    cluster.json(&["cancel", &active.to_string()]);
}

#[test]
fn a_wasm_component_forgotten_everywhere_comes_back_with_the_next_job() {
    let mut cluster = Cluster::start("10");
    cluster.worker("w", &["--slots", "2"]);
    let run = |cluster: &Cluster| {
        let done = cluster.json(&[
            "submit", "--wasm", "square", "--count", "3", "--input", "7", "--wait",
        ]);
        assert_eq!(done["counts"]["succeeded"], 3, "{done}");
        let results = cluster.json(&["results", &done["job"].to_string()]);
        assert!(results.to_string().contains("49"), "{results}");
        done["job"].to_string()
    };
    let first = run(&cluster);
    // Forgetting the only job that used it drops the component on the scheduler and the worker.
    cluster.json(&["forget", &first]);
    run(&cluster);
}

/// Sandboxed instances come from a pool that reserves terabytes of address space up front. A
/// worker whose address space is limited (`ulimit -v`, as some batch systems set) cannot have
/// it, and falls back to a mapping per instance: its wasm tasks still run.
#[test]
fn a_worker_with_a_limited_address_space_still_runs_wasm_tasks() {
    use std::os::unix::process::CommandExt;
    let mut cluster = Cluster::start("10");
    let mut command = cluster.launcher().command("worker").unwrap();
    command.args(["--name", "limited", "--slots", "2"]);
    // SAFETY: only setrlimit, async-signal-safe, runs between fork and exec.
    unsafe {
        command.pre_exec(|| {
            // Room for two instances of 4 GiB each and the rest, not for the pool.
            let limit = libc::rlimit {
                rlim_cur: 16 << 30,
                rlim_max: 16 << 30,
            };
            match libc::setrlimit(libc::RLIMIT_AS, &limit) {
                0 => Ok(()),
                _ => Err(std::io::Error::last_os_error()),
            }
        });
    }
    let mut child = command.spawn().expect("worker starts");
    // Registered, or dead (without the fallback it cannot create its engine and exits).
    let deadline = common::Deadline::start("the worker with a limited address space");
    loop {
        let status = cluster.json(&["status"]);
        if workers(&status) > 0 {
            break;
        }
        if let Some(exit) = child.try_wait().unwrap() {
            panic!("the worker with a limited address space exited: {exit}");
        }
        deadline.pause(status);
    }
    cluster.keep(child);
    let done = cluster.json(&[
        "submit", "--wasm", "square", "--input", "7", "--count", "20", "--wait",
    ]);
    assert_eq!(done["counts"]["succeeded"], 20, "{done}");
}

// The test helpers themselves: a poll that never sees its condition, or a status whose field
// was renamed, fails loudly instead of hanging or comparing a default.

#[test]
#[should_panic(expected = "still waiting for the sky to fall after 0ns")]
fn a_poll_past_its_deadline_fails_with_what_it_last_saw() {
    let deadline = common::Deadline::within("the sky to fall", std::time::Duration::ZERO);
    deadline.pause("a blue sky");
}

#[test]
#[should_panic(expected = "no field `live`")]
fn a_renamed_status_field_fails_the_helpers_instead_of_reading_zero() {
    let status = serde_json::json!({
        "managers": [{ "id": "m", "alive": 2, "starting": 0 }],
        "workers": [],
    });
    common::current(&status, "m");
}

#[test]
#[should_panic(expected = "no field `workers`")]
fn a_status_without_workers_fails_instead_of_counting_none() {
    workers(&serde_json::json!({ "nodes": [] }));
}
