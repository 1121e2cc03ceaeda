//! Function tasks ([`TaskKind::Function`]): a long-lived runner process per slot instead of a
//! process per task.
//!
//! A runner (for Python, `python3 -m weir.runner`) is started on first use for its argv and kept
//! idle between tasks; at most one task runs in it at a time, so there are never more runners
//! busy than slots. It is started like a command task (its own process group, listed with the
//! guard), and killed with its group on a timeout or a cancel: the next task gets a fresh one.
//!
//! The runner protocol, over the runner's stdin and stdout (the runner moves them aside and
//! points its fds 0-2 elsewhere, so what a task prints never mixes with it): frames of a 4-byte
//! little-endian length, then the body, whose first byte says what it is.
//! - worker -> runner `F` + 32-byte hash + the pickled function: sent once per function and
//!   runner, before its first task.
//! - worker -> runner `T` + 32-byte hash + the task's input (its pickled arguments).
//! - runner -> worker `R` + status + 4-byte length + stdout + 4-byte length + stderr + value.
//!   Status 0: the function returned (value: the pickled result); 1: it raised (value: the
//!   pickled exception and traceback); 2: the runner could not run it (value: why, UTF-8 — a
//!   version mismatch, a module missing here).
//!
//! [`TaskKind::Function`]: crate::proto::TaskKind::Function

use std::collections::{HashMap, VecDeque};
use std::process::Stdio;
use std::sync::Mutex;
use std::time::Duration;

use sha2::{Digest, Sha256};
use tokio::io::{AsyncReadExt, AsyncWriteExt, BufReader};
use tokio::process::{Child, ChildStdin, ChildStdout};

use super::cancel::{Cancel, canceled};
use super::guard::{self, ProcessGroup};
use crate::proto::Outcome;

/// The largest reply a runner may send: a result bigger than this fails its task (it must fit,
/// with the task's output, in one frame to the scheduler).
const MAX_REPLY: usize = 32 << 20;

/// Functions a runner keeps (oldest dropped first; the runner drops them in the same order, as
/// it gets them in the order they are sent), so a long-lived runner's memory stays bounded.
const KEEP_FUNCTIONS: usize = 8;

/// Idle runners by argv, and how many tasks a runner runs before it is replaced.
pub(super) struct Runners {
    idle: Mutex<HashMap<Vec<String>, Vec<RunnerProcess>>>,
    /// 0: no limit (`worker --max-tasks-per-runner`).
    max_tasks: u32,
    worker_name: String,
}

struct RunnerProcess {
    child: Child,
    stdin: ChildStdin,
    stdout: BufReader<ChildStdout>,
    /// Killed, every process in it, when the runner is dropped.
    _group: Option<ProcessGroup>,
    /// Functions it has been sent and keeps, oldest first (at most [`KEEP_FUNCTIONS`]).
    known: VecDeque<[u8; 32]>,
    tasks: u32,
}

/// Why a runner could not finish a task.
#[derive(Debug, thiserror::Error)]
enum RunnerError {
    #[error("cannot start the runner `{argv}`: {error}")]
    Spawn { argv: String, error: std::io::Error },
    #[error("the runner `{argv}` ended ({status}){stderr}")]
    Ended {
        argv: String,
        status: String,
        stderr: String,
    },
    #[error("the runner sent a malformed reply: {0}")]
    Malformed(&'static str),
}

/// How waiting for a reply ended.
enum Waited {
    /// The reply, or the length of one too big to take.
    Reply(Result<Result<Vec<u8>, usize>, std::io::Error>),
    TimedOut(Duration),
    Canceled,
}

impl Runners {
    pub(super) fn new(max_tasks: u32, worker_name: String) -> Runners {
        Runners {
            idle: Mutex::default(),
            max_tasks,
            worker_name,
        }
    }

