"""Real processes on loopback: the scheduler and worker executables must be on PATH (.ci/run
puts target/debug there)."""

import pytest

import weir


@pytest.fixture(scope="module")
def cluster():
    # Two plain workers, and one that has a gpu and matches the environment `big`.
    with weir.LocalCluster(workers=2, slots=2) as cluster:
        cluster.add_worker("special", 1, ["--capabilities", "gpu=1",
                                           "--env-plugin", "big=mem_gt,threshold=1"])
        cluster.wait_workers(3)
        yield cluster


@pytest.fixture
def client(cluster):
    with weir.Client(cluster) as client:
        yield client
