"""Python function tasks per second against what the runners alone do, in one run.

End to end: `identity` calls through `client.map` on a local cluster (default 2 workers x 2
slots), from the `map` call to the last result in Python. The runners alone: as many runner
processes as slots, each fed the same calls over its pipes by a process of its own (pickle,
frame, call, reply: what a slot costs per task with no scheduler, worker or network), all at
once. The two are measured alternately, `--runs` times each, and each pair's ratio printed.

    PATH=target/release:$PATH python python/bench.py [--tasks 10000] [--workers 2] [--slots 2]
"""

import argparse
import multiprocessing
import struct
import subprocess
import sys
import time

import weir


def identity(x):
    return x


def drive_runner(tasks, barrier):
    """Feed one runner `tasks` calls, one at a time; return (start, end) on the monotonic clock
    (shared by the processes of this machine)."""
    import cloudpickle
    from weir.runner import function_payload

    runner = subprocess.Popen([sys.executable, "-m", "weir.runner"], stdin=subprocess.PIPE,
                              stdout=subprocess.PIPE)
    key = b"k" * 32

    def send(kind, body):
        frame = kind + key + body
        runner.stdin.write(struct.pack("<I", len(frame)) + frame)
        runner.stdin.flush()

    def reply():
        (length,) = struct.unpack("<I", runner.stdout.read(4))
        return runner.stdout.read(length)

    send(b"F", function_payload(identity))
    send(b"T", cloudpickle.dumps(((0,), {})))  # warm-up: the function loaded
    reply()
    barrier.wait()
    started = time.perf_counter()
    for i in range(tasks):
        send(b"T", cloudpickle.dumps(((i,), {})))
        reply()
    ended = time.perf_counter()
    runner.stdin.close()
    runner.wait()
    return started, ended


def runners_alone(tasks, runners):
    """Tasks per second of `runners` runners fed at once, `tasks` calls in all."""
    context = multiprocessing.get_context("spawn")
    with context.Manager() as manager:
        barrier = manager.Barrier(runners)
        shares = [tasks // runners + (i < tasks % runners) for i in range(runners)]
        with context.Pool(runners) as pool:
            spans = pool.starmap(drive_runner, [(share, barrier) for share in shares])
    started = min(s for s, _ in spans)
    ended = max(e for _, e in spans)
    return tasks / (ended - started)


def end_to_end(client, tasks):
    started = time.perf_counter()
    results = client.gather(client.map(identity, range(tasks)))
    elapsed = time.perf_counter() - started
    assert results == list(range(tasks))
    return tasks / elapsed


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--tasks", type=int, default=10_000)
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--slots", type=int, default=2)
    parser.add_argument("--runs", type=int, default=3)
    args = parser.parse_args()
    slots = args.workers * args.slots
    print(f"{args.tasks} identity tasks; {args.workers} x {args.slots} (end to end) against "
          f"{slots} runners fed at once (alone)")
    print("| run | weir end to end, tasks/s | runners alone, tasks/s | ratio |")
    print("|---:|---:|---:|---:|")
    with weir.LocalCluster(workers=args.workers, slots=args.slots) as cluster, \
            weir.Client(cluster) as client:
        client.gather(client.map(identity, range(100)))  # runners started, function sent
        for run in range(1, args.runs + 1):
            weir_rate = end_to_end(client, args.tasks)
            alone = runners_alone(args.tasks, slots)
            print(f"| {run} | {weir_rate:,.0f} | {alone:,.0f} | {weir_rate / alone:.2f} |",
                  flush=True)


if __name__ == "__main__":
    main()