    /// Run one task of `function` in an idle runner of `argv` (started if there is none).
    pub(super) async fn run(
        &self,
        argv: &[String],
        function: &[u8],
        input: Vec<u8>,
        timeout: Option<Duration>,
        cancel: &Cancel,
    ) -> Outcome {
        // A runner that died while idle (killed with the other task groups when the lease ran
        // out, say) is not used: the task would fail on its pipe.
        let idle = self.idle.lock().ok().and_then(|mut idle| {
            let runners = idle.get_mut(argv)?;
            while let Some(mut runner) = runners.pop() {
                if matches!(runner.child.try_wait(), Ok(None)) {
                    return Some(runner);
                }
            }
            None
        });
        let mut runner = match idle {
            Some(runner) => runner,
            None => match self.start(argv) {
                Ok(runner) => runner,
                Err(error) => {
                    return Outcome::Error {
                        message: error.to_string(),
                    };
                }
            },
        };
        let hash: [u8; 32] = Sha256::digest(function).into();
        let waited = {
            let RunnerProcess {
                child,
                stdin,
                stdout,
                known,
                ..
            } = &mut runner;
            let exchange = async {
                if !known.contains(&hash) {
                    write_frame(stdin, b'F', &hash, function).await?;
                    known.push_back(hash);
                    if known.len() > KEEP_FUNCTIONS {
                        known.pop_front();
                    }
                }
                write_frame(stdin, b'T', &hash, &input).await?;
                read_frame(stdout).await
            };
            let timed = async {
                match timeout {
                    Some(limit) => match tokio::time::timeout(limit, exchange).await {
                        Ok(reply) => Waited::Reply(reply),
                        Err(_) => Waited::TimedOut(limit),
                    },
                    None => Waited::Reply(exchange.await),
                }
            };
            tokio::select! {
                biased;
                waited = timed => waited,
                () = cancel.stopped() => Waited::Canceled,
                // The runner died while something it started still holds its pipe open.
                _ = child.wait() => Waited::Reply(Err(std::io::Error::other("it exited"))),
            }
        };
        // On a timeout or cancel the runner (and whatever the task started) is killed with its
        // group as it is dropped here; the next task starts a fresh one.
        let reply = match waited {
            Waited::Reply(Ok(Ok(reply))) => reply,
            // Its reply is left unread in the pipe: the runner goes (killed as it is dropped).
            Waited::Reply(Ok(Err(length))) => {
                return Outcome::Error {
                    message: format!(
                        "the function's result and output take {length} bytes; at most {MAX_REPLY} go back through the scheduler (return less, or write it to shared storage)"
                    ),
                };
            }
            Waited::Reply(Err(error)) => {
                return Outcome::Error {
                    message: runner.ended(argv, error).await.to_string(),
                };
            }
            Waited::TimedOut(limit) => {
                return Outcome::Error {
                    message: format!("timed out after {limit:?}"),
                };
            }
            Waited::Canceled => return canceled(),
        };
        let outcome = match parse_reply(&reply) {
            Ok(outcome) => outcome,
            Err(error) => {
                return Outcome::Error {
                    message: error.to_string(),
                };
            }
        };
        runner.tasks += 1;
        if (self.max_tasks == 0 || runner.tasks < self.max_tasks)
            && let Ok(mut idle) = self.idle.lock()
        {
            idle.entry(argv.to_vec()).or_default().push(runner);
        }
        outcome
    }

