"""Ray Core's documented behaviour under `import squall as ray`
(docs/ray.md), with the driver joined to a real cluster
(conftest.py: two governors of two cpus). Waits that could hang are bounded
(timeout=T); tasks that must stay unfinished wait for a file (a gate) that
the test or its teardown makes; bounded polling only where nothing else can
tell (an object or a process gone, freed at the driver's next call)."""

import gc
import os
import pathlib
import subprocess
import sys
import time
import uuid

import cloudpickle
import numpy as np
import pytest

import squall
import squall as ray

# The functions and classes below travel by value: the governors' Python
# cannot import this test file.
cloudpickle.register_pickle_by_value(sys.modules[__name__])

T = 60  # seconds: the bound of any wait that ought to end far sooner


@pytest.fixture
def gates(tmp_path):
    """Paths of gates for `gate` tasks; the teardown opens every one, so no
    task of a test is left holding a cpu."""
    made = []

    def make():
        made.append(tmp_path / f"gate-{len(made)}")
        return str(made[-1])

    yield make
    for path in made:
        path.touch()


@ray.remote
def gate(path, value=None, started=None):
    """Returns value once the file `path` exists (at most T seconds)."""
    if started:
        pathlib.Path(started).touch()
    deadline = time.monotonic() + T
    while not os.path.exists(path):
        if time.monotonic() > deadline:
            raise TimeoutError(f"the gate {path} never opened")
        time.sleep(0.01)
    return value


@ray.remote
def square(x):
    return x * x


@ray.remote
def divide(a, b):
    return a / b


@ray.remote
def total(_, array):
    return int(array.sum())


@ray.remote
def touch_and_return(x, marker):
    pathlib.Path(marker).touch()
    return x


@ray.remote
class Counter:
    def __init__(self):
        self.value, self.log, self.active, self.most = 0, [], 0, 0

    def incr(self):
        self.value += 1
        return self.value

    def pid(self):
        return os.getpid()

    def add(self, item):
        """Logs item; counts the calls running at once."""
        self.active += 1
        self.most = max(self.most, self.active)
        time.sleep(0.001)
        self.log.append(item)
        self.active -= 1
        return len(self.log)

    def read(self):
        return self.log, self.most

    def fail(self):
        raise ValueError("asked to fail")


