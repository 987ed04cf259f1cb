#!/usr/bin/python3
"""More objects than a governor's memory tier holds (issue 39's spill figure).

Puts `--objects` float64 arrays of `--mb` MB each (each different) through
one governor whose memory tier is `--store-memory`, keeps them all, has a
task sum each (in put order: the first ones were spilled by then), and gets
each back in the driver, checking every value. Prints `metric value` lines:
put and read rates, what the tier held and spilled (from /metrics), and the
governor's peak RSS (VmHWM), which the tier's pages are not part of.

    tools/bench/python/spill.py [--objects 4] [--mb 1024] [--store-memory 1G]
"""
import argparse
import os
import re
import time
import urllib.request

import numpy as np
import squall


@squall.remote
def total(x):
    return float(x.sum())


def metrics(http):
    text = urllib.request.urlopen(f"http://{http}/metrics").read().decode()
    out = {}
    for name, value in re.findall(r'^(squall_governor_store_\w+)\{governor="governor-0"\} (\S+)$', text, re.M):
        out[name] = float(value)
    return out


def peak_rss_mb(pid):
    with open(f"/proc/{pid}/status") as status:
        for line in status:
            if line.startswith("VmHWM:"):
                return int(line.split()[1]) / 1024
    return -1


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--objects", type=int, default=4)
    parser.add_argument("--mb", type=int, default=1024)
    parser.add_argument("--store-memory", default="1G")
    args = parser.parse_args()
    n = args.mb * 1000000 // 8
    with squall.LocalCluster(governors=1, cpus=1, http="127.0.0.1:0",
                             governor_args=["--store-memory", args.store_memory],
                             server_args=["--governor-timeout", "3"]) as cluster:
        squall.init(address=cluster.address)
        try:
            refs = []
            start = time.perf_counter()
            for i in range(args.objects):
                refs.append(squall.put(np.full(n, float(i))))
            put_s = time.perf_counter() - start
            start = time.perf_counter()
            sums = squall.get([total.remote(ref) for ref in refs])
            task_s = time.perf_counter() - start
            assert sums == [float(i) * n for i in range(args.objects)], sums
            start = time.perf_counter()
            for i, ref in enumerate(refs):
                value = squall.get(ref)
                assert value.shape == (n,) and value[0] == i and value[-1] == i
                del value
            get_s = time.perf_counter() - start
            total_mb = args.objects * n * 8 / 1e6
            print(f"spill_put_mb_per_s {total_mb / put_s:.1f}")
            print(f"spill_tasks_read_mb_per_s {total_mb / task_s:.1f}")
            print(f"spill_get_mb_per_s {total_mb / get_s:.1f}")
            time.sleep(1.5)  # one heartbeat carries the store's figures
            for name, value in sorted(metrics(cluster.http_address).items()):
                print(f"{name}_mb {value / 1e6:.1f}" if name.endswith("bytes") or "bytes_" in name
                      else f"{name} {value:.0f}")
            print(f"governor_peak_rss_mb {peak_rss_mb(cluster.governor_pid(0)):.1f}")
        finally:
            squall.shutdown()


if __name__ == "__main__":
    main()
