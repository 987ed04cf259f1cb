#!/usr/bin/env bash
# The scheduler benchmark in one run (docs/benchmarks.md, "Scheduler (ESTEE
# families)"): generates ESTEE's elementary graph families (seeded), then
# replays every graph on squall (its default scheduler), on squall with
# random placement, and on Dask distributed, each on 4 workers x 4 cpus,
# and prints the result lines (`<system>_estee_<family>_makespan_s`,
# `..._over_bound`) and a markdown table of makespan / lower bound.
#
#   tools/bench/estee/run.sh                      # on 127.0.0.1 (loopback)
#   tools/bench/estee/run.sh --netns 100mbit      # each process in a namespace, links tbf-limited
#   tools/bench/estee/run.sh --families grid,fern --systems squall,dask
#
# Options (and the environment variables that set them too):
#   --netns RATE        server/scheduler in namespace 0, each governor/worker in
#                       its own, links limited to RATE (tools/netns.sh; root)
#   --time-scale X      durations x X (TIME_SCALE, 0.01)
#   --size-scale X      sizes (MiB) x X (SIZE_SCALE, 0.002)
#   --seed N            the graphs' seed (SEED, 1)
#   --families A,B      some families only (FAMILIES; default all)
#   --systems S,..      of squall, random, dask (SYSTEMS; default all three)
#   --reps N            runs of each graph, median printed (REPS, 1)
#   --keep DIR          keep graphs, logs, results and squall's task traces
#                       (DIR/trace-<system>/, squall-replay --trace) in DIR
#                       (else a temp dir, removed)
#   --server-arg WORD   a word of squall-server's flags, for both squall runs
#                       (repeatable), e.g. --server-arg --queue-depth --server-arg 0
# Governors x cpus: GOVERNORS (4), CPUS (4). Build tree: SQUALL_BUILD
# (./build). NETNS_SH: another tools/netns.sh. Details and every process's
# stderr go to stderr / DIR.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/../../.." && pwd)
build=${SQUALL_BUILD:-$root/build}
PY=/usr/bin/python3
TIME_SCALE=${TIME_SCALE:-0.01}
SIZE_SCALE=${SIZE_SCALE:-0.002}
SEED=${SEED:-1}
FAMILIES=${FAMILIES:-}
SYSTEMS=${SYSTEMS:-squall,random,dask}
REPS=${REPS:-1}
GOVERNORS=${GOVERNORS:-4}
CPUS=${CPUS:-4}
NETNS=""
NETNS_SH=${NETNS_SH:-$root/tools/netns.sh}
keep=""
serverArgs=()

usage() { sed -n '2,/^set -euo/p' "$0" | sed '$d; s/^# \{0,1\}//' >&2; exit 2; }
while (($#)); do
  case $1 in
    --netns) NETNS=${2:?}; shift 2 ;;
    --time-scale) TIME_SCALE=${2:?}; shift 2 ;;
    --size-scale) SIZE_SCALE=${2:?}; shift 2 ;;
    --seed) SEED=${2:?}; shift 2 ;;
    --families) FAMILIES=${2:?}; shift 2 ;;
    --systems) SYSTEMS=${2:?}; shift 2 ;;
    --reps) REPS=${2:?}; shift 2 ;;
    --keep) keep=${2:?}; shift 2 ;;
    --server-arg) serverArgs+=("${2:?}"); shift 2 ;;
    -h | --help) usage ;;
    *) echo "run.sh: unknown argument '$1'" >&2; usage ;;
  esac
done

replay=$build/tools/bench/squall-replay
executor=$build/tools/bench/squall-bench-executor
for p in "$replay" "$executor" "$build/server/squall-server" "$build/governor/squall-governor"; do
  [[ -x $p ]] || { echo "run.sh: $p is missing: build first (ninja -C $build)" >&2; exit 1; }
done
if [[ ,$SYSTEMS, == *,dask,* ]] && ! $PY -c 'import distributed' 2>/dev/null; then
  echo "run.sh: Dask is not installed (apt-get install python3-distributed python3-dask)" >&2
  exit 1
fi

if [[ -n $keep ]]; then
  work=$keep
  mkdir -p "$work"
else
  work=$(mktemp -d /tmp/squall-estee-XXXXXX)
fi
pids=()
nsprefix=""
cleanup() {
  local pid
  for pid in "${pids[@]}"; do kill "$pid" 2>/dev/null || true; done
  for pid in "${pids[@]}"; do wait "$pid" 2>/dev/null || true; done
  pids=()
  [[ -n $nsprefix ]] && "$NETNS_SH" down "$nsprefix" || true
  [[ -z $keep ]] && rm -rf "$work"
  return 0
}
trap cleanup EXIT

