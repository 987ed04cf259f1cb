#!/usr/bin/env bash
# Runs squall's benchmarks and the peers' beside them in one go, so the
# figures compare on the same machine and load. Prints `<metric> <value>`.
#
#   tools/bench/run.sh            # squall + xargs/parallel (+ Dask if installed)
#   SKIP_DASK=1 tools/bench/run.sh
# Knobs: REPS (3), N (20000 trivial tasks), LAYERS (10), LAT_N (500),
# PROGRAMS (2000).
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/../.." && pwd)
bench=${SQUALL_BENCH:-$root/build/tools/bench/squall-bench}
peers=${PEERS:-$root/../shared/peers}
REPS=${REPS:-3}
PROGRAMS=${PROGRAMS:-2000}

echo "# load average: $(cut -d' ' -f1-3 /proc/loadavg)" >&2
"$bench" --reps "$REPS" --trivial "${N:-20000}" --layers "${LAYERS:-10}" \
  --latency "${LAT_N:-500}" --programs "$PROGRAMS"

# The same 2,000 `true` programs, 2 at a time, through xargs and GNU parallel.
median() { sort -g | awk '{v[NR]=$1} END {print v[int((NR+1)/2)]}'; }
rate() { awk -v n="$1" -v s="$2" 'BEGIN {printf "%.1f\n", n / s}'; }
timeit() { local t0 t1; t0=$(date +%s.%N); "$@" >/dev/null; t1=$(date +%s.%N); awk -v a="$t0" -v b="$t1" 'BEGIN {print b - a}'; }
xs=(); ps=()
for _ in $(seq "$REPS"); do
  xs+=("$(rate "$PROGRAMS" "$(timeit sh -c "seq $PROGRAMS | xargs -P2 -I{} true")")")
  if command -v parallel >/dev/null; then
    ps+=("$(rate "$PROGRAMS" "$(timeit sh -c "seq $PROGRAMS | parallel --will-cite -j2 true")")")
  fi
done
echo "xargs_true_cmds_per_s $(printf '%s\n' "${xs[@]}" | median)"
((${#ps[@]})) && echo "parallel_true_cmds_per_s $(printf '%s\n' "${ps[@]}" | median)"

if [[ -z ${SKIP_DASK:-} && -x $peers/dask_tasks.py ]] && /usr/bin/python3 -c 'import distributed' 2>/dev/null; then
  REPS=$REPS "$peers/dask_tasks.py" | grep -v '^#' || true
fi
