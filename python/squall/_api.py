"""Ray Core's API in squall (docs/ray.md): init, shutdown, get, put, wait,
cancel, kill, get_actor, the cluster's resources and the runtime context,
with Ray's names and semantics, so that a Ray program runs after
`import squall as ray`.

The driver (the process that calls init, or its first .remote()) works in
one session of its own, a job: a session like any other on the server
(status page, `squall status`, recovery), closed when the driver ends.
Inside a function running as a task, the same calls go to the task's own
session (squall._worker.nested_session). _refs.py has the objects.
"""

import atexit
import math
import os
import sys
import threading
import time
from typing import TYPE_CHECKING, Any, Dict, List, Optional, Sequence, Tuple, Union

import cloudpickle

from . import _objects
from . import _refs
from . import _squall
from . import _worker
from . import exceptions
from ._refs import ObjectRef

if TYPE_CHECKING:
    from .remote import ActorHandle

# The driver of this process: None before init() (or after shutdown()).
_driver = None
_lock = threading.Lock()


class _Driver:
    """The driver's client, its session and the cluster it may have
    started."""

    def __init__(self, address, *, num_cpus, num_gpus, resources, namespace, log_to_driver=True):
        self.cluster = None
        if address is None:
            address = os.environ.get("SQUALL_SERVER") or os.environ.get("RAY_ADDRESS") or None
        elif address == "auto":
            address = os.environ.get("SQUALL_SERVER") or "127.0.0.1:7210"
        if address is None:
            self.cluster = _squall.LocalCluster(governors=1, cpus=_whole(num_cpus, os.cpu_count() or 1),
                                                governor_args=_resource_flags(num_gpus, resources))
            address = self.cluster.address
        try:
            self.client = _squall.Client(address)
            self.session = self.client.new_session(f"driver-{os.getpid()}")
        except BaseException:
            if self.cluster is not None:
                self.cluster.stop()
            raise
        self.address = address
        namespace = namespace or f"anonymous-{self.session.id}"
        self.context = _refs.Context(self.session, batched=True, namespace=namespace)
        _refs.register(self.context)
        self.log_to_driver = log_to_driver
        if log_to_driver:
            self.session.watch_output(print_task_output)

    def close(self):
        context = self.context
        try:
            context.sync()
            if self.log_to_driver:
                # What the job's tasks printed last, before its session goes.
                self.session.drain_output()
            # Named actors outlive a session; Ray's end with their job
            # unless detached.
            for life in list(context.actors.values()):
                if life.named and not life.detached:
                    life.actor.kill()
        except _squall.Error:
            pass
        _refs.unregister(context)
        try:
            self.client.close()
        finally:
            if self.cluster is not None:
                self.cluster.stop()


def print_task_output(chunks) -> None:
    """Prints what tasks and actors printed, each line prefixed as Ray's
    log_to_driver does: "(square pid=123, node=governor-0) text", to the
    driver's standard output or error as the task wrote it."""
    for _task, is_stderr, label, governor, text in chunks:
        stream = sys.stderr if is_stderr else sys.stdout
        prefix = f"({label}, node={governor}) " if governor else f"({label}) "
        stream.write("".join(prefix + line + "\n" for line in text.splitlines()))
        stream.flush()


def _whole(cpus, default):
    """Whole cpus for an amount of Ray's (fractions round up; 0 stays)."""
    if cpus is None:
        return default
    if cpus < 0:
        raise ValueError(f"num_cpus must be >= 0, not {cpus}")
    return int(math.ceil(cpus))


def _resource_flags(num_gpus, resources):
    flags = []
    if num_gpus:
        flags += ["--resource", "gpus=[" + ",".join(str(i) for i in range(int(num_gpus))) + "]"]
    for name, amount in (resources or {}).items():
        flags += ["--resource", f"{name}={amount}"]
    return flags


