#!/usr/bin/python3
"""Put -> task -> small result, squall beside Dask (issue 39's first table).

A float64 array of ones of each size is made in the driver, put
(squall: `session.pickled(x)`, a constant; Dask: `client.scatter(x)`), read
by one task that returns `x.sum()`, and the result brought back. Prints
`metric value` lines: MB/s of the array's bytes over the whole round trip
(best of --reps). squall runs on a squall.LocalCluster of one governor x 1
cpu, Dask (when `import distributed` works) on a distributed.LocalCluster of
one worker process x 1 thread.

    tools/bench/python/put.py [--sizes 8,256] [--reps 3] [--no-dask]   (sizes in MB)
"""
import argparse
import sys
import time

import numpy as np
import squall


@squall.remote
def total(x):
    return float(x.sum())


def squall_mb_per_s(client, n):
    x = np.ones(n // 8)
    with client.new_session("bench-put") as session:
        start = time.perf_counter()
        result = total(session.pickled(x))
        result.output.keep()
        session.submit()
        assert result.output.value() == n // 8
        return n / 1e6 / (time.perf_counter() - start)


def dask_mb_per_s(client, n):
    x = np.ones(n // 8)
    start = time.perf_counter()
    future = client.submit(lambda a: float(a.sum()), client.scatter(x))
    assert future.result() == n // 8
    return n / 1e6 / (time.perf_counter() - start)


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", default="8,256", help="MB, comma-separated")
    parser.add_argument("--reps", type=int, default=3)
    parser.add_argument("--no-dask", action="store_true")
    args = parser.parse_args()
    sizes = [int(float(s) * 1e6) for s in args.sizes.split(",")]
    with squall.LocalCluster(governors=1, cpus=1) as cluster, squall.Client(cluster.address) as client:
        for n in sizes:
            print(f"squall_put_task_result_mb_per_s_{n // 1000000}mb "
                  f"{max(squall_mb_per_s(client, n) for _ in range(args.reps)):.1f}", flush=True)
    if args.no_dask:
        return
    try:
        from distributed import Client as DaskClient, LocalCluster as DaskCluster
    except ImportError:
        print("dask: not installed (import distributed failed), skipped", file=sys.stderr)
        return
    with DaskCluster(n_workers=1, threads_per_worker=1, processes=True,
                     dashboard_address=None) as cluster, DaskClient(cluster) as client:
        for n in sizes:
            print(f"dask_put_task_result_mb_per_s_{n // 1000000}mb "
                  f"{max(dask_mb_per_s(client, n) for _ in range(args.reps)):.1f}", flush=True)


if __name__ == "__main__":
    main()
