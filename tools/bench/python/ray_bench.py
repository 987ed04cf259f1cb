#!/usr/bin/python3
"""Ray's programming model on squall (docs/ray.md), beside squall's session
API and Dask in one run (issue 37, point 7; figures in docs/benchmarks.md).

Each figure is tasks (or calls) per second, the median of --reps runs, on
one local cluster of --cpus cpus (one governor) for squall and a
distributed.LocalCluster of as many single-thread workers for Dask:

- async tasks: get([f.remote(i) for i in range(N)]) (Ray's published
  single-client figure: ~8k/s);
- sync tasks: get(f.remote(i)) N times (Ray: ~981/s);
- async and sync actor calls on one actor (Ray: ~8.6k/s and ~2k/s);
- the same four through the session API (`with session:`, keep, submit,
  fetch), the figure "within 20%" is asked against;
- Dask: client.submit(f, i, pure=False) gathered; and one by one.

    tools/bench/python/ray_bench.py [--n 5000] [--sync-n 1000] [--reps 3] [--cpus 2] [--no-dask]
"""
import argparse
import statistics
import time

import squall


def trivial(x):
    return x


class Holder:
    def call(self, x):
        return x


def rate(n, body):
    start = time.perf_counter()
    body()
    return n / (time.perf_counter() - start)


def ray_figures(n, sync_n):
    f = squall.remote(trivial)
    actor = squall.remote(Holder).remote()
    squall.get(actor.call.remote(0))
    squall.get([f.remote(i) for i in range(100)])  # warm executors
    return {
        "ray_async_tasks": rate(n, lambda: squall.get([f.remote(i) for i in range(n)])),
        "ray_sync_tasks": rate(sync_n, lambda: [squall.get(f.remote(i)) for i in range(sync_n)]),
        "ray_async_actor_calls": rate(n, lambda: squall.get([actor.call.remote(i) for i in range(n)])),
        "ray_sync_actor_calls": rate(sync_n, lambda: [squall.get(actor.call.remote(i)) for i in range(sync_n)]),
    }


def session_figures(address, n, sync_n):
    f = squall.remote(trivial)
    cls = squall.remote(Holder)
    with squall.Client(address) as client, client.new_session("bench-session-api") as session:
        actor = cls.remote()

        def async_tasks(make):
            tasks = [make(i) for i in range(n)]
            for t in tasks:
                t.output.keep()
            session.submit()
            session.fetch_all([t.output for t in tasks])

        def sync_tasks(make):
            for i in range(sync_n):
                task = make(i)
                task.output.keep()
                session.submit_and_wait([task])
                task.output.fetch()

        async_tasks(f)  # warm
        return {
            "session_async_tasks": rate(n, lambda: async_tasks(f)),
            "session_sync_tasks": rate(sync_n, lambda: sync_tasks(f)),
            "session_async_actor_calls": rate(n, lambda: async_tasks(actor.call.remote)),
            "session_sync_actor_calls": rate(sync_n, lambda: sync_tasks(actor.call.remote)),
        }


def dask_figures(cpus, n, sync_n):
    try:
        import distributed
    except ImportError:
        return {}
    with distributed.LocalCluster(n_workers=cpus, threads_per_worker=1, processes=True,
                                  dashboard_address=None) as cluster, distributed.Client(cluster) as client:
        client.gather(client.map(trivial, range(100), pure=False))
        return {
            "dask_async_tasks": rate(n, lambda: client.gather([client.submit(trivial, i, pure=False)
                                                               for i in range(n)])),
            "dask_sync_tasks": rate(sync_n, lambda: [client.submit(trivial, i, pure=False).result()
                                                     for i in range(sync_n)]),
        }


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--n", type=int, default=5000)
    parser.add_argument("--sync-n", type=int, default=1000)
    parser.add_argument("--reps", type=int, default=3)
    parser.add_argument("--cpus", type=int, default=2)
    parser.add_argument("--no-dask", action="store_true")
    args = parser.parse_args()
    runs = {}
    with squall.LocalCluster(cpus=args.cpus) as cluster:
        squall.init(address=cluster.address)
        for _ in range(args.reps):
            for name, value in ray_figures(args.n, args.sync_n).items():
                runs.setdefault(name, []).append(value)
        squall.shutdown()
        for _ in range(args.reps):
            for name, value in session_figures(cluster.address, args.n, args.sync_n).items():
                runs.setdefault(name, []).append(value)
    if not args.no_dask:
        for _ in range(args.reps):
            for name, value in dask_figures(args.cpus, args.n, args.sync_n).items():
                runs.setdefault(name, []).append(value)
    medians = {name: statistics.median(values) for name, values in runs.items()}
    for name, value in medians.items():
        print(f"{name} {value:.0f}  # runs: {', '.join(f'{v:.0f}' for v in runs[name])}")
    published = {"async_tasks": 8000, "sync_tasks": 981, "async_actor_calls": 8600, "sync_actor_calls": 2000}
    for kind, ray in published.items():
        ours = medians[f"ray_{kind}"]
        line = f"# {kind}: {ours:.0f}/s = {ours / ray:.2f}x Ray's published {ray}/s"
        line += f", {ours / medians[f'session_{kind}']:.2f}x the session API's"
        if f"dask_{kind}" in medians:
            line += f", {ours / medians[f'dask_{kind}']:.1f}x Dask's"
        print(line)


if __name__ == "__main__":
    main()