def init(address: Optional[str] = None, *, num_cpus: Optional[float] = None, num_gpus: Optional[float] = None,
         resources: Optional[Dict[str, float]] = None, namespace: Optional[str] = None,
         ignore_reinit_error: bool = False, log_to_driver: bool = True, **ignored: Any) -> "_Driver":
    """Connects this process to a cluster as a driver (Ray's ray.init).

    No address (and no $SQUALL_SERVER): starts a local cluster (a server and
    a governor of num_cpus cpus, num_gpus gpus and `resources`) that lives
    until shutdown() or the end of the process. "auto": $SQUALL_SERVER, else
    127.0.0.1:7210. Otherwise the server at "host:port". A second init()
    raises RuntimeError unless ignore_reinit_error. Ray's other arguments
    are taken and ignored (docs/ray.md says which mean nothing here)."""
    global _driver
    with _lock:
        if _driver is not None:
            if ignore_reinit_error:
                return _driver
            raise RuntimeError("Maybe you called ray.init twice by accident? squall is initialized already "
                               "in this process (ignore_reinit_error=True to allow it, or shutdown() first)")
        _driver = _Driver(address, num_cpus=num_cpus, num_gpus=num_gpus, resources=resources,
                          namespace=namespace, log_to_driver=log_to_driver)
        return _driver


def shutdown() -> None:
    """Ends this process's driver: its session (its objects, its tasks not
    yet done and its actors but detached ones), and the local cluster
    init() started."""
    global _driver
    with _lock:
        driver, _driver = _driver, None
    if driver is not None:
        driver.close()


def is_initialized() -> bool:
    return _driver is not None


atexit.register(shutdown)


def context():
    """The context this call goes to: a Ray-model task's own session inside
    one, else the driver's (init() made first if need be)."""
    nested = worker_context()
    if nested is not None:
        return nested
    if _driver is None:
        init()
    return _driver.context


# The context of the Ray-model call running in this process (a worker),
# by (session, task), for each thread (a concurrent actor's have their
# own clients).
_nested = threading.local()


def worker_context(any_call=False):
    """The context of the task whose call runs now in this process: of a
    Ray-model call, or (any_call) of any call (its arguments are being
    read)."""
    if not any_call and not _worker.ray_call():
        return None
    session = _worker.nested_session()
    if session is None:
        return None
    current = getattr(_nested, "value", None)
    if current is None or current[0] is not session:
        namespace = _driver.context.namespace if _driver is not None else ""
        current = (session, _refs.Context(session, batched=False, namespace=namespace))
        _nested.value = current
        _refs.register(current[1])
    return current[1]


# ------------------------------------------------------------ objects


def put(value: Any) -> ObjectRef:
    """Stores `value` (pickled) as an object of the job and returns its
    ref; tasks given the ref get the value."""
    if isinstance(value, ObjectRef):
        raise TypeError("put: an ObjectRef cannot be put (pass the ref itself)")
    ctx = context()
    ctx.check_thread()
    # Big arrays out of band: read from their own memory at the submit
    # (squall._objects).
    parts = _objects.dumps(value)
    if sum(memoryview(p).nbytes for p in parts) >= _objects.BIG_PUT_BYTES:
        ctx.make_room()
    obj = ctx.session.blob(parts, content_type="pickle")
    obj.keep()
    ref = ObjectRef(ctx, obj)
    ctx.task_built()
    return ref


def _refs_of(refs, what):
    if isinstance(refs, ObjectRef):
        return [refs], True
    if not isinstance(refs, (list, tuple)):
        raise TypeError(f"{what}: an ObjectRef or a list of ObjectRefs, not {type(refs).__name__}")
    for r in refs:
        if not isinstance(r, ObjectRef):
            raise TypeError(f"{what}: every item must be an ObjectRef, not {type(r).__name__}")
    return list(refs), False


def _context_of(refs):
    ctx = refs[0]._context if refs else context()
    ctx.check_thread()
    return ctx


