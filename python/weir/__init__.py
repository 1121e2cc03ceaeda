"""weir from Python: submit functions and commands to a weir cluster and get futures.

    import weir

    with weir.LocalCluster(workers=2, slots=2) as cluster, weir.Client(cluster) as client:
        future = client.submit(pow, 2, 10)
        print(future.result())                          # 1024
        print(client.gather(client.map(abs, [-1, -2])))  # [1, 2]

Functions run in a long-lived runner process per worker slot (`python -m weir.runner`, with the
client's interpreter unless `runner=` says otherwise), not a process per task. Futures are
`concurrent.futures.Future`s: `weir.wait` and `weir.as_completed` are the standard ones.
"""

import atexit
import concurrent.futures as _cf
import functools
import os
import shutil
import subprocess
import sys
import tempfile
import threading
import time
import weakref

import cloudpickle

from . import _native

__all__ = [
    "Client",
    "Future",
    "LocalCluster",
    "MAX_REQUEST",
    "RequestTooLarge",
    "TaskError",
    "Unrunnable",
    "as_completed",
    "wait",
    "FIRST_COMPLETED",
    "FIRST_EXCEPTION",
    "ALL_COMPLETED",
]

RequestTooLarge = _native.RequestTooLarge
# Most bytes of one request to the scheduler (a submission: the pickled function and arguments).
MAX_REQUEST = _native.MAX_REQUEST

as_completed = _cf.as_completed
wait = _cf.wait
FIRST_COMPLETED = _cf.FIRST_COMPLETED
FIRST_EXCEPTION = _cf.FIRST_EXCEPTION
ALL_COMPLETED = _cf.ALL_COMPLETED


class TaskError(Exception):
    """A task did not return: it timed out, its worker was lost past its retries, its runner
    could not run it (a module missing there, another Python version), or it was killed."""


class Unrunnable(TaskError):
    """No live worker could ever run the task, and no worker manager could start one that
    would (the scheduler's reason, as `weir explain` gives it, is in the message). Its job's
    tasks still queued are canceled: nothing runs that no future waits for."""


class Future(_cf.Future):
    """The result of one task. `stdout` and `stderr` hold what the task printed once it is done."""

    def __init__(self, client, task):
        super().__init__()
        self._client = client
        self.task = task
        self.stdout = b""
        self.stderr = b""

    def cancel(self):
        """Cancel the task, stopping it if it runs. False if it is done already."""
        if self.done():
            return False
        self._client.cancel([self])
        return True

    def _cancel_here(self):
        # Cancelled *and notified*: weir.wait and weir.as_completed count it as done.
        with self._condition:
            if self.done():
                return
            super().cancel()
            self.set_running_or_notify_cancel()

    def __repr__(self):
        return f"<weir.Future task={self.task} state={self._state}>"


def _find_access_file(access_file):
    if access_file is None:
        return os.environ.get("WEIR_ACCESS_FILE", os.path.join(".weir", "access.json"))
    if isinstance(access_file, LocalCluster):
        return access_file.access_file
    return os.fspath(access_file)


# How long a watcher thread waits for results before it looks whether its client was closed.
_WATCH_POLL = 0.2

# Clients not closed yet: closed when the interpreter exits, before it stops its threads.
_open_clients = weakref.WeakSet()


@atexit.register
def _close_open_clients():
    for client in list(_open_clients):
        client.close()


