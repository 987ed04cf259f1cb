"""The client for Python against a real cluster (conftest.py): constants,
programs, built-ins, tasklib calls, resources, keep, submit, the waits,
fetch, task and session info, the errors, Ctrl-C during a wait, and 10,000
tasks built and submitted from Python."""

import json
import os
import pathlib
import signal
import sys
import tarfile
import io
import threading
import time

import pytest

import squall


def test_hello_world_concat_of_two_constants(session):
    task = session.concat([session.blob(b"Hello "), session.blob("world!")])
    assert task.output.keep() == task.output
    session.submit()
    assert task.output.fetch() == b"Hello world!"
    assert task.output.value() == b"Hello world!"  # no content type: bytes
    assert task.info().type == "concat"


def test_a_program_pipeline_in_keywords_and_chained(session):
    text = session.blob(b"pear\napple\nfig\n", label="words")
    sort = session.execute(["sort"], stdin=text, stdout=True, name="sort")
    count = session.execute(squall.Program("wc -l < in.txt > n.txt").input(sort.output, "in.txt").output("n.txt")
                            .name("count"))
    shout = session.execute(squall.Program(["tr", "a-z", "A-Z"], stdin=sort, stdout=True, env={"LC_ALL": "C"}))
    for task in (sort, count, shout):
        task.output.keep()
    session.submit()
    session.wait([sort, count.output, shout])
    assert sort.output.fetch() == b"apple\nfig\npear\n"
    assert count.output.fetch().strip() == b"3"
    assert shout.output.fetch() == b"APPLE\nFIG\nPEAR\n"
    assert sort.info().name == "sort"


def test_a_factory_program_binds_its_slots_per_call(session):
    upper = squall.Program("tr a-z A-Z < in.txt").input_slot("in", "in.txt").stdout_output()
    calls = [session.execute(upper, slots={"in": session.blob(word)}) for word in ("ant", "bee")]
    for call in calls:
        call.output.keep()
    session.submit()
    assert [c.output.fetch() for c in calls] == [b"ANT", b"BEE"]
    with pytest.raises(squall.Error, match="slot 'out'"):
        session.execute(upper, slots={"in": session.blob(b"x"), "out": session.blob(b"y")})
    with pytest.raises(TypeError, match="on the Program"):
        session.execute(upper, stdin=session.blob(b"x"))


def test_streams_and_the_ways_to_place_inputs(session):
    numbers = session.execute("seq 1 5", stdout=squall.STREAM, name="seq")
    odd = session.execute(["grep", "[135]"], stdin=numbers, stdout=True)
    placed = session.execute(squall.Program(["sh", "-c", 'cat "$0" && echo more >> b && cat b'])
                             .input_arg(session.blob(b"as an argument\n"), "a")
                             .writable_input(session.blob(b"writable\n"), "b")
                             .stdout_output())
    odd.output.keep()
    placed.output.keep()
    session.submit()
    assert odd.output.fetch() == b"1\n3\n5\n"
    assert placed.output.fetch() == b"as an argument\nwritable\nmore\n"
    assert numbers.output.kind == squall.STREAM
    with pytest.raises(squall.Error, match="a shell command is one line"):
        session.execute(squall.Program.shell("cat a").input_arg(session.blob(b"x"), "a").stdout_output())
        session.submit()


def test_directories_in_and_out(session, tmp_path):
    source = tmp_path / "source"
    (source / "etc").mkdir(parents=True)
    (source / "etc" / "name.txt").write_text("squall")
    uploaded = session.directory(str(source))
    assert uploaded.kind == squall.DIR
    made = session.make_dir({"a/greeting.txt": session.blob(b"hello"), "cfg": uploaded})
    report = session.execute("mkdir out && cat d/a/greeting.txt d/cfg/etc/name.txt > out/both.txt",
                             inputs={"d": made}, outputs=["out/"])
    both = session.slice_dir(report, "both.txt")
    sub = session.slice_dir(made, "cfg/")
    for task in (report, both, sub):
        task.output.keep()
    session.submit()
    assert both.output.fetch() == b"hellosquall"
    assert report.output.kind == squall.DIR and sub.output.kind == squall.DIR
    report.output.fetch_dir(str(tmp_path / "report"))
    assert (tmp_path / "report" / "both.txt").read_bytes() == b"hellosquall"
    names = tarfile.open(fileobj=io.BytesIO(sub.output.fetch())).getnames()
    assert any(name.endswith("etc/name.txt") for name in names)


