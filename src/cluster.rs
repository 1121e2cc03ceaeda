//! A cluster of real processes on loopback: the `scheduler`, `worker` and `worker-manager`
//! executables started as child processes, each pointed at one access file in one directory,
//! and killed when the [`Cluster`] is dropped. `weir local`, `weir bench` and the end-to-end
//! tests start their clusters with it.

use std::ffi::{OsStr, OsString};
use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};

use crate::client::Client;
use crate::net::{AccessFile, NetError};

#[derive(Debug, thiserror::Error)]
pub enum LaunchError {
    #[error("{} not found: build every executable first (`cargo build --bins`)", .0.display())]
    Missing(PathBuf),
    #[error("cannot find this executable: {0}")]
    CurrentExe(std::io::Error),
    #[error("cannot start {what}: {error}")]
    Spawn { what: String, error: std::io::Error },
    #[error("the scheduler did not start (it said {0:?})")]
    NotListening(String),
    #[error("reading the scheduler's first lines: {0}")]
    Read(std::io::Error),
}

/// Where the executables are, the directory the access file goes in, and the environment every
/// process gets.
#[derive(Clone, Debug)]
pub struct Launcher {
    bin: PathBuf,
    dir: PathBuf,
    env: Vec<(OsString, OsString)>,
}

impl Launcher {
    /// Executables in `bin`, the access file in `dir`.
    pub fn new(bin: impl Into<PathBuf>, dir: impl Into<PathBuf>) -> Launcher {
        Launcher {
            bin: bin.into(),
            dir: dir.into(),
            env: Vec::new(),
        }
    }

    /// The executables beside the one running (as `cargo build --bins` or an install leaves them).
    pub fn beside_current_exe(dir: impl Into<PathBuf>) -> Result<Launcher, LaunchError> {
        let exe = std::env::current_exe().map_err(LaunchError::CurrentExe)?;
        let bin = exe.parent().unwrap_or(Path::new("."));
        Ok(Launcher::new(bin, dir))
    }

    /// Set `key=value` in the environment of every process started from here on.
    pub fn env(mut self, key: impl AsRef<OsStr>, value: impl AsRef<OsStr>) -> Launcher {
        self.env
            .push((key.as_ref().to_owned(), value.as_ref().to_owned()));
        self
    }

    pub fn access_file(&self) -> PathBuf {
        self.dir.join("access.json")
    }

    /// `executable --access-file FILE`, with the environment; add its arguments and spawn it.
    pub fn command(&self, executable: &str) -> Result<Command, LaunchError> {
        let path = self.bin.join(executable);
        if !path.exists() {
            return Err(LaunchError::Missing(path));
        }
        let mut command = Command::new(path);
        command
            .arg("--access-file")
            .arg(self.access_file())
            .envs(self.env.iter().map(|(k, v)| (k, v)));
        Ok(command)
    }

    /// Start a scheduler listening on a free loopback port; returns once it says where it
    /// listens. This blocks on its first lines of output: from async code, call it in
    /// `tokio::task::block_in_place`.
    pub fn start<S: AsRef<OsStr>>(self, scheduler_args: &[S]) -> Result<Cluster, LaunchError> {
        let scheduler = Scheduler::start(&self, scheduler_args)?;
        Ok(Cluster {
            scheduler: scheduler.child,
            address: scheduler.address,
            metrics: scheduler.metrics,
            dashboard: scheduler.dashboard,
            workers: Vec::new(),
            launcher: self,
        })
    }
}

/// A scheduler process and what its first lines said.
struct Scheduler {
    child: Child,
    address: String,
    metrics: Option<String>,
    dashboard: Option<String>,
}

impl Scheduler {
    fn start<S: AsRef<OsStr>>(launcher: &Launcher, args: &[S]) -> Result<Scheduler, LaunchError> {
        let mut child = launcher
            .command("scheduler")?
            .args(["--listen", "quic://127.0.0.1:0"])
            .args(args)
            .stdout(Stdio::piped())
            .spawn()
            .map_err(|error| LaunchError::Spawn {
                what: "the scheduler".into(),
                error,
            })?;
        // From here on an error must not leave the process behind.
        let said = Scheduler::read_lines(&mut child, args);
        match said {
            Ok((address, metrics, dashboard)) => Ok(Scheduler {
                child,
                address,
                metrics,
                dashboard,
            }),
            Err(error) => {
                let _ = child.kill();
                let _ = child.wait();
                Err(error)
            }
        }
    }

