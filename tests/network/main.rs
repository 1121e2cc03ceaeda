//! Real network faults (issue 30): the scheduler in a network namespace of its own, workers and
//! managers in others or behind a UDP relay of the test's own (`common/relay.rs`: delay, jitter,
//! loss, duplication, one-way and full drops), partitions by `ip link set down` on a veth pair
//! (`common/netns.rs`). Each task run appends `start`, a `tick` every 0.1 s and `end` lines with
//! its index, its pid, the time and its worker to its job's log file (all namespaces share the
//! file system); each run lasts from its start to the last line it wrote (a killed run ends at its
//! last tick). No two runs of one task may overlap, every task must complete exactly once in the
//! results (nothing lost), and where only the workers cut off could run a task, none that ran to
//! completion may be run to completion again (its outcome was not thrown away).
//!
//! The namespace tests need root and `ip` (iproute2): they are `#[ignore]`d like the other tests
//! that need root (`tests/durability.rs`), and `cargo test -- --include-ignored` (CI, as root)
//! runs them; asked for on a machine where no namespace can be made, they fail with `NOT RUN:`
//! and the reason. The manager-id and dashboard tests run on loopback and need nothing. Each test
//! takes at most 2 minutes and deletes its namespaces, links and processes (what a killed run
//! left is deleted by the next). `WEIR_RELAY_SEED=N` replays a relay's random draws;
//! `WEIR_NETWORK_KEEP=1` keeps each test's directory (process logs, run logs) and prints it.

#[path = "../common/netns.rs"]
mod netns;
#[path = "../common/relay.rs"]
mod relay;

#[path = "../common/mod.rs"]
mod common;

/// Three scheduler replicas: the leader lost, cut off, and a replica's disk lost.
mod replicas;

use std::collections::BTreeMap;
use std::io::{BufRead, BufReader, Read, Write};
use std::net::{Ipv4Addr, SocketAddr, TcpStream};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use netns::{Link, Netns};
use relay::{Direction, Relay, Shape};
use serde_json::Value;

/// The port schedulers listen on inside their own namespace (nothing else is there).
const PORT: u16 = 7788;

/// Spawn a scheduler `command` with its stdout piped and wait for its first line, `scheduler
/// listening on ADDRESS`: the process, the address, and its later lines (the dashboard's URL and
/// so on), read by whoever needs them while the pipe is kept drained.
fn listening(
    mut command: Command,
    what: &str,
) -> (Child, String, std::sync::mpsc::Receiver<String>) {
    let mut child = command
        .stdout(Stdio::piped())
        .spawn()
        .unwrap_or_else(|e| panic!("{what} does not start: {e}"));
    let mut stdout = BufReader::new(child.stdout.take().unwrap());
    let mut first = String::new();
    stdout.read_line(&mut first).unwrap();
    let (lines, rest) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        for line in stdout.lines().map_while(Result::ok) {
            let _ = lines.send(line);
        }
    });
    let address = first
        .trim()
        .strip_prefix("scheduler listening on ")
        .unwrap_or_else(|| panic!("{what} said {first:?}"))
        .to_string();
    (child, address, rest)
}

fn bin(name: &str) -> PathBuf {
    Path::new(env!("CARGO_BIN_EXE_scheduler"))
        .parent()
        .unwrap()
        .join(name)
}

/// A namespace, or the test fails saying why none can be made (it runs only when asked for).
fn namespace(tag: &str) -> Netns {
    Netns::new(tag).unwrap_or_else(|why| {
        panic!(
            "NOT RUN: cannot create a network namespace (this test needs root and iproute2; \
             CI runs it as root): {why}"
        )
    })
}

/// The processes of one test, each with its log file in the test's directory; killed (and
/// reaped) on drop. Declare namespaces, links and relays before it: they are then dropped after
/// the processes. On a failure the end of every log is printed.
struct Net {
    dir: tempfile::TempDir,
    processes: Vec<(String, Child)>,
    started: Instant,
    /// The scheduler's lines after its first (`dashboard on URL`, ...).
    scheduler_lines: Option<std::sync::mpsc::Receiver<String>>,
}

impl Drop for Net {
    fn drop(&mut self) {
        for (_, child) in &mut self.processes {
            let _ = child.kill();
        }
        for (_, child) in &mut self.processes {
            let _ = child.wait();
        }
        if std::thread::panicking() {
            self.print_logs(60);
        }
        println!("test took {:.1} s", self.started.elapsed().as_secs_f64());
        if std::env::var_os("WEIR_NETWORK_KEEP").is_some() {
            let dir = std::mem::replace(&mut self.dir, tempfile::tempdir().unwrap());
            println!("logs kept in {}", dir.keep().display());
        }
    }
}

impl Net {
    fn new() -> Net {
        Net {
            dir: tempfile::tempdir().unwrap(),
            processes: Vec::new(),
            started: Instant::now(),
            scheduler_lines: None,
        }
    }

    fn path(&self, name: &str) -> PathBuf {
        self.dir.path().join(name)
    }

    fn log(&self, name: &str) -> std::fs::File {
        std::fs::File::create(self.path(&format!("{name}.log"))).unwrap()
    }

    fn print_logs(&self, lines: usize) {
        let Ok(entries) = std::fs::read_dir(self.dir.path()) else {
            return;
        };
        let mut paths: Vec<_> = entries.flatten().map(|e| e.path()).collect();
        paths.sort();
        for path in paths {
            if path.extension().is_some_and(|e| e == "log") {
                let text = std::fs::read_to_string(&path).unwrap_or_default();
                let all: Vec<&str> = text.lines().collect();
                let tail = &all[all.len().saturating_sub(lines)..];
                eprintln!("==== {} (last {} lines)", path.display(), tail.len());
                for line in tail {
                    eprintln!("{line}");
                }
            }
        }
    }

    /// `t+SECONDS` since the test began, for its progress lines.
    fn at(&self) -> String {
        format!("t+{:.1}s", self.started.elapsed().as_secs_f64())
    }

    fn say(&self, what: &str) {
        println!("{} {what}", self.at());
    }

    /// A command for one of weir's executables, run in `netns` (None: the test's own), with its
    /// stderr to NAME.log and its own compile cache directory.
    fn command(&self, netns: Option<&Netns>, executable: &str, name: &str) -> Command {
        let mut command = match netns {
            Some(netns) => netns.command(bin(executable)),
            None => Command::new(bin(executable)),
        };
        command
            .env("WEIR_CACHE_DIR", self.path("cache"))
            .env("RUST_LOG", "info")
            .env("NO_COLOR", "1")
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(self.log(name));
        command
    }

    fn keep(&mut self, name: &str, child: Child) -> u32 {
        let pid = child.id();
        self.processes.push((name.to_string(), child));
        pid
    }

    fn child(&mut self, name: &str) -> &mut Child {
        &mut self
            .processes
            .iter_mut()
            .find(|(n, _)| n == name)
            .unwrap_or_else(|| panic!("no process {name}"))
            .1
    }

    /// A scheduler in `netns` listening on `listen` (`quic://IP:0`); it writes `access.json`.
    /// Returns the port it listens on.
    fn scheduler(&mut self, netns: Option<&Netns>, listen: &str, args: &[&str]) -> u16 {
        let mut command = self.command(netns, "scheduler", "scheduler");
        command
            .arg("--access-file")
            .arg(self.path("access.json"))
            .args(["--listen", listen])
            .args(args);
        let (child, address, rest) = listening(command, "the scheduler");
        self.scheduler_lines = Some(rest);
        self.keep("scheduler", child);
        let port = address.rsplit(':').next().unwrap().parse().unwrap();
        self.say(&format!("scheduler listening on {address}"));
        port
    }