class Client:
    """A connection to a weir scheduler.

    `access_file`: the file the scheduler wrote (default `$WEIR_ACCESS_FILE` or
    `.weir/access.json`), or a `LocalCluster`.

    `timeout`: seconds to keep trying while the scheduler may be starting or restarting (it
    holds its lock, or this machine cannot tell) but does not answer. A scheduler known to be
    gone (its lock free, its process gone), or no access file and no scheduler at all, raises
    `ConnectionError` at once, saying which.
    """

    def __init__(self, access_file=None, timeout=30.0, reconnect_timeout=60.0):
        self._access_file = _find_access_file(access_file)
        self._timeout = timeout
        # A scheduler restarted on its journal (kill -9, a new machine) is waited for this long:
        # futures resolve from where it left off, results seen twice count once.
        self._reconnect_timeout = reconnect_timeout
        self._conn = _native.Connection(self._access_file, timeout)
        self._closed = False
        self._watchers = []
        _open_clients.add(self)

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()

    def close(self):
        """Stop watching: futures not done yet fail with `TaskError` (their tasks go on). The
        watcher threads end within a fraction of a second: none is left inside the native
        library when the interpreter exits (a thread there then aborts the process)."""
        self._closed = True
        for thread in self._watchers:
            if thread is not threading.current_thread():
                thread.join()
        self._watchers = []

    # Submitting

    def submit(self, fn, *args, caps=None, env=None, timeout=None, retries=1, priority=0,
               runner=None, **kwargs):
        """Run `fn(*args, **kwargs)` on a worker; returns a `Future`."""
        return self._functions(fn, [(args, kwargs)], caps, env, timeout, retries, priority,
                               runner)[0]

    def map(self, fn, *iterables, caps=None, env=None, timeout=None, retries=1, priority=0,
            runner=None, **kwargs):
        """`fn(*items)` for each items of `zip(*iterables)`, as one job: a list of futures.
        Keyword arguments are the same for every task and go with the function, once per job
        (a large constant argument is sent once, not once per task).

        Tasks whose arguments add up to more than the scheduler takes in one request
        (`MAX_REQUEST`, 48 MiB pickled) go as several jobs, one after the other. One task's
        arguments, or the function with its keyword arguments, over it raise `RequestTooLarge`
        (a `ValueError`) and nothing is submitted."""
        if kwargs:
            fn = functools.partial(fn, **kwargs)
        calls = [(items, {}) for items in zip(*iterables)]
        if not calls:
            return []
        return self._functions(fn, calls, caps, env, timeout, retries, priority, runner)

    def submit_command(self, argv, stdin=b"", caps=None, env=None, timeout=None, retries=1,
                       priority=0, environ=None):
        """Run a command on a worker; its future's result is a `subprocess.CompletedProcess`
        (a non-zero exit is a result, not an error, as with `subprocess.run`)."""
        argv = [os.fspath(a) for a in argv]
        future = self._submit("command", argv, b"", [bytes(stdin)], caps, env, timeout,
                              retries, priority, list((environ or {}).items()))[0]
        future._argv = argv
        return future

    def _functions(self, fn, calls, caps, env, timeout, retries, priority, runner):
        # Imported here: `python -m weir.runner` imports this package first.
        from .runner import function_payload

        payload = function_payload(fn)
        inputs = [cloudpickle.dumps(call) for call in calls]
        program = list(runner) if runner else [sys.executable, "-m", "weir.runner"]
        return self._submit("function", program, payload, inputs, caps, env, timeout, retries,
                            priority, [])

    def _submit(self, kind, program, payload, inputs, caps, env, timeout, retries, priority,
                environ):
        if self._closed:
            raise RuntimeError("this client is closed")
        caps = sorted((str(k), int(v)) for k, v in (caps or {}).items())
        envs = [env] if isinstance(env, str) else list(env or [])
        timeout_ms = 0 if timeout is None else max(1, int(timeout * 1000))
        # One job, or several in a row when the inputs are over the scheduler's limit on one
        # request (MAX_REQUEST); RequestTooLarge (a ValueError) when one input alone is.
        submission = _native.Connection.submission(kind, program, payload, inputs, environ,
                                                   caps, envs, timeout_ms, int(retries),
                                                   int(priority))
        jobs = self._send(submission)
        futures = []
        for job, first, count in jobs:
            by_task = {first + i: Future(self, first + i) for i in range(count)}
            futures.extend(by_task.values())
            thread = threading.Thread(target=self._watch, args=(job, by_task), daemon=True,
                                      name=f"weir-job-{job}")
            thread.start()
            self._watchers = [t for t in self._watchers if t.is_alive()] + [thread]
        return futures

    def _send(self, submission):
        """Send a submission, and again on a new connection when the connection is lost before
        it is answered (the scheduler restarting, or another replica taking over): its request
        ids make that safe (a part already taken is answered with its job, not made twice)."""
        lost_since = None
        while True:
            conn = self._conn
            try:
                return conn.send(submission)
            except ConnectionError:
                lost_since = lost_since or time.monotonic()
                if time.monotonic() - lost_since > self._reconnect_timeout:
                    raise
                self._reconnect(conn)

    def _reconnect(self, lost):
        """After a pause, a new connection in place of `lost` (unless another thread made one
        already): to whichever scheduler answers now (a restarted one, or the replica that
        leads now). A failure is left for the caller's next try."""
        time.sleep(0.1)
        try:
            if lost is self._conn:
                self._conn = _native.Connection(self._access_file, 1.0)
        except ConnectionError:
            pass

    def _watch(self, job, by_task):
        """Resolve each future as its task ends (one thread per job). A lost connection is
        made again (the scheduler may be restarting on its journal) and the job watched anew:
        the results it sends again resolve nothing twice."""
        lost_since = None
        while True:
            try:
                conn = self._conn
                watch = conn.watch(job)
                while True:
                    # Bounded, so that `close` (and the interpreter's exit) is heard.
                    results = conn.next_results(watch, _WATCH_POLL)
                    if results is None:
                        break
                    if not results and self._closed:
                        self._fail(job, by_task, "the client was closed")
                        return
                    lost_since = None
                    for result in results:
                        if result["state"] == "unrunnable":
                            self._unrunnable(conn, by_task, result)
                            continue
                        future = by_task.get(result["task"])
                        if future is not None:
                            _resolve(future, result)
                break
            except ConnectionError as e:
                lost_since = lost_since or time.monotonic()
                if self._closed or time.monotonic() - lost_since > self._reconnect_timeout:
                    self._fail(job, by_task, e)
                    return
                self._reconnect(conn)
            except Exception as e:  # noqa: BLE001 - every waiting future learns why
                self._fail(job, by_task, e)
                return
        for future in by_task.values():
            _settle(future, error=TaskError(f"job {job} ended without a result for this task"))

    @staticmethod
    def _unrunnable(conn, by_task, result):
        """The scheduler says a queued task of this job can run nowhere: every future of the
        job not done yet fails saying why (one submission: its tasks all need the same), and
        their tasks are canceled."""
        task = result["task"]
        error = Unrunnable(f"no worker or manager can run task {task}: {result['reason']}; "
                           f"see `weir explain {task}`")
        waiting = [f for f in by_task.values() if not f.done()]
        for future in waiting:
            _settle(future, error=error)
        if waiting:
            conn.cancel_tasks([f.task for f in waiting])

    @staticmethod
    def _fail(job, by_task, error):
        error = TaskError(f"lost the results of job {job}: {error}")
        for future in by_task.values():
            _settle(future, error=error)

    # Waiting and cancelling

    def gather(self, futures, progress=False):
        """The results of `futures`, in order; the first task exception is raised.
        `progress=True` prints a progress line to stderr as tasks end."""
        futures = list(futures)
        if progress and futures:
            total = len(futures)
            for done, _ in enumerate(_cf.as_completed(futures), 1):
                sys.stderr.write(f"\rweir: {done}/{total} tasks done")
                sys.stderr.flush()
            sys.stderr.write("\n")
        return [f.result() for f in futures]

    def cancel(self, futures):
        """Cancel these futures' tasks, stopping those that run."""
        futures = [f for f in futures if not f.done()]
        if futures:
            self._conn.cancel_tasks([f.task for f in futures])
        for future in futures:
            future._cancel_here()

    def workers(self):
        """`(live workers, their slots)`."""
        return self._conn.workers()


