"""Actors from Python (docs/python.md, "Actors"; docs/actors.md) against a
real cluster (conftest.py): @squall.remote on a class, its methods' calls
in order, state kept between calls and submits, actors in parallel,
exceptions in methods and constructors, kill, restarts after a crash or
a time limit, resources, tasks' outputs as arguments and methods' results
feeding functions; and the binding beneath (Session.actor, squall.Actor)
on the C++ actor type stats/Counter of tests/executors/actor-executor.cpp."""

import os
import pathlib
import signal
import sys
import time

import cloudpickle
import pytest

import squall

# The classes and functions below travel by value: the governors' Python
# cannot import this test file.
cloudpickle.register_pickle_by_value(sys.modules[__name__])


@squall.remote
class Counter:
    def __init__(self, start=0):
        self.value = start
        self.seen = []

    def increment(self, by=1):
        self.value += by
        self.seen.append(by)
        return self.value

    def get(self):
        return self.value

    def history(self):
        return self.seen

    @squall.method(outputs=2)
    def split(self):
        return self.value // 2, self.value - self.value // 2

    @squall.method(outputs="bytes")
    def text(self):
        return f"value {self.value}\n"

    def fail(self, why):
        raise ValueError(f"asked to fail: {why}")

    def pid(self):
        return os.getpid()

    def environment(self, name):
        return os.environ.get(name)

    def meet(self, mine, theirs):
        """Makes the file `mine`, then waits for `theirs`: two actors
        meeting this way run at the same time."""
        pathlib.Path(mine).touch()
        for _ in range(3000):
            if os.path.exists(theirs):
                return "met"
            time.sleep(0.01)
        raise TimeoutError("the other actor never came")

    def wait_for(self, path):
        while not os.path.exists(path):
            time.sleep(0.01)

    def crash_once(self, marker):
        """Kills its own process, unless the marker file exists (it is
        made first): it crashes once."""
        if not os.path.exists(marker):
            pathlib.Path(marker).touch()
            os.kill(os.getpid(), signal.SIGKILL)
        return "survived"

    def files(self, directory, blob, *, suffix=""):
        return sorted(os.listdir(directory)), blob + suffix.encode()


@squall.remote
class Broken:
    def __init__(self, why):
        raise RuntimeError(f"cannot start: {why}")

    def get(self):
        return "never"


@squall.remote
def double(x):
    return 2 * x


@squall.remote
def square(x):
    return x * x


def process_gone(pid):
    """Whether process pid is gone, waiting up to 10 s for it to go."""
    for _ in range(1000):
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            return True
        time.sleep(0.01)
    return False


def test_a_counter_sees_its_increments_in_the_order_made(session):
    counter = Counter.remote()
    increments = [counter.increment.remote() for _ in range(200)]
    value = counter.get.remote()
    for task in increments + [value]:
        task.output.keep()
    session.submit()
    assert [task.output.value() for task in increments] == list(range(1, 201))
    assert value.output.value() == 200
    assert all(task.info().state == "finished" for task in increments)


def test_state_lives_between_submits(session):
    counter = Counter.remote(10)
    first = counter.increment.remote(5)
    first.output.keep()
    session.submit()
    assert first.output.value() == 15
    # A later submit calls the same instance.
    later = [counter.increment.remote(by) for by in (1, 2, 3)]
    history = counter.history.remote()
    history.output.keep()
    session.submit()
    assert history.output.value() == [5, 1, 2, 3]
    assert session.actor_handle(counter.actor.id) == counter.actor
    assert later[-1].info().name == "Counter.increment"


def test_submit_and_wait_makes_a_call_and_waits_for_it_in_one_go(session):
    counter = Counter.remote(1)
    for expected in range(2, 12):
        call = counter.increment.remote()
        call.output.keep()
        session.submit_and_wait([call])
        # Finished on return: no wait needed before reading its result.
        assert call.info().state == "finished"
        assert call.output.value() == expected
    failing = counter.fail.remote("on purpose")
    with pytest.raises(squall.TaskFailed, match="asked to fail: on purpose"):
        session.submit_and_wait([failing])


def test_two_actors_run_in_parallel_with_their_own_state(session, tmp_path):
    a, b = Counter.remote(0), Counter.remote(100)
    met = [a.meet.remote(str(tmp_path / "a"), str(tmp_path / "b")),
           b.meet.remote(str(tmp_path / "b"), str(tmp_path / "a"))]
    sums = [a.increment.remote(1), b.increment.remote(1), a.increment.remote(1)]
    pids = [a.pid.remote(), b.pid.remote()]
    for task in met + sums + pids:
        task.output.keep()
    session.submit()
    assert [task.output.value() for task in met] == ["met", "met"]
    assert [task.output.value() for task in sums] == [1, 101, 2]
    assert pids[0].output.value() != pids[1].output.value()


