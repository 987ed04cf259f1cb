"""ESTEE's task-list JSON form (docs/benchmarks.md, "Scheduler (ESTEE
families)"): a list whose item i is task i, {"d": seconds, "e_d": seconds or
null, "cpus": n, "outputs": [{"s": MiB, "e_s": MiB or null}], "inputs":
[[task, output index], ...]}. Reading, checking and measuring it, for
estee-gen.py, dask-replay.py and table.py (squall-replay has its own, in
C++: ../estee-graph.cpp). Debian's python3 stdlib only."""

import json


def load(path):
    """The task list of a file; raises ValueError naming the file and the problem."""
    with open(path) as f:
        try:
            tasks = json.load(f)
        except json.JSONDecodeError as e:
            raise ValueError("{}: not JSON: {}".format(path, e))
    try:
        validate(tasks)
    except ValueError as e:
        raise ValueError("{}: {}".format(path, e))
    return tasks


def validate(tasks):
    """Raises ValueError naming the first problem of a task list."""
    if not isinstance(tasks, list):
        raise ValueError("a graph is a JSON list of tasks")
    for i, t in enumerate(tasks):
        if not isinstance(t, dict):
            raise ValueError("task {} is not an object".format(i))
        for key in ("d", "cpus", "outputs", "inputs"):
            if key not in t:
                raise ValueError("task {} has no '{}'".format(i, key))
        for producer, output in t["inputs"]:
            if not (0 <= producer < len(tasks)) or not (0 <= output < len(tasks[producer]["outputs"])):
                raise ValueError("task {} reads ({}, {}), which does not exist".format(i, producer, output))
    if len(topological_order(tasks)) != len(tasks):
        raise ValueError("the graph has a cycle")


def topological_order(tasks):
    """Every task after the producers of its inputs (a shorter list: a cycle)."""
    waiting = [len(t["inputs"]) for t in tasks]
    readers = [[] for _ in tasks]
    for i, t in enumerate(tasks):
        for p, _ in t["inputs"]:
            readers[p].append(i)
    ready = [i for i, n in enumerate(waiting) if n == 0]
    order = []
    while ready:
        i = ready.pop()
        order.append(i)
        for r in readers[i]:
            waiting[r] -= 1
            if waiting[r] == 0:
                ready.append(r)
    return order


def critical_path(tasks):
    """The longest chain of durations, in seconds (transfers not counted)."""
    finish = [0.0] * len(tasks)
    for i in topological_order(tasks):
        finish[i] = tasks[i]["d"] + max((finish[p] for p, _ in tasks[i]["inputs"]), default=0.0)
    return max(finish, default=0.0)


def work(tasks):
    """Sum of duration x cpus, in cpu-seconds."""
    return sum(t["d"] * t["cpus"] for t in tasks)


def lower_bound(tasks, cpus, time_scale):
    """(bound, critical path, work / cpus) in seconds after the time scale:
    no schedule on `cpus` cpus beats bound = max(critical path, work / cpus)."""
    cp = critical_path(tasks) * time_scale
    per_cpu = work(tasks) * time_scale / cpus
    return max(cp, per_cpu), cp, per_cpu


def info(tasks):
    return {
        "tasks": len(tasks),
        "work_cpu_s": work(tasks),
        "critical_path_s": critical_path(tasks),
        "outputs_MiB": sum(o["s"] for t in tasks for o in t["outputs"]),
        "max_outputs": max((len(t["outputs"]) for t in tasks), default=0),
    }
