"""@squall.remote functions that call @squall.remote functions (docs/nested.md):
the inner calls go into the task's own session as its children, and a
function waiting for them gives its cpu back, so a recursion deeper than the
cluster's cpus finishes on one governor with one cpu."""

import sys

import cloudpickle
import pytest

import squall

cloudpickle.register_pickle_by_value(sys.modules[__name__])


@pytest.fixture(scope="module")
def cluster():
    with squall.LocalCluster(governors=1, cpus=1) as c:
        yield c


@squall.remote
def fib(n):
    if n < 2:
        return n
    a, b = fib.remote(n - 1), fib.remote(n - 2)
    a.output.keep()
    b.output.keep()
    squall.current_session().submit()
    return a.output.value() + b.output.value()


@squall.remote
def inside():
    """What a function sees of its session."""
    session = squall.current_session()
    return session.id


def test_a_recursion_deeper_than_the_cpus_finishes(session):
    top = fib(7)
    top.output.keep()
    session.submit()
    assert top.output.value() == 13
    session.wait_all()
    # fib(7) makes 41 calls, each a task of this session.
    assert session.state().finished == 41


def test_a_function_sees_its_own_session(session):
    task = inside()
    task.output.keep()
    session.submit()
    assert task.output.value() == session.id


def test_outside_a_task_there_is_no_session():
    with pytest.raises(squall.Error, match="no current session"):
        squall.current_session()
