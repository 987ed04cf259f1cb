#!/usr/bin/env bash
# ctest package-example (package/CMakeLists.txt): the installed package used
# as a user would. Installs the build tree BUILD into a prefix of its own
# under WORK, builds the example EXAMPLE (docs/examples/package) out of tree
# with find_package(Squall) and its client again with pkg-config, then runs
# both clients against a local cluster of the installed programs (`squall
# start`), whose governor keeps the example's executor warm; and the
# installed Python package with its own cluster of the installed programs.
set -euo pipefail
build=$1 work=$2 example=$3
rm -rf "$work"
mkdir -p "$work"
prefix=$work/prefix
cmake --install "$build" --prefix "$prefix" >"$work/install.log"

cmake -S "$example" -B "$work/example" -G Ninja -DCMAKE_PREFIX_PATH="$prefix" >"$work/configure.log" ||
  { cat "$work/configure.log"; exit 1; }
cmake --build "$work/example" -j1 >"$work/build.log" || { cat "$work/build.log"; exit 1; }

export PKG_CONFIG_PATH=$prefix/lib/pkgconfig
# shellcheck disable=SC2046
c++ -std=c++17 -o "$work/hello-pkg-config" "$example/hello.cpp" $(pkg-config --cflags --libs squall-client)

"$work/example/shout-executor" --squall-describe | grep -qx 'shout/upper -> 1 output'

coproc cluster { exec "$prefix/bin/squall" start --governors 1 --cpus 1 --listen 127.0.0.1:0 --http off \
  --executor "shout=$work/example/shout-executor"; }
trap 'kill "$cluster_PID" 2>/dev/null; wait "$cluster_PID" 2>/dev/null || true' EXIT
address=
while read -t 60 -r line <&"${cluster[0]}"; do
  if [[ $line == "squall is running: server="* ]]; then
    address=${line#squall is running: server=}
    address=${address%% *}
    break
  fi
done
[[ -n $address ]] || { echo "the installed squall start printed no address" >&2; exit 1; }

expected=$'Hello world!\nHELLO WORLD!'
got=$(SQUALL_SERVER=$address "$work/example/hello" --call)
[[ $got == "$expected" ]] || { echo "hello (CMake) printed: $got" >&2; exit 1; }
got=$(SQUALL_SERVER=$address "$work/hello-pkg-config")
[[ $got == "Hello world!" ]] || { echo "hello (pkg-config) printed: $got" >&2; exit 1; }

got=$(cd "$work" && PYTHONPATH=$(echo "$prefix"/lib/python3.*/dist-packages) /usr/bin/python3 -c '
import squall
assert squall.__file__.startswith("'"$prefix"'"), squall.__file__
with squall.LocalCluster() as cluster, squall.Client(cluster.address) as client, client.new_session() as session:
    double = squall.remote(lambda x: 2 * x, keep=True)(21)
    session.submit()
    print(double.output.value())')
[[ $got == 42 ]] || { echo "the installed Python package printed: $got" >&2; exit 1; }
echo "the installed package builds and runs (CMake, pkg-config, Python)"