# --- the graphs -------------------------------------------------------------
genargs=(--seed "$SEED" --out "$work/graphs")
for f in ${FAMILIES//,/ }; do genargs+=(--family "$f"); done
"$here/estee-gen.py" "${genargs[@]}" 2>/dev/null
graphs=()
for f in $("$here/estee-gen.py" --list | cut -d' ' -f1); do
  [[ -f $work/graphs/$f.json ]] && graphs+=("$work/graphs/$f.json")
done
mostOutputs=$("$here/estee-gen.py" --info "${graphs[@]}" | sed 's/.*max_outputs=//' | sort -n | tail -1)
scales=(--time-scale "$TIME_SCALE" --size-scale "$SIZE_SCALE" --reps "$REPS")
# Sets check to squall-replay's --check, or with --keep to --trace (which
# checks too) into $work/trace-NAME.
check=()
checkArgs() {
  check=(--check)
  [[ -n $keep ]] && check=(--trace "$work/trace-$1")
  return 0
}
replayServerArgs=()
for word in "${serverArgs[@]}"; do replayServerArgs+=("--server-arg=$word"); done
echo "# load average: $(cut -d' ' -f1-3 /proc/loadavg); ${#graphs[@]} graphs, seed $SEED," \
  "time scale $TIME_SCALE, size scale $SIZE_SCALE, ${GOVERNORS}x$CPUS cpus, network: ${NETNS:-loopback}" >&2

# Runs `"$@"`, its stdout into $work/NAME.out (and ours), its stderr into
# $work/NAME.log (and ours). A failure is noted, and the run goes on.
failures=()
measure() {
  local name=$1
  shift
  "$@" 2> >(tee "$work/$name.log" >&2) | tee "$work/$name.out" || failures+=("$name")
}

# Starts a program in the background (its output in $work/NAME.{out,log});
# $! is the program itself (nsenter execs it), which cleanup kills.
background() {
  local name=$1
  shift
  "$@" >"$work/$name.out" 2>"$work/$name.log" &
  pids+=($!)
}

# Waits up to 30 s for a line starting with PREFIX in FILE; prints the rest.
awaitLine() {
  local file=$1 prefix=$2 line
  for _ in $(seq 300); do
    line=$(grep -m1 "^$prefix" "$file" 2>/dev/null || true)
    [[ -n $line ]] && { echo "${line#"$prefix"}"; return 0; }
    sleep 0.1
  done
  echo "run.sh: no '$prefix' from $file after 30 s:" >&2
  cat "${file%.out}.log" >&2 || true
  return 1
}

stopBackground() {
  local pid
  for pid in "${pids[@]}"; do kill "$pid" 2>/dev/null || true; done
  for pid in "${pids[@]}"; do wait "$pid" 2>/dev/null || true; done
  pids=()
}

hasRandom() { "$build/server/squall-server" --help 2>/dev/null | grep -q -- '--scheduler'; }

# --- loopback: each tool starts its own local cluster -----------------------
runLoopback() {
  local system=$1
  case $system in
    squall)
      checkArgs squall
      measure squall "$replay" --prefix squall "${check[@]}" --governors "$GOVERNORS" --cpus "$CPUS" \
        "${replayServerArgs[@]}" "${scales[@]}" "${graphs[@]}" ;;
    random)
      checkArgs squall_random
      measure squall_random "$replay" --prefix squall_random "${check[@]}" --governors "$GOVERNORS" --cpus "$CPUS" \
        --server-arg=--scheduler --server-arg=random --server-arg=--scheduler-seed --server-arg="$SEED" \
        "${replayServerArgs[@]}" "${scales[@]}" "${graphs[@]}" ;;
    dask)
      measure dask "$PY" "$here/dask-replay.py" --prefix dask --check --workers "$GOVERNORS" --threads "$CPUS" \
        "${scales[@]}" "${graphs[@]}" ;;
  esac
}

