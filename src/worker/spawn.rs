//! Starting a command task's process at `posix_spawn`'s cost, listed with the guard before its
//! program runs.
//!
//! std and tokio start a command with `posix_spawn` (a `vfork`-class clone that borrows the
//! worker's memory until `exec`), unless a `pre_exec` hook must run in the child: then they
//! `fork`, which copies the page tables of the whole worker and makes its next writes fault
//! copy-on-write. That halved the rate of short commands (`weir bench --commands-only`). A task
//! must be listed with the guard before its program runs (`guard.rs`: so no task escapes it, and
//! one that starts after the lease ran out is killed at once), so this does what glibc's
//! `posix_spawn` does, plus that one write: `clone(CLONE_VM | CLONE_VFORK)` onto a stack of its
//! own, and in the child only system calls on data made beforehand (no allocation, no lock, no
//! panic) up to `execve`. The parent waits on a pidfd, so no SIGCHLD handling is involved.

use std::ffi::{CString, c_char, c_int, c_void};
use std::io;
use std::os::fd::{AsFd, AsRawFd, OwnedFd, RawFd};
use std::sync::OnceLock;
use std::sync::atomic::{AtomicI32, Ordering};

use rustix::process::{Pid, PidfdFlags, Signal, WaitId, WaitIdOptions};
use tokio::io::unix::AsyncFd;
use tokio::net::unix::pipe;

use prepare::{base_environment, c_string, candidates, envp, last_of_each, task_environment};

/// The child's stack until `execve`: its frames are a few hundred bytes (a `sigaction` each).
const STACK: usize = 64 << 10;

thread_local! {
    /// Each thread's child stack, kept between spawns.
    static STACKS: std::cell::Cell<Option<Vec<u8>>> = const { std::cell::Cell::new(None) };
}

/// A command to start.
pub(super) struct Command<'a> {
    /// A path, or a name looked up in `PATH` (the task's own, else the worker's) as `execvp`
    /// does.
    pub(super) program: &'a str,
    pub(super) args: &'a [String],
    /// Set on top of the worker's environment.
    pub(super) env: &'a [(String, String)],
    /// A pipe to its stdin (else /dev/null).
    pub(super) stdin: bool,
}

/// A started task process. Dropped before it was waited for, it is killed (SIGKILL, through its
/// pidfd: never another process that got its pid) and reaped in the background.
pub(super) struct Process {
    pid: Pid,
    /// `None` once reaped.
    pidfd: Option<AsyncFd<OwnedFd>>,
    pub(super) stdin: Option<pipe::Sender>,
    pub(super) stdout: Option<pipe::Receiver>,
    pub(super) stderr: Option<pipe::Receiver>,
}

/// The shell a file without `#!` is run with.
const SH: &std::ffi::CStr = c"/bin/sh";

/// What the child reads (made before the clone) and the one thing it writes.
struct ChildData {
    /// Where to look for the program, in order: one path, or each `PATH` entry joined with it.
    paths: Vec<CString>,
    /// NULL-terminated.
    argv: Vec<*const c_char>,
    /// `/bin/sh PATH args...`, NULL-terminated, for a file without `#!` (ENOEXEC), as `execvp`
    /// runs it: the child writes the path it found into slot 1.
    sh_argv: std::cell::UnsafeCell<Vec<*const c_char>>,
    /// NULL-terminated.
    envp: Vec<*const c_char>,
    stdio: [RawFd; 3],
    /// The errno of the step that failed; 0 while all went well (the program runs).
    error: AtomicI32,
}

/// /dev/null, opened once (close-on-exec; the child gets a `dup2` of it as stdin).
fn dev_null() -> io::Result<RawFd> {
    static NULL: OnceLock<std::fs::File> = OnceLock::new();
    if let Some(null) = NULL.get() {
        return Ok(null.as_raw_fd());
    }
    let file = std::fs::OpenOptions::new().read(true).open("/dev/null")?;
    Ok(NULL.get_or_init(|| file).as_raw_fd())
}

fn pipe_pair() -> io::Result<(OwnedFd, OwnedFd)> {
    Ok(rustix::pipe::pipe_with(rustix::pipe::PipeFlags::CLOEXEC)?)
}

