import concurrent.futures
import os
import signal
import sys
import time

import cloudpickle
import pytest

import weir


def wait_for(condition, what, timeout=60):
    """Poll a condition on the real processes (not a sleep standing in for an event)."""
    deadline = time.monotonic() + timeout
    while not condition():
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.02)


def test_submit_and_map_of_10000_give_every_result_right(client):
    assert client.submit(pow, 2, 10).result(timeout=60) == 1024
    futures = client.map(lambda x, y: x * y, range(10_000), range(10_000))
    assert client.gather(futures) == [x * x for x in range(10_000)]
    assert len({f.task for f in futures}) == 10_000


def test_an_exception_is_raised_with_the_workers_traceback(client):
    def fails(x):
        print("printed before failing")
        raise KeyError(f"no {x}")

    future = client.submit(fails, "such key")
    with pytest.raises(KeyError, match="no such key") as raised:
        future.result(timeout=60)
    notes = "".join(getattr(raised.value, "__notes__", []))
    assert "Traceback on the worker" in notes and "in fails" in notes
    assert future.stdout == b"printed before failing\n"


def test_what_a_task_prints_is_captured_apart_from_its_result(client):
    def noisy():
        import subprocess
        print("x" * 100_000)
        subprocess.run(["sh", "-c", "echo from a subprocess; echo on stderr >&2"], check=True)
        return "result"

    future = client.submit(noisy)
    assert future.result(timeout=60) == "result"
    assert future.stdout.startswith(b"x" * 100_000)
    assert b"from a subprocess" in future.stdout
    assert future.stderr == b"on stderr\n"


def test_cancel_stops_a_running_function_and_its_runner(client, tmp_path):
    marker = tmp_path / "pid"

    def hangs(path):
        with open(path, "w") as f:
            f.write(str(os.getpid()))
        time.sleep(600)

    future = client.submit(hangs, str(marker))
    wait_for(lambda: marker.exists() and marker.read_text(), "the task to start")
    pid = int(marker.read_text())
    assert future.cancel()
    assert future.cancelled()
    with pytest.raises(concurrent.futures.CancelledError):
        future.result(timeout=1)

    def gone():
        try:
            os.kill(pid, 0)
            # A zombie until its parent (the worker) reaps it is gone too.
            with open(f"/proc/{pid}/stat") as stat:
                return stat.read().split(") ")[1].startswith("Z")
        except (ProcessLookupError, FileNotFoundError):
            return True

    wait_for(gone, "the canceled task's runner to be killed")
    # The slot runs the next task in a fresh runner.
    assert client.submit(os.getpid).result(timeout=60) != pid


def test_a_timeout_fails_the_task_and_the_next_one_runs(client):
    future = client.submit(time.sleep, 600, timeout=1)
    with pytest.raises(weir.TaskError, match="timed out"):
        future.result(timeout=60)
    assert client.submit(abs, -5).result(timeout=60) == 5


def test_caps_and_env_choose_the_worker(client):
    name = lambda _: os.environ["WEIR_WORKER_NAME"]  # noqa: E731
    on_gpu = client.map(name, range(8), caps={"gpu": 1})
    assert set(client.gather(on_gpu)) == {"special"}
    in_big = client.map(name, range(8), env="big")
    assert set(client.gather(in_big)) == {"special"}


def test_a_constant_argument_goes_with_the_function(client):
    # Once per job: 50 copies (400 MiB) would not fit in one submission (48 MiB at most).
    big = b"\x01" * (8 << 20)
    futures = client.map(lambda i, blob: i + len(blob), range(50), blob=big)
    assert client.gather(futures) == [i + len(big) for i in range(50)]


def test_a_cloudpickle_version_mismatch_is_refused_naming_both(client, monkeypatch):
    monkeypatch.setattr(cloudpickle, "__version__", "0.0.1")
    future = client.submit(abs, -1)
    with pytest.raises(weir.TaskError, match=r"cloudpickle 0\.0\.1 on the client but .* on worker"):
        future.result(timeout=60)


