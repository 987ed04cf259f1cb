#!/usr/bin/env bash
# tools/netns.sh up PREFIX N [RATE]   N network namespaces joined by a bridge
# tools/netns.sh down PREFIX          removes everything `up PREFIX` made
#
# Hosts on one machine, for the multi-host tests (tests/multihost-test.cpp),
# the scheduler benchmark and manual experiments (docs/testing.md,
# "Many hosts"). Needs root (or CAP_SYS_ADMIN and CAP_NET_ADMIN), iproute2
# and nsenter (util-linux). Works in a chroot as well.
#
# `up` makes the namespaces PREFIX-0 .. PREFIX-(N-1), each with loopback up
# and an interface eth0 holding ADDRESS/24, a veth whose other end is a port
# of one bridge. The /24 is 10.A.B.0/24 with A in 64..127, picked from a hash
# of PREFIX and moved on while it overlaps an address or a route of this
# namespace (under a lock, so parallel `up`s never share one). This
# namespace gets 10.A.B.1 on PREFIX-h, a veth to the same bridge, so
# processes here (a test, a client) reach every namespace; namespace i gets
# 10.A.B.(i+2). With RATE (tc's syntax: 100mbit, 1gbit, 500kbit), each
# namespace's link is limited by tbf in both directions: on the egress of its
# eth0 and of its bridge port. The bucket holds 10 ms of RATE, at least
# 64 KiB; the queue, 50 ms. PREFIX-h is not limited. Prints one line a
# namespace, `PREFIX-i ADDRESS`, and exits 0.
#
# The bridge lives in a namespace of its own, PREFIX-sw (ports p0 .. p(N-1)
# and ph, PREFIX-h's peer). A new namespace has no firewall rules, so
# bridged frames pass even where br_netfilter hands them to iptables
# (net.bridge.bridge-nf-call-iptables=1) and this namespace's FORWARD policy
# drops (Docker's hosts): nothing of this namespace's settings or rules is
# changed. Its own rules still apply to PREFIX-h's traffic (INPUT, OUTPUT)
# as to any interface's.
#
# PREFIX: 1 to 8 letters, digits or '_' (interface names are at most 15
# characters); a test uses one of its own (e.g. sq + its pid in hex). `up`
# first removes what an earlier `up PREFIX` left. On failure it removes what
# it made and exits 1 with the failing command and its message on stderr,
# or 77 when this machine refuses network namespaces (not root, a container
# without the capabilities): a test skips then. Bad arguments: 2.
#
# `down` removes the namespaces and PREFIX-h (their veths and the bridge go
# with them); it never fails, whatever is left. Processes still running in a
# namespace keep it alive, without its link, until they exit.
set -euo pipefail
export PATH="$PATH:/usr/sbin:/sbin"
# Where `ip netns` keeps its names (iproute2's NETNS_RUN_DIR).
NETNS_DIR=/run/netns

usage() {
  echo "usage: tools/netns.sh up PREFIX N [RATE] | down PREFIX" >&2
  exit 2
}

checkPrefix() {
  [[ $1 =~ ^[A-Za-z0-9_]{1,8}$ ]] || {
    echo "netns.sh: bad PREFIX '$1': 1 to 8 letters, digits or '_'" >&2
    exit 2
  }
}

# One `up` or `down` at a time on this machine (in this root): a subnet is
# picked and taken, and $NETNS_DIR mounted or unmounted, with no other in
# between.
lockHosts() {
  local dir=/run/lock file
  [[ -d $dir && -w $dir ]] || dir=${TMPDIR:-/tmp}
  MOUNT_MARK=$dir/squall-netns.mounted
  file=$dir/squall-netns.lock
  [[ -e $file ]] || (umask 000 && : >"$file") 2>/dev/null || true
  # Read-only is enough for flock, and works for whoever made the file.
  if [[ -r $file ]]; then
    exec {lockFd}<"$file"
    flock "$lockFd"
  fi
}

down() {
  local prefix=$1 ns
  ip link del "$prefix-h" 2>/dev/null || true
  for ns in $(ip netns list 2>/dev/null | cut -d' ' -f1); do
    if [[ $ns =~ ^$prefix-([0-9]+|sw)$ ]]; then ip netns del "$ns" 2>/dev/null || true; fi
  done
  # `ip netns add` makes $NETNS_DIR a mount point the first time; the last
  # `down` of hosts we made undoes that (a chroot holding it cannot be
  # removed).
  if [[ -f $MOUNT_MARK ]] && mountpoint -q "$NETNS_DIR" && [[ -z $(ls -A "$NETNS_DIR") ]]; then
    umount "$NETNS_DIR" 2>/dev/null && rm -f "$MOUNT_MARK" || true
  fi
}

# Bytes a second in a tc rate (bit, kbit, mbit, gbit, tbit, bps, kbps, mbps,
# gbps, tbps; tc's k is 1000); empty when it is not one.
rateBytes() {
  [[ $1 =~ ^([0-9]+)(bit|kbit|mbit|gbit|tbit|bps|kbps|mbps|gbps|tbps)$ ]] || return 0
  local n=${BASH_REMATCH[1]} unit=${BASH_REMATCH[2]} scale=1
  case ${unit:0:1} in k) scale=1000 ;; m) scale=1000000 ;; g) scale=1000000000 ;; t) scale=1000000000000 ;; esac
  if [[ $unit == *bit ]]; then echo $((n * scale / 8)); else echo $((n * scale)); fi
}

