#!/usr/bin/python3
"""The table of tools/bench/estee/run.sh: makespan / lower bound per family
(rows) and system (columns), as markdown, from the graphs and the result
lines the replays printed into RESULTS/{squall,squall_random,dask}.out.

  table.py --time-scale 0.01 --cpus 16 --results DIR --systems squall,random,dask GRAPH...
"""

import argparse
import math
import os

from estee_graph import load, lower_bound

PREFIX = {"squall": "squall", "random": "squall_random", "dask": "dask"}
TITLE = {"squall": "squall", "random": "squall random", "dask": "Dask"}


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("graphs", nargs="+", help="the graphs, in the table's order")
    parser.add_argument("--time-scale", type=float, required=True)
    parser.add_argument("--cpus", type=int, required=True)
    parser.add_argument("--results", required=True, help="directory of the replays' <prefix>.out files")
    parser.add_argument("--systems", default="squall,random,dask")
    args = parser.parse_args()
    systems = [s for s in args.systems.split(",") if s]

    results = {}
    for s in systems:
        path = os.path.join(args.results, PREFIX[s] + ".out")
        if not os.path.exists(path):
            continue
        for line in open(path):
            parts = line.split()
            if len(parts) == 2 and not line.startswith("#"):
                results[parts[0]] = float(parts[1])

    print("| family | tasks | bound (s) | " + " | ".join(TITLE[s] for s in systems) + " |")
    print("|---|---:|---:|" + "---:|" * len(systems))
    logs = {s: [] for s in systems}
    for path in args.graphs:
        family = os.path.splitext(os.path.basename(path))[0]
        tasks = load(path)
        bound = lower_bound(tasks, args.cpus, args.time_scale)[0]
        cells = []
        for s in systems:
            ratio = results.get("{}_estee_{}_over_bound".format(PREFIX[s], family))
            makespan = results.get("{}_estee_{}_makespan_s".format(PREFIX[s], family))
            if ratio is None or makespan is None:
                cells.append("-")
                continue
            logs[s].append(math.log(ratio))
            cells.append("{:.2f} ({:.2f} s)".format(ratio, makespan))
        print("| {} | {} | {:.2f} | {} |".format(family, len(tasks), bound, " | ".join(cells)))
    means = ["{:.2f}".format(math.exp(sum(v) / len(v))) if v else "-" for v in (logs[s] for s in systems)]
    print("| geometric mean | | | " + " | ".join(means) + " |")


if __name__ == "__main__":
    main()