    /// A copy of the scheduler's access file that reaches it at `address` (through a relay, or
    /// another of its addresses), written as NAME.json.
    fn access_via(&self, name: &str, address: SocketAddr) -> PathBuf {
        let text = std::fs::read_to_string(self.path("access.json")).unwrap();
        let mut access: Value = serde_json::from_str(&text).unwrap();
        access["address"] = Value::String(format!("quic://{address}"));
        let path = self.path(&format!("{name}.json"));
        std::fs::write(&path, access.to_string()).unwrap();
        path
    }

    /// A worker named `name` in `netns`, reaching the scheduler through `access`.
    fn worker(&mut self, netns: Option<&Netns>, access: &Path, name: &str, args: &[&str]) -> u32 {
        let mut command = self.command(netns, "worker", name);
        command
            .arg("--access-file")
            .arg(access)
            .args(["--name", name])
            .args(args);
        let child = command.spawn().expect("worker starts");
        self.keep(name, child)
    }

    /// `weir --access-file ACCESS ARGS` (from the test's own namespace).
    fn weir(&self, access: &Path, args: &[&str]) -> std::process::Output {
        Command::new(bin("weir"))
            .arg("--access-file")
            .arg(access)
            .args(args)
            .env("WEIR_CACHE_DIR", self.path("cache"))
            .env_remove("RUST_LOG")
            .output()
            .expect("weir runs")
    }

    fn json(&self, access: &Path, args: &[&str]) -> Value {
        let mut all = vec!["--output", "json"];
        all.extend_from_slice(args);
        let out = self.weir(access, &all);
        serde_json::from_slice(&out.stdout).unwrap_or_else(|e| {
            panic!(
                "weir {args:?}: {e}: {}{}",
                common::text(&out.stdout),
                common::text(&out.stderr)
            )
        })
    }

    /// `weir workers wait N`, failing after `seconds`.
    fn await_workers(&self, access: &Path, n: usize, seconds: u32) {
        let out = self.weir(
            access,
            &[
                "workers",
                "wait",
                &n.to_string(),
                "--timeout",
                &seconds.to_string(),
            ],
        );
        assert!(
            out.status.success(),
            "{n} workers did not come: {}{}",
            common::text(&out.stdout),
            common::text(&out.stderr)
        );
    }

    /// Submit `count` tasks of about `seconds` each that log their runs to runs.txt; the job id.
    fn submit(&self, access: &Path, count: usize, seconds: f64) -> String {
        self.submit_logging(access, "runs.txt", count, seconds, &[])
    }

    /// Submit `count` tasks of about `seconds` each, with the `weir submit` flags `more`, that
    /// log their runs to `log` (in the test's directory); the job id.
    fn submit_logging(
        &self,
        access: &Path,
        log: &str,
        count: usize,
        seconds: f64,
        more: &[&str],
    ) -> String {
        let script = task_script(&self.path(log), seconds);
        let count = count.to_string();
        let mut args = vec!["submit", "--count", &count, "--retries", "100"];
        args.extend_from_slice(more);
        args.extend_from_slice(&["--", "sh", "-c", &script]);
        let job = self.json(access, &args);
        job["job"].to_string()
    }

    /// `weir wait JOB` until it ends or `deadline` passes (then it fails, saying what is left).
    fn wait_job(&self, access: &Path, job: &str, deadline: Instant) -> Value {
        let mut child = Command::new(bin("weir"))
            .arg("--access-file")
            .arg(access)
            .args(["--output", "json", "wait", job])
            .env("WEIR_CACHE_DIR", self.path("cache"))
            .env_remove("RUST_LOG")
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap();
        loop {
            if let Some(status) = child.try_wait().unwrap() {
                let mut out = String::new();
                child
                    .stdout
                    .take()
                    .unwrap()
                    .read_to_string(&mut out)
                    .unwrap();
                let mut err = String::new();
                child
                    .stderr
                    .take()
                    .unwrap()
                    .read_to_string(&mut err)
                    .unwrap();
                assert!(
                    status.success() || !out.is_empty(),
                    "weir wait {job}: {err}"
                );
                return serde_json::from_str(&out)
                    .unwrap_or_else(|e| panic!("weir wait {job}: {e}: {out}{err}"));
            }
            if Instant::now() > deadline {
                let _ = child.kill();
                let _ = child.wait();
                let status = self.json(access, &["status"]);
                let runs = Runs::read(&self.path("runs.txt"));
                panic!(
                    "job {job} not finished by the deadline ({}); status: {status}\nruns: {}",
                    self.at(),
                    runs.summary()
                );
            }
            std::thread::sleep(Duration::from_millis(100));
        }
    }

    /// Wait until `n` runs have logged `start` in runs.txt, failing after `seconds`.
    fn await_starts(&self, n: usize, seconds: u64) {
        let deadline = Instant::now() + Duration::from_secs(seconds);
        loop {
            let runs = Runs::read(&self.path("runs.txt"));
            if runs.runs.len() >= n {
                return;
            }
            assert!(
                Instant::now() < deadline,
                "only {} of {n} runs started",
                runs.runs.len()
            );
            std::thread::sleep(Duration::from_millis(100));
        }
    }

    /// Wait until `n` runs have logged `end` in `log`, failing after `seconds`.
    fn await_ends(&self, log: &str, n: usize, seconds: u64) {
        let deadline = Instant::now() + Duration::from_secs(seconds);
        loop {
            let runs = Runs::read(&self.path(log));
            let ended = runs.runs.values().filter(|r| r.end.is_some()).count();
            if ended >= n {
                return;
            }
            assert!(Instant::now() < deadline, "only {ended} of {n} runs ended");
            std::thread::sleep(Duration::from_millis(100));
        }
    }
}

/// A task of about `seconds`: `start INDEX PID NS WORKER`, `tick …` every 0.1 s, its index on
/// stdout, then `end …`, appended to `log` (times in nanoseconds of the wall clock).
fn task_script(log: &Path, seconds: f64) -> String {
    let ns = (seconds * 1e9) as u64;
    format!(
        "log={log}; me=$$; w=${{WEIR_WORKER_NAME:-none}}; i=$WEIR_TASK_INDEX; now=$(date +%s%N); \
         echo start $i $me $now $w >> $log; stop=$((now + {ns})); \
         while [ $now -lt $stop ]; do sleep 0.1; now=$(date +%s%N); \
         echo tick $i $me $now $w >> $log; done; \
         echo $i; echo end $i $me $(date +%s%N) $w >> $log",
        log = log.display()
    )
}

/// One run of a task, from the log: its first and last line, its `end` if it logged one, and
/// the worker it ran on.
#[derive(Clone, Debug)]
struct Run {
    first: u128,
    last: u128,
    end: Option<u128>,
    worker: String,
}

/// Every run in the log, by (task index, pid).
struct Runs {
    runs: BTreeMap<(u64, u64), Run>,
}

impl Runs {
    fn read(log: &Path) -> Runs {
        let text = std::fs::read_to_string(log).unwrap_or_default();
        let mut runs: BTreeMap<(u64, u64), Run> = BTreeMap::new();
        for line in text.lines() {
            let fields: Vec<&str> = line.split_whitespace().collect();
            let [kind, task, pid, ns, worker] = fields[..] else {
                continue;
            };
            let (Ok(task), Ok(pid), Ok(ns)) = (task.parse(), pid.parse(), ns.parse::<u128>())
            else {
                continue;
            };
            let run = runs.entry((task, pid)).or_insert(Run {
                first: ns,
                last: ns,
                end: None,
                worker: worker.to_string(),
            });
            run.first = run.first.min(ns);
            run.last = run.last.max(ns);
            if kind == "end" {
                run.end = Some(ns);
            }
        }
        Runs { runs }
    }