def process_alive(pid):
    """A zombie counts as gone: its parent has just not reaped it yet."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            state = f.read().rsplit(")", 1)[1].split()[0]
    except FileNotFoundError:
        return False
    return state not in ("Z", "X")


def eventually(condition, what, seconds=10):
    """Polls condition, bounded; calls into ray between tries, since the
    driver sends its batched frees at its next call into squall."""
    deadline = time.monotonic() + seconds
    while not condition():
        assert time.monotonic() < deadline, what
        ray.get(square.remote(1), timeout=T)
        time.sleep(0.05)


def test_calls_from_one_handle_run_in_order_one_at_a_time(driver):
    """Ray: calls made through one actor handle run in the order they were
    submitted, one at a time (a plain actor is single-threaded)."""
    recorder = Counter.remote()
    counts = [recorder.add.remote(i) for i in range(100)]
    assert ray.get(counts, timeout=T) == list(range(1, 101))
    log, most = ray.get(recorder.read.remote(), timeout=T)
    assert log == list(range(100))
    assert most == 1


def test_a_method_that_raises_fails_that_call_only(driver):
    """Ray: an exception in an actor method fails that call; the actor keeps
    its state and runs the next call."""
    recorder = Counter.remote()
    first, failed, second = recorder.add.remote("a"), recorder.fail.remote(), recorder.add.remote("b")
    with pytest.raises(ValueError, match="asked to fail"):
        ray.get(failed, timeout=T)
    assert ray.get([first, second], timeout=T) == [1, 2]


def test_wait_keeps_the_order_of_refs_in_both_lists(driver, gates):
    """ray.wait: (ready, not_ready), each in the order of the refs given,
    whatever order they finished in; ready holds num_returns refs."""
    held_a, held_c = gates(), gates()
    refs = [gate.remote(held_a, "a"), square.remote(2), gate.remote(held_c, "c"), square.remote(3)]
    ready, not_ready = ray.wait(refs, num_returns=2, timeout=T)
    assert ready == [refs[1], refs[3]]
    assert not_ready == [refs[0], refs[2]]
    pathlib.Path(held_c).touch()
    ready, not_ready = ray.wait(refs, num_returns=3, timeout=T)
    assert ready == [refs[1], refs[2], refs[3]] and not_ready == [refs[0]]
    pathlib.Path(held_a).touch()
    ready, not_ready = ray.wait(refs, num_returns=4, timeout=T)
    assert ready == refs and not_ready == []
    ready, not_ready = ray.wait(refs)  # num_returns=1: exactly one
    assert len(ready) == 1 and len(not_ready) == 3
    assert ray.get(refs, timeout=T) == ["a", 4, "c", 9]


def test_wait_refuses_num_returns_beyond_the_refs_and_duplicates(driver):
    """ray.wait raises ValueError for num_returns > len(refs) and for a list
    with the same ref twice."""
    one, two = square.remote(1), square.remote(2)
    with pytest.raises(ValueError):
        ray.wait([one, two], num_returns=3)
    with pytest.raises(ValueError):
        ray.wait([one, two, one], num_returns=1)


def test_wait_timeout_zero_polls_and_a_timeout_expires(driver, gates):
    """ray.wait(timeout=0) answers at once with what is ready now, even if
    fewer than num_returns; timeout=t returns after t seconds with the
    unfinished refs in not_ready."""
    held, done = gate.remote(gates(), "held"), square.remote(5)
    assert ray.get(done, timeout=T) == 25
    start = time.monotonic()
    ready, not_ready = ray.wait([held, done], num_returns=2, timeout=0)
    assert (ready, not_ready) == ([done], [held])
    assert time.monotonic() - start < 10
    start = time.monotonic()
    ready, not_ready = ray.wait([held], num_returns=1, timeout=0.5)
    assert (ready, not_ready) == ([], [held])
    assert 0.4 <= time.monotonic() - start < 10


def test_get_timeout_raises_get_timeout_error_and_the_ref_stays_usable(driver, gates):
    """ray.get(timeout=t) raises GetTimeoutError (a RayError and a
    TimeoutError) after t seconds; the ref can be got later."""
    path = gates()
    held = gate.remote(path, "late")
    start = time.monotonic()
    with pytest.raises(ray.exceptions.GetTimeoutError) as raised:
        ray.get(held, timeout=0.5)
    assert 0.4 <= time.monotonic() - start < 10
    assert isinstance(raised.value, TimeoutError)
    assert isinstance(raised.value, ray.exceptions.RayError)
    with pytest.raises(TimeoutError):
        ray.get([square.remote(2), held], timeout=0.2)
    pathlib.Path(path).touch()
    assert ray.get(held, timeout=T) == "late"


@ray.remote
def look_at(top, nested):
    inner = [nested["put"][0], nested["task"][0]]
    return top, [isinstance(ref, ray.ObjectRef) for ref in inner], ray.get(inner)


def test_a_top_level_ref_arrives_as_its_value_a_nested_one_as_a_ref(driver):
    """Ray: a ref passed as an argument is replaced by its value before the
    task runs; refs inside a list or dict arrive as ObjectRefs, which the
    task may ray.get."""
    top, inside, made = ray.put(41), ray.put("inside"), square.remote(3)
    result = ray.get(look_at.remote(top, {"put": [inside], "task": [made]}), timeout=T)
    assert result == (41, [True, True], ["inside", 9])


def test_a_failed_ref_fails_its_dependent_without_running_it(driver, tmp_path):
    """Ray: a task given a failed ref as an argument fails with the same
    error, and its function does not run."""
    marker = tmp_path / "ran"
    dependent = touch_and_return.remote(divide.remote(1, 0), str(marker))
    with pytest.raises(ZeroDivisionError) as raised:
        ray.get(dependent, timeout=T)
    assert isinstance(raised.value, ray.exceptions.RayTaskError)
    # The same function, given a good value, runs and leaves its mark.
    control = tmp_path / "control"
    assert ray.get(touch_and_return.remote(divide.remote(1, 2), str(control)), timeout=T) == 0.5
    assert control.exists()
    assert not marker.exists()


def test_a_task_error_is_caught_as_the_users_exception_type(driver):
    """Ray: get of a task that raised E raises an instance of both
    RayTaskError and type(E); its message carries the remote traceback and
    .cause is the original exception."""
    try:
        ray.get(divide.remote(1, 0), timeout=T)
    except ZeroDivisionError as e:
        assert isinstance(e, ray.exceptions.RayTaskError)
        assert isinstance(e, ray.exceptions.RayError)
        assert isinstance(e.cause, ZeroDivisionError)
        assert "division by zero" in str(e)
        assert "divide" in str(e)  # the remote traceback names the function
    else:
        pytest.fail("no ZeroDivisionError")


def test_the_exception_classes_are_rays():
    """ray.exceptions: every error a RayError (itself a squall.Error);
    GetTimeoutError also a TimeoutError; ActorDiedError a RayActorError."""
    ex = ray.exceptions
    for name in ["RayTaskError", "GetTimeoutError", "TaskCancelledError", "RayActorError", "ActorDiedError",
                 "WorkerCrashedError", "ObjectLostError", "OutOfMemoryError"]:
        assert issubclass(getattr(ex, name), ex.RayError), name
    assert issubclass(ex.RayError, squall.Error)
    assert issubclass(ex.GetTimeoutError, TimeoutError)
    assert issubclass(ex.ActorDiedError, ex.RayActorError)
    assert ex.TaskError is ex.RayTaskError


@pytest.mark.parametrize("made_by", ["put", "task"])
def test_an_object_is_freed_when_its_last_ref_goes(driver, made_by):
    """Ray's reference counting: once no ref to an object is left in the
    driver (nor in tasks), the object is freed from the cluster."""
    ref = ray.put(np.arange(100_000)) if made_by == "put" else square.remote(7)
    ray.get(ref, timeout=T)
    object_id = ref.object_id
    job = int(ray.get_runtime_context().get_job_id())
    with squall.Client(driver.address) as client:
        session = client.attach(job)

        def state():
            try:
                return session.objects([object_id])[0].state
            except squall.Error as e:  # forgotten altogether: freed too
                if "unknown object" in str(e):
                    return "removed"
                raise

        assert state() != "removed"
        del ref
        gc.collect()
        eventually(lambda: state() == "removed", f"object {object_id} still there after its last ref went")


def test_an_object_lives_while_a_pending_task_needs_it(driver, gates):
    """Ray: an object whose driver refs are gone stays while a pending task
    has it among its arguments."""
    path = gates()
    data = ray.put(np.arange(1000))
    result = total.remote(gate.remote(path, 0), data)  # waits for the gate first
    del data
    gc.collect()
    for _ in range(3):
        ray.get(square.remote(2), timeout=T)  # the driver's calls send its frees
    pathlib.Path(path).touch()
    assert ray.get(result, timeout=T) == sum(range(1000))


def test_an_actor_ends_when_its_last_handle_goes(driver):
    """Ray: an unnamed, non-detached actor is terminated once every handle
    to it has gone out of scope; its process ends."""
    counter = Counter.remote()
    pid = ray.get(counter.pid.remote(), timeout=T)
    assert process_alive(pid)
    del counter
    gc.collect()
    eventually(lambda: not process_alive(pid), f"the actor's process {pid} outlived its last handle")


def test_more_actors_than_cpus_all_answer(driver):
    """Ray: an actor holds no cpu while it lives (num_cpus unset), so more
    actors than the cluster has cpus all run, and tasks still find cpus."""
    cpus = int(ray.cluster_resources()["CPU"])
    counters = [Counter.remote() for _ in range(cpus + 1)]
    assert ray.get([c.incr.remote() for c in counters], timeout=T) == [1] * (cpus + 1)
    assert ray.get([square.remote(i) for i in range(cpus)], timeout=T) == [i * i for i in range(cpus)]


def test_more_cpus_than_any_node_has_is_refused_and_the_driver_goes_on(driver):
    """Where Ray leaves an infeasible task pending for ever (with a
    warning), squall refuses it at its submit, naming the best node's cpus
    (docs/ray.md, "What differs"); the driver's other work goes on."""
    best = max(int(node["Resources"]["CPU"]) for node in ray.nodes())
    with pytest.raises(squall.Error, match=f"it asks for {best + 1} cpus and the best governor has {best}"):
        ray.get(square.options(num_cpus=best + 1).remote(3), timeout=T)
    assert ray.get(square.options(num_cpus=best).remote(3), timeout=T) == 9


