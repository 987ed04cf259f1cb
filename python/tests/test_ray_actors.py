"""Ray's async and threaded actors under `import squall as ray`
(docs/ray.md, "Async and threaded actors"): calls that interleave on an
actor's event loop or run on its threads, max_concurrency, and tasks
submitted from their methods. The driver is joined to a real cluster
(conftest.py)."""

import asyncio
import sys

import cloudpickle
import pytest

import squall as ray

cloudpickle.register_pickle_by_value(sys.modules[__name__])

T = 60


@ray.remote
def square(x):
    return x * x


@ray.remote
class Rendezvous:
    def __init__(self):
        self.events = {}

    def _event(self, name):
        return self.events.setdefault(name, asyncio.Event())

    async def arrive(self, mine, theirs):
        self._event(mine).set()
        await asyncio.sleep(0.01)
        await asyncio.wait_for(self._event(theirs).wait(), 20)
        return mine


def test_an_async_actors_calls_interleave(driver):
    """Ray: the async def methods of an actor run concurrently on its event
    loop: two calls each waiting for an event the other sets both end."""
    meeting = Rendezvous.remote()
    assert ray.get([meeting.arrive.remote("a", "b"), meeting.arrive.remote("b", "a")], timeout=T) == ["a", "b"]


@ray.remote
class AsyncRecorder:
    def __init__(self):
        self.started = []
        self.active = 0
        self.peak = 0
        self.release = None

    async def record(self, i, most=20):
        """Waits for open() (at most `most` seconds), counting the calls
        under way meanwhile."""
        self.started.append(i)
        self.active += 1
        self.peak = max(self.peak, self.active)
        if self.release is None:
            self.release = asyncio.Event()
        try:
            await asyncio.wait_for(self.release.wait(), most)
        except asyncio.TimeoutError:
            pass
        self.active -= 1
        return i

    async def open(self):
        if self.release is None:
            self.release = asyncio.Event()
        self.release.set()

    def report(self):
        # A plain method of an async actor runs on its event loop too.
        return self.started, self.peak

    async def fail(self):
        await asyncio.sleep(0)
        raise KeyError("async")

    async def context(self):
        await asyncio.sleep(0)
        ctx = ray.get_runtime_context()
        return ctx.get_task_id(), ctx.get_actor_id()


def test_an_async_actors_calls_start_in_the_order_made_and_all_are_under_way(driver):
    """Ray: an async actor's calls start in the order they were made and up
    to max_concurrency (1,000 by default) are under way at once."""
    recorder = AsyncRecorder.remote()
    refs = [recorder.record.remote(i) for i in range(50)]
    ray.get(recorder.open.remote(), timeout=T)
    assert ray.get(refs, timeout=T) == list(range(50))
    started, peak = ray.get(recorder.report.remote(), timeout=T)
    assert started == list(range(50))
    assert peak >= 2


def test_max_concurrency_bounds_the_calls_of_an_async_actor_under_way(driver):
    """Six calls that each stay a second, on an actor of three places: three
    at a time, in two waves; the report waits for a place too."""
    recorder = AsyncRecorder.options(max_concurrency=3).remote()
    refs = [recorder.record.remote(i, 1) for i in range(6)]
    assert ray.get(refs, timeout=T) == list(range(6))
    started, peak = ray.get(recorder.report.remote(), timeout=T)
    assert started == list(range(6))
    assert peak == 3


def test_an_async_method_that_raises_fails_its_call_and_the_actor_goes_on(driver):
    recorder = AsyncRecorder.remote()
    with pytest.raises(KeyError):
        ray.get(recorder.fail.remote(), timeout=T)
    # Each call under way knows its own task.
    (task_a, actor_a), (task_b, actor_b) = ray.get([recorder.context.remote(), recorder.context.remote()],
                                                   timeout=T)
    assert task_a and task_b and task_a != task_b
    assert actor_a and actor_a == actor_b


