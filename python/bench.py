"""Python function tasks per second: `identity` calls on a local cluster (default 2 workers x 2
slots), end to end from `map` to the last result, and the runner's own cost per task.

    PATH=target/release:$PATH python python/bench.py [--tasks 10000] [--workers 2] [--slots 2]
"""

import argparse
import time

import weir


def identity(x):
    return x


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--tasks", type=int, default=10_000)
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--slots", type=int, default=2)
    parser.add_argument("--runs", type=int, default=3)
    args = parser.parse_args()
    with weir.LocalCluster(workers=args.workers, slots=args.slots) as cluster, \
            weir.Client(cluster) as client:
        client.gather(client.map(identity, range(100)))  # runners started, function sent
        for _ in range(args.runs):
            started = time.perf_counter()
            futures = client.map(identity, range(args.tasks))
            results = client.gather(futures)
            elapsed = time.perf_counter() - started
            assert results == list(range(args.tasks))
            print(f"{args.tasks} identity tasks, {args.workers} x {args.slots}: "
                  f"{elapsed:.2f} s, {args.tasks / elapsed:,.0f} tasks/s")
    # The runner alone: frames over a pipe, no scheduler (what a slot costs per task).
    import subprocess
    import struct
    import sys
    import cloudpickle
    from weir.runner import function_payload
    runner = subprocess.Popen([sys.executable, "-m", "weir.runner"], stdin=subprocess.PIPE,
                              stdout=subprocess.PIPE)
    payload = function_payload(identity)
    key = b"k" * 32

    def send(kind, body):
        frame = kind + key + body
        runner.stdin.write(struct.pack("<I", len(frame)) + frame)
        runner.stdin.flush()

    def reply():
        (length,) = struct.unpack("<I", runner.stdout.read(4))
        return runner.stdout.read(length)

    send(b"F", payload)
    n = 20_000
    started = time.perf_counter()
    for i in range(n):
        send(b"T", cloudpickle.dumps(((i,), {})))
        reply()
    elapsed = time.perf_counter() - started
    runner.stdin.close()
    runner.wait()
    print(f"runner alone: {elapsed / n * 1e6:.0f} µs per task (pickle, pipe both ways, call)")


if __name__ == "__main__":
    main()
