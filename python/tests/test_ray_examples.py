"""Classic Ray Core programs run unchanged on squall (docs/examples/ray/,
docs/ray.md): each is written as a Ray user writes it, with
`import squall as ray` as its only change, and calls plain `ray.init()`.

Each program runs in a subprocess of its own and must print exactly its
.out file:
- with no squall settings in its environment, `ray.init()` starts a local
  cluster that lives as long as the program (Ray's `ray.init()` with no
  address and no RAY_ADDRESS);
- with $SQUALL_SERVER naming a running cluster, `ray.init()` joins it (as
  Ray's does with $RAY_ADDRESS), and the program leaves nothing running
  behind it there.
"""

import os
import pathlib
import subprocess
import sys
import time

import pytest

import squall

SOURCE = pathlib.Path(os.environ.get("SQUALL_SOURCE_DIR", pathlib.Path(__file__).resolve().parents[2]))
EXAMPLES = SOURCE / "docs" / "examples" / "ray"
PROGRAMS = sorted(p.stem for p in EXAMPLES.glob("*.py"))

# Generous for a busy 2-core machine; each program takes a few seconds.
TIMEOUT = 120


def run_program(name, env, cwd):
    return subprocess.run([sys.executable, str(EXAMPLES / f"{name}.py")], env=env, cwd=cwd,
                          capture_output=True, text=True, timeout=TIMEOUT)


def test_the_programs_are_there_each_with_its_out_file():
    """The classic programs are all there, each with its expected output."""
    assert set(PROGRAMS) >= {"tasks_and_actors", "numpy_matrices", "calculate_square", "square",
                             "counter_actor", "sum_matrix"}
    for name in PROGRAMS:
        assert (EXAMPLES / f"{name}.out").is_file(), f"{name}.py has no {name}.out"


@pytest.mark.parametrize("name", PROGRAMS)
def test_each_program_is_a_ray_program_but_for_its_import(name):
    """A Ray user's program: `import squall as ray` is its only mention of
    squall, and it starts with a plain ray.init() (no address)."""
    text = (EXAMPLES / f"{name}.py").read_text()
    squall_lines = [line for line in text.splitlines() if "squall" in line]
    assert squall_lines == ["import squall as ray"]
    assert "ray.init()" in text


@pytest.mark.parametrize("name", PROGRAMS)
def test_the_program_starts_its_own_cluster_and_prints_its_out_file(name, tmp_path):
    """ray.init() with no address and no server in the environment starts a
    local cluster for the program's life; the program prints what Ray's
    would and exits 0."""
    env = {k: v for k, v in os.environ.items() if k not in ("SQUALL_SERVER", "SQUALL_TOKEN")}
    run = run_program(name, env, tmp_path)
    assert run.returncode == 0, run.stderr
    assert run.stdout == (EXAMPLES / f"{name}.out").read_text()


@pytest.mark.parametrize("name", PROGRAMS)
def test_the_program_joins_the_cluster_named_by_squall_server(name, cluster, tmp_path):
    """With $SQUALL_SERVER set, ray.init() joins that cluster instead of
    starting one; the program's job is a session there while it runs, and
    its end closes it (nothing of it is left open on the server)."""
    with squall.Client(cluster.address) as client:
        before = {s.id for s in client.sessions()}
        run = run_program(name, {**os.environ, "SQUALL_SERVER": cluster.address}, tmp_path)
        assert run.returncode == 0, run.stderr
        assert run.stdout == (EXAMPLES / f"{name}.out").read_text()
        # The server hears of the driver's end when its connection goes:
        # polled, bounded.
        deadline = time.monotonic() + 15
        while True:
            left = [s.id for s in client.sessions() if s.id not in before and s.open]
            if not left:
                break
            assert time.monotonic() < deadline, f"sessions left open by the program: {left}"
            time.sleep(0.1)


LIFE_OF_A_DRIVER = """
import squall as ray


@ray.remote
def square(x):
    return x * x


print(ray.is_initialized())
print(ray.get(square.remote(3)))
print(ray.is_initialized())
ray.shutdown()
print(ray.is_initialized())
ray.init(num_cpus=1)
print(ray.cluster_resources()["CPU"] == 1)
print(ray.get(square.remote(4)))
"""


def test_a_driver_initializes_itself_shuts_down_and_starts_again(tmp_path):
    """Ray: .remote() before ray.init() initializes ray itself (here: a
    local cluster), is_initialized() says so, shutdown() ends it, and
    init(num_cpus=1) starts another with one cpu."""
    env = {k: v for k, v in os.environ.items() if k not in ("SQUALL_SERVER", "SQUALL_TOKEN")}
    run = subprocess.run([sys.executable, "-c", LIFE_OF_A_DRIVER], env=env, cwd=tmp_path,
                         capture_output=True, text=True, timeout=TIMEOUT)
    assert run.returncode == 0, run.stderr
    assert run.stdout == "False\n9\nTrue\nFalse\nTrue\n16\n"
