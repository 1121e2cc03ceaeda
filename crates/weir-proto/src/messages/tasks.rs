//! Tasks: what a task runs, the spec its group shares, and how a run ended.

use serde::{Deserialize, Serialize};

use super::*;

/// What a task runs.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum TaskKind {
    /// A process: argv, extra environment variables; its stdin is the task's input.
    Command {
        argv: Vec<String>,
        env: Vec<(String, String)>,
    },
    /// A component of the `task` world, run on the input bytes.
    Wasm { component: ComponentHash },
    /// A function, run by a long-lived runner process per slot (`runner`, e.g.
    /// `["python3", "-m", "weir.runner"]`) on each task's input (the pickled arguments).
    /// `function` is the pickled function, sent to each runner once; see `weir::worker::runner`
    /// for the runner protocol.
    Function {
        runner: Vec<String>,
        #[serde(with = "crate::bytes::one")]
        function: Vec<u8>,
    },
}

/// The specification shared by the tasks of a group.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct TaskSpec {
    pub kind: TaskKind,
    /// Amounts consumed while a task runs, e.g. `[("gpu", 1)]`.
    pub capabilities: Vec<(String, u64)>,
    /// Environments every task of the group needs (names; resolved when a worker is chosen).
    pub environments: Vec<String>,
    /// Higher runs first.
    pub priority: i32,
    /// Wall-clock limit of one run, in milliseconds (0: none).
    pub timeout_ms: u64,
    /// How many times a task is run again after its worker was lost.
    pub retries: u32,
    /// Input of every task without its own (`inputs`).
    #[serde(with = "crate::bytes::one")]
    pub input: Vec<u8>,
}

/// A group as submitted: `count` tasks, or one per entry of `inputs` when it is not empty.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct NewGroup {
    pub spec: TaskSpec,
    pub count: u32,
    #[serde(with = "crate::bytes::list")]
    pub inputs: Vec<Vec<u8>>,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub enum TaskState {
    Queued,
    Running,
    Succeeded,
    Failed,
    Canceled,
}

impl TaskState {
    pub fn is_final(self) -> bool {
        matches!(
            self,
            TaskState::Succeeded | TaskState::Failed | TaskState::Canceled
        )
    }
}

/// How a run ended.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum Outcome {
    /// A command exited (`code` is `None` when a signal ended it).
    Exited {
        code: Option<i32>,
        #[serde(with = "crate::bytes::one")]
        stdout: Vec<u8>,
        #[serde(with = "crate::bytes::one")]
        stderr: Vec<u8>,
    },
    /// A wasm task returned.
    Returned {
        #[serde(with = "crate::bytes::one")]
        output: Vec<u8>,
    },
    /// A function returned (`ok`) or raised: `value` is what the runner pickled (the return
    /// value, or the exception with its traceback); `stdout`/`stderr` are what the task printed.
    Function {
        ok: bool,
        #[serde(with = "crate::bytes::one")]
        value: Vec<u8>,
        #[serde(with = "crate::bytes::one")]
        stdout: Vec<u8>,
        #[serde(with = "crate::bytes::one")]
        stderr: Vec<u8>,
    },
    /// It could not run or did not finish: spawn failure, timeout, trap, lost worker, cancel.
    Error { message: String },
}

impl Outcome {
    /// About how many bytes it takes in a frame (for splitting batches below the frame limit).
    pub fn size_hint(&self) -> usize {
        64 + match self {
            Outcome::Exited { stdout, stderr, .. } => stdout.len() + stderr.len(),
            Outcome::Returned { output } => output.len(),
            Outcome::Function {
                value,
                stdout,
                stderr,
                ..
            } => value.len() + stdout.len() + stderr.len(),
            Outcome::Error { message } => message.len(),
        }
    }

    /// What went wrong, for people: the exit code or the error, and the end of what the task
    /// wrote to stderr (at most `tail` bytes, cut at a character). Empty for a success.
    pub fn failure_text(&self, tail: usize) -> String {
        let end = |bytes: &[u8]| {
            let text = String::from_utf8_lossy(bytes);
            let text = text.trim_end();
            let mut from = text.len().saturating_sub(tail);
            while !text.is_char_boundary(from) {
                from += 1;
            }
            match text[from..].trim_start() {
                "" => String::new(),
                rest if from > 0 => format!(": …{rest}"),
                rest => format!(": {rest}"),
            }
        };
        match self {
            _ if self.succeeded() => String::new(),
            Outcome::Exited {
                code: Some(code),
                stderr,
                ..
            } => format!("exit code {code}{}", end(stderr)),
            Outcome::Exited { stderr, .. } => format!("killed by a signal{}", end(stderr)),
            Outcome::Function { stderr, .. } => format!("raised{}", end(stderr)),
            Outcome::Error { message } => message.clone(),
            Outcome::Returned { .. } => String::new(),
        }
    }

    pub fn succeeded(&self) -> bool {
        matches!(
            self,
            Outcome::Exited { code: Some(0), .. }
                | Outcome::Returned { .. }
                | Outcome::Function { ok: true, .. }
        )
    }
}

#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct TaskResult {
    pub task: TaskId,
    pub state: TaskState,
    pub outcome: Outcome,
    /// Runs started (more than 1 after a lost worker).
    pub attempts: u32,
    pub worker: Option<WorkerId>,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_failure_reads_as_its_code_or_error_and_the_end_of_its_stderr() {
        let exited = |code, stderr: &str| Outcome::Exited {
            code,
            stdout: b"ignored".to_vec(),
            stderr: stderr.as_bytes().to_vec(),
        };
        assert_eq!(exited(Some(0), "warning").failure_text(10), "");
        assert_eq!(exited(Some(3), "").failure_text(10), "exit code 3");
        assert_eq!(
            exited(Some(3), "oops\n").failure_text(10),
            "exit code 3: oops"
        );
        assert_eq!(
            exited(Some(1), "a long story ending in é!").failure_text(6),
            "exit code 1: …in é!"
        );
        assert_eq!(exited(None, "").failure_text(10), "killed by a signal");
        let error = Outcome::Error {
            message: "no such component".into(),
        };
        assert_eq!(error.failure_text(10), "no such component");
    }
}
