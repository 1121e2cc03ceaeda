//! `weir._native`: the Rust client (`weir-client`) for the Python package. Futures, `map`,
//! pickling and the local cluster are in Python (`weir/__init__.py`); this is the connection.
//! Every call that waits on the network releases the GIL.

use std::path::PathBuf;
use std::time::Duration;

use pyo3::exceptions::{PyConnectionError, PyRuntimeError, PyValueError};
use pyo3::prelude::*;
use pyo3::types::{PyBytes, PyDict};
use weir_client::proto::{NewGroup, Outcome, Response, TaskKind, TaskResult, TaskSpec};
use weir_client::{Client, NetError, Responses};

pyo3::create_exception!(
    weir,
    RequestTooLarge,
    PyValueError,
    "A request over the scheduler's limit on one message (`weir.MAX_REQUEST` bytes): nothing \
     was sent and the connection is fine."
);

fn error(error: NetError) -> PyErr {
    match error {
        NetError::Request { code, message } => {
            PyValueError::new_err(format!("refused ({code:?}): {message}"))
        }
        NetError::RequestTooLarge { size, limit, input } => {
            let mib = |bytes: usize| bytes as f64 / f64::from(1 << 20);
            let what = match input {
                Some(index) => format!(
                    "the arguments of task {index} (pickled, with the function) make a request \
                     of {size} bytes ({:.1} MiB)",
                    mib(size)
                ),
                None => format!("the request is {size} bytes ({:.1} MiB)", mib(size)),
            };
            RequestTooLarge::new_err(format!(
                "{what}, over the scheduler's limit of {limit} bytes ({:.0} MiB) on one request; \
                 nothing was sent. `map` splits its tasks over several requests, but one task's \
                 arguments, or the function with its keyword arguments, must fit in one: pass \
                 large data another way (e.g. the path of a file the workers can read)",
                mib(limit)
            ))
        }
        other => PyConnectionError::new_err(other.to_string()),
    }
}

/// One connection to a scheduler, with the runtime that drives it.
#[pyclass(module = "weir._native")]
struct Connection {
    runtime: tokio::runtime::Runtime,
    client: Client,
}

/// A submission's requests (`Connection.submission`), and the answers to those sent so far.
#[pyclass(module = "weir._native")]
struct Submission {
    parts: Vec<weir_client::proto::Request>,
    jobs: Vec<(u64, u64, u64)>,
}

/// The results of one job's tasks as they end (`Connection.watch`).
#[pyclass(module = "weir._native")]
struct Watch {
    responses: Option<Responses>,
}

fn runtime() -> PyResult<tokio::runtime::Runtime> {
    tokio::runtime::Builder::new_multi_thread()
        .worker_threads(1)
        .enable_all()
        .build()
        .map_err(|e| PyRuntimeError::new_err(format!("cannot start the async runtime: {e}")))
}

#[pymethods]
impl Connection {
    /// Connect with the access file the scheduler wrote (`weir_client::reach`): at once to a
    /// scheduler that is there, a `ConnectionError` at once when it is gone (its lock free, its
    /// process gone) or no access file and no scheduler exist; while it may be (re)starting,
    /// keep trying for `timeout` seconds.
    #[new]
    #[pyo3(signature = (access_file, timeout = 30.0))]
    fn new(py: Python<'_>, access_file: PathBuf, timeout: f64) -> PyResult<Connection> {
        let runtime = runtime()?;
        let timeout = Duration::from_secs_f64(timeout.max(0.0));
        let client =
            py.detach(|| runtime.block_on(weir_client::reach(&access_file, timeout, |_| {})));
        Ok(Connection {
            client: client.map_err(error)?,
            runtime,
        })
    }

