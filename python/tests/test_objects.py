"""Big Python values without copies (squall._objects; docs/python.md, "Big
values"): the layout of out-of-band pickles, and, on the suite's cluster,
arrays that reach a function as read-only views of the store's mapping,
come back from a task or a put as views of the fetched bytes, and a put or
pickled constant that is a snapshot of the array when the call returned."""

import mmap
import pickle
import struct
import sys

import cloudpickle
import numpy as np
import pytest

import squall
from squall import _objects

cloudpickle.register_pickle_by_value(sys.modules[__name__])

MB = 1 << 20


def joined(parts):
    return b"".join(bytes(memoryview(p)) for p in parts)


def test_small_values_stay_plain_pickles():
    for value in (5, "text", [1, 2, {"a": b"x"}], np.arange(100)):
        parts = _objects.dumps(value)
        assert len(parts) == 1
        assert bytes(parts[0][:1]) == b"\x80"
        got = _objects.loads(parts[0])
        assert got == value if not isinstance(value, np.ndarray) else np.array_equal(got, value)


def test_big_buffers_go_out_of_band_aligned_and_come_back_as_read_only_views():
    a, b = np.arange(MB // 8, dtype=np.float64), np.full(3 * MB // 4, 7, dtype=np.int32)
    parts = _objects.dumps({"a": a, "b": b, "small": np.ones(4), "n": 3})
    # The arrays' own memory, not copies.
    assert sum(isinstance(p, memoryview) for p in parts) == 2
    data = joined(parts)
    magic, version, count, _ = struct.unpack_from("<4sIQQ", data)
    assert (magic, version, count) == (b"SQOB", 1, 2)
    for i in range(count):
        offset, length = struct.unpack_from("<QQ", data, 24 + 16 * i)
        assert offset % 64 == 0 and length in (a.nbytes, b.nbytes)
    got = _objects.loads(data)
    assert np.array_equal(got["a"], a) and np.array_equal(got["b"], b) and got["n"] == 3
    assert not got["a"].flags.writeable
    assert np.shares_memory(got["a"], np.frombuffer(data, dtype=np.uint8))
    copied = _objects.loads_copied(memoryview(data))
    assert np.array_equal(copied["a"], a) and not copied["a"].flags.writeable
    assert not np.shares_memory(copied["a"], np.frombuffer(data, dtype=np.uint8))


def test_a_value_read_through_its_file_keeps_the_mapping(tmp_path):
    x = np.arange(MB // 4, dtype=np.int64)
    path = tmp_path / "object"
    path.write_bytes(joined(_objects.dumps(x)))
    got = _objects.loads(path.read_bytes(), str(path))
    path.unlink()  # the mapping outlives the name
    assert np.array_equal(got, x) and not got.flags.writeable
    base = got
    while not isinstance(base, mmap.mmap):
        base = base.base if not isinstance(base, memoryview) else base.obj
    assert isinstance(base, mmap.mmap)


def test_non_contiguous_arrays_are_copied_into_the_stream():
    x = np.arange(MB, dtype=np.float64)[::3]
    parts = _objects.dumps(x)
    assert np.array_equal(_objects.loads(joined(parts)), x)


@pytest.mark.parametrize("cut", [8, 30, 60])
def test_a_damaged_layout_is_a_clear_error(cut):
    data = joined(_objects.dumps(np.ones(MB // 8)))
    with pytest.raises(ValueError, match="out-of-band pickle"):
        _objects.loads(data[:cut] + bytes(64))
    broken = bytearray(data)
    struct.pack_into("<I", broken, 4, 99)
    with pytest.raises(ValueError, match="version 99"):
        _objects.loads(bytes(broken))


@squall.remote
def describe(x):
    """What the function got: a copy, or a read-only view of a mapping."""
    base = x
    while hasattr(base, "base") and base.base is not None:
        base = base.base
    if isinstance(base, memoryview):
        base = base.obj
    return float(x.sum()), bool(x.flags.writeable), type(base).__name__


@squall.remote
def ones(n):
    return np.ones(n)


def test_an_array_argument_is_a_view_of_the_store_and_a_result_comes_back_whole(session):
    x = np.arange(16 * MB // 8, dtype=np.float64)
    seen = describe(session.pickled(x))
    made = ones(3 * MB)
    seen.output.keep()
    made.output.keep()
    session.submit()
    total, writeable, base = seen.output.value()
    assert total == float(x.sum())
    assert (writeable, base) == (False, "mmap")
    got = made.output.value()
    assert got.shape == (3 * MB,) and float(got.sum()) == 3 * MB
    assert not got.flags.writeable


def test_pickled_and_put_are_snapshots(session, driver):
    x = np.zeros(4 * MB // 8)
    constant = session.pickled(x)
    constant.keep()
    x += 1
    session.submit()
    assert float(constant.value().sum()) == 0.0

    y = np.zeros(4 * MB // 8)
    ref = squall.put(y)
    y += 1
    assert float(squall.get(ref).sum()) == 0.0
    # The got array is a read-only view of what was fetched (Ray's too).
    got = squall.get(ref)
    assert not got.flags.writeable


def big_file_mappings():
    """The files this process maps in regions of 16 MiB or more."""
    found = set()
    with open("/proc/self/maps") as maps:
        for line in maps:
            fields = line.split(maxsplit=5)
            start, end = (int(x, 16) for x in fields[0].split("-"))
            if end - start >= 16 * MB and len(fields) == 6 and fields[5].startswith("/"):
                found.add(fields[5].strip())
    return found


def test_a_big_get_on_the_governors_machine_maps_its_file_without_a_copy(driver):
    before = big_file_mappings()
    ref = squall.put(np.full(4 * MB, 1.5))
    got = squall.get(ref)
    assert float(got.sum()) == 1.5 * 4 * MB and not got.flags.writeable
    mapped = big_file_mappings() - before
    assert len(mapped) == 1, mapped  # the object's file in the governor's store
    # Still readable with every ref gone (the store may remove the file).
    del ref
    squall.get(squall.put(0))  # a sync: the object is released
    assert float(got[-1]) == 1.5
    del got
    import gc
    gc.collect()
    assert not (big_file_mappings() - before)


@squall.remote
def first(x):
    return float(x[0])


def test_a_big_argument_passed_by_value_is_read_in_place(driver):
    x = np.full(8 * MB // 8, 2.5)
    assert squall.get(first.remote(x)) == 2.5
    ref = describe.remote(x)
    total, writeable, base = squall.get(ref)
    assert total == float(x.sum()) and (writeable, base) == (False, "mmap")


def test_plain_pickles_written_before_still_read():
    old = pickle.dumps(np.ones(MB // 8), protocol=4)
    assert np.array_equal(_objects.loads(old), np.ones(MB // 8))


def test_a_blob_of_parts_is_joined_in_order(session):
    big = np.arange(3 * MB // 8, dtype=np.float64)
    small = session.blob([b"ab", memoryview(b"cd"), bytearray(b"ef")])
    whole = session.blob([b"head", big, b"tail"])
    small.keep()
    whole.keep()
    session.submit()
    assert small.fetch() == b"abcdef"
    assert whole.fetch() == b"head" + big.tobytes() + b"tail"
    with pytest.raises(TypeError, match="bytes-like"):
        session.blob([b"ok", "not bytes"])


def test_values_past_a_governors_memory_tier_spill_and_read_back_right():
    # A governor whose memory tier holds 24 MiB, given 6 arrays of 8 MB:
    # the oldest spill to disk; every value, read by a task (a view of its
    # file, wherever it went) and got back, is the one put.
    with squall.LocalCluster(governors=1, cpus=1, governor_args=["--store-memory", "24M"]) as small:
        with squall.Client(small.address) as client, client.new_session("spill") as session:
            values = [np.full(MB, float(i)) for i in range(6)]
            constants = [session.pickled(v) for v in values]
            seen = [describe(c) for c in constants]
            made = [ones(MB + i) for i in range(3)]
            for c in constants:
                c.keep()
            for task in seen + made:
                task.output.keep()
            session.submit()
            for i, (c, task) in enumerate(zip(constants, seen)):
                total, writeable, base = task.output.value()
                assert total == float(i) * MB and (writeable, base) == (False, "mmap")
                assert np.array_equal(c.value(), values[i])
            for i, task in enumerate(made):
                assert np.array_equal(task.output.value(), np.ones(MB + i))
