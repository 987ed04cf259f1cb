#!/usr/bin/env bash
# Installs squall's build dependencies (Debian 12, as root), builds it into
# ./build and makes Debian's python3 find the package squall there. Safe to
# run again: apt-get and ninja only do what is missing.
set -euo pipefail
cd "$(dirname "$0")/.."

packages=(build-essential cmake ninja-build ccache pkg-config git
  capnproto libcapnp-dev libuv1-dev libsqlite3-dev liblz4-dev libspdlog-dev
  libgtest-dev libcli11-dev nlohmann-json3-dev libxxhash-dev
  libarchive-dev libtomlplusplus-dev
  iproute2 python3 python3-yaml openssl openssh-client openssh-server
  slurmctld slurmd slurm-client munge
  python3-dev pybind11-dev python3-cloudpickle python3-numpy python3-pytest)

missing=()
for p in "${packages[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
# The status page is bundled with node and npm packages (server/web) and
# tested in Chromium. Checked by command, so a node installed another way
# (with its own npm) is used as it is.
command -v node >/dev/null || command -v nodejs >/dev/null || missing+=(nodejs)
command -v npm >/dev/null || missing+=(npm)
[[ -x /usr/bin/chromium ]] || missing+=(chromium)
if ((${#missing[@]})); then
  SUDO=""
  [[ $(id -u) == 0 ]] || SUDO=sudo
  $SUDO apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq --no-install-recommends "${missing[@]}"
fi

# -g1: line tables only (every backtrace and sanitizer report still names
# file and line), for a third less build time than -g (docs/testing.md,
# "Time"); a debugging session wants a Debug tree of its own.
cmake -S . -B build -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo \
  -DCMAKE_CXX_FLAGS_RELWITHDEBINFO="-O2 -g1 -DNDEBUG" -DCMAKE_C_FLAGS_RELWITHDEBINFO="-O2 -g1 -DNDEBUG" \
  ${SQUALL_CMAKE_ARGS:-}
ninja -C build -j"${SQUALL_JOBS:-2}"

# `import squall` in Debian's python3 (docs/python.md): a .pth file in its
# site-packages names this build's package tree, build/python, as a
# developer install would (cmake --install installs a copy instead).
site=$(/usr/bin/python3 -c 'import site; print(site.getsitepackages()[0])')
pth="$PWD/build/python"
if [[ ! -f $site/squall.pth || $(cat "$site/squall.pth") != "$pth" ]]; then
  SUDO=""
  [[ $(id -u) == 0 ]] || SUDO=sudo
  $SUDO mkdir -p "$site"
  echo "$pth" | $SUDO tee "$site/squall.pth" >/dev/null
fi