/// The parent's end of a pipe, for tokio: non-blocking (the child's end, another open file
/// description, stays blocking).
fn receiver(fd: OwnedFd) -> io::Result<pipe::Receiver> {
    rustix::io::ioctl_fionbio(&fd, true)?;
    pipe::Receiver::from_owned_fd_unchecked(fd)
}

fn sender(fd: OwnedFd) -> io::Result<pipe::Sender> {
    rustix::io::ioctl_fionbio(&fd, true)?;
    pipe::Sender::from_owned_fd_unchecked(fd)
}

/// Whether this system can wait on a task's process the way [`spawn`] does: pidfds
/// (`pidfd_open`, Linux 5.3; `waitid(P_PIDFD)`, 5.4), also allowed by any seccomp profile the
/// worker runs under. Checked when the worker starts, so no task's program runs only to be
/// killed for want of them.
pub fn check_support() -> io::Result<()> {
    let unsupported = |what: &str, error: rustix::io::Errno| {
        io::Error::other(format!(
            "cannot run command tasks: {what} failed ({error}); Linux 5.4 or later is needed, \
             with pidfd_open and waitid allowed"
        ))
    };
    let own = rustix::process::pidfd_open(rustix::process::getpid(), PidfdFlags::empty())
        .map_err(|e| unsupported("pidfd_open", e))?;
    // Not a child of itself: ECHILD where P_PIDFD is known, EINVAL where it is not.
    match rustix::process::waitid(
        WaitId::PidFd(own.as_fd()),
        WaitIdOptions::EXITED | WaitIdOptions::NOHANG,
    ) {
        Err(rustix::io::Errno::CHILD) | Ok(_) => Ok(()),
        Err(error) => Err(unsupported("waitid(P_PIDFD)", error)),
    }
}

