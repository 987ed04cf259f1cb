"""squall.LocalCluster and @squall.remote when processes come and go: a
cluster of its own per test, killed on purpose."""

import os
import select
import signal
import subprocess
import sys

import cloudpickle
import pytest

import squall

cloudpickle.register_pickle_by_value(sys.modules[__name__])


@squall.remote
def pid(_after=None):
    return os.getpid()


def test_a_local_cluster_runs_and_stops():
    cluster = squall.LocalCluster(governors=1, cpus=1, http="127.0.0.1:0")
    assert cluster.address.startswith("127.0.0.1:") and cluster.http_address.startswith("127.0.0.1:")
    assert cluster.governor_count == 1 and cluster.governor_running(0)
    assert os.path.isdir(cluster.work_dir)
    with squall.Client(cluster.address) as client:
        assert [g.name for g in client.governors()] == ["governor-0"]
    cluster.stop()
    assert not cluster.governor_running(0)
    with pytest.raises(squall.Error, match="LocalCluster: .*squall-governor-nowhere"):
        squall.LocalCluster(governor_program="/squall-governor-nowhere")


def test_calls_run_in_a_warm_process():
    with squall.LocalCluster(governors=1, cpus=1) as cluster, squall.Client(cluster.address) as client:
        with client.new_session("warm") as session:
            first = pid()
            second = pid(first)  # runs after the first, on the one cpu
            for task in (first, second):
                task.output.keep()
            session.submit()
            assert first.output.value() == second.output.value()


@pytest.mark.skipif(not os.environ.get("SQUALL_CLI"), reason="needs $SQUALL_CLI (the squall command)")
def test_squall_start_python_keeps_the_python_executor_warm():
    start = subprocess.Popen([os.environ["SQUALL_CLI"], "start", "--python", "--governors", "1", "--cpus", "1",
                              "--listen", "127.0.0.1:0", "--http", "off"], stdout=subprocess.PIPE, text=True)
    try:
        for line in start.stdout:
            if line.startswith("squall is running: server="):
                address = line.split("=", 1)[1].split()[0]
                break
        else:
            pytest.fail("squall start --python printed no address")
        with squall.Client(address) as client, client.new_session("started") as session:
            assert "python/call-1" in client.governors()[0].functions
            task = pid()
            task.output.keep()
            session.submit()
            assert task.output.value() > 0
    finally:
        start.send_signal(signal.SIGINT)
        assert start.wait(timeout=30) == 0


def test_without_the_python_executor_a_call_is_refused_naming_the_function():
    with squall.LocalCluster(governors=1, cpus=1, python=False) as cluster, \
            squall.Client(cluster.address) as client, client.new_session("no python") as session:
        pid()
        with pytest.raises(squall.Error, match="no governor offers the function python/call-1"):
            session.submit()


def test_a_governor_crash_mid_call_runs_the_call_again_elsewhere(tmp_path):
    started = tmp_path / "started"
    os.mkfifo(started)
    reader = os.open(started, os.O_RDONLY | os.O_NONBLOCK)

    @squall.remote
    def hang_the_first_time(fifo):
        import os
        import time
        try:
            fd = os.open(fifo, os.O_WRONLY | os.O_NONBLOCK)
        except OSError:  # no reader: a later run
            return "ran again"
        os.write(fd, b"started\n")
        os.close(fd)
        time.sleep(3600)  # in the call until its governor is killed

    with squall.LocalCluster(governors=2, cpus=1) as cluster, squall.Client(cluster.address) as client:
        with client.new_session("crash") as session:
            task = hang_the_first_time(str(started))
            task.output.keep()
            session.submit()
            assert select.select([reader], [], [], 60)[0], "the call did not start"
            assert os.read(reader, 100) == b"started\n"
            os.close(reader)  # a later run finds no reader
            info = task.info()
            assert info.state == "running"
            index = int(info.governor.rsplit("-", 1)[1])
            cluster.kill_governor(index)
            assert task.output.value() == "ran again"
            info = task.info()
            assert info.governor != f"governor-{index}" and info.state == "finished"
