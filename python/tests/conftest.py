"""Fixtures of the pytest suite (python/CMakeLists.txt runs each file as a
ctest): a real local cluster — squall-server and two governors started by
squall.LocalCluster (the C++ LocalCluster the end-to-end tests use) on
127.0.0.1 with free ports and a temp work dir — shared by a test file, and
a client and a fresh session per test; for Ray's model (docs/ray.md), this
process as a driver joined to that cluster.

The governors keep squall-python-executor (for @squall.remote) and the
tests' C++ executors (tests/executors/test-executor.cpp as "testfn" and
tests/executors/actor-executor.cpp as "stats", from $SQUALL_TEST_EXECUTOR
and $SQUALL_ACTOR_EXECUTOR, when set) warm, offer two GPUs (bookkeeping
only) and may load and store under a temp dir (LOAD_ROOT).
"""

import os
import pathlib
import tempfile

import pytest

import squall


@pytest.fixture(scope="module")
def load_root():
    with tempfile.TemporaryDirectory(prefix="squall-py-load-") as root:
        yield pathlib.Path(root)


@pytest.fixture(scope="module")
def cluster(load_root):
    executors = []
    if os.environ.get("SQUALL_TEST_EXECUTOR"):
        executors.append("testfn=" + os.environ["SQUALL_TEST_EXECUTOR"])
    if os.environ.get("SQUALL_ACTOR_EXECUTOR"):
        executors.append("stats=" + os.environ["SQUALL_ACTOR_EXECUTOR"])
    with squall.LocalCluster(governors=2, cpus=2, executors=executors,
                             governor_args=["--allow-path", str(load_root), "--resource", "gpus=[0,1]"]) as c:
        yield c


@pytest.fixture
def client(cluster):
    with squall.Client(cluster.address) as c:
        yield c


@pytest.fixture
def session(client, request):
    with client.new_session(request.node.name) as s:
        yield s


@pytest.fixture(scope="module")
def driver(cluster):
    """This process as a Ray driver (docs/ray.md) joined to the module's
    cluster, for the module's tests."""
    squall.init(address=cluster.address)
    yield cluster
    squall.shutdown()
