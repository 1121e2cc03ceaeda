//! Containment of command tasks: a task never outlives its run, and never its worker.
//!
//! Each command task runs in a process group of its own ([`ProcessGroup`]); the whole group is
//! killed (SIGKILL) when the task's main process exits, when it times out or is canceled, and
//! when the worker stops. A worker killed with SIGKILL runs no code of its own, so [`start`]
//! forks a guard process first, before the worker has any thread: the guard keeps the list of
//! live task groups (each group adds itself before its program starts, from the child side of
//! the fork, so no task escapes the list) and kills every one of them when its end of a pipe
//! from the worker closes — the kernel closes it when the worker dies, however it dies.
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
use std::sync::atomic::{AtomicI32, Ordering};

/// The worker's end of the pipe to the guard (-1: no guard).
static GUARD_FD: AtomicI32 = AtomicI32::new(-1);

const ADD: u8 = b'+';
const REMOVE: u8 = b'-';
/// The scheduler's lease, renewed: the milliseconds left of it follow.
const LEASE: u8 = b'L';

/// Fork the guard process. Call it at the very start of the worker process, while it has one
/// thread (forking a multi-threaded process is unsafe), and at most once.
pub fn start() -> io::Result<()> {
    let mut fds = [0; 2];
    // SAFETY: pipe2 fills `fds` with two new descriptors.
    if unsafe { libc::pipe2(fds.as_mut_ptr(), libc::O_CLOEXEC) } != 0 {
        return Err(io::Error::last_os_error());
    }
    let [read, write] = fds;
    // SAFETY: the process has a single thread (the caller's contract), so the child may run
    // ordinary code; it never returns from `guard`.
    match unsafe { libc::fork() } {
        -1 => Err(io::Error::last_os_error()),
        0 => {
            // SAFETY: closing our copy of the worker's end, so EOF comes when the worker dies.
            unsafe { libc::close(write) };
            guard(read)
        }
        _ => {
            // SAFETY: the parent keeps only the write end.
            unsafe { libc::close(read) };
            GUARD_FD.store(write, Ordering::SeqCst);
            Ok(())
        }
    }
}

/// The lease now runs until `until` (milliseconds on [`now_ms`]'s clock, which the worker's
/// core runs on too), here and in the guard process, which kills the task groups then even if
/// this process is stopped.
///
/// Order matters: this process takes the lease as over once [`now_ms`] (rounded *down*) reaches
/// `until`, the guard kills a millisecond after the time left it learns (rounded *up*, read a
/// moment later). So a run the guard killed always ends after this process saw the lease out,
/// and its outcome is never taken as produced under the lease. The guard may kill up to the
/// pipe's latency later than `until`: `core::lease::KILL_MARGIN` covers that.
pub fn renew_until(until: u64) {
    if lease_expired() {
        // It ran out before this renewal: the guard killed every task that ran meanwhile.
        LAPSES.fetch_add(1, Ordering::SeqCst);
    }
    LEASE_UNTIL.store(until.min(u64::MAX - 1), Ordering::SeqCst);
    let left_ms = until.saturating_sub(now_ms()).saturating_add(1);
    let _ = tell(LEASE, i32::try_from(left_ms).unwrap_or(i32::MAX));
}

/// Set once a spawn found the guard gone: the worker stops at its next chance (in a session,
/// on the SIGTERM raised then; between sessions, at the next one's start).
static GONE: std::sync::atomic::AtomicBool = std::sync::atomic::AtomicBool::new(false);

/// Whether a failed spawn means the guard is gone (killed on its own): a task started now could
/// outlive this worker, so none is. Notes it for [`gone`].
pub fn is_gone(error: &io::Error) -> bool {
    let gone = error.raw_os_error() == Some(libc::EPIPE);
    if gone {
        GONE.store(true, Ordering::SeqCst);
    }
    gone
}

/// Whether a spawn found the guard gone.
pub fn gone() -> bool {
    GONE.load(Ordering::SeqCst)
}

/// When the lease the worker holds runs out, in milliseconds on [`now_ms`]'s clock
/// (`u64::MAX`: no lease). Shared with the tasks waiting for a slot: past it, none starts.
static LEASE_UNTIL: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(u64::MAX);

/// How many times the lease ran out and was renewed after: a run that began before a lapse was
/// killed in it (or is given up for it), whatever the lease is by the time it ends.
static LAPSES: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);

/// See [`LAPSES`]: a run notes this when it is handed over, and is valid only if it is the
/// same when it ends (and the lease holds then).
pub fn lapses() -> u64 {
    LAPSES.load(Ordering::SeqCst)
}

/// The worker's clock: milliseconds since its first reading (the core's `now`, the lease's
/// times, and the guard's deadline are all on it).
pub fn now_ms() -> u64 {
    u64::try_from(epoch().elapsed().as_millis()).unwrap_or(u64::MAX)
}

/// When [`now_ms`] was 0.
pub fn epoch() -> std::time::Instant {
    static EPOCH: std::sync::OnceLock<std::time::Instant> = std::sync::OnceLock::new();
    *EPOCH.get_or_init(std::time::Instant::now)
}

/// Whether the lease ran out (the scheduler may have the worker's tasks run elsewhere by now,
/// and the guard no longer kills what starts): a task waiting here must not start then.
pub fn lease_expired() -> bool {
    lease_expired_by(std::time::Duration::ZERO)
}

/// Whether a run handed over when the lease had lapsed `lapses` times may not go on: the lease
/// ran out, or lapsed (ran out and was renewed) since.
pub fn lost_since(lapses: u64) -> bool {
    lease_expired() || self::lapses() != lapses
}

