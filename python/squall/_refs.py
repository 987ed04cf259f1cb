"""Ray's objects over squall's sessions (docs/ray.md): ObjectRef, and the
context each process's Ray-model calls go through.

A context is a session and what this process does in it: the driver's
session (one per `init`), or, inside a function running as a task, the
task's own session (squall._worker.nested_session). `.remote()` builds
tasks in the context's session and hands out ObjectRefs for their outputs
at once; the context submits what was built in batches (sync): at once
after a pause, else every BATCH_WINDOW or BATCH_MAX tasks, and before
anything that reads or waits. Every output is kept (fetchable) while an
ObjectRef to it lives in this process; when the last goes, the object is
unkept at the next sync, and the server removes it once no task needs it.
Everything here runs on the thread that made the context, but for
ObjectRef.__del__, which only appends to a list.
"""

import asyncio
import threading
import time

from . import _objects
from . import _squall
from . import exceptions
from ._worker import TaskErrorValue

# A burst of .remote() calls is sent every BATCH_WINDOW seconds (or at the
# next call that reads or waits) or
# BATCH_MAX tasks; the first after a pause of IDLE seconds goes at once.
BATCH_WINDOW = 0.01
BATCH_MAX = 2000
IDLE = 0.002
# A wait for refs of this session and of another's named actor looks at
# them every FOREIGN_POLL seconds.
FOREIGN_POLL = 0.05
# Objects whose last ref went are unkept (one call, answered once the
# server's log has it) in batches of UNKEEP_BATCH, or UNKEEP_EVERY seconds
# after the last batch, at a sync.
UNKEEP_BATCH = 1000
UNKEEP_EVERY = 0.1
# Actors whose last handle went are looked at no more often than this
# (seconds): each look asks the server whether their calls have ended.
ACTOR_CHECK = 0.05
# `await ref` looks whether the ref is ready after AWAIT_FIRST seconds,
# then twice as long each time, up to every AWAIT_EVERY seconds.
AWAIT_FIRST = 0.001
AWAIT_EVERY = 0.05
# A task in these has ended.
ENDED_STATES = ("finished", "failed", "cancelled", "skipped")