@ray.remote(max_retries=1)
def crash_once(marker):
    if not os.path.exists(marker):
        pathlib.Path(marker).touch()
        os._exit(1)
    return "second attempt"


@ray.remote(max_retries=0)
def crash():
    os._exit(1)


def attempt(log, error):
    """Raises error on the first attempt (counted in the file log), then
    returns the number of attempts."""
    path = pathlib.Path(log)
    attempts = (path.read_text() if path.exists() else "") + "x"
    path.write_text(attempts)
    if len(attempts) == 1:
        raise error("first attempt")
    return len(attempts)


@ray.remote
def fail_once(log, error):
    return attempt(log, error)


@ray.remote(max_retries=1, retry_exceptions=[ValueError])
def fail_once_retrying_value_errors(log, error):
    return attempt(log, error)


def test_a_task_whose_worker_died_runs_again_with_max_retries(driver, tmp_path):
    """Ray: max_retries covers system failures: a task whose worker process
    died runs again."""
    assert ray.get(crash_once.remote(str(tmp_path / "crashed")), timeout=T) == "second attempt"


def test_a_worker_death_with_no_retries_left_raises_worker_crashed_error(driver):
    """Ray: a task whose worker died, with no retries left, raises
    WorkerCrashedError."""
    with pytest.raises(ray.exceptions.WorkerCrashedError):
        ray.get(crash.remote(), timeout=T)
    assert ray.get(square.remote(3), timeout=T) == 9