    /// A submission of one group of tasks, one per input, to hand to `send`. `kind` is
    /// `"function"` (`program` is the runner's argv, `function` the pickled function) or
    /// `"command"` (`program` is the argv). One job, or several when one request would be over
    /// the scheduler's limit on a message (each with its own request id). `RequestTooLarge` if
    /// one input cannot go in a request (nothing is sent).
    #[pyo3(signature = (kind, program, function, inputs, env, capabilities, environments, timeout_ms, retries, priority))]
    #[allow(clippy::too_many_arguments)]
    #[staticmethod]
    fn submission(
        kind: &str,
        program: Vec<String>,
        function: Vec<u8>,
        inputs: Vec<Vec<u8>>,
        env: Vec<(String, String)>,
        capabilities: Vec<(String, u64)>,
        environments: Vec<String>,
        timeout_ms: u64,
        retries: u32,
        priority: i32,
    ) -> PyResult<Submission> {
        let kind = match kind {
            "function" => TaskKind::Function {
                runner: program,
                function,
            },
            "command" => TaskKind::Command { argv: program, env },
            other => {
                return Err(PyValueError::new_err(format!(
                    "unknown task kind {other:?}"
                )));
            }
        };
        let count = u32::try_from(inputs.len())
            .map_err(|_| PyValueError::new_err("at most 4294967295 tasks in one submission"))?;
        let group = NewGroup {
            spec: TaskSpec {
                kind,
                capabilities,
                environments,
                priority,
                timeout_ms,
                retries,
                input: Vec::new(),
            },
            count,
            inputs,
        };
        let parts = weir_client::split_submission(group)
            .and_then(|parts| {
                parts
                    .into_iter()
                    .map(|part| weir_client::submission(Vec::new(), vec![part]))
                    .collect()
            })
            .map_err(error)?;
        Ok(Submission {
            parts,
            jobs: Vec::new(),
        })
    }

    /// Send what of `submission` is not answered yet; returns every part's `(job, first_task,
    /// tasks)`, in the order of the inputs (the tasks of a job have the ids `first_task ..=
    /// first_task + tasks - 1`). A `ConnectionError` leaves it to be sent again, on a new
    /// connection: a part the scheduler took already is answered with its job, not made twice.
    /// If the scheduler refuses a part after others went through, those are canceled (as far as
    /// the connection allows) and the error raised.
    fn send(&self, py: Python<'_>, submission: &mut Submission) -> PyResult<Vec<(u64, u64, u64)>> {
        py.detach(|| {
            self.runtime.block_on(async {
                while let Some(part) = submission.parts.get(submission.jobs.len()) {
                    match self.client.submit_request(part).await {
                        Ok(job) => submission.jobs.push(job),
                        Err(error) if error.is_connection_lost() => return Err(error),
                        Err(error) => {
                            for (job, ..) in std::mem::take(&mut submission.jobs) {
                                let _ = self.client.cancel(job).await;
                            }
                            submission.parts.clear();
                            return Err(error);
                        }
                    }
                }
                Ok(submission.jobs.clone())
            })
        })
        .map_err(error)
    }

    /// Stream the results of `job`'s tasks as they end.
    fn watch(&self, py: Python<'_>, job: u64) -> PyResult<Watch> {
        let responses = py
            .detach(|| self.runtime.block_on(self.client.watch(job)))
            .map_err(error)?;
        Ok(Watch {
            responses: Some(responses),
        })
    }

