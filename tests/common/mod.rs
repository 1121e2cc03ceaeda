//! A cluster of real processes on loopback for the end-to-end tests.

#![allow(dead_code)]

use std::fmt::Display;
use std::ops::{Deref, DerefMut};
use std::path::Path;
use std::process::{Child, Command, Output, Stdio};
use std::time::{Duration, Instant};

use serde_json::Value;
use weir::cluster::Launcher;

/// The library's [`weir::cluster::Cluster`] in a temporary directory (the access file, the
/// compile cache), with `RUST_LOG=error`, workers and managers that heartbeat every 0.2 s, and
/// `weir` helpers. Its `scheduler`, `workers` and `metrics` are the library cluster's.
pub(crate) struct Cluster {
    // Declared first: the processes die before their directory is removed.
    processes: weir::cluster::Cluster,
    pub dir: tempfile::TempDir,
}

impl Deref for Cluster {
    type Target = weir::cluster::Cluster;
    fn deref(&self) -> &Self::Target {
        &self.processes
    }
}

impl DerefMut for Cluster {
    fn deref_mut(&mut self) -> &mut Self::Target {
        &mut self.processes
    }
}

const HEARTBEAT: [&str; 2] = ["--heartbeat-interval", "0.2"];

impl Cluster {
    pub(crate) fn start(heartbeat_timeout: &str) -> Cluster {
        Cluster::start_with(&["--heartbeat-timeout", heartbeat_timeout])
    }

    /// A scheduler scaling with `engine` and `content`, deciding every 0.2 s; `more` flags.
    pub(crate) fn with_policy(engine: &str, content: &str, more: &[&str]) -> Cluster {
        let policy = [
            "--policy",
            engine,
            "--policy-content",
            content,
            "--scaling-interval",
            "0.2",
        ];
        Cluster::start_with(&[&policy[..], more].concat())
    }

    pub(crate) fn start_with(args: &[&str]) -> Cluster {
        Cluster::start_with_env(args, &[])
    }

    /// `start_with`, every process of the cluster also given the variables `env`.
    pub(crate) fn start_with_env(args: &[&str], env: &[(&str, &std::ffi::OsStr)]) -> Cluster {
        let dir = tempfile::tempdir().unwrap();
        let bin = Path::new(env!("CARGO_BIN_EXE_scheduler")).parent().unwrap();
        let mut launcher = Launcher::new(bin, dir.path())
            .env("WEIR_CACHE_DIR", dir.path().join("cache"))
            .env(
                "RUST_LOG",
                std::env::var("WEIR_TEST_LOG").unwrap_or("error".into()),
            );
        for (name, value) in env {
            launcher = launcher.env(name, value);
        }
        let processes = launcher.start(args).expect("scheduler starts");
        assert!(
            processes.address.starts_with("quic://127.0.0.1:"),
            "{}",
            processes.address
        );
        Cluster { processes, dir }
    }

    /// `kill -9` the scheduler and start a new one with the same access file.
    pub(crate) fn restart_scheduler(&mut self, args: &[&str]) {
        self.processes
            .restart_scheduler(args)
            .expect("scheduler starts");
    }

    /// A new scheduler with the same access file, after `kill_scheduler`.
    pub(crate) fn start_scheduler(&mut self, args: &[&str]) {
        self.processes
            .start_scheduler(args)
            .expect("scheduler starts");
    }

    pub(crate) fn worker(&mut self, name: &str, args: &[&str]) -> usize {
        let child = self.worker_process(name, args);
        self.keep(child)
    }

    /// A worker process not kept by the cluster (to put in place of one killed).
    pub(crate) fn worker_process(&self, name: &str, args: &[&str]) -> Child {
        self.spawn_worker(name, &[&HEARTBEAT[..], args].concat())
            .expect("worker starts")
    }

    /// A worker with its own compile cache, as on a machine of its own.
    pub(crate) fn worker_with_cache(&mut self, name: &str, args: &[&str], cache: &Path) -> usize {
        let mut command = self.launcher().command("worker").unwrap();
        command
            .args(["--name", name])
            .args(HEARTBEAT)
            .args(args)
            .env("WEIR_CACHE_DIR", cache);
        let child = command.spawn().expect("worker starts");
        self.keep(child)
    }