@ray.remote(max_concurrency=3)
class ThreadedHolder:
    def __init__(self):
        import threading
        self.lock = threading.Lock()
        self.active = 0
        self.peak = 0
        self.barrier = threading.Barrier(3, timeout=20)

    def hold(self):
        with self.lock:
            self.active += 1
            self.peak = max(self.peak, self.active)
        self.barrier.wait()
        with self.lock:
            self.active -= 1
        return True

    def peak_seen(self):
        return self.peak


def test_a_threaded_actor_runs_max_concurrency_calls_at_once_and_no_more(driver):
    """Ray: an actor given max_concurrency > 1 runs that many calls at once
    on threads of its own: holds meeting in threes all end, and no fourth
    was ever under way beside them."""
    holder = ThreadedHolder.remote()
    assert ray.get([holder.hold.remote() for _ in range(9)], timeout=T) == [True] * 9
    assert ray.get(holder.peak_seen.remote(), timeout=T) == 3


@ray.remote(max_concurrency=2)
class Caller:
    def squares(self, xs):
        # Tasks of its own, from one of its threads.
        return ray.get([square.remote(x) for x in xs])


@ray.remote
class AsyncCaller:
    async def squares(self, xs):
        await asyncio.sleep(0)
        return ray.get([square.remote(x) for x in xs])


@ray.remote
class SerialCaller:
    def squares(self, xs):
        return ray.get([square.remote(x) for x in xs])


def test_an_actors_methods_submit_and_get_tasks_of_their_own(driver):
    """Ray: an actor's method may submit tasks and get their results, one
    call at a time or concurrently (its calls go to its governor directly:
    each is recorded with the server before its tasks are submitted)."""
    serial = SerialCaller.remote()
    assert ray.get(serial.squares.remote([2, 3]), timeout=T) == [4, 9]
    assert ray.get([serial.squares.remote([i]) for i in range(3)], timeout=T) == [[0], [1], [4]]
    caller = Caller.remote()
    assert ray.get([caller.squares.remote([i, i + 1]) for i in range(4)], timeout=T) == [
        [i * i, (i + 1) * (i + 1)] for i in range(4)]
    async_caller = AsyncCaller.remote()
    assert ray.get(async_caller.squares.remote([3, 4]), timeout=T) == [9, 16]


def test_max_concurrency_below_one_is_refused():
    with pytest.raises(ValueError, match="max_concurrency"):
        ThreadedHolder.options(max_concurrency=0)


@ray.remote
class Gate:
    """Lets whoever waits through once it is opened."""

    def __init__(self):
        self.opened = asyncio.Event()

    async def wait(self):
        await asyncio.wait_for(self.opened.wait(), T)
        return "through"

    async def open(self):
        self.opened.set()


@ray.remote
def reciprocal(x):
    return 1 / x


@ray.remote
def pass_gate(gate):
    return ray.get(gate.wait.remote())


@ray.remote
class Awaiter:
    async def through(self, gate):
        return await pass_gate.remote(gate)

    async def open(self, gate):
        await gate.open.remote()
        return "opened"


def test_await_on_a_ref_leaves_the_actors_loop_free_meanwhile(driver):
    """Ray: in an async actor `await ref` waits without blocking the event
    loop: a call made after it runs meanwhile (here the one that lets the
    awaited task end, so a blocking wait would never end)."""
    gate, awaiter = Gate.remote(), Awaiter.remote()
    waiting = awaiter.through.remote(gate)
    assert ray.get(awaiter.open.remote(gate), timeout=T) == "opened"
    assert ray.get(waiting, timeout=T) == "through"


def test_a_driver_awaits_refs_in_asyncio(driver):
    """Ray: refs are awaitable in the driver too (asyncio.gather over them),
    and a failed task's error is raised at the await."""

    async def main():
        values = await asyncio.gather(square.remote(2), square.remote(3))
        with pytest.raises(ZeroDivisionError):
            await reciprocal.remote(0)
        return values

    assert asyncio.run(main()) == [4, 9]
