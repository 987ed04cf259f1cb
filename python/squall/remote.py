"""@squall.remote: Python functions as tasks, Python classes as actors
(docs/python.md).

A decorated function, called inside `with client.new_session() as session:`,
builds a call task instead of running: the governors' squall-python-executor
(the tasklib executor "python") runs it in a warm process. The function
travels by value (cloudpickle) in the task's config, with the plain
arguments; arguments that are data objects (or tasks of one output) become
the task's inputs, so calls chain into graphs without the client seeing
the data in between.

A decorated class is an actor class: Counter.remote(...) makes an actor
(docs/actors.md) of the executor's one actor type, python/Actor, whose
constructor makes an instance of the class in the actor's own process and
keeps it; counter.increment.remote(...) makes a call of its method call-N
(N outputs), which runs the Python method the config names on that
instance. Arguments travel as a function's do.

The config is a pickled tuple, read by squall._worker:

  a function's call (run), an actor's constructor (construct):
    (MAGIC, FORMAT, name, key, pickled function or class,
     args:   [(is_input, input index or plain value), ...],
     kwargs: {name: (is_input, index or value)},
     input codecs:  ['pickle' | 'bytes' | 'dir', ...] (one per input),
     output codecs: ['pickle' | 'bytes', ...] (one per output; none for a
                    constructor))
  a method call (call_method):
    (MAGIC, FORMAT, name ('Class.method'), method name, args, kwargs,
     input codecs, output codecs)
"""

import functools
import hashlib
import pickle

import cloudpickle

from . import _squall
from ._worker import FORMAT, MAGIC

# The executor's name, its actor type and the most outputs its functions
# and methods declare (python/src/executor-main.cpp).
EXECUTOR = "python"
ACTOR_TYPE = "Actor"
MAX_OUTPUTS = 16
CODECS = ("pickle", "bytes")
# remote()'s options for a function and for a class.
FUNCTION_OPTIONS = ("outputs", "cpus", "resources", "name", "retries", "time_limit", "allow_failure", "keep")
CLASS_OPTIONS = ("cpus", "resources", "max_restarts", "max_call_retries", "name", "allow_failure")
# What an actor's handle keeps for its own (a class may not have methods of
# these names), and where @method leaves its options on the function.
HANDLE_ATTRIBUTES = ("actor", "kill")
METHOD_ATTRIBUTE = "_squall_method"

# A payload bigger than this moves its big plain arguments (pickled above
# BIG_ARGUMENT bytes) into constants of their own, keeping the task well
# below the server's task-bytes limit (4 MiB by default).
CONFIG_LIMIT = 512 << 10
BIG_ARGUMENT = 4 << 10



def _current_session():
    """The innermost `with session:` of this thread; inside a function
    running as a task, the task's own session (docs/nested.md)."""
    try:
        return _squall.current_session()
    except _squall.Error:
        from . import _worker
        session = _worker.nested_session()
        if session is None:
            raise
        return session

def _output_codecs(outputs):
    if isinstance(outputs, bool):
        raise TypeError("remote outputs: a count, 'pickle', 'bytes' or a list of those, not a bool")
    if isinstance(outputs, int):
        if not 0 <= outputs <= MAX_OUTPUTS:
            raise ValueError(f"remote outputs: from 0 to {MAX_OUTPUTS}, not {outputs}")
        return ("pickle",) * outputs
    if isinstance(outputs, str):
        outputs = [outputs]
    codecs = tuple(outputs)
    for codec in codecs:
        if codec not in CODECS:
            raise ValueError(f"remote outputs: {codec!r} is not 'pickle' or 'bytes'")
    if len(codecs) > MAX_OUTPUTS:
        raise ValueError(f"remote outputs: at most {MAX_OUTPUTS}, not {len(codecs)}")
    return codecs