    /// A worker manager; it starts the `worker` executable beside it.
    pub(crate) fn manager(&mut self, args: &[&str]) -> usize {
        self.processes
            .manager(&[&HEARTBEAT[..], args].concat())
            .expect("worker-manager starts")
    }

    /// A manager that scales workers of `worker_type` up to `max_tasks` running tasks.
    pub(crate) fn dynamic_manager(&mut self, id: &str, worker_type: &str, max_tasks: u32) -> usize {
        self.manager(&[
            "--id",
            id,
            "--worker-type",
            worker_type,
            "--max-task-concurrency",
            &max_tasks.to_string(),
        ])
    }

    pub(crate) fn weir(&self, args: &[&str]) -> Output {
        self.weir_with(&self.access_file(), args)
    }

    pub(crate) fn weir_with(&self, access_file: &Path, args: &[&str]) -> Output {
        self.weir_command(access_file, args)
            .output()
            .expect("weir runs")
    }

    /// A `weir` command to run (or spawn) against `access_file`.
    pub(crate) fn weir_command(&self, access_file: &Path, args: &[&str]) -> Command {
        let mut command = Command::new(env!("CARGO_BIN_EXE_weir"));
        command
            .arg("--access-file")
            .arg(access_file)
            .args(args)
            .env("WEIR_CACHE_DIR", self.dir.path().join("cache"))
            .env_remove("RUST_LOG");
        command
    }

    pub(crate) fn json(&self, args: &[&str]) -> Value {
        let mut all = vec!["--output", "json"];
        all.extend_from_slice(args);
        let out = self.weir(&all);
        serde_json::from_slice(&out.stdout).unwrap_or_else(|e| {
            panic!(
                "weir {args:?}: {e}: {}{}",
                text(&out.stdout),
                text(&out.stderr)
            )
        })
    }

    /// The job's results: exactly one per task, each a success whose stdout is its task index
    /// (the tasks run `echo $WEIR_TASK_INDEX`). Returns them for further checks.
    pub(crate) fn assert_each_task_ran_once(&self, job: &str, count: usize) -> Vec<Value> {
        let results = self.json(&["results", job]);
        let results = results.as_array().unwrap().clone();
        assert_eq!(results.len(), count, "one result per task");
        let mut seen = std::collections::HashSet::new();
        for (index, result) in results.iter().enumerate() {
            assert!(
                seen.insert(result["task"].as_u64().unwrap()),
                "task reported twice: {result}"
            );
            assert_eq!(result["state"], "Succeeded", "{result}");
            assert_eq!(
                result["stdout"].as_str().unwrap().trim(),
                index.to_string(),
                "{result}"
            );
        }
        results
    }

    /// `weir env register NAME FILE --config CONFIG --wait`: the environments it answers.
    pub(crate) fn env_register(&self, name: &str, file: &str, config: &str) -> Value {
        self.json(&["env", "register", name, file, "--config", config, "--wait"])
    }

    /// `weir explain TASK`: its lines.
    pub(crate) fn explain(&self, task: &str) -> Vec<String> {
        let explanation = self.json(&["explain", task]);
        let lines = explanation["explanation"].as_array();
        let lines = lines.unwrap_or_else(|| panic!("no explanation: {explanation}"));
        lines
            .iter()
            .map(|l| l.as_str().unwrap().to_string())
            .collect()
    }

    /// Poll `weir status` until `managers` managers are registered.
    pub(crate) fn await_managers(&self, managers: usize) -> Value {
        self.await_status(|s| {
            s["managers"]
                .as_array()
                .is_some_and(|m| m.len() == managers)
        })
    }

    /// Poll `weir managers units MANAGER` until one of its units is `ready`; returns the unit.
    /// A manager not registered yet is waited for.
    pub(crate) fn await_unit(&self, manager: &str, ready: impl Fn(&Value) -> bool) -> Value {
        let deadline = Deadline::start(format!("a ready unit of manager {manager}"));
        loop {
            let view = self.json(&["managers", "units", manager]);
            if view.get("code").is_some_and(|code| code == "not-found") {
                deadline.pause(&view);
                continue;
            }
            let units = field(&view, "units").as_array();
            let units = units.unwrap_or_else(|| panic!("`units` is not an array: {view}"));
            if let Some(unit) = units.iter().find(|u| ready(u)) {
                return unit.clone();
            }
            deadline.pause(&view);
        }
    }

