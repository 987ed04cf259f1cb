"""The executor side of @squall.remote: squall-python-executor calls run()
for each call task, in a warm embedded interpreter; for an actor, it calls
construct() once in the actor's own process and call_method() for each of
its method calls, on the instance construct() returned.

A call's config is the payload squall.remote builds (see remote.py for its
layouts); its inputs are the data objects among the arguments. A function
(or an actor's class) is unpickled once per process (cached by its key);
results are pickled, or passed on as raw bytes, into the outputs.

A call made through Ray's model (docs/ray.md) carries its options in the
payload's last field: its exception becomes a value (TaskErrorValue) in
every output instead of failing the task, an argument that holds such a
value is passed on without running, and exceptions of the types asked for
are retried here. Inputs past the declared ones are objects the call's
arguments hold by reference (ObjectRefs inside them): kept for the call,
not passed.

It uses nothing of the client, only the standard library and cloudpickle,
but for @remote calls made inside a function (nested_session).
"""

import asyncio
import concurrent.futures
import contextvars
import inspect
import os
import pathlib
import pickle
import threading
import traceback

import cloudpickle

from . import _objects

# The payload's first two fields (remote.py writes the same).
MAGIC = "squall.remote"
FORMAT = 2
# The payloads' lengths: a function's call or an actor's constructor, and
# a method call (remote.py); the last field is the Ray options or None.
CALL_FIELDS = 10
METHOD_FIELDS = 9
# A method call of this name ends the actor's process (ray.kill with
# no_restart=False: restarted if it may be).
EXIT_METHOD = "__squall_exit__"

# Functions unpickled in this process, by key; at most CACHE_SIZE of them.
CACHE_SIZE = 64
_functions = {}


class CallFailed(Exception):
    """The call failed; its text (the remote traceback, or what was wrong
    with the call) becomes the task's error."""


class TaskErrorValue:
    """What the outputs of a Ray-model call that raised hold: the exception
    (pickled, when it can be), its remote traceback, where it ran. `get`
    raises it (as_error)."""

    def __init__(self, name, cause, type_name, traceback_text, pid, node, cause_class=None):
        self.name = name
        self.cause = cause  # the exception pickled, or None
        self.cause_class = cause_class  # its class pickled, or None
        self.type_name = type_name
        self.traceback_text = traceback_text
        self.pid = pid
        self.node = node

    @classmethod
    def of(cls, name, error, traceback_text):
        def dumped(value):
            try:
                data = cloudpickle.dumps(value, protocol=pickle.HIGHEST_PROTOCOL)
                pickle.loads(data)
                return data
            except Exception:
                return None
        return cls(name, dumped(error), type(error).__qualname__, traceback_text, os.getpid(),
                   os.environ.get("SQUALL_GOVERNOR_NAME", ""), dumped(type(error)))

    def as_error(self):
        """A RayTaskError that is also an instance of the exception's class."""
        from .exceptions import RayTaskError
        cause = _loads_or_none(self.cause)
        if cause is None:
            # An exception that does not unpickle (an __init__ of other
            # arguments than its args): one of its class, made without
            # its __init__, holding the message.
            cause_class = _loads_or_none(self.cause_class)
            if isinstance(cause_class, type) and issubclass(cause_class, BaseException):
                try:
                    cause = cause_class.__new__(cause_class)
                    BaseException.__init__(cause, self.traceback_text.rsplit("\n", 1)[-1])
                except Exception:
                    cause = None
        error = RayTaskError(self.name, self.traceback_text, cause, self.pid, self.node)
        return error.as_instanceof_cause()


def _loads_or_none(data):
    if data is None:
        return None
    try:
        return pickle.loads(data)
    except Exception:
        return None


def _function(key, pickled, what="function"):
    function = _functions.get(key)
    if function is None:
        try:
            function = pickle.loads(pickled)
        except Exception as e:
            raise CallFailed(
                f"cannot unpickle the {what}: {type(e).__name__}: {e} (is every module it "
                "uses installed where the governor runs?)") from None
        if len(_functions) >= CACHE_SIZE:
            _functions.pop(next(iter(_functions)))
        _functions[key] = function
    return function