    /// Each task's runs, in order of start.
    fn by_task(&self) -> BTreeMap<u64, Vec<Run>> {
        let mut by_task: BTreeMap<u64, Vec<Run>> = BTreeMap::new();
        for ((task, _), run) in &self.runs {
            by_task.entry(*task).or_default().push(run.clone());
        }
        for runs in by_task.values_mut() {
            runs.sort_by_key(|r| r.first);
        }
        by_task
    }

    /// (task, overlap in seconds) for every pair of runs of one task that overlap.
    fn overlaps(&self) -> Vec<(u64, f64)> {
        let mut found = Vec::new();
        for (task, runs) in self.by_task() {
            for (i, a) in runs.iter().enumerate() {
                for b in &runs[i + 1..] {
                    if b.first <= a.last {
                        let overlap = a.last.min(b.last) - b.first;
                        found.push((task, overlap as f64 / 1e9));
                    }
                }
            }
        }
        found
    }

    /// Tasks that ran to completion more than once although their first run's outcome reached
    /// the scheduler before any other run of them started: its `end` came first, and every
    /// other run started on the same worker (which threw its own outcome away), or after that
    /// worker registered again (claiming the outcome) following the `end`. `registered`: when
    /// each worker registered, from its log. (Another worker that registers first after a cut
    /// and is handed the task before its first worker is back runs it legitimately: the
    /// scheduler had not heard of the outcome.)
    fn completed_twice(&self, registered: &BTreeMap<String, Vec<u128>>) -> Vec<(u64, usize)> {
        let mut found = Vec::new();
        for (task, runs) in self.by_task() {
            let ended: Vec<&Run> = runs.iter().filter(|r| r.end.is_some()).collect();
            if ended.len() < 2 {
                continue;
            }
            let first_end = ended.iter().map(|r| r.end.unwrap()).min().unwrap();
            let first = ended.iter().find(|r| r.end == Some(first_end)).unwrap();
            let back = registered
                .get(&first.worker)
                .and_then(|times| times.iter().copied().find(|t| *t > first_end));
            if runs.iter().filter(|r| r.first != first.first).all(|r| {
                r.first > first_end
                    && (r.worker == first.worker || back.is_some_and(|t| t < r.first))
            }) {
                found.push((task, ended.len()));
            }
        }
        found
    }

    /// Tasks with more than one run.
    fn rerun(&self) -> Vec<(u64, usize)> {
        self.by_task()
            .into_iter()
            .filter(|(_, runs)| runs.len() > 1)
            .map(|(task, runs)| (task, runs.len()))
            .collect()
    }

    fn summary(&self) -> String {
        let by_task = self.by_task();
        let ended = self.runs.values().filter(|r| r.end.is_some()).count();
        format!(
            "{} runs of {} tasks, {ended} ended; tasks run more than once (task, runs): {}",
            self.runs.len(),
            by_task.len(),
            brief(&self.rerun())
        )
    }
}

// ---------------------------------------------------------------------------------------------
// 1. High latency, then a partition.

/// Scheduler in namespace A; two far workers in namespace B reach it through the relay; a near
/// worker reaches it directly. Four tasks of 50 s start on the far workers; for 20 s the relay
/// delays each direction by 1.5 s ± 1.5 s, then it drops everything until the end. The
/// scheduler loses the far workers and, after its fence, reruns their tasks on the near worker:
/// by then the far workers must have stopped them. (Today the far worker renews its lease for as
/// long as quinn has not closed its connection, ~30 s on a slow link.)
#[test]
#[ignore = "needs root and network namespaces; CI runs it (--include-ignored)"]
fn latency_then_partition_never_runs_a_task_twice_at_once() {
    // Bound in this order so that they drop in the reverse one: processes first.
    let Relayed {
        _a,
        b,
        _to_a,
        _to_b,
        relay,
        direct,
        far,
        mut net,
    } = relayed("lat");
    net.worker(Some(&b), &far, "far-1", &["--slots", "2"]);
    net.worker(Some(&b), &far, "far-2", &["--slots", "2"]);
    net.await_workers(&direct, 2, 30);

    let job = net.submit(&direct, 4, 50.0);
    net.await_starts(4, 30);
    net.say("4 tasks run on the far workers");
    net.worker(None, &direct, "near", &["--slots", "4"]);
    net.await_workers(&direct, 3, 30);

    slow(&relay, &net, "");
    std::thread::sleep(Duration::from_secs(20));
    cut_then_check(&relay, &net, &direct, &job, "latency then partition");
}

/// The relay delays each direction by 1.5 s ± 1.5 s from now on (`why` said after).
fn slow(relay: &Relay, net: &Net, why: &str) {
    relay.set_both(Shape::delay(
        Duration::from_millis(1500),
        Duration::from_millis(1500),
    ));
    net.say(&format!("relay: 1.5 s ± 1.5 s each way{why}"));
}

/// The relay drops everything from now on; the 4 tasks of `job` (logging to runs.txt) must all
/// succeed within 85 s, no two runs of one overlapping.
fn cut_then_check(relay: &Relay, net: &Net, direct: &Path, job: &str, test: &str) {
    relay.set_both(Shape::cut());
    net.say("relay: drops everything from now on");
    let deadline = Instant::now() + Duration::from_secs(85);
    let done = net.wait_job(direct, job, deadline);
    net.say(&format!("job done: {}", done["counts"]));
    let mut failures = Failures::default();
    check_runs_and_results(&mut failures, net, direct, (job, "runs.txt", 4), false);
    failures.finish(test);
}

/// As above, but the far workers are idle first, asked to beat every 20 s (`--idle-beats 0.1`:
/// 10 s a worker) against their 10 s lease, so their leases run out between beats: for 34 s the
/// relay delays each direction by 1.5 s ± 1.5 s, then four tasks of 50 s are handed to them (two
/// each), then the relay drops everything. Their runs must stop before the near worker reruns
/// them. The worker that registered second was told 20 s at once: it renews at registration
/// and every 20 s, so its lease has run out from 30 s to 40 s, when the hand-over arrives
/// (35–38.5 s): its tasks wait for the renewal they draw under the latency, and start once it is
/// answered. (The first, told 10 s while alone, may hold its lease then, or not.)
#[test]
#[ignore = "needs root and network namespaces; CI runs it (--include-ignored)"]
fn idle_workers_slowed_past_their_lease_then_latency_then_partition_never_run_a_task_twice() {
    let Relayed {
        _a,
        b,
        _to_a,
        _to_b,
        relay,
        direct,
        far,
        mut net,
    } = relayed_with("idl", &["--idle-beats", "0.1"]);
    net.worker(Some(&b), &far, "far-1", &["--slots", "2"]);
    net.worker(Some(&b), &far, "far-2", &["--slots", "2"]);
    net.await_workers(&direct, 2, 30);
    slow(&relay, &net, "; the far workers idle, beating every 20 s");
    std::thread::sleep(Duration::from_secs(34));
    let job = net.submit(&direct, 4, 50.0);
    net.await_starts(4, 60);
    net.say("4 tasks run on the far workers");
    net.worker(None, &direct, "near", &["--slots", "4"]);
    net.await_workers(&direct, 3, 30);
    let test = "idle past the lease, then latency, then partition";
    cut_then_check(&relay, &net, &direct, &job, test);
}