class Context:
    """Where this process's Ray-model calls go: `session`, with the refs
    and actor handles this process holds in it. `batched`: .remote() may
    wait for a sync (the driver); else each is submitted at once (a task's
    own calls, whose session is lent only for the call)."""

    def __init__(self, session, *, batched, namespace=""):
        self.session = session
        self.batched = batched
        self.namespace = namespace
        self.thread = threading.get_ident()
        self.built = 0
        self.batch_start = 0.0
        self.last_sync = 0.0
        self.next_actor_check = 0.0
        self.last_unkeep = 0.0
        # Object id -> [live ObjectRefs in this process, its DataObject].
        self.held = {}
        # Ids whose last ref went (ObjectRef.__del__ appends; sync unkeeps).
        self.released = []
        # Actor id -> ActorLife of the actors this process made.
        self.actors = {}
        # What .remote() is pickling now: the refs and handles inside its
        # arguments (capture()).
        self._capture = None

    def check_thread(self):
        if threading.get_ident() != self.thread:
            raise _squall.Error("squall's Ray API is used from the thread that called init() (or made the first "
                                ".remote()); this is another thread")

    # ------------------------------------------------------------ building

    def task_built(self):
        """After .remote() built a task: sends the batch when it is time."""
        now = time.monotonic()
        self.built += 1
        if self.built == 1:
            self.batch_start = now
            if not self.batched or now - self.last_sync >= IDLE:
                self.sync()
                return
        if self.built >= BATCH_MAX or now - self.batch_start >= BATCH_WINDOW:
            self.sync()

    def sync(self, waiting_for=None):
        """Submits what was built, then unkeeps released objects and ends
        actors whose last handle went once their calls are done. With
        `waiting_for` (refs a get is about to read), the submit also waits
        for their tasks: one round trip instead of a submit and a wait."""
        self.check_thread()
        if self.built:
            self.built = 0
            tasks = [r._task for r in waiting_for or () if r._task is not None]
            try:
                if tasks and len(tasks) == len(waiting_for):
                    try:
                        self.session.submit_and_wait(tasks)
                    except _squall.TaskFailed:
                        pass  # an error is a value: the get raises it
                else:
                    self.session.submit()
            finally:
                self.last_sync = time.monotonic()
        if self.released and (len(self.released) >= UNKEEP_BATCH or
                              time.monotonic() - self.last_unkeep >= UNKEEP_EVERY):
            self._unkeep()
        if self.actors and time.monotonic() >= self.next_actor_check and any(
                life.ending for life in self.actors.values()):
            self.next_actor_check = time.monotonic() + ACTOR_CHECK
            self._end_actors()

    def make_room(self):
        """Before a big put: unkeeps what was released at once, so that
        the store's memory it held (kept warm by the governor) takes the
        new object, not fresh memory."""
        self.check_thread()
        if self.released:
            self._unkeep()

    def _unkeep(self):
        self.last_unkeep = time.monotonic()
        released, self.released = self.released, []
        objects = []
        for n in released:
            entry = self.held.get(n)
            if entry is not None and entry[0] <= 0:
                objects.append(entry[1])
                del self.held[n]
        if objects:
            try:
                self.session.unkeep(objects)
            except _squall.Error:
                pass  # the session is going (shutdown): its objects go with it

    def _end_actors(self):
        ending = [life for life in self.actors.values() if life.ending]
        ids = [t.id for life in ending for t in life.waits_for()]
        infos = self.session.tasks(ids) if ids else []
        done = {info.id for info in infos if info.state in ENDED_STATES}
        for life in ending:
            if any(t.id not in done for t in life.waits_for()):
                continue
            del self.actors[life.actor.id]
            try:
                life.actor.kill()
            except _squall.Error:
                pass  # ended already

    # ------------------------------------------------------------ refs

    def hold(self, data_object):
        entry = self.held.get(data_object.id)
        if entry is None:
            self.held[data_object.id] = [1, data_object]
        else:
            entry[0] += 1

    def release(self, n):
        entry = self.held.get(n)
        if entry is not None:
            entry[0] -= 1
            if entry[0] == 0:
                self.released.append(n)

    def capture(self):
        """While pickling a call's arguments: collects the ObjectRefs and
        actor handles pickled inside them (see Capture)."""
        return Capture(self)

    # ------------------------------------------------------------ reading

    def ready_now(self, refs):
        """The refs among `refs` that are ready now (finished, or failed:
        their error is ready to be read)."""
        own = [r for r in refs if not r._foreign]
        states = {}
        if own:
            for r, info in zip(own, self.session.objects([r._object.id for r in own])):
                states[r] = info.state
        for r in refs:
            if r._foreign:
                states[r] = r._object.info().state  # of another session: asked apart
        return [r for r in refs if states[r] in ("finished", "failed")]

    def wait_some(self, refs, timeout):
        """Those of `refs` that are ready once one is, or none when
        `timeout` seconds (None: no limit) pass first."""
        own = [r for r in refs if not r._foreign]
        if len(own) < len(refs):
            # Some of another session (calls on its named actor): a wait
            # there, or a look at both now and then (FOREIGN_POLL).
            if not own and len({r._foreign for r in refs}) == 1:
                own = refs
            else:
                step = FOREIGN_POLL if timeout is None else min(FOREIGN_POLL, timeout)
                if own:
                    self._wait_some(own, step)
                else:
                    time.sleep(step)
                return self.ready_now(refs)
        return self._wait_some(own, timeout)

    def _wait_some(self, refs, timeout):
        try:
            finished = self.session.wait_some([r._object for r in refs], timeout=timeout)
        except _squall.TaskFailed:
            return self.ready_now(refs)  # one failed: ready too, with others maybe
        ids = {o.id for o in finished}
        return [r for r in refs if r._object.id in ids]

    def values(self, refs):
        """The values of `refs`, in order: their tasks' results or put
        values, fetched together; raises the first one's error (its task's
        exception, or why it was never made)."""
        try:
            data = self.session.fetch_all([r._object for r in refs], views=True)
        except _squall.TaskFailed as failure:
            ref = next((r for r in refs if r._task is not None and r._task.id == failure.task), refs[0])
            raise self._system_error(ref, failure) from None
        # A big array is a read-only view of the fetched bytes (Ray's too).
        values = [_objects.loads(d) for d in data]
        for value in values:
            if isinstance(value, TaskErrorValue):
                raise value.as_error()
        return values

    def _system_error(self, ref, failure):
        """The error of a task that did not end by itself: cancelled,
        its actor gone, its process dead (after its retries), or skipped
        for one of those."""
        text = str(failure)
        task = failure.task
        if text.startswith(f"task {task}") and " was skipped: " in text and "(task " in text:
            root = text.rsplit("(task ", 1)[1].split(" ", 1)[0]
            task = int(root) if root.isdigit() else task
        state = ""
        try:
            infos = self.session.tasks([task])
            state = infos[0].state if infos else ""
        except _squall.Error:
            pass
        if state == "cancelled" and "actor" not in text:
            return exceptions.TaskCancelledError(text)
        if "actor " in text or ref._actor_call:
            return exceptions.ActorDiedError(text)
        return exceptions.WorkerCrashedError(text)