# --- netns: the server / scheduler in namespace 0, governors / workers in
# 1..GOVERNORS, each link limited to RATE; the client here (not limited).
# Programs enter a namespace with nsenter --net, as tools/netns.sh's users
# do (ip netns exec also remounts / and /sys) ------------------------------
addr=()
netnsUp() {
  [[ -x $NETNS_SH ]] || {
    echo "run.sh: --netns needs $NETNS_SH" >&2
    exit 1
  }
  nsprefix=sqe$$
  nsprefix=${nsprefix:0:8}
  local name address
  while read -r name address; do
    addr+=("$address")
  done < <("$NETNS_SH" up "$nsprefix" $((GOVERNORS + 1)) "$NETNS")
  ((${#addr[@]} == GOVERNORS + 1)) || { echo "run.sh: tools/netns.sh up gave ${#addr[@]} addresses" >&2; exit 1; }
  echo "# namespaces $nsprefix-0..$GOVERNORS: ${addr[*]}, links $NETNS" >&2
}

# Starts a server in namespace 0 and the governors in 1..GOVERNORS (here,
# not in a subshell, so that cleanup knows their pids); sets $server.
# Off loopback, every part and the replay driver share a token (a file,
# kept out of ps).
server=""
squallClusterUp() {
  local name=$1 i
  shift
  if [[ ! -s $work/token ]]; then
    (umask 077 && od -An -N32 -tx1 /dev/urandom | tr -d ' \n' > "$work/token")
  fi
  export SQUALL_TOKEN_FILE=$work/token
  background "$name-server" nsenter --net="/run/netns/$nsprefix-0" "$build/server/squall-server" \
    --listen "${addr[0]}:0" --http "${addr[0]}:0" --log "$work/$name-server.sqlite" --log-level warn "$@"
  server=$(awaitLine "$work/$name-server.out" "listening address=")
  for ((i = 1; i <= GOVERNORS; i++)); do
    SQUALL_BENCH_ESTEE_MAX_OUTPUTS=$mostOutputs background "$name-governor-$i" \
      nsenter --net="/run/netns/$nsprefix-$i" "$build/governor/squall-governor" --server "$server" --listen "${addr[i]}:0" --cpus "$CPUS" \
      --name "governor-$i" --work-dir "$work/$name-governor-$i" --executor "bench=$executor" --log-level warn
  done
  for ((i = 1; i <= GOVERNORS; i++)); do
    awaitLine "$work/$name-governor-$i.out" "registered governor=" >/dev/null
  done
}

runNetns() {
  local system=$1
  case $system in
    squall | random)
      local name=squall extra=()
      if [[ $system == random ]]; then
        name=squall_random
        extra=(--scheduler random --scheduler-seed "$SEED")
      fi
      squallClusterUp "$name" "${extra[@]}" "${serverArgs[@]}"
      checkArgs "$name"
      measure "$name" "$replay" --prefix "$name" "${check[@]}" --server "$server" "${scales[@]}" "${graphs[@]}"
      stopBackground ;;
    dask)
      local i
      background dask-scheduler nsenter --net="/run/netns/$nsprefix-0" "$PY" -m distributed.cli.dask_scheduler \
        --host "${addr[0]}" --port 8786 --no-dashboard
      for ((i = 1; i <= GOVERNORS; i++)); do
        background "dask-worker-$i" nsenter --net="/run/netns/$nsprefix-$i" "$PY" -m distributed.cli.dask_worker \
          "tcp://${addr[0]}:8786" --host "${addr[i]}" --nthreads "$CPUS" --nworkers 1 --resources "cpus=$CPUS" \
          --no-nanny --no-dashboard --name "worker-$i"
      done
      measure dask "$PY" "$here/dask-replay.py" --prefix dask --check --scheduler "tcp://${addr[0]}:8786" \
        --wait-workers "$GOVERNORS" "${scales[@]}" "${graphs[@]}"
      stopBackground ;;
  esac
}

[[ -n $NETNS ]] && netnsUp
start=$(date +%s)
ran=()
for system in ${SYSTEMS//,/ }; do
  if [[ $system == random ]] && ! hasRandom; then
    echo "# squall random: skipped (this squall-server has no --scheduler)" >&2
    continue
  fi
  [[ $system =~ ^(squall|random|dask)$ ]] || { echo "run.sh: unknown system '$system'" >&2; exit 2; }
  echo "# --- $system" >&2
  if [[ -n $NETNS ]]; then runNetns "$system"; else runLoopback "$system"; fi
  ran+=("$system")
done
echo "# whole run: $(($(date +%s) - start)) s" >&2

# --- the table ----------------------------------------------------------------
echo
"$PY" "$here/table.py" --time-scale "$TIME_SCALE" --cpus "$((GOVERNORS * CPUS))" --results "$work" \
  --systems "$(IFS=,; echo "${ran[*]}")" "${graphs[@]}"
if ((${#failures[@]})); then
  echo "run.sh: failed: ${failures[*]}; logs kept in $work/*.log" >&2
  keep=$work
  exit 1
fi