/// Failures collected over a test, reported together at its end (one broken promise should not
/// hide the others).
#[derive(Default)]
struct Failures(Vec<String>);

impl Failures {
    fn check(&mut self, ok: bool, what: impl FnOnce() -> String) {
        if !ok {
            let what = what();
            println!("FAILED: {what}");
            self.0.push(what);
        }
    }

    fn finish(self, test: &str) {
        assert!(
            self.0.is_empty(),
            "{test}: {} failures:\n- {}",
            self.0.len(),
            self.0.join("\n- ")
        );
    }
}

/// The runs `log` of `job` (`count` tasks): no two runs of one task overlapped, each task has
/// one result and it succeeded; with `sole_runners` (the workers that ran the job's first runs
/// were the only ones able to run it, and they were cut off together, so nothing else could run
/// a task while the outcome of its first run was on its way), no task whose first run ended
/// before any other run of it started ran to completion again.
fn check_runs_and_results(
    failures: &mut Failures,
    net: &Net,
    access: &Path,
    (job, log, count): (&str, &str, usize),
    sole_runners: bool,
) {
    let runs = Runs::read(&net.path(log));
    println!("job {job}: {}", runs.summary());
    let overlaps = runs.overlaps();
    failures.check(overlaps.is_empty(), || {
        format!(
            "{} pairs of runs of one task overlapped (task, seconds): {}",
            overlaps.len(),
            brief(&overlaps)
        )
    });
    let twice = if sole_runners {
        runs.completed_twice(&registrations_of(net, &runs))
    } else {
        Vec::new()
    };
    failures.check(twice.is_empty(), || {
        format!(
            "{} tasks ran to completion more than once although their first run's outcome \
             reached the scheduler before any other run of them started (task, completed \
             runs): {}",
            twice.len(),
            brief(&twice)
        )
    });
    let results = net.json(access, &["results", job]);
    let results = results.as_array().unwrap();
    let mut indexes = std::collections::BTreeMap::<usize, usize>::new();
    let mut not_ok = Vec::new();
    for result in results {
        if result["state"] != "Succeeded" {
            not_ok.push(result.to_string());
        }
        if let Some(index) = result["stdout"]
            .as_str()
            .and_then(|s| s.trim().parse().ok())
        {
            *indexes.entry(index).or_default() += 1;
        }
    }
    failures.check(not_ok.is_empty(), || {
        format!("job {job}: not succeeded: {not_ok:?}")
    });
    let duplicated: Vec<_> = indexes.iter().filter(|(_, n)| **n > 1).collect();
    failures.check(results.len() == count && duplicated.is_empty(), || {
        format!(
            "{} results for {count} tasks; indexes reported more than once: {duplicated:?}",
            results.len()
        )
    });
}

// ---------------------------------------------------------------------------------------------
// 2. Partitions of 8, 14 and 30 s during 300 short tasks.

/// The scheduler in a namespace of its own (A), reached from here directly (`direct`), and a
/// second namespace (B) whose processes reach it through a relay (`far`). Bind its fields in
/// declaration order, so that the processes go first, then the relay, the links, the
/// namespaces.
struct Relayed {
    _a: Netns,
    b: Netns,
    _to_a: Link,
    _to_b: Link,
    relay: Relay,
    direct: PathBuf,
    far: PathBuf,
    net: Net,
}

fn relayed(tag: &str) -> Relayed {
    relayed_with(tag, &[])
}

/// As [`relayed`], the scheduler started with `args` too.
fn relayed_with(tag: &str, args: &[&str]) -> Relayed {
    let a = namespace(&format!("{tag}-sched"));
    let b = namespace(&format!("{tag}-far"));
    let to_a = Link::to_root(&a);
    let to_b = Link::to_root(&b);
    let scheduler = SocketAddr::from((to_a.b.address, PORT));
    let relay = Relay::start(
        tag,
        SocketAddr::from((to_b.a.address, 0)),
        scheduler,
        relay::seed(),
    );
    let mut net = Net::new();
    net.scheduler(Some(&a), &format!("quic://{scheduler}"), args);
    let direct = net.access_via("direct", scheduler);
    let far = net.access_via("far", relay.address);
    Relayed {
        _a: a,
        b,
        _to_a: to_a,
        _to_b: to_b,
        relay,
        direct,
        far,
        net,
    }
}

/// The scheduler in a namespace of its own (A), and a second namespace (B) joined to it by a
/// veth pair: `direct` reaches the scheduler from here, `far` from B. Bind its fields in
/// declaration order, so that the processes go first, then the links, then the namespaces.
struct Split {
    _a: Netns,
    b: Netns,
    _to_a: Link,
    ab: Link,
    direct: PathBuf,
    far: PathBuf,
    net: Net,
}

fn split(tag: &str) -> Split {
    let a = namespace(&format!("{tag}-sched"));
    let b = namespace(&format!("{tag}-workers"));
    let to_a = Link::to_root(&a);
    let ab = Link::between(&a, &b);
    let mut net = Net::new();
    net.scheduler(Some(&a), &format!("quic://0.0.0.0:{PORT}"), &[]);
    let direct = net.access_via("direct", SocketAddr::from((to_a.b.address, PORT)));
    let far = net.access_via("far", SocketAddr::from((ab.a.address, PORT)));
    Split {
        _a: a,
        b,
        _to_a: to_a,
        ab,
        direct,
        far,
        net,
    }
}

/// At most the first 20 items of a long list, and how many more there are.
fn brief<T: std::fmt::Debug>(items: &[T]) -> String {
    if items.len() <= 20 {
        format!("{items:?}")
    } else {
        format!("{:?} and {} more", &items[..20], items.len() - 20)
    }
}

/// When each worker that ran something registered, from its log.
fn registrations_of(net: &Net, runs: &Runs) -> BTreeMap<String, Vec<u128>> {
    let workers: std::collections::BTreeSet<&String> =
        runs.runs.values().map(|r| &r.worker).collect();
    workers
        .into_iter()
        .map(|w| (w.clone(), registrations(&net.path(&format!("{w}.log")))))
        .collect()
}

/// When a worker registered (wall-clock nanoseconds), from its log (`RUST_LOG=info`, no
/// colour: `2026-12-01T15:36:24.707355Z  INFO weir::worker::session: registered ...`).
fn registrations(log: &Path) -> Vec<u128> {
    let text = std::fs::read_to_string(log).unwrap_or_default();
    text.lines()
        .filter(|line| line.contains("weir::worker::session: registered"))
        .filter_map(|line| line.split_whitespace().next())
        .filter_map(utc_ns)
        .collect()
}

/// Nanoseconds since the Unix epoch of an RFC 3339 UTC time as tracing writes it
/// (`YYYY-MM-DDTHH:MM:SS.ffffffZ`).
fn utc_ns(stamp: &str) -> Option<u128> {
    let (date, time) = stamp.strip_suffix('Z')?.split_once('T')?;
    let mut ymd = date.split('-').map(|p| p.parse::<i64>().ok());
    let (y, m, d) = (ymd.next()??, ymd.next()??, ymd.next()??);
    // Days from 1970-01-01 to y-m-d (Howard Hinnant's days_from_civil).
    let y = if m <= 2 { y - 1 } else { y };
    let era = y.div_euclid(400);
    let yoe = y - era * 400;
    let doy = (153 * (if m > 2 { m - 3 } else { m + 9 }) + 2) / 5 + d - 1;
    let doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
    let days = era * 146_097 + doe - 719_468;
    let (hms, fraction) = time.split_once('.').unwrap_or((time, "0"));
    let mut parts = hms.split(':').map(|p| p.parse::<i64>().ok());
    let (h, min, s) = (parts.next()??, parts.next()??, parts.next()??);
    let seconds = days * 86_400 + h * 3600 + min * 60 + s;
    let digits = fraction.len().min(9);
    let nanos: u128 = fraction[..digits].parse().ok()?;
    let nanos = nanos * 10u128.pow(9 - digits as u32);
    Some(u128::try_from(seconds).ok()? * 1_000_000_000 + nanos)
}

