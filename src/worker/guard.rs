//! Containment of command tasks: a task never outlives its run, and never its worker.
//!
//! Each command task runs in a process group of its own ([`ProcessGroup`]); the whole group is
//! killed (SIGKILL) when the task's main process exits, when it times out or is canceled, and
//! when the worker stops. A worker killed with SIGKILL runs no code of its own, so [`start`]
//! forks a guard process first, before the worker has any thread: the guard keeps the list of
//! live task groups (each group adds itself before its program starts, from the child between
//! its clone and `execve` (`spawn.rs`), so no task escapes the list) and kills every one of them
//! when its end of a pipe from the worker closes — the kernel closes it when the worker dies,
//! however it dies.
//!
//! The guard also holds the scheduler's lease on the worker's tasks: the worker passes on each
//! end the scheduler granted (`lease.rs`). When no grant comes in time (the worker is stopped
//! with SIGSTOP or hung, the link is cut, or so slow that answers come too late), the lease runs
//! out and the guard kills the task groups, since the scheduler gives those tasks to other
//! workers once every lease it granted is over.
//!
//! A task that moves itself into another session or group (`setsid`) escapes, as it escapes
//! Slurm's `proctrack/pgid`; a cgroup would hold it, and is not used here.

use std::io;
use std::os::fd::OwnedFd;
use std::sync::OnceLock;
use std::sync::atomic::{AtomicU64, Ordering};

use rustix::io::Errno;
use rustix::process::{Pid, Signal};

/// The worker's end of the pipe to the guard (unset: no guard).
static GUARD_FD: OnceLock<OwnedFd> = OnceLock::new();

const ADD: u8 = b'+';
const REMOVE: u8 = b'-';
/// The scheduler's lease, renewed: the milliseconds left of it follow.
const LEASE: u8 = b'L';

/// Fork the guard process. Call it at the very start of the worker process, while it has one
/// thread (forking a multi-threaded process is unsafe), and at most once.
pub fn start() -> io::Result<()> {
    let (read, write) = rustix::pipe::pipe_with(rustix::pipe::PipeFlags::CLOEXEC)?;
    // SAFETY: the process has a single thread (the caller's contract), so the child may run
    // ordinary code; it never returns from `guard`. (rustix offers no fork outside its
    // runtime module, which is for implementing a libc.)
    match unsafe { libc::fork() } {
        -1 => Err(io::Error::last_os_error()),
        0 => {
            // Close our copy of the worker's end, so EOF comes when the worker dies.
            drop(write);
            guard(read)
        }
        _ => {
            // The parent keeps only the write end.
            drop(read);
            GUARD_FD
                .set(write)
                .map_err(|_| io::Error::other("the worker's guard is started once"))
        }
    }
}

/// Set once a spawn found the guard gone: the worker stops at its next chance (in a session,
/// on the SIGTERM raised then; between sessions, at the next one's start).
static GONE: std::sync::atomic::AtomicBool = std::sync::atomic::AtomicBool::new(false);

/// Whether a failed spawn means the guard is gone (killed on its own): a task started now could
/// outlive this worker, so none is. Notes it for [`gone`].
pub fn is_gone(error: &io::Error) -> bool {
    let gone = error.raw_os_error() == Some(Errno::PIPE.raw_os_error());
    if gone {
        GONE.store(true, Ordering::SeqCst);
    }
    gone
}

/// Whether a spawn found the guard gone.
pub fn gone() -> bool {
    GONE.load(Ordering::SeqCst)
}

/// The scheduler's lease as this worker holds it: when it runs out (in milliseconds on the
/// worker's clock) and how many times it ran out and was renewed after. One per worker
/// (`Worker` makes it; the process has one worker, a simulated cluster many), shared with its
/// runs: a task waiting here must not start once it ran out, and a run that began before a
/// lapse was killed in it (or is given up for it), whatever the lease is by the time it ends.
#[derive(Debug)]
pub struct Lease {
    /// `u64::MAX`: no lease yet.
    until: AtomicU64,
    lapses: AtomicU64,
}

impl Default for Lease {
    fn default() -> Lease {
        Lease {
            until: AtomicU64::new(u64::MAX),
            lapses: AtomicU64::new(0),
        }
    }
}