def _settle(future, result=None, error=None):
    if future.done():
        return
    try:
        if error is not None:
            future.set_exception(error)
        else:
            future.set_result(result)
    except _cf.InvalidStateError:
        pass  # canceled meanwhile


def _resolve(future, result):
    if future.done():
        return  # canceled here, or a second result after a scheduler restart
    if result["state"] == "canceled":
        future._cancel_here()
        return
    kind = result["kind"]
    if kind == "function":
        future.stdout, future.stderr = result["stdout"], result["stderr"]
        try:
            value = cloudpickle.loads(result["value"])
        except Exception as e:  # noqa: BLE001 - this future fails, not the others of its job
            what = "result" if result["ok"] else "exception"
            _settle(future, error=TaskError(
                f"the task's {what} came back but cannot be unpickled here: {e!r}"))
            return
        if result["ok"]:
            _settle(future, value)
            return
        error, remote = value
        if not isinstance(error, Exception):
            # SystemExit, KeyboardInterrupt...: the task's, not this program's.
            error = TaskError(f"the task raised {type(error).__name__}({error})")
        if hasattr(error, "add_note"):
            error.add_note("Traceback on the worker:\n" + remote.rstrip())
        else:
            error.args = error.args + ("Traceback on the worker:\n" + remote,)
        _settle(future, error=error)
    elif kind == "exited":
        future.stdout, future.stderr = result["stdout"], result["stderr"]
        if result["code"] is None:
            _settle(future, error=TaskError("the command was killed by a signal"))
        else:
            done = subprocess.CompletedProcess(getattr(future, "_argv", []), result["code"],
                                               result["stdout"], result["stderr"])
            _settle(future, done)
    elif kind == "returned":
        _settle(future, result["value"])
    else:
        _settle(future, error=TaskError(result.get("message", "failed")))