/// Start `command` in a process group of its own, listed with the guard before its program
/// runs. Fails with EPIPE if the guard is gone (`guard::is_gone`), with the `execve` error if
/// the program cannot run (ENOENT if it is nowhere). Call it within a tokio runtime.
pub(super) fn spawn(command: &Command) -> io::Result<Process> {
    let env = last_of_each(command.env);
    let paths = candidates(command.program, &env)?;
    let args: Vec<CString> = std::iter::once(command.program)
        .chain(command.args.iter().map(String::as_str))
        .map(|a| c_string(a.as_bytes()))
        .collect::<io::Result<_>>()?;
    let task_vars = task_environment(&env)?;
    // The parent's ends are made ready for tokio before the clone: nothing can fail between a
    // program that runs and the `Process` that kills it when dropped, but the pidfd.
    let (stdin_read, stdin) = match command.stdin {
        true => {
            let (read, write) = pipe_pair()?;
            (Some(read), Some(sender(write)?))
        }
        false => (None, None),
    };
    let (stdout_read, stdout_write) = pipe_pair()?;
    let stdout = receiver(stdout_read)?;
    let (stderr_read, stderr_write) = pipe_pair()?;
    let stderr = receiver(stderr_read)?;
    let data = ChildData {
        paths,
        argv: args
            .iter()
            .map(|a| a.as_ptr())
            .chain([std::ptr::null()])
            .collect(),
        envp: envp(base_environment(), &task_vars, &env),
        sh_argv: std::cell::UnsafeCell::new(
            [SH.as_ptr(), std::ptr::null()]
                .into_iter()
                .chain(args.iter().skip(1).map(|a| a.as_ptr()))
                .chain([std::ptr::null()])
                .collect(),
        ),
        stdio: [
            match &stdin_read {
                Some(read) => read.as_raw_fd(),
                None => dev_null()?,
            },
            stdout_write.as_raw_fd(),
            stderr_write.as_raw_fd(),
        ],
        error: AtomicI32::new(0),
    };
    // The child's stack: this thread's own, reused (a spawn returns before the next one on
    // this thread starts), never zeroed. It grows down from its 16-byte aligned end.
    let mut stack = STACKS.take().unwrap_or_else(|| Vec::with_capacity(STACK));
    let top = (stack.as_mut_ptr() as usize + stack.capacity()) & !15;
    // SAFETY: every signal is blocked in this thread across the clone, so no handler of the
    // worker's runs in the child (which shares this memory) before it resets them; the mask is
    // restored right after. `child` only makes system calls on `data` and its own stack, both
    // alive until the clone returns (CLONE_VFORK: after the child's `execve` or `_exit`).
    let pid = unsafe {
        let mut all: libc::sigset_t = std::mem::zeroed();
        let mut old: libc::sigset_t = std::mem::zeroed();
        libc::sigfillset(&mut all);
        libc::pthread_sigmask(libc::SIG_SETMASK, &all, &mut old);
        let pid = libc::clone(
            child,
            top as *mut c_void,
            libc::CLONE_VM | libc::CLONE_VFORK | libc::SIGCHLD,
            &data as *const ChildData as *mut c_void,
        );
        let clone_error = io::Error::last_os_error();
        libc::pthread_sigmask(libc::SIG_SETMASK, &old, std::ptr::null_mut());
        if pid == -1 {
            return Err(clone_error);
        }
        pid
    };
    STACKS.set(Some(stack));
    // The child's ends: it has its copies (or is gone).
    drop((stdin_read, stdout_write, stderr_write));
    let pid = Pid::from_raw(pid).ok_or_else(|| io::Error::other("clone gave pid 0"))?;
    // A child that will not run: off the guard's list before it is reaped (after, its id could
    // be another group's, which the guard would kill at the lease's end).
    let reap = |pid: Pid| {
        super::guard::unlist(pid.as_raw_nonzero().get());
        let _ = rustix::process::waitpid(Some(pid), rustix::process::WaitOptions::empty());
    };
    let error = data.error.load(Ordering::SeqCst);
    if error != 0 {
        // It `_exit`ed before the program: reaped at once.
        reap(pid);
        return Err(io::Error::from_raw_os_error(error));
    }
    let pidfd = match rustix::process::pidfd_open(pid, PidfdFlags::empty())
        .map_err(io::Error::from)
        .and_then(|pidfd| {
            // SAFETY: an `OwnedFd` is a valid open descriptor that stays the same until the
            // `AsyncFd` is dropped.
            unsafe { AsyncFd::register_with_interest(pidfd, tokio::io::Interest::READABLE) }
                .map_err(io::Error::from)
        }) {
        Ok(pidfd) => pidfd,
        Err(error) => {
            // Not ours to run without a way to wait for it. Its pid is safe to signal: it is
            // our child, not reaped yet.
            let _ = rustix::process::kill_process(pid, Signal::KILL);
            reap(pid);
            return Err(error);
        }
    };
    Ok(Process {
        pid,
        pidfd: Some(pidfd),
        stdin,
        stdout: Some(stdout),
        stderr: Some(stderr),
    })
}