#[test]
fn utc_stamps_are_read_as_the_task_runs_write_them() {
    // `date -u -d 2026-12-01T15:36:24.707355Z +%s%N`
    assert_eq!(
        utc_ns("2026-12-01T15:36:24.707355Z"),
        Some(1_796_139_384_707_355_000)
    );
    assert_eq!(utc_ns("1970-01-01T00:00:00Z"), Some(0));
}

/// Wall-clock nanoseconds (what the task runs log).
fn wall_ns() -> u128 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_nanos()
}

/// Scheduler in namespace A, two workers of 2 slots in namespace B joined to A by a veth pair;
/// 300 tasks of 0.6 s. Once 30 more runs have ended, B's end of the pair goes down for 8 s, then
/// up; then 14 s, then 30 s. Every task completes once, no two runs of one overlap, and no task
/// whose first run's outcome reached the scheduler before any other run of it started (its
/// worker was back, claiming it, first: see `Runs::completed_twice`) ran to completion again:
/// outcomes a worker finished within its lease are not thrown away.
#[test]
#[ignore = "needs root and network namespaces; CI runs it (--include-ignored)"]
fn partitions_of_8_14_and_30_s_lose_nothing_and_throw_no_finished_work_away() {
    // Bound in this order so that they drop in the reverse one: processes first.
    let Split {
        _a,
        b,
        _to_a,
        ab,
        direct,
        far,
        mut net,
    } = split("part");
    net.worker(Some(&b), &far, "w-1", &["--slots", "2"]);
    net.worker(Some(&b), &far, "w-2", &["--slots", "2"]);
    net.await_workers(&direct, 2, 30);

    let job = net.submit(&direct, 300, 0.6);
    let mut windows = Vec::new();
    for seconds in [8, 14, 30] {
        let ended = Runs::read(&net.path("runs.txt"))
            .runs
            .values()
            .filter(|r| r.end.is_some())
            .count();
        net.await_ends("runs.txt", ended + 30, 60);
        let down = wall_ns();
        ab.down(&ab.b);
        net.say(&format!(
            "partition: {} down for {seconds} s",
            ab.b.interface
        ));
        std::thread::sleep(Duration::from_secs(seconds));
        ab.up(&ab.b);
        windows.push((seconds, down, wall_ns()));
        net.say("partition healed");
    }

    let deadline = net.started + Duration::from_secs(115);
    let done = net.wait_job(&direct, &job, deadline);
    net.say(&format!("job done: {}", done["counts"]));
    // Where each task completed twice had its first run end: in which partition, or after it.
    let runs = Runs::read(&net.path("runs.txt"));
    let mut when: BTreeMap<String, usize> = BTreeMap::new();
    for (task, _) in runs.completed_twice(&registrations_of(&net, &runs)) {
        let first_end = runs.by_task()[&task]
            .iter()
            .filter_map(|r| r.end)
            .min()
            .unwrap();
        let label = windows
            .iter()
            .rev()
            .find(|(_, down, _)| first_end >= *down)
            .map_or("before the first partition".to_string(), |(s, _, up)| {
                if first_end <= *up {
                    format!("during the {s} s partition")
                } else {
                    format!("after the {s} s partition")
                }
            });
        *when.entry(label).or_default() += 1;
    }
    println!("first completions of tasks completed twice, by when they ended: {when:?}");
    let mut failures = Failures::default();
    check_runs_and_results(&mut failures, &net, &direct, (&job, "runs.txt", 300), true);
    failures.finish("partitions of 8, 14 and 30 s");
}

/// CPU seconds a process has used (user + system), from `/proc/PID/stat`.
fn cpu_seconds(pid: u32) -> f64 {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap_or_default();
    // After the command name in parentheses: state is field 3, utime 14, stime 15.
    let rest = stat.rsplit_once(") ").map_or("", |(_, rest)| rest);
    let fields: Vec<u64> = rest
        .split_whitespace()
        .map(|f| f.parse().unwrap_or(0))
        .collect();
    // SAFETY: sysconf(3) reads a constant.
    let ticks = unsafe { libc::sysconf(libc::_SC_CLK_TCK) }.max(1) as f64;
    (fields.get(11).copied().unwrap_or(0) + fields.get(12).copied().unwrap_or(0)) as f64 / ticks
}

/// A wasm task runs inside the worker's process, where the guard cannot kill it. Scheduler in
/// namespace A, one worker in B joined by a veth pair, running a wasm task that loops (a core
/// busy); B's end goes down for 25 s. Once the lease is over (10 s) the worker must have stopped
/// the task although it has no session by then (its connection timed out after 5 s, and it is
/// trying to reconnect): its CPU time stops growing. Before, the loop ran on through the whole
/// partition while the scheduler, after its fence, could give the task to another worker.
#[test]
#[ignore = "needs root and network namespaces; CI runs it (--include-ignored)"]
fn a_wasm_task_stops_when_the_lease_runs_out_while_its_worker_is_cut_off() {
    // Bound in this order so that they drop in the reverse one: processes first.
    let Split {
        _a,
        b,
        _to_a,
        ab,
        direct,
        far,
        mut net,
    } = split("wasm");
    let worker = net.worker(Some(&b), &far, "w-1", &["--slots", "1"]);
    net.await_workers(&direct, 1, 30);
    let task = concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/plugins/fixtures/hostile_task.wasm"
    );
    net.json(
        &direct,
        &[
            "submit",
            "--wasm",
            task,
            "--input",
            "loop",
            "--timeout",
            "600",
        ],
    );
    let deadline = Instant::now() + Duration::from_secs(60);
    while net.json(&direct, &["status"])["tasks"]["running"] != 1 {
        assert!(Instant::now() < deadline, "the wasm task never started");
        std::thread::sleep(Duration::from_millis(100));
    }
    // Looping: the worker burns CPU (a second of it, however loaded the machine is).
    let start = cpu_seconds(worker);
    let deadline = Instant::now() + Duration::from_secs(120);
    while cpu_seconds(worker) - start < 1.0 {
        assert!(Instant::now() < deadline, "the wasm loop is not running");
        std::thread::sleep(Duration::from_millis(100));
    }
    ab.down(&ab.b);
    net.say("partition: the worker's link down for 25 s");
    // The lease ends at most 10 s after the worker's last answered renewal; margin for it.
    std::thread::sleep(Duration::from_secs(13));
    let before = cpu_seconds(worker);
    std::thread::sleep(Duration::from_secs(5));
    let used = cpu_seconds(worker) - before;
    std::thread::sleep(Duration::from_secs(7));
    ab.up(&ab.b);
    net.say("partition healed");
    assert!(
        used < 0.5,
        "the worker used {used:.2} s of CPU in 5 s after its lease ran out: its wasm task still \
         runs while the scheduler may run it elsewhere"
    );
}

// ---------------------------------------------------------------------------------------------
// 3. One-way loss.

