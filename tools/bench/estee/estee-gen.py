#!/usr/bin/python3
"""Generates ESTEE's elementary task-graph families and writes them in
ESTEE's task-list JSON form (docs/benchmarks.md, "Scheduler (ESTEE
families)"), for squall-replay and dask-replay.py.

Each family has the shape and the parameters of ESTEE's benchmark set
(It4innovations/estee: estee/generators/elementary.py, the "elementary" list
of benchmarks/generate.py); the values are drawn here with Python's own
random generator, seeded, so the same --seed gives the same graphs on every
machine (not the same numbers as ESTEE's numpy draws).

  estee-gen.py --out DIR                    # every family, DIR/<family>.json
  estee-gen.py --family grid --out DIR      # one (repeatable)
  estee-gen.py --family grid -o -           # to stdout
  estee-gen.py --tiny --out DIR             # small instances (tests)
  estee-gen.py --info DIR/grid.json         # tasks, work, critical path
  estee-gen.py --extract elementary.zip --out DIR   # ESTEE's published graphs

Durations are seconds, sizes MiB, as in ESTEE. Debian's python3 stdlib only.
"""

import argparse
import json
import os
import random
import sys
import zipfile

from estee_graph import info, load, validate


class Graph:
    """Tasks in creation order, each a dict of ESTEE's serialized form."""

    def __init__(self, rng):
        self.rng = rng
        self.tasks = []

    def task(self, duration, expected, outputs=(), cpus=1):
        # outputs: sizes, or (size, expected size) pairs.
        outs = []
        for o in outputs:
            size, esize = o if isinstance(o, tuple) else (o, o)
            outs.append({"s": size, "e_s": esize})
        self.tasks.append({"d": duration, "e_d": expected, "cpus": cpus, "outputs": outs, "inputs": []})
        return len(self.tasks) - 1

    def read(self, task, producer, output=0):
        inputs = self.tasks[task]["inputs"]
        if [producer, output] not in inputs:
            inputs.append([producer, output])

    def normal(self, mean, sd):
        # ESTEE clamps its draws to stay positive.
        return max(1e-7, self.rng.gauss(mean, sd))

    def exponential(self, mean):
        return max(1e-7, self.rng.expovariate(1.0 / mean))

    def done(self):
        # ESTEE normalizes a task's inputs: sorted by object (producer, then
        # output index, as its objects are numbered in creation order).
        for t in self.tasks:
            t["inputs"].sort()
        return self.tasks


def plain1n(g, count):
    for _ in range(count):
        t = g.rng.choice([10, 20, 60, 180])
        g.task(g.normal(t, t / 10), t)


def plain1e(g, count):
    for _ in range(count):
        g.task(g.exponential(60), 60)


def plain1cpus(g, count):
    for _ in range(count):
        t = g.rng.choice([10, 20, 60, 180])
        g.task(g.normal(t, t / 10), t, cpus=g.rng.randint(1, 3))


def triplets(g, count, cpus=4):
    for _ in range(count):
        a = g.task(g.normal(5, 1.5), 5, [40])
        b = g.task(g.normal(120, 20), 120, [120], cpus=cpus)
        g.read(b, a)
        c = g.task(g.normal(32, 3), 32)
        g.read(c, b)


def merge_neighbours(g, count):
    a = [g.task(g.normal(15, 3), 15, [(g.normal(99, 2.5), 100)]) for _ in range(count)]
    for i in range(count):
        b = g.task(g.normal(15, 2), 15)
        g.read(b, a[i])
        g.read(b, a[(i + 1) % count])


def merge_triplets(g, count):
    a = [g.task(g.normal(15, 3), 15, [(g.normal(99, 2.5), 100)]) for _ in range(count)]
    for i in range(0, count - count % 3, 3):
        b = g.task(g.normal(15, 2), 15)
        for j in range(3):
            g.read(b, a[i + j])


def merge_small_big(g, count):
    small = [g.task(g.normal(11, 3), 11, [0.5]) for _ in range(count)]
    big = [g.task(g.normal(15, 3), 15, [(g.normal(99, 2.5), 100)]) for _ in range(count)]
    for s, b in zip(small, big):
        c = g.task(g.normal(10, 1), 10)
        g.read(c, s)
        g.read(c, b)


def fork1(g, count):
    a = [g.task(g.normal(17, 3), 17, [100]) for _ in range(count)]
    for i in range(count):
        for _ in range(2):
            g.read(g.task(g.normal(15, 2), 15), a[i])


def fork2(g, count):
    a = [g.task(g.normal(17, 3), 17, [100, 100]) for _ in range(count)]
    for i in range(count):
        for output in range(2):
            g.read(g.task(g.normal(15, 2), 15), a[i], output)


def bigmerge(g, count):
    a = [g.task(g.normal(17, 3), 17, [100]) for _ in range(count)]
    m = g.task(40, 40)
    for t in a:
        g.read(m, t)


def duration_stairs(g, count):
    for i in range(count):
        g.task(i, i)
        g.task(i, i)


def size_stairs(g, count):
    a = g.task(0.1, 0.1, list(range(count)))
    for i in range(count):
        g.read(g.task(20, 20), a, i)