def _pack(name, args, kwargs, session, layout):
    """The config and inputs of a call of `name` on args and kwargs.
    Arguments that are data objects (or tasks of one output) become inputs;
    plain values are pickled into the config, or, when it would pass
    CONFIG_LIMIT, the big ones into constants of their own.
    layout(args, kwargs, input codecs) gives the payload (see above)."""
    inputs, codecs = [], []

    def argument(value):
        if isinstance(value, _squall.Task):
            outputs = value.outputs
            if len(outputs) != 1:
                raise _squall.Error(f"{name}: task {value.id} has {len(outputs)} outputs; "
                                    "pass one of task.outputs")
            value = outputs[0]
        if isinstance(value, _squall.DataObject):
            if value.kind == _squall.DIR:
                codecs.append("dir")
            else:
                codecs.append("pickle" if value._content_type() == "pickle" else "bytes")
            inputs.append(value)
            return (True, len(inputs) - 1)
        return (False, value)

    plain_args = [argument(a) for a in args]
    plain_kwargs = {k: argument(v) for k, v in kwargs.items()}

    def dump():
        return cloudpickle.dumps(layout(plain_args, plain_kwargs, codecs), protocol=pickle.HIGHEST_PROTOCOL)

    config = dump()
    if len(config) > CONFIG_LIMIT:
        def constant(entry):
            is_input, value = entry
            if is_input:
                return entry
            pickled = cloudpickle.dumps(value, protocol=pickle.HIGHEST_PROTOCOL)
            if len(pickled) <= BIG_ARGUMENT:
                return entry
            inputs.append(session.blob(pickled, content_type="pickle"))
            codecs.append("pickle")
            return (True, len(inputs) - 1)
        plain_args = [constant(a) for a in plain_args]
        plain_kwargs = {k: constant(v) for k, v in plain_kwargs.items()}
        config = dump()
    return config, inputs


def _mark_outputs(task, codecs, keep):
    """Pickled outputs get the content type 'pickle' (value() unpickles
    them); keep keeps them all."""
    for codec, output in zip(codecs, task.outputs):
        if codec == "pickle":
            output.content_type("pickle")
        if keep:
            output.keep()


class RemoteFunction:
    """A function whose calls, inside a session, build tasks (see remote())."""

    def __init__(self, function, *, outputs=1, cpus=None, resources=None, name=None, retries=0,
                 time_limit=None, allow_failure=False, keep=False):
        if not callable(function):
            raise TypeError(f"remote: {function!r} is not callable")
        self.function = function
        self._options = dict(outputs=outputs, cpus=cpus, resources=resources, name=name, retries=retries,
                             time_limit=time_limit, allow_failure=allow_failure, keep=keep)
        self._codecs = _output_codecs(outputs)
        self._name = name or getattr(function, "__qualname__", None) or repr(function)
        self._resources = dict(resources or {})
        self._pickled = None
        self._key = None
        functools.update_wrapper(self, function)

    def options(self, **changes):
        """The same function with other options (outputs, cpus, resources,
        name, retries, time_limit, allow_failure, keep)."""
        unknown = set(changes) - set(self._options)
        if unknown:
            raise TypeError(f"remote options: unknown {', '.join(sorted(unknown))}")
        return RemoteFunction(self.function, **{**self._options, **changes})

    def _payload(self, args, kwargs, session):
        if self._pickled is None:
            self._pickled = cloudpickle.dumps(self.function, protocol=pickle.HIGHEST_PROTOCOL)
            self._key = hashlib.blake2b(self._pickled, digest_size=16).digest()
        return _pack(self._name, args, kwargs, session, lambda plain_args, plain_kwargs, codecs: (
            MAGIC, FORMAT, self._name, self._key, self._pickled, plain_args, plain_kwargs, codecs, self._codecs))

    def __call__(self, *args, **kwargs):
        """Builds a call task in the current session and returns it; its
        outputs are the function's results."""
        session = _current_session()
        config, inputs = self._payload(args, kwargs, session)
        task = session.call(f"{EXECUTOR}/call-{len(self._codecs)}", inputs, config, len(self._codecs))
        task.name(self._name)
        options = self._options
        if options["cpus"] is not None:
            task.cpus(options["cpus"])
        for resource, amount in self._resources.items():
            task.resource(resource, amount)
        if options["retries"]:
            task.retries(options["retries"])
        if options["time_limit"] is not None:
            task.time_limit(options["time_limit"])
        if options["allow_failure"]:
            task.allow_failure()
        _mark_outputs(task, self._codecs, options["keep"])
        return task

    def remote(self, *args, **kwargs):
        """The same as calling it (Ray's spelling)."""
        return self(*args, **kwargs)

    def __repr__(self):
        return f"<squall.remote {self._name}>"