def test_files_built_ins_load_and_store(session, tmp_path, load_root):
    local = tmp_path / "local.txt"
    local.write_bytes(b"from a file\n")
    on_governor = load_root / "in.txt"
    on_governor.write_bytes(b"read on a governor\n")
    (load_root / "tree").mkdir(exist_ok=True)
    (load_root / "tree" / "leaf").write_bytes(b"leaf")
    file = session.file(str(local))
    loaded = session.load(str(on_governor))
    loaded_dir = session.load_dir(str(load_root / "tree"))
    slept = session.sleep(0.01, file)
    joined = session.concat([slept, loaded])
    session.store(joined, str(load_root / "out.txt"), overwrite=True)
    leaf = session.slice_dir(loaded_dir, "leaf")
    joined.output.keep()
    leaf.output.keep()
    session.submit()
    session.wait_all()
    assert joined.output.fetch() == b"from a file\nread on a governor\n"
    assert leaf.output.fetch() == b"leaf"
    assert (load_root / "out.txt").read_bytes() == b"from a file\nread on a governor\n"
    joined.output.fetch_to_file(str(tmp_path / "fetched"))
    assert (tmp_path / "fetched").read_bytes() == b"from a file\nread on a governor\n"


@pytest.mark.skipif(not os.environ.get("SQUALL_TEST_EXECUTOR"), reason="needs $SQUALL_TEST_EXECUTOR")
def test_a_call_of_a_tasklib_function_and_its_failure(client):
    with client.new_session("call") as session:
        count = session.call("testfn/wordcount", [session.blob(b"one two three")])
        count.output.keep()
        session.submit()
        assert count.output.fetch() == b"3"
        assert "testfn/wordcount" in client.governors()[0].functions
    with client.new_session("call fails") as session:
        session.call("testfn/fail", config=b"on purpose")
        session.submit()
        with pytest.raises(squall.TaskFailed, match="asked to fail: on purpose") as failed:
            session.wait_all()
        assert failed.value.task_name == "testfn/fail"
    with client.new_session("no such function") as session:
        session.call("testfn/nothing")
        with pytest.raises(squall.Error, match="no governor offers the function testfn/nothing"):
            session.submit()


def test_resources_are_given_to_the_task(session):
    gpu = session.execute("echo $CUDA_VISIBLE_DEVICES", stdout=True)
    gpu.resource("gpus", 1).cpus(1)
    gpu.output.keep()
    session.submit()
    assert gpu.output.fetch().strip() in (b"0", b"1")
    with pytest.raises(squall.Error, match="resource gpus is asked for twice"):
        session.execute("true").resource("gpus", 1).resource("gpus", "all")
    session.execute("true").resource("tpus", 1)
    with pytest.raises(squall.Error, match="tpus"):
        session.submit()


def test_keep_and_unkeep(session):
    kept = session.concat([session.blob(b"kept")])
    kept.output.keep().label("result").content_type("text")
    passing = session.concat([session.blob(b"passing")])
    last = session.concat([passing])
    last.output.keep()
    session.submit()
    session.wait_all()
    info = kept.output.info()
    assert (info.keep, info.label, info.content_type, info.state, info.size) == (True, "result", "text", "finished", 4)
    assert info.producer == kept.id and info.locations
    session.unkeep([kept])
    assert kept.output.info().keep is False
    with pytest.raises(squall.Error, match="already submitted"):
        kept.output.keep()
    with pytest.raises(squall.Error, match=f"object {passing.output.id} is not kept"):
        passing.output.fetch()