impl Lease {
    /// The lease now runs until `until` (milliseconds on the worker's clock, `now` being the time
    /// on it, which the worker's core runs on too), here and in the guard process, which kills the task groups then even if
    /// this process is stopped.
    ///
    /// Order matters: this process takes the lease as over once its clock (rounded *down*) reaches
    /// `until`, the guard kills a millisecond after the time left it learns (rounded *up*, read a
    /// moment later). So a run the guard killed always ends after this process saw the lease out,
    /// and its outcome is never taken as produced under the lease. The guard may kill up to the
    /// pipe's latency later than `until`: `core::lease::KILL_MARGIN` covers that.
    pub fn renew_until(&self, until: u64, now: u64) {
        if self.expired(now) {
            // It ran out before this renewal: the guard killed every task that ran meanwhile.
            self.lapses.fetch_add(1, Ordering::SeqCst);
        }
        self.until.store(until.min(u64::MAX - 1), Ordering::SeqCst);
        let left_ms = until.saturating_sub(now).saturating_add(1);
        let _ = tell(LEASE, i32::try_from(left_ms).unwrap_or(i32::MAX));
    }

    /// When it runs out (`None`: no lease yet).
    pub fn until(&self) -> Option<u64> {
        Some(self.until.load(Ordering::SeqCst)).filter(|&until| until != u64::MAX)
    }

    /// How many times it ran out and was renewed after: a run notes this when it is handed
    /// over, and is valid only if it is the same when it ends (and the lease holds then).
    pub fn lapses(&self) -> u64 {
        self.lapses.load(Ordering::SeqCst)
    }

    /// Whether it ran out (the scheduler may have the worker's tasks run elsewhere by now, and
    /// the guard no longer kills what starts). `now`: the time on the worker's clock.
    pub fn expired(&self, now: u64) -> bool {
        self.until().is_some_and(|until| now >= until)
    }

    /// Whether a run handed over when the lease had lapsed `lapses` times may not go on: the
    /// lease ran out, or lapsed (ran out and was renewed) since.
    pub fn lost_since(&self, lapses: u64, now: u64) -> bool {
        self.expired(now) || self.lapses() != lapses
    }
}

/// Tell the guard about a group; false if the guard is gone (its end of the pipe closed).
/// Async-signal-safe: called between fork and exec too.
fn tell(op: u8, pgid: i32) -> bool {
    // `OnceLock::get` is an atomic load: async-signal-safe.
    let Some(fd) = GUARD_FD.get() else {
        return true;
    };
    let mut message = [0u8; 5];
    message[0] = op;
    message[1..].copy_from_slice(&pgid.to_le_bytes());
    // One write of 5 bytes (less than PIPE_BUF) is atomic: messages never interleave.
    matches!(rustix::io::write(fd, &message), Ok(n) if n == message.len())
}

/// SIGKILL every process of the group `pgid` (a task's; never 0, 1 or below, which would
/// mean this group or every process).
fn kill_group(pgid: i32) {
    if let Some(pid) = Pid::from_raw(pgid).filter(|_| pgid > 1) {
        let _ = rustix::process::kill_process_group(pid, Signal::KILL);
    }
}

