#!/usr/bin/env bash
# Actor calls (docs/actors.md) beside Dask's actors, in one run on the same
# machine: squall-bench --actors-only, then ../shared/peers/dask_actors.py
# with the same N and REPS (if Debian's python3-distributed is installed).
# Prints `<metric> <value>` lines, the median of REPS runs each:
#   squall_actor_calls_sync_per_s / dask_actor_calls_sync_per_s: one call at
#     a time, each waited for (the round trip; squall's go to the actor's
#     governor directly, skipping the server: docs/actors.md);
#   squall_actor_calls_sync_combined_per_s: the same through
#     Session::submitAndWait;
#   ..._async_per_s: N calls on one actor at once;
#   ..._2actors_per_s: N calls over two actors on two governors (workers).
# Knobs: REPS (3), N (2000).
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/../.." && pwd)
bench=${SQUALL_BENCH:-$root/build/tools/bench/squall-bench}
peers=${PEERS:-$root/../shared/peers}
REPS=${REPS:-3}
N=${N:-2000}

echo "# load average: $(cut -d' ' -f1-3 /proc/loadavg)" >&2
"$bench" --actors-only --governors 2 --cpus 1 --trivial "$N" --reps "$REPS"
if [[ -z ${SKIP_DASK:-} && -f $peers/dask_actors.py ]] && /usr/bin/python3 -c 'import distributed' 2>/dev/null; then
  REPS=$REPS N=$N /usr/bin/python3 "$peers/dask_actors.py" | grep -v '^#' || true
fi
echo "# load average: $(cut -d' ' -f1-3 /proc/loadavg)" >&2
