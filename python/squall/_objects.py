"""How a Python value is laid out in an object (content type 'pickle').

A value whose pickle carries big buffers (numpy arrays, bytes-like data of
OUT_OF_BAND_MIN bytes or more) is pickled with protocol 5 and those buffers
kept out of the stream (PEP 574): the object is a header, the stream, and
each buffer at a 64-byte aligned offset. Writing it copies each buffer once,
straight from the value's memory (no in-band copy); reading it gives arrays
that are read-only views of the object's bytes (a mapping of the store's
file in an executor, the fetched bytes in a driver): no copy and no
unpickling of their data. Any other value is a plain pickle, as before; the
reader tells the two apart by the first bytes (a pickle starts with 0x80).

    header:  b"SQOB", u32 version (1), u64 buffer count N, u64 stream length
             N x (u64 offset, u64 length), offsets from the object's start
    then:    the stream, zero padding, each buffer (zero padding between)

This module uses only the standard library and cloudpickle: executors import
it without the client.
"""
import mmap
import pickle
import struct

import cloudpickle

MAGIC = b"SQOB"
VERSION = 1
# Buffers smaller than this stay in the stream (a small array is cheaper to
# copy than to place).
OUT_OF_BAND_MIN = 64 << 10
ALIGN = 64
_HEAD = struct.Struct("<4sIQQ")
_SLOT = struct.Struct("<QQ")
_PAD = bytes(ALIGN)


# A put at least this big first gives back what released refs held
# (_refs.Context.make_room).
BIG_PUT_BYTES = 8 << 20


def dumps(value):
    """The value's object as a list of parts (bytes-like, in order); the
    parts of an out-of-band pickle are views of the value's own memory, so
    the value must not change until they are written."""
    buffers = []

    def place(buffer):
        try:
            raw = buffer.raw()
        except BufferError:  # not contiguous: in the stream
            return True
        if raw.nbytes < OUT_OF_BAND_MIN:
            return True
        buffers.append(raw)
        return False

    stream = cloudpickle.dumps(value, protocol=5, buffer_callback=place)
    if not buffers:
        return [stream]
    head_size = _HEAD.size + _SLOT.size * len(buffers)
    at = head_size + len(stream)
    slots, parts = [], [None, stream]
    for raw in buffers:
        pad = -at % ALIGN
        if pad:
            parts.append(_PAD[:pad])
        at += pad
        slots.append(_SLOT.pack(at, raw.nbytes))
        parts.append(raw)
        at += raw.nbytes
    parts[0] = _HEAD.pack(MAGIC, VERSION, len(buffers), len(stream)) + b"".join(slots)
    return parts


def size(parts):
    return sum(memoryview(p).nbytes for p in parts)


def loads(data, path=None):
    """The value in an object's bytes. An out-of-band pickle's buffers are
    views of `data` (read-only when it is), or, given `path` (the store's
    file the bytes were mapped from), of a read-only mapping of that file
    that lives as long as the value uses it; without either, `data` must
    outlive the value (bytes do; memory that goes away first needs
    loads_copied)."""
    view = memoryview(data)
    if not _is_framed(view):
        return pickle.loads(view)
    if path is not None:
        with open(path, "rb") as f:
            view = memoryview(mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ))
    return _loads_framed(view, lambda b: b)


def loads_copied(data):
    """As loads, each buffer copied (read-only, as loads gives them): for
    bytes that go away after the call (an executor's input carried in the
    call itself)."""
    view = memoryview(data)
    if not _is_framed(view):
        return pickle.loads(view)
    return _loads_framed(view, bytes)


def _is_framed(view):
    return view.nbytes >= _HEAD.size and bytes(view[:4]) == MAGIC


def _loads_framed(view, take):
    magic, version, count, stream_size = _HEAD.unpack_from(view, 0)
    if version != VERSION:
        raise ValueError(f"an out-of-band pickle of version {version}; this squall reads {VERSION}")
    head_size = _HEAD.size + _SLOT.size * count
    if count == 0 or head_size + stream_size > view.nbytes:
        raise ValueError(f"an out-of-band pickle of {view.nbytes} bytes announces {count} buffers and "
                         f"{head_size + stream_size} bytes of header and stream")
    buffers = []
    for i in range(count):
        offset, length = _SLOT.unpack_from(view, _HEAD.size + _SLOT.size * i)
        if offset + length > view.nbytes:
            raise ValueError(f"buffer {i} of an out-of-band pickle ends at {offset + length}, "
                             f"past its {view.nbytes} bytes")
        buffers.append(take(view[offset:offset + length]))
    return pickle.loads(view[head_size:head_size + stream_size], buffers=buffers)
