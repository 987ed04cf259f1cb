"""More of Ray's model under `import squall as ray` (docs/ray.md): tasks
that call tasks, reads of many refs at once, 0-cpu tasks, and what one
failing piece of a batch of .remote() calls does to the rest. The driver
is joined to the suite's cluster (conftest.py: two governors of two cpus)."""

import os
import pathlib
import sys
import time

import cloudpickle
import pytest

import squall as ray

cloudpickle.register_pickle_by_value(sys.modules[__name__])

T = 60  # seconds: the bound of any wait that ought to end far sooner


@ray.remote
def inc(x):
    return x + 1


@ray.remote
def fib(n):
    """Ray's nested tasks: each call waits for the two below it (its cpu
    lent back meanwhile, so a deep tree runs on two cpus)."""
    if n <= 1:
        return n
    return sum(ray.get([fib.remote(n - 1), fib.remote(n - 2)]))


@ray.remote
def wait_for(path):
    deadline = time.monotonic() + T
    while not os.path.exists(path) and time.monotonic() < deadline:
        time.sleep(0.01)
    return "opened"


@ray.remote(num_cpus=0)
def light():
    return "light"


@ray.remote
class Box:
    def get(self):
        return "box"


def test_tasks_call_tasks_and_wait_for_them(driver):
    """Ray: a task may call .remote() and get() inside; the results come
    back through it (a recursion deeper than the cluster's cpus)."""
    assert ray.get(fib.remote(10), timeout=T) == 55


def test_a_get_of_thousands_of_refs_keeps_their_order(driver):
    """get(list) of more refs than one batch of fetches (1,000) gives every
    value in the order asked."""
    refs = [inc.remote(i) for i in range(2500)]
    assert ray.get(refs, timeout=T) == [i + 1 for i in range(2500)]


def test_get_with_timeout_zero_reads_what_is_ready(driver, tmp_path):
    """Ray: get(ref, timeout=0) returns a ready value at once, and raises
    GetTimeoutError for one not ready."""
    ready = ray.put({"ready": True})
    assert ray.get(ready, timeout=0) == {"ready": True}
    gate = str(tmp_path / "gate")
    pending = wait_for.remote(gate)
    with pytest.raises(ray.exceptions.GetTimeoutError):
        ray.get(pending, timeout=0)
    pathlib.Path(gate).touch()
    assert ray.get(pending, timeout=T) == "opened"


def test_a_task_of_no_cpus_runs_while_every_cpu_is_busy(driver, tmp_path):
    """Ray's num_cpus=0: such a task takes no cpu, so it runs beside tasks
    holding all of them."""
    gate = str(tmp_path / "gate")
    busy = [wait_for.remote(gate) for _ in range(4)]  # the suite's 4 cpus
    try:
        assert ray.get(light.remote(), timeout=T) == "light"
        ready, _ = ray.wait(busy, num_returns=1, timeout=0)
        assert ready == []
    finally:
        pathlib.Path(gate).touch()
    assert ray.get(busy, timeout=T) == ["opened"] * 4


def test_a_call_on_a_killed_actor_fails_alone(driver):
    """A call made on an actor already killed raises ActorDiedError; the
    tasks sent with it in the same batch run."""
    box = Box.remote()
    assert ray.get(box.get.remote(), timeout=T) == "box"
    ray.kill(box)
    late = box.get.remote()
    beside = [inc.remote(i) for i in range(5)]
    with pytest.raises(ray.exceptions.RayActorError):
        ray.get(late, timeout=T)
    assert ray.get(beside, timeout=T) == [1, 2, 3, 4, 5]


def test_a_failed_ref_inside_a_list_stays_a_ref_until_read(driver):
    """A failed ref nested in an argument does not fail the task given it;
    reading it inside the task raises the original error."""
    @ray.remote
    def broken():
        raise KeyError("gone")

    @ray.remote
    def reads(refs):
        try:
            ray.get(refs[0])
        except KeyError as e:
            return isinstance(e, ray.exceptions.RayTaskError), e.cause.args
        return "no error"

    assert ray.get(reads.remote([broken.remote()]), timeout=T) == (True, ("gone",))


class NeedsTwo(Exception):
    """An exception whose __init__ takes other arguments than its args: it
    does not come back through pickle."""

    def __init__(self, code, detail):
        super().__init__(f"{code}: {detail}")
        self.code = code


def test_an_exception_that_does_not_unpickle_is_still_caught_by_its_class(driver):
    """`except NeedsTwo` catches the task's error even though the exception
    itself cannot be remade on the driver; its message says what it said."""
    @ray.remote
    def raises():
        raise NeedsTwo(7, "seven")

    with pytest.raises(NeedsTwo) as caught:
        ray.get(raises.remote(), timeout=T)
    assert isinstance(caught.value, ray.exceptions.RayTaskError)
    assert "7: seven" in str(caught.value)
