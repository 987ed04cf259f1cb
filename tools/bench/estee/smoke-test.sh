#!/usr/bin/env bash
# ctests estee-replay-smoke and estee-dask-smoke: a tiny graph of every
# ESTEE family (estee-gen.py --tiny) replayed with --check on 2 governors
# (Dask: workers) x 4 cpus (4: triplets' middle task asks for 4): every task
# ran, every reader got inputs of the sizes its producer was to write (the
# task checks), squall's outputs have the right sizes (the server says), and
# both result lines came out for each family. Never a timing.
#
#   tools/bench/estee/smoke-test.sh squall build/tools/bench/squall-replay
#   tools/bench/estee/smoke-test.sh dask      # exits 77 (skipped) without Dask
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
system=${1:?usage: smoke-test.sh squall PATH/TO/squall-replay | dask}
dir=$(mktemp -d)
trap 'rm -rf "$dir"' EXIT

scales=(--time-scale 0.001 --size-scale 0.001 --check --prefix smoke)
case $system in
  squall) replay=("${2:?the path of squall-replay}" --governors 2 --cpus 4 "${scales[@]}") ;;
  dask)
    /usr/bin/python3 -c 'import distributed' 2>/dev/null || { echo "Dask is not installed: skipped"; exit 77; }
    replay=(/usr/bin/python3 "$here/dask-replay.py" --workers 2 --threads 4 "${scales[@]}") ;;
  *) echo "smoke-test.sh: squall or dask, not '$system'" >&2; exit 2 ;;
esac

"$here/estee-gen.py" --tiny --seed 7 --out "$dir/graphs" 2>/dev/null
"${replay[@]}" "$dir"/graphs/*.json >"$dir/out" 2>"$dir/err" || { cat "$dir/err" "$dir/out"; exit 1; }
cat "$dir/err"
for f in $("$here/estee-gen.py" --list | cut -d' ' -f1); do
  for metric in makespan_s over_bound; do
    grep -Eq "^smoke_estee_${f}_${metric} [0-9]+\.[0-9]+$" "$dir/out" ||
      { echo "no smoke_estee_${f}_${metric} line:"; cat "$dir/out"; exit 1; }
  done
done
echo "ok: $(wc -l <"$dir/out") result lines"
