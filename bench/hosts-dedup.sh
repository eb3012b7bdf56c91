#!/usr/bin/env bash
# hosts-dedup.sh — bench/load-dedup across network "hosts" (network
# namespaces, tests/hosts/netns.sh) whose links are limited with tc tbf:
# how the placement of read dedup's readers changes a cold load when the
# network between hosts is the bottleneck. Needs root.
#
#   bench/hosts-dedup.sh BUILD_DIR [--hosts "0 0 0 1"] [--rate 200mbit]
#                        [load-dedup args...]
#
# --hosts gives each rank's host (default: 3 ranks on host 0, 1 on host 1);
# every host's link is limited to --rate. load-dedup runs over gloo with
# its store on rank 0's host and prints, besides its usual table, how much
# faster "pipeline" (each group's reader on the host of most of its
# members) is than "blind" (the same without host ids). Prints figures,
# asserts nothing.
set -eu
here=$(cd "$(dirname "$0")" && pwd)
build=$(cd "$1" && pwd)
shift
layout="0 0 0 1" rate=200mbit
args=()
while [ $# -gt 0 ]; do
  case $1 in
    --hosts) layout=$2; shift 2 ;;
    --rate) rate=$2; shift 2 ;;
    *) args+=("$1"); shift ;;
  esac
done
. "$here/../tests/hosts/netns.sh"
hosts=($layout)
world=${#hosts[@]}
nh=0
for h in "${hosts[@]}"; do [ "$h" -ge "$nh" ] && nh=$((h + 1)); done
hosts_up "$nh"
for ((i = 0; i < nh; i++)); do
  ip netns exec "$(host_ns $i)" tc qdisc add dev eth0 root tbf rate "$rate" burst 256kb latency 400ms
done
dir=$(mktemp -d /var/tmp/dcp-hosts-dedup.XXXXXX)
echo "hosts-dedup: $world ranks on hosts ($layout), links limited to $rate, in $dir"
for ((r = 0; r < world; r++)); do
  host_run "${hosts[$r]}" "$r" "$world" "$build/bench/load-dedup" --coll gloo \
    --coll-options "store=$(host_addr "${hosts[0]}"):29501" --dir "$dir" "${args[@]}"
done
ranks_wait 3600
rm -rf "$dir"
