"""squall for Python: the client of a squall server (docs/python.md), and
Ray Core's API over it (docs/ray.md): `import squall as ray` runs a Ray
program.

    import squall

    client = squall.Client()                  # $SQUALL_SERVER or 127.0.0.1:7210
    with client.new_session("hello") as session:
        task = session.concat([session.blob(b"Hello "), session.blob(b"world!")])
        task.output.keep()
        session.submit()
        print(task.output.fetch())             # b'Hello world!'

Everything here wraps squall's C++ client library (squall._squall); Python
functions run as tasks, and classes as actors, with @squall.remote.
"""

from ._squall import (
    BLOB,
    DIR,
    STREAM,
    Actor,
    Client,
    DataObject,
    Error,
    GovernorInfo,
    Kind,
    LocalCluster,
    ObjectInfo,
    Program,
    Session,
    SessionState,
    Task,
    TaskExplanation,
    TaskFailed,
    TaskInfo,
    Timeout,
)
from . import exceptions
from ._api import (
    available_resources,
    cancel,
    cluster_resources,
    get,
    get_actor,
    get_gpu_ids,
    get_runtime_context,
    init,
    is_initialized,
    kill,
    nodes,
    put,
    shutdown,
    wait,
)
from ._refs import ObjectRef
from .remote import ActorClass, ActorHandle, ActorMethod, RemoteFunction, method, remote
from .remote import _current_session as current_session

__all__ = [
    "BLOB", "DIR", "STREAM", "Actor", "ActorClass", "ActorHandle", "ActorMethod", "Client", "DataObject", "Error",
    "GovernorInfo", "Kind", "LocalCluster", "ObjectInfo", "Program", "RemoteFunction", "Session", "SessionState",
    "Task", "TaskExplanation", "TaskFailed", "TaskInfo", "Timeout", "current_session", "method", "remote",
    # Ray's model (docs/ray.md)
    "ObjectRef", "available_resources", "cancel", "cluster_resources", "exceptions", "get", "get_actor",
    "get_gpu_ids", "get_runtime_context", "init", "is_initialized", "kill", "nodes", "put", "shutdown", "wait",
]