    /// Poll `weir status` until `ready` holds for it.
    #[track_caller]
    pub(crate) fn await_status(&self, ready: impl Fn(&Value) -> bool) -> Value {
        let caller = std::panic::Location::caller();
        let deadline = Deadline::start(format!("the status awaited at {caller}"));
        loop {
            let status = self.json(&["status"]);
            if ready(&status) {
                return status;
            }
            deadline.pause(&status);
        }
    }
}

pub(crate) fn text(bytes: &[u8]) -> String {
    String::from_utf8_lossy(bytes).into_owned()
}

/// A JSON array of names (workers, environments), sorted.
pub(crate) fn sorted_names(value: &Value) -> Vec<String> {
    let mut names: Vec<String> = value
        .as_array()
        .unwrap_or_else(|| panic!("not an array: {value}"))
        .iter()
        .map(|v| {
            v.as_str()
                .unwrap_or_else(|| panic!("not a name: {v}"))
                .to_string()
        })
        .collect();
    names.sort();
    names
}

/// `value[name]`, which must be there (it may be `null`): a field the output no longer has
/// fails the test, naming it, instead of reading as `null` or 0.
#[track_caller]
pub(crate) fn field<'a>(value: &'a Value, name: &str) -> &'a Value {
    value
        .get(name)
        .unwrap_or_else(|| panic!("no field `{name}` in {value}"))
}

/// `value[name]`, a count: there, and a non-negative integer.
#[track_caller]
pub(crate) fn count(value: &Value, name: &str) -> u64 {
    let found = field(value, name);
    found
        .as_u64()
        .unwrap_or_else(|| panic!("`{name}` is not a count ({found}) in {value}"))
}

/// The registered workers in a status.
#[track_caller]
pub(crate) fn workers(status: &Value) -> usize {
    let workers = field(status, "workers");
    workers
        .as_array()
        .unwrap_or_else(|| panic!("`workers` is not an array in {status}"))
        .len()
}

/// The manager `id` in a status, if it is registered.
#[track_caller]
pub(crate) fn manager<'a>(status: &'a Value, id: &str) -> Option<&'a Value> {
    let managers = field(status, "managers");
    let managers = managers.as_array();
    let managers = managers.unwrap_or_else(|| panic!("`managers` is not an array in {status}"));
    managers.iter().find(|m| field(m, "id") == id)
}

/// The manager's live workers (0 if it is not registered; a registered one must say).
#[track_caller]
pub(crate) fn live(status: &Value, id: &str) -> u64 {
    manager(status, id).map_or(0, |m| count(m, "live"))
}

/// The manager's live and starting workers (0 if it is not registered; a registered one must
/// say both).
#[track_caller]
pub(crate) fn current(status: &Value, id: &str) -> u64 {
    manager(status, id).map_or(0, |m| count(m, "live") + count(m, "starting"))
}

/// How long a test polls for a condition before it fails: `WEIR_TEST_DEADLINE_SECS`, else
/// 120 s. Generous: it only turns a hang into a failure that says what it last saw;
/// correctness never depends on it.
pub(crate) fn deadline() -> Duration {
    let secs = std::env::var("WEIR_TEST_DEADLINE_SECS").ok();
    let secs = secs.map(|s| {
        s.parse()
            .unwrap_or_else(|e| panic!("WEIR_TEST_DEADLINE_SECS={s}: {e}"))
    });
    Duration::from_secs(secs.unwrap_or(120))
}

/// The bound of one polling loop: [`Deadline::pause`] between two looks, which fails the test,
/// naming what it awaited and what it last saw, once [`deadline`] has passed.
pub(crate) struct Deadline {
    what: String,
    started: Instant,
    bound: Duration,
}

impl Deadline {
    /// Awaiting `what`, from now, for [`deadline`].
    pub(crate) fn start(what: impl Into<String>) -> Deadline {
        Deadline::within(what, deadline())
    }

    /// Awaiting `what`, from now, for `bound`.
    pub(crate) fn within(what: impl Into<String>, bound: Duration) -> Deadline {
        Deadline {
            what: what.into(),
            started: Instant::now(),
            bound,
        }
    }