class ActorLife:
    """An actor this process made in Ray's model: it ends (killed) once its
    last handle here has gone (`ending`, unless named) and the tasks that
    use it have ended: its last call from here, and the tasks whose
    arguments held a handle of it."""

    def __init__(self, actor, *, named, detached):
        self.actor = actor
        self.named = named
        self.detached = detached
        self.handles = 0
        self.ending = False
        self.last_call = None
        self.users = []

    def waits_for(self):
        return self.users + ([self.last_call] if self.last_call is not None else [])


class Capture:
    """Collects what a call's arguments hold by reference, as they are
    pickled: ObjectRefs (inputs of the task, so their objects live while
    it may read them) and actor handles (their actors live while it runs)."""

    def __init__(self, context):
        self.context = context
        self.refs = {}
        self.handles = []

    def __enter__(self):
        self.outer = self.context._capture
        self.context._capture = self
        return self

    def __exit__(self, *exc):
        self.context._capture = self.outer


# The context of each session this process works in, by session id, for
# refs unpickled here (arguments of a task, values got).
_contexts = {}


def register(context):
    _contexts[context.session.id] = context


def unregister(context):
    if _contexts.get(context.session.id) is context:
        del _contexts[context.session.id]


class ObjectRef:
    """A reference to an object: a task's result or a put value (Ray's
    ObjectRef). `get` reads it; passed to a task as an argument its value
    arrives; inside a list or another object it arrives as a ref."""

    __slots__ = ("_context", "_object", "_task", "_actor_call", "_foreign", "__weakref__")

    def __init__(self, context, data_object, task=None, actor_call=False, foreign=0):
        self._context = context
        self._object = data_object
        self._task = task
        self._actor_call = actor_call
        # An output of a call on another session's (named) actor: that
        # session's id (its object, not held here); else 0.
        self._foreign = foreign
        if not foreign:
            context.hold(data_object)

    def __del__(self):
        try:
            if not self._foreign:
                self._context.release(self._object.id)
        except Exception:
            pass  # the interpreter is going

    @property
    def object_id(self):
        return self._object.id

    @property
    def session_id(self):
        return self._object.session_id

    def hex(self):
        return f"{self.session_id:016x}{self.object_id:016x}"

    def task_id(self):
        return self._task.id if self._task is not None else None

    def __reduce__(self):
        capture = self._context._capture
        if capture is not None:
            capture.refs[self._object.id] = self
        return _unpickle_ref, (self.session_id, self.object_id)

    def __eq__(self, other):
        return isinstance(other, ObjectRef) and (other.session_id, other.object_id) == (
            self.session_id, self.object_id)

    def __hash__(self):
        return hash((self.session_id, self.object_id))

    def __repr__(self):
        return f"ObjectRef({self.hex()})"

    def __await__(self):
        """`await ref` in a coroutine (an async actor's method, an asyncio
        driver): the value get() gives (or its error raised), without
        blocking the event loop while the task runs."""
        return _awaited(self).__await__()


async def _awaited(ref):
    from . import _api
    # The client waits on the calling thread: a look now and then (each
    # one round trip) lets the loop run everything else meanwhile.
    pause = AWAIT_FIRST
    while not _api.wait([ref], timeout=0)[0]:
        await asyncio.sleep(pause)
        pause = min(2 * pause, AWAIT_EVERY)
    return _api.get(ref)


def _unpickle_ref(session_id, object_id):
    """A ref that arrived inside a value: in the context of its session in
    this process (the driver's, or the task's whose arguments held it)."""
    from . import _api
    context = _api.worker_context(any_call=True) or _contexts.get(session_id) or _api.context()
    if context.session.id != session_id:
        raise _squall.Error(f"an ObjectRef of session {session_id} arrived in session {context.session.id}")
    return ObjectRef(context, context.session.object(object_id))


__all__ = ["ActorLife", "Capture", "Context", "ObjectRef"]
