"""The executor side of @squall.remote: squall-python-executor calls run()
for each call task, in a warm embedded interpreter.

A call's config is the payload squall.remote builds (see remote.py for its
layout); its inputs are the data objects among the function's arguments.
The function is unpickled once per process (cached by its key) and its
result is pickled, or passed on as raw bytes, into the outputs.

It uses nothing of the client, only the standard library and cloudpickle.
"""

import pathlib
import pickle
import traceback

import cloudpickle

# The payload's first two fields (remote.py writes the same).
MAGIC = "squall.remote"
FORMAT = 1

# Functions unpickled in this process, by key; at most CACHE_SIZE of them.
CACHE_SIZE = 64
_functions = {}


class CallFailed(Exception):
    """The call failed; its text (the remote traceback, or what was wrong
    with the call) becomes the task's error."""


def _function(key, pickled):
    function = _functions.get(key)
    if function is None:
        try:
            function = pickle.loads(pickled)
        except Exception as e:
            raise CallFailed(
                f"cannot unpickle the function: {type(e).__name__}: {e} (is every module it "
                "uses installed where the governor runs?)") from None
        if len(_functions) >= CACHE_SIZE:
            _functions.pop(next(iter(_functions)))
        _functions[key] = function
    return function


def _decode(codec, view, index):
    """An input as the function gets it: a dir as a pathlib.Path, a pickled
    object as its value, anything else as bytes."""
    if isinstance(view, tuple):
        return pathlib.Path(view[1])
    if codec == "pickle":
        try:
            return pickle.loads(view)
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
        return cloudpickle.dumps(value, protocol=pickle.HIGHEST_PROTOCOL)
    except Exception as e:
        raise CallFailed(f"{name} returned a value for output {index} that cannot be pickled: "
                         f"{type(e).__name__}: {e}") from None


def _remote_traceback(error):
    """The traceback of the function's exception, without this module's
    frame (the first)."""
    tb = error.__traceback__.tb_next if error.__traceback__ is not None else None
    return "".join(traceback.format_exception(type(error), error, tb)).rstrip("\n")


def run(config, inputs, output_count):
    """Runs one call; returns the outputs' bytes, one per output."""
    try:
        if not config:
            raise ValueError("the call has no config")
        payload = pickle.loads(config)
        magic, version = payload[0], payload[1]
    except Exception as e:
        raise CallFailed(f"the call's config is no @squall.remote call ({type(e).__name__}: {e})") from None
    if magic != MAGIC or version != FORMAT:
        raise CallFailed(f"the call was made by a squall client writing format {version!r}; "
                         f"this executor reads {FORMAT}: use the same squall on both sides")
    _, _, name, key, pickled, args, kwargs, input_codecs, output_codecs = payload
    if len(output_codecs) != output_count:
        raise CallFailed(f"the call declares {len(output_codecs)} outputs, the task has {output_count}")
    if len(input_codecs) != len(inputs):
        raise CallFailed(f"the call declares {len(input_codecs)} inputs, the task has {len(inputs)}")
    try:
        function = _function(key, pickled)
        values = [_decode(codec, view, i) for i, (codec, view) in enumerate(zip(input_codecs, inputs))]
    finally:
        for view in inputs:
            if isinstance(view, memoryview):
                view.release()
    call_args = [values[v] if is_input else v for is_input, v in args]
    call_kwargs = {k: (values[v] if is_input else v) for k, (is_input, v) in kwargs.items()}
    try:
        result = function(*call_args, **call_kwargs)
    except BaseException as e:
        raise CallFailed(_remote_traceback(e)) from None
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