def test_the_waits(session):
    quick = [session.sleep(0.01) for _ in range(3)]
    slow = session.sleep(30)
    session.submit()
    finished = session.wait_some(quick + [slow])
    assert finished and slow not in finished and all(t in quick for t in finished)
    quick[0].wait()
    quick[1].output.wait()
    session.wait(quick)
    assert slow.info().state in ("ready", "running")
    session.cancel()
    with pytest.raises(squall.TaskFailed, match="cancel"):
        session.wait_all()


def test_task_and_session_info(client, session):
    task = session.execute("echo out; echo err >&2", name="talk")
    task.attributes({"step": 1}).expected_duration(0.1).time_limit(60).retries(1)
    session.submit()
    session.wait_all()
    info = task.info()
    assert (info.name, info.type, info.state, info.exit_status, info.attempt) == ("talk", "execute", "finished", 0, 1)
    assert info.stdout_tail == b"out\n" and info.stderr_tail == b"err\n"
    assert json.loads(info.attributes) == {"step": 1}
    assert info.governor.startswith("governor-") and info.start_time > 0 and info.duration >= 0
    assert info.outputs == [] and info.inputs == []
    state = session.state()
    assert (state.id, state.name, state.open, state.finished, state.failed) == (session.id, "test_task_and_session_info", True, 1, 0)
    assert [t.id for t in session.tasks(states=["finished"])] == [task.id]
    assert session.explain(task).summary and "finished" in str(task.explain())
    assert session.id in [s.id for s in client.sessions()]
    governors = client.governors()
    assert len(governors) == 2 and all(g.cpus == 2 for g in governors)
    assert "python/call-1" in governors[0].functions
    assert "SessionState(" in repr(state) and "TaskInfo(" in repr(info)


def test_a_failed_task_raises_task_failed_with_its_name_status_and_stderr(session):
    session.execute("echo broken >&2; exit 3", name="bad")
    session.submit()
    with pytest.raises(squall.TaskFailed) as failed:
        session.wait_all()
    error = failed.value
    assert isinstance(error, squall.Error)
    assert (error.task_name, error.exit_status) == ("bad", 3)
    assert "broken" in error.stderr_tail and "bad" in str(error)
    # The session has failed: what needs it to go on raises the same.
    with pytest.raises(squall.TaskFailed, match="bad"):
        session.submit()
    assert session.state().failure


def test_bad_input_gets_an_error_naming_the_problem(client, session):
    directory = session.make_dir({"a": session.blob(b"a")})
    session.concat([directory])
    with pytest.raises(squall.Error, match="dir"):
        session.submit()
    with client.new_session("other") as other:
        with pytest.raises(squall.Error, match="another session"):
            session.concat([other.blob(b"x")])
        with pytest.raises(squall.Error, match="session"):
            squall.Program(["cat"], stdin=other.blob(b"x"), inputs={"a": session.blob(b"y")})
    with pytest.raises(TypeError, match="squall.DataObject or squall.Task, not int"):
        session.concat([1])
    with pytest.raises(TypeError, match="list of squall.DataObject"):
        session.concat(b"bytes")
    with pytest.raises(squall.Error, match="not executor/function"):
        session.call("nofunction")
    with pytest.raises(ValueError, match="seconds"):
        session.sleep(-1)
    with pytest.raises(ValueError, match="empty argument list"):
        squall.Program([])
    two = session.execute(["true"], outputs=["a", "b"])
    with pytest.raises(squall.Error, match="has 2 outputs"):
        session.concat([two])
    with pytest.raises(squall.Error, match="cannot connect to the squall server at 127.0.0.1:1"):
        squall.Client("127.0.0.1:1")
    with pytest.raises(TypeError, match="session id"):
        client.attach(1.5)