/// The child, from the clone to `execve`. Async-signal-safe: system calls only, on memory the
/// parent made beforehand; nothing allocates, locks or panics. On a failure it stores the errno
/// for the parent and exits with 127.
extern "C" fn child(data: *mut c_void) -> c_int {
    // SAFETY: `data` is the parent's `ChildData`, alive until this child execs or exits.
    let data = unsafe { &*(data as *const ChildData) };
    let fail = |error: c_int| -> c_int {
        data.error.store(error.max(1), Ordering::SeqCst);
        // SAFETY: leaves at once, running nothing of the parent's.
        unsafe { libc::_exit(127) }
    };
    let errno = || {
        io::Error::last_os_error()
            .raw_os_error()
            .unwrap_or(libc::EINVAL)
    };
    // SAFETY: system calls on the child's own state (dispositions are its own: no
    // CLONE_SIGHAND) and on `data`.
    unsafe {
        // The worker's handlers must not run here (this memory is the worker's): back to the
        // default before signals are unblocked. Ignored signals stay ignored, as with std.
        for signal in 1..=libc::SIGRTMAX() {
            let mut action: libc::sigaction = std::mem::zeroed();
            if libc::sigaction(signal, std::ptr::null(), &mut action) == 0
                && action.sa_sigaction != libc::SIG_DFL
                && action.sa_sigaction != libc::SIG_IGN
            {
                let mut default: libc::sigaction = std::mem::zeroed();
                default.sa_sigaction = libc::SIG_DFL;
                libc::sigaction(signal, &default, std::ptr::null_mut());
            }
        }
        if libc::setpgid(0, 0) != 0 {
            return fail(errno());
        }
        // A guard that is gone must fail the spawn (EPIPE), not kill this child.
        libc::signal(libc::SIGPIPE, libc::SIG_IGN);
        if !super::guard::list_this_process() {
            return fail(libc::EPIPE);
        }
        for (fd, target) in data.stdio.iter().zip(0..) {
            if libc::dup2(*fd, target) == -1 {
                return fail(errno());
            }
        }
        // The program starts with SIGPIPE's default and no signal blocked, as std gives it.
        libc::signal(libc::SIGPIPE, libc::SIG_DFL);
        let mut none: libc::sigset_t = std::mem::zeroed();
        libc::sigemptyset(&mut none);
        libc::pthread_sigmask(libc::SIG_SETMASK, &none, std::ptr::null_mut());
        // `execvp`'s search: go on past a directory that lacks it; report EACCES if one had
        // it but could not run it.
        let mut error = libc::ENOENT;
        let mut denied = false;
        for path in &data.paths {
            libc::execve(path.as_ptr(), data.argv.as_ptr(), data.envp.as_ptr());
            error = errno();
            if error == libc::ENOEXEC {
                // A script without `#!`: the shell runs it, as `execvp` does. The parent is
                // suspended until this execs or exits, so nothing else reads the slot.
                let sh_argv = &mut *data.sh_argv.get();
                if let Some(slot) = sh_argv.get_mut(1) {
                    *slot = path.as_ptr();
                }
                libc::execve(SH.as_ptr(), sh_argv.as_ptr(), data.envp.as_ptr());
                error = errno();
            }
            match error {
                libc::EACCES => denied = true,
                libc::ENOENT | libc::ENOTDIR | libc::ESTALE | libc::ENODEV | libc::ETIMEDOUT => {}
                _ => break,
            }
        }
        fail(match error {
            libc::ENOENT | libc::ENOTDIR if denied => libc::EACCES,
            _ => error,
        })
    }
}

impl Process {
    /// Its process id (and its group's: it leads one).
    pub(super) fn id(&self) -> u32 {
        self.pid.as_raw_nonzero().get().unsigned_abs()
    }

    /// Wait for it to end and reap it: its exit code, `None` if a signal ended it.
    pub(super) async fn wait(&mut self) -> io::Result<Option<i32>> {
        let Some(pidfd) = &self.pidfd else {
            return Err(io::Error::other("already waited for"));
        };
        loop {
            let mut ready = pidfd.readable().await?;
            match rustix::process::waitid(
                WaitId::PidFd(pidfd.get_ref().as_fd()),
                WaitIdOptions::EXITED | WaitIdOptions::NOHANG,
            ) {
                Ok(Some(status)) => {
                    self.pidfd = None;
                    return Ok(status.exit_status());
                }
                Ok(None) => ready.clear_ready(),
                Err(rustix::io::Errno::INTR) => {}
                Err(error) => return Err(error.into()),
            }
        }
    }

    /// Kill it (SIGKILL) and reap it.
    pub(super) async fn kill(&mut self) -> io::Result<()> {
        if let Some(pidfd) = &self.pidfd {
            rustix::process::pidfd_send_signal(pidfd.get_ref(), Signal::KILL)?;
            self.wait().await?;
        }
        Ok(())
    }
}

impl Drop for Process {
    fn drop(&mut self) {
        let Some(pidfd) = self.pidfd.take() else {
            return;
        };
        let _ = rustix::process::pidfd_send_signal(pidfd.get_ref(), Signal::KILL);
        let reap = |pidfd: &AsyncFd<OwnedFd>| {
            rustix::process::waitid(
                WaitId::PidFd(pidfd.get_ref().as_fd()),
                WaitIdOptions::EXITED,
            )
        };
        // It ends at once (unless in an uninterruptible sleep): reaped when it has.
        match tokio::runtime::Handle::try_current() {
            Ok(runtime) => {
                runtime.spawn(async move {
                    let _ = pidfd.readable().await;
                    let _ = reap(&pidfd);
                });
            }
            Err(_) => {
                let _ = reap(&pidfd);
            }
        }
    }
}

mod prepare;

#[cfg(test)]
mod tests;
