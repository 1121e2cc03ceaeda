"""The function runner a weir worker starts, one per slot: `python -m weir.runner`.

It reads frames from the worker on stdin and answers on stdout (the protocol is described in
the worker's `src/worker/functions.rs`). Before the first task it moves those two aside and
points fds 0-2 elsewhere: fd 0 at /dev/null, fds 1 and 2 at files emptied before each task,
so what a task prints (from Python or from a subprocess) is captured apart from the protocol.
"""

import collections
import os
import signal
import struct
import sys
import tempfile
import traceback

try:
    import cloudpickle
except ImportError as e:  # pragma: no cover - reported to the worker as the runner's end
    sys.stderr.write(f"weir.runner: cloudpickle is not installed for {sys.executable}: {e}\n")
    sys.exit(3)

# What a task may print and still have it all sent back (the rest is cut, and said so).
OUTPUT_LIMIT = 1 << 20
# Functions kept, oldest dropped first: the worker drops them in the same order (it sends each
# once per runner, and again once dropped). Must match KEEP_FUNCTIONS in src/worker/functions.rs.
KEEP_FUNCTIONS = 8
MAGIC = b"WEIRFN1\n"


def _read_exact(stream, n):
    data = bytearray()
    while len(data) < n:
        chunk = stream.read(n - len(data))
        if not chunk:
            return None
        data += chunk
    return bytes(data)


def _read_frame(stream):
    head = _read_exact(stream, 4)
    if head is None:
        return None
    (length,) = struct.unpack("<I", head)
    return _read_exact(stream, length)


def _write_reply(stream, status, stdout, stderr, value):
    body = (
        b"R"
        + bytes([status])
        + struct.pack("<I", len(stdout))
        + stdout
        + struct.pack("<I", len(stderr))
        + stderr
        + value
    )
    stream.write(struct.pack("<I", len(body)) + body)
    stream.flush()


def _versions():
    return {
        "python": "%d.%d" % sys.version_info[:2],
        "cloudpickle": cloudpickle.__version__,
    }


def function_payload(fn):
    """What the client sends for `fn`: the versions it was pickled with, then the pickle
    (read back by `_load_function`, which refuses other versions)."""
    import json

    return MAGIC + json.dumps(_versions()).encode() + b"\n" + cloudpickle.dumps(fn)


def _load_function(payload, worker):
    """The function in a payload the client made (see weir.Client), or why it cannot run here."""
    import json

    if not payload.startswith(MAGIC):
        return None, "not a weir function payload"
    header, _, pickled = payload[len(MAGIC):].partition(b"\n")
    theirs = json.loads(header)
    ours = _versions()
    for name in ("python", "cloudpickle"):
        if theirs.get(name) != ours[name]:
            return None, (
                f"{name} {theirs.get(name)} on the client but {ours[name]} on worker {worker} "
                f"({sys.executable}): use the same version on both"
            )
    try:
        return cloudpickle.loads(pickled), None
    except ModuleNotFoundError as e:
        return None, f"module {e.name!r} is missing on worker {worker} ({sys.executable}): {e}"
    except Exception as e:  # noqa: BLE001 - any unpickling failure is reported, not raised
        return None, f"cannot unpickle the function on worker {worker}: {e!r}"


def _take(capture):
    """What was written to a capture file since it was emptied (cut at OUTPUT_LIMIT)."""
    capture.flush()
    fd = capture.fileno()
    size = os.lseek(fd, 0, os.SEEK_END)
    os.lseek(fd, 0, os.SEEK_SET)
    data = os.read(fd, min(size, OUTPUT_LIMIT)) if size else b""
    if size > OUTPUT_LIMIT:
        data += b"\n[weir: output cut at %d of %d bytes]\n" % (OUTPUT_LIMIT, size)
    os.ftruncate(fd, 0)
    os.lseek(fd, 0, os.SEEK_SET)
    return data


_forked = False


def _note_fork():
    global _forked
    _forked = True