def _decode(codec, view, index, path):
    """An input as the function gets it: a dir as a pathlib.Path, a pickled
    object as its value (its big arrays read-only views of a mapping of the
    store's file at `path`, which they keep; copies when the input came in
    the call), anything else as bytes."""
    if isinstance(view, tuple):
        return pathlib.Path(view[1])
    if codec == "pickle":
        try:
            return _objects.loads(view, path) if path else _objects.loads_copied(view)
        except Exception as e:
            raise CallFailed(f"input {index} (content type 'pickle') cannot be unpickled: "
                             f"{type(e).__name__}: {e}") from None
    return bytes(view)


def _encode(codec, value, index, name):
    if codec == "bytes":
        if isinstance(value, str):
            return value.encode()
        if isinstance(value, (bytes, bytearray, memoryview)):
            return bytes(value)
        raise CallFailed(f"{name} returned {type(value).__name__} for output {index}, which is "
                         "declared 'bytes': return bytes or str")
    try:
        return _objects.dumps(value)
    except Exception as e:
        raise CallFailed(f"{name} returned a value for output {index} that cannot be pickled: "
                         f"{type(e).__name__}: {e}") from None


def _remote_traceback(error):
    """The traceback of the function's exception, without this module's
    frames (those before the function's)."""
    tb = error.__traceback__
    while tb is not None and tb.tb_frame.f_code.co_filename == __file__:
        tb = tb.tb_next
    return "".join(traceback.format_exception(type(error), error, tb)).rstrip("\n")




def _payload(config, fields, what):
    """The fields of a call's config, checked: its magic, its format and
    its length."""
    try:
        if not config:
            raise ValueError("the call has no config")
        payload = _objects.loads(config)
        magic, version = payload[0], payload[1]
    except Exception as e:
        raise CallFailed(f"the call's config is no {what} ({type(e).__name__}: {e})") from None
    if magic != MAGIC or version != FORMAT:
        raise CallFailed(f"the call was made by a squall client writing format {version!r}; "
                         f"this executor reads {FORMAT}: use the same squall on both sides")
    if len(payload) != fields:
        raise CallFailed(f"the call's config is no {what} ({len(payload)} fields, not {fields})")
    return payload


def _check_counts(input_codecs, inputs, output_codecs, output_count):
    if len(output_codecs) != output_count:
        raise CallFailed(f"the call declares {len(output_codecs)} outputs, the task has {output_count}")
    if len(input_codecs) > len(inputs):
        raise CallFailed(f"the call declares {len(input_codecs)} inputs, the task has {len(inputs)}")


def _values(input_codecs, inputs, paths):
    paths = paths or [None] * len(inputs)
    return [_decode(codec, view, i, path)
            for i, (codec, view, path) in enumerate(zip(input_codecs, inputs, paths))]


def _release(inputs):
    """Releases the views of the call's memory, which the executor frees
    when the call returns (the values decoded from them are copies)."""
    for view in inputs:
        if isinstance(view, memoryview):
            view.release()


def _invoke(function, args, kwargs, values, raw=False):
    """function(*args, **kwargs), with the arguments that are inputs taken
    from values; its exception becomes CallFailed(its remote traceback)
    (raw: propagates as it is)."""
    call_args = [values[v] if is_input else v for is_input, v in args]
    call_kwargs = {k: (values[v] if is_input else v) for k, (is_input, v) in kwargs.items()}
    if raw:
        return function(*call_args, **call_kwargs)
    try:
        return function(*call_args, **call_kwargs)
    except BaseException as e:
        raise CallFailed(_remote_traceback(e)) from None


def _outputs(name, result, output_codecs):
    """The outputs' bytes: the result, or its values, one per output."""
    output_count = len(output_codecs)
    if output_count == 0:
        return []
    if output_count == 1:
        results = [result]
    else:
        try:
            results = list(result)
        except TypeError:
            raise CallFailed(f"{name} has {output_count} outputs and returned {type(result).__name__}, "
                             f"not a sequence of {output_count} values") from None
        if len(results) != output_count:
            raise CallFailed(f"{name} has {output_count} outputs and returned {len(results)} values")
    return [_encode(codec, value, i, name) for i, (codec, value) in enumerate(zip(output_codecs, results))]


def _error_outputs(name, value, output_codecs):
    return [_encode("pickle", value, i, name) for i in range(len(output_codecs))]