    /// `scheduler listening on ADDRESS`, then with `--metrics`, `metrics on URL`, then with
    /// `--dashboard`, `dashboard on URL`.
    fn read_lines<S: AsRef<OsStr>>(
        child: &mut Child,
        args: &[S],
    ) -> Result<(String, Option<String>, Option<String>), LaunchError> {
        let stdout = child.stdout.take().ok_or_else(|| {
            LaunchError::Read(std::io::Error::other("the scheduler has no stdout"))
        })?;
        let mut stdout = BufReader::new(stdout);
        let mut line = || -> Result<String, LaunchError> {
            let mut line = String::new();
            stdout.read_line(&mut line).map_err(LaunchError::Read)?;
            Ok(line.trim_end().to_string())
        };
        let first = line()?;
        let address = first
            .strip_prefix("scheduler listening on ")
            .ok_or_else(|| LaunchError::NotListening(first.clone()))?
            .to_string();
        // With `flag`, the next line is `PREFIX URL`.
        let mut url = |flag: &str, prefix: &str| -> Result<Option<String>, LaunchError> {
            if !args.iter().any(|a| a.as_ref() == flag) {
                return Ok(None);
            }
            let said = line()?;
            match said.strip_prefix(prefix) {
                Some(url) => Ok(Some(url.to_string())),
                None => Err(LaunchError::NotListening(said)),
            }
        };
        let metrics = url("--metrics", "metrics on ")?;
        let dashboard = url("--dashboard", "dashboard on ")?;
        Ok((address, metrics, dashboard))
    }
}

/// A scheduler and the workers and worker managers started beside it; every process is killed
/// (and reaped) when this is dropped.
pub struct Cluster {
    pub scheduler: Child,
    /// Where the scheduler listens (`quic://127.0.0.1:PORT`).
    pub address: String,
    /// `http://…/metrics`, when started with `--metrics`.
    pub metrics: Option<String>,
    /// The dashboard's URL, when started with `--dashboard`.
    pub dashboard: Option<String>,
    /// Workers and worker managers, in the order they were started.
    pub workers: Vec<Child>,
    launcher: Launcher,
}

impl Cluster {
    pub fn launcher(&self) -> &Launcher {
        &self.launcher
    }

    pub fn access_file(&self) -> PathBuf {
        self.launcher.access_file()
    }

    /// A worker process named `name`, not kept by the cluster (see [`Cluster::worker`]).
    pub fn spawn_worker<S: AsRef<OsStr>>(
        &self,
        name: &str,
        args: &[S],
    ) -> Result<Child, LaunchError> {
        let mut command = self.launcher.command("worker")?;
        command.args(["--name", name]).args(args);
        spawn(command, "a worker")
    }

    /// Start a worker; returns its index in [`Cluster::workers`].
    pub fn worker<S: AsRef<OsStr>>(
        &mut self,
        name: &str,
        args: &[S],
    ) -> Result<usize, LaunchError> {
        let child = self.spawn_worker(name, args)?;
        Ok(self.keep(child))
    }

    /// Start a worker manager (it starts the `worker` executable beside it); returns its index in
    /// [`Cluster::workers`].
    pub fn manager<S: AsRef<OsStr>>(&mut self, args: &[S]) -> Result<usize, LaunchError> {
        let mut command = self.launcher.command("worker-manager")?;
        command.args(args);
        let child = spawn(command, "a worker manager")?;
        Ok(self.keep(child))
    }

    /// Keep a process started otherwise (e.g. from [`Launcher::command`]) with the cluster's;
    /// returns its index in [`Cluster::workers`].
    pub fn keep(&mut self, child: Child) -> usize {
        self.workers.push(child);
        self.workers.len() - 1
    }

    /// `kill -9` the scheduler and wait for it (its access file stays).
    pub fn kill_scheduler(&mut self) {
        let _ = self.scheduler.kill();
        let _ = self.scheduler.wait();
    }

    /// A new scheduler with the same access file, after [`Cluster::kill_scheduler`].
    pub fn start_scheduler<S: AsRef<OsStr>>(&mut self, args: &[S]) -> Result<(), LaunchError> {
        let scheduler = Scheduler::start(&self.launcher, args)?;
        self.scheduler = scheduler.child;
        self.address = scheduler.address;
        self.metrics = scheduler.metrics;
        self.dashboard = scheduler.dashboard;
        Ok(())
    }

    /// `kill -9` the scheduler and start a new one with the same access file.
    pub fn restart_scheduler<S: AsRef<OsStr>>(&mut self, args: &[S]) -> Result<(), LaunchError> {
        self.kill_scheduler();
        self.start_scheduler(args)
    }

    /// A client of the scheduler, connected through the access file.
    pub async fn client(&self) -> Result<Client, NetError> {
        Client::connect(&AccessFile::read(&self.access_file())?).await
    }
}

impl Drop for Cluster {
    fn drop(&mut self) {
        for worker in &mut self.workers {
            let _ = worker.kill();
            let _ = worker.wait();
        }
        self.kill_scheduler();
    }
}

fn spawn(mut command: Command, what: &str) -> Result<Child, LaunchError> {
    command.spawn().map_err(|error| LaunchError::Spawn {
        what: what.into(),
        error,
    })
}