class ActorClass:
    """A class whose instances live as actors (docs/actors.md): make one
    with .remote(...) inside a session (see remote())."""

    def __init__(self, cls, *, cpus=None, resources=None, max_restarts=0, max_call_retries=0, name=None,
                 allow_failure=False, named=None):
        if not isinstance(cls, type):
            raise TypeError(f"remote: {cls!r} is not a class")
        taken = sorted(n for n in HANDLE_ATTRIBUTES if callable(getattr(cls, n, None)))
        if taken:
            raise TypeError(f"remote: {cls.__qualname__} has a method {taken[0]!r}, which its actors' handles "
                            "keep for their own: rename it")
        self.cls = cls
        self._options = dict(cpus=cpus, resources=resources, max_restarts=max_restarts,
                             max_call_retries=max_call_retries, name=name, allow_failure=allow_failure,
                             named=named)
        self._name = name or cls.__qualname__
        self._resources = dict(resources or {})
        self._pickled = None
        self._key = None
        functools.update_wrapper(self, cls, updated=())

    def options(self, **changes):
        """The same class with other options (cpus, resources,
        max_restarts, max_call_retries, name, allow_failure, named: a
        named actor, which any session reaches with get_actor(named) and
        which outlives its session until killed)."""
        unknown = set(changes) - set(self._options)
        if unknown:
            raise TypeError(f"remote options of a class: unknown {', '.join(sorted(unknown))}")
        return ActorClass(self.cls, **{**self._options, **changes})

    def remote(self, *args, **kwargs):
        """Makes an actor in the current session, constructed from args and
        kwargs (as a function's arguments: data objects and tasks of one
        output pass their data), and returns its ActorHandle."""
        session = _current_session()
        if self._pickled is None:
            self._pickled = cloudpickle.dumps(self.cls, protocol=pickle.HIGHEST_PROTOCOL)
            self._key = hashlib.blake2b(self._pickled, digest_size=16).digest()
        config, inputs = _pack(self._name, args, kwargs, session, lambda plain_args, plain_kwargs, codecs: (
            MAGIC, FORMAT, self._name, self._key, self._pickled, plain_args, plain_kwargs, codecs, ()))
        actor = session.actor(f"{EXECUTOR}/{ACTOR_TYPE}", inputs, config)
        actor.task.name(self._name)
        options = self._options
        if options["cpus"] is not None:
            actor.cpus(options["cpus"])
        for resource, amount in self._resources.items():
            actor.resource(resource, amount)
        if options["max_restarts"]:
            actor.max_restarts(options["max_restarts"])
        if options["max_call_retries"]:
            actor.max_call_retries(options["max_call_retries"])
        if options["allow_failure"]:
            actor.task.allow_failure()
        if options["named"]:
            actor.named(options["named"])
        return ActorHandle(self, actor, session, options["named"])

    def get_actor(self, name):
        """A handle on the live actor named `name` (made with
        .options(named=name).remote(...), by any session of the server),
        from the current session; calls on it go with its submit."""
        session = _current_session()
        return ActorHandle(self, session.get_actor(name), session, name)

    def _method(self, handle, name):
        attribute = getattr(self.cls, name, None)
        if name.startswith("_") or not callable(attribute):
            raise AttributeError(f"{self._name} has no method {name!r}")
        return ActorMethod(handle, name, **getattr(attribute, METHOD_ATTRIBUTE, {}))

    def __call__(self, *args, **kwargs):
        raise TypeError(f"{self._name} is an actor class: make an actor with {self._name}.remote(...) "
                        f"(or an instance here with {self._name}.cls(...))")

    def __repr__(self):
        return f"<squall.remote actor class {self._name}>"


class ActorHandle:
    """An actor made by ActorClass.remote(). Its public methods are
    attributes: counter.increment.remote(...) makes a call (see
    ActorMethod); kill() ends it; `actor` is the squall.Actor beneath (id,
    task)."""

    def __init__(self, actor_class, actor, session, named=None):
        self._class = actor_class
        self._session = session
        self._named = named
        self.actor = actor

    def kill(self):
        """Ends the actor (after submit): its process stops, its calls not
        yet run end cancelled, the session goes on."""
        self.actor.kill()

    def __getattr__(self, name):
        # Only for names the handle has not: the class's public methods.
        if name.startswith("_"):
            raise AttributeError(name)
        return self._class._method(self, name)

    def __reduce__(self):
        # Passed into a task (or a method) by what names it: its name, or
        # its task's id in the session the task runs in (docs/actors.md).
        if self._named:
            return _named_handle, (self._class, self._named)
        return _handle_in_session, (self._class, self.actor.session_id, self.actor.id)

    def __repr__(self):
        return f"<squall actor {self._class._name} {self.actor.session_id}/{self.actor.id}>"


def _named_handle(actor_class, name):
    return actor_class.get_actor(name)


def _handle_in_session(actor_class, session_id, actor_id):
    session = _current_session()
    if session.id != session_id:
        raise _squall.Error(f"actor {session_id}/{actor_id} is of another session than this task's ({session.id}): "
                            "pass a named actor's handle instead")
    return ActorHandle(actor_class, session.actor_handle(actor_id), session)