class _Attempts:
    """The tries of one Ray-model call: the first, then one more for each
    exception of the types asked for (retry_exceptions), up to
    max_retries."""

    def __init__(self, options):
        self.retries = options.get("exception_retries", 0)
        self.retry_on = options.get("retry_exceptions", ())

    def again(self, error):
        if self.retries > 0 and (self.retry_on is True or isinstance(error, tuple(self.retry_on or ()))):
            self.retries -= 1
            return True
        return False


def _failed_input(name, values, output_codecs):
    """The outputs of a call given a failed argument: its error, passed
    on without running; None when no argument failed."""
    for value in values:
        if isinstance(value, TaskErrorValue):
            return _error_outputs(name, value, output_codecs)
    return None


def _error_value(name, error):
    """What a Ray-model call's outputs hold for its exception. Results
    that do not fit the outputs (CallFailed) are a ValueError of the call."""
    if isinstance(error, CallFailed):
        return TaskErrorValue.of(name, ValueError(str(error)), f"ValueError: {error}")
    return TaskErrorValue.of(name, error, _remote_traceback(error))


async def _ray_outputs(name, function, args, kwargs, values, output_codecs, options, awaits):
    """A Ray-model call's outputs: its results, or its exception as a value
    in each (after the retries it may have), or the failed argument's value
    without running it. `awaits`: a method of an async actor, on its event
    loop, whose coroutine's result is awaited; otherwise this never
    suspends (_ray_result runs it at once)."""
    failed = _failed_input(name, values, output_codecs)
    if failed is not None:
        return failed
    attempts = _Attempts(options)
    while True:
        try:
            with _RayCall():
                result = _invoke(function, args, kwargs, values, raw=True)
                if awaits and inspect.isawaitable(result):
                    result = await result
            return _outputs(name, result, output_codecs)
        except BaseException as e:
            if not isinstance(e, CallFailed) and attempts.again(e):
                continue
            return _error_outputs(name, _error_value(name, e), output_codecs)


def _run_now(coroutine, name):
    """Runs a coroutine that awaits nothing to its end at once."""
    try:
        coroutine.send(None)
    except StopIteration as done:
        return done.value
    coroutine.close()
    raise CallFailed(f"{name}: the call suspended outside an event loop")


def _ray_result(name, function, args, kwargs, values, output_codecs, options):
    """_ray_outputs of a plain function, run to its end at once."""
    return _run_now(_ray_outputs(name, function, args, kwargs, values, output_codecs, options, awaits=False), name)


# Whether a Ray-model call is under way in this thread or coroutine.
_ray_depth = contextvars.ContextVar("squall_ray_call", default=0)


class _RayCall:
    """Marks a Ray-model call running: @remote calls inside it build Ray
    tasks (remote.py asks ray_call())."""

    def __enter__(self):
        self._token = _ray_depth.set(_ray_depth.get() + 1)

    def __exit__(self, *exc):
        _ray_depth.reset(self._token)


def ray_call():
    """Whether a Ray-model call is running here now."""
    return _ray_depth.get() > 0


def run(config, inputs, output_count, paths=None):
    """Runs one call of a function; returns the outputs, one per output:
    bytes, or a list of parts (squall._objects.dumps). paths: each input's
    store file, or None (it came in the call)."""
    try:
        payload = _payload(config, CALL_FIELDS, "@squall.remote call")
        _, _, name, key, pickled, args, kwargs, input_codecs, output_codecs, options = payload
        _check_counts(input_codecs, inputs, output_codecs, output_count)
        function = _function(key, pickled)
        values = _values(input_codecs, inputs, paths)
    finally:
        _release(inputs)
    if options is not None:
        return _ray_result(name, function, args, kwargs, values, output_codecs, options)
    return _outputs(name, _invoke(function, args, kwargs, values), output_codecs)


# The actor this process hosts (its task id), for get_runtime_context().
actor_id = None

# Ray's default max_concurrency of an async actor (a threaded one: 1).
ASYNC_CONCURRENCY = 1000
# How many calls of this process's actor may be under way at once, and
# whether its methods run on an event loop (an async actor).
_concurrency = 1
_async_actor = False


def _is_async_class(cls):
    return any(inspect.iscoroutinefunction(getattr(cls, name, None)) for name in dir(cls)
               if not name.startswith("__"))