    fn start(&self, argv: &[String]) -> Result<RunnerProcess, RunnerError> {
        let spawn_error = |error| RunnerError::Spawn {
            argv: argv.join(" "),
            error,
        };
        let (program, args) = argv
            .split_first()
            .ok_or_else(|| spawn_error(std::io::Error::other("empty argv")))?;
        let mut command = tokio::process::Command::new(program);
        guard::contain(&mut command);
        let mut child = command
            .args(args)
            .env("WEIR_WORKER_NAME", &self.worker_name)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            // Only what the runner itself says before it moves fd 2 aside (it cannot start, an
            // import fails): read when it ends.
            .stderr(Stdio::piped())
            .kill_on_drop(true)
            .spawn()
            .map_err(spawn_error)?;
        let group = ProcessGroup::new(child.id());
        let (Some(stdin), Some(stdout)) = (child.stdin.take(), child.stdout.take()) else {
            return Err(spawn_error(std::io::Error::other("no pipes")));
        };
        tracing::debug!(runner = %argv.join(" "), "function runner started");
        Ok(RunnerProcess {
            child,
            stdin,
            stdout: BufReader::new(stdout),
            _group: group,
            known: VecDeque::new(),
            tasks: 0,
        })
    }
}

impl RunnerProcess {
    /// Why the runner stopped answering: its exit status and the start of its stderr.
    async fn ended(mut self, argv: &[String], error: std::io::Error) -> RunnerError {
        let status = match tokio::time::timeout(Duration::from_secs(2), self.child.wait()).await {
            Ok(Ok(status)) => status.to_string(),
            _ => error.to_string(),
        };
        let mut stderr = Vec::new();
        if let Some(pipe) = self.child.stderr.take() {
            let _ = tokio::time::timeout(
                Duration::from_secs(1),
                pipe.take(64 << 10).read_to_end(&mut stderr),
            )
            .await;
        }
        let stderr = String::from_utf8_lossy(&stderr).trim().to_string();
        RunnerError::Ended {
            argv: argv.join(" "),
            status,
            stderr: match stderr.is_empty() {
                true => String::new(),
                false => format!(": {stderr}"),
            },
        }
    }
}

async fn write_frame(
    to: &mut ChildStdin,
    kind: u8,
    hash: &[u8; 32],
    body: &[u8],
) -> std::io::Result<()> {
    let length = u32::try_from(1 + hash.len() + body.len())
        .map_err(|_| std::io::Error::other("a frame of 4 GiB or more"))?;
    let mut head = Vec::with_capacity(37);
    head.extend_from_slice(&length.to_le_bytes());
    head.push(kind);
    head.extend_from_slice(hash);
    to.write_all(&head).await?;
    to.write_all(body).await?;
    to.flush().await
}

/// A reply, or `Err(length)` for one longer than [`MAX_REPLY`] (left unread).
async fn read_frame(from: &mut BufReader<ChildStdout>) -> std::io::Result<Result<Vec<u8>, usize>> {
    let mut length = [0u8; 4];
    from.read_exact(&mut length).await?;
    let length = u32::from_le_bytes(length) as usize;
    if length > MAX_REPLY {
        return Ok(Err(length));
    }
    let mut body = vec![0u8; length];
    from.read_exact(&mut body).await?;
    Ok(Ok(body))
}

/// An `R` frame's body as the task's outcome.
fn parse_reply(body: &[u8]) -> Result<Outcome, RunnerError> {
    let [b'R', status, rest @ ..] = body else {
        return Err(RunnerError::Malformed("not a reply"));
    };
    let (stdout, rest) = split_sized(rest)?;
    let (stderr, value) = split_sized(rest)?;
    match status {
        0 | 1 => Ok(Outcome::Function {
            ok: *status == 0,
            value: value.to_vec(),
            stdout: stdout.to_vec(),
            stderr: stderr.to_vec(),
        }),
        2 => Ok(Outcome::Error {
            message: String::from_utf8_lossy(value).into_owned(),
        }),
        _ => Err(RunnerError::Malformed("unknown status")),
    }
}

fn split_sized(bytes: &[u8]) -> Result<(&[u8], &[u8]), RunnerError> {
    let (length, rest) = bytes
        .split_first_chunk::<4>()
        .ok_or(RunnerError::Malformed("cut short"))?;
    let length = u32::from_le_bytes(*length) as usize;
    if rest.len() < length {
        return Err(RunnerError::Malformed("cut short"));
    }
    Ok(rest.split_at(length))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn reply(status: u8, stdout: &[u8], stderr: &[u8], value: &[u8]) -> Vec<u8> {
        let mut body = vec![b'R', status];
        for part in [stdout, stderr] {
            body.extend_from_slice(&(part.len() as u32).to_le_bytes());
            body.extend_from_slice(part);
        }
        body.extend_from_slice(value);
        body
    }

    #[test]
    fn replies_parse_and_malformed_ones_are_refused() {
        assert_eq!(
            parse_reply(&reply(0, b"out", b"", b"v")).ok(),
            Some(Outcome::Function {
                ok: true,
                value: b"v".to_vec(),
                stdout: b"out".to_vec(),
                stderr: vec![],
            })
        );
        assert!(matches!(
            parse_reply(&reply(2, b"", b"", b"module x missing")),
            Ok(Outcome::Error { message }) if message == "module x missing"
        ));
        let mut cut = reply(1, b"out", b"err", b"");
        cut.truncate(8);
        assert!(parse_reply(&cut).is_err());
        assert!(parse_reply(&reply(7, b"", b"", b"")).is_err());
        assert!(parse_reply(b"X").is_err());
        assert!(parse_reply(&[]).is_err());
    }
}