/// Scheduler in namespace A; two far workers in namespace B reach it through the relay; a near
/// worker reaches it directly. Two jobs: four tasks of 40 s that start on the far workers (the
/// near one joins after), and 300 tasks of 0.6 s that only the far workers can run (they need
/// an amount of `far`, which only they have). Once 30 short ones have ended, the relay drops
/// every datagram of `direction` only, for 20 s. No two runs of one task overlap, each task
/// completes once, and no short task whose first run's outcome reached the scheduler before any
/// other run of it started ran to completion again (only the far workers could run it).
fn one_way_drop(direction: Direction) {
    let tag = match direction {
        Direction::Up => "up",
        Direction::Down => "down",
    };
    // Bound in this order so that they drop in the reverse one: processes first.
    let Relayed {
        _a,
        b,
        _to_a,
        _to_b,
        relay,
        direct,
        far,
        mut net,
    } = relayed(&format!("oneway-{tag}"));
    for name in ["far-1", "far-2"] {
        net.worker(
            Some(&b),
            &far,
            name,
            &["--slots", "4", "--capabilities", "far=1000"],
        );
    }
    net.await_workers(&direct, 2, 30);
    let long = net.submit(&direct, 4, 40.0);
    net.await_starts(4, 30);
    let short = net.submit_logging(&direct, "short-runs.txt", 300, 0.6, &["--cap", "far=1"]);
    net.worker(None, &direct, "near", &["--slots", "4"]);
    net.await_workers(&direct, 3, 30);
    net.await_ends("short-runs.txt", 30, 60);

    relay.set(direction, Shape::cut());
    net.say(&format!(
        "relay: drops every datagram {direction:?} for 20 s"
    ));
    std::thread::sleep(Duration::from_secs(20));
    relay.set_both(Shape::clear());
    net.say("relay: passes everything again");

    let deadline = net.started + Duration::from_secs(115);
    for job in [&long, &short] {
        let done = net.wait_job(&direct, job, deadline);
        net.say(&format!("job {job} done: {}", done["counts"]));
    }
    let mut failures = Failures::default();
    check_runs_and_results(&mut failures, &net, &direct, (&long, "runs.txt", 4), false);
    check_runs_and_results(
        &mut failures,
        &net,
        &direct,
        (&short, "short-runs.txt", 300),
        true,
    );
    failures.finish(&format!("one-way drop {direction:?}"));
}

#[test]
#[ignore = "needs root and network namespaces; CI runs it (--include-ignored)"]
fn one_way_loss_scheduler_to_worker_never_runs_a_task_twice_at_once() {
    one_way_drop(Direction::Down);
}

#[test]
#[ignore = "needs root and network namespaces; CI runs it (--include-ignored)"]
fn one_way_loss_worker_to_scheduler_never_runs_a_task_twice_at_once() {
    one_way_drop(Direction::Up);
}

// ---------------------------------------------------------------------------------------------
// 4. Two managers with one id (loopback).

/// Worker processes started by the manager process `pid` (its live children).
fn workers_of(pid: u32) -> Vec<u32> {
    common::children_of(pid)
}

/// Two `worker-manager --id same` (cap 2 each, one slot a worker) against a policy that asks
/// `same` for workers. The second is refused, saying which manager holds the id; no more than
/// 2 workers ever run; no task runs twice at once; each completes once.
#[test]
fn a_second_manager_with_a_live_managers_id_is_refused_and_the_cap_holds() {
    let mut net = Net::new();
    net.scheduler(
        None,
        "quic://127.0.0.1:0",
        &[
            "--policy",
            "waterfall_v1",
            "--policy-content",
            "1, same",
            "--scaling-interval",
            "0.2",
        ],
    );
    let access = net.path("access.json");
    let manager = |net: &mut Net, name: &str| {
        let mut command = net.command(None, "worker-manager", name);
        command.arg("--access-file").arg(&access).args([
            "--id",
            "same",
            "--max-task-concurrency",
            "2",
            "--heartbeat-interval",
            "0.2",
        ]);
        let child = command.spawn().expect("worker-manager starts");
        net.keep(name, child)
    };
    let first = manager(&mut net, "manager-1");
    let joining = Instant::now();
    while common::manager(&net.json(&access, &["status"]), "same").is_none() {
        assert!(joining.elapsed() < Duration::from_secs(30), "no manager");
        std::thread::sleep(Duration::from_millis(100));
    }
    let second = manager(&mut net, "manager-2");
    net.say("two managers with the id `same` started");
    let job = net.submit(&access, 8, 6.0);

    // Watch until the job ends: worker processes of both managers, and what the status says.
    let mut most_processes = 0;
    let mut most_registered = 0;
    let mut second_exit = None;
    let deadline = Instant::now() + Duration::from_secs(90);
    loop {
        let processes = workers_of(first).len() + workers_of(second).len();
        let status = net.json(&access, &["status"]);
        let registered = common::workers(&status);
        if processes > most_processes || registered > most_registered {
            net.say(&format!(
                "{processes} worker processes, {registered} registered workers"
            ));
        }
        most_processes = most_processes.max(processes);
        most_registered = most_registered.max(registered);
        if second_exit.is_none() {
            second_exit = net.child("manager-2").try_wait().unwrap();
        }
        let results = net.json(&access, &["results", &job]);
        if results.as_array().is_some_and(|r| r.len() >= 8) {
            break;
        }
        assert!(Instant::now() < deadline, "job not done: {status}");
        std::thread::sleep(Duration::from_millis(100));
    }
    std::thread::sleep(Duration::from_secs(1));
    if second_exit.is_none() {
        second_exit = net.child("manager-2").try_wait().unwrap();
    }
    let said = std::fs::read_to_string(net.path("manager-2.log")).unwrap_or_default();
    let refusal: Vec<&str> = said
        .lines()
        .filter(|l| l.to_lowercase().contains("refused"))
        .collect();
    let mut failures = Failures::default();
    failures.check(most_processes <= 2, || {
        format!("{most_processes} worker processes ran at once against a cap of 2")
    });
    failures.check(most_registered <= 2, || {
        format!("{most_registered} workers were registered at once against a cap of 2")
    });
    failures.check(
        second_exit.is_some_and(|s| !s.success()) || !refusal.is_empty(),
        || format!("the second manager was not refused (exit: {second_exit:?}; it said:\n{said})"),
    );
    failures.check(
        refusal.is_empty() || refusal.iter().any(|l| l.contains("same")),
        || format!("the refusal does not name the id or the first manager: {refusal:?}"),
    );
    let status = net.json(&access, &["status"]);
    println!("status at the end: {}", status["managers"]);
    check_runs_and_results(&mut failures, &net, &access, (&job, "runs.txt", 8), true);
    failures.finish("two managers with one id");
}

// ---------------------------------------------------------------------------------------------
// 5. A manager cut off from the scheduler while its workers are not, and the reverse.

/// Scheduler in namespace A with a policy that asks manager `m` (cap 2, one slot a worker) for
/// workers. The manager reaches it through one relay, its workers through another (the manager
/// starts them through a `--worker-command` script that gives them the other access file).
/// `tasks` tasks of `task_seconds`; once two run, one relay drops everything for `seconds`
/// (the scheduler forgets a manager offline for 10 s). The cap holds (worker processes and
/// registered workers), no worker that runs a task is stopped, no task runs twice at once, no
/// finished run is thrown away, each task completes once; with the manager cut (its workers
/// untouched) no task runs twice at all.
/// The scheduler (each replica, in `replicas.rs`) scales manager `m` with the waterfall.
const MANAGER_POLICY: [&str; 6] = [
    "--policy",
    "waterfall_v1",
    "--policy-content",
    "1, m",
    "--scaling-interval",
    "0.2",
];

