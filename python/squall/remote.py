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
     input codecs:  ['pickle' | 'bytes' | 'dir', ...] (one per input
                    passed; inputs past them are held by reference),
     output codecs: ['pickle' | 'bytes', ...] (one per output; none for a
                    constructor),
     ray options: None for the session API; for Ray's model (docs/ray.md)
                  {'exception_retries': n, 'retry_exceptions': True or
                  (classes)})
  a method call (call_method):
    (MAGIC, FORMAT, name ('Class.method'), method name, args, kwargs,
     input codecs, output codecs, ray options)

Outside a `with session:` block (and outside a function running for the
session API), .remote() is Ray's: it builds in the driver's session
(squall._api) and returns ObjectRefs; Ray's option names (num_returns,
num_cpus, num_gpus, max_retries, ...) are taken in both.
"""

import functools
import hashlib
import math
import pickle

import cloudpickle

from . import _objects
from . import _squall
from . import _worker
from ._worker import FORMAT, MAGIC

# The executor's name, its actor type and the most outputs its functions
# and methods declare (python/src/executor-main.cpp).
EXECUTOR = "python"
ACTOR_TYPE = "Actor"
MAX_OUTPUTS = 16
CODECS = ("pickle", "bytes")
# remote()'s options for a function and for a class.
FUNCTION_OPTIONS = ("outputs", "cpus", "resources", "name", "retries", "time_limit", "allow_failure", "keep",
                    "num_returns", "num_cpus", "num_gpus", "memory", "max_retries", "retry_exceptions")
CLASS_OPTIONS = ("cpus", "resources", "max_restarts", "max_call_retries", "name", "allow_failure", "named",
                 "num_cpus", "num_gpus", "memory", "max_task_retries", "namespace", "lifetime", "get_if_exists",
                 "max_concurrency")
# Ray's options that mean nothing here (docs/ray.md): taken, and ignored.
IGNORED_OPTIONS = ("scheduling_strategy", "max_calls", "runtime_env", "placement_group",
                   "placement_group_bundle_index", "accelerator_type", "label_selector", "max_pending_calls",
                   "concurrency_groups", "_metadata")
# Ray's default retries of a task whose process died.
RAY_MAX_RETRIES = 3
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
        session = _worker.nested_session()
        if session is None:
            raise
        return session


def _ray_context():
    """The Ray-model context a .remote() goes to, or None when it is the
    session API's (inside `with session:`, or a function of the session
    API running as a task)."""
    try:
        _squall.current_session()
        return None
    except _squall.Error:
        pass
    if not _worker.ray_call() and _worker.nested_session() is not None:
        return None
    from . import _api
    return _api.context()


def _ray_names(options, kind):
    """Ray's option names as squall's (one spelling kept: Ray's wins)."""
    options = dict(options)
    for name in IGNORED_OPTIONS:
        options.pop(name, None)
    resources = dict(options.get("resources") or {})
    if options.get("num_gpus"):
        resources["gpus"] = options.pop("num_gpus")
    options.pop("num_gpus", None)
    if options.get("memory"):
        resources["mem"] = int(options.pop("memory"))
    options.pop("memory", None)
    if resources:
        options["resources"] = resources
    if "num_cpus" in options:
        cpus = options.pop("num_cpus")
        if cpus is not None:
            if cpus < 0:
                raise ValueError(f"num_cpus must be >= 0, not {cpus}")
            options["cpus"] = int(math.ceil(cpus))
    if kind == "function":
        if "num_returns" in options:
            options["outputs"] = options.pop("num_returns")
        if "max_retries" in options:
            options["retries"] = options.pop("max_retries")
            options["_retries_given"] = True
    elif "max_task_retries" in options:
        options["max_call_retries"] = options.pop("max_task_retries")
    return options


def _known(options, known, what):
    unknown = set(options) - set(known) - set(IGNORED_OPTIONS)
    if unknown:
        raise TypeError(f"remote options of {what}: unknown {', '.join(sorted(unknown))} "
                        f"(it takes {', '.join(known)})")


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


def _pack(name, args, kwargs, session, layout, context=None):
    """The config and inputs of a call of `name` on args and kwargs.
    Arguments that are data objects (or tasks of one output, or ObjectRefs)
    become inputs; plain values are pickled into the config, or, when it
    would pass CONFIG_LIMIT, the big ones into constants of their own.
    layout(args, kwargs, input codecs) gives the payload (see above). With
    a Ray context, ObjectRefs inside the plain values become inputs held
    by reference (after the others), and what they held is returned too
    (a Capture: refs and actor handles)."""
    inputs, codecs = [], []
    from ._refs import ObjectRef

    def argument(value):
        if isinstance(value, ObjectRef):
            if value._context.session.id != session.id:
                raise _squall.Error(f"{name}: an ObjectRef of session {value.session_id} passed to a task of "
                                    f"session {session.id}")
            inputs.append(value._object)
            codecs.append("pickle")
            return (True, len(inputs) - 1)
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
    capture = context.capture() if context is not None else None

    def pickled(value):
        """The value's parts (squall._objects): big buffers out of band."""
        if capture is None:
            return _objects.dumps(value)
        with capture:
            return _objects.dumps(value)

    def dump():
        return pickled(layout(plain_args, plain_kwargs, codecs))

    parts = dump()
    # Big buffers (arrays) and big configs: the big arguments become
    # constants of their own, their buffers read in place at the submit.
    if len(parts) > 1 or _objects.size(parts) > CONFIG_LIMIT:
        def constant(entry):
            is_input, value = entry
            if is_input:
                return entry
            data = pickled(value)
            if _objects.size(data) <= BIG_ARGUMENT:
                return entry
            inputs.append(session.blob(data, content_type="pickle"))
            codecs.append("pickle")
            return (True, len(inputs) - 1)
        plain_args = [constant(a) for a in plain_args]
        plain_kwargs = {k: constant(v) for k, v in plain_kwargs.items()}
        parts = dump()
    # What is left is small (the worker reads either layout).
    config = parts[0] if len(parts) == 1 else b"".join(parts)
    if capture is not None:
        inputs.extend(ref._object for ref in capture.refs.values())
        return config, inputs, capture
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
    """A function whose calls build tasks (see remote()): in a session,
    squall.Tasks; in Ray's model, ObjectRefs."""

    def __init__(self, function, *, outputs=1, cpus=None, resources=None, name=None, retries=0,
                 time_limit=None, allow_failure=False, keep=False, retry_exceptions=False, _retries_given=False):
        if not callable(function):
            raise TypeError(f"remote: {function!r} is not callable")
        if not (isinstance(retry_exceptions, bool) or (
                isinstance(retry_exceptions, (list, tuple)) and
                all(isinstance(c, type) and issubclass(c, BaseException) for c in retry_exceptions))):
            raise TypeError("retry_exceptions: True, False or a list of exception classes")
        self.function = function
        self._options = dict(outputs=outputs, cpus=cpus, resources=resources, name=name, retries=retries,
                             time_limit=time_limit, allow_failure=allow_failure, keep=keep,
                             retry_exceptions=retry_exceptions, _retries_given=_retries_given)
        self._codecs = _output_codecs(outputs)
        self._name = name or getattr(function, "__qualname__", None) or repr(function)
        self._resources = dict(resources or {})
        self._pickled = None
        self._key = None
        functools.update_wrapper(self, function)

    def options(self, **changes):
        """The same function with other options (outputs, cpus, resources,
        name, retries, time_limit, allow_failure, keep; or Ray's names:
        num_returns, num_cpus, num_gpus, memory, max_retries,
        retry_exceptions)."""
        _known(changes, FUNCTION_OPTIONS, "a function")
        changes = _ray_names(changes, "function")
        return RemoteFunction(self.function, **{**self._options, **changes})

    def _payload(self, args, kwargs, session, context=None, ray=None):
        if self._pickled is None:
            self._pickled = cloudpickle.dumps(self.function, protocol=pickle.HIGHEST_PROTOCOL)
            self._key = hashlib.blake2b(self._pickled, digest_size=16).digest()
        return _pack(self._name, args, kwargs, session, lambda plain_args, plain_kwargs, codecs: (
            MAGIC, FORMAT, self._name, self._key, self._pickled, plain_args, plain_kwargs, codecs, self._codecs,
            ray), context)

    def _build(self, session, config, inputs):
        task = session.call(f"{EXECUTOR}/call-{len(self._codecs)}", inputs, config, len(self._codecs))
        task.name(self._name)
        options = self._options
        if options["cpus"] is not None:
            task.cpus(options["cpus"])
        for resource, amount in self._resources.items():
            task.resource(resource, amount)
        if options["time_limit"] is not None:
            task.time_limit(options["time_limit"])
        return task

    def __call__(self, *args, **kwargs):
        """Builds a call task in the current session and returns it; its
        outputs are the function's results."""
        session = _current_session()
        config, inputs = self._payload(args, kwargs, session)
        task = self._build(session, config, inputs)
        options = self._options
        if options["retries"]:
            task.retries(options["retries"])
        if options["allow_failure"]:
            task.allow_failure()
        _mark_outputs(task, self._codecs, options["keep"])
        return task

    def remote(self, *args, **kwargs):
        """Inside a session, the same as calling it; else Ray's: the task
        goes to the driver's session and its results' ObjectRefs come back
        (one, a list for num_returns > 1, None for 0)."""
        context = _ray_context()
        if context is None:
            return self(*args, **kwargs)
        context.check_thread()
        options = self._options
        retries = options["retries"] if options["_retries_given"] else RAY_MAX_RETRIES
        retry_on = options["retry_exceptions"]
        ray = {"exception_retries": retries if retry_on else 0,
               "retry_exceptions": True if retry_on is True else tuple(retry_on or ())}
        session = context.session
        config, inputs, capture = self._payload(args, kwargs, session, context, ray)
        task = self._build(session, config, inputs)
        if retries:
            task.retries(retries)
        task.allow_failure()
        refs = _ray_outputs(context, task, self._codecs, capture)
        if len(refs) == 1:
            return refs[0]
        return refs or None

    def __repr__(self):
        return f"<squall.remote {self._name}>"


def _foreign_session(actor, context):
    """The session of an actor of another session than the context's (a
    named actor found by name), or 0."""
    return actor.session_id if actor.session_id != context.session.id else 0


def _ray_outputs(context, task, codecs, capture, actor_call=False, foreign=0):
    """The ObjectRefs of a Ray-model task's outputs (kept while they
    live); the actors whose handles its arguments hold live while it runs.
    `foreign`: a call on another session's actor, whose outputs are kept
    there until that session ends."""
    from ._refs import ObjectRef
    outputs = task.outputs
    for codec, output in zip(codecs, outputs):
        output.content_type("pickle")
        output.keep()
    refs = [ObjectRef(context, output, task, actor_call, foreign) for output in outputs]
    for handle in capture.handles:
        life = context.actors.get(handle.actor.id)
        if life is not None:
            life.users.append(task)
    context.task_built()
    return refs


class ActorClass:
    """A class whose instances live as actors (docs/actors.md): make one
    with .remote(...) (see remote())."""

    def __init__(self, cls, *, cpus=None, resources=None, max_restarts=0, max_call_retries=0, name=None,
                 allow_failure=False, named=None, namespace=None, lifetime=None, get_if_exists=False,
                 max_concurrency=None):
        if not isinstance(cls, type):
            raise TypeError(f"remote: {cls!r} is not a class")
        taken = sorted(n for n in HANDLE_ATTRIBUTES if callable(getattr(cls, n, None)))
        if taken:
            raise TypeError(f"remote: {cls.__qualname__} has a method {taken[0]!r}, which its actors' handles "
                            "keep for their own: rename it")
        if max_concurrency is not None and (not isinstance(max_concurrency, int) or max_concurrency < 1):
            raise ValueError(f"max_concurrency: a whole number of at least 1, not {max_concurrency!r}")
        if lifetime not in (None, "detached", "non_detached"):
            raise ValueError(f"lifetime: 'detached', 'non_detached' or None, not {lifetime!r}")
        self.cls = cls
        self._options = dict(cpus=cpus, resources=resources, max_restarts=max_restarts,
                             max_call_retries=max_call_retries, name=name, allow_failure=allow_failure,
                             named=named, namespace=namespace, lifetime=lifetime, get_if_exists=get_if_exists,
                             max_concurrency=max_concurrency)
        self._name = cls.__qualname__
        self._resources = dict(resources or {})
        self._pickled = None
        self._key = None
        functools.update_wrapper(self, cls, updated=())

    def options(self, **changes):
        """The same class with other options (cpus, resources,
        max_restarts, max_call_retries, name, allow_failure, named: a
        named actor, which any session reaches with get_actor(named) and
        which outlives its session until killed; or Ray's names: num_cpus,
        num_gpus, memory, max_task_retries, name, namespace, lifetime,
        get_if_exists)."""
        _known(changes, CLASS_OPTIONS, "a class")
        return ActorClass(self.cls, **{**self._options, **_ray_names(changes, "class")})

    def _build(self, session, args, kwargs, context=None, display=None):
        if self._pickled is None:
            self._pickled = cloudpickle.dumps(self.cls, protocol=pickle.HIGHEST_PROTOCOL)
            self._key = hashlib.blake2b(self._pickled, digest_size=16).digest()
        ray = None
        if context is not None:
            ray = {"max_concurrency": self._options["max_concurrency"]} if self._options["max_concurrency"] else {}
        packed = _pack(self._name, args, kwargs, session, lambda plain_args, plain_kwargs, codecs: (
            MAGIC, FORMAT, self._name, self._key, self._pickled, plain_args, plain_kwargs, codecs, (), ray), context)
        actor = session.actor(f"{EXECUTOR}/{ACTOR_TYPE}", packed[1], packed[0])
        actor.task.name(display or self._name)
        options = self._options
        if options["cpus"] is not None:
            actor.cpus(options["cpus"])
        for resource, amount in self._resources.items():
            actor.resource(resource, amount)
        if options["max_restarts"]:
            actor.max_restarts(options["max_restarts"] if options["max_restarts"] >= 0 else 1000)
        if options["max_call_retries"]:
            actor.max_call_retries(options["max_call_retries"] if options["max_call_retries"] >= 0 else 1000)
        return actor, packed

    def remote(self, *args, **kwargs):
        """Makes an actor, constructed from args and kwargs (as a function's
        arguments: data objects, tasks of one output and ObjectRefs pass
        their data), and returns its ActorHandle: in the current session,
        or, outside one, Ray's: in the driver's session, holding no cpus
        unless num_cpus is given, ending with its last handle unless named."""
        context = _ray_context()
        if context is not None:
            return self._ray_remote(context, args, kwargs)
        session = _current_session()
        options = self._options
        actor, _ = self._build(session, args, kwargs, display=options["name"])
        if options["allow_failure"]:
            actor.task.allow_failure()
        if options["named"]:
            actor.named(options["named"])
        return ActorHandle(self, actor, session, options["named"])

    def _ray_remote(self, context, args, kwargs):
        from . import _api
        from ._refs import ActorLife
        context.check_thread()
        options = self._options
        registered = options["name"] or options["named"]
        qualified = _api._qualified(registered, options["namespace"] or context.namespace) if registered else None
        if qualified is not None:
            if options["get_if_exists"]:
                try:
                    return _api.get_actor(registered, options["namespace"])
                except ValueError:
                    pass
            # Its own submit: a name taken refuses this actor alone.
            context.sync()
        if options["cpus"] is None:
            options = dict(options, cpus=0)  # Ray's: placed on a free cpu, holding none
        saved, self._options = self._options, options
        try:
            actor, (_, _, capture) = self._build(context.session, args, kwargs, context)
        finally:
            self._options = saved
        actor.task.allow_failure()
        if qualified is not None:
            actor.named(qualified)
        life = ActorLife(actor, named=qualified is not None, detached=options["lifetime"] == "detached")
        for handle in capture.handles:
            other = context.actors.get(handle.actor.id)
            if other is not None:
                other.users.append(actor.task)
        context.actors[actor.id] = life
        handle = ActorHandle(self, actor, context.session, qualified, ray_context=context)
        if qualified is not None:
            context.built += 1
            try:
                context.sync()
            except _squall.Error as e:
                del context.actors[actor.id]
                raise ValueError(f"cannot make actor {registered!r}: {e}") from None
        else:
            context.task_built()
        return handle

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
    task). A handle of Ray's model (`ray_context`) counts toward its
    actor's life."""

    def __init__(self, actor_class, actor, session, named=None, ray_context=None):
        self._class = actor_class
        self._session = session
        self._named = named
        self._ray_context = ray_context
        self.actor = actor
        if ray_context is not None:
            life = ray_context.actors.get(actor.id)
            if life is not None:
                life.handles += 1

    def __del__(self):
        context = getattr(self, "_ray_context", None)
        if context is None:
            return
        life = context.actors.get(self.actor.id)
        if life is not None:
            life.handles -= 1
            if life.handles == 0 and not life.named:
                life.ending = True

    def kill(self):
        """Ends the actor (after submit): its process stops, its calls not
        yet run end cancelled, the session goes on."""
        self.actor.kill()

    def __getattr__(self, name):
        # Only for names the handle has not: the class's public methods.
        if name.startswith("_"):
            raise AttributeError(name)
        if self._class is None:
            return ActorMethod(self, name)
        return self._class._method(self, name)

    def __reduce__(self):
        # Passed into a task (or a method) by what names it: its name, or
        # its task's id in the session the task runs in (docs/actors.md).
        context = self._ray_context
        if context is not None and context._capture is not None:
            context._capture.handles.append(self)
        if self._named:
            return _named_handle, (self._class, self._named)
        return _handle_in_session, (self._class, self.actor.session_id, self.actor.id)

    def __repr__(self):
        name = self._class._name if self._class is not None else "Actor"
        return f"<squall actor {name} {self.actor.session_id}/{self.actor.id}>"