def get(object_refs: Union[ObjectRef, Sequence[ObjectRef]], *, timeout: Optional[float] = None) -> Any:
    """The value of a ref, or the values of a list of refs (in order),
    waiting for them. Raises the task's error (RayTaskError, also an
    instance of its exception's class), or GetTimeoutError once `timeout`
    seconds have passed."""
    refs, single = _refs_of(object_refs, "get")
    if not refs:
        return []
    ctx = _context_of(refs)
    ctx.sync(waiting_for=refs if timeout is None else None)
    if timeout is not None:
        if timeout < 0:
            raise ValueError(f"get: timeout must be >= 0, not {timeout}")
        unique = list({r._object.id: r for r in refs}.values())
        try:
            if timeout == 0:
                # Ready now, or not: no wait to make.
                if len(ctx.ready_now(unique)) < len(unique):
                    raise _squall.Timeout("not ready")
            else:
                ctx.session.wait([r._object for r in unique], timeout=timeout)
        except _squall.Timeout:
            raise exceptions.GetTimeoutError(f"get timed out: {timeout} s passed before "
                                             f"{'the object was' if single else 'the objects were'} ready") from None
        except _squall.TaskFailed:
            pass  # read below, each with its own error
    values = ctx.values(refs)
    return values[0] if single else values


def wait(object_refs: Sequence[ObjectRef], *, num_returns: int = 1, timeout: Optional[float] = None,
         fetch_local: bool = True) -> Tuple[List[ObjectRef], List[ObjectRef]]:
    """(ready, not_ready): the first num_returns refs to be ready (or all
    that are when `timeout` seconds pass), each list in the order given."""
    refs, single = _refs_of(object_refs, "wait")
    if single:
        raise TypeError("wait: a list of ObjectRefs, not one ObjectRef")
    if len(set(refs)) != len(refs):
        raise ValueError("wait: the list of refs has duplicates")
    if num_returns <= 0:
        raise ValueError(f"wait: num_returns must be > 0, not {num_returns}")
    if num_returns > len(refs):
        raise ValueError(f"wait: num_returns ({num_returns}) is more than the {len(refs)} refs given")
    if timeout is not None and timeout < 0:
        raise ValueError(f"wait: timeout must be >= 0, not {timeout}")
    if not refs:
        return [], []
    ctx = _context_of(refs)
    ctx.sync()
    deadline = None if timeout is None else time.monotonic() + timeout
    ready = set(ctx.ready_now(refs))
    while len(ready) < num_returns:
        remaining = None if deadline is None else deadline - time.monotonic()
        if remaining is not None and remaining <= 0:
            break
        ready.update(ctx.wait_some([r for r in refs if r not in ready], remaining))
    chosen = [r for r in refs if r in ready][:num_returns]
    chosen_set = set(chosen)
    return chosen, [r for r in refs if r not in chosen_set]


def cancel(object_ref: ObjectRef, *, force: bool = False, recursive: bool = True) -> None:
    """Cancels the task that makes `object_ref` (and the tasks it
    submitted): `get` of it raises TaskCancelledError. One that has ended
    keeps its result."""
    if not isinstance(object_ref, ObjectRef):
        raise TypeError(f"cancel: an ObjectRef, not {type(object_ref).__name__}")
    if object_ref._task is None:
        return  # a put value: nothing runs
    ctx = object_ref._context
    ctx.check_thread()
    ctx.sync()
    object_ref._task.cancel()


# ------------------------------------------------------------ actors


def get_actor(name: str, namespace: Optional[str] = None) -> "ActorHandle":
    """A handle on the live actor registered as `name` in `namespace`
    (default: this job's); ValueError when there is none."""
    from .remote import ActorHandle
    ctx = context()
    ctx.sync()
    qualified = _qualified(name, namespace or ctx.namespace)
    try:
        actor = ctx.session.get_actor(qualified)
    except _squall.Error as e:
        raise ValueError(f"Failed to look up actor with name '{name}': {e}") from None
    return ActorHandle(None, actor, ctx.session, qualified, ray_context=ctx)


def _qualified(name, namespace):
    if not isinstance(name, str) or not name:
        raise ValueError(f"an actor's name is a non-empty str, not {name!r}")
    return f"{namespace}.{name}" if namespace else name