def test_a_method_that_raises_fails_its_call_and_the_actor_goes_on(session):
    counter = Counter.remote()
    counter.increment.remote(3)
    failing = counter.fail.options(allow_failure=True).remote("on purpose")
    after = counter.increment.remote(4)
    after.output.keep()
    session.submit()
    session.wait_all()
    info = failing.info()
    assert info.state == "failed" and info.name == "Counter.fail"
    assert "method python/Actor.call-1 failed: Traceback (most recent call last):" in info.error
    assert 'raise ValueError(f"asked to fail: {why}")' in info.error
    assert info.error.endswith("ValueError: asked to fail: on purpose")
    assert "_worker.py" not in info.error
    assert after.output.value() == 7


def test_a_failed_call_fails_the_session_unless_allowed(client):
    with client.new_session("failing call") as session:
        counter = Counter.remote()
        counter.fail.remote("not allowed")
        session.submit()
        with pytest.raises(squall.TaskFailed) as failed:
            session.wait_all()
        assert failed.value.task_name == "Counter.fail"
        assert str(failed.value).splitlines()[-1] == "ValueError: asked to fail: not allowed"


def test_a_constructor_that_raises_fails_the_actor_and_its_calls(session):
    broken = Broken.remote("no disk")
    call = broken.get.remote()
    session.submit()
    with pytest.raises(squall.TaskFailed) as failed:
        call.wait()
    message = str(failed.value)
    assert failed.value.task_name == "Broken"
    assert "its constructor failed: Traceback (most recent call last):" in message
    assert message.endswith("RuntimeError: cannot start: no disk")
    assert broken.actor.task.info().state == "failed"
    assert call.info().state == "failed"


def test_kill_ends_the_actor_and_cancels_its_waiting_calls(session, tmp_path):
    counter = Counter.remote()
    pid = counter.pid.remote()
    pid.output.keep()
    session.submit()
    process = pid.output.value()
    # A call that never ends, and calls behind it.
    counter.wait_for.remote(str(tmp_path / "never"))
    behind = counter.increment.remote()
    reader = double(behind)
    session.submit()
    counter.kill()
    session.wait_all()
    assert counter.actor.task.info().state == "cancelled"
    assert behind.info().state == "cancelled"
    assert reader.info().state == "skipped"
    assert session.state().open, "a kill fails no session"
    assert process_gone(process)
    counter.kill()  # again: nothing
    # Calls on an actor that has ended are refused at submit.
    counter.increment.remote()
    with pytest.raises(squall.Error, match="has ended"):
        session.submit()


def test_tasks_outputs_are_arguments_and_results_feed_functions(session, tmp_path):
    start = double(5)                            # a function's result starts the actor
    counter = Counter.remote(start)
    total = counter.increment.remote(double(3))  # a function's result as an argument
    squared = square(total)                      # a method's result into a function
    halves = counter.split.remote()
    again = counter.increment.remote(halves.outputs[0])  # a method's output into a method
    text = counter.text.remote()
    shouted = session.execute(["tr", "a-z", "A-Z"], stdin=text, stdout=True)
    (tmp_path / "d").mkdir()
    (tmp_path / "d" / "f.txt").write_text("x")
    listing = counter.files.remote(session.directory(str(tmp_path / "d")), session.blob(b"raw"), suffix="!")
    for task in (squared, halves, again, text, shouted, listing):
        for output in task.outputs:
            output.keep()
    session.submit()
    assert squared.output.value() == 256
    assert [output.value() for output in halves.outputs] == [8, 8]
    assert again.output.value() == 24
    assert text.output.fetch() == b"value 24\n"
    assert shouted.output.fetch() == b"VALUE 24\n"
    assert listing.output.value() == (["f.txt"], b"raw!")


def test_a_crashed_actor_restarts_and_runs_the_call_again(session, tmp_path):
    counter = Counter.options(max_restarts=1, max_call_retries=1).remote(40)
    counter.increment.remote(2)
    crash = counter.crash_once.remote(str(tmp_path / "crashed"))
    after = counter.get.remote()
    for task in (crash, after):
        task.output.keep()
    session.submit()
    assert crash.output.value() == "survived"
    assert after.output.value() == 40, "a restarted actor starts from its constructor"


def test_a_time_limit_stops_a_call_and_the_actor_restarts(session, tmp_path):
    counter = Counter.options(max_restarts=1).remote(1)
    stuck = counter.wait_for.options(time_limit=0.3, allow_failure=True).remote(str(tmp_path / "never"))
    after = counter.get.options(keep=True).remote()
    session.submit()
    session.wait_all()
    assert stuck.info().state == "failed"
    assert "time limit" in stuck.info().error, stuck.info().error
    assert after.output.value() == 1


