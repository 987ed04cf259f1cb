#!/usr/bin/env bash
# What the status page costs with a 100,000-task session running.
#
# Starts a server and two governors, runs a session of 100,000 short tasks
# (states change all the time: the worst case for live updates), then
# measures:
#   - page load: headless Chromium opens the session view, until its counts,
#     graph and first table page are shown (3 loads; the first is cold);
#   - server CPU: the server's own CPU time (/proc utime+stime) over HOLD
#     seconds with no page open, then with the session page open and live;
#   - the loop time the status port itself spent (squall_status_seconds_total
#     in /metrics), the direct figure for "what updates cost".
# usage: tools/bench/status-page.sh [BUILD_DIR] (default: build); TASKS=,
# HOLD= (seconds per window), MODE=sleep (default: built-in sleep tasks of
# SLEEP_MS=20 ms in named groups, tools/bench/status-page-session.cpp; states
# change all the time, the machine stays free) or MODE=true (`squall run` of
# `true` programs: both cores busy starting processes, the harshest case).
set -euo pipefail
cd "$(dirname "$0")/../.."
build=${1:-build}
tasks=${TASKS:-100000}
hold=${HOLD:-30}
mode=${MODE:-sleep}
work=$(mktemp -d /tmp/squall-status-bench.XXXX)
pids=()
cleanup() {
  for pid in "${pids[@]}"; do kill "$pid" 2>/dev/null || true; done
  wait 2>/dev/null || true
  rm -rf "$work"
}
trap cleanup EXIT

"$build/server/squall-server" --listen 127.0.0.1:0 --http 127.0.0.1:0 --log-level warn \
  --log "$work/server.sqlite" >"$work/server.out" &
pids+=($!)
server_pid=$!
for _ in $(seq 100); do grep -q '^http address=' "$work/server.out" 2>/dev/null && break; sleep 0.1; done
rpc=$(sed -n 's/^listening address=//p' "$work/server.out")
http=$(sed -n 's/^http address=//p' "$work/server.out")
for i in 0 1; do
  "$build/governor/squall-governor" --server "$rpc" --work-dir "$work/g$i" --name "governor-$i" \
    --log-level warn >"$work/g$i.out" &
  pids+=($!)
done
sleep 1

if [[ $mode == true ]]; then
  cat >"$work/big.toml" <<TOML
name = "big"
[step.work]
range = "1-$tasks"
command = ["true"]
TOML
  SQUALL_SERVER=$rpc "$build/tools/squall" run "$work/big.toml" >/dev/null 2>&1 &
else
  "$build/tools/bench/status-page-session" "$rpc" "$tasks" "${SLEEP_MS:-20}" >/dev/null &
fi
pids+=($!)
for _ in $(seq 600); do
  total=$(curl -s "http://$http/api/sessions/1" | sed -n 's/.*"tasks":\([0-9]*\).*/\1/p')
  [[ ${total:-0} -ge $tasks ]] && break
  sleep 0.5
done
echo "session_tasks=${total:-0}"

cpu() { awk '{print $14 + $15}' "/proc/$server_pid/stat"; }
hz=$(getconf CLK_TCK)
status_s() { curl -s "http://$http/metrics" | awk '/^squall_status_seconds_total/ {s += $2} END {printf "%.6f", s}'; }
finished() { curl -s "http://$http/api/sessions/1" | sed -n 's/.*"finished":\([0-9]*\).*/\1/p'; }

# Without a page.
f0=$(finished); c0=$(cpu); t0=$(date +%s.%N); s0=$(status_s)
sleep "$hold"
f1=$(finished); c1=$(cpu); t1=$(date +%s.%N); s1=$(status_s)
awk -v c="$((c1 - c0))" -v hz="$hz" -v t0="$t0" -v t1="$t1" -v f="$((f1 - f0))" \
  'BEGIN {printf "no_page: server_cpu=%.1f%% tasks_per_s=%.0f\n", 100 * c / hz / (t1 - t0), f / (t1 - t0)}'

# With the session page open and live.
c2=$(cpu); t2=$(date +%s.%N); s2=$(status_s); f2=$(finished)
node tools/bench/status-page-load.cjs "$build/server/web/node_modules" "http://$http/sessions/1" "$hold"
c3=$(cpu); t3=$(date +%s.%N); s3=$(status_s); f3=$(finished)
awk -v c="$((c3 - c2))" -v hz="$hz" -v t0="$t2" -v t1="$t3" -v s0="$s2" -v s1="$s3" -v f="$((f3 - f2))" \
  'BEGIN {printf "with_page: server_cpu=%.1f%% tasks_per_s=%.0f status_port_cpu=%.2f%% of one core\n",
          100 * c / hz / (t1 - t0), f / (t1 - t0), 100 * (s1 - s0) / (t1 - t0)}'
curl -s "http://$http/metrics" | grep -E '^squall_(status_seconds_total|tasks\{state="(finished|running|waiting)"\})'