def _kill_leftovers():
    """Kill what a task started and left running in this runner's process group (a fork, a
    background subprocess), as a command task's leftovers are killed: it must not print into,
    or compete with, the next task."""
    me, group = os.getpid(), os.getpgid(0)
    for entry in os.listdir("/proc"):
        if not entry.isdigit() or int(entry) == me:
            continue
        try:
            with open(f"/proc/{entry}/stat") as stat:
                fields = stat.read().rsplit(")", 1)[1].split()
            if int(fields[2]) == group:
                os.kill(int(entry), signal.SIGKILL)
        except (OSError, IndexError, ValueError):
            pass
    # Reap what was killed (and what ended by itself).
    while True:
        try:
            pid, _ = os.waitpid(-1, os.WNOHANG)
        except ChildProcessError:
            break
        if pid == 0:
            break


def _has_children():
    """Whether this runner has a child left (`subprocess` forks without the at-fork hooks)."""
    pid = os.getpid()
    try:
        with open(f"/proc/self/task/{pid}/children") as children:
            return bool(children.read().strip())
    except OSError:
        return True  # cannot tell: look


def main():
    worker = os.environ.get("WEIR_WORKER_NAME", "(unknown)")
    # The protocol keeps the original stdin/stdout; the task sees /dev/null and capture files.
    proto_in = os.fdopen(os.dup(0), "rb", buffering=0)
    proto_out = os.fdopen(os.dup(1), "wb", buffering=0)
    protocol_fds = (proto_in.fileno(), proto_out.fileno())
    # A child a task forks must not hold the protocol open (the worker would wait on it).
    os.register_at_fork(after_in_child=lambda: [os.close(fd) for fd in protocol_fds],
                        after_in_parent=_note_fork)
    devnull = os.open(os.devnull, os.O_RDONLY)
    out_capture = tempfile.TemporaryFile()
    err_capture = tempfile.TemporaryFile()
    functions = collections.OrderedDict()
    global _forked
    while True:
        # Each task starts with fds 0-2 as the first did, whatever the last one closed.
        os.dup2(devnull, 0)
        os.dup2(out_capture.fileno(), 1)
        os.dup2(err_capture.fileno(), 2)
        sys.stdin = open(os.devnull)
        frame = _read_frame(proto_in)
        if frame is None:
            return
        kind, key, body = frame[:1], frame[1:33], frame[33:]
        if kind == b"F":
            functions[key] = _load_function(body, worker)
            while len(functions) > KEEP_FUNCTIONS:
                functions.popitem(last=False)
            continue
        if kind != b"T":
            _write_reply(proto_out, 2, b"", b"", b"weir.runner: unknown frame %r" % kind)
            continue
        function, why = functions.get(key, (None, "the function never arrived"))
        if function is None:
            _write_reply(proto_out, 2, b"", b"", why.encode())
            continue
        try:
            args, kwargs = cloudpickle.loads(body)
        except ModuleNotFoundError as e:
            message = f"module {e.name!r} is missing on worker {worker}: {e}"
            _write_reply(proto_out, 2, b"", b"", message.encode())
            continue
        except Exception as e:  # noqa: BLE001 - the task fails, saying why; the runner goes on
            message = f"cannot unpickle the task's arguments on worker {worker}: {e!r}"
            _write_reply(proto_out, 2, b"", b"", message.encode())
            continue
        try:
            value = function(*args, **kwargs)
            status = 0
        except BaseException as e:  # noqa: BLE001 - the task's exception goes to its future
            status = 1
            value = (e, traceback.format_exc())
        try:
            sys.stdout.flush()
            sys.stderr.flush()
        except OSError:
            pass  # the task closed them
        if _forked or _has_children():
            _kill_leftovers()
            _forked = False
        try:
            pickled = cloudpickle.dumps(value)
        except Exception as e:  # noqa: BLE001 - an unpicklable result fails its task
            what = "result" if status == 0 else "exception"
            status = 1
            error = RuntimeError(f"the task's {what} cannot be pickled: {e!r}")
            pickled = cloudpickle.dumps((error, traceback.format_exc()))
        _write_reply(proto_out, status, _take(out_capture), _take(err_capture), pickled)


if __name__ == "__main__":
    main()