def test_retry_exceptions_true_retries_an_application_error(driver, tmp_path):
    """Ray: retry_exceptions=True retries a task that raised, up to
    max_retries."""
    log = tmp_path / "attempts"
    ref = fail_once.options(max_retries=1, retry_exceptions=True).remote(str(log), RuntimeError)
    assert ray.get(ref, timeout=T) == 2


def test_retry_exceptions_list_retries_the_listed_types_only(driver, tmp_path):
    """Ray: retry_exceptions=[ValueError] retries a task that raised a
    ValueError; one that raised a TypeError fails at its first attempt."""
    retried, not_retried = tmp_path / "value", tmp_path / "type"
    assert ray.get(fail_once_retrying_value_errors.remote(str(retried), ValueError), timeout=T) == 2
    ref = fail_once.options(max_retries=3, retry_exceptions=[ValueError]).remote(str(not_retried), TypeError)
    with pytest.raises(TypeError):
        ray.get(ref, timeout=T)
    assert not_retried.read_text() == "x"


def test_application_errors_are_not_retried_by_default(driver, tmp_path):
    """Ray: without retry_exceptions, max_retries does not cover exceptions
    the task raised."""
    log = tmp_path / "attempts"
    with pytest.raises(ValueError):
        ray.get(fail_once.options(max_retries=3).remote(str(log), ValueError), timeout=T)
    assert log.read_text() == "x"


def test_cancel_fails_one_running_task_and_leaves_the_others(driver, gates, tmp_path):
    """ray.cancel: get of the cancelled task raises TaskCancelledError; a
    task running beside it completes."""
    started = tmp_path / "started"
    held = gate.remote(gates(), "never", str(started))
    eventually(started.exists, "the task never started", seconds=T)
    other_gate = gates()
    other = gate.remote(other_gate, "other")
    ray.cancel(held)
    with pytest.raises(ray.exceptions.TaskCancelledError):
        ray.get(held, timeout=T)
    pathlib.Path(other_gate).touch()
    assert ray.get(other, timeout=T) == "other"


def test_a_killed_actor_raises_actor_died_error(driver):
    """ray.kill: the actor dies at once; later calls raise ActorDiedError
    (a RayActorError); its process ends."""
    counter = Counter.remote()
    pid = ray.get(counter.pid.remote(), timeout=T)
    ray.kill(counter)
    with pytest.raises(ray.exceptions.RayActorError) as raised:
        ray.get(counter.incr.remote(), timeout=T)
    assert isinstance(raised.value, ray.exceptions.ActorDiedError)
    eventually(lambda: not process_alive(pid), f"the killed actor's process {pid} is still there")


