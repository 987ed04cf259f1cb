"""@squall.remote: Python functions as tasks (docs/python.md).

A decorated function, called inside `with client.new_session() as session:`,
builds a call task instead of running: the governors' squall-python-executor
(the tasklib executor "python") runs it in a warm process. The function
travels by value (cloudpickle) in the task's config, with the plain
arguments; arguments that are data objects (or tasks of one output) become
the task's inputs, so calls chain into graphs without the client seeing
the data in between.

The config is a pickled tuple, read by squall._worker.run:

    (MAGIC, FORMAT, name, key, pickled function,
     args:   [(is_input, input index or plain value), ...],
     kwargs: {name: (is_input, index or value)},
     input codecs:  ['pickle' | 'bytes' | 'dir', ...] (one per input),
     output codecs: ['pickle' | 'bytes', ...] (one per output))
"""

import functools
import hashlib
import pickle

import cloudpickle

from . import _squall
from ._worker import FORMAT, MAGIC

# The executor's name and the most outputs its functions declare
# (python/src/executor-main.cpp).
EXECUTOR = "python"
MAX_OUTPUTS = 16
CODECS = ("pickle", "bytes")

# A payload bigger than this moves its big plain arguments (pickled above
# BIG_ARGUMENT bytes) into constants of their own, keeping the task well
# below the server's task-bytes limit (4 MiB by default).
CONFIG_LIMIT = 512 << 10
BIG_ARGUMENT = 4 << 10


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
        inputs, codecs = [], []

        def argument(value):
            if isinstance(value, _squall.Task):
                outputs = value.outputs
                if len(outputs) != 1:
                    raise _squall.Error(f"{self._name}: task {value.id} has {len(outputs)} outputs; "
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
            return cloudpickle.dumps(
                (MAGIC, FORMAT, self._name, self._key, self._pickled, plain_args, plain_kwargs, codecs,
                 self._codecs), protocol=pickle.HIGHEST_PROTOCOL)

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

    def __call__(self, *args, **kwargs):
        """Builds a call task in the current session and returns it; its
        outputs are the function's results."""
        session = _squall.current_session()
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
        for codec, output in zip(self._codecs, task.outputs):
            if codec == "pickle":
                output.content_type("pickle")
            if options["keep"]:
                output.keep()
        return task

    def __repr__(self):
        return f"<squall.remote {self._name}>"


def remote(function=None, *, outputs=1, cpus=None, resources=None, name=None, retries=0, time_limit=None,
           allow_failure=False, keep=False):
    """Makes a Python function a task factory.

    @squall.remote, or @squall.remote(outputs=..., cpus=..., ...). Called
    inside a session, the function builds a task run by a governor's
    squall-python-executor and returns it (a squall.Task); its output's
    value() is the function's result. Arguments may be plain values
    (pickled into the task) or data objects and tasks (their data is
    passed: a pickled object unpickled, a blob as bytes, a dir as a
    pathlib.Path).

    outputs: how many (the function returns that many values), or codecs
    per output: 'pickle' (the default: any value) or 'bytes' (raw bytes; the
    function returns bytes or str). cpus, resources ({'gpus': 1}), name,
    retries, time_limit (seconds) and allow_failure as for any task; keep
    keeps every output. An exception in the function fails the task; its
    error (TaskFailed) holds the remote traceback.
    """
    def wrap(f):
        return RemoteFunction(f, outputs=outputs, cpus=cpus, resources=resources, name=name, retries=retries,
                              time_limit=time_limit, allow_failure=allow_failure, keep=keep)
    return wrap if function is None else wrap(function)
