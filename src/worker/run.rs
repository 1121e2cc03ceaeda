//! Running one task: a process or a sandboxed component.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use tokio::io::{AsyncRead, AsyncReadExt, AsyncWriteExt};
use tokio::sync::RwLock;

use super::Group;
use crate::plugin::{Limits, Loaded, PluginError, PluginHost, TaskPlugin, World};
use crate::proto::{Assignment, ComponentHash, Outcome, TaskKind, WorkerRegistration};
// The controls live in a leaf module both this one and `functions` use; named here too, where
// the session takes them from.
pub(super) use super::cancel::{Cancel, canceled};

/// How a command ended.
enum Ended {
    /// Its exit code (`None`: a signal ended it), or why it could not be waited for.
    Exited(std::io::Result<Option<i32>>),
    TimedOut(Duration),
    Canceled,
}

/// Why a task component the scheduler sent cannot run here: every task of it fails with this.
#[derive(Debug, thiserror::Error)]
enum Unusable {
    #[error(transparent)]
    Plugin(#[from] PluginError),
    /// Loading it panicked.
    #[error(transparent)]
    Loading(#[from] tokio::task::JoinError),
}

/// A task component and the deadline its instances were made with.
type PoolKey = (ComponentHash, Option<Duration>);

pub(super) struct Runner {
    host: Arc<PluginHost>,
    output_limit: usize,
    info: WorkerRegistration,
    /// `setup` values of the environments this worker matches.
    values: super::env::SharedValues,
    components: RwLock<HashMap<ComponentHash, Result<Loaded, Unusable>>>,
    /// Idle task instances per component and deadline (an instance's limits are fixed when it
    /// is made: a task must not inherit another one's timeout), reused across tasks.
    pools: Mutex<HashMap<PoolKey, Vec<TaskPlugin>>>,
    /// Idle function runners.
    functions: super::functions::Runners,
    /// The worker's clock (the lease's times are on it).
    clock: crate::clock::Millis,
    /// The worker's lease (a wasm run stops when it runs out or lapses).
    lease: Arc<super::guard::Lease>,
}

impl Runner {
    pub(super) fn new(
        host: Arc<PluginHost>,
        output_limit: usize,
        max_tasks_per_runner: u32,
        info: WorkerRegistration,
        values: super::env::SharedValues,
        clock: crate::clock::Millis,
        lease: Arc<super::guard::Lease>,
    ) -> Runner {
        Runner {
            host,
            output_limit,
            functions: super::functions::Runners::new(max_tasks_per_runner, info.name.clone()),
            info,
            values,
            components: RwLock::default(),
            pools: Mutex::default(),
            clock,
            lease,
        }
    }

    /// The `setup` values of the environments a task asked for.
    fn environment_values(&self, environments: &[String]) -> Vec<(String, Vec<(String, String)>)> {
        let Ok(values) = self.values.read() else {
            return Vec::new();
        };
        environments
            .iter()
            .filter_map(|name| values.get(name).map(|v| (name.clone(), v.clone())))
            .collect()
    }

    /// Compile (or take from the cache) a component the scheduler sent.
    pub(super) async fn add_component(&self, hash: ComponentHash, bytes: std::sync::Arc<[u8]>) {
        let host = self.host.clone();
        let loaded = tokio::task::spawn_blocking(move || {
            host.load(
                &format!("task {}", &hex::encode(hash)[..12]),
                &bytes,
                Some(World::Task),
            )
            .map_err(Unusable::from)
        })
        .await
        .unwrap_or_else(|panicked| Err(panicked.into()));
        if let Err(error) = &loaded {
            tracing::warn!(%error, "cannot load a task component");
        }
        self.components.write().await.insert(hash, loaded);
    }

    /// Components of forgotten jobs: drop them, their idle instances and the host's compiled copy
    /// (the disk cache keeps it, should a later task bring it again).
    pub(super) async fn forget_components(&self, hashes: &[ComponentHash]) {
        let mut components = self.components.write().await;
        for hash in hashes {
            if let Some(Ok(loaded)) = components.remove(hash) {
                self.host.unload(&loaded.sha256);
            }
        }
        if let Ok(mut pools) = self.pools.lock() {
            pools.retain(|(hash, _), _| !hashes.contains(hash));
        }
    }

    pub(super) async fn run(
        &self,
        group: &Group,
        assignment: Assignment,
        cancel: &Cancel,
    ) -> Outcome {
        if cancel.is_set() {
            return canceled();
        }
        let input = assignment
            .input
            .as_deref()
            .unwrap_or(&group.spec.input)
            .to_vec();
        let timeout =
            (group.spec.timeout_ms > 0).then(|| Duration::from_millis(group.spec.timeout_ms));
        let environments = self.environment_values(&group.spec.environments);
        match &group.spec.kind {
            TaskKind::Command { argv, env } => {
                let mut extra = env.clone();
                extra.push(("WEIR_TASK_ID".into(), assignment.task.to_string()));
                extra.push(("WEIR_TASK_INDEX".into(), assignment.index.to_string()));
                extra.push(("WEIR_JOB_ID".into(), group.job.to_string()));
                extra.push(("WEIR_WORKER_NAME".into(), self.info.name.clone()));
                for (name, values) in &environments {
                    extra.extend(
                        values
                            .iter()
                            .map(|(key, value)| (super::env::variable(name, key), value.clone())),
                    );
                }
                self.command(argv, &extra, input, timeout, cancel).await
            }
            TaskKind::Wasm { component } => {
                self.wasm(*component, input, timeout, environments, cancel)
                    .await
            }
            TaskKind::Function { runner, function } => {
                self.functions
                    .run(runner, function, input, timeout, cancel)
                    .await
            }
        }
    }

    async fn command(
        &self,
        argv: &[String],
        env: &[(String, String)],
        input: Vec<u8>,
        timeout: Option<Duration>,
        cancel: &Cancel,
    ) -> Outcome {
        let Some((program, args)) = argv.split_first() else {
            return Outcome::Error {
                message: "empty argv".into(),
            };
        };
        let command = super::spawn::Command {
            program,
            args,
            env,
            stdin: !input.is_empty(),
        };
        let mut child = match super::spawn::spawn(&command) {
            Ok(child) => child,
            Err(error) if super::guard::is_gone(&error) => {
                // Its tasks would no longer die with it: stop like on SIGTERM (this run, ended
                // by the worker's own stop, is requeued without a retry; a manager starts a new
                // worker with a new guard).
                tracing::error!(
                    "the worker's guard process is gone (killed?): its tasks would outlive it; stopping this worker"
                );
                // This process gets the signal its handler already waits for.
                let _ = rustix::process::kill_process(
                    rustix::process::getpid(),
                    rustix::process::Signal::TERM,
                );
                return Outcome::Exited {
                    code: None,
                    stdout: Vec::new(),
                    stderr: b"not started: the worker's guard process is gone".to_vec(),
                };
            }
            Err(error) => {
                return Outcome::Error {
                    message: format!("cannot start `{program}`: {error}"),
                };
            }
        };
        // Every process of the task dies with it: when this is dropped (the task ended, timed
        // out, or was canceled and its future dropped).
        let group = super::guard::ProcessGroup::new(Some(child.id()));
        if let Some(mut stdin) = child.stdin.take() {
            tokio::spawn(async move {
                let _ = stdin.write_all(&input).await;
            });
        }
        // Its output is read in this task, beside the wait (no task of its own per pipe).
        let limit = self.output_limit;
        let (stdout, stderr) = (child.stdout.take(), child.stderr.take());
        let (mut out, mut err) = (Vec::new(), Vec::new());
        let ended = {
            let output = async {
                tokio::join!(
                    read_capped(stdout, limit, &mut out),
                    read_capped(stderr, limit, &mut err)
                )
            };
            let mut output = std::pin::pin!(output);
            let mut read = false;
            let ended = {
                let waited = async {
                    match timeout {
                        Some(limit) => match tokio::time::timeout(limit, child.wait()).await {
                            Ok(status) => Ended::Exited(status),
                            Err(_) => Ended::TimedOut(limit),
                        },
                        None => Ended::Exited(child.wait().await),
                    }
                };
                let mut waited = std::pin::pin!(waited);
                loop {
                    tokio::select! {
                        _ = &mut output, if !read => read = true,
                        ended = &mut waited => break ended,
                        () = cancel.notified() => break Ended::Canceled,
                    }
                }
            };
            // What the task left running goes with it: on a timeout or cancel everything, after
            // a normal exit what it left in the background (so the pipes close and its output
            // can be read to the end).
            drop(group);
            if matches!(ended, Ended::Exited(_)) && !read {
                // A process that left the group (`setsid`) may still hold a pipe: what it wrote
                // within the grace is kept, and the run ends.
                if tokio::time::timeout(OUTPUT_GRACE, &mut output)
                    .await
                    .is_err()
                {
                    tracing::warn!(
                        program,
                        "a process the task started outside its group still holds its output; not waiting for it"
                    );
                }
            }
            ended
        };
        let status = match ended {
            Ended::Exited(status) => status,
            Ended::TimedOut(limit) => {
                let _ = child.kill().await;
                return Outcome::Error {
                    message: format!("timed out after {limit:?}"),
                };
            }
            Ended::Canceled => {
                let _ = child.kill().await;
                return canceled();
            }
        };
        let status = match status {
            Ok(status) => status,
            Err(error) => {
                return Outcome::Error {
                    message: format!("waiting for `{program}`: {error}"),
                };
            }
        };
        Outcome::Exited {
            code: status,
            stdout: out,
            stderr: err,
        }
    }

    async fn wasm(
        &self,
        hash: ComponentHash,
        input: Vec<u8>,
        timeout: Option<Duration>,
        environments: Vec<(String, Vec<(String, String)>)>,
        cancel: &Cancel,
    ) -> Outcome {
        let loaded = match self.components.read().await.get(&hash) {
            Some(Ok(loaded)) => loaded.clone(),
            Some(Err(error)) => {
                return Outcome::Error {
                    message: error.to_string(),
                };
            }
            None => {
                return Outcome::Error {
                    message: "the task's component never arrived".into(),
                };
            }
        };
        let pooled = self
            .pools
            .lock()
            .ok()
            .and_then(|mut pools| pools.get_mut(&(hash, timeout)).and_then(Vec::pop));
        let plugin = match pooled {
            Some(plugin) => plugin,
            None => {
                let limits = Limits {
                    deadline: timeout.unwrap_or(Duration::from_secs(24 * 3600)),
                    memory_bytes: 512 << 20,
                    ..Limits::default()
                };
                match self.host.task(&loaded, limits) {
                    Ok(plugin) => plugin,
                    Err(error) => {
                        return Outcome::Error {
                            message: error.to_string(),
                        };
                    }
                }
            }
        };
        // Stopped on cancel, and when the lease lapses since it was handed over: wasm runs in
        // this process, where the guard cannot kill it, and a worker between sessions (its
        // scheduler unreachable) has no session to give it up.
        let flag = cancel.flag();
        let lapses = cancel.lapses;
        let clock = self.clock.clone();
        let lease = self.lease.clone();
        let stop: crate::plugin::StopCheck = Arc::new(move || {
            flag.load(std::sync::atomic::Ordering::SeqCst) || lease.lost_since(lapses, clock.now())
        });
        let result = tokio::task::spawn_blocking(move || {
            let mut plugin = plugin;
            let output = plugin.run(&input, environments, stop);
            (plugin, output)
        })
        .await;
        match result {
            Ok((plugin, output)) => {
                if let Ok(mut pools) = self.pools.lock() {
                    pools.entry((hash, timeout)).or_default().push(plugin);
                }
                match output {
                    Ok(output) => Outcome::Returned { output },
                    Err(crate::plugin::PluginError::Canceled { .. }) => canceled(),
                    Err(error) => Outcome::Error {
                        message: error.to_string(),
                    },
                }
            }
            Err(error) => Outcome::Error {
                message: format!("task thread: {error}"),
            },
        }
    }
}

/// How long a command's output is read on after it exited and its group was killed: only a
/// process that left the group (`setsid`) can hold a pipe open that long.
const OUTPUT_GRACE: Duration = Duration::from_secs(1);

/// Read everything into `kept`, keep the first `limit` bytes (what was read stays there if
/// this is dropped before the end).
async fn read_capped(stream: Option<impl AsyncRead + Unpin>, limit: usize, kept: &mut Vec<u8>) {
    let Some(mut stream) = stream else {
        return;
    };
    // Read through a buffer in the run's own future: nothing is allocated for a command that
    // writes nothing (most short ones).
    let mut buffer = [0u8; 8 << 10];
    loop {
        match stream.read(&mut buffer).await {
            Ok(0) | Err(_) => return,
            Ok(n) => {
                // Past the limit it is read on to the end, so the command never blocks on a
                // full pipe.
                let room = limit.saturating_sub(kept.len());
                kept.extend_from_slice(&buffer[..n.min(room)]);
            }
        }
    }
}
