#!/usr/bin/env bash
# tools/fuzz.sh TARGET SECONDS   runs one libFuzzer target (fuzz/fuzz-TARGET.cpp)
# tools/fuzz.sh all SECONDS      runs each target in turn, SECONDS each
# tools/fuzz.sh list             names the targets
#
# Builds the fuzz tree build-fuzz/ (clang 14, SQUALL_FUZZ=ON: libFuzzer,
# ASan, UBSan) when it is missing or stale, then runs the target on its seed
# corpus fuzz/corpus/TARGET/ for SECONDS. New inputs, the run's log and
# anything it finds go to a scratch directory, never into the repository:
# $SQUALL_FUZZ_SCRATCH (default /tmp/squall-fuzz)/TARGET/. Prints the
# executions and the coverage of each run (docs/testing.md, "Fuzzing").
# SQUALL_FUZZ_NO_BUILD=1 runs what is built as it is (long runs while the
# sources change). Exits 1 if a target found something (crash, leak, timeout, out of memory):
# the input is in .../TARGET/artifacts/; see docs/testing.md for what to do.
set -euo pipefail
cd "$(dirname "$0")/.."

targets=()
for f in fuzz/fuzz-*.cpp; do t=${f#fuzz/fuzz-}; targets+=("${t%.cpp}"); done

usage() {
  echo "usage: tools/fuzz.sh TARGET|all SECONDS   (targets: ${targets[*]})" >&2
  exit 2
}
[[ $# -ge 1 && $1 == list ]] && { printf '%s\n' "${targets[@]}"; exit 0; }
[[ $# -eq 2 && $2 =~ ^[0-9]+$ ]] || usage
if [[ $1 == all ]]; then
  run=("${targets[@]}")
else
  [[ " ${targets[*]} " == *" $1 "* ]] || { echo "fuzz.sh: no target '$1'" >&2; usage; }
  run=("$1")
fi
seconds=$2
tree=${SQUALL_FUZZ_BUILD:-build-fuzz}
scratch=${SQUALL_FUZZ_SCRATCH:-/tmp/squall-fuzz}

for tool in clang-14 clang++-14; do
  command -v "$tool" >/dev/null || {
    echo "fuzz.sh: $tool is missing (Debian: apt-get install clang-14 libclang-rt-14-dev)" >&2
    exit 2
  }
done
if [[ -z ${SQUALL_FUZZ_NO_BUILD:-} ]]; then
  if [[ ! -f $tree/build.ninja ]]; then
    # -O1 -g1: libFuzzer's usual optimisation, with line tables so every
    # report names file and line.
    cmake -S . -B "$tree" -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo \
      -DCMAKE_C_COMPILER=clang-14 -DCMAKE_CXX_COMPILER=clang++-14 \
      -DCMAKE_CXX_FLAGS_RELWITHDEBINFO="-O1 -g1 -DNDEBUG" -DCMAKE_C_FLAGS_RELWITHDEBINFO="-O1 -g1 -DNDEBUG" \
      -DSQUALL_FUZZ=ON
  fi
  if [[ $1 == all ]]; then
    ninja -C "$tree" -j"${SQUALL_JOBS:-2}" fuzz
  else
    ninja -C "$tree" -j"${SQUALL_JOBS:-2}" "fuzz-$1"
  fi
fi

failed=()
for t in "${run[@]}"; do
  dir=$scratch/$t
  mkdir -p "$dir/corpus" "$dir/artifacts" "$dir/tmp"
  echo "fuzz.sh: $t for $seconds s (log: $dir/log)"
  status=0
  # The scratch corpus first: libFuzzer writes new inputs into the first
  # directory only. -timeout: one input taking 10 s is a finding (a hang).
  TMPDIR=$dir/tmp "$tree/fuzz/fuzz-$t" -max_total_time="$seconds" -print_final_stats=1 \
    -timeout=10 -rss_limit_mb=2048 -artifact_prefix="$dir/artifacts/" \
    "$dir/corpus" "fuzz/corpus/$t" >"$dir/log" 2>&1 || status=$?
  execs=$(sed -n 's/^stat::number_of_executed_units: *//p' "$dir/log" | tail -1)
  cov=$(grep -Eo 'cov: [0-9]+ ft: [0-9]+ corp: [0-9]+/[0-9]+[a-zA-Z]*' "$dir/log" | tail -1)
  echo "fuzz.sh: $t: execs=${execs:-?} ${cov:-no coverage line} status=$status"
  if ((status != 0)); then
    failed+=("$t")
    grep -E '^(==[0-9]+==ERROR|SUMMARY|.*runtime error|.*Test unit written)' "$dir/log" | head -20 >&2 || true
  fi
done
if ((${#failed[@]})); then
  echo "fuzz.sh: findings in: ${failed[*]} (inputs in $scratch/<target>/artifacts/)" >&2
  exit 1
fi
