#!/usr/bin/python3
"""Replays task graphs in ESTEE's task-list form on Dask distributed, as
squall-replay does on squall (docs/benchmarks.md, "Scheduler (ESTEE
families)"), and reports makespan against the lower bound.

  dask-replay.py graphs/*.json                        # a local cluster: 4 workers x 4 threads
  dask-replay.py --scheduler tcp://HOST:8786 graphs/*.json

Each task sleeps its duration x --time-scale and returns `bytes` of its
output sizes x --size-scale (incompressible); it first checks the length of
each input and reads a byte of every page. A task with several outputs
returns a tuple, and each output is taken out by a getitem task (Dask's own
way for multiple outputs), which its readers read: so a reader moves only
its output, not the tuple. A task's cpus are a worker resource "cpus" (every
worker offers as many as its threads). Makespan: from handing the graph to
the scheduler (one client.get) until the tasks with no readers are done.

Prints `<prefix>_estee_<family>_makespan_s X` and `..._over_bound X` (medians
of --reps) on stdout, `# ...` details on stderr. Debian's python3-distributed.
"""

import argparse
import operator
import os
import statistics
import sys
import time

from estee_graph import load, lower_bound


def estee_task(duration, out_sizes, in_sizes, *inputs):
    """Runs on a worker: check and read the inputs, sleep, make the outputs."""
    import sys as _sys
    import time as _time
    for i, (data, size) in enumerate(zip(inputs, in_sizes)):
        if len(data) != size:
            raise ValueError("input {} has {} bytes, its producer should have written {}".format(i, len(data), size))
        sum(memoryview(data)[::4096])
    _time.sleep(duration)
    # 1 MiB of random bytes per worker process, repeated: incompressible.
    noise = _sys.modules.get("_estee_noise")
    if noise is None:
        import os as _os
        import types
        noise = types.ModuleType("_estee_noise")
        noise.bytes = _os.urandom(1 << 20)
        _sys.modules["_estee_noise"] = noise
    block = noise.bytes
    outs = tuple((block * (n // len(block) + 1))[:n] if n > len(block) else block[:n] for n in out_sizes)
    if not outs:
        return None
    return outs[0] if len(outs) == 1 else outs


def nbytes(mib, size_scale):
    return int(round(mib * 1048576 * size_scale))


def build(tasks, name, time_scale, size_scale):
    """The Dask graph, its leaves (tasks nobody reads), the resources of each
    key, and the bytes of each key's value (for moved bytes)."""
    key = ["{}-{}".format(name, i) for i in range(len(tasks))]

    def ref(p, o):
        return key[p] if len(tasks[p]["outputs"]) == 1 else "getitem-{}-{}-{}".format(name, p, o)

    dsk, resources, size = {}, {}, {}
    read = set()
    for i, t in enumerate(tasks):
        outs = [nbytes(o["s"], size_scale) for o in t["outputs"]]
        ins = [nbytes(tasks[p]["outputs"][o]["s"], size_scale) for p, o in t["inputs"]]
        dsk[key[i]] = (estee_task, t["d"] * time_scale, outs, ins) + tuple(ref(p, o) for p, o in t["inputs"])
        resources[key[i]] = {"cpus": t["cpus"]}
        size[key[i]] = sum(outs)
        if len(outs) > 1:
            for o, n in enumerate(outs):
                dsk[ref(i, o)] = (operator.getitem, key[i], o)
                size[ref(i, o)] = n
        read.update(p for p, _ in t["inputs"])
    leaves = [key[i] for i in range(len(tasks)) if i not in read]
    return dsk, leaves, resources, size


def replay(client, tasks, name, args):
    from dask.highlevelgraph import HighLevelGraph, MaterializedLayer
    from distributed import get_task_stream, wait

    dsk, leaves, resources, size = build(tasks, name, args.time_scale, args.size_scale)
    # Per key: getitem tasks get None (no restriction).
    layer = MaterializedLayer(dsk, annotations={"resources": resources.get})
    graph = HighLevelGraph({name: layer}, {name: set()})
    with get_task_stream(client) as stream:
        start = time.monotonic()
        futures = client.get(graph, leaves, sync=False)
        wait(futures)
        makespan = time.monotonic() - start
        errors = [f for f in futures if f.status != "finished"]
        if errors:
            raise SystemExit("{}: task {} failed: {}".format(name, errors[0].key, errors[0].exception()))
    del futures
    # Where each key ran -> bytes moved between workers.
    worker = {r["key"]: r["worker"] for r in stream.data}
    missing = [k for k in dsk if k not in worker]
    # Each value once per worker that fetched it (it keeps the copy).
    fetched = set()
    for k, spec in dsk.items():
        for dep in spec[4:] if spec[0] is estee_task else spec[1:2]:
            if worker.get(dep) != worker.get(k):
                fetched.add((dep, worker.get(k)))
    moved = sum(size[dep] for dep, _ in fetched)
    per_worker = {}
    for k in dsk:
        if k in worker and not k.startswith("getitem-"):
            per_worker[worker[k]] = per_worker.get(worker[k], 0) + 1
    return makespan, moved / 1048576, per_worker, missing


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("graphs", nargs="+", help="graph files; the family is the file's name")
    parser.add_argument("--scheduler", help="a running scheduler (tcp://HOST:PORT) whose workers offer the "
                        "resource cpus; default: a local cluster")
    parser.add_argument("--workers", type=int, default=4, help="workers of the local cluster (4)")
    parser.add_argument("--threads", type=int, default=4, help="threads (and cpus) of each local worker (4)")
    parser.add_argument("--time-scale", type=float, default=0.01)
    parser.add_argument("--size-scale", type=float, default=0.002)
    parser.add_argument("--prefix", default="dask")
    parser.add_argument("--reps", type=int, default=1)
    parser.add_argument("--wait-workers", type=int, default=0, help="with --scheduler: wait for this many workers")
    parser.add_argument("--check", action="store_true", help="fail unless every task ran (details on stderr)")
    args = parser.parse_args()

    import dask
    from distributed import Client, LocalCluster
    # As the peers' scripts: no compression (the payload is random anyway).
    dask.config.set({"distributed.comm.compression": None, "distributed.admin.tick.limit": "1h"})

    try:
        graphs = [(os.path.splitext(os.path.basename(p))[0], load(p)) for p in args.graphs]
    except ValueError as e:
        raise SystemExit("dask-replay: {}".format(e))
    cluster = None
    if args.scheduler:
        client = Client(args.scheduler)
        if args.wait_workers:
            client.wait_for_workers(args.wait_workers, timeout=60)
    else:
        cluster = LocalCluster(n_workers=args.workers, threads_per_worker=args.threads, processes=True,
                               resources={"cpus": args.threads}, dashboard_address=None)
        client = Client(cluster)
    workers = client.scheduler_info()["workers"]
    cpus = sum(w["resources"].get("cpus", 0) for w in workers.values())
    if cpus == 0:
        raise SystemExit("dask-replay: the workers offer no resource 'cpus' (start them with --resources cpus=N)")
    print("# dask {} workers, {} cpus, time scale {:g}, size scale {:g}".format(
        len(workers), cpus, args.time_scale, args.size_scale), file=sys.stderr)

    failed = False
    for family, tasks in graphs:
        bound, cp, work = lower_bound(tasks, cpus, args.time_scale)
        runs, details = [], ""
        for rep in range(args.reps):
            makespan, moved, per_worker, missing = replay(client, tasks, "{}_r{}".format(family, rep + 1), args)
            runs.append(makespan)
            details += " run{}={:.3f}s moved_MiB={:.1f} tasks_per_worker={}".format(
                rep + 1, makespan, moved, ",".join(str(per_worker[w]) for w in sorted(per_worker)))
            if args.check and missing:
                print("# {}: {} keys never ran, e.g. {}".format(family, len(missing), missing[0]), file=sys.stderr)
                failed = True
        makespan = statistics.median(runs)
        print("# {} tasks={} bound_s={:.3f} (critical path {:.3f}, work/cpus {:.3f}){}".format(
            family, len(tasks), bound, cp, work, details), file=sys.stderr)
        print("{}_estee_{}_makespan_s {:.3f}".format(args.prefix, family, makespan))
        print("{}_estee_{}_over_bound {:.3f}".format(args.prefix, family, makespan / bound if bound > 0 else 0))
        sys.stdout.flush()
    client.close()
    if cluster is not None:
        cluster.close()
    sys.exit(1 if failed else 0)


if __name__ == "__main__":
    main()