def actor_concurrency():
    """How many calls the actor construct() made may have under way at
    once (squall-python-executor asks once it is made)."""
    return _concurrency


def construct(config, inputs, paths=None):
    """Makes an actor's instance: its class called on the constructor's
    arguments. The executor keeps it for call_method()."""
    global actor_id
    try:
        payload = _payload(config, CALL_FIELDS, "@squall.remote actor")
        _, _, _, key, pickled, args, kwargs, input_codecs, output_codecs, options = payload
        _check_counts(input_codecs, inputs, output_codecs, 0)
        cls = _function(key, pickled, "actor's class")
        values = _values(input_codecs, inputs, paths)
    finally:
        _release(inputs)
    if executor() is not None:
        actor_id = call_context()[1]
    if options is None:
        return _invoke(cls, args, kwargs, values)
    global _concurrency, _async_actor
    _async_actor = _is_async_class(cls)
    asked = options.get("max_concurrency")
    _concurrency = int(asked) if asked else (ASYNC_CONCURRENCY if _async_actor else 1)
    with _RayCall():
        return _invoke(cls, args, kwargs, values)


# The event loop of an actor's `async def` methods (one per process).
_actor_loop = None


def _sync(bound):
    """A method as a plain function: an `async def` one runs on the actor's
    event loop until it returns (one call at a time)."""
    if not asyncio.iscoroutinefunction(bound):
        return bound

    def run_coroutine(*args, **kwargs):
        global _actor_loop
        if _actor_loop is None:
            _actor_loop = asyncio.new_event_loop()
        return _actor_loop.run_until_complete(bound(*args, **kwargs))
    return run_coroutine


def _method_call(instance, config, inputs, output_count, paths):
    """A method call's parts: (name, bound method, args, kwargs, values,
    output codecs, options)."""
    try:
        payload = _payload(config, METHOD_FIELDS, "@squall.remote method call")
        _, _, name, method, args, kwargs, input_codecs, output_codecs, options = payload
        _check_counts(input_codecs, inputs, output_codecs, output_count)
        if method == EXIT_METHOD:
            os._exit(1)
        try:
            bound = getattr(instance, method)
        except AttributeError:
            raise CallFailed(f"{name}: the actor ({type(instance).__qualname__}) has no method {method!r}") from None
        values = _values(input_codecs, inputs, paths)
    finally:
        _release(inputs)
    return name, bound, args, kwargs, values, output_codecs, options


def call_method(instance, config, inputs, output_count, paths=None):
    """Runs one method call on an actor's instance; returns the outputs'
    bytes, one per output."""
    name, bound, args, kwargs, values, output_codecs, options = _method_call(
        instance, config, inputs, output_count, paths)
    bound = _sync(bound)
    if options is not None:
        return _ray_result(name, bound, args, kwargs, values, output_codecs, options)
    return _outputs(name, _invoke(bound, args, kwargs, values), output_codecs)


# A concurrent actor's calls run on its event loop (async) or its threads.
_loop = None
_pool = None
# The (session, task, record) of the concurrent call running in this thread
# or coroutine (call_context(); record() has the server record the call
# before it submits tasks).
_concurrent_call = contextvars.ContextVar("squall_concurrent_call", default=None)


def _event_loop():
    global _loop
    if _loop is None:
        _loop = asyncio.new_event_loop()
        threading.Thread(target=_loop.run_forever, name="squall-actor-loop", daemon=True).start()
    return _loop


def _thread_pool():
    global _pool
    if _pool is None:
        _pool = concurrent.futures.ThreadPoolExecutor(max_workers=_concurrency, thread_name_prefix="squall-actor")
    return _pool


def call_method_concurrently(instance, config, inputs, output_count, paths, context, done):
    """Starts one method call of a concurrent actor (Ray's async and
    threaded actors: actor_concurrency() > 1) and returns: an async actor's
    on its event loop, a threaded one's on its pool; done(outputs, None) or
    done(None, error text) ends it, from the thread it ran on. Calls start in
    the order they come; the executor lets actor_concurrency() be under way."""
    # Its arguments are unpickled where it runs (the inputs live until
    # done()): the refs and actor handles in them are that thread's, whose
    # client is the one they are used through.
    def call():
        return _method_call(instance, config, inputs, output_count, paths)

    if _async_actor:
        asyncio.run_coroutine_threadsafe(_run_concurrent(done, context, call, True), _event_loop())
    else:
        _thread_pool().submit(lambda: _run_now(_run_concurrent(done, context, call, False), "a method call"))