fn manager_or_workers_cut(cut_manager: bool, seconds: u64, tasks: usize, task_seconds: f64) {
    let tag = if cut_manager { "mcut" } else { "wcut" };
    let a = namespace(&format!("{tag}-sched"));
    let to_a = Link::to_root(&a);
    let scheduler = SocketAddr::from((to_a.b.address, PORT));
    let loopback = SocketAddr::from((Ipv4Addr::LOCALHOST, 0));
    let manager_relay = Relay::start("manager", loopback, scheduler, relay::seed());
    let workers_relay = Relay::start("workers", loopback, scheduler, relay::seed());
    let mut net = Net::new();
    net.scheduler(
        Some(&a),
        &format!("quic://{scheduler}"),
        // Forgotten while cut off (the default is 60 s).
        &[&MANAGER_POLICY[..], &["--manager-forget-after", "10"]].concat(),
    );
    let direct = net.access_via("direct", scheduler);
    let manager_access = net.access_via("manager", manager_relay.address);
    let workers_access = net.access_via("workers", workers_relay.address);
    // The manager passes `--access-file ITS_FILE` first: the script puts the workers' in place.
    let script = net.path("worker.sh");
    std::fs::write(
        &script,
        format!(
            "#!/bin/sh\nshift 2\nexec {} --access-file {} \"$@\"\n",
            bin("worker").display(),
            workers_access.display()
        ),
    )
    .unwrap();
    std::fs::set_permissions(&script, std::os::unix::fs::PermissionsExt::from_mode(0o755)).unwrap();
    let mut command = net.command(None, "worker-manager", "manager");
    command.arg("--access-file").arg(&manager_access).args([
        "--id",
        "m",
        "--max-task-concurrency",
        "2",
        "--heartbeat-interval",
        "0.2",
        "--worker-command",
    ]);
    command.arg(&script);
    let child = command.spawn().expect("worker-manager starts");
    let manager = net.keep("manager", child);

    let job = net.submit(&direct, tasks, task_seconds);
    net.await_starts(2, 60);
    let relay = if cut_manager {
        &manager_relay
    } else {
        &workers_relay
    };
    let what = if cut_manager {
        "the manager"
    } else {
        "its workers"
    };

    // Watch: worker processes, registered workers, and workers that went away.
    let mut most_processes = 0;
    let mut most_registered = 0;
    let mut seen: BTreeMap<u32, String> = BTreeMap::new();
    let mut gone: Vec<(String, u128)> = Vec::new();
    let mut cut_at: Option<Instant> = None;
    let mut healed = false;
    let deadline = net.started + Duration::from_secs(115);
    let mut last_status: Value;
    loop {
        let elapsed = net.started.elapsed();
        if let Some(at) = cut_at {
            if !healed && at.elapsed() >= Duration::from_secs(seconds) {
                relay.set_both(Shape::clear());
                net.say(&format!("relay: {what} reach the scheduler again"));
                healed = true;
            }
        } else {
            relay.set_both(Shape::cut());
            net.say(&format!("relay: {what} cut off for {seconds} s"));
            cut_at = Some(Instant::now());
        }
        let pids = workers_of(manager);
        for pid in &pids {
            seen.entry(*pid).or_insert_with(|| {
                let cmdline = std::fs::read(format!("/proc/{pid}/cmdline")).unwrap_or_default();
                let args: Vec<String> = cmdline
                    .split(|b| *b == 0)
                    .map(|a| String::from_utf8_lossy(a).into_owned())
                    .collect();
                let name = args
                    .iter()
                    .position(|a| a == "--name")
                    .and_then(|i| args.get(i + 1).cloned())
                    .unwrap_or_default();
                net.say(&format!("worker process {pid} ({name}) started"));
                name
            });
        }
        let now = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .unwrap()
            .as_nanos();
        let vanished: Vec<u32> = seen
            .keys()
            .filter(|pid| !pids.contains(pid) && !gone.iter().any(|(n, _)| *n == seen[pid]))
            .copied()
            .collect();
        for pid in vanished {
            net.say(&format!("worker process {pid} ({}) ended", seen[&pid]));
            gone.push((seen[&pid].clone(), now));
        }
        most_processes = most_processes.max(pids.len());
        let status = net.json(&direct, &["status"]);
        let registered = common::workers(&status);
        most_registered = most_registered.max(registered);
        last_status = status;
        let results = net.json(&direct, &["results", &job]);
        if healed && results.as_array().is_some_and(|r| r.len() >= tasks) {
            break;
        }
        assert!(
            elapsed < deadline - net.started,
            "job not done by the deadline; status: {last_status}; {}",
            Runs::read(&net.path("runs.txt")).summary()
        );
        std::thread::sleep(Duration::from_millis(200));
    }
    net.say("job done");

    let mut failures = Failures::default();
    failures.check(most_processes <= 2, || {
        format!("{most_processes} worker processes of the manager at once against its cap of 2")
    });
    failures.check(most_registered <= 2, || {
        format!("{most_registered} workers registered at once against the manager's cap of 2")
    });
    // A worker that went away while a run on it went on to its last line then (no `end`): a
    // busy worker stopped.
    let runs = Runs::read(&net.path("runs.txt"));
    let mut stopped_busy = Vec::new();
    for ((task, _), run) in &runs.runs {
        if run.end.is_some() {
            continue;
        }
        if let Some((name, at)) = gone.iter().find(|(n, _)| *n == run.worker)
            && run.last + 1_500_000_000 >= *at
            && run.first <= *at
        {
            stopped_busy.push(format!("task {task} on {name}"));
        }
    }
    failures.check(stopped_busy.is_empty(), || {
        format!("busy workers were stopped: {stopped_busy:?}")
    });
    if cut_manager {
        let rerun = runs.rerun();
        failures.check(rerun.is_empty(), || {
            format!(
                "tasks ran more than once although their workers never lost the scheduler \
                 (task, runs): {rerun:?}"
            )
        });
    }
    println!("last status: {last_status}");
    check_runs_and_results(
        &mut failures,
        &net,
        &direct,
        (&job, "runs.txt", tasks),
        true,
    );
    failures.finish(&format!("{what} cut off for {seconds} s"));
}

/// The manager cut off for 20 s (forgotten after 10), its two workers running tasks of 25 s.
#[test]
#[ignore = "needs root and network namespaces; CI runs it (--include-ignored)"]
fn a_manager_cut_off_while_its_workers_are_not_keeps_its_cap_and_stops_no_busy_worker() {
    manager_or_workers_cut(true, 20, 4, 25.0);
}

/// The workers cut off for 30 s (past their lease and the fence) while they run tasks of 10 s,
/// their manager not: they come back to a manager that still lists them.
#[test]
#[ignore = "needs root and network namespaces; CI runs it (--include-ignored)"]
fn workers_cut_off_while_their_manager_is_not_keep_its_cap_and_stop_no_busy_worker() {
    manager_or_workers_cut(false, 30, 6, 10.0);
}

// ---------------------------------------------------------------------------------------------
// 6. The dashboard under 300 held connections (loopback).