def test_kill_without_no_restart_restarts_a_restartable_actor(driver):
    """ray.kill(no_restart=False) on an actor with max_restarts=1: the actor
    comes back as a new instance (its constructor run again, state lost)."""
    counter = Counter.options(max_restarts=1).remote()
    assert ray.get([counter.incr.remote() for _ in range(3)], timeout=T) == [1, 2, 3]
    old_pid = ray.get(counter.pid.remote(), timeout=T)
    ray.kill(counter, no_restart=False)
    # A call that raced the kill may fail (at-most-once calls); the restarted
    # actor answers the next ones.
    deadline = time.monotonic() + 20
    while True:
        try:
            value = ray.get(counter.incr.remote(), timeout=T)
            break
        except ray.exceptions.RayActorError:
            assert time.monotonic() < deadline, "the actor never came back"
    assert value == 1
    assert ray.get(counter.pid.remote(), timeout=T) != old_pid


@ray.remote
class Splitter:
    @ray.method(num_returns=2)
    def split(self, n):
        return n // 2, n - n // 2


@ray.remote(num_returns=2)
def quotient_and_remainder(a, b):
    return divmod(a, b)


@ray.remote
def squares(*xs):
    return tuple(x * x for x in xs)


def test_a_method_with_num_returns_two_gives_two_refs(driver):
    """@ray.method(num_returns=2): a call returns two ObjectRefs."""
    low, high = Splitter.remote().split.remote(7)
    assert ray.get([low, high], timeout=T) == [3, 4]


def test_a_task_with_num_returns_gives_that_many_refs(driver):
    """@ray.remote(num_returns=2) and .options(num_returns=3): a list of that
    many ObjectRefs, one for each value of the returned sequence."""
    quotient, remainder = quotient_and_remainder.remote(17, 5)
    assert ray.get([quotient, remainder], timeout=T) == [3, 2]
    refs = squares.options(num_returns=3).remote(1, 2, 3)
    assert len(refs) == 3
    assert ray.get(refs, timeout=T) == [1, 4, 9]


def test_put_of_a_numpy_array_round_trips(driver):
    """ray.put then ray.get gives the array back (values, dtype, shape), and a
    task given the ref gets the array; a big one too."""
    array = np.arange(12, dtype=np.float32).reshape(3, 4)
    back = ray.get(ray.put(array), timeout=T)
    assert back.dtype == np.float32 and back.shape == (3, 4)
    assert np.array_equal(back, array)
    big = ray.put(np.ones(1_000_000, dtype=np.int64))  # 8 MB
    assert ray.get(total.remote(None, big), timeout=T) == 1_000_000
    assert ray.get(big, timeout=T).sum() == 1_000_000


SECOND_DRIVER = """
import os, sys, time
import squall as ray

address, namespace, name, lifetime, gate = sys.argv[1:]
ray.init(address=address, namespace=namespace)


@ray.remote
class Keeper:
    def __init__(self):
        self.value = 0

    def incr(self):
        self.value += 1
        return self.value


options = {"name": name} if lifetime == "-" else {"name": name, "lifetime": lifetime}
keeper = Keeper.options(**options).remote()
print(ray.get([keeper.incr.remote() for _ in range(5)], timeout=60)[-1], flush=True)
deadline = time.monotonic() + 60
while not os.path.exists(gate) and time.monotonic() < deadline:
    time.sleep(0.01)
"""


def second_driver(driver, tmp_path, name, lifetime):
    """Runs SECOND_DRIVER, which makes the named actor and calls it five
    times; returns once it is made, with the gate that lets the driver end."""
    gate_path = tmp_path / f"{name}-may-exit"
    process = subprocess.Popen([sys.executable, "-c", SECOND_DRIVER, driver.address, "squall-tests", name,
                                lifetime, str(gate_path)], stdout=subprocess.PIPE, text=True, cwd=tmp_path)
    line = process.stdout.readline()
    if line != "5\n":
        process.kill()
        process.wait()
    assert line == "5\n"
    return process, gate_path


def finish(process, gate_path):
    gate_path.touch()
    assert process.wait(timeout=T) == 0