async def _run_concurrent(done, context, make_call, awaits):
    """Runs a concurrent call (its parts made by make_call()) and ends it
    through done(). `awaits`: on the async actor's event loop (a
    coroutine's result is awaited); otherwise on a thread of the pool,
    where this never suspends (_run_now)."""
    token = _concurrent_call.set(context)
    try:
        # Only actors of Ray's model take concurrent calls: the handles in
        # the arguments are of that model too.
        with _RayCall():
            name, bound, args, kwargs, values, output_codecs, options = make_call()
        if options is not None:
            outputs = await _ray_outputs(name, bound, args, kwargs, values, output_codecs, options, awaits=awaits)
        else:
            result = _invoke(bound, args, kwargs, values)
            if awaits and inspect.isawaitable(result):
                result = await result
            outputs = _outputs(name, result, output_codecs)
    except CallFailed as e:
        return done(None, str(e))
    except BaseException as e:
        return done(None, _remote_traceback(e))
    finally:
        _concurrent_call.reset(token)
    done(outputs, None)


# @remote calls made inside a function (docs/nested.md) go into the session
# of the task the call runs for, as its children, through one client of
# this process that runs on the executor's own event loop (the module
# _squall_executor, which squall-python-executor embeds, says which task,
# lends the loop, and gives the call's cpus back while it waits).
_nested_client = None
_nested_session = None  # ((session, task), Session) of the call running now


def executor():
    """The module _squall_executor, or None outside squall-python-executor
    (looked for once)."""
    global _executor
    if _executor is False:
        try:
            import _squall_executor
            _executor = _squall_executor
        except ImportError:
            _executor = None
    return _executor


_executor = False


def call_context():
    """(session, task) of the call running now in this executor, or (0, 0)."""
    concurrent_call = _concurrent_call.get()
    if concurrent_call is not None:
        return concurrent_call[:2]
    module = executor()
    if module is None or threading.current_thread() is not threading.main_thread():
        return (0, 0)
    return module.context()


def nested_session():
    """The session of the task this call runs for, or None outside a call
    of squall-python-executor."""
    global _nested_client, _nested_session
    _squall_executor = executor()
    if _squall_executor is None:
        return None
    if threading.current_thread() is not threading.main_thread():
        call = _concurrent_call.get()
        return _thread_session(call) if call is not None else None
    session, task = _squall_executor.context()
    if not session:
        return None
    if _nested_session is not None and _nested_session[0] == (session, task):
        return _nested_session[1]
    from . import _squall
    if _nested_client is None:
        _squall._share_thread_loop(*_squall_executor.loop())
        _nested_client = _squall.Client(around_wait=_squall_executor.waiting)
    # A call its client sent the governor directly is recorded first.
    _squall_executor.record()
    # One call at a time: an earlier call's session is done with.
    _nested_session = ((session, task), _nested_client.attach_child(session, task))
    return _nested_session[1]


# A concurrent actor's threads (its event loop's, its pool's) each reach
# the server through a client of their own: the process's other client
# belongs to its main thread and loop. (Their waits keep the actor's
# resources: it holds no cpus by default.)
_thread_nested = threading.local()
# Sessions of calls each thread keeps attached, at most.
THREAD_SESSIONS = 64


def _thread_session(call):
    """The session of the concurrent call `call` ((session, task)) for
    this thread's client, made on first use."""
    local = _thread_nested
    if getattr(local, "client", None) is None:
        from . import _squall
        local.client = _squall.Client()
        local.sessions = {}
    session = local.sessions.get(call[:2])
    if session is None:
        if len(local.sessions) >= THREAD_SESSIONS:
            local.sessions.pop(next(iter(local.sessions)))
        call[2]()
        session = local.client.attach_child(*call[:2])
        local.sessions[call[:2]] = session
    return session


def close_nested():
    """Closes the nested client (before the executor's loop goes)."""
    global _nested_client, _nested_session
    _nested_session = None
    if _nested_client is not None:
        _nested_client.close()
        _nested_client = None
        from . import _squall
        _squall._unshare_thread_loop()