/// The guard: read groups until EOF, then kill the ones still listed, and exit.
fn guard(read: OwnedFd) -> ! {
    // Outlive the worker: a Ctrl-C or SIGTERM sent to the worker's process group must not take
    // the guard first, and a stop (Ctrl-Z, `kill -STOP -PGID`) must not stop it with the
    // worker: it has a session and group of its own, and ignores the terminal's stop signals.
    // Hold no terminal or pipe of the worker's open either.
    let _ = rustix::process::setsid();
    // SAFETY: setting dispositions to SIG_IGN in the single-threaded child (no handler runs).
    unsafe {
        for signal in [
            libc::SIGINT,
            libc::SIGTERM,
            libc::SIGHUP,
            libc::SIGPIPE,
            libc::SIGTSTP,
            libc::SIGTTIN,
            libc::SIGTTOU,
        ] {
            libc::signal(signal, libc::SIG_IGN);
        }
    }
    let null = std::fs::OpenOptions::new()
        .read(true)
        .write(true)
        .open("/dev/null");
    if let Ok(null) = null {
        let _ = rustix::stdio::dup2_stdin(&null);
        let _ = rustix::stdio::dup2_stdout(&null);
        let _ = rustix::stdio::dup2_stderr(&null);
    }
    let _ = rustix::thread::set_name(c"weir-guard");
    let mut groups: Vec<i32> = Vec::new();
    let mut buffer = [0u8; 4096];
    let mut pending: Vec<u8> = Vec::new();
    // The OS clock, not the worker's (`crate::clock`): this is a process of its own, forked
    // before any runtime, that must keep time while the worker is stopped or hung; it learns
    // the time *left* of each lease, so it needs no clock shared with the worker.
    let mut lease: Option<std::time::Instant> = None;
    // The lease ran out and was not renewed since: a group listed now (a task that passed the
    // worker's check a moment before the end, or a worker that was stopped in between) is
    // killed at once.
    let mut expired = false;
    loop {
        // Wait for a message, or for the lease to run out.
        // Rounded up: never before the lease's end (see `renew_until`).
        let wait = lease.map(|until| {
            let left = until.saturating_duration_since(std::time::Instant::now());
            let ms = u64::try_from(left.as_micros().div_ceil(1000)).unwrap_or(u64::MAX / 1000);
            rustix::event::Timespec::try_from(std::time::Duration::from_millis(ms)).unwrap_or(
                rustix::event::Timespec {
                    tv_sec: i64::MAX,
                    tv_nsec: 0,
                },
            )
        });
        let mut fds = [rustix::event::PollFd::new(
            &read,
            rustix::event::PollFlags::IN,
        )];
        let ready = rustix::event::poll(&mut fds, wait.as_ref());
        if ready == Err(Errno::INTR) {
            continue;
        }
        if ready == Ok(0) {
            if lease.is_some_and(|until| std::time::Instant::now() < until) {
                continue; // woken a little early
            }
            // The lease ran out: the scheduler gives these tasks to others now.
            groups.drain(..).for_each(kill_group);
            lease = None;
            expired = true;
            continue;
        }
        let n = match rustix::io::read(&read, &mut buffer) {
            Ok(0) => break,
            Ok(n) => n,
            Err(Errno::INTR) => continue,
            Err(_) => break,
        };
        pending.extend_from_slice(&buffer[..n]);
        let whole = pending.len() / 5 * 5;
        for message in pending[..whole].chunks_exact(5) {
            let pgid = i32::from_le_bytes([message[1], message[2], message[3], message[4]]);
            match message[0] {
                ADD if expired && pgid > 1 => kill_group(pgid),
                ADD => groups.push(pgid),
                REMOVE => groups.retain(|g| *g != pgid),
                LEASE => {
                    let length = std::time::Duration::from_millis(pgid.max(0) as u64);
                    lease = Some(std::time::Instant::now() + length);
                    expired = false;
                }
                _ => {}
            }
        }
        pending.drain(..whole);
    }
    groups.into_iter().for_each(kill_group);
    // SAFETY: leave without running the worker's destructors or atexit handlers (rustix has
    // no `_exit` outside its runtime module).
    unsafe { libc::_exit(0) }
}

/// List the calling process's group (it leads one) with the guard; false if the guard is gone.
/// Async-signal-safe: for a child between its clone (or fork) and `execve`. Its pid comes
/// from the system call, not a cache of the parent's.
pub(super) fn list_this_process() -> bool {
    // SAFETY: getpid has no preconditions.
    let pid = unsafe { libc::syscall(libc::SYS_getpid) };
    tell(ADD, i32::try_from(pid).unwrap_or(0))
}

/// Take `pgid` off the guard's list: a group that never ran its program (its child failed
/// before `execve`, or could not be waited for).
pub(super) fn unlist(pgid: i32) {
    let _ = tell(REMOVE, pgid);
}

/// Make `command` start its program as the leader of a new process group, listed with the
/// guard before the program runs.
pub fn contain(command: &mut tokio::process::Command) {
    command.process_group(0);
    // SAFETY: only async-signal-safe calls (signal, getpid, write) between fork and exec.
    unsafe {
        command.pre_exec(|| {
            // A guard that is gone must fail the spawn, not kill this child with SIGPIPE; the
            // program itself then starts with SIGPIPE's default, as std gives it.
            libc::signal(libc::SIGPIPE, libc::SIG_IGN);
            let listed = list_this_process();
            libc::signal(libc::SIGPIPE, libc::SIG_DFL);
            match listed {
                true => Ok(()),
                false => Err(Errno::PIPE.into()),
            }
        });
    }
}

/// A task's process group: killed, every process in it, when this is dropped.
pub struct ProcessGroup {
    pgid: i32,
}

impl ProcessGroup {
    /// The group led by `pid`, a child started with [`contain`].
    pub fn new(pid: Option<u32>) -> Option<ProcessGroup> {
        let pgid = i32::try_from(pid?).ok().filter(|p| *p > 1)?;
        Some(ProcessGroup { pgid })
    }
}

impl Drop for ProcessGroup {
    fn drop(&mut self) {
        // The group this task's child leads. While any member lives the group id cannot be
        // reused; once all are gone it could only be hit again by a new group whose leader got
        // the same pid, which needs the pid space to wrap in the moment between the leader's
        // exit and this drop (callers drop it right after the wait).
        kill_group(self.pgid);
        let _ = tell(REMOVE, self.pgid);
    }
}