def _named_handle(actor_class, name):
    context = _ray_context()
    if context is None:
        return actor_class.get_actor(name)
    return ActorHandle(actor_class, context.session.get_actor(name), context.session, name, ray_context=context)


def _handle_in_session(actor_class, session_id, actor_id):
    context = _ray_context()
    session = _current_session() if context is None else context.session
    if session.id != session_id:
        raise _squall.Error(f"actor {session_id}/{actor_id} is of another session than this task's ({session.id}): "
                            "pass a named actor's handle instead")
    return ActorHandle(actor_class, session.actor_handle(actor_id), session, ray_context=context)


class ActorMethod:
    """A method of an actor: .remote(...) makes a call task of it."""

    def __init__(self, handle, method, *, outputs=1, allow_failure=False, time_limit=None, keep=False):
        self._handle = handle
        self._method = method
        self._options = dict(outputs=outputs, allow_failure=allow_failure, time_limit=time_limit, keep=keep)
        self._codecs = _output_codecs(outputs)
        owner = handle._class._name if handle._class is not None else "Actor"
        self._name = f"{owner}.{method}"

    def options(self, **changes):
        """The same method with other options (outputs or num_returns,
        allow_failure, time_limit, keep)."""
        if "num_returns" in changes:
            changes["outputs"] = changes.pop("num_returns")
        for name in IGNORED_OPTIONS + ("name",):
            changes.pop(name, None)
        unknown = set(changes) - set(self._options)
        if unknown:
            raise TypeError(f"method options: unknown {', '.join(sorted(unknown))}")
        return ActorMethod(self._handle, self._method, **{**self._options, **changes})

    def remote(self, *args, **kwargs):
        """Builds a call of the method on args and kwargs, in the actor's
        session, and returns it (a squall.Task whose outputs are the
        method's results, as a remote function's; in Ray's model, their
        ObjectRefs). Calls on one actor run one at a time, in the order
        they were made."""
        handle = self._handle
        context = handle._ray_context
        if context is None:
            # A handle that arrived in a task's arguments (unpickled before
            # its Ray call began) is used in the model of where it is used.
            here = _ray_context()
            if here is not None and here.session.id == handle.actor.session_id:
                context = handle._ray_context = here
        ray = {} if context is not None else None
        packed = _pack(self._name, args, kwargs, handle._session, lambda plain_args, plain_kwargs, codecs: (
            MAGIC, FORMAT, self._name, self._method, plain_args, plain_kwargs, codecs, self._codecs, ray), context)
        task = handle.actor.call(f"call-{len(self._codecs)}", packed[1], packed[0], len(self._codecs))
        task.name(self._name)
        options = self._options
        if options["time_limit"] is not None:
            task.time_limit(options["time_limit"])
        if context is None:
            if options["allow_failure"]:
                task.allow_failure()
            _mark_outputs(task, self._codecs, options["keep"])
            return task
        context.check_thread()
        task.allow_failure()
        life = context.actors.get(handle.actor.id)
        if life is not None:
            life.last_call = task
        refs = _ray_outputs(context, task, self._codecs, packed[2], actor_call=True,
                            foreign=_foreign_session(handle.actor, context))
        if len(refs) == 1:
            return refs[0]
        return refs or None

    def __call__(self, *args, **kwargs):
        raise TypeError(f"{self._name} is a method of an actor: call it with .remote(...)")

    def __reduce__(self):
        raise TypeError("an actor's method cannot be passed into a task (not yet: docs/actors.md)")

    def __repr__(self):
        return f"<squall actor method {self._name}>"


def method(function=None, *, outputs=1, allow_failure=False, time_limit=None, keep=False, num_returns=None,
           **ignored):
    """Options of an actor class's method, its calls' defaults:
    @squall.method(outputs=2) (a count or codecs, as for remote functions;
    1 by default), allow_failure, time_limit (seconds), keep. A call may
    change them: counter.pair.options(keep=True).remote()."""
    if num_returns is not None:
        outputs = num_returns
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
        is_class = isinstance(target, type)
        _known(options, CLASS_OPTIONS if is_class else FUNCTION_OPTIONS, "a class" if is_class else "a function")
        given = _ray_names(options, "class" if is_class else "function")
        if is_class:
            return ActorClass(target, **given)
        return RemoteFunction(target, **given)
    return wrap if function is None else wrap(function)