def test_an_actor_holds_its_cpus_and_resources(session):
    counter = Counter.options(cpus=2, resources={"gpus": 1}, name="gpu counter").remote()
    devices = counter.environment.remote("CUDA_VISIBLE_DEVICES")
    threads = counter.environment.remote("OMP_NUM_THREADS")
    for task in (devices, threads):
        task.output.keep()
    session.submit()
    assert devices.output.value() in ("0", "1")
    assert threads.output.value() == "2"
    assert counter.actor.task.info().name == "gpu counter"


def test_misuse_is_refused_saying_what_to_do(session):
    with pytest.raises(TypeError, match=r"Counter.remote\(\.\.\.\)"):
        Counter(1)
    assert Counter.cls(1).increment() == 2, "the plain class, to use here"
    counter = Counter.remote()
    with pytest.raises(TypeError, match=r"call it with .remote\(\.\.\.\)"):
        counter.increment()
    with pytest.raises(AttributeError, match="Counter has no method 'nope'"):
        counter.nope
    with pytest.raises(AttributeError):
        counter._private
    with pytest.raises(TypeError, match="unknown outputs"):
        squall.remote(outputs=2)(type("Thing", (), {}))
    with pytest.raises(TypeError, match="unknown max_restarts"):
        squall.remote(max_restarts=2)(lambda: 1)
    with pytest.raises(TypeError, match="has a method 'kill'"):
        squall.remote(type("Killer", (), {"kill": lambda self: None}))
    with pytest.raises(ValueError, match="from 0 to 16"):
        squall.method(outputs=17)


def test_an_actor_outside_a_session_is_rays(cluster):
    """Outside `with session:`, .remote() is Ray's model (docs/ray.md): the
    actor goes to the driver's session, its calls give ObjectRefs."""
    squall.init(address=cluster.address)
    try:
        counter = Counter.remote(40)
        assert isinstance(counter, squall.ActorHandle) and counter._ray_context is not None
        ref = counter.increment.remote(2)
        assert isinstance(ref, squall.ObjectRef)
        assert squall.get(ref) == 42
    finally:
        squall.shutdown()
    with pytest.raises(TypeError, match="is an actor class"):
        Counter(1)


@pytest.mark.skipif(not os.environ.get("SQUALL_ACTOR_EXECUTOR"), reason="needs tests' actor executor")
def test_the_binding_makes_actors_of_any_executor(session):
    counter = session.actor("stats/Counter", config=b"10").cpus(1).max_restarts(0).max_call_retries(0)
    assert isinstance(counter, squall.Actor) and counter.session_id == session.id
    adds = [counter.call("add", config=b"1") for _ in range(5)]
    read = counter.call("read", outputs=[squall.BLOB])
    for task in adds + [read]:
        task.output.keep()
    session.submit()
    assert [task.output.fetch() for task in adds] == [b"11", b"12", b"13", b"14", b"15"]
    assert read.output.fetch() == b"15"
    # The same actor by id, in a later submit.
    again = session.actor_handle(counter.id)
    assert again == counter and hash(again) == hash(counter)
    added = again.call("addInput", [session.blob(b"5")])
    added.output.keep()
    session.submit()
    assert added.output.fetch() == b"20"
    assert added.info().name == "stats/Counter.addInput"
    counter.kill()
    session.wait_all()
    assert counter.task.info().state == "cancelled"
    session.actor("stats/Nope")
    with pytest.raises(squall.Error, match="no governor offers the actor type stats/Nope"):
        session.submit()


@squall.remote
def bump(counter, by):
    """Calls the actor whose handle it was given, from inside a task."""
    call = counter.increment.remote(by)
    call.output.keep()
    squall.current_session().submit()
    return call.output.value()


def test_a_handle_passed_into_a_function_calls_the_actor(session):
    counter = Counter.remote(10)
    first = counter.increment.remote(1)
    through = bump(counter, 5)
    first.output.keep()
    through.output.keep()
    session.submit()
    assert first.output.value() == 11
    assert through.output.value() == 16  # its call took its turn after the first
    counter.kill()


def test_a_named_actor_is_reached_from_another_session_and_outlives_its_own(client):
    with client.new_session("owner") as owner:
        counter = Counter.options(named="py-counter").remote(100)
        first = counter.increment.remote(1)
        first.output.keep()
        owner.submit()
        assert first.output.value() == 101
        owner_id = owner.id
    # The owner's session closed; its named actor keeps it open.
    assert any(s.id == owner_id for s in client.sessions())
    with client.new_session("user") as user:
        counter = Counter.get_actor("py-counter")
        later = counter.increment.remote(2)
        later.output.keep()
        user.submit()
        assert later.output.value() == 103
        # Passed into a task by its name.
        through = bump(counter, 3)
        through.output.keep()
        user.submit()
        assert through.output.value() == 106
        counter.kill()
    with client.new_session("after") as after:
        with pytest.raises(squall.Error, match="no live actor is named 'py-counter'"):
            Counter.get_actor("py-counter")
