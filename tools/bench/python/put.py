#!/usr/bin/python3
"""Big values between a driver and tasks, squall beside Dask (issue 39's table).

For each size, a float64 array of ones made in the driver:

- put alone (Ray's model): the array into the governor's store, the ref
  dropped before the next (so later puts reuse the memory: best of --reps);
- put -> task -> result: squall `session.pickled(x)` (and Ray's `put`)
  read by one task that returns `x.sum()`; Dask `client.scatter(x)` and
  `submit(sum)`;
- task returns -> get: a task returns `np.ones(n)`, the driver gets it
  (squall `value()` and Ray's `get`; Dask `result()`);
- a task on an array already put (8 KB and each size) that reads one
  element: its round trip in ms, which a copy of the argument would grow;

with the machine's own limits in the same run: `np.copyto` into an array
written once before (warm) and into a fresh one. Prints `metric value`
lines: MB/s of the array's bytes over the whole round trip (best of
--reps), and each squall figure as a ratio to Dask's and to the warm copy.
squall runs on a squall.LocalCluster of one governor x 1 cpu, Dask (when
`import distributed` works) on a distributed.LocalCluster of one worker
process x 1 thread.

    tools/bench/python/put.py [--sizes 8,256,2048] [--reps 3] [--no-dask] [--store-memory 0]   (sizes in MB)
"""
import argparse
import sys
import time

import numpy as np
import squall


@squall.remote
def total(x):
    return float(x.sum())


@squall.remote
def ones(n):
    return np.ones(n)


@squall.remote
def first(x):
    return float(x[0])


def best(reps, run):
    return max(run() for _ in range(reps))


def rate(n, seconds):
    return n / 1e6 / seconds


def copy_mb_per_s(n, warm):
    x = np.ones(n // 8)
    y = np.empty_like(x)
    if warm:
        np.copyto(y, x)
    start = time.perf_counter()
    np.copyto(y, x)
    return rate(n, time.perf_counter() - start)


def squall_put(client, n):
    x = np.ones(n // 8)
    with client.new_session("bench-put") as session:
        start = time.perf_counter()
        result = total(session.pickled(x))
        result.output.keep()
        session.submit()
        assert result.output.value() == n // 8
        return rate(n, time.perf_counter() - start)


def squall_get(client, n):
    with client.new_session("bench-get") as session:
        start = time.perf_counter()
        made = ones(n // 8)
        made.output.keep()
        session.submit()
        assert made.output.value().shape == (n // 8,)
        return rate(n, time.perf_counter() - start)


def ray_put(n):
    x = np.ones(n // 8)
    start = time.perf_counter()
    assert squall.get(total.remote(squall.put(x))) == n // 8
    return rate(n, time.perf_counter() - start)


def ray_put_alone(n):
    """`put` alone: the array into the store (a governor on this machine:
    written into its memory tier). The ref goes before the next, so from
    the second on the put writes into memory the last one had."""
    x = np.ones(n // 8)
    start = time.perf_counter()
    ref = squall.put(x)
    seconds = time.perf_counter() - start
    del ref
    return rate(n, seconds)


def ray_get(n):
    start = time.perf_counter()
    assert squall.get(ones.remote(n // 8)).shape == (n // 8,)
    return rate(n, time.perf_counter() - start)


def ray_task_on_put_ms(n):
    """A task that reads one element of an array already put: its round
    trip, which a copy of the argument would make grow with the size."""
    ref = squall.put(np.ones(max(n // 8, 1)))
    squall.get(first.remote(ref))  # the executor warm
    start = time.perf_counter()
    assert squall.get(first.remote(ref)) == 1.0
    return -1000 * (time.perf_counter() - start)  # best = the least


def dask_put(client, n):
    x = np.ones(n // 8)
    start = time.perf_counter()
    future = client.submit(lambda a: float(a.sum()), client.scatter(x))
    assert future.result() == n // 8
    return rate(n, time.perf_counter() - start)


def dask_get(client, n):
    start = time.perf_counter()
    future = client.submit(np.ones, n // 8, pure=False)
    assert future.result().shape == (n // 8,)
    return rate(n, time.perf_counter() - start)


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", default="8,256,2048", help="MB, comma-separated")
    parser.add_argument("--reps", type=int, default=3)
    parser.add_argument("--no-dask", action="store_true")
    parser.add_argument("--store-memory", default="auto",
                        help="the governor's --store-memory (0: objects on disk only)")
    args = parser.parse_args()
    sizes = [int(float(s) * 1e6) for s in args.sizes.split(",")]
    figures = {}

    def say(metric, value):
        figures[metric] = value
        print(f"{metric} {value:.1f}", flush=True)

    for n in sizes:
        mb = n // 1000000
        say(f"copy_warm_mb_per_s_{mb}mb", best(args.reps, lambda: copy_mb_per_s(n, True)))
        say(f"copy_fresh_mb_per_s_{mb}mb", best(args.reps, lambda: copy_mb_per_s(n, False)))
    with squall.LocalCluster(governors=1, cpus=1, governor_args=["--store-memory", args.store_memory]) as cluster:
        with squall.Client(cluster.address) as client:
            for n in sizes:
                mb = n // 1000000
                say(f"squall_put_task_result_mb_per_s_{mb}mb", best(args.reps, lambda: squall_put(client, n)))
                say(f"squall_task_get_mb_per_s_{mb}mb", best(args.reps, lambda: squall_get(client, n)))
        squall.init(address=cluster.address)
        try:
            for n in sizes:
                mb = n // 1000000
                say(f"ray_model_put_mb_per_s_{mb}mb", best(args.reps, lambda: ray_put_alone(n)))
                say(f"ray_model_put_task_get_mb_per_s_{mb}mb", best(args.reps, lambda: ray_put(n)))
                say(f"ray_model_task_get_mb_per_s_{mb}mb", best(args.reps, lambda: ray_get(n)))
            for n in [8000] + sizes:
                say(f"ray_model_task_on_put_ms_{n}b", -best(args.reps, lambda: ray_task_on_put_ms(n)))
        finally:
            squall.shutdown()
    if not args.no_dask:
        try:
            from distributed import Client as DaskClient, LocalCluster as DaskCluster
        except ImportError:
            print("dask: not installed (import distributed failed), skipped", file=sys.stderr)
        else:
            with DaskCluster(n_workers=1, threads_per_worker=1, processes=True,
                             dashboard_address=None) as cluster, DaskClient(cluster) as client:
                for n in sizes:
                    mb = n // 1000000
                    say(f"dask_put_task_result_mb_per_s_{mb}mb", best(args.reps, lambda: dask_put(client, n)))
                    say(f"dask_task_get_mb_per_s_{mb}mb", best(args.reps, lambda: dask_get(client, n)))
    for n in sizes:
        mb = n // 1000000
        warm = figures[f"copy_warm_mb_per_s_{mb}mb"]
        print(f"ratio_ray_model_put_to_warm_copy_{mb}mb {figures[f'ray_model_put_mb_per_s_{mb}mb'] / warm:.3f}")
        for what in ("put_task_result", "task_get"):
            ours = figures[f"squall_{what}_mb_per_s_{mb}mb"]
            print(f"ratio_squall_{what}_to_warm_copy_{mb}mb {ours / warm:.3f}")
            dask = figures.get(f"dask_{what}_mb_per_s_{mb}mb")
            if dask:
                print(f"ratio_squall_{what}_to_dask_{mb}mb {ours / dask:.2f}")


if __name__ == "__main__":
    main()