def named(name):
    """Whether get_actor finds the actor in the second driver's namespace."""
    try:
        ray.get_actor(name, namespace="squall-tests")
        return True
    except ValueError:
        return False


def test_a_detached_actor_outlives_the_driver_that_made_it(driver, tmp_path):
    """Ray: a named actor with lifetime="detached" outlives its driver; a
    later driver reaches it with get_actor(name, namespace), state kept;
    ray.kill ends it, and its name with it."""
    name = f"keeper-{uuid.uuid4().hex[:8]}"
    finish(*second_driver(driver, tmp_path, name, "detached"))
    keeper = ray.get_actor(name, namespace="squall-tests")
    assert ray.get(keeper.incr.remote(), timeout=T) == 6
    ray.kill(keeper)
    eventually(lambda: not named(name), "the killed detached actor is still named")


def test_a_non_detached_named_actor_ends_with_its_driver(driver, tmp_path):
    """Ray: a named actor is reachable from another driver by get_actor
    while its own driver runs; not detached, it shares that driver's fate:
    once the driver has exited, get_actor raises ValueError."""
    name = f"mortal-{uuid.uuid4().hex[:8]}"
    process, gate_path = second_driver(driver, tmp_path, name, "-")
    try:
        assert ray.get(ray.get_actor(name, namespace="squall-tests").incr.remote(), timeout=T) == 6
    finally:
        finish(process, gate_path)
    eventually(lambda: not named(name), "the actor outlived its driver")


def test_get_actor_of_an_unknown_name_raises_value_error(driver):
    """ray.get_actor raises ValueError if no actor has that name."""
    with pytest.raises(ValueError):
        ray.get_actor(f"nobody-{uuid.uuid4().hex[:8]}")


def test_init_twice_raises_unless_ignore_reinit_error(driver):
    """ray.init a second time raises RuntimeError; with
    ignore_reinit_error=True it does nothing, and the driver goes on."""
    assert ray.is_initialized()
    with pytest.raises(RuntimeError):
        ray.init(address=driver.address)
    ray.init(address=driver.address, ignore_reinit_error=True)
    assert ray.is_initialized()
    assert ray.get(square.remote(3), timeout=T) == 9


def test_cluster_resources_and_nodes(driver):
    """ray.cluster_resources() has the cluster's "CPU" total,
    available_resources() no more than that; ray.nodes() one record per
    node, alive, with its resources."""
    assert ray.cluster_resources()["CPU"] == 4
    assert 0 <= ray.available_resources().get("CPU", 0) <= 4
    nodes = ray.nodes()
    assert len(nodes) == 2
    for node in nodes:
        assert node["Alive"] is True
        assert node["Resources"]["CPU"] == 2
        assert node["NodeID"] and node["NodeManagerAddress"]


@ray.remote
def where():
    context = ray.get_runtime_context()
    return context.get_job_id(), context.get_node_id(), context.get_task_id()


def test_the_runtime_context_names_the_job_node_and_task(driver):
    """get_runtime_context(): a task's job is its driver's; its node is one
    of ray.nodes(); it has a task id. ObjectRefs name their object and
    session."""
    job = ray.get_runtime_context().get_job_id()
    assert isinstance(job, str) and int(job) > 0
    task_job, node, task = ray.get(where.remote(), timeout=T)
    assert task_job == job
    assert node in {n["NodeID"] for n in ray.nodes()}
    assert task
    ref = ray.put(1)
    assert isinstance(ref, ray.ObjectRef)
    assert isinstance(ref.hex(), str) and isinstance(ref.object_id, int)
    assert ref.session_id == int(job)


@ray.remote(num_gpus=1)
def gpu_ids():
    return ray.get_gpu_ids()


@ray.remote
def no_gpu_ids():
    return ray.get_gpu_ids()


def test_a_task_given_a_gpu_sees_it_and_one_given_none_sees_none(driver):
    """Ray: get_gpu_ids() inside a task names the GPUs it was given
    (CUDA_VISIBLE_DEVICES), none for a task that asked for none, in the
    same warm processes."""
    for _ in range(3):
        ids = ray.get(gpu_ids.remote(), timeout=T)
        assert len(ids) == 1 and ids[0] in (0, 1)
        assert ray.get(no_gpu_ids.remote(), timeout=T) == []