/// Whether the lease ran out at least `margin` ago.
pub fn lease_expired_by(margin: std::time::Duration) -> bool {
    let until = LEASE_UNTIL.load(Ordering::SeqCst);
    let margin = u64::try_from(margin.as_millis()).unwrap_or(u64::MAX);
    until != u64::MAX && now_ms() >= until.saturating_add(margin)
}

/// Tell the guard about a group; false if the guard is gone (its end of the pipe closed).
/// Async-signal-safe: called between fork and exec too.
fn tell(op: u8, pgid: i32) -> bool {
    let fd = GUARD_FD.load(Ordering::SeqCst);
    if fd < 0 {
        return true;
    }
    let mut message = [0u8; 5];
    message[0] = op;
    message[1..].copy_from_slice(&pgid.to_le_bytes());
    // One write of 5 bytes (less than PIPE_BUF) is atomic: messages never interleave.
    // SAFETY: writing a stack buffer to a pipe descriptor this process owns.
    let written = unsafe { libc::write(fd, message.as_ptr().cast(), message.len()) };
    written == message.len() as isize
}

/// The guard: read groups until EOF, then kill the ones still listed, and exit.
fn guard(read: i32) -> ! {
    // SAFETY: plain system calls in the single-threaded child.
    unsafe {
        // Outlive the worker: a Ctrl-C or SIGTERM sent to the worker's process group must not
        // take the guard first, and a stop (Ctrl-Z, `kill -STOP -PGID`) must not stop it with
        // the worker: it has a session and group of its own, and ignores the terminal's stop
        // signals. Hold no terminal or pipe of the worker's open either.
        libc::setsid();
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
        let null = libc::open(c"/dev/null".as_ptr(), libc::O_RDWR);
        if null >= 0 {
            for fd in 0..3 {
                libc::dup2(null, fd);
            }
        }
        libc::prctl(libc::PR_SET_NAME, c"weir-guard".as_ptr());
    }
    let mut groups: Vec<i32> = Vec::new();
    let mut buffer = [0u8; 4096];
    let mut pending: Vec<u8> = Vec::new();
    let mut lease: Option<std::time::Instant> = None;
    // The lease ran out and was not renewed since: a group listed now (a task that passed the
    // worker's check a moment before the end, or a worker that was stopped in between) is
    // killed at once.
    let mut expired = false;
    loop {
        // Wait for a message, or for the lease to run out.
        // Rounded up: never before the lease's end (see `renew_until`).
        let wait_ms = lease.map_or(-1, |until| {
            let left = until.saturating_duration_since(std::time::Instant::now());
            i32::try_from(left.as_micros().div_ceil(1000)).unwrap_or(i32::MAX)
        });
        let mut poll = libc::pollfd {
            fd: read,
            events: libc::POLLIN,
            revents: 0,
        };
        // SAFETY: poll(2) on one descriptor we own.
        let ready = unsafe { libc::poll(&mut poll, 1, wait_ms) };
        if ready == 0 {
            if lease.is_some_and(|until| std::time::Instant::now() < until) {
                continue; // woken a little early
            }
            // The lease ran out: the scheduler gives these tasks to others now.
            for pgid in groups.drain(..) {
                if pgid > 1 {
                    // SAFETY: kill(2) of a task's process group.
                    unsafe { libc::kill(-pgid, libc::SIGKILL) };
                }
            }
            lease = None;
            expired = true;
            continue;
        }
        // SAFETY: reading into a stack buffer from our pipe.
        let n = unsafe { libc::read(read, buffer.as_mut_ptr().cast(), buffer.len()) };
        if n == 0 || (n < 0 && io::Error::last_os_error().kind() != io::ErrorKind::Interrupted) {
            break;
        }
        if n < 0 {
            continue;
        }
        pending.extend_from_slice(&buffer[..n as usize]);
        let whole = pending.len() / 5 * 5;
        for message in pending[..whole].chunks_exact(5) {
            let pgid = i32::from_le_bytes([message[1], message[2], message[3], message[4]]);
            match message[0] {
                ADD if expired && pgid > 1 => {
                    // SAFETY: kill(2) of a task's process group.
                    unsafe { libc::kill(-pgid, libc::SIGKILL) };
                }
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
    for pgid in groups {
        if pgid > 1 {
            // SAFETY: kill(2) of a process group the worker created for a task.
            unsafe { libc::kill(-pgid, libc::SIGKILL) };
        }
    }
    // SAFETY: leave without running the worker's destructors or atexit handlers.
    unsafe { libc::_exit(0) }
}

/// Make `command` start its program as the leader of a new process group, listed with the
/// guard before the program runs.
pub fn contain(command: &mut tokio::process::Command) {
    command.process_group(0);
    // SAFETY: only async-signal-safe calls (getpid, write) between fork and exec.
    unsafe {
        command.pre_exec(|| {
            // A guard that is gone must fail the spawn, not kill this child with SIGPIPE; the
            // program itself then starts with SIGPIPE's default, as std gives it.
            libc::signal(libc::SIGPIPE, libc::SIG_IGN);
            let listed = tell(ADD, libc::getpid());
            libc::signal(libc::SIGPIPE, libc::SIG_DFL);
            match listed {
                true => Ok(()),
                false => Err(io::Error::from_raw_os_error(libc::EPIPE)),
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
        // SAFETY: kill(2) of the group this task's child leads. While any member lives the
        // group id cannot be reused; once all are gone it could only be hit again by a new
        // group whose leader got the same pid, which needs the pid space to wrap in the moment
        // between the leader's exit and this drop (callers drop it right after the wait).
        unsafe { libc::killpg(self.pgid, libc::SIGKILL) };
        let _ = tell(REMOVE, self.pgid);
    }
}
