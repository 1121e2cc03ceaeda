"""The function runner a weir worker starts, one per slot: `python -m weir.runner`.

It reads frames from the worker on stdin and answers on stdout (the protocol is described in
the worker's `src/worker/functions.rs`). Before the first task it moves those two aside and
points fds 0-2 elsewhere: fd 0 at /dev/null, fds 1 and 2 at files emptied before each task,
so what a task prints (from Python or from a subprocess) is captured apart from the protocol.
"""

import os
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


def main():
    worker = os.environ.get("WEIR_WORKER_NAME", "(unknown)")
    # The protocol keeps the original stdin/stdout; the task sees /dev/null and capture files.
    proto_in = os.fdopen(os.dup(0), "rb", buffering=0)
    proto_out = os.fdopen(os.dup(1), "wb", buffering=0)
    devnull = os.open(os.devnull, os.O_RDONLY)
    os.dup2(devnull, 0)
    out_capture = tempfile.TemporaryFile()
    err_capture = tempfile.TemporaryFile()
    os.dup2(out_capture.fileno(), 1)
    os.dup2(err_capture.fileno(), 2)
    sys.stdin = open(os.devnull)
    functions = {}
    while True:
        frame = _read_frame(proto_in)
        if frame is None:
            return
        kind, key, body = frame[:1], frame[1:33], frame[33:]
        if kind == b"F":
            functions[key] = _load_function(body, worker)
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
        try:
            value = function(*args, **kwargs)
            status = 0
        except BaseException as e:  # noqa: BLE001 - the task's exception goes to its future
            status = 1
            value = (e, traceback.format_exc())
        sys.stdout.flush()
        sys.stderr.flush()
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
