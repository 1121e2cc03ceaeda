//! How the manager starts its worker processes: one seam ([`Spawner`]), so a simulated cluster
//! can start its own workers; [`ProcessSpawner`] starts real processes. (The command and Slurm
//! backends run `sh -c`, `sbatch`, `squeue` and `scancel` directly, not through it.)

use std::ffi::OsString;
use std::fmt;
use std::future::Future;
use std::io;
use std::path::Path;
use std::pin::Pin;
use std::process::ExitStatus;

/// Seam: start a worker process (program, arguments, environment) and get a handle to it.
pub trait Spawner: Send + Sync + fmt::Debug {
    /// Start `program` with `args` and `env` added to this process's environment. The process
    /// is killed when its handle is dropped, and when this manager dies.
    fn spawn(
        &self,
        program: &Path,
        args: &[OsString],
        env: &[(String, String)],
    ) -> io::Result<Box<dyn Process>>;
}

/// A started worker process.
pub trait Process: Send {
    /// Its exit status if it exited (reaped), `None` while it runs.
    fn try_wait(&mut self) -> io::Result<Option<ExitStatus>>;
    /// Wait for it to exit.
    fn wait(&mut self) -> Pin<Box<dyn Future<Output = io::Result<ExitStatus>> + Send + '_>>;
    /// Ask it to stop (SIGTERM: a worker closes its connection, so the scheduler knows at once).
    fn terminate(&mut self);
}

/// Real processes (tokio's), each told to stop (SIGTERM) when this manager dies.
#[derive(Clone, Copy, Debug, Default)]
pub struct ProcessSpawner;

impl Spawner for ProcessSpawner {
    fn spawn(
        &self,
        program: &Path,
        args: &[OsString],
        env: &[(String, String)],
    ) -> io::Result<Box<dyn Process>> {
        let mut command = tokio::process::Command::new(program);
        command
            .args(args)
            .envs(env.iter().cloned())
            .kill_on_drop(true);
        #[cfg(target_os = "linux")]
        // SAFETY: prctl is async-signal-safe; it only asks the kernel to SIGTERM the worker when
        // this manager dies, so no worker outlives its manager.
        unsafe {
            command.pre_exec(|| {
                use rustix::process::{Signal, set_parent_process_death_signal};
                Ok(set_parent_process_death_signal(Some(Signal::TERM))?)
            });
        }
        Ok(Box::new(command.spawn()?))
    }
}

impl Process for tokio::process::Child {
    fn try_wait(&mut self) -> io::Result<Option<ExitStatus>> {
        tokio::process::Child::try_wait(self)
    }

    fn wait(&mut self) -> Pin<Box<dyn Future<Output = io::Result<ExitStatus>> + Send + '_>> {
        Box::pin(tokio::process::Child::wait(self))
    }

    fn terminate(&mut self) {
        let pid = self.id().and_then(|pid| i32::try_from(pid).ok());
        match pid.and_then(rustix::process::Pid::from_raw) {
            Some(pid) => {
                let _ = rustix::process::kill_process(pid, rustix::process::Signal::TERM);
            }
            None => {
                let _ = self.start_kill();
            }
        }
    }
}

#[cfg(test)]
#[path = "spawn_tests.rs"]
mod tests;