ipToInt() {
  local IFS=. a b c d
  read -r a b c d <<<"$1"
  echo $(((a << 24) | (b << 16) | (c << 8) | d))
}

# The networks (a.b.c.d/len) of this namespace's IPv4 addresses and routes.
networksInUse() {
  ip -o -4 addr show | awk '{print $4}'
  ip -4 route show table all 2>/dev/null | awk '
    $1 ~ /^(unicast|local|broadcast|multicast|blackhole|unreachable|prohibit|throw)$/ {print $2; next}
    $1 != "default" {print $1}'
}

# A free 10.A.B (the first three octets) for `prefix`.
pickSubnet() {
  local prefix=$1 hash used net k index a b mine len mask other
  hash=$(printf '%s' "$prefix" | cksum | cut -d' ' -f1)
  used=$(networksInUse)
  for ((k = 0; k < 16384; k++)); do
    index=$(((hash + k) % 16384))
    a=$((64 + index / 256))
    b=$((index % 256))
    mine=$(ipToInt "10.$a.$b.0")
    for net in $used; do
      [[ $net == */* ]] || net="$net/32"
      len=${net#*/}
      ((len > 24)) && len=24
      mask=$(((0xffffffff << (32 - len)) & 0xffffffff))
      other=$(ipToInt "${net%/*}")
      (((mine & mask) == (other & mask))) && continue 2
    done
    echo "10.$a.$b"
    return 0
  done
  return 1
}

# Runs a command in the network namespace `ns`. nsenter, not `ip -n` or
# `ip netns exec`: those also enter a mount namespace of their own and make
# / a slave mount, which fails in a chroot (tools/fresh-debian).
inside() {
  local ns=$1
  shift
  nsenter --net="$NETNS_DIR/$ns" "$@"
}

# Runs a command of `up`; on failure removes what up made and exits 1
# naming it.
run() {
  local out
  if ! out=$("$@" 2>&1); then
    echo "netns.sh: up $prefix: '$*' failed: $out" >&2
    down "$prefix"
    exit 1
  fi
}

up() {
  prefix=$1
  local n=$2 rate=${3:-} tbf=() i ns subnet out
  [[ $n =~ ^[0-9]+$ ]] && ((n >= 1 && n <= 250)) || {
    echo "netns.sh: bad N '$n': 1 to 250 namespaces" >&2
    exit 2
  }
  if [[ -n $rate ]]; then
    local bytes burst
    bytes=$(rateBytes "$rate")
    [[ -n $bytes && $bytes -gt 0 ]] || {
      echo "netns.sh: bad RATE '$rate': a number and bit, kbit, mbit, gbit, bps, kbps, mbps or gbps" >&2
      exit 2
    }
    burst=$((bytes / 100 > 65536 ? bytes / 100 : 65536))
    tbf=(root tbf rate "$rate" burst "$burst" latency 50ms)
  fi
  for tool in ip tc nsenter; do
    command -v "$tool" >/dev/null || {
      echo "netns.sh: $tool is missing (Debian: apt-get install iproute2 util-linux)" >&2
      exit 1
    }
  done
  down "$prefix"
  local mounted=0
  mountpoint -q "$NETNS_DIR" 2>/dev/null && mounted=1
  if ! out=$(ip netns add "$prefix-sw" 2>&1); then
    if [[ $out == *"not permitted"* || $out == *"Permission denied"* ]]; then
      echo "netns.sh: network namespaces are refused here (uid $EUID): $out" >&2
      exit 77
    fi
    echo "netns.sh: up $prefix: 'ip netns add $prefix-sw' failed: $out" >&2
    exit 1
  fi
  ((mounted)) || touch "$MOUNT_MARK"
  run inside "$prefix-sw" ip link set lo up
  run inside "$prefix-sw" ip link add br0 type bridge forward_delay 0
  run inside "$prefix-sw" ip link set br0 up

  subnet=$(pickSubnet "$prefix") || {
    echo "netns.sh: up $prefix: no free 10.64-127.x.0/24 left" >&2
    down "$prefix"
    exit 1
  }
  run ip link add name "$prefix-h" type veth peer name ph netns "$prefix-sw"
  run ip addr add "$subnet.1/24" dev "$prefix-h"
  run ip link set "$prefix-h" up
  run inside "$prefix-sw" ip link set ph master br0 up

  for ((i = 0; i < n; i++)); do
    ns=$prefix-$i
    run ip netns add "$ns"
    run inside "$ns" ip link set lo up
    run ip link add name eth0 netns "$ns" type veth peer name "p$i" netns "$prefix-sw"
    run inside "$prefix-sw" ip link set "p$i" master br0 up
    run inside "$ns" ip addr add "$subnet.$((i + 2))/24" dev eth0
    run inside "$ns" ip link set eth0 up
    if ((${#tbf[@]})); then
      run inside "$ns" tc qdisc add dev eth0 "${tbf[@]}"
      run inside "$prefix-sw" tc qdisc add dev "p$i" "${tbf[@]}"
    fi
  done
  for ((i = 0; i < n; i++)); do echo "$prefix-$i $subnet.$((i + 2))"; done
}

case ${1:-} in
  up)
    [[ $# -eq 3 || $# -eq 4 ]] || usage
    checkPrefix "$2"
    lockHosts
    up "$2" "$3" "${4:-}"
    ;;
  down)
    [[ $# -eq 2 ]] || usage
    checkPrefix "$2"
    lockHosts
    down "$2"
    ;;
  *) usage ;;
esac