def _executable(name):
    here = os.path.join(os.path.dirname(__file__), "bin", name)
    if os.access(here, os.X_OK):
        return here
    found = shutil.which(name)
    if found is None:
        raise FileNotFoundError(
            f"weir's `{name}` executable is not on PATH (build it with `cargo build --bins` "
            f"and put target/debug or target/release on PATH)")
    return found


class LocalCluster:
    """A scheduler and `workers` workers of `slots` slots each, as processes on this machine
    (loopback only), in a temporary directory; stopped on `close()` or leaving `with`.
    The executables come from beside the package (`weir/bin/`) or from PATH."""

    def __init__(self, workers=2, slots=2, worker_args=(), scheduler_args=(), timeout=30.0,
                 journal=False):
        self._dir = tempfile.mkdtemp(prefix="weir-local-")
        self.access_file = os.path.join(self._dir, "access.json")
        self._processes = []
        self.workers = {}
        self._log = open(os.path.join(self._dir, "cluster.log"), "ab")
        self._scheduler_argv = [
            _executable("scheduler"), "--listen", "quic://127.0.0.1:0", "--access-file",
            self.access_file, *scheduler_args]
        if journal:
            self._scheduler_argv += ["--journal", os.path.join(self._dir, "journal")]
        try:
            self.scheduler = self._start_scheduler(timeout)
            for i in range(workers):
                self.add_worker(f"local-{i}", slots, worker_args)
            self.wait_workers(workers, timeout)
        except BaseException:
            self.close()
            raise

    def _start_scheduler(self, timeout):
        scheduler = subprocess.Popen(self._scheduler_argv, cwd=self._dir, stdout=self._log,
                                     stderr=self._log)
        self._processes.insert(0, scheduler)
        deadline = time.monotonic() + timeout
        while not os.path.exists(self.access_file):
            if scheduler.poll() is not None:
                raise RuntimeError(f"the scheduler exited ({scheduler.returncode}); see "
                                   f"{self._log.name}")
            if time.monotonic() > deadline:
                raise TimeoutError("the scheduler did not start")
            time.sleep(0.01)
        return scheduler

    def kill_scheduler_and_restart(self, timeout=30.0):
        """`kill -9` the scheduler and start it again (on its journal, with `journal=True`);
        workers and clients reconnect through the access file it writes anew."""
        self.scheduler.kill()
        self.scheduler.wait()
        self._processes.remove(self.scheduler)
        os.remove(self.access_file)
        self.scheduler = self._start_scheduler(timeout)

    def wait_workers(self, count, timeout=30.0):
        """Until at least `count` workers are registered."""
        deadline = time.monotonic() + timeout
        with Client(self.access_file, timeout) as client:
            while client.workers()[0] < count:
                if time.monotonic() > deadline:
                    raise TimeoutError(f"{count} workers did not register; see {self._log.name}")
                time.sleep(0.01)

    def add_worker(self, name, slots=2, args=()):
        """Start one more worker (its process is `self.workers[name]`)."""
        process = subprocess.Popen(
            [_executable("worker"), "--access-file", self.access_file, "--name", name,
             "--slots", str(slots), *args],
            cwd=self._dir, stdout=self._log, stderr=self._log)
        self._processes.append(process)
        self.workers[name] = process
        return process

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()

    def close(self):
        """Stop the workers, then the scheduler (SIGTERM, then SIGKILL after 10 s)."""
        for process in reversed(self._processes):
            if process.poll() is None:
                process.terminate()
        for process in reversed(self._processes):
            try:
                process.wait(timeout=10)
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait()
        self._processes.clear()
        self._log.close()
        shutil.rmtree(self._dir, ignore_errors=True)
