#!/usr/bin/env bash
# ctest estee-replay-smoke: a tiny graph of every ESTEE family (estee-gen.py
# --tiny) replayed by squall-replay on 2 governors x 4 cpus (4: triplets'
# middle task asks for 4) with --check: every task finished and made
# outputs of the right sizes, every reader got its inputs' sizes (the bench
# executor checks them), and both result lines came out for each family.
# Never a timing.
#
#   tools/bench/estee/smoke-test.sh build/tools/bench/squall-replay
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
replay=${1:?usage: smoke-test.sh PATH/TO/squall-replay}
dir=$(mktemp -d)
trap 'rm -rf "$dir"' EXIT

"$here/estee-gen.py" --tiny --seed 7 --out "$dir/graphs" 2>/dev/null
families=$("$here/estee-gen.py" --list | cut -d' ' -f1)
"$replay" --governors 2 --cpus 4 --time-scale 0.001 --size-scale 0.001 --check --prefix smoke \
  "$dir"/graphs/*.json >"$dir/out" 2>"$dir/err" || { cat "$dir/err" "$dir/out"; exit 1; }
cat "$dir/err"
for f in $families; do
  for metric in makespan_s over_bound; do
    grep -Eq "^smoke_estee_${f}_${metric} [0-9]+\.[0-9]+$" "$dir/out" ||
      { echo "no smoke_estee_${f}_${metric} line:"; cat "$dir/out"; exit 1; }
  done
done
echo "ok: $(wc -l <"$dir/out") result lines"