def splitters(g, depth):
    level = [g.task(1, 1, [512])]
    for _ in range(depth):
        new = [g.task(g.normal(20, 1), 20, [128]) for _ in range(2 * len(level))]
        for j, t in enumerate(new):
            g.read(t, level[j // 2])
        level = new


def conflux(g, depth):
    level = [g.task(g.normal(20, 1.5), 20, [128]) for _ in range(2 ** depth)]
    for _ in range(depth):
        new = [g.task(g.normal(20, 1), 20, [128]) for _ in range(len(level) // 2)]
        for j, t in enumerate(new):
            g.read(t, level[2 * j])
            g.read(t, level[2 * j + 1])
        level = new


def grid(g, size):
    # Row by row; each task reads the one above it and the one to its left.
    above = None
    for _ in range(size):
        row = [g.task(g.normal(20, 1), 20, [128]) for _ in range(size)]
        for j, t in enumerate(row):
            if above is not None:
                g.read(t, above[j])
            if j > 0:
                g.read(t, row[j - 1])
        above = row


def fern(g, size):
    prev = g.task(g.normal(20, 1), 20, [5])
    for i in range(size):
        a = g.task(g.normal(17 + i / 10, 3), 17 + i / 10, [(g.normal(5 + i / 10, i / 100), 5 + i / 10)])
        b = g.task(g.normal(35, 3), 35, [(g.normal(42, 2), 42)])
        g.read(a, prev)
        g.read(a, b)
        prev = a


# (family, generator, ESTEE's benchmark parameter, a tiny one for tests)
FAMILIES = [
    ("plain1n", plain1n, 380, 6),
    ("plain1e", plain1e, 380, 6),
    ("plain1cpus", plain1cpus, 380, 6),
    ("triplets", triplets, 110, 2),
    ("merge_neighbours", merge_neighbours, 107, 3),
    ("merge_triplets", merge_triplets, 111, 6),
    ("merge_small_big", merge_small_big, 80, 2),
    ("fork1", fork1, 100, 2),
    ("fork2", fork2, 100, 2),
    ("bigmerge", bigmerge, 320, 4),
    ("duration_stairs", duration_stairs, 190, 3),
    ("size_stairs", size_stairs, 190, 4),
    ("splitters", splitters, 7, 2),
    ("conflux", conflux, 7, 2),
    ("grid", grid, 19, 3),
    ("fern", fern, 200, 3),
]


def generate(name, seed, parameter=None, tiny=False):
    for family, fn, published, small in FAMILIES:
        if family == name:
            # Seeded by family too, so a graph does not depend on which
            # others are generated in the same run.
            g = Graph(random.Random("{}/{}".format(seed, family)))
            fn(g, parameter if parameter is not None else small if tiny else published)
            return g.done()
    raise SystemExit("estee-gen: no family '{}' (families: {})".format(
        name, ", ".join(f[0] for f in FAMILIES)))


def write(tasks, path):
    text = json.dumps(tasks)
    if path == "-":
        sys.stdout.write(text + "\n")
        return
    with open(path + ".tmp", "w") as f:
        f.write(text + "\n")
    os.replace(path + ".tmp", path)


def extract(zip_path, out):
    """ESTEE's published graph sets (benchmarks/graphs/*.zip: a zipped pandas
    frame in JSON, columns graph_name, graph_id, graph) -> one file a graph."""
    with zipfile.ZipFile(zip_path) as z:
        frame = json.loads(z.read(z.namelist()[0]))
    names, graphs = frame["graph_name"], frame["graph"]
    seen = {}
    for row in sorted(names, key=int):
        name = names[row].replace("/", "_")
        seen[name] = seen.get(name, 0) + 1
        file = name if seen[name] == 1 else "{}-{}".format(name, seen[name])
        tasks = json.loads(graphs[row])
        validate(tasks)
        write(tasks, os.path.join(out, file + ".json"))
        print("{} {} tasks".format(file, len(tasks)), file=sys.stderr)


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--family", action="append", help="a family (repeatable; default: all)")
    parser.add_argument("--seed", type=int, default=1, help="random seed (default 1)")
    parser.add_argument("--parameter", type=int, help="the family's size parameter instead of ESTEE's")
    parser.add_argument("--tiny", action="store_true", help="tiny instances of each family (tests)")
    parser.add_argument("--out", help="directory for <family>.json files")
    parser.add_argument("-o", dest="output", help="one family's file ('-': stdout)")
    parser.add_argument("--list", action="store_true", help="list the families and their parameters")
    parser.add_argument("--info", nargs="+", metavar="GRAPH", help="print each graph's size, work and critical path")
    parser.add_argument("--extract", metavar="ZIP", help="write ESTEE's published graphs of ZIP into --out")
    args = parser.parse_args()

    if args.list:
        for family, _, published, small in FAMILIES:
            print("{} {} (tiny {})".format(family, published, small))
        return
    if args.info:
        for path in args.info:
            try:
                tasks = load(path)
            except ValueError as e:
                raise SystemExit("estee-gen: {}".format(e))
            print(os.path.basename(path), " ".join("{}={:g}".format(k, v) for k, v in info(tasks).items()))
        return
    if args.extract:
        if not args.out:
            parser.error("--extract needs --out")
        os.makedirs(args.out, exist_ok=True)
        extract(args.extract, args.out)
        return

    families = args.family or [f[0] for f in FAMILIES]
    if args.output:
        if len(families) != 1:
            parser.error("-o writes one family: give one --family")
        write(generate(families[0], args.seed, args.parameter, args.tiny), args.output)
        return
    if not args.out:
        parser.error("give --out DIR (or --family NAME -o FILE)")
    os.makedirs(args.out, exist_ok=True)
    for family in families:
        tasks = generate(family, args.seed, args.parameter, args.tiny)
        write(tasks, os.path.join(args.out, family + ".json"))
        print("{} {} tasks".format(family, len(tasks)), file=sys.stderr)


if __name__ == "__main__":
    main()