def test_a_module_missing_on_the_worker_names_it_and_the_worker(client, tmp_path, monkeypatch):
    (tmp_path / "only_here.py").write_text("def double(x):\n    return 2 * x\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    import only_here

    future = client.submit(only_here.double, 4)
    with pytest.raises(weir.TaskError, match=r"module 'only_here' is missing on worker \S+"):
        future.result(timeout=60)
    sys.modules.pop("only_here", None)


def test_as_completed_and_wait_are_the_standard_ones(client):
    futures = client.map(abs, [-1, -2, -3])
    assert sorted(f.result() for f in weir.as_completed(futures, timeout=60)) == [1, 2, 3]
    done, not_done = weir.wait(futures, timeout=60)
    assert len(done) == 3 and not not_done


def test_a_command_task_gives_a_completed_process(client):
    future = client.submit_command(["sh", "-c", "cat; echo err >&2; exit 3"], stdin=b"in\n")
    done = future.result(timeout=60)
    assert (done.returncode, done.stdout, done.stderr) == (3, b"in\n", b"err\n")


def test_a_worker_killed_mid_map_loses_no_future(tmp_path):
    def slow(x):
        time.sleep(0.02)
        return x * 2

    with weir.LocalCluster(workers=2, slots=2) as cluster, weir.Client(cluster) as client:
        futures = client.map(slow, range(400))
        wait_for(lambda: sum(f.done() for f in futures) >= 50, "the first results")
        victim = cluster.workers["local-0"]
        victim.send_signal(signal.SIGKILL)
        victim.wait()
        # Every future resolves, once, with its own result (the survivor runs the rest).
        assert client.gather(futures) == [x * 2 for x in range(400)]


def test_max_tasks_per_runner_replaces_the_runner():
    with weir.LocalCluster(workers=1, slots=1,
                           worker_args=["--max-tasks-per-runner", "2"]) as cluster, \
            weir.Client(cluster) as client:
        pids = client.gather(client.map(lambda _: os.getpid(), range(6)))
        # One slot: tasks run one after another, two per runner.
        assert len(set(pids)) == 3
        assert pids[0] == pids[1] and pids[2] == pids[3] and pids[4] == pids[5]


def test_a_scheduler_killed_and_restarted_mid_map_loses_no_future():
    def slow(x):
        time.sleep(0.01)
        return -x

    with weir.LocalCluster(workers=2, slots=2, journal=True) as cluster, \
            weir.Client(cluster) as client:
        futures = client.map(slow, range(600))
        wait_for(lambda: sum(f.done() for f in futures) >= 50, "the first results")
        cluster.kill_scheduler_and_restart()
        # The client watches the job again on the restarted scheduler; what it had is not
        # resolved twice, what ran meanwhile is reported by the workers when they rejoin.
        assert client.gather(futures) == [-x for x in range(600)]


def test_a_client_fails_at_once_without_a_scheduler_and_when_its_scheduler_is_gone(tmp_path):
    # Both would wait out Client's 30 s timeout if they waited at all.
    started = time.monotonic()
    with pytest.raises(ConnectionError, match="cannot read the access file"):
        weir.Client(str(tmp_path / "nowhere.json"))
    with weir.LocalCluster(workers=0) as cluster:
        pid = cluster.scheduler.pid
        cluster.scheduler.kill()
        cluster.scheduler.wait()
        with pytest.raises(ConnectionError, match=f"is not running \\(its process {pid} is gone"):
            weir.Client(cluster)
    assert time.monotonic() - started < 25


def test_a_task_nothing_can_run_fails_its_future_saying_why(client):
    # The cluster's workers have at most gpu=1, and no manager could start one with more.
    futures = client.map(abs, [1, 2], caps={"gpu": 5})
    for future in futures:
        with pytest.raises(weir.Unrunnable, match="no worker or manager can run task .*gpu=1 \\(needs 5\\)"):
            future.result(timeout=60)
    # Its tasks were canceled: the next submission runs.
    assert client.submit(abs, -7).result(timeout=60) == 7


def test_gather_shows_progress_on_request(client, capsys):
    assert client.gather(client.map(abs, [-1, -2, -3]), progress=True) == [1, 2, 3]
    assert "3/3 tasks done" in capsys.readouterr().err


def test_cancelled_futures_count_as_done_for_wait(client, tmp_path):
    marker = tmp_path / "started"

    def hangs(path):
        open(path, "w").close()
        time.sleep(600)

    running = client.submit(hangs, str(marker))
    wait_for(marker.exists, "the task to start")
    assert running.cancel()
    done, not_done = weir.wait([running], timeout=30)
    assert done == {running} and not not_done


def test_one_result_that_cannot_be_unpickled_fails_only_its_future(client):
    class NeedsTwo(Exception):
        def __init__(self, a, b):
            super().__init__(f"{a}/{b}")

    def task(i):
        if i == 0:
            raise NeedsTwo(1, 2)
        return i

    futures = client.map(task, range(4))
    with pytest.raises(weir.TaskError, match="cannot be unpickled"):
        futures[0].result(timeout=60)
    assert [f.result(timeout=60) for f in futures[1:]] == [1, 2, 3]


def test_a_task_that_exits_does_not_end_the_client(client):
    future = client.submit(sys.exit, 0)
    with pytest.raises(weir.TaskError, match="SystemExit"):
        future.result(timeout=60)


def test_a_result_too_big_to_send_fails_its_task_and_the_worker_goes_on(client):
    future = client.submit(lambda: b"x" * (40 << 20))
    with pytest.raises(weir.TaskError, match="at most"):
        future.result(timeout=120)
    assert client.submit(abs, -3).result(timeout=60) == 3


def test_what_a_task_leaves_behind_does_not_reach_the_next_one():
    def leaves_a_child_and_closes_stdout():
        if os.fork() == 0:
            time.sleep(0.5)
            print("late output from a forked child", flush=True)
            os._exit(0)
        os.close(1)
        return os.getpid()

    def prints():
        time.sleep(1)
        print("mine")
        return os.getpid()

    # One slot: the second task runs in the same runner as the first.
    with weir.LocalCluster(workers=1, slots=1) as cluster, weir.Client(cluster) as client:
        pid = client.submit(leaves_a_child_and_closes_stdout).result(timeout=60)
        future = client.submit(prints)
        assert future.result(timeout=60) == pid
        assert future.stdout == b"mine\n"


def test_a_runner_killed_while_a_forked_child_holds_its_pipe_fails_at_once(client):
    def dies_leaving_a_child():
        if os.fork() == 0:
            time.sleep(600)
            os._exit(0)
        os._exit(3)

    future = client.submit(dies_leaving_a_child, timeout=300)
    with pytest.raises(weir.TaskError, match="ended"):
        future.result(timeout=60)


def test_a_runner_keeps_a_bounded_set_of_functions_and_gets_old_ones_again():
    # One slot, one runner: more functions than it keeps (8), then the first ones again.
    with weir.LocalCluster(workers=1, slots=1) as cluster, weir.Client(cluster) as client:
        functions = [(lambda k: (lambda x: x + k))(k) for k in range(12)]
        assert [client.submit(f, 100).result(timeout=60) for f in functions] == \
            [100 + k for k in range(12)]
        assert [client.submit(f, 0).result(timeout=60) for f in functions[:3]] == [0, 1, 2]


# The scheduler's limit on one request (proto::MAX_FRAME).
LIMIT = 48 << 20


def test_a_map_over_the_request_limit_goes_as_several_jobs(client):
    size = LIMIT // 2  # three such arguments: 72 MiB pickled, over the limit
    futures = client.map(len, [b"x" * size] * 3)
    assert client.gather(futures) == [size] * 3
    assert len({f.task for f in futures}) == 3


def test_an_argument_over_the_request_limit_is_a_value_error_that_says_so(client):
    with pytest.raises(ValueError) as raised:
        client.map(len, [b"small", b"x" * (LIMIT + 1)])
    assert isinstance(raised.value, weir.RequestTooLarge)
    message = str(raised.value)
    # The limit, the size, which task, and what to do instead.
    assert f"limit of {LIMIT} bytes" in message, message
    assert "the arguments of task 1 " in message and "make a request of 503" in message, message
    assert "path of a file" in message, message
    assert weir.MAX_REQUEST == LIMIT
    # The same for one task, and the connection is fine afterwards.
    with pytest.raises(weir.RequestTooLarge):
        client.submit(len, b"x" * (LIMIT + 1))
    assert client.submit(pow, 2, 3).result(timeout=60) == 8


def _free_udp_ports(n):
    import socket
    sockets = [socket.socket(socket.AF_INET, socket.SOCK_DGRAM) for _ in range(n)]
    for s in sockets:
        s.bind(("127.0.0.1", 0))
    ports = [s.getsockname()[1] for s in sockets]
    for s in sockets:
        s.close()
    return ports


def test_the_leader_replica_killed_mid_map_loses_no_future(tmp_path):
    """Three scheduler replicas (docs/replicas.md): the leader is killed with -9 while a map
    runs; another leads, the client follows it, and every future resolves once, right."""
    import json
    import shutil
    import subprocess

    peers = ",".join(f"{i}=quic://127.0.0.1:{port}"
                     for i, port in enumerate(_free_udp_ports(3), start=1))
    log = open(tmp_path / "cluster.log", "ab")
    processes = {}

    def start(name, argv):
        processes[name] = subprocess.Popen(argv, cwd=tmp_path, stdout=log, stderr=log)

    def replica(i):
        start(f"replica {i}", ["scheduler", "--access-file", str(tmp_path / f"r{i}/access.json"),
                               "--replica", str(i), "--peers", peers,
                               "--heartbeat-timeout", "2"])

    def slow(x):
        time.sleep(0.01)
        return -x

    try:
        (tmp_path / "r1").mkdir()
        replica(1)
        first = tmp_path / "r1"
        wait_for(lambda: (first / "access.json").exists()
                 and (first / "scheduler-key.pem").exists(), "replica 1's access file")
        for i in (2, 3):
            (tmp_path / f"r{i}").mkdir()
            for name in ("access.json", "scheduler-cert.pem", "scheduler-key.pem"):
                shutil.copy(first / name, tmp_path / f"r{i}" / name)
            replica(i)
        access = str(first / "access.json")
        for name in ("w1", "w2"):
            start(name, ["worker", "--access-file", access, "--name", name, "--slots", "2"])

        def leader():
            out = subprocess.run(["weir", "--access-file", access, "--output", "json",
                                  "replicas"], capture_output=True, text=True)
            if out.returncode != 0:
                return None
            leading = [r["id"] for r in json.loads(out.stdout) if r["leader"]]
            return leading[0] if leading else None

        with weir.Client(access) as client:
            futures = client.map(slow, range(600))
            wait_for(lambda: sum(f.done() for f in futures) >= 50, "the first results")
            killed = leader()
            assert killed is not None
            processes[f"replica {killed}"].kill()
            processes[f"replica {killed}"].wait()
            assert client.gather(futures) == [-x for x in range(600)]
            wait_for(lambda: leader() not in (None, killed), "another replica to lead")
            # A submission after the failover goes to the new leader.
            assert client.submit(slow, 7).result(timeout=60) == -7
    finally:
        for process in processes.values():
            process.kill()
            process.wait()
        log.close()
