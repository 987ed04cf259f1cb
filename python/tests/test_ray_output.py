"""What functions and actors print reaches the driver (Ray's
log_to_driver, docs/ray.md "Output"): each line prefixed with the task or
actor and where it ran, on the driver's standard output or error as it was
written, before the `get` that waits for the task returns. The driver is
joined to a real cluster (conftest.py)."""

import subprocess
import sys
import uuid

import cloudpickle

import squall as ray

cloudpickle.register_pickle_by_value(sys.modules[__name__])

T = 60


@ray.remote
def loud(token, n=2):
    for i in range(n):
        print(f"{token} line {i}")
    print(f"{token} trouble", file=sys.stderr)
    return token


@ray.remote
def outer(token):
    # A task's own tasks print to the same driver.
    return ray.get(loud.remote(token + "-inner", 1))


@ray.remote
class Printer:
    def __init__(self, token):
        print(f"{token} made")

    def say(self, text):
        print(text)
        return text


def test_what_a_task_prints_reaches_the_driver_prefixed_with_the_task(driver, capsys):
    token = uuid.uuid4().hex[:8]
    assert ray.get(loud.remote(token), timeout=T) == token
    out, err = capsys.readouterr()
    lines = [line for line in out.splitlines() if token in line]
    assert len(lines) == 2, out
    for i, line in enumerate(lines):
        assert line.startswith("(loud pid="), line
        assert ", node=" in line
        assert line.endswith(f") {token} line {i}")
    assert any(line.startswith("(loud pid=") and line.endswith(f"{token} trouble") for line in err.splitlines()), err
    # Not on the wrong stream.
    assert "trouble" not in out


def test_a_nested_task_and_an_actor_print_to_the_driver_too(driver, capsys):
    token = uuid.uuid4().hex[:8]
    assert ray.get(outer.remote(token), timeout=T) == token + "-inner"
    printer = Printer.remote(token)
    assert ray.get([printer.say.remote(f"{token} says {i}") for i in range(3)], timeout=T) == [
        f"{token} says {i}" for i in range(3)]
    out, _ = capsys.readouterr()
    assert any(line.startswith("(loud pid=") and line.endswith(f"{token}-inner line 0") for line in out.splitlines()), out
    said = [line for line in out.splitlines() if f"{token} says" in line or f"{token} made" in line]
    assert [line.split(") ", 1)[1] for line in said] == [f"{token} made"] + [f"{token} says {i}" for i in range(3)]
    assert all(line.startswith("(Printer pid=") for line in said), said


DRIVER = """
import sys
import squall as ray

@ray.remote
def shout(x):
    print("shouting", x)
    return x

ray.init(address=sys.argv[1], log_to_driver=sys.argv[2] == "on")
print("result", ray.get(shout.remote(7)))
ray.shutdown()
"""


def run_driver(address, log_to_driver):
    done = subprocess.run([sys.executable, "-c", DRIVER, address, "on" if log_to_driver else "off"],
                          capture_output=True, text=True, timeout=T)
    assert done.returncode == 0, done.stderr
    return done.stdout.splitlines()


def test_a_drivers_own_lines_come_after_what_its_task_printed_unless_log_to_driver_is_off(driver):
    lines = run_driver(driver.address, True)
    assert len(lines) == 2, lines
    assert lines[0].startswith("(shout pid=") and lines[0].endswith(") shouting 7")
    assert lines[1] == "result 7"
    assert run_driver(driver.address, False) == ["result 7"]