class ActorMethod:
    """A method of an actor: .remote(...) makes a call task of it."""

    def __init__(self, handle, method, *, outputs=1, allow_failure=False, time_limit=None, keep=False):
        self._handle = handle
        self._method = method
        self._options = dict(outputs=outputs, allow_failure=allow_failure, time_limit=time_limit, keep=keep)
        self._codecs = _output_codecs(outputs)
        self._name = f"{handle._class._name}.{method}"

    def options(self, **changes):
        """The same method with other options (outputs, allow_failure,
        time_limit, keep)."""
        unknown = set(changes) - set(self._options)
        if unknown:
            raise TypeError(f"method options: unknown {', '.join(sorted(unknown))}")
        return ActorMethod(self._handle, self._method, **{**self._options, **changes})

    def remote(self, *args, **kwargs):
        """Builds a call of the method on args and kwargs, in the actor's
        session, and returns it (a squall.Task whose outputs are the
        method's results, as a remote function's). Calls on one actor run
        one at a time, in the order they were made."""
        handle = self._handle
        config, inputs = _pack(self._name, args, kwargs, handle._session, lambda plain_args, plain_kwargs, codecs: (
            MAGIC, FORMAT, self._name, self._method, plain_args, plain_kwargs, codecs, self._codecs))
        task = handle.actor.call(f"call-{len(self._codecs)}", inputs, config, len(self._codecs))
        task.name(self._name)
        options = self._options
        if options["time_limit"] is not None:
            task.time_limit(options["time_limit"])
        if options["allow_failure"]:
            task.allow_failure()
        _mark_outputs(task, self._codecs, options["keep"])
        return task

    def __call__(self, *args, **kwargs):
        raise TypeError(f"{self._name} is a method of an actor: call it with .remote(...)")

    def __reduce__(self):
        raise TypeError("an actor's method cannot be passed into a task (not yet: docs/actors.md)")

    def __repr__(self):
        return f"<squall actor method {self._name}>"


def method(function=None, *, outputs=1, allow_failure=False, time_limit=None, keep=False):
    """Options of an actor class's method, its calls' defaults:
    @squall.method(outputs=2) (a count or codecs, as for remote functions;
    1 by default), allow_failure, time_limit (seconds), keep. A call may
    change them: counter.pair.options(keep=True).remote()."""
    _output_codecs(outputs)
    options = dict(outputs=outputs, allow_failure=allow_failure, time_limit=time_limit, keep=keep)

    def wrap(f):
        if not callable(f):
            raise TypeError(f"method: {f!r} is not callable")
        setattr(f, METHOD_ATTRIBUTE, options)
        return f
    return wrap if function is None else wrap(function)


def remote(function=None, **options):
    """Makes a Python function a task factory, or a class an actor class.

    @squall.remote, or @squall.remote(outputs=..., cpus=..., ...).

    A function, called inside a session, builds a task run by a governor's
    squall-python-executor and returns it (a squall.Task); its output's
    value() is the function's result. Arguments may be plain values
    (pickled into the task) or data objects and tasks (their data is
    passed: a pickled object unpickled, a blob as bytes, a dir as a
    pathlib.Path). Options:
    outputs: how many (the function returns that many values), or codecs
    per output: 'pickle' (the default: any value) or 'bytes' (raw bytes; the
    function returns bytes or str). cpus, resources ({'gpus': 1}), name,
    retries, time_limit (seconds) and allow_failure as for any task; keep
    keeps every output. An exception in the function fails the task; its
    error (TaskFailed) holds the remote traceback.

    A class becomes an ActorClass: Counter.remote(*args, **kwargs), inside
    a session, makes an actor (docs/actors.md), an instance of the class
    living in a process of its own, and returns its handle, whose methods
    build calls: counter.increment.remote(...) returns a squall.Task as a
    remote function does; calls run one at a time in the order made.
    Options: cpus and resources (held for the actor's life), max_restarts,
    max_call_retries, name, allow_failure; a method's options come from
    @squall.method. An exception in __init__ fails the actor (and its
    calls), one in a method fails that call only.
    """
    def wrap(target):
        known = CLASS_OPTIONS if isinstance(target, type) else FUNCTION_OPTIONS
        unknown = set(options) - set(known)
        if unknown:
            what = "a class" if isinstance(target, type) else "a function"
            raise TypeError(f"remote options of {what}: unknown {', '.join(sorted(unknown))} "
                            f"(it takes {', '.join(known)})")
        if isinstance(target, type):
            return ActorClass(target, **options)
        return RemoteFunction(target, **options)
    return wrap if function is None else wrap(function)
