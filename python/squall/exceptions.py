"""The errors of squall's Ray API (docs/ray.md), with Ray's names, so that
`ray.exceptions.X` and `from ray.exceptions import X` work after
`import squall as ray`.

Every one is a squall.Error. A task's own exception is a value: `get`
raises it as a RayTaskError made for its class, an instance of both, so
that `except ZeroDivisionError` catches it.
"""

from ._squall import Error


class RayError(Error):
    """The base of the errors below."""


class RayTaskError(RayError):
    """A task (or an actor's method) raised. `get` raises an instance of a
    class that is both this and the exception's own class; `cause` is the
    exception itself (None if it could not be pickled), `traceback_str`
    the remote traceback, `function_name` the task's name."""

    def __init__(self, function_name="", traceback_str="", cause=None, pid=0, node=""):
        super().__init__(self._message(function_name, traceback_str, pid, node))
        self.function_name = function_name
        self.traceback_str = traceback_str
        self.cause = cause
        self.pid = pid
        self.node = node

    @staticmethod
    def _message(function_name, traceback_str, pid, node):
        where = f" (pid={pid}, node={node})" if pid else ""
        return f"{function_name}(){where} raised:\n{traceback_str}"

    def as_instanceof_cause(self):
        """An error that is both a RayTaskError and an instance of the cause's
        class (this one when that cannot be made)."""
        cause_class = type(self.cause) if self.cause is not None else None
        if cause_class is None or isinstance(self, cause_class) or not issubclass(cause_class, BaseException):
            return self
        try:
            both = _dual_class(cause_class)
            error = both.__new__(both)
        except TypeError:
            return self  # a class that cannot be a base (or made so)
        BaseException.__init__(error, str(self))
        error.function_name = self.function_name
        error.traceback_str = self.traceback_str
        error.cause = self.cause
        error.pid = self.pid
        error.node = self.node
        # The cause's own attributes (errno, filename, ...) where it has them.
        for name, value in getattr(self.cause, "__dict__", {}).items():
            error.__dict__.setdefault(name, value)
        return error


_dual_classes = {}


def _dual_class(cause_class):
    both = _dual_classes.get(cause_class)
    if both is None:
        both = type(f"RayTaskError({cause_class.__name__})", (RayTaskError, cause_class),
                    {"__init__": RayTaskError.__init__, "__str__": lambda self: BaseException.__str__(self),
                     "__module__": __name__})
        _dual_classes[cause_class] = both
    return both


TaskError = RayTaskError


class GetTimeoutError(RayError, TimeoutError):
    """`get` (or `wait` inside it) ran out of its timeout."""


class TaskCancelledError(RayError):
    """The task was cancelled (`cancel`) before it made its result."""


class RayActorError(RayError):
    """The actor a call was made on died, or was killed, before the call
    made its result."""


class ActorDiedError(RayActorError):
    """As RayActorError: the actor's process ended (killed, crashed, or its
    constructor raised)."""


class WorkerCrashedError(RayError):
    """The process running the task died (retried up to max_retries
    first)."""


class ObjectLostError(RayError):
    """The object's bytes are gone and cannot be made again."""


class OutOfMemoryError(RayError):
    """The task was ended for want of memory."""


class ActorUnavailableError(RayActorError):
    """The actor cannot take calls now."""


__all__ = [
    "ActorDiedError", "ActorUnavailableError", "GetTimeoutError", "ObjectLostError", "OutOfMemoryError",
    "RayActorError", "RayError", "RayTaskError", "TaskCancelledError", "TaskError", "WorkerCrashedError",
]
