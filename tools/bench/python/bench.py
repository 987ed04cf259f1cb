#!/usr/bin/python3
"""squall from Python, beside Dask, in one run (issue 16; figures in
docs/benchmarks.md).

- Building cost: N trivial built-in tasks (concat of nothing) made in a
  session from Python, not submitted, in ns a task, against the C++ client
  doing the same (squall-bench --build-only, same cluster, same N).
- Built-ins end to end: N trivial built-in tasks built from Python,
  submitted and waited for, in tasks/s; Dask: N client.submit calls of a
  trivial function, gathered.
- @remote end to end: M trivial @squall.remote calls, built, submitted and
  waited for; Dask: M client.submit calls of the same function.

squall runs on a squall.LocalCluster of --workers governors x 1 cpu, Dask on
a distributed.LocalCluster of --workers worker processes x 1 thread, on
this machine, one after the other. Prints `metric value` lines (medians of
--reps) and then a summary.

    tools/bench/python/bench.py   (Debian's /usr/bin/python3: the package is built for it)
        [--builtins 100000] [--remote 10000]
        [--reps 3] [--workers 2] [--squall-bench build/tools/bench/squall-bench] [--no-dask]
"""
import argparse
import os
import statistics
import subprocess
import sys
import time

import squall


def trivial(x):
    return x


@squall.remote
def remote_trivial(x):
    return x


def median_of(reps, body):
    values = [body() for _ in range(reps)]
    return statistics.median(values), values


def squall_build_ns(client, n):
    with client.new_session("bench-build") as session:
        start = time.perf_counter()
        for _ in range(n):
            session.concat([])
        return (time.perf_counter() - start) * 1e9 / n


def squall_builtins_per_s(client, n):
    with client.new_session("bench-builtins") as session:
        start = time.perf_counter()
        for _ in range(n):
            session.concat([])
        session.submit()
        session.wait_all()
        return n / (time.perf_counter() - start)


def squall_remote_per_s(client, m):
    with client.new_session("bench-remote") as session:
        start = time.perf_counter()
        calls = [remote_trivial(i) for i in range(m)]
        session.submit()
        session.wait_all()
        del calls
        return m / (time.perf_counter() - start)


def cpp_build_ns(squall_bench, address, n, reps):
    out = subprocess.run([squall_bench, "--server", address, "--build-only", "--trivial", str(n),
                          "--reps", str(reps)], check=True, capture_output=True, text=True).stdout
    for line in out.splitlines():
        if line.startswith("squall_cpp_build_ns_per_task "):
            return float(line.split()[1])
    raise RuntimeError("squall-bench printed no squall_cpp_build_ns_per_task: " + out)


def dask_per_s(client, n):
    start = time.perf_counter()
    futures = [client.submit(trivial, i, pure=False) for i in range(n)]
    client.gather(futures)
    del futures
    return n / (time.perf_counter() - start)


def report(metric, value, values):
    print(f"{metric} {value:.1f}")
    print(f"# {metric} runs: {', '.join(f'{v:.1f}' for v in values)}", file=sys.stderr)
    sys.stdout.flush()


def main():
    here = os.path.dirname(os.path.abspath(__file__))
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--builtins", type=int, default=100000)
    parser.add_argument("--remote", type=int, default=10000)
    parser.add_argument("--reps", type=int, default=3)
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--squall-bench", default=os.path.join(here, "../../../build/tools/bench/squall-bench"))
    parser.add_argument("--no-dask", action="store_true")
    args = parser.parse_args()

    results = {}
    with squall.LocalCluster(governors=args.workers, cpus=1) as cluster:
        with squall.Client(cluster.address) as client:
            results["cpp_build"] = cpp_build_ns(args.squall_bench, cluster.address, args.builtins, args.reps)
            print(f"squall_cpp_build_ns_per_task {results['cpp_build']:.1f}")
            for metric, body in [
                ("squall_python_build_ns_per_task", lambda: squall_build_ns(client, args.builtins)),
                ("squall_python_builtins_per_s", lambda: squall_builtins_per_s(client, args.builtins)),
                ("squall_python_remote_per_s", lambda: squall_remote_per_s(client, args.remote)),
            ]:
                value, values = median_of(args.reps, body)
                results[metric] = value
                report(metric, value, values)
    if not args.no_dask:
        from distributed import Client as DaskClient
        from distributed import LocalCluster as DaskCluster

        with DaskCluster(n_workers=args.workers, threads_per_worker=1, processes=True,
                         dashboard_address=None) as cluster, DaskClient(cluster) as client:
            for metric, n in [("dask_builtins_per_s", args.builtins), ("dask_remote_per_s", args.remote)]:
                value, values = median_of(args.reps, lambda: dask_per_s(client, n))
                results[metric] = value
                report(metric, value, values)

    ratio = results["squall_python_build_ns_per_task"] / results["cpp_build"]
    print(f"# building a task from Python costs {ratio:.2f}x the C++ client's "
          f"({results['squall_python_build_ns_per_task']:.0f} ns against {results['cpp_build']:.0f} ns)",
          file=sys.stderr)
    if not args.no_dask:
        print(f"# {args.builtins} trivial tasks: squall (built-ins from Python) "
              f"{results['squall_python_builtins_per_s']:.0f}/s, Dask {results['dask_builtins_per_s']:.0f}/s; "
              f"{args.remote} trivial functions: squall @remote {results['squall_python_remote_per_s']:.0f}/s, "
              f"Dask {results['dask_remote_per_s']:.0f}/s", file=sys.stderr)


if __name__ == "__main__":
    main()