def kill(actor: "ActorHandle", *, no_restart: bool = True) -> None:
    """Ends an actor at once: its calls not yet run fail (ActorDiedError).
    no_restart=False: its process is ended instead, and restarted if its
    max_restarts allows (after the calls before this one)."""
    from .remote import ActorHandle
    if not isinstance(actor, ActorHandle):
        raise ValueError(f"kill: an actor handle, not {type(actor).__name__}")
    ctx = actor._ray_context or context()
    ctx.check_thread()
    if no_restart:
        ctx.sync()
        actor.actor.kill()
        ctx.actors.pop(actor.actor.id, None)
        return
    call = actor.actor.call("call-0", [], _exit_payload(), 0)
    call.allow_failure()
    ctx.task_built()
    ctx.sync()


def _exit_payload():
    return cloudpickle.dumps((_worker.MAGIC, _worker.FORMAT, "kill", _worker.EXIT_METHOD, [], {}, [], (), {}))


# ------------------------------------------------------------ cluster


def _client():
    ctx = context()
    if _driver is not None and ctx is _driver.context:
        return _driver.client
    return _squall.Client()


# Ray's names of squall's resources (docs/resources.md).
RAY_NAMES = {"gpus": "GPU", "mem": "memory"}


def _totals(used):
    totals = {}
    for g in _client().governors():
        cpus = g.cpus - (g.cpus_used if used else 0)
        totals["CPU"] = totals.get("CPU", 0) + cpus
        for name, (capacity, held) in g.resources.items():
            key = RAY_NAMES.get(name, name)
            totals[key] = totals.get(key, 0) + capacity - (held if used else 0)
    return {k: float(v) for k, v in totals.items()}


def cluster_resources() -> Dict[str, float]:
    """All the cluster has: {"CPU": n, "GPU": n, resource: amount}."""
    return _totals(False)


def available_resources() -> Dict[str, float]:
    """What is not held by running tasks now, by the same names."""
    return _totals(True)


def nodes() -> List[Dict[str, Any]]:
    """One record per governor, with Ray's keys."""
    out = []
    for g in _client().governors():
        resources = {"CPU": float(g.cpus)}
        for name, (capacity, _) in g.resources.items():
            resources[RAY_NAMES.get(name, name)] = float(capacity)
        host = g.data_address.rsplit(":", 1)[0]
        out.append({"NodeID": g.name, "Alive": True, "NodeManagerAddress": host, "NodeName": g.name,
                    "Resources": resources, "alive": True})
    return out


class RuntimeContext:
    """Where the calling code runs (Ray's get_runtime_context())."""

    def __init__(self, job, task, actor, node, namespace):
        self._job, self._task, self._actor, self._node = job, task, actor, node
        self.namespace = namespace

    def get_job_id(self):
        return self._job

    def get_task_id(self):
        return self._task

    def get_actor_id(self):
        return self._actor

    def get_node_id(self):
        return self._node

    @property
    def job_id(self):
        return self._job

    @property
    def node_id(self):
        return self._node


def get_runtime_context() -> RuntimeContext:
    session, task = _worker.call_context()
    node = os.environ.get("SQUALL_GOVERNOR_NAME") or None
    if session:
        actor = str(_worker.actor_id) if _worker.actor_id is not None else None
        namespace = _driver.context.namespace if _driver is not None else ""
        return RuntimeContext(str(session), str(task), actor, node, namespace)
    ctx = context()
    return RuntimeContext(str(ctx.session.id), None, None, node, ctx.namespace)


def get_gpu_ids() -> List[Union[int, str]]:
    """The GPUs given to the calling task or actor (CUDA_VISIBLE_DEVICES)."""
    visible = os.environ.get("CUDA_VISIBLE_DEVICES", "")
    return [int(g) if g.isdigit() else g for g in visible.split(",") if g]


__all__ = [
    "ObjectRef", "available_resources", "cancel", "cluster_resources", "get", "get_actor", "get_gpu_ids",
    "get_runtime_context", "init", "is_initialized", "kill", "nodes", "put", "shutdown", "wait",
]