    /// Between two polls: panics past the deadline with what was `seen` last; else waits a
    /// little, which keeps the poller from starving the cluster it watches on a 2-core machine.
    #[track_caller]
    pub(crate) fn pause(&self, seen: impl Display) {
        assert!(
            self.started.elapsed() < self.bound,
            "still waiting for {} after {:?} (WEIR_TEST_DEADLINE_SECS); last seen: {seen}",
            self.what,
            self.bound
        );
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// GET a URL on loopback (plain HTTP/1.0), returning the body.
pub(crate) fn http_get(url: &str) -> String {
    let rest = url.strip_prefix("http://").unwrap();
    let (host, path) = rest.split_once('/').unwrap();
    let response = http_request(host, &format!("/{path}"), host);
    let (head, body) = response.split_once("\r\n\r\n").unwrap();
    assert!(head.starts_with("HTTP/1.0 200"), "{head}");
    body.to_string()
}

/// `GET path` from `address` (HOST:PORT) naming `host` in its Host header: the whole response,
/// status line first, whatever the status.
pub(crate) fn http_request(address: &str, path: &str, host: &str) -> String {
    use std::io::{Read, Write};
    let mut stream = std::net::TcpStream::connect(address).unwrap();
    write!(stream, "GET {path} HTTP/1.0\r\nHost: {host}\r\n\r\n").unwrap();
    let mut response = String::new();
    stream.read_to_string(&mut response).unwrap();
    response
}

/// Each live process of this machine: (pid, parent pid, command line). From /proc.
fn processes() -> Vec<(u32, u32, String)> {
    let mut found = Vec::new();
    for entry in std::fs::read_dir("/proc").unwrap().flatten() {
        let Ok(pid) = entry.file_name().to_string_lossy().parse::<u32>() else {
            continue;
        };
        let Ok(stat) = std::fs::read_to_string(entry.path().join("stat")) else {
            continue;
        };
        // pid (comm) state ppid ...: comm may hold spaces, so read after the last ')'.
        let after = &stat[stat.rfind(')').unwrap_or(0) + 1..];
        let mut fields = after.split_whitespace();
        if fields.next() == Some("Z") {
            continue; // a zombie: dead, only not reaped yet
        }
        let ppid = fields.next().and_then(|p| p.parse().ok()).unwrap_or(0);
        let cmdline = std::fs::read(entry.path().join("cmdline")).unwrap_or_default();
        found.push((pid, ppid, String::from_utf8_lossy(&cmdline).into_owned()));
    }
    found
}

/// Live processes whose parent is `pid`.
pub(crate) fn children_of(pid: u32) -> Vec<u32> {
    processes()
        .into_iter()
        .filter(|(_, ppid, _)| *ppid == pid)
        .map(|(child, _, _)| child)
        .collect()
}

/// Live processes whose command line contains `marker`.
pub(crate) fn processes_with(marker: &str) -> Vec<u32> {
    processes()
        .into_iter()
        .filter(|(_, _, cmdline)| cmdline.contains(marker))
        .map(|(pid, _, _)| pid)
        .collect()
}

/// `kill SIGNAL PID` (e.g. "-9", "-STOP"); it must be there.
pub(crate) fn signal(pid: u32, signal: &str) {
    assert!(try_signal(pid, signal), "kill {signal} {pid}");
}

/// `kill SIGNAL PID`, whether or not it is still there; says whether it was.
pub(crate) fn try_signal(pid: u32, signal: &str) -> bool {
    Command::new("kill")
        .args([signal, &pid.to_string()])
        .stderr(Stdio::null())
        .status()
        .is_ok_and(|s| s.success())
}

/// xorshift64*: a small seeded generator, so a run (chaos, the network relay's draws) can be
/// replayed from its seed.
pub(crate) struct Rng(pub u64);

impl Rng {
    pub(crate) fn next(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_f491_4f6c_dd1d)
    }

    /// Uniform in `0..n`.
    pub(crate) fn below(&mut self, n: u64) -> u64 {
        self.next() % n
    }

    /// Uniform in [0, 1).
    pub(crate) fn unit(&mut self) -> f64 {
        (self.next() >> 11) as f64 / (1u64 << 53) as f64
    }
}

/// A seed from the environment variable `var` (to replay a run), or from the clock.
pub(crate) fn seed(var: &str) -> u64 {
    std::env::var(var)
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or_else(|| {
            std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .unwrap()
                .as_nanos() as u64
                | 1
        })
}
