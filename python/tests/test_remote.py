"""@squall.remote against a real cluster (conftest.py) whose governors keep
squall-python-executor warm: numbers, bytes, numpy arrays, objects and
tasks as arguments, outputs, options, errors with the remote traceback, and
a thousand calls in one graph."""

import os
import pathlib
import sys

import cloudpickle
import numpy as np
import pytest

import squall

# The functions below travel by value: the governors' Python cannot import
# this test file.
cloudpickle.register_pickle_by_value(sys.modules[__name__])


@squall.remote
def add(x, y):
    return x + y


@squall.remote(outputs="bytes")
def shout(text):
    return text.upper()


@squall.remote
def divide(x, y):
    return x / y


def test_numbers_chain_through_tasks(session):
    three = add(1, 2)
    thirteen = add(three, y=10)
    thirteen.output.keep()
    session.submit()
    assert thirteen.output.value() == 13
    assert three.info().name == "add" and three.info().type == "call"


def test_bytes_in_and_out(session):
    raw = shout(session.blob(b"quiet"))
    text = shout.options(name="shout-text")(b"from the config")
    raw.output.keep()
    text.output.keep()
    session.submit()
    assert raw.output.value() == b"QUIET"  # raw: no content type, bytes
    assert text.output.fetch() == b"FROM THE CONFIG"
    assert text.info().name == "shout-text"


def test_numpy_arrays(session):
    @squall.remote
    def normalise(matrix, by):
        return matrix / by.sum()

    matrix = np.arange(12, dtype=np.float64).reshape(3, 4)
    weights = session.pickled(np.array([1.0, 3.0]))
    result = normalise(matrix, weights)
    result.output.keep()
    session.submit()
    np.testing.assert_array_equal(result.output.value(), matrix / 4.0)


def test_an_exception_fails_the_task_with_the_remote_traceback(session):
    divide(1, 0)
    session.submit()
    with pytest.raises(squall.TaskFailed) as failed:
        session.wait_all()
    message = str(failed.value)
    assert failed.value.task_name == "divide"
    assert "function python/call-1 failed: Traceback (most recent call last):" in message
    assert "return x / y" in message and message.endswith("ZeroDivisionError: division by zero")
    assert "_worker.py" not in message


def test_several_outputs_objects_and_dirs_as_arguments(session):
    @squall.remote(outputs=["pickle", "bytes"])
    def split(text):
        head, tail = text.split(b" ", 1)
        return head.decode(), tail

    @squall.remote
    def listing(directory):
        return sorted(p.name for p in pathlib.Path(directory).iterdir()), isinstance(directory, pathlib.Path)

    parts = split(session.blob(b"hello big world"))
    head, tail = parts.outputs
    folder = session.make_dir({"a.txt": tail, "b.txt": session.blob(b"b")})
    names = listing(folder)
    for o in (head, tail, names.output):
        o.keep()
    session.submit()
    assert head.value() == "hello"
    assert tail.value() == b"big world"
    assert names.output.value() == (["a.txt", "b.txt"], True)
    with pytest.raises(squall.Error, match="has 2 outputs; pass one of task.outputs"):
        add(parts, 1)


def test_options_cpus_resources_and_keep(session):
    @squall.remote(cpus=2, resources={"gpus": 1}, keep=True, name="on-a-gpu")
    def double(x):
        return 2 * x

    task = double(21)
    session.submit()
    assert task.output.value() == 42
    assert task.info().name == "on-a-gpu"
    double.options(resources={"gpus": 3})(1)
    with pytest.raises(squall.Error, match="gpus"):
        session.submit()
    with pytest.raises(TypeError, match="unknown colour"):
        double.options(colour="red")
    with pytest.raises(ValueError, match="'json' is not 'pickle' or 'bytes'"):
        squall.remote(outputs="json")(len)
    with pytest.raises(ValueError, match="from 0 to 16"):
        squall.remote(outputs=17)(len)


def test_a_call_sees_the_gpus_it_was_given_and_the_next_call_of_its_process_does_not(session):
    """A warm process serves calls of other grants: each sees its own
    CUDA_VISIBLE_DEVICES (and OMP_NUM_THREADS), as a program task would,
    in os.environ and the C environment alike."""
    @squall.remote(keep=True)
    def visible():
        import ctypes
        libc = ctypes.CDLL(None)
        libc.getenv.restype = ctypes.c_char_p
        c_value = libc.getenv(b"CUDA_VISIBLE_DEVICES")
        return (os.environ.get("CUDA_VISIBLE_DEVICES"), c_value.decode() if c_value is not None else None,
                os.environ.get("OMP_NUM_THREADS"), os.getpid())

    def one(task):
        session.submit()
        return task.output.value()

    # One after the other: the warm processes take turns at both kinds.
    rounds = [(one(visible.options(resources={"gpus": 1}, cpus=2)()), one(visible())) for _ in range(4)]
    for (gpu, gpu_c, gpu_threads, _), (none, none_c, threads, _) in rounds:
        assert gpu in ("0", "1") and gpu_c == gpu
        assert gpu_threads == "2"
        assert none == "" and none_c == ""
        assert threads == "1"


def test_a_big_argument_travels_as_a_constant(session):
    @squall.remote
    def total(values):
        return float(values.sum())

    values = np.ones(200_000)  # 1.6 MB pickled: more than a task's config should hold
    task = total(values)
    task.output.keep()
    session.submit()
    assert task.output.value() == 200_000.0
    assert len(task.info().inputs) == 1


def test_results_that_do_not_fit_their_outputs_fail_saying_why(client):
    @squall.remote(outputs=2)
    def three():
        return 1, 2, 3

    @squall.remote(outputs="bytes")
    def number():
        return 5

    @squall.remote
    def generator():
        return (i for i in range(3))

    for function, says in ((three, "three has 2 outputs and returned 3 values"),
                           (number, "number returned int for output 0, which is declared 'bytes'"),
                           (generator, "cannot be pickled")):
        with client.new_session(function.__name__) as session:
            function()
            session.submit()
            with pytest.raises(squall.TaskFailed, match=says):
                session.wait_all()


def test_a_function_submits_through_a_client_on_a_thread_of_its_own(cluster, session):
    @squall.remote
    def nested(address):
        import threading
        said = []
        try:
            squall.Client(address)
        except squall.Error as e:
            said.append(str(e))

        def submit():
            with squall.Client(address) as client, client.new_session("inner") as inner:
                joined = inner.concat([inner.blob(b"from "), inner.blob(b"inside")])
                joined.output.keep()
                inner.submit()
                said.append(joined.output.fetch())

        thread = threading.Thread(target=submit)
        thread.start()
        thread.join()
        return said

    task = nested(cluster.address)
    task.output.keep()
    session.submit()
    refused, fetched = task.output.value()
    assert refused.startswith("cannot make a squall Client on this thread") and fetched == b"from inside"


def test_a_call_outside_a_session_is_refused():
    with pytest.raises(squall.Error, match="no current session"):
        add(1, 2)
    assert add.function(1, 2) == 3 and add.__name__ == "add"


def test_a_thousand_calls_map_and_reduce(session):
    @squall.remote
    def square(x):
        return x * x

    @squall.remote
    def total(*values):
        return sum(values)

    squares = [square(i) for i in range(1000)]
    sums = [total(*squares[i:i + 100]) for i in range(0, 1000, 100)]
    result = total(*sums)
    result.output.keep()
    session.submit()
    assert result.output.value() == sum(i * i for i in range(1000))