    /// The next results of a watch: a list of dicts, or `None` once every task is final. A
    /// dict with `state` `"unrunnable"` (and `reason`) says a queued task of the job (and those
    /// that need the same) can run nowhere; the task stays queued.
    /// `timeout` (seconds) bounds the wait; an empty list when it passes.
    #[pyo3(signature = (watch, timeout = None))]
    fn next_results<'py>(
        &self,
        py: Python<'py>,
        watch: &mut Watch,
        timeout: Option<f64>,
    ) -> PyResult<Option<Vec<Bound<'py, PyDict>>>> {
        let Some(responses) = watch.responses.as_mut() else {
            return Ok(None);
        };
        let next = py.detach(|| {
            self.runtime.block_on(async {
                match timeout {
                    Some(seconds) => {
                        tokio::time::timeout(Duration::from_secs_f64(seconds), responses.next())
                            .await
                            .ok()
                    }
                    None => Some(responses.next().await),
                }
            })
        });
        let results = match next {
            None => return Ok(Some(Vec::new())),
            Some(Ok(Some(Response::Results(results)))) => results,
            Some(Ok(Some(Response::Unrunnable { task, reason }))) => {
                let dict = PyDict::new(py);
                dict.set_item("task", task)?;
                dict.set_item("state", "unrunnable")?;
                dict.set_item("reason", reason)?;
                return Ok(Some(vec![dict]));
            }
            Some(Ok(Some(Response::Done(_)))) | Some(Ok(None)) => {
                watch.responses = None;
                return Ok(None);
            }
            Some(Ok(Some(other))) => {
                return Err(PyRuntimeError::new_err(format!(
                    "unexpected answer to a watch: {other:?}"
                )));
            }
            Some(Err(e)) => {
                watch.responses = None;
                return Err(error(e));
            }
        };
        let dicts: PyResult<Vec<_>> = results.iter().map(|r| result_dict(py, r)).collect();
        dicts.map(Some)
    }

    /// Cancel these tasks (running ones are stopped); returns how many were canceled.
    fn cancel_tasks(&self, py: Python<'_>, tasks: Vec<u64>) -> PyResult<u64> {
        py.detach(|| self.runtime.block_on(self.client.cancel_tasks(tasks)))
            .map_err(error)
    }

    /// Live workers and the slots they have: `(workers, slots)`.
    fn workers(&self, py: Python<'_>) -> PyResult<(u64, u64)> {
        let status = py
            .detach(|| self.runtime.block_on(self.client.status()))
            .map_err(error)?;
        let slots = status.workers.iter().map(|w| u64::from(w.slots)).sum();
        Ok((status.workers.len() as u64, slots))
    }
}

fn result_dict<'py>(py: Python<'py>, result: &TaskResult) -> PyResult<Bound<'py, PyDict>> {
    let dict = PyDict::new(py);
    dict.set_item("task", result.task)?;
    dict.set_item("state", format!("{:?}", result.state).to_lowercase())?;
    dict.set_item("attempts", result.attempts)?;
    match &result.outcome {
        Outcome::Function {
            ok,
            value,
            stdout,
            stderr,
        } => {
            dict.set_item("kind", "function")?;
            dict.set_item("ok", *ok)?;
            dict.set_item("value", PyBytes::new(py, value))?;
            dict.set_item("stdout", PyBytes::new(py, stdout))?;
            dict.set_item("stderr", PyBytes::new(py, stderr))?;
        }
        Outcome::Exited {
            code,
            stdout,
            stderr,
        } => {
            dict.set_item("kind", "exited")?;
            dict.set_item("code", *code)?;
            dict.set_item("stdout", PyBytes::new(py, stdout))?;
            dict.set_item("stderr", PyBytes::new(py, stderr))?;
        }
        Outcome::Returned { output } => {
            dict.set_item("kind", "returned")?;
            dict.set_item("value", PyBytes::new(py, output))?;
        }
        Outcome::Error { message } => {
            dict.set_item("kind", "error")?;
            dict.set_item("message", message)?;
        }
    }
    Ok(dict)
}

#[pymodule]
fn _native(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add_class::<Connection>()?;
    m.add_class::<Watch>()?;
    m.add_class::<Submission>()?;
    m.add("PROTOCOL_VERSION", weir_client::proto::PROTOCOL_VERSION)?;
    m.add("MAX_REQUEST", weir_client::proto::MAX_FRAME)?;
    m.add("RequestTooLarge", m.py().get_type::<RequestTooLarge>())?;
    Ok(())
}