def test_closed_sessions_and_clients_refuse_calls(cluster):
    client = squall.Client(cluster.address)
    session = client.new_session("closing")
    blob = session.blob(b"x")
    session.close()
    with pytest.raises(squall.Error, match="closed"):
        session.concat([blob])
    other = client.new_session("closed with its client")
    task = other.sleep(0)
    client.close()
    with pytest.raises(squall.Error, match="its Client was closed"):
        other.submit()
    with pytest.raises(squall.Error, match="its Client was closed"):
        task.info()
    with pytest.raises(squall.Error, match="the squall Client is closed"):
        client.sessions()


def test_a_client_is_used_from_its_own_thread(client):
    errors = []
    thread = threading.Thread(target=lambda: errors.append(pytest.raises(squall.Error, client.sessions)))
    thread.start()
    thread.join()
    assert "belongs to the thread that made it" in str(errors[0].value)


def test_attach_and_current_session(client):
    with pytest.raises(squall.Error, match="no current session"):
        squall.current_session()
    with client.new_session("attached", persistent=True) as made:
        assert squall.current_session() is made
        made.blob(b"shared").keep()
        made.submit()
        with client.attach("attached") as attached:
            assert attached.id == made.id and squall.current_session() is attached
            assert attached.object(1).fetch() == b"shared"
        assert squall.current_session() is made
        assert made.state().open  # leaving an attached session's `with` leaves it open
    with pytest.raises(squall.Error):
        client.attach(made.id).submit()


def test_ctrl_c_interrupts_a_wait_and_the_session_goes_on(session):
    task = session.sleep(60)
    session.submit()
    # With a switch interval this long, the helper thread gets the GIL only
    # once the main thread releases it: inside wait_all, blocked.
    blocked = threading.Event()

    def interrupt():
        blocked.wait()
        os.kill(os.getpid(), signal.SIGINT)

    helper = threading.Thread(target=interrupt)
    helper.start()
    interval = sys.getswitchinterval()
    sys.setswitchinterval(1000)
    started = time.monotonic()
    try:
        with pytest.raises(KeyboardInterrupt):
            blocked.set()
            session.wait_all()
    finally:
        sys.setswitchinterval(interval)
        helper.join()
    assert time.monotonic() - started < 30
    assert task.info().state in ("ready", "running")
    session.cancel()


def test_ten_thousand_tasks_built_and_submitted_from_python(session):
    parts = [session.blob(str(i)) for i in range(100)]
    tasks = [session.concat([parts[i % 100], parts[(i + 1) % 100]]) for i in range(10_000)]
    tasks[-1].output.keep()
    session.submit()
    session.wait_all()
    state = session.state()
    assert (state.finished, state.failed) == (10_000, 0)
    assert tasks[-1].output.fetch() == b"990"


def test_the_type_stub_declares_the_whole_module():
    """squall/_squall.pyi (kept by hand) declares every public name of the
    extension module and every public method and property of its classes."""
    import ast
    import inspect

    from squall import _squall

    def names(body):
        found = set()
        for node in body:
            if isinstance(node, (ast.FunctionDef, ast.ClassDef)):
                found.add(node.name)
            elif isinstance(node, ast.AnnAssign):
                found.add(node.target.id)
            elif isinstance(node, ast.Assign):
                found.update(t.id for t in node.targets)
        return found

    stub = ast.parse((pathlib.Path(_squall.__file__).parent / "_squall.pyi").read_text())
    classes = {node.name: names(node.body) for node in stub.body if isinstance(node, ast.ClassDef)}
    assert {n for n in vars(_squall) if not n.startswith("_")} <= names(stub.body)
    for name, value in vars(_squall).items():
        if name.startswith("_") or not inspect.isclass(value) or issubclass(value, BaseException):
            continue
        public = {m for m in vars(value) if not m.startswith("_") or m in ("__enter__", "__exit__")}
        if issubclass(value, squall.Kind):
            public = set(value.__members__)
        missing = public - classes[name]
        assert not missing, f"{name}: {sorted(missing)} not declared in _squall.pyi"