/// A TCP connection to `to` from the loopback address `from` (so the held connections and the
/// newcomer come from different client addresses, as attacker and user would).
fn connect_from(from: Ipv4Addr, to: SocketAddr) -> std::io::Result<TcpStream> {
    use std::os::fd::FromRawFd;
    let SocketAddr::V4(to) = to else {
        panic!("IPv4 only")
    };
    // SAFETY: plain socket calls on a descriptor this function owns until it hands it over.
    unsafe {
        let fd = libc::socket(libc::AF_INET, libc::SOCK_STREAM | libc::SOCK_CLOEXEC, 0);
        if fd < 0 {
            return Err(std::io::Error::last_os_error());
        }
        let stream = TcpStream::from_raw_fd(fd);
        let address = |ip: Ipv4Addr, port: u16| libc::sockaddr_in {
            sin_family: libc::AF_INET as libc::sa_family_t,
            sin_port: port.to_be(),
            sin_addr: libc::in_addr {
                s_addr: u32::from(ip).to_be(),
            },
            sin_zero: [0; 8],
        };
        let len = std::mem::size_of::<libc::sockaddr_in>() as libc::socklen_t;
        let local = address(from, 0);
        if libc::bind(fd, (&raw const local).cast(), len) != 0 {
            return Err(std::io::Error::last_os_error());
        }
        // connect() waits at most this long (a server whose backlog is full drops SYNs).
        let timeout = libc::timeval {
            tv_sec: 1,
            tv_usec: 0,
        };
        let size = std::mem::size_of::<libc::timeval>() as libc::socklen_t;
        libc::setsockopt(
            fd,
            libc::SOL_SOCKET,
            libc::SO_SNDTIMEO,
            (&raw const timeout).cast(),
            size,
        );
        let remote = address(*to.ip(), to.port());
        if libc::connect(fd, (&raw const remote).cast(), len) != 0 {
            return Err(std::io::Error::last_os_error());
        }
        Ok(stream)
    }
}

/// `GET path` (HTTP/1.1, keep-alive) on `stream`.
fn send_get(stream: &mut TcpStream, path: &str, host: &str) -> std::io::Result<()> {
    write!(
        stream,
        "GET {path} HTTP/1.1\r\nHost: {host}\r\nConnection: keep-alive\r\n\r\n"
    )
}

/// A newcomer from 127.0.0.1 asks for `/`: the time until the status line of a 200 came, or
/// what went wrong, within `bound`.
fn newcomer(dashboard: SocketAddr, bound: Duration) -> Result<Duration, String> {
    let started = Instant::now();
    let mut stream =
        TcpStream::connect_timeout(&dashboard, bound).map_err(|e| format!("connect: {e}"))?;
    let host = dashboard.to_string();
    write!(
        stream,
        "GET / HTTP/1.1\r\nHost: {host}\r\nConnection: close\r\n\r\n"
    )
    .map_err(|e| format!("send: {e}"))?;
    let mut head = Vec::new();
    let mut buf = [0u8; 4096];
    loop {
        let left = bound.saturating_sub(started.elapsed());
        if left.is_zero() {
            return Err(format!(
                "no answer within {bound:?} (got {:?})",
                String::from_utf8_lossy(&head)
            ));
        }
        stream.set_read_timeout(Some(left)).unwrap();
        match stream.read(&mut buf) {
            Ok(0) => {
                return Err(format!(
                    "closed after {:?} with {:?}",
                    started.elapsed(),
                    String::from_utf8_lossy(&head)
                ));
            }
            Ok(n) => head.extend_from_slice(&buf[..n]),
            Err(e) => {
                return Err(format!(
                    "{e} after {:?} (got {:?})",
                    started.elapsed(),
                    String::from_utf8_lossy(&head)
                ));
            }
        }
        if head.windows(2).any(|w| w == b"\r\n") {
            let line = String::from_utf8_lossy(&head)
                .lines()
                .next()
                .unwrap_or("")
                .to_string();
            return if line.starts_with("HTTP/1.1 200") || line.starts_with("HTTP/1.0 200") {
                Ok(started.elapsed())
            } else {
                Err(format!("answered {line:?}"))
            };
        }
    }
}

/// 300 connections from 127.0.0.2 each asking for `path` every 8 s (reconnecting when closed),
/// held for 20 s; a newcomer from 127.0.0.1 asks for `/` at 2 s, 10 s and 18 s and must have
/// its answer within 2 s each time.
fn dashboard_under_held_connections(path: &'static str) {
    let mut net = Net::new();
    net.scheduler(None, "quic://127.0.0.1:0", &["--dashboard", "127.0.0.1:0"]);
    let said = net
        .scheduler_lines
        .as_ref()
        .unwrap()
        .recv_timeout(Duration::from_secs(10))
        .expect("the scheduler says where its dashboard is");
    let url = said
        .strip_prefix("dashboard on http://")
        .unwrap_or_else(|| panic!("the scheduler said {said:?}"));
    let dashboard: SocketAddr = url.split('/').next().unwrap().parse().unwrap();
    net.say(&format!("dashboard on {dashboard}"));
    let host = dashboard.to_string();
    assert!(
        newcomer(dashboard, Duration::from_secs(2)).is_ok(),
        "the page answers at all"
    );

    let attacker = Ipv4Addr::new(127, 0, 0, 2);
    let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    let holder = {
        let stop = stop.clone();
        let host = host.clone();
        std::thread::spawn(move || {
            let mut streams: Vec<Option<TcpStream>> = (0..300).map(|_| None).collect();
            let mut opened = 0u64;
            let mut buf = vec![0u8; 64 * 1024];
            let mut next_round = Instant::now();
            while !stop.load(std::sync::atomic::Ordering::SeqCst) {
                if Instant::now() >= next_round {
                    // A request on each connection; a closed one is opened again.
                    for slot in &mut streams {
                        if slot.is_none()
                            && let Ok(stream) = connect_from(attacker, dashboard)
                        {
                            stream.set_nonblocking(true).unwrap();
                            opened += 1;
                            *slot = Some(stream);
                        }
                        if let Some(stream) = slot {
                            match send_get(stream, path, &host) {
                                Ok(()) => {}
                                // Its send buffer is full: the server reads nothing from it.
                                Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => {}
                                Err(_) => *slot = None,
                            }
                        }
                    }
                    next_round += Duration::from_secs(8);
                }
                // Read what came, so the server never waits to write.
                for slot in &mut streams {
                    let Some(stream) = slot else {
                        continue;
                    };
                    match stream.read(&mut buf) {
                        Ok(0) => *slot = None,
                        Ok(_) => {}
                        Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => {}
                        Err(_) => *slot = None,
                    }
                }
                std::thread::sleep(Duration::from_millis(50));
            }
            let open = streams.iter().filter(|s| s.is_some()).count();
            (opened, open)
        })
    };

    let mut failures = Failures::default();
    for at in [2, 10, 18] {
        while net.started.elapsed() < Duration::from_secs(at) {
            std::thread::sleep(Duration::from_millis(50));
        }
        let answer = newcomer(dashboard, Duration::from_secs(2));
        net.say(&format!("newcomer: {answer:?}"));
        failures.check(answer.is_ok(), || {
            format!(
                "at {at} s, with 300 connections asking for {path} held: a newcomer's GET / \
                 got {answer:?}"
            )
        });
    }
    stop.store(true, std::sync::atomic::Ordering::SeqCst);
    let (opened, open) = holder.join().unwrap();
    net.say(&format!(
        "held connections: {opened} opened in all, {open} open at the end"
    ));
    failures.finish(&format!("the dashboard under 300 held {path} connections"));
}

#[test]
fn the_dashboard_serves_a_newcomer_while_300_keep_alive_connections_are_held() {
    dashboard_under_held_connections("/app.js");
}

#[test]
fn the_dashboard_serves_a_newcomer_while_300_event_streams_are_held() {
    dashboard_under_held_connections("/api/events");
}
